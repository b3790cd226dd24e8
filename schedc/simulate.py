"""Simulate a program in time: when every step starts and ends, the makespan, busy time, bubble, memory.

The cost model of docs/semantics.md ("Time"): per-stage times `t_F t_B t_I t_W` (the program's
annotations; defaults F=I=W=1, B=I+W) divided by the rank's speed, a latency and a bandwidth per channel (ordered rank pair; a
message's size is the `out` size of the stage whose output it carries), and whether communication
overlaps compute. `simulate(program) -> Timeline`; a program that cannot finish raises
SchedcError("deadlock"). Memory is schedc/verify/memory.py's count of each step (activations and
receive buffers, a compute-level program as lowered), placed at the step's times: the peak of this
one run. A compute-level program held as columns (schedc/columns.py), millions of steps at the
limits, is timed by schedc/simulate_columns.py: the same rule, in one pass over integer columns.
The run, `Timeline`, is schedc/timeline.py's; the simulators fill it and import it from there.
"""
from __future__ import annotations

from array import array
from collections import deque
from typing import Any, Callable, Mapping

from .collection import PAUSED
from .errors import SchedcError
from .ir import COMM, COMPUTE, SENDS, Action, Compound, CompoundKind, Op, Program, Step, describe
from .rules.deps import bounds, delivers, message, needs, peer_stage, produces, stages_of, value_name
from .rules.memory import message_size
from .rules.time import collective_span, collective_time, step_time, timed
from .timeline import Link, Messages, Timeline, check_finite, dispatch_times

# How a run is timed (the rule every handler below follows):
#
# Each rank runs its steps in program order; a step starts when the previous one has released the
# rank and its inputs are present on the rank. A compute step (F, B, I, W, or an OVERLAP_F_B pair,
# whose parts run as one action taking the sum of their times) holds the rank for its time divided
# by the rank's speed. A value made on one rank and used on another travels on the channel
# (producer rank, consumer rank): it leaves when it may (below), waits while the channel carries
# earlier messages (`size / bandwidth` each, one after another), and arrives `latency` later.
# A channel's `overhead` (default 0) holds the sending rank for each send it posts and the receiving
# rank for each receive; a message is posted when its overhead is over. At the compute level the
# producer pays it after the step that made the value, the consumer before the step that uses it.
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
# check` finds it deadlock-free under rendezvous. With overlap on, that order decides which runs
# exist, not when steps start: times follow the asynchronous rule above. Under another semantics
# (`simulate(..., semantics=)`), a comms-level program is timed by schedc/simulate_graph.py on that
# semantics' own graph, by the same rule (and, under nccl, its streams).
#
# Nothing else is shared, so every time is the maximum of the times it waits for. The simulator
# therefore handles events (a step can start, a message is matched) in dependency order, not time
# order: each rank runs until it waits for something not yet known, and is resumed when it is.
# Every step, message and wake-up is handled once, so a run takes time linear in the program.
# What an action needs and makes is asked of schedc/rules/deps.py once per (op, stage) and reused for
# every microbatch (dependencies never cross microbatches, docs/semantics.md; checked when a plan is made).


def _graph_reason(program: Program) -> str:
    """Why a rendezvous run is timed on the graph: a job's collectives, or messages that pair by tag or communicator."""
    return f"{program.name}'s collectives" if program.replicas or program.p2p == "shared" else f"p2p {program.p2p}"


