"""The verifier against an independent, deliberately plain executor and the simulator.

`plain_run` (tests/oracles.py) polls every rank in turn and completes its current step when the
semantics allows, computing channel positions itself; it shares no code with schedc/verify/. On
every random variant of a lowered built-in schedule (moved communication, swapped steps, dropped
or duplicated actions) that passes the structural checks, both engines' deadlock verdicts equal
the plain run's, and each action on a reported cycle is a step where the plain run really stays
blocked. On 1,000 generated schedules and variants (tests/profiles.py; HYPOTHESIS_PROFILE=nightly
for 20 times as many) the verifier, the simulator and the plain run give one verdict; and on real gloo
ranks a reordered sample the verifier clears runs to the unsplit model's gradients, while a
deadlocking one is stopped by the watchdog (the sample's runs that complete share the one launch of
tests/test_run_backends.py, which takes them from `gloo_sample` here).
"""
from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import schedc
from schedc.ir import Action, Op, Program
from schedc.lint import lint
from schedc.passes import lower
from schedc.report import run_checks
from schedc.simulate import simulate
from schedc.strategies import lowered_programs, mutations, programs, reorderings

from oracles import check, plain_run, same_rank_inversion
from profiles import FACTOR, budget

BUILTINS = [("1f1b", {"P": 3, "M": 4}), ("gpipe", {"P": 2, "M": 3}), ("interleaved_1f1b", {"P": 2, "V": 2, "M": 4}),
            ("looped_bfs", {"P": 2, "V": 2, "M": 2}), ("1f1b", {"P": 4, "M": 2})]
LOWERED = [lower(schedc.load(n, p)) for n, p in BUILTINS]
SEMANTICS = ["rendezvous", "eager", "bounded:1", "bounded:2"]


def _variants(program):
    """Moved steps (sound or not), a dropped or repeated step, or both (schedc.strategies)."""
    broken = mutations(program, kinds=("drop", "duplicate"))
    return st.one_of(reorderings(program), broken,
                     broken.flatmap(lambda m: reorderings(m.program, max_moves=2)))


def mutants():
    """Random variants of lowered built-in schedules (moved communication, swapped steps, dropped
    or duplicated actions)."""
    return st.sampled_from(LOWERED).flatmap(_variants).map(lambda m: m.program)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutants(), st.sampled_from(SEMANTICS))
def test_verifier_agrees_with_the_plain_executor(program, semantics):
    report = schedc.check(program, semantics=semantics)
    structural = [e for e in report.errors if e.code not in ("deadlock", "mismatch", "unmatched", "memory")]
    if structural:
        return
    pc = plain_run(program, semantics)
    finished = all(pc[r] == len(s) for r, s in enumerate(program.ranks))
    assert (report.deadlock is None) == finished
    if report.deadlock is not None:
        for w in report.deadlock.cycle:
            assert pc[w.rank] == w.step, (w, pc)
    z3 = schedc.check(program, semantics=semantics, engine="z3")
    assert (z3.deadlock is None) == finished


def test_every_lowered_builtin_finishes_in_the_plain_run():
    for program in LOWERED:
        for sem in SEMANTICS:
            pc = plain_run(program, sem)
            assert all(pc[r] == len(s) for r, s in enumerate(program.ranks)), (program.name, sem)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutants(), st.sampled_from(["rendezvous", "eager"]))
def test_fast_path_never_clears_what_the_detailed_checks_reject(program, semantics):
    from schedc.report import run_checks
    from schedc.rules.semantics import Semantics
    from schedc.verify.fast import quick_check
    sem = Semantics.parse(semantics)
    detailed = run_checks(program, semantics=sem, fast=False)
    clear = quick_check(program, sem, None)
    if clear is not None:
        assert detailed.ok is True, detailed.render()
        assert clear.peak_activation == detailed.peak_activation
        assert [p.memory for p in clear.peak_memory] == [p.memory for p in detailed.peak_memory]


