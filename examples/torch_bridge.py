"""A schedc schedule run by torch's own pipeline runtime (`schedc.torch.schedule`), on 2 CPU ranks.

ZB-V puts two stages on each rank in a V: with P ranks and 2P stages, rank r holds stage r on the way
down and stage 2P-1-r on the way back (schedc's `place vshape`; `program.placement[s]` is the rank of
stage s), so on 2 ranks rank 0 holds stages 0 and 3 (the first and the last) and rank 1 stages 1
and 2. Each rank builds a `PipelineStage` for each stage it holds, from examples/mlp.py's model, and
`schedc.torch.schedule` returns torch's `_PipelineScheduleRuntime` with the verified schedule
loaded. One training step; each rank checks its gradients against the unsplit model's.

    python -m examples.torch_bridge      # from the repository root: 2 gloo ranks, a few seconds
"""
from __future__ import annotations

import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.pipelining import PipelineStage

import schedc
import schedc.torch
from examples import mlp

P, M, BATCH, WIDTH, DEPTH = 2, 4, 8, 16, 4


def train_one_step(rank: int, port: int) -> None:
    torch.set_default_dtype(torch.float64)  # exact enough to compare with the unsplit model
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=P,
                            timeout=datetime.timedelta(seconds=60))
    try:
        program = schedc.load("zbv", {"P": P, "M": M})  # 2P stages, placed in a V
        mine = [s for s, r in enumerate(program.placement) if r == rank]  # rank 0: [0, 3]; rank 1: [1, 2]
        S = program.num_stages
        chunks = mlp.build_stages(mine, S, width=WIDTH, depth=DEPTH)  # stage s's blocks, seeded alike everywhere
        stages = [PipelineStage(chunk, s, S, torch.device("cpu")) for s, chunk in zip(mine, chunks)]
        pp = schedc.torch.schedule("zbv", stages, n_microbatches=M, loss_fn=mlp.loss_fn)  # checked, then loaded
        x, y = mlp.make_batch(0, BATCH, width=WIDTH)
        losses: list[torch.Tensor] = []
        inputs = (x,) if 0 in mine else ()  # the rank of the first stage feeds the batch,
        pp.step(*inputs, target=y if S - 1 in mine else None, losses=losses)  # the last stage's takes the target
        whole = torch.nn.Sequential(*mlp.build_stages(range(S), S, width=WIDTH, depth=DEPTH))
        mlp.loss_fn(whole(x), y).backward()  # the unsplit model on the whole batch
        for s, chunk in zip(mine, chunks):
            for (name, p), q in zip(chunk.named_parameters(), whole[s].parameters()):
                assert torch.allclose(p.grad, q.grad, atol=1e-10), f"stage {s} {name}: gradients differ"
        said = f", loss {sum(losses).item() / M:.6f}" if losses else ""
        sys.stdout.write(f"rank {rank}: stages {mine} trained with torch's runtime as the unsplit model does{said}\n")
        sys.stdout.flush()  # (one write: the two ranks share standard output)
    finally:
        dist.destroy_process_group()


def main() -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from schedc.runtime.launch import free_port
    mp.start_processes(train_one_step, args=(free_port(),), nprocs=P, join=True, start_method="fork")  # (CPU only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
