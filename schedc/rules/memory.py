"""The one rule of what memory an action holds (docs/semantics.md, "Memory"), in sizes a caller chooses.

F(s,m) allocates a_s; B frees a_s; I frees a_s - w_s; W frees w_s; inside one step, allocations come
before frees. A message weighs the `out` of the stage below the boundary it crosses. A stage holds
its weights for the whole run, and where routes run copies of the model every copy holds its own
(`weights_of_stages`: DualPipe's two directions hold the model's weights twice). The engines
(schedc/verify/memory.py's worst case, the fast paths, the simulators, `order greedy`, prove and
synth, here also as solver terms) derive their counts from this module, so none restates it.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from math import gcd, lcm
from typing import TYPE_CHECKING, TypeVar

from .deps import model_stage, payload, stages_of
from ..ir import Action, Op, Program

if TYPE_CHECKING:  # (fractions is imported by the prover's exact sizes, `whole_deltas`: a check needs none)
    from fractions import Fraction

ALLOCATES = frozenset({Op.F})  # counted as its step starts: inside one step, allocations come first
FREES = (Op.B, Op.I, Op.W)  # counted as its step ends, after every allocation of the step

# The stage whose `out` a value weighs, relative to the value's stage (schedc/rules/deps.py names it):
# an activation is its stage's output; an input gradient has the shape of its stage's input, the
# output of the stage below.
_SHAPE_OF = {"act": 0, "grad": -1}
Size = TypeVar("Size", float, "Fraction")  # sizes as given (floats), or exact (the prover's Fractions)


def _message_source(op: Op) -> int:
    value = payload(Action(op, 0, 0))
    assert value is not None  # (every send and receive carries a value)
    kind, stage, _ = value
    return stage + _SHAPE_OF[kind]


# A send or receive at stage s carries the `out` of stage s + MESSAGE_SOURCE[op] (derived from deps).
MESSAGE_SOURCE = {op: _message_source(op) for op in (Op.SEND_F, Op.RECV_F, Op.SEND_B, Op.RECV_B)}


def op_delta(op: Op, act: Size, weight: Size) -> Size:
    """The activation an action allocates (> 0) or frees (< 0) when its stage's sizes are `act` (a)
    and `weight` (w): F allocates a; B frees a; I frees a - w; W frees w; other ops hold nothing."""
    if op is Op.F:
        return act
    if op is Op.B:
        return -act
    if op is Op.I:
        return weight - act
    return -weight if op is Op.W else type(act)(0)


def allocated(op: Op, act: float, weight: float) -> float:
    """What an action adds as its step starts (before any free of the step): an F's activation."""
    return op_delta(op, act, weight) if op in ALLOCATES else 0.0


def freed(op: Op, act: float, weight: float, forward_only: bool = False) -> float:
    """What an action frees as its step ends (negative: it grows then, an I whose w exceeds a): B's,
    I's and W's `op_delta`, negated; in a forward-only program an F frees what it allocated as its
    step ends (nothing is kept for a backward)."""
    if op in ALLOCATES:
        return op_delta(op, act, weight) if forward_only else 0.0
    return -op_delta(op, act, weight)


def whole_deltas(ops: Iterable[Op], act: int | Fraction, weight: int | Fraction) -> tuple[Fraction, dict[Op, int]]:
    """`op_delta` of each of `ops` (the compute ops a schedule runs) in the largest size in which
    all of them are whole numbers, for a stage of exact sizes `act` and `weight` (ints or
    Fractions): (that size, {op: its delta in it}). With `weight = act` that size is `act`: F adds
    one, B and W free one, I nothing (what prove counts and calls live activations)."""
    from fractions import Fraction
    exact = {op: Fraction(op_delta(op, Fraction(act), Fraction(weight))) for op in ops}
    moved = [abs(d) for d in exact.values() if d]
    if not moved:
        return Fraction(1), {op: 0 for op in exact}
    scale = lcm(*(d.denominator for d in moved))
    unit = Fraction(gcd(*(int(d * scale) for d in moved)), scale)
    return unit, {op: int(d / unit) for op, d in exact.items()}


