"""How long a compute step takes from its actions' times: one action its time; DualPipe's
overlapped forward/backward pair (OVERLAP_F_B) runs its parts' computation one after the other while
each part's communication (tensor-parallel collectives, expert all-to-all) proceeds beside the
other's computation. Every simulator times a step by `step_time`.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..ir import StageCost


def step_time(parts: Sequence[tuple[float, float]]) -> float:
    """The seconds of one compute step, from each action's (time, communication inside that time).

    One action: its time. A pair: the larger of its computation, done one part after the other,
    and its communication, done beside it (DeepSeek-V3 technical report, section 3.2.1: the
    all-to-all and pipeline communication of one microbatch's chunk hide under the other's
    computation). Without communication that is the sum of the parts' times."""
    if len(parts) == 1:
        return parts[0][0]
    comm = sum(c for _, c in parts)
    return max(sum(t for t, _ in parts) - comm, comm)


def timed(cost: StageCost, op: str, factor: float = 1.0) -> tuple[float, float]:
    """(time, communication inside it) of action kind `op` (F, B, I or W) of a stage that costs
    `cost`, both scaled by `factor` (a sampled run's draw)."""
    time = float(getattr(cost, op)) * factor
    return time, min(cost.comm_of(op) * factor, time)  # (a cost file that sets a shorter time wins)
