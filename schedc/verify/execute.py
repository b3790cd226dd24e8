"""Run a program step by step under a send semantics; report where every rank got stuck.

docs/semantics.md's send semantics made executable over the happens-before constraints of
schedc/verify/graph.py: each rank runs its list in order, and a step completes once every
prerequisite step has completed (its inputs exist, its matched sends or receives are posted). A
group is one step, so it completes when all its members can. A rank that has run through its list
under a backend still waits for its sends at the end of the step (graph.py's `ends`). With fixed
lists and FIFO pairing every maximal run ends in the same state, so one run decides deadlock
freedom. Linear time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..ir import Action, Program
from ..rules.semantics import RENDEZVOUS, Semantics
from .channels import Channels, Endpoint, channels

if TYPE_CHECKING:  # (graph.py is imported when `execute` makes constraints: `run_ranks` needs none)
    from .graph import Constraints

__all__ = ["Channels", "Endpoint", "Outcome", "Wait", "channels", "execute"]

_REASON = {"data": "value", "recv-posted": "recv-not-posted", "send-posted": "send-not-posted",
           "buffer": "buffer-full", "posted": "not-posted", "recv-done": "recv-not-done",
           "collective": "collective-not-reached", "collective-posted": "collective-not-posted"}


@dataclass(frozen=True)
class Wait:
    """Why a blocked step cannot complete: one unmet condition and whom it waits for."""

    rank: int
    step: int
    action: Action
    reason: str  # recv-not-posted | send-not-posted | buffer-full | value | never | partner-queued |
    # recv-not-done | not-posted | collective-not-reached | collective-not-posted
    on_rank: int | None = None
    on_step: int | None = None
    on_action: Action | None = None
    node: int | None = None  # under nccl: the stream (graph.Lane) whose head this is, as a node of the graph
    on_node: int | None = None  # ... or the stream it waits on
    at_end: bool = False  # the rank has run through its list (`step` is its length) and waits for `action`, a send

    @property
    def at(self) -> int:
        """The node that waits: its rank, or its stream."""
        return self.rank if self.node is None else self.node

    @property
    def partner(self) -> Action:
        """`on_action`, for a wait that names one (a partner-queued one does: its partner in the stream)."""
        if self.on_action is None:
            raise ValueError(f"rank {self.rank}'s {self.reason} wait at {self.action} names no action")
        return self.on_action

    @property
    def on(self) -> int | None:
        """The node waited for."""
        return self.on_rank if self.on_node is None else self.on_node


@dataclass(frozen=True)
class Outcome:
    finished: bool
    semantics: Semantics
    pcs: tuple[int, ...]  # where each rank stopped (== its length when it finished)
    waits: dict[int, tuple[Wait, ...]]  # for each stuck node (rank, or nccl stream), what its current step waits for
    lanes: tuple[int, ...] = ()  # under nccl: where each stream stopped
    ends: dict[int, tuple[Wait, ...]] = field(default_factory=dict)  # ranks past their list: the sends they wait for


def execute(program: Program, semantics: Semantics = RENDEZVOUS, chans: Channels | None = None,
            cons: Constraints | None = None) -> Outcome:
    """Run every rank as far as it can go."""
    if cons is None:
        from .graph import constraints
        cons = constraints(program, semantics, chans or channels(program, semantics))
    prereq, never = cons.prereq, cons.never
    R = program.num_ranks
    lengths = cons.lengths()
    limit = list(lengths)
    for (r, i) in never:  # a rank cannot pass a step whose wait nothing meets
        limit[r] = min(limit[r], i)
    starts, tq, tj = [0], [], []
    for steps in prereq:
        for pre in steps:
            for q, j, _, _ in pre:
                tq.append(q)
                tj.append(j)
            starts.append(len(tq))
    pc = run_ranks(lengths, limit, starts, tq, tj)
    waits = {n: tuple(_waits(program, cons, n, pc)) for n in range(len(lengths)) if pc[n] < lengths[n]}
    ends = {}
    for r, awaited in enumerate(cons.ends):
        unmet = tuple(_end_waits(program, cons, r, awaited, pc, waits)) if pc[r] == lengths[r] else ()
        if unmet:
            ends[r] = unmet
    finished = pc == lengths and not ends
    return Outcome(finished, semantics, tuple(pc[:R]), waits, tuple(pc[R:]), ends)


def _end_waits(program: Program, cons: Constraints, r: int, awaited, pc: list[int], waits: dict):
    """The sends rank r, past its list, still waits for at the end of the step: under gloo each whose
    receive is not posted; under nccl the operation at the head of each stream that is not empty
    (and what that head waits for)."""
    end = len(program.ranks[r])
    for w in awaited:
        if w.node is not None and pc[w.node] > w.on_step:
            continue
        if w.node is None:
            yield Wait(r, end, program.ranks[r][w.step].parts[w.part], "never", at_end=True)
        elif w.node < cons.ranks:  # gloo: the receive's rank has not reached it
            send = program.ranks[r][w.step].parts[w.part]
            yield Wait(r, end, send, "recv-not-posted", w.node, w.on_step,
                       _partner(program.ranks[w.node][w.on_step].parts, send), at_end=True)
        else:  # nccl: the stream's head, and what it waits for
            hr, hs, hp = cons.where((w.node, pc[w.node]))
            head = waits[w.node][0]
            yield Wait(r, end, program.ranks[hr][hs].parts[hp], head.reason, head.on_rank, head.on_step,
                       head.on_action, on_node=w.node, at_end=True)


def run_ranks(lengths: list[int], limit: list[int], starts: list[int], tq: list[int], tj: list[int]) -> list[int]:
    """The run itself: advance each rank while its next step's prerequisites have completed.

    Steps are numbered rank by rank; step g's prerequisites are (tq[k], tj[k]) for k in
    starts[g]..starts[g+1]: "rank tq[k] has completed its step tj[k]". A rank stops at `limit`.
    A blocked rank waits on the rank it needs and is woken when that one moves. Returns where
    each rank stopped.
    """
    R = len(lengths)
    base = [0] * R
    for r in range(1, R):
        base[r] = base[r - 1] + lengths[r - 1]
    pc = [0] * R
    watchers: list[list[int]] = [[] for _ in range(R)]
    work = list(range(R))
    while work:
        r = work.pop()
        i, end, b0 = pc[r], limit[r], base[r]
        while i < end:
            a, z = starts[b0 + i], starts[b0 + i + 1]
            while a < z:
                if pc[tq[a]] <= tj[a]:
                    watchers[tq[a]].append(r)
                    break
                a += 1
            else:
                i += 1
                continue
            break
        if i != pc[r]:
            pc[r] = i
            if watchers[r]:
                work.extend(watchers[r])
                watchers[r] = []
    return pc


def _waits(program: Program, cons: Constraints, n: int, pc: list[int]):
    """What node n (a rank, or an nccl stream) waits for at the step where it stopped."""
    i = pc[n]
    rank, step, _ = cons.where((n, i))
    node = None if n < cons.ranks else n
    parts = program.ranks[rank][step].parts
    if (n, i) in cons.never:
        _, k = cons.never[(n, i)]
        yield Wait(rank, step, parts[k], "never", node=node)
    for q, j, why, k in cons.prereq[n][i]:
        if pc[q] > j:
            continue
        if q >= cons.ranks:  # a stream: the receive awaited has not completed, or the partner is queued
            reason, at = {"recv-done": ("recv-not-done", j), "send-done": ("send-not-done", j)}.get(
                why, ("partner-queued", j + 1))
            on_rank, on_step, _ = cons.where((q, at))
            on = _partner(program.ranks[on_rank][on_step].parts, parts[k])
            yield Wait(rank, step, parts[k], reason, on_rank, on_step, on, node, q)
            continue
        # a posted semantics names the partner's posting step itself; a blocking one the step before it
        target = j if why in ("data", "posted") or cons.posted and why != "collective" else j + 1
        on_parts = program.ranks[q][target].parts
        yield Wait(rank, step, parts[k], _REASON[why], q, target, _partner(on_parts, parts[k]), node)


def _partner(parts, action: Action) -> Action:
    """Inside the partner step, the action this one waits for (the matching comm, if any)."""
    from ..rules.deps import needs, payload
    want = payload(action)
    for a in parts:
        if a.op.is_comm and payload(a) == want:
            return a
    for a in parts:  # the receive whose value a compute action awaits
        if a.op.is_comm and payload(a) in needs(action, 1 << 62):  # (as if every stage existed)
            return a
    for a in parts:
        if a.op.is_comm:
            return a
    return parts[0]
