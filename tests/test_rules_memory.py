"""The memory rule itself (schedc/rules/memory.py): what each action holds, in any sizes.

Each op's delta for the default and split sizes, the forward-only case, the whole units prove counts
in, the solver terms prove and synth build on, which stage's `out` a message weighs, and a
property: the rule summed along a rank's list, allocations first in each step, is check's peak.
"""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from itertools import product

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import schedc
from schedc.rules.deps import message
from schedc.ir import Action, Op, StageMemory
from schedc.rules.memory import (allocated, count_groups, freed, held_within, message_size, message_stage, op_delta,
                                 whole_deltas)
from schedc.strategies import programs
from schedc.verify.memory import peak_activation, step_memory

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
COMPUTE = (Op.F, Op.B, Op.I, Op.W)


@pytest.mark.parametrize(("act", "weight", "expected"), [
    (1.0, 1.0, {Op.F: 1.0, Op.B: -1.0, Op.I: 0.0, Op.W: -1.0}),  # the default: weight = act
    (3.0, 1.0, {Op.F: 3.0, Op.B: -3.0, Op.I: -2.0, Op.W: -1.0}),  # split: I frees act - weight
    (1.0, 3.0, {Op.F: 1.0, Op.B: -1.0, Op.I: 2.0, Op.W: -3.0}),  # weight > act: an I grows
])
def test_each_compute_op_allocates_or_frees_its_share(act, weight, expected):
    assert {op: op_delta(op, act, weight) for op in COMPUTE} == expected
    assert op_delta(Op.B, act, weight) == op_delta(Op.I, act, weight) + op_delta(Op.W, act, weight)


@pytest.mark.parametrize("op", [op for op in Op if op not in COMPUTE])
def test_communication_and_stage_ops_hold_no_activation(op):
    assert op_delta(op, 3.0, 1.0) == 0.0 and allocated(op, 3.0, 1.0) == 0.0 and freed(op, 3.0, 1.0) == 0.0


def test_a_step_allocates_first_and_frees_as_it_ends():
    assert [allocated(op, 3.0, 1.0) for op in COMPUTE] == [3.0, 0.0, 0.0, 0.0]
    assert [freed(op, 3.0, 1.0) for op in COMPUTE] == [0.0, 3.0, 2.0, 1.0]
    assert freed(Op.I, 1.0, 3.0) == -2.0  # an I that grows does so as its step ends


def test_a_forward_only_forward_frees_what_it_allocated_as_its_step_ends():
    assert allocated(Op.F, 2.5, 1.0) == freed(Op.F, 2.5, 1.0, forward_only=True) == 2.5
    assert freed(Op.F, 2.5, 1.0) == 0.0  # training keeps it for the backward


@pytest.mark.parametrize(("ops", "act", "weight", "unit", "deltas"), [
    ((Op.F, Op.B), Fraction(1, 4), Fraction(1, 4), Fraction(1, 4), {Op.F: 1, Op.B: -1}),
    (COMPUTE, 1, 1, 1, {Op.F: 1, Op.B: -1, Op.I: 0, Op.W: -1}),  # prove's live activations
    (COMPUTE, 3, 1, 1, {Op.F: 3, Op.B: -3, Op.I: -2, Op.W: -1}),
    (COMPUTE, Fraction(3, 2), 1, Fraction(1, 2), {Op.F: 3, Op.B: -3, Op.I: -1, Op.W: -2}),
    ((Op.F,), 0, 0, 1, {Op.F: 0}),  # nothing moves: one, by convention
])
def test_whole_deltas_are_the_deltas_in_the_largest_whole_unit(ops, act, weight, unit, deltas):
    assert whole_deltas(ops, act, weight) == (unit, deltas)


@given(st.integers(1, 6), st.integers(0, 6), st.lists(st.integers(0, 5), min_size=4, max_size=4))
def test_count_groups_count_what_the_deltas_count(act, weight, counts):
    """Held = sum of each group's delta x its ops' actions so far, for any numbers of actions."""
    _, deltas = whole_deltas(COMPUTE, act, weight)
    n = dict(zip(COMPUTE, counts))
    groups = count_groups(deltas)
    assert sum(d * sum(n[op] for op in ops) for ops, d in groups) == sum(deltas[op] * n[op] for op in COMPUTE)
    assert all(d for _, d in groups)


def test_count_groups_without_a_split_backward_count_forwards_and_backwards():
    assert count_groups({Op.F: 1, Op.B: -1}) == [((Op.F,), 1), ((Op.B,), -1)]
    assert count_groups({Op.F: 1, Op.B: -1, Op.I: 0, Op.W: -1}) == [((Op.F,), 1), ((Op.B, Op.W), -1)]