def simulate(program: Program, *, overlap: bool = True,
             links: Mapping[tuple[int, int], Link] | None = None, semantics=None, draw=None) -> Timeline:
    """Time a program under its cost annotations. `links` overrides latency and bandwidth for some
    channels, keyed by (sending rank, receiving rank). `draw` (schedc/simulate_sampled.py) scales
    each compute time and posting overhead by a factor it draws. `semantics` (a name as `check` takes it, or a
    Semantics; default rendezvous) decides which runs exist: under another, a communication-level
    program is timed on that semantics' graph (schedc/simulate_graph.py). Raises
    SchedcError("deadlock") if some rank cannot reach the end of its list under it."""
    from .passes.stage_ops import add_step_collectives
    from .rules.semantics import Semantics
    from .verify.channels import as_paired
    from .verify.mesh import joins_ranks
    program = add_step_collectives(program)  # a data-parallel step's reductions where the schedule places none
    if semantics is not None and not isinstance(semantics, Semantics):
        semantics = Semantics.parse(str(semantics))
    if semantics is not None:
        program, _ = as_paired(program, semantics)
    job = joins_ranks(program)  # a data-parallel job, or a tied all-reduce: timed on the job's graph
    if job and program.dp > 1 and overlap and draw is None:  # replicas that run alike: timed once per class
        from .simulate_replicas import by_classes
        return by_classes(program, semantics or Semantics(), links or {}, _time_job)
    if job and program_level(program) == "compute":
        from .passes import lower
        program = lower(program)  # (a job's values on one rank only stay a compute-level job)
    # messages that pair other than in order per rank pair (`p2p tagged` or `split`): on the graph too
    paired_by_graph = job or program.p2p != "shared" and program_level(program) == "comms"
    if semantics is not None and not semantics.send_waits_for_receive or paired_by_graph:
        if not overlap:
            raise SchedcError("usage", f"without overlap (--no-overlap, or overlap = false in the costs) a send or "
                              f"receive holds its rank until its message has arrived; under "
                              f"{_graph_reason(program) if paired_by_graph else semantics} they are timed as posted "
                              "(isend / irecv): "
                              "simulate with overlap" + ("" if paired_by_graph else ", or under rendezvous"))
        if job or program_level(program) == "comms":
            from .simulate_graph import simulate_graph
            _step_by_step(program, _EVERY_REPLICA if program.replicas else None)
            return simulate_graph(program, semantics or Semantics(), links or {}, draw)
    sim = _Simulator(program, overlap, links or {}, str(semantics or Semantics()), draw)
    with PAUSED:  # the run makes many small acyclic objects; the collector would rescan the program
        from .simulate_columns import run_columns
        timeline = run_columns(sim)  # the common large case in one pass over integer columns
        if timeline is None:
            _step_by_step(program)
            timeline = sim.run()
        return timeline


def _time_job(program: Program, semantics, links, told=None) -> Timeline:
    """A data-parallel job (each of its replicas, or one per class: simulate_replicas.py) timed on
    its graph (simulate_graph.py), lowered first if at the compute level."""
    from .simulate_graph import simulate_graph
    why = _EVERY_REPLICA if told is None else "a data-parallel job, each class of replicas that run alike once"
    _step_by_step(program, why)  # (before lowering it: the lowered job holds more)
    if program_level(program) == "compute":
        from .passes import lower
        program = lower(program)
        _step_by_step(program, why)
    return simulate_graph(program, semantics, links, None, told)


_EVERY_REPLICA = "a data-parallel job, every replica: a sampled run draws each one's times apart"
MAX_SIMULATED_ACTIONS = 3_000_000  # timed step by step (~10 us and ~0.5 KB an action); the one pass has no limit


def _step_by_step(program: Program, why: str | None = None) -> None:
    """A `too-large` error for a program beyond MAX_SIMULATED_ACTIONS that the one-pass run
    (simulate_columns.py: a compute-level program held as columns) does not take (`why`: what
    makes it a job's, if it is one)."""
    from .verify.mesh import flat_job
    count = flat_job(program).num_actions  # (a data-parallel job's every replica it times)
    if count > MAX_SIMULATED_ACTIONS:
        raise SchedcError("too-large", f"{count:,} actions to time step by step ("
                          f"{why or 'a program at the communication level, or with bandwidths, overheads or groups'}); "
                          f"at most {MAX_SIMULATED_ACTIONS:,}: simulate it at fewer microbatches, or at the compute level",
                          where=program.source or program.name)


