"""All of the prover's Z3: a model's statements as integer formulas over the parameters.

An obligation is a formula whose models are counterexamples (a setting of the parameters, ranks
and loop variables where a certificate fails); `unsat` means it holds for every setting. Each
`Encoding` (one batch of obligations) and each `Fit` has its own fresh context; every query gets a
fixed seed and a budget of Z3 resource units (schedc/solver.py, which owns Z3), and answers `Proved`
(it holds), `Refuted` (at a setting) or `Unknown` (Z3 gave up, or the budget ran out). Also here: fitting
certificate coefficients to sampled instances (a small integer program). A linear model accepts
linear arithmetic only (a product of two non-constants, or a division by one, is `Unsupported`);
a nonlinear one (`Model.nonlinear`) accepts both, a division as fresh quotient and remainder.
"""
from __future__ import annotations

import builtins
from fractions import Fraction
from typing import Any
from dataclasses import dataclass

from .. import solver, syntax as ast
from ..solver import Proved, Refuted, Unknown, z3
from ..ir import Op
from ..rules.memory import count_groups
from .ilp import fresh_terms
from .sample import products
from .model import (GuardFrame, LetFrame, Model, Stmt, Unsupported, literal, one_body, order_pairs, pins, rank_lets,
                    shared_loops, stages_apart)

# The work Z3 may spend on a fact the encoding needs itself (stages = k x ranks, no setting at all), in
# resource units: the largest measured over the built-in proofs is 41K (interleaved 1F1B's `stages V *
# P == k * P`, answered sat); about 50x that, well under a second. Out of it, the fact is not known.
FACT_UNITS = 2_000_000


