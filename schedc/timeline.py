"""A simulated run as data: `Timeline` (when every step starts and ends, the makespan, busy time, memory),
its `Messages`, a channel's `Link`, and the checks every simulator makes of the times it is given and
gives. The simulators (simulate.py, simulate_columns.py, simulate_graph.py) fill it; they import this
type, not each other.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Iterator, Mapping, NamedTuple, overload

from .errors import SchedcError
from .ir import Action, Annotations, Program, Step
from .outputs import rounded
from .passes import lower
from .verify.analysis import counted_lowered
from .verify.memory import step_memory

if TYPE_CHECKING:
    from .rules.semantics import Semantics

MEMORY_RUN = "timed"  # `peak_memory` is the peak of the one simulated run (check's is "worst")


def _step_memory(program: Program, semantics: Semantics) -> tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]:
    """memory.py's `step_memory` of a run's program, on the lowering it is counted on (made here)."""
    counted: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...] = step_memory(
        program, semantics, lower(program) if counted_lowered(program) else None)
    return counted


class Message(NamedTuple):
    """One value that crossed ranks: from step `src_step` of `src_rank` to `dst_step` of `dst_rank`.

    At the compute level the steps are the producer and the consumer (`dst_step` is -1 if nothing
    consumed it); at the comms level, the send and the receive. `departure` is when it left (after
    the rendezvous and any queue on its channel), `arrival` when it was present on the receiver.
    """

    src_rank: int
    src_step: int
    dst_rank: int
    dst_step: int
    value: tuple[str, int, int]  # deps.py's value: ("act" | "grad", stage, microbatch)
    departure: float
    arrival: float


class Messages(Sequence[Message]):
    """The messages of a run, in the order they were matched: a read-only sequence of `Message`,
    stored flat (seven numbers each) so a large run leaves no objects behind for the collector."""

    WIDTH = 7

    def __init__(self, flat: bytes, stride: int):
        self._flat = memoryview(flat).cast("d")
        self._stride = stride  # value key = microbatch * stride + 2 * stage + (0 act | 1 grad)

    def __len__(self) -> int:
        return len(self._flat) // self.WIDTH

    @overload
    def __getitem__(self, i: int) -> Message: ...

    @overload
    def __getitem__(self, i: slice) -> list[Message]: ...

    def __getitem__(self, i: int | slice) -> Message | list[Message]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("message index out of range")
        return self._at(i)

    def _at(self, i: int) -> Message:
        """Message i (0 <= i < len)."""
        f = self._flat
        j = i * self.WIDTH
        m, rest = divmod(int(f[j + 4]), self._stride)
        return Message(int(f[j]), int(f[j + 1]), int(f[j + 2]), int(f[j + 3]),
                       (("act", "grad")[rest % 2], rest // 2, m), f[j + 5], f[j + 6])

    def __repr__(self) -> str:
        return f"<{len(self)} messages>"


class ReplicaMessages(Messages):
    """A data-parallel job's messages from a run of one replica per class (schedc/simulate_replicas.py):
    replica d's are its class's run's (`of[d]`: the class, whose ranks are c * P ..), moved to
    replica d's ranks, replica after replica. Made when read: nothing is stored per replica."""

    def __init__(self, run: Messages, P: int, of: Sequence[int]):
        self._run, self._P, self._of = run, P, tuple(of)
        ours: dict[int, list[int]] = {}  # class -> the indices of its messages in the run
        for i in range(len(run)):
            ours.setdefault(int(run._flat[i * self.WIDTH]) // P, []).append(i)
        self._ours = [ours.get(c, []) for c in range(max(of, default=-1) + 1)]
        self._first = [0]  # index of replica d's first message
        for c in self._of:
            self._first.append(self._first[-1] + len(self._ours[c]))

    def __len__(self) -> int:
        return self._first[-1]

    def _at(self, i: int) -> Message:
        d = bisect_right(self._first, i) - 1
        c = self._of[d]
        m = self._run[self._ours[c][i - self._first[d]]]
        shift = (d - c) * self._P
        return m._replace(src_rank=m.src_rank + shift, dst_rank=m.dst_rank + shift)

    def __repr__(self) -> str:
        return f"<{len(self)} messages of {len(self._of)} replicas>"


@dataclass(frozen=True)
class Link:
    """One channel's latency and bandwidth (`bandwidth` 0 means infinite), and the `overhead` of
    posting one send (on the sending rank) or one receive (on the receiving rank) on it: rank time,
    not overlapped with compute and not counted as busy (LogP's `o`)."""

    latency: float = 0.0
    bandwidth: float = 0.0
    overhead: float = 0.0


@dataclass(frozen=True)
class Timeline:
    """A simulated run, frozen. Times are per rank and step (a compound step has one start and end).

    `start[r][x]`/`end[r][x]`: when step x of rank r began and when it released the rank (a send or
    receive under overlap releases it at once; see `messages` for when data moved; a collective that
    takes time, when it started and ended: it runs beside the rank's later steps); `busy[r]`: its
    compute time; `memory_during[r][x]` / `memory_after[r][x]`: live memory (activations and receive
    buffers, schedc/verify/memory.py's `step_memory`) while step x runs (after its allocations) and
    once it has finished (after its frees). `peak_memory` is the peak of this one run (MEMORY_RUN);
    `schedc check` reports the worst over every run the semantics allows.
    """

    program: Program
    level: str
    overlap: bool
    start: tuple[tuple[float, ...], ...]
    end: tuple[tuple[float, ...], ...]
    busy: tuple[float, ...]
    makespan: float
    messages: Messages = field(repr=False)
    mismatches: int = 0  # matched send/receive pairs whose payloads differ (see `schedc check`)
    # posted[r][x]: when step x of rank r had posted its sends and receives (its posting overhead
    # over); at the compute level, when a step's output was posted to the rank that consumes it.
    # 0 for a step that posts nothing. (Traces draw a message from its send's post.)
    posted: tuple[Sequence[float], ...] = field(default=(), repr=False)
    semantics: str = "rendezvous"  # the send semantics the run was timed under (docs/sim.md)
    replicas: int = 1  # a data-parallel job: `program` is the whole job, replica after replica
    # seconds of each rank's collectives (data-parallel gradient reduction, FSDP's gathers, the tied
    # all-reduce: schedc/rules/time.py), whether or not they ran beside its compute; () when none took time
    collectives: tuple[float, ...] = ()

    def _replica(self, d: int) -> Program:
        """Replica d's ranks of a job's timeline, as a program of one pipeline."""
        P = self.program.num_ranks // self.replicas
        return replace(self.program, num_ranks=P, ranks=self.program.ranks[d * P:(d + 1) * P])

    @property
    def bubble_ratio(self) -> float:
        """`1 - sum(busy) / (R * makespan)` (0 for an empty program)."""
        if self.makespan <= 0:
            return 0.0
        return 1.0 - sum(self.busy) / (len(self.busy) * self.makespan)

    @property
    def idle(self) -> tuple[float, ...]:
        return tuple(self.makespan - b for b in self.busy)

    @cached_property  # counted once, when asked (cached_property writes past the frozen __setattr__)
    def _memory(self) -> tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]:
        from .rules.semantics import Semantics
        semantics = Semantics.parse(self.semantics)  # (a backend holds sent messages until waited for)
        if self.replicas > 1:  # each replica's pipeline, as memory.py counts one (replicas that share their lists, once)
            counted: dict[tuple[int, ...], tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]] = {}
            out: list[tuple[tuple[float, ...], tuple[float, ...]]] = []
            for d in range(self.replicas):
                replica = self._replica(d)
                key = tuple(map(id, replica.ranks))
                if key not in counted:
                    counted[key] = _step_memory(replica, semantics)
                out.extend(counted[key])
            return tuple(out)
        return _step_memory(self.program, semantics)

    @cached_property
    def memory_during(self) -> tuple[tuple[float, ...], ...]:
        return tuple(during for during, _ in self._memory)

    @cached_property
    def memory_after(self) -> tuple[tuple[float, ...], ...]:
        return tuple(after for _, after in self._memory)

    @cached_property  # a scan of every step: done once
    def peak_memory(self) -> tuple[float, ...]:
        """The most each rank holds in this run (activations and receive buffers)."""
        return tuple(max(during, default=0.0) for during, _ in self._memory)

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
        """Live memory of a rank over time: (time, live) at each change, from (0, 0)."""
        out = [(0.0, 0.0)]
        during, after = self._memory[rank]
        for s, e, hi, lo in zip(self.start[rank], self.end[rank], during, after):
            for t, v in ((s, hi), (e, lo)):
                if v != out[-1][1]:
                    if t == out[-1][0]:
                        out[-1] = (t, v)
                    else:
                        out.append((t, v))
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        """The metrics as JSON-ready values (the core of `schedc sim --json`)."""
        return {"level": self.level, "overlap": self.overlap, "makespan": rounded(self.makespan),
                "bubble_ratio": rounded(self.bubble_ratio), "busy": [rounded(x) for x in self.busy],
                "idle": [rounded(x) for x in self.idle], "peak_memory": [rounded(x) for x in self.peak_memory],
                "memory_run": MEMORY_RUN, "messages": len(self.messages), "mismatches": self.mismatches,
                "semantics": self.semantics,
                **({"collectives": [rounded(x) for x in self.collectives]} if self.collectives else {})}


