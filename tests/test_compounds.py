"""Compound steps on the fast paths (issue 34, target 6): DualPipe's overlapped pairs held as columns
(schedc/columns.py's `Parts`) are read from a PyTorch CSV at once, checked, lowered, timed and
counted by the array and plain-Python paths, and each gives what the detailed path gives: the
cell-by-cell reader's program (spans included), the detailed checks' verdicts and peaks, the lockstep
rounds' lowering, the step-by-step simulator's timeline to the bit, the memory walk's sums. Held so
on DualPipeV and on generated programs whose F and B steps are paired at random (some pairs then
deadlock: the paths must agree on those too)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

import schedc
from schedc import simulate as sim
from schedc.columns import Columns, as_columns, columns_of, held_as_columns
from schedc.errors import SchedcError
from schedc.interop.csv_columns import _read_arrays, _read_small
from schedc.interop.torch_csv import TorchCsv, _stem, program_from_csv, read_torch_csv, to_torch_csv
from schedc.ir import Action, Compound, CompoundKind, Op, StageCost
from schedc.passes import comms, lower
from schedc.passes.stage_ops import add_step_collectives
from schedc.report import run_checks
from schedc.rules.semantics import RENDEZVOUS, Semantics
from schedc.simulate_columns import FROM_ACTIONS, run_columns
from schedc.strategies import mutations, programs, reorderings
from schedc.timeline import Link
from schedc.verify import fast, small
from schedc.verify.memory import _activations_of_columns, step_memory
from test_perf_paths import _agrees

from profiles import budget

LIMITS = (65_536, 1_000_000, 1_000_000)
DUALPIPEV = [schedc.load("dualpipev", {"P": P, "M": M}) for P, M in ((1, 2), (2, 4), (3, 7), (4, 8))]


@st.composite
def paired(draw, max_ranks: int = 4, max_microbatches: int = 5):
    """A program with overlapped pairs: DualPipeV at a drawn size and drawn costs; a generated one
    whose F and B steps ready together are paired (sound, by construction); or a generated one with
    F steps paired with a B step of another stage and microbatch a few steps later on its rank, moved
    up to it (some such pairs wait on each other across ranks: a deadlock)."""
    how = draw(st.sampled_from(["dualpipev", "ready", "moved"]), label="pairs")
    if how == "dualpipev":
        P = draw(st.integers(1, max_ranks), label="P")
        program = schedc.load("dualpipev", {"P": P, "M": draw(st.integers(2 * P, 2 * P + 3), label="M")})
        times = [draw(st.sampled_from([0.5, 1.0, 2.0]), label="time") for _ in range(3 * program.num_stages)]
        costs = tuple(StageCost(F=times[3 * s], I=times[3 * s + 1], W=times[3 * s + 2], B=times[3 * s + 1] + times[3 * s + 2])
                      for s in range(program.num_stages))
        return replace(program, annotations=replace(program.annotations, stage_costs=costs))
    program = draw(programs(min_ranks=2, max_ranks=max_ranks, min_microbatches=2, max_microbatches=max_microbatches,
                            overlap=True, costs=True, memory=True, placements=("vshape", "loop", "table")))
    if how == "ready":
        return program
    ranks = []
    for steps in program.ranks:
        rest, out = list(steps), []
        while rest:
            first = rest.pop(0)
            later = [k for k, b in enumerate(rest[:4]) if isinstance(first, Action) and first.op is Op.F
                     and isinstance(b, Action) and b.op is Op.B and b.stage != first.stage
                     and b.microbatch != first.microbatch]
            if later and draw(st.integers(0, 3), label="pair") > 0:
                out.append(Compound(CompoundKind.OVERLAP_F_B, (first, rest.pop(draw(st.sampled_from(later))))))
            else:
                out.append(first)
        ranks.append(tuple(out))
    return program.with_ranks(ranks)


def _no_message_sizes(program):
    sizes = tuple(replace(m, out=0.0) for m in program.annotations.stage_memory)
    return replace(program, annotations=replace(program.annotations, stage_memory=sizes))


# ---- reading a PyTorch CSV ----
def _same_reading(text: str) -> None:
    """The columns readers read `text` as the cell-by-cell reader does (or hand it over)."""
    try:
        slow = read_torch_csv(text, "t.csv").to_program()
    except SchedcError as e:
        slow = e
    for read in (_read_small, _read_arrays):
        fast_ = read(text, "t.csv", _stem("t.csv"), LIMITS)
        if fast_ is None:
            continue
        assert not isinstance(slow, SchedcError), (read.__name__, text)
        assert fast_ == slow and (fast_.placement, fast_.num_stages, fast_.num_microbatches, fast_.num_actions,
                                  fast_.level) == (slow.placement, slow.num_stages, slow.num_microbatches,
                                                   slow.num_actions, slow.level)
        for row_fast, row_slow in zip(fast_.ranks, slow.ranks):
            for a, b in zip(row_fast, row_slow):
                assert (a.span, a.span.rank, a.span.step) == (b.span, b.span.rank, b.span.step)
                assert [p.span for p in a.parts] == [p.span for p in b.parts]


@pytest.mark.parametrize("program", DUALPIPEV, ids=lambda p: str(dict(p.params)))
def test_dualpipev_csvs_are_read_at_once_as_cell_by_cell(program):
    for level in (program, lower(program), to_torch_csv(program, "comms").to_program()):
        text = TorchCsv(tuple(tuple(row) for row in level.ranks)).dumps()
        for read in (_read_small, _read_arrays):
            read_ = read(text, "t.csv", "t", LIMITS)
            assert read_ is not None and columns_of(read_).compounds
        _same_reading(text)
        _same_reading(text.replace("\r\n", "\n") + ",,\n")  # (empty cells, a blank rank)


CELLS = st.sampled_from(["0F0", "1B0", "2SEND_F1", "1RECV_B0", "0UNSHARD", "(0F1;1B0)OVERLAP_F_B", "(1F2;0B1)OVERLAP_F_B",
                         "(1SEND_F0;1RECV_B2)GROUP", "(0F1)OVERLAP_F_B", "(0F1;1B0;2W0)OVERLAP_F_B"])
ODD = st.sampled_from(["(0F1;1B0)", "(0F1;;1B0)OVERLAP_F_B", "(0F1;1B0)overlap_f_b", "(0F1;1B0)FOO", "((0F1))GROUP",
                       "(0F1;1B0)OVERLAP_F_B)", "0F1;1B0", "()GROUP", "(0F1 ;1B0)GROUP", "(0F1;1BW0)OVERLAP_F_B",
                       "(0F;1B0)GROUP", "(0F1;1B0)OVERLAP_F_B0", "(0F1;1B0)OVERLAP_F_BXYZABCDEFG", "(0F1(1B0)GROUP"])


@budget(200)
@given(st.lists(st.lists(st.one_of(CELLS, CELLS, ODD, st.just("")), max_size=6).map(",".join), min_size=1,
                max_size=4), st.sampled_from(["\n", "\r\n"]))
def test_compound_cells_read_at_once_as_cell_by_cell_or_handed_over(rows, end):
    _same_reading(end.join(rows) + end)


@budget(100)
@given(paired(), st.booleans())
def test_generated_pairs_read_back_the_same_at_once(program, lowered):
    try:
        level = lower(program) if lowered else program
    except SchedcError:  # (pairs that deadlock: nothing to lower)
        return
    text = TorchCsv(tuple(tuple(row) for row in level.ranks)).dumps()
    _same_reading(text)
    small_, arrays = _read_small(text, "t.csv", "t", LIMITS), _read_arrays(text, "t.csv", "t", LIMITS)
    assert small_ is not None and arrays is not None
    for a, b in zip((small_.ranks.parts.step, small_.ranks.parts.op, small_.ranks.parts.stage,
                     small_.ranks.parts.microbatch, small_.ranks.parts.kind),
                    (arrays.ranks.parts.step, arrays.ranks.parts.op, arrays.ranks.parts.stage,
                     arrays.ranks.parts.microbatch, arrays.ranks.parts.kind)):
        assert a.tolist() == b.tolist()


# ---- the checks (`_agrees`: tests/test_perf_paths.py's) ----


@pytest.mark.parametrize("program", DUALPIPEV, ids=lambda p: str(dict(p.params)))
def test_both_fast_paths_clear_dualpipev_read_from_a_csv_with_the_detailed_peaks(program):
    for level in (program, lower(program), to_torch_csv(program, "comms").to_program()):
        read = program_from_csv(TorchCsv(tuple(tuple(row) for row in level.ranks)).dumps(), "d.csv")
        assert isinstance(read.ranks, Columns) and read.ranks.compounds
        for path in (small.quick_check, fast.array_check):
            clear = path(read, RENDEZVOUS, None)
            assert clear is not None, (path, level.level)
            _agrees(clear, read, RENDEZVOUS)
        assert run_checks(read).to_dict() == run_checks(read, fast=False).to_dict()


@budget(150)
@given(paired(), st.sampled_from(["program", "lowered", "csv", "reordered", "mutant"]), st.data())
def test_the_fast_paths_decide_paired_programs_as_the_detailed_checks(program, how, data):
    program = _no_message_sizes(program)
    if how == "reordered":
        program = data.draw(reorderings(program)).program
    elif how == "mutant":
        program = data.draw(mutations(program, kinds=("drop", "duplicate"))).program
    elif how != "program":
        try:
            program = lower(program)
        except SchedcError:  # (a pair that deadlocks: nothing to lower)
            return
        if how == "csv":
            program = program_from_csv(TorchCsv(tuple(tuple(row) for row in program.ranks)).dumps(), "p.csv")
    held = held_as_columns(program)
    for semantics in ("rendezvous", "eager"):
        sem = Semantics.parse(semantics)
        cleared = [small.quick_check(held, sem, None), fast.array_check(held, sem, None)]
        assert cleared[0] == cleared[1]
        for clear in cleared:
            _agrees(clear, held, sem)
    assert run_checks(held).to_dict() == run_checks(program, fast=False).to_dict()


# ---- lowering ----
def _lowerings(program):
    """The lowering three ways, each the program or the error's message: the plain-Python path (a
    program held as actions), the array path (`_when`) and the lockstep rounds (`_rounds`)."""
    out = []
    for how in ("small", "arrays", "rounds"):
        try:
            if how == "small":
                assert comms._small(program)
                got = comms.insert_comms(program).ranks
            else:
                steps = comms._Steps.of(held_as_columns(program))
                when = comms._when(steps, program.num_ranks) if how == "arrays" else None
                if when is None:
                    when = comms._position(comms._rounds(steps, program.num_ranks))
                got = comms._lowered(steps, when, program.num_ranks)
            out.append([[(str(st_), [p.span for p in st_.parts]) for st_ in row] for row in got])
        except SchedcError as e:
            out.append(str(e))
    return out


@pytest.mark.parametrize("program", DUALPIPEV, ids=lambda p: str(dict(p.params)))
def test_dualpipev_lowers_the_same_three_ways(program):
    small_, arrays, rounds = _lowerings(program)
    assert small_ == arrays == rounds
    assert comms._when(comms._Steps.of(held_as_columns(program)), program.num_ranks) is not None  # (not the rounds)


@budget(150)
@given(paired(), st.sampled_from(["program", "reordered", "mutant"]), st.data())
def test_paired_programs_lower_the_same_three_ways(program, how, data):
    if how == "reordered":
        program = data.draw(reorderings(program)).program
    elif how == "mutant":
        program = data.draw(mutations(program)).program
    if program.level != "compute":
        return
    small_, arrays, rounds = _lowerings(program)
    assert small_ == arrays == rounds


# ---- the timed run and its memory ----
def _same_run(program, overlap: bool, links=None) -> str:
    """The columns pass and the step-by-step simulator time `program` the same (or the pass hands it
    over); which it was."""
    links = links or {}
    try:
        expected = sim._Simulator(program, overlap, links, "rendezvous").run()
    except SchedcError as e:
        expected = e
    held = held_as_columns(program)
    got = run_columns(sim._Simulator(held, overlap, links, "rendezvous"))
    if isinstance(expected, SchedcError):
        assert got is None
        return "error"
    if got is None:
        return "handed over"
    assert (got.start, got.end, got.busy, got.makespan, got.collectives) == \
        (expected.start, expected.end, expected.busy, expected.makespan, expected.collectives)
    assert list(got.messages) == list(expected.messages)
    assert [list(p) for p in got.posted] == [list(p) for p in expected.posted]
    return "same"


@pytest.mark.parametrize("program", DUALPIPEV, ids=lambda p: str(dict(p.params)))
def test_dualpipev_is_timed_by_the_columns_pass_to_the_bit(program):
    costs = tuple(replace(c, F_comm=0.25, B_comm=0.5, R=0.5) for c in program.annotations.stage_costs)
    for variant in (program, replace(program, annotations=replace(program.annotations, latency=0.3)),
                    add_step_collectives(replace(program, annotations=replace(program.annotations, stage_costs=costs,
                                                                                bandwidth=2.0)))):
        for overlap in (True, False):
            assert _same_run(variant, overlap) == "same"


@budget(200)
@given(paired(), st.sampled_from([0.0, 0.5]), st.sampled_from([0.0, 2.0]), st.booleans(), st.booleans(), st.data())
def test_paired_programs_are_timed_by_the_columns_pass_to_the_bit(program, latency, bandwidth, overlap, links, data):
    S, R = program.num_stages, program.num_ranks
    comm = data.draw(st.lists(st.sampled_from([0.0, 0.5, 3.0]), min_size=S, max_size=S), label="comm")
    collective = data.draw(st.lists(st.sampled_from([0.0, 0.0, 1.0]), min_size=3 * S, max_size=3 * S), label="R, U, T")
    costs = tuple(replace(c, F_comm=x, B_comm=x / 2, R=collective[s], U=collective[S + s], T=collective[2 * S + s])
                  for s, (c, x) in enumerate(zip(program.annotations.stage_costs, comm)))
    speeds = tuple(data.draw(st.lists(st.sampled_from([1.0, 0.5, 3.0]), min_size=R, max_size=R), label="speeds"))
    program = add_step_collectives(replace(program, annotations=replace(
        program.annotations, stage_costs=costs, latency=latency, bandwidth=bandwidth, rank_speed=speeds)))
    chosen = {}
    if links:
        for a in range(R):
            for b in range(R):
                if a != b and data.draw(st.booleans(), label="link"):
                    chosen[(a, b)] = Link(data.draw(st.sampled_from([0.0, 1.5])), data.draw(st.sampled_from([0.0, 0.5])))
    _same_run(program, overlap, chosen)


def test_a_large_program_held_as_actions_is_timed_by_the_columns_pass():
    """`schedc plan` simulates the programs it compiles (held as actions, with their step's
    collectives, messages of a size and a bandwidth): each is read as columns and timed in one pass."""
    program = schedc.load("dualpipev", {"P": 8, "M": 64})
    costs = tuple(replace(c, R=0.5, U=0.25, F_comm=0.1) for c in program.annotations.stage_costs)
    program = add_step_collectives(replace(program, annotations=replace(program.annotations, stage_costs=costs,
                                                                        bandwidth=4.0, latency=0.01)))
    assert columns_of(program) is None and sum(map(len, program.ranks)) >= FROM_ACTIONS
    timeline = run_columns(sim._Simulator(program, True, {}, "rendezvous"))
    assert timeline is not None and timeline.program is program
    expected = sim._Simulator(program, True, {}, "rendezvous").run()
    assert (timeline.start, timeline.end, timeline.makespan) == (expected.start, expected.end, expected.makespan)


@budget(150)
@given(paired())
def test_the_memory_of_each_step_is_summed_as_arrays_as_the_walk_sums_it(program):
    program = _no_message_sizes(program)
    held = held_as_columns(program)
    assert _activations_of_columns(held, None) == step_memory(program)


def test_dualpipev_memory_is_summed_as_arrays():
    for program in DUALPIPEV:
        held = held_as_columns(program)
        assert _activations_of_columns(held, None) is not None
        assert _activations_of_columns(held, None) == step_memory(program)


# ---- held as columns all the way ----
def test_a_dualpipev_csv_and_its_lowering_stay_columns():
    program = schedc.load("dualpipev", {"P": 4, "M": 16})
    read = program_from_csv(TorchCsv(tuple(tuple(r) for r in program.ranks)).dumps(), "d.csv")
    lowered = lower(read)
    for held in (read.ranks, lowered.ranks, to_torch_csv(read, "comms").rows):
        assert isinstance(held, Columns) and held.compounds
    assert as_columns(lowered).parts.sizes.tolist() == [2] * len(lowered.ranks.parts)
    assert columns_of(lowered)._rows == [None] * 4  # (nothing made: read, lowered and written as columns)
    assert lowered.ranks == lower(program).ranks
    assert to_torch_csv(read, "comms").dumps() == to_torch_csv(program, "comms").dumps()


def test_the_plan_costs_take_the_columns_pass():
    costs = StageCost(F=1.0, B=2.0, I=1.0, W=1.0, R=0.5)
    program = schedc.load("dualpipev", {"P": 4, "M": 8})
    program = replace(program, annotations=replace(program.annotations, stage_costs=(costs,) * program.num_stages))
    assert _same_run(add_step_collectives(program), True) == "same"


def test_a_stage_past_the_ends_lowers_alike_three_ways():
    """Hypothesis's mutant (CI): B on stage 4 of 4 on rank 0. The plain-Python lowering looked up the
    placement of that stage (IndexError); it hands such a program to the array path, which reports
    the deadlock the rounds find."""
    base = schedc.load("1f1b", {"P": 2, "M": 2})
    rows = ([(Op.F, 0, 0), (Op.F, 3, 0), (Op.B, 4, 0), (Op.B, 0, 0), (Op.F, 0, 1), (Op.F, 3, 1), (Op.B, 3, 1), (Op.B, 0, 1)],
            [(Op.F, 1, 0), (Op.F, 2, 0), (Op.B, 2, 0), (Op.B, 1, 0), (Op.F, 1, 1), (Op.F, 2, 1), (Op.B, 2, 1), (Op.B, 1, 1)])
    program = replace(base, num_stages=4, placement=(0, 1, 1, 0),
                      ranks=tuple(tuple(Action(op, s, m) for op, s, m in row) for row in rows),
                      annotations=replace(base.annotations, stage_costs=(), stage_memory=()))
    small_, arrays, rounds = _lowerings(program)
    assert small_ == arrays == rounds and "error[deadlock]" in small_
