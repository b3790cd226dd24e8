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

from collections.abc import Iterable, Iterator, Sequence

from ..ir import Action, Op, Program, Step

BACKWARDS = (Op.B, Op.I)  # the actions torch's runtime hands the loss (`_maybe_get_loss`)


def forwards(steps: Iterable[Step | None], stage: int) -> Iterator[tuple[int, Action]]:
    """(step, action) of each forward of `stage` among a rank's steps, in the order they run (a
    compound's parts in order; None: an idle cell of a CSV row)."""
    for x, st in enumerate(steps):
        for a in () if st is None else st.parts:
            if a.op is Op.F and a.stage == stage:
                yield x, a


def out_of_order(program: Program) -> tuple[int, int, Action, int] | None:
    """The first forward of the program's last stage that torch's runtime would file under another
    microbatch: (rank, step, the forward, how many of the stage's forwards ran before it), or None
    (forwards in microbatch order, no backward on the last stage to take a loss, or routes, which
    torch's runtime does not run)."""
    last = program.num_stages - 1
    if last < 0 or program.routes:  # (with routes each route ends where it does: not torch's one loss list)
        return None
    rank = program.placement[last]
    steps: Sequence[Step] = program.ranks[rank]
    if not any(a.op in BACKWARDS and a.stage == last for st in steps for a in st.parts):
        return None
    for n, (x, a) in enumerate(forwards(steps, last)):
        if a.microbatch != n:
            return rank, x, a, n
    return None
