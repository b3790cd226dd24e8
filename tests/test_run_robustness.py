"""`schedc run` with ordinary bad input: a rank that hangs in compute is stopped by the watchdog with
a report naming it; no process of the run (ranks, or what the model started) outlives a failure,
Ctrl-C or SIGTERM; a backend that cannot run, a bad argument or an output that cannot be written is
one line and an exit code before any rank starts; a broken model module is one line, not a
traceback. One spawn of two torch ranks; the launcher's own tests use plain Python children.
"""
from __future__ import annotations

import errno
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def started(folder: Path) -> list[int]:
    """The processes the test's ranks and models recorded as they started (a file each, holding
    pids): the test asks after those alone, never after the machine's other processes."""
    return [int(pid) for f in sorted(folder.iterdir()) for pid in f.read_text().split()]


def alive(pids: list[int], settle: float = 30.0) -> list[int]:
    """Those of `pids` still running (a zombie does not count), after at most `settle` seconds for
    the ones being stopped to go (it returns as soon as none is left)."""
    def running(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    end = time.monotonic() + settle
    while any(running(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    return [p for p in pids if running(p)]


def _no_spawn(monkeypatch):
    import schedc.runtime.launch

    def refuse(*args, **kwargs):
        raise AssertionError("a rank was started")
    monkeypatch.setattr(schedc.runtime.launch, "launch", refuse)


# ---- before any rank starts ----
def test_nccl_without_cuda_is_one_line_before_any_rank_starts(run_cli, monkeypatch):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    _no_spawn(monkeypatch)
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                             "--backend", "nccl", "--steps", "1")
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and "error[usage]" in err and "--backend nccl needs CUDA GPUs" in err, err
    assert "--backend gloo runs on CPUs" in err and "Traceback" not in err


@pytest.mark.parametrize("extra, message", [
    (["--batch-size", "3"], "--batch-size 3: expected a positive multiple of the 2 microbatches"),
    (["--batch-size", "0"], "--batch-size 0: expected a positive multiple"),
    (["--lr", "nan"], "--lr nan: expected a finite learning rate"),
    (["--trace", "{tmp}"], "is a folder; give a file name"),
    (["--profile", "{tmp}/file/profile.json"], "--profile {tmp}/file/profile.json: cannot write: {tmp}/file is a "
                                                "file, not a folder"),
    (["--trace", "{tmp}/dangling"], "--trace {tmp}/dangling: is a symbolic link to a missing file"),
    (["--profile", "/proc/schedc-profile.json"], "--profile /proc/schedc-profile.json: cannot write: "),  # (root too)
    (["--trace", "t.json", "--print-torchrun"], "--trace needs a local run"),
])
def test_bad_arguments_are_one_line_before_any_rank_starts(run_cli, monkeypatch, tmp_path, extra, message):
    _no_spawn(monkeypatch)
    (tmp_path / "file").write_text("")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                             "--steps", "1", *[e.format(tmp=tmp_path) for e in extra])
    assert code == 2 and message.format(tmp=tmp_path) in err and err.count("\n") == 1, (out, err)


def _finished_launch(monkeypatch, profile=b'{"format": "schedc-profile"}\n'):
    """`launch` replaced by ranks that finish at once, rank 0 writing `profile` where the run's
    `--profile` argument to the ranks says (its own folder); the commands launched are kept."""
    import schedc.runtime.launch
    launched = []

    def launch(command, nproc, **kwargs):
        launched.append(list(command))
        if "--profile" in command:
            Path(command[command.index("--profile") + 1]).write_bytes(profile)
        return schedc.runtime.launch.Launched(returncodes=(0,) * nproc, killed=())
    monkeypatch.setattr(schedc.runtime.launch, "launch", launch)
    return launched


def test_an_output_that_fails_after_the_run_is_exit_2_not_0(run_cli, monkeypatch):
    """`/dev/full` opens (the check before the run passes it) and fails as it is written: after a
    finished run, the trace and the profile that cannot be written are `error[io]` once each, exit 2,
    and `--json` says ok false with them listed."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    launched = _finished_launch(monkeypatch)
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                             "--steps", "1", "--trace", "/dev/full", "--profile", "/dev/full", "--json")
    assert len(launched) == 1 and code == 2, (out, err)
    assert err.count("/dev/full: error[io]: --trace: cannot write: No space left on device\n") == 1, err
    assert err.count("/dev/full: error[io]: --profile: cannot write: No space left on device\n") == 1, err
    got = json.loads(out)
    assert got["ok"] is False and got["outputs"] == [] and got["exit_codes"] == [0, 0]
    assert [(e["code"], e["file"]) for e in got["errors"]] == [("io", "/dev/full"), ("io", "/dev/full")]


def test_the_profile_rank_0_measured_is_written_by_schedc_after_the_run(run_cli, monkeypatch, tmp_path):
    """Rank 0 writes the profile into the run's own folder, never at --profile: schedc writes it
    there once every rank is done, so a failure to write it ends no rank mid-run."""
    launched = _finished_launch(monkeypatch, b'{"measured": 1}\n')
    profile = tmp_path / "p.json"
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                             "--steps", "1", "--profile", str(profile))
    (command,) = launched
    assert code == 0 and profile.read_bytes() == b'{"measured": 1}\n', (out, err)
    assert Path(command[command.index("--profile") + 1]).parent != tmp_path
    assert f"schedc run: wrote the profile {profile} (" in err


@pytest.mark.parametrize("model, message", [
    ("examples.mlp", "expected pkg.module:function"),
    ("examples.mlp:build_stage", "examples.mlp ({root}/examples/mlp.py) defines no build_stage"),
    ("examples.nope:build_stages", "no module examples.nope here"),
    ("nopkg_{tmp}.mod:build", "cannot find nopkg_"),
    ("partial_{tmp}:build", "partial_{tmp} must also define make_batch"),
    ("broken_{tmp}:build", "cannot be read: SyntaxError"),
])
def test_a_bad_model_is_one_line_before_any_rank_starts(run_cli, monkeypatch, tmp_path, model, message):
    """Found from the module's source in the launching process, which neither imports it nor torch."""
    _no_spawn(monkeypatch)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / f"partial_{tmp_path.name}.py").write_text("import torch\ndef build(i, n): pass\nloss_fn = print\n")
    (tmp_path / f"broken_{tmp_path.name}.py").write_text("def build(:\n")
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", model.format(tmp=tmp_path.name),
                             "--steps", "1")
    assert code == 2 and message.format(tmp=tmp_path.name, root=ROOT) in err and err.count("\n") == 1, (out, err)
    assert out == ""  # not even the checks ran


