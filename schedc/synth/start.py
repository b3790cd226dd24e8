"""Starting points for the search: the best of several quick schedules that fit the caps.

Greedy list scheduling (schedc/order.py, as ZB-H2 is built) under a few preference orders and caps,
the built-in schedules of the placement (their full backward split into I then W), and the
one-microbatch-at-a-time schedule, which fits any cap that any schedule fits.
"""
from __future__ import annotations

from ..errors import SchedcError
from ..ir import Action, Op
from ..order import greedy_order
from .problem import Problem
from .schedule import Candidate, evaluate

PREFERENCES = ((Op.I, Op.F, Op.W), (Op.I, Op.W, Op.F), (Op.F, Op.I, Op.W), (Op.W, Op.I, Op.F))
BUILTINS = {"loop": ("zb_h1", "zb_h2", "1f1b", "gpipe"), "vshape": ("zbv",)}


def candidates(problem: Problem) -> list[Candidate]:
    """Every starting schedule that fits the caps, best (shortest, then first found) first."""
    found = [evaluate(problem, sequential(problem), "one microbatch at a time")]
    for orders, origin in [*greedy(problem), *builtins(problem)]:
        found.append(evaluate(problem, orders, origin))
    fitting = [c for c in found if c.fits]
    return sorted(fitting, key=lambda c: c.units)


def sequential(problem: Problem):
    out = []
    for r in range(problem.P):
        stages = problem.stages_of(r)
        row = []
        for m in range(problem.M):
            row += [problem.job("F", s, m) for s in stages]
            row += [problem.job("I", s, m) for s in reversed(stages)]
            row += [problem.job("W", s, m) for s in reversed(stages)]
        out.append(row)
    return out


def greedy(problem: Problem):
    caps = [c for c in problem.cap if c is not None]
    top = min(caps) if caps else None
    tops = [None] if top is None else sorted(k for k in (top, top - 1, top - 2, top - 3) if k >= 1)[::-1]
    listed = problem.program.with_ranks([[problem.jobs[u].action() for u in row] for row in sequential(problem)])
    for cap in tops:
        for prefer in PREFERENCES:
            try:
                ordered = greedy_order(listed, prefer, None if cap is None else float(cap * problem.memory_unit),
                                       None)
            except SchedcError:
                continue
            name = "greedy(prefer=[" + ", ".join(op.value for op in prefer) + "]" + \
                   ("" if cap is None else f", memory={float(cap * problem.memory_unit):g}") + ")"
            yield _ids(problem, ordered.ranks), name


def builtins(problem: Problem):
    from ..api import load
    for name in BUILTINS[problem.placement]:
        try:
            program = load(name, {"P": problem.P, "M": problem.M}, strict_params=False)
        except SchedcError:
            continue
        if program.num_stages != problem.S or program.placement != problem.program.placement:
            continue
        rows = []
        for steps in program.ranks:
            row = []
            for st in steps:
                for a in st.parts:
                    row += [Action(Op.I, a.stage, a.microbatch), Action(Op.W, a.stage, a.microbatch)] \
                        if a.op is Op.B else [a]
            rows.append(row)
        yield _ids(problem, rows), f"built-in {name}"


def _ids(problem: Problem, ranks) -> list[list[int]]:
    return [[problem.job(a.op.value, a.stage, a.microbatch) for a in row] for row in ranks]
