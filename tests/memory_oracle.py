"""Worst-case memory per rank by visiting every state a run can reach: an oracle for `peak_memory`.

Written from DESIGN.md and docs/semantics.md alone; it shares no code with schedc/verify/. A run of a
communication-level program under `rendezvous`, `eager` or `bounded:K` is a sequence of moves: a
rank starts (at any time, unless `late_starts` is off: then all have started), or one part of its
current step completes when the semantics lets it. Memory is read in every state reachable so.
"""
from __future__ import annotations

from collections import defaultdict

from schedc.ir import Op, Program

COMPUTE = (Op.F, Op.B, Op.I, Op.W)
SENDS = (Op.SEND_F, Op.SEND_B)
RECVS = (Op.RECV_F, Op.RECV_B)
COLLECTIVES = (Op.UNSHARD, Op.REDUCE_GRAD, Op.REDUCE_TIED)


def worst_memory(program: Program, semantics: str, late_starts: bool = True) -> list[float]:
    """Each rank's most memory over every run (the program must be at the communication level,
    its messages paired first in, first out per ordered rank pair, and it must not deadlock)."""
    return explore(program, semantics, late_starts)[0]


def explore(program: Program, semantics: str, late_starts: bool = True) -> tuple[list[float], bool]:
    """(`worst_memory`, whether some run gets stuck before every rank has run its list)."""
    job = _Job(program, semantics)
    R = len(job.ranks)
    first = ((False,) * R if late_starts else (True,) * R, (0,) * R, (frozenset(),) * R)
    worst = [0.0] * R
    stuck = False
    seen, todo = {first}, [first]
    while todo:
        state = todo.pop()
        for r in range(R):
            worst[r] = max(worst[r], job.memory(state, r))
        moved = False
        for nxt, r, transient in job.moves(state):
            moved = True
            worst[r] = max(worst[r], transient)
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
        stuck = stuck or (not moved and any(pc < len(steps) for pc, steps in zip(state[1], job.ranks)))
    return worst, stuck