def test_a_model_bound_in_other_ways_passes_the_early_check(tmp_path, monkeypatch):
    from schedc.runtime import model_spec
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / f"other_{tmp_path.name}.py").write_text(textwrap.dedent("""\
        from examples.mlp import loss_fn, make_batch as make_batch
        try:
            from examples.mlp import build_stages
        except ImportError:
            build_stages = None
    """))
    (tmp_path / f"star_{tmp_path.name}.py").write_text("from examples.mlp import *\n")
    model_spec.check(f"other_{tmp_path.name}:build_stages")
    model_spec.check(f"star_{tmp_path.name}:anything")  # only importing it can tell: the ranks do


def test_without_torch_run_says_how_to_install_the_pinned_cpu_build(tmp_path):
    """torch's absence simulated in a fresh interpreter: blocked in sys.modules (importlib then finds no
    torch), or by a finder that refuses it (as a broken install's would)."""
    for block in ('sys.modules["torch"] = None',
                  "class NoTorch:\n"
                  "    def find_spec(self, name, path=None, target=None):\n"
                  "        if name.partition('.')[0] == 'torch':\n"
                  "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
                  "sys.meta_path.insert(0, NoTorch())"):
        probe = (f"import sys\n{block}\nfrom schedc.cli import main\n"
                 "sys.exit(main(['run', '1f1b', '--param', 'P=2,M=2', '--model', 'examples.mlp:build_stages']))\n")
        res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        _says_how_to_install_torch(res)


def _says_how_to_install_torch(res):
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("torch: error[usage]: ")
    assert "schedc run needs PyTorch, which is not installed here" in res.stderr
    assert "`pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`" in res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_the_cpu_install_line_pins_the_test_extras_torch():
    import tomllib

    from schedc.runtime.backends import TORCH_PIN
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"torch=={TORCH_PIN}" in extras["test"]


