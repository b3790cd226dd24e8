"""The activation model (schedc/jobs/activations.py) against what real layers hold, measured, and
against the published closed forms: Korthikanti et al. 2022 (Table 2, with and without sequence
parallelism) and Megatron-LM's theoretical memory (megatron/training/theoretical_memory_usage.py)."""
from __future__ import annotations

import pytest

from schedc.jobs import activations as A

torch = pytest.importorskip("torch")
reference = pytest.importorskip("reference_layers")


def shape_of(c, dtype_bytes: int = 2, device: str = "cpu") -> A.Shape:
    llama = c.style == "llama"
    return A.Shape(c.hidden, c.heads, c.kv_heads, c.ffn_hidden, c.seq_len, dtype_bytes,
                   norm="rmsnorm" if llama else "layernorm", rope=llama, gated_mlp=llama,
                   dropout=c.dropout > 0, device=device, experts=c.experts, top_k=c.top_k,
                   expert_ffn=c.expert_ffn, shared_ffn=c.shared_ffn)


CASES = [(style, kv, kernel) for style in ("llama", "gpt") for kv in (4, 2) for kernel in ("eager", "sdpa")]


def config(style: str, kv: int, kernel: str, **kw):
    gpt = style == "gpt"
    # On the CPU, torch's fused attention has no dropout (it falls back to the math path in fp32);
    # CUDA's kernels keep only a random-number state for it, so the fused cases run without.
    return reference.Config(style=style, kv_heads=kv, attention=kernel, ffn_hidden=512 if gpt else 352,
                            dropout=0.1 if gpt else 0.0,
                            attention_dropout=0.1 if gpt and kernel == "eager" else 0.0, **kw)


@pytest.mark.parametrize("mode", A.CHECKPOINT)
@pytest.mark.parametrize("style,kv,kernel", CASES)
def test_the_model_is_what_a_real_layer_holds(style, kv, kernel, mode):
    """Llama-style (torchtitan's block) and GPT (Megatron-LM's) layers, grouped-query or not, eager
    or fused attention, each checkpointing mode (selective: torchtitan's per-op policy)."""
    c = config(style, kv, kernel)
    measured = reference.layer_bytes_per_token(c, mode)
    assert A.bytes_per_token(A.saved(shape_of(c), kernel, mode)) == pytest.approx(measured, rel=0.01)


@pytest.mark.parametrize("style,kv,kernel", CASES)
def test_megatron_selective_keeps_the_core_inputs(style, kv, kernel):
    """Megatron-LM's selective recomputation checkpoints the attention core: its inputs stay, its
    softmax, dropout and (fused) log-sum-exp go."""
    c = config(style, kv, kernel, recompute_core=True)
    measured = reference.layer_bytes_per_token(c, "none")
    assert A.bytes_per_token(A.saved(shape_of(c), kernel, "selective", "attention")) == pytest.approx(measured, rel=0.01)


@pytest.mark.parametrize("mode", ["none", "full"])
@pytest.mark.parametrize("shared", [0, 192])
@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
def test_a_mixture_of_experts_layer(kernel, shared, mode):
    """A Llama-style layer whose MLP is a mixture of 8 experts, top-2, with and without a shared
    expert: the router, the routing indices, the k copies of each token and their experts' tensors."""
    c = reference.Config(style="llama", kv_heads=2, attention=kernel, experts=8, top_k=2, expert_ffn=96,
                         shared_ffn=shared)
    measured = reference.layer_bytes_per_token(c, mode)
    assert A.bytes_per_token(A.saved(shape_of(c), kernel, mode)) == pytest.approx(measured, rel=0.01)


def test_an_fp32_layer_too():
    """In fp32 the CPU's RMSNorm keeps the input itself, not a cast copy."""
    c = config("llama", 2, "sdpa")
    measured = (reference.held_bytes(c, "none", 2, torch.float32) - reference.held_bytes(c, "none", 1, torch.float32)
                ) / (c.micro_batch * c.seq_len)
    assert A.bytes_per_token(A.saved(shape_of(c, 4), "sdpa")) == pytest.approx(measured, rel=0.01)


def gpt(h: int = 4096, a: int = 32, s: int = 2048) -> A.Shape:
    """Korthikanti et al.'s layer on CUDA: LayerNorm, GELU MLP of width 4h, dropout, 16-bit."""
    return A.Shape(h, a, a, 4 * h, s, 2, dropout=True)


def without_stats(tensors) -> list[A.Tensor]:
    """The paper and Megatron-LM leave out the norms' per-token statistics (O(1) a token)."""
    return [t for t in tensors if "statistics" not in t.name]


@pytest.mark.parametrize("t", [1, 2, 8])
def test_korthikanti_table_2(t):
    s = gpt()
    h, a, seq = s.hidden, s.heads, s.seq_len
    core = 5 * a * seq / h
    none = without_stats(A.saved(s, "eager", "none"))
    assert A.bytes_per_token(none, tp=t, sp=False) == pytest.approx(h * (10 + 24 / t + core / t))
    assert A.bytes_per_token(none, tp=t, sp=True) == pytest.approx(h * (34 / t + core / t))
    selective = without_stats(A.saved(s, "eager", "selective", "attention"))
    assert A.bytes_per_token(selective, tp=t, sp=True) == pytest.approx(h * 34 / t)
    assert A.bytes_per_token(A.saved(s, "eager", "full")) == 2 * h


@pytest.mark.parametrize("f", [4096 * 4, 11008, 28672])
def test_megatron_theoretical_memory_per_layer(f):
    """compute_activation_memory (sequence parallel, selective): sbh (18 + 4 f / h) / t; without
    sequence parallelism: sbh (10 + 24 / t) at f = 4h."""
    s = A.Shape(4096, 32, 32, f, 4096, 2, dropout=True)
    kept = without_stats(A.saved(s, "eager", "selective", "attention"))
    for t in (1, 4):
        assert A.bytes_per_token(kept, tp=t, sp=True) == pytest.approx(s.hidden * (18 + 4 * f / s.hidden) / t)
    if f == 4 * 4096:
        assert A.bytes_per_token(kept, tp=4, sp=False) == pytest.approx(s.hidden * (10 + 24 / 4))


def test_fused_attention_saves_no_scores():
    """A fused kernel keeps no s x s scores (a 4k-sequence Llama-2-7B layer holds 0.37 of its eager
    form): the difference is the softmax output, less the kernel's log-sum-exp."""
    s = A.Shape(4096, 32, 32, 11008, 4096, 2, norm="rmsnorm", rope=True, gated_mlp=True)
    eager = A.bytes_per_token(A.saved(s, "eager"))
    fused = A.bytes_per_token(A.saved(s, "sdpa"))
    assert A.bytes_per_token(A.saved(s, "flash")) == fused
    assert eager - fused == 2 * s.heads * s.seq_len - A.STAT_BYTES * s.heads
    assert not any("scores" in t.name or "probabilities" in t.name for t in A.saved(s, "sdpa"))
