"""Property-based tests of schedc's core: valid-by-construction programs and their mutations.

`schedc.strategies.programs` builds random *valid* compute-level programs: R ranks, V chunks per
rank placed `s % R` or 2R stages in a V, M microbatches, each stage with a fused or a split
backward; every rank's list comes from one random topological order of the dependency DAG of
DESIGN.md ("Data dependencies"), so the program is valid by construction (no filtering). Such
programs must check ok, survive every text/CSV/JSON round trip, and lower to a comms-level program
that checks ok. Mutations of them are judged against the independent oracles of tests/oracles.py,
not schedc's own checker. Every built-in schedule is compiled at several (P, M, V).
"""
from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schedc
from schedc.api import load_text
from schedc.compiler import compile_schedule
from schedc.errors import SchedcError
from schedc.interop.ir_json import dumps_ir, read_ir_json
from schedc.interop.torch_csv import read_torch_csv, to_torch_csv
from schedc.ir import Action, Op, Program, format_step, parse_step
from schedc.parse import parse
from schedc.passes import lower, lower_for_torch
from schedc.resources import builtin_schedules
from schedc.rules.semantics import Semantics
from schedc.strategies import programs
from schedc.verify.execute import execute

from oracles import compute_only, comms_oracle_problems, oracle_problems

FAST = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


PROGRAMS = programs(overlap=True, placements=("loop", "vshape"))
SMALL = programs(max_ranks=3, max_microbatches=4, overlap=True, placements=("loop", "vshape"))
# Mutated comms-level programs keep to `place loop`, where no two adjacent stages share a rank: the
# fast path of `schedc check` misses a same-rank inversion at the comms level (see
# tests/oracles.py, same_rank_inversion); test_differential.py covers the other placements.
LOOP = programs(overlap=True, placements=("loop",))
SMALL_LOOP = programs(max_ranks=3, max_microbatches=4, overlap=True, placements=("loop",))


def codes(report) -> list[str]:
    return [d.code for d in report.errors]


# ---------------------------------------------------------------------------------------------
# Valid programs
# ---------------------------------------------------------------------------------------------
@FAST
@given(PROGRAMS)
def test_valid_programs_check_ok(p):
    assert oracle_problems(p) == []  # the strategy and the oracle agree
    report = schedc.check(p)
    assert report.ok, report.render()
    assert report.deadlock is None and report.mismatches == []
    json.dumps(report.to_dict())  # the --json report is serialisable
    assert len(report.peak_activation) == p.num_ranks


@FAST
@given(PROGRAMS)
def test_compact_text_round_trips(p):
    rebuilt = []
    for steps in p.ranks:
        row = []
        for step in steps:
            text = format_step(step)
            again = parse_step(text)
            assert again == step, text
            assert format_step(again) == text
            row.append(again)
        rebuilt.append(tuple(row))
    assert p.with_ranks(rebuilt) == p


@FAST
@given(PROGRAMS)
def test_torch_csv_compute_round_trips(p):
    text = to_torch_csv(p, "compute").dumps()
    csv = read_torch_csv(text, "prop.csv")
    back = csv.to_program()
    assert back.ranks == p.ranks
    # every stage appears, so the inferred shape is the real one
    assert (back.num_ranks, back.num_stages, back.num_microbatches, back.placement) == \
        (p.num_ranks, p.num_stages, p.num_microbatches, p.placement)
    assert csv.dumps() == text
    assert read_torch_csv(csv.dumps(), "again.csv").dumps() == text
    _checks_as_a_csv(back, p)


def _checks_as_a_csv(back, p) -> None:
    """The CSV read back checks clean, but where its last stage's forwards run out of microbatch
    order: torch's runtime, whose input it is, would fail it (`torch-loss-order`, at that forward)."""
    from schedc.rules.losses import out_of_order
    report, late = schedc.check(back), out_of_order(p)
    if late is None:
        assert report.ok, report.render()
    else:
        assert [(e.code, e.rank) for e in report.errors] == [("torch-loss-order", late[0])], report.render()


@FAST
@given(PROGRAMS)
def test_torch_csv_comms_round_trips(p):
    lowered = lower_for_torch(p)  # torch's lowering: stage actions, then lower()'s communication
    text = to_torch_csv(p, "comms").dumps()
    back = read_torch_csv(text, "prop.csv").to_program()
    assert back.ranks == lowered.ranks  # lowering makes no groups, so nothing is flattened
    assert back.placement == p.placement
    assert read_torch_csv(text).dumps() == text
    _checks_as_a_csv(back, p)


