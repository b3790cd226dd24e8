"""Small real transformer layers in torch, and what they keep for backward, measured: the layers
schedc's activation model (schedc/jobs/activations.py) is held to. A Llama-style layer written as
torchtitan's Llama 3 block is (RMSNorm, separate q/k/v projections, complex rotary embeddings,
grouped-query attention, SwiGLU), a GPT layer as Megatron-LM's (LayerNorm, biases, GELU, dropout),
each with the eager or the fused attention core and each activation-checkpointing mode.
"""
from __future__ import annotations

import gc
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts


@dataclass(frozen=True)
class Config:
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 4
    ffn_hidden: int = 1024
    seq_len: int = 64
    micro_batch: int = 2
    style: str = "llama"  # or "gpt"
    attention: str = "sdpa"  # or "eager"
    dropout: float = 0.0  # hidden dropout (after the attention projection and the MLP)
    attention_dropout: float = 0.0  # dropout of the attention probabilities
    recompute_core: bool = False  # Megatron-LM's selective recomputation: the attention core checkpointed
    experts: int = 0  # a mixture of experts in place of the MLP (0: dense)
    top_k: int = 2
    expert_ffn: int = 96
    shared_ffn: int = 0


class Layer(nn.Module):
    """One transformer layer of the configured style."""

    def __init__(self, c: Config, dtype: torch.dtype):
        super().__init__()
        self.c = c
        h, kv = c.hidden, c.hidden * c.kv_heads // c.heads
        gpt = c.style == "gpt"
        norm = (lambda: nn.LayerNorm(h, dtype=dtype)) if gpt else (lambda: nn.RMSNorm(h, dtype=dtype))
        self.attention_norm, self.ffn_norm = norm(), norm()
        self.wq = nn.Linear(h, h, bias=gpt, dtype=dtype)
        self.wk = nn.Linear(h, kv, bias=gpt, dtype=dtype)
        self.wv = nn.Linear(h, kv, bias=gpt, dtype=dtype)
        self.wo = nn.Linear(h, h, bias=gpt, dtype=dtype)
        self.w1 = nn.Linear(h, c.ffn_hidden, bias=gpt, dtype=dtype)
        self.w2 = nn.Linear(c.ffn_hidden, h, bias=gpt, dtype=dtype)
        self.w3 = None if gpt else nn.Linear(h, c.ffn_hidden, bias=False, dtype=dtype)
        self.moe = MoE(c, dtype) if c.experts else None
        d = h // c.heads
        freqs = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
        angles = torch.outer(torch.arange(c.seq_len).float(), freqs)
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles), persistent=False)
        mask = torch.full((c.seq_len, c.seq_len), float("-inf")).triu(1).to(dtype)
        self.register_buffer("mask", mask, persistent=False)

    def rope(self, x: torch.Tensor) -> torch.Tensor:
        """torchtitan's complex rotary embedding (B, L, N, H)."""
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        out = torch.view_as_real(xc * self.freqs_cis[None, :, None, :]).flatten(3)
        return out.type_as(x)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        c = self.c
        b, s, h = x.shape
        d = h // c.heads
        q = self.wq(x).view(b, s, c.heads, d)
        k = self.wk(x).view(b, s, c.kv_heads, d)
        v = self.wv(x).view(b, s, c.kv_heads, d)
        if c.style == "llama":
            q, k = self.rope(q), self.rope(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if c.recompute_core:
            o = checkpoint(self.core, q, k, v, use_reentrant=False)
        else:
            o = self.core(q, k, v)
        return self.wo(o.transpose(1, 2).contiguous().view(b, s, h))

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(d)) v, eager or by torch's fused kernel (B, N, L, H)."""
        c = self.c
        if c.attention == "eager":
            if c.kv_heads != c.heads:
                k = k.repeat_interleave(c.heads // c.kv_heads, 1)
                v = v.repeat_interleave(c.heads // c.kv_heads, 1)
            p = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + self.mask, dim=-1)
            return F.dropout(p, c.attention_dropout, self.training) @ v
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=c.attention_dropout,
                                              enable_gqa=c.kv_heads != c.heads)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        if self.moe is not None:
            return self.moe(x)
        if self.w3 is not None:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.c.dropout
        h = x + F.dropout(self.attention(self.attention_norm(x)), p, self.training)
        return h + F.dropout(self.mlp(self.ffn_norm(h)), p, self.training)


