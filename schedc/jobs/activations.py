"""What one transformer layer keeps for its backward, per token of a microbatch: the tensors its
operations save, told op by op as torch's autograd saves them, for each attention kernel and each
activation-checkpointing mode, and how tensor, sequence and context parallelism divide them.
docs/units.md gives the sources; tests/test_activations.py measures real layers against it.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
ATTENTION = ("eager", "sdpa", "flash")  # sdpa: torch's fused kernels (flash, cuDNN, memory-efficient)
CHECKPOINT = ("none", "selective", "full")
SELECTIVE = ("op", "attention")  # torchtitan's per-op policy; Megatron-LM's core-attention recompute
DEVICES = ("cuda", "cpu")  # where the layer runs: the kernels differ in what they save (see `Shape`)
STAT_BYTES = 4  # the attention's log-sum-exp per head and token, and CUDA's norm statistics: fp32


@dataclass(frozen=True)
class Tensor:
    """One activation: its name, bytes per token, and whether tensor parallelism splits it always
    (`tensor`: inside the column- and row-parallel matmuls) or only with sequence parallelism
    (`sequence`: the norms, residuals and dropouts, replicated across TP ranks without it)."""

    name: str
    per_token: float
    region: str = "tensor"


@dataclass(frozen=True)
class Op:
    """One operation of the layer's forward: its kind (`mm` for a matmul with a weight, `bmm` for one
    between activations, `attention` for a fused attention kernel, `other`; `checkpoint` stands for
    the attention core's inputs, which a checkpoint around the core keeps), the tensors it returns
    and those autograd saves for its backward."""

    kind: str
    out: tuple[Tensor, ...]
    saves: tuple[Tensor, ...] = ()
    core: bool = False  # inside the attention core (what Megatron-LM's selective mode recomputes)


@dataclass(frozen=True)
class Shape:
    """The layer's shape and make-up: hidden width, heads, key/value heads, MLP width, the dtype's
    bytes, and its parts (RMSNorm or LayerNorm, rotary embeddings, a gated MLP, dropout, biases)."""

    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    seq_len: int
    dtype_bytes: int = 2
    norm: str = "layernorm"
    rope: bool = False
    gated_mlp: bool = False
    dropout: bool = False
    device: str = "cuda"
    experts: int = 0  # a mixture of experts in place of the MLP: routed experts (0: a dense MLP)
    top_k: int = 1  # experts each token goes to
    expert_ffn: int = 0  # each expert's MLP width
    shared_ffn: int = 0  # the shared expert's MLP width (0: none)

    @property
    def mask_bytes(self) -> int:
        """A dropout mask's bytes an element: CUDA's kernel keeps a bool; on the CPU torch multiplies
        by a mask of the input's dtype."""
        return 1 if self.device == "cuda" else self.dtype_bytes

    @property
    def stat_bytes(self) -> int:
        """LayerNorm's mean and reciprocal deviation per token: fp32 on CUDA, the dtype on the CPU."""
        return STAT_BYTES if self.device == "cuda" else self.dtype_bytes


def _norm(x: Tensor, s: Shape, name: str) -> tuple[list[Op], Tensor]:
    """A norm before attention or the MLP. LayerNorm (fused on both devices) and CUDA's fused
    RMSNorm save their input and per-token statistics; torch's RMSNorm on the CPU is its composite
    form, which saves the input cast to fp32, the normalised fp32 tensor and the reciprocal RMS."""
    d, h = s.dtype_bytes, s.hidden
    y = Tensor(f"{name} output", d * h, "sequence")
    if s.norm == "layernorm":
        stats = Tensor(f"{name} statistics", 2 * s.stat_bytes, "sequence")
        return [Op("other", (y, stats), (x, stats))], y
    rstd = Tensor(f"{name} reciprocal RMS", STAT_BYTES, "sequence")
    if s.device == "cuda":
        return [Op("other", (y, rstd), (x, rstd))], y
    f32 = x if d == 4 else Tensor(f"{name} input in fp32", 4 * h, "sequence")
    normed = Tensor(f"{name} normalised in fp32", 4 * h, "sequence")
    return [Op("other", (f32,)), Op("other", (rstd,), (f32,)), Op("other", (normed,), (rstd, f32)),
            Op("other", (y,), (normed,))], y


def _dropout(x: Tensor, s: Shape, name: str, width: float, region: str) -> tuple[list[Op], Tensor]:
    """Dropout keeps its mask (one byte an element); without dropout nothing happens."""
    if not s.dropout:
        return [], x
    y = Tensor(f"{name} output", s.dtype_bytes * width, region)
    mask = Tensor(f"{name} mask", s.mask_bytes * width, region)
    return [Op("other", (y, mask), (mask,))], y


