"""The one evaluator of the language's expressions: integers, `+ - * // %` (floor division and
modulo, as in Python), `min max abs`, comparisons, `and or not`, `C ? A : B` and `let` functions.

`compile_expr` turns an expression into a closure once; the compiler runs it per rank, and the
prover evaluates its assumptions, bounds and constant folding with the same closures (its concrete
instances are the compiler's own expansion), so both mean one thing.
"""
from __future__ import annotations

import difflib
from typing import Callable, Protocol

from . import syntax as ast
from .errors import SchedcError
from .ir import Op
from .span import span_text

MAX_INT = 2**62
# the built-in functions over their evaluated arguments (a tuple): min and max of one value are it
FUNCTIONS = {"min": min, "max": max, "abs": lambda args: abs(args[0])}
ACTION_NAMES = {op.value for op in Op}

Env = dict
Eval = Callable[[Env], object]


class Scope(Protocol):
    """What names an expression may use: `lookup(name)` is truthy for a defined value name,
    `function(name)` gives `(params, compiled body, span)` of a `let` function or None."""

    def lookup(self, name: str): ...

    def function(self, name: str): ...

    def all_names(self) -> list[str]: ...


def compile_expr(e: ast.Expr, scope: Scope) -> Eval:
    """`e` as a closure over an environment (a dict of names to values); names are resolved now,
    against `scope`, so an unknown name is an error even on a path never taken."""
    if isinstance(e, ast.Num):
        v = e.value
        if abs(v) > MAX_INT:
            raise SchedcError("too-large", f"the number {str(v)[:12]}... is beyond ±2^62", e.span)
        return lambda env: v
    if isinstance(e, ast.Var):
        if not scope.lookup(e.name):
            raise SchedcError("unknown-name", f"unknown name '{e.name}'"
                              f"{did_you_mean(e.name, scope.all_names())}", e.span)
        name = e.name
        return lambda env: env[name]
    if isinstance(e, ast.Ternary):
        c, a, b = (compile_expr(x, scope) for x in (e.cond, e.then, e.orelse))
        span = e.cond.span
        return lambda env: a(env) if as_truth(c(env), span) else b(env)
    if isinstance(e, ast.UnaryOp):
        x = compile_expr(e.operand, scope)
        span = e.operand.span
        if e.op == "not":
            return lambda env: not as_truth(x(env), span)
        return lambda env: -as_number(x(env), span)
    if isinstance(e, ast.Call) and scope.function(e.name) is not None:
        return _user_call(e, scope)
    if isinstance(e, ast.Call):
        if e.name not in FUNCTIONS:
            if e.name in ACTION_NAMES or e.name in ("group", "overlap"):
                msg = f"{e.name}(...) is an action; it can only stand as a statement"
            else:
                msg = f"unknown function '{e.name}'{did_you_mean(e.name, list(FUNCTIONS))}; " \
                      "functions are: min, max, abs"
            raise SchedcError("unknown-function", msg, e.name_span)
        fn, unary = FUNCTIONS[e.name], e.name == "abs"
        if (unary and len(e.args) != 1) or not e.args:
            raise SchedcError("arity", f"{e.name} takes {'one argument' if unary else 'arguments'}",
                              e.span)
        args = [(compile_expr(a, scope), a.span) for a in e.args]
        return lambda env: fn(tuple(as_number(f(env), s) for f, s in args))
    if isinstance(e, ast.BinOp):
        return _binop(e, scope)
    raise AssertionError(f"unknown expression node {e!r}")


def _user_call(e: ast.Call, scope: Scope) -> Eval:
    params, body, span = scope.function(e.name)
    if len(e.args) != len(params):
        raise SchedcError("arity", f"{e.name} takes {len(params)} argument(s) ({', '.join(params)}), "
                          f"got {len(e.args)}", e.span, [f"defined at {span}"])
    args = [compile_expr(a, scope) for a in e.args]
    missing = object()

    def call(env):
        values = [f(env) for f in args]
        saved = [env.get(p, missing) for p in params]
        for p, v in zip(params, values):
            env[p] = v
        try:
            return body(env)
        finally:
            for p, old in zip(params, saved):
                if old is missing:
                    del env[p]
                else:
                    env[p] = old
    return call


MEMO_SIZE = 4096  # entries kept per memoized function body before its cache starts again
MAX_CALL_NESTING = 500  # a `let` function's expression nested at most this deep, through the functions it calls


