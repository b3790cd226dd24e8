"""Insert the per-stage actions torch's lowering adds: UNSHARD / RESHARD and REDUCE_GRAD.

torch's `_PipelineScheduleRuntime` runs a compute-level schedule through `_add_unshard_reshard`,
`_add_reduce_grad` and `_add_send_recv`; a communication-level CSV is run as written, so it must
carry these itself: REDUCE_GRAD is where torch scales gradients by 1/M (its `scale_grads`) and
finishes FSDP's gradient reduction, UNSHARD / RESHARD gather and free FSDP-sharded stages. They
have no microbatch and no dependencies (deps.py); schedc's own runtime ignores them.
"""
from __future__ import annotations

from ..columns import has_op
from ..ir import Action, Op, Program, Step

MAX_ACTIVE_STAGES = 3  # torch's default prefetch window for `_add_unshard_reshard`
_BACKWARDS = (Op.B, Op.W)  # the actions that finish a microbatch's weight gradient


_COMPUTE = frozenset(op for op in Op if op.is_compute)


def _computes(steps: list[Step]) -> list[tuple[Action, ...]]:
    """Each step's computations (most steps are one action: no tuple of parts is made for them)."""
    return [((st,) if st.op in _COMPUTE else ()) if st.__class__ is Action
            else tuple(a for a in st.parts if a.op in _COMPUTE) for st in steps]


def add_unshard_reshard(program: Program, max_active_stages: int = MAX_ACTIVE_STAGES) -> Program:
    """Before each compute step, UNSHARD the next `max_active_stages` stages the rank computes on
    and RESHARD the active ones it does not; RESHARD whatever is still active at the end.

    As torch's `_add_unshard_reshard` on a compute-level program (the same actions in the same
    order); communication steps are passed through and skipped when looking ahead. A program that
    already has UNSHARD actions is left as it is.
    """
    if has_op(program, Op.UNSHARD):
        return program
    return program.with_ranks(_unshard_reshard(steps, max_active_stages) for steps in program.ranks)


def _unshard_reshard(steps, window: int) -> list[Step]:
    upcoming = _upcoming(_computes(steps), window)
    # a set, updated in torch's order: torch evicts in the set's iteration order, and so do we
    active: set[int] = set()
    out: list[Step] = []
    for step, stages in zip(steps, upcoming):
        if stages is not None:
            evict = [s for s in active if s not in stages]
            fetch = [s for s in stages if s not in active]
            for s in evict:
                active.remove(s)
                out.append(Action(Op.RESHARD, s))
            for s in fetch:
                active.add(s)
                out.append(Action(Op.UNSHARD, s))
        out.append(step)
    out.extend(Action(Op.RESHARD, s) for s in list(active))
    return out


def _upcoming(computes: list[tuple[Action, ...]], count: int) -> list[list[int] | None]:
    """For each step that computes, the first `count` distinct stages computed on from it (torch's
    `next_stage_indices`: whole steps, so a compound may give one more); None for the others.

    Built from the last step back, each from the next one's (stages with the step that first
    computes on them): linear in the steps, where scanning ahead from each step was quadratic."""
    out: list[list[int] | None] = [None] * len(computes)
    ahead: list[tuple[int, int]] = []  # (stage, step) from the step after
    stages: list[int] = []  # the stages of `ahead`
    for i in range(len(computes) - 1, -1, -1):
        here = computes[i]
        if not here:
            continue
        if len(here) == 1 and count > 1 and stages and stages[0] == here[0].stage:
            # the stage the next window starts with, again: the window keeps its stages, this step
            # first computing on it (entries after the first keep their steps, so the cut is the same)
            ahead[0] = (stages[0], i)
            out[i] = stages
            continue
        own = list(dict.fromkeys(a.stage for a in here))
        merged = [(s, i) for s in own] + [(s, j) for s, j in ahead if s not in own]
        cut = next((k + 1 for k in range(max(count, 1) - 1, len(merged))
                    if k + 1 == len(merged) or merged[k + 1][1] != merged[k][1]), len(merged))
        ahead = merged[:cut]
        out[i] = stages = [s for s, _ in ahead]
    return out


def add_reduce_grad(program: Program) -> Program:
    """REDUCE_GRAD(s) right after the step that runs stage s's last (M-th) B or W.

    As torch's `_add_reduce_grad`. A program that already has REDUCE_GRAD actions is left as it is.
    """
    if has_op(program, Op.REDUCE_GRAD):
        return program
    M = program.num_microbatches
    ranks = []
    for steps in program.ranks:
        done: dict[int, int] = {}
        last: list[tuple[int, int]] = []  # (step, stage) of each stage's M-th backward, in order
        for i, step in enumerate(steps):
            for a in ((step,) if step.__class__ is Action else step.parts):
                if a.op in _BACKWARDS:
                    n = done[a.stage] = done.get(a.stage, 0) + 1
                    if n == M:
                        last.append((i, a.stage))
        out = list(steps)
        for i, stage in reversed(last):  # from the back: the steps before keep their places
            out.insert(i + 1, Action(Op.REDUCE_GRAD, stage))
        ranks.append(out)
    return program.with_ranks(ranks)
