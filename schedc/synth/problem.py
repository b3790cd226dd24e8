"""The synthesis problem: ranks, stages, microbatches, integer durations, memory sizes and caps.

`build_problem(P, M, ...)` validates the request (SchedcError, exit 2) and scales every time and
size to integers, so the solver and the bounds work in exact integer arithmetic; `Problem.jobs`
lists every F, I and W once, with its rank and duration, and `Problem.edges` what each one waits for.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

from ..errors import SchedcError
from ..ir import Action, Annotations, Op, Program
from ..rules.deps import needs, producer
from ..rules.memory import op_delta
from ..verify.memory import peak_activations

MAX_RANKS = 64
MAX_MICROBATCHES = 1024
MAX_JOBS = 30_000  # beyond this even the greedy start and the bounds get slow
MAX_SCALE = 10**6  # the finest time or memory grid the solver accepts, relative to the unit
KINDS = ("F", "I", "W")
PLACEMENTS = ("loop", "vshape")


@dataclass(frozen=True)
class Job:
    kind: str  # F, I or W
    stage: int
    mb: int
    rank: int
    dur: int  # in time units of `Problem.time_unit`

    def action(self) -> Action:
        return Action(Op(self.kind), self.stage, self.mb)


@dataclass(frozen=True)
class Problem:
    """One synthesis request, in integers. Memory: F allocates `act[s]`, I frees `act[s] - weight[s]`,
    W frees `weight[s]` (all in units of `memory_unit`); `cap[r]` is rank r's limit (None: none)."""

    P: int
    M: int
    placement: str
    program: Program  # the skeleton: sizes, placement, annotations (what the .pp and the simulator use)
    time_unit: Fraction
    memory_unit: Fraction
    act: tuple[int, ...]
    weight: tuple[int, ...]
    cap: tuple[int | None, ...]
    cap_given: tuple[float | None, ...]
    latency: dict  # (rank a, rank b) -> time units, for a != b
    jobs: tuple[Job, ...]
    index: dict  # (kind, stage, mb) -> job id

    @property
    def S(self) -> int:
        return self.program.num_stages

    def stages_of(self, r: int) -> tuple[int, ...]:
        return tuple(s for s in range(self.S) if self.program.placement[s] == r)

    def job(self, kind: str, s: int, m: int) -> int:
        return self.index[(kind, s, m)]

    def edges(self):
        """(before, after, lag): `after` starts at least `lag` after `before` starts. The data
        dependencies of docs/semantics.md, with the latency of the channel when they cross ranks."""
        place = self.program.placement
        for m in range(self.M):
            for s in range(self.S):
                for kind in ("F", "I", "W"):  # backwards split: an input gradient is I's (schedc/rules/deps.py)
                    after = self.job(kind, s, m)
                    for v in needs(Action(Op[kind], s, m), self.S):
                        op, t, _ = producer(v, Op.I)
                        before = self.job(op.name, t, m)
                        yield before, after, self.jobs[before].dur + self.lag(place[t], place[s])

    def lag(self, a: int, b: int) -> int:
        return 0 if a == b else self.latency.get((a, b), 0)

    def seconds(self, units: int | float) -> float:
        """A time in units as the simulator's time."""
        return float(units * self.time_unit)

    def minimum(self, r: int) -> int:
        """What rank r holds at least once in any schedule, in memory units: one microbatch's
        forwards all run before its first input gradient, so it holds their peak."""
        forwards = [Action(Op.F, s, 0).parts for s in self.stages_of(r)]
        return int(peak_activations(forwards, self.act, self.weight))  # (integer sizes: an integer peak)

    def minimum_cap(self, r: int) -> Fraction:
        """`minimum` in the sizes the request gave."""
        return self.minimum(r) * self.memory_unit


def placement_table(name: str, P: int) -> tuple[int, ...]:
    if name == "loop":
        return tuple(range(P))
    return tuple(s if s < P else 2 * P - 1 - s for s in range(2 * P))


