"""The one evaluator of the language's expressions: integers, `+ - * // %` (floor division and
modulo, as in Python), `min max abs`, comparisons, `and or not`, `C ? A : B` and `let` functions.

An expression is translated once into Python source (`Emitter`), which Python compiles:
`compile_expr` gives a function of an environment (a dict of names to values), and the compiler
writes the same source into the code it generates for a schedule's rank bodies, where names are
local variables (schedc/compiler.py). The prover evaluates its assumptions, bounds and constant
folding with `compile_expr` (its concrete instances are the compiler's own expansion), so both mean
one thing. The emitter infers each value's type (an integer, a number, a condition) from the names
it reads; a number where a condition is expected is refused as it is compiled (as the prover refuses
it); a value is checked at run time only where its type is not known, by the functions at the end of
this module, which give every type, overflow and division error its message.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator, NoReturn, Protocol, Sequence

from . import syntax as ast
from .errors import SchedcError, closest
from .ir import Op
from .span import Span, span_text

MAX_INT = 2**62
# the built-in functions over their evaluated arguments (a tuple): min and max of one value are it
FUNCTIONS = {"min": min, "max": max, "abs": lambda args: abs(args[0])}
ACTION_NAMES = {op.value for op in Op}
COMPOUND_NAMES = ("group", "overlap")  # the actions of several parts: `group(...)`, `overlap(...)`

Env = dict
Eval = Callable[[Env], object]

# The types the emitter infers: a value of type INT is an int, NUM an int or a float, BOOL a bool
# (a condition); ANY is not known until run time (a name read from an environment).
INT, NUM, BOOL, ANY = "int", "number", "condition", "any"
SPILL_DEPTH = 32  # an expression nested deeper is written as a function of its own (Python's parser nests 200)
GENERATED = "<schedc generated code>"  # the file name of generated code (in tracebacks and profiles)


class Scope(Protocol):
    """What names an expression may use: `lookup(name)` is truthy for a defined value name,
    `function(name)` gives `(params, Function, span)` of a `let` function or None. A scope may also
    say a name's type (`type_of`, else ANY)."""

    def lookup(self, name: str): ...

    def function(self, name: str): ...

    def all_names(self) -> list[str]: ...


def compile_expr(e: ast.Expr, scope: Scope) -> Eval:
    """`e` as a function of an environment (a dict of names to values); names are resolved now,
    against `scope`, so an unknown name is an error even on a path never taken. The function's
    `type` is the type the emitter inferred for its value."""
    module = Module()
    functions = Functions(module, local=False)
    emitter = Emitter(module, Block(), local=False, functions=functions)
    src, kind = emitter.expr(e, scope)
    if isinstance(e, ast.Var):
        run = _reader(e.name)  # nothing to compile
    elif isinstance(e, ast.Num):
        run = _constant(e.value)
    else:
        emitter.block.line(f"return {src}")
        run = module.function(emitter.block, "expression", "env", before=functions.finish())
        if calls_memoized(e, scope):
            run = _metered(run, e.span)
    run.type, run.steps = kind, emitter.steps  # type: ignore[attr-defined]  # (its callers read them)
    return run


def _metered(inner: Eval, span: Span) -> Eval:
    """`inner`, which calls memoized `let` functions, run on the budget of the evaluation it is
    part of (an expansion), or else on a budget of its own; a budget run out is reported at `span`."""
    def run(env):
        if METER.active:
            METER.at = span
            return inner(env)
        with metered():
            METER.at = span
            return inner(env)
    return run


def _reader(name: str) -> Eval:
    def run(env):
        return env[name]
    return run


def _constant(value) -> Eval:
    def run(env):
        return value
    return run


# ---- generated code ----
class Module:
    """One generated Python module: its globals (the check functions, and the values the source
    names: spans, memo tables) and fresh names for what it defines."""

    def __init__(self):
        self.globals: dict = dict(RUNTIME)
        self._names: dict[int, str] = {}  # id of a value given to `const` -> its name
        self._count = 0

    def fresh(self, hint: str) -> str:
        """A name no other in this module has."""
        self._count += 1
        return f"{hint}{self._count}"

    def const(self, value, hint: str = "_c") -> str:
        """A global name holding `value` (the same name for the same object)."""
        name = self._names.get(id(value))
        if name is None:
            name = self._names[id(value)] = self.fresh(hint)
            self.globals[name] = value
        return name

    def function(self, block: "Block", hint: str, *params: str, before: Sequence[str] = ()):
        """`block` made a function of `params` and compiled in this module (after the lines
        `before`: functions it calls); the function."""
        name = self.fresh(f"_{hint}")
        lines = [*before, *block.function(f"{name}({', '.join(params)})")]
        exec(compile("\n".join(lines) + "\n", GENERATED, "exec"), self.globals)
        return self.globals[name]


