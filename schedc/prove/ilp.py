"""The timing fit as a small integer program: minimise sum w_i |x_i| subject to rows . x >= 1 and
|x_i| <= u_i, x integer, solved by HiGHS (scipy.optimize.milp). The smallest coefficients that
order the samples are the likeliest to order every size; Z3 is not an LP solver (it took 25 s on
339 rows that HiGHS decides in a second). An answer is re-checked in exact integers before use.
"""
from __future__ import annotations

import numpy as np

from ..outputs import native_stdout_to_stderr
from ..solver import watch

CONSTANT_WEIGHT = 0.1  # a constant term is cheap: it shifts a statement's times without changing its shape


def minimise(rows: list[dict], limits: list[int], weights: list[float], *, timeout_s: float) -> list[int] | None:
    """Integer x minimising sum weights[i] |x[i]| with |x[i]| <= limits[i] and, for every row (a
    {column: integer} map), sum row[i] x[i] >= 1; None when there is none or none was found in time."""
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
    with native_stdout_to_stderr():  # HiGHS prints some lines whatever `disp` says; stdout is the command's
        res = watch(lambda: milp(  # watched: Ctrl-C ends the command at once, HiGHS ends by its time limit
            np.concatenate([w, w]), constraints=[LinearConstraint(A, lb=np.ones(m), ub=np.inf)],
            integrality=np.ones(2 * n), bounds=Bounds(np.zeros(2 * n), np.concatenate([u, u])),
            options={"time_limit": max(0.1, timeout_s), "presolve": True, "disp": False}))
    if res.x is None:
        return None  # infeasible, or out of time before any solution
    found = [round(a - b) for a, b in zip(res.x[:n], res.x[n:])]
    if any(abs(c) > lim for c, lim in zip(found, limits)) or not _holds(rows, found):
        return None
    return found


def _holds(rows, coeffs) -> bool:
    return all(sum(v * coeffs[i] for i, v in row.items()) >= 1 for row in rows)


def fresh_terms(rows, seen: set, allowed: dict | None):
    """Each row of a fit not in `seen` (which it joins), as its (key, feature index, value) terms
    that `allowed` admits (None: every feature). A row is [(key, [values]), ...] meaning sum over
    (key, values) of coeff[key] . values >= 1; within one statement only differences count, so
    rows repeat."""
    for terms in rows:
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

    def __init__(self, bound: int, constant: int | None = None, allowed: dict | None = None):
        self.bound, self.constant = bound, bound if constant is None else constant
        self.allowed = allowed
        self.columns: dict = {}  # (key, feature index) -> column
        self.rows: list[dict] = []
        self.seen: set = set()

    def add(self, rows) -> None:
        for terms in fresh_terms(rows, self.seen, self.allowed):
            row: dict = {}
            for k, i, x in terms:
                col = self.columns.setdefault((k, i), len(self.columns))
                row[col] = row.get(col, 0) + x
            self.rows.append({c: v for c, v in row.items() if v})

    def solve(self, deadline):
        """{key: {feature index: coefficient}} of the smallest weighted size (the best found when
        time runs out), or None (there is none within the bounds, or none found before `deadline`,
        a solver.Deadline)."""
        keys = list(self.columns)
        limits = [self.constant if i == 0 else self.bound for _, i in keys]
        weights = [CONSTANT_WEIGHT if i == 0 else 1.0 for _, i in keys]
        found = minimise(self.rows, limits, weights, timeout_s=deadline.query(floor=0.1))
        if found is None:
            return None
        out: dict = {}
        for (key, i), c in zip(keys, found):
            if c:
                out.setdefault(key, {})[i] = c
        return out