def test_fast_path_clears_every_lowered_builtin():
    from schedc.rules.semantics import RENDEZVOUS
    from schedc.verify.fast import quick_check
    for program in LOWERED + [schedc.load(n, p) for n, p in BUILTINS]:
        clear = quick_check(program, RENDEZVOUS, None)
        assert clear is not None, program.name
        assert clear.peak_activation == schedc.report.run_checks(program, fast=False).peak_activation


# ---------------------------------------------------------------------------------------------
# Three ways to one verdict, on generated schedules and their variants (tests/profiles.py budget)
# ---------------------------------------------------------------------------------------------
GENERATED = dict(max_ranks=4, max_microbatches=4, placements=("loop", "vshape", "table"))


def _cases():
    """Generated programs at both levels, as they are (sound) and moved, dropped or repeated."""
    compute = programs(overlap=True, **GENERATED)
    comms = lowered_programs(**GENERATED)
    return st.one_of(
        compute, comms,
        compute.flatmap(reorderings).map(lambda m: m.program),
        comms.flatmap(_variants).map(lambda m: m.program),
        mutants(),
    )


def _simulated(program) -> bool:
    """True if the simulator times the program, False if it says it cannot finish (deadlock)."""
    try:
        simulate(program)
    except schedc.SchedcError as e:
        assert e.code == "deadlock", e.render()
        return False
    return True


# Lint findings that mean "some step waits for ever": a value needed before it is made on the
# rank (order), or a remote value that never comes (missing-recv); the run cannot reach the end.
STUCK = {"order", "missing-recv"}
COUNTED = {"n": 0, "finishes": 0, "stuck": 0, "deadlocks": 0}


def test_fast_path_rejects_a_same_rank_inversion_at_the_comms_level():
    """Found by test_verifier_simulator_and_plain_executor_agree and shrunk by Hypothesis: stages 0
    and 1 on rank 0, F(1,0) listed before F(0,0) whose output it needs. The detailed checks say
    `order`; the fast path (schedc/verify/fast.py) once cleared it at the comms level."""
    A = Action
    program = Program("inversion", 2, 3, 1, (0, 0, 1), (
        (A(Op.F, 1, 0), A(Op.F, 0, 0), A(Op.SEND_F, 1, 0), A(Op.RECV_B, 1, 0), A(Op.B, 1, 0), A(Op.B, 0, 0)),
        (A(Op.RECV_F, 2, 0), A(Op.F, 2, 0), A(Op.B, 2, 0), A(Op.SEND_B, 2, 0))))
    assert same_rank_inversion(program)
    assert run_checks(program, fast=False).ok is False
    pc = plain_run(program, "rendezvous")
    assert pc != [len(s) for s in program.ranks]
    assert schedc.check(program).ok is False


def test_verifier_simulator_and_plain_executor_agree():
    """CI: at least 1,000 generated schedules and variants (nightly: 20,000), and a fair share of
    each outcome: runs that finish, that cannot start a step, and that deadlock."""
    COUNTED.update(n=0, finishes=0, stuck=0, deadlocks=0)
    _three_verdicts_agree()
    assert COUNTED["n"] >= 1000 * FACTOR, COUNTED
    # each outcome at least 1% (runs have measured 3.4% to 34% deadlocks: 5% was flaky)
    assert min(COUNTED["finishes"], COUNTED["stuck"], COUNTED["deadlocks"]) >= COUNTED["n"] // 100, COUNTED