def _rope(t: Tensor, s: Shape, width: float, name: str) -> tuple[list[Op], Tensor]:
    """Rotary embeddings as torchtitan applies them (cast to fp32, viewed as complex, multiplied by
    the constant frequencies, cast back) save nothing per microbatch: the product's backward needs
    only the frequencies, a buffer, and a cast needs nothing."""
    if not s.rope:
        return [], t
    back = Tensor(f"{name} after rotary", s.dtype_bytes * width, "tensor")
    return [Op("other", (back,))], back


def _attention_core(q: Tensor, k: Tensor, v: Tensor, s: Shape, kernel: str) -> tuple[list[Op], Tensor]:
    """The attention core. A fused kernel (sdpa, flash) saves q, k, v (key/value heads not repeated),
    its output and the log-sum-exp per head and token, and recomputes the scores in its backward.
    The eager core (softmax(q k^T) v in the model's dtype, as Megatron-LM's unfused path and
    Korthikanti et al. 2022 count it) repeats k and v to every head, saves the softmax output,
    a row of s scores per head and token, and with dropout its mask and output."""
    d, h, a = s.dtype_bytes, s.hidden, s.heads
    out = Tensor("attention output", d * h)
    boundary = Op("checkpoint", (), (q, k, v))
    if kernel != "eager":
        lse = Tensor("attention log-sum-exp", STAT_BYTES * a)
        return [boundary, Op("attention", (out, lse), (q, k, v, out, lse), core=True)], out
    ops: list[Op] = [boundary]
    if s.kv_heads != a:
        k, v = Tensor("keys repeated", d * h), Tensor("values repeated", d * h)
        ops.append(Op("other", (k, v), core=True))
    scores = Tensor("attention scores", d * a * s.seq_len)
    probs = Tensor("attention probabilities", d * a * s.seq_len)
    ops += [Op("bmm", (scores,), (q, k), core=True), Op("other", (probs,), (probs,), core=True)]
    drop_ops, probs = _dropout(probs, s, "attention dropout", a * s.seq_len, "tensor")
    ops += [replace(op, core=True) for op in drop_ops]
    return ops + [Op("bmm", (out,), (probs, v), core=True)], out


def _linear(x: Tensor, out: Tensor) -> Op:
    """A matmul with a weight saves its input (the weight is a parameter, not an activation)."""
    return Op("mm", (out,), (x,))


def layer_ops(s: Shape, kernel: str) -> tuple[Tensor, list[Op]]:
    """The layer's input and its forward, op by op: norm, q/k/v projections, rotary embeddings,
    the attention core, the output projection, dropout and the residual; norm, the MLP (gated:
    w2(silu(w1 x) * w3 x); else fc2(gelu(fc1 x))), dropout and the residual."""
    d, h = s.dtype_bytes, s.hidden
    kv = h * s.kv_heads / s.heads
    x = Tensor("layer input", d * h, "sequence")
    ops: list[Op] = []
    norm, y = _norm(x, s, "attention norm")
    q, k, v = Tensor("queries", d * h), Tensor("keys", d * kv), Tensor("values", d * kv)
    ops += [*norm, _linear(y, q), _linear(y, k), _linear(y, v)]
    rq, q = _rope(q, s, h, "queries")
    rk, k = _rope(k, s, kv, "keys")
    core, attn = _attention_core(q, k, v, s, kernel)
    ops += rq + rk + core
    proj = Tensor("attention projection", d * h, "sequence")
    drop, proj = _dropout(proj, s, "attention-out dropout", h, "sequence")
    mid = Tensor("residual after attention", d * h, "sequence")
    ops += [_linear(attn, proj), *drop, Op("other", (mid,))]
    norm, y = _norm(mid, s, "MLP norm")
    ops += [*norm, *_mlp(y, s)]
    return x, ops


def _dense(y: Tensor, s: Shape, f: float, out: Tensor, name: str = "", per: float = 1.0) -> list[Op]:
    """An MLP of width f on `per` copies of each token: gated, w2(silu(w1 y) * w3 y); else
    fc2(gelu(fc1 y))."""
    d = s.dtype_bytes * per
    if s.gated_mlp:
        g, act, u, prod = (Tensor(name + n, d * f) for n in ("gate projection", "gate activation", "up projection",
                                                               "gated product"))
        return [_linear(y, g), Op("other", (act,), (g,)), _linear(y, u), Op("other", (prod,), (act, u)),
                _linear(prod, out)]
    up, act = Tensor(name + "MLP up projection", d * f), Tensor(name + "MLP activation", d * f)
    return [_linear(y, up), Op("other", (act,), (up,)), _linear(act, out)]


