"""Simulate a program in time: when every step starts and ends, the makespan, busy time, bubble, memory.

DESIGN.md's cost model: per-stage times `t_F t_B t_I t_W` (the program's annotations; defaults F=I=W=1,
B=I+W) divided by the rank's speed, a latency and a bandwidth per channel (ordered rank pair; a
message's size is the `out` size of the stage whose output it carries), and whether communication
overlaps compute. `simulate(program) -> Timeline`; a program that cannot finish raises
SchedcError("deadlock").
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterator, Mapping, NamedTuple

from .deps import delivers, message, needs, peer_stage, produces, value_name
from .errors import SchedcError
from .ir import SENDS, Action, Compound, CompoundKind, Op, Program, Step, describe
from .verify.memory import activation_delta, message_size

# How a run is timed (the rule every handler below follows):
#
# Each rank runs its steps in program order; a step starts when the previous one has released the
# rank and its inputs are present on the rank. A compute step (F, B, I, W, or an OVERLAP_F_B pair,
# whose parts run as one action taking the sum of their times) holds the rank for its time divided
# by the rank's speed. A value made on one rank and used on another travels on the channel
# (producer rank, consumer rank): it leaves when it may (below), waits while the channel carries
# earlier messages (`size / bandwidth` each, one after another), and arrives `latency` later.
#
# - Compute level (no SEND/RECV in the program): a value leaves when its producer ends.
# - Comms level: sends and receives pair FIFO per channel (the k-th send meets the k-th receive) and
#   rendezvous: a message leaves once both its send and its receive are posted (a GROUP posts all
#   its members at once). A received value is present on its rank when the message arrives.
# - overlap on (default): posting a send or receive takes no time and the rank goes on computing
#   (isend/irecv); only a consumer waits, for its data. overlap off: a send or receive holds its rank
#   until the message has arrived (at the compute level, the producer's rank is held until its
#   output has arrived); a GROUP holds until all its members have.
#
# Deadlock is the rendezvous semantics of schedc/verify/execute.py: a rank cannot go past a send or
# receive (or group) before its partners are posted, so a program is simulated exactly when `schedc
# check` finds it deadlock-free under rendezvous. With overlap on that order constrains which runs
# exist, not when steps start: times follow the asynchronous rule above.
#
# Nothing else is shared, so every time is the maximum of the times it waits for. The simulator
# therefore handles events (a step can start, a message is matched) in dependency order, not time
# order: each rank runs until it waits for something not yet known, and is resumed when it is.
# Every step, message and wake-up is handled once, so a run takes time linear in the program.


class Message(NamedTuple):
    """One value that crossed ranks: from step `src_step` of `src_rank` to `dst_step` of `dst_rank`.

    At the compute level the steps are the producer and the consumer; at the comms level, the send
    and the receive. `departure` is when it left (after the rendezvous and any queue on its
    channel), `arrival` when it was present on the receiving rank.
    """

    src_rank: int
    src_step: int
    dst_rank: int
    dst_step: int
    value: tuple
    departure: float
    arrival: float


@dataclass(frozen=True)
class Link:
    """One channel's latency and bandwidth (`bandwidth` 0 means infinite)."""

    latency: float = 0.0
    bandwidth: float = 0.0


