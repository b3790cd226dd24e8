"""The transformer of examples/transformer.py with its token embedding and vocabulary head tied:
`schedc run SCHEDULE --model examples.tied:build_stages` for a schedule that sums the two copies'
gradients with REDUCE_TIED (first and last stage).

Stage 0 holds the embedding and the last stage the head; the head's weight starts as a copy of the
embedding's, and `tied_parameters` names the pair, so REDUCE_TIED gives each copy the gradient of
the one weight the unsplit, tied model has (and the copies stay equal under any optimizer).
"""
from __future__ import annotations

import torch

from examples import transformer
from examples.transformer import loss_fn, make_batch  # noqa: F401 - the runtime reads them from here

__all__ = ["build_stages", "loss_fn", "make_batch", "tied_parameters"]


def build_stages(stage_ids, num_stages: int, *, layers: int = transformer.LAYERS) -> list[torch.nn.Module]:
    """transformer.build_stages, the last stage's head weight a copy of stage 0's embedding."""
    stages = transformer.build_stages(stage_ids, num_stages, layers=layers)
    if num_stages - 1 in stage_ids:
        embedding = transformer._seeded(10_000, transformer.Embed).tok.weight  # stage 0's, as it builds it
        with torch.no_grad():
            stages[list(stage_ids).index(num_stages - 1)][-1].out.weight.copy_(embedding)
    return stages


def tied_parameters(module: torch.nn.Module, stage: int, num_stages: int) -> list[torch.nn.Parameter]:
    """The tied weight on the first stage (the token embedding) and on the last (the head)."""
    if num_stages == 1:
        return []
    return [module[0].tok.weight] if stage == 0 else [module[-1].out.weight]