class Encoding:
    """Terms of one model in one fresh Z3 context: parameters, instances of statements."""

    def __init__(self, m: Model, assumptions: tuple[ast.Expr, ...]):
        self.m = m
        self.ctx = solver.context()
        fixed = pins(assumptions)  # `V == 2`: the constant itself, so `V * P` is linear
        self.params = {p: z3.IntVal(fixed[p], self.ctx) if p in fixed else z3.Int(p, self.ctx) for p in m.params}
        self._fresh = 0
        self._per_rank: builtins.int | None = None
        # a nonlinear model's `a // b` and `a % b` by a b that varies: fresh q, j with a = q*b + j,
        # 0 <= j < b; those made while building an instance are its own (quantified with it)
        self._side: tuple[list, list] = ([], [])
        self._divided: dict = {}  # (a, b) -> (q, j) of the divisions in scope
        self._calls: dict = {}  # the `let` function calls in scope (see `_call`)
        self._reads: dict = {}  # `let` function name -> the outer names its body reads
        self._remainders: dict = {}  # id of j -> (j, b): j is a remainder of a division by b
        self._ranks: set = set()  # ids of the instances' rank variables (0 <= r < R)
        self._outer: list = []  # the side conditions of the schedule-level divisions
        self.divisors: list = []  # (b, what held where it was divided by): b must be positive there
        self.env = dict(self.params)
        for let in m.globals:
            self.env[let.name] = self.term(let.value, self.env)
        self.R = self.int(m.ranks, self.env)
        self.S = self.int(m.stages, self.env)
        self.Mb = self.int(m.microbatches, self.env)
        # each route as (first microbatch, stop, first stage, stop): half-open ranges, in file order
        self.routes = [tuple(self.int(e, self.env) for e in (x.mb_start, x.mb_stop, x.stage_start, x.stage_stop))
                       for x in m.routes]
        # the stages of one copy of the model (with routes, a route's run; compiler.py's default sizes share a
        # rank-sized chunk among these)
        self.L = self.routes[0][3] - self.routes[0][2] if self.routes else self.S
        self.plain = [self.bool(e, self.env) for e in m.requires + tuple(assumptions)]
        self.plain += [self.R >= 1, self.S >= 1, self.Mb >= 1]
        self._outer = list(self._side[1])
        self.domain = self.plain + self._outer

    # ---- expressions ----
    def num(self, v):
        return z3.IntVal(v, self.ctx)

    def int(self, e, env):
        t = self.term(e, env)
        return z3.If(t, self.num(1), self.num(0)) if z3.is_bool(t) else t

    def bool(self, e, env):
        t = self.term(e, env)
        if not z3.is_bool(t):
            raise Unsupported("a condition that is a number, not a comparison", e.span)
        return t

    def term(self, e, env):  # noqa: C901
        if isinstance(e, ast.Num):
            if not isinstance(e.value, int):
                raise Unsupported("a fractional number", e.span)
            return self.num(e.value)
        if isinstance(e, ast.Var):
            if e.name not in env:
                raise Unsupported(f"'{e.name}' is not known to the proof", e.span)
            return env[e.name]
        if isinstance(e, ast.Ternary):
            c = self.bool(e.cond, env)
            a, b = self.term(e.then, env), self.term(e.orelse, env)
            if z3.is_bool(a) != z3.is_bool(b):
                a, b = self._as_int(a), self._as_int(b)
            return z3.If(c, a, b)
        if isinstance(e, ast.UnaryOp):
            return z3.Not(self.bool(e.operand, env)) if e.op == "not" else -self.int(e.operand, env)
        if isinstance(e, ast.Call):
            args = [self.int(a, env) for a in e.args]
            if e.name in self.m.functions:
                return self._call(e.name, args, env)
            if e.name == "abs":
                (a,) = args
                return z3.If(a >= 0, a, -a)
            return _extreme(args, min if e.name == "min" else max)
        if e.op in ("and", "or"):
            a, b = self.bool(e.left, env), self.bool(e.right, env)
            return z3.And(a, b) if e.op == "and" else z3.Or(a, b)
        a, b = self.int(e.left, env), self.int(e.right, env)
        if e.op in ("==", "!=", "<", "<=", ">", ">="):
            return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[e.op]
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            if self._const(a) is None and self._const(b) is None and not self.m.nonlinear:
                raise Unsupported(f"'{_text(e)}' multiplies two quantities that vary: not linear", e.span)
            return a * b
        k = self._const(b)
        if k is not None and k > 0:
            return a / b if e.op == "//" else a % b
        if not self.m.nonlinear:
            raise Unsupported(f"'{_text(e)}' divides by a quantity that varies (or is not positive): "
                              "not linear", e.span)
        if isinstance(e.right, ast.BinOp) and e.right.op == "*":
            # a // (x*y) == (a // x) // y and a % (x*y) == ((a // x) % y) * x + a % x for positive
            # x, y: divisions by the factors, which Z3's nonlinear arithmetic relates far more easily
            x, y = self.int(e.right.left, env), self.int(e.right.right, env)
            q1, j1 = self.divmod(a, x)
            q2, j2 = self.divmod(q1, y)
            return q2 if e.op == "//" else j2 * x + j1
        q, j = self.divmod(a, b)
        return q if e.op == "//" else j

    def _call(self, name: str, args: list, env: dict):
        """A `let` function's body at these arguments, built once per distinct arguments and values
        of the outer names it reads, within a scope (as the divisions are: a call may divide), so a
        chain of functions each calling the previous one twice builds each body once, not 2^n
        times. The memo keeps the terms its key names by id, so no id is reused while it stands."""
        outer = [env.get(n) for n in self._outer_names(name)]
        key = (name, tuple(a.get_id() for a in args), tuple(-1 if t is None else t.get_id() for t in outer))
        if key not in self._calls:
            names, body = self.m.functions[name]
            self._calls[key] = (args, outer, self.term(body, {**env, **dict(zip(names, args))}))
        return self._calls[key][2]

    def _outer_names(self, name: str) -> tuple:
        """The names a `let` function's body reads besides its parameters, through the functions it
        calls too (the language's functions see their caller's names)."""
        if name not in self._reads:
            params, body = self.m.functions[name]
            out = []
            for n in ast.walk(body):
                if isinstance(n, ast.Var):
                    out.append(n.name)
                elif isinstance(n, ast.Call) and n.name in self.m.functions and n.name != name:
                    out.extend(self._outer_names(n.name))
            self._reads[name] = tuple(dict.fromkeys(x for x in out if x not in params))
        return self._reads[name]

    def divmod(self, a, b):
        """Floor quotient and remainder of a by a positive b (made once per a, b in a scope): by a
        constant, Z3's own; by one that varies, fresh variables with a = q*b + j, 0 <= j < b."""
        k = self._const(b)
        if k is not None and k > 0:
            return a / b, a % b
        key = (z3.simplify(a).sexpr(), z3.simplify(b).sexpr())
        if key in self._divided:
            return self._divided[key]
        self.divisors.append((b, self._outer + self._side[1]))
        a, b = self._named(a), self._named(b)  # atoms, so the one product is q*b
        self._fresh += 1
        q, j = z3.Int(f"q{self._fresh}", self.ctx), z3.Int(f"j{self._fresh}", self.ctx)
        self._side[0].extend([q, j])
        self._side[1].extend([a == q * b + j, j >= 0, j < b])
        self._divided[key] = (q, j)
        self._remainders[j.get_id()] = (j, b)
        return q, j

    def _named(self, t):
        """t itself if it is a variable or a number, else a fresh variable equal to it (in scope)."""
        if z3.is_int_value(t) or (z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED):
            return t
        self._fresh += 1
        v = z3.Int(f"e{self._fresh}", self.ctx)
        self._side[0].append(v)
        self._side[1].append(v == t)
        return v

    def _const(self, t):
        s = z3.simplify(t)
        return s.as_long() if z3.is_int_value(s) else None

    def _as_int(self, t):
        return z3.If(t, self.num(1), self.num(0)) if z3.is_bool(t) else t

    # ---- routes (docs/semantics.md, "Routes"; what they allow is schedc/rules/deps.py's) ----
    def visits(self, s, mb):
        """Microbatch mb runs through stage s: on its route's stages (with the routes proved to be
        routes, `well_formed(enc, "routes")`: each microbatch on exactly one). True without routes
        (the range is its own obligation)."""
        if not self.routes:
            return z3.BoolVal(True, self.ctx)
        return z3.Or(*[z3.And(a <= mb, mb < b, c <= s, s < d) for a, b, c, d in self.routes])

    def same_segment(self, s, t):
        """Stages s and t lie in one route's run of stages (its segment; segments are proved equal or
        apart): where a stage's neighbours are (deps.py's `bounds`). True without routes."""
        if not self.routes:
            return z3.BoolVal(True, self.ctx)
        return z3.Or(*[z3.And(c <= s, s < d, c <= t, t < d) for _, _, c, d in self.routes])

    def visitors(self, s):
        """(first, stop): the microbatches that run through stage s, an interval when no two routes
        share a stage (asked of Z3 once; Unsupported otherwise: a stage's visitors could be several
        intervals). (0, M) without routes."""
        if not self.routes:
            return self.num(0), self.Mb
        apart = [z3.Or(c1 >= d2, c2 >= d1) for i, (_, _, c1, d1) in enumerate(self.routes)
                 for (_, _, c2, d2) in self.routes[i + 1:]]
        if apart and not self.proves(z3.And(*apart)):
            raise Unsupported("routes that share stages: a stage's microbatches are not one interval, which the "
                              "memory count needs")
        lo, hi = self.routes[-1][0], self.routes[-1][1]
        for a, b, c, d in reversed(self.routes[:-1]):
            lo, hi = z3.If(z3.And(c <= s, s < d), a, lo), z3.If(z3.And(c <= s, s < d), b, hi)
        return lo, hi

    # ---- instances ----
    def instance(self, stmt: Stmt, tag: str) -> "Inst":
        self._fresh += 1
        name = f"{tag}{self._fresh}"
        r = z3.Int(f"{name}_{self.m.rank_var}", self.ctx)
        self._ranks.add(r.get_id())
        variables, cons = [r], [r >= 0, r < self.R]
        outside, self._side = self._side, (variables, cons)  # its divisions' variables are its own
        divided, self._divided = self._divided, dict(self._divided)
        calls, self._calls = self._calls, dict(self._calls)
        env = {**self.env, self.m.rank_var: r}
        feats = [self.num(1), *self.params.values(), r]
        order = {}
        for f in stmt.frames:
            if isinstance(f, LetFrame):
                t = self.term(f.value, env)
                env[f.name] = t
                feats.append(self._as_int(t))
            elif isinstance(f, GuardFrame):
                c = self.bool(f.cond, env)
                cons.append(c if f.holds else z3.Not(c))
            else:
                v = z3.Int(f"{name}_{f.var}", self.ctx)
                a, b = self.int(f.start, env), self.int(f.stop, env)
                variables.append(v)
                if f.step is None:
                    cons += [v >= a, v < b]
                else:
                    k = self._const(self.int(f.step, env))
                    if k is None or k == 0:
                        raise Unsupported("a loop step that varies", f.step.span)
                    j = z3.Int(f"{name}_{f.var}_j", self.ctx)
                    variables.append(j)
                    cons += [j >= 0, v == a + k * j, v < b if k > 0 else v > b]
                env[f.var] = v
                feats.append(v)
                order[f.loop] = -v if f.reversed else v
        stage, mb = self.int(stmt.stage, env), self.int(stmt.microbatch, env)
        self._side, self._divided, self._calls = outside, divided, calls
        feats += products(self.m, feats)
        return Inst(stmt, r, tuple(variables), tuple(cons), stage, mb, tuple(feats), order)

    def before(self, a: "Inst", b: "Inst"):
        """a comes before b in their (common) rank's list."""
        common, static = shared_loops(a.stmt, b.stmt)
        true = z3.BoolVal(True, self.ctx)
        cases, equal = [], [true]
        for loop in common:
            cases.append(z3.And(*equal, a.order[loop] < b.order[loop]))
            equal.append(a.order[loop] == b.order[loop])
        if static:
            cases.append(z3.And(*equal))
        return z3.Or(*cases) if cases else z3.BoolVal(False, self.ctx)

    def stages_per_rank(self) -> builtins.int:
        """k with stages = k x ranks in every setting (asked of Z3 once per encoding); Unsupported if
        the placement gives no fixed k (`place s -> expr` is handled by `owner` alone)."""
        if self._per_rank is None:
            m = self.m
            if m.placement == "vshape":
                if not self.proves(self.S == 2 * self.R):
                    raise Unsupported("`place vshape` needs the proof to know that stages = 2 x ranks")
                self._per_rank = 2
            else:
                k = next((k for k in range(1, 9) if self.proves(self.S == k * self.R)), None)
                if k is None:
                    raise Unsupported("`place loop` needs stages = k x ranks for a fixed k (up to 8): stage s "
                                      "on rank s % P is not linear in P otherwise")
                self._per_rank = k
        return self._per_rank

    def owner(self, s):
        m = self.m
        if m.placement == "expr":
            return self.int(m.place_expr, {**self.env, m.place_var: s})
        try:
            k = self.stages_per_rank()
        except Unsupported:
            if m.placement == "loop" and (self._const(self.R) is not None or m.nonlinear):
                return s % self.R  # linear for a known number of ranks
            raise
        if m.placement == "vshape":
            return z3.If(s < self.R, s, 2 * self.R - 1 - s)
        if k == 1:
            return s
        out = s - (k - 1) * self.R  # s % R in k linear pieces
        for i in range(k - 2, -1, -1):
            out = z3.If(s < (i + 1) * self.R, s - i * self.R, out)
        return out

    def neighbours(self, a: "Inst", b: "Inst", offset: builtins.int) -> list:
        """Facts about two instances whose stages are `offset` apart, for Z3's nonlinear arithmetic
        (it does not find them itself): under `place loop` (placement proved first) a stage is
        chunk x R + rank, so one stage on is the next rank of the same chunk, or rank 0 of the next
        chunk after the last rank. Nothing for a linear model."""
        if not self.m.nonlinear or self.m.placement != "loop":
            return []
        self._fresh += 1
        ca, cb = z3.Ints(f"c{self._fresh}a c{self._fresh}b", self.ctx)
        R, ra, rb = self.R, a.rank, b.rank
        facts = [a.stage == ca * R + ra, b.stage == cb * R + rb]
        if offset == 0:
            return facts + [ca == cb, ra == rb]
        lo, hi, clo, chi = (ra, rb, ca, cb) if offset < 0 else (rb, ra, cb, ca)  # hi's stage is lo's + 1
        return facts + [z3.Or(z3.And(clo == chi, hi == lo + 1), z3.And(chi == clo + 1, lo == R - 1, hi == 0))]

    def same_digits(self, x, y) -> list:
        """Facts for two terms that are equal, for Z3's nonlinear arithmetic: where both read
        `X*b + j` with j a remainder of a division by the same b (0 <= j < b), their X and j are equal
        too (the floor quotient and remainder are unique). Nothing otherwise."""
        dx, dy = self._digits(x), self._digits(y)
        if dx is None or dy is None or not dx[2].eq(dy[2]):
            return []
        return [z3.Implies(x == y, z3.And(dx[0] == dy[0], dx[1] == dy[1]))]

    def same_owner(self, a: "Inst", b: "Inst") -> list:
        """For Z3's nonlinear arithmetic, once placement is proved (every instance runs on the rank
        that holds its stage): instances of one stage run on one rank. Nothing for a linear model."""
        if not self.m.nonlinear:
            return []
        return [z3.Implies(a.stage == b.stage, a.rank == b.rank)]

    def _digits(self, t):
        """(X, j, b) if t is X*b + j (either order) with j a remainder of a division by b, else None."""
        if not self.m.nonlinear or not z3.is_add(t) or t.num_args() != 2:
            return None
        for prod, rem in ((t.arg(0), t.arg(1)), (t.arg(1), t.arg(0))):
            known = self._remainders.get(rem.get_id())
            if known is None and rem.get_id() in self._ranks:  # a rank: 0 <= r < R, as a remainder by R
                known = (rem, self.R)
            if known is None or not known[0].eq(rem) or not z3.is_mul(prod) or prod.num_args() != 2:
                continue
            for X, b in ((prod.arg(0), prod.arg(1)), (prod.arg(1), prod.arg(0))):
                if b.eq(known[1]):
                    return X, rem, b
        return None

    def chunked(self, s) -> list:
        """Under `place loop`, in a nonlinear model: stage s is chunk c x R + rank o (fresh c, o),
        the witnesses Z3 needs to find the action of a stage. Nothing otherwise."""
        if not self.m.nonlinear or self.m.placement != "loop":
            return []
        self._fresh += 1
        c, o = z3.Ints(f"c{self._fresh} o{self._fresh}", self.ctx)
        return [s == c * self.R + o, o >= 0, o < self.R, c >= 0]

    def count(self, stmt: Stmt, r, before: tuple["Inst", builtins.bool] | None = None):  # noqa: C901
        """How many instances stmt has on rank r, as a term: each loop's interval (its bounds, narrowed
        by the guards that compare its variable, with coefficient 1, to terms free of loop variables)
        contributes its length, each other guard a 0/1 factor. With `before` = (a, inclusive): only
        those before instance a in the rank's order (or at it). With the side conditions of the
        divisions this made. Unsupported for any other shape (a step, bounds or a guard that tie two
        loop variables together, `==` on a loop variable, nesting deeper than a's loop)."""
        cut = None  # (loop id, a's variable, reversed, inclusive): stmt's instances up to a's iteration
        if before is not None:
            a, inclusive = before
            common, static = shared_loops(stmt, a.stmt)
            if len(common) > 1 or (common and {f.loop for f in stmt.loops} != set(common)):
                raise Unsupported("counting the instances before another across nested loops", stmt.span)
            if not common and not (static if static is not None else inclusive):
                return self.num(0), []
            if common:
                (loop,) = common
                frame = next(f for f in stmt.loops if f.loop == loop)
                at = a.order[loop]  # a's variable of that (shared) loop, negated when the loop runs backwards
                if frame.reversed:
                    at = z3.simplify(-at)
                cut = (loop, at, frame.reversed, static is True or (static is None and inclusive))
        outside, self._side = self._side, ([], [])
        divided, self._divided = self._divided, dict(self._divided)
        calls, self._calls = self._calls, dict(self._calls)
        try:
            env = {**self.env, self.m.rank_var: r}
            bounds: dict = {}  # id of a loop variable -> (variable, [lower bounds], [upper bounds])
            factors: list = []
            for f in stmt.frames:
                if isinstance(f, LetFrame):
                    env[f.name] = self.term(f.value, env)
                elif isinstance(f, GuardFrame):
                    c = self.bool(f.cond, env)
                    for atom in _conjuncts(c if f.holds else z3.Not(c)):
                        self._narrow(atom, bounds, factors, f.cond.span)
                else:
                    if f.step is not None and self._const(self.int(f.step, env)) != 1:
                        raise Unsupported("counting the instances of a loop with a step", f.step.span)
                    self._fresh += 1
                    v = z3.Int(f"n{self._fresh}_{f.var}", self.ctx)
                    lo, hi = self.int(f.start, env), self.int(f.stop, env)
                    if self._mentions(lo, bounds) or self._mentions(hi, bounds):
                        raise Unsupported("counting the instances of a loop whose bounds depend on another loop",
                                          f.start.span)
                    bounds[v.get_id()] = (v, [lo], [hi])
                    if cut is not None and cut[0] == f.loop:  # up to a's iteration, in the loop's direction
                        _, at, backwards, inclusive = cut
                        if backwards:
                            lo_cut = at if inclusive else at + 1
                            bounds[v.get_id()][1].append(lo_cut)
                        else:
                            bounds[v.get_id()][2].append(at + 1 if inclusive else at)
                    env[f.var] = v
            made = self._side[1]
            if any(self._mentions(c, bounds) for c in made):
                raise Unsupported("counting the instances where a division depends on a loop variable", stmt.span)
            total = self.num(1)
            for _v, lows, highs in bounds.values():
                lo, hi = _extreme(lows, max), _extreme(highs, min)
                total = total * z3.If(hi > lo, hi - lo, self.num(0))
            if factors:
                total = z3.If(z3.And(*factors), total, self.num(0))
            return total, list(made)
        finally:
            self._side, self._divided, self._calls = outside, divided, calls

    def _narrow(self, atom, bounds, factors, span) -> None:
        """Fold one comparison into the loop intervals (or the 0/1 factors, if it names no loop)."""
        if not self._mentions(atom, bounds):
            factors.append(atom)
            return
        negate = z3.is_not(atom)
        inner = atom.arg(0) if negate else atom
        kinds = {z3.Z3_OP_LT: "<", z3.Z3_OP_LE: "<=", z3.Z3_OP_GT: ">", z3.Z3_OP_GE: ">="}
        op = kinds.get(inner.decl().kind()) if z3.is_app(inner) else None
        if op is None:
            raise Unsupported("counting the instances under a guard that is not <, <=, > or >= on a loop variable",
                              span)
        if negate:
            op = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}[op]
        t = inner.arg(0) - inner.arg(1)  # t op 0
        (var,) = [b[0] for b in bounds.values() if _has(t, b[0])] or [None]
        if var is None:
            raise Unsupported("counting the instances under a guard on two loop variables", span)
        rest = z3.simplify(z3.substitute(t, (var, self.num(0))))
        slope = self._const(z3.substitute(t, (var, self.num(1))) - rest)
        if slope not in (1, -1) or self._mentions(rest, bounds):
            raise Unsupported("counting the instances under a guard that is not a loop variable against a bound",
                              span)
        # slope * v + rest op 0, as v >= lo or v < hi
        at = (-rest) if slope == 1 else rest
        if (op in ("<", "<=")) == (slope == 1):
            bounds[var.get_id()][2].append(at + 1 if op in ("<=", ">=") else at)
        else:
            bounds[var.get_id()][1].append(at if op in ("<=", ">=") else at + 1)

    def _mentions(self, t, bounds) -> builtins.bool:
        return any(_has(t, b[0]) for b in bounds.values())

    def at_rank(self, r) -> dict:
        """The names a memory bound may use at rank r: the parameters, the schedule's lets, the rank
        and the lets at the top of the rank body (Unsupported if those divide by what varies)."""
        env = {**self.env, self.m.rank_var: r}
        outside, self._side = self._side, ([], [])
        scope = self._divided, self._calls  # what is made here leaves with its side conditions
        self._divided, self._calls = dict(self._divided), dict(self._calls)
        try:
            for let in rank_lets(self.m):
                env[let.name] = self.term(let.value, env)
            if self._side[1]:
                raise Unsupported("a memory bound in lets that divide by a quantity that varies")
        finally:
            self._side, (self._divided, self._calls) = outside, scope
        return env

    def owned(self, r):
        """How many stages rank r holds (r a rank): under `place loop`, those of r, r + R, ... below
        S; under `place vshape`, two. Unsupported for `place s -> expr`."""
        if self.m.placement == "vshape":
            self.stages_per_rank()
            return self.num(2), []
        if self.m.placement != "loop":
            raise Unsupported("counting the stages of a rank under `place s -> expr`")
        if z3.is_mul(self.S) and self.S.num_args() == 2:  # stages X * R: X on every rank, no division
            for a, b in ((self.S.arg(0), self.S.arg(1)), (self.S.arg(1), self.S.arg(0))):
                if b.eq(self.R):
                    return a, []
        q, j = z3.Int("owned_q", self.ctx), z3.Int("owned_j", self.ctx)
        return z3.If(r < self.S, q + 1, self.num(0)), [z3.Implies(r < self.S, z3.And(
            self.S - 1 - r == q * self.R + j, j >= 0, j < self.R))]

    def local_stages(self, r):
        """The stages rank r holds, as terms (a fixed number per rank)."""
        if self.m.placement == "expr":
            raise Unsupported("the memory proof needs a fixed number of stages per rank (`place loop` with "
                              "stages = k x ranks, or `place vshape`)")
        k = self.stages_per_rank()
        if self.m.placement == "vshape":
            return [r, 2 * self.R - 1 - r]
        return [r + i * self.R for i in range(k)]

    def empty(self) -> builtins.bool:
        """No setting satisfies the assumptions and requires."""
        return self.proves(z3.BoolVal(False, self.ctx))

    def proves(self, claim) -> builtins.bool:
        s = solver.make(self.ctx, nonlinear=self.m.nonlinear)
        s.add(*self.domain, z3.Not(claim))
        return solver.check(s, deadline=solver.Deadline.only(FACT_UNITS, "a fact the encoding needs")) == z3.unsat

    def inside_box(self, hi: builtins.int) -> builtins.bool:
        """Every setting of the domain has each parameter in 0..hi (so a sweep of that box meets
        them all): shown by Z3, False when it cannot show it."""
        if not self.params:
            return True
        return self.proves(z3.And([z3.And(p >= 0, p <= hi) for p in self.params.values()]))

    def within(self, formula, box: builtins.int | None):
        """formula with every parameter at most `box` (None: formula itself)."""
        if box is None:
            return formula
        return z3.And(formula, *[p <= box for p in self.params.values()])

    def linear(self, coeffs: dict, inst: "Inst", names):
        """sum(coeff x feature) of a certificate function at an instance."""
        return z3.Sum([self.num(int(coeffs.get(n, 0))) * f for n, f in zip(names, inst.feats)])

    def run(self, formula, deadline: solver.Deadline, show: dict | None = None, smallest: builtins.bool = False,
            domain: builtins.bool = True):
        """Proved, Unknown, or Refuted at a setting, asked within `deadline` (solver.Deadline: this
        query's share of solver work, and the command's limit, which raises TimeUp); with
        `smallest`, the setting with the least sum of parameters and, among those, the
        lexicographically least (the order the bounded sweep visits settings in), found by asking
        for smaller ones until there are none, within what is left of the same share. With
        `domain` False, `formula` is asked alone: it holds the facts it needs (see `divisors`)."""
        s, verdict = self._ask([*(self.domain if domain else ()), formula], deadline)
        if verdict == z3.unsat:
            return Proved()
        if verdict == z3.unknown:
            return Unknown(solver.reason(s, deadline))
        model = s.model()
        least = True
        if smallest:  # within the query's own share: the descent cannot multiply it
            size = z3.Sum([self.num(0)] + list(self.params.values()))
            for term in (size, *self.params.values()):  # the sum first, then each parameter in turn
                model, least = _least(s, model, term, deadline)
                if not least:
                    break
                s.add(term == model.eval(term, model_completion=True))
        params = {p: solver.value(model, v) for p, v in self.params.items()}
        detail = {k: solver.value(model, v) for k, v in (show or {}).items()}
        return Refuted(params, detail, least)


    def _ask(self, assertions, deadline: solver.Deadline):
        """(the solver, its verdict) on the assertions within `deadline`. A nonlinear model's query
        is asked in attempts, each a fresh solver with a seed of its own and a cap that doubles
        from FIRST_ATTEMPT, the last with what is left of the share: Z3's nonlinear search can
        wander on one path for long where another soon ends (Z3's own strategy restarts on the
        wall clock; these restarts are counted, so they end alike on every machine)."""
        seed = 0
        while True:
            left = deadline.budget.left()
            cap = FIRST_ATTEMPT << seed if self.m.nonlinear and left is not None else None
            last = cap is None or left is None or cap >= left  # (cap is set only when left is)
            s = solver.make(self.ctx, nonlinear=self.m.nonlinear, seed=seed)
            s.add(*assertions)
            share = deadline if last or cap is None else deadline.share(cap, "an attempt")
            verdict = solver.check(s, deadline=share)
            if last or verdict != z3.unknown or not share.exhausted():
                return s, verdict
            seed += 1


