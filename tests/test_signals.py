"""SIGTERM (what `timeout`, Slurm and Kubernetes send) is handled as Ctrl-C is (schedc/signals.py):
stopped part-way through writing its outputs, a command leaves no hidden `.NAME.XXXX.tmp` file and
no old output half-replaced, exits 143 (130 for Ctrl-C) without a traceback; for a PNG, headless
Chromium's whole process group is killed and its profile folder removed.

Each test runs the real command line in a subprocess and signals it at a point it reports itself,
never after a guessed delay: a small launcher (`HOLD`) makes the process stop inside its first
`fsync` of a temporary output (written, not yet renamed) and say so on a pipe; for Chromium, the
browser run is a stand-in (or a wrapper around the real one) that says when it is up.
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMALL = ("--param", "P=2", "--param", "M=2")
GUARD_S = 120.0  # only ever reached when the behaviour under test is broken: a failure, not a margin

# The command line, held inside the first fsync of a temporary output: it writes one byte to the
# `ready` pipe, then blocks reading the `hold` pipe, which the test never writes to.
HOLD = """\
import os, sys
ready, hold = int(sys.argv[1]), int(sys.argv[2])
real_fsync = os.fsync
def fsync(fd):
    real_fsync(fd)
    os.write(ready, b"x")
    os.read(hold, 1)
