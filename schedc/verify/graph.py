"""The happens-before constraints of a program under a send semantics (DESIGN.md).

One event per step, its completion. `Edge(after, before, why)` says step `after` completes
strictly later than step `before` completes: program order, data across ranks (compute level),
and, for each matched message, "a send completes only after its receive is posted" (rendezvous,
or bounded:K for the k-th send and the (k-K)-th receive) and "a receive completes only after its
send is posted". Posting a step means finishing the one before it. The program finishes iff these
constraints can all hold (the edges have no cycle); `Impossible` marks a wait that nothing meets.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..deps import needs, produces
from ..ir import SENDS, Program
from .execute import Channels, Semantics

Step = tuple[int, int]  # (rank, index)


@dataclass(frozen=True)
class Edge:
    after: Step
    before: Step
    why: str  # order | data | recv-posted | send-posted | buffer


@dataclass(frozen=True)
class Impossible:
    step: Step
    why: str


def constraints(program: Program, semantics: Semantics, chans: Channels) -> tuple[list[Edge], list[Impossible]]:
    edges: list[Edge] = []
    never: list[Impossible] = []
    for r, steps in enumerate(program.ranks):
        edges.extend(Edge((r, i), (r, i - 1), "order") for i in range(1, len(steps)))
    if program.level == "compute":
        producer = {}
        for r, i, a in program.actions():
            v = produces(a)
            if v is not None:
                producer.setdefault(v, (r, i))
        for r, i, a in program.actions():
            for v in needs(a, program.num_stages):
                src = producer.get(v)
                if src is None:
                    never.append(Impossible((r, i), f"needs {v}, which no action produces"))
                elif src[0] != r:
                    edges.append(Edge((r, i), src, "data"))
    buffer = semantics.buffer if semantics.kind == "bounded" else 0
    for ch, sends in chans.sends.items():
        recvs = chans.recvs.get(ch, [])
        for k, send in enumerate(sends):
            if k < len(recvs):
                recv = recvs[k]
                if send.step > 0:
                    edges.append(Edge((recv.rank, recv.step), (send.rank, send.step - 1), "send-posted"))
            if semantics.kind == "eager" or k - buffer < 0:
                continue
            if k - buffer >= len(recvs):
                never.append(Impossible((send.rank, send.step), "waits for a receive that is never posted"))
                continue
            partner = recvs[k - buffer]
            if partner.step > 0:
                why = "recv-posted" if buffer == 0 else "buffer"
                edges.append(Edge((send.rank, send.step), (partner.rank, partner.step - 1), why))
        for recv in recvs[len(sends):]:
            never.append(Impossible((recv.rank, recv.step), "waits for a send that is never posted"))
    for ch, recvs in chans.recvs.items():
        if ch not in chans.sends:
            never.extend(Impossible((e.rank, e.step), "waits for a send that is never posted") for e in recvs)
    return edges, never


def is_send(program: Program, step: Step) -> bool:
    r, i = step
    return any(a.op in SENDS for a in program.ranks[r][i].parts)