# A nonlinear query's first attempt (see Encoding._ask), in Z3 resource units: most queries of the
# built-in proofs end within it; the largest need 11M to 84M by the seed and by what ran before in the
# process (interleaved 1F1B's "stage in range"), and one restart often ends what one path would not
FIRST_ATTEMPT = 10_000_000


# A descent asks for each smaller value in turn this many times, then halves the distance. Its last
# model is what the timing search learns from, and another model of the same least value can send
# it elsewhere (zbv and dualpipev written with replicas then did not converge): 10,000 keeps every
# built-in's descent as it was and ends `P >= 10**18`'s in about 20 s.
PLAIN_STEPS = 10_000
# A descent that meets a value above this halves its distance from the start: one step at a time it
# would ask up to PLAIN_STEPS queries (`prove 1f1b --assume 'P >= 100000000'`: two descents of
# 10,000 queries, 20 of its 21 s) for settings far past any checked concretely (prover.CONCRETE_PAIRS).
# The built-ins' descents stay far below it (the largest value in the default tests' proofs: 103), so
# each returns the model it always did.
PLAIN_MAX = 1_000_000


def _least(s, model, term, until: solver.Deadline):
    """(a model of s with term as small as it can be, True), asking for each smaller value in turn
    (PLAIN_STEPS times), then for one at most a gap below that doubles until none is, then halving
    the range left: a descent from 10**18 takes some 120 queries, not 10**18 (with no clock, its
    budget alone would have ended it, after an hour of small queries); (the smallest model found,
    False) when `until`'s budget runs out or Z3 cannot tell first."""
    low, gap, steps, far = None, 1, 0, False  # low: term is at least this (an unsat said so)
    while True:
        if until.exhausted():
            return model, False
        s.push()  # before the model is read: Z3's terms are then made in the order its search
        value = model.eval(term, model_completion=True)  # has always seen (read first, zbv_dp's
        now = value.as_long()  # timing search learnt from other models and did not converge)
        if low is not None and low >= now:
            s.pop()
            return model, True
        far = far or now > PLAIN_MAX
        plain = steps < PLAIN_STEPS and not far
        ask = now - 1 if plain else now - gap if low is None else (low + now - 1) // 2
        s.add(term < value if ask == now - 1 else term <= ask)  # (the first: the query it always was)
        verdict = solver.check(s, deadline=until)
        if verdict == z3.sat:
            model = s.model()
            gap = gap if plain else gap * 2
        s.pop()
        steps += 1
        if verdict == z3.unsat and ask == now - 1:
            return model, True
        if verdict == z3.unsat:
            low = ask + 1
        elif verdict != z3.sat:
            return model, False


