"""All of schedc's Z3 use: deadlock freedom re-proved as integer difference logic.

Each step gets an integer completion time; each happens-before edge (schedc/verify/graph.py)
becomes `t[after] >= t[before] + 1` under its own tracking literal. Satisfiable: deadlock-free,
and the model is a witness timing. Unsatisfiable: the unsat core is a set of edges that cannot all
hold (a cycle); the report tells the deadlock from the executor's run, where the ranks really stop
(schedc/report.py), so both engines tell it alike. The solver gets a fresh context per query, a
fixed seed and a budget of Z3 resource units (schedc/solver.py, which owns Z3; the same answer on
a busy machine as on an idle one), within the user's wall-clock limit if one is given; when it
gives up the answer is `Unknown` saying which ran out, never "fine". `Proved.witness` is the
timing, `Refuted.core` the edges.
"""
from __future__ import annotations

from ..ir import Program
from ..rules.semantics import Semantics
from ..solver import TIME_LIMIT, Deadline, Proved, Refuted, Result, TimeUp, Unknown, check, context, make, reason, value, z3
from .channels import Channels, channels
from .graph import Constraints, constraints

MAX_STEPS = 200_000
# The deadlock query's work in Z3 resource units: 1F1B's at P=16, M=1024 (32,768 actions) takes 144M,
# interleaved zero bubble's at P=16, M=512 (49,152 actions) 271M, a built-in at P=4, M=8 under 40,000
DEADLOCK_UNITS = 2_000_000_000


def prove_deadlock_free(program: Program, semantics: Semantics, chans: Channels | None = None, *,
                        timeout_s: float | None = None, units: int | None = None,
                        cons: Constraints | None = None) -> Result:
    """Deadlock freedom decided by Z3 within `units` of its work (DEADLOCK_UNITS by default) and
    `timeout_s` seconds on the wall clock, if given (`cons`: the program's constraints, when the
    caller has them)."""
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
    solver = make(ctx, logic="QF_IDL")
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
    deadline = Deadline.within(timeout_s, DEADLOCK_UNITS if units is None else units, "the deadlock query")
    try:
        verdict = check(solver, *tracks, deadline=deadline)
    except TimeUp:  # (the seconds it had are what the command's limit left it: not the user's figure)
        return Unknown(f"{TIME_LIMIT}: the wall-clock limit (--timeout) ran out while Z3 decided deadlock freedom")
    if verdict == z3.sat:
        model = solver.model()
        return Proved(witness=tuple(tuple(value(model, v) for v in row) for row in t))
    if verdict == z3.unsat:
        index = {str(lit): k for k, lit in enumerate(tracks)}
        core = tuple(edges[index[str(lit)]] for lit in solver.unsat_core())
        return Refuted(core=core)
    why = reason(solver, deadline)
    return Unknown(why if deadline.exhausted() else f"the solver gave up: {why}")

