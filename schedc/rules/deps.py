"""The one rule of what an action needs and produces (docs/semantics.md, "Dependencies").

Values are `("act", s, m)`, the output of F(s,m), and `("grad", s, m)`, the input gradient made by
I(s,m) or B(s,m). Communication moves a value between ranks by PyTorch's convention: SEND_F(s,m)
on the rank of s meets RECV_F(s+1,m); SEND_B(s,m) meets RECV_B(s-1,m). Every pass, checker and
simulator asks this module, so the rule is written once. A reduction of weight gradients
(REDUCE_GRAD, REDUCE_TIED) needs every backward that adds to them, B or W, before it (`reduces`).
Where a stage's neighbours end is its route's business (`Routes`): every function that asks whether
stage s + offset exists takes `stages`, the number of stages (every microbatch visits each) or the
program's `Routes` (`stages_of`).
"""
from __future__ import annotations

import math
from bisect import bisect_right
from functools import lru_cache
from typing import Union

from ..ir import Action, Op, Program, Route

Value = tuple[str, int, int]

# The rule as data (the functions below read it, and so does the numpy fast path, verify/fast.py):
MAKES = {Op.F: "act", Op.B: "grad", Op.I: "grad"}  # the value of its own (stage, microbatch) an action makes
NEEDS = {  # each (kind, offset): the value of that kind of stage s + offset, same microbatch, where that stage exists
    Op.F: (("act", -1),),
    Op.B: (("act", 0), ("grad", 1)),
    Op.I: (("act", 0), ("grad", 1)),
    Op.W: (("grad", 0),),
    Op.SEND_F: (("act", 0),),
    Op.SEND_B: (("grad", 0),),
}
DELIVERS = {Op.RECV_F: ("act", -1), Op.RECV_B: ("grad", 1)}  # a receive at stage s brings (kind, s + offset)
# A stage's weight gradients: each microbatch's B or W adds to them (I computes input gradients only);
# a reduction reads them, so every such backward of its stages on its rank comes before it
# (docs/semantics.md, "Collectives"): torch's runtime would reduce, and scale by 1/M, a partial sum.
ADDS_GRADIENT = frozenset({Op.B, Op.W})
REDUCTIONS = frozenset({Op.REDUCE_GRAD, Op.REDUCE_TIED})


class Routes:
    """Which stages each microbatch visits (docs/semantics.md, "Routes"): the stages are copies of
    one model of L stages, each copy a run of L consecutive stages (a `segment`), and each
    microbatch runs through one copy in stage order. A stage's neighbours are those of its segment,
    whatever the microbatch: the segment's first stage reads the inputs, its last computes the loss.
    Built from routes that `route_problems` accepts."""

    __slots__ = ("num_stages", "num_microbatches", "routes", "first", "stop", "route_of")

    def __init__(self, num_stages: int, num_microbatches: int, routes: tuple[Route, ...]):
        self.num_stages, self.num_microbatches, self.routes = num_stages, num_microbatches, routes
        self.first, self.stop = list(range(num_stages)), list(range(1, num_stages + 1))  # (a stage alone)
        self.route_of = [-1] * num_microbatches  # microbatch -> its route's index (-1: none)
        for k, r in enumerate(routes):
            lo, hi = r.stages
            for s in range(max(lo, 0), min(hi, num_stages)):
                self.first[s], self.stop[s] = lo, hi
            for m in range(max(r.microbatches[0], 0), min(r.microbatches[1], num_microbatches)):
                self.route_of[m] = k

    def bounds(self, s: int) -> tuple[int, int]:
        """(first, stop) of stage s's segment: its neighbours are the stages in first..stop-1."""
        if 0 <= s < self.num_stages:
            return self.first[s], self.stop[s]
        return 0, self.num_stages

    def visits(self, s: int, m: int) -> bool:
        """Does microbatch m run through stage s?"""
        k = self.route_of[m] if 0 <= m < self.num_microbatches else -1
        return k >= 0 and self.routes[k].stages[0] <= s < self.routes[k].stages[1]

    def route(self, m: int) -> Route | None:
        """Microbatch m's route (None: it has none)."""
        k = self.route_of[m] if 0 <= m < self.num_microbatches else -1
        return self.routes[k] if k >= 0 else None

    def visitors(self, s: int) -> list[int]:
        """The microbatches that run through stage s, in order."""
        return [m for r in self.routes if r.stages[0] <= s < r.stages[1] for m in range(*r.microbatches)]


Stages = Union[int, Routes]  # the number of stages (no routes), or the program's routes


def stages_of(program: Program) -> Stages:
    """What the functions below take as `stages` for this program: its number of stages, or its
    `Routes` (made once per set of routes)."""
    return routed(program.num_stages, program.num_microbatches, program.routes)


@lru_cache(maxsize=64)
def routed(num_stages: int, num_microbatches: int, routes: tuple[Route, ...]) -> Stages:
    """`stages_of` a program of these sizes and routes (the same object for the same routes)."""
    return Routes(num_stages, num_microbatches, routes) if routes else num_stages