@FAST
@given(PROGRAMS)
def test_ir_json_round_trips(p):
    text = dumps_ir(p)
    back = read_ir_json(text, "prop.json")
    assert back == p
    assert dumps_ir(back) == text
    lowered = lower(p)
    assert read_ir_json(dumps_ir(lowered)) == lowered


@FAST
@given(PROGRAMS)
def test_lowering_checks_ok_and_keeps_compute_order(p):
    lowered = lower(p)
    if p.num_ranks > 1:  # stages 0 and 1 sit on ranks 0 and 1: something crosses
        assert lowered.level == "comms"
    else:
        assert lowered == p  # one rank: nothing to send
    for before, after in zip(p.ranks, lowered.ranks, strict=True):
        assert compute_only(after) == list(before)
    report = schedc.check(lowered)
    assert report.ok, report.render()
    # each value that crosses ranks is sent exactly once and received exactly once
    sends = Counter((a.op, a.stage, a.microbatch) for _, _, a in lowered.actions() if a.op.is_comm)
    assert all(n == 1 for n in sends.values())
    crossing = 0
    for _, _, a in p.actions():
        if a.op is Op.F and a.stage < p.num_stages - 1 and p.placement[a.stage + 1] != p.placement[a.stage]:
            crossing += 1
        if a.op in (Op.B, Op.I) and a.stage > 0 and p.placement[a.stage - 1] != p.placement[a.stage]:
            crossing += 1
    assert sum(1 for _, _, a in lowered.actions() if a.op.is_comm) == 2 * crossing
    assert lower(lowered) == lowered  # lowering is idempotent


@FAST
@given(PROGRAMS)
def test_execute_finishes(p):
    lowered = lower(p)
    for sem in ("rendezvous", "eager", "bounded:1", "bounded:3"):
        s = Semantics.parse(sem)
        out = execute(p, s)
        assert out.finished, (sem, out.waits)
        assert out.pcs == tuple(len(r) for r in p.ranks)
        out = execute(lowered, s)
        assert out.finished, (sem, out.waits)
        assert out.pcs == tuple(len(r) for r in lowered.ranks)


@FAST
@given(SMALL)
def test_literal_form_compiles_to_same_program(p):
    """A program pasted in the literal form (`rank 0: 0F0 ...`) compiles back to itself."""
    lines = ["schedule pasted {", f"  stages {p.num_stages}", f"  microbatches {p.num_microbatches}",
             "  place [" + ", ".join(map(str, p.placement)) + "]"]
    for r, steps in enumerate(p.ranks):
        lines.append(f"  rank {r}: " + " ".join(format_step(s) for s in steps))
    lines.append("}")
    back = load_text("\n".join(lines) + "\n", "pasted.pp")
    assert back.ranks == p.ranks
    assert (back.num_ranks, back.num_stages, back.num_microbatches, back.placement) == \
        (p.num_ranks, p.num_stages, p.num_microbatches, p.placement)
    assert schedc.check(back).ok


# ---------------------------------------------------------------------------------------------
# Mutations of valid programs
# ---------------------------------------------------------------------------------------------
def _ranks_list(p):
    return [list(r) for r in p.ranks]


@FAST
@given(PROGRAMS, st.data())
def test_swapping_adjacent_steps_is_judged_like_the_oracle(p, data):
    candidates = [r for r, steps in enumerate(p.ranks) if len(steps) >= 2]
    r = data.draw(st.sampled_from(candidates), label="rank")
    i = data.draw(st.integers(0, len(p.ranks[r]) - 2), label="index")
    ranks = _ranks_list(p)
    ranks[r][i], ranks[r][i + 1] = ranks[r][i + 1], ranks[r][i]
    q = p.with_ranks(ranks)
    report = schedc.check(q)  # never raises
    problems = oracle_problems(q)
    if report.ok:
        assert problems == [], problems
        assert execute(q).finished
        low = lower(q)
        assert schedc.check(low).ok
    else:
        # a valid program must not be reported invalid
        assert problems, report.render()
        assert report.errors and all(d.code for d in report.errors)
        report.render()
        json.dumps(report.to_dict())
        with pytest.raises(SchedcError):  # a swap only breaks the order: no comms can be inserted
            lower(q)


