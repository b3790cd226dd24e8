"""Nested FSDP under torch's runtime (rules/sharding.py, `regathered`): a stage whose FSDP modules
nest (each block wrapped, then the stage: FSDP2's usual wrapping, torchtitan's) has its inner
modules resharded after every forward, and torch's I then computes with sharded weights outside its
autograd graph: the weights' gradients come back None or wrong, silently (found by running the
bridge's accepted schedules on real FSDP2 over gloo, 2026-12-06: every built-in with I and W, and
torch's own ZB-V, interleaved zero-bubble and DualPipeV classes). The bridge refuses an I that
follows a forward of its stage with no UNSHARD between, on such a stage; held to torch itself in the
slow tier (2 gloo ranks, real `fully_shard`). This file is also that worker:
`python tests/test_torch_fsdp_nested.py --worker OUT.json`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from schedc.errors import SchedcError

ROOT = Path(__file__).resolve().parent.parent
# stage 1's I runs right after its F (torch's own lowering of a split backward: one UNSHARD, one RESHARD)
STALE = ("0UNSHARD,0F0,0SEND_F0,0RECV_B0,0I0,0W0,0F1,0SEND_F1,0RECV_B1,0I1,0W1,0REDUCE_GRAD,0RESHARD\n"
         "1UNSHARD,1RECV_F0,1F0,1I0,1SEND_B0,1W0,1RECV_F1,1F1,1I1,1SEND_B1,1W1,1REDUCE_GRAD,1RESHARD\n")
# the same with stage 1 gathered again before each I
REGATHERED = STALE.replace("1F0,1I0", "1F0,1RESHARD,1UNSHARD,1I0").replace("1F1,1I1", "1F1,1RESHARD,1UNSHARD,1I1")


def _rows(text: str):
    from schedc.interop.torch_csv import read_torch_csv
    return read_torch_csv(text).rows


def test_an_i_after_a_forward_with_no_gather_between():
    from schedc.rules.sharding import regathered
    found = list(regathered(_rows(STALE), {0, 1}, {0, 1}))
    assert [(r, x, str(a)) for r, x, a, _ in found] == [(1, 3, "1I0")]  # one per stage; stage 0 never asked
    assert "no UNSHARD(1) between" in found[0][3]
    assert list(regathered(_rows(REGATHERED), {0, 1}, {0, 1})) == []
    assert list(regathered(_rows(STALE), {0}, {0, 1})) == []  # (stage 1 not nested: not asked)
    # its blocks alone under FSDP (the stage's module not): torch runs no UNSHARD for it, none gathers
    assert [str(a) for _, _, a, _ in regathered(_rows(REGATHERED), {1})] == ["1I0"]
    full = STALE.replace("1I0,1SEND_B0,1W0", "1B0,1SEND_B0").replace("1I1,1SEND_B1,1W1", "1B1,1SEND_B1")
    assert list(regathered(_rows(full), {1}, {1})) == []  # a B is one pass: not affected


def _nested_stage(program, stage: int, rank: int):
    """A stage whose module holds an FSDP module inside (as `fully_shard` marks them) and is one."""
    import torch
    from torch.distributed.fsdp import FSDPModule

    from test_torch_oracle import MockStage
    fsdp = lambda cls: type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})  # noqa: E731
    block = torch.nn.Linear(2, 2)
    block.__class__ = fsdp(torch.nn.Linear)
    module = torch.nn.Sequential(block)
    module.__class__ = fsdp(torch.nn.Sequential)
    mock = MockStage(stage, program.num_stages, program.num_ranks, rank)
    mock.submod = module
    return mock


def test_the_bridge_refuses_it_on_the_stages_rank(tmp_path):
    pytest.importorskip("torch.distributed.pipelining")
    import schedc.torch
    for name, text in (("stale", STALE), ("regathered", REGATHERED)):
        (tmp_path / f"{name}.csv").write_text(text)
    program = schedc.load(str(tmp_path / "stale.csv"))
    with pytest.raises(SchedcError) as refused:
        schedc.torch.schedule(str(tmp_path / "stale.csv"), [_nested_stage(program, 1, 1)], 2, semantics="gloo")
    (told,) = refused.value.diagnostics
    assert told.code == "shard-order" and (told.rank, told.step) == (1, 3)
    assert "train to wrong gradients" in told.notes[0]
    schedc.torch.schedule(str(tmp_path / "regathered.csv"), [_nested_stage(program, 1, 1)], 2, semantics="gloo")
    schedc.torch.schedule(str(tmp_path / "stale.csv"), [_nested_stage(program, 0, 0)], 2, semantics="gloo")
    # torch's own lowering of a zero-bubble schedule gathers once: refused under nested FSDP, not for a B
    zb = schedc.load("zb_h1", {"P": 2, "M": 4})
    with pytest.raises(SchedcError, match="shard-order|no UNSHARD"):
        schedc.torch.schedule("zb_h1", [_nested_stage(zb, 1, 1)], 4)
    schedc.torch.schedule("1f1b", [_nested_stage(schedc.load("1f1b", {"P": 2, "M": 4}), 1, 1)], 4)


def test_a_ddp_wrapped_stage_is_refused():
    """torch's runtime does not drive DDP's reducer: an assertion at the second step on most
    schedules, split backwards unreduced on zero-bubble ones (found on PP2 x DP2 over gloo)."""
    torch = pytest.importorskip("torch")
    import schedc.torch
    from torch.nn.parallel import DistributedDataParallel

    from test_torch_oracle import MockStage
    program = schedc.load("1f1b", {"P": 2, "M": 4})
    mock = MockStage(0, 2, 2, 0)
    module = torch.nn.Linear(2, 2)
    module.__class__ = type("DDPLinear", (DistributedDataParallel, torch.nn.Linear), {})
    mock.submod = module
    with pytest.raises(SchedcError, match="DistributedDataParallel"):
        schedc.torch.schedule("1f1b", [mock], 4)
    assert program.num_ranks == 2


# ---- torch itself: 2 gloo ranks, real FSDP2 ----
def _rank(rank: int, port: int, out: str) -> None:
    import datetime

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _Action, _PipelineScheduleRuntime

    import schedc.torch
    from examples import mlp
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "pp"))
    results = {}
    for name, text in (("stale", STALE), ("regathered", REGATHERED)):
        path = Path(out).with_name(f"{name}.csv")
        if rank == 0:
            path.write_text(text)
        dist.barrier()
        (chunk,) = mlp.build_stages([rank], 2, width=8, depth=4)
        for block in chunk:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(chunk, mesh=mesh["dp"])
        stage = PipelineStage(chunk, rank, 2, torch.device("cpu"), group=mesh["pp"].get_group())
        try:
            schedule = schedc.torch.schedule(str(path), [stage], 2, mlp.loss_fn)
            verdict = "accepted"
        except SchedcError as refused:  # run it as the bridge would have, to see what torch does
            verdict = refused.diagnostics[0].code
            schedule = _PipelineScheduleRuntime([stage], 2, loss_fn=mlp.loss_fn)
            rows = [line.split(",") for line in text.splitlines()]
            schedule._prepare_schedule_with_comms({r: [_Action.from_str(c) for c in row] for r, row in enumerate(rows)},
                                                  format="compute_comms")
        x, y = mlp.make_batch(0, 4, width=8)
        whole = torch.nn.Sequential(*mlp.build_stages(range(2), 2, width=8, depth=4))
        mlp.loss_fn(whole(x), y).backward()
        schedule.step(*((x,) if rank == 0 else ()), target=y if rank == 1 else None)
        err = max(float("inf") if p.grad is None else (p.grad.full_tensor() - q.grad).abs().max().item()
                  for p, q in zip(chunk.parameters(), whole[rank].parameters()))
        results[name] = {"verdict": verdict, "grad_err": err}
        dist.barrier()
    Path(out).with_name(f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


def _worker(out: str) -> int:
    import torch.multiprocessing as mp

    from schedc.runtime.launch import free_port
    sys.path.insert(0, str(ROOT))
    mp.start_processes(_rank, args=(free_port(), out), nprocs=2, join=True, start_method="fork")
    return 0


@pytest.mark.slow  # two gloo ranks under real FSDP2: ~10 s
def test_torch_trains_the_refused_order_wrong_and_the_regathered_one_exactly(tmp_path):
    pytest.importorskip("torch.distributed.fsdp")
    done = subprocess.run([sys.executable, __file__, "--worker", str(tmp_path / "out.json")], capture_output=True,
                          text=True, cwd=ROOT, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                                  "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    # (rank 0's stage is not nested: it would load, and raises as its peer refused: schedc/torch.py's `_agree`)
    assert ranks[1]["stale"]["verdict"] == "shard-order" and ranks[0]["stale"]["verdict"] == "rank-refused"
    assert ranks[1]["stale"]["grad_err"] > 1e-6  # torch: None or wrong on the nested stage
    assert all(r["regathered"]["verdict"] == "accepted" and r["regathered"]["grad_err"] < 1e-10 for r in ranks)


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    sys.exit(_worker(sys.argv[2]))