def dispatch_times(ann: Annotations, ranks: int) -> tuple[float, ...]:
    """Each rank's time to start a step (the annotations' `rank_dispatch`), checked; () when every one is 0."""
    times = tuple(float(ann.dispatch_of(r)) for r in range(ranks))
    for r, d in enumerate(times):
        if not 0 <= d < math.inf:
            raise SchedcError("costs", f"rank {r} has dispatch time {d}; it must be a finite non-negative number")
    return times if any(times) else ()


def check_links(links: Mapping[tuple[int, int], Link], ranks: int) -> None:
    """Every channel a cost names joins ranks of the run, and its posting overhead is non-negative."""
    for (a, b), link in links.items():
        if not (0 <= a < ranks and 0 <= b < ranks):
            raise SchedcError("costs", f"channel {a}->{b} names a rank outside 0..{ranks - 1}")
        if not float(link.overhead) >= 0:
            raise SchedcError("costs", f"channel {a}->{b} has overhead {float(link.overhead)}; it must be non-negative")


def check_finite(makespan: float, ranks: int) -> None:
    """Every time of a run is at most the makespan, and the bubble ratio divides by ranks x makespan:
    when that is not a finite float, the costs overflow it (a `costs` error, not inf or nan)."""
    if not math.isfinite(makespan * ranks):
        raise SchedcError("costs", f"the simulated times overflow (the makespan is {makespan:g} over {ranks} "
                          "ranks): the costs, latencies or message sizes are too large; give them in a larger unit")
