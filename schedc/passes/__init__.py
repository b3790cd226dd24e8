"""IR-to-IR passes and the pipelines that list them.

Each pass is a pure `Program -> Program` function; `lower` and `lower_for_torch` run them in
order, one line each.
"""
from __future__ import annotations

from dataclasses import replace

from ..columns import held_as_columns
from ..ir import RECEIVE_POSTINGS, Program
from .comms import held_unless_small, insert_comms, within_limit
from .receives import post_receives_early
from .stage_ops import add_reduce_grad, add_unshard_reshard


def lower(program: Program, *, receives: str = "needed") -> Program:
    """Compute level to communication level, ready to run on schedc's runtime. A data-parallel job
    (`replicas`) is lowered replica by replica (messages stay inside a replica) and joined again:
    the result holds each replica's lowered steps, replica 0 in `ranks`, the others in `replicas`.
    `receives="early"`: every receive posted at the start of its rank's step (for gloo; passes/receives.py)."""
    if receives not in RECEIVE_POSTINGS:
        raise ValueError(f"receives={receives!r}: expected one of {', '.join(RECEIVE_POSTINGS)}")
    if program.replicas:
        lowered = program.each_replica(lambda one: _lower_one(one, receives))  # (shared lists: lowered once)
        return replace(lowered[0], replicas=tuple(r.ranks for r in lowered[1:]))
    return _lower_one(program, receives)


def _lower_one(program: Program, receives: str) -> Program:
    for step in (
        held_unless_small,  # the steps as integer columns (schedc/columns.py), read as arrays below (a small
        # program held as actions stays so: lowered in plain Python)
        within_limit,  # the lowered size, counted before any of it is built: over MAX_LOWERED_ACTIONS is an error
        insert_comms,  # SEND/RECV for every value that crosses ranks, receives posted with their sender
        *([post_receives_early] if receives == "early" else []),  # or every receive first, for gloo
    ):
        program = step(program)
    return program


def lower_for_torch(program: Program) -> Program:
    """Compute level to what torch's `_PipelineScheduleRuntime` lowering makes of it.

    schedc's runtime scales gradients itself and has no FSDP, so only torch needs the stage actions.
    """
    program.one_pipeline("lowering")
    for step in (
        within_limit,  # the lowered size, counted before any of it is built: over MAX_LOWERED_ACTIONS is an error
        add_unshard_reshard,  # FSDP gather/free around each stage's compute, as torch's prefetch window
        add_reduce_grad,  # after a stage's last backward: torch scales gradients by 1/M here
        held_as_columns,  # the steps as integer columns, read as arrays by the last pass
        insert_comms,  # then communication, as torch's `_add_send_recv` does last
    ):
        program = step(program)
    return program


__all__ = ["add_reduce_grad", "add_unshard_reshard", "insert_comms", "lower", "lower_for_torch",
           "post_receives_early", "within_limit"]