def test_a_broken_model_module_is_bad_usage_not_a_traceback(tmp_path, monkeypatch):
    from schedc.runtime.entry import UsageError, build_modules, load_model
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / f"raises_{tmp_path.name}.py").write_text("raise RuntimeError('no GPU here')\n")
    with pytest.raises(UsageError, match=r"importing raises_\S+ failed: RuntimeError: no GPU here"):
        load_model(f"raises_{tmp_path.name}:build")
    (tmp_path / f"builds_{tmp_path.name}.py").write_text(textwrap.dedent("""\
        def build(ids, n):
            raise ValueError("bad width")
        def loss_fn(y, t): pass
        def make_batch(k, n): pass
        def nothing(ids, n):
            return None
    """))
    model = load_model(f"builds_{tmp_path.name}:build")
    with pytest.raises(UsageError, match=r"build_stages\(\[1\], 2\) failed: ValueError: bad width"):
        build_modules(model, [1], 2)
    model = load_model(f"builds_{tmp_path.name}:nothing")
    with pytest.raises(UsageError, match=r"returned a NoneType; expected a list of nn.Module"):
        build_modules(model, [1], 2)


# ---- the watchdog, without torch ----
def _python(code: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_the_watchdog_stops_a_phase_and_a_hang_that_holds_the_gil():
    t0 = time.monotonic()
    res = _python("from schedc.runtime.watchdog import Watchdog\nimport time\n"
                  "w = Watchdog(0.5, rank=3)\nw.phase('in make_batch (training step 2)')\ntime.sleep(60)\n")
    assert res.returncode == 124, res.stderr
    first, second = res.stderr.splitlines()
    assert first.startswith("schedc watchdog: rank 3 spent 0.") and first.endswith(
        " s in make_batch (training step 2) (limit 0.5 s) and stops the run")
    assert second == "  rank 3 was in make_batch (training step 2), outside its program, and that has not returned"
    # native code that never releases the GIL starves the watchdog's thread: faulthandler ends the
    # rank `backstop` (2 s) after the timeout (1 s), with its stack
    res = _python("from schedc.runtime.watchdog import Watchdog\nimport ctypes, time\n"
                  "w = Watchdog(1.0, rank=0)\nw.phase('in a native call')\ntime.sleep(0.2)\n"
                  "ctypes.PyDLL(None).sleep(60)\n")
    assert res.returncode == 1 and "Timeout (0:00:0" in res.stderr and 'File "<string>", line 6' in res.stderr
    assert time.monotonic() - t0 < 20


# ---- the launcher, with plain Python ranks ----
RANK = """\
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(os.path.join(sys.argv[1], os.environ["RANK"]), "w").write(f"{os.getpid()} {child.pid}")
if os.environ["RANK"] == sys.argv[2]:
    sys.exit(1)
time.sleep(120)
"""


def _rank_script(tmp_path: Path) -> Path:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    return script


def test_a_failed_write_of_the_ranks_output_is_raised_once_they_end():
    """Standard output on a full disk: the ranks' lines are still read (a rank never blocks on a
    full pipe), their standard error still passed on, and the error raised once every rank ended."""
    from schedc.runtime.launch import launch

    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")
    err = io.StringIO()
    code = "import sys\nfor k in range(20000): print('x' * 40)\nprint('done', file=sys.stderr)\n"
    with pytest.raises(OSError, match="No space left on device"):
        launch([sys.executable, "-c", code], 2, stdout=Full(), stderr=err, deadline=30)
    assert err.getvalue() == "done\ndone\n"


def test_no_process_outlives_a_failed_launch(tmp_path):
    from schedc.runtime.launch import launch
    pids = tmp_path / "pids"
    pids.mkdir()
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    done = launch([sys.executable, str(_rank_script(tmp_path)), str(pids), "1"], 3,
                  stdout=out, stderr=err, grace=1.0)
    assert done.returncodes[1] == 1 and done.returncodes[0] < 0 and done.returncodes[2] < 0, done
    assert done.killed == (0, 2) and time.monotonic() - t0 < 15
    assert len(started(pids)) == 6 and not alive(started(pids))  # the ranks' children are gone too


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_stops_every_rank_and_what_they_started(tmp_path, how):
    """Ctrl-C at a terminal signals the foreground process group: the launcher's, not the ranks'
    (each leads its own), so the launcher alone is interrupted and stops them and their children."""
    pids = tmp_path / "pids"
    pids.mkdir()
    code = (f"import sys\nfrom schedc.runtime.launch import launch\n"
            f"try:\n    launch([sys.executable, {str(_rank_script(tmp_path))!r}, {str(pids)!r}, '-'],"
            f" 2)\n"
            f"except KeyboardInterrupt:\n    print('interrupted', file=sys.stderr)\n    sys.exit(130)\n")
    launcher = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        deadline = time.monotonic() + 20
        while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # (each file is written whole in one call; let the last one land)
        running = [launcher.pid, *started(pids)]
        assert len(running) == 5 and alive(running, settle=0) == running  # the launcher, two ranks, two children
        os.killpg(launcher.pid, how)  # what the terminal does (SIGINT), or a supervisor (SIGTERM)
        out, err = launcher.communicate(timeout=60)  # a hang guard, not a speed test
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 130 and err == "interrupted\n", err
    assert not alive(running)


# ---- one run on gloo ----
HANGING = """\
import os, subprocess, sys, time
import torch

def build_stages(ids, num_stages):
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # a model's worker
    open(os.path.join("{pids}", str(os.getpid())), "w").write(str(worker.pid))
    return [Stage(s) for s in ids]

class Stage(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s, self.lin = s, torch.nn.Linear(4, 4)

    def forward(self, x):
        if self.s == 1:
            time.sleep(3600)  # the forward of stage 1 never returns
        return self.lin(x)

def loss_fn(y, t):
    return ((y - t) ** 2).mean()

def make_batch(step, n):
    return torch.randn(n, 4), torch.randn(n, 4)
"""


@pytest.mark.slow
def test_a_hanging_compute_is_stopped_with_a_report_a_trace_and_no_orphans(tmp_path, monkeypatch, run_cli):
    pids = tmp_path / "pids"
    pids.mkdir()
    module = f"hanging_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(HANGING.replace("{pids}", str(pids)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    trace = tmp_path / "stopped.json"
    t0 = time.monotonic()
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", f"{module}:build_stages",
                             "--steps", "1", "--timeout", "2", "--batch-size", "4", "--trace", str(trace))
    assert code == 1, (out, err)
    assert "schedc watchdog: rank 1 ran F(1,0) for " in err, err
    assert ("    F(1,0) has not returned: the forward of stage 1 on microbatch 0 hangs or is far slower than "
            "the timeout") in err
    assert re.search(r"rank 1, training step 1, at program step \d+ \(F\(1,0\)\):", err), err
    assert "rank 1 was stopped by the watchdog" in err and "Traceback" not in err
    assert f"schedc run: wrote the trace {trace} (up to the watchdog stop: " in err and "rank 1 at F(1,0)" in err
    assert time.monotonic() - t0 < 60
    assert len(started(pids)) == 2 and not alive(started(pids))  # the model's workers went with their ranks
    doc = json.loads(trace.read_text())
    assert any(s["rank"] == 1 and s["name"] == "F(1,0)" for s in doc["otherData"]["watchdog"])
    hung = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "F(1,0)"]
    assert len(hung) == 1 and hung[0]["args"]["unfinished"] and hung[0]["dur"] >= 1.9e6
    names = [e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 2]
    assert names[:1] == ["make_batch"] and "RECV_F(1,0) done" in names  # what rank 1 did up to the stop


