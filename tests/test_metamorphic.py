"""Metamorphic tests: changes that must not change a verdict, and one that scales the makespan.

Relabelling ranks (which rank holds which stages, the placement updated), swapping two adjacent
steps that nothing orders (no happens-before path between them but their own program order),
scaling every cost by a factor (the makespan scales by it, the bubble ratio does not move), and
changing M inside a schedule's steady-state range (M >= 2P: the verdict stays, and each extra
microbatch adds exactly its work to the makespan). Programs come from schedc.strategies, sound
and perturbed; budgets from tests/profiles.py (HYPOTHESIS_PROFILE=nightly for the large run).
"""
from __future__ import annotations

import functools
from collections import Counter, deque
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

import schedc
from schedc.costs import parse_cost_option
from schedc.ir import Op, Program
from schedc.parse import parse
from schedc.passes import lower
from schedc.resources import builtin_schedules
from schedc.simulate import simulate
from schedc.strategies import lowered_programs, programs, reorderings

from oracles import union_find
from profiles import budget
from test_known_failures import receives_before_consumers

ALL = ("loop", "vshape", "table")
SEMANTICS = ("rendezvous", "eager", "bounded:1")


def _perturbed(strategy):
    return strategy.flatmap(reorderings).map(lambda m: m.program)


def _cases(**options):
    """Sound programs at both levels, and the same with steps moved (sound or not)."""
    compute = programs(overlap=True, placements=ALL, **options)
    comms = lowered_programs(placements=ALL, **options)
    return st.one_of(compute, comms, _perturbed(compute), _perturbed(comms))


def verdict(program: Program, semantics: str):
    """What a verdict is made of: ok, whether it deadlocks, and the findings by code."""
    report = schedc.check(program, semantics=semantics)
    return report, (report.ok, report.deadlock is None, Counter(d.code for d in report.errors),
                    len(report.mismatches))


def timing(program: Program, overlap: bool = True):
    """The simulated timeline, or the code of the error that says it cannot be timed."""
    try:
        return simulate(program, overlap=overlap)
    except schedc.SchedcError as e:
        return e.code


# ---------------------------------------------------------------------------------------------
# Relabelling ranks
# ---------------------------------------------------------------------------------------------
def relabel(p: Program, perm: list[int]) -> Program:
    """Rank r becomes rank perm[r]: its list, its stages (placement) and its annotations move."""
    ranks = [None] * p.num_ranks
    for r, steps in enumerate(p.ranks):
        ranks[perm[r]] = steps
    ann = p.annotations
    speed = ann.rank_speed
    if speed:
        moved = [1.0] * p.num_ranks
        for r, v in enumerate(speed):
            moved[perm[r]] = v
        speed = tuple(moved)
    ann = replace(ann, rank_speed=speed, memory_limit=tuple(sorted((perm[r], v) for r, v in ann.memory_limit)))
    return replace(p, placement=tuple(perm[r] for r in p.placement), ranks=tuple(ranks), annotations=ann)


@budget(100)
@given(_cases(costs=True, memory=True).flatmap(
    lambda p: st.tuples(st.just(p), st.permutations(range(p.num_ranks)))), st.sampled_from(SEMANTICS))
def test_relabelling_ranks_keeps_the_verdict_and_the_numbers(case, semantics):
    p, perm = case
    q = relabel(p, list(perm))
    before, said = verdict(p, semantics)
    after, says = verdict(q, semantics)
    assert says == said, (perm, before.render(), after.render())
    if before.peak_activation:
        assert [after.peak_activation[perm[r]] for r in range(p.num_ranks)] == list(before.peak_activation)
    if before.peak_memory:
        if p.level == "compute" and any(m.out for m in p.annotations.stage_memory):
            # counted on the lowering, which steps ranks in index order (passes/comms.py), so a
            # relabelled program lowers differently: relabel the lowered program instead
            lowered = lower(p)
            before, after = schedc.check(lowered, semantics=semantics), schedc.check(
                relabel(lowered, list(perm)), semantics=semantics)
        assert [after.peak_memory[perm[r]].memory for r in range(p.num_ranks)] == \
            [pk.memory for pk in before.peak_memory]
    if semantics == "rendezvous":
        t, u = timing(p), timing(q)
        if isinstance(t, str) or isinstance(u, str):
            assert t == u
        else:
            assert u.makespan == pytest.approx(t.makespan, rel=1e-12)
            assert [u.busy[perm[r]] for r in range(p.num_ranks)] == pytest.approx(list(t.busy))
            assert u.mismatches == t.mismatches


def test_relabel_moves_stages_with_their_rank():
    p = schedc.load("1f1b", {"P": 3, "M": 2})
    q = relabel(p, [2, 0, 1])
    assert q.placement == (2, 0, 1) and q.ranks[2] == p.ranks[0] and q.ranks[0] == p.ranks[1]
    assert schedc.check(q).ok