@dataclass(frozen=True)
class Inst:
    """A symbolic instance of a statement: its rank, variables, domain and terms."""

    stmt: Stmt
    rank: Any  # z3 terms (z3 has no types for mypy)
    variables: tuple
    domain: tuple
    stage: Any
    microbatch: Any
    feats: tuple
    order: dict  # loop id -> that loop's variable, negated when the loop runs backwards

    def where(self):
        return z3.And(*self.domain)

    def shown(self, prefix: str) -> dict:
        return {f"{prefix}.rank": self.rank, f"{prefix}.stage": self.stage, f"{prefix}.microbatch": self.microbatch}


def _conjuncts(c):
    """The comparisons whose conjunction is c (`a and b`, `not (a or b)`), else c itself."""
    if z3.is_and(c):
        return [x for a in c.children() for x in _conjuncts(a)]
    if z3.is_not(c) and z3.is_or(c.arg(0)):
        return [x for a in c.arg(0).children() for x in _conjuncts(z3.Not(a))]
    if z3.is_not(c) and z3.is_not(c.arg(0)):
        return _conjuncts(c.arg(0).arg(0))
    return [c]


def _has(t, v) -> bool:
    """Term t mentions the variable v (each shared subterm visited once: terms are DAGs)."""
    seen, todo = set(), [t]
    while todo:
        u = todo.pop()
        if u.get_id() in seen:
            continue
        seen.add(u.get_id())
        if z3.is_const(u):
            if u.eq(v):
                return True
        else:
            todo.extend(u.children())
    return False


