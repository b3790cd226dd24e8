"""Concrete instances of a model: every statement's instances at given parameters, in rank order.

What the certificate search learns from (small sizes, by enumeration) and how the model is held to
the compiler: `instances(model, params)` must list exactly the actions `compile_schedule` makes,
rank by rank, in the same order (`agrees_with_compiler`). `features` are the values a certificate
function may use: 1, the parameters, the rank, the lets in scope and the loop variables.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import syntax as ast
from ..errors import SchedcError
from ..expr import compile_expr, compile_function
from .model import GuardFrame, LetFrame, LoopFrame, Model, Stmt, rank_lets

MAX_INSTANCES = 200_000
CHECK_EVERY = 4096  # instances listed between looks at the clock


class Stop(Exception):
    """A size is out of the concrete evaluator's reach (division by zero, too many instances)."""


@dataclass(frozen=True)
class Instance:
    stmt: Stmt
    rank: int
    stage: int
    microbatch: int
    key: tuple  # orders a rank's instances
    features: tuple[int, ...]

    @property
    def step(self) -> tuple:
        """Equal for the two parts of one overlap step (their keys differ in the part only)."""
        return (self.stmt.key, self.key[:-1]) if self.stmt.step >= 0 else (self.stmt.index, self.key)


def evaluate(e: ast.Expr, env: dict, functions: dict):
    """The value of `e` in `env`, by the compiler's own evaluator (schedc/expr.py): a division by
    zero, a value of the wrong type or an overflow, which the compiler reports as errors, is Stop."""
    key = (id(e), id(functions))
    hit = _COMPILED.get(key)
    if hit is None or hit[0] is not e or hit[1] is not functions:
        if len(_COMPILED) > 100_000:
            _COMPILED.clear()
        try:
            hit = (e, functions, compile_expr(e, Names(functions)))
        except SchedcError as exc:
            raise Stop(exc.diagnostics[0].message) from None
        _COMPILED[key] = hit
    try:
        return hit[2](env)
    except SchedcError as exc:
        raise Stop(exc.diagnostics[0].message) from None


_COMPILED: dict = {}  # (id of the expression, id of the functions) -> (expression, functions, closure)


class Names:
    """The prover's scope for compile_expr: `let` functions are the model's; the model's names were
    resolved when the schedule was read, so every name is known, unless `names` says which are
    (for an expression from the command line)."""

    def __init__(self, functions: dict, names: set[str] | None = None):
        self.functions = functions
        self.names = names
        self.compiled: dict = {}  # function name -> its body compiled once, for every call site

    def lookup(self, name: str) -> bool:
        return self.names is None or name in self.names

    def function(self, name: str):
        if name not in self.functions:
            return None
        if name not in self.compiled:
            params, body = self.functions[name]
            inner = self if self.names is None else Names(self.functions)  # resolved with the schedule
            self.compiled[name] = tuple(params), compile_function(tuple(params), body, inner), None
        return self.compiled[name]

    def all_names(self) -> list[str]:
        return sorted(self.names or ())


def base_env(m: Model, params: dict[str, int]) -> dict:
    env = dict(params)
    for let in m.globals:
        env[let.name] = evaluate(let.value, env, m.functions)
    return env


def rank_env(m: Model, params: dict[str, int], r: int) -> dict:
    """What a memory bound is evaluated in: the parameters, the schedule's lets, the rank and the
    lets at the top of the rank body."""
    env = {**base_env(m, params), m.rank_var: r}
    for let in rank_lets(m):
        env[let.name] = evaluate(let.value, env, m.functions)
    return env


def feature_names(m: Model, stmt: Stmt) -> tuple[str, ...]:
    names = ["1", *m.params, m.rank_var]
    for f in stmt.frames:
        if isinstance(f, (LetFrame, LoopFrame)):
            name = f.name if isinstance(f, LetFrame) else f.var
            while name in names:  # a shadowed name: the inner one gets a prime
                name += "'"
            names.append(name)
    return tuple(names + products(m, names))


def products(m: Model, feats: list) -> list:
    """A nonlinear model's certificates may also use each feature times each parameter (once
    each): given the plain features [1, params..., rank, locals...] (names, ints or Z3 terms),
    those products in a fixed order."""
    if not m.nonlinear:
        return []
    n = len(m.params)
    mul = (lambda a, b: f"{a}*{b}") if isinstance(feats[0], str) else (lambda a, b: a * b)
    return [mul(feats[i], feats[k]) for k in range(1, n + 1) for i in range(k, len(feats))]


def instances(m: Model, params: dict[str, int], deadline=None) -> list[list[Instance]]:
    """Every rank's instances in the order the rank runs them (`deadline`, a solver.Deadline:
    looked at every CHECK_EVERY instances, raising TimeUp once the command's limit passed)."""
    env0 = base_env(m, params)
    num_ranks = evaluate(m.ranks, env0, m.functions)
    if num_ranks > MAX_INSTANCES:
        raise Stop("too many ranks")
    out = []
    count = 0
    for r in range(num_ranks):
        if deadline is not None:
            deadline.check()
        found = []
        for stmt in m.stmts:
            for inst in _of(m, stmt, {**env0, m.rank_var: r}, r):
                count += 1
                if count > MAX_INSTANCES:
                    raise Stop("too many instances")
                if deadline is not None and count % CHECK_EVERY == 0:
                    deadline.check()
                found.append(inst)
        found.sort(key=lambda i: i.key)
        out.append(found)
    return out


def _of(m: Model, stmt: Stmt, env: dict, rank: int):
    fn = m.functions
    base = [1, *(env[p] for p in m.params), rank]

    def walk(k, env, feats, iters):
        if k == len(stmt.frames):
            key, it = [], iter(iters)
            for tok in stmt.path:
                key.append(next(it) if tok[0] == "l" else tok[1])
            plain = base + feats
            yield Instance(stmt, rank, evaluate(stmt.stage, env, fn), evaluate(stmt.microbatch, env, fn),
                           tuple(key), tuple(plain + products(m, plain)))
            return
        f = stmt.frames[k]
        if isinstance(f, LetFrame):
            v = evaluate(f.value, env, fn)
            yield from walk(k + 1, {**env, f.name: v}, feats + [int(v)], iters)
        elif isinstance(f, GuardFrame):
            if bool(evaluate(f.cond, env, fn)) == f.holds:
                yield from walk(k + 1, env, feats, iters)
        else:
            a, b = evaluate(f.start, env, fn), evaluate(f.stop, env, fn)
            step = 1 if f.step is None else evaluate(f.step, env, fn)
            if step == 0:
                raise Stop("a loop step of 0")
            rng = range(a, b, step)
            if len(rng) > MAX_INSTANCES:
                raise Stop("too many instances")
            for v in rng:
                yield from walk(k + 1, {**env, f.var: v}, feats + [v], iters + [-v if f.reversed else v])

    yield from walk(0, env, [], [])


def agrees_with_compiler(m: Model, params: dict[str, int], program) -> str | None:
    """None if the model lists the compiled program's actions; else what differs."""
    got = instances(m, params)
    if len(got) != program.num_ranks:
        return f"{len(got)} ranks, the compiler has {program.num_ranks}"
    for r, (mine, steps) in enumerate(zip(got, program.ranks)):
        theirs = [(a.op.value, a.stage, a.microbatch) for st in steps for a in st.parts]
        ours = [(i.stmt.kind, i.stage, i.microbatch) for i in mine]
        if ours != theirs:
            return f"rank {r}: the model lists {ours[:6]}..., the compiler {theirs[:6]}..."
    return None
