"""Start R local ranks of a command, as torchrun does on one node, and leave no orphans.

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (a free
port) and OMP_NUM_THREADS=1 unless set; its output is forwarded line by line. When a rank fails,
the others get `grace` seconds to finish or report, then are terminated; every rank also dies with
the launcher (PR_SET_PDEATHSIG on Linux). Pure Python: no torch in the launching process.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Sequence, TextIO


@dataclass(frozen=True)
class Launched:
    """How the ranks ended: one exit code per rank (negative: killed by that signal)."""

    returncodes: tuple[int, ...]
    killed: tuple[int, ...]  # ranks the launcher had to stop

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.returncodes)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pdeathsig():
    """A function for the child to run between fork and exec: die when the launcher dies.
    Resolved in the parent, so the child only makes one C call (no imports, no locks)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    sig = int(signal.SIGKILL)
    return lambda: prctl(1, sig)  # PR_SET_PDEATHSIG


def _forward(pipe, stream: TextIO, lock: threading.Lock) -> None:
    for line in iter(pipe.readline, ""):
        with lock:
            stream.write(line)
            stream.flush()
    pipe.close()


def launch(command: Sequence[str], nproc: int, *, stdout: TextIO | None = None, stderr: TextIO | None = None,
           grace: float = 10.0, env: dict | None = None, cwd: str | None = None,
           deadline: float | None = None) -> Launched:
    """Run `command` as ranks 0..nproc-1 and wait for all of them (at most `deadline` seconds, if
    given: then every rank still running is stopped)."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    base = dict(os.environ if env is None else env)
    base.setdefault("OMP_NUM_THREADS", "1")
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(nproc),
                LOCAL_WORLD_SIZE=str(nproc), PYTHONUNBUFFERED="1")
    lock = threading.Lock()
    procs: list[subprocess.Popen] = []
    threads = []
    preexec = _pdeathsig()
    try:
        for rank in range(nproc):
            env_r = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
            p = subprocess.Popen(list(command), env=env_r, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, bufsize=1, preexec_fn=preexec)
            procs.append(p)
            for pipe, stream in ((p.stdout, stdout), (p.stderr, stderr)):
                t = threading.Thread(target=_forward, args=(pipe, stream, lock), daemon=True)
                t.start()
                threads.append(t)
        start, failed_at = time.monotonic(), None
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
                failed_at = now  # one failed: the others get `grace` seconds to report or finish
            if failed_at is not None and now - failed_at > grace:
                break
            if deadline is not None and now - start > deadline:
                break
            time.sleep(0.05)
    except BaseException:
        _stop(procs)
        raise
    killed = tuple(r for r, p in enumerate(procs) if p.poll() is None)
    _stop(procs)
    for t in threads:
        t.join(timeout=5)
    return Launched(tuple(p.returncode for p in procs), killed)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    end = time.monotonic() + 3
    for p in procs:
        try:
            p.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
