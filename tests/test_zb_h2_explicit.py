"""ZB-H2 written out: schedules/zb_h2.pp spells its order as loops (so `schedc prove` covers every P
and M); tests/data/zb_h2_greedy.pp is the `order greedy(prefer = [I, F, W], memory = 2 * P - 1)` it
replaced, list-scheduled at unit costs. What holds between the two: the same per-rank order, step
for step (kind, stage and microbatch of every action), at every P <= 8 and M <= 24 and at a few
larger settings. So every number the greedy form gave (makespan and peaks under any costs, the
gallery picture, the comparisons in the docs) is the explicit form's too.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import schedc
from schedc import syntax as ast
from schedc.parse import parse
from schedc.prove.model import model
from schedc.resources import builtin_schedules
from schedc.simulate import simulate

GREEDY = Path(__file__).parent / "data" / "zb_h2_greedy.pp"


def order(program):
    return [[tuple((a.op.value, a.stage, a.microbatch) for a in step.parts) for step in steps]
            for steps in program.ranks]


def both(P, M):
    params = {"P": P, "M": M}
    return schedc.load("zb_h2", params), schedc.load(str(GREEDY), params)


@pytest.mark.parametrize("P", range(1, 9))
def test_the_explicit_order_is_the_greedy_order(P):
    for M in range(1, 25):
        explicit, greedy = both(P, M)
        assert order(explicit) == order(greedy), {"P": P, "M": M}
        assert schedc.check(explicit).ok, {"P": P, "M": M}


@pytest.mark.parametrize("P, M", [(9, 17), (11, 40), (16, 33)])
def test_the_orders_agree_beyond_the_sweep(P, M):
    explicit, greedy = both(P, M)
    assert order(explicit) == order(greedy)


@pytest.mark.parametrize("P, M", [(2, 3), (4, 8), (5, 7), (6, 19)])
def test_same_makespan_and_peaks_at_unit_costs(P, M):
    explicit, greedy = both(P, M)
    a, b = simulate(explicit), simulate(greedy)
    assert a.makespan == b.makespan and a.peak_memory == b.peak_memory
    assert max(schedc.check(explicit).peak_activation) == min(2 * P - 1, M)


def test_the_builtin_is_explicit_and_the_reference_is_greedy():
    path = builtin_schedules()["zb_h2"]
    tree = parse(path.read_text(encoding="utf-8"), str(path))
    assert not any(isinstance(item, ast.Order) for item in tree.items)
    model(tree)  # inside the prover's fragment (raises Unsupported otherwise)
    reference = parse(GREEDY.read_text(encoding="utf-8"), str(GREEDY))
    assert any(isinstance(item, ast.Order) for item in reference.items)