class Block:
    """The body of one generated Python function: the functions nested in it first (`defs`, each a
    header and its block: expressions too deep to write inline, `let` functions, deep statements),
    then its lines. Rendered only at the end (`function`), when every nested function is known."""

    def __init__(self):
        self.defs: list[tuple[str, Block]] = []
        self.lines: list[str] = []
        self.indent = 0
        self.loops = 0  # `for` loops open at the current line (Python nests at most 20 blocks)

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def nest(self, header: str) -> "Block":
        """A new function `def header:` nested in this one (it reads this one's variables)."""
        block = Block()
        self.defs.append((header, block))
        return block

    def function(self, header: str) -> list[str]:
        """The lines of `def header:` with this block as its body."""
        body = [line for h, b in self.defs for line in b.function(h)] + self.lines
        return [f"def {header}:"] + ["    " + line for line in body or ["pass"]]


class Emitter:
    """Python source of the language's expressions, written into `block` of `module`. `local`:
    names are Python variables `v_NAME` (the compiler's rank bodies), otherwise read from the
    dict `env`. `functions` makes the code of the `let` functions called (None: only check)."""

    def __init__(self, module: Module, block: Block, local: bool, functions: "Functions | None" = None):
        self.module, self.block, self.local, self.functions = module, block, local, functions
        self.steps = 0  # the steps one evaluation of what this emitter wrote is charged (see `Meter`)

    def span(self, span: Span) -> str:
        return self.module.const(span, "_s")

    def expr(self, e: ast.Expr, scope: Scope, depth: int = 0) -> tuple[str, str]:  # noqa: C901
        """(Python source, type) of `e`; errors that need no values (names, arity) raised now."""
        if depth >= SPILL_DEPTH:
            return self._spilled(e, scope)
        self.steps += 1
        if isinstance(e, ast.Num):
            if abs(e.value) > MAX_INT:
                raise SchedcError("too-large", f"the number {str(e.value)[:12]}... is beyond ±2^62", e.span)
            return repr(e.value), (INT if type(e.value) is int else NUM)
        if isinstance(e, ast.Var):
            if not scope.lookup(e.name):
                raise SchedcError("unknown-name", f"unknown name '{e.name}'"
                                  f"{did_you_mean(e.name, scope.all_names())}", e.span)
            return self.name(e.name, scope)
        if isinstance(e, ast.Ternary):
            cond = self.condition(e.cond, scope, depth + 1)
            (a, ta), (b, tb) = (self.expr(x, scope, depth + 1) for x in (e.then, e.orelse))
            return f"({a} if {cond} else {b})", _join(ta, tb)
        if isinstance(e, ast.UnaryOp):
            if e.op == "not":
                return f"(not {self.condition(e.operand, scope, depth + 1)})", BOOL
            src, kind = self.expr(e.operand, scope, depth + 1)
            return f"(-{self.number(src, kind, e.operand.span)})", (INT if kind == INT else NUM)
        if isinstance(e, ast.Call) and scope.function(e.name) is not None:
            return self._user_call(e, scope, depth)
        if isinstance(e, ast.Call):
            return self._builtin(e, scope, depth)
        if isinstance(e, ast.BinOp):
            return self._binop(e, scope, depth)
        raise AssertionError(f"unknown expression node {e!r}")

    def name(self, name: str, scope: Scope) -> tuple[str, str]:
        """How the code reads a defined name, and its type."""
        kind = scope.bound(name) if isinstance(scope, Params) else None
        if kind is not None:  # a parameter of the function whose body this is, or one it was passed
            return f"v_{name}", kind
        kind = scope.type_of(name) if hasattr(scope, "type_of") else None
        return (f"v_{name}" if self.local else f"env[{name!r}]"), kind or ANY

    # ---- the checks, where the type does not settle them ----
    def number(self, src: str, kind: str, span: Span) -> str:
        return src if kind in (INT, NUM) else self.check(f"as_number({src}, {self.span(span)})")

    def integer(self, src: str, kind: str, span: Span) -> str:
        return src if kind == INT else self.check(f"as_int({src}, {self.span(span)})")

    def condition(self, e: ast.Expr, scope: Scope, depth: int = 0) -> str:
        """`e` as a bool: a condition (of `if`, `elif`, `?:`, `and`, `or`, `not`). A number is a
        `type` error, raised now when the type says so (as the prover refuses it), else when run."""
        src, kind = self.expr(e, scope, depth)
        if kind == BOOL:
            return src
        if kind in (INT, NUM):
            not_a_condition("an integer" if kind == INT else "a number", e.span)
        return self.check(f"as_truth({src}, {self.span(e.span)})")

    def check(self, call: str) -> str:
        """`call`, a call of a check of this module, counted (a Python call costs several operations)."""
        self.steps += CHECK_STEPS
        return call

    # ---- the nodes ----
    def _builtin(self, e: ast.Call, scope: Scope, depth: int) -> tuple[str, str]:
        if e.name not in FUNCTIONS:
            if e.name in ACTION_NAMES or e.name in COMPOUND_NAMES:
                msg = f"{e.name}(...) is an action; it can only stand as a statement"
            else:
                msg = f"unknown function '{e.name}'{did_you_mean(e.name, list(FUNCTIONS))}; " \
                      "functions are: min, max, abs"
            raise SchedcError("unknown-function", msg, e.name_span)
        unary = e.name == "abs"
        if (unary and len(e.args) != 1) or not e.args:
            raise SchedcError("arity", f"{e.name} takes {'one argument' if unary else 'arguments'}", e.span)
        args = [self.expr(a, scope, depth + 1) for a in e.args]
        values = [self.number(src, kind, a.span) for (src, kind), a in zip(args, e.args)]
        kind = INT if all(k == INT for _, k in args) else NUM
        self.steps += len(values)  # (each argument passed costs about an operation more)
        if unary or len(values) > 1:
            return self.check(f"{e.name}({', '.join(values)})"), kind
        return values[0], kind  # min and max of one value are it

    def _binop(self, e: ast.BinOp, scope: Scope, depth: int) -> tuple[str, str]:
        op, ls, rs = e.op, e.left.span, e.right.span
        if op in ("and", "or"):
            return f"({self.condition(e.left, scope, depth + 1)} {op} {self.condition(e.right, scope, depth + 1)})", BOOL
        (left, lk), (right, rk) = self.expr(e.left, scope, depth + 1), self.expr(e.right, scope, depth + 1)
        if op in ("==", "!=", "<", "<=", ">", ">="):
            return f"({self.number(left, lk, ls)} {op} {self.number(right, rk, rs)})", BOOL
        if op in ("//", "%"):
            left, right = self.integer(left, lk, ls), self.integer(right, rk, rs)
            if isinstance(e.right, ast.Num) and e.right.value != 0 and rk == INT:
                return f"({left} {op} {right})", INT
            if _pure(e.left, lk) and _pure(e.right, rk):  # nothing to evaluate first: test the divisor inline
                return f"({left} {op} {right} if {right} else zero_division({self.span(rs)}))", INT
            return self.check(f"{'floordiv' if op == '//' else 'modulo'}({left}, {right}, {self.span(rs)})"), INT
        value = f"{self.number(left, lk, ls)} {op} {self.number(right, rk, rs)}"
        # the operation and the test of its result's range (slower on decimals)
        self.steps += (ARITH_STEPS if lk == rk == INT else DECIMAL_STEPS) - 1
        return (f"(_t if {-MAX_INT} <= (_t := {value}) <= {MAX_INT} else overflow(_t, {self.span(e.span)}))",
                INT if lk == rk == INT else NUM)

    def _user_call(self, e: ast.Call, scope: Scope, depth: int) -> tuple[str, str]:
        params, fn, span = scope.function(e.name)
        if len(e.args) != len(params):
            raise SchedcError("arity", f"{e.name} takes {len(params)} argument(s) ({', '.join(params)}), "
                              f"got {len(e.args)}", e.span, [f"defined at {span}"])
        args = [self.expr(a, scope, depth + 1) for a in e.args]
        types = tuple(kind for _, kind in args)
        passed = scope.passed(fn) if isinstance(scope, Params) else ()
        values = ([] if self.local else ["env"]) + [src for src, _ in args] + [f"v_{n}" for n, _ in passed]
        name = self.functions.variant(fn, types, passed) if self.functions is not None else "_"
        self.steps += CALL_STEPS + (0 if fn.memo else fn.cost(types, passed))  # a memoized one charges its own
        return f"{name}({', '.join(values)})", fn.result_type(types, passed)

    def _spilled(self, e: ast.Expr, scope: Scope) -> tuple[str, str]:
        """`e` written as a function nested in this one (it reads the same names), and called."""
        name = self.module.fresh("_e")
        inner = Emitter(self.module, self.block.nest(f"{name}()"), self.local, self.functions)
        src, kind = inner.expr(e, scope)
        inner.block.line(f"return {src}")
        self.steps += inner.steps + CHECK_STEPS
        return f"{name}()", kind