@dataclass(frozen=True)
class Timeline:
    """A simulated run, frozen. Times are per rank and step (a compound step has one start and end).

    `start[r][x]`/`end[r][x]`: when step x of rank r began and released the rank; `busy[r]`: its
    compute time; `memory_during[r][x]` / `memory_after[r][x]`: live activations while step x runs
    (after its allocations) and once it has finished (after its frees).
    """

    program: Program
    overlap: bool
    start: tuple[tuple[float, ...], ...]
    end: tuple[tuple[float, ...], ...]
    busy: tuple[float, ...]
    makespan: float
    messages: tuple[Message, ...]
    memory_during: tuple[tuple[float, ...], ...] = field(repr=False)
    memory_after: tuple[tuple[float, ...], ...] = field(repr=False)

    @property
    def level(self) -> str:
        return self.program.level

    @property
    def bubble_ratio(self) -> float:
        """`1 - sum(busy) / (R * makespan)` (0 for an empty program)."""
        if self.makespan <= 0:
            return 0.0
        return 1.0 - sum(self.busy) / (len(self.busy) * self.makespan)

    @property
    def idle(self) -> tuple[float, ...]:
        return tuple(self.makespan - b for b in self.busy)

    @property
    def peak_memory(self) -> tuple[float, ...]:
        return tuple(max(row, default=0.0) for row in self.memory_during)

    def steps(self) -> Iterator[tuple[int, int, Step, float, float]]:
        """(rank, step index, step, start, end) for every step, rank by rank."""
        for r, steps in enumerate(self.program.ranks):
            starts, ends = self.start[r], self.end[r]
            for x, st in enumerate(steps):
                yield r, x, st, starts[x], ends[x]

    def actions(self) -> Iterator[tuple[int, int, Action, float, float]]:
        """(rank, step index, action, start, end) for every action, compounds opened."""
        for r, x, st, s, e in self.steps():
            for a in st.parts:
                yield r, x, a, s, e

    def memory(self, rank: int) -> tuple[tuple[float, float], ...]:
        """Live activations of a rank over time: (time, live) at each change, starting from (0, 0)."""
        out = [(0.0, 0.0)]
        for s, e, hi, lo in zip(self.start[rank], self.end[rank], self.memory_during[rank],
                                self.memory_after[rank]):
            for t, v in ((s, hi), (e, lo)):
                if v != out[-1][1]:
                    out.append((t, v))
        return tuple(out)

    def to_dict(self) -> dict:
        """The metrics as JSON-ready values (the core of `schedc sim --json`)."""
        return {"level": self.level, "overlap": self.overlap, "makespan": self.makespan,
                "bubble_ratio": self.bubble_ratio, "busy": list(self.busy), "idle": list(self.idle),
                "peak_memory": list(self.peak_memory), "messages": len(self.messages)}


def simulate(program: Program, *, overlap: bool = True,
             links: Mapping[tuple[int, int], Link] | None = None) -> Timeline:
    """Time a program under its cost annotations. `links` overrides latency and bandwidth for some
    channels, keyed by (sending rank, receiving rank). Raises SchedcError("deadlock") if some rank
    cannot reach the end of its list."""
    return _Simulator(program, overlap, links or {}).run()


