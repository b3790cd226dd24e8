"""Testing your own schedule, pass, checker and runtime with schedc's strategies and assertions.

Run with `python -m pytest examples/test_my_schedule.py` (needs `pip install 'schedc[hypothesis]'`,
and torch for the last test). A failing test prints schedc's report of the shrunk counterexample.
`deadline=None`: the first example also pays for loading the grammar and the checker.
"""
import importlib.util

import pytest
from hypothesis import given, settings, strategies as st

from schedc.api import load_text
from schedc.ir import Op
from schedc.passes import lower
from schedc.strategies import lowered_programs, mutations, programs
from schedc.testing import assert_deadlock_free, assert_same_gradients, assert_within_memory

# 1. My schedule, in schedc's language: no deadlock and at most min(P, M) activations, for every
#    P and M that Hypothesis tries, under every send semantics.
MY_1F1B = """
schedule my_1f1b(P = 4, M = 8) {
  require P >= 1, M >= 1
  stages P
  place loop
  rank r {
    let warm = min(P - 1 - r, M)
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
"""


@settings(deadline=None)
@given(st.integers(1, 8), st.integers(1, 16), st.sampled_from(["rendezvous", "eager", "bounded:1"]))
def test_my_schedule_is_deadlock_free_and_within_memory(P, M, semantics):
    program = load_text(MY_1F1B, "my_1f1b.pp", params={"P": P, "M": M})
    assert_deadlock_free(lower(program), semantics=semantics)
    assert_within_memory(program, min(P, M))


# 2. My pass: defer every weight gradient to the end of its rank (as zero-bubble schedules do).
#    On any valid program with split backwards, the result must still be sound at both levels.
def defer_weight_gradients(program):
    def deferred(steps):
        return [s for s in steps if s.parts[0].op is not Op.W] + [s for s in steps if s.parts[0].op is Op.W]
    return program.with_ranks([deferred(steps) for steps in program.ranks])


@settings(deadline=None)
@given(programs(split_backward=True, max_ranks=4, max_microbatches=6))
def test_deferring_weight_gradients_keeps_schedules_sound(program):
    later = defer_weight_gradients(program)
    assert_deadlock_free(later)
    assert_deadlock_free(lower(later))


# 3. My checker (every stage runs every microbatch's forward and backward exactly once) must
#    reject every broken variant schedc.strategies makes of a valid program.
def my_completeness_check(program) -> bool:
    seen = {}
    for _, _, a in program.actions():
        if not (0 <= a.stage < program.num_stages and 0 <= a.microbatch < program.num_microbatches):
            return False
        seen[(a.op, a.stage, a.microbatch)] = seen.get((a.op, a.stage, a.microbatch), 0) + 1
    for s in range(program.num_stages):
        for m in range(program.num_microbatches):
            n = [seen.get((op, s, m), 0) for op in (Op.F, Op.B, Op.I, Op.W)]
            if n not in ([1, 1, 0, 0], [1, 0, 1, 1]):
                return False
    return True


@settings(deadline=None)
@given(programs().flatmap(lambda p: mutations(p, kinds=("drop", "duplicate", "bad-index"))))
def test_my_checker_rejects_broken_schedules(mutant):
    broken, what = mutant
    assert not my_completeness_check(broken), what


# 4. My runtime: schedc's, on one gloo process per rank, must give the unsplit model's gradients
#    (spawning ranks takes seconds: a few examples). The model: module-level, so ranks import it.
def build_stages(stage_ids, num_stages):
    import torch
    from torch import nn
    stages = []
    for s in stage_ids:
        torch.manual_seed(s)  # a stage has the same weights whichever rank builds it
        stages.append(nn.Sequential(nn.Linear(8, 8), nn.Tanh()))
    return stages


def loss_fn(output, target):
    import torch
    return torch.nn.functional.mse_loss(output, target)


def make_batch(step, batch_size):
    import torch
    gen = torch.Generator().manual_seed(step)
    return torch.randn(batch_size, 8, generator=gen), torch.randn(batch_size, 8, generator=gen)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
@settings(max_examples=2, deadline=None)
@given(lowered_programs(min_ranks=2, max_ranks=2, max_microbatches=3, placements=("loop",)))
def test_the_runtime_gives_the_unsplit_gradients(program):
    assert_same_gradients(program, build_stages)
