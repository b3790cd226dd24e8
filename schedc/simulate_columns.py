"""The timed run of a compute-level program held as columns (schedc/columns.py), in one tight pass.

simulate.py's `_Simulator` for its common large case: every step one compute action or an
overlapped pair of them (DualPipe's OVERLAP_F_B, timed by rules/time.py's `step_time`), one latency
everywhere, no bandwidth and no posting overheads, each value made by one step. The plans
(`_Simulator.plan`: deps.py's rule and the costs) are asked once per (op, stage); each step's
inputs are found, as arrays, as the steps that make them; and the run is the simulator's driver on
those indices: each rank runs until it waits for a value, and is resumed when the value is sent.
The arithmetic is the simulator's (a start is the latest of what it waits for, an end that start
plus the time, an arrival that end plus the latency), so the timeline is the same to the bit, its
messages in the same order. Anything else, or a run that cannot finish, is left to the simulator
(None), which says why. Tables indexed by value or by (op, stage) are made only when they are not
much larger than the program (else None too). Its memory is memory.py's `step_memory`, which
counts a program held as columns as arrays too.
"""
from __future__ import annotations

from array import array

import numpy as np

from .columns import CODE, COMPOUND, KIND_CODE, OPS, as_columns, columns_of
from .errors import SchedcError
from .ir import COMM, COMPUTE, Action, CompoundKind, Op
from .rules.time import collective_span, collective_time, step_time, timed
from .timeline import Messages, Timeline, check_finite

_COMPUTE_CODES = np.array(sorted(CODE[op] for op in COMPUTE))
NONE = -1  # no value waited for, no destination
FROM_ACTIONS = 400  # a program held as actions is read as columns from this many steps (fewer: step by step is faster)


def run_columns(sim) -> Timeline | None:
    """The Timeline `sim.run()` would give (`sim`: a `_Simulator` not yet run), or None when the
    program is not a case this pass takes, or when its run cannot finish."""
    cols = _columns(sim)
    planned = None if cols is None else _planned(sim, cols)
    if planned is None:
        return None
    plans, step, special = planned
    time = plans["time"]
    if cols.compounds:  # a single step's time is its action's, a pair's rules/time.py's
        time = time[np.searchsorted(step, np.arange(len(cols.op)))]
        pairs = _pair_times(sim, cols.parts)
        if pairs is None:
            return None
        time[cols.parts.step] = pairs
    run = _Run.of(cols.starts, plans, step, time, sim, special)
    return None if run is None else run.timeline()


def _columns(sim):
    """The program's steps as columns, if this pass takes its run: held so, or read so when it has
    enough steps to pay; its compounds overlapped pairs."""
    if sim.explicit or sim.overheads or sim.dispatch or sim.draw:
        return None
    cols = columns_of(sim.program)
    if cols is None:  # steps held as actions: read as columns when there are enough of them to pay
        if sim.program.replicas or sum(map(len, sim.program.ranks)) < FROM_ACTIONS:
            return None
        cols = as_columns(sim.program)
    if cols.compounds and (cols.parts.kind != KIND_CODE[CompoundKind.OVERLAP_F_B]).any():
        return None
    return cols


def _planned(sim, cols):
    """(plans, step, special): `_plans` of every action (a compound's parts in its place; an action
    that is no computation has none), the step of each, and `_stage_steps`; None if the simulator
    must say what is wrong (a bad index, a pair of something other than computations)."""
    op, stage, mb, step = (a.astype(np.int64) for a in cols.opened())
    if len(stage) and (stage.min() < 0 or stage.max() >= sim.S):
        return None
    compute = np.isin(op, _COMPUTE_CODES)
    if (mb[compute] < 0).any() or (cols.compounds and not compute[cols.op[step] == COMPOUND].all()):
        return None
    special = None if compute.all() else _stage_steps(sim, op, stage, compute)
    at = np.flatnonzero(compute)
    plans = _plans(sim, op[at] * sim.S + stage[at], mb[at])
    if plans is None or special is None and not compute.all():
        return None
    plans["stage"] = stage[at]
    if special is not None:  # (the actions that are not computations: no wants, no value, no time)
        full = {name: np.full(len(op), NONE if name not in ("time", "size") else 0.0, dtype=values.dtype)
                for name, values in plans.items()}
        for name, values in plans.items():
            full[name][at] = values
        plans = full
    return plans, step, special


