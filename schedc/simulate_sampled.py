"""Sampled runs: the makespan when each time varies as the runtime measured it, not only its mean.

A run timed with mean costs is shorter than the mean of real runs: a step waits for the latest of
its inputs, and the expected latest of varying times is later than the latest of their means
(Jensen's inequality; the makespan is a max of sums). `sample` times the same program many times,
each compute action's time and each posting overhead drawn from its measured `Spread` (factors of
mean 1 that scale the annotated mean), with a seeded generator: the same result on every machine.
"""
from __future__ import annotations

import random
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from .collection import PAUSED
from .errors import SchedcError
from .ir import Op, Program
from .outputs import rounded
from .timeline import Link

MAX_RUNS = 10_000


@dataclass(frozen=True)
class Spread:
    """How measured times vary around their means: equally likely factors (mean 1) for each
    (op, stage)'s compute time and for each channel's posting overhead; what is not named keeps
    its mean."""

    times: tuple[tuple[tuple[str, int], tuple[float, ...]], ...] = ()  # ("F", stage) -> factors
    posts: tuple[tuple[tuple[int, int], tuple[float, ...]], ...] = ()  # (sending, receiving rank) -> factors

    def for_stages(self, num_stages: int, V: int) -> "Spread":
        """This spread for a program of `num_stages` stages, each a 1/V chunk of a measured stage
        (V = 1: the measured stages themselves); stages past the program's are left out."""
        measured = dict(self.times)
        times = tuple(((op, s), measured[(op, s // V)]) for s in range(num_stages) for op in "FBIW"
                      if (op, s // V) in measured)
        return Spread(times, self.posts)


@dataclass(frozen=True)
class Sampled:
    """The makespans of `runs` sampled runs (seeded by `seed`), in the order they ran."""

    makespans: tuple[float, ...]
    seed: int

    @property
    def mean(self) -> float:
        return statistics.fmean(self.makespans)

    def quantile(self, q: float) -> float:
        """The q-quantile of the makespans (0 <= q <= 1; linear between sorted runs)."""
        xs = sorted(self.makespans)
        at = q * (len(xs) - 1)
        lo = int(at)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (at - lo)

    def to_dict(self) -> dict[str, Any]:
        return {"runs": len(self.makespans), "seed": self.seed, "mean": rounded(self.mean),
                **{f"p{round(q * 100)}": rounded(self.quantile(q)) for q in (0.1, 0.5, 0.9)}}


class _Draw:
    """The factors one sampled run draws (simulate.py's `_Simulator.draw`)."""

    def __init__(self, spread: Spread, rng: random.Random, ranks: int):
        self.times = {(Op(op), s): f for (op, s), f in spread.times}
        self.posts = {a * ranks + b: f for (a, b), f in spread.posts}
        self.choice = rng.choice

    def time(self, op: Op, stage: int) -> float:
        factors = self.times.get((op, stage))
        return self.choice(factors) if factors else 1.0

    def post(self, channel: int) -> float:
        factors = self.posts.get(channel)
        return self.choice(factors) if factors else 1.0


def sample(program: Program, spread: Spread, runs: int, *, seed: int = 0, overlap: bool = True,
           links: Mapping[tuple[int, int], Link] | None = None, semantics: Any = None,
           say: Callable[[str], None] | None = None) -> Sampled:
    """Time `program` `runs` times as `simulate` does (under `semantics`, default rendezvous), each
    time drawing every compute time and posting overhead from `spread`; `say`
    (schedc/progress.py), if given, hears of every tenth of the runs done. A SchedcError for too
    many runs, or for a run that cannot finish."""
    from .simulate import MAX_SIMULATED_ACTIONS, simulate
    from .verify.mesh import flat_job
    if not 1 <= runs <= MAX_RUNS:
        raise SchedcError("usage", f"{runs}: give 1 to {MAX_RUNS:,} sampled runs", where="--samples")
    count = flat_job(program).num_actions  # (a data-parallel job's every replica: each draws its times apart)
    if runs > 1 and runs * count > MAX_SIMULATED_ACTIONS:  # (one run: simulate's own limit says why)
        every = " (a data-parallel job's every replica: each draws its times apart)" if program.replicas else ""
        raise SchedcError("too-large", f"{runs:,} sampled runs of {count:,} actions{every} time "
                          f"{runs * count:,} actions step by step; at most {MAX_SIMULATED_ACTIONS:,}: "
                          "give fewer --samples, or simulate at fewer microbatches", where="--samples")
    draw = _Draw(spread, random.Random(seed), program.num_ranks)  # one generator: each run draws anew
    makespans = []
    with PAUSED:
        for i in range(1, runs + 1):
            makespans.append(simulate(program, overlap=overlap, links=links, semantics=semantics, draw=draw).makespan)
            if say is not None and i * 10 // runs != (i - 1) * 10 // runs and i < runs:
                say(f"sampled run {i:,} of {runs:,}")
    return Sampled(tuple(makespans), seed)