def _pure(e: ast.Expr, kind: str) -> bool:
    """An integer whose evaluation cannot fail or do anything: a literal or a name."""
    return kind == INT and isinstance(e, (ast.Num, ast.Var))


def _join(a: str, b: str) -> str:
    """The type of a value that is of type a or of type b."""
    if a == b:
        return a
    return NUM if {a, b} <= {INT, NUM} else ANY


# ---- `let` functions ----
MEMO_SIZE = 4096  # entries kept per memoized function body before its cache starts again
MAX_CALL_NESTING = 500  # a `let` function's expression nested at most this deep, through the functions it calls


class Params:
    """The names of a `let` function's body: its parameters, with the types of one call's
    arguments, then the names where the function was defined. A call sees the parameters of the
    calls it is inside (the language's functions read their outer names as the call finds them:
    `let g(m) = f(0)` runs f with g's m), so a body may also be `passed` an outer name it reads,
    with its type, from the function that calls it."""

    def __init__(self, params: tuple[str, ...], types: tuple[str, ...], parent: Scope,
                 passed: tuple[tuple[str, str], ...] = ()):
        self.types, self.parent = {**dict(passed), **dict(zip(params, types))}, parent

    def bound(self, name: str) -> str | None:
        """The type of a name the call binds (a parameter, or a name passed), or None."""
        return self.types.get(name)

    def passed(self, fn: "Function") -> tuple[tuple[str, str], ...]:
        """What a call of `fn` from here passes it: the outer names it reads that this call binds."""
        return tuple((n, self.types[n]) for n in fn.outer if n in self.types)

    def lookup(self, name: str):
        return name in self.types or self.parent.lookup(name)

    def function(self, name: str):
        return self.parent.function(name)

    def all_names(self) -> list[str]:
        return list(self.types) + self.parent.all_names()

    def type_of(self, name: str) -> str | None:
        return self.parent.type_of(name) if hasattr(self.parent, "type_of") else None


