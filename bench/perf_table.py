"""Regenerate bench/README.md's performance table: every target, schedc against torch in one run.

    python bench/perf_table.py [--quick] [--runtime] [--write]

Runs the measurements of bench/perf.py (file to verdict, lowering, linearity, small programs,
scale, the command line's latency; DualPipeV's file to verdict, lowering and compile at 2.56M
actions; with `--runtime` also bench/runtime_vs_torch.py, about 8 minutes) and prints them as a
markdown table, each figure beside the torch figure (or the reference) measured in the same run.
`--write` puts the table between `<!-- perf-table:start -->` and `<!-- perf-table:end -->` in
bench/README.md; without the markers it prints the table and says so. `--quick` measures smaller
cases (minutes less, and not the table's sizes: for trying the script, not for the README).
"""
from __future__ import annotations

import argparse
import platform
import sys
import time

import perf

START, END = "<!-- perf-table:start -->", "<!-- perf-table:end -->"
README = perf.ROOT / "bench" / "README.md"


def measure(quick: bool, runtime: bool) -> list[perf.Row]:
    if quick:
        rows = perf.measure_file_to_verdict(((16, 128), (4, 8)), budget=2.0)
        rows += perf.measure_dualpipev_file_to_verdict(((4, 8), (16, 128)), runs=5, budget=2.0)
        rows += perf.measure_lowering(16, 256, budget=2.0)
        rows += perf.measure_dualpipev_lowering(((4, 8), (16, 128)), budget=1.0)
        rows += perf.measure_small_programs(["1f1b", "zbv"])
        rows += perf.measure_scale(big=4096, small=1024, commands=("check",))
        rows += perf.measure_cli_latency(repeat=5)
    else:
        rows = perf.measure_file_to_verdict()
        rows += perf.measure_dualpipev_file_to_verdict()
        rows += perf.measure_lowering() + perf.measure_dualpipev_lowering() + perf.measure_linear_shapes()
        rows += perf.measure_small_programs()
        rows += perf.measure_scale()
        rows += perf.measure_dualpipev_compile()
        rows += perf.measure_cli_latency()
    if runtime:
        rows += perf.measure_runtime()
    return rows


def section(rows: list[perf.Row], seconds: float) -> str:
    import torch
    return (f"{perf.markdown_table(rows)}\n\n"
            f"Measured by `python bench/perf_table.py` in {seconds / 60:.0f} min (torch {torch.__version__}, "
            f"Python {platform.python_version()}, {platform.machine()}); ratios are schedc / torch of the same run.")


def write(text: str) -> bool:
    """Put `text` between the markers of bench/README.md; False if the file or a marker is missing."""
    if not README.is_file():
        return False
    old = README.read_text(encoding="utf-8")
    if old.count(START) != 1 or old.count(END) != 1 or old.index(START) > old.index(END):
        return False
    head, rest = old.split(START)
    _, tail = rest.split(END)
    README.write_text(f"{head}{START}\n{text}\n{END}{tail}", encoding="utf-8")
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller cases, to try the script")
    ap.add_argument("--runtime", action="store_true", help="also run bench/runtime_vs_torch.py (minutes)")
    ap.add_argument("--write", action="store_true", help=f"write the table into {README.relative_to(perf.ROOT)}")
    args = ap.parse_args(argv)
    if args.quick and args.write:
        ap.error("--write puts the full sizes in the README: drop --quick")
    t0 = time.perf_counter()
    rows = measure(args.quick, args.runtime)
    text = section(rows, time.perf_counter() - t0)
    print(perf.text_table(rows), file=sys.stderr)
    if args.write and write(text):
        print(f"wrote the table into {README}")
        return 0
    if args.write:
        print(f"{README} has no {START} ... {END} markers (or no file): the table, to paste there:")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
