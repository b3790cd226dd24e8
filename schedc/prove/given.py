"""What `schedc prove` is given on the command line, checked before any proof starts.

An `--assume` condition may name the parameters; the `--memory` bound the parameters, the
schedule's lets, the rank and the lets at the top of the rank body. Both are compiled by the
language's one evaluator (schedc/expr.py) and run at the small settings the bounded check visits,
the conditions in order as the compiler runs `require`s: a name that does not exist, a condition
that is a number (or a bound that is a condition), or a division by zero at one of those settings
is an error (exit 2), as it is in a schedule, never part of a verdict.
"""
from __future__ import annotations

from .. import syntax as ast
from ..errors import SchedcError
from ..expr import compile_expr
from .evaluator import Names, Stop, evaluate
from .model import Model, rank_lets
from .sample import base_env, rank_env
from .search import inside, setting_text


def check_assumptions(m: Model, assumed: tuple[ast.Expr, ...], texts: tuple[str, ...], samples) -> None:
    """Each `--assume` (parsed `assumed`, as typed `texts`) at each of the settings `samples` that
    the schedule's requires admit, in order; a false one leaves the rest of that setting unchecked."""
    runs = [_compiled(e, "--assume", t, m, set(m.params)) for e, t in zip(assumed, texts)]
    for params in samples:
        env = _env(lambda: base_env(m, params))
        for run, text in zip(runs, texts):
            if env is None or not _condition(_value(run, env, "--assume", text, params), text):
                break


def check_bound(m: Model, bound: ast.Expr, text: str, assumed: tuple[ast.Expr, ...], samples) -> None:
    """The `--memory` bound (parsed, and as typed) on every rank of each setting of `samples` the
    requires and the assumptions admit: a number, with no error in computing it."""
    names = {*m.params, *(x.name for x in m.globals), m.rank_var, *(x.name for x in rank_lets(m))}
    run = _compiled(bound, "--memory", text, m, names)
    for params in (p for p in samples if inside(m, assumed, p)):
        ranks = _env(lambda: evaluate(m.ranks, base_env(m, params), m.functions))
        for r in range(ranks or 0):
            env = _env(lambda: rank_env(m, params, r))
            if env is not None and type(_value(run, env, "--memory", text, params, r)) is bool:
                raise SchedcError("type", f"--memory {text!r}: expected a number of live activations, got a "
                                  "condition", where="--memory")


def _compiled(e: ast.Expr, flag: str, text: str, m: Model, names: set[str]):
    """`e` compiled against the names it may use; an unknown name or function is a usage error."""
    try:
        return compile_expr(e, Names(m.functions, names))
    except SchedcError as exc:
        raise _error(exc, flag, text, "", (f"{flag} may use {', '.join(sorted(names))}",)) from None


def _value(run, env: dict, flag: str, text: str, params: dict, rank: int | None = None):
    """The value of a compiled expression; an error computing it names the setting (and rank)."""
    try:
        return run(env)
    except SchedcError as exc:
        where = f" at {setting_text(params)}" + (f", rank {rank}" if rank is not None else "")
        raise _error(exc, flag, text, where) from None


def _condition(value, text: str) -> bool:
    """An assumption's value, which must be a condition (as a `require`'s must)."""
    if type(value) is not bool:
        raise SchedcError("type", f"--assume {text!r}: expected a condition such as 'P >= 2', got a number",
                          where="--assume")
    return value


def _env(make):
    """`make()`, or None where the schedule itself cannot be evaluated (its own error, found later)."""
    try:
        return make()
    except Stop:
        return None


def _error(exc: SchedcError, flag: str, text: str, where: str, notes: tuple[str, ...] = ()) -> SchedcError:
    """The evaluator's error about an expression from the command line, told in its terms."""
    d = exc.diagnostics[0]
    return SchedcError(d.code, f"{flag} {text!r}{where}: {d.message}", notes=(*d.notes, *notes), where=flag)
