"""DeepSpeed's pipeline schedules (`deepspeed.runtime.pipe.schedule`): each stage's instruction
stream from `TrainSchedule` / `InferenceSchedule`, read into schedc actions, one rank per stage and
one line per DeepSpeed step. Buffers become microbatches by following what each instruction does.
"""
from __future__ import annotations

from typing import Mapping

from ..errors import SchedcError
from .common import require, version, write

# DeepSpeed instruction -> (schedc op, whether it starts using its buffer for the next microbatch)
_ACTIONS = {"ForwardPass": "F", "BackwardPass": "B", "SendActivation": "SEND_F", "RecvActivation": "RECV_F",
            "SendGrad": "SEND_B", "RecvGrad": "RECV_B"}
_FILLS = ("LoadMicroBatch", "RecvActivation", "ForwardPass")  # instructions that put a microbatch in a buffer
_SKIPPED = ("LoadMicroBatch", "OptimizerStep")  # no pipeline message, no compute schedc models


def stage_steps(schedule_class, stages: int, micro_batches: int, stage: int) -> list[list[str]]:
    """The stage's steps as schedc actions (`0F1`, `0SEND_F1`, ...), one list per DeepSpeed step."""
    buffers: dict[int, int] = {}  # buffer -> the microbatch it holds
    forwarded: set[int] = set()  # buffers whose microbatch has run its ForwardPass
    filled = 0  # microbatches put into buffers so far (DeepSpeed takes them in order)
    steps = []
    for instructions in schedule_class(micro_batches=micro_batches, stages=stages, stage_id=stage).steps():
        step = []
        for cmd in instructions:
            kind = type(cmd).__name__
            if kind == "ReduceTiedGrads":
                step += ["REDUCE_TIED"] if stage in (0, stages - 1) else []  # the ends hold the tied weights
                continue
            if kind == "ReduceGrads":
                step.append("REDUCE_GRAD")
                continue
            if kind not in _ACTIONS and kind not in _SKIPPED:
                raise SchedcError("importer", f"DeepSpeed's {kind} instruction has no schedc action")
            buffer = cmd.buffer_id if hasattr(cmd, "buffer_id") else None
            if kind in _FILLS and (buffer not in buffers or buffer in forwarded):
                buffers[buffer], filled = filled, filled + 1
                forwarded.discard(buffer)
            if kind == "ForwardPass":
                forwarded.add(buffer)
            if kind in _ACTIONS:
                step.append(f"{_ACTIONS[kind]}{buffers[buffer]}")
        steps.append([f"{stage}{action}" for action in step])
    return steps


def _listing(kind: str, values: Mapping[str, int], forward_only: bool = False) -> str:
    module, = require("deepspeed", "deepspeed.runtime.pipe.schedule")
    cls_name = {"train": "TrainSchedule", "inference": "InferenceSchedule"}[kind]
    P, M = values["P"], values["M"]
    ranks = [stage_steps(getattr(module, cls_name), P, M, s) for s in range(P)]
    comment = (f"DeepSpeed {version('deepspeed')} {cls_name}(micro_batches={M}, stages={P}, stage_id=r) on "
               "rank r: one line per step with a pipeline action")
    return write(f"deepspeed_{kind}", comment, {"P": P, "M": M}, ranks, forward_only=kind == "inference")


def train(values: Mapping[str, int], *, forward_only: bool = False) -> str:
    if forward_only:
        raise SchedcError("usage", "deepspeed:train trains; DeepSpeed's forward-only schedule is "
                          "deepspeed:inference", where="--forward-only")
    return _listing("train", values)


def inference(values: Mapping[str, int], *, forward_only: bool = False) -> str:
    return _listing("inference", values)


SCHEDULES = {"train": train, "inference": inference}
PARAMS: dict[str, dict[str, int | None]] = {"train": {"P": None, "M": None}, "inference": {"P": None, "M": None}}