class _Simulator:
    """The interpreter: one handler per kind of step, each returning when the rank is free again
    (or None when the step must wait; the rank is resumed when what it waits for is known)."""

    def __init__(self, program: Program, overlap: bool, links: Mapping[tuple[int, int], Link]):
        self.program = program
        self.overlap = overlap
        self.explicit = program.level == "comms"
        ann = program.annotations
        R, S = program.num_ranks, program.num_stages
        self.R, self.S = R, S
        self.speed = [ann.rank_speed[r] if r < len(ann.rank_speed) else 1.0 for r in range(R)]
        for r, sp in enumerate(self.speed):
            if not sp > 0:
                raise SchedcError("costs", f"rank {r} has speed {sp}; a rank's speed must be positive")
        self.default_link = (ann.latency, ann.bandwidth)
        self.links = {}
        for (a, b), link in links.items():
            if not (0 <= a < R and 0 <= b < R):
                raise SchedcError("costs", f"channel {a}->{b} names a rank outside 0..{R - 1}")
            self.links[a * R + b] = (link.latency, link.bandwidth)
        n = [len(steps) for steps in program.ranks]
        self.start = [[0.0] * k for k in n]
        self.end = [[0.0] * k for k in n]
        self.hi = [[0.0] * k for k in n]
        self.lo = [[0.0] * k for k in n]
        self.live = [0.0] * R
        self.busy = [0.0] * R
        self.pc = [0] * R
        self.free = [0.0] * R
        self.have: list[dict] = [{} for _ in range(R)]  # value -> when it is present on the rank
        self.waiting: list = [None] * R  # the value a rank waits for, if any
        self.work: list[int] = []
        self.current = -1  # the rank being advanced
        self.chan_free: dict[int, float] = {}  # channel -> when its last message has left
        self.msgs: list = []
        self.inbox: list[dict] = [{} for _ in range(R)]  # compute level: value -> message index
        # comms level: the step being posted on each rank, its unmatched members, their last arrival
        self.posted = [-1] * R
        self.open = [0] * R
        self.arr = [0.0] * R
        self.pend_send: dict[int, deque] = {}
        self.pend_recv: dict[int, deque] = {}
        # per (op, stage) facts, filled on first use
        self._dur = {op: [None] * S for op in (Op.F, Op.B, Op.I, Op.W)}
        self._delta = {op: [None] * S for op in (Op.F, Op.B, Op.I, Op.W)}
        self._route: dict = {}
        self.handlers = {
            Op.F: self.compute, Op.B: self.compute, Op.I: self.compute, Op.W: self.compute,
            Op.SEND_F: self.comm, Op.SEND_B: self.comm, Op.RECV_F: self.comm, Op.RECV_B: self.comm,
            Op.UNSHARD: self.stage_op, Op.RESHARD: self.stage_op, Op.REDUCE_GRAD: self.stage_op,
            CompoundKind.OVERLAP_F_B: self.overlap_f_b, CompoundKind.GROUP: self.comm,
        }

    # ---- the driver ----
    def run(self) -> Timeline:
        R = self.R
        self.work = list(range(R - 1, -1, -1))
        while self.work:
            self.advance(self.work.pop())
        lists = self.program.ranks
        if any(self.pc[r] < len(lists[r]) for r in range(R)):
            raise self.deadlock()
        msgs = tuple(Message(*m) for m in self.msgs) if not self.explicit else tuple(self.msgs)
        makespan = max(self.free + [m.arrival for m in msgs] + [0.0])
        return Timeline(self.program, self.overlap, tuple(map(tuple, self.start)), tuple(map(tuple, self.end)),
                        tuple(self.busy), makespan, msgs, tuple(map(tuple, self.hi)), tuple(map(tuple, self.lo)))

    def advance(self, r: int) -> None:
        """Run rank r from where it stopped until it ends or waits."""
        steps = self.program.ranks[r]
        n = len(steps)
        x, t = self.pc[r], self.free[r]
        handlers = self.handlers
        self.current = r
        while x < n:
            st = steps[x]
            t2 = handlers[st.kind if st.__class__ is Compound else st.op](r, x, st, t)
            if t2 is None:
                break
            t = t2
            x += 1
        self.pc[r], self.free[r] = x, t

    # ---- handlers ----
    def compute(self, r: int, x: int, a: Action, t: float):
        """F, B, I, W: wait for the inputs, run for the stage's time divided by the rank's speed."""
        have = self.have[r]
        wanted = needs(a, self.S)
        for v in wanted:
            tv = have.get(v)
            if tv is None:
                self.waiting[r] = v
                return None
            if tv > t:
                t = tv
        op, s = a.op, a.stage
        d = self._dur[op][s] if 0 <= s < self.S else None
        if d is None:
            d = self._fill(op, s)
        d /= self.speed[r]
        end = t + d
        self.start[r][x] = t
        self.end[r][x] = end
        self.busy[r] += d
        delta = self._delta[op][s]
        live = self.live[r]
        if delta > 0:
            live += delta
            self.hi[r][x] = self.lo[r][x] = live
        else:
            self.hi[r][x] = live
            live += delta
            self.lo[r][x] = live
        self.live[r] = live
        inbox = self.inbox[r]
        if inbox:
            for v in wanted:
                i = inbox.pop(v, None)
                if i is not None:
                    self.msgs[i][3] = x
        v = produces(a)
        if v is None:
            return end
        have[v] = end
        if self.explicit:
            return end
        return self.transfer(r, x, a, v, end)

    def overlap_f_b(self, r: int, x: int, st: Compound, t: float):
        """OVERLAP_F_B: its parts run as one action, for the sum of their times."""
        have = self.have[r]
        d = 0.0
        up = down = 0.0
        for a in st.parts:
            if a.op not in self._dur:
                raise SchedcError("bad-action", f"rank {r}, step {x}: OVERLAP_F_B holds {describe(a)}; "
                                  "it pairs compute actions only", a.span)
            for v in needs(a, self.S):
                tv = have.get(v)
                if tv is None:
                    self.waiting[r] = v
                    return None
                t = max(t, tv)
            dur = self._dur[a.op][a.stage] if 0 <= a.stage < self.S else None
            d += self._fill(a.op, a.stage) if dur is None else dur
            delta = self._delta[a.op][a.stage]
            up, down = (up + delta, down) if delta > 0 else (up, down + delta)
        d /= self.speed[r]
        end = t + d
        self.start[r][x], self.end[r][x] = t, end
        self.busy[r] += d
        self.hi[r][x] = self.live[r] + up
        self.live[r] += up + down
        self.lo[r][x] = self.live[r]
        free = end
        inbox = self.inbox[r]
        for a in st.parts:
            if inbox:
                for v in needs(a, self.S):
                    i = inbox.pop(v, None)
                    if i is not None:
                        self.msgs[i][3] = x
            v = produces(a)
            if v is not None:
                have[v] = end
                if not self.explicit:
                    free = max(free, self.transfer(r, x, a, v, end))
        return free

    def stage_op(self, r: int, x: int, a: Action, t: float):
        """UNSHARD, RESHARD, REDUCE_GRAD: no cost in this model."""
        self.start[r][x] = self.end[r][x] = t
        self.hi[r][x] = self.lo[r][x] = self.live[r]
        return t

    def comm(self, r: int, x: int, st: Step, t: float):
        """SEND_*, RECV_* or a GROUP of them: post every member; go on once all are matched, at the
        posting time (overlap) or when the last message has arrived (no overlap)."""
        if self.posted[r] != x:
            parts = st.parts
            for a in parts:
                if not a.op.is_comm:
                    raise SchedcError("bad-action", f"rank {r}, step {x}: a GROUP holds {describe(a)}; "
                                      "it groups communication only", a.span)
                if a.op in SENDS:
                    for v in needs(a, self.S):
                        tv = self.have[r].get(v)
                        if tv is None:
                            self.waiting[r] = v
                            return None
                        t = max(t, tv)
            self.waiting[r] = None
            self.posted[r] = x
            self.open[r] = len(parts)
            self.arr[r] = t
            self.start[r][x] = t
            for a in parts:
                self.post(r, x, a, t)
        if self.open[r]:
            return None
        self.posted[r] = -1
        free = self.start[r][x] if self.overlap else self.arr[r]
        self.end[r][x] = free
        self.hi[r][x] = self.lo[r][x] = self.live[r]
        return free

    # ---- communication ----
    def post(self, r: int, x: int, a: Action, t: float) -> None:
        """Post one send or receive on its channel; match it with the oldest unmatched partner."""
        peer = self._route.get((a.op, a.stage))
        if peer is None:
            peer = self._route[(a.op, a.stage)] = self._peer(a)
        if a.op in SENDS:
            ch = r * self.R + peer
            other = self.pend_recv.get(ch)
            if other:
                q, y, b, tq = other.popleft()
                self.match(ch, r, x, a, t, q, y, b, tq)
            else:
                self.pend_send.setdefault(ch, deque()).append((r, x, a, t))
        else:
            ch = peer * self.R + r
            other = self.pend_send.get(ch)
            if other:
                p, y, b, tp = other.popleft()
                self.match(ch, p, y, b, tp, r, x, a, t)
            else:
                self.pend_recv.setdefault(ch, deque()).append((r, x, a, t))

    def match(self, ch: int, p: int, x: int, send: Action, tp: float, q: int, y: int, recv: Action,
              tq: float) -> None:
        """A send of rank p meets a receive of rank q: the message leaves now, arrives later."""
        when = tp if tp > tq else tq
        key = (send.op, send.stage, "size")
        size = self._route.get(key)
        if size is None:
            size = self._route[key] = message_size(self.program, send)
        departure, arrival = self.travel(ch, size, when)
        v = delivers(recv)
        self.have[q][v] = arrival
        self.msgs.append(Message(p, x, q, y, v, departure, arrival))
        for k in (p, q):
            self.open[k] -= 1
            if arrival > self.arr[k]:
                self.arr[k] = arrival
        # the other rank is parked at its step; resume it once all of that step's members matched
        for k in (p, q):
            if k != self.current and not self.open[k]:
                self.work.append(k)

    def transfer(self, r: int, x: int, a: Action, v, end: float) -> float:
        """Compute level: carry a produced value to the rank that consumes it, if that is another
        rank. Returns when rank r is free again (at `end`, or at the arrival without overlap)."""
        route = self._route.get((a.op, a.stage))
        if route is None:
            route = self._route[(a.op, a.stage)] = self._message_route(a)
        if route is False:
            return end
        dest, size = route
        departure, arrival = self.travel(r * self.R + dest, size, end)
        self.have[dest][v] = arrival
        self.inbox[dest][v] = len(self.msgs)
        self.msgs.append([r, x, dest, -1, v, departure, arrival])
        if self.waiting[dest] == v:
            self.waiting[dest] = None
            self.work.append(dest)
        return end if self.overlap else arrival

    def travel(self, ch: int, size: float, when: float) -> tuple[float, float]:
        """(departure, arrival) of a message of `size` ready at `when` on channel `ch`."""
        lat, bw = self.links.get(ch, self.default_link)
        if size and bw:
            busy_until = self.chan_free.get(ch, 0.0)
            departure = when if when > busy_until else busy_until
            done = departure + size / bw
            self.chan_free[ch] = done
            return departure, done + lat
        return when, when + lat

    # ---- per (op, stage) facts ----
    def _fill(self, op: Op, s: int) -> float:
        if not 0 <= s < self.S:
            raise SchedcError("bad-index", f"{op.value}({s}, ...): stage {s} is not in 0..{self.S - 1}")
        d = float(getattr(self.program.annotations.cost_of(s), op.value))
        if d < 0:
            raise SchedcError("costs", f"stage {s} has {op.value} time {d}; times must be non-negative")
        self._dur[op][s] = d
        self._delta[op][s] = activation_delta(self.program, op, s)
        return d

    def _peer(self, a: Action) -> int:
        s = peer_stage(a)
        for stage in (a.stage, s):
            if not 0 <= stage < self.S:
                raise SchedcError("bad-index", f"{describe(a)}: stage {stage} is not in 0..{self.S - 1}", a.span)
        return self.program.placement[s]

    def _message_route(self, a: Action):
        """(destination rank, size) of the message that carries a's output, or False (deps.message)."""
        pair = message(a, self.program.placement, self.S)
        if pair is None:
            return False
        send, recv = pair
        if delivers(recv) != produces(a):  # the rule in deps.py moves a value unchanged
            raise AssertionError(f"{describe(a)}: the message does not deliver its output")
        return self.program.placement[recv.stage], message_size(self.program, send)

    # ---- deadlock ----
    def deadlock(self) -> SchedcError:
        lists = self.program.ranks
        stuck = [r for r in range(self.R) if self.pc[r] < len(lists[r])]
        pending = {}
        for table in (self.pend_send, self.pend_recv):
            for q in table.values():
                for (r, x, a, _) in q:
                    pending.setdefault((r, x), []).append(a)
        notes = []
        first = None
        for r in stuck[:8]:
            x = self.pc[r]
            st = lists[r][x]
            first = first or st.parts[0]
            v = self.waiting[r]
            if v is not None:
                why = f"it needs {value_name(v)}, which never reaches rank {r}"
            else:
                why = "; ".join(_unmatched(a, self.program) for a in pending.get((r, x), [])) or "waiting"
            notes.append(f"rank {r} stops at step {x}, {_show(st)}: {why}")
        if len(stuck) > 8:
            notes.append(f"... and {len(stuck) - 8} more ranks")
        notes.append("`schedc check` shows the wait-for cycle")
        return SchedcError("deadlock", f"the program deadlocks: {len(stuck)} of {self.R} ranks cannot "
                           "reach the end of their list", first.span if first else None, notes)


def _show(st: Step) -> str:
    if isinstance(st, Compound):
        return f"{st.kind.value}(" + ", ".join(describe(a) for a in st.parts) + ")"
    return describe(st)


def _unmatched(a: Action, program: Program) -> str:
    peer = program.placement[peer_stage(a)]
    if a.op in SENDS:
        return f"{describe(a)} waits for rank {peer} to post the matching receive"
    return f"{describe(a)} waits for rank {peer} to post the matching send"
