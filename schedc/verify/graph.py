"""The happens-before constraints of a program under a send semantics (DESIGN.md).

One event per step, its completion. A step completes after the step before it on its rank and
after every prerequisite: data made on another rank (compute level), and, for each matched
message, "a send completes only after its receive is posted" (rendezvous; bounded:K pairs the
k-th send with the (k-K)-th receive) and "a receive completes only after its send is posted".
Posting a step means finishing the one before it. The program finishes iff the constraints can all
hold (the graph has no cycle); `never` marks waits that nothing can meet. The executor, the Z3
engine and the memory check all read these constraints, so the rule is written once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ..deps import needs, produces
from ..ir import Program
from .channels import Channels, Semantics

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


@dataclass(frozen=True)
class Constraints:
    """`prereq[r][i]`: (rank, step, why, part) that must complete before step i of rank r."""

    prereq: list[list[list[tuple[int, int, str, int]]]]
    never: dict[Step, tuple[str, int]]

    def edges(self) -> Iterator[Edge]:
        for r, steps in enumerate(self.prereq):
            for i, pre in enumerate(steps):
                if i:
                    yield Edge((r, i), (r, i - 1), "order")
                for q, j, why, _ in pre:
                    yield Edge((r, i), (q, j), why)

    def impossible(self) -> list[Impossible]:
        return [Impossible(step, why) for step, (why, _) in self.never.items()]


def constraints(program: Program, semantics: Semantics, chans: Channels) -> Constraints:
    prereq = [[[] for _ in steps] for steps in program.ranks]
    never: dict[Step, tuple[str, int]] = {}
    if program.level == "compute":
        producer = {}
        for r, steps in enumerate(program.ranks):
            for i, st in enumerate(steps):
                for a in st.parts:
                    v = produces(a)
                    if v is not None and v not in producer:
                        producer[v] = (r, i)
        S = program.num_stages
        for r, steps in enumerate(program.ranks):
            for i, st in enumerate(steps):
                for k, a in enumerate(st.parts):
                    for v in needs(a, S):
                        src = producer.get(v)
                        if src is None:
                            never.setdefault((r, i), (f"needs {v}, which no action produces", k))
                        elif src[0] != r or src[1] >= i:  # earlier on the same rank: program order has it
                            prereq[r][i].append((src[0], src[1], "data", k))
    buffer = semantics.buffer if semantics.kind == "bounded" else 0
    eager = semantics.kind == "eager"
    for ch, sends in chans.sends.items():
        recvs = chans.recvs.get(ch, ())
        n = len(recvs)
        for k, send in enumerate(sends):
            if k < n and send.step > 0:
                recv = recvs[k]
                prereq[recv.rank][recv.step].append((send.rank, send.step - 1, "send-posted", recv.part))
            if eager or k < buffer:
                continue
            if k - buffer >= n:
                never.setdefault((send.rank, send.step), ("waits for a receive that is never posted", send.part))
                continue
            partner = recvs[k - buffer]
            if partner.step > 0:
                prereq[send.rank][send.step].append(
                    (partner.rank, partner.step - 1, "recv-posted" if buffer == 0 else "buffer", send.part))
        for recv in recvs[len(sends):]:
            never.setdefault((recv.rank, recv.step), ("waits for a send that is never posted", recv.part))
    for ch, recvs in chans.recvs.items():
        if ch not in chans.sends:
            for e in recvs:
                never.setdefault((e.rank, e.step), ("waits for a send that is never posted", e.part))
    return Constraints(prereq, never)