def compile_function(params: tuple[str, ...], body: ast.Expr, scope: Scope) -> Eval:
    """A `let` function's body, compiled once for every call site. A body that calls another `let`
    function is memoized on the values of the names it reads (its parameters and outer names), so
    a chain of functions each calling the previous one twice costs one evaluation per function,
    not 2^n; a body without such calls is cheap and runs as is."""
    nesting = _nesting(body, scope)
    if nesting > MAX_CALL_NESTING:
        raise SchedcError("too-large", f"through the `let` functions it calls, this expression nests {nesting} "
                          f"levels deep; at most {MAX_CALL_NESTING}", body.span)
    run = compile_expr(body, scope)
    outer = tuple(sorted(_reads(body, scope) - set(params)))
    if _calls_function(body, scope):
        run = _memoized(run, tuple(params) + outer)
    run.outer = outer  # what a caller's memo key must include of this function
    run.nesting = nesting  # how deep its evaluation nests, through the functions it calls
    return run


def _nesting(e: ast.Expr, scope: Scope) -> int:
    """How many levels an expression's evaluation nests: its own tree, and below a call of a `let`
    function, that function's nesting (its arguments are evaluated before, not inside, the call)."""
    deepest, stack = 0, [(e, 1)]
    while stack:
        n, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(n, ast.Call) and scope.function(n.name) is not None:
            deepest = max(deepest, d + scope.function(n.name)[1].nesting)
        stack.extend((c, d + 1) for c in _children(n))
    return deepest


def _children(n) -> tuple:
    if isinstance(n, ast.BinOp):
        return (n.left, n.right)
    if isinstance(n, ast.UnaryOp):
        return (n.operand,)
    if isinstance(n, ast.Ternary):
        return (n.cond, n.then, n.orelse)
    if isinstance(n, ast.Call):
        return n.args
    return ()


def _memoized(run: Eval, reads: tuple[str, ...]) -> Eval:
    """`run`, evaluated once per distinct value of the names it `reads` (at most MEMO_SIZE kept)."""
    cache: dict = {}

    def memoized(env):
        key = tuple((type(v), v) for v in map(env.get, reads))  # 1, 1.0 and True differ here
        hit = cache.get(key, cache)
        if hit is cache:
            if len(cache) >= MEMO_SIZE:
                cache.clear()
            hit = cache[key] = run(env)
        return hit
    return memoized


def _calls_function(e: ast.Expr, scope: Scope) -> bool:
    """Whether `e` calls a `let` function."""
    return any(isinstance(n, ast.Call) and scope.function(n.name) is not None for n in ast.walk(e))


def _reads(e: ast.Expr, scope: Scope) -> set[str]:
    """The names `e` reads from its environment, through the `let` functions it calls too (a called
    function's own parameters are bound by the call, so only its outer names count)."""
    out: set[str] = set()
    for n in ast.walk(e):
        if isinstance(n, ast.Var):
            out.add(n.name)
        elif isinstance(n, ast.Call) and scope.function(n.name) is not None:
            out |= set(scope.function(n.name)[1].outer)
    return out


def _binop(e: ast.BinOp, scope: Scope) -> Eval:
    lf, rf = compile_expr(e.left, scope), compile_expr(e.right, scope)
    ls, rs, op, span = e.left.span, e.right.span, e.op, e.span
    if op == "and":
        return lambda env: as_truth(lf(env), ls) and as_truth(rf(env), rs)
    if op == "or":
        return lambda env: as_truth(lf(env), ls) or as_truth(rf(env), rs)
    compare = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
               "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
    if op in compare:
        f = compare[op]
        return lambda env: f(as_number(lf(env), ls), as_number(rf(env), rs))
    if op in ("//", "%"):
        def div(env):
            a, b = as_int(lf(env), ls), as_int(rf(env), rs)
            if b == 0:
                raise SchedcError("division-by-zero", f"division by zero ('{span_text(e.right.span)}' is 0)", rs)
            return a // b if op == "//" else a % b
        return div
    arith = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}[op]

    def run(env):
        v = arith(as_number(lf(env), ls), as_number(rf(env), rs))
        if abs(v) > MAX_INT:
            raise SchedcError("too-large", f"integer overflow: {span_text(span)} is beyond ±2^62", span)
        return v
    return run


# ---- value checks ----
def as_number(v, span):
    if type(v) not in (int, float):
        raise SchedcError("type", "expected a number, got a condition", span)
    return v


def as_int(v, span) -> int:
    if type(v) is not int:
        raise SchedcError("type", f"expected an integer, got {_kind(v)}", span)
    return v


def as_nonneg(v, span, what) -> int:
    v = as_int(v, span)
    if v < 0:
        raise SchedcError("range", f"{what} index is negative ({v})", span)
    return v


def as_truth(v, span) -> bool:
    if type(v) is bool:
        return v
    if type(v) is int:
        return v != 0
    raise SchedcError("type", f"expected a condition, got {_kind(v)}", span)


def _kind(v) -> str:
    return {bool: "a condition", float: "a decimal number", int: "an integer"}.get(type(v), type(v).__name__)


def did_you_mean(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""
