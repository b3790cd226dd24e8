"""`schedc plan`: layouts and schedules for a model on N GPUs, ranked by step time among those that
fit (schedc/plan.py). Its answers are held to an exhaustive search of the same space."""
from __future__ import annotations

import json

import pytest

from schedc.hardware import describe
from schedc.plan import plan

SCHEDULES = ["1f1b", "zbv", "interleaved_1f1b"]


@pytest.fixture(scope="module")
def setup():
    return describe(model="llama3-8b", hardware="h100-80gb")


def test_every_answer_is_a_layout_of_the_gpus_that_fits(setup):
    result = plan(setup, 16, 64, SCHEDULES, top=5)
    assert len(result.choices) == 5
    steps = [c.step for c in result.choices]
    assert steps == sorted(steps)
    for c in result.choices:
        lay = c.layout
        assert lay.pp * lay.tp * lay.cp * lay.dp == 16 and c.microbatches * lay.dp == 64
        assert max(c.row.total_memory) <= setup.memory and c.step == c.row.makespan
        assert (c.reduction > 0) == (lay.dp > 1)  # the data-parallel collectives, in the simulated step
    assert result.layouts >= result.over_memory + result.bounded and result.simulated >= result.checked >= 5


def test_the_bounds_lose_no_answer(setup):
    """Pruned by bounds (memory, and time: the average rank's compute with no bubble and its
    gradient reduction), the search finds the same best answers as one that tries everything."""
    pruned = plan(setup, 16, 64, SCHEDULES, top=3)
    everything = plan(setup, 16, 64, SCHEDULES, top=10_000)
    assert pruned.simulated < everything.simulated and everything.bounded == 0
    key = [(c.layout, c.row.name, c.step) for c in everything.choices[:3]]
    assert [(c.layout, c.row.name, c.step) for c in pruned.choices] == key


def test_a_model_too_big_for_the_gpus_fits_nowhere(run_cli):
    code, out, err = run_cli("plan", "--gpus", "2", "--global-batch", "8", "--model", "llama3-70b",
                             "--hardware", "h100-80gb")
    assert code == 1 and "no layout of 2 GPUs fits llama3-70b" in err and "searched" in out


def test_plan_json_and_usage(run_cli):
    code, out, err = run_cli("plan", "1f1b", "zbv", "--gpus", "8", "--global-batch", "16", "--model", "llama3-8b",
                             "--hardware", "h100-80gb", "--top", "2", "--json")
    lines = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and len(lines) == 3 and "search" in lines[-1]
    assert {"pp", "tp", "cp", "dp", "ep", "schedule", "step", "reduction", "fits"} <= set(lines[0])
    code, _, err = run_cli("plan", "--gpus", "8", "--global-batch", "16")
    assert code == 2 and "needs a model and hardware" in err
