"""examples/torch_bridge.py, the torch bridge's runnable example (docs/interop.md shows it): 2 gloo
ranks train one step of ZB-V through torch's `_PipelineScheduleRuntime`, each holding two stages in a
V, and each rank's gradients equal the unsplit model's (the example asserts it; a failed assertion
fails its process)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed.pipelining")
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # two processes loading torch: 4 s alone, 6 to 10 s on a loaded 2-core machine
def test_the_torch_bridge_example_trains_as_the_unsplit_model():
    res = subprocess.run([sys.executable, "-m", "examples.torch_bridge"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stdout + res.stderr
    lines = sorted(line for line in res.stdout.splitlines() if line.startswith("rank "))
    assert len(lines) == 2, res.stdout + res.stderr
    assert lines[0].startswith("rank 0: stages [0, 3] trained with torch's runtime as the unsplit model does, loss ")
    assert lines[1] == "rank 1: stages [1, 2] trained with torch's runtime as the unsplit model does"
