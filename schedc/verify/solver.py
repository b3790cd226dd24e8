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

from typing import Any

from ..capped import run_capped
from ..ir import Program
from ..rules.semantics import Semantics
from ..solver import TIME_LIMIT, Deadline, Proved, Refuted, Result, TimeUp, Unknown, check, context, make, reason, value, z3
from .channels import Channels, channels
from .graph import Constraints, constraints

MAX_STEPS = 200_000
# The deadlock query's memory beyond the command's own (its process's address space: schedc/capped.py).
# Z3's grows faster than its steps: 1F1B at P=16 takes 0.2 GB at M=128 (4,096 steps), 0.56 GB at
# M=256, 1.7 GB at M=512 and 6.2 GB at M=1024; a 65,628-step query passed 3.7 GB in 11 s
DEADLOCK_MEMORY = 2 * 2**30
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
        cons = constraints(program, semantics, chans or channels(program, semantics))
    impossible = cons.impossible()
    if impossible:
        return Refuted(core=tuple(impossible), why="some step waits for something that never comes")
    edges = [e for e in cons.edges() if e.why != "order"]
    lengths = cons.lengths()  # the ranks, then (under nccl) the streams
    steps = sum(lengths)
    if steps > MAX_STEPS:
        return Unknown(f"{steps:,} steps is beyond the solver limit of {MAX_STEPS:,}; use --engine native")
    deadline = Deadline.within(timeout_s, DEADLOCK_UNITS if units is None else units, "the deadlock query")
    pairs = [(e.before, e.after) for e in edges]
    z3.Context  # Z3's library loaded here, where the cap does not count its mapping
    try:
        answer = run_capped(lambda: _decide(lengths, pairs, deadline), DEADLOCK_MEMORY, deadline,
                            f"deadlock freedom ({steps:,} steps)")
    except TimeUp:  # (the seconds it had are what the command's limit left it: not the user's figure)
        return Unknown(f"{TIME_LIMIT}: the wall-clock limit (--timeout) ran out while Z3 decided deadlock freedom")
    if isinstance(answer, Unknown):
        return answer
    kind, detail = answer
    if kind == "sat":
        return Proved(witness=detail)
    if kind == "unsat":
        return Refuted(core=tuple(edges[k] for k in detail))
    return Unknown(detail)


def _decide(lengths: list[int], pairs: list[tuple[tuple[int, int], tuple[int, int]]],
            deadline: Deadline) -> tuple[str, Any]:
    """The query itself (run in a child process with capped memory): each step's time after its
    rank's previous one, each edge `before -> after` under a tracking literal. ("sat", the times),
    ("unsat", the indices of an unsat core's edges) or ("unknown", why)."""
    ctx = context()
    solver = make(ctx, logic="QF_IDL")
    solver.set("core.minimize", True)
    t = [[z3.Int(f"t_{n}_{i}", ctx) for i in range(length)] for n, length in enumerate(lengths)]
    for row in t:
        if row:
            solver.add(row[0] >= 1)
        solver.add(*[b >= a + 1 for a, b in zip(row, row[1:])])  # program order, untracked
    tracks = []
    for k, (before, after) in enumerate(pairs):
        lit = z3.Bool(f"e{k}", ctx)
        solver.add(z3.Implies(lit, t[after[0]][after[1]] >= t[before[0]][before[1]] + 1))
        tracks.append(lit)
    verdict = check(solver, *tracks, deadline=deadline)
    if verdict == z3.sat:
        model = solver.model()
        return "sat", tuple(tuple(value(model, v) for v in row) for row in t)
    if verdict == z3.unsat:
        index = {str(lit): k for k, lit in enumerate(tracks)}
        return "unsat", tuple(index[str(lit)] for lit in solver.unsat_core())
    why = reason(solver, deadline)
    return "unknown", why if deadline.exhausted() else f"the solver gave up: {why}"