# ---------------------------------------------------------------------------------------------
# Swapping independent adjacent steps
# ---------------------------------------------------------------------------------------------
def _values(a):
    """(needs, makes) of one action, from DESIGN.md's rule (written here, not schedc.rules.deps)."""
    s, m = a.stage, a.microbatch
    if a.op is Op.F:
        return ([("act", s - 1, m)] if s > 0 else []), [("act", s, m)]
    if a.op in (Op.B, Op.I):
        return [("act", s, m), ("grad", s + 1, m)], [("grad", s, m)]
    if a.op is Op.W:
        return [("grad", s, m)], []
    if a.op is Op.SEND_F:
        return [("act", s, m)], []
    if a.op is Op.SEND_B:
        return [("grad", s, m)], []
    if a.op is Op.RECV_F:
        return [], [("act", s - 1, m)]
    if a.op is Op.RECV_B:
        return [], [("grad", s + 1, m)]
    return [], []


def happens_before(p: Program, semantics: str):
    """The step graph: program order, data (from every step that makes a value to every step that
    needs it: on the same rank, or anywhere at the compute level), and FIFO-matched messages (one
    node for a rendezvous pair, an edge send -> receive for eager). Returns (node_of, successors,
    the edges that are not program order)."""
    find, union = union_find()

    comms = p.level == "comms"
    makers, edges, data = {}, [], []
    sends, recvs = {}, {}
    for r, steps in enumerate(p.ranks):
        for i, step in enumerate(steps):
            find((r, i))
            if i:
                edges.append(((r, i - 1), (r, i)))
            for a in step.parts:
                for v in _values(a)[1]:
                    makers.setdefault((r if comms else None, v), []).append((r, i))
                peer = {Op.SEND_F: 1, Op.SEND_B: -1, Op.RECV_F: -1, Op.RECV_B: 1}.get(a.op)
                if peer is not None and 0 <= a.stage + peer < p.num_stages:
                    other = p.placement[a.stage + peer]
                    if a.op in (Op.SEND_F, Op.SEND_B):
                        sends.setdefault((r, other), []).append((r, i))
                    else:
                        recvs.setdefault((other, r), []).append((r, i))
    for r, steps in enumerate(p.ranks):
        for i, step in enumerate(steps):
            for a in step.parts:
                for v in _values(a)[0]:
                    for src in makers.get((r if comms else None, v), ()):
                        data.append((src, (r, i)))
    for ch, ss in sends.items():
        for x, y in zip(ss, recvs.get(ch, ())):
            if semantics == "rendezvous":
                union(x, y)
            else:
                data.append((x, y))
    succ = {}
    for x, y in edges + data:
        succ.setdefault(find(x), set()).add(find(y))
    return find, succ, {(find(x), find(y)) for x, y in data}


def _reaches(succ, start, goal, skip=None) -> bool:
    seen, queue = {start}, deque([start])
    while queue:
        u = queue.popleft()
        for v in succ.get(u, ()):
            if (u, v) == skip:
                continue
            if v == goal:
                return True
            if v not in seen:
                seen.add(v)
                queue.append(v)
    return False


def independent_pairs(p: Program, semantics: str):
    """Adjacent compute steps (r, i), (r, i + 1) with no path between them but their program order."""
    find, succ, data = happens_before(p, semantics)
    out = []
    for r, steps in enumerate(p.ranks):
        for i in range(len(steps) - 1):
            if any(a.op.is_comm for k in (i, i + 1) for a in steps[k].parts):
                continue
            x, y = find((r, i)), find((r, i + 1))
            if x == y or (x, y) in data or _reaches(succ, x, y, skip=(x, y)) or _reaches(succ, y, x):
                continue
            out.append((r, i))
    return out


@budget(150)
@given(_cases(), st.sampled_from(("rendezvous", "eager")), st.data())
def test_swapping_independent_steps_keeps_the_verdict(p, semantics, data):
    pairs = independent_pairs(p, semantics)
    if not pairs:
        return
    r, i = data.draw(st.sampled_from(pairs), label="swap")
    ranks = [list(steps) for steps in p.ranks]
    ranks[r][i], ranks[r][i + 1] = ranks[r][i + 1], ranks[r][i]
    q = p.with_ranks(ranks)
    before, said = verdict(p, semantics)
    after, says = verdict(q, semantics)
    assert (says[0], says[1]) == (said[0], said[1]), (r, i, before.render(), after.render())


def test_a_chain_through_another_rank_is_not_independent():
    """F(0,1) then B(0,0) on rank 0: B(0,0) needs nothing from F(0,1) directly, but rank 1 runs
    F(1,1) before B(1,0), so B(0,0) waits for F(0,1) through rank 1 and swapping them deadlocks."""
    p = schedc.load("1f1b", {"P": 2, "M": 2})
    assert [str(s) for s in p.ranks[0]] == ["0F0", "0F1", "0B0", "0B1"]
    q = p.with_ranks([p.ranks[0], [p.ranks[1][k] for k in (0, 2, 1, 3)]])  # 1F0 1F1 1B0 1B1
    assert schedc.check(q).ok
    assert (0, 1) not in independent_pairs(q, "rendezvous")
    swapped = q.with_ranks([[q.ranks[0][k] for k in (0, 2, 1, 3)], q.ranks[1]])
    assert schedc.check(swapped).deadlock is not None


