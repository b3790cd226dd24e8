"""The launcher starts each rank leading a process group of its own on every Python that
requires-python allows: Popen's `process_group=` is Python 3.11's, so on 3.10 the launcher makes the
group itself (schedc/runtime/launch.py, `_own_group`). Plain Python children, no torch."""
from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LEADS = "import os; print(os.getpgid(0) == os.getpid())"  # a rank: does it lead its process group?


def test_each_rank_leads_a_group_on_the_path_for_python_3_10(monkeypatch):
    """The branch Python 3.10 takes, taken here by the version the launcher reads."""
    from schedc.runtime import launch as launching
    monkeypatch.setattr(launching.sys, "version_info", (3, 10, 13, "final", 0))
    out = io.StringIO()
    done = launching.launch([sys.executable, "-c", LEADS], 2, stdout=out, stderr=io.StringIO(), deadline=60)
    assert done.ok, done
    assert out.getvalue() == "True\nTrue\n"


def _python_3_10() -> str | None:
    """A Python 3.10 interpreter that runs here (a pyenv shim without that version active does not)."""
    found = shutil.which("python3.10")
    if found is None:
        return None
    try:
        probe = subprocess.run([found, "-c", "import sys; print(sys.version_info[:2] == (3, 10))"],
                               capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    return found if probe.returncode == 0 and probe.stdout.strip() == "True" else None


def test_launch_runs_on_python_3_10():
    """Before the guard, every launch on 3.10 failed: `Popen() got an unexpected keyword argument
    'process_group'`."""
    python = _python_3_10()
    if python is None:
        pytest.skip("no Python 3.10 here")
    code = ("import sys\nfrom schedc.runtime.launch import launch\n"
            f"done = launch([sys.executable, '-c', {LEADS!r}], 2, deadline=60)\n"
            "print(done.returncodes)\n")
    res = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["True", "True", "(0, 0)"]
