"""The happens-before graph (schedc/verify/graph.py) on its own: the edges of small hand-written
programs, read off docs/semantics.md's rules one by one; a cycle for a known deadlock and none for a
known-good schedule; and, on generated programs, "the program finishes iff its graph has no cycle
and no wait nothing can meet", with the cycle found here by a topological sort written for this
test, held to the executor (schedc/verify/execute.py) and to the independent oracles of
tests/oracles.py."""
from __future__ import annotations

from graphlib import CycleError, TopologicalSorter

import pytest
from hypothesis import HealthCheck, given, settings

from schedc.ir import Op
from schedc.rules.semantics import Semantics
from schedc.strategies import lowered_programs, mutations, programs, reorderings
from schedc.verify.channels import channels
from schedc.verify.execute import execute
from schedc.verify.graph import Constraints, Edge, constraints

from conftest import compile_text
from oracles import plain_run, posted_run

ABSTRACT = ("rendezvous", "eager", "bounded:1", "bounded:2")
BACKENDS = ("gloo", "nccl")


def graph_of(program, semantics: str) -> Constraints:
    return constraints(program, Semantics.parse(semantics), channels(program, Semantics.parse(semantics)))


def data_edges(c: Constraints) -> set[tuple]:
    """The edges other than program order, as (after, before, why)."""
    return {(e.after, e.before, e.why) for e in c.edges() if e.why != "order"}


def cycle(c: Constraints) -> list | None:
    """A cycle of the graph (its steps, and each rank's end of step under a backend), or None."""
    graph: dict = {}
    for e in c.edges():
        graph.setdefault(e.after, set()).add(e.before)
    for r, waits in enumerate(c.ends):
        end = ("end", r)
        graph.setdefault(end, set())
        if c.prereq[r]:
            graph[end].add((r, len(c.prereq[r]) - 1))
        graph[end].update((w.node, w.on_step) for w in waits if w.node is not None and w.on_step >= 0)
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        return exc.args[1]
    return None


def finishes(c: Constraints) -> bool:
    """The program finishes iff its graph has no cycle and no wait that nothing meets."""
    return cycle(c) is None and not c.impossible()


def inverted(program) -> bool:
    """Does a step need a value that a later step of its own rank makes (a send before the action
    that makes its value, B before its F)? Written from docs/semantics.md's dependency rule."""
    made = {Op.F: "act", Op.B: "grad", Op.I: "grad", Op.RECV_F: "act", Op.RECV_B: "grad"}
    offset = {Op.RECV_F: -1, Op.RECV_B: 1}
    S = program.num_stages
    for steps in program.ranks:
        where = {}
        for i, step in enumerate(steps):
            for a in step.parts:
                if a.op in made:
                    where.setdefault((made[a.op], a.stage + offset.get(a.op, 0), a.microbatch), i)
        for i, step in enumerate(steps):
            for a in step.parts:
                s, m = a.stage, a.microbatch
                backward = [("act", s, m)] + ([("grad", s + 1, m)] if s < S - 1 else [])
                need = {Op.F: [("act", s - 1, m)] if s > 0 else [], Op.B: backward, Op.I: backward,
                        Op.W: [("grad", s, m)], Op.SEND_F: [("act", s, m)], Op.SEND_B: [("grad", s, m)]}.get(a.op, [])
                if any(where.get(v, -1) >= i for v in need):
                    return True
    return False


TWO_STAGES = """schedule two {
  rank 0: 0F0 0SEND_F0 0RECV_B0 0B0
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
}"""


# ---- edges of hand-written programs ----
def test_program_order_is_an_edge_between_consecutive_steps_of_a_rank():
    c = graph_of(compile_text(TWO_STAGES), "rendezvous")
    order = {(e.after, e.before) for e in c.edges() if e.why == "order"}
    assert order == {((r, i + 1), (r, i)) for r in (0, 1) for i in range(3)}


def test_compute_level_edges_are_the_values_made_on_another_rank():
    program = compile_text("schedule c {\n  rank 0: 0F0 0F1 0B0 0B1\n  rank 1: 1F0 1B0 1F1 1B1\n}")
    assert program.level == "compute"
    c = graph_of(program, "rendezvous")
    # F(1,m) needs F(0,m)'s activation; B(0,m) needs B(1,m)'s gradient; nothing else crosses ranks
    assert data_edges(c) == {((1, 0), (0, 0), "data"), ((1, 2), (0, 1), "data"),
                             ((0, 2), (1, 1), "data"), ((0, 3), (1, 3), "data")}
    assert not c.never and finishes(c)


