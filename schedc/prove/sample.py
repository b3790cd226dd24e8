"""Concrete instances of a model: every statement's instances at given parameters, in rank order.

What the certificate search learns from (small sizes). `instances(model, params)` are the actions
the compiler makes when it expands the model's IR (compiler.expand), each matched to the statement
of its call site, so the proof and the compiler cannot mean two things. `features` are the values
a certificate function may use: 1, the parameters, the rank, the lets in scope and the loop
variables.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import syntax as ast
from ..errors import SchedcError
from .evaluator import Stop, evaluate
from .model import LetFrame, LoopFrame, Model, Stmt, rank_lets

MAX_INSTANCES = 200_000
CHECK_EVERY = 4096  # instances listed between looks at the clock


@dataclass(frozen=True)
class Instance:
    stmt: Stmt
    rank: int
    stage: int
    microbatch: int
    key: tuple[int, int]  # (step in the rank's list, part of the step): orders a rank's instances
    features: tuple[int, ...]

    @property
    def step(self) -> int:
        """The step's place in its rank's list: equal for the two parts of one overlap step."""
        return self.key[0]


def base_env(m: Model, params: dict[str, int]) -> dict:
    env = dict(params)
    for let in m.globals:
        env[let.name] = _let_value(let, env, m)
    return env


def _let_value(let, env: dict, m: Model):
    """A `let`'s value in `env`; a name nothing defines there is the compiler's unknown-name error, at its place."""
    try:
        return evaluate(let.value, env, m.functions)
    except KeyError as exc:  # (`evaluate` leaves it to callers that probe whether a value is known yet)
        name = exc.args[0]
        used = next((n for n in ast.walk(let.value) if isinstance(n, ast.Var) and n.name == name), None)
        raise SchedcError("unknown-name", f"unknown name {name!r}", used.span if used else let.span) from None


def rank_env(m: Model, params: dict[str, int], r: int) -> dict:
    """What a memory bound is evaluated in: the parameters, the schedule's lets, the rank and the
    lets at the top of the rank body."""
    env = {**base_env(m, params), m.rank_var: r}
    for let in rank_lets(m):
        env[let.name] = _let_value(let, env, m)
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
    """Every rank's compute instances in the order the rank runs them (its collectives, steps of
    their own, left out): the compiler's expansion of the model's IR at `params` (`deadline`, a solver.Deadline: looked at every CHECK_EVERY instances,
    raising TimeUp once the command's limit passed). Stop when the setting does not compile or
    is too large to list."""
    from ..compiler import expand
    variants: dict[tuple[int, int], list[Stmt]] = {}  # (site, part) -> its statements (unroll's variants)
    for x in m.stmts:
        variants.setdefault((x.site, x.part), []).append(x)
    base = [1, *(params[p] for p in m.params)]
    out: dict[int, list[Instance]] = {}
    count = 0
    collective = {x.site for x in m.collectives}  # steps of their own, left out: the proof's pipeline

    def seen(rank, site, step, env):
        nonlocal count
        if site in collective:
            return
        found = out.setdefault(rank, [])
        n = found[-1].key[0] + 1 if found else 0
        for part, a in enumerate(step.parts):
            x = _variant(variants.get((site, part), ()), env)
            feats = base + [rank] + [int(env[f.name if isinstance(f, LetFrame) else f.var])
                                     for f in x.frames if isinstance(f, (LetFrame, LoopFrame))]
            found.append(Instance(x, rank, a.stage, a.microbatch, (n, part), tuple(feats + products(m, feats))))
        count += len(step.parts)
        if count > MAX_INSTANCES:
            raise Stop("too many instances")
        if deadline is not None and count % CHECK_EVERY < len(step.parts):
            deadline.check()

    assert m.loops is not None  # (a model read from a schedule carries its loop-level IR)
    try:
        program = expand(m.loops, params, seen)
    except SchedcError as exc:
        raise Stop(exc.diagnostics[0].message) from None
    return [out.get(r, []) for r in range(program.num_ranks)]


def _variant(stmts, env) -> Stmt:
    """The statement (of a site's variants after `unroll`) whose fixed loop values are env's."""
    for x in stmts:
        if all(env.get(var) == v for var, v in x.fixed):
            return x
    raise Stop("an action the model has no statement for")  # the unrolled guards disagree with the compiler