class _Job:
    """The program's ranks (replica after replica), messages, collectives and sizes."""

    def __init__(self, program: Program, semantics: str):
        assert program.p2p == "shared"
        self.kind, self.buffer = _parse(semantics)
        self.forward_only = program.forward_only
        P, S = program.num_ranks, program.num_stages
        mem = [program.annotations.memory_of(s) for s in range(S)]
        self.act, self.weight, self.out = [m.act for m in mem], [m.weight for m in mem], [m.out for m in mem]
        self.ranks = [steps for d in range(program.dp) for steps in program.replica(d).ranks]
        place = program.placement
        self.message = {}  # (rank, step, part) -> (is send, channel, k, size)
        counts: dict = defaultdict(int)
        self.partner = {}  # (is send, channel, k) -> (rank, step)
        collectives: dict = defaultdict(list)  # group -> [(member rank, step)] in each member's order
        for r, steps in enumerate(self.ranks):
            d = r // P
            for x, st in enumerate(steps):
                for i, a in enumerate(st.parts):
                    if a.op in SENDS or a.op in RECVS:
                        is_send = a.op in SENDS
                        lower = a.stage if a.op in (Op.SEND_F, Op.RECV_B) else a.stage - 1  # the boundary crossed
                        other = lower + 1 if a.op in (Op.SEND_F, Op.RECV_B) else lower
                        peer = d * P + place[other]
                        ch = (r, peer) if is_send else (peer, r)
                        k = counts[is_send, ch]
                        counts[is_send, ch] += 1
                        self.message[r, x, i] = (is_send, ch, k, self.out[lower])
                        self.partner[is_send, ch, k] = (r, x)
                    elif a.op in COLLECTIVES:
                        group = ("tied", d) if a.op is Op.REDUCE_TIED else ("dp", r % P)
                        collectives[group, r].append((r, x))
        self.collective = {}  # (rank, step) -> the steps of the other members it waits for
        members = defaultdict(list)
        for (group, r), issued in collectives.items():
            members[group].append(issued)
        for group, lists in members.items():
            for issued in lists:
                for k, (r, x) in enumerate(issued):
                    self.collective[r, x] = [other[k] for other in lists if other is not issued]
        self.consumer = {}  # (rank, step, part) of a receive -> the step that frees its buffer (None: never)
        for (r, x, i), (is_send, _, _, _) in self.message.items():
            if not is_send:
                a = self.ranks[r][x].parts[i]
                uses = (Op.F,) if a.op is Op.RECV_F else (Op.B, Op.I)
                self.consumer[r, x, i] = next((y for y in range(x + 1, len(self.ranks[r]))
                                               if any(b.op in uses and (b.stage, b.microbatch) == (a.stage, a.microbatch)
                                                      for b in self.ranks[r][y].parts)), None)

    # ---- where a state is
    @staticmethod
    def reached(state, r: int, x: int) -> bool:
        """Rank r has posted its step x (finished the ones before it)."""
        started, pc, _ = state
        return started[r] and pc[r] >= x

    @staticmethod
    def finished(state, r: int, x: int, i: int) -> bool:
        started, pc, done = state
        return started[r] and (pc[r] > x or (pc[r] == x and i in done[r]))

    def can_complete(self, state, r: int, x: int, i: int) -> bool:
        a = self.ranks[r][x].parts[i]
        if (r, x, i) in self.message:
            is_send, ch, k, _ = self.message[r, x, i]
            if not is_send:
                return self._posted(state, True, ch, k)
            if self.kind == "eager" or k < self.buffer:
                return True
            return self._posted(state, False, ch, k - self.buffer)
        if a.op in COLLECTIVES:
            return all(self.reached(state, q, y) for q, y in self.collective.get((r, x), ()))
        return True  # compute, waits, RESHARD

    def _posted(self, state, is_send: bool, ch, k: int) -> bool:
        where = self.partner.get((is_send, ch, k))
        return where is not None and self.reached(state, *where)

    # ---- moves
    def moves(self, state):
        """(next state, the rank that moved, its memory at the move's peak) for every possible move."""
        started, pc, done = state
        for r in range(len(self.ranks)):
            if not started[r]:
                yield (_set(started, r, True), pc, done), r, 0.0
                continue
            x = pc[r]
            if x >= len(self.ranks[r]):
                continue
            parts = self.ranks[r][x].parts
            ready = [i for i in range(len(parts)) if i not in done[r] and self.can_complete(state, r, x, i)]
            for i in ready:
                now = done[r] | {i}
                if len(now) < len(parts):
                    yield (started, pc, _set(done, r, now)), r, 0.0
                else:
                    grown = sum(self._allocates(a) for a in parts)
                    peak = self.memory(state, r) + grown
                    yield (started, _set(pc, r, x + 1), _set(done, r, frozenset())), r, peak

    def _allocates(self, a) -> float:
        return self.act[a.stage] if a.op is Op.F else 0.0

    # ---- memory
    def memory(self, state, r: int) -> float:
        """What rank r holds in `state`: activations of its finished steps, the buffers of its posted
        receives whose consumer has not finished, and its finished sends whose receive is not posted."""
        started, pc, _ = state
        if not started[r]:
            return 0.0
        total = 0.0
        for x in range(min(pc[r], len(self.ranks[r]))):
            for a in self.ranks[r][x].parts:
                total += self._activation_change(a)
        for (q, x, i), (is_send, ch, k, size) in self.message.items():
            if q != r or not size:
                continue
            if is_send:
                if self.finished(state, q, x, i) and not self._posted(state, False, ch, k):
                    total += size
            elif self.reached(state, q, x):
                freed_at = self.consumer[q, x, i]
                if freed_at is None or pc[q] <= freed_at:
                    total += size
        return total

    def _activation_change(self, a) -> float:
        s = a.stage
        if a.op is Op.F:
            return 0.0 if self.forward_only else self.act[s]
        if a.op is Op.B:
            return -self.act[s]
        if a.op is Op.I:
            return -(self.act[s] - self.weight[s])
        return -self.weight[s] if a.op is Op.W else 0.0


def _parse(semantics: str) -> tuple[str, int]:
    if semantics.startswith("bounded:"):
        return "bounded", int(semantics[8:])
    assert semantics in ("rendezvous", "eager")
    return semantics, 0


def _set(values: tuple, r: int, v) -> tuple:
    return values[:r] + (v,) + values[r + 1:]
