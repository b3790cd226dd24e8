"""Start R local ranks of a command, as torchrun does on one node, and leave no orphans.

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and
MASTER_PORT (a free port on one node) and OMP_NUM_THREADS=1 unless set. On node K of N nodes
(`node_rank`, `nnodes`, the rendezvous endpoint as `master_addr` and `master_port`), the local ranks
are the global ranks K*R .. K*R+R-1 of N*R, as torchrun's static rendezvous numbers them; global
rank 0 (on node 0) hosts the process group's store at the endpoint. A rank's output is forwarded
line by line, its input is empty. When a rank fails, the others get `grace` seconds to finish or report, then are terminated. Each
rank leads its own process group, so Ctrl-C reaches the launcher alone (which stops the ranks, with
no traceback from each), and whatever a rank started (the model's workers) is stopped with it: once
the ranks have ended, however they ended, every process left in their groups is terminated, then
killed. A rank also dies with the launcher (PR_SET_PDEATHSIG on Linux), and SIGTERM to the launcher
stops the ranks as Ctrl-C does. Pure Python: no torch in the launching process.
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

from ..signals import terminate_as_interrupt


@dataclass(frozen=True)
class Launched:
    """How the ranks ended: one exit code per local rank (negative: killed by that signal)."""

    returncodes: tuple[int, ...]
    killed: tuple[int, ...]  # (local) ranks the launcher had to stop

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


def _own_group(preexec):
    """`preexec`, after making the child lead a process group of its own: what Popen's
    `process_group=0` does, which is Python 3.11's (requires-python is 3.10). One C call more."""
    setpgid = os.setpgid

    def run() -> None:
        setpgid(0, 0)
        if preexec is not None:
            preexec()
    return run


def _forward(pipe, stream: TextIO, lock: threading.Lock, lost: list) -> None:
    """Pass a rank's lines on to `stream`; once a write there fails (a full disk under standard
    output), keep reading, so the rank never blocks on a full pipe, and keep the error in `lost`."""
    failed = False
    for line in iter(pipe.readline, ""):
        if failed:
            continue
        with lock:
            try:
                stream.write(line)
                stream.flush()
            except Exception as exc:  # (raised again by `launch` once every rank has ended)
                failed = True
                lost.append(exc)
    pipe.close()


def launch(command: Sequence[str], nproc: int, *, stdout: TextIO | None = None, stderr: TextIO | None = None,  # noqa: C901
           grace: float = 10.0, env: dict | None = None, cwd: str | None = None,
           deadline: float | None = None, nnodes: int = 1, node_rank: int = 0,
           master_addr: str = "127.0.0.1", master_port: int | None = None) -> Launched:
    """Run `command` as this node's `nproc` ranks (global ranks node_rank*nproc .. +nproc-1 of
    nnodes*nproc; on one node 0..nproc-1, with a free port unless `master_port` is given) and wait for
    all of them (at most `deadline` seconds, if given: then every rank still running is stopped).
    `Launched.returncodes` is by local rank. A write of the ranks' output to `stdout` or `stderr`
    that failed is raised again once every rank has ended."""
    if not (nproc >= 1 and nnodes >= 1 and 0 <= node_rank < nnodes):
        raise ValueError(f"launch: {nproc} rank(s) on node {node_rank} of {nnodes}")
    if nnodes > 1 and master_port is None:
        raise ValueError("launch: several nodes need the rendezvous endpoint's port")
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    base = dict(os.environ if env is None else env)
    base.setdefault("OMP_NUM_THREADS", "1")
    base.update(MASTER_ADDR=master_addr, MASTER_PORT=str(free_port() if master_port is None else master_port),
                WORLD_SIZE=str(nnodes * nproc), LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK=str(node_rank),
                GROUP_WORLD_SIZE=str(nnodes), PYTHONUNBUFFERED="1")
    lock = threading.Lock()
    lost: list[Exception] = []  # the first failed write of the ranks' output
    procs: list[subprocess.Popen] = []
    threads = []
    preexec = _pdeathsig()
    restore = terminate_as_interrupt()  # SIGTERM stops the ranks as Ctrl-C does
    try:
        for local in range(nproc):
            env_r = dict(base, RANK=str(node_rank * nproc + local), LOCAL_RANK=str(local))
            if sys.version_info >= (3, 11):
                p = subprocess.Popen(list(command), env=env_r, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1, preexec_fn=preexec, process_group=0)
            else:  # (Python 3.10: no process_group=, the same setpgid(0, 0) in the child before exec)
                p = subprocess.Popen(list(command), env=env_r, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1, preexec_fn=_own_group(preexec))
            procs.append(p)
            for pipe, stream in ((p.stdout, stdout), (p.stderr, stderr)):
                t = threading.Thread(target=_forward, args=(pipe, stream, lock, lost), daemon=True)
                t.start()
                threads.append(t)
        start, failed_at = time.monotonic(), None
        while None in [p.poll() for p in procs]:  # every rank polled: a failure behind a running rank counts
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
    finally:
        restore()
    killed = tuple(r for r, p in enumerate(procs) if p.poll() is None)
    _stop(procs)
    for t in threads:
        t.join(timeout=5)
    if lost:
        raise lost[0]
    return Launched(tuple(p.returncode for p in procs), killed)


def _stop(procs: list[subprocess.Popen]) -> None:
    """Terminate the ranks still running and every process in their groups, then kill what is left
    after 3 seconds; wait for the ranks."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
        _signal_group(p.pid, signal.SIGTERM)
    end = time.monotonic() + 3
    for p in procs:
        try:
            p.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    while any(_group_alive(p.pid) for p in procs) and time.monotonic() < end:
        time.sleep(0.02)
    for p in procs:
        _signal_group(p.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is empty (or no longer ours)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
