"""The communication inside one layer's forward and backward on one rank, in seconds: tensor
parallelism's collectives, context parallelism's ring of keys and values, and expert parallelism's
all-to-all, each on the link its group spans (within a node, or across nodes). Pure arithmetic;
`schedc/hardware.py` adds it to each stage's times and says how much an overlapped pair can hide.
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


def data_parallel(nbytes: float, p: Parallel, wire: Wire) -> float:
    """A step's gradient reduction over the data-parallel degree, counted as not overlapped (an
    upper bound: DDP and FSDP overlap most of it with the backward): FSDP's reduce-scatter of the
    gradients and all-gather of the weights, or DDP's all-reduce, the same bytes, of a rank's
    `nbytes` of 16-bit weights."""
    return 2 * ring(nbytes, p.dp, wire)