def test_rendezvous_edges():
    c = graph_of(compile_text(TWO_STAGES), "rendezvous")
    assert data_edges(c) == {
        ((1, 0), (0, 0), "send-posted"),  # RECV_F(1,0) completes once SEND_F(0,0) is posted: after F(0,0)
        ((0, 2), (1, 2), "send-posted"),  # RECV_B(0,0) once SEND_B(1,0) is posted: after B(1,0)
        ((1, 3), (0, 1), "recv-posted"),  # SEND_B(1,0) once RECV_B(0,0) is posted: after SEND_F(0,0)
    }
    # SEND_F(0,0) waits for RECV_F(1,0), rank 1's first step: posted at its start, which is no edge
    assert c.starts == {(0, 1): [1]}
    assert not c.never and finishes(c)


@pytest.mark.parametrize("semantics", ["eager", "bounded:1"])
def test_a_buffered_send_waits_for_nothing_when_its_channel_has_room(semantics):
    c = graph_of(compile_text(TWO_STAGES), semantics)
    assert data_edges(c) == {((1, 0), (0, 0), "send-posted"), ((0, 2), (1, 2), "send-posted")}
    assert not c.starts and finishes(c)


HEAD_TO_HEAD = """schedule h {
  rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
}"""


def test_a_bounded_channel_pairs_the_kth_send_with_the_receive_k_minus_the_buffer():
    c = graph_of(compile_text(HEAD_TO_HEAD), "bounded:1")
    # SEND_F(0,1), the second send on 0 -> 1, waits until the first receive, RECV_F(1,0), is posted:
    # rank 1's first step, so a wait for its start
    assert c.starts == {(0, 3): [1]}
    # SEND_B(1,1), the second on 1 -> 0, waits for RECV_B(0,0)'s posting: SEND_F(0,1) done
    assert ((1, 7), (0, 3), "buffer") in data_edges(c)
    assert finishes(c)


def test_two_sends_head_to_head_are_a_cycle_under_rendezvous_and_nccl_only():
    program = compile_text(HEAD_TO_HEAD)
    c = graph_of(program, "rendezvous")
    found = cycle(c)
    assert found is not None
    # SEND_F(0,1) waits for RECV_F(1,1) to be posted, after SEND_B(1,0), which waits for
    # RECV_B(0,0) to be posted, after SEND_F(0,1)
    assert {(0, 3), (1, 3)} <= set(found)
    assert not execute(program, Semantics.parse("rendezvous")).finished
    # under nccl the same wait goes round the two streams: SEND_F(0,1) meets RECV_F(1,1) only once
    # SEND_B(1,0), ahead of it on rank 1's stream, has met RECV_B(0,0), behind SEND_F(0,1) on rank 0's
    nccl = graph_of(program, "nccl")
    assert cycle(nccl) is not None and not execute(program, Semantics.parse("nccl"), cons=nccl).finished
    for semantics in ("eager", "bounded:1", "gloo"):
        assert finishes(graph_of(program, semantics)), semantics
        assert execute(program, Semantics.parse(semantics)).finished, semantics


def test_receiving_before_sending_on_both_ranks_is_a_cycle_under_every_semantics():
    program = compile_text("""schedule r {
  rank 0: 0F0 0RECV_B0 0SEND_F0 0B0
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
}""")
    for semantics in ABSTRACT:
        c = graph_of(program, semantics)
        found = cycle(c)
        # RECV_B(0,0) waits for SEND_B(1,0)'s posting, after RECV_F(1,0), which waits for
        # SEND_F(0,0)'s posting, after RECV_B(0,0)
        assert found is not None and {(0, 1), (1, 0)} <= set(found), semantics
        assert not execute(program, Semantics.parse(semantics)).finished


PREFETCH = """schedule prefetch {
  rank 0: 0RECV_B0 0F0 0SEND_F0 0B0
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
}"""


