"""The compact text of steps held as columns (`2F0`, `1SEND_F3`, `0UNSHARD`, `(0F3;7B1)OVERLAP_F_B`:
ir.format_step's), made without their actions: the PyTorch CSV and the IR JSON of a program of
millions of steps."""
from __future__ import annotations

from collections.abc import Iterator

from ..lazy_numpy import np

from ..columns import COMPOUND, KINDS, OPS, Columns

_NAMES = [op.value for op in OPS]  # by op code
_KIND_NAMES = [kind.value for kind in KINDS]  # by kind code


def step_texts(cols: Columns, r: int) -> Iterator[str]:
    """Rank r's steps as compact texts."""
    lo, hi = cols.starts[r], cols.starts[r + 1]
    texts = _texts(cols.op[lo:hi], cols.stage[lo:hi], cols.microbatch[lo:hi])
    if cols.compounds:
        parts = cols.parts
        c_lo, c_hi = np.searchsorted(parts.step, [lo, hi]).tolist()
        if c_hi > c_lo:
            p_lo, p_hi = int(parts.starts[c_lo]), int(parts.starts[c_hi])
            inner = _texts(parts.op[p_lo:p_hi], parts.stage[p_lo:p_hi], parts.microbatch[p_lo:p_hi])
            kinds = list(map(_KIND_NAMES.__getitem__, parts.kind[c_lo:c_hi].tolist()))
            if (np.diff(parts.starts[c_lo:c_hi + 1]) == 2).all():  # (pairs, DualPipe's: made at once)
                made = list(map("({};{}){}".format, inner[0::2], inner[1::2], kinds))
            else:
                bounds = (parts.starts[c_lo:c_hi + 1] - p_lo).tolist()
                made = ["(" + ";".join(inner[a:b]) + ")" + kind for a, b, kind in zip(bounds, bounds[1:], kinds)]
            for x, text in zip((parts.step[c_lo:c_hi] - lo).tolist(), made):
                texts[x] = text
    return iter(texts)


def _texts(op, stage, microbatch) -> list[str]:
    """Compact texts of actions given as columns (a compound's entry is filled in by the caller)."""
    mbs = microbatch.tolist()
    for i in np.flatnonzero(microbatch < 0).tolist():  # UNSHARD, RESHARD, REDUCE_GRAD: no microbatch
        mbs[i] = ""
    return list(map("{}{}{}".format, stage.tolist(), map(_NAMES.__getitem__, op.tolist()), mbs))


assert OPS[COMPOUND] is OPS[-1]  # (a compound's entry indexes the names from the end: replaced after)
