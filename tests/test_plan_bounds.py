"""The lower bounds `schedc plan` prunes by (schedc/plan_bounds.py): never above the simulated step,
nor above the memory `schedc check` finds, over random stage costs and over every configuration of
a description; exact where the closed forms say a schedule's step is its bound; and each built-in's
family saying what its expanded programs do."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from schedc.api import check, load
from schedc.errors import SchedcError
from schedc.hardware import describe
from schedc.ir import StageCost, StageMemory
from schedc.plan_bounds import FAMILIES, covers, family_shape, memory_bound, shape_of, step_bound
from schedc.resources import builtin_schedules
from schedc.simulate import simulate

BUILTINS = sorted(builtin_schedules())  # every one, a family's or not (DualPipe: two routes)


def _random_case(rng: random.Random):
    """A built-in at small P and M with random times (communication inside some, data-parallel
    collectives on some stages), sizes, latency and bandwidth; None when its `require` refuses."""
    name = rng.choice(BUILTINS)
    P, M = rng.randint(1, 5), rng.randint(1, 12)
    if name == "dualpipe":  # (its `require`: an even P, an even M of at least 2P)
        P = rng.choice((2, 4))
        M = 2 * rng.randint(P, 6)
    try:
        program = load(name, {"P": P, "M": M, "V": 2}, strict_params=False)
    except SchedcError:
        return None
    costs, sizes = [], []
    for s in range(program.num_stages):
        F, I, W = (rng.uniform(0.1, 2.0) for _ in range(3))  # noqa: E741
        costs.append(StageCost().with_settings({
            "F": F, "I": I, "W": W, "F_comm": rng.choice([0.0, rng.uniform(0, F)]),
            "I_comm": rng.choice([0.0, rng.uniform(0, I)]), "W_comm": 0.0,
            "R": rng.choice([0.0, rng.uniform(0, 3)]), "U": rng.choice([0.0, rng.uniform(0, 1)])}))
        out = rng.uniform(0, 0.5) if s < program.num_stages - 1 else 0.0
        sizes.append(StageMemory().with_settings({"act": rng.uniform(0.1, 3.0), "out": out}))
    latency, bandwidth = rng.choice([0.0, rng.uniform(0, 0.3)]), rng.choice([0.0, rng.uniform(0.5, 5.0)])
    timed = replace(program, annotations=replace(program.annotations, stage_costs=tuple(costs),
                                                 stage_memory=tuple(sizes), latency=latency, bandwidth=bandwidth))
    return name, P, M, program, timed, costs, [m.out for m in sizes], latency, bandwidth


CASES = [c for c in (_random_case(random.Random(seed)) for seed in range(240)) if c is not None]


def test_the_step_bounds_are_never_above_the_simulated_step():
    assert len(CASES) > 150 and {c[0] for c in CASES} == set(BUILTINS) and set(FAMILIES) <= set(BUILTINS)
    for name, P, M, program, timed, costs, out, latency, bandwidth in CASES:
        step = simulate(timed).makespan
        shape, family = shape_of(program), family_shape(name, P, M)
        assert step_bound(shape, costs, out, latency, bandwidth) <= step, (name, P, M)
        if name in FAMILIES:
            assert family is not None and covers(family, shape), (name, P, M)
            assert step_bound(family, costs, out, latency, bandwidth) <= step, (name, P, M)


def test_the_memory_bound_is_never_above_what_check_finds():
    for name, P, M, program, timed, *_ in CASES[::4]:
        act = [m.act for m in timed.annotations.stage_memory]
        states = [0.5 * r for r in range(P)]
        bound = memory_bound(shape_of(program), act, act, states)
        report = check(timed)
        assert report.ok is True and bound <= max(a + b for a, b in zip(states, report.peak_sizes)), (name, P, M)
        assert bound >= (max(states) + min(act)) * (1 - 1e-8), (name, P, M)  # (a rank holds an activation)


@pytest.mark.parametrize("name, bubble", [("1f1b", lambda P, V, F, B: (P - 1) * (F + B)),
                                          ("gpipe", lambda P, V, F, B: (P - 1) * (F + B)),
                                          ("interleaved_1f1b", lambda P, V, F, B: (P - 1) * (F + B) / V)])
def test_the_bound_is_the_closed_form_where_the_step_is(name, bubble):
    """Even stages, no communication: 1F1B's and GPipe's step is M (F + B) and a fill and drain of
    (P-1)(F+B), interleaved 1F1B's (P-1)(F+B)/V, and the bound is that step (to rounding)."""
    for P, M in ((2, 4), (4, 8), (4, 16), (8, 16)):
        program = load(name, {"P": P, "M": M, "V": 2}, strict_params=False)
        V = program.num_stages // P
        F, B = 1.0 / V, 2.0 / V  # a rank-sized chunk's F = 1, B = 2, split over its V stages
        costs = (StageCost(F=F, B=B, I=B / 2, W=B / 2),) * program.num_stages
        want = M * V * (F + B) + bubble(P, V, F * V, B * V)
        bound = step_bound(shape_of(program), costs, [0.0] * program.num_stages, 0.0, 0.0)
        timed = replace(program, annotations=replace(program.annotations, stage_costs=costs))
        assert simulate(timed).makespan == pytest.approx(want)
        assert bound == pytest.approx(want, rel=1e-8) and bound <= want


