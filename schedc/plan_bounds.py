"""Lower bounds on a schedule's simulated step and on its worst-case memory at one layout, from its
shape: which compute steps each rank runs (counted by op and stage), its placement, and which step
collectives it places itself (`shape_of(program)`; `family_shape` for a built-in before it is
expanded), read with the layout's stage costs (`step_bound`, `memory_bound`). `schedc plan`
simulates and checks only what these cannot rule out; tests/test_plan_bounds.py holds each to the
simulator and to `schedc check` over random layouts and costs.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .ir import COMPUTE, Compound, Op, Program, Route, StageCost
from .rules.time import step_time, timed

# What a bound gives up to floating-point rounding: the simulator adds the same times in another
# order, so a bound that is exact in real numbers may exceed it by an ulp or two.
SLACK = 1e-9
_BACKWARD = (Op.B, Op.I)  # the backwards that make an input gradient
Parts = tuple[tuple[Op, int], ...]  # one compute step: each part's (op, stage)


@dataclass(frozen=True)
class Shape:
    """What the bounds read of a program: `steps[r]`, rank r's compute steps as (parts, how many);
    `kinds`, every (op, stage) some step runs; `paired`, those that run (or, in a family's shape,
    may run) inside an overlapped pair, whose communication the pair can hide; `placed`, the
    (UNSHARD or REDUCE_GRAD, stage) the program places itself (the simulator adds the others:
    passes/stage_ops.py); `live[r]`, rank r's activations at the moments that may be its worst, as
    coefficients of each stage's (act, weight), one row each (empty: no memory bound). `timed`:
    False where the bound does not apply (a job of replicas, messages paired by tag): 0."""

    ranks: int
    stages: int
    placement: tuple[int, ...]
    speeds: tuple[float, ...]
    steps: tuple[tuple[tuple[Parts, int], ...], ...]
    kinds: frozenset[tuple[Op, int]]
    paired: frozenset[tuple[Op, int]]
    placed: frozenset[tuple[Op, int]] = frozenset()
    live: tuple[tuple[tuple[int, ...], tuple[tuple[float, ...], ...]], ...] = ()
    loose: bool = False  # a family's: a single step of a `paired` kind may be half of a pair
    timed: bool = True
    # the stage ranges (first, stop) a microbatch runs through, one after another: the chains the
    # bounds follow (routes: DualPipe's two directions, each its own pipeline); empty: every stage
    segments: tuple[tuple[int, int], ...] = ()

    def segment(self, s: int) -> tuple[int, int]:
        """The stages (first, stop) of the chain stage s is on."""
        return next((seg for seg in self.segments if seg[0] <= s < seg[1]), (0, self.stages))


# ---- the shape of a program, or of a built-in before it is expanded ----
def shape_of(program: Program) -> Shape:
    """The program's shape: its compute steps counted per rank, and its live activations."""
    R = program.num_ranks
    steps, placed, live = [], set(), []
    for r in range(R):
        x, code, stage, pairs = _rank_columns(program, r)
        singles, found = _singles(x, code, stage, program.num_stages)
        steps.append(tuple(singles + list(pairs.items())))
        placed |= found
        live.append(((), ()) if program.forward_only else _live_rows(x, code, stage))
    kinds = frozenset(p for rank in steps for parts, _ in rank for p in parts)
    paired = frozenset(p for rank in steps for parts, _ in rank if len(parts) > 1 for p in parts)
    plain = not program.replicas and program.p2p == "shared" and not any(op is Op.REDUCE_TIED for op, _ in placed)
    segments = tuple(sorted({r.stages for r in program.routes}))
    return Shape(R, program.num_stages, tuple(program.placement), program.annotations.speeds(R), tuple(steps),
                 kinds, paired, frozenset(placed), tuple(live), timed=plain and not program.forward_only,
                 segments=segments)


def _rank_columns(program: Program, r: int):
    """Rank r's actions as arrays (step index, op code, stage), and its compound steps' compute
    parts counted (a program held as columns without compounds is read as it is)."""
    from operator import attrgetter
    from .columns import CODE, columns_of
    import numpy as np
    held = columns_of(program)
    if held is not None and not held.compounds:
        lo, hi = held.starts[r], held.starts[r + 1]
        return np.arange(hi - lo), held.op[lo:hi], held.stage[lo:hi], {}
    steps = program.ranks[r]
    pairs: Counter = Counter()
    if Compound not in set(map(type, steps)):  # (then every step is an Action)
        codes = list(map(CODE.__getitem__, map(attrgetter("op"), steps)))
        return np.arange(len(steps)), np.array(codes, dtype=np.int64), np.array(
            list(map(attrgetter("stage"), steps)), dtype=np.int64), pairs
    xs, codes, stages = [], [], []
    for x, st in enumerate(steps):
        parts = st.parts
        for a in parts:
            xs.append(x)
            codes.append(CODE[a.op])
            stages.append(a.stage)
        if len(parts) > 1 and sum(a.op in COMPUTE for a in parts) > 1:
            pairs[tuple((a.op, a.stage) for a in parts if a.op in COMPUTE)] += 1
    return np.array(xs, dtype=np.int64), np.array(codes, dtype=np.int64), np.array(stages, dtype=np.int64), pairs