def _moe(y: Tensor, s: Shape, out: Tensor) -> list[Op]:
    """A mixture of experts as tests/reference_layers.py's MoE runs it (torchtitan's make-up): an
    fp32 router (its input cast to fp32, softmax probabilities), top-k, the tokens gathered in
    expert order (the gather and the combine keep int64 indices, k a token each), each expert's MLP
    on the k copies, the outputs weighted by the router's scores and scatter-added back; a shared
    expert on every token beside them."""
    d, h, k = s.dtype_bytes, s.hidden, s.top_k
    f32 = y if d == 4 else Tensor("router input in fp32", 4 * h, "sequence")
    probs = Tensor("router probabilities", 4 * s.experts, "sequence")
    index = [Tensor(f"routing {n}", 8 * k, "sequence") for n in ("choices", "order", "tokens")]
    routed = Tensor("routed tokens", d * h * k)
    expert_out, weights = Tensor("expert outputs", d * h * k), Tensor("routing weights", d * k)
    weighted = Tensor("weighted expert outputs", d * h * k)
    ops = [Op("other", (f32,)), Op("mm", (Tensor("router logits", 4 * s.experts),), (f32,)),
           Op("other", (probs,), (probs,)), Op("other", (index[0],), (index[0],)),
           Op("other", (index[1],), (index[1],)), Op("other", (routed, index[2]), (index[2],)),
           *_dense(routed, s, s.expert_ffn, expert_out, "expert ", k),
           Op("other", (weights,), ()), Op("other", (weighted,), (expert_out, weights)),
           Op("other", (out,), (weighted,))]
    if s.shared_ffn:
        ops += _dense(y, s, s.shared_ffn, Tensor("shared expert output", d * h, "sequence"), "shared expert ")
    return ops


def _mlp(y: Tensor, s: Shape) -> list[Op]:
    d = s.dtype_bytes
    out = Tensor("MLP output", d * s.hidden, "sequence")
    ops = _moe(y, s, out) if s.experts else _dense(y, s, s.ffn_hidden, out)
    drop, _ = _dropout(out, s, "MLP dropout", s.hidden, "sequence")
    return ops + drop + [Op("other", (Tensor("layer output", d * s.hidden, "sequence"),))]


def saved(s: Shape, kernel: str, checkpoint: str = "none", selective: str = "op") -> list[Tensor]:
    """The tensors the layer holds between its forward and its backward, each once.

    none: everything its ops save. full: only its input (the whole layer is recomputed).
    selective `op` (torchtitan's per-op policy): the input and the outputs of the ops it keeps (the
    attention kernels, matmuls between activations, every other matmul with a weight, counted in
    forward order from the first); the rest is recomputed. selective `attention` (Megatron-LM's
    `--recompute-granularity selective`, Korthikanti et al. 2022 section 5): the attention core is
    checkpointed, so it keeps its inputs (q, k, v) and the rest of the layer saves as without."""
    x, ops = layer_ops(s, kernel)
    if checkpoint == "full":
        return [x]
    if checkpoint == "none":
        return _once(t for op in ops if op.kind != "checkpoint" for t in op.saves)
    if selective == "attention":
        return _once(t for op in ops if not op.core for t in op.saves)
    kept, mms = [x], 0
    for op in ops:
        mms += op.kind == "mm"
        if op.kind in ("attention", "bmm") or (op.kind == "mm" and mms % 2 == 1):
            kept.extend(op.out)
    return _once(kept)


def _once(tensors: Iterable[Tensor]) -> list[Tensor]:
    out: dict[str, Tensor] = {}
    for t in tensors:
        out.setdefault(t.name, t)
    return list(out.values())


def bytes_per_token(tensors: list[Tensor], tp: int = 1, sp: bool = True, cp: int = 1) -> float:
    """Bytes per token of the microbatch on one rank: tensor parallelism t divides the `tensor`
    region, and with sequence parallelism the `sequence` region too (Korthikanti et al. 2022,
    Table 2); context parallelism c gives each rank 1/c of the tokens (divide the microbatch's
    tokens by c, not these bytes)."""
    return sum(t.per_token / (tp if t.region == "tensor" or sp else 1) for t in tensors)
