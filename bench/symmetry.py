"""Benchmark: `schedc check` of a pipeline x data-parallel job, replicas checked once per class
(schedc/verify/symmetry.py) against the flat check that spells every replica out.

The job is 1F1B at P=16, M=64 with a REDUCE_GRAD per stage, `replicas D`, under nccl, for D in
16, 256, 1024 and 6250 (100,000 ranks). Each check is a whole process (`python -m schedc check`,
its output to /dev/null), one after another; its CPU time and peak RSS are the child's own
(`os.wait4`). The flat check runs the same command with the reduction switched off, up to
`--flat-max` replicas (default 256: 1024 took 44 s and 2.5 GB). Both must say ok. Prints a table.
Run: `python bench/symmetry.py [--flat-max D] [--sizes 16,256,...]`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = """schedule dp1f1b(P = 16, M = 64, D = 16) {
  stages P
  place loop
  replicas D
  rank r {
    let warm = min(P - 1 - r, M)
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
    REDUCE_GRAD(r)
  }
}
"""
# the flat check: the same command with the reduction off (schedc/report.py's `_check_classes`)
FLAT = ("import sys, schedc.report as r; r._check_classes = lambda *a: None; from schedc.cli import main; "
        "sys.exit(main(sys.argv[1:], sys.stdout, sys.stderr))")
ROOT = Path(__file__).resolve().parent.parent


def run(path: Path, D: int, flat: bool) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, peak RSS in MB) of one check as a whole process."""
    head = [sys.executable, "-c", FLAT] if flat else [sys.executable, "-m", "schedc"]
    cmd = [*head, "check", str(path), "--param", f"D={D}", "--semantics", "nccl"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    with open(os.devnull, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16,256,1024,6250", help="the replica counts D (comma-separated)")
    ap.add_argument("--flat-max", type=int, default=256, help="run the flat check up to this many replicas")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dp1f1b.pp"
        path.write_text(JOB)
        print(f"{'D':>6} {'ranks':>8} {'actions':>11} {'reduced s':>10} {'MB':>6} {'flat s':>8} {'MB':>6} "
              f"{'flat/reduced':>12}")
        for D in map(int, args.sizes.split(",")):
            cpu, _, mb = run(path, D, flat=False)
            row = f"{D:>6} {16 * D:>8,} {16 * 129 * D:>11,} {cpu:>10.2f} {mb:>6.0f}"
            if D <= args.flat_max:
                fcpu, _, fmb = run(path, D, flat=True)
                row += f" {fcpu:>8.2f} {fmb:>6.0f} {fcpu / cpu:>12.1f}"
            else:
                row += f" {'-':>8} {'-':>6} {'-':>12}"
            print(row, flush=True)


if __name__ == "__main__":
    main()
