"""Replicas that run one program are checked once (schedc/verify/symmetry.py), and the reduced check
is held to the flat one, which spells every replica out.

Generated jobs draw their replicas from one to three pipelines (lowered built-ins with reductions,
FSDP gathers, tied all-reduces, waits and groups drawn in, some reordered), in any order, under
every semantics and with memory limits. On each, `check` gives the flat check's report word for
word, and the reduced check forced to tell its own findings (as it does for a job too large to
check flat) gives the same verdict, the same findings and the same stuck ranks, its deadlock
cycle running through real ranks of the job.
"""
from __future__ import annotations

import collections
import contextlib
from dataclasses import replace

import pytest
from hypothesis import event, given, strategies as st

import schedc
import schedc.report as report_module
from schedc.api import load_text
from schedc.ir import Action, Op, Program
from schedc.passes import lower
from schedc.strategies import reorderings
from schedc.verify import mesh
from schedc.verify.symmetry import classes

from profiles import budget

BASES = [lower(schedc.load(n, p)) for n, p in (("1f1b", {"P": 2, "M": 2}), ("1f1b", {"P": 3, "M": 3}),
                                               ("gpipe", {"P": 2, "M": 2}),
                                               ("interleaved_1f1b", {"P": 2, "V": 2, "M": 2}))]
SEMANTICS = ["rendezvous", "eager", "bounded:1", "nccl", "gloo", "nccl+lazy", "nccl+shapes", "gloo+shapes"]


@contextlib.contextmanager
def flat():
    """The job checked whole, every replica spelled out (as before the reduction)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report_module, "_check_classes", lambda *a: None)
        mp.setattr(report_module, "runtime_view", lambda analysis: (analysis, None))  # (the runtimes' hangs too)
        yield


@contextlib.contextmanager
def reduced():
    """The reduced check telling its own findings, as for a job too large to check flat."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report_module, "_flat_fits", lambda program: False)
        yield


def _insert(draw, steps: list, action: Action, lo: int = 0) -> None:
    steps.insert(draw(st.integers(lo, len(steps))), action)


@st.composite
def pipelines(draw, base: Program) -> tuple:
    """A pipeline of `base` (sometimes reordered) with collectives drawn in."""
    pipeline = draw(reorderings(base, max_moves=2)).program if draw(st.integers(0, 5)) == 0 else base
    S = base.num_stages
    out = []
    for p, steps in enumerate(pipeline.ranks):
        steps = list(steps)
        for s in sorted({a.stage for x in steps for a in x.parts if a.op.is_compute}):
            if draw(st.booleans()):
                _insert(draw, steps, Action(Op.UNSHARD, s))
            if draw(st.integers(0, 3)):  # as the step ends, as torch reduces (now and then anywhere: reduce-early)
                _insert(draw, steps, Action(Op.REDUCE_GRAD, s), len(steps) if draw(st.integers(0, 19)) else 0)
        ends = (base.placement[0], base.placement[S - 1])
        if draw(st.integers(0, 4)) == 0 and ends[0] != ends[1] and p in ends:
            _insert(draw, steps, Action(Op.REDUCE_TIED, 0 if p == ends[0] else S - 1), len(steps))
        out.append(tuple(steps))
    return tuple(out)


@st.composite
def jobs(draw) -> Program:
    """Two to seven replicas, each one of one to three pipelines (the same object, or an equal copy)."""
    base = draw(st.sampled_from(BASES))
    pool = [draw(pipelines(base)) for _ in range(draw(st.integers(1, 3)))]
    D = draw(st.integers(2, 7))
    picks = [0] + [draw(st.integers(0, len(pool) - 1)) for _ in range(D - 1)]
    replicas = [pool[i] if draw(st.booleans()) else tuple(tuple(steps) for steps in pool[i]) for i in picks]
    return replace(base, name="job", ranks=replicas[0], replicas=tuple(replicas[1:]))


@st.composite
def limits(draw, job: Program):
    """No limit, one for every rank, or limits on some job ranks."""
    how = draw(st.sampled_from(["none", "all", "some"]))
    if how == "none":
        return None
    if how == "all":
        return float(draw(st.integers(1, 4)))
    R = job.num_ranks * job.dp
    return {r: float(draw(st.integers(1, 4))) for r in draw(st.sets(st.integers(0, R - 1), max_size=4))}


def _codes(report) -> collections.Counter:
    return collections.Counter(e.code for e in report.errors)


def _told(report) -> list:
    return [(e.code, e.rank, e.message) for e in report.errors if e.code != "deadlock"]