def test_an_early_receive_completes_on_gloo_and_is_a_cycle_through_the_nccl_streams():
    program = compile_text(PREFETCH)
    gloo = graph_of(program, "gloo")
    assert gloo.posted and not gloo.lanes
    # a posted receive never blocks its rank; the action that needs its value waits for its send's posting
    assert ((0, 3), (1, 3), "send-posted") in data_edges(gloo)
    assert ((1, 1), (0, 2), "send-posted") in data_edges(gloo)
    assert finishes(gloo)
    nccl = graph_of(program, "nccl")
    assert [(lane.rank, lane.peer, len(lane.steps)) for lane in nccl.lanes] == [(0, 1, 2), (1, 0, 2)]
    found = cycle(nccl)
    assert found is not None and any(node[0] >= nccl.ranks for node in found if node[0] != "end")
    for semantics in ABSTRACT:
        assert cycle(graph_of(program, semantics)) is not None, semantics


def test_a_receive_without_its_send_is_a_wait_nothing_meets():
    program = compile_text("schedule u {\n  rank 0: 0F0\n  rank 1: 1RECV_F0 1F0\n}")
    c = graph_of(program, "rendezvous")
    assert cycle(c) is None
    assert [(i.step, i.why) for i in c.impossible()] == [((1, 0), "waits for a send that is never posted")]
    assert not finishes(c) and not execute(program).finished


def test_a_known_good_schedule_has_no_cycle_under_any_semantics():
    from schedc.api import load
    from schedc.passes import lower
    for name in ("1f1b", "zb_h1", "interleaved_1f1b"):
        program = load(name, {"P": 4, "M": 8})
        for p in (program, lower(program)):
            for semantics in ABSTRACT + (BACKENDS if p.level == "comms" else ()):
                c = graph_of(p, semantics)
                assert cycle(c) is None and not c.impossible(), (name, p.level, semantics)


def test_every_edge_joins_two_steps_that_exist():
    program = compile_text(HEAD_TO_HEAD)
    for semantics in ABSTRACT + BACKENDS:
        c = graph_of(program, semantics)
        lengths = c.lengths()
        for e in c.edges():
            for n, i in (e.after, e.before):
                assert 0 <= n < len(lengths) and 0 <= i < lengths[n], (semantics, e)
        assert isinstance(next(iter(c.edges())), Edge)


# ---- generated programs: finishes iff acyclic ----
SETTINGS = settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@SETTINGS
@given(programs(max_ranks=3, max_microbatches=4, placements=("loop", "vshape", "table")))
def test_a_generated_program_is_acyclic_under_every_semantics(program):
    for semantics in ABSTRACT:
        c = graph_of(program, semantics)
        assert cycle(c) is None and not c.impossible(), semantics
        assert execute(program, Semantics.parse(semantics)).finished


@settings(SETTINGS, max_examples=100)
@given(lowered_programs(min_ranks=2, max_ranks=3, max_microbatches=4).flatmap(lambda p: reorderings(p, max_moves=2)))
def test_acyclic_iff_the_executor_and_the_oracle_finish_on_reordered_programs(variant):
    program, label = variant
    # the oracles follow messages and values, the graph at this level messages only: a step that
    # needs what its own rank makes later is the structure check's (tests/test_verify.py)
    oracles = not inverted(program)
    for semantics in ABSTRACT + BACKENDS:
        c = graph_of(program, semantics)
        verdict = finishes(c)
        assert verdict == execute(program, Semantics.parse(semantics), cons=c).finished, (semantics, label)
        if not oracles:
            continue
        if semantics in BACKENDS:
            assert verdict == posted_run(program, semantics), (semantics, label)
        else:
            pc = plain_run(program, semantics)
            assert verdict == (pc == [len(steps) for steps in program.ranks]), (semantics, label)


@SETTINGS
@given(programs(max_ranks=3, max_microbatches=4).flatmap(reorderings))
def test_acyclic_iff_the_executor_finishes_on_reordered_compute_programs(variant):
    program, label = variant
    for semantics in ("rendezvous", "eager"):
        c = graph_of(program, semantics)
        assert finishes(c) == execute(program, Semantics.parse(semantics), cons=c).finished, label
        pc = plain_run(program, semantics)
        assert finishes(c) == (pc == [len(steps) for steps in program.ranks]), label


@SETTINGS
@given(lowered_programs(min_ranks=2, max_ranks=3, max_microbatches=3).flatmap(
    lambda p: mutations(p, kinds=("drop", "duplicate", "before-input", "swap-messages"))))
def test_acyclic_iff_the_executor_finishes_on_broken_programs(mutant):
    program, label = mutant
    for semantics in ABSTRACT + BACKENDS:
        c = graph_of(program, semantics)
        assert finishes(c) == execute(program, Semantics.parse(semantics), cons=c).finished, (semantics, label)
