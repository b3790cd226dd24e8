"""One semantics (issue 17): every reader of a program gives one answer about it.

On generated programs, valid and mutated: the runtime's table is the program `check` verified and
pairs messages as the checker does; the simulator starts no action before what it needs
(schedc/rules/deps.py) and finishes exactly the programs `check` clears; `check` at the compute level
and at the communication level (its own lowering) agree on structure, deadlock and peak memory.
`prove` against `check` is tests/test_prove_agrees_with_check.py.
"""
from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings, strategies as st

import schedc
from schedc.rules.deps import needs, produces
from schedc.errors import SchedcError
from schedc.ir import Action, Op, Program, format_step
from schedc.lower.codegen import table_of
from schedc.passes import lower
from schedc.runtime.table import parts, partners, to_program
from schedc.simulate import simulate
from schedc.strategies import programs
from schedc.rules.semantics import RENDEZVOUS
from schedc.verify.channels import channels

CHECKS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rows(program: Program) -> list[list[str]]:
    return [[format_step(st) for st in rank] for rank in program.ranks]


@CHECKS
@given(programs(max_ranks=4, max_microbatches=4, split_backward=None, overlap=True))
def test_the_runtime_table_is_the_program_check_verified(p):
    lowered = lower(p)
    table = table_of(lowered)
    assert rows(to_program(table)) == rows(lowered)
    # the runtime pairs the k-th send of a channel with its k-th receive, as the checker does
    pairs = partners(table)
    matched = list(channels(lowered, RENDEZVOUS).pairs())
    assert len(pairs) == 2 * len(matched)
    for send, recv in matched:
        assert pairs[(send.rank, send.step, send.part)][:2] == (recv.rank, recv.step)
        assert pairs[(recv.rank, recv.step, recv.part)][:2] == (send.rank, send.step)
    # what each instruction carries or makes is the one rule's
    for rank in table.ranks:
        for step in rank:
            for i in parts(step):
                if i.microbatch is None:
                    continue
                a = Action(Op[i.op], i.stage, i.microbatch)
                want = produces(a) if a.op.is_compute else schedc.rules.deps.payload(a)
                assert i.value() == want
    # and check says the same of the table as of the program
    assert schedc.check(to_program(table)).ok is schedc.check(lowered).ok is True


@CHECKS
@given(programs(max_ranks=4, max_microbatches=4, split_backward=None, memory=True), st.data())
def test_compute_and_lowered_programs_get_one_answer_and_sim_agrees(p, data):
    # a swap of two steps of one rank: sometimes still valid, sometimes an order error or a deadlock
    r = data.draw(st.integers(0, p.num_ranks - 1), label="rank")
    steps = list(p.ranks[r])
    if len(steps) >= 2:
        x = data.draw(st.integers(0, len(steps) - 2), label="swap at")
        steps[x], steps[x + 1] = steps[x + 1], steps[x]
    q = Program(p.name, p.num_ranks, p.num_stages, p.num_microbatches, p.placement,
                p.ranks[:r] + (tuple(steps),) + p.ranks[r + 1:], p.params, p.annotations)
    compute = schedc.check(q)
    codes = {d.code for d in compute.errors}
    event(f"check: {'ok' if compute.ok else ' '.join(sorted(codes))}")
    try:
        timeline = simulate(q)
    except SchedcError:
        timeline = None
    if compute.ok:
        lowered = schedc.check(lower(q))
        assert lowered.ok is True
        assert [pk.memory for pk in compute.peak_memory] == [pk.memory for pk in lowered.peak_memory]
        assert timeline is not None
        _starts_after_what_it_needs(q, timeline)
        assert all(t <= w + 1e-9 for t, w in zip(timeline.peak_memory, (pk.memory for pk in compute.peak_memory)))
    else:  # a step that waits for its own rank's later step, or a cycle across ranks: no run finishes
        assert codes & {"order", "deadlock"}, codes
        assert timeline is None


def _starts_after_what_it_needs(p: Program, timeline) -> None:
    """No step starts before every value it needs (schedc/rules/deps.py) has been made."""
    made: dict = {}
    for r, rank in enumerate(p.ranks):
        for x, step in enumerate(rank):
            for a in step.parts:
                v = produces(a)
                if v is not None:
                    made[v] = timeline.end[r][x]
    for r, rank in enumerate(p.ranks):
        for x, step in enumerate(rank):
            for a in step.parts:
                for v in needs(a, p.num_stages):
                    if v in made and v not in {produces(b) for b in step.parts}:
                        assert timeline.start[r][x] >= made[v] - 1e-9, (r, x, a, v)
