"""Benchmark: schedc's full default check against torch 2.13's validator + simulator, same input.

For 1F1B and interleaved 1F1B (V=2) lowered to communication level, from P x M = 8 x 64 up to
64 x 1024, time `schedc.check(program)` (structure, rendezvous deadlock, payload matching, memory)
and torch's `_validate_schedule` + `_simulate_comms_compute` on the same actions, in this run.
Prints a table and the ratio (schedc / torch; the goal is <= 0.5 at the top size) and the time per
action (linear growth means it stays flat). Run: `python bench/check_scaling.py [--quick]`.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import schedc  # noqa: E402
from schedc.ir import format_step  # noqa: E402
from schedc.passes import lower  # noqa: E402

SIZES = [("1f1b", 8, 64), ("1f1b", 16, 128), ("1f1b", 32, 256), ("1f1b", 64, 1024),
         ("interleaved_1f1b", 8, 64), ("interleaved_1f1b", 16, 128), ("interleaved_1f1b", 32, 256)]


def torch_check(program):
    from torch.distributed.pipelining import schedules as ts
    actions = {r: [ts._Action.from_str(format_step(st)) for st in steps] for r, steps in enumerate(program.ranks)}
    placement = program.placement
    start = time.perf_counter()
    ts._validate_schedule(actions, program.num_ranks, program.num_stages, program.num_microbatches)
    ts._simulate_comms_compute(actions, lambda s: placement[s], program.num_stages)
    return time.perf_counter() - start


def ours(program):
    start = time.perf_counter()
    report = schedc.check(program)
    took = time.perf_counter() - start
    assert report.ok, report.render()
    return took


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the two smallest 1F1B sizes and the smallest interleaved")
    args = ap.parse_args(argv)
    sizes = SIZES[:2] + SIZES[4:5] if args.quick else SIZES
    print(f"{'schedule':<18} {'P':>3} {'M':>5} {'actions':>9} {'schedc s':>9} {'torch s':>9} {'ratio':>6} {'us/action':>10}")
    for name, P, M in sizes:
        params = {"P": P, "M": M, **({"V": 2} if name == "interleaved_1f1b" else {})}
        program = lower(schedc.load(name, params))
        n = program.num_actions
        a, b = ours(program), torch_check(program)
        print(f"{name:<18} {P:>3} {M:>5} {n:>9,} {a:>9.3f} {b:>9.3f} {a / b:>6.2f} {1e6 * a / n:>10.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
