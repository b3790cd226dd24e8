"""The job checks against an independent executor: replicas, collectives, tied reductions, waits
and groups, under every semantics.

`job_run` (tests/oracles.py) runs a communication-level job as DESIGN.md and docs/semantics.md say,
as a fixpoint over program counters; it shares no code with schedc/verify/. Generated jobs are
lowered built-ins whose replicas may be reordered differently, with data-parallel reductions,
FSDP gathers, a tied all-reduce, explicit waits and groups inserted at drawn places (sound or not).
On every job without a structural finding, `check`'s deadlock verdict is the executor's, and a
report never hides its deadlock behind another finding (a mismatch, a collective out of order).
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

import schedc
from schedc.api import load_text
from schedc.ir import WAITS, Action, Compound, CompoundKind, Op, Program
from schedc.passes import lower
from schedc.strategies import reorderings

from oracles import job_crossed, job_run
from profiles import budget

BASES = [lower(schedc.load(n, p)) for n, p in (("1f1b", {"P": 2, "M": 2}), ("1f1b", {"P": 3, "M": 3}),
                                               ("gpipe", {"P": 2, "M": 2}),
                                               ("interleaved_1f1b", {"P": 2, "V": 2, "M": 2}))]
SEMANTICS = ["rendezvous", "eager", "bounded:1", "nccl", "gloo"]
# findings about the job's structure (the deadlock question is not asked of such a job)
VERDICTS = {"deadlock", "mismatch", "unmatched", "memory", "collective-order"}
COMMS = {Op.SEND_F, Op.RECV_F, Op.SEND_B, Op.RECV_B}
WAIT_FOR = {op: wait for wait, op in WAITS.items()}


def _insert(draw, steps: list, action: Action, lo: int = 0) -> int:
    at = draw(st.integers(lo, len(steps)))
    steps.insert(at, action)
    return at


def _with_collectives(draw, program: Program, tied: bool, steps: list, p: int) -> None:
    """Reductions (and sometimes FSDP gathers) of the stages on pipeline rank p, and the tied
    all-reduce on the ranks of the first and the last stage, at drawn places."""
    stages = sorted({a.stage for st_ in steps for a in st_.parts if a.op.is_compute})
    for s in stages:
        if draw(st.booleans()):
            _insert(draw, steps, Action(Op.UNSHARD, s))
        if draw(st.integers(0, 3)):  # mostly as the step ends, as torch reduces
            at_end = draw(st.booleans())
            _insert(draw, steps, Action(Op.REDUCE_GRAD, s), len(steps) if at_end else 0)
    S = program.num_stages
    if tied and S > 1:
        for s in (0, S - 1):
            if program.placement[s] == p and program.placement[0] != program.placement[S - 1]:
                _insert(draw, steps, Action(Op.REDUCE_TIED, s), len(steps) - draw(st.integers(0, 1)) * 2
                        if draw(st.booleans()) else 0)  # (often near the end: after the backwards)


def _with_waits_and_groups(draw, steps: list) -> None:
    """An explicit wait after some send or receive; two adjacent communication steps as a group."""
    for _ in range(draw(st.integers(0, 2))):
        comms = [i for i, x in enumerate(steps) if isinstance(x, Action) and x.op in COMMS]
        if not comms:
            break
        i = draw(st.sampled_from(comms))
        a = steps[i]
        _insert(draw, steps, Action(WAIT_FOR[a.op], a.stage, a.microbatch), i + 1)
    pairs = [i for i in range(len(steps) - 1)
             if all(isinstance(x, Action) and x.op in COMMS for x in steps[i:i + 2])]
    if pairs and draw(st.booleans()):
        i = draw(st.sampled_from(pairs))
        steps[i:i + 2] = [Compound(CompoundKind.GROUP, (steps[i], steps[i + 1]))]


@st.composite
def jobs(draw, bases: list[Program] = BASES, more: tuple[int, int] = (0, 2)) -> Program:
    """Replica 0: a lowered built-in (one of `bases`, sometimes reordered) with collectives, waits
    and groups drawn in; `more` (fewest, most) further replicas, each the same, a reordering of it,
    or drawn afresh."""
    base = draw(st.sampled_from(bases))
    tied = draw(st.booleans())

    def fresh() -> tuple:
        pipeline = draw(reorderings(base, max_moves=2)).program if draw(st.integers(0, 3)) == 0 else base
        rank_steps = [list(steps) for steps in pipeline.ranks]
        for p in range(base.num_ranks):
            _with_collectives(draw, base, tied, rank_steps[p], p)
            _with_waits_and_groups(draw, rank_steps[p])
        return tuple(tuple(steps) for steps in rank_steps)

    first = fresh()
    replicas = [first]
    for _ in range(draw(st.integers(*more))):
        how = draw(st.sampled_from(["same", "same", "reordered", "fresh"]))
        if how == "same":
            replicas.append(first)
        elif how == "reordered":
            replicas.append(draw(reorderings(replace(base, ranks=first), max_moves=2)).program.ranks)
        else:
            replicas.append(fresh())
    return replace(base, name="job", ranks=replicas[0], replicas=tuple(replicas[1:]))


@budget(150)
@given(jobs(), st.sampled_from(SEMANTICS))
def test_job_deadlock_verdicts_agree_with_the_independent_executor(job, semantics):
    report = schedc.check(job, semantics=semantics)
    if any(e.code not in VERDICTS for e in report.errors):
        return
    assert (report.deadlock is None) == job_run(job, semantics), report.render()
    assert len(report.mismatches) == job_crossed(job, semantics), report.render()  # (the same pairing)


# Found by the nightly profile at 8x the examples (2026-12-06, seed 61206): a group on one end and a
# single operation on the other. Under nccl batches and single operations travel on different
# communicators (docs/semantics.md, "Groups under nccl"), each pairing in issue order: rank 0's
# grouped SEND_F(0,0) meets rank 1's grouped RECV_F(1,1), and rank 0's single SEND_F(0,1) meets
# rank 1's single RECV_F(1,0): the run completes with two crossed tensors, as the executor finds,
# and check pairs them per communicator too (verify/channels.py `BATCHED`): two mismatches.
GROUPED_ONE_END = """schedule job {
  stages 4
  place loop
  rank 0: 0F0 (0SEND_F0;2RECV_F0)GROUP 0F1 0SEND_F1 2RECV_F1 2F0 2SEND_F0 2F1 2SEND_F1 2RECV_B0 2B0 2SEND_B0 2RECV_B1 2B1 2SEND_B1 0RECV_B0 0B0 0RECV_B1 0B1
  rank 1: 1RECV_F0 1F0 (1SEND_F0;1RECV_F1)GROUP 1F1 1SEND_F1 3RECV_F0 3F0 3RECV_F1 3B0 3SEND_B0 1RECV_B0 3F1 3B1 3SEND_B1 1RECV_B1 1B0 1SEND_B0 1B1 1SEND_B1
}
"""


@pytest.mark.parametrize("engine", ["native", "z3"])
def test_a_group_on_one_end_crosses_tensors_under_nccl_rather_than_hanging(engine):
    job = load_text(GROUPED_ONE_END, "job.pp", "pp")
    assert job_run(job, "nccl")  # (the executor: it completes)
    report = schedc.check(job, semantics="nccl", engine=engine)
    assert report.deadlock is None and [e.code for e in report.errors] == ["mismatch", "mismatch"]
    told = [e.message for e in report.errors]
    assert "groups: the process group's communicator" in told[0] and "on 0->1, so" in told[1], told
    assert job_crossed(job, "nccl") == 2 and job_crossed(job, "gloo") == 0  # (the oracle's pairing)
    # gloo pairs them as one channel, in issue order: the same payloads meet, and it completes
    assert job_run(job, "gloo") and schedc.check(job, semantics="gloo").ok


# Both ranks send before they receive (a deadlock under rendezvous and nccl) and rank 0 sends its
# first two activations in the wrong order (two mismatches per pipeline).
CROSSED_AND_STUCK = """schedule both {{
  {extra}
  rank 0: 0F0 0F1 0F2 0SEND_F1 0SEND_F0 0SEND_F2 0RECV_B0 0B0 0RECV_B1 0B1 0RECV_B2 0B2 {tied0}
  rank 1: 1RECV_F0 1RECV_F1 1F0 1B0 1SEND_B0 1RECV_F2 1F1 1B1 1SEND_B1 1F2 1B2 1SEND_B2 {tied1}
}}
"""


@pytest.mark.parametrize("extra, tied", [("", False), ("replicas 2", False), ("replicas 3", False), ("", True),
                                         ("replicas 2", True)])
@pytest.mark.parametrize("semantics", ["rendezvous", "nccl"])
@pytest.mark.parametrize("engine", ["native", "z3"])
def test_a_deadlock_is_reported_beside_crossed_messages(tmp_path, extra, tied, semantics, engine):
    path = tmp_path / "both.pp"
    path.write_text(CROSSED_AND_STUCK.format(extra=extra, tied0="0REDUCE_TIED" if tied else "",
                                             tied1="1REDUCE_TIED" if tied else ""))
    program = schedc.load(path)
    report = schedc.check(program, semantics=semantics, engine=engine)
    D = program.dp
    codes = [e.code for e in report.errors]
    assert report.deadlock is not None and codes.count("deadlock") == 1
    # one error per mismatch, each on the job rank where it happens
    assert codes.count("mismatch") == len(report.mismatches) == 2 * D
    told = sorted((e.rank, e.message.split(":")[0]) for e in report.errors if e.code == "mismatch")
    ranks = [d * 2 + 1 for d in range(D) for _ in range(2)]
    assert [r for r, _ in told] == ranks
    if D > 1:
        assert all(f"(replica {r // 2})" in head for r, head in told)
    assert sorted(m.recv_rank for m in report.mismatches) == ranks
    assert job_run(program, semantics) is False


def test_the_crossed_job_completes_under_gloo_and_still_says_its_mismatches(tmp_path):
    path = tmp_path / "both.pp"
    path.write_text(CROSSED_AND_STUCK.format(extra="replicas 2", tied0="", tied1=""))
    report = schedc.check(schedc.load(path), semantics="gloo")
    assert report.deadlock is None and [e.code for e in report.errors] == ["mismatch"] * 4


def test_a_collective_out_of_order_hides_no_deadlock():
    """Replica 1 issues its rank 0's collectives in the other order (collective-order), and its
    ranks both send before they receive (a deadlock): both are told."""
    sound = load_text("""schedule dp {
  rank 0: 0UNSHARD 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0REDUCE_GRAD
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
}""", "dp.pp")
    stuck = load_text("""schedule dp {
  rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0REDUCE_GRAD 0UNSHARD
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
}""", "dp.pp")
    job = replace(sound, replicas=(stuck.ranks,))
    report = schedc.check(job)
    codes = [e.code for e in report.errors]
    assert "collective-order" in codes and report.deadlock is not None and "deadlock" in codes, report.render()
    assert job_run(job, "rendezvous") is False
