"""The happens-before constraints of a program under a send semantics (docs/semantics.md).

One event per step, its completion. A step completes after the step before it on its rank and
after every prerequisite: data made on another rank (compute level), and, for each matched
message, "a send completes only after its receive is posted" (rendezvous; bounded:K pairs the
k-th send with the (k-K)-th receive) and "a receive completes only after its send is posted".
Posting a step means finishing the one before it; posting a rank's first step is its start,
which may come at any time (a wait for it is kept apart, in `starts`: memory reads it).

Under a backend (`nccl`, `gloo`) sends and receives are posted, never blocking their rank: a
communication step completes as soon as its rank reaches it, and the action that needs a
received value waits for the receive to complete. Under `gloo` that is when its send is posted
(a send completes once its receive is posted). Under `nccl` each rank's single operations with one
peer run on one stream (a `Lane`, an extra row of steps after the ranks) in issue order, and a
matched pair completes when both are at the head of their streams; a group is one batch per
communicator on a stream of the rank's batches (all peers), completing as a whole; a grouped
operation never meets a single one (another NCCL communicator: channels.py's `BATCHED`). A rank that has run through its
list still waits, at the end of the step, for its sends to complete, as torch's runtime does
(`ends`): under gloo until each send's receive is posted, under nccl until each of its streams is
empty.

The program finishes iff the constraints can all hold (the graph has no cycle); `never` marks waits
that nothing can meet. The executor, the Z3 engine and the memory check all read these
constraints, so the rule is written once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

from ..ir import WAITS, Op, Program
from ..rules.deps import delivers, needs, produces, stages_of, taker, takers
from ..rules.semantics import Semantics
from .channels import BATCHED, ONE_SIDED_GROUP, Channels, Endpoint, apart_partners

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


class EndWait(NamedTuple):
    """What a rank waits for at the end of the step, once it has run through its list: its send at
    (step, part) to complete, that is node `node` (a rank, or an nccl stream) to complete its step
    `on_step`; `node` None: the send has no receive, and never completes."""

    step: int
    part: int
    node: int | None
    on_step: int
    why: str  # recv-posted (gloo: its receive is posted) | send-done (nccl: its stream is empty)


@dataclass(frozen=True)
class Lane:
    """A stream under `nccl`, that runs its operations in issue order: one rank's single operations
    with one peer (ProcessGroupNCCL's two-rank communicator of the pair), or, `peer` None, its
    groups (`batch_isend_irecv`, on the process group's own communicator, all peers on one
    stream). Each of its steps is the operations one step of the rank posts on it: one, or a
    group's on that communicator, one fused launch that completes as a whole."""

    rank: int
    peer: int | None
    steps: tuple[tuple[Endpoint, ...], ...]
    comm: int = 0  # its communicator (`p2p split`: channels.GRADIENTS for gradients); each has its own stream


@dataclass(frozen=True)
class Constraints:
    """`prereq[n][i]`: (node, step, why, part) that must complete before step i of node n; the
    nodes are the ranks, then the lanes (`lanes[n - R]`, R the number of ranks)."""

    prereq: list[list[list[tuple[int, int, str, int]]]]
    never: dict[Step, tuple[str, int]]
    lanes: tuple[Lane, ...] = ()
    posted: bool = False  # a backend's: a posting step completes on reach, and edges name it, not the step before
    ends: tuple[tuple[EndWait, ...], ...] = ()  # per rank, what its end of step waits for (a backend's sends)
    # step -> the ranks whose start it waits for: a wait for the posting of a rank's first step, which
    # is no step's completion (ranks start at any time); the deadlock question needs none of these
    starts: dict[Step, list[int]] = field(default_factory=dict)

    @property
    def ranks(self) -> int:
        return len(self.prereq) - len(self.lanes)

    def lengths(self) -> list[int]:
        return [len(steps) for steps in self.prereq]

    def where(self, step: Step) -> tuple[int, int, int]:
        """(rank, step, part) in the program of a node's step (a lane's: its first operation's)."""
        n, i = step
        if n < self.ranks:
            return n, i, 0
        e = self.lanes[n - self.ranks].steps[i][0]
        return e.rank, e.step, e.part

    def edges(self) -> Iterator[Edge]:
        for r, steps in enumerate(self.prereq):
            for i, pre in enumerate(steps):
                if i:
                    yield Edge((r, i), (r, i - 1), "order")
                for q, j, why, _ in pre:
                    yield Edge((r, i), (q, j), why)

    def impossible(self) -> list[Impossible]:
        """The waits nothing can meet: at a step, or at the end of a rank's list (a send with no receive)."""
        steps = [Impossible(step, why) for step, (why, _) in self.never.items()]
        return steps + [Impossible((r, len(self.prereq[r])), "waits at the end of the step for a receive that "
                                   "is never posted") for r, ends in enumerate(self.ends) for w in ends if w.node is None]


def constraints(program: Program, semantics: Semantics, chans: Channels) -> Constraints:  # noqa: C901
    if chans.batches_apart != semantics.one_stream_per_pair:
        raise ValueError(f"channels paired {'as' if chans.batches_apart else 'other than'} nccl pairs them, "
                         f"constraints asked under {semantics}: make them with channels(program, semantics)")
    prereq: list[list[list[tuple[int, int, str, int]]]] = [[[] for _ in steps] for steps in program.ranks]
    never: dict[Step, tuple[str, int]] = {}
    starts: dict[Step, list[int]] = {}
    if program.level == "compute":
        _data(program, prereq, never)
    if semantics.posted:
        return _posted(program, semantics, chans, prereq, never)
    buffer = semantics.channel_buffer  # (None: sends never block)
    for ch, sends in chans.sends.items():
        recvs = chans.recvs.get(ch, ())
        n = len(recvs)
        for k, send in enumerate(sends):
            if k < n:
                recv = recvs[k]
                if send.step > 0:
                    prereq[recv.rank][recv.step].append((send.rank, send.step - 1, "send-posted", recv.part))
                else:
                    starts.setdefault((recv.rank, recv.step), []).append(send.rank)
            if buffer is None or k < buffer:
                continue
            if k - buffer >= n:
                never.setdefault((send.rank, send.step), ("waits for a receive that is never posted", send.part))
                continue
            partner = recvs[k - buffer]
            if partner.step > 0:
                prereq[send.rank][send.step].append(
                    (partner.rank, partner.step - 1, "recv-posted" if buffer == 0 else "buffer", send.part))
            else:
                starts.setdefault((send.rank, send.step), []).append(partner.rank)
        for recv in recvs[len(sends):]:
            never.setdefault((recv.rank, recv.step), ("waits for a send that is never posted", recv.part))
    for ch, recvs in chans.recvs.items():
        if ch not in chans.sends:
            for e in recvs:
                never.setdefault((e.rank, e.step), ("waits for a send that is never posted", e.part))
    if buffer != 0:
        _send_waits_for_match(program, chans, prereq, never, starts)
    return Constraints(prereq, never, starts=starts)


def _send_waits_for_match(program: Program, chans: Channels, prereq, never, starts) -> None:
    """Eager and bounded:K sends: an explicit WAIT_SEND waits until its send is matched (its
    receive posted), the moment the rank stops holding the message (rules/semantics.py's
    `sent_held_until`) and the moment gloo completes it, so a run these semantics allow runs on
    gloo too. (Rendezvous: the send itself waited for that; a WAIT_RECV follows a receive that
    blocked until its send was posted.)"""
    for r, x, k, send in _waited(program, (chans.sends,)):
        recvs = chans.recvs.get(send.channel, ())
        if send.index >= len(recvs):
            never.setdefault((r, x), ("waits for a send whose receive is never posted", k))
        elif recvs[send.index].step > 0:
            recv = recvs[send.index]
            prereq[r][x].append((recv.rank, recv.step - 1, "recv-posted", k))
        else:
            starts.setdefault((r, x), []).append(recvs[send.index].rank)


def _waited(program: Program, tables) -> Iterator[tuple[int, int, int, Endpoint]]:
    """(rank, step, part, the operation it waits for) of each explicit wait whose operation is in
    `tables` (Channels' sends and/or receives); a wait for nothing is the structure check's."""
    mine = {(e.rank, e.action.op, e.action.stage, e.action.microbatch): e
            for table in tables for endpoints in table.values() for e in endpoints}
    for r, steps in enumerate(program.ranks):
        for x, st in enumerate(steps):
            for k, a in enumerate(st.parts):
                target = WAITS.get(a.op)
                e = None if target is None else mine.get((r, target, a.stage, a.microbatch))
                if e is not None:
                    yield r, x, k, e


def _data(program: Program, prereq, never) -> None:  # noqa: C901
    """Compute level: a step waits for the producer of each value it needs from another rank
    (deps.py's rule: `produces` and `needs`)."""
    producer: dict = {}
    for r, steps in enumerate(program.ranks):
        for i, st in enumerate(steps):
            for a in st.parts:
                v = produces(a)
                if v is not None:
                    producer.setdefault(v, (r, i))
    S = stages_of(program)
    get = producer.get
    for r, steps in enumerate(program.ranks):
        pre = prereq[r]
        for i, st in enumerate(steps):
            for k, a in enumerate(st.parts):
                for v in needs(a, S):
                    src = get(v)
                    if src is None:
                        never.setdefault((r, i), (f"needs {v}, which no action produces", k))
                    elif src[0] != r or src[1] >= i:  # earlier on the same rank: program order has it
                        pre[i].append((src[0], src[1], "data", k))


def _posted(program: Program, semantics: Semantics, chans: Channels, prereq, never) -> Constraints:  # noqa: C901
    """The backends: posting never blocks; the action that needs a received value waits for the
    receive to complete; under nccl, streams per rank pair (lanes) complete operations in order."""
    nccl = semantics.one_stream_per_pair
    partner: dict[tuple[int, int, int], Endpoint] = {}
    for ch, sends in chans.sends.items():
        for send, recv in zip(sends, chans.recvs.get(ch, ())):
            partner[send[:3]] = recv
            partner[recv[:3]] = send
    # nccl: an operation whose partner is posted on the other communicator (grouped and single)
    apart = dict.fromkeys(apart_partners(chans.unmatched()), _APART) if nccl else {}
    lanes, lane_of = _lanes(program, chans) if nccl else ((), {})
    R = len(prereq)
    prereq.extend([[] for _ in lane.steps] for lane in lanes)
    for n, lane in enumerate(lanes, R):
        for j, ops in enumerate(lane.steps):
            for e in ops:
                pre = prereq[n][j]
                pre.append((e.rank, e.step, "posted", e.part))  # its rank has posted it
                p = partner.get(e[:3])
                if p is None:
                    what = "receive" if e.channel[0] == e.rank else "send"
                    never.setdefault((n, j), (apart.get(e[:3], f"waits for a {what} that is never posted"), e.part))
                    continue
                pn, pj = lane_of[p[:3]]
                why = "recv-posted" if e.channel[0] == e.rank else "send-posted"
                pre.append((p.rank, p.step, why, e.part))  # the partner is posted ...
                if pj > 0:
                    pre.append((pn, pj - 1, why, e.part))  # ... and at the head of its stream
    users = takers(program)
    for ch, recvs in chans.recvs.items():
        for recv in recvs:
            value = delivers(recv.action)
            consumer = None if value is None else taker(users.get((recv.rank, value)), recv.step)
            if consumer is None:
                continue
            x, k = consumer
            sender = partner.get(recv[:3])
            if sender is None:
                never.setdefault((recv.rank, x), (apart.get(recv[:3], "waits for a send that is never posted"), k))
            elif lanes:
                n, j = lane_of[recv[:3]]
                prereq[recv.rank][x].append((n, j, "recv-done", k))
            else:  # gloo: the receive completes once its send is posted
                prereq[recv.rank][x].append((sender.rank, sender.step, "send-posted", k))
    _explicit_waits(program, chans, partner, lane_of, prereq, never)
    return Constraints(prereq, never, lanes, True, _ends(program, chans, partner, lanes))


def _ends(program: Program, chans: Channels, partner, lanes) -> tuple[tuple[EndWait, ...], ...]:
    """What each rank's end of step waits for, as torch's runtime waits for its sends there: under
    nccl each of its streams to be empty; under gloo each send's receive to be posted (gloo's
    transport sends a message once its receiver is ready)."""
    ends: list[list[EndWait]] = [[] for _ in program.ranks]
    R = len(ends)
    if lanes:
        for n, lane in enumerate(lanes, R):
            last = lane.steps[-1][0]
            ends[lane.rank].append(EndWait(last.step, last.part, n, len(lane.steps) - 1, "send-done"))
        return tuple(map(tuple, ends))
    for sends in chans.sends.values():
        for send in sends:
            recv = partner.get(send[:3])
            ends[send.rank].append(EndWait(send.step, send.part, None, -1, "never") if recv is None
                                   else EndWait(send.step, send.part, recv.rank, recv.step, "recv-posted"))
    return tuple(map(tuple, ends))


def _explicit_waits(program: Program, chans: Channels, partner, lane_of, prereq, never) -> None:
    """WAIT_SEND_F(s, m) and the others: the step waits for that operation, posted earlier on its
    rank, to complete (under nccl, on its stream; under gloo once its partner is posted: gloo's
    transport sends a message when its receiver is ready)."""
    for r, x, k, e in _waited(program, (chans.sends, chans.recvs)):
        receive = e.action.op in (Op.RECV_F, Op.RECV_B)
        other = partner.get(e[:3])
        if lane_of:
            n, j = lane_of[e[:3]]
            prereq[r][x].append((n, j, "recv-done" if receive else "send-done", k))
        elif other is None:
            never.setdefault((r, x), (f"waits for a {'send' if receive else 'receive'} that is never posted", k))
        else:
            prereq[r][x].append((other.rank, other.step, "send-posted" if receive else "recv-posted", k))


_APART = "meets no partner: its partner is posted the other way, one grouped and one single; " + ONE_SIDED_GROUP
_BATCHES = -1  # the peer key of a rank's stream of groups (all peers), sorted before its pairs' streams


def _lanes(program: Program, chans: Channels):
    """The nccl streams, as torch's ProcessGroupNCCL runs them: per rank, communicator and peer, its
    single sends and receives with that peer; per rank and communicator, its groups (every peer on
    one stream, as one batch on the process group's NCCL communicator). Issue order on each (tags do
    not separate them: NCCL has none), one lane step per program step; and where each operation sits
    ((rank, step, part) -> (node, step))."""
    ops: dict[tuple[int, int, int], list[Endpoint]] = {}
    for table in (chans.sends, chans.recvs):
        for (a, b, comm, _), endpoints in table.items():
            for e in endpoints:
                peer = _BATCHES if comm & BATCHED else b if e.rank == a else a
                ops.setdefault((e.rank, peer, comm), []).append(e)
    lanes: list[Lane] = []
    lane_of: dict[tuple[int, int, int], tuple[int, int]] = {}
    R = program.num_ranks
    for (rank, peer, comm) in sorted(ops):
        steps: list[list[Endpoint]] = []
        for e in sorted(ops[(rank, peer, comm)], key=lambda e: (e.step, e.part)):
            if steps and steps[-1][0].step == e.step:
                steps[-1].append(e)
            else:
                steps.append([e])
            lane_of[e[:3]] = (R + len(lanes), len(steps) - 1)
        lanes.append(Lane(rank, None if peer == _BATCHES else peer, tuple(tuple(s) for s in steps), comm))
    return tuple(lanes), lane_of