def program_level(program: Program) -> str:
    """`Program.level`, returning at the first send or receive (steps held as columns know theirs)."""
    from .columns import columns_of  # (numpy: imported when asked)
    if columns_of(program) is not None:
        return program.level
    for steps in program.ranks:
        for st in steps:
            for a in (st.parts if st.__class__ is Compound else (st,)):
                if a.op in COMM:  # type: ignore[union-attr]  # an Action here (its class is not Compound)
                    return "comms"
    return "compute"


class _Rank:
    """One rank's state while it runs."""

    __slots__ = ("r", "steps", "pc", "free", "speed", "have", "waiting", "start", "end",
                 "busy", "posted", "open", "arrival", "ready", "inbox", "post_at", "gathered", "collectives")

    def __init__(self, r: int, steps, speed: float):
        n = len(steps)
        self.r, self.steps, self.speed = r, steps, speed
        self.pc, self.free = 0, 0.0
        self.have: dict[int, float] = {}  # value key -> when the value is present on this rank
        self.waiting = None  # the value key this rank waits for, if any
        self.start, self.end = [0.0] * n, [0.0] * n
        self.post_at = array("d", bytes(8 * n))  # Timeline.posted
        self.busy = 0.0
        self.posted, self.open, self.arrival = -1, 0, 0.0  # the comm step being posted
        self.ready = 0.0  # when that step's posting overhead is over
        self.inbox: dict[int, int] = {}  # compute level: value key -> index of its message
        self.gathered: dict[int, float] = {}  # stage -> when its latest UNSHARD ends (its computes wait)
        self.collectives = 0.0  # seconds of its collectives (rules/time.py `collective_time`)


_KIND = {"act": 0, "grad": 1}