@FAST
@given(PROGRAMS, st.data())
def test_dropping_a_step_is_never_ok(p, data):
    r = data.draw(st.sampled_from([r for r, steps in enumerate(p.ranks) if steps]), label="rank")
    i = data.draw(st.integers(0, len(p.ranks[r]) - 1), label="index")
    ranks = _ranks_list(p)
    dropped = ranks[r].pop(i)
    q = p.with_ranks(ranks)
    report = schedc.check(q)
    assert not report.ok, f"dropped {format_step(dropped)} but check says ok"
    assert "missing" in codes(report), codes(report)
    assert oracle_problems(q)
    report.render()
    json.dumps(report.to_dict())


@FAST
@given(PROGRAMS, st.data())
def test_duplicating_a_step_is_never_ok(p, data):
    r = data.draw(st.sampled_from([r for r, steps in enumerate(p.ranks) if steps]), label="rank")
    i = data.draw(st.integers(0, len(p.ranks[r]) - 1), label="index")
    j = data.draw(st.integers(0, len(p.ranks[r])), label="insert at")
    ranks = _ranks_list(p)
    ranks[r].insert(j, ranks[r][i])
    q = p.with_ranks(ranks)
    report = schedc.check(q)
    assert not report.ok, f"duplicated {format_step(ranks[r][j])} but check says ok"
    assert "duplicate" in codes(report), codes(report)
    assert oracle_problems(q)
    report.render()
    json.dumps(report.to_dict())


@FAST
@given(PROGRAMS, st.data())
def test_moving_a_step_to_another_rank_is_never_ok(p, data):
    r = data.draw(st.sampled_from([r for r, steps in enumerate(p.ranks) if steps]), label="rank")
    others = [x for x in range(p.num_ranks) if x != r]
    if not others:
        others = [r]
    dest = data.draw(st.sampled_from(others), label="dest")
    i = data.draw(st.integers(0, len(p.ranks[r]) - 1), label="index")
    ranks = _ranks_list(p)
    step = ranks[r].pop(i)
    j = data.draw(st.integers(0, len(ranks[dest])), label="insert at")
    ranks[dest].insert(j, step)
    q = p.with_ranks(ranks)
    report = schedc.check(q)
    if dest != r:
        assert not report.ok
        assert "wrong-rank" in codes(report), codes(report)
    assert report.ok == (oracle_problems(q) == []), (report.render(), oracle_problems(q))


@FAST
@given(PROGRAMS, st.data())
def test_reordering_a_rank_is_judged_like_the_oracle(p, data):
    """Any permutation of one rank's list: ok exactly when the oracle finds an order."""
    r = data.draw(st.sampled_from(range(p.num_ranks)), label="rank")
    perm = data.draw(st.permutations(p.ranks[r]), label="order")
    ranks = _ranks_list(p)
    ranks[r] = list(perm)
    q = p.with_ranks(ranks)
    report = schedc.check(q)
    problems = oracle_problems(q)
    assert report.ok == (problems == []), (report.render(), problems)
    if not report.ok:
        assert report.deadlock is not None or "order" in codes(report), report.render()


@FAST
@given(PROGRAMS)
def test_lowered_programs_satisfy_the_comms_oracle(p):
    low = lower(p)
    assert comms_oracle_problems(low, "rendezvous") == []
    assert comms_oracle_problems(low, "eager") == []


@FAST
@given(LOOP, st.data())
def test_mutated_lowered_programs_are_judged_like_the_oracle(p, data):
    """Move/drop/duplicate a step of a comms-level program: check never raises; it says ok exactly
    when the happens-before oracle does (both under rendezvous and eager sends)."""
    low = lower(p)
    ranks = _ranks_list(low)
    r = data.draw(st.sampled_from([r for r, steps in enumerate(ranks) if steps]), label="rank")
    i = data.draw(st.integers(0, len(ranks[r]) - 1), label="index")
    kind = data.draw(st.sampled_from(["move", "swap", "drop", "dup"]), label="mutation")
    if kind == "swap" and len(ranks[r]) >= 2:
        i = min(i, len(ranks[r]) - 2)
        ranks[r][i], ranks[r][i + 1] = ranks[r][i + 1], ranks[r][i]
    elif kind == "move":
        step = ranks[r].pop(i)
        ranks[r].insert(data.draw(st.integers(0, len(ranks[r])), label="to"), step)
    elif kind == "drop":
        ranks[r].pop(i)
    elif kind == "dup":
        ranks[r].insert(data.draw(st.integers(0, len(ranks[r])), label="at"), ranks[r][i])
    q = low.with_ranks(ranks)
    for sem in ("rendezvous", "eager"):
        report = schedc.check(q, semantics=sem)
        report.render()
        json.dumps(report.to_dict())
        problems = comms_oracle_problems(q, sem)
        if kind in ("drop", "dup"):
            assert not report.ok, f"{kind} at rank {r}, step {i} of a lowered program: still ok"
        if report.ok:
            assert problems == [], (sem, problems)
            assert execute(q, Semantics.parse(sem)).finished
        else:
            assert problems, (sem, report.render())


