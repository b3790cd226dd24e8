"""The proof's obligations for collectives and replicas: what `check` asks of them, for every setting.

A collective (REDUCE_GRAD, UNSHARD, RESHARD; model.py's `Model.collectives`) names a stage in
range, runs on the rank that holds it (lint's bad-index and wrong-rank), and a REDUCE_GRAD follows
every backward that adds to its stage's gradients on that rank (lint's reduce-early), once a step
(lint's duplicate). Deadlock and
memory need nothing of them: docs/prove.md, "Replicas and collectives", says why.
"""
from __future__ import annotations

from ..rules.deps import ADDS_GRADIENT as _ADDS, REDUCTIONS as _READS
from ..solver import z3
from .model import Model, one_body

# schedc/rules/deps.py's rule for reductions (lint's `reduce-early`), by the model's kind names: a stage's
# weight gradients are added to by its B and W, and a reduction reads them (REDUCE_TIED is outside
# the fragment: model.py refuses it)
ADDS_GRADIENT = frozenset(op.value for op in _ADDS)
REDUCTIONS = frozenset(op.value for op in _READS)

TEXT = ("every collective names a stage in range, on the rank that holds it, after the backwards it reduces, "
        "and reduces each stage once")


def obligations(enc):
    """(collective, backward or None, formula, shown) for each obligation: a model of the formula is
    a setting where `check` finds the collective out of range, on the wrong rank, or too early."""
    S = enc.S
    for x in enc.m.collectives:
        a = enc.instance(x, "a")
        yield x, None, z3.And(a.where(), z3.Not(z3.And(a.stage >= 0, a.stage < S))), a.shown("a")
        yield x, None, z3.And(a.where(), a.stage >= 0, a.stage < S, enc.owner(a.stage) != a.rank), a.shown("a")
    reductions = [x for x in enc.m.collectives if x.kind in REDUCTIONS]
    for i, x in enumerate(reductions):  # (rules/reductions.py's ONCE: lint's `duplicate`)
        for y in reductions[i:]:
            a, b = enc.instance(x, "a"), enc.instance(y, "b")
            twice = z3.And(a.where(), b.where(), a.rank == b.rank, a.stage == b.stage)
            if x is y:
                twice = z3.And(twice, z3.Or(*[u != v for u, v in zip(a.variables, b.variables)]))
            yield x, y, twice, {**a.shown("a"), **b.shown("b")}
    for x in reductions:
        for y in enc.m.stmts:
            if y.kind not in ADDS_GRADIENT or not one_body(x, y):
                continue
            a, b = enc.instance(x, "a"), enc.instance(y, "b")
            early = z3.And(a.where(), b.where(), a.rank == b.rank, a.stage == b.stage, enc.before(a, b))
            yield x, y, early, {**a.shown("a"), **b.shown("b")}


def replicas_proved(m: Model) -> str | None:
    """Why a job of identical replicas holds when its pipeline does (the prover's `replicas` part,
    proved), or None when the schedule has no replicas."""
    if m.replicas is None:
        return None
    return (f"every replica runs the same lists (no body names its replica), so the job of {_text(m.replicas)} "
            "replicas deadlocks only if one pipeline does (the collectives' waits join a step to the step before "
            "it in another copy), its data-parallel groups issue their collectives in one order, and each rank "
            "holds what its pipeline rank does")


def text(x) -> str:
    """`REDUCE_GRAD(r)`, a collective as the source writes it."""
    return f"{x.kind}({_text(x.stage)})"


def _text(e) -> str:
    from ..span import span_text
    return span_text(e.span)
