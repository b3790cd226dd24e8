"""The search: bisection on the makespan between a lower bound and the best schedule found.

Start from the best quick schedule (schedc/synth/start.py); ask the solver whether makespan <= T
for T halfway between what is proved impossible and what is found, shrinking one side each time.
Every schedule the solver finds is re-timed by the simulator. Each query has a budget of solver
work in Z3 resource units, and the whole search one too (the same answers on any machine); the
search budget running out, the user's time limit or Ctrl-C stops the search with the best found so
far, its proven bound and the gap, never called optimal unless proved.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ..solver import Deadline, Proved, Refuted, TimeUp
from .bounds import lower_bound
from .graph import build_graph
from .problem import Problem
from .schedule import Candidate, evaluate
from .solver import decide
from .start import candidates

# Each query's budget in Z3 resource units (deterministic, see schedc/solver.py). The queries of
# tests/test_synth*.py take at most 5.1M units (P=4, M=8, vshape, memory 2: 0.3 s); at about 17M
# units a second, these are some 12 s and 60 s on this machine. There is no clock unless the user
# gives --time-limit.
QUERY_UNITS = 200_000_000  # a query in the middle of the bisection, so that a hard one leaves time for the rest
PATIENT_UNITS = 1_000_000_000  # the query just below the best, and the second pass over what was unknown
SEARCH_UNITS = 2_000_000_000  # the whole search (`--budget`): bench/synth.py's longest search that ends
# (P=8, M=16, memory 7) takes about 15 s, some 260M units at 17M a second; this is about two minutes


@dataclass(frozen=True)
class Query:
    T: int  # time units
    answer: str  # sat, unsat or unknown
    seconds: float
    why: str = ""


@dataclass(frozen=True)
class Outcome:
    """The best schedule found; `bound` (time units) is proved: no schedule is shorter."""

    problem: Problem
    best: Candidate
    start: Candidate
    bound: int
    elapsed: float
    stopped: str | None = None  # None (finished), "time-limit", "interrupted", or the solver's reason
    queries: tuple[Query, ...] = field(default=())

    @property
    def optimal(self) -> bool:
        return self.best.units <= self.bound

    @property
    def lower_bound(self) -> float:
        return self.problem.seconds(self.bound)

    @property
    def gap(self) -> float:
        """Relative gap (makespan - bound) / makespan; 0 when optimal."""
        return 0.0 if self.optimal else (self.best.units - self.bound) / self.best.units


@dataclass(frozen=True)
class Infeasible:
    """No schedule fits the caps; `reason` says why."""

    problem: Problem
    reason: str


def synthesize(problem: Problem, *, time_limit_s: float | None = None, budget: int | None = None,  # noqa: C901
               progress: Callable[[str], None] | None = None) -> Outcome | Infeasible:
    """The best schedule found within `budget` Z3 resource units in all (SEARCH_UNITS by default),
    each query within its own share, and within `time_limit_s` seconds if given (None: no clock;
    one solver.Deadline for every step); the budget, the time limit or Ctrl-C stops the search with
    the best so far."""
    began = time.monotonic()
    deadline = Deadline.within(time_limit_s, SEARCH_UNITS if budget is None else budget, "the search")
    why = _too_small(problem)
    if why:
        return Infeasible(problem, why)
    graph = build_graph(problem)
    proven = lower_bound(problem, graph)
    start = best = candidates(problem)[0]
    if best.units < proven:
        raise AssertionError(f"synth: the lower bound {proven} exceeds a schedule of {best.units}")
    say = progress or (lambda text: None)
    say(f"start: {start.origin}, makespan {_t(problem, best.units)}; lower bound {_t(problem, proven)}")
    queries: list[Query] = []
    stopped = None
    low = proven  # below `low` is proved impossible or (after an unknown) left for later
    patient = False  # a second pass over what was unknown, each query with PATIENT_UNITS
    try:
        while True:
            if low >= best.units:
                if proven >= best.units or patient:
                    break
                low, patient = proven, True
            deadline.check()  # TimeUp: the time limit, below
            T = (low + best.units - 1) // 2 if best.units - low > 1 else low
            share = (deadline.share(PATIENT_UNITS, "a last query") if patient or T + 1 >= best.units
                     else deadline.share(QUERY_UNITS, "one query in the bisection"))
            t0 = time.monotonic()
            answer = decide(problem, graph, T, deadline=share, hint=best.starts)
            spent = time.monotonic() - t0
            if isinstance(answer, Proved):
                found = evaluate(problem, answer.witness, "the solver")
                if not found.fits or found.units > T:
                    raise AssertionError(f"synth: the solver's schedule re-times to {found.units} > {T} "
                                         f"or breaks a cap ({found.peaks} vs {problem.cap})")
                best = found
                queries.append(Query(T, "sat", spent))
            elif isinstance(answer, Refuted):
                proven = max(proven, T + 1)
                low = max(low, T + 1)
                queries.append(Query(T, "unsat", spent, answer.why))
            else:
                queries.append(Query(T, "unknown", spent, answer.reason))
                low = T + 1  # not proved; try the upper part first
            say(f"makespan <= {_t(problem, T)}? {queries[-1].answer} ({spent:.1f} s); best "
                f"{_t(problem, best.units)}, bound {_t(problem, proven)}")
            if queries[-1].answer == "unknown" and (patient or deadline.exhausted()):
                break  # the second pass is over, or the search's own budget is spent
    except TimeUp:
        stopped = "time-limit"
    except KeyboardInterrupt:
        stopped = "interrupted"
    if stopped is None and proven < best.units:
        stopped = "solver-unknown"  # a query's budget ran out (or Z3 gave up); the clock raises TimeUp
    return Outcome(problem, best, start, proven, time.monotonic() - began, stopped, tuple(queries))


def _too_small(problem: Problem) -> str | None:
    for r in range(problem.P):
        cap = problem.cap[r]
        if cap is not None and cap < problem.minimum(r):
            stages = problem.stages_of(r)
            what = (f"stage {stages[0]}'s activation ({float(problem.minimum_cap(r)):g})"
                    if len(stages) == 1 else
                    f"the activations of stages {' and '.join(map(str, stages))} at once "
                    f"({float(problem.minimum_cap(r)):g}), since a microbatch's forwards on a rank all run "
                    "before its first backward there")
            return (f"memory limit {problem.cap_given[r]:g} on rank {r} is below what any schedule needs: every "
                    f"microbatch holds {what}")
    return None


def _t(problem: Problem, units: int) -> str:
    return f"{problem.seconds(units):g}"
