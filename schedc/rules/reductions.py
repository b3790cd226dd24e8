"""How a step's gradient reductions combine: which lists of REDUCE_GRAD and REDUCE_TIED give every
replica and every copy of a weight the gradient of unsplit training (docs/semantics.md, "Collectives").

A reduction runs once a step per stage (`ONCE`: torch's runtime scales by 1/M at each REDUCE_GRAD,
schedc's averages once and sums the tied weights once), in a schedule that has backwards. Averaging
over the data-parallel group is linear, so it may come before or after a sum with another copy of
the weight, but on every copy the same way: where the tied all-reduce (REDUCE_TIED) meets one end
already averaged and the other not, or routes' copies of a model stage are summed (as the step
ends) when only some were averaged, the result mixes an average with one replica's own gradient
and the replicas drift apart (`order_breaks`; with one replica, averaging changes nothing).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..ir import Action, Op, Step, describe
from .deps import REDUCTIONS, Stages, copies

ONCE = REDUCTIONS  # at most one of each (op, stage) in a rank's list
_Firsts = dict[tuple[Op, int], tuple[int, Action]]  # (op, stage) -> its first (step, action)


def order_breaks(ranks: Sequence[Sequence[Step]], placement: Sequence[int], stages: Stages,
                 replicas: int) -> Iterator[tuple[int, int, Action, str]]:
    """Each place where a job of `replicas` data-parallel replicas combines averaged and unaveraged
    gradients of one weight, as (rank, step, action, why): the tied weight's two ends (stages 0 and
    S - 1) averaged on different sides of their REDUCE_TIED, or some copies of a model stage
    (routes) averaged by an explicit REDUCE_GRAD and others only after the copies are summed.
    A stage without a REDUCE_GRAD is averaged as the step ends, after everything in its list."""
    if replicas < 2:
        return
    first: _Firsts = {}
    for steps in ranks:
        for x, st in enumerate(steps):
            for a in st.parts:
                if a.op in REDUCTIONS:
                    first.setdefault((a.op, a.stage), (x, a))
    S = len(placement)
    yield from _tie_breaks(first, placement, S)
    yield from _copy_breaks(first, placement, stages, S)


def _tie_breaks(first: _Firsts, placement: Sequence[int], S: int) -> Iterator[tuple[int, int, Action, str]]:
    if S < 2:
        return
    ends = (0, S - 1)
    tied = {}  # end -> (step, action) of the first REDUCE_TIED on its rank
    for e in ends:
        on_rank = [first[(Op.REDUCE_TIED, s)] for s in ends if (Op.REDUCE_TIED, s) in first
                   and placement[s] == placement[e]]
        if not on_rank:
            return  # (no tied all-reduce: nothing to combine)
        tied[e] = min(on_rank, key=lambda found: found[0])
    before = {e: (Op.REDUCE_GRAD, e) in first and first[(Op.REDUCE_GRAD, e)][0] < tied[e][0] for e in ends}
    if before[0] == before[S - 1]:
        return
    early, late = (0, S - 1) if before[0] else (S - 1, 0)
    x, a = first[(Op.REDUCE_GRAD, early)]
    when = (f"after it (REDUCE_GRAD({late}) follows it)" if (Op.REDUCE_GRAD, late) in first
            else "only as the step ends, after it")
    yield placement[early], x, a, (
        f"REDUCE_GRAD({early}) averages stage {early}'s gradients before the tied all-reduce {describe(tied[early][1])}, "
        f"but stage {late}, the other end of the tied weight, is averaged {when}: the tied weight's gradient "
        "then adds an average to one replica's own gradient, and the replicas' weights drift apart; average "
        f"both ends before the tied all-reduce or both after it")


def _copy_breaks(first: _Firsts, placement: Sequence[int], stages: Stages, S: int) -> Iterator[tuple[int, int, Action, str]]:
    for c, same in sorted(copies(stages, S).items()):
        averaged = [s for s in same if (Op.REDUCE_GRAD, s) in first]
        if not averaged or len(averaged) == len(same):
            continue
        rest = [s for s in same if s not in averaged]
        s = averaged[0]
        x, a = first[(Op.REDUCE_GRAD, s)]
        others = " and ".join(f"stage {o}" for o in rest)
        yield placement[s], x, a, (
            f"REDUCE_GRAD({s}) averages stage {s}, a copy of the model's stage {c}, before the copies' gradients "
            f"are summed as the step ends, but {others} (another copy) is averaged only after that sum: the sum "
            "then adds an average to one replica's own gradient, and the replicas' weights drift apart; average "
            f"every copy ({', '.join(f'REDUCE_GRAD({o})' for o in rest)} too) or none")
