"""`schedc compile` reads a large program as integer columns (schedc/columns.py): the outputs it
writes from them are the ones the per-action code writes, byte for byte. Torch's stage actions,
the CSV and IR text, the timed run (schedc/simulate_columns.py), its memory and the picture are
compared, on every built-in and on generated programs, sound and broken, held both ways."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

import schedc
from schedc import simulate as sim
from schedc.columns import Columns, held_as_columns
from schedc.errors import SchedcError
from schedc.interop.ir_json import dumps_ir, read_ir_json
from schedc.interop.torch_csv import TorchCsv, to_torch_csv
from schedc.ir import format_step
from schedc.passes import add_reduce_grad, add_unshard_reshard, lower, lower_for_torch
from schedc.resources import builtin_schedules
from schedc.rules.semantics import Semantics
from schedc.simulate_columns import run_columns
from schedc.strategies import mutations, programs, reorderings
from schedc.verify import memory
from schedc.verify.analysis import counted_lowered
from schedc.verify.memory import step_memory

from profiles import budget

SETTINGS = ({}, {"P": 3, "M": 6}, {"P": 2, "M": 4}, {"P": 5, "M": 10}, {"P": 3, "V": 3, "M": 6})


def _builtins():
    out = []
    for name in builtin_schedules():
        for params in SETTINGS:
            try:
                out.append(schedc.load(name, params))
            except SchedcError:  # (a setting the schedule does not take)
                pass
    return out


BUILTINS = _builtins()


def _texts(program) -> list[list[str]]:
    return [[format_step(st) for st in steps] for steps in program.ranks]


def _generated(data):
    """A generated program: sound, reordered, broken, or lowered; with odd speeds and latency."""
    p = data.draw(programs(max_ranks=4, max_microbatches=5, placements=("loop", "vshape", "table"), max_chunks=3,
                           overlap=data.draw(st.booleans()), costs=data.draw(st.booleans()),
                           memory=data.draw(st.booleans())))
    how = data.draw(st.sampled_from(["sound", "mutant", "reordered", "lowered"]))
    if how == "mutant":
        p = data.draw(mutations(p)).program
    elif how == "reordered":
        p = data.draw(reorderings(p)).program
    elif how == "lowered":
        p = lower(p)
    if data.draw(st.booleans()):
        speeds = tuple(data.draw(st.sampled_from([1.0, 0.7, 3.0, 1 / 3])) for _ in range(p.num_ranks))
        p = replace(p, annotations=replace(p.annotations, rank_speed=speeds,
                                           latency=data.draw(st.sampled_from([0.0, 0.1, 2.5]))))
    return p


# ---- torch's stage actions ----
def _stage_ops_agree(program) -> None:
    held = held_as_columns(program)
    for window in (3, 1, 2, 0):
        assert _texts(add_unshard_reshard(held, window)) == _texts(add_unshard_reshard(program, window))
    assert _texts(add_reduce_grad(held)) == _texts(add_reduce_grad(program))
    both = [add_reduce_grad(add_unshard_reshard(p)) for p in (held, program)]
    assert both[0].ranks == both[1].ranks
    assert isinstance(both[0].ranks, Columns)  # (compounds too: their parts are columns of their own)
    spans = [[[st.span for st in steps] for steps in p.ranks] for p in both]
    assert spans[0] == spans[1]


@pytest.mark.parametrize("program", BUILTINS, ids=lambda p: f"{p.name}{dict(p.params)}")
def test_torchs_stage_actions_are_the_same_from_columns(program):
    _stage_ops_agree(program)


@budget(150)
@given(st.data())
def test_torchs_stage_actions_are_the_same_from_columns_on_generated_programs(data):
    _stage_ops_agree(_generated(data))


# ---- the CSV and the IR ----
def _texts_agree(program) -> None:
    held = held_as_columns(program)
    text = dumps_ir(held)
    assert text == dumps_ir(program)
    assert text == json.dumps(json.loads(text), indent=1) + "\n"  # exactly as json.dumps lays it out
    assert read_ir_json(text) == program
    if not program.replicas and not program.routes:  # (torch's CSV has no routes: the export refuses them)
        lowered = lower_for_torch(held).ranks
        assert to_torch_csv(held).dumps() == TorchCsv(tuple(tuple(row) for row in lowered)).dumps()
        assert dumps_ir(lower_for_torch(held)) == dumps_ir(lower_for_torch(program))


@pytest.mark.parametrize("program", BUILTINS, ids=lambda p: f"{p.name}{dict(p.params)}")
def test_the_csv_and_the_ir_are_the_same_from_columns(program):
    _texts_agree(program)


@budget(150)
@given(st.data())
def test_the_csv_and_the_ir_are_the_same_from_columns_on_generated_programs(data):
    program = _generated(data)
    try:
        lower_for_torch(program)
    except SchedcError:  # (a broken program whose lowering is an error)
        return
    _texts_agree(program)


def test_the_ir_of_a_data_parallel_job_and_of_an_empty_rank_is_jsons_layout():
    job = schedc.load("1f1b", {"P": 2, "M": 2})
    job = replace(job, replicas=(job.ranks,), ranks=job.ranks[:1] + ((),))
    text = dumps_ir(job)
    assert text == json.dumps(json.loads(text), indent=1) + "\n" and '"actions"' in text and "[]" in text


# ---- the timed run and its memory ----
def _same_timeline(got, expected) -> None:
    assert (got.level, got.overlap, got.semantics, got.mismatches) == \
        (expected.level, expected.overlap, expected.semantics, expected.mismatches)
    assert (got.start, got.end, got.busy, got.makespan) == (expected.start, expected.end, expected.busy,
                                                            expected.makespan)
    assert list(got.messages) == list(expected.messages)
    assert [list(p) for p in got.posted] == [list(p) for p in expected.posted]


def _runs_agree(program, overlap: bool = True) -> None:
    try:
        expected = sim._Simulator(program, overlap, {}, "rendezvous").run()
    except SchedcError as e:
        expected = e
    held = held_as_columns(program)
    try:
        got = run_columns(sim._Simulator(held, overlap, {}, "rendezvous"))
    except SchedcError as e:
        got = e
    if isinstance(expected, SchedcError):  # left to the simulator, or the same error
        assert got is None or isinstance(got, SchedcError) and str(got) == str(expected)
        return
    if got is not None:
        _same_timeline(got, expected)
        _same_timeline(sim.simulate(held, overlap=overlap), expected)
    lowered = lower(program) if counted_lowered(program) else None  # (what memory is counted on, if not the program)
    for name in ("rendezvous", "eager", "gloo"):
        semantics = Semantics.parse(name)
        # as arrays, and step by step
        assert step_memory(held, semantics, lowered) == step_memory(program, semantics, lowered)


@pytest.mark.parametrize("program", BUILTINS, ids=lambda p: f"{p.name}{dict(p.params)}")
def test_the_timed_run_and_its_memory_are_the_same_from_columns(program):
    for overlap in (True, False):
        _runs_agree(program, overlap)
        _runs_agree(replace(program, annotations=replace(program.annotations, latency=0.3)), overlap)


@budget(300)
@given(st.data())
def test_the_timed_run_and_its_memory_are_the_same_from_columns_on_generated_programs(data):
    _runs_agree(_generated(data), data.draw(st.booleans()))


def test_the_columns_run_takes_the_common_large_case():
    """1F1B held as columns is timed by the columns pass (and its memory counted as arrays)."""
    held = held_as_columns(schedc.load("1f1b", {"P": 4, "M": 8}))
    assert run_columns(sim._Simulator(held, True, {}, "rendezvous")) is not None
    assert memory._activations_of_columns(held, Semantics()) is not None


# ---- the picture ----
@pytest.mark.parametrize("name, params", [("1f1b", {"P": 2, "M": 3000}), ("zbv", {"P": 131, "M": 5}),
                                          ("interleaved_1f1b", {"P": 4, "M": 8}), ("dualpipev", {"P": 4, "M": 10})])
def test_the_picture_is_the_same_from_columns(name, params):
    from schedc.viz import timeline_svg
    program = schedc.load(name, params)
    report = schedc.check(program)
    assert timeline_svg(held_as_columns(program), report) == timeline_svg(program, report)