class Function:
    """A `let` function `f(a, b) = E`, pure and not recursive. Its body is checked when it is
    defined; its code is made per types of the arguments it is called with (so the checks its
    parameters need are known), by the `Functions` of the code that calls it. A body that calls
    another `let` function is memoized on the values of the names it reads (its parameters and
    outer names), so a chain of functions each calling the previous one twice costs one evaluation
    per function, not 2^n."""

    def __init__(self, params: tuple[str, ...], body: ast.Expr, scope: Scope):
        self.params, self.body, self.scope = tuple(params), body, scope
        self.nesting = _nesting(body, scope)
        if self.nesting > MAX_CALL_NESTING:
            raise SchedcError("too-large", f"through the `let` functions it calls, this expression nests "
                              f"{self.nesting} levels deep; at most {MAX_CALL_NESTING}", body.span)
        self.outer = tuple(sorted(_reads(body, scope) - set(params)))  # what a caller's memo key must include
        self.memo = _calls_function(body, scope)
        self._costs: dict[tuple, int] = {}
        # the result's type for arguments of unknown types (an upper bound for any), of integers, and
        # when it is passed its outer names too (all of unknown types: an upper bound)
        unknown = (ANY,) * len(self.params)
        self._types = {(types, ()): self._type(types) for types in (unknown, (INT,) * len(self.params))}
        self._passed = self._type(unknown, tuple((n, ANY) for n in self.outer))

    def result_type(self, types: tuple[str, ...], passed: tuple[tuple[str, str], ...] = ()) -> str:
        """The type of the value for arguments of these types (found without following calls)."""
        if passed:
            return self._passed
        return self._types.get((types, ())) or self._types[((ANY,) * len(self.params), ())]

    def cost(self, types: tuple[str, ...], passed: tuple[tuple[str, str], ...]) -> int:
        """The steps of one evaluation of the body for arguments of these types (see `Meter`)."""
        steps = self._costs.get((types, passed))
        if steps is None:
            emitter = Emitter(Module(), Block(), local=True)
            emitter.expr(self.body, Params(self.params, types, self.scope, passed))
            steps = self._costs[(types, passed)] = emitter.steps
        return steps

    def _type(self, types: tuple[str, ...], passed: tuple[tuple[str, str], ...] = ()) -> str:
        try:
            return Emitter(Module(), Block(), local=True).expr(self.body, Params(self.params, types, self.scope, passed))[1]
        except SchedcError as err:  # (types guessed ahead of any call: `c ? a : b` is not for an integer c)
            if err.code != "type":
                raise
            return ANY

    def write(self, emitter: Emitter, name: str, types: tuple[str, ...], passed: tuple[tuple[str, str], ...]) -> None:
        """`def name(...)`, the code for arguments of `types` and the outer names `passed`, written
        by `emitter` (its mode, its module, the function's empty block): `(v_a, ...)`, or
        `(env, v_a, ...)` reading an environment."""
        scope = Params(self.params, types, self.scope, passed)
        src, _ = emitter.expr(self.body, scope)
        block = emitter.block
        if not self.memo:
            block.line(f"return {src}")
            return
        reads = [emitter.name(n, scope) if scope.bound(n) or emitter.local else (f"env.get({n!r})", ANY)
                 for n in self.params + self.outer]
        memo = emitter.module.const({}, "_memo")
        key = ", ".join(value if kind in (INT, BOOL) else f"type({value}), {value}" for value, kind in reads)
        block.line(f"_key = ({key},)")
        block.line(f"_hit = {memo}.get(_key, {memo})")
        block.line(f"if _hit is {memo}:")
        block.line(f"    _M.left -= {emitter.steps + MISS_STEPS}")  # a miss evaluates the body: counted
        block.line(f"    if _M.left < 0: out_of_steps({emitter.span(self.body.span)})")
        block.line(f"    if not {memo}: _M.filled.append({memo})")  # (emptied when the next budget starts)
        block.line(f"    if len({memo}) >= {MEMO_SIZE}:")
        block.line(f"        {memo}.clear()")
        block.line(f"    _hit = {memo}[_key] = {src}")
        block.line("return _hit")

    def header(self, name: str, local: bool, passed: tuple[tuple[str, str], ...]) -> str:
        names = [f"v_{p}" for p in self.params] + [f"v_{n}" for n, _ in passed]
        return f"{name}({'' if local else 'env, '}{', '.join(names)})"