def test_a_family_says_what_its_schedule_does_at_every_size():
    for name in sorted(FAMILIES):
        for P in (1, 2, 3, 4, 8):
            for M in (1, 2, 5, 8, 16, 33):
                try:
                    program = load(name, {"P": P, "M": M, "V": 2}, strict_params=False)
                except SchedcError:
                    continue
                assert covers(family_shape(name, P, M), shape_of(program)), (name, P, M)


@pytest.mark.parametrize("model, gpus, batch, seen_least, over_least", [
    ("mixtral-8x7b", 16, 16, 900, 600),  # MoE: expert all-to-all inside the times, which pairs hide
    ("llama3-8b", 16, 64, 400, 100),  # more of DualPipe's (M >= 2P): 30, at 2, 4 and 8 ranks
])
def test_the_bounds_hold_on_every_configuration_of_a_description(model, gpus, batch, seen_least, over_least):
    """Layouts of 16 GPUs with uneven splits, every built-in: each bound at most the simulated
    step, and a configuration whose memory bound is over the limit does not fit when checked."""
    from schedc.plan import Plan, _Config, _Search, layouts
    setup = describe(model=model, hardware="h100-80gb")
    base = replace(setup, model=replace(setup.model, micro_batch=1))
    search = _Search(Plan(), (), 5)
    seen = over = 0
    for lay, M in layouts(base, gpus, batch, 1):
        for name in BUILTINS:
            c = _Config(lay, M, name, replace(base, parallel=lay.parallel(setup.parallel)))
            first = search.first_bound(c)
            if not search.load(c):
                continue
            second = search.second_bound(c)
            step = search.time(c)
            assert step is not None and (first is None or first <= step) and (second is None or second <= step), \
                (lay, name, first, second, step)
            if first is None or second is None:
                over += 1
                assert search.judge(c) is None, (lay, name)
            seen += 1
    assert seen > seen_least and over > over_least, (seen, over)


def test_a_routed_family_costs_its_stages_as_the_program_does():
    """DualPipe's family (two routes, each a copy of the model cut into P stages): the stage costs,
    sizes and model states the search reads before expanding are the expanded program's."""
    from schedc.plan import Plan, _Config, _Frame, _Search, layouts
    from schedc.plan_bounds import family_routes
    setup = describe(model="llama3-8b", hardware="h100-80gb")
    base = replace(setup, model=replace(setup.model, micro_batch=1))
    search, seen = _Search(Plan(), (), 5), 0
    for lay, M in layouts(base, 16, 64, 1):
        c = _Config(lay, M, "dualpipe", replace(base, parallel=lay.parallel(setup.parallel)))
        family = search.family(c)
        if lay.pp == 1 or not search.load(c):
            continue
        assert family is not None and family.segments == ((0, lay.pp), (lay.pp, 2 * lay.pp))
        costs, out, act = search.stage_costs(c, family.placement, family.segments)
        ann = c.program.annotations
        assert tuple(costs) == ann.stage_costs and out == [m.out for m in ann.stage_memory], lay
        assert act == [m.act for m in ann.stage_memory], lay
        frame = _Frame(family.ranks, family.stages, family.placement, routes=family_routes(family, M),
                       num_microbatches=M)
        assert search.states(c, frame) == search.states(c, c.program), lay
        seen += 1
    assert seen >= 20
