"""`check` under every send semantics costs work linear in the actions (issue 19), counted, never timed.

`schedc check looped_bfs --param P=5000 --semantics bounded:2` took a minute where rendezvous took a
second: the detailed checks (which bounded buffers, the backends and message sizes take) measured
each rank's activations with a table of every stage of the program, P ranks times 2P stages. Each
test counts work (function calls, with cProfile's deterministic counts; or the calls of one rule) at
a small and a 20 times larger size and asserts the work per action stays within a small factor:
quadratic work would grow it 20 times.
"""
from __future__ import annotations

import cProfile
import pstats

import pytest

from schedc.api import load
from schedc.passes import lower
from schedc.report import run_checks
from schedc.rules import memory as rule
from schedc.rules.semantics import Semantics
from schedc.verify import memory

FACTOR = 2  # linear work per action at the larger size, with room for fixed costs; quadratic is 20x


def _actions(program) -> int:
    return sum(len(st.parts) for steps in program.ranks for st in steps)


def _work_per_action(program, semantics: str) -> float:
    """Function calls `check`'s checks make on the program (built beforehand), per action."""
    profile = cProfile.Profile()
    profile.enable()
    report = run_checks(program, semantics=Semantics.parse(semantics))
    profile.disable()
    assert report.ok, [d.message for d in report.errors]
    return pstats.Stats(profile).total_calls / _actions(program)


def _shape(name: str, small: dict, large: dict, semantics: str, lowered: bool = False) -> tuple[float, float]:
    programs = [load(name, params) for params in (small, large)]
    if lowered:
        programs = [lower(p) for p in programs]
    return tuple(_work_per_action(p, semantics) for p in programs)


SEMANTICS = ["bounded:1", "bounded:2", "bounded:5", "eager", "nccl", "gloo"]


@pytest.mark.parametrize("semantics", SEMANTICS)
def test_looped_bfs_work_per_action_does_not_grow_with_ranks(semantics):
    # the case: looped_bfs at P=5000 (here P=50 against P=1000: 2P stages, so a table of
    # every stage per rank made the work per action grow with P)
    small, large = _shape("looped_bfs", {"P": 50}, {"P": 1000}, semantics)
    assert large <= FACTOR * small, (small, large)


@pytest.mark.parametrize("semantics", ["bounded:2", "nccl"])
def test_1f1b_work_per_action_does_not_grow_with_microbatches(semantics):
    small, large = _shape("1f1b", {"P": 8, "M": 40}, {"P": 8, "M": 800}, semantics)
    assert large <= FACTOR * small, (small, large)


@pytest.mark.parametrize("semantics", ["bounded:3", "gloo"])
def test_interleaved_work_per_action_does_not_grow_with_ranks(semantics):
    small, large = _shape("interleaved_1f1b", {"P": 8, "M": 8}, {"P": 160, "M": 8}, semantics)
    assert large <= FACTOR * small, (small, large)


@pytest.mark.parametrize("semantics", ["bounded:2", "eager", "nccl", "gloo"])
def test_communication_level_work_per_action_does_not_grow_with_ranks(semantics):
    # the lowered program: channels, bounded buffers, nccl's streams and gloo's posted operations
    small, large = _shape("looped_bfs", {"P": 20}, {"P": 400}, semantics, lowered=True)
    assert large <= FACTOR * small, (small, large)


def test_activation_walk_reads_the_sizes_of_the_ranks_own_stages(monkeypatch):
    """The root cause, counted: peak_activation's per-rank walk computed the size every stage of the
    program frees and allocates (`op_delta`), for each rank."""
    calls = [0]
    real = rule.op_delta

    def counted(op, act, weight):
        calls[0] += 1
        return real(op, act, weight)

    monkeypatch.setattr(rule, "op_delta", counted)
    per_action = []
    for P in (50, 1000):
        program = load("looped_bfs", {"P": P})
        calls[0] = 0
        assert memory.peak_activation(program) == (8.0,) * P
        per_action.append(calls[0] / _actions(program))
    small, large = per_action
    assert large <= FACTOR * small, (small, large)


@pytest.mark.parametrize("semantics", ["nccl", "gloo"])
def test_early_posted_receives_are_matched_to_their_consumers_in_linear_work(semantics):
    """Under a backend each receive's consumer is looked up, not scanned for: rank 1 of a lowered
    GPipe with every receive moved to the front (a scan from each receive went over the whole list)."""
    from schedc.ir import Op
    per_action = []
    for M in (50, 1000):
        program = lower(load("gpipe", {"P": 2, "M": M}))
        rank1 = list(program.ranks[1])
        front = [st for st in rank1 if st.parts[0].op is Op.RECV_F]
        program = program.with_ranks([program.ranks[0], front + [st for st in rank1 if st.parts[0].op is not Op.RECV_F]])
        per_action.append(_work_per_action(program, semantics))
    small, large = per_action
    assert large <= FACTOR * small, (small, large)


def _sized_looped_bfs(P: int):
    """looped_bfs whose stage outputs have a size (`memory out = 1`): eager and bounded sends then
    hold each sent message until its receive is surely posted, a happens-before question."""
    from conftest import compile_text
    from schedc.resources import builtin_schedules
    text = builtin_schedules()["looped_bfs"].read_text().replace("  place loop", "  memory out = 1\n  place loop")
    assert "memory out = 1" in text
    return compile_text(text, {"P": P})


@pytest.mark.parametrize("semantics", ["eager", "bounded:2"])
def test_holding_sized_messages_is_linear_work_per_action(semantics):
    # looped_bfs with sized messages took 35 s at P=400: a happens-before pass over the whole
    # program for each receiving rank; now one pass carries a vector over the receiving ranks
    small, large = (_work_per_action(_sized_looped_bfs(P), semantics) for P in (20, 400))
    assert large <= FACTOR * small, (small, large)


def test_the_hold_analysis_past_its_work_limit_is_a_too_large_error(monkeypatch):
    from schedc.errors import SchedcError
    program = _sized_looped_bfs(8)
    assert run_checks(program, semantics=Semantics.parse("eager")).ok
    monkeypatch.setattr(memory, "MAX_HOLD_WORK", 100)
    with pytest.raises(SchedcError) as err:
        run_checks(program, semantics=Semantics.parse("eager"))
    assert err.value.code == "too-large" and "receiving ranks" in str(err.value)
    assert run_checks(program, semantics=Semantics.parse("rendezvous")).ok  # rendezvous holds no sent message
