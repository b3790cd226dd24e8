"""How the simulator's time grows with the program: 1F1B from 8 ranks x 64 microbatches to 64 x 1024.

Run `python bench/sim_scaling.py` (add `--quick` to stop at 32 x 256). Each size is simulated at the
compute level (no SEND/RECV) and lowered (schedc.passes.lower: explicit SEND/RECV, about 3x the
actions); the time is the best of a few runs of `simulate` alone (loading and lowering excluded).
The last lines give the time per action at the top size over the smallest: about 1 when growth is
linear.
"""
from __future__ import annotations

import argparse
import sys
import time

import schedc
from schedc.passes import lower
from schedc.simulate import simulate

SIZES = [(8, 64), (16, 128), (32, 256), (64, 512), (64, 1024)]


def best_time(program, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        simulate(program)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="stop at 32 x 256")
    ap.add_argument("--repeats", type=int, default=3, help="runs per size; the best counts (default 3)")
    args = ap.parse_args(argv)
    sizes = SIZES[:3] if args.quick else SIZES
    per_action: dict[str, list[float]] = {"compute": [], "lowered": []}
    print(f"{'size':>9}  {'level':>8}  {'actions':>8}  {'seconds':>8}  {'us/action':>9}")
    for P, M in sizes:
        compute = schedc.load("1f1b", {"P": P, "M": M})
        for label, program in (("compute", compute), ("lowered", lower(compute))):
            seconds = best_time(program, args.repeats)
            us = seconds / program.num_actions * 1e6
            per_action[label].append(us)
            print(f"{P:>3} x {M:<4}  {label:>8}  {program.num_actions:>8}  {seconds:>8.3f}  {us:>9.2f}")
    for label, values in per_action.items():
        print(f"{label}: us/action at {sizes[-1][0]} x {sizes[-1][1]} over {sizes[0][0]} x {sizes[0][1]}: "
              f"{values[-1] / values[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
