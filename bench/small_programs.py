"""Small programs: load + full default check of each built-in at P=4, M=8, against torch 2.13.

    python bench/small_programs.py [--schedules 1f1b,zbv,...]

`schedc.check(schedc.load(name, {"P": 4, "M": 8, "V": 2}))` (the name resolved, the file read,
parsed once then from the cache, compiled, checked) against torch building its own schedule class
for the same schedule with stand-in stages (every rank's order; the multi-stage classes validate it
and add communication) and `_validate_schedule` of schedc's order; alternated, medians, in
milliseconds. Goal: schedc within 1 ms. zb_h1 and zb_h2 have no torch class (no torch figure).
"""
from __future__ import annotations

import argparse
import sys

import perf


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedules", help="comma-separated built-ins (default: all)")
    args = ap.parse_args(argv)
    names = args.schedules.split(",") if args.schedules else None
    print(perf.text_table(perf.measure_small_programs(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