_ZERO, _REDUCTION, _TIED, _GATHER = 0, 1, 2, 3  # a step that is not a computation: no time; a collective of its
# rank's, the tied one, or an UNSHARD (its stage's computations wait for it to end)


def _stage_steps(sim, op, stage, compute) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The steps that are not computations (each a single action), as the simulator times them:
    per action its kind (NONE: a computation; `_ZERO`: RESHARD, a wait or a collective that takes no
    time; `_REDUCTION`, `_TIED`, `_GATHER`: a collective, as `_ZERO` names them), its time and its
    stage. None if one is a send or receive."""
    kind, time = np.full(len(op), NONE, dtype=np.int64), np.zeros(len(op))
    others = np.flatnonzero(~compute)  # (single steps: no compound holds one, by the caller)
    for o, s in {(int(o), int(s)) for o, s in zip(op[others].tolist(), stage[others].tolist())}:
        operation = OPS[o]
        if operation in COMM:
            return None
        d = collective_time(sim.program.annotations.cost_of(s), operation)
        at = others[(op[others] == o) & (stage[others] == s)]
        kind[at], time[at] = (_ZERO, 0.0) if not d else (
            _TIED if operation is Op.REDUCE_TIED else _GATHER if operation is Op.UNSHARD else _REDUCTION, d)
    return kind, time, stage


def _pair_times(sim, parts) -> np.ndarray | None:
    """Each compound's time, rules/time.py's `step_time` of its parts' (time, communication), asked
    once per distinct list of parts (by op and stage); None past two parts a compound."""
    sizes = parts.sizes
    if len(sizes) and sizes.max() > 2:
        return None
    owner = parts.owner()
    key = np.full((len(parts), 2), -1, dtype=np.int64)
    key[owner, np.arange(len(owner)) - parts.starts[owner]] = parts.op.astype(np.int64) * sim.S + parts.stage
    kinds, which = np.unique(key, axis=0, return_inverse=True)
    costs = sim.program.annotations
    times = [step_time([timed(costs.cost_of(k % sim.S), OPS[k // sim.S].value) for k in row if k >= 0])
             for row in kinds.tolist()]
    return np.asarray(times, dtype=np.float64)[np.ravel(which)]


def _plans(sim, pair: np.ndarray, mb: np.ndarray) -> dict[str, np.ndarray] | None:
    """`_Simulator.plan` of every step, asked once per (op, stage) (`pair`: op code * S + stage),
    as columns: the value keys it waits for (`want_a`, then `want_b`; NONE: none), the key it makes,
    the rank that value travels to (`dest`) and the message's size, and the plan's time. None if a
    plan is an error, or if far more (op, stage) pairs exist than steps."""
    distinct = _distinct(pair, len(OPS) * sim.S)
    if distinct is None:
        return None
    pairs, which = distinct
    tables = {name: np.full(len(pairs), NONE, dtype=np.int64) for name in ("want_a", "want_b", "make", "dest")}
    time, size = np.zeros(len(pairs)), np.zeros(len(pairs))
    for i, p in enumerate(pairs.tolist()):
        code, s = divmod(p, sim.S)
        try:
            d, wants, makes, route = sim.plan(Action(OPS[code], s, 0))
        except SchedcError:
            return None  # (the simulator raises it at the action's span)
        if len(wants) > 2:
            return None
        time[i] = d
        for name, key in zip(("want_a", "want_b"), wants):
            tables[name][i] = key
        if makes is not None:
            tables["make"][i] = makes
        if route is not None:
            tables["dest"][i], size[i] = route
    base = mb * sim.K  # a plan's keys are microbatch 0's
    out = {name: np.where(tables[name][which] == NONE, NONE, tables[name][which] + base)
           for name in ("want_a", "want_b", "make")}
    out["dest"], out["time"], out["size"] = tables["dest"][which], time[which], size[which]
    return out


def _distinct(values: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The distinct values (each in 0..size-1), in order, and the index of each value among them;
    None when a table of `size` would cost more than the values do."""
    if not _fits(size, len(values)):
        return None
    present = np.zeros(size, dtype=bool)
    present[values] = True
    return np.flatnonzero(present), np.cumsum(present)[values] - 1