# ---------------------------------------------------------------------------------------------
# The Z3 engine against the native executor, and memory against its own definition
# ---------------------------------------------------------------------------------------------
def _mutate(p: Program, data) -> Program:
    ranks = _ranks_list(p)
    r = data.draw(st.sampled_from([r for r, steps in enumerate(ranks) if steps]), label="rank")
    if data.draw(st.booleans(), label="mutate"):
        step = ranks[r].pop(data.draw(st.integers(0, len(ranks[r]) - 1), label="from"))
        ranks[r].insert(data.draw(st.integers(0, len(ranks[r])), label="to"), step)
    return p.with_ranks(ranks)


Z3 = settings(FAST, max_examples=25)


@Z3
@given(SMALL_LOOP, st.booleans(), st.sampled_from(["rendezvous", "eager", "bounded:1"]),
       st.data())
def test_z3_engine_agrees_with_the_native_executor(p, lowered, sem, data):
    q = _mutate(lower(p) if lowered else p, data)
    native = schedc.check(q, semantics=sem)
    solved = schedc.check(q, semantics=sem, engine="z3", timeout=20)
    assert solved.ok is not None, solved.unknown  # tiny programs: the solver must decide
    assert solved.ok == native.ok, (native.render(), solved.render())
    assert (solved.deadlock is None) == (native.deadlock is None)
    # one deadlock, told alike: the same stuck steps and wait cycle (issue 17, item 6)
    assert solved.to_dict()["deadlock"] == native.to_dict()["deadlock"], (native.render(), solved.render())
    if solved.ok:
        # the witness is a completion time per step, increasing along every rank
        assert solved.witness is not None
        assert [len(row) for row in solved.witness] == [len(steps) for steps in q.ranks]
        for row in solved.witness:
            assert all(a < b for a, b in zip(row, row[1:])), row
    json.dumps(solved.to_dict())


@pytest.mark.parametrize("engine", ["native", "z3"])
def test_engines_see_a_forward_before_its_input_on_the_same_rank(engine):
    """Stages 0 and 1 on one rank, F(1,0) listed before F(0,0): F(1,0) waits for ever."""
    p = Program("same-rank", 1, 2, 1, (0, 0), ((Action(Op.F, 1, 0), Action(Op.F, 0, 0),
                                               Action(Op.B, 1, 0), Action(Op.B, 0, 0)),))
    assert oracle_problems(p)  # a cycle: data puts F(0,0) before F(1,0), program order after it
    report = schedc.check(p, engine=engine)
    assert report.ok is False, f"{engine}: {report.render() or 'ok'}"
    assert report.deadlock is not None or "order" in codes(report)


@FAST
@given(programs(max_ranks=3, max_microbatches=4, overlap=True, placements=("loop", "vshape"), memory=True))
def test_memory_grows_with_buffering_and_limits_bite_at_the_peak(p):
    low = lower(p)
    peaks = {}
    for sem in ("rendezvous", "bounded:1", "bounded:2", "eager"):
        report = schedc.check(low, semantics=sem)
        assert report.ok, (sem, report.render())
        peaks[sem] = [pk.memory for pk in report.peak_memory]
        assert len(peaks[sem]) == p.num_ranks
        # never below the activations alone (DESIGN.md: F allocates a, B frees a, I frees a - w, W frees w)
        assert all(m >= a - 1e-9 for m, a in zip(peaks[sem], report.peak_activation)), sem
    # more buffering admits more runs, so the worst case can only grow
    for weaker, stronger in (("rendezvous", "bounded:1"), ("bounded:1", "bounded:2"), ("bounded:2", "eager")):
        assert all(a <= b + 1e-9 for a, b in zip(peaks[weaker], peaks[stronger])), (weaker, stronger, peaks)
    top = max(peaks["rendezvous"])
    assert schedc.check(low, memory_limit=top).ok
    assert schedc.check(low, memory_limit={r: m for r, m in enumerate(peaks["rendezvous"])}).ok
    if top >= 1:
        tight = schedc.check(low, memory_limit=top - 0.5)
        assert not tight.ok and "memory" in codes(tight)


