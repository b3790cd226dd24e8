"""Does every finished `schedc run` exit 0? Runs each built-in many times and counts the exit codes.

Run `python bench/run_exits.py` (`--total 200` runs over all built-ins, shared out evenly; `--runs K`
runs each one K times instead; `--steps`, `--only NAME`). Each run is `python -m schedc run NAME
--param P=2,M=4 --model examples.mlp:build_stages --steps 3` on 2 gloo ranks, one after another.
It prints one row per schedule (runs, exit 0, other exits and how often) and the total, and for a
run that exited non-zero the last lines of its error output. Exit status: 0 if every run exited 0.
"""
from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from schedc.resources import builtin_schedules  # noqa: E402

VIRTUAL = ("interleaved_1f1b", "interleaved_zero_bubble", "looped_bfs")  # schedules with chunks V


def command(name: str, steps: int) -> list[str]:
    params = "P=2,V=2,M=4" if name in VIRTUAL else "P=2,M=4"
    return [sys.executable, "-m", "schedc", "run", name, "--param", params, "--model", "examples.mlp:build_stages",
            "--steps", str(steps), "--timeout", "120"]


def shares(names: list[str], total: int) -> dict[str, int]:
    """`total` runs shared out over `names` as evenly as possible (the first ones get the remainder)."""
    each, extra = divmod(total, len(names))
    return {n: each + (i < extra) for i, n in enumerate(names)}


def one(name: str, steps: int) -> tuple[int, str, float]:
    """Run it once: (exit code, the error output's tail, seconds)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    began = time.perf_counter()
    done = subprocess.run(command(name, steps), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    finished = "median step time" in done.stdout
    tail = "\n".join(done.stderr.strip().splitlines()[-4:])
    return done.returncode, ("(finished) " if finished else "(not finished) ") + tail, time.perf_counter() - began


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=int, default=200, help="runs over all the built-ins (default 200)")
    ap.add_argument("--runs", type=int, default=None, help="runs of each built-in (instead of --total)")
    ap.add_argument("--steps", type=int, default=3, help="training steps per run (default 3)")
    ap.add_argument("--only", action="append", metavar="NAME", help="this built-in only (repeatable)")
    args = ap.parse_args(argv)
    names = args.only or sorted(builtin_schedules())
    counts = {n: args.runs for n in names} if args.runs else shares(names, args.total)
    print(f"{'schedule':<24} {'runs':>5} {'exit 0':>7}  other exits          mean s")
    print("-" * 70)
    total = collections.Counter()
    for name in names:
        codes: collections.Counter = collections.Counter()
        seconds = 0.0
        for _ in range(counts[name]):
            code, tail, took = one(name, args.steps)
            codes[code] += 1
            seconds += took
            if code != 0:
                print(f"  {name}: exit {code}\n    " + tail.replace("\n", "\n    "), flush=True)
        others = ", ".join(f"{c}: {k}" for c, k in sorted(codes.items()) if c != 0) or "-"
        print(f"{name:<24} {counts[name]:>5} {codes[0]:>7}  {others:<20} {seconds / max(1, counts[name]):>6.1f}",
              flush=True)
        total += codes
    runs = sum(total.values())
    others = ", ".join(f"{c}: {k}" for c, k in sorted(total.items()) if c != 0) or "-"
    print("-" * 70)
    print(f"{'total':<24} {runs:>5} {total[0]:>7}  {others}")
    return 0 if total[0] == runs else 1


if __name__ == "__main__":
    sys.exit(main())
