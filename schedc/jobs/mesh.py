"""A job's parallel layout, in torchtitan's names: the degrees of data (replicated and sharded),
tensor, context, expert and pipeline parallelism, sequence parallelism, a ZeRO stage, and how the
layers are split over the pipeline's stages. Pure data and arithmetic; `schedc/hardware.py` reads
it from a setup file's [parallelism] table and docs/units.md describes it.
"""
from __future__ import annotations

from dataclasses import dataclass

# torchtitan's [parallelism] field names (torchtitan/config/job_config.py), and the setup's own
DEGREES = ("data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
           "context_parallel_degree", "expert_parallel_degree", "pipeline_parallel_degree")
SPLIT_KEYS = ("pipeline_parallel_layers_per_stage", "decoder_first_pipeline_num_layers",
              "decoder_last_pipeline_num_layers")
KEYS = DEGREES + ("sequence_parallel", "enable_sequence_parallel", "zero_stage") + SPLIT_KEYS
ZERO_STAGES = (0, 1, 2, 3)
OPTIMIZER_BYTES = 12  # mixed-precision Adam: an fp32 copy of the weights, momentum and variance


@dataclass(frozen=True)
class Parallel:
    """How a job splits the model over its GPUs. `pp` None: the schedule's ranks decide. `layers`:
    layers per stage, or None for an even split (with Megatron-LM's first and last stage counts,
    `first`/`last`, taken out first)."""

    dp_replicate: int | None = None  # None: not stated (a schedule's `replicas D` says it)
    dp_shard: int = 1
    tp: int = 1
    cp: int = 1
    ep: int = 1
    pp: int | None = None
    sequence_parallel: bool = True
    zero_stage: int = 0
    layers: tuple[int, ...] | None = None
    first: int | None = None
    last: int | None = None

    @property
    def dp(self) -> int:
        return (self.dp_replicate or 1) * self.dp_shard

    @property
    def sp(self) -> bool:
        """Sequence parallelism applies with tensor parallelism (torchtitan applies it with TP)."""
        return self.sequence_parallel and self.tp > 1

    @property
    def sequence_shards(self) -> int:
        """Ranks the tokens between stages are split over: CP always, TP with sequence parallelism."""
        return self.cp * (self.tp if self.sp else 1)

    def gpus(self, ranks_per_pipeline: int) -> int:
        return self.dp * self.tp * self.cp * (self.pp or ranks_per_pipeline)

    def is_default(self) -> bool:
        return self == Parallel()


def split_layers(layers: int, stages: int, p: Parallel = Parallel()) -> list[int]:
    """`layers` over `stages` contiguous stages: the stated list; or Megatron-LM's first and last
    stage counts and the rest as even as can be (earlier stages take one more); ValueError saying
    why when they cannot be."""
    if p.layers is not None:
        if len(p.layers) != stages or sum(p.layers) != layers:
            raise ValueError(f"pipeline_parallel_layers_per_stage {list(p.layers)} must give each of the "
                             f"{stages} stages its layers, {layers} in all")
        return list(p.layers)
    head = [p.first] if p.first is not None else []
    tail = [p.last] if p.last is not None else []
    rest_stages, rest = stages - len(head) - len(tail), layers - sum(head) - sum(tail)
    if rest_stages < 0 or rest < rest_stages or (rest_stages == 0 and rest != 0):
        raise ValueError(f"{layers} layers cannot go {head[0] if head else 'evenly'} to the first stage and "
                         f"{tail[0] if tail else 'evenly'} to the last of {stages}, at least one to each")
    base, extra = divmod(rest, rest_stages) if rest_stages else (0, 0)
    return head + [base + (1 if s < extra else 0) for s in range(rest_stages)] + tail


def state_bytes_per_param(p: Parallel, dtype_bytes: int, grad_bytes: int | None = None) -> float:
    """Bytes a rank holds for each parameter of its shard (after tensor parallelism): weights,
    gradients (`grad_bytes` an element: the dtype's unless they are kept in fp32) and optimizer
    state (16 at 16 bits: ZeRO, Rajbhandari et al. 2020, 3.1; 18 with fp32 gradients, Megatron-LM's
    count; in fp32 4 + 4 + 8). FSDP (data_parallel_shard_degree N) shards all three over N, as
    torchtitan's FSDP2 does (fp32 sharded weights and gradients and Adam's two moments, 16/N,
    whatever the gradients are reduced in); ZeRO stage 1, 2, 3 shards the optimizer, then the
    gradients, then the weights over the data-parallel degree (Megatron-LM's distributed
    optimizer is stage 1: 6 + 12/N with fp32 gradients)."""
    d = dtype_bytes
    g = d if grad_bytes is None else grad_bytes
    opt = OPTIMIZER_BYTES if d < 4 else 8
    if p.dp_shard > 1:
        return (4 + 4 + 8) / p.dp_shard
    n = p.dp
    return {0: d + g + opt, 1: d + g + opt / n, 2: d + (g + opt) / n, 3: (d + g + opt) / n}[p.zero_stage]
