"""A small decoder-only transformer split into pipeline stages (`--model examples.transformer:build_stages`).

Stage 0 embeds tokens (and positions), every stage holds its share of LAYERS pre-norm blocks
(causal self-attention + MLP), and the last stage ends with a norm and the vocabulary head; the loss
is next-token cross-entropy. Each part is initialised from its own seed, so a stage is the same
whichever rank builds it and the stages chained in order are the unsplit model.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

VOCAB = 64
DIM = 32
HEADS = 4
LAYERS = 4
SEQ = 16


class Block(nn.Module):
    def __init__(self, dim: int = DIM, heads: int = HEADS):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class Embed(nn.Module):
    def __init__(self, vocab: int = VOCAB, dim: int = DIM, seq: int = SEQ):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))


class Head(nn.Module):
    def __init__(self, vocab: int = VOCAB, dim: int = DIM):
        super().__init__()
        self.norm, self.out = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


def _seeded(seed: int, make):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make()


def build_stages(stage_ids, num_stages: int, *, layers: int = LAYERS) -> list[nn.Module]:
    """Stage s: [embedding if s == 0] + blocks s*L//S .. (s+1)*L//S - 1 + [head if last]."""
    L = max(layers, num_stages)
    out = []
    for s in stage_ids:
        parts = [_seeded(10_000, Embed)] if s == 0 else []
        parts += [_seeded(i, Block) for i in range(s * L // num_stages, (s + 1) * L // num_stages)]
        if s == num_stages - 1:
            parts.append(_seeded(20_000, Head))
        out.append(nn.Sequential(*parts))
    return out


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def make_batch(step: int, batch_size: int):
    """Random token sequences; the target is the sequence shifted by one."""
    gen = torch.Generator().manual_seed(2_000_003 + step)
    ids = torch.randint(0, VOCAB, (batch_size, SEQ + 1), generator=gen)
    return ids[:, :-1], ids[:, 1:]