def _extreme(terms, pick):
    out = terms[0]
    for t in terms[1:]:
        out = z3.If(t > out, t, out) if pick is max else z3.If(t < out, t, out)
    return out


def absent(inst: Inst, match):
    """No instance of inst's statement satisfies `match(inst)` (inst's variables quantified)."""
    return z3.ForAll(list(inst.variables), z3.Not(z3.And(inst.where(), match(inst))))


class Fit:
    """Integer coefficients with |c| <= bound (the constant term: <= constant, default bound), zero
    outside `allowed`, meeting rows added over time (one Z3 solver kept across calls, so what it
    learned carries over). A row is [(key, [values]), ...] meaning sum over (key, values) of
    coeff[key] . values >= 1."""

    def __init__(self, bound: int, constant: int | None = None, allowed: dict | None = None):
        self.bound, self.constant = bound, bound if constant is None else constant
        self.allowed = allowed  # {key: feature indices that may be nonzero}, or None: all of them
        self.ctx = solver.context()
        self.solver = solver.make(self.ctx)
        self.coeffs: dict = {}
        self.seen: set = set()

    def _c(self, key, i):
        if (key, i) not in self.coeffs:
            v = self.coeffs[(key, i)] = z3.Int(f"c_{len(self.coeffs)}", self.ctx)
            k = self.constant if i == 0 else self.bound  # feature 0 is the constant 1
            self.solver.add(v >= -k, v <= k)
        return self.coeffs[(key, i)]

    def add(self, rows, deadline: solver.Deadline | None = None) -> None:
        """The rows as constraints (each at least 1), the command's clock looked at as they are read
        (`fresh_terms`)."""
        for terms in fresh_terms(rows, self.seen, self.allowed, deadline):
            total = z3.Sum([z3.IntVal(0, self.ctx)] + [self._c(k, i) * z3.IntVal(x, self.ctx) for k, i, x in terms])
            self.solver.add(total >= 1)

    def solve(self, deadline: solver.Deadline):
        """{key: {feature index: coefficient}}, or None (no such coefficients, or none found within
        `deadline`'s budget)."""
        if solver.check(self.solver, deadline=deadline) != z3.sat:
            return None
        model = self.solver.model()
        out: dict = {}
        for (key, i), v in self.coeffs.items():
            val = solver.value(model, v)
            if val:
                out.setdefault(key, {})[i] = val
        return out


