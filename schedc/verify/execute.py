"""Run a program step by step under a send semantics; report where every rank got stuck.

This is DESIGN.md's "Semantics of a run" made executable: each rank runs its list in order; a
compute step waits for its inputs; messages pair FIFO per ordered rank pair; `rendezvous` sends
wait for their receive, `eager` sends never wait, `bounded:K` sends wait while K are unmatched; a
group completes when all its members do. With fixed lists and FIFO pairing every maximal run ends
in the same state, so one run decides deadlock freedom. Runs in time linear in the program.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..deps import delivers, needs, peer_stage, produces
from ..errors import SchedcError
from ..ir import SENDS, Action, Program


@dataclass(frozen=True)
class Semantics:
    """`rendezvous` (buffer 0), `eager` (unbounded), or `bounded` with `buffer` messages per channel."""

    kind: str = "rendezvous"
    buffer: int = 0

    @staticmethod
    def parse(text: str) -> "Semantics":
        if text == "rendezvous":
            return Semantics("rendezvous", 0)
        if text == "eager":
            return Semantics("eager", 0)
        if text.startswith("bounded:") and text[8:].isdigit():
            k = int(text[8:])
            return Semantics("bounded", k) if k > 0 else Semantics("rendezvous", 0)
        raise SchedcError("usage", f"unknown semantics {text!r}; expected rendezvous, eager or "
                          "bounded:K (K a positive integer)", where="--semantics")

    def __str__(self) -> str:
        return f"bounded:{self.buffer}" if self.kind == "bounded" else self.kind


RENDEZVOUS = Semantics()


@dataclass(frozen=True)
class Endpoint:
    """One send or receive: where it sits, and its position on its channel."""

    rank: int
    step: int
    action: Action
    channel: tuple[int, int]  # (sending rank, receiving rank)
    index: int  # k: the k-th send (or receive) on the channel


@dataclass(frozen=True)
class Wait:
    """Why a blocked step cannot complete: one unmet condition and whom it waits for."""

    rank: int
    step: int
    action: Action
    reason: str  # recv-not-posted | send-not-posted | buffer-full | value
    on_rank: int | None = None
    on_step: int | None = None
    on_action: Action | None = None


@dataclass(frozen=True)
class Channels:
    """Every send and receive, listed per channel in posting order."""

    sends: dict[tuple[int, int], list[Endpoint]]
    recvs: dict[tuple[int, int], list[Endpoint]]
    at: dict[tuple[int, int, int], Endpoint]  # (rank, step, part index) -> endpoint

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


def channels(program: Program) -> Channels:
    sends, recvs, at = defaultdict(list), defaultdict(list), {}
    for rank, step, st in program.steps():
        for i, a in enumerate(st.parts):
            if not a.op.is_comm:
                continue
            peer = program.placement[peer_stage(a)]
            is_send = a.op in SENDS
            ch = (rank, peer) if is_send else (peer, rank)
            table = sends if is_send else recvs
            ep = Endpoint(rank, step, a, ch, len(table[ch]))
            table[ch].append(ep)
            at[(rank, step, i)] = ep
    return Channels(dict(sends), dict(recvs), at)


@dataclass(frozen=True)
class Outcome:
    finished: bool
    semantics: Semantics
    pcs: tuple[int, ...]  # where each rank stopped (== its length when it finished)
    waits: dict[int, tuple[Wait, ...]]  # for each stuck rank, what its current step waits for


def execute(program: Program, semantics: Semantics = RENDEZVOUS, chans: Channels | None = None) -> Outcome:
    """Run every rank as far as it can go; values cross ranks implicitly at the compute level."""
    chans = chans or channels(program)
    explicit = program.level == "comms"
    R = program.num_ranks
    lists = program.ranks
    pc = [0] * R
    local = [set() for _ in range(R)]
    shared: set = set()
    producer: dict = {}
    if not explicit:
        for rank, step, a in program.actions():
            v = produces(a)
            if v is not None:
                producer.setdefault(v, (rank, step, a))
    watchers: dict[int, set[int]] = defaultdict(set)

    def blocked(r: int) -> list[Wait]:
        x = pc[r]
        out = []
        for i, a in enumerate(lists[r][x].parts):
            if a.op.is_comm:
                ep = chans.at[(r, x, i)]
                w = _comm_wait(ep, semantics, chans, pc)
                if w is not None:
                    out.append(w)
                continue
            avail = local[r] if explicit else shared
            for v in needs(a, program.num_stages):
                if v not in avail and v not in local[r]:
                    src = producer.get(v)
                    out.append(Wait(r, x, a, "value", *(src if src else (None, None, None))))
        return out

    work = list(range(R))
    while work:
        r = work.pop()
        moved = False
        steps = lists[r]
        while pc[r] < len(steps):
            if blocked(r):
                for w in blocked(r):
                    if w.on_rank is not None:
                        watchers[w.on_rank].add(r)
                break
            for a in steps[pc[r]].parts:
                v = produces(a) or delivers(a)
                if v is not None:
                    local[r].add(v)
                    shared.add(v)
            pc[r] += 1
            moved = True
            # a rank waiting on r's progress may be able to go on
            if watchers[r]:
                work.extend(watchers.pop(r))
        if moved and watchers.get(r):
            work.extend(watchers.pop(r))
    finished = all(pc[r] == len(lists[r]) for r in range(R))
    waits = {r: tuple(blocked(r)) for r in range(R) if pc[r] < len(lists[r])}
    return Outcome(finished, semantics, tuple(pc), waits)


def _comm_wait(ep: Endpoint, sem: Semantics, chans: Channels, pc: list[int]) -> Wait | None:
    if ep.action.op in SENDS:
        k = ep.index - (sem.buffer if sem.kind == "bounded" else 0)
        if sem.kind == "eager" or k < 0:
            return None
        peers = chans.recvs.get(ep.channel, [])
        reason = "recv-not-posted" if k == ep.index else "buffer-full"
        if k >= len(peers):
            return Wait(ep.rank, ep.step, ep.action, reason, ep.channel[1])
        other = peers[k]
        return None if pc[other.rank] >= other.step else \
            Wait(ep.rank, ep.step, ep.action, reason, other.rank, other.step, other.action)
    peers = chans.sends.get(ep.channel, [])
    if ep.index >= len(peers):
        return Wait(ep.rank, ep.step, ep.action, "send-not-posted", ep.channel[0])
    other = peers[ep.index]
    return None if pc[other.rank] >= other.step else \
        Wait(ep.rank, ep.step, ep.action, "send-not-posted", other.rank, other.step, other.action)
