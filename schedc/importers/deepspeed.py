"""DeepSpeed's pipeline schedules (`deepspeed.runtime.pipe.schedule`): each rank's instruction
stream from `TrainSchedule`, `InferenceSchedule` or `DualPipeVSchedule` read into schedc actions,
one line per DeepSpeed step; buffers become microbatches by following what each instruction does.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import SchedcError
from .common import Refused, require, version, write

# DeepSpeed instruction -> schedc op
_ACTIONS = {"ForwardPass": "F", "BackwardPass": "B", "SendActivation": "SEND_F", "RecvActivation": "RECV_F",
            "SendGrad": "SEND_B", "RecvGrad": "RECV_B"}
_FILLS = ("LoadMicroBatch", "RecvActivation", "ForwardPass")  # instructions that put a microbatch in a buffer
_SKIPPED = ("LoadMicroBatch", "OptimizerStep")  # no pipeline message, no compute schedc models


class _Rank:
    """One rank reading its instruction stream: which microbatch each buffer holds, and (under
    `CommitP2P`, DualPipeV's) the sends and receives queued for the next commit."""

    def __init__(self, rank: int, ranks: int, vshape: bool):
        self.rank, self.vshape = rank, vshape
        self.last = 2 * ranks - 1 if vshape else ranks - 1  # the last stage
        self.buffers: dict[tuple[int, int], int] = {}  # (phase, buffer) -> the microbatch it holds
        self.forwarded: set[tuple[int, int]] = set()  # buffers whose microbatch has run its ForwardPass
        self.filled = [0, 0]  # microbatches put into buffers so far, per phase (DeepSpeed takes them in order)
        self.queued: list[str] = []  # sends and receives awaiting a CommitP2P

    def stage(self, phase: int) -> int:
        """Phase 0 is stage `rank`; DualPipeV's phase 1, stage `2P - 1 - rank`, on the way back."""
        return self.last - self.rank if phase else self.rank

    def held(self) -> list[int]:
        return [self.rank, self.last - self.rank] if self.vshape else [self.rank]

    def read(self, cmd) -> list[str]:
        """The schedc actions of one instruction."""
        kind = type(cmd).__name__
        if kind == "ReduceTiedGrads":  # one all-reduce per rank holding an end (both ends: still one)
            return [f"{s}REDUCE_TIED" for s in self.held() if s in (0, self.last)][:1]
        if kind == "ReduceGrads":
            return [f"{s}REDUCE_GRAD" for s in self.held()]
        if kind == "CommitP2P":
            return self.commit()
        if kind not in _ACTIONS and kind not in _SKIPPED:
            raise SchedcError("importer", f"DeepSpeed's {kind} instruction has no schedc action", where="deepspeed")
        phase = getattr(cmd, "phase", 0)
        buffer: Any = (phase, cmd.buffer_id) if hasattr(cmd, "buffer_id") else None  # (always set where read)
        if kind in _FILLS and (buffer not in self.buffers or buffer in self.forwarded):
            self.buffers[buffer], self.filled[phase] = self.filled[phase], self.filled[phase] + 1
            self.forwarded.discard(buffer)
        if kind == "ForwardPass":
            self.forwarded.add(buffer)
        if kind not in _ACTIONS:
            return []
        action = f"{self.stage(phase)}{_ACTIONS[kind]}{self.buffers[buffer]}"
        if self.vshape and kind != "ForwardPass" and kind != "BackwardPass":
            self.queued.append(action)
            return []
        return [action]

    def commit(self) -> list[str]:
        """DualPipeV's `_exec_commit_p2p`: the queued operations in one batch_isend_irecv, then a
        wait for each."""
        queued, self.queued = self.queued, []
        if not queued:
            return []
        waits = [a.replace("SEND_", "WAIT_SEND_").replace("RECV_", "WAIT_RECV_") for a in queued]
        return ["(" + ";".join(queued) + ")GROUP", *waits]


def stage_steps(schedule, rank: int, ranks: int, vshape: bool = False) -> list[list[str]]:
    """Rank `rank`'s steps as schedc actions (`0F1`, `0SEND_F1`, ...), one list per DeepSpeed step
    of `schedule` (a PipeSchedule for that rank)."""
    reader = _Rank(rank, ranks, vshape)
    return [[a for cmd in instructions for a in reader.read(cmd)] for instructions in schedule.steps()]


_CLASSES = {"train": "TrainSchedule", "inference": "InferenceSchedule", "dualpipev": "DualPipeVSchedule"}


def _listing(kind: str, values: Mapping[str, int], forward_only: bool = False) -> str:
    module, = require("deepspeed", "deepspeed.runtime.pipe.schedule")
    P, M, vshape = values["P"], values["M"], kind == "dualpipev"
    extra = {"forward_only": True} if forward_only else {}
    try:
        schedules = [getattr(module, _CLASSES[kind])(micro_batches=M, stages=P, stage_id=r, **extra) for r in range(P)]
    except ValueError as exc:  # DeepSpeed refuses the settings
        raise Refused(f"DeepSpeed refuses P={P}, M={M}: {exc}", f"deepspeed:{kind}") from None
    ranks = [stage_steps(schedules[r], r, P, vshape) for r in range(P)]
    comment = (f"DeepSpeed {version('deepspeed')} {_CLASSES[kind]}(micro_batches={M}, stages={P}, stage_id=r"
               f"{', forward_only=True' if forward_only else ''}) on rank r: one line per step with a pipeline action")
    return write(f"deepspeed_{kind}", comment, {"P": P, "M": M}, ranks, forward_only=forward_only or kind == "inference",
                 placement="vshape" if vshape else None, stages=2 * P)


def train(values: Mapping[str, int], *, forward_only: bool = False) -> str:
    if forward_only:
        raise SchedcError("usage", "deepspeed:train trains; DeepSpeed's forward-only schedule is "
                          "deepspeed:inference", where="--forward-only")
    return _listing("train", values)


def inference(values: Mapping[str, int], *, forward_only: bool = False) -> str:
    return _listing("inference", values)


def dualpipev(values: Mapping[str, int], *, forward_only: bool = False) -> str:
    return _listing("dualpipev", values, forward_only)


SCHEDULES = {"train": train, "inference": inference, "dualpipev": dualpipev}
PARAMS: dict[str, dict[str, int | None]] = {name: {"P": None, "M": None} for name in SCHEDULES}
