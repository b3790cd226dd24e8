"""Send semantics and channels: every send and receive, in posting order per ordered rank pair.

The k-th send on a channel meets its k-th receive (FIFO, as NCCL and gloo pair point-to-point
messages). `Semantics` is one of the abstract ones, where a send or receive blocks at its place:
`rendezvous` (a send completes with its receive), `eager` (sends never block) or `bounded` with K
messages of buffer per channel; or a backend, where a send or receive is posted at its place and
completes later, awaited as torch's runtime awaits it (a receive by the action that needs its
value, a send at the end of the step): `nccl` (a rank pair's operations run on one stream in issue
order) or `gloo` (operations progress independently; sends are buffered). docs/semantics.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ..deps import peer_stage
from ..errors import SchedcError
from ..ir import Action, Op, Program


BACKENDS = ("nccl", "gloo")


@dataclass(frozen=True)
class Semantics:
    """`rendezvous` (buffer 0), `eager` (unbounded), `bounded` with `buffer` messages per channel,
    or a backend, `nccl` or `gloo`, whose operations are posted and awaited (`posted`)."""

    kind: str = "rendezvous"
    buffer: int = 0

    @staticmethod
    def parse(text: str) -> "Semantics":
        if text in ("rendezvous", "eager") or text in BACKENDS:
            return Semantics(text, 0)
        if text.startswith("bounded:") and text[8:].isdigit():
            k = int(text[8:])
            return Semantics("bounded", k) if k > 0 else Semantics("rendezvous", 0)
        raise SchedcError("usage", f"unknown semantics {text!r}; expected rendezvous, eager, bounded:K "
                          "(K a positive integer), nccl or gloo", where="--semantics")

    @property
    def posted(self) -> bool:
        """Operations are posted at their place and awaited later (a backend), rather than blocking there."""
        return self.kind in BACKENDS

    def phrase(self) -> str:
        """How a verdict names the semantics it is under: "rendezvous sends", "nccl (posted and awaited
        as torch's runtime does; one stream per rank pair)"."""
        if self.kind == "nccl":
            return "nccl (operations posted and awaited as torch's runtime does; one stream per rank pair)"
        if self.kind == "gloo":
            return "gloo (operations posted and awaited as torch's runtime does; sends buffered)"
        return f"{self} sends"

    def __str__(self) -> str:
        return f"bounded:{self.buffer}" if self.kind == "bounded" else self.kind


RENDEZVOUS = Semantics()


class Endpoint(NamedTuple):
    """One send or receive: where it sits, and its position on its channel."""

    rank: int
    step: int
    part: int  # index inside its step (groups hold several)
    action: Action
    channel: tuple[int, int]  # (sending rank, receiving rank)
    index: int  # k: the k-th send (or receive) on the channel


@dataclass(frozen=True)
class Channels:
    sends: dict[tuple[int, int], list[Endpoint]]
    recvs: dict[tuple[int, int], list[Endpoint]]

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
_PEER = {op: peer_stage(Action(op, 0, 0)) for op in _SENDS_AND_RECVS}  # the one rule: schedc/deps.py
_IS_SEND = {op: op in (Op.SEND_F, Op.SEND_B) for op in _SENDS_AND_RECVS}


def channels(program: Program) -> Channels:
    sends: dict = {}
    recvs: dict = {}
    placement = program.placement
    peer_of, is_send = _PEER, _IS_SEND
    for rank, steps in enumerate(program.ranks):
        for step, st in enumerate(steps):
            for i, a in enumerate(st.parts):
                sending = is_send.get(a.op)
                if sending is None:
                    continue
                peer = placement[a.stage + peer_of[a.op]]
                if sending:
                    ch = (rank, peer)
                    table = sends.setdefault(ch, [])
                else:
                    ch = (peer, rank)
                    table = recvs.setdefault(ch, [])
                table.append(Endpoint(rank, step, i, a, ch, len(table)))
    return Channels(sends, recvs)