@budget(1000)
@given(_cases(), st.sampled_from(SEMANTICS))
def _three_verdicts_agree(program, semantics):
    COUNTED["n"] += 1
    report = check(program, semantics)
    codes = {e.code for e in report.errors}
    pc = plain_run(program, semantics)
    finished = all(pc[r] == len(s) for r, s in enumerate(program.ranks))
    found = lint(program)
    if found:
        assert not report.ok
        if {d.code for d in found} <= STUCK:
            assert not finished, report.render()
            assert not _simulated(program), report.render()
            COUNTED["stuck"] += 1
        return
    # structurally sound: deadlock is the question, and all three answer it
    assert (report.deadlock is None) == finished, (semantics, report.render())
    COUNTED["deadlocks"] += not finished
    if semantics == "rendezvous":  # the simulator's semantics
        assert _simulated(program) == finished, report.render()
    if finished and not codes - {"mismatch", "unmatched"}:
        COUNTED["finishes"] += 1
        if semantics == "rendezvous":
            tl = simulate(program)
            assert (tl.mismatches > 0) == bool(report.mismatches), report.render()


# ---------------------------------------------------------------------------------------------
# A real gloo run agrees on a sample: completes iff verified, stopped by the watchdog iff deadlock
# ---------------------------------------------------------------------------------------------
def build_stages(stage_ids, num_stages):
    import torch
    stages = []
    for s in stage_ids:
        torch.manual_seed(s)
        stages.append(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()))
    return stages


def loss_fn(output, target):
    import torch
    return torch.nn.functional.mse_loss(output, target)


def make_batch(step, batch_size):
    import torch
    gen = torch.Generator().manual_seed(step)
    return torch.randn(batch_size, 4, generator=gen), torch.randn(batch_size, 4, generator=gen)


@functools.lru_cache(maxsize=1)
def gloo_sample():
    """Two-rank schedules for real gloo runs: a generated one with communication moved that the
    verifier clears (`moved`); the generated base with every receive moved to the front of its rank
    (`first`), which deadlocks under every blocking semantics yet completes on gloo, where the runtime
    posts receives and the action that needs one waits for it; and with every send moved to the end
    instead (`last`), which deadlocks under gloo too. tests/test_run_backends.py runs all three in its
    launch (trained to the unsplit model's gradients, or stopped by the watchdog where check says)."""
    from hypothesis import find
    quick = settings(database=None, max_examples=2000)
    base = find(lowered_programs(min_ranks=2, max_ranks=2, min_microbatches=2, max_microbatches=2),
                lambda p: True, settings=quick)
    moved = find(reorderings(base), lambda m: m.program.ranks != base.ranks and ("SEND" in m.label or "RECV" in m.label)
                 and check(m.program, "rendezvous").ok is True, settings=quick).program
    first = base.with_ranks([sorted(steps, key=lambda s: s.parts[0].op not in (Op.RECV_F, Op.RECV_B))
                             for steps in base.ranks])
    last = base.with_ranks([sorted(steps, key=lambda s: s.parts[0].op in (Op.SEND_F, Op.SEND_B))
                            for steps in base.ranks])
    return {"moved": moved, "first": first, "last": last}


def test_the_gloo_sample_is_what_the_verdicts_say():
    """The verifier and the plain run on the sample that tests/test_run_backends.py runs on gloo."""
    sample = gloo_sample()
    moved, first, last = sample["moved"], sample["first"], sample["last"]
    assert plain_run(moved, "rendezvous") == [len(s) for s in moved.ranks]
    for sem in SEMANTICS:
        assert check(first, sem).deadlock is not None
    assert plain_run(first, "eager") != [len(s) for s in first.ranks]
    assert check(first, "gloo").ok
    assert check(last, "gloo").deadlock is not None


@pytest.mark.slow  # 7-9 s; test_runtime's watchdog test stays in the default tier
def test_a_real_gloo_run_of_a_deadlock_is_stopped_by_the_watchdog():
    """`assert_same_gradients` on the sample's deadlocking schedule fails with the watchdog's report,
    naming the wait (its passing runs: tests/test_strategies.py runs the example file's)."""
    pytest.importorskip("torch")
    from schedc.testing import assert_same_gradients
    last = gloo_sample()["last"]
    with pytest.raises(AssertionError) as info:
        assert_same_gradients(last, build_stages, timeout=2.0)
    text = str(info.value)
    assert "watchdog" in text and "schedc watchdog: rank" in text and "waits" in text
