"""schedc's one door to Z3: the `z3` handle (imported on the first query, never by `import schedc`),
a fresh context per query or encoding, solvers with the fixed seed and their per-query timeout, and
the one vocabulary of answers: `Proved`, `Refuted` (with what refutes it) or `Unknown` (with why).
"""
from __future__ import annotations

from dataclasses import dataclass, field

SEED = 0


class _Z3:
    """The z3 module, imported when a name of it is first asked for (each then kept, as a module's)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):  # introspection (copy, pickle, doctest) is no query: load nothing
            raise AttributeError(name)
        import z3
        value = getattr(z3, name)
        setattr(self, name, value)
        return value


z3 = _Z3()


@dataclass(frozen=True)
class Proved:
    """The claim holds; `witness` shows it when the query has one (synthesis: each rank's order)."""

    witness: object = None


@dataclass(frozen=True)
class Refuted:
    """The claim fails: at the parameter values `params`, with `detail` (named values there) and
    `least` (False: asked for the smallest, but time ran out before it was shown smallest); `why`,
    in words, when it fails without a model; `core`, what cannot all hold, for an unsat core."""

    params: dict = field(default_factory=dict)
    detail: dict = field(default_factory=dict)
    least: bool = True
    why: str = ""
    core: tuple = ()


@dataclass(frozen=True)
class Unknown:
    """No answer (the solver gave up, ran out of time, or the query is beyond it): never "fine"."""

    reason: str


Result = Proved | Refuted | Unknown


def context():
    """A fresh Z3 context: one per query or encoding, so no query sees another's terms."""
    return z3.Context()


def make(ctx, timeout_s: float | None = None, logic: str | None = None):
    """A solver in ctx (for `logic`, if given) with the fixed seed and, if given, its timeout."""
    s = z3.SolverFor(logic, ctx=ctx) if logic else z3.Solver(ctx=ctx)
    s.set(random_seed=SEED)
    if timeout_s is not None:
        limit(s, timeout_s)
    return s


def limit(s, timeout_s: float) -> None:
    """The wall-clock time s's next checks may take (Z3 counts milliseconds, at least one)."""
    s.set(timeout=max(1, int(timeout_s * 1000)))


def value(model, term) -> int:
    """The integer term's value in model (a variable the model leaves free counts as 0)."""
    return model.eval(term, model_completion=True).as_long()