_GROUP_FREED = """
import datetime, os, sys, weakref
import torch
import torch.distributed as dist
import schedc
from schedc.lower import lower_to_torch
from schedc.runtime.interpreter import PipelineInterpreter
from schedc.runtime.watchdog import Watchdog
dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(seconds=30))
table = lower_to_torch(schedc.load("gpipe", {"P": 1, "M": 2})).table
interp = PipelineInterpreter(table, 0, {0: torch.nn.Linear(4, 4)}, lambda y, t: ((y - t) ** 2).mean(),
                             watchdog=Watchdog(None))
interp.step(list(torch.randn(2, 3, 4)), list(torch.randn(2, 3, 4)))
group = weakref.ref(dist.distributed_c10d._get_default_group())
if sys.argv[1] == "close":
    interp.close()
elif sys.argv[1] == "drop":
    del interp
dist.destroy_process_group()
print("alive" if group() is not None else "freed")
"""


@pytest.mark.slow  # 8-12 s of spawned ranks
def test_the_process_group_is_freed_by_destroy_process_group_not_at_shutdown():
    """A gloo group freed as the process shuts down can be aborted by gloo's threads (a rank of a
    finished run died so once: signal 6, "terminate called without an active exception"). An
    interpreter still referenced keeps its group past `destroy_process_group` unless `close()`d
    (the runtime's entry closes it); one dropped is freed at once (no reference cycle: its handlers
    are functions, not bound methods), its group with it."""
    from schedc.runtime.launch import free_port
    seen = {}
    for how in ("keep", "close", "drop"):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1")
        done = subprocess.run([sys.executable, "-c", _GROUP_FREED, how], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        seen[how] = done.stdout.split()[-1]
    assert seen == {"keep": "alive", "close": "freed", "drop": "freed"}