class _Simulator:
    """The interpreter: one handler per kind of step, each returning when the rank is free again,
    or None when the step must wait (the rank is resumed when what it waits for is known)."""

    def __init__(self, program: Program, overlap: bool, links: Mapping[tuple[int, int], Link],
                 semantics: str = "rendezvous", draw=None):
        self.program = program
        self.overlap = overlap
        self.semantics = semantics
        self.level = program_level(program)
        self.explicit = self.level == "comms"
        ann = program.annotations
        R, S = program.num_ranks, program.num_stages
        self.R, self.S = R, S
        self.stages = stages_of(program)  # (deps.py's: routes, if any, end a stage's neighbours)
        self.K = 2 * S  # value key: microbatch * K + 2 * stage + (0 act | 1 grad)
        if len(program.ranks) != R:
            raise SchedcError("bad-index", f"the program has {len(program.ranks)} rank lists for {R} ranks")
        self.speeds: list[float] = []
        for r in range(R):
            speed = ann.speed_of(r)
            if not speed > 0:
                raise SchedcError("costs", f"rank {r} has speed {speed}; a rank's speed must be positive")
            self.speeds.append(float(speed))
        self.ranks: list[_Rank] = []  # each rank's state, made when the run starts
        self.default_link = (float(ann.latency), float(ann.bandwidth))
        self.latency = float(ann.latency)
        self.links = {}
        self.overheads: dict[int, float] = {}  # channel -> posting overhead, where not 0
        for (a, b), link in links.items():
            if not (0 <= a < R and 0 <= b < R):
                raise SchedcError("costs", f"channel {a}->{b} names a rank outside 0..{R - 1}")
            self.links[a * R + b] = (float(link.latency), float(link.bandwidth))
            if not link.overhead >= 0:
                raise SchedcError("costs", f"channel {a}->{b} has overhead {link.overhead}; it must be non-negative")
            if link.overhead:
                self.overheads[a * R + b] = float(link.overhead)
        self.dispatch = dispatch_times(ann, R)  # rank -> time to start each step; () when all 0
        # sampled runs (schedc/simulate_sampled.py): factors drawn for each compute time and posting overhead
        self.draw = draw
        # one latency everywhere and infinite bandwidth: a message leaves as soon as it may
        self.plain = not self.links and not ann.bandwidth
        self.work: list[int] = []
        self.current = -1  # the rank being advanced
        self.chan_free: dict[int, float] = {}  # channel -> when its last message has left
        self.msgs = array("d")  # seven numbers per message, as in Messages
        self.mismatches = 0
        self.pend_send: dict[int, deque] = {}
        self.pend_recv: dict[int, deque] = {}
        self.plans: dict[Op, dict[int, tuple]] = {op: {} for op in Op}
        self.group_end: dict[tuple[bool, int], float] = {}  # a collective group -> when its last collective ends
        self.collectives_end = 0.0  # when the last collective ends (the step waits for it)
        self.handlers: dict[Op | CompoundKind, Callable[..., float | None]] = {
            Op.F: self.compute, Op.B: self.compute, Op.I: self.compute, Op.W: self.compute,
            Op.SEND_F: self.send, Op.SEND_B: self.send, Op.RECV_F: self.recv, Op.RECV_B: self.recv,
            Op.UNSHARD: self.collective, Op.RESHARD: self.stage_op, Op.REDUCE_GRAD: self.collective,
            Op.REDUCE_TIED: self.collective, Op.WAIT_SEND_F: self.stage_op, Op.WAIT_RECV_F: self.stage_op,
            Op.WAIT_SEND_B: self.stage_op, Op.WAIT_RECV_B: self.stage_op,  # waits: free here (docs/sim.md)
            CompoundKind.OVERLAP_F_B: self.overlap_f_b, CompoundKind.GROUP: self.group,
        }

    # ---- the driver ----
    def run(self) -> Timeline:
        self.ranks = [_Rank(r, self.program.ranks[r], speed) for r, speed in enumerate(self.speeds)]
        work = self.work
        work.extend(range(self.R - 1, -1, -1))
        while work:
            self.advance(self.ranks[work.pop()])
        if any(rk.pc < len(rk.steps) for rk in self.ranks):
            raise self.deadlock()
        msgs = Messages(self.msgs.tobytes(), self.K)
        arrivals = memoryview(self.msgs)[6::7]
        makespan = max([rk.free for rk in self.ranks] + [max(arrivals, default=0.0), self.collectives_end])
        check_finite(makespan, self.R)
        col = lambda name: tuple(tuple(getattr(rk, name)) for rk in self.ranks)  # noqa: E731
        collectives = tuple(rk.collectives for rk in self.ranks)
        return Timeline(self.program, self.level, self.overlap, col("start"), col("end"),
                        tuple(rk.busy for rk in self.ranks), makespan, msgs, self.mismatches,
                        tuple(rk.post_at for rk in self.ranks), self.semantics,
                        collectives=collectives if any(collectives) else ())

    def advance(self, rk: _Rank) -> None:
        """Run a rank from where it stopped until it ends or waits."""
        if rk.posted >= 0:  # parked at a send or receive; its match resumes it
            return
        steps = rk.steps
        n = len(steps)
        x, t = rk.pc, rk.free
        handlers = self.handlers
        self.current = rk.r
        rk.waiting = None
        lead = self.dispatch[rk.r] if self.dispatch else 0.0  # paid before each step, waiting or not
        while x < n:
            st = steps[x]
            t2 = handlers[st.kind if st.__class__ is Compound else st.op](rk, x, st, t + lead)
            if t2 is None:
                break
            t = t2
            x += 1
        rk.pc, rk.free = x, t

    # ---- handlers ----
    def compute(self, rk: _Rank, x: int, a: Action, t: float):
        """F, B, I, W: wait for the inputs, run for the stage's time divided by the rank's speed."""
        plan = self.plans[a.op].get(a.stage) or self.plan(a)
        dur, wants, makes, route = plan
        base = a.microbatch * self.K  # type: ignore[operator]  # F B I W and messages have a microbatch (Action checks)
        have = rk.have
        if self.overheads and rk.inbox:
            t = self.receiving(rk, t, base, wants)
        for k in wants:
            tv = have.get(base + k)
            if tv is None:
                rk.waiting = base + k
                return None
            if tv > t:
                t = tv
        if rk.gathered:  # its stage's weights, gathered (FSDP's UNSHARD)
            t = max(t, rk.gathered.get(a.stage, t))
        d = dur / rk.speed
        if self.draw is not None:
            d *= self.draw.time(a.op, a.stage)
        end = t + d
        rk.start[x] = t
        rk.end[x] = end
        rk.busy += d
        if rk.inbox:
            self.consumed(rk, x, base, wants)
        if makes is None:
            return end
        have[base + makes] = end
        if route is None:
            return end
        return self.transfer(rk, x, a, base + makes, route, end)

    def overlap_f_b(self, rk: _Rank, x: int, st: Compound, t: float):  # noqa: C901
        """OVERLAP_F_B: its parts run as one action, for the time rules/time.py gives the pair."""
        plans = []
        for a in st.parts:
            if a.op not in COMPUTE:
                raise SchedcError("bad-action", f"rank {rk.r}, step {x}: OVERLAP_F_B holds {describe(a)}; "
                                  "it pairs compute actions only", a.span)
            plan = self.plans[a.op].get(a.stage) or self.plan(a)
            base = a.microbatch * self.K  # type: ignore[operator]  # F B I W and messages have a microbatch (Action checks)
            for k in plan[1]:
                if rk.have.get(base + k) is None:
                    rk.waiting = base + k
                    return None
            plans.append((a, base, plan))
        if self.overheads and rk.inbox:
            for a, base, plan in plans:
                t = self.receiving(rk, t, base, plan[1])
        for a, base, plan in plans:
            for k in plan[1]:
                t = max(t, rk.have[base + k])
            if rk.gathered:
                t = max(t, rk.gathered.get(a.stage, t))
        draw = self.draw
        costs = self.program.annotations
        d = step_time([timed(costs.cost_of(a.stage), a.op.value, 1.0 if draw is None else draw.time(a.op, a.stage))
                       for a, _, _ in plans]) / rk.speed
        end = t + d
        rk.start[x], rk.end[x] = t, end
        rk.busy += d
        free = end
        for a, base, (_, wants, makes, route) in plans:
            if rk.inbox:
                self.consumed(rk, x, base, wants)
            if makes is not None:
                rk.have[base + makes] = end
                if route is not None:
                    free = max(free, self.transfer(rk, x, a, base + makes, route, end))
        return free

    def stage_op(self, rk: _Rank, x: int, a: Action, t: float):
        """RESHARD and the explicit waits: no cost in this model."""
        rk.start[x] = rk.end[x] = t
        return t

    def collective(self, rk: _Rank, x: int, a: Action, t: float):
        """UNSHARD, REDUCE_GRAD, REDUCE_TIED: a collective of one member here (a job's, joining
        ranks, is timed on its graph: simulate_graph.py), timed by rules/time.py: it starts once
        its group's previous one has ended and runs beside the rank's compute (which goes on; without
        overlap, once it has ended); a compute of an UNSHARD's stage waits for it to end."""
        d = collective_time(self.program.annotations.cost_of(a.stage), a.op)
        if not d:
            rk.start[x] = rk.end[x] = t
            return t
        group = (a.op is Op.REDUCE_TIED, rk.r)
        start, end = collective_span(t, self.group_end.get(group, 0.0), d)
        self.group_end[group] = end
        rk.start[x], rk.end[x] = start, end
        rk.collectives += d
        if end > self.collectives_end:
            self.collectives_end = end
        if a.op is Op.UNSHARD:
            rk.gathered[a.stage] = end
        return t if self.overlap else end

    def send(self, rk: _Rank, x: int, a: Action, t: float):
        """SEND_F, SEND_B: post; go on once the matching receive is posted."""
        plan = self.plans[a.op].get(a.stage) or self.plan(a)
        key = a.microbatch * self.K + plan[3]  # type: ignore[operator]  # F B I W and messages have a microbatch (Action checks)
        tv = rk.have.get(key)
        if tv is None:  # its value is not on this rank (yet)
            rk.waiting = key
            return None
        if tv > t:
            t = tv
        rk.start[x] = t
        ch = rk.r * self.R + plan[1]
        if self.overheads:
            t += self.overhead(ch)
        rk.post_at[x] = t
        other = self.pend_recv.get(ch)
        if not other:
            self.pend_send.setdefault(ch, deque()).append((rk, x, key - plan[3], plan, t))
            rk.posted, rk.open, rk.arrival, rk.ready = x, 1, t, t
            return None
        q, y, qbase, qplan, tq = other.popleft()
        arrival = self.match(ch, rk, x, t, key, q, y, qbase, qplan, tq, q)
        rk.end[x] = free = t if self.overlap else arrival
        return free

    def recv(self, rk: _Rank, x: int, a: Action, t: float):
        """RECV_F, RECV_B: post; go on once the matching send is posted."""
        plan = self.plans[a.op].get(a.stage) or self.plan(a)
        base = a.microbatch * self.K  # type: ignore[operator]  # F B I W and messages have a microbatch (Action checks)
        rk.start[x] = t
        ch = plan[1] * self.R + rk.r
        if self.overheads:
            t += self.overhead(ch)
        rk.post_at[x] = t
        other = self.pend_send.get(ch)
        if not other:
            self.pend_recv.setdefault(ch, deque()).append((rk, x, base, plan, t))
            rk.posted, rk.open, rk.arrival, rk.ready = x, 1, t, t
            return None
        p, y, pbase, pplan, tp = other.popleft()
        arrival = self.match(ch, p, y, tp, pbase + pplan[3], rk, x, base, plan, t, p)
        rk.end[x] = free = t if self.overlap else arrival
        return free

    def group(self, rk: _Rank, x: int, st: Compound, t: float):  # noqa: C901
        """GROUP: post every member at once; go on once all are matched, at the posting time
        (overlap) or when the last of its messages has arrived (no overlap)."""
        members = []
        for a in st.parts:
            if a.op not in COMM:
                raise SchedcError("bad-action", f"rank {rk.r}, step {x}: a GROUP holds {describe(a)}; "
                                  "it groups communication only", a.span)
            plan = self.plans[a.op].get(a.stage) or self.plan(a)
            base = a.microbatch * self.K  # type: ignore[operator]  # F B I W and messages have a microbatch (Action checks)
            if plan[0]:
                tv = rk.have.get(base + plan[3])
                if tv is None:
                    rk.waiting = base + plan[3]
                    return None
                t = max(t, tv)
            members.append((base, plan))
        rk.waiting = None
        rk.start[x] = t
        r = rk.r
        if self.overheads:  # every member is posted once all their overheads are paid
            t += sum(self.overhead(r * self.R + plan[1] if plan[0] else plan[1] * self.R + r) for _, plan in members)
        rk.posted, rk.open, rk.arrival, rk.ready = x, len(members), t, t
        rk.post_at[x] = t
        for base, plan in members:
            if plan[0]:
                ch = r * self.R + plan[1]
                other = self.pend_recv.get(ch)
                if other:
                    q, y, qbase, qplan, tq = other.popleft()
                    self.mine(rk, self.match(ch, rk, x, t, base + plan[3], q, y, qbase, qplan, tq, q))
                else:
                    self.pend_send.setdefault(ch, deque()).append((rk, x, base, plan, t))
            else:
                ch = plan[1] * self.R + r
                other = self.pend_send.get(ch)
                if other:
                    p, y, pbase, pplan, tp = other.popleft()
                    self.mine(rk, self.match(ch, p, y, tp, pbase + pplan[3], rk, x, base, plan, t, p))
                else:
                    self.pend_recv.setdefault(ch, deque()).append((rk, x, base, plan, t))
        if rk.open:
            return None
        rk.posted = -1
        rk.end[x] = free = t if self.overlap else rk.arrival
        return free

    def receiving(self, rk: _Rank, t: float, base: int, wants: tuple) -> float:
        """Compute level: when rank rk has posted the receives of the inputs a step gets from other
        ranks, from `t` on (each takes its channel's overhead)."""
        for k in wants:
            i = rk.inbox.get(base + k)
            if i is not None:
                t += self.overhead(int(self.msgs[i * 7]) * self.R + rk.r)
        return t

    # ---- communication ----
    def overhead(self, ch: int) -> float:
        """The rank time of posting one send or receive on channel ch (drawn, in a sampled run)."""
        o = self.overheads.get(ch, 0.0)
        return o * self.draw.post(ch) if self.draw is not None and o else o

    @staticmethod
    def mine(rk: _Rank, arrival: float) -> None:
        """One member of the running rank's group is matched."""
        rk.open -= 1
        if arrival > rk.arrival:
            rk.arrival = arrival

    def match(self, ch: int, p: _Rank, x: int, tp: float, sent: int, q: _Rank, y: int, qbase: int,
              qplan: tuple, tq: float, rk: _Rank) -> float:
        """The send at step x of rank p meets the receive at step y of rank q (FIFO on channel ch):
        the message leaves once both are posted, and arrives on q. The rank that was `parked` at
        its step goes on when all that step's members are matched (`rk`, the one that was
        waiting: p or q). Returns the arrival."""
        size, key = qplan[2], qplan[3]
        if sent != qbase + key:  # the receive expects another value: silent wrong data
            self.mismatches += 1
        departure = tp if tp > tq else tq
        if self.plain:
            arrival = departure + self.latency
        else:
            departure, arrival = self.travel(ch, size, departure)
        q.have[qbase + key] = arrival
        self.msgs.extend((p.r, x, q.r, y, qbase + key, departure, arrival))
        if rk.r == self.current:  # a rank that messages itself inside one group
            self.mine(rk, arrival)
            return arrival
        rk.open -= 1
        if arrival > rk.arrival:
            rk.arrival = arrival
        if not rk.open:
            step = rk.posted
            rk.posted = -1
            rk.end[step] = rk.free = rk.ready if self.overlap else rk.arrival
            rk.pc = step + 1
            self.work.append(rk.r)
        return arrival

    def transfer(self, rk: _Rank, x: int, a: Action, key: int, route: tuple, end: float) -> float:
        """Compute level: carry a produced value to the rank that consumes it. Returns when rank rk
        is free again (at `end`, or when the value has arrived, without overlap)."""
        dest, size = route
        if self.overheads:  # the producer posts the send
            end += self.overhead(rk.r * self.R + dest)
        rk.post_at[x] = end
        if self.plain:
            departure, arrival = end, end + self.latency
        else:
            departure, arrival = self.travel(rk.r * self.R + dest, size, end)
        target = self.ranks[dest]
        target.have[key] = arrival
        target.inbox[key] = len(self.msgs) // 7
        self.msgs.extend((rk.r, x, dest, -1, key, departure, arrival))
        if target.waiting == key:
            target.waiting = None
            self.work.append(dest)
        return end if self.overlap else arrival

    def consumed(self, rk: _Rank, x: int, base: int, wants: tuple) -> None:
        """Compute level: note which step consumed each message (for traces)."""
        for k in wants:
            i = rk.inbox.pop(base + k, None)
            if i is not None:
                self.msgs[i * 7 + 3] = x

    def travel(self, ch: int, size: float, when: float) -> tuple[float, float]:
        """(departure, arrival) of a message of `size`, ready to leave at `when`, on channel ch."""
        lat, bw = self.links.get(ch, self.default_link)
        if size and bw:
            queue = self.chan_free.get(ch, 0.0)
            departure = when if when > queue else queue
            done = departure + size / bw
            self.chan_free[ch] = done
            return departure, done + lat
        return when, when + lat

    # ---- plans: what deps.py says about one (op, stage), for every microbatch ----
    def plan(self, a: Action) -> tuple:
        """Compute: (time, needed keys, made key | None, route | None), route =
        (destination rank, message size). Send: (True, peer rank, 0, key of the value sent);
        receive: (False, peer rank, message size, key of the value delivered). Keys are for
        microbatch 0; add microbatch * K."""
        op, s, S = a.op, a.stage, self.S
        if not 0 <= s < S:
            raise SchedcError("bad-index", f"{describe(a)}: stage {s} is not in 0..{S - 1}", a.span)
        if a.microbatch is None:
            raise SchedcError("bad-action", f"{describe(a)} cannot be simulated here", a.span)
        probe = [Action(op, s, m) for m in (0, 1)]  # the plan must not depend on the microbatch
        if op in COMPUTE:
            got = [(tuple(self.key(v, a) for v in needs(b, self.stages)),
                    None if produces(b) is None else self.key(produces(b), a)) for b in probe]
            wants, makes = got[0]
            if got[1] != (tuple(k + self.K for k in wants), None if makes is None else makes + self.K):
                raise AssertionError(f"deps.py: {describe(a)} depends on another microbatch")
            d = float(getattr(self.program.annotations.cost_of(s), op.value))
            if not d >= 0:
                raise SchedcError("costs", f"stage {s} has {op.value} time {d}; times must be non-negative")
            route = None
            if not self.explicit and makes is not None:
                route = self.route(a)
            plan: tuple[Any, ...] = (d, wants, makes, route)
        else:
            peer = peer_stage(a)
            assert peer is not None  # (a send or a receive)
            lo, hi = bounds(self.stages, s)
            if not lo <= peer < hi:
                raise SchedcError("bad-index", f"{describe(a)}: its peer stage {peer} is not in {lo}..{hi - 1}", a.span)
            carried = [needs(b, self.stages)[0] if op in SENDS else delivers(b) for b in probe]
            key = self.key(carried[0], a)
            if self.key(carried[1], a) != key + self.K:
                raise AssertionError(f"deps.py: {describe(a)} carries another microbatch's value")
            if op in SENDS:
                plan = (True, self.program.placement[peer], 0.0, key)
            else:
                plan = (False, self.program.placement[peer], float(message_size(self.program, a)), key)
        self.plans[op][s] = plan
        return plan

    def key(self, v, a: Action) -> int:
        kind, s, m = v
        if not 0 <= s < self.S:
            raise SchedcError("bad-index", f"{describe(a)} needs stage {s}, which is not in 0..{self.S - 1}", a.span)
        return m * self.K + 2 * s + _KIND[kind]

    def route(self, a: Action):
        """(destination rank, size) of the message that carries a's output (deps.message)."""
        pair = message(a, self.program.placement, self.stages)
        if pair is None:
            return None
        send, recv = pair
        if delivers(recv) != produces(a):  # the rule in deps.py moves a value unchanged
            raise AssertionError(f"deps.py: the message of {describe(a)} does not deliver its output")
        return self.program.placement[recv.stage], float(message_size(self.program, send))

    # ---- deadlock ----
    def deadlock(self) -> SchedcError:
        stuck = [rk for rk in self.ranks if rk.pc < len(rk.steps)]
        pending: dict = {}
        for table in (self.pend_send, self.pend_recv):
            for q in table.values():
                for (rk, x, base, plan, _) in q:
                    pending.setdefault((rk.r, x), []).append(plan)
        notes = []
        first = None
        for rk in stuck[:8]:
            x = rk.pc
            st = rk.steps[x]
            first = first or st.parts[0]
            if rk.waiting is not None:
                m, rest = divmod(rk.waiting, self.K)
                v = (("act", "grad")[rest % 2], rest // 2, m)
                why = f"it needs {value_name(v)}, which never reaches rank {rk.r}"
            else:
                waits = [f"rank {plan[1]} never posts the matching {'receive' if plan[0] else 'send'}"
                         for plan in pending.get((rk.r, x), [])]
                why = "; ".join(waits) or "it waits"
            notes.append(f"rank {rk.r} stops at step {x}, {_show(st)}: {why}")
        if len(stuck) > 8:
            notes.append(f"... and {len(stuck) - 8} more ranks")
        notes.append("`schedc check` shows the wait-for cycle")
        return SchedcError("deadlock", f"the program deadlocks: {len(stuck)} of {self.R} ranks cannot "
                           "reach the end of their list", first.span if first else None, notes)


def _show(st: Step) -> str:
    if isinstance(st, Compound):
        return f"{st.kind.value}(" + ", ".join(describe(a) for a in st.parts) + ")"
    return describe(st)
