"""Proofs for every size: `prove(schedule, assumptions=..., memory=...)` -> proved, refuted or unknown.

model.py reads a parametric schedule's loop-level IR (schedc/loops.py) as statements over loop
domains, sample.py lists their instances at small sizes (the compiler's expansion of the same IR),
search.py fits certificates, smt.py (all of the prover's Z3) checks them for every
setting, prover.py puts it together and command.py is `schedc prove`. The names below load on first
use (PEP 562), so the CLI can register `schedc prove` without loading Z3 or numpy.
"""
from __future__ import annotations

__all__ = ["Part", "Proof", "prove"]


def __getattr__(name: str):
    """`Part`, `Proof` and `prove` from prover.py, imported when first asked for."""
    if name in __all__:
        from . import prover
        value = getattr(prover, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'schedc.prove' has no attribute {name!r}")
