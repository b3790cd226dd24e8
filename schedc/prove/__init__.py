"""Proofs for every size: `prove(schedule, assumptions=..., memory=...)` -> proved, refuted or unknown.

model.py reads a parametric schedule as statements over loop domains, sample.py enumerates them at
small sizes, search.py fits certificates, smt.py (all of the prover's Z3) checks them for every
setting, prover.py puts it together and command.py is `schedc prove`.
"""
from .prover import Part, Proof, prove

__all__ = ["Part", "Proof", "prove"]
