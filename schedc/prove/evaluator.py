"""The prover's evaluator: an expression's value at concrete parameters, by the compiler's own
evaluator (schedc/expr.py), with the model's `let` functions in scope (`Names`); what it cannot
evaluate (division by zero, overflow, a wrong type) is `Stop`.
"""
from __future__ import annotations

from .. import syntax as ast
from ..errors import SchedcError
from ..expr import compile_expr, compile_function


class Stop(Exception):
    """A size is out of the concrete evaluator's reach (division by zero, too many instances)."""


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
            inner = self if self.names is None else Names(self.functions)  # resolved with the schedule
            # in definition order, up to this one: a function calls only those defined before it,
            # so each finds its callees compiled (no recursion, however long the chain)
            for other, (params, body) in self.functions.items():
                if other not in inner.compiled:
                    inner.compiled[other] = tuple(params), compile_function(tuple(params), body, inner), None
                if other == name:
                    break
            self.compiled[name] = inner.compiled[name]
        return self.compiled[name]

    def all_names(self) -> list[str]:
        return sorted(self.names or ())