class Functions:
    """The `let` functions one piece of generated code calls: the code of each for each type of
    arguments, named when first called and written by `finish` (one after another, so a chain of
    functions each calling the previous one is not written by recursion). In local mode a
    function's code is nested in the block of its `let` (`define`), whose variables it reads; in
    an environment's mode it is a function of the module, before the code that calls it."""

    def __init__(self, module: Module, local: bool):
        self.module, self.local = module, local
        self.homes: dict[int, Block] = {}  # id(Function) -> the block of its `let` (local mode)
        self.top = Block()  # the module's own functions (environment mode)
        self.made: dict[tuple, str] = {}
        self.pending: list[tuple] = []

    def define(self, fn: Function, block: Block) -> None:
        self.homes[id(fn)] = block

    def variant(self, fn: Function, types: tuple[str, ...], passed: tuple[tuple[str, str], ...]) -> str:
        """The name of fn's code for arguments of `types` and outer names `passed` (written by `finish`)."""
        key = (id(fn), types, passed)
        name = self.made.get(key)
        if name is None:
            name = self.made[key] = self.module.fresh("f_")
            self.pending.append((fn, types, passed, name))
        return name

    def finish(self) -> list[str]:
        """Write the code of every function called (and of those they call); in an environment's
        mode, the lines of the module's functions."""
        while self.pending:
            fn, types, passed, name = self.pending.pop()
            home = self.homes[id(fn)] if self.local else self.top
            block = home.nest(fn.header(name, self.local, passed))
            fn.write(Emitter(self.module, block, self.local, self), name, types, passed)
        return [line for h, b in self.top.defs for line in b.function(h)]


