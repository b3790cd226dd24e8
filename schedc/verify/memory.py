"""Peak activation memory per rank, in DESIGN.md's unit model, along each rank's program order.

F(s,m) allocates a_s; B(s,m) frees a_s; I(s,m) frees a_s - w_s; W(s,m) frees w_s (defaults a = 1,
w = a, so I frees nothing). Inside an overlapped pair the allocation comes before the frees.
Timing-dependent buffers (receives, eager sends) belong to the verifier's memory check.
"""
from __future__ import annotations

from ..ir import Op, Program


def activation_delta(program: Program, op: Op, stage: int) -> float:
    mem = program.annotations.memory_of(stage)
    return {Op.F: mem.act, Op.B: -mem.act, Op.I: -(mem.act - mem.weight), Op.W: -mem.weight}.get(op, 0.0)


def peak_activation(program: Program) -> tuple[float, ...]:
    peaks = []
    for steps in program.ranks:
        live = peak = 0.0
        for step in steps:
            deltas = [activation_delta(program, a.op, a.stage) for a in step.parts]
            live += sum(d for d in deltas if d > 0)
            peak = max(peak, live)
            live += sum(d for d in deltas if d < 0)
        peaks.append(peak)
    return tuple(peaks)