def _text(e) -> str:
    from ..span import span_text
    try:
        return span_text(e.span)
    except Exception:
        return "expression"


# ---- obligations: each yields (what, formula, shown); a model of the formula is a counterexample ----
def _pairs(enc: Encoding, kinds_a, kinds_b):
    for x in enc.m.stmts:
        if x.kind not in kinds_a:
            continue
        for y in enc.m.stmts:
            if y.kind in kinds_b:
                yield x, y


def well_formed(enc: Encoding, which: str):  # noqa: C901
    """`which` is one of: routes, range, placement, unique, exists (with routes: `routes`, that
    they describe a program at every setting, and in `range`, that every action is on its route)."""
    m, S, Mb = enc.m, enc.S, enc.Mb
    if which == "routes":
        yield from routes(enc)
    elif which in ("range", "placement"):
        for x in m.stmts:
            a = enc.instance(x, "a")
            if which == "range":  # the stage and the microbatch apart: each is easier for Z3 alone
                yield x, None, z3.And(a.where(), z3.Not(z3.And(a.stage >= 0, a.stage < S))), a.shown("a")
                bad = z3.Not(z3.And(a.microbatch >= 0, a.microbatch < Mb))
            else:
                bad = z3.And(a.stage >= 0, a.stage < S, enc.owner(a.stage) != a.rank)
            yield x, None, z3.And(a.where(), bad), a.shown("a")
            if which == "range" and m.routes:  # no action of a microbatch off its route (`off-route`)
                yield x, None, z3.And(a.where(), a.stage >= 0, a.stage < S, a.microbatch >= 0, a.microbatch < Mb,
                                      z3.Not(enc.visits(a.stage, a.microbatch))), a.shown("a")
    elif which == "unique":  # no (stage, microbatch) twice among these kinds
        for group in (("F",), ("B",), ("I",), ("W",), ("B", "I"), ("B", "W")):
            for x, y in _pairs(enc, group, group):
                if x.index > y.index or (len(group) == 2 and x.kind == y.kind) or stages_apart(x, y, 0):
                    continue
                a, b = enc.instance(x, "a"), enc.instance(y, "b")
                same = z3.And(a.stage == b.stage, a.microbatch == b.microbatch,
                              *enc.same_owner(a, b), *enc.same_digits(a.stage, b.stage),
                              *enc.same_digits(a.microbatch, b.microbatch))
                if x is y:
                    same = z3.And(same, z3.Or(*[u != v for u, v in zip(a.variables, b.variables)]))
                yield x, y, z3.And(a.where(), b.where(), same), {**a.shown("a"), **b.shown("b")}
    else:  # every (stage, microbatch) has its F, its B or I, and W exactly where there is I
        if m.nonlinear:  # Z3's nonlinear arithmetic does not decide the quantified form: count instead
            try:
                yield from coverage(enc)
                return
            except Unsupported:
                pass
        s, mb = z3.Int("s", enc.ctx), z3.Int("m", enc.ctx)
        inside = z3.And(s >= 0, s < S, mb >= 0, mb < Mb, enc.visits(s, mb), *enc.chunked(s))
        shown = {"stage": s, "microbatch": mb}

        def none_of(kinds, stage, micro):
            return z3.And(z3.BoolVal(True, enc.ctx), *[absent(enc.instance(x, "q"), lambda q: z3.And(
                q.stage == stage, q.microbatch == micro)) for x in m.stmts if x.kind in kinds])
        yield None, ("F",), z3.And(inside, none_of(("F",), s, mb)), shown
        yield None, ("B", "I"), z3.And(inside, none_of(("B", "I"), s, mb)), shown
        for kind, other in (("I", "W"), ("W", "I")):
            for x in m.stmts:
                if x.kind == kind:
                    a = enc.instance(x, "a")
                    yield x, (other,), z3.And(a.where(), none_of((other,), a.stage, a.microbatch)), a.shown("a")


def routes(enc: Encoding):
    """The routes describe a program at every setting (deps.py's `route_problems`, which the compiler
    asks; a model is a setting where it refuses the file): each a non-empty range of microbatches and
    of stages within the program's, every microbatch on exactly one, every stage on one, the runs of
    stages all as long as the first's and each two equal or apart."""
    m, S, Mb, rs = enc.m, enc.S, enc.Mb, enc.routes
    for x, (a, b, c, d) in zip(m.routes, rs):
        yield x, None, z3.Not(z3.And(0 <= a, a < b, b <= Mb, 0 <= c, c < d, d <= S)), {}
        yield x, None, d - c != rs[0][3] - rs[0][2], {}
    for i, (_, _, c1, d1) in enumerate(rs):
        for k in range(i + 1, len(rs)):
            _, _, c2, d2 = rs[k]
            yield m.routes[k], None, z3.And(z3.Or(c1 != c2, d1 != d2), c1 < d2, c2 < d1), {}
    mb, s = z3.Int("m", enc.ctx), z3.Int("s", enc.ctx)
    on = z3.Sum([enc.num(0)] + [z3.If(z3.And(a <= mb, mb < b), enc.num(1), enc.num(0)) for a, b, _, _ in rs])
    yield m.routes[-1], None, z3.And(mb >= 0, mb < Mb, on != 1), {"microbatch": mb}
    yield m.routes[-1], None, z3.And(s >= 0, s < S, z3.Not(z3.Or(*[z3.And(c <= s, s < d) for _, _, c, d in rs]))), \
        {"stage": s}


