"""One analysis of a program per check (schedc/verify/analysis.py): report.py makes it, every check
reads it, the lowering is made once and only by report.py, and the pictures draw the report they
are given without checking again."""
from __future__ import annotations

import pytest

import schedc
import schedc.passes
from schedc.api import load_text
from schedc.passes import lower
from schedc.report import run_checks
from schedc.resources import builtin_schedules
from schedc.rules.semantics import Semantics
from schedc.verify import graph
from schedc.verify.analysis import Analysis
from schedc.verify.memory import peak_memory


def _sized(name: str = "1f1b", **params):
    """A built-in whose messages have a size: its memory is counted on its lowering."""
    text = builtin_schedules()[name].read_text().replace("  place ", "  memory act = 2, out = 1\n  place ", 1)
    return load_text(text, name, params=params or None)


def _count(monkeypatch, owner, name: str) -> list[int]:
    calls = [0]
    real = getattr(owner, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_check_lowers_its_program_once(monkeypatch):
    """Memory and the communicators' creation order both read the lowering (nccl+lazy): made once."""
    program = _sized(P=4, M=8)
    lowered = _count(monkeypatch, schedc.passes, "_lower_one")
    report = run_checks(program, semantics=Semantics.parse("nccl+lazy"))
    assert report.ok and lowered[0] == 1
    assert report.analysis is not None and report.analysis.lowered is not None


def test_deadlock_and_memory_share_one_happens_before_graph(monkeypatch):
    """Under eager sends the memory check reads the graph the deadlock check built."""
    program = lower(_sized(P=4, M=8))
    made = _count(monkeypatch, graph.Constraints, "__init__")
    report = run_checks(program, semantics=Semantics.parse("eager"))
    assert report.ok and made[0] == 1


def test_the_memory_check_does_not_lower():
    """Without the lowering a compute-level program's memory is counted on, the check says so."""
    program, eager = _sized(P=2, M=2), Semantics.parse("eager")
    with pytest.raises(ValueError, match="report.py makes it"):
        peak_memory(Analysis(program, eager))
    peaks = peak_memory(Analysis(program, eager, lower(program)))
    assert [pk.memory for pk in peaks] == [pk.memory for pk in run_checks(program, semantics=eager).peak_memory]


def test_the_pictures_draw_the_report_they_are_given(monkeypatch):
    """No picture checks a program again; each needs the report."""
    from schedc.viz import build_scene, render, timeline_svg
    program = schedc.load("1f1b", {"P": 2, "M": 3})
    report = schedc.check(program)

    def refuse(*args, **kwargs):
        raise AssertionError("a picture ran the checks")
    monkeypatch.setattr(schedc.api, "run_checks", refuse)
    monkeypatch.setattr(schedc.api, "check", refuse)
    assert render(program, report, ".svg").data == timeline_svg(program, report)
    assert render(program, report, ".dot", dag=True).data.startswith("digraph")
    with pytest.raises(TypeError):
        build_scene(program)  # type: ignore[call-arg]