@budget(200)
@given(st.data(), jobs(), st.sampled_from(SEMANTICS))
def test_the_reduced_check_is_the_flat_check(data, job, semantics):
    limit = data.draw(limits(job))
    with flat():
        whole = schedc.check(job, semantics=semantics, memory_limit=limit)
    mine = schedc.check(job, semantics=semantics, memory_limit=limit)
    assert mine.render() == whole.render() and mine.to_dict() == whole.to_dict()
    event(f"{classes(job).k} of {job.dp} replicas differ: " + (" ".join(sorted(set(_codes(whole)))) or "ok"))
    with reduced():
        own = schedc.check(job, semantics=semantics, memory_limit=limit)
    assert own.ok == whole.ok and _codes(own) == _codes(whole), (own.render(), whole.render())
    assert _told(own) == _told(whole)
    assert (own.deadlock is None) == (whole.deadlock is None)
    if whole.deadlock is not None:
        assert own.deadlock.stuck == whole.deadlock.stuck
        assert {w.rank for w in own.deadlock.cycle} <= set(whole.deadlock.stuck)
    else:
        assert own.peak_activation == whole.peak_activation and own.peak_sizes == whole.peak_sizes
        assert own.memory_limit == whole.memory_limit


# Even replicas gather stage r's parameters on rank r before their pipeline and the odd ones after
# it, on rank 0 the other way round: rank 0 (even) waits for rank 2 (odd) to reach its gather, at
# the end of replica 1's pipeline, which waits for rank 3's gather, which waits for rank 1's
# (replica 0's end), which waits for rank 0. A cycle through two classes of replicas.
CROSSED = """schedule crossed(P = 2, M = 2, D = 4) {
  stages P
  place loop
  replicas D
  rank r, replica d {
    if d % 2 == r { UNSHARD(r) }
    for m in 0 .. M { F(r, m) }
    for m in 0 .. M { B(r, m) }
    if d % 2 != r { UNSHARD(r) }
  }
}
"""


@pytest.mark.parametrize("semantics", ["rendezvous", "nccl", "gloo"])
def test_collectives_ordered_differently_across_classes_deadlock(semantics):
    job = load_text(CROSSED, "crossed.pp")
    assert classes(job).members == ((0, 2), (1, 3))
    with flat():
        whole = schedc.check(job, semantics=semantics)
    with reduced():
        own = schedc.check(job, semantics=semantics)
    assert whole.deadlock is not None and own.deadlock is not None
    assert own.deadlock.cause == whole.deadlock.cause
    assert own.deadlock.stuck == whole.deadlock.stuck and len(own.deadlock.stuck) == 8
    assert [d.message for d in own.errors] == [d.message for d in whole.errors]


def test_identical_replicas_are_one_class_and_share_their_lists():
    job = load_text(CROSSED.replace("rank r, replica d", "rank r").replace("d % 2", "0"), "same.pp")
    assert job.dp == 4 and all(r is job.ranks for r in job.replicas)
    assert classes(job).members == ((0, 1, 2, 3),)


def test_equal_lists_from_other_lines_are_a_class_of_their_own():
    text = CROSSED.replace("if d % 2 == r { UNSHARD(r) }", "if d == 1 { F(r, 0) } else { F(r, 0) }") \
        .replace("for m in 0 .. M { F(r, m) }", "for m in 1 .. M { F(r, m) }").replace("if d % 2 != r { UNSHARD(r) }", "")
    job = load_text(text, "lines.pp")
    assert job.ranks == job.replicas[0] and classes(job).members == ((0, 2, 3), (1,))


def _ranks_checked(monkeypatch) -> list[int]:
    """The ranks of every job whose happens-before graph is built."""
    seen: list[int] = []
    real = mesh.job

    def spy(program, *args, **kwargs):
        seen.append(program.num_ranks * program.dp)
        return real(program, *args, **kwargs)
    monkeypatch.setattr("schedc.verify.mesh.job", spy)  # (analysis.py imports it from there when a job asks)
    return seen


