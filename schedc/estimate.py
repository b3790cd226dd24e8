"""From a transformer's shape to what one pipeline stage costs: FLOPs of F, I and W, activation bytes
per microbatch, parameters, message bytes. Pure arithmetic on a `hardware.Model`; docs/units.md gives
each formula's source (Narayanan et al. 2021, FLOPs; Korthikanti et al. 2022, activations; Qi et al.
2023, the I/W split). The first stage also holds the embedding, the last the output layer and loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .jobs import activations, mesh

DTYPE_BYTES = activations.DTYPE_BYTES
RECOMPUTE = activations.CHECKPOINT
LOGIT_BYTES = 4  # the output layer's logits are kept in fp32 for the loss (Korthikanti et al. 2022, 4.3)


@dataclass(frozen=True)
class StageEstimate:
    """One stage of the model cut into S: its layers, FLOPs per microbatch of F, I and W, activation
    bytes per microbatch, and parameters (the first stage's embedding and the last's output layer
    included)."""

    layers: int
    first: bool
    last: bool
    flops_F: float
    flops_I: float
    flops_W: float
    activation_bytes: float
    params: int


def layers_per_stage(layers: int, stages: int) -> list[int]:
    """`layers` cut into `stages` contiguous shares as even as can be: the first `layers % stages`
    stages take one layer more."""
    if stages < 1:
        return []
    base, extra = divmod(layers, stages)
    return [base + (1 if s < extra else 0) for s in range(stages)]


def layer_params(m, layer: int = 0) -> int:
    """Weights of the matrix multiplications of one layer: attention's and its MLP's (or its
    mixture of experts': the router and every expert). Norms and biases, O(h), are left out."""
    return attention_params(m) + expert_params(m, layer) + mlp_params(m, layer)


def attention_params(m) -> int:
    """Q and the output projection h x h each, K and V h x (h kv/a) each."""
    kv = m.hidden * m.kv_heads // m.heads
    return 2 * m.hidden * m.hidden + 2 * m.hidden * kv


def is_moe(m, layer: int) -> bool:
    """A mixture-of-experts layer: the model has experts and the layer is past the dense ones."""
    return m.experts > 0 and layer >= m.first_dense_layers


def mlp_params(m, layer: int) -> int:
    """The MLP's 2 (3 when gated) matrices h x f of a dense layer; of an MoE layer, the router
    h x E and the shared expert's (its routed experts are `expert_params`)."""
    per = 3 if m.gated_mlp else 2
    if not is_moe(m, layer):
        return per * m.hidden * m.ffn_hidden
    return m.hidden * m.experts + per * m.hidden * m.shared_expert_ffn_hidden


def expert_size(m, layer: int) -> int:
    """One routed expert's weights in an MoE layer (0 in a dense one)."""
    return (3 if m.gated_mlp else 2) * m.hidden * m.expert_ffn_hidden if is_moe(m, layer) else 0


def expert_params(m, layer: int) -> int:
    """The routed experts' weights in an MoE layer, all of them (0 in a dense one)."""
    return expert_size(m, layer) * m.experts


def active_params(m, layer: int) -> int:
    """The weights one token meets in the layer: all of a dense layer; of an MoE layer, attention,
    the router, the shared expert and its top-k routed experts."""
    return attention_params(m) + mlp_params(m, layer) + m.top_k * expert_size(m, layer)


def embedding_params(m) -> int:
    """The input embedding (first stage) or the output layer (last stage): V x h each."""
    return m.vocab * m.hidden


def layer_flops(m, layer: int = 0) -> tuple[float, float, float]:
    """FLOPs of one layer on one microbatch: (F, I, W). F = 2bs x weights + 4bs^2h (QK^T and the
    attention-weighted V); W = 2bs x weights (the weight gradients); I = 2bs x weights + 8bs^2h (the
    input gradients, and the attention core's backward). Recomputation adds to I what it recomputes
    before the backward: the whole forward (full, or the layers selective every-N checkpoints), the
    attention core's forward (selective `attention`) or the matmuls with a weight it does not keep
    (selective `op`: every second one, counted from the first)."""
    b, s, h = m.micro_batch, m.seq_len, m.hidden
    matmul = 2.0 * b * s * active_params(m, layer)
    core = 4.0 * b * s * s * h
    F = matmul + core
    I = matmul + 2 * core  # noqa: E741
    mode = checkpoint_of(m, layer)
    if mode == "full":
        I += F  # noqa: E741
    elif mode == "selective" and m.selective == "attention":
        I += core  # noqa: E741
    elif mode == "selective":
        I += 2.0 * b * s * _recomputed_weights(m, layer)  # noqa: E741
    return F, I, matmul


def checkpoint_of(m, layer: int) -> str:
    """The checkpointing mode of the model's `layer` (from 0): selective every N (torchtitan's
    `selective_ac_option = "N"`) checkpoints layers 0, N, 2N, ... whole and leaves the rest."""
    if m.recompute == "selective" and m.selective.isdigit():
        return "full" if layer % int(m.selective) == 0 else "none"
    return m.recompute


def _recomputed_weights(m, layer: int = 0) -> int:
    """The weights of the matmuls torchtitan's per-op policy recomputes: the second, fourth, ... in
    forward order (wk, wo, and w3 or none of the MLP's two). In an MoE layer only attention's are
    counted (wk, wo): the experts' grouped matmuls are kept, an approximation (docs/units.md)."""
    h, kv = m.hidden, m.hidden * m.kv_heads // m.heads
    mlp = [] if is_moe(m, layer) else [h * m.ffn_hidden] * (3 if m.gated_mlp else 2)
    return sum(w for i, w in enumerate([h * h, h * kv, h * kv, h * h] + mlp) if i % 2 == 1)


def output_flops(m) -> tuple[float, float, float]:
    """FLOPs of the output layer on one microbatch: 2bshV each for F, I and W (the loss is O(bsV))."""
    x = 2.0 * m.micro_batch * m.seq_len * m.hidden * m.vocab
    return x, x, x


def shape(m, device: str = "cuda", moe: bool = False) -> activations.Shape:
    """A layer of model `m` (an MoE one with `moe`) as the activation model reads it."""
    experts = dict(experts=m.experts, top_k=m.top_k, expert_ffn=m.expert_ffn_hidden,
                   shared_ffn=m.shared_expert_ffn_hidden) if moe else {}
    return activations.Shape(m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.seq_len, DTYPE_BYTES[m.dtype],
                             norm=m.norm, rope=m.rope, gated_mlp=m.gated_mlp, dropout=m.dropout, device=device,
                             **experts)


def layer_activation_bytes(m, layer: int = 0, tp: int = 1, sp: bool = True, cp: int = 1) -> float:
    """Bytes one layer keeps for its backward, per microbatch, on one rank: the tensors its
    operations save (schedc/jobs/activations.py, op by op, per attention kernel and checkpointing
    mode), for the s b / cp tokens the rank holds, tensor parallelism dividing them as
    `activations.bytes_per_token` says. With the eager kernel, dropout, d = 2, kv = a, f = 4h and
    no parallelism: sbh (34 + 5as/h), Korthikanti et al. 2022 section 4.1 (plus the norms'
    statistics, 16 bytes a token)."""
    return _per_token(m, checkpoint_of(m, layer), is_moe(m, layer), tp, sp) * m.seq_len * m.micro_batch / cp


@lru_cache(maxsize=256)
def _per_token(m, mode: str, moe: bool, tp: int, sp: bool) -> float:
    selective = m.selective if m.selective in activations.SELECTIVE else "op"
    kept = activations.saved(shape(m, moe=moe), m.attention, mode, selective)
    return activations.bytes_per_token(kept, tp, sp)


def first_stage_bytes(m) -> float:
    """What the embedding keeps per microbatch: its dropout mask, sbh bytes (none without dropout)."""
    return float(m.seq_len * m.micro_batch * m.hidden) if m.dropout else 0.0


def last_stage_bytes(m) -> float:
    """What the final norm, the output layer and the loss keep per microbatch: the inputs of the
    norm and of the projection, d sbh each, and the fp32 logits, 4 sbV: 4sbh (1 + V/h) at d = 2
    (Korthikanti et al. 2022, section 4.3)."""
    s, b = m.seq_len, m.micro_batch
    return 2.0 * DTYPE_BYTES[m.dtype] * s * b * m.hidden + float(LOGIT_BYTES * s * b * m.vocab)


def message_bytes(m) -> float:
    """One activation (or its gradient) between stages: s x b x h elements of d bytes."""
    return float(m.seq_len * m.micro_batch * m.hidden * DTYPE_BYTES[m.dtype])


def grad_bytes(m) -> int:
    """Bytes of one gradient element as held and reduced: the weights' dtype, or 4 when gradients
    are accumulated and reduced in fp32 (Megatron-LM's `--accumulate-allreduce-grads-in-fp32`, its
    fp32 main_grad; torchtitan's FSDP `mixed_precision_reduce = "float32"`)."""
    fp32 = getattr(m, "accumulate_allreduce_grads_in_fp32", False)
    return 4 if fp32 else DTYPE_BYTES[m.dtype]


def state_bytes_per_param(m) -> int:
    """Weights, gradients and mixed-precision Adam state per parameter: d + g + 12 (an fp32 master
    copy, momentum and variance; ZeRO, Rajbhandari et al. 2020, 3.1: 16 bytes at 16 bits; 18 with
    fp32 gradients, Megatron-LM's count), or 4 + 4 + 8 in fp32 (momentum and variance; the weights
    are their own master copy)."""
    d = DTYPE_BYTES[m.dtype]
    return d + grad_bytes(m) + (12 if d < 4 else 8)


def stages(m, num_stages: int, p: mesh.Parallel = mesh.Parallel()) -> list[StageEstimate]:
    """The model cut into `num_stages` stages, in model order, each as one rank of the job holds it:
    tensor parallelism t splits the weights (the embedding and output layer by vocabulary) and the
    FLOPs, context parallelism c the tokens, and the activations divide as `layer_activation_bytes`
    says; the layers per stage as `mesh.split_layers` cuts them (ValueError if they cannot be)."""
    Fo, Io, Wo = output_flops(m)
    work, shards = p.tp * p.cp, p.sequence_shards
    out, start = [], 0
    for s, n in enumerate(mesh.split_layers(m.layers, num_stages, p)):
        first, last = s == 0, s == num_stages - 1
        F, I, W = (sum(x) for x in zip(*(layer_flops(m, i) for i in range(start, start + n)))) if n else (0, 0, 0)
        kept = sum(layer_activation_bytes(m, i, p.tp, p.sp, p.cp) for i in range(start, start + n))
        ends = (first_stage_bytes(m) / shards if first else 0.0) + (_last_stage_bytes(m, p) if last else 0.0)
        out.append(StageEstimate(
            n, first, last, (F + (Fo if last else 0.0)) / work, (I + (Io if last else 0.0)) / work,
            (W + (Wo if last else 0.0)) / work, (kept + ends) * m.activation_scale,
            sum(rank_params(m, i, p) for i in range(start, start + n))
            + ((embedding_params(m) if first else 0) + (embedding_params(m) if last else 0)) // p.tp))
        start += n
    return out


def rank_params(m, layer: int, p: mesh.Parallel = mesh.Parallel()) -> int:
    """A layer's weights on one rank: tensor parallelism splits attention, the MLP, the router and
    the shared expert t ways; expert parallelism gives each rank 1/ep of the routed experts."""
    return (attention_params(m) + mlp_params(m, layer)) // p.tp + expert_params(m, layer) // p.ep


def _last_stage_bytes(m, p: mesh.Parallel) -> float:
    """`last_stage_bytes` on one rank: the norm's and projection's inputs split like the sequence,
    the logits by vocabulary (tensor parallelism's cross entropy) and tokens (context parallelism)."""
    s, b = m.seq_len, m.micro_batch
    return (2.0 * DTYPE_BYTES[m.dtype] * s * b * m.hidden / p.sequence_shards
            + float(LOGIT_BYTES * s * b * m.vocab) / (p.tp * p.cp))