class MoE(nn.Module):
    """A mixture of experts in torchtitan's make-up (torchtitan/models/common/moe.py), written plainly:
    the router in fp32 (softmax over the experts, top-k), the tokens sorted by expert and gathered,
    each expert a SwiGLU MLP on its tokens, the outputs weighted by the router's scores and
    scatter-added back, and a shared expert on every token."""

    def __init__(self, c: Config, dtype: torch.dtype):
        super().__init__()
        h, f = c.hidden, c.expert_ffn
        self.k, self.experts = c.top_k, c.experts
        self.gate = nn.Linear(h, c.experts, bias=False, dtype=torch.float32)
        self.w1 = nn.Parameter(torch.randn(c.experts, f, h, dtype=dtype) * 0.02)
        self.w3 = nn.Parameter(torch.randn(c.experts, f, h, dtype=dtype) * 0.02)
        self.w2 = nn.Parameter(torch.randn(c.experts, h, f, dtype=dtype) * 0.02)
        self.shared = None
        if c.shared_ffn:
            self.shared = nn.ModuleList([nn.Linear(h, c.shared_ffn, bias=False, dtype=dtype),
                                         nn.Linear(h, c.shared_ffn, bias=False, dtype=dtype),
                                         nn.Linear(c.shared_ffn, h, bias=False, dtype=dtype)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        t = x.reshape(-1, h)
        scores = torch.softmax(self.gate(t.float()), dim=-1)
        top, chosen = torch.topk(scores, self.k, dim=-1)
        order = torch.argsort(chosen.reshape(-1), stable=True)
        tokens = order // self.k
        routed = t[tokens]
        outs, start = [], 0
        for e, n in enumerate(torch.bincount(chosen.reshape(-1), minlength=self.experts).tolist()):
            xe = routed[start:start + n]
            start += n
            outs.append(F.linear(F.silu(F.linear(xe, self.w1[e])) * F.linear(xe, self.w3[e]), self.w2[e]))
        weights = top.reshape(-1)[order].to(x.dtype)
        y = torch.zeros_like(t).index_add(0, tokens, torch.cat(outs) * weights[:, None])
        if self.shared is not None:
            w1, w3, w2 = self.shared
            y = y + w2(F.silu(w1(t)) * w3(t))
        return y.view(b, s, h)


MUST_SAVE_OPS = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
                 torch.ops.aten._scaled_dot_product_flash_attention.default,
                 torch.ops.aten._scaled_dot_product_efficient_attention.default,
                 torch.ops.aten.bmm.default}
MM_OPS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)


def op_policy():
    """torchtitan's per-op selective checkpointing (torchtitan/distributed/activation_checkpoint.py,
    SelectiveAC): keep the outputs of attention kernels and of matmuls, except every second matmul
    with a weight, counted from the first; recompute the rest. The CPU flash kernel stands for the
    GPU kernels torchtitan lists."""
    count = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func in MM_OPS:
            count[mode] += 1
            return CheckpointPolicy.MUST_SAVE if count[mode] % 2 == 1 else CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if func in MUST_SAVE_OPS else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def run(layers: list[Layer], x: torch.Tensor, mode: str) -> torch.Tensor:
    for layer in layers:
        if mode == "full":
            x = checkpoint(layer, x, use_reentrant=False)
        elif mode == "selective":
            x = checkpoint(layer, x, use_reentrant=False,
                           context_fn=lambda: create_selective_checkpoint_contexts(op_policy()))
        else:
            x = layer(x)
    return x


class _Made(TorchDispatchMode):
    """Every storage an op makes, weakly held, so what is still alive after the forward is known."""

    def __init__(self):
        super().__init__()
        self.made: dict[int, tuple[StorageWeakRef, int]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                self.made[st.data_ptr()] = (StorageWeakRef(st), st.nbytes())
        return out


def held_bytes(c: Config, mode: str = "none", n: int = 1, dtype=torch.bfloat16, seed: int = 0) -> int:
    """Bytes of activations a stack of `n` layers holds after its forward, for its backward: every
    storage made during the forward and still alive, less the output and the parameters."""
    torch.manual_seed(seed)
    layers = [Layer(c, dtype).train() for _ in range(n)]
    fixed = {t.untyped_storage().data_ptr() for m in layers for t in [*m.parameters(), *m.buffers()]}
    x = torch.randn(c.micro_batch, c.seq_len, c.hidden, dtype=dtype, requires_grad=True)
    made = _Made()
    with made:
        y = run(layers, x, mode)
    gc.collect()
    skip = fixed | {y.untyped_storage().data_ptr()}
    return sum(size for ptr, (ref, size) in made.made.items() if ptr not in skip and not ref.expired())


def layer_bytes_per_token(c: Config, mode: str = "none") -> float:
    """One layer's activations per token: two stacked layers less one (so the layer's own input, the
    output of the layer before it, is counted), over the microbatch's tokens."""
    return (held_bytes(c, mode, 2) - held_bytes(c, mode, 1)) / (c.micro_batch * c.seq_len)
