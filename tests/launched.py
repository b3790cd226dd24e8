"""One launch of N gloo ranks running a test file's worker over many cases (tests/test_p2p.py,
tests/test_tied.py): the cases go in as JSON, each rank writes its results, the parent reads them.
A launch costs seconds on two cores, so a file runs all its programs in one."""
from __future__ import annotations

import datetime
import io
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = datetime.timedelta(seconds=60)  # the process group's backstop: a dead rank does not hold the rest long


def run_cases(test_file: str, cases: list[dict], folder: Path, world: int, deadline: float = 120) -> dict[int, dict]:
    """Run `python test_file --worker CASES OUT` on `world` ranks; each rank's results, by rank."""
    from schedc.runtime.launch import launch
    (folder / "cases.json").write_text(json.dumps(cases))
    out, err = io.StringIO(), io.StringIO()
    done = launch([sys.executable, str(Path(test_file).resolve()), "--worker", str(folder / "cases.json"), str(folder)],
                  world, stdout=out, stderr=err, grace=5, deadline=deadline, cwd=str(ROOT))
    assert done.ok, f"ranks exited {done.returncodes}\n{out.getvalue()}\n{err.getvalue()}"
    return {r: json.loads((folder / f"rank{r}.json").read_text()) for r in range(world)}


def join(cases_path: str) -> tuple[int, int, list[dict]]:
    """In a worker: one thread, the repository importable, the gloo group joined; (rank, world, cases)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=TIMEOUT)
    return rank, world, json.loads(Path(cases_path).read_text())


def finish(out_dir: str, rank: int, results: dict) -> None:
    """In a worker: write this rank's results and leave at once (threads of stuck programs still wait)."""
    import torch.distributed as dist
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def watchdog_places(deadlock) -> dict[str, str]:
    """Where the checker's deadlock says each stuck rank hangs, in the words of the runtime's watchdog
    report (schedc/runtime/watchdog.py): `at program step X (`, or for a rank that ran through its list
    and waits for its sends, `the end of its program`. By rank (as a string: the cases go in JSON)."""
    if deadlock is None:
        return {}
    return {str(r): "the end of its program" if r in deadlock.ends else f"at program step {x} ("
            for r, x in deadlock.stuck.items()}