# ---------------------------------------------------------------------------------------------
# Scaling every cost
# ---------------------------------------------------------------------------------------------
def scale_costs(p: Program, k: float) -> Program:
    """Every time k times longer: stage times and latency times k, bandwidth divided by k."""
    ann = p.annotations
    costs = tuple(replace(c, F=c.F * k, B=c.B * k, I=c.I * k, W=c.W * k)
                  for c in (ann.cost_of(s) for s in range(p.num_stages)))
    return replace(p, annotations=replace(ann, stage_costs=costs, latency=ann.latency * k,
                                          bandwidth=ann.bandwidth / k))


@st.composite
def _with_links(draw, p: Program) -> Program:
    latency = draw(st.sampled_from([0.0, 0.5, 1.0]), label="latency")
    bandwidth = draw(st.sampled_from([0.0, 1.0, 4.0]), label="bandwidth")  # 0 = infinite
    return replace(p, annotations=replace(p.annotations, latency=latency, bandwidth=bandwidth))


@budget(100)
@given(_cases(costs=True, memory=True).flatmap(_with_links), st.sampled_from([2.0, 0.5, 3.0, 0.25, 10.0]),
       st.booleans(), st.sampled_from(SEMANTICS))
def test_scaling_every_cost_scales_the_makespan(p, k, overlap, semantics):
    q = scale_costs(p, k)
    assert verdict(q, semantics)[1] == verdict(p, semantics)[1]
    t, u = timing(p, overlap), timing(q, overlap)
    if isinstance(t, str) or isinstance(u, str):
        assert t == u
        return
    assert u.makespan == pytest.approx(k * t.makespan, rel=1e-9, abs=1e-9)
    assert u.busy == pytest.approx([k * b for b in t.busy], rel=1e-9, abs=1e-9)
    assert u.bubble_ratio == pytest.approx(t.bubble_ratio, abs=1e-9)
    for a, b in zip(t.start, u.start):
        assert list(b) == pytest.approx([k * x for x in a], rel=1e-9, abs=1e-9)


# ---------------------------------------------------------------------------------------------
# Changing M in a schedule's steady-state range
# ---------------------------------------------------------------------------------------------
BUILTINS = builtin_schedules()
DECLARED = {name: {q.name for q in parse(path.read_text(encoding="utf-8"), str(path)).params}
            for name, path in BUILTINS.items()}


def receives_first(program: Program) -> Program:
    """Every receive moved to the start of its rank: each rank waits for what it has not asked for."""
    def is_recv(step):
        return step.parts[0].op in (Op.RECV_F, Op.RECV_B)
    return program.with_ranks([[s for s in steps if is_recv(s)] + [s for s in steps if not is_recv(s)]
                               for steps in program.ranks])


TRANSFORMS = {
    "as written": lambda p: p,
    "lowered": lower,
    "receives before consumers": lambda p: receives_before_consumers(lower(p)),
    "receives first": lambda p: receives_first(lower(p)),
}


@functools.lru_cache(maxsize=None)
def _load(name, P, M):
    params = {"P": P, "M": M, **({"V": 2} if "V" in DECLARED[name] else {})}
    try:
        return schedc.load(name, params)
    except schedc.SchedcError as e:
        assert e.code == "require", e.render()
        return None


@budget(60)
@given(st.sampled_from(sorted(BUILTINS)), st.integers(2, 4), st.data(), st.sampled_from(sorted(TRANSFORMS)),
       st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)))
def test_changing_m_in_the_steady_state_keeps_the_verdict(name, P, data, transform, times):
    """Once M >= 2P every rank has finished its warm-up before its cool-down starts, so another
    microbatch only lengthens the steady phase: the verdict under each semantics stays, and with
    every stage costing F + I + W, the makespan grows by (stages per rank a microbatch runs through)
    x (F + I + W) a microbatch: the model's stages over the ranks (all of the stages, or with routes
    one copy of the model)."""
    admitted = [M for M in range(2 * P, 4 * P + 1) if _load(name, P, M) is not None]
    if len(admitted) < 2:
        return
    M1, M2 = sorted(data.draw(st.lists(st.sampled_from(admitted), min_size=2, max_size=2, unique=True), label="M"))
    F, I, W = times
    cost = parse_cost_option(f"F={F},I={I},W={W}")
    first, second = (cost.apply(TRANSFORMS[transform](_load(name, P, M))) for M in (M1, M2))
    for sem in ("rendezvous", "eager"):
        a, b = schedc.check(first, semantics=sem), schedc.check(second, semantics=sem)
        assert (a.ok, a.deadlock is None) == (b.ok, b.deadlock is None), (name, P, M1, M2, transform, sem)
    if transform in ("as written", "lowered"):
        assert schedc.check(first).ok and schedc.check(second).ok
        per_microbatch = first.model_stages // P * (F + I + W)
        assert simulate(second).makespan - simulate(first).makespan == pytest.approx((M2 - M1) * per_microbatch)
