"""Channels: every send and receive, in posting order per channel.

A channel is an ordered rank pair, and under the program's `p2p` mode also a communicator
(`split`: activations and gradients each have their own) and a tag (`tagged`: each message's tag
names its payload); under nccl a group's operations travel on the process group's communicator,
apart from the pair's single ones (`BATCHED`). The k-th send on a channel meets its k-th receive (FIFO, as NCCL and gloo pair
point-to-point messages within a communicator and tag). What blocks when under a semantics is
schedc/rules/semantics.py's; docs/semantics.md.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from ..errors import SchedcError
from ..ir import Action, Op, Program, is_group
from ..rules.deps import Value, payload, peer_stage
from ..rules.semantics import Semantics, listed, unbuffered


Channel = tuple[int, int, int, Value | None]  # (sending rank, receiving rank, communicator, tag): see `channels`


class Endpoint(NamedTuple):
    """One send or receive: where it sits, and its position on its channel."""

    rank: int
    step: int
    part: int  # index inside its step (groups hold several)
    action: Action
    channel: Channel
    index: int  # type: ignore[assignment]  # k: the k-th send (or receive) on the channel (shadows tuple.index, never called on one)


@dataclass(frozen=True)
class Channels:
    sends: dict[Channel, list[Endpoint]]
    recvs: dict[Channel, list[Endpoint]]
    batches_apart: bool = False  # paired as nccl pairs them: groups on a communicator of their own

    def pairs(self):
        """Matched (send, receive) pairs, FIFO per channel."""
        for ch, sends in self.sends.items():
            yield from zip(sends, self.recvs.get(ch, []))

    def unmatched(self) -> list[Endpoint]:
        out = []
        for ch in set(self.sends) | set(self.recvs):
            s, r = self.sends.get(ch, []), self.recvs.get(ch, [])
            out.extend(s[len(r):] if len(s) > len(r) else r[len(s):])
        return sorted(out, key=lambda e: (e.rank, e.step))


_SENDS_AND_RECVS = (Op.SEND_F, Op.SEND_B, Op.RECV_F, Op.RECV_B)


def _peer_offset(op: Op) -> int:
    """The stage offset of a send's or receive's peer (every one has a peer): the one rule, schedc/rules/deps.py."""
    offset = peer_stage(Action(op, 0, 0))
    if offset is None:
        raise AssertionError(f"{op.value} has no peer stage")
    return offset


_PEER = {op: _peer_offset(op) for op in _SENDS_AND_RECVS}
_IS_SEND = {op: op in (Op.SEND_F, Op.SEND_B) for op in _SENDS_AND_RECVS}


GRADIENTS = 1  # the communicator of gradient messages under `p2p split` (activations: 0)
BATCHED = 2  # added under nccl for a group's operations: batch_isend_irecv posts them on the process
# group's communicator, a single isend / irecv on the rank pair's, and the two never meet


def channels(program: Program, semantics: Semantics) -> Channels:
    """Every send and receive by channel: (sending rank, receiving rank, communicator, tag), as
    `semantics` pairs them. The communicator is 0, or under `p2p split` GRADIENTS for SEND_B /
    RECV_B, plus BATCHED under nccl for a member of a group; the tag is None, or under `p2p tagged`
    the payload (so a receive meets the send of its own value, whatever their order)."""
    sends: dict[Channel, list[Endpoint]] = {}
    recvs: dict[Channel, list[Endpoint]] = {}
    placement = program.placement
    peer_of, is_send = _PEER, _IS_SEND
    split, tagged = program.p2p == "split", program.p2p == "tagged"
    apart = semantics.one_stream_per_pair  # (NCCL: groups on a communicator of their own)
    for rank, steps in enumerate(program.ranks):
        for step, st in enumerate(steps):
            grouped = apart and is_group(st)
            for i, a in enumerate(st.parts):
                sending = is_send.get(a.op)
                if sending is None:
                    continue
                peer = placement[a.stage + peer_of[a.op]]
                comm = (GRADIENTS if split and a.op in _GRADIENT_OPS else 0) + (BATCHED if grouped else 0)
                tag = payload(a) if tagged else None
                if sending:
                    ch = (rank, peer, comm, tag)
                    table = sends.setdefault(ch, [])
                else:
                    ch = (peer, rank, comm, tag)
                    table = recvs.setdefault(ch, [])
                table.append(Endpoint(rank, step, i, a, ch, len(table)))
    return Channels(sends, recvs, apart)


_GRADIENT_OPS = (Op.SEND_B, Op.RECV_B)
NCCL_IGNORES_TAGS = ("NCCL ignores tags (torch: `tag is not supported with the NCCL backend`): under nccl the "
                     "messages of a `p2p tagged` program pair in issue order per rank pair, as `p2p shared`")


def as_paired(program: Program, semantics: Semantics) -> tuple[Program, str | None]:
    """The program as the semantics pairs its messages, with a note where that is not what its
    `p2p` line declares: NCCL drops tags, so under nccl a tagged program pairs as a shared one.
    bounded:K with tags is refused: a buffer shared by messages that pair out of order is not
    modelled."""
    if program.p2p != "tagged":
        return program, None
    if not semantics.pairs_by_tag:
        return replace(program, p2p="shared"), NCCL_IGNORES_TAGS
    if semantics.channel_buffer:  # (bounded:K; 0 under rendezvous, None where sends never block)
        raise SchedcError("usage", f"{program.name} tags its messages (`p2p tagged`); bounded:K buffers are "
                          f"modelled for messages that pair in order only: check it under {listed(unbuffered())}",
                          where="--semantics")
    return program, None


def apart_partners(loose: list[Endpoint]) -> set[tuple[int, int, int]]:
    """Under nccl, of the operations that meet no partner (`loose`: `Channels.unmatched`), those
    (rank, step, part) while one of the other kind waits unmatched on the same rank pair's other
    communicator, one grouped and the other single: the pair that would meet were both grouped or
    both single."""
    kinds = {(e.channel[0], e.channel[1], e.channel[2] ^ BATCHED, e.channel[3], _IS_SEND[e.action.op]) for e in loose}
    return {e[:3] for e in loose
            if (*e.channel[:2], e.channel[2], e.channel[3], not _IS_SEND[e.action.op]) in kinds}


ONE_SIDED_GROUP = ("under nccl a group's operations travel on the process group's communicator (torch's "
                   "batch_isend_irecv) and a single isend or irecv on the rank pair's, so a message grouped on "
                   "one end only never meets its partner: group both ends or neither")


def describe_channel(channel: tuple) -> str:
    """`0->1`, `0->1 (gradient communicator)`, `0->1 (groups: the process group's communicator)`,
    `0->1 (tag act 0,3)`: a channel as reports name it."""
    src, dst, comm, tag = channel
    text = f"{src}->{dst}"
    if comm & BATCHED:
        text += f" (groups: the {'gradient ' if comm & GRADIENTS else ''}process group's communicator)"
    elif comm:
        text += " (gradient communicator)"
    if tag is not None:
        text += f" (tag {tag[0]} {tag[1]},{tag[2]})"
    return text
