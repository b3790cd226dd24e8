"""A candidate schedule: one order of job ids per rank, as a Program, timed by schedc's simulator.

`evaluate(problem, orders)` builds the Program, simulates it (schedc/simulate.py is the judge of
the makespan the user will see) and measures each rank's peak activations along its order in the
problem's integer memory units (schedc/rules/memory.py's rule); `Candidate.fits` says whether
every cap holds.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Program
from ..simulate import Link, simulate
from ..verify.memory import peak_activations
from .problem import Problem


@dataclass(frozen=True)
class Candidate:
    orders: tuple[tuple[int, ...], ...]
    makespan: float  # as simulated
    units: int  # the makespan in the problem's time units
    peaks: tuple[int, ...]  # per rank, in memory units
    fits: bool
    origin: str  # how it was found
    starts: tuple[int, ...] = ()  # simulated start of every job, in time units, by job id

    def program(self, problem: Problem) -> Program:
        return to_program(problem, self.orders)


def to_program(problem: Problem, orders) -> Program:
    jobs = problem.jobs
    return problem.program.with_ranks([[jobs[u].action() for u in row] for row in orders])


def links(problem: Problem) -> dict:
    return {ch: Link(latency=problem.seconds(v)) for ch, v in problem.latency.items() if v}


def evaluate(problem: Problem, orders, origin: str) -> Candidate:
    orders = tuple(tuple(row) for row in orders)
    program = to_program(problem, orders)
    timeline = simulate(program, links=links(problem))
    units = round(timeline.makespan / float(problem.time_unit))
    peaks = peaks_of(problem, program)
    fits = all(c is None or p <= c for p, c in zip(peaks, problem.cap))
    unit = float(problem.time_unit)
    starts = [0] * len(problem.jobs)
    for r, row in enumerate(orders):
        for x, u in enumerate(row):
            starts[u] = round(timeline.start[r][x] / unit)
    return Candidate(orders, timeline.makespan, units, peaks, fits, origin, tuple(starts))


def peaks_of(problem: Problem, program: Program) -> tuple[int, ...]:
    """Peak live activations per rank of a candidate's program, in the problem's memory units."""
    # (integer sizes give an integer peak: int() keeps it)
    return tuple(int(peak_activations([st.parts for st in steps], problem.act, problem.weight))
                 for steps in program.ranks)