def compile_function(params: tuple[str, ...], body: ast.Expr, scope: Scope) -> Function:
    """A `let` function, its body checked once for every call site (an unknown name, a call of the
    wrong arity, a nesting too deep are errors where it is defined)."""
    return Function(params, body, scope)


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


def calls_memoized(e: ast.Expr, scope: Scope) -> bool:
    """Whether `e` calls a memoized `let` function (one whose evaluations are counted as they run)."""
    return any(isinstance(n, ast.Call) and (f := scope.function(n.name)) is not None and f[1].memo
               for n in ast.walk(e))


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


# ---- the evaluation budget ----
MAX_STEPS = 500_000_000  # steps one expansion (or one evaluation outside an expansion) may take
# Steps are about 10 ns of work each: an operation, value or name is one; a Python call more
CHECK_STEPS = 5  # a call of a check or of min, max, abs
ARITH_STEPS = 2  # + - * and the test that the result is within ±2^62
DECIMAL_STEPS = 6  # ... when an operand may be a decimal
CALL_STEPS = 5  # a call of a `let` function, on top of its body (and a memoized one's key and lookup)
MISS_STEPS = 80  # a memoized `let` function's body evaluated: storing the value, on top of the body's steps


class Meter(threading.local):
    """The steps the evaluation under way on this thread may still take (`left`), and the
    statement or expression it is evaluating (`at`, where a budget run out is reported). Steps are
    counted in units of one operation of an expression: a loop is charged its iterations times the
    steps of its body when it starts, a memoized `let` function its body's steps at each miss.
    `filled`: the memo tables written since the budget started (emptied when the next one starts,
    so what an evaluation is charged does not depend on what ran before it)."""

    active = False
    left = 0
    at: Span | None = None
    filled: list | None = None


METER = Meter()


@contextmanager
def metered() -> Iterator[None]:
    """A budget of MAX_STEPS for what runs inside, unless one is already running (then that one)."""
    if METER.active:
        yield
        return
    for memo in METER.filled or ():
        memo.clear()
    METER.active, METER.left, METER.at, METER.filled = True, MAX_STEPS, None, []
    try:
        yield
    finally:
        METER.active, METER.at = False, None


def charge(steps: int, span: Span) -> None:
    """Count `steps` against the budget under way; past it, a `too-large` error at `span`."""
    METER.left -= steps
    if METER.left < 0:
        too_much_work(span)


def out_of_steps(span: Span):
    """The budget ran out in a `let` function (body at `span`): reported at the statement that called it."""
    too_much_work(METER.at or span)


def too_much_work(span: Span):
    raise SchedcError("too-large", f"evaluating this takes more than {MAX_STEPS:,} steps (loop iterations "
                      "times the operations of their bodies, and `let` function evaluations); use smaller "
                      "parameters or fewer chained functions", span)


# ---- value checks (the generated code calls these where a type is not known) ----
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
    not_a_condition(_kind(v), span)


def not_a_condition(kind: str, span: Span) -> NoReturn:
    """The `type` error of a value of `kind` ("an integer") where a condition is expected."""
    text = span_text(span)
    hint = f"'{text} != 0'" if 0 < len(text) <= 30 else "'x != 0'"
    raise SchedcError("type", f"expected a condition, got {kind}; write a comparison, e.g. {hint}", span)


def overflow(v, span):
    """`v`, the result of + - or *, unless it is beyond ±2^62 (an error at the operation's span)."""
    if abs(v) > MAX_INT:
        raise SchedcError("too-large", f"integer overflow: {span_text(span)} is beyond ±2^62", span)
    return v


def zero_division(span):
    raise SchedcError("division-by-zero", f"division by zero ('{span_text(span)}' is 0)", span)


def floordiv(a: int, b: int, span) -> int:
    """`a // b`; `span` is the divisor's."""
    return a // b if b else zero_division(span)


def modulo(a: int, b: int, span) -> int:
    return a % b if b else zero_division(span)


def _kind(v) -> str:
    return {bool: "a condition", float: "a decimal number", int: "an integer"}.get(type(v), type(v).__name__)


# what generated code may call, by name (and `_M`, the evaluation's step meter)
RUNTIME: dict[str, object] = {f.__name__: f for f in (as_number, as_int, as_nonneg, as_truth, overflow, zero_division,
                                                      floordiv, modulo, out_of_steps, too_much_work)}
RUNTIME["_M"] = METER


def did_you_mean(name: str, options) -> str:
    close = closest(name, options)
    return f"; did you mean '{close}'?" if close is not None else ""
