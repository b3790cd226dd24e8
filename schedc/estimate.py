"""From a transformer's shape to what one pipeline stage costs: FLOPs of F, I and W, activation bytes
per microbatch, parameters, message bytes. Pure arithmetic on a `hardware.Model`; docs/units.md gives
each formula's source (Narayanan et al. 2021, FLOPs; Korthikanti et al. 2022, activations; Qi et al.
2023, the I/W split). The first stage also holds the embedding, the last the output layer and loss.
"""
from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
RECOMPUTE = ("none", "selective", "full")
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


def layer_params(m) -> int:
    """Weights of the matrix multiplications of one layer: Q and the output projection h x h each,
    K and V h x (h kv/a) each, and the MLP's 2 (3 when gated) matrices h x f. Norms and biases,
    O(h), are left out."""
    kv = m.hidden * m.kv_heads // m.heads
    return 2 * m.hidden * m.hidden + 2 * m.hidden * kv + (3 if m.gated_mlp else 2) * m.hidden * m.ffn_hidden


def embedding_params(m) -> int:
    """The input embedding (first stage) or the output layer (last stage): V x h each."""
    return m.vocab * m.hidden


def layer_flops(m) -> tuple[float, float, float]:
    """FLOPs of one layer on one microbatch: (F, I, W). F = 2bs x weights + 4bs^2h (QK^T and the
    attention-weighted V); W = 2bs x weights (the weight gradients); I = 2bs x weights + 8bs^2h (the
    input gradients, and the attention core's backward). Recomputation adds to I what it recomputes
    before the backward: the attention core's forward (selective) or the whole forward (full)."""
    b, s, h = m.micro_batch, m.seq_len, m.hidden
    matmul = 2.0 * b * s * layer_params(m)
    core = 4.0 * b * s * s * h
    F = matmul + core
    I = matmul + 2 * core  # noqa: E741
    I += {"none": 0.0, "selective": core, "full": F}[m.recompute]  # noqa: E741
    return F, I, matmul


def output_flops(m) -> tuple[float, float, float]:
    """FLOPs of the output layer on one microbatch: 2bshV each for F, I and W (the loss is O(bsV))."""
    x = 2.0 * m.micro_batch * m.seq_len * m.hidden * m.vocab
    return x, x, x


def layer_activation_bytes(m) -> float:
    """Bytes one layer keeps for its backward, per microbatch (Korthikanti et al. 2022, section 4.1
    and Table 2; recomputation, section 5), with d bytes per element, kv/a of the heads for K and V,
    an MLP of width f:

    none: sbh (d (6 + 2 kv/a + c f/h) + 2) + as^2b (2d + 1), c = 2 (4 for a gated MLP); without
    dropout the 2 sbh of masks go and the attention core keeps d as^2b. At d = 2, kv = a, f = 4h:
    sbh (34 + 5as/h), the paper's. selective: the attention core is recomputed, its as^2b term goes
    (34 sbh). full: only the layer's input, d sbh (2 sbh)."""
    b, s, h, a, d = m.micro_batch, m.seq_len, m.hidden, m.heads, DTYPE_BYTES[m.dtype]
    sbh = float(s * b * h)
    if m.recompute == "full":
        return d * sbh
    elements = 6 + 2 * m.kv_heads / a + (4 if m.gated_mlp else 2) * m.ffn_hidden / h
    masks = 2 if m.dropout else 0
    kept = sbh * (d * elements + masks)
    if m.recompute == "selective":
        return kept
    core = (2 * d + 1) if m.dropout else d
    return kept + float(a * s * s * b) * core


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


def state_bytes_per_param(m) -> int:
    """Weights, gradients and mixed-precision Adam state per parameter: d + d + 12 (an fp32 master
    copy, momentum and variance; ZeRO, Rajbhandari et al. 2020, 3.1: 16 bytes at 16 bits), or
    4 + 4 + 8 in fp32 (momentum and variance; the weights are their own master copy)."""
    d = DTYPE_BYTES[m.dtype]
    return 2 * d + (12 if d < 4 else 8)


def stages(m, num_stages: int) -> list[StageEstimate]:
    """The model cut into `num_stages` stages, in model order."""
    F1, I1, W1 = layer_flops(m)
    Fo, Io, Wo = output_flops(m)
    per_layer = layer_activation_bytes(m)
    out = []
    for s, n in enumerate(layers_per_stage(m.layers, num_stages)):
        first, last = s == 0, s == num_stages - 1
        out.append(StageEstimate(
            n, first, last,
            n * F1 + (Fo if last else 0.0), n * I1 + (Io if last else 0.0), n * W1 + (Wo if last else 0.0),
            n * per_layer + (first_stage_bytes(m) if first else 0.0) + (last_stage_bytes(m) if last else 0.0),
            n * layer_params(m) + (embedding_params(m) if first else 0) + (embedding_params(m) if last else 0)))
    return out
