"""The command line's latency: `schedc check 1f1b --param P=4,M=8` as a whole process, in CPU time.

    python bench/cli_latency.py [--repeat N]

Each case runs as its own process, alternated with the others N times (default 21); the table gives
the median CPU seconds (user + sys, from the process's own rusage, so load elsewhere moves it little)
and each against the goal of 0.12 s (issue 34, target 3): `python -c pass` and `import schedc` for
reference, then the check with the parser's tables as shipped in the package, from the user's cache
(~/.cache/schedc, when the shipped ones do not match the grammar or lark) and built (neither there).
"""
from __future__ import annotations

import argparse
import sys

import perf


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=21, help="processes per case (default 21)")
    args = ap.parse_args(argv)
    times = perf.cli_latency(args.repeat)
    bare = times["python -c pass"]
    width = max(map(len, times))
    print(f"{'case':<{width}}  CPU s   x pass  / goal {perf.LATENCY_GOAL:g} s")
    for name, t in times.items():
        print(f"{name:<{width}}  {t:.3f}  {t / bare:6.1f}  {t / perf.LATENCY_GOAL:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
