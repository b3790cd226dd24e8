"""Solver work in a child process with a capped address space (schedc/capped.py): the answer and
the units spent come back, the cap gives `unknown (memory limit)` instead of the machine's memory,
exceptions and the command's clock reach the parent, and no child outlives the call."""
from __future__ import annotations

import os

import pytest

import schedc
from schedc import capped
from schedc.solver import Deadline, TimeUp, Unknown

pytestmark = pytest.mark.skipif(not capped.available(), reason="capped work needs fork and /proc (Linux)")


@pytest.fixture
def forked(monkeypatch):
    """The pids of the children forked meanwhile."""
    pids: list[int] = []
    fork = os.fork

    def recording_fork() -> int:
        pid = fork()
        if pid:
            pids.append(pid)
        return pid
    monkeypatch.setattr(os, "fork", recording_fork)
    return pids


def _reaped(pids: list[int]) -> bool:
    """Whether each child was waited for already (none left running or as a zombie)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
            return False
        except ChildProcessError:
            pass
    return bool(pids)


def test_the_result_and_the_units_spent_come_back(forked):
    from schedc.solver import check, context, make, z3
    deadline = Deadline.only(10_000_000, "a small query")

    def work():
        s = make(context())
        x = z3.Int("x", s.ctx)
        s.add(x > 3, x < 5)
        assert check(s, deadline=deadline) == z3.sat
        return s.model()[x].as_long(), os.getpid()

    value, pid = capped.run_capped(work, 2**30, deadline, "a small query")
    assert value == 4 and pid != os.getpid()  # answered in another process
    assert 0 < deadline.budget.spent < 10_000_000  # its units counted here
    assert _reaped(forked)


def test_work_past_the_cap_is_unknown_naming_the_memory_limit():
    def work():
        return len(bytearray(512 * 2**20))  # 512 MiB under a 64 MiB cap

    answer = capped.run_capped(work, 64 * 2**20, Deadline.only(1, "nothing"), "the test's work")
    assert isinstance(answer, Unknown) and answer.reason.startswith(capped.MEMORY_LIMIT)
    assert "the test's work needs more than 64 MiB" in answer.reason
    assert capped.run_capped(lambda: len(bytearray(2**20)), 64 * 2**20, Deadline.only(1, "n"), "w") == 2**20


def test_an_exception_in_the_child_is_raised_in_the_parent(forked):
    def work():
        raise ValueError("bad query")

    with pytest.raises(ValueError, match="bad query"):
        capped.run_capped(work, 2**30, Deadline.only(1, "n"), "w")
    assert _reaped(forked)


def test_the_commands_clock_stops_the_child(forked):
    import time

    def work():
        time.sleep(600)

    with pytest.raises(TimeUp):
        capped.run_capped(work, 2**30, Deadline.after(0.2), "w")
    assert _reaped(forked)  # killed and reaped, not left running for ten minutes


def test_a_deadlock_query_past_its_memory_is_unknown_and_within_it_decided(monkeypatch):
    """1F1B at P=16, M=64 (2,048 steps) needs about 100 MB of Z3's memory: under a 16 MiB cap the
    verdict is `unknown (memory limit)`, never `ok`; with the default cap it is proved."""
    from schedc.verify import solver as vsolver
    program = schedc.load("1f1b", {"P": 16, "M": 64})
    monkeypatch.setattr(vsolver, "DEADLOCK_MEMORY", 16 * 2**20)
    report = schedc.check(program, engine="z3")
    assert report.ok is None and report.unknown.startswith("memory limit: ")  # (Z3 says it, or dies of it)
    assert "deadlock freedom (2,048 steps)" in report.unknown and "16 MiB" in report.unknown
    monkeypatch.undo()
    assert schedc.check(program, engine="z3").ok is True