os.fsync = fsync
from schedc.cli import entry
sys.argv = ["schedc", *sys.argv[3:]]
entry()
"""


def _env(**more: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **more)


def _wait_readable(fd: int, what: str) -> None:
    ready, _, _ = select.select([fd], [], [], GUARD_S)
    assert ready, f"{what} never came"


def _held(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, list[int]]:
    """`schedc ARGS` started and stopped inside its first fsync of a temporary output."""
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    p = subprocess.Popen([sys.executable, str(script), str(ready_w), str(hold_r), *args], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, pass_fds=(ready_w, hold_r),
                         env=_env())
    os.close(ready_w)
    os.close(hold_r)
    _wait_readable(ready_r, "the first fsync")
    assert os.read(ready_r, 1) == b"x", p.communicate()  # empty: it ended without writing anything
    return p, [ready_r, hold_w]


def _stop(p: subprocess.Popen, how: int, fds: list[int]) -> tuple[int, str]:
    p.send_signal(how)
    os.close(fds.pop())  # the hold released: an fsync the clean-up makes after the signal goes through
    try:
        _, err = p.communicate(timeout=GUARD_S)
    finally:
        if p.poll() is None:
            p.kill()
        for fd in fds:
            os.close(fd)
    return p.returncode, err


def _files(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("how,code,says", [(signal.SIGTERM, 143, "schedc: terminated (SIGTERM)"),
                                           (signal.SIGINT, 130, "schedc: interrupted")])
def test_a_signal_while_compile_writes_leaves_no_temporary_file(tmp_path, how, code, says):
    out = tmp_path / "out"
    p, fds = _held(tmp_path, "compile", "1f1b", *SMALL, "-o", str(out))
    assert any(name.endswith(".tmp") for name in _files(out))  # mid-write: a temporary file is there
    returncode, err = _stop(p, how, fds)
    assert returncode == code and err.strip().endswith(says) and "Traceback" not in err, err
    assert _files(out) == []  # no output, no hidden .NAME.XXXX.tmp


def test_sigterm_while_export_replaces_a_file_keeps_the_old_one_whole(tmp_path):
    target = tmp_path / "one.csv"
    target.write_text("the old contents\n")
    p, fds = _held(tmp_path, "export", "1f1b", *SMALL, "--to", "torch-csv", "-o", str(target))
    returncode, err = _stop(p, signal.SIGTERM, fds)
    assert returncode == 143 and "Traceback" not in err, err
    assert target.read_text() == "the old contents\n"
    assert [n for n in _files(tmp_path) if n != "hold.py"] == ["one.csv"]


def test_sigterm_while_viz_writes_leaves_no_temporary_file(tmp_path):
    out = tmp_path / "pics"
    out.mkdir()
    p, fds = _held(tmp_path, "viz", "1f1b", *SMALL, "-o", str(out / "t.svg"))
    returncode, err = _stop(p, signal.SIGTERM, fds)
    assert returncode == 143 and "Traceback" not in err, err
    assert _files(out) == []


def test_an_ignored_sigterm_stays_ignored():
    """A parent that ignores SIGTERM for its children (as some supervisors do) is obeyed."""
    code = ("import signal, sys\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "from schedc.signals import interrupts\n"
            "with interrupts():\n    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=GUARD_S)
    assert done.stdout == "ok\n", done.stderr


def test_sigterm_with_sigint_ignored_still_interrupts(tmp_path):
    """A job started with `&` by a script has SIGINT ignored; `timeout`'s SIGTERM must still stop it."""
    out = tmp_path / "out"
    script = tmp_path / "hold.py"
    script.write_text("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n" + HOLD)
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    p = subprocess.Popen([sys.executable, str(script), str(ready_w), str(hold_r), "compile", "1f1b", *SMALL,
                          "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         pass_fds=(ready_w, hold_r), env=_env())
    os.close(ready_w)
    os.close(hold_r)
    _wait_readable(ready_r, "the first fsync")
    assert os.read(ready_r, 1) == b"x", p.communicate()
    returncode, err = _stop(p, signal.SIGTERM, [ready_r, hold_w])
    assert returncode == 143 and "Traceback" not in err, err
    assert _files(out) == []


# ---- headless Chromium (PNG output) ----
# A stand-in for Chromium: it leads its process group as schedc starts it, starts a child there
# (Chromium's renderer, GPU and zygote processes do the same), writes into its profile folder, then
# reports its pid, its child's and the profile on the FIFO named by $FAKE_READY and runs on.
FAKE_CHROMIUM = """\
import os, subprocess, sys, time
profile = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--user-data-dir="))
open(os.path.join(profile, "Local State"), "w").write("{}")
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["FAKE_READY"], "w") as ready:
    ready.write(f"{os.getpid()} {child.pid} {profile}\\n")
time.sleep(600)
"""

# Around the real Chromium: says where its profile is, then becomes Chromium, kept open (a
# DevTools port instead of the screenshot) so that it is certainly still running when signalled.
WRAP_CHROMIUM = """\
import os, sys
argv = [a for a in sys.argv[1:] if not a.startswith("--screenshot")] + ["--remote-debugging-port=0"]
profile = next(a.split("=", 1)[1] for a in argv if a.startswith("--user-data-dir="))
with open(os.environ["FAKE_READY"], "w") as ready:
    ready.write(f"{os.getpid()} {profile}\\n")
os.execv(os.environ["REAL_CHROMIUM"], [os.environ["REAL_CHROMIUM"], *argv])
"""


def _running(pid: int) -> bool:
    """Whether `pid` (one this test was told of) still runs; a zombie has ended."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _until_gone(pids: list[int]) -> list[int]:
    """Those of `pids` still running once every one has ended (SIGKILL has been sent; the kernel
    ends them as it schedules them), or after the guard."""
    end = time.monotonic() + GUARD_S
    while any(_running(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.02)
    return [p for p in pids if _running(p)]


def _descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs (Linux: /proc/PID/task/TID/children)."""
    found, todo = [], [pid]
    while todo:
        here = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{here}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{here}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


@pytest.fixture
def scratch():
    """An empty TMPDIR for the command, with a short path: Chromium makes a Unix socket there, whose
    path may not pass 107 bytes (pytest's tmp_path is too long for it)."""
    folder = Path(tempfile.mkdtemp(prefix="sg-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _png_run(tmp_path: Path, scratch: Path, chromium_script: str, **env: str):
    """`schedc viz 1f1b -o pics/t.png` with SCHEDC_CHROMIUM pointing at `chromium_script` and TMPDIR
    `scratch`: yields the process, what the script reported once it is up, and a list for the pids
    to kill on the way out (the command, and every pid listed, are killed however the test ends)."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    if shutil.which("rsvg-convert"):
        pytest.skip("rsvg-convert makes the PNG here; Chromium is not used")
    fake = tmp_path / "chromium"
    fake.write_text(f"#!{sys.executable}\n" + chromium_script)
    fake.chmod(0o755)
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    (tmp_path / "pics").mkdir()
    fd = os.open(ready, os.O_RDONLY | os.O_NONBLOCK)  # (a blocking open would wait for a writer forever)
    p = subprocess.Popen([sys.executable, "-m", "schedc", "viz", "1f1b", *SMALL, "-o", str(tmp_path / "pics" / "t.png")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=_env(SCHEDC_CHROMIUM=str(fake), FAKE_READY=str(ready), TMPDIR=str(scratch), **env))
    pids: list[int] = []
    try:
        try:
            _wait_readable(fd, "the browser's report")  # Linux: a FIFO no writer has opened yet is not readable
            line = os.read(fd, 4096).decode()
        finally:
            os.close(fd)
        assert line.endswith("\n"), (line, p.poll())
        pids.append(int(line.split()[0]))
        yield p, line.split(), pids
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if p.poll() is None:
            p.kill()
        p.communicate()


def _sigterm(p: subprocess.Popen, tmp_path: Path, scratch: Path, pids: list[int]) -> None:
    """SIGTERM to the command: it exits 143, and nothing of the browser's is left (`pids`)."""
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=GUARD_S)
    assert p.returncode == 143 and "Traceback" not in err, err
    assert _until_gone(pids) == []  # the whole group: the browser and what it started
    assert os.listdir(scratch) == []  # its profile folder, its own temporary files, the PNG's folder
    assert os.listdir(tmp_path / "pics") == []  # no picture, no temporary file


def test_sigterm_while_chromium_draws_a_png_kills_its_group_and_removes_its_folders(tmp_path, scratch):
    with _png_run(tmp_path, scratch, FAKE_CHROMIUM) as (p, (_, child, profile), pids):
        pids.append(int(child))
        assert os.listdir(profile) == ["Local State"]
        _sigterm(p, tmp_path, scratch, pids)


def test_sigterm_while_the_real_chromium_runs_kills_its_group(tmp_path, scratch):
    real = shutil.which("chromium") or shutil.which("chromium-browser")
    if real is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    with _png_run(tmp_path, scratch, WRAP_CHROMIUM, REAL_CHROMIUM=real) as (p, (browser, profile), pids):
        port = Path(profile) / "DevToolsActivePort"  # written once the browser is up, its helpers started
        end = time.monotonic() + GUARD_S
        while not port.exists() and p.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        assert port.exists(), p.communicate()
        pids += _descendants(int(browser))
        _sigterm(p, tmp_path, scratch, pids)