def bounds(stages: Stages, s: int) -> tuple[int, int]:
    """(first, stop) of the stages stage s's neighbours are among: all of them, or its segment."""
    return (0, stages) if isinstance(stages, int) else stages.bounds(s)


def visits(stages: Stages, s: int, m: int) -> bool:
    """Does microbatch m run through stage s (every one does, without routes)?"""
    return 0 <= s < stages if isinstance(stages, int) else stages.visits(s, m)


def route_problems(num_stages: int, num_microbatches: int, routes: tuple[Route, ...]) -> list[tuple[int, str]]:
    """What is wrong with these routes, as (index of the route to blame, message): each route a
    non-empty range of microbatches in 0..M-1 over a non-empty range of stages in 0..S-1; every
    microbatch on exactly one route; the routes' stage ranges the same length and equal or apart (each
    a copy of the one model), and every stage on one of them. Empty when they describe a program."""
    out = [(k, why) for k, r in enumerate(routes) for why in _range_problems(r, num_stages, num_microbatches)]
    if out or not routes:
        return out
    out += _segment_problems(routes)
    owner: dict[int, int] = {}
    for k, r in enumerate(routes):
        twice = next((m for m in range(*r.microbatches) if m in owner), None)
        if twice is not None:
            out.append((k, f"microbatch {twice} is on route {owner[twice] + 1} already"))
        owner.update((m, k) for m in range(*r.microbatches) if m not in owner)
    lost = next((m for m in range(num_microbatches) if m not in owner), None)
    if lost is not None:
        out.append((len(routes) - 1, f"microbatch {lost} is on no route"))
    covered = {s for r in routes for s in range(*r.stages)}
    idle = next((s for s in range(num_stages) if s not in covered), None)
    if idle is not None:
        out.append((len(routes) - 1, f"stage {idle} is on no route"))
    return out


def _range_problems(r: Route, num_stages: int, num_microbatches: int) -> list[str]:
    """A route's ranges that are empty or outside the program."""
    (a, b), (c, d) = r.microbatches, r.stages
    out = []
    if not 0 <= a < b <= num_microbatches:
        out.append(f"microbatches {a} .. {b} is not a non-empty range in 0 .. {num_microbatches}")
    if not 0 <= c < d <= num_stages:
        out.append(f"stages {c} .. {d} is not a non-empty range in 0 .. {num_stages}")
    return out


def _segment_problems(routes: tuple[Route, ...]) -> list[tuple[int, str]]:
    """Routes whose stages are not a copy of the first route's model: another length, or a range
    that overlaps another without being the same."""
    out = []
    length = routes[0].stages[1] - routes[0].stages[0]
    for k, r in enumerate(routes):
        c, d = r.stages
        if d - c != length:
            out.append((k, f"this route runs {d - c} stages and the first runs {length}: every route runs "
                           "the whole model, cut the same way"))
        crossed = next((j for j, q in enumerate(routes[:k]) if q.stages != r.stages and q.stages[0] < d
                        and c < q.stages[1]), None)
        if crossed is not None:
            q = routes[crossed].stages
            out.append((k, f"stages {c} .. {d} overlap the stages {q[0]} .. {q[1]} of route {crossed + 1}; "
                           "routes run the same stages or none in common"))
    return out


def visited(stages: Stages, num_microbatches: int) -> int:
    """How many (stage, microbatch) pairs run: every one, or those on the microbatches' routes."""
    if isinstance(stages, int):
        return stages * num_microbatches
    return sum(len(range(*r.microbatches)) * len(range(*r.stages)) for r in stages.routes)


def model_stage(stages: Stages, s: int) -> int:
    """Which stage of the model stage s runs: s itself, or its place in its segment (a copy)."""
    return s - bounds(stages, s)[0]


def copies(stages: Stages, num_stages: int) -> dict[int, tuple[int, ...]]:
    """Each stage of the model -> the stages that run a copy of it, where some run more than one
    (routes: DualPipe's two directions); empty without copies."""
    out: dict[int, list[int]] = {}
    for s in range(num_stages):
        out.setdefault(model_stage(stages, s), []).append(s)
    return {c: tuple(same) for c, same in out.items() if len(same) > 1}


def produces(a: Action) -> Value | None:
    """The value a compute action makes, if any."""
    kind = MAKES.get(a.op)
    return None if kind is None or a.microbatch is None else (kind, a.stage, a.microbatch)


def needs(a: Action, stages: Stages) -> tuple[Value, ...]:
    """The values an action needs present on its rank before it can run (a collective, which has no
    microbatch, needs none: it waits for its group, verify/mesh.py). `stages`: see `stages_of`."""
    s, m = a.stage, a.microbatch
    if m is None:
        return ()
    lo, hi = (0, stages) if isinstance(stages, int) else stages.bounds(s)
    return tuple((kind, s + off, m) for kind, off in NEEDS.get(a.op, ()) if lo <= s + off < hi)


def neighbour_input(a: Action, stages: Stages) -> Value | None:
    """The value a compute action needs from another stage: F's the activation of s-1, B's and I's
    the input gradient of s+1. None where there is no such stage: the first stage's F reads the
    inputs, the last stage's backward the loss (of its route's, where there are routes)."""
    return next((v for v in needs(a, stages) if v[1] != a.stage), None)


