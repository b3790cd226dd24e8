"""The timed run of a compute-level program held as columns (schedc/columns.py), in one tight pass.

simulate.py's `_Simulator` for its common large case: every step one compute action, one latency
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

from .columns import CODE, OPS, columns_of
from .errors import SchedcError
from .ir import COMPUTE, Action
from .timeline import Messages, Timeline, check_finite

_COMPUTE_CODES = np.array(sorted(CODE[op] for op in COMPUTE))
NONE = -1  # no value waited for, no destination


def run_columns(sim) -> Timeline | None:
    """The Timeline `sim.run()` would give (`sim`: a `_Simulator` not yet run), or None when the
    program is not a case this pass takes, or when its run cannot finish."""
    cols = columns_of(sim.program)
    if cols is None or cols.compounds or sim.explicit or not sim.plain or sim.overheads or sim.dispatch or sim.draw:
        return None
    stage, mb = cols.stage.astype(np.int64), cols.microbatch.astype(np.int64)
    if not np.isin(cols.op, _COMPUTE_CODES).all() or len(stage) and (
            stage.min() < 0 or stage.max() >= sim.S or mb.min() < 0):
        return None  # (the simulator reports a bad index)
    plans = _plans(sim, cols.op.astype(np.int64) * sim.S + stage, mb)
    if plans is None:
        return None
    run = _Run.of(cols.starts, plans, sim)
    return None if run is None else run.timeline()


def _plans(sim, pair: np.ndarray, mb: np.ndarray) -> dict[str, np.ndarray] | None:
    """`_Simulator.plan` of every step, asked once per (op, stage) (`pair`: op code * S + stage),
    as columns: the value keys it waits for (`want_a`, then `want_b`; NONE: none), the key it makes,
    the rank that value travels to (`dest`) and the plan's time. None if a plan is an error, or if
    far more (op, stage) pairs exist than steps."""
    distinct = _distinct(pair, len(OPS) * sim.S)
    if distinct is None:
        return None
    pairs, which = distinct
    tables = {name: np.full(len(pairs), NONE, dtype=np.int64) for name in ("want_a", "want_b", "make", "dest")}
    time = np.zeros(len(pairs))
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
            tables["dest"][i] = route[0]
    base = mb * sim.K  # a plan's keys are microbatch 0's
    out = {name: np.where(tables[name][which] == NONE, NONE, tables[name][which] + base)
           for name in ("want_a", "want_b", "make")}
    out["dest"], out["time"] = tables["dest"][which], time[which]
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
    """The run over all steps, flat (step x of rank r is `starts[r] + x`). What each step waits for
    is named by the step that makes it: `src_a[i]` / `src_b[i]` is p >= 0 when step p makes the
    value earlier on the same rank, `-2 - p` when step p makes it on another rank and sends it here,
    NONE when the step waits for nothing more."""

    def __init__(self, starts, sim, rank, src_a, src_b, dest, make, duration):
        self.starts, self.sim, self.rank, self.make, self.duration = starts, sim, rank, make, duration
        self.src_a, self.src_b, self.dest = (_ints(a) for a in (src_a, src_b, dest))
        n = len(duration)
        self.start, self.end, self.arrival = (array("d", bytes(8 * n)) for _ in range(3))
        self.sent = array("q")  # the steps that sent a message, in the order they ran

    @classmethod
    def of(cls, starts, plans: dict[str, np.ndarray], sim) -> "_Run | None":
        """The steps' sources; None if a value is made twice (which one a step gets would depend on
        the order of the run), or a step waits for a value that never reaches its rank or is made
        later on it (the rank stops there), or if the values are too sparse to index by."""
        n = len(plans["time"])
        make, dest, wants = plans["make"], plans["dest"], (plans["want_a"], plans["want_b"])
        values = max(int(a.max(initial=NONE)) for a in (make, *wants)) + 1  # value keys are 0..values-1
        if not _fits(values, n):
            return None
        made = np.flatnonzero(make != NONE)
        if np.bincount(make[made], minlength=values).max(initial=0) > 1:
            return None
        maker = np.full(values, NONE, dtype=np.int64)  # value key -> the step that makes it
        maker[make[made]] = made
        rank = np.repeat(np.arange(sim.R, dtype=np.int64), np.diff(starts))
        if (dest[made] == rank[made]).any():
            return None  # (sent to the rank that made it: it would arrive there twice)
        sources = []
        for want in wants:
            waits = np.flatnonzero(want != NONE)
            p = maker[want[waits]]
            if (p == NONE).any():
                return None
            here = rank[p] == rank[waits]
            if (~here & (dest[p] != rank[waits])).any() or (here & (p >= waits)).any():
                return None
            src = np.full(n, NONE, dtype=np.int64)
            src[waits] = np.where(here, p, -2 - p)
            sources.append(src)
        with np.errstate(over="ignore"):  # (a time past the floats is inf: `check_finite` refuses the makespan)
            duration = plans["time"] / np.asarray(sim.speeds)[rank]  # a plan's time over the rank's speed, as `compute`
        src_a, src_b = sources  # (one per input: `wants` has two)
        return cls(starts, sim, rank, src_a, src_b, dest, make, duration)

    def timeline(self) -> Timeline | None:
        """The Timeline, as `_Simulator.run` builds it; None if some rank cannot finish."""
        sim, R = self.sim, self.sim.R
        free = self.drive(_floats(self.duration))
        if free is None:
            return None
        sent = np.frombuffer(self.sent, dtype=np.int64)
        end, arrival = (np.frombuffer(a, dtype=np.float64) for a in (self.end, self.arrival))
        makespan = max(free + [float(arrival[sent].max()) if len(sent) else 0.0])
        check_finite(makespan, R)
        bounds = list(zip(self.starts, self.starts[1:]))
        busy = tuple(float(np.add.accumulate(self.duration[lo:hi])[-1]) if hi > lo else 0.0 for lo, hi in bounds)
        posted = _floats(np.where(np.asarray(self.dest) != NONE, end, 0.0))
        return Timeline(sim.program, "compute", sim.overlap, tuple(tuple(self.start[lo:hi]) for lo, hi in bounds),
                        tuple(tuple(self.end[lo:hi]) for lo, hi in bounds), busy, makespan,
                        Messages(self._messages(sent, end, arrival), sim.K), 0,
                        tuple(posted[lo:hi] for lo, hi in bounds), sim.semantics)

    def drive(self, dur: array) -> list[float] | None:  # noqa: C901
        """`_Simulator.run`'s driver and `compute` handler: run each rank until it waits for a value
        not sent yet, resume it when that value is sent. When each rank is free at the end, or None
        if one stops."""
        starts, R, latency, overlap = self.starts, self.sim.R, self.sim.latency, self.sim.overlap
        sources = (self.src_a, self.src_b)
        dest, start, end, arrival, sent = self.dest, self.start, self.end, self.arrival, self.sent
        done = bytearray(len(dur))  # sent yet?
        pc, free = list(starts[:-1]), [0.0] * R
        waiting = [NONE] * R  # the step whose message each rank waits for
        work = list(range(R - 1, -1, -1))
        while work:
            r = work.pop()
            x, t, hi = pc[r], free[r], starts[r + 1]
            waiting[r] = NONE
            while x < hi:
                for src in sources:  # what the step waits for: src_b only where src_a is a value
                    p = src[x]
                    if p == NONE:
                        break
                    if p >= 0:  # made here
                        tv = end[p]
                    else:
                        p = -2 - p
                        if not done[p]:  # not sent yet: the rank stops here
                            waiting[r] = p
                            break
                        tv = arrival[p]
                    if tv > t:
                        t = tv
                if waiting[r] != NONE:
                    break
                e = t + dur[x]
                start[x] = t
                end[x] = e
                q = dest[x]
                if q != NONE:  # its value travels to rank q
                    a = arrival[x] = e + latency
                    done[x] = 1
                    sent.append(x)
                    if waiting[q] == x:
                        waiting[q] = NONE
                        work.append(q)
                    if not overlap:
                        e = a
                t = e
                x += 1
            pc[r], free[r] = x, t
        return free if all(pc[r] == starts[r + 1] for r in range(R)) else None

    def _messages(self, sent: np.ndarray, end: np.ndarray, arrival: np.ndarray) -> bytes:
        """timeline.Messages' seven numbers of each message, in the order they were sent: its
        consumer is the first step of the receiving rank that waits for it."""
        starts = np.asarray(self.starts, dtype=np.int64)
        src = -2 - np.concatenate([np.frombuffer(a, dtype=np.int64) for a in (self.src_a, self.src_b)])
        consumer = np.concatenate([np.arange(len(end))] * 2)
        remote = src >= 0  # (NONE and local sources are negative here)
        first = np.full(len(end), len(end), dtype=np.int64)  # the earliest step that waits for each message
        np.minimum.at(first, src[remote], consumer[remote])
        rank, dest, got = self.rank[sent], np.frombuffer(self.dest, dtype=np.int64)[sent], first[sent]
        out = np.empty((len(sent), Messages.WIDTH))
        out[:, 0], out[:, 1], out[:, 2] = rank, sent - starts[rank], dest
        out[:, 3] = np.where(got < len(end), got - starts[dest], -1)
        out[:, 4], out[:, 5], out[:, 6] = self.make[sent], end[sent], arrival[sent]
        return out.tobytes()


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
