"""File to verdict: read a PyTorch CSV and run schedc's full default check, against torch 2.13.

    python bench/file_to_verdict.py [--quick] [--dualpipev]

1F1B lowered to the communication level (sends and receives explicit, as torch's runtime reads a
`compute_comms` CSV) at P=64, M=1024 (389,120 actions) and at P=4, M=8 (160): `schedc.check(
schedc.from_torch_csv(path))` against what torch does with the same file (csv.reader and
`_Action.from_str` per cell, as `_load_csv`; `_validate_schedule`; `_simulate_comms_compute`),
medians: the large file alternated in one run, the small one on a first read as a user meets it (a
fresh process per read, schedc's cell cache empty; `perf.first_read`). Goal: schedc at most 0.25 of
torch at both sizes. `--dualpipev`: DualPipeV lowered (OVERLAP_F_B cells) at P=4 M=8, P=8 M=32 and
P=64 M=1024, the small sizes on a first read too. `--bad-cell`: the read to its error of the
P=64, M=1024 file and of one eight times as long (P=64, M=8192, 34 MB) with one cell near the end
written `0X5`, and with every 37th cell so, against reading the same file unbroken (goal: <= 1.5).
"""
from __future__ import annotations

import argparse
import sys

import perf


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="P=16, M=128 instead of P=64, M=1024, and shorter medians")
    ap.add_argument("--dualpipev", action="store_true", help="DualPipeV's rows (issue 34, target 6) instead")
    ap.add_argument("--bad-cell", action="store_true", help="a bad cell near the end, and many, against the file unbroken")
    args = ap.parse_args(argv)
    if args.bad_cell:
        sizes = ((16, 128), (64, 1024)) if args.quick else ((64, 1024), (64, 8192))
        print(perf.text_table(perf.measure_bad_cell(sizes, budget=2.0 if args.quick else 6.0)))
        return 0
    if args.dualpipev:
        sizes = ((4, 8), (8, 32), (16, 128) if args.quick else (64, 1024))
        print(perf.text_table(perf.measure_dualpipev_file_to_verdict(sizes, runs=7 if args.quick else 21)))
        return 0
    sizes = ((16, 128), (4, 8)) if args.quick else ((64, 1024), (4, 8))
    print(perf.text_table(perf.measure_file_to_verdict(sizes, budget=2.0 if args.quick else 6.0)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