def _singles(x, code, stage, S: int) -> tuple[list[tuple[Parts, int]], set[tuple[Op, int]]]:
    """The steps of one compute action counted by (op, stage), and the collectives placed, from a
    rank's arrays (an action that shares its step with another compute action is a pair's)."""
    from .columns import CODE, OPS
    import numpy as np
    computes = np.isin(code, [CODE[op] for op in COMPUTE])
    per_step = np.bincount(x[computes], minlength=int(x[-1]) + 1 if len(x) else 0)
    alone = computes & (per_step[x] == 1) if len(x) else computes
    keys, counts = np.unique(code[alone] * max(S, 1) + stage[alone], return_counts=True)
    singles: list[tuple[Parts, int]] = [(((OPS[k // max(S, 1)], int(k % max(S, 1))),), int(n))
                                        for k, n in zip(keys.tolist(), counts.tolist())]
    collective = np.isin(code, [CODE[op] for op in (Op.UNSHARD, Op.REDUCE_GRAD, Op.REDUCE_TIED)])
    placed: set[tuple[Op, int]] = {(OPS[c], int(s)) for c, s in zip(code[collective].tolist(),
                                                                    stage[collective].tolist())}
    return singles, placed


def _live_rows(x, code, stage) -> tuple[tuple[int, ...], tuple[tuple[float, ...], ...]]:
    """A rank's live activations while each of its steps runs (after the step's allocations, before
    its frees: schedc/rules/memory.py), as counts of each of its stages' (act, weight): (its stages,
    one row per moment), keeping only the rows no other row is at least everywhere (the rest
    cannot be the worst at any sizes)."""
    from .columns import CODE
    import numpy as np
    compute = np.isin(code, [CODE[op] for op in COMPUTE])
    if not compute.any():
        return (), ()
    mine = np.unique(stage[compute])
    k, steps = len(mine), int(x[-1]) + 1
    local = np.searchsorted(mine, stage)
    alloc = np.zeros((steps, 2 * k))
    free = np.zeros((steps, 2 * k))
    f, b, i, w = (compute & (code == CODE[op]) for op in (Op.F, Op.B, Op.I, Op.W))
    np.add.at(alloc, (x[f], 2 * local[f]), 1.0)
    np.add.at(free, (x[b | i], 2 * local[b | i]), -1.0)
    np.add.at(free, (x[i], 2 * local[i] + 1), 1.0)
    np.add.at(free, (x[w], 2 * local[w] + 1), -1.0)
    during = np.cumsum(alloc + free, axis=0) - free
    return tuple(int(s) for s in mine.tolist()), tuple(_undominated(during))


def _undominated(rows):
    """The rows (a 2-d array) that no other row is at least everywhere, as tuples."""
    import numpy as np
    rows = rows[np.argsort(-rows.sum(axis=1), kind="stable")]
    kept = []
    while len(rows):
        top = rows[0]
        kept.append(tuple(top.tolist()))
        rows = rows[1:][~(rows[1:] <= top).all(axis=1)]
    return kept


@dataclass(frozen=True)
class Family:
    """What every program of a built-in schedule has, whatever P and M: V stages a rank, placed
    `loop` (s on s % P) or `vshape` (r and 2P-1-r), each (stage, microbatch) run forward once and
    backward by `backward` (B; I and W; or either), whether forwards and backwards may pair, and
    whether two routes of P stages each (DualPipe's directions, copies of the model) split the
    microbatches between them (`routed`)."""

    V: int
    place: str
    backward: str  # "B", "IW" or "B|IW"
    pairs: bool = False
    routed: bool = False  # two routes: stages 0..P-1 run the first M/2 microbatches, P..2P-1 the rest


FAMILIES = {
    "1f1b": Family(1, "loop", "B"), "gpipe": Family(1, "loop", "B"), "zb_h1": Family(1, "loop", "IW"),
    "zb_h2": Family(1, "loop", "IW"), "interleaved_1f1b": Family(2, "loop", "B"),
    "looped_bfs": Family(2, "loop", "B"), "interleaved_zero_bubble": Family(2, "loop", "IW"),
    "zbv": Family(2, "vshape", "IW"), "dualpipev": Family(2, "vshape", "B|IW", pairs=True),
    "dualpipe": Family(2, "vshape", "B|IW", pairs=True, routed=True),
}


def family_shape(name: str, P: int, M: int) -> Shape | None:
    """The shape every program of built-in `name` at P, M (V = 2) is within (`covers`), without
    expanding it: None for a schedule not in FAMILIES."""
    fam = FAMILIES.get(name)
    if fam is None:
        return None
    S = fam.V * P
    placement = tuple(s % P if fam.place == "loop" else (s if s < P else 2 * P - 1 - s) for s in range(S))
    backward = {"B": (Op.B,), "IW": (Op.I, Op.W), "B|IW": (Op.B, Op.I, Op.W)}[fam.backward]
    segments, n = (((0, P), (P, S)), M // 2) if fam.routed else ((), M)  # (routed: each stage runs its route's)
    steps: list[list[tuple[Parts, int]]] = [[] for _ in range(P)]
    for s, r in enumerate(placement):
        steps[r].append((((Op.F, s),), n))
        for op in backward:  # either way a stage's backward takes B = I + W (a mixed one: counted as B)
            fused = fam.backward == "B|IW"
            steps[r].append((((op, s),), 0 if fused and op is not Op.B else n))
    kinds = frozenset((op, s) for s in range(S) for op in (Op.F, *backward))
    paired = frozenset(k for k in kinds if k[0] in (Op.F, Op.B, Op.I)) if fam.pairs else frozenset()
    return Shape(P, S, placement, (1.0,) * P, tuple(tuple(x) for x in steps), kinds, paired, loose=fam.pairs,
                 segments=segments)


def family_routes(shape: Shape, M: int) -> tuple[Route, ...]:
    """A family's routes as a program of it declares them (M split evenly over its segments)."""
    k = len(shape.segments)
    return tuple(Route((i * M // k, (i + 1) * M // k), seg) for i, seg in enumerate(shape.segments))


def covers(family: Shape, shape: Shape) -> bool:
    """Whether a family's shape bounds a program's: the same ranks, stages, placement, speeds and
    routes (`segments`), no kind of step the family does not have, pairs only of kinds it may pair,
    no collective placed, and as many forwards and backwards (B or I; a W for each I) of each
    stage."""
    pairs_ok = all(p in family.paired for rank in shape.steps for parts, _ in rank if len(parts) > 1 for p in parts)
    mine, theirs = _counts(shape), _counts(family)
    counts_ok = all(mine[Op.F, s] == theirs[Op.F, s] and mine[Op.B, s] + mine[Op.I, s] == theirs[Op.B, s]
                    + theirs[Op.I, s] and mine[Op.W, s] == mine[Op.I, s] for s in range(family.stages))
    same = (family.ranks, family.stages, family.placement, family.speeds, family.segments) == (
        shape.ranks, shape.stages, shape.placement, shape.speeds, shape.segments)
    return same and shape.kinds <= family.kinds and pairs_ok and counts_ok and not shape.placed and shape.timed


def _counts(shape: Shape) -> Counter:
    """How many actions of each (op, stage) the shape's steps hold, pairs' parts included."""
    out: Counter = Counter()
    for rank in shape.steps:
        for parts, n in rank:
            for p in parts:
                out[p] += n
    return out


# ---- the bounds ----
def step_bound(shape: Shape, costs: Sequence[StageCost], out: Sequence[float], latency: float,
               bandwidth: float) -> float:
    """Seconds the simulator's step (schedc/simulate.py, with the step's collectives) cannot beat.

    Every rank runs its compute steps one after another, so its last one ends no earlier than the
    earliest any of them can start plus all their times, or the earliest its backwards can start
    plus theirs; what must follow its last step comes after: the gradient on down to its route's
    first stage (and that rank's reductions), or its own reductions, which the simulator adds at the
    end of its list and runs one after another. The earliest a forward of stage s starts is the
    forwards of the stages before it on its route (`Shape.segments`: every stage, or DualPipe's two
    directions, the second starting at stage P, not after stage P-1), the messages between ranks
    (latency and size / bandwidth), and its FSDP gather; a backward's, that and the backwards of the
    stages after it on its route (`_Chains`). A step of a
    pair is timed as its computation alone (the pair may hide its communication: rules/time.py); in
    a family's shape, a step that may be paired is too. 0 where the shape says the bound does not
    apply."""
    if not shape.timed:
        return 0.0
    chains = _Chains(shape, costs, out, latency, bandwidth)
    ends = (_rank_end(rank, chains, costs, shape, shape.speeds[r]) for r, rank in enumerate(shape.steps) if rank)
    return max(ends, default=0.0) * (1 - SLACK)


class _Chains:
    """Per stage s: `fwd[s]`, the earliest a forward of s can start; `bwd[s]`, a backward (B or I);
    `back[s]`, the least time a backward of s takes (None: s has none); `post[s]`, the least time
    from a backward of s ending to the step's end; and per rank, `reduce[r]`, the seconds of the
    reductions the simulator adds at the end of its list (one after another)."""

    def __init__(self, shape: Shape, costs: Sequence[StageCost], out: Sequence[float], latency: float,
                 bandwidth: float):
        S, at, kinds = shape.stages, shape.placement, shape.kinds
        self.shape, self.costs = shape, costs
        hop = [0.0 if at[s] == at[s + 1] else latency + (out[s] / bandwidth if out[s] and bandwidth else 0.0)
               for s in range(S - 1)]
        gather = [costs[s].U if (Op.UNSHARD, s) not in shape.placed else 0.0 for s in range(S)]
        self.reduce = [0.0] * shape.ranks
        for s in range(S):
            if (Op.REDUCE_GRAD, s) not in shape.placed and 0 <= at[s] < shape.ranks:
                self.reduce[at[s]] += costs[s].R
        back = [min((self.link(op, s) for op in _BACKWARD if (op, s) in kinds), default=None) for s in range(S)]
        first = [shape.segment(s)[0] == s for s in range(S)]  # a chain's first stage (its last: s + 1's first)
        fwd = [0.0] * S
        for s in range(S):
            fwd[s] = max(fwd[s - 1] + self.link(Op.F, s - 1) + hop[s - 1] if not first[s] else 0.0, gather[s])
        bwd = [fwd[s] + self.link(Op.F, s) for s in range(S)]
        for s in range(S - 2, -1, -1):
            up = back[s + 1]
            if up is not None and not first[s + 1]:
                bwd[s] = max(bwd[s], bwd[s + 1] + up + hop[s])
        post = [0.0] * S
        for s in range(S):
            split = (Op.I, s) in kinds and (Op.B, s) not in kinds  # its W is still to come on its rank
            own = self.reduce[at[s]] + (self.link(Op.W, s) if split else 0.0)
            down = back[s - 1] if not first[s] else None
            post[s] = max(own, hop[s - 1] + down + post[s - 1]) if down is not None else own
        self.fwd, self.bwd, self.back, self.post = fwd, bwd, back, post

    def link(self, op: Op, s: int) -> float:
        """The least time an action takes as a link of a chain: its own, its computation alone if
        it may be paired."""
        t, c = timed(self.costs[s], op.value)
        return (t - c if (op, s) in self.shape.paired else t) / self.shape.speeds[self.shape.placement[s]]

    def earliest(self, op: Op, s: int) -> float:
        if op is Op.F:
            return self.fwd[s]
        return self.bwd[s] + (self.back[s] or 0.0) if op is Op.W else self.bwd[s]

    def after(self, op: Op, s: int) -> float:
        return self.post[s] if op in _BACKWARD else self.reduce[self.shape.placement[s]]


def _rank_end(rank, chains: _Chains, costs: Sequence[StageCost], shape: Shape, speed: float) -> float:
    """The earliest one rank's last compute step can end, and what must follow it. That step is a
    backward where the rank has any (each forward's backward runs after it on the same rank)."""
    head = head_back = tail = tail_back = float("inf")
    busy = busy_back = 0.0
    for parts, n in rank:
        d = _time(parts, costs, shape, speed)
        start = max(chains.earliest(op, s) for op, s in parts)
        after = max(chains.after(op, s) for op, s in parts)
        head, busy, tail = min(head, start), busy + n * d, min(tail, after)
        if any(op is not Op.F for op, _ in parts):
            head_back, busy_back, tail_back = min(head_back, start), busy_back + n * d, min(tail_back, after)
    if head_back == float("inf"):  # forwards only
        return head + busy + tail
    return max(head + busy, head_back + busy_back) + tail_back


def _time(parts: Parts, costs: Sequence[StageCost], shape: Shape, speed: float) -> float:
    """Seconds of one step (rules/time.py), a family's single that may be paired: its computation."""
    if len(parts) == 1 and shape.loose and parts[0] in shape.paired:
        t, c = timed(costs[parts[0][1]], parts[0][0].value)
        return (t - c) / speed
    return step_time([timed(costs[s], op.value) for op, s in parts]) / speed


def memory_bound(shape: Shape, act: Sequence[float], weight: Sequence[float], states: Sequence[float]) -> float:
    """GiB (the sizes' unit) the worst rank holds at least, model states (`states`, per rank)
    included: its activations at their worst moment along its own order, without the receive
    buffers `schedc check` adds (0 with no rows)."""
    worst = 0.0
    for r, (mine, rows) in enumerate(shape.live or ()):
        sizes = [x for s in mine for x in (act[s], weight[s])]
        peak = max((sum(c * x for c, x in zip(row, sizes) if c) for row in rows), default=0.0)
        worst = max(worst, (states[r] if r < len(states) else 0.0) + peak)
    return worst * (1 - SLACK)
