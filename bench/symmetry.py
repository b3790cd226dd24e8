"""Benchmark: `schedc check`, `sim` and `viz` of a pipeline x data-parallel job, replicas checked and
timed once per class (schedc/verify/symmetry.py, schedc/simulate_replicas.py) against the flat
commands that spell every replica out.

The job is 1F1B at P=16, M=64 with a REDUCE_GRAD per stage, `replicas D`, under nccl, for D in
16, 256, 1024 and 6250 (100,000 ranks). Each command is a whole process (`python -m schedc ...`,
its output to /dev/null; viz writes an SVG, aggregated), one after another; its CPU time and peak
RSS are the child's own (`os.wait4`). The flat command runs the same with the reduction switched
off, up to `--flat-max` replicas (check 256, sim and viz 64 by default: check of 1024 took 44 s
and 2.5 GB, sim of 64 about 10 s and 0.6 GB). All must exit 0. Prints a table.
`compile -o` (IR JSON, CSV, picture) runs reduced only: the flat commands switch off check's and
sim's reductions, not its outputs.
Run: `python bench/symmetry.py [--flat-max D] [--sizes 16,256,...] [--commands check,sim,viz,compile]`.
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
# the flat commands: the same, with the reductions off (schedc/report.py's `_check_classes`, and
# schedc/simulate_replicas.py's `by_classes` timing the whole job)
FLAT = ("import sys, schedc.report as r, schedc.simulate_replicas as s; r._check_classes = lambda *a: None; "
        "s.by_classes = lambda program, semantics, links, time: time(program, semantics, links, None); "
        "from schedc.cli import main; sys.exit(main(sys.argv[1:], sys.stdout, sys.stderr))")
FLAT_MAX = {"check": 256, "sim": 64, "viz": 64, "compile": 0}  # (compile: the reduced run only)
ROOT = Path(__file__).resolve().parent.parent


def run(path: Path, command: str, D: int, flat: bool) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, peak RSS in MB) of one command as a whole process."""
    head = [sys.executable, "-c", FLAT] if flat else [sys.executable, "-m", "schedc"]
    cmd = [*head, command, str(path), "--param", f"D={D}", "--semantics", "nccl"]
    if command == "viz":
        cmd += ["-o", str(path.with_suffix(".svg"))]
    if command == "compile":  # (its IR JSON, CSV and picture; no runnable program past 500,000 actions)
        cmd += ["-o", str(path.parent / f"out{D}")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    with open(os.devnull, "w") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{err.read()}")
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16,256,1024,6250", help="the replica counts D (comma-separated)")
    ap.add_argument("--commands", default="check,sim,viz,compile", help="the commands (comma-separated)")
    ap.add_argument("--flat-max", type=int, help="run the flat commands up to this many replicas "
                    f"(default {', '.join(f'{c} {n}' for c, n in FLAT_MAX.items())})")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dp1f1b.pp"
        path.write_text(JOB)
        print(f"{'command':>7} {'D':>6} {'ranks':>8} {'actions':>11} {'reduced s':>10} {'MB':>6} {'flat s':>8} "
              f"{'MB':>6} {'flat/reduced':>12}")
        for command in args.commands.split(","):
            for D in map(int, args.sizes.split(",")):
                cpu, _, mb = run(path, command, D, flat=False)
                row = f"{command:>7} {D:>6} {16 * D:>8,} {16 * 129 * D:>11,} {cpu:>10.2f} {mb:>6.0f}"
                if D <= (args.flat_max if args.flat_max is not None else FLAT_MAX[command]):
                    fcpu, _, fmb = run(path, command, D, flat=True)
                    row += f" {fcpu:>8.2f} {fmb:>6.0f} {fcpu / cpu:>12.1f}"
                else:
                    row += f" {'-':>8} {'-':>6} {'-':>12}"
                print(row, flush=True)


if __name__ == "__main__":
    main()
