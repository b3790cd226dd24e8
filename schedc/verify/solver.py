"""All of schedc's Z3 use: deadlock freedom re-proved as integer difference logic.

Each step gets an integer completion time; each happens-before edge (schedc/verify/graph.py)
becomes `t[after] >= t[before] + 1` under its own tracking literal. Satisfiable: deadlock-free,
and the model is a witness timing. Unsatisfiable: the unsat core is a set of edges that cannot all
hold (a cycle); the report tells the deadlock from the executor's run, where the ranks really stop
(schedc/report.py), so both engines tell it alike. The solver gets a fresh context per query, a
fixed seed and a timeout (schedc/solver.py, which owns Z3); when it gives up the answer is
`Unknown`, never "fine". `Proved.witness` is the timing, `Refuted.core` the edges.
"""
from __future__ import annotations

from ..ir import Program
from ..rules.semantics import Semantics
from ..solver import Proved, Refuted, Result, Unknown, check, context, make, value, z3
from .channels import Channels, channels
from .graph import Constraints, constraints

DEFAULT_TIMEOUT_S = 30.0
MAX_STEPS = 200_000


def prove_deadlock_free(program: Program, semantics: Semantics, chans: Channels | None = None, *,
                        timeout_s: float = DEFAULT_TIMEOUT_S, cons: Constraints | None = None) -> Result:
    """Deadlock freedom by Z3 (`cons`: the program's constraints, when the caller has them)."""
    if cons is None:
        cons = constraints(program, semantics, chans or channels(program))
    impossible = cons.impossible()
    if impossible:
        return Refuted(core=tuple(impossible), why="some step waits for something that never comes")
    edges = [e for e in cons.edges() if e.why != "order"]
    lengths = cons.lengths()  # the ranks, then (under nccl) the streams
    steps = sum(lengths)
    if steps > MAX_STEPS:
        return Unknown(f"{steps:,} steps is beyond the solver limit of {MAX_STEPS:,}; use --engine native")
    ctx = context()
    solver = make(ctx, timeout_s, logic="QF_IDL")
    solver.set("core.minimize", True)
    t = [[z3.Int(f"t_{n}_{i}", ctx) for i in range(length)] for n, length in enumerate(lengths)]
    for row in t:
        if row:
            solver.add(row[0] >= 1)
        solver.add(*[b >= a + 1 for a, b in zip(row, row[1:])])  # program order, untracked
    tracks = []
    for k, e in enumerate(edges):
        lit = z3.Bool(f"e{k}", ctx)
        solver.add(z3.Implies(lit, t[e.after[0]][e.after[1]] >= t[e.before[0]][e.before[1]] + 1))
        tracks.append(lit)
    verdict = check(solver, *tracks)
    if verdict == z3.sat:
        model = solver.model()
        return Proved(witness=tuple(tuple(value(model, v) for v in row) for row in t))
    if verdict == z3.unsat:
        index = {str(lit): k for k, lit in enumerate(tracks)}
        core = tuple(edges[index[str(lit)]] for lit in solver.unsat_core())
        return Refuted(core=core)
    return Unknown(f"the solver gave up: {solver.reason_unknown()}")

