"""The one rule of what an action needs and produces (docs/semantics.md, "Dependencies").

Values are `("act", s, m)`, the output of F(s,m), and `("grad", s, m)`, the input gradient made by
I(s,m) or B(s,m). Communication moves a value between ranks by PyTorch's convention: SEND_F(s,m)
on the rank of s meets RECV_F(s+1,m); SEND_B(s,m) meets RECV_B(s-1,m). Every pass, checker and
simulator asks this module, so the rule is written once. A reduction of weight gradients
(REDUCE_GRAD, REDUCE_TIED) needs every backward that adds to them, B or W, before it (`reduces`).
"""
from __future__ import annotations

from ..ir import Action, Op

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


def produces(a: Action) -> Value | None:
    """The value a compute action makes, if any."""
    kind = MAKES.get(a.op)
    return None if kind is None or a.microbatch is None else (kind, a.stage, a.microbatch)


def needs(a: Action, num_stages: int) -> tuple[Value, ...]:
    """The values an action needs present on its rank before it can run (a collective, which has no
    microbatch, needs none: it waits for its group, verify/mesh.py)."""
    s, m = a.stage, a.microbatch
    if m is None:
        return ()
    return tuple((kind, s + off, m) for kind, off in NEEDS.get(a.op, ()) if 0 <= s + off < num_stages)


def neighbour_input(a: Action, num_stages: int) -> Value | None:
    """The value a compute action needs from another stage: F's the activation of s-1, B's and I's
    the input gradient of s+1. None where there is no such stage: the first stage's F reads the
    inputs, the last stage's backward the loss."""
    return next((v for v in needs(a, num_stages) if v[1] != a.stage), None)


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


def consumer_stage(a: Action, num_stages: int) -> int | None:
    """The stage that consumes the value a compute action produces, if another stage does."""
    kind = MAKES.get(a.op)
    if kind is None:
        return None
    dest = a.stage + CONSUMER_OFFSET[kind]
    return dest if 0 <= dest < num_stages else None


def remote_consumer(a: Action, placement: tuple[int, ...], num_stages: int) -> int | None:
    """The stage that consumes a compute action's output on another rank (so it travels as a
    message), if there is one."""
    dest = consumer_stage(a, num_stages)
    return None if dest is None or placement[dest] == placement[a.stage] else dest


def message(a: Action, placement: tuple[int, ...], num_stages: int) -> tuple[Action, Action] | None:
    """The (send, receive) pair that carries a compute action's output to another rank, if any."""
    dest = remote_consumer(a, placement, num_stages)
    if dest is None:
        return None
    kind = MAKES[a.op]
    return Action(_SENDS[kind], a.stage, a.microbatch, a.span), Action(RECEIVES[kind], dest, a.microbatch, a.span)


def value_name(v: Value) -> str:
    kind, s, m = v
    return f"the activation of F({s},{m})" if kind == "act" else f"the input gradient of stage {s}, microbatch {m}"
