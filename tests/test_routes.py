"""Routes: microbatches that run through some of the stages (DualPipe's two directions).

The language (`route microbatches A .. B: stages C .. D`, its errors, printing and reading back),
the dependency rule at a route's ends (schedc/rules/deps.py), the structure check (`off-route`,
`bad-comm` across routes), every engine on generated routed programs and their variants (the
verifier and the independent plain run of tests/oracles.py give one verdict, and under rendezvous
the Z3 engine and the simulator too; both fast paths clear only what the detailed checks clear),
the exports (IR JSON keeps
routes, torch's CSV refuses them), memory (weights held per copy), and the built-in `dualpipe`
against DeepSeek's `dualpipe.py` order (tests/deepseek_dualpipe.py). Its runs on gloo are in
tests/test_runtime.py's launch.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

import schedc
from schedc.api import load_text
from schedc.errors import SchedcError
from schedc.interop.ir_json import dumps_ir, read_ir_json
from schedc.ir import Action, Op, Program, Route, format_step
from schedc.lint import lint
from schedc.passes import lower
from schedc.report import run_checks
from schedc.rules import deps
from schedc.rules.memory import weights_of_stages
from schedc.rules.semantics import Semantics
from schedc.simulate import simulate
from schedc.strategies import lowered_programs, mutations, programs, reorderings
from schedc.verify.fast import quick_check

from deepseek_dualpipe import deepseek_order
from oracles import comms_oracle_problems, oracle_problems, plain_run
from profiles import budget

TWO_WAYS = """schedule two_ways {
  stages 4
  place vshape
  route microbatches 0 .. 1: stages 0 .. 2
  route microbatches 1 .. 2: stages 2 .. 4
  rank 0: 0F0 3F1 3B1 0B0
  rank 1: 2F1 1F0 1B0 2B1
}
"""


def _codes(report) -> set[str]:
    return {d.code for d in report.errors}


# ---- the language ----
@given(st.integers(1, 6), st.integers(1, 4), st.data())
@settings(max_examples=40, deadline=None)
def test_a_route_prints_as_the_line_that_declares_it_and_reads_back(M, L, data):
    cut = data.draw(st.integers(1, M - 1)) if M > 1 else None
    routes = (Route((0, cut), (0, L)), Route((cut, M), (L, 2 * L))) if cut else (Route((0, M), (0, L)),
                                                                                 Route((0, 0), (L, 2 * L)))
    text = (f"schedule s {{\n  stages {2 * L}\n  microbatches {M}\n  ranks 1\n"
            + "".join(f"  {r}\n" for r in routes) + "  rank 0: 0F0\n}\n")
    if not cut:  # one microbatch: the second route is empty, an error at its line
        with pytest.raises(SchedcError) as info:
            load_text(text, "s.pp")
        assert info.value.code == "route" and "s.pp:6:3" in info.value.render()
        return
    program = load_text(text, "s.pp")
    assert program.routes == routes and program.model_stages == L
    assert [str(r) for r in program.routes] == [line.strip() for line in text.splitlines() if "route" in line]
    assert read_ir_json(dumps_ir(program)) == program


def test_routes_are_expressions_of_the_parameters_and_one_route_over_every_stage_is_none():
    program = schedc.load("dualpipe", {"P": 6, "M": 14})
    assert program.routes == (Route((0, 7), (0, 6)), Route((7, 14), (6, 12)))
    assert program.model_stages == 6
    every = load_text("schedule e(P = 2, M = 2) {\n stages 2\n place loop\n route microbatches 0 .. M: stages 0 .. 2\n"
                      " rank r { for m in 0 .. M { F(r, m) }\n for m in 0 .. M { B(r, m) } }\n}\n", "e.pp")
    assert every.routes == () and schedc.check(every).ok


@pytest.mark.parametrize("route, why", [
    ("route microbatches 2 .. 4: stages 2 .. 5", "not a non-empty range in 0 .. 4"),
    ("route microbatches 2 .. 2: stages 2 .. 4", "not a non-empty range"),
    ("route microbatches 2 .. 4: stages 1 .. 4", "runs 3 stages and the first runs 2"),
    ("route microbatches 1 .. 4: stages 2 .. 4", "microbatch 1 is on route 1 already"),
    ("route microbatches 3 .. 4: stages 2 .. 4", "microbatch 2 is on no route"),
    ("route microbatches 2 .. 4: stages 0 .. 2", "stage 2 is on no route"),
    ("route microbatches 2 .. 4: stages 1 .. 3", "overlap the stages 0 .. 2 of route 1"),
])
def test_a_route_that_does_not_fit_is_an_error_at_its_line(route, why):
    text = (f"schedule r(P = 2, M = 4) {{\n  stages 4\n  place vshape\n  route microbatches 0 .. 2: stages 0 .. 2\n"
            f"  {route}\n  rank r {{ F(r, 0) }}\n}}\n")
    with pytest.raises(SchedcError) as info:
        load_text(text, "r.pp")
    err = info.value
    assert err.code == "route" and why in err.render(), err.render()
    assert "r.pp:5:3: error[route]" in err.render() and "^^^" in err.render()


def test_next_counts_the_microbatches_that_run_through_its_stage():
    text = ("schedule n(P = 2, M = 6) {\n  stages 4\n  place vshape\n  route microbatches 0 .. 2: stages 0 .. 2\n"
            "  route microbatches 2 .. 6: stages 2 .. 4\n"
            "  rank r {\n    for k in 0 .. 2 { F(r, next) }\n    for k in 0 .. 4 { F(3 - r, next) }\n"
            "    for k in 0 .. 4 { B(3 - r, next) }\n    for k in 0 .. 2 { B(r, next) }\n  }\n}\n")
    program = load_text(text, "n.pp")
    assert [format_step(s) for s in program.ranks[0]][:6] == ["0F0", "0F1", "3F2", "3F3", "3F4", "3F5"]
    assert [format_step(s) for s in program.ranks[1]][:6] == ["1F0", "1F1", "2F2", "2F3", "2F4", "2F5"]
    assert _codes(schedc.check(program)) <= {"deadlock"}  # the order is nonsense; the numbering is right
    assert not lint(program)


# ---- the rule at a route's ends ----
def test_a_routes_first_stage_reads_the_inputs_and_its_last_computes_the_loss():
    program = load_text(TWO_WAYS, "two_ways.pp")
    stages = deps.stages_of(program)
    assert deps.needs(Action(Op.F, 2, 1), stages) == ()  # stage 1 exists, but not on microbatch 1's route
    assert deps.needs(Action(Op.F, 3, 1), stages) == (("act", 2, 1),)
    assert deps.needs(Action(Op.B, 1, 0), stages) == (("act", 1, 0),)  # the last of its route: the loss
    assert deps.needs(Action(Op.I, 2, 1), stages) == (("act", 2, 1), ("grad", 3, 1))
    assert deps.consumer_stage(Action(Op.F, 1, 0), stages) is None
    assert deps.consumer_stage(Action(Op.F, 2, 1), stages) == 3
    assert deps.consumer_stage(Action(Op.B, 2, 1), stages) is None
    assert deps.message(Action(Op.F, 2, 1), program.placement, stages) == (
        Action(Op.SEND_F, 2, 1), Action(Op.RECV_F, 3, 1))
    assert deps.message(Action(Op.F, 1, 0), program.placement, stages) is None  # no message across routes
    assert [deps.model_stage(stages, s) for s in range(4)] == [0, 1, 0, 1]
    assert [deps.visits(stages, s, 0) for s in range(4)] == [True, True, False, False]
    assert deps.needs(Action(Op.F, 2, 1), 4) == (("act", 1, 1),)  # without routes, as it always was


def test_actions_off_a_route_and_messages_across_routes_are_findings():
    program = load_text(TWO_WAYS, "two_ways.pp")
    assert schedc.check(program).ok
    off = program.with_ranks([program.ranks[0], (*program.ranks[1], Action(Op.F, 2, 0))])
    assert {d.code for d in lint(off)} == {"off-route"}
    across = lower(program).with_ranks([(*lower(program).ranks[0],), (*lower(program).ranks[1], Action(Op.SEND_F, 1, 0))])
    found = {d.code: d.message for d in lint(across)}
    assert "bad-comm" in found and "on its route (stages 0 .. 1)" in found["bad-comm"]
    bad = Program("bad", 2, 4, 2, (0, 1, 1, 0), program.ranks, routes=(Route((0, 1), (0, 2)),))
    assert {d.code for d in lint(bad)} == {"route"}


def test_routes_survive_the_ir_json_and_the_lowering_and_torchs_csv_refuses_them(run_cli, tmp_path):
    program = schedc.load("dualpipe", {"P": 4, "M": 8})
    assert read_ir_json(dumps_ir(program)) == program
    low = lower(program)
    assert low.routes == program.routes and read_ir_json(dumps_ir(low)) == low and schedc.check(low).ok
    data = json.loads(dumps_ir(program))
    data["routes"][1][0] = 5  # microbatch 4 on no route
    with pytest.raises(SchedcError) as info:
        read_ir_json(json.dumps(data))
    assert info.value.code == "ir-json" and "microbatch 4 is on no route" in info.value.render()
    code, out, err = run_cli("export", "dualpipe", "--to", "torch-csv")
    assert code == 2 and "error[usage]" in err and "routes" in err and "--to ir-json" in err
    with pytest.raises(SchedcError):
        schedc.to_torch_csv(program, "compute")
    code, out, err = run_cli("check", "dualpipe", "--json")
    report = json.loads(out)
    assert code == 0 and report["routes"] == [{"microbatches": [0, 4], "stages": [0, 4]},
                                              {"microbatches": [4, 8], "stages": [4, 8]}]


def test_the_runtime_table_reads_the_routes_and_refuses_a_route_that_does_not_fit():
    from schedc.lower import table_of
    from schedc.runtime.table import TableError, load_table
    table = table_of(lower(schedc.load("dualpipe", {"P": 2, "M": 4})))
    assert table.routes == ((0, 2, 0, 2), (2, 4, 2, 4)) and table.model_stages == 2
    assert [table.is_entry(s) for s in range(4)] == [True, False, True, False]
    assert [table.is_exit(s) for s in range(4)] == [False, True, False, True]
    assert table.copies() == {0: (0, 2), 1: (1, 3)}
    meta, ranks = table.to_data()
    meta["routes"] = [[0, 2, 0, 2], [2, 4, 1, 3]]
    with pytest.raises(TableError, match="overlap"):
        load_table(meta, ranks)


def test_each_copy_holds_its_model_stages_weights():
    program = schedc.load("dualpipe", {"P": 4, "M": 8})
    assert weights_of_stages(program, [10, 20, 30, 40]) == [10, 20, 30, 40, 10, 20, 30, 40]
    from schedc.hardware import describe
    setup = describe(model="llama2-7b", hardware="h100-80gb")
    v = schedc.load("dualpipev", {"P": 4, "M": 8})
    twice, once = setup.rank_params(program), setup.rank_params(v)
    assert sum(twice) == pytest.approx(2 * sum(once), rel=0.02)  # the model's weights, twice


def test_every_stage_of_a_route_takes_a_whole_chunk_by_default():
    dp, dpv = schedc.load("dualpipe", {"P": 4, "M": 8}), schedc.load("dualpipev", {"P": 4, "M": 8})
    assert {c.F for c in dp.annotations.stage_costs} == {1.0} and {c.F for c in dpv.annotations.stage_costs} == {0.5}
    # one microbatch is the same work in both: P forwards of a rank-sized chunk
    busy = sum(simulate(dp).busy)
    assert busy == pytest.approx(sum(simulate(dpv).busy))


# ---- DeepSeek's order ----
@pytest.mark.parametrize("P", [2, 4, 6, 8])
def test_dualpipe_is_deepseeks_order(P):
    for M in range(2 * P, 2 * P + 9, 2):
        program = schedc.load("dualpipe", {"P": P, "M": M})
        assert [[format_step(s) for s in steps] for steps in program.ranks] == deepseek_order(P, M), (P, M)


def test_dualpipe_checks_under_both_engines_and_the_backends_and_its_settings_are_deepseeks():
    for P, M in ((2, 4), (4, 8), (4, 10), (6, 12)):
        program = schedc.load("dualpipe", {"P": P, "M": M})
        for engine in ("native", "z3"):
            report = schedc.check(program, engine=engine)
            assert report.ok, report.render()
        assert list(report.peak_activation) == [P + 1] * P  # DualPipe's activation memory, PP + 1 (DeepSeek-V3, table 2)
        low = lower(program)
        for sem in ("rendezvous", "eager", "nccl", "gloo"):
            assert schedc.check(low, semantics=sem).ok, (P, M, sem)
    for P, M in ((3, 6), (4, 6), (4, 9)):
        with pytest.raises(SchedcError) as info:
            schedc.load("dualpipe", {"P": P, "M": M})
        assert info.value.code == "require"


# ---- engines on generated routed programs ----
ROUTED = programs(routes=True, overlap=True, max_ranks=4, max_microbatches=5, placements=("loop", "vshape", "table"))
SEMANTICS = ["rendezvous", "eager", "bounded:1"]


BUILT = [lower(schedc.load("dualpipe", {"P": P, "M": M})) for P, M in ((2, 4), (4, 8))]


def _receives_first(program: Program) -> Program:
    """Every receive moved to the start of its rank (a rank then waits for what it has not asked for)."""
    def is_recv(step):
        return step.parts[0].op in (Op.RECV_F, Op.RECV_B)
    return program.with_ranks([[x for x in steps if is_recv(x)] + [x for x in steps if not is_recv(x)]
                               for steps in program.ranks])


def _variants():
    """Generated routed programs at both levels, as they are, moved, dropped or repeated, with their
    receives first, and the built-in `dualpipe` lowered and moved."""
    lowered = lowered_programs(routes=True, max_ranks=3, max_microbatches=4, placements=("loop", "vshape", "table"))
    return st.one_of(
        ROUTED, lowered,
        ROUTED.flatmap(reorderings).map(lambda m: m.program),
        lowered.flatmap(reorderings).map(lambda m: m.program),
        lowered.flatmap(lambda p: mutations(p, kinds=("drop", "duplicate", "bad-index"))).map(lambda m: m.program),
        st.sampled_from(BUILT).flatmap(lambda p: reorderings(p, max_moves=4)).map(lambda m: m.program),
        lowered.map(_receives_first),
    )


@settings(max_examples=60, deadline=None)
@given(ROUTED)
def test_generated_routed_programs_check_ok_and_lower_to_programs_that_do(program):
    assert program.routes and oracle_problems(program) == []
    report = schedc.check(program)
    assert report.ok, report.render()
    low = lower(program)
    assert comms_oracle_problems(low) == [] and schedc.check(low).ok
    assert read_ir_json(dumps_ir(low)) == low
    timeline = simulate(program)
    assert timeline.mismatches == 0 and len(timeline.messages) == sum(
        1 for _, _, a in program.actions()
        if deps.remote_consumer(a, program.placement, deps.stages_of(program)) is not None)


COUNTED = {"finishes": 0, "deadlocks": 0, "broken": 0}


def test_verifier_z3_simulator_and_plain_run_agree_on_routed_programs():
    """At least 150 routed programs and variants, a fair share finishing, deadlocking and broken."""
    COUNTED.update(finishes=0, deadlocks=0, broken=0)
    _agree()
    assert sum(COUNTED.values()) >= 150 and min(COUNTED.values()) >= 5, COUNTED


@settings(budget(150), derandomize=True, database=None)  # (the same examples each run: the counts above hold)
@given(_variants(), st.sampled_from(SEMANTICS))
def _agree(program, semantics):
    report = schedc.check(program, semantics=semantics)
    if lint(program):
        assert not report.ok
        COUNTED["broken"] += 1
        return
    pc = plain_run(program, semantics)
    finished = all(pc[r] == len(s) for r, s in enumerate(program.ranks))
    COUNTED["finishes" if finished else "deadlocks"] += 1
    assert (report.deadlock is None) == finished, report.render()
    if semantics == "rendezvous":  # (Z3 and the simulator: under rendezvous, the simulator's semantics)
        assert (schedc.check(program, semantics=semantics, engine="z3").deadlock is None) == finished
        try:
            simulate(program)
            timed = True
        except SchedcError as e:
            assert e.code == "deadlock", e.render()
            timed = False
        assert timed == finished


@budget(150)
@given(_variants(), st.sampled_from(["rendezvous", "eager"]))
def test_the_fast_paths_clear_only_what_the_detailed_checks_clear_with_routes(program, semantics):
    """Both fast paths (plain Python for small programs, arrays for large), asked alike."""
    sem = Semantics.parse(semantics)
    detailed = None
    for clear in (quick_check(program, sem, None), _array_check(program, sem)):
        if clear is not None:
            detailed = detailed or run_checks(program, semantics=sem, fast=False)
            assert detailed.ok is True, detailed.render()
            assert clear.peak_activation == detailed.peak_activation


def _array_check(program, sem):
    """The array path, where `quick_check` would ask it (it hands over what it does not take)."""
    from schedc.verify.fast import array_check
    if sem.posted or sem.channel_buffer or program.forward_only or any(m.out for m in program.annotations.stage_memory):
        return None
    return array_check(program, sem, None)


def test_both_fast_paths_clear_dualpipe_at_both_levels():
    from schedc.verify.fast import array_check
    for P, M in ((2, 4), (4, 8), (4, 16)):
        program = schedc.load("dualpipe", {"P": P, "M": M})
        for p in (program, lower(program)):
            want = run_checks(p, fast=False).peak_activation
            for clear in (quick_check(p, Semantics(), None), array_check(p, Semantics(), None)):
                assert clear is not None and clear.peak_activation == want, (P, M, p.level)


@settings(max_examples=40, deadline=None)
@given(programs(routes=True, max_ranks=4, max_microbatches=5, placements=("loop", "vshape", "table"), costs=True))
def test_the_one_pass_simulator_times_routed_programs_as_the_step_by_step_one(program):
    """simulate_columns.py asks the simulator's plans once per (op, stage): with routes too, each
    stage's plan is its route's, so the two timelines agree to the bit."""
    from schedc.columns import held_as_columns
    from schedc.simulate import _Simulator
    from schedc.simulate_columns import run_columns
    held = held_as_columns(program)
    fast = run_columns(_Simulator(held, True, {}))
    slow = _Simulator(program, True, {}).run()
    assert fast is not None and (fast.start, fast.end, fast.makespan) == (slow.start, slow.end, slow.makespan)


def test_order_greedy_orders_a_routed_schedule():
    text = ("schedule g(P = 2, M = 4) {\n  stages 4\n  place vshape\n  route microbatches 0 .. 2: stages 0 .. 2\n"
            "  route microbatches 2 .. 4: stages 2 .. 4\n  order greedy(prefer = [B, F], memory = 2)\n"
            "  rank r {\n    for m in 0 .. 2 { F(r, m); F(3 - r, 2 + m) }\n"
            "    for m in 0 .. 2 { B(r, m); B(3 - r, 2 + m) }\n  }\n}\n")
    program = load_text(text, "g.pp")
    report = schedc.check(program)
    assert report.ok and max(report.peak_activation) <= 2, report.render()