def producer(v: Value, backward: Op = Op.B) -> tuple[Op, int, int]:
    """The compute action that makes a value, as (op, stage, microbatch): F for an activation, the
    stage's `backward` (B, or I where the backward is split) for an input gradient."""
    kind, s, m = v
    return (Op.F if kind == "act" else backward, s, m)


def reduces(a: Action, placement: tuple[int, ...]) -> tuple[int, ...]:
    """The stages whose weight gradients a reduction reads on its rank: REDUCE_GRAD(s) stage s's
    (FSDP's reduce-scatter too: torch finishes it there); REDUCE_TIED those of the first and the
    last stage its rank holds (one tied weight: with one stage, nothing to sum). None for others."""
    if a.op is Op.REDUCE_GRAD:
        return (a.stage,)
    if a.op is not Op.REDUCE_TIED or len(placement) < 2:
        return ()
    home = placement[a.stage]
    return tuple(s for s in (0, len(placement) - 1) if placement[s] == home)


def delivers(a: Action) -> Value | None:
    """The value a receive brings to its rank (named by the receiving stage)."""
    rule = DELIVERS.get(a.op)
    return None if rule is None or a.microbatch is None else (rule[0], a.stage + rule[1], a.microbatch)


def takers(program: Program) -> dict[tuple[int, Value], list[tuple[int, int]]]:
    """(rank, value) -> the (step, part) of every computation on the rank that needs the value, in
    program order: found in one pass, so each receive's taker is a lookup (`taker`)."""
    S = stages_of(program)
    out: dict[tuple[int, Value], list[tuple[int, int]]] = {}
    for r, steps in enumerate(program.ranks):
        for x, st in enumerate(steps):
            for k, a in enumerate(st.parts):
                if a.op.is_compute:
                    for v in needs(a, S):
                        out.setdefault((r, v), []).append((x, k))
    return out


def taker(found: list[tuple[int, int]] | None, step: int) -> tuple[int, int] | None:
    """Of `found` (a value's takers on a rank, `takers`), the (step, part) of the first after `step`:
    the action that takes what a receive at `step` brings, and waits for that receive to complete."""
    if not found:
        return None
    i = bisect_right(found, (step, math.inf))
    return found[i] if i < len(found) else None


def payload(a: Action) -> Value | None:
    """What travels with a send or receive; a matched pair is consistent iff payloads agree."""
    if (a.op is Op.SEND_F or a.op is Op.SEND_B) and a.microbatch is not None:
        ((kind, _),) = NEEDS[a.op]
        return (kind, a.stage, a.microbatch)
    return delivers(a)


# the offset of the stage that consumes a value made on another stage: "act" of s is F(s+1)'s, "grad" of s is s-1's
_CROSS = {kind: off for op in MAKES for kind, off in NEEDS[op] if off}
_SENDS = {NEEDS[op][0][0]: op for op in (Op.SEND_F, Op.SEND_B)}  # the send that carries a kind of value
RECEIVES = {kind: op for op, (kind, _) in DELIVERS.items()}  # the receive that brings it
CONSUMER_OFFSET = {kind: -off for kind, off in _CROSS.items()}  # the stage using a value of s: s + this
PEER_OFFSET = {**{op: -_CROSS[NEEDS[op][0][0]] for op in (Op.SEND_F, Op.SEND_B)},
                **{op: off for op, (_, off) in DELIVERS.items()}}


def peer_stage(a: Action) -> int | None:
    """The stage on the other end of a send or receive."""
    offset = PEER_OFFSET.get(a.op)
    return None if offset is None else a.stage + offset


def consumer_stage(a: Action, stages: Stages) -> int | None:
    """The stage that consumes the value a compute action produces, if another stage does (one of
    its segment's, where there are routes)."""
    kind = MAKES.get(a.op)
    if kind is None:
        return None
    dest = a.stage + CONSUMER_OFFSET[kind]
    lo, hi = bounds(stages, a.stage)
    return dest if lo <= dest < hi else None


def remote_consumer(a: Action, placement: tuple[int, ...], stages: Stages) -> int | None:
    """The stage that consumes a compute action's output on another rank (so it travels as a
    message), if there is one."""
    dest = consumer_stage(a, stages)
    return None if dest is None or placement[dest] == placement[a.stage] else dest


def message(a: Action, placement: tuple[int, ...], stages: Stages) -> tuple[Action, Action] | None:
    """The (send, receive) pair that carries a compute action's output to another rank, if any."""
    dest = remote_consumer(a, placement, stages)
    if dest is None:
        return None
    kind = MAKES[a.op]
    return Action(_SENDS[kind], a.stage, a.microbatch, a.span), Action(RECEIVES[kind], dest, a.microbatch, a.span)


def value_name(v: Value) -> str:
    kind, s, m = v
    return f"the activation of F({s},{m})" if kind == "act" else f"the input gradient of stage {s}, microbatch {m}"