def count_groups(deltas: dict[Op, int]) -> list[tuple[tuple[Op, ...], int]]:
    """The rule as counts (a solver's terms): `(ops, delta)` pairs such that a rank holds the sum of
    each delta x the number of its ops' actions so far. `deltas`: each op's delta (`whole_deltas`);
    an I and its W free between them what a B frees, so B joins the I's group and the W's group.
    Groups that move nothing are left out: with `weight = act`, the (B, I)'s."""
    groups: list[tuple[tuple[Op, ...], int]] = [((Op.F,), deltas.get(Op.F, 0))]
    if Op.I in deltas or Op.W in deltas:
        groups += [((Op.B, Op.I), deltas[Op.I]), ((Op.B, Op.W), deltas[Op.W])]
    else:
        groups.append(((Op.B,), deltas.get(Op.B, 0)))
    return [(ops, d) for ops, d in groups if d]


def held_within(changes: Iterable[tuple[int, object]], cap: int,
                negate: Callable[[object], object]) -> tuple[list[tuple[object, int]], int]:
    """`sum of delta x [it happened] <= cap` over `changes` ((delta, happened) pairs, `happened`
    True, False or a solver literal that `negate` negates) as a pseudo-Boolean at-most with positive
    weights: (terms [(literal, weight)], bound), the sum of the terms' weights whose literal holds
    being at most the bound. A free (delta < 0) counts as -delta x [not happened] + delta."""
    terms: list[tuple[object, int]] = []
    bound = cap
    for d, v in changes:
        if d == 0:
            continue
        if d < 0:
            bound -= d
            v = (not v) if isinstance(v, bool) else negate(v)
        if v is True:
            bound -= abs(d)
        elif v is not False:
            terms.append((v, abs(d)))
    return terms, bound


def stage_sizes(program: Program) -> tuple[list[float], list[float], list[float]]:
    """(act, weight, out) of every stage, from the program's annotations."""
    mems = [program.annotations.memory_of(s) for s in range(program.num_stages)]
    return [m.act for m in mems], [m.weight for m in mems], [m.out for m in mems]


def activation_delta(program: Program, op: Op, stage: int) -> float:
    """`op_delta` in the program's sizes of that stage."""
    mem = program.annotations.memory_of(stage)
    return op_delta(op, mem.act, mem.weight)


def activation_deltas(program: Program) -> dict[Op, list[float]]:
    """`activation_delta` of every compute op on every stage: {op: [delta of stage 0, ...]}."""
    act, weight, _ = stage_sizes(program)
    return {op: [op_delta(op, a, w) for a, w in zip(act, weight)] for op in (Op.F, *FREES)}


def message_stage(a: Action) -> int:
    """The stage whose `out` a send or receive carries: the stage below the boundary it crosses
    (an activation's sending stage, a gradient's receiving stage)."""
    return a.stage + MESSAGE_SOURCE[a.op]


def message_size(program: Program, a: Action) -> float:
    """Bytes (units) a send or receive carries: `message_stage`'s `out`."""
    return program.annotations.memory_of(message_stage(a)).out


Weight = TypeVar("Weight")


def weights_of_stages(program: Program, model_weights: list[Weight]) -> list[Weight]:
    """What each of the program's stages holds of the model's weights, for the whole run, given
    each model stage's (`model_weights`, one per `program.model_stages`): its own model stage's,
    or with routes, its copy's, so each copy holds the weights again (DualPipe: twice the model)."""
    stages = stages_of(program)
    return [model_weights[model_stage(stages, s)] for s in range(program.num_stages)]


# ---- limits ----
def exceeds(peak: float, limit: float | None) -> bool:
    """Is `peak` over `limit` (by more than rounding)? Never without a limit."""
    return limit is not None and peak > limit + 1e-9


def job_limits(stated: Iterable[tuple[int, float]], P: int, ranks: int,
               given: dict[int, float] | None = None) -> tuple[float | None, ...]:
    """Each of `ranks` ranks' memory limit: `given`'s (--memory-limit, by job rank) over the schedule's
    own (`stated`: (pipeline rank, limit) pairs), which every replica's rank d x P + p takes from
    pipeline rank p; None for a rank with neither."""
    own, given = dict(stated), given or {}
    return tuple(given[r] if r in given else own.get(r % P) for r in range(ranks))
