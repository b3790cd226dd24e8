"""The last stage's losses, as torch's runtime keeps them: in the order its forwards run.

torch 2.13's `_PipelineScheduleRuntime` appends the loss of each forward of the last stage to one
list (`_maybe_compute_loss`) and gives the backward of microbatch m the list's m-th entry
(`_maybe_get_loss`), so its backwards get their own microbatch's loss only when the last stage's
forwards run in microbatch order; otherwise a backward takes another microbatch's loss and torch
stops there ("Failed to run stage backward", or "Loss for microbatch m is not available") or ends
the step with wrong gradients. schedc's runtime keeps each loss with its microbatch and runs any
order `check` clears; the rule is asked where a schedule goes to torch's runtime
(schedc/interop/torch_csv.py's `torch_cannot_run`) and by `schedc.check` (an error for a PyTorch CSV).
"""
from __future__ import annotations

from collections.abc import Sequence

from ..ir import Action, Op, Program

BACKWARDS = (Op.B, Op.I)  # the actions torch's runtime hands the loss (`_maybe_get_loss`)
Entry = tuple[int, Op, int, "int | None"]  # an action of a rank: (its step, op, stage, microbatch)


def first_late(actions: Sequence[Entry], last: int) -> tuple[int, int, int] | None:
    """Among a rank's actions in the order they run (a compound's parts in its place), the first
    forward of stage `last` that torch's runtime files under another microbatch: (its step, its
    microbatch, how many of the stage's forwards ran before it); None when they run in microbatch
    order, or no backward of `last` is there to take a loss. The rule, for every caller."""
    n = 0
    for x, op, stage, mb in actions:
        if op is Op.F and stage == last:
            if mb != n:
                break
            n += 1
    else:
        return None
    if not any(op in BACKWARDS and stage == last for _, op, stage, _ in actions):
        return None
    return x, mb, n  # type: ignore[return-value]  # (a forward's microbatch is an int)


def asked(program: Program) -> tuple[int, int] | None:
    """(the last stage, its rank): where `first_late` is asked; None without stages, or with routes,
    which torch's runtime does not run (each route ends on a last stage of its own)."""
    last = program.num_stages - 1
    return None if last < 0 or program.routes else (last, program.placement[last])


def out_of_order(program: Program) -> tuple[int, int, Action, int] | None:
    """`first_late` of the rank of the program's last stage, read from its actions: (rank, step,
    the forward, how many of the stage's forwards ran before it), or None."""
    where = asked(program)
    if where is None:
        return None
    last, rank = where
    steps = program.ranks[rank]
    found = first_late([(x, a.op, a.stage, a.microbatch) for x, st in enumerate(steps) for a in st.parts], last)
    if found is None:
        return None
    x, _, n = found
    return rank, x, next(a for a in steps[x].parts if a.op is Op.F and a.stage == last), n