@given(st.lists(st.tuples(st.integers(-4, 4), st.sampled_from([True, False, "x"])), max_size=6), st.integers(-3, 9))
def test_held_within_is_the_sum_within_the_cap_in_every_assignment(changes, cap):
    """A solver literal is a name here, its negation ("not", name): the terms hold exactly when the sum does."""
    named = [(d, f"v{i}" if h == "x" else h) for i, (d, h) in enumerate(changes)]
    terms, bound = held_within(named, cap, lambda v: ("not", v))
    names = [v for _, v in named if isinstance(v, str)]
    for values in product((False, True), repeat=len(names)):
        world = dict(zip(names, values))

        def holds(v):
            return not world[v[1]] if isinstance(v, tuple) else (world[v] if isinstance(v, str) else v)
        summed = sum(d for d, v in named if holds(v))
        assert (summed <= cap) == (sum(w for v, w in terms if holds(v)) <= bound)
    assert all(w > 0 for _, w in terms)


def _with_outs(program, outs):
    sizes = tuple(StageMemory(act=2.0, weight=1.0, out=o) for o in outs)
    return replace(program, annotations=replace(program.annotations, stage_memory=sizes))


def test_a_message_weighs_the_output_of_the_stage_below_the_boundary_it_crosses():
    program = _with_outs(schedc.load("1f1b", {"P": 4, "M": 4}), (10.0, 11.0, 12.0, 13.0))
    # an activation from stage 1 to 2: stage 1's output, at both ends
    assert message_stage(Action(Op.SEND_F, 1, 0)) == message_stage(Action(Op.RECV_F, 2, 0)) == 1
    assert message_size(program, Action(Op.SEND_F, 1, 0)) == message_size(program, Action(Op.RECV_F, 2, 0)) == 11.0
    # a gradient from stage 2 to 1: the gradient of stage 2's input, shaped as stage 1's output
    assert message_stage(Action(Op.SEND_B, 2, 0)) == message_stage(Action(Op.RECV_B, 1, 0)) == 1
    assert message_size(program, Action(Op.SEND_B, 2, 0)) == message_size(program, Action(Op.RECV_B, 1, 0)) == 11.0


@pytest.mark.parametrize("name", ["1f1b", "interleaved_1f1b", "zb_h1"])
def test_a_send_and_its_receive_weigh_the_same(name):
    """Each message a compute action's output travels as (deps.message) weighs the same at both ends."""
    program = _with_outs(schedc.load(name, {"P": 2, "M": 4}), (1.0, 2.0, 3.0, 4.0))
    pairs = [message(a, program.placement, program.num_stages) for steps in program.ranks
             for st_ in steps for a in st_.parts]
    pairs = [p for p in pairs if p is not None]
    assert pairs and all(message_size(program, s) == message_size(program, r) for s, r in pairs)


def _summed_along(steps, sizes, forward_only=False) -> float:
    """The rule summed along one rank's list: each step's allocations, its peak, then its frees."""
    live = peak = 0.0
    for st_ in steps:
        live += sum(allocated(a.op, *sizes[a.stage]) for a in st_.parts)
        peak = max(peak, live)
        live -= sum(freed(a.op, *sizes[a.stage], forward_only) for a in st_.parts)
    return peak


@FAST
@given(st.one_of(programs(split_backward=None, memory=True), programs(split_backward=None, memory=True, overlap=True)))
def test_the_rule_summed_along_each_rank_is_checks_peak(program):
    """For a compute-level program under rendezvous without message sizes, check's worst case is
    the rule summed along each rank's list (no run holds anything else)."""
    mems = [program.annotations.memory_of(s) for s in range(program.num_stages)]
    sizes = [(m.act, m.weight) for m in mems]
    summed = [_summed_along(steps, sizes) for steps in program.ranks]
    assert list(peak_activation(program)) == pytest.approx(summed)
    quiet = replace(program, annotations=replace(program.annotations, stage_memory=tuple(
        StageMemory(act=m.act, weight=m.weight, out=0.0) for m in mems)))
    assert [max(during, default=0.0) for during, _ in step_memory(quiet)] == pytest.approx(summed)
    assert [p.memory for p in schedc.check(quiet).peak_memory] == pytest.approx(summed)


def test_a_forward_only_program_holds_one_forward_at_a_time():
    program = _with_outs(schedc.load("1f1b", {"P": 2, "M": 3}), (2.0, 2.0))
    forwards = replace(program, ranks=tuple(tuple(st_ for st_ in steps if st_.parts[0].op is Op.F)
                                            for steps in program.ranks), forward_only=True)
    sizes = [(2.0, 1.0)] * forwards.num_stages
    summed = [_summed_along(steps, sizes, forward_only=True) for steps in forwards.ranks]
    assert summed == [2.0, 2.0] == list(peak_activation(forwards))
