"""`schedc.torch.schedule` on a real job: the pipeline's ranks agree (schedc/torch.py, `_agree`). A
refusal that depends on one rank's own stages or files (a DDP-wrapped stage, a file missing there)
used to leave the other ranks with a runtime whose `step()` waited for the refusing rank until the
process group's timeout; now every rank raises, the others naming the refusing rank and its reason.
2 gloo ranks, spawned; this file is also the worker: `python tests/test_torch_bridge_ranks.py
--worker OUTDIR`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BROKEN = """\
schedule broken {
  rank 0: 0F0 0RECV_B0 0B0 0SEND_F0
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
}
"""
P, M = 2, 2


def _call(stages, source: str, microbatches: int = M) -> dict:
    """What `schedc.torch.schedule` did on this rank: accepted, or the error's codes and text."""
    import schedc.torch
    from examples import mlp
    from schedc.errors import SchedcError
    t0 = time.perf_counter()
    try:
        runtime = schedc.torch.schedule(source, stages, microbatches, mlp.loss_fn)
    except SchedcError as refused:
        return {"codes": [d.code for d in refused.diagnostics], "text": str(refused),
                "seconds": time.perf_counter() - t0}
    return {"codes": [], "runtime": runtime, "seconds": time.perf_counter() - t0}


def _rank(rank: int, port: int, out: str) -> None:
    import datetime

    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.nn.parallel import DistributedDataParallel

    from examples import mlp
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=P,
                            timeout=datetime.timedelta(seconds=30))
    alone = [dist.new_group([r]) for r in range(P)]  # (every rank makes every group; each uses its own)

    def stage(ddp: bool = False):
        (chunk,) = mlp.build_stages([rank], P, width=8, depth=2)
        module = DistributedDataParallel(chunk, process_group=alone[rank]) if ddp else chunk
        return PipelineStage(module, rank, P, torch.device("cpu"))

    broken = Path(out, "broken.pp")
    if rank == 0:
        broken.write_text(BROKEN)
    dist.barrier()
    results = {
        "ddp": _call([stage(ddp=rank == 0)], "1f1b"),  # rank 0's stage alone under DDP
        "missing": _call([stage()], str(Path(out, "missing.pp" if rank == 1 else "1f1b.pp"))),  # rank 1's file
        "broken": _call([stage()], str(broken), 1),  # fails `schedc check`, alike on both ranks
        "fine": _call([stage()], "1f1b"),
    }
    x, y = mlp.make_batch(0, 4, width=8)
    results["fine"].pop("runtime").step(*((x,) if rank == 0 else ()), target=y if rank == 1 else None)
    for result in results.values():
        result.pop("runtime", None)
    Path(out, f"rank{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


def _worker(out: str) -> int:
    import torch.multiprocessing as mp

    from schedc.api import resolve
    from schedc.runtime.launch import free_port
    sys.path.insert(0, str(ROOT))
    Path(out, "1f1b.pp").write_text(resolve("1f1b").read_text())  # (rank 0 is given it, rank 1 a path with no file)
    mp.start_processes(_rank, args=(free_port(), out), nprocs=P, join=True, start_method="fork")
    return 0


@pytest.mark.slow  # (two spawned ranks, about 10 s on a busy 2-core machine)
def test_a_refusal_on_one_rank_is_raised_on_every_rank(tmp_path):
    pytest.importorskip("torch.distributed.pipelining")
    done = subprocess.run([sys.executable, __file__, "--worker", str(tmp_path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(P))
    # rank 0 refuses its DDP stage with its own full error; rank 1, whose stage is fine, says so
    assert r0["ddp"]["codes"] == ["usage"] and "wrapped with DistributedDataParallel" in r0["ddp"]["text"]
    assert r1["ddp"]["codes"] == ["rank-refused"], r1["ddp"]
    assert "pipeline rank 0 refused the schedule: error[usage]: stage 0 is wrapped with DistributedDataParallel" \
        in r1["ddp"]["text"]
    # a file missing on rank 1 alone: rank 0 names it
    assert r1["missing"]["codes"] == ["io"], r1["missing"]
    assert r0["missing"]["codes"] == ["rank-refused"] and "pipeline rank 1 refused" in r0["missing"]["text"]
    assert "missing.pp" in r0["missing"]["text"]
    # a schedule that fails check: each rank its own (identical) error, no rank-refused added
    assert r0["broken"] == {**r1["broken"], "seconds": r0["broken"]["seconds"]} and r0["broken"]["codes"] == ["deadlock"]
    assert r0["fine"]["codes"] == r1["fine"]["codes"] == []  # (and the step after the agreement ran)
    # promptly: none waited for the process group's timeout (30 s)
    assert max(r[k]["seconds"] for r in (r0, r1) for k in r) < 10, (r0, r1)


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    sys.exit(_worker(sys.argv[2]))
