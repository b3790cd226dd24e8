"""The communication inside one layer's forward and backward on one rank, in seconds: tensor
parallelism's collectives, context parallelism's ring of keys and values, and expert parallelism's
all-to-all, each on the link its group spans (within a node, or across nodes); and a stage's
data-parallel collectives (gradient reduction, FSDP's all-gather, the tied embedding's all-reduce).
Pure arithmetic; `schedc/hardware.py` puts it on each stage's times (schedc/rules/time.py times them).
"""
from __future__ import annotations

from dataclasses import dataclass

from .mesh import Parallel


@dataclass(frozen=True)
class Wire:
    """A link: bytes per second one way, seconds of latency a message."""

    bandwidth: float
    latency: float


@dataclass(frozen=True)
class LayerShape:
    """What the collectives of one layer move: tokens of a microbatch (s x b), hidden width, the
    key/value width (h kv / a), bytes an element, and for an MoE layer the experts a token goes to."""

    tokens: int
    hidden: int
    kv_width: int
    dtype_bytes: int
    top_k: int = 0


def ring(nbytes: float, n: int, wire: Wire) -> float:
    """An all-gather or reduce-scatter of `nbytes` (the whole tensor) over n ranks, in a ring:
    (n - 1) / n of it crosses each link, in n - 1 messages."""
    return (n - 1) / n * nbytes / wire.bandwidth + (n - 1) * wire.latency if n > 1 else 0.0


def tensor_parallel(x: LayerShape, p: Parallel, wire: Wire) -> tuple[float, float]:
    """(forward, backward) seconds of Megatron-LM's tensor-parallel collectives in one layer: with
    sequence parallelism two all-gathers and two reduce-scatters each way, without it two
    all-reduces (the same bytes: Korthikanti et al. 2022, section 4.2.2), of the layer's activation
    for the tokens of the context-parallel rank."""
    one = ring(x.tokens / p.cp * x.hidden * x.dtype_bytes, p.tp, wire)
    return 4 * one, 4 * one


def context_parallel(x: LayerShape, p: Parallel, wire: Wire) -> tuple[float, float]:
    """Ring attention: c - 1 steps pass each rank's keys and values on (its heads' share under
    tensor parallelism); the backward passes them again with their gradients."""
    if p.cp == 1:
        return 0.0, 0.0
    step = 2 * x.tokens / p.cp * x.kv_width / p.tp * x.dtype_bytes / wire.bandwidth + wire.latency
    return (p.cp - 1) * step, 2 * (p.cp - 1) * step


def expert_parallel(x: LayerShape, p: Parallel, wire: Wire) -> tuple[float, float]:
    """An MoE layer's dispatch and combine all-to-all: each rank's tokens (after sequence and
    context parallelism) go k times to their experts, (ep - 1) / ep of them to other ranks; the
    backward sends the gradients the same ways."""
    if p.ep == 1 or not x.top_k:
        return 0.0, 0.0
    tokens = x.tokens / p.sequence_shards
    one = x.top_k * tokens * x.hidden * x.dtype_bytes * (p.ep - 1) / p.ep / wire.bandwidth + (p.ep - 1) * wire.latency
    return 2 * one, 2 * one


def shards(p: Parallel) -> bool:
    """Are the weights sharded over the data-parallel degree (FSDP, or ZeRO stage 3)?"""
    return p.dp_shard > 1 or p.zero_stage == 3


def gradient_reduction(nbytes: float, p: Parallel, wire: Wire, weight_bytes: float | None = None) -> float:
    """REDUCE_GRAD of a stage's `nbytes` of gradients (as they are reduced: 16-bit, or fp32) over the
    data-parallel degree: FSDP's (and ZeRO stage 3's) reduce-scatter; DDP's all-reduce, twice the
    bytes; ZeRO stages 1 and 2 reduce-scatter the gradients and all-gather the stage's
    `weight_bytes` of updated weights (`nbytes` unless given: the same bytes as an all-reduce at
    16 bits; Megatron-LM's distributed optimizer with fp32 gradients gathers its 16-bit weights)."""
    if shards(p):
        return ring(nbytes, p.dp, wire)
    if p.zero_stage in (1, 2):
        return ring(nbytes, p.dp, wire) + ring(nbytes if weight_bytes is None else weight_bytes, p.dp, wire)
    return 2 * ring(nbytes, p.dp, wire)


def gather(nbytes: float, p: Parallel, wire: Wire) -> float:
    """UNSHARD: FSDP's (and ZeRO stage 3's) all-gather of a stage's `nbytes` of 16-bit weights; 0
    when the weights are not sharded. Under pipeline parallelism torchtitan keeps a stage's weights
    gathered over its microbatches (reshard_after_forward off), so a step gathers each stage once."""
    return ring(nbytes, p.dp, wire) if shards(p) else 0.0


def tied_reduction(nbytes: float, wire: Wire) -> float:
    """REDUCE_TIED: the all-reduce of the `nbytes` of gradients (16-bit, or fp32) the first and the
    last stage share (a tied embedding), between their two ranks."""
    return 2 * ring(nbytes, 2, wire)
