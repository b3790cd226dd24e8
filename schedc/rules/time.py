"""How long a compute step takes from its actions' times: one action its time; DualPipe's
overlapped forward/backward pair (OVERLAP_F_B) runs its parts' computation one after the other while
each part's communication (tensor-parallel collectives, expert all-to-all) proceeds beside the
other's computation. Every simulator times a step by `step_time`; and a collective (REDUCE_GRAD,
UNSHARD, REDUCE_TIED: a stage's data-parallel gradient reduction, FSDP's all-gather, the tied
embedding's all-reduce) by `collective_time` and `collective_span`. A pass of a described model
(forward, input gradient, weight gradient) takes its FLOPs over the peak times the efficiency of
that pass (`pass_seconds`), and a run's measured passes give that efficiency back (`achieved_efficiency`);
the first stage's split backward is all W (`split_backward`).
"""
from __future__ import annotations

from collections.abc import Sequence

from ..ir import Op, StageCost

# the seconds of each collective, as StageCost names them (RESHARD frees memory and sends nothing)
COLLECTIVE_COST = {Op.REDUCE_GRAD: "R", Op.UNSHARD: "U", Op.REDUCE_TIED: "T"}
# the passes a described model's compute is timed by, each at its own efficiency: the forward, the
# input gradient and the weight gradient (a full backward B is I + W)
PASSES = ("F", "I", "W")


def pass_seconds(flops: float, peak: float, efficiency: float) -> float:
    """The seconds of a pass of `flops` FLOPs on an accelerator of `peak` FLOP/s that reaches the
    fraction `efficiency` of it in that pass (Narayanan et al. 2021, section 5.1: FLOPs over the
    achieved FLOP/s)."""
    return flops / (peak * efficiency)


def split_backward(first: bool, I: float, W: float, I_comm: float) -> tuple[float, float, float, float]:  # noqa: E741
    """(I, W, I's communication, W's) of a stage whose backward is split, as the runtimes run it.
    The first stage's input needs no gradient: torch's runtime skips that stage's input backward
    (stage.py, `backward_one_chunk`) and schedc's does its whole backward in W
    (schedc/runtime/backward.py), so its I takes no time and its W the whole backward, with the
    collectives inside it. Any other stage: I and W as given (I's collectives in I)."""
    if first:
        return 0.0, I + W, 0.0, I_comm
    return I, W, I_comm, 0.0


def achieved_efficiency(flops: Sequence[float], seconds: Sequence[float], peak: float) -> float:
    """The efficiency at which `pass_seconds` gives back the sum of measured `seconds` of passes of
    `flops` FLOPs each: their FLOPs over the peak's work in their time (a FLOP-weighted mean, so the
    passes' predicted seconds add up to the measured ones exactly)."""
    return sum(flops) / (peak * sum(seconds))


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


def collective_time(cost: StageCost, op: Op) -> float:
    """The seconds the collective `op` of a stage that costs `cost` takes on its group's wire (0 for
    any other stage action, and in unit time: collectives cost nothing unless a description says)."""
    name = COLLECTIVE_COST.get(op)
    return 0.0 if name is None else float(getattr(cost, name))


def step_collectives(costs: Sequence[StageCost]) -> tuple[set[int], set[int]]:
    """The stages whose collectives a data-parallel step runs where the schedule places none (as
    `schedc run` does; passes/stage_ops.py adds them): those whose gradient reduction takes time
    (`R`, REDUCE_GRAD), and those whose weights' gather does (`U`, FSDP's UNSHARD)."""
    return {s for s, c in enumerate(costs) if c.R > 0}, {s for s, c in enumerate(costs) if c.U > 0}


def collective_span(reached: float, previous_end: float, duration: float) -> tuple[float, float]:
    """(start, end) of a collective: it starts once every member of its group has reached it
    (`reached`, the latest of them) and the group's previous collective has ended (a communicator
    runs its collectives in issue order), and takes `duration` on every member, beside their compute.

    The rest of the rule, which every simulator follows: a member goes on once every member has
    reached the collective (an UNSHARD under a backend: once it has posted it, as torch posts FSDP's
    all-gather); a compute of stage s waits for the UNSHARD(s) before it to end; and the step ends
    when every collective has (the optimizer step needs the reduced gradients). So a reduction
    placed right after its stage's last backward runs beside the rank's later compute, and one at
    the end of the step adds its time to the step."""
    start = reached if reached > previous_end else previous_end
    return start, start + duration
