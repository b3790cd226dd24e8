"""Every finished run exits 0, every time (issue 35): a rank of a finished `schedc run` used to be
stopped by signal 6 ("terminate called without an active exception") after it had printed every
step, as Python's shutdown freed what torch held beside gloo's threads (DualPipeV 4 of 20 runs,
interleaved 1F1B 1 of 12). The generated programs' ranks now leave at once once their groups are
destroyed (schedc.runtime.entry.leave). The repetitions here launch the lowered programs of the two
schedules that failed most, on 2 gloo ranks, one step each; bench/run_exits.py runs 200.
"""
from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

import schedc
from schedc.lower import lower_to_torch
from schedc.runtime.launch import launch

ROOT = Path(__file__).resolve().parent.parent
FRAGILE = {"dualpipev": {"P": 2, "M": 4}, "interleaved_1f1b": {"P": 2, "V": 2, "M": 4}}


def _programs(folder: Path) -> dict[str, Path]:
    """The lowered program of each fragile schedule, written once."""
    out = {}
    for name, params in FRAGILE.items():
        path = folder / f"{name}_program.py"
        path.write_text(lower_to_torch(schedc.load(name, params), verified="rendezvous").source)
        out[name] = path
    return out


def _run_each(folder: Path, times: int) -> list[tuple[str, tuple[int, ...], str]]:
    """Launch each program `times` times (alternating): (name, exit codes, error output) of each run
    that did not exit 0 on every rank after finishing, or that did not finish."""
    bad = []
    programs = _programs(folder)
    for _ in range(times):
        for name, path in programs.items():
            out, err = io.StringIO(), io.StringIO()
            done = launch([sys.executable, str(path), "--model", "examples.mlp:build_stages", "--steps", "1",
                           "--timeout", "120"], 2, stdout=out, stderr=err, cwd=str(ROOT), grace=10, deadline=300)
            if not done.ok or "median step time" not in out.getvalue():
                bad.append((name, done.returncodes, err.getvalue()[-1500:]))
    return bad


@pytest.mark.slow  # 10-12 s of runs; bench/run_exits.py runs 200
def test_a_finished_run_of_each_fragile_schedule_exits_0(tmp_path):
    assert _run_each(tmp_path, 1) == []


@pytest.mark.slow
def test_ten_finished_runs_of_the_fragile_schedules_all_exit_0(tmp_path):
    assert _run_each(tmp_path, 5) == []  # 5 of each: 10 runs, about a minute on 2 cores
