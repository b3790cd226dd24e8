"""Post receives early: every receive of a rank moved to the start of its list, in its order.

On gloo a message whose receive is already posted when its send is posted goes at once; a send
that comes first waits for the receiver to say it is ready (one round trip more per message).
A posted receive never blocks its rank and completes no later than it did, and each channel's
receives keep their order, so a program that completes on gloo still does, with the same pairing.
It may not on NCCL, where an early receive holds up the later operations of its rank pair, and
its receive buffers are held from the start of the step (as torch's stage allocates one per
microbatch ahead): the caller checks the result under `gloo` (docs/run.md, "Receives posted early").
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..columns import CODE, Columns, as_columns, objects, with_columns
from ..ir import RECVS, Program
from ..lazy_numpy import np


@lru_cache(maxsize=1)
def _receives() -> Any:
    """The op codes of receives (made at first use: numpy loads lazily)."""
    return np.array(sorted(CODE[op] for op in RECVS), dtype=np.int8)


def post_receives_early(program: Program) -> Program:
    """Each rank's receives first, in their order, then its other steps in theirs. A rank with a
    compound that holds a receive (a `group`) is left as written: its receives keep their place
    among the group's. (A program without sends and receives is returned as it is.)"""
    if program.level != "comms":
        return program
    held = as_columns(program)
    rank = np.repeat(np.arange(len(held), dtype=np.int64), np.diff(held.starts))
    first = np.isin(held.op, _receives())
    parts = held.parts if held.compounds else None
    if parts is not None:  # (the ranks of the compounds that hold a receive)
        grouped = rank[parts.step[np.unique(parts.owner()[np.isin(parts.op, _receives())])]]
        first &= ~np.isin(rank, grouped)
    order = np.lexsort((np.arange(len(rank)), ~first, rank))  # by rank, receives first, then as written
    if (order == np.arange(len(order))).all():
        return program
    spans = None if held.spans is None else (
        held.spans.take(order) if hasattr(held.spans, "take") else objects(held.spans[:])[order])
    kept = None if held.kept is None else objects(held.kept)[order]
    if parts is not None:  # (a compound is no receive: compounds keep their order)
        place = np.empty(len(order), dtype=np.int64)
        place[order] = np.arange(len(order))
        parts = parts.renumbered(place[parts.step])
    return with_columns(program, Columns(held.op[order], held.stage[order], held.microbatch[order],
                                         held.starts, spans, kept, parts))
