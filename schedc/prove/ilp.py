"""The timing fit as a small integer program: minimise sum w_i |x_i| subject to rows . x >= 1 and
|x_i| <= u_i, x integer, solved by HiGHS (scipy.optimize.milp). The smallest coefficients that
order the samples are the likeliest to order every size; Z3 is not an LP solver (it took 25 s on
339 rows that HiGHS decides in a second). An answer is re-checked in exact integers before use.
Its work is counted in branch-and-bound nodes, not seconds, so it answers alike on any machine.
"""
from __future__ import annotations

import math

import numpy as np

from ..outputs import native_stdout_to_stderr
from ..solver import Deadline, watch

CONSTANT_WEIGHT = 0.1  # a constant term is cheap: it shifts a statement's times without changing its shape
# HiGHS's work per fit, in branch-and-bound nodes (deterministic, where its time limit is not): over
# every proof in tests/test_prove*.py the fits take at most 6 nodes (interleaved zero bubble), most 1.
NODES = 2_000  # a fit at a bound that is not the last: one that needs more gives way to the next bound
LAST_NODES = 20_000  # the fit at the last bound


def minimise(rows: list[dict], limits: list[int], weights: list[float], *, nodes: int = NODES,
             deadline: Deadline | None = None) -> list[int] | None:
    """Integer x minimising sum weights[i] |x[i]| with |x[i]| <= limits[i] and, for every row (a
    {column: integer} map), sum row[i] x[i] >= 1 (the best found within `nodes`); None when there is
    none or none was found. `deadline`'s clock is the outer guard (TimeUp)."""
    from scipy.optimize import Bounds, LinearConstraint, milp  # 0.7 s to import: only when a fit needs it
    n, m = len(limits), len(rows)
    if m == 0:
        return [0] * n
    if any(not row for row in rows):
        return None  # 0 >= 1
    # x = p - q with p, q in [0, limit] and integer: at the optimum one of them is zero, so the
    # objective sum w (p + q) is sum w |x|
    A = np.zeros((m, 2 * n))
    for k, row in enumerate(rows):
        for i, v in row.items():
            A[k, i], A[k, n + i] = v, -v
    w = np.asarray(weights, dtype=float)
    u = np.asarray(limits, dtype=float)
    options: dict[str, object] = {"node_limit": nodes, "presolve": True, "disp": False}
    if deadline is not None:  # HiGHS stops at the command's limit too, if it has one (then TimeUp, below)
        deadline.check()
        if math.isfinite(deadline.left()):
            options["time_limit"] = max(0.1, deadline.left())
    with native_stdout_to_stderr():  # HiGHS prints some lines whatever `disp` says; stdout is the command's
        res = watch(lambda: milp(  # watched: Ctrl-C ends the command at once, HiGHS ends by its time limit
            np.concatenate([w, w]), constraints=[LinearConstraint(A, lb=np.ones(m), ub=np.inf)],
            integrality=np.ones(2 * n), bounds=Bounds(np.zeros(2 * n), np.concatenate([u, u])),
            options=options))  # not given the deadline: HiGHS ends by its time limit, inside the redirection
    if deadline is not None:
        deadline.check()  # HiGHS stopped by its time limit: the clock's answer, not a fit's
    if res.x is None:
        return None  # infeasible, or none found within its nodes
    found = [round(a - b) for a, b in zip(res.x[:n], res.x[n:])]
    if any(abs(c) > lim for c, lim in zip(found, limits)) or not _holds(rows, found):
        return None
    return found


def _holds(rows, coeffs) -> bool:
    return all(sum(v * coeffs[i] for i, v in row.items()) >= 1 for row in rows)


ROWS_PER_CHECK = 32  # rows of a fit taken between two looks at the command's clock


def fresh_terms(rows, seen: set, allowed: dict | None, deadline: Deadline | None = None):
    """Each row of a fit not in `seen` (which it joins), as its (key, feature index, value) terms
    that `allowed` admits (None: every feature). A row is [(key, [values]), ...] meaning sum over
    (key, values) of coeff[key] . values >= 1; within one statement only differences count, so
    rows repeat. With `deadline`, the command's clock is checked every ROWS_PER_CHECK rows
    (thousands of rows take seconds to add to a fit: `deadline.check` raises TimeUp)."""
    for n, terms in enumerate(rows):
        if deadline is not None and n % ROWS_PER_CHECK == 0:
            deadline.check()
        sig = tuple((k, tuple(xs)) for k, xs in terms)
        if sig in seen:
            continue
        seen.add(sig)
        yield [(k, i, int(x)) for k, xs in terms for i, x in enumerate(xs)
               if x and (allowed is None or i in allowed[k])]


class Fit:
    """The timing fit with smt.Fit's interface: integer coefficients with |c| <= bound (the
    constant term, feature 0: <= constant), zero outside `allowed`, meeting every row added. A row
    is [(key, [values]), ...] meaning sum over (key, values) of coeff[key] . values >= 1."""

    def __init__(self, bound: int, constant: int | None = None, allowed: dict | None = None, nodes: int = NODES):
        self.bound, self.constant = bound, bound if constant is None else constant
        self.allowed = allowed
        self.nodes = nodes  # HiGHS's branch-and-bound nodes per solve
        self.columns: dict = {}  # (key, feature index) -> column
        self.rows: list[dict] = []
        self.seen: set = set()

    def add(self, rows, deadline: Deadline | None = None) -> None:
        """The rows, the command's clock looked at as they are read (`fresh_terms`)."""
        for terms in fresh_terms(rows, self.seen, self.allowed, deadline):
            row: dict = {}
            for k, i, x in terms:
                col = self.columns.setdefault((k, i), len(self.columns))
                row[col] = row.get(col, 0) + x
            self.rows.append({c: v for c, v in row.items() if v})

    def solve(self, deadline: Deadline):
        """{key: {feature index: coefficient}} of the smallest weighted size (the best found within
        its nodes), or None (there is none within the bounds, or none found within them);
        `deadline`'s clock is the outer guard (its solver budget counts Z3's work, not this)."""
        keys = list(self.columns)
        limits = [self.constant if i == 0 else self.bound for _, i in keys]
        weights = [CONSTANT_WEIGHT if i == 0 else 1.0 for _, i in keys]
        found = minimise(self.rows, limits, weights, nodes=self.nodes, deadline=deadline)
        if found is None:
            return None
        out: dict = {}
        for (key, i), c in zip(keys, found):
            if c:
                out.setdefault(key, {})[i] = c
        return out