class _Run:
    """The run over all steps, flat (step x of rank r is `starts[r] + x`), and their actions (an
    overlapped pair's two, one after the other). What a step waits for from other ranks is named by
    the action that makes it and sends it there: `src_a[x]`, `src_b[x]` (NONE: nothing more); a
    value made earlier on its own rank is there by the time the step may start (its rank's time
    never goes back). `msg_a[x]`, `msg_b[x]`: the actions of step x that send a message (NONE: none);
    per action, `to` the rank it goes to, `size` its size, `make` the value's key."""

    def __init__(self, starts, sim, step, src_a, src_b, msg_a, msg_b, to, size, make, duration, special,
                 stages=None):
        self.starts, self.sim, self.step, self.duration = starts, sim, step, duration
        self.stages = stages  # with UNSHARDs that take time: per step, the stages it computes on
        self.stage_of = None if special is None else special[2]  # (an UNSHARD's stage)
        self.to, self.make = to, make
        self.size = array("d", size)  # (Python floats for the loop: a time past the floats is inf, not a warning)
        self.src_a, self.src_b, self.msg_a = (_ints(a) for a in (src_a, src_b, msg_a))
        self.msg_b = None if msg_b is None else _ints(msg_b)
        n, m = len(duration), len(to)
        self.start, self.end = (array("d", bytes(8 * n)) for _ in range(2))
        self.arrival, self.departure = (array("d", bytes(8 * m)) for _ in range(2))
        self.sent = array("q")  # the actions that sent a message, in the order they did
        # steps that are not computations (`_stage_steps`): their kind, and a collective's time
        self.special = None if special is None else (_ints(special[0]), _floats(special[1]))
        self.collectives = [0.0] * sim.R  # each rank's seconds of collectives
        self.collectives_end = 0.0
        self.group_end: dict[int, float] = {}  # a rank's collective group -> when its last collective ends
        self.gathered: list[dict[int, float]] = [{} for _ in range(sim.R)]  # per rank: stage -> when its UNSHARD ends

    @classmethod
    def of(cls, starts, plans: dict[str, np.ndarray], step: np.ndarray, time: np.ndarray, sim,
           special=None) -> "_Run | None":
        """The run of `plans` (per action; `step`, the step of each; `time`, each step's). None if a
        value is made twice (which one a step gets would depend on the order of the run), or a step
        waits for a value that never reaches its rank or is made later on it (the rank stops there),
        or if the values are too sparse to index by, or a step waits for more than two values from
        other ranks or sends more than two."""
        n, m = len(time), len(step)
        rank_of_step = np.repeat(np.arange(sim.R, dtype=np.int64), np.diff(starts))
        sources = _sources(plans, step, rank_of_step[step])
        if sources is None:
            return None
        src = _two_per_step(step[sources[0]], sources[1], n)
        sends = np.flatnonzero(plans["dest"] != NONE)  # (actions, in order)
        msg = _two_per_step(step[sends], sends, n)
        if src is None or msg is None:
            return None
        with np.errstate(over="ignore"):  # (a time past the floats is inf: `check_finite` refuses the makespan)
            duration = time / np.asarray(sim.speeds)[rank_of_step]  # a step's time over its rank's speed, as the simulator
        stages = None
        if special is not None:
            if m > n:  # (per step: the steps that are not computations are single actions)
                special = tuple(a[np.searchsorted(step, np.arange(n))] for a in special)
            if (special[0] == _GATHER).any():  # (a computation waits for its stages' UNSHARDs)
                stages = [()] * n
                computing = np.flatnonzero(plans["stage"] != NONE)
                for x, s in zip(step[computing].tolist(), plans["stage"][computing].tolist()):
                    stages[x] += (s,)
        return cls(starts, sim, step, *src, msg[0], msg[1] if m > n else None, plans["dest"], plans["size"],
                   plans["make"], duration, special, stages)

    def timeline(self) -> Timeline | None:
        """The Timeline, as `_Simulator.run` builds it; None if some rank cannot finish."""
        sim, R = self.sim, self.sim.R
        free = self.drive(_floats(self.duration))
        if free is None:
            return None
        sent = np.frombuffer(self.sent, dtype=np.int64)
        end, arrival = (np.frombuffer(a, dtype=np.float64) for a in (self.end, self.arrival))
        makespan = max(free + [float(arrival[sent].max()) if len(sent) else 0.0, self.collectives_end])
        check_finite(makespan, R)
        bounds = list(zip(self.starts, self.starts[1:]))
        busy = tuple(float(np.add.accumulate(self.duration[lo:hi])[-1]) if hi > lo else 0.0 for lo, hi in bounds)
        posted = _floats(np.where(np.frombuffer(self.msg_a, dtype=np.int64) != NONE, end, 0.0))
        return Timeline(sim.program, "compute", sim.overlap, tuple(tuple(self.start[lo:hi]) for lo, hi in bounds),
                        tuple(tuple(self.end[lo:hi]) for lo, hi in bounds), busy, makespan,
                        Messages(self._messages(sent, end, arrival), sim.K), 0,
                        tuple(posted[lo:hi] for lo, hi in bounds), sim.semantics,
                        collectives=tuple(self.collectives) if any(self.collectives) else ())

    def drive(self, dur: array) -> list[float] | None:  # noqa: C901
        """`_Simulator.run`'s driver and its `compute` and `overlap_f_b` handlers: run each rank
        until it waits for a value not sent yet, resume it when that value is sent. When each rank
        is free at the end, or None if one stops."""
        starts, R, overlap, sim = self.starts, self.sim.R, self.sim.overlap, self.sim
        latency = sim.latency if sim.plain else None  # (else each message travels as the simulator's `travel` says)
        src_a, src_b, msg_a, msg_b, to = self.src_a, self.src_b, self.msg_a, self.msg_b, self.to
        start, end, arrival, departure, sent, size = self.start, self.end, self.arrival, self.departure, self.sent, self.size
        special = self.special  # (steps that are not computations)
        stages, gathered = self.stages, self.gathered
        done = bytearray(len(arrival))  # sent yet?
        pc, free = list(starts[:-1]), [0.0] * R
        waiting = [NONE] * R  # the action whose message each rank waits for
        work = list(range(R - 1, -1, -1))
        while work:
            r = work.pop()
            x, t, hi = pc[r], free[r], starts[r + 1]
            waiting[r] = NONE
            while x < hi:
                if special is not None and special[0][x] != NONE:
                    t = self.stage_step(x, r, t)
                    x += 1
                    continue
                j = src_a[x]  # what the step waits for: src_b only where src_a is a value
                if j != NONE:
                    if not done[j]:  # not sent yet: the rank stops here
                        waiting[r] = j
                        break
                    if arrival[j] > t:
                        t = arrival[j]
                    j = src_b[x]
                    if j != NONE:
                        if not done[j]:
                            waiting[r] = j
                            break
                        if arrival[j] > t:
                            t = arrival[j]
                if stages is not None and gathered[r]:  # its stages' weights, gathered (FSDP's UNSHARD)
                    for s in stages[x]:
                        t = max(t, gathered[r].get(s, t))
                e = t + dur[x]
                start[x] = t
                end[x] = e
                j = msg_a[x]
                while j != NONE:  # its messages, in the order of its actions
                    q = to[j]
                    if latency is not None:
                        a = arrival[j] = e + latency
                    else:
                        departure[j], a = sim.travel(r * R + q, size[j], e)
                        arrival[j] = a
                    done[j] = 1
                    sent.append(j)
                    if waiting[q] == j:
                        waiting[q] = NONE
                        work.append(q)
                    if not overlap and a > t:  # (the rank is held until its messages have arrived)
                        t = a
                    j = msg_b[x] if msg_b is not None and j == msg_a[x] else NONE
                t = e if overlap or e > t else t
                x += 1
            pc[r], free[r] = x, t
        return free if all(pc[r] == starts[r + 1] for r in range(R)) else None

    def stage_step(self, x: int, r: int, t: float) -> float:
        """The simulator's `stage_op` and `collective` handlers for step x of rank r, free at t: a
        step of no time, or a collective of its rank's group (rules/time.py's `collective_span`: it
        starts once the group's previous one has ended, and runs beside the rank's compute). When the
        rank is free again."""
        assert self.special is not None and self.stage_of is not None  # (only steps of `special` come here)
        kind, time = self.special[0][x], self.special[1][x]
        if kind == _ZERO:
            self.start[x] = self.end[x] = t
            return t
        group = 2 * r + (kind == _TIED)
        start, end = collective_span(t, self.group_end.get(group, 0.0), time)
        self.group_end[group] = end
        self.start[x], self.end[x] = start, end
        self.collectives[r] += time
        if end > self.collectives_end:
            self.collectives_end = end
        if kind == _GATHER:
            self.gathered[r][int(self.stage_of[x])] = end
        return t if self.sim.overlap else end

    def _messages(self, sent: np.ndarray, end: np.ndarray, arrival: np.ndarray) -> bytes:
        """timeline.Messages' seven numbers of each message, in the order they were sent: its
        consumer is the first step of the receiving rank that waits for it."""
        starts = np.asarray(self.starts, dtype=np.int64)
        step = self.step
        src = np.concatenate([np.frombuffer(a, dtype=np.int64) for a in (self.src_a, self.src_b)])
        consumer = np.concatenate([np.arange(len(end))] * 2)
        remote = src != NONE
        first = np.full(len(step), len(end), dtype=np.int64)  # the earliest step that waits for each message
        np.minimum.at(first, src[remote], consumer[remote])
        x = step[sent]
        rank = np.searchsorted(starts, x, side="right") - 1
        dest, got = self.to[sent], first[sent]
        out = np.empty((len(sent), Messages.WIDTH))
        out[:, 0], out[:, 1], out[:, 2] = rank, x - starts[rank], dest
        out[:, 3] = np.where(got < len(end), got - starts[dest], -1)
        out[:, 4] = self.make[sent]
        out[:, 5] = end[x] if self.sim.plain else np.frombuffer(self.departure, dtype=np.float64)[sent]
        out[:, 6] = arrival[sent]
        return out.tobytes()


