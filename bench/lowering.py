"""Lowering and compile: schedc's `passes.lower` against torch 2.13's `_add_send_recv`, and linearity.

    python bench/lowering.py [--quick] [--dualpipev]

1F1B at P=64, M=1024 (131,072 compute actions, 389,120 lowered): `schedc.passes.lower(program)`
against torch's `_add_send_recv` on the same compute schedule (as torch `_Action`s, made before the
clock starts), alternated, medians; goal at most 0.3. Then gpipe at P=65536, M=2 against the same
number of actions at P=64, M=2048, for compiling (`schedc.load`) and lowering: linear in actions and
ranks means a ratio near 1 (goal <= 1.5, for noise). `--dualpipev`: DualPipeV at P=4 M=8, P=8
M=32 and P=64 M=1024 against torch's `_add_send_recv` of the same pairs (goal at most 0.5 at each).
"""
from __future__ import annotations

import argparse
import sys

import perf


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1F1B at P=16, M=256 only")
    ap.add_argument("--dualpipev", action="store_true", help="DualPipeV's rows (issue 34, target 6) instead")
    args = ap.parse_args(argv)
    if args.dualpipev:
        print(perf.text_table(perf.measure_dualpipev_lowering(((4, 8), (8, 32), (16, 128) if args.quick else (64, 1024)))))
        return 0
    rows = perf.measure_lowering(16, 256, budget=2.0) if args.quick else \
        perf.measure_lowering() + perf.measure_linear_shapes()
    print(perf.text_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