def coverage(enc: Encoding) -> list:
    """"Every stage runs F and B (or I and W) of every microbatch" by counting, for models where the
    quantified form is out of Z3's reach: with range, placement and uniqueness proved, a rank's F's
    are distinct (stage, microbatch) pairs of its own stages, so if there are at least (its stages)
    x M of them, they are all of them; likewise its B's and I's, and its W's when no backward is
    whole. A model is a rank with too few. Unsupported when the statements cannot be counted."""
    m = enc.m
    if m.routes:
        raise Unsupported("counting with routes: a rank's stages run some of the microbatches")
    kinds = {x.kind for x in m.stmts}
    groups = [("F",), ("B", "I")] + ([("W",)] if "B" not in kinds and "I" in kinds else [])
    if "B" in kinds and kinds & {"I", "W"}:
        raise Unsupported("counting cannot pair each I with its W when some backwards are whole")
    out = []
    for group in groups:
        r = z3.Int("r", enc.ctx)
        owned, facts = enc.owned(r)
        counts = []
        for x in m.stmts:
            if x.kind in group:
                n, side = enc.count(x, r)
                counts.append(n)
                facts += side
        have = z3.Sum([enc.num(0)] + counts)
        formula = z3.And(r >= 0, r < enc.R, *facts, have < owned * enc.Mb)
        out.append((None, group, formula, {"rank": r, "instances": have, "stages": owned}))
    return out


def divisors(enc: Encoding):
    """Every division by a quantity that varies is by a positive one (a nonlinear model's `//`
    and `%` are encoded for positive divisors only): a model is a setting that divides by b <= 0.
    Each formula holds the requires, the assumptions and the side conditions of the divisions made
    before b, not the domain (`run(..., domain=False)`): the domain holds b's own side conditions,
    0 <= j < b, which would exclude every such setting, so that a schedule-level division by zero
    (`--assume 'P // 0 >= 1'`) would read as "no setting" and prove anything."""
    for x in enc.m.stmts:
        enc.instance(x, "a")  # records its divisions
    for b, where in enc.divisors:
        yield z3.And(*enc.plain, *where, b <= 0)


def _producers():
    """consumer kind -> [(producer kinds, stage offset, confined)], read off schedc/rules/deps.py (the
    one rule): `confined`, the need is there only where the producer's stage is in the consumer's
    run of stages (its route's segment): deps.py drops it for a stage that is a segment alone."""
    from ..rules.deps import Routes, needs, produces
    from ..ir import Action, Op, Route
    alone = Routes(11, 8, (Route((0, 8), (5, 6)),))  # stage 5 a segment of its own (its neighbours none)
    out = {}
    for k in ("F", "B", "I", "W"):
        rows = []
        routed = needs(Action(Op[k], 5, 7), alone)
        for v in needs(Action(Op[k], 5, 7), 11):
            kinds = tuple(p for p in ("F", "B", "I", "W") if produces(Action(Op[p], v[1], v[2])) == v)
            rows.append((kinds, v[1] - 5, v not in routed))
        out[k] = rows
    return out


def timing_edges(enc: Encoding):
    """(x, y, a, b, edge): every pair of instances the timing must order, a before b."""
    m = enc.m
    for x, y in order_pairs(m.stmts):
        a, b = enc.instance(x, "a"), enc.instance(y, "b")
        yield x, y, a, b, "order", z3.And(a.rank == b.rank, enc.before(a, b))
    producers = _producers()
    for y in m.stmts:
        for kinds, offset, confined in producers[y.kind]:
            for x in m.stmts:
                if x.kind in kinds and not stages_apart(x, y, offset):
                    a, b = enc.instance(x, "a"), enc.instance(y, "b")
                    # (with routes, a stage's neighbours are its segment's: deps.py's `bounds`)
                    segment = [enc.same_segment(a.stage, b.stage)] if confined and m.routes else []
                    yield x, y, a, b, "data", z3.And(a.stage == b.stage + offset, a.microbatch == b.microbatch,
                                                     *segment, *enc.neighbours(a, b, offset),
                                                     *enc.same_digits(a.microbatch, b.microbatch))


def timing(enc: Encoding, cert: dict, names: dict):
    """The timing certificate increases along every rank's order and every data dependency (the
    parts of an overlap step take their step's function: one time, waiting for both inputs)."""
    for x, y, a, b, edge, rel in timing_edges(enc):
        ta, tb = enc.linear(cert[x.key], a, names[x.index]), enc.linear(cert[y.key], b, names[y.index])
        feats = {**{f"a.f{i}": f for i, f in enumerate(a.feats)}, **{f"b.f{i}": f for i, f in enumerate(b.feats)}}
        yield (x, y, edge), z3.And(a.where(), b.where(), rel, ta >= tb), {**a.shown("a"), **b.shown("b"),
                                                                           "t(a)": ta, "t(b)": tb, **feats}


def memory_groups(deltas: dict[str, int]) -> list[tuple[tuple[str, ...], int]]:
    """Check's memory rule as counts (schedc/rules/memory.py's `count_groups`), by kind name:
    `(kinds, delta)` pairs such that a rank holds, in whole units, the sum of each delta x the
    number of its kinds' instances so far. `deltas`: each kind's delta in whole units
    (model.memory_units)."""
    groups = count_groups({Op(kind): d for kind, d in deltas.items()})
    return [(tuple(op.value for op in ops), d) for ops, d in groups]


def freeing(deltas: dict[str, int]) -> tuple[str, ...]:
    """The kinds that free memory under `deltas` (memory_groups' groups after the F's)."""
    return tuple(sorted({k for kinds, d in memory_groups(deltas) if d < 0 for k in kinds}))


def memory_order(enc: Encoding, kinds, direction: int):
    """The actions of these kinds run, per stage, in increasing (direction 1) or decreasing (-1)
    microbatch order on their rank."""
    group = [x for x in enc.m.stmts if x.kind in kinds]
    for x in group:
        for y in group:
            if not one_body(x, y) or stages_apart(x, y, 0):
                continue
            a, b = enc.instance(x, "a"), enc.instance(y, "b")
            earlier = a.microbatch < b.microbatch if direction > 0 else a.microbatch > b.microbatch
            yield ("in microbatch order", x, y), z3.And(a.where(), b.where(), a.rank == b.rank, a.stage == b.stage,
                                                        earlier, enc.before(b, a)), {**a.shown("a"), **b.shown("b")}


def frees_follow(enc: Encoding, frees: tuple[str, ...]):
    """Every action of the kinds `frees` comes after the F of its stage and microbatch in its
    rank's list (so the count of live activations never goes below what was allocated)."""
    for x in [x for x in enc.m.stmts if x.kind in frees]:
        for y in [y for y in enc.m.stmts if y.kind == "F"]:
            if not one_body(x, y) or stages_apart(x, y, 0):
                continue
            g, a = enc.instance(x, "g"), enc.instance(y, "a")
            yield ("frees after their forward", x, y), z3.And(
                g.where(), a.where(), g.rank == a.rank, g.stage == a.stage, g.microbatch == a.microbatch,
                enc.before(g, a)), {**g.shown("g"), **a.shown("a")}


