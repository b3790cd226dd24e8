"""All of synthesis's Z3 use: "is there a schedule with makespan <= T?" as one decision query.

Each job gets an integer start within [head, T - duration - tail]; the graph's precedences are
difference constraints; two jobs of a rank that no precedence orders get one disjunction ("x
ends before y starts, or y before x"), dropped to a single difference constraint when T leaves only
one way. Memory caps that are not precedences are pseudo-Boolean sums over those ordering atoms.
A fresh context per query, a fixed seed and a budget of Z3 resource units (schedc/solver.py, which
owns Z3); the answer is `Proved` (with each rank's order), `Refuted` (with why) or `Unknown`, which
is never read as a no.
"""
from __future__ import annotations

from typing import Any

from ..ir import Op
from ..solver import Deadline, Proved, Refuted, Result, Unknown, check, context, make, value, watched, z3
from ..rules.memory import held_within, op_delta
from .graph import Graph
from .problem import KINDS, Problem

MAX_PAIRS = 400_000  # disjunctions per query; beyond this the search keeps its greedy start


def count_pairs(problem: Problem, graph: Graph) -> int:
    return sum(1 for _ in _free_pairs(problem, graph))


def decide(problem: Problem, graph: Graph, T: int, *, deadline: Deadline, hint=None) -> Result:  # noqa: C901
    """Decide makespan <= T within `deadline` (this query's share of solver work; the command's
    limit passing raises TimeUp, while the query is built as while Z3 runs, and Ctrl-C KeyboardInterrupt):
    `Proved(witness)` with witness[r] rank r's jobs by start time, or `Refuted(why=...)`: no
    schedule (in increasing microbatch order, which loses nothing) has it. `hint`: start per job to
    try first."""
    jobs = problem.jobs
    lo = graph.head
    hi = [T - j.dur - graph.tail[u] for u, j in enumerate(jobs)]
    bad = next((u for u in range(len(jobs)) if lo[u] > hi[u]), None)
    if bad is not None:
        j = jobs[bad]
        return Refuted(why=f"{j.kind}({j.stage},{j.mb}) cannot start before {lo[bad]} and end "
                           f"{graph.tail[bad]} before the end")
    pairs = []  # (x, y, x-before-y possible, y-before-x possible)
    for x, y in watched(_free_pairs(problem, graph), deadline):
        xy, yx = lo[x] + jobs[x].dur <= hi[y], lo[y] + jobs[y].dur <= hi[x]
        if not (xy or yx):
            return Refuted(why=f"{_name(jobs[x])} and {_name(jobs[y])} do not both fit on rank {jobs[x].rank}")
        pairs.append((x, y, xy, yx))
        if len(pairs) > MAX_PAIRS:
            return Unknown(f"more than {MAX_PAIRS:,} pairs of actions to order; too large for the solver")
    ctx = context()
    counting = not graph.memory_edges
    solver = make(ctx, logic=None if counting else "QF_IDL")
    start = [z3.Int(f"s{u}", ctx) for u in range(len(jobs))]
    for u in watched(range(len(jobs)), deadline):
        solver.add(start[u] >= lo[u], start[u] <= hi[u])
        for v, lag in graph.succ[u]:
            solver.add(start[v] - start[u] >= lag)
    before = {}  # (x, y) -> the atom "x ends before y starts", or True/False
    for x, y, xy, yx in watched(pairs, deadline):
        a = start[y] - start[x] >= jobs[x].dur
        b = start[x] - start[y] >= jobs[y].dur
        if xy and yx:
            solver.add(z3.Or(a, b))
            before[(x, y)], before[(y, x)] = a, z3.Not(a)
        else:
            solver.add(a if xy else b)
            before[(x, y)], before[(y, x)] = xy, yx
    if counting:
        for c in watched(_memory_sums(problem, graph, before, ctx), deadline, every=16):
            solver.add(c)
    if hint is not None:  # a phase to try first; not every z3 back end takes one
        try:
            for u, v in enumerate(hint):
                solver.set_initial_value(start[u], min(max(v, lo[u]), hi[u]))
        except z3.Z3Exception:
            pass
    verdict = check(solver, deadline=deadline)
    if verdict == z3.sat:
        model = solver.model()
        at = [value(model, v) for v in start]
        rows: list[list[int]] = [[] for _ in range(problem.P)]
        for u in sorted(range(len(jobs)), key=lambda u: at[u]):
            rows[jobs[u].rank].append(u)
        return Proved(tuple(tuple(r) for r in rows))
    if verdict == z3.unsat:
        return Refuted(why="the solver proved it")
    return Unknown(deadline.exhausted() or f"the solver gave up: {solver.reason_unknown()}")


def _free_pairs(problem: Problem, graph: Graph):
    """Pairs of jobs on one rank that no precedence orders."""
    for r in range(problem.P):
        mine = [u for u, j in enumerate(problem.jobs) if j.rank == r]
        for i, x in enumerate(mine):
            for y in mine[i + 1:]:
                if not (graph.ordered(x, y) or graph.ordered(y, x)):
                    yield x, y


def _memory_sums(problem: Problem, graph: Graph, before, ctx):  # noqa: C901
    """Per F job x on a capped rank: the activations live when x starts stay within the cap.
    Live = sum over microbatches m and stages s of the rank, over F, I and W, of d * [F started] or
    d * [I or W done], d being what the job allocates or frees (schedc/rules/memory.py, which writes
    a free (d < 0) with a positive weight as -d * [not done] + d: `held_within`), so the sum is
    sum act*[F started] + (act-w)*[I not done] + w*[W not done] <= cap + sum act."""

    def lit(y, x):
        if y == x:
            return True
        if graph.ordered(y, x):
            return True
        if graph.ordered(x, y):
            return False
        return before[(y, x)]

    for r in range(problem.P):
        cap = problem.cap[r]
        if cap is None:
            continue
        stages = problem.stages_of(r)
        for s0 in stages:
            for m0 in range(problem.M):
                x = problem.job("F", s0, m0)
                changes: list[tuple[Any, object]] = []  # (delta: whole units, as op_delta gives them; literal)
                for s in stages:
                    deltas = [(kind, op_delta(Op(kind), problem.act[s], problem.weight[s])) for kind in KINDS]
                    changes += [(d, lit(problem.job(kind, s, m), x))
                                for m in range(problem.M) for kind, d in deltas if d]
                terms, bound = held_within(changes, cap, z3.Not)
                if bound < 0:
                    yield z3.BoolVal(False, ctx)
                elif terms and sum(wt for _, wt in terms) > bound:
                    yield z3.PbLe(terms, bound)


def _name(j) -> str:
    return f"{j.kind}({j.stage},{j.mb})"