def build_problem(P: int, M: int, *, placement: str = "loop", costs=None,  # noqa: C901
                  memory_limit: float | dict | None = None, name: str | None = None) -> Problem:
    """Validate and scale. `costs` is a schedc.costs.Costs (None: the defaults F = I = W = 1);
    `memory_limit` one number for every rank or {rank: limit}."""
    _check_sizes(P, M, placement)
    table = placement_table(placement, P)
    S = len(table)
    skeleton = Program(name or f"synth_{placement}_p{P}_m{M}", P, S, M, table, tuple(() for _ in range(P)),
                       params=(("P", P), ("M", M)), annotations=Annotations())
    if costs is not None:
        skeleton = costs.apply(skeleton)
        links = costs.links(skeleton)
        if costs.overlap is False:
            raise SchedcError("usage", "synth models communication that overlaps compute; the cost file says "
                              "overlap = false", where=costs.source)
    else:
        links = {}
    ann = skeleton.annotations
    posted = [link.overhead for link in links.values() if link.overhead] + ([costs.overhead] if costs is not None
                                                                             and costs.overhead else [])
    if posted:  # the simulator charges each send and receive this much rank time; the solver's model has none
        raise SchedcError("usage", f"synth models no per-message overhead (the rank time to post a send or a "
                          f"receive, here {posted[0]:g}); drop overhead from the costs", where=costs.source)
    if ann.rank_dispatch:
        raise SchedcError("usage", "synth models no dispatch time (a rank's time to start each step); drop "
                          "dispatch from the costs", where=costs.source)
    speeds = ann.speeds(P)
    times: dict[tuple[str, int], Fraction] = {}
    for s in range(S):
        c = ann.cost_of(s)
        if abs(c.B - (c.I + c.W)) > 1e-9 * max(1.0, c.B):
            raise SchedcError("usage", f"stage {s}: synth splits every backward into I and W, so B must be "
                              f"I + W (got B={c.B:g}, I={c.I:g}, W={c.W:g}); give I and W instead of B",
                              where="--cost")
        for kind in KINDS:
            t = _fraction(getattr(c, kind)) / _fraction(speeds[table[s]])
            if t <= 0:
                raise SchedcError("usage", f"stage {s}: synth needs positive times, but {kind} takes {float(t):g}",
                                  where="--cost")
            times[(kind, s)] = t
    latency = {}
    for a in range(P):
        for b in range(P):
            if a != b:
                link = links.get((a, b))
                lat = link.latency if link is not None else ann.latency
                bw = link.bandwidth if link is not None else ann.bandwidth
                latency[(a, b)] = _fraction(lat)
                if bw and any(ann.memory_of(s).out for s in range(S)):
                    raise SchedcError("usage", "synth models a latency per channel, not its bandwidth; drop "
                                      "bandwidth (or the stages' out sizes) from the costs", where="--cost")
    unit = _unit(list(times.values()) + [v for v in latency.values() if v], "times")
    mem = [ann.memory_of(s) for s in range(S)]
    for s, mm in enumerate(mem):
        if mm.act <= 0:
            raise SchedcError("usage", f"stage {s}: act must be positive for synth (got {mm.act:g})", where="--cost")
        if op_delta(Op.I, mm.act, mm.weight) > 0:  # (schedc/rules/memory.py: I frees act - weight)
            raise SchedcError("usage", f"stage {s}: weight ({mm.weight:g}) must not exceed act ({mm.act:g}): "
                              "I would allocate memory", where="--cost")
    caps_given = _caps(memory_limit, P)
    sizes = [_fraction(m.act) for m in mem] + [_fraction(m.weight) for m in mem if m.weight]
    munit = _unit(sizes, "memory sizes")
    jobs: list[Job] = []
    index: dict[tuple[str, int, int], int] = {}
    for m in range(M):
        for s in range(S):
            for kind in KINDS:
                index[(kind, s, m)] = len(jobs)
                jobs.append(Job(kind, s, m, table[s], int(times[(kind, s)] / unit)))
    cap = tuple(None if c is None else math.floor(_fraction(c) / munit + Fraction(1, 10**9)) for c in caps_given)
    skeleton = replace(skeleton, annotations=replace(
        skeleton.annotations, memory_limit=tuple((r, c) for r, c in enumerate(caps_given) if c is not None)))
    return Problem(P, M, placement, skeleton, unit, munit,
                   tuple(int(_fraction(m.act) / munit) for m in mem),
                   tuple(int(_fraction(m.weight) / munit) for m in mem), cap, caps_given,
                   {k: int(v / unit) for k, v in latency.items()}, tuple(jobs), index)


def _check_sizes(P, M, placement):
    if placement not in PLACEMENTS:
        raise SchedcError("usage", f"--placement {placement!r}: expected loop or vshape", where="--placement")
    for key, value, most in (("P", P, MAX_RANKS), ("M", M, MAX_MICROBATCHES)):
        if not isinstance(value, int) or value < 1:
            raise SchedcError("usage", f"{key}={value}: synth needs {key} >= 1", where="--param")
        if value > most:
            raise SchedcError("too-large", f"{key}={value} is too large for synth (at most {most}): the search "
                              "grows with the square of the actions per rank", where="--param")
    jobs = 3 * M * P * (2 if placement == "vshape" else 1)
    if jobs > MAX_JOBS:
        raise SchedcError("too-large", f"P={P}, M={M} ({placement}) has {jobs:,} actions; synth takes at most "
                          f"{MAX_JOBS:,}", where="--param")


def _caps(limit, P) -> tuple[float | None, ...]:
    if limit is None:
        return (None,) * P
    if isinstance(limit, dict):
        bad = [r for r in limit if not 0 <= r < P]
        if bad:
            raise SchedcError("usage", f"--memory-limit names rank {bad[0]}, but there are ranks 0..{P - 1}",
                              where="--memory-limit")
        return tuple(limit.get(r) for r in range(P))
    return (float(limit),) * P


def _fraction(x: float) -> Fraction:
    f = Fraction(x).limit_denominator(MAX_SCALE)
    return f if abs(float(f) - x) <= 1e-12 * max(1.0, abs(x)) else Fraction(x)


def _unit(values: list[Fraction], what: str) -> Fraction:
    """The largest unit every value is a whole multiple of (1 / lcm of the denominators)."""
    if not values:
        return Fraction(1)
    den = 1
    for v in values:
        den = den * v.denominator // math.gcd(den, v.denominator)
    num = 0
    for v in values:
        num = math.gcd(num, v.numerator * (den // v.denominator))
    unit = Fraction(num, den)
    if max(values) / unit > MAX_SCALE:
        shown = ", ".join(f"{float(v):g}" for v in sorted(set(values))[:6])
        raise SchedcError("usage", f"synth works on a common grid of {what}, and these ({shown}) need more "
                          f"than {MAX_SCALE:,} steps of it; round them (e.g. to 3 significant digits)",
                          where="--cost")
    return unit
