"""All of schedc's Z3 use: deadlock freedom re-proved as integer difference logic.

Each step gets an integer completion time; each happens-before edge (schedc/verify/graph.py)
becomes `t[after] >= t[before] + 1` under its own tracking literal. Satisfiable: deadlock-free,
and the model is a witness timing. Unsatisfiable: the unsat core is a set of edges that cannot all
hold (a cycle), told as steps and source lines. The solver gets a fresh context per query, a fixed
seed and a timeout; when it gives up the answer is `Unknown`, never "fine". z3 is imported here only.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Program
from .channels import Channels, Semantics, channels
from .graph import Edge, Impossible, constraints

SEED = 0
DEFAULT_TIMEOUT_S = 30.0
MAX_STEPS = 200_000


@dataclass(frozen=True)
class Proved:
    """Deadlock-free; `timing[r][i]` is a completion time for every step that meets every edge."""

    timing: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Counterexample:
    """The constraints in `core` cannot all hold: together they form a wait cycle."""

    core: tuple[Edge, ...]
    impossible: tuple[Impossible, ...] = ()


@dataclass(frozen=True)
class Unknown:
    reason: str


Result = Proved | Counterexample | Unknown


def prove_deadlock_free(program: Program, semantics: Semantics, chans: Channels | None = None, *,
                        timeout_s: float = DEFAULT_TIMEOUT_S) -> Result:
    chans = chans or channels(program)
    cons = constraints(program, semantics, chans)
    if cons.never:
        return Counterexample((), tuple(cons.impossible()))
    edges = [e for e in cons.edges() if e.why != "order"]
    steps = sum(len(s) for s in program.ranks)
    if steps > MAX_STEPS:
        return Unknown(f"{steps:,} steps is beyond the solver limit of {MAX_STEPS:,}; use --engine native")
    import z3

    ctx = z3.Context()
    solver = z3.SolverFor("QF_IDL", ctx=ctx)
    solver.set("timeout", max(1, int(timeout_s * 1000)))
    solver.set("random_seed", SEED)
    solver.set("core.minimize", True)
    t = [[z3.Int(f"t_{r}_{i}", ctx) for i in range(len(s))] for r, s in enumerate(program.ranks)]
    for row in t:
        if row:
            solver.add(row[0] >= 1)
        solver.add(*[b >= a + 1 for a, b in zip(row, row[1:])])  # program order, untracked
    tracks = []
    for k, e in enumerate(edges):
        lit = z3.Bool(f"e{k}", ctx)
        solver.add(z3.Implies(lit, t[e.after[0]][e.after[1]] >= t[e.before[0]][e.before[1]] + 1))
        tracks.append(lit)
    verdict = solver.check(*tracks)
    if verdict == z3.sat:
        model = solver.model()
        timing = tuple(tuple(model.eval(v, model_completion=True).as_long() for v in row) for row in t)
        return Proved(timing)
    if verdict == z3.unsat:
        index = {str(lit): k for k, lit in enumerate(tracks)}
        core = tuple(edges[index[str(lit)]] for lit in solver.unsat_core())
        return Counterexample(_as_cycle(core))
    return Unknown(f"the solver gave up: {solver.reason_unknown()}")


def _as_cycle(core: tuple[Edge, ...]) -> tuple[Edge, ...]:
    """Order the core's edges along a cycle (before -> after), keeping only edges on it."""
    succ = {}
    for e in core:
        succ.setdefault(e.before, []).append(e)
    for start in succ:
        path, seen, node = [], {}, start
        while node in succ and node not in seen:
            seen[node] = len(path)
            edge = succ[node][0]
            path.append(edge)
            node = edge.after
        if node in seen:
            return tuple(path[seen[node]:])
    return core