BIG = """schedule dp1f1b(P = 16, M = 64, D = 6250) {
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


def test_a_100000_rank_job_is_checked_as_one_replica(monkeypatch):
    seen = _ranks_checked(monkeypatch)
    job = load_text(BIG, "big.pp")
    report = schedc.check(job, semantics="nccl", memory_limit={99_999: 1.0})
    assert seen == [16]  # one pipeline's graph, not the job's 100,000 ranks
    assert report.program.num_ranks == 100_000 and report.program.num_actions == 6250 * 16 * 129
    assert report.peak_sizes[:16] == tuple(float(16 - p) for p in range(16)) == report.peak_sizes[-16:]
    assert report.ok  # the last rank holds 1: within its limit
    report = schedc.check(job, semantics="nccl", memory_limit={99_984: 15.0})
    assert [(e.code, e.rank) for e in report.errors] == [("memory", 99_984)]
    assert report.errors[0].message.startswith("rank 99984, step ")


def test_a_job_too_large_to_check_flat_tells_its_deadlock_with_real_ranks(monkeypatch):
    seen = _ranks_checked(monkeypatch)
    monkeypatch.setattr(report_module, "MAX_DETAILED_ACTIONS", 100)  # 16 replicas of 10 actions: 160
    job = load_text(CROSSED.replace("D = 4", "D = 16"), "crossed.pp")
    report = schedc.check(job)
    assert seen == [4]  # the two classes' first replicas
    dl = report.deadlock
    assert dl is not None and dl.stuck == {r: 2 if r % 4 == 2 else 0 for r in range(32)}
    assert {w.rank for w in dl.cycle} == {0, 1, 2, 3}  # the first replica of each class
    assert "note: replicas of one schedule are checked once" in report.render()
    monkeypatch.setattr(report_module, "MAX_DETAILED_ACTIONS", 10)  # two classes of 10 actions: past the limit
    with pytest.raises(schedc.SchedcError, match="20 actions"):
        schedc.check(job)


# FSDP's gathers beside the pipeline's messages, in two orders (tests/test_collectives.py): under
# nccl+lazy replica 0's ranks first use their pair before their data-parallel group on rank 0 and
# after it on rank 1, odd replicas the other way round: a cycle of first uses through two classes.
LAZY = """schedule fsdp(P = 2, M = 1, D = 2) {
  stages P
  place loop
  replicas D
  rank r, replica d {
    if r == 0 {
      if d % 2 == 0 { F(0, 0) SEND_F(0, 0) RECV_B(0, 0) UNSHARD(0) B(0, 0) }
      else { UNSHARD(0) F(0, 0) SEND_F(0, 0) RECV_B(0, 0) B(0, 0) }
    } else {
      if d % 2 == 0 { UNSHARD(1) RECV_F(1, 0) F(1, 0) B(1, 0) SEND_B(1, 0) }
      else { RECV_F(1, 0) UNSHARD(1) F(1, 0) B(1, 0) SEND_B(1, 0) }
    }
  }
}"""


@pytest.mark.parametrize("D", [2, 3, 7])
def test_communicators_first_used_in_a_cycle_across_classes_are_found_on_the_reduced_job(monkeypatch, D):
    """`comm-init-order` through the classes' first replicas: the reduced job's finding is the
    flat job's, word for word, and only the two classes' replicas are lowered."""
    job = load_text(LAZY.replace("D = 2", f"D = {D}"), "lazy.pp")
    assert classes(job).k == 2
    with flat():
        whole = schedc.check(job, semantics="nccl+lazy")
    lowered: list[int] = []
    real = report_module._lowered
    monkeypatch.setattr(report_module, "_lowered", lambda a: (lowered.append(a.program.dp), real(a))[1])
    mine = schedc.check(job, semantics="nccl+lazy")
    assert lowered == [2]
    assert [d.code for d in whole.errors] == ["comm-init-order"]
    assert mine.render() == whole.render() and mine.to_dict() == whole.to_dict()
    assert schedc.check(job, semantics="nccl").ok


def test_a_100000_rank_job_gets_its_runtime_hang_checks_on_one_replica(monkeypatch):
    """nccl+lazy (communicators made at first use) and nccl+shapes (Megatron's shape exchange)
    on the 100,000-rank job: one pipeline lowered and read, not the job (which took 300 s and
    4.4 GB of memory before it was stopped)."""
    seen = _ranks_checked(monkeypatch)
    lowered: list[int] = []
    real = report_module._lowered
    monkeypatch.setattr(report_module, "_lowered", lambda a: (lowered.append(a.program.dp), real(a))[1])
    job = load_text(BIG, "big.pp")
    assert schedc.check(job, semantics="nccl+lazy").ok and lowered == [1]
    assert schedc.check(job, semantics="nccl+shapes").ok
    assert max(seen) == 16


# Odd replicas exchange their first message in groups on ranks 0 and 1 while rank 2 receives
# singly; even replicas send all singly: under nccl+lazy the odd replicas' ranks wait in the making
# of their pipeline process group's communicator for rank 2, which never comes.
PARTIAL_GROUPS = """schedule partial(D = 2) {
  forward only
  ranks 3
  stages 3
  replicas D
  rank r, replica d {
    if r == 0 { F(0, 0) if d % 2 == 1 { group(SEND_F(0, 0)) } else { SEND_F(0, 0) } }
    if r == 1 { if d % 2 == 1 { group(RECV_F(1, 0)) } else { RECV_F(1, 0) } F(1, 0) SEND_F(1, 0) }
    if r == 2 { RECV_F(2, 0) F(2, 0) }
  }
}"""


@pytest.mark.parametrize("D", [2, 3, 6])
def test_a_process_group_some_ranks_never_join_is_found_on_the_reduced_job(D):
    job = load_text(PARTIAL_GROUPS.replace("D = 2", f"D = {D}"), "partial.pp")
    assert classes(job).k == 2
    with flat():
        whole = schedc.check(job, semantics="nccl+lazy")
    mine = schedc.check(job, semantics="nccl+lazy")
    assert [d.code for d in whole.errors] == ["comm-init-order"]
    assert "rank 5 never posts a group" in whole.errors[0].message  # (replica 1's pipeline rank 2)
    assert mine.render() == whole.render() and mine.to_dict() == whole.to_dict()
    assert schedc.check(job, semantics="nccl").ok