def _sources(plans: dict[str, np.ndarray], step: np.ndarray, rank: np.ndarray):
    """(waiting, producer): each action's wait for a value made on another rank, and the action that
    makes it and sends it there, in the order the simulator asks (action by action, need by need).
    None if a value is made twice (which one a step gets would depend on the order of the run), or
    a step waits for a value that never reaches its rank or is made later on it (the rank stops
    there), or if the values are too sparse to index by. (`step`, `rank`: each action's.)"""
    make, dest = plans["make"], plans["dest"]
    values = max(int(a.max(initial=NONE)) for a in (make, plans["want_a"], plans["want_b"])) + 1
    if not _fits(values, len(step)):
        return None
    made = np.flatnonzero(make != NONE)
    if np.bincount(make[made], minlength=values).max(initial=0) > 1:
        return None
    maker = np.full(values, NONE, dtype=np.int64)  # value key -> the action that makes it
    maker[make[made]] = made
    if (dest[made] == rank[made]).any():
        return None  # (sent to the rank that made it: it would arrive there twice)
    waiting, producers, which = [], [], []
    for k, want in enumerate((plans["want_a"], plans["want_b"])):
        waits = np.flatnonzero(want != NONE)
        p = maker[want[waits]]
        if (p == NONE).any():
            return None
        here = rank[p] == rank[waits]
        if (~here & (dest[p] != rank[waits])).any() or (here & (step[p] >= step[waits])).any():
            return None
        waiting.append(waits[~here])
        producers.append(p[~here])
        which.append(np.full(len(waiting[-1]), k))
    action, producer = np.concatenate(waiting), np.concatenate(producers)
    order = np.lexsort((np.concatenate(which), action))
    return action[order], producer[order]


def _two_per_step(steps: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Per step of n, the first and second of `values` listed for it (`steps`, in order; NONE where
    none); None if a step has more than two."""
    first = np.r_[True, steps[1:] != steps[:-1]]
    nth = np.arange(len(steps)) - np.maximum.accumulate(np.where(first, np.arange(len(steps)), 0))
    if (nth > 1).any():
        return None
    a, b = np.full(n, NONE, dtype=np.int64), np.full(n, NONE, dtype=np.int64)
    a[steps[nth == 0]], b[steps[nth == 1]] = values[nth == 0], values[nth == 1]
    return a, b


def _fits(size: int, count: int) -> bool:
    """Whether a table of `size` entries, for `count` steps, costs no more than a few entries a step."""
    return size <= 4 * count + 4096


def _ints(values: np.ndarray) -> array:
    """The values as a flat array of integers (8 bytes each, where a list holds an object each)."""
    out = array("q")
    out.frombytes(values.astype(np.int64).tobytes())
    return out


def _floats(values: np.ndarray) -> array:
    out = array("d")
    out.frombytes(values.astype(np.float64).tobytes())
    return out
