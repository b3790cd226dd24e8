"""The compact text of steps held as columns (`2F0`, `1SEND_F3`, `0UNSHARD`: ir.format_step's), made
without their actions: the PyTorch CSV and the IR JSON of a program of millions of steps."""
from __future__ import annotations

from collections.abc import Iterator

from ..lazy_numpy import np

from ..columns import OPS, Columns

_NAMES = [op.value for op in OPS]  # by op code


def step_texts(cols: Columns, r: int) -> Iterator[str]:
    """Rank r's steps as compact texts, for columns without compounds (`Columns.compounds` False)."""
    lo, hi = cols.starts[r], cols.starts[r + 1]
    microbatches = cols.microbatch[lo:hi]
    mbs = microbatches.tolist()
    for i in np.flatnonzero(microbatches < 0).tolist():  # UNSHARD, RESHARD, REDUCE_GRAD: no microbatch
        mbs[i] = ""
    return map("{}{}{}".format, cols.stage[lo:hi].tolist(), map(_NAMES.__getitem__, cols.op[lo:hi].tolist()), mbs)
