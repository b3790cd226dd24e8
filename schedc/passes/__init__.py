"""IR-to-IR passes and the one pipeline that lists them.

Each pass is a pure `Program -> Program` function; `lower` runs them in order, one line each.
"""
from __future__ import annotations

from ..ir import Program
from .comms import insert_comms


def lower(program: Program) -> Program:
    """Compute level to communication level, ready to export or run."""
    for step in (
        insert_comms,  # SEND/RECV for every value that crosses ranks, receives posted with their sender
    ):
        program = step(program)
    return program


__all__ = ["insert_comms", "lower"]
