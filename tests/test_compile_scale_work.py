"""`schedc compile` at the largest sizes (a fuzzing finding: 1F1B at P=64, M=20000, 7.6M actions
once lowered, took 44 s): once the checks are done, it writes the IR, the CSV (torch's stage
actions, then the sends and receives) and the aggregated picture (the timed run and its memory)
from the program's integer columns: no object per action, and a few passes over the steps in
Python (it was a few hundred lines of Python per action). Counted, never timed."""
from __future__ import annotations

import sys

import pytest

from schedc import columns
from schedc.commands import common
from schedc.ir import Action
from schedc.lower import codegen


class _Writing:
    """What `compile 1f1b` at P=4 does once its checks are done: the actions it makes (by the
    dataclass, or from columns) and the lines of schedc's Python it runs."""

    def __init__(self, run_cli, monkeypatch, tmp_path):
        self.run_cli, self.tmp_path = run_cli, tmp_path
        self.on, self.made, self.lines = False, 0, 0
        real_check, real_post_init, real_unchecked = common.run_checks, Action.__post_init__, columns.unchecked_action

        def check(*args, **kwargs):
            report = real_check(*args, **kwargs)
            self.on = True
            return report

        def post_init(action):
            self.made += self.on
            real_post_init(action)

        def unchecked(*args):
            self.made += self.on
            return real_unchecked(*args)
        monkeypatch.setattr(common, "run_checks", check)
        monkeypatch.setattr(Action, "__post_init__", post_init)
        monkeypatch.setattr(columns, "unchecked_action", unchecked)
        monkeypatch.setattr(codegen, "MAX_RUNNABLE_ACTIONS", 100)  # (a runnable program is written action by action)
        self.compile(100)  # (the first compile imports the modules that make tables of actions)

    def compile(self, M: int, count_lines: bool = False, name: str = "1f1b") -> "_Writing":
        self.on, self.made, self.lines = False, 0, 0

        def line(frame, event, arg):
            self.lines += self.on and event == "line"
            return line

        def call(frame, event, arg):
            return line if "/schedc/" in frame.f_code.co_filename.replace("\\", "/") else None
        previous = sys.gettrace()
        if count_lines:
            sys.settrace(call)
        try:
            code, out, err = self.run_cli("compile", name, "--param", f"P=4,M={M}", "-o",
                                          str(self.tmp_path / f"{name}{M}"))
        finally:
            sys.settrace(previous)
        assert code == 0 and f"{name}.csv, " in out and "no runnable program" in err, err
        return self


@pytest.fixture
def writing(run_cli, monkeypatch, tmp_path):
    return _Writing(run_cli, monkeypatch, tmp_path)


def test_compile_writes_a_large_program_without_an_object_per_action(writing):
    # 10,400 and 41,600 steps, both pictures aggregated: the actions made are the timed run's plans,
    # one per op and stage, whatever the microbatches
    small, large = writing.compile(1300).made, writing.compile(5200).made
    assert small == large <= 64, (small, large)


def test_compile_writes_dualpipev_without_an_object_per_action(writing):
    # its overlapped pairs are columns too (their parts'): the actions made are the timed run's and
    # the lowering's plans, a few per op and stage (8 stages), whatever the microbatches
    writing.compile(100, name="dualpipev")  # (the first compile of pairs imports what reads them)
    small, large = writing.compile(650, name="dualpipev").made, writing.compile(2600, name="dualpipev").made
    assert small == large <= 160, (small, large)


def test_compile_writes_dualpipev_in_a_few_passes_over_its_steps(writing):
    small = writing.compile(650, count_lines=True, name="dualpipev").lines
    large = writing.compile(1300, count_lines=True, name="dualpipev").lines
    assert large <= 2.2 * small, (small, large)
    assert large <= 100 * 8 * 1300, large  # per action of the program (about 8 per microbatch)


def test_compile_writes_a_large_program_in_a_few_passes_over_its_steps(writing):
    # the lowering's rounds and the timed run go step by step; everything else is array operations
    small, large = writing.compile(1300, count_lines=True).lines, writing.compile(2600, count_lines=True).lines
    assert large <= 2.2 * small, (small, large)
    assert large <= 100 * 8 * 2600, large  # per action of the program (8 per microbatch); it was 210