# ---------------------------------------------------------------------------------------------
# Built-in schedules
# ---------------------------------------------------------------------------------------------
BUILTINS = builtin_schedules()
GRID = [(P, M, V) for P in (1, 2, 3, 4) for M in (1, 2, 3, 4, 5, 8) for V in (1, 2, 3)]


def test_builtins_exist():
    assert {"1f1b", "gpipe", "interleaved_1f1b", "looped_bfs"} <= set(BUILTINS)


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_builtin_schedules_compile_check_and_lower(name):
    text = BUILTINS[name].read_text(encoding="utf-8")
    tree = parse(text, str(BUILTINS[name]))
    declared = {p.name for p in tree.params}
    seen = set()
    for P, M, V in GRID:
        params = {k: v for k, v in {"P": P, "M": M, "V": V}.items() if k in declared}
        key = tuple(sorted(params.items()))
        if key in seen:
            continue
        seen.add(key)
        if name == "interleaved_1f1b" and M % max(1, M // P) != 0:
            with pytest.raises(SchedcError) as info:
                compile_schedule(tree, params)
            assert info.value.code == "require"
            continue
        try:
            p = compile_schedule(tree, params)
        except SchedcError as e:  # outside the schedule's declared range
            assert e.code == "require", e.render()
            continue
        assert (p.num_ranks, p.num_microbatches) == (P, M), key
        if "place loop" in text:
            v = params.get("V", 1)
            assert p.num_stages == P * v and p.placement == tuple(s % P for s in range(P * v)), key
        else:  # V-shaped: stage s and 2P-1-s on rank s
            assert p.num_stages == 2 * P and all(p.placement[s] == p.placement[2 * P - 1 - s] == s
                                                 for s in range(P)), key
        assert p.level == "compute"
        assert oracle_problems(p) == [], (key, oracle_problems(p))
        report = schedc.check(p)
        assert report.ok, (key, report.render())
        if name == "1f1b":  # DESIGN.md: 1F1B peak activations of rank r = min(P - r, M)
            assert list(report.peak_activation) == [min(P - r, M) for r in range(P)], key
        if name == "gpipe":
            assert list(report.peak_activation) == [M] * P, key
        low = lower(p)
        assert (P == 1) or low.level == "comms"
        low_report = schedc.check(low)
        assert low_report.ok, (key, low_report.render())
        for sem in ("eager", "bounded:1"):
            assert schedc.check(low, semantics=sem).ok, (key, sem)
        for before, after in zip(p.ranks, low.ranks, strict=True):
            assert compute_only(after) == list(before)
        # and its exports read back (torch's CSV has no routes: the export refuses them)
        if not p.routes:
            back = read_torch_csv(to_torch_csv(p, "comms").dumps()).to_program()
            assert back.ranks == lower_for_torch(p).ranks
        else:
            with pytest.raises(SchedcError) as refused:
                to_torch_csv(p, "comms")
            assert refused.value.code == "usage" and "routes" in refused.value.render()
        assert read_ir_json(dumps_ir(p)) == p


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_builtin_defaults_load_by_name(name):
    p = schedc.load(name)
    assert schedc.check(p).ok
    assert p.name == name or p.name.replace("-", "_") == name


# ---------------------------------------------------------------------------------------------
# The public API as documented (schedc/__init__.py): `schedc.check(program) -> Report`.
# ---------------------------------------------------------------------------------------------
def test_public_check_is_the_function_whatever_was_imported_first():
    # By now every submodule (schedc.api, schedc.report, the CLI, interop) has been imported, as in
    # any program that uses them too; `schedc.check` must still be the function, not a module.
    import schedc.cli  # noqa: F401
    import schedc.report  # noqa: F401
    assert callable(schedc.check)
    report = schedc.check(schedc.load("1f1b"))
    assert isinstance(report, schedc.Report) and report.ok
