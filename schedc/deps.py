"""The one rule of what an action needs and produces (docs/semantics.md, "Dependencies").

Values are `("act", s, m)`, the output of F(s,m), and `("grad", s, m)`, the input gradient made by
I(s,m) or B(s,m). Communication moves a value between ranks by PyTorch's convention: SEND_F(s,m)
on the rank of s meets RECV_F(s+1,m); SEND_B(s,m) meets RECV_B(s-1,m). Every pass, checker and
simulator asks this module, so the rule is written once.
"""
from __future__ import annotations

from .ir import Action, Op

Value = tuple[str, int, int]


def produces(a: Action) -> Value | None:
    """The value a compute action makes, if any."""
    if a.op is Op.F:
        return ("act", a.stage, a.microbatch)
    if a.op is Op.I or a.op is Op.B:
        return ("grad", a.stage, a.microbatch)
    return None


def needs(a: Action, num_stages: int) -> tuple[Value, ...]:
    """The values an action needs present on its rank before it can run."""
    s, m, op = a.stage, a.microbatch, a.op
    if op is Op.F:
        return (("act", s - 1, m),) if s > 0 else ()
    if op is Op.B or op is Op.I:
        own = ("act", s, m)
        return (own, ("grad", s + 1, m)) if s < num_stages - 1 else (own,)
    if op is Op.W:
        return (("grad", s, m),)
    if op is Op.SEND_F:
        return (("act", s, m),)
    if op is Op.SEND_B:
        return (("grad", s, m),)
    return ()


def producer(v: Value, backward: Op = Op.B) -> tuple[Op, int, int]:
    """The compute action that makes a value, as (op, stage, microbatch): F for an activation, the
    stage's `backward` (B, or I where the backward is split) for an input gradient."""
    kind, s, m = v
    return (Op.F if kind == "act" else backward, s, m)


def delivers(a: Action) -> Value | None:
    """The value a receive brings to its rank (named by the receiving stage)."""
    if a.op is Op.RECV_F:
        return ("act", a.stage - 1, a.microbatch)
    if a.op is Op.RECV_B:
        return ("grad", a.stage + 1, a.microbatch)
    return None


def payload(a: Action) -> Value | None:
    """What travels with a send or receive; a matched pair is consistent iff payloads agree."""
    if a.op is Op.SEND_F or a.op is Op.SEND_B:
        return ("act" if a.op is Op.SEND_F else "grad", a.stage, a.microbatch)
    return delivers(a)


_PEER_OFFSET = {Op.SEND_F: 1, Op.RECV_F: -1, Op.SEND_B: -1, Op.RECV_B: 1}


def peer_stage(a: Action) -> int | None:
    """The stage on the other end of a send or receive."""
    offset = _PEER_OFFSET.get(a.op)
    return None if offset is None else a.stage + offset


def consumer_stage(a: Action, num_stages: int) -> int | None:
    """The stage that consumes the value a compute action produces, if another stage does."""
    if a.op is Op.F and a.stage < num_stages - 1:
        return a.stage + 1
    if (a.op is Op.I or a.op is Op.B) and a.stage > 0:
        return a.stage - 1
    return None


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
    if a.op is Op.F:
        return Action(Op.SEND_F, a.stage, a.microbatch, a.span), Action(Op.RECV_F, dest, a.microbatch, a.span)
    return Action(Op.SEND_B, a.stage, a.microbatch, a.span), Action(Op.RECV_B, dest, a.microbatch, a.span)


def value_name(v: Value) -> str:
    kind, s, m = v
    return f"the activation of F({s},{m})" if kind == "act" else f"the input gradient of stage {s}, microbatch {m}"
