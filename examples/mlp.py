"""A small MLP split into pipeline stages: `schedc run 1f1b --model examples.mlp:build_stages`.

DEPTH residual blocks x + GELU(Linear(WIDTH, WIDTH)(x)), spread as evenly as possible over the
stages (stage s gets blocks s*D//S .. (s+1)*D//S - 1, D = max(DEPTH, S)). Block i is initialised
from seed SEED + i, so a stage has the same parameters whichever rank builds it, and the stages
chained in order are the unsplit model. The loss is the mean squared error against a fixed random function of the input;
the optimizer is Adam.
"""
from __future__ import annotations

import torch
from torch import nn

WIDTH = 512
DEPTH = 8
SEED = 0


class Block(nn.Module):
    """x + GELU(Linear(x)), initialised from seed SEED + i."""

    def __init__(self, i: int, width: int = WIDTH):
        super().__init__()
        gen = torch.Generator().manual_seed(SEED + i)
        self.lin = nn.Linear(width, width)
        with torch.no_grad():
            bound = 1 / width ** 0.5
            self.lin.weight.copy_(torch.rand(width, width, generator=gen) * 2 * bound - bound)
            self.lin.bias.copy_(torch.rand(width, generator=gen) * 2 * bound - bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + nn.functional.gelu(self.lin(x))


def build_stages(stage_ids, num_stages: int, *, width: int = WIDTH, depth: int = DEPTH) -> list[nn.Module]:
    """One nn.Sequential per stage id: its share of the blocks (identity if it has none)."""
    D = max(depth, num_stages)
    return [nn.Sequential(*(Block(i, width) for i in range(s * D // num_stages, (s + 1) * D // num_stages)))
            for s in stage_ids]


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(output, target)


def make_batch(step: int, batch_size: int, *, width: int = WIDTH):
    """Inputs and targets of training step `step` (the same on every rank)."""
    gen = torch.Generator().manual_seed(1_000_003 + step)
    x = torch.randn(batch_size, width, generator=gen)
    teacher = torch.randn(width, width, generator=torch.Generator().manual_seed(7)) / width ** 0.5
    return x, torch.tanh(x @ teacher)


def make_optimizer(parameters):
    return torch.optim.Adam(parameters, lr=1e-3)
