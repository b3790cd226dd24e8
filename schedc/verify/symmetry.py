"""Replicas that run one program are checked once: a data-parallel job's replicas grouped into
classes of identical pipelines (the same steps from the same source lines), the job reduced to
one replica per class (`Classes.reduced`), and what the reduced job says told of every rank of
the real job. Exact: docs/checks.md, "Replicas that run one program".
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace

from ..ir import Program, same_lines
from .execute import Wait


@dataclass(frozen=True)
class Classes:
    """The replicas of a job of P-rank pipelines grouped by the program they run: `of[d]` is
    replica d's class, `members[c]` the replicas of class c in order (classes numbered by their
    first replica, `reps`, which stands for the class in the reduced job)."""

    P: int
    of: tuple[int, ...]
    members: tuple[tuple[int, ...], ...]

    @property
    def D(self) -> int:
        return len(self.of)

    @property
    def k(self) -> int:
        return len(self.members)

    @property
    def reps(self) -> tuple[int, ...]:
        return tuple(m[0] for m in self.members)

    def reduced(self, program: Program) -> Program:
        """The job with one replica per class, the classes' first replicas in order (replica c of it
        runs class c; replica 0 is the real replica 0)."""
        lists = [program.ranks, *program.replicas]
        return replace(program, ranks=lists[self.reps[0]], replicas=tuple(lists[d] for d in self.reps[1:]))

    def real(self, r: int) -> int:
        """The job rank of the reduced job's rank r: its pipeline rank in its class's first replica."""
        return self.reps[r // self.P] * self.P + r % self.P

    def reduced_rank(self, r: int) -> int:
        """The reduced job's rank that runs what job rank r runs."""
        return self.of[r // self.P] * self.P + r % self.P

    def expand(self, per_rank: Sequence) -> list:
        """Values per rank of the reduced job (class c's ranks c * P ..) as values per job rank."""
        P = self.P
        return [x for c in self.of for x in per_rank[c * P:(c + 1) * P]]

    def expand_peaks(self, peaks: Sequence) -> tuple:
        """The reduced job's worst moments per rank (schedc/verify/memory.py's `Peak`) as the job's:
        each replica's rank holds what its class's first replica's does."""
        from .memory import Peak
        P = self.P
        return tuple(pk if d * P + p == pk.rank else
                     Peak(d * P + p, pk.memory, pk.step, pk.action, pk.live, pk.buffers, pk.lowered, pk.inserted)
                     for d, c in enumerate(self.of) for p, pk in enumerate(peaks[c * P:(c + 1) * P]))


def classes(program: Program) -> Classes:
    """The replicas of `program` grouped by the lists they run (a replica that shares an earlier
    one's lists, as the compiler makes them, is placed at once; equal lists from other lines are
    a class of their own: a finding names its lines)."""
    lists = [program.ranks, *program.replicas]
    by_id: dict[int, int] = {}
    alike: dict[tuple, list[int]] = {}  # lists -> the classes whose lists are equal to them
    firsts: list[tuple] = []
    of: list[int] = []
    for ranks in lists:
        c = by_id.get(id(ranks))
        if c is None:
            same = alike.setdefault(ranks, [])
            c = next((e for e in same if same_lines(firsts[e], ranks)), None)
            if c is None:
                c = len(firsts)
                firsts.append(ranks)
                same.append(c)
            by_id[id(ranks)] = c
        of.append(c)
    return _numbered(program.num_ranks, of)


def refined(cls: Classes, key: Callable[[int], Hashable]) -> Classes:
    """The classes split by `key(d)` too (what else tells replicas apart: the costs of their
    channels, for a timed run), numbered by their first replicas as `classes` numbers them."""
    number: dict[tuple, int] = {}
    return _numbered(cls.P, [number.setdefault((c, key(d)), len(number)) for d, c in enumerate(cls.of)])


def _numbered(P: int, of: list[int]) -> Classes:
    """The classes of replicas whose class numbers (from 0, each first met in replica order) are `of`."""
    members: list[list[int]] = [[] for _ in range(max(of, default=-1) + 1)]
    for d, c in enumerate(of):
        members[c].append(d)
    return Classes(P, tuple(of), tuple(map(tuple, members)))


def distinct_actions(program: Program) -> int:
    """The actions of a job's distinct replicas, each class once (a program's own, without replicas):
    the work of the checks and of a timed run, which take each class once."""
    if not program.replicas:
        return program.num_actions
    return sum(program.replica(d).num_actions for d in classes(program).reps)


class _Renumber:
    """The reduced job's ranks and streams (`graph.Lane`s, the graph's nodes past the ranks) as
    the real job numbers them, in the class's first replica shifted `shift` replicas on (the
    replicas of one class have as many streams each: `lanes[c]`)."""

    def __init__(self, cls: Classes, lanes: Sequence[int]) -> None:
        self.cls, self.R = cls, cls.k * cls.P
        self.base, start = [], cls.D * cls.P  # the real job's first stream of each replica
        for c in cls.of:
            self.base.append(start)
            start += lanes[c]
        self.first = [0] * cls.k  # the reduced job's first stream of each class
        for c in range(1, cls.k):
            self.first[c] = self.first[c - 1] + lanes[c - 1]

    def rank(self, r: int, shift: int) -> int:
        return self.cls.real(r) + shift * self.cls.P

    def node(self, n: int | None, shift: int) -> int | None:
        """A rank or stream (None stays None)."""
        if n is None or n < self.R:
            return None if n is None else self.rank(n, shift)
        c = max(c for c in range(self.cls.k) if n - self.R >= self.first[c])
        return self.base[self.cls.reps[c] + shift] + n - self.R - self.first[c]

    def wait(self, w: Wait, shift: int = 0) -> Wait:
        return replace(w, rank=self.rank(w.rank, shift), on_rank=self.node(w.on_rank, shift),
                       node=self.node(w.node, shift), on_node=self.node(w.on_node, shift))


def real_deadlock(deadlock, cls: Classes, cons):
    """The reduced job's deadlock told of the real job: the cycle among the classes' first
    replicas' ranks, and every copy of a stuck rank stuck where it is (the job's replicas of one
    class run alike: its run is the reduced job's, copied). `cons`: the reduced job's constraints
    (its streams, `lanes`, by the rank that owns each)."""
    from .deadlock import Deadlock, cause_of
    lanes = [sum(1 for lane in cons.lanes if lane.rank // cls.P == c) for c in range(cls.k)]
    P, to = cls.P, _Renumber(cls, lanes)
    stuck, ends = {}, {}
    for d, c in enumerate(cls.of):
        for p in range(P):
            r = c * P + p
            if r in deadlock.stuck:
                stuck[d * P + p] = deadlock.stuck[r]
            if r in deadlock.ends:
                ends[d * P + p] = tuple(to.wait(w, d - cls.reps[c]) for w in deadlock.ends[r])
    cycle = tuple(map(to.wait, deadlock.cycle))
    return Deadlock(deadlock.semantics, cycle, stuck, cause_of(cycle, deadlock.min_buffer), deadlock.min_buffer,
                    ends)
