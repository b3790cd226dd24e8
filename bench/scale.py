"""Scale: `schedc check` and `schedc compile -o` of 1F1B at P=64, M=20000, time and peak memory.

    python bench/scale.py [--m 20000] [--commands check,compile] [--dualpipev]

Each command runs in a child process (`python -m schedc`'s main), once at a smaller M and once at
M=`--m` (20000: 2.56M compute actions, 7.6M lowered): check at M=1024 (the 389k-action case at the
communication level), compile at M=2048 (the same outputs as at 20000: lowered past
MAX_RUNNABLE_ACTIONS, so no runnable program at either size; at M=1024 compile also writes a 29 MB
program); prints the big run's seconds per small run's worth of actions next to the small run's
seconds (goal: within 1.5x, i.e. time proportional to size) and the big run's peak resident memory
(goal: 2 GB).
`--dualpipev`: `compile` of DualPipeV at P=64, M=10000 (2.56M actions) against 1F1B at the same
number of actions, CPU seconds (goal: within 1.5x) and peak memory (goal: 2 GB).
"""
from __future__ import annotations

import argparse
import sys

import perf


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=20000, help="microbatches of the big run (default 20000)")
    ap.add_argument("--commands", default="check,compile", help="check, compile or both (default)")
    ap.add_argument("--dualpipev", action="store_true", help="DualPipeV's compile against 1F1B's (issue 34, target 6)")
    args = ap.parse_args(argv)
    if args.dualpipev:
        print(perf.text_table(perf.measure_dualpipev_compile()))
        return 0
    print(perf.text_table(perf.measure_scale(args.m, commands=tuple(args.commands.split(",")))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
