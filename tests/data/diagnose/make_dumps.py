"""Write the Flight Recorder dumps of tests/test_diagnose.py: each scenario's schedule run for real
on gloo ranks (tests/fr_jobs.py) until it hangs or ends, every rank's dump written by torch.

    PYTHONPATH=. OMP_NUM_THREADS=1 python tests/data/diagnose/make_dumps.py [OUT]

OUT defaults to this folder; tests/test_diagnose.py's slow test writes them again into a temporary
folder and reads both the same.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/, for fr_jobs

# scenario -> (schedule, dump format, also an NCCL-format record); reduce_order's stages are all of
# one size (gloo aborts a process whose all-reduce meets one of another size)
SCENARIOS = {
    "unshard_late": ("unshard_late.pp", "json", True),
    "skipped_reduce": ("skipped_reduce.pp", "pickle", False),
    "reduce_order": ("reduce_order.pp", "json", False),
    "crossed": ("crossed.pp", "json", True),
    "gpipe_dp": ("gpipe_dp.pp", "json", False),
}


def make(out: Path, names=None) -> None:
    import schedc
    from schedc.passes import lower
    from fr_jobs import run_job
    for name, (schedule, fmt, nccl) in SCENARIOS.items():
        if names and name not in names:
            continue
        size = (lambda op, stage: 4) if name == "reduce_order" else None
        run_job(lower(schedc.load(str(HERE / schedule))), out / name, fmt=fmt, nccl=nccl, size=size)


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE, sys.argv[2:])
