"""Receives posted early (`lower(program, receives="early")`, `schedc run --receives early`).

Each rank's receives move to the start of its list in their order; a program that completes on
gloo still completes there with its messages paired as before (generated programs, and reorderings
of them); the same program deadlocks under nccl and rendezvous, which the checks say, and `run`
refuses nccl for it before any rank starts. That the runtime trains to the unsplit model's
gradients with early receives is tests/test_runtime.py's (every built-in on 4 ranks).
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

import schedc
from schedc.api import load_text
from schedc.errors import EXIT_INPUT
from schedc.ir import RECVS, Action, Compound, CompoundKind, Op, Program
from schedc.passes import lower, post_receives_early
from schedc.report import run_checks
from schedc.rules.semantics import Semantics
from schedc.strategies import lowered_programs, programs, reorderings

from profiles import budget

GLOO = Semantics.parse("gloo")


def _receives(row) -> list:
    return [st for st in row if isinstance(st, Action) and st.op in RECVS]


def _by_channel(program: Program) -> dict:
    """Each rank's receives per peer stage and kind, in order (the order FIFO pairing follows)."""
    out: dict = {}
    for r, row in enumerate(program.ranks):
        for a in _receives(row):
            out.setdefault((r, a.op), []).append(a)
    return out


def test_every_rank_posts_its_receives_first_in_their_order():
    program = schedc.load("interleaved_1f1b", {"P": 4, "V": 2, "M": 8})
    needed, early = lower(program), lower(program, receives="early")
    for before, after in zip(needed.ranks, early.ranks):
        k = len(_receives(before))
        assert k and _receives(after) == _receives(before) == list(after[:k])
        assert [st for st in after[k:]] == [st for st in before if st not in set(_receives(before))]
    assert _by_channel(early) == _by_channel(needed)
    assert post_receives_early(early) == early  # (already first: nothing moves)
    assert lower(program, receives="needed") == needed


def test_a_rank_with_a_group_of_receives_keeps_its_order():
    text = """schedule g(P = 2, M = 1) {
      rank 0: 0F0 0SEND_F0 0RECV_B0 0B0
      rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
    }"""
    program = load_text(text, "g.pp")
    grouped = Compound(CompoundKind.GROUP, (Action(Op.SEND_F, 0, 0), Action(Op.RECV_B, 0, 0)))
    rank0 = (Action(Op.F, 0, 0), grouped, Action(Op.B, 0, 0))
    with_group = replace(program, ranks=(rank0, program.ranks[1]))
    early = post_receives_early(with_group)
    assert tuple(early.ranks[0]) == rank0  # the group's rank is left as written
    assert _receives(early.ranks[1]) == list(early.ranks[1][:1])
    compute = schedc.load("1f1b", {"P": 2, "M": 2})
    assert post_receives_early(compute) is compute  # (no receive to move)
    with pytest.raises(ValueError, match="receives="):
        lower(program, receives="late")


@budget(120)
@given(st.one_of(programs().map(lower), lowered_programs().flatmap(
    lambda p: reorderings(p, max_moves=3).map(lambda m: m.program))))
def test_what_completes_on_gloo_completes_with_its_receives_posted_early(program):
    before = run_checks(program, semantics=GLOO, fast=False)
    if not before.ok:
        return
    early = post_receives_early(program)
    after = run_checks(early, semantics=GLOO, fast=False)
    assert after.ok, after.render()
    assert _by_channel(early) == _by_channel(program) and not after.mismatches
    assert after.peak_activation == before.peak_activation  # (buffers without a size hold nothing)


def test_early_receives_deadlock_on_nccl_and_run_refuses_that_backend(run_cli):
    early = lower(schedc.load("1f1b", {"P": 4, "M": 8}), receives="early")
    assert run_checks(early, semantics=GLOO).ok
    for semantics in ("nccl", "rendezvous"):
        report = run_checks(early, semantics=Semantics.parse(semantics))
        assert report.ok is False and report.deadlock is not None, semantics
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=4", "--model", "examples.mlp:build_stages",
                             "--receives", "early", "--backend", "nccl")
    assert code == EXIT_INPUT and "gloo only" in err and "Traceback" not in err and out == ""


def test_run_checks_the_early_program_under_gloo_and_records_it(tmp_path, run_cli):
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=4", "--model", "examples.mlp:build_stages",
                             "--receives", "early", "--print-torchrun", "-o", str(tmp_path))
    assert code == 0, err
    assert "receives posted early (--receives early): the lowered program under gloo: ok" in out
    source = (tmp_path / "1f1b_program.py").read_text()
    assert "'verified': 'gloo'" in source and source.index("('RECV_B', 0, 0, 1)") < source.index("('F', 0, 0)")


SIZED = """schedule sized(P = 2, M = 4) {
  stages P
  place loop
  memory act = 1, out = 1
  memory limit = 7
  rank r {
    let warm = min(P - 1 - r, M)
    for m in 0 .. warm      { F(r, m) }
    for m in 0 .. M - warm  { F(r, m + warm); B(r, m) }
    for m in M - warm .. M  { B(r, m) }
  }
}
"""


def test_early_receive_buffers_count_and_a_limit_they_break_stops_the_run(tmp_path, run_cli):
    """Messages of a size: posted first, rank 0's receive buffers are held from the start and its
    peak grows from 7 to 8, past the schedule's limit: `run --receives early` says so and starts
    no rank; the default placement fits."""
    from schedc.errors import EXIT_FAIL
    path = tmp_path / "sized.pp"
    path.write_text(SIZED)
    program = load_text(SIZED, "sized.pp")
    peaks = {rc: run_checks(lower(program, receives=rc), semantics=GLOO).peak_memory[0].memory
             for rc in ("needed", "early")}
    assert peaks == {"needed": 7.0, "early": 8.0}
    argv = ("run", str(path), "--model", "examples.mlp:build_stages", "--semantics", "gloo", "--print-torchrun",
            "-o", str(tmp_path / "out"))
    code, out, err = run_cli(*argv)
    assert code == 0, err
    code, out, err = run_cli(*argv, "--receives", "early")
    assert code == EXIT_FAIL and "the lowered program under gloo: FAILED" in out
    assert "over the limit of 7" in err and "not running" in err and "Traceback" not in err
