"""Every module that counts activations agrees with schedc/verify/memory.py, on generated programs.

`order greedy`'s cap, synth's peaks, lower bound and Z3 memory sums, and `prove`'s unit count each
call the one rule; these tests hold their figures to `peak_activation` and `step_memory`.
"""
from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings, strategies as st

import schedc
from schedc.errors import SchedcError
from schedc.ir import Op, Program, StageMemory
from schedc.order import greedy_order
from schedc.prove.search import unit_peaks
from schedc.strategies import programs
from schedc.verify.memory import peak_activation, step_memory

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SIZED = dict(split_backward=None, memory=True)
# synth splits every backward and places stages as loop (one chunk) or vshape
SYNTH = dict(split_backward=True, memory=True, max_chunks=1, placements=("loop", "vshape"), max_ranks=3,
             max_microbatches=4)


def _sizes(program: Program, act=None, weight=None) -> Program:
    """The program with every stage's sizes replaced (None: kept), messages weighing nothing."""
    mems = [program.annotations.memory_of(s) for s in range(program.num_stages)]
    stage_memory = tuple(StageMemory(act=m.act if act is None else act,
                                     weight=m.weight if weight is None else weight, out=0.0) for m in mems)
    return replace(program, annotations=replace(program.annotations, stage_memory=stage_memory))


def _greedy(program: Program, prefer, cap):
    try:
        return greedy_order(program, tuple(prefer), cap, None)
    except SchedcError as exc:
        assert exc.code == "order"
        return None


@FAST
@given(programs(**SIZED), st.permutations([Op.F, Op.B, Op.I, Op.W]), st.floats(0, 12))
def test_order_greedy_cap_counts_what_check_counts(program, prefer, cap):
    free = greedy_order(program, tuple(prefer), None, None)
    peak = max(peak_activation(free))
    # a cap at the uncapped order's peak never binds; any cap (so one below the peak) holds
    assert _greedy(program, prefer, peak) == free
    for limit in (peak - 0.5, cap):
        capped = _greedy(program, prefer, limit)
        assert capped is None or max(peak_activation(capped)) <= limit + 1e-9


def _problem(program: Program):
    from schedc.synth.problem import build_problem
    placement = "loop" if program.num_stages == program.num_ranks else "vshape"
    problem = build_problem(program.num_ranks, program.num_microbatches, placement=placement)
    assert problem.program.placement == program.placement
    mems = [program.annotations.memory_of(s) for s in range(program.num_stages)]
    return replace(problem, act=tuple(int(m.act) for m in mems), weight=tuple(int(m.weight) for m in mems))


def _rows(problem, program: Program):
    return [[problem.job(a.op.value, a.stage, a.microbatch) for a in steps] for steps in program.ranks]


@FAST
@given(programs(**SYNTH))
def test_synth_peaks_and_lower_bound_agree_with_check(program):
    from schedc.synth.schedule import peaks_of, to_program
    problem = _problem(program)
    peaks = peak_activation(program)
    counted = peaks_of(problem, to_program(problem, _rows(problem, program)))
    assert counted == peaks and all(type(p) is int for p in counted)
    assert all(problem.minimum(r) <= peaks[r] for r in range(program.num_ranks))


@FAST
@given(programs(**SYNTH), st.data())
def test_synth_memory_sums_refuse_exactly_the_forwards_over_the_cap(program, data):
    from schedc.solver import context
    from schedc.synth.solver import _memory_sums
    caps = tuple(data.draw(st.integers(0, 10), label=f"cap of rank {r}") for r in range(program.num_ranks))
    problem = replace(_problem(program), cap=caps)
    refused = list(_memory_sums(problem, _Order(problem, program), {}, context()))
    during = [d for d, _ in step_memory(_sizes(program))]
    over = [x for r, steps in enumerate(program.ranks) for x, a in enumerate(steps)
            if a.op is Op.F and during[r][x] > caps[r]]
    assert len(refused) == len(over)
    assert all(c.sexpr() == "false" for c in refused)


class _Order:
    """A program's order as synth's precedence graph: every two jobs of a rank are ordered."""

    def __init__(self, problem, program: Program):
        self.position = {u: x for row in _rows(problem, program) for x, u in enumerate(row)}

    def ordered(self, x: int, y: int) -> bool:
        return self.position[x] < self.position[y]


@FAST
@given(st.one_of(programs(**SIZED), programs(**SIZED, overlap=True)))
def test_prove_unit_peaks_are_check_in_unit_sizes(program):
    kinds = [[[a.op.value for a in step.parts] for step in steps] for steps in program.ranks]
    peaks = unit_peaks(kinds)
    assert peaks == list(peak_activation(_sizes(program, act=1.0, weight=1.0)))
    assert all(type(p) is int for p in peaks)


def test_under_a_backend_a_sent_message_is_held_until_its_send_is_waited_for():
    """torch's runtime keeps each isend's work, and with it the tensor, until it waits for the sends
    as the step ends; an explicit WAIT_SEND lets it go there. eager holds it until its receive is posted."""
    from conftest import compile_text
    text = """schedule held {
      memory out = 1
      rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
      rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
    }"""
    waited = text.replace("0SEND_F0 0F1", "0SEND_F0 0WAIT_SEND_F0 0F1").replace(
        "0SEND_F1 0RECV_B0", "0SEND_F1 0WAIT_SEND_F1 0RECV_B0")
    gloo = schedc.check(compile_text(text), semantics="gloo").peak_memory[0]
    assert gloo.memory == 5 and sum("sent message of SEND_F" in item for item in gloo.live) == 2
    # eager holds each until its receive is posted: here both, as rank 1 may start late
    assert schedc.check(compile_text(text), semantics="eager").peak_memory[0].memory == 5
    released = schedc.check(compile_text(waited), semantics="gloo").peak_memory[0]
    assert released.memory == 3 and sum("sent message of" in item for item in released.live) == 1
    from schedc.simulate import simulate
    assert simulate(compile_text(text), semantics="gloo").peak_memory[0] == 5  # the timed run holds them too
    assert simulate(compile_text(waited), semantics="gloo").peak_memory[0] == 3