def memory(enc: Encoding, bound, groups, directions: tuple[int, ...]):
    """At most `bound(rank)` units held on every rank, counted by memory_groups' `groups` (F's
    first; the others free). No certificate needed: with each group's actions in microbatch order
    per stage (memory_order, `directions` one per group) and well-formedness (each F, B, I, W exists
    once), the actions of a group on stage s at or before a moment are the first j microbatches in
    that order (of the stage's own, with routes: `Encoding.visitors`), told by two existential
    facts, so the count right after each F is linear (a peak follows an F, every other group
    freeing)."""
    m = enc.m

    def nth(direction, j, lo, hi):  # the microbatch that is j-th (from 0) in this order among lo .. hi - 1
        return lo + j if direction > 0 else hi - 1 - j

    def some(kinds, a, stage, micro, when, tag):
        options = []
        for y in m.stmts:
            if y.kind not in kinds or not one_body(y, a.stmt):
                continue
            g = enc.instance(y, tag)
            options.append(z3.And(g.where(), g.rank == a.rank, g.stage == stage, g.microbatch == micro, when(g)))
        return z3.Or(*options) if options else z3.BoolVal(False, enc.ctx)
    for x in [x for x in m.stmts if x.kind == "F"]:
        a = enc.instance(x, "a")
        live, facts, shown = [], [], a.shown("a")
        at_or_before = (lambda g: z3.Or(enc.before(g, a), z3.And(g.stage == a.stage, g.microbatch == a.microbatch)))
        for i, s in enumerate(enc.local_stages(a.rank)):
            shown[f"stage {i}"] = s
            lo, hi = enc.visitors(s)  # (with routes, the stage's own microbatches)
            for n, ((kinds, delta), d) in enumerate(zip(groups, directions)):
                j = z3.Int(f"j{i}_{n}", enc.ctx)
                done = at_or_before if kinds == ("F",) else (lambda g: enc.before(g, a))
                facts += [j >= 0, j <= hi - lo,
                          z3.Or(j == 0, some(kinds, a, s, nth(d, j - 1, lo, hi), done, "g")),
                          z3.Or(j == hi - lo, some(kinds, a, s, nth(d, j, lo, hi), lambda g: enc.before(a, g), "g"))]
                live.append(delta * j)
                shown[f"{'/'.join(kinds)} of stage {i}"] = j
        yield ("live activations", x, None), z3.And(a.where(), *facts, z3.Sum(live) > bound(a.rank)), shown


def counted(enc: Encoding, bound, deltas: dict[str, int]):
    """At most `bound(rank)` units held on every rank, by counting instances in the rank's order:
    right after an F, a rank holds each kind's `deltas` x its instances (the F's up to it, the
    others before it; frees following their forwards, frees_follow). For a model whose stages per
    rank vary, where `memory` does not apply; Unsupported when the statements cannot be counted
    (smt.Encoding.count)."""
    out = []
    m = enc.m
    for x in [x for x in m.stmts if x.kind == "F"]:
        a = enc.instance(x, "a")
        held, facts = [], []
        for y in m.stmts:
            if not one_body(x, y) or not deltas.get(y.kind):
                continue
            n, side = enc.count(y, a.rank, (a, y.kind == "F"))
            held.append(deltas[y.kind] * n)
            facts += side
        live = z3.Sum([enc.num(0)] + held)
        out.append((("live activations", x, None), z3.And(a.where(), *facts, live > bound(a.rank)),
                    {**a.shown("a"), "live": live}))
    return out


def capacity(enc: Encoding, bound, allocated: int = 1):
    """The bound is at least what a rank can ever hold, (its stages) x (microbatches) x what an F
    `allocated` (in whole units): each F allocates one activation of its own (stage, microbatch),
    and well-formedness makes those distinct. For a nonlinear model whose number of stages per
    rank varies (`stages V * P`); a model is a rank where the bound is smaller (which does not make
    the bound wrong)."""
    r = z3.Int("r", enc.ctx)
    stages, facts = enc.owned(r)
    yield ("capacity", None, None), z3.And(r >= 0, r < enc.R, r < enc.S, *facts,
                                           bound(r) < allocated * stages * enc.Mb), {"rank": r, "stages": stages}


def share(enc: Encoding, spec) -> Fraction | None:
    """The size of one unit the proof counts (spec.unit x a stage's activation size), as a number:
    with the file's `act`, or the default share R / L (L: the stages of one copy of the model, all of
    them without routes) when they are a fixed multiple of the ranks (`stages P`, `stages 2 * P`);
    None when it varies."""
    if spec.act is not None:
        return spec.act * spec.unit
    for k in range(1, 9):
        if enc.proves(enc.L == k * enc.R):
            return Fraction(1, k) * spec.unit
    return None


def over_limit(enc: Encoding, bound, spec, act: Fraction | None):
    """Some rank whose bound, in the file's sizes (the size of one counted unit `act`, `share`'s
    answer, x `bound(rank)` units), is over the file's memory limit for it (`spec.limits`,
    the last that names the rank winning, as in the compiler): the memory check of `check` at every
    setting, given the proved bound. A default size that varies (`act` None: R / S with S not a
    fixed multiple of R; L with routes) is a product of quantities that vary: for a nonlinear model only."""
    r = z3.Int("rank", enc.ctx)
    live = bound(r)
    num, den = (enc.num(act.numerator), enc.num(act.denominator)) if act is not None else (enc.R, enc.L)
    if act is None and not enc.m.nonlinear:
        raise Unsupported("the default activation size R / S (R / L with routes of L stages) varies with the "
                          "parameters: not linear")

    def over(limit):
        exact = literal(limit)
        if exact is not None:  # size x live > num / den, in integers
            return num * exact.denominator * live > den * exact.numerator
        return num * live > den * enc.int(limit, enc.env)
    formula = z3.BoolVal(False, enc.ctx)
    for rank, limit in spec.limits:  # in file order: each later one wraps (and overrides) the earlier
        formula = over(limit) if rank is None else z3.If(r == enc.int(rank, enc.env), over(limit), formula)
    yield ("memory limit", None, None), z3.And(r >= 0, r < enc.R, formula), {"rank": r, "live": live}


def annotation_values(enc: Encoding):
    """Every `cost` and `memory` value is a non-negative number and every `stage E:` / `rank E:` is
    in range, at every setting: else the compiler refuses the file there (an error `check` reports)."""
    for item in enc.m.annotations:
        if item.scope is not None:
            index = enc.int(item.scope_expr, enc.env)
            count = enc.S if item.scope == "stage" else enc.R
            yield (f"`{item.what} {item.scope} {_text(item.scope_expr)}:` in range", item, None), \
                z3.Or(index < 0, index >= count), {}
        for s in item.settings:
            if literal(s.value) is None:
                yield (f"`{s.name} = {_text(s.value)}` is a non-negative number", item, None), \
                    enc.int(s.value, enc.env) < 0, {}
