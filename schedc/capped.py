"""Work run in a child process whose address space may grow by a fixed number of bytes: a solver
query that needs more memory than that ends as `Unknown` (the memory limit named) instead of
taking the machine's memory. Linux only (fork and /proc); elsewhere the work runs in this
process, unbounded. The parent keeps watching the command's clock and Ctrl-C, and stops the child.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import threading
import warnings
from typing import Any, Callable

from .solver import POLL_S, Deadline, Unknown

MEMORY_LIMIT = "memory limit"  # how an `Unknown` says the query's process reached its address-space cap


def available() -> bool:
    """Whether the work can run capped here (a fork and /proc/self/statm: Linux)."""
    return hasattr(os, "fork") and sys.platform.startswith("linux") and os.path.exists("/proc/self/statm")


def run_capped(work: Callable[[], Any], memory: int, deadline: Deadline, what: str) -> Any:
    """work() in a child process allowed `memory` bytes of address space beyond this process's own,
    its result pickled back; the solver units the child spent are spent from `deadline`'s budget
    here too. An exception in the child is raised here; the child running out of memory (or ending
    by a signal, as Z3 may when an allocation fails) gives `Unknown` naming the limit and `what`.
    The command's clock (TimeUp) and Ctrl-C (KeyboardInterrupt) stop the child and are raised."""
    if not available():
        return work()
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # (Python 3.12 warns of fork beside threads: the child only runs `work`)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns into the parent's code
        os.close(read_end)
        _child(work, memory, deadline, write_end)
    os.close(write_end)
    try:
        data = _collect(read_end, pid, deadline)
    finally:
        os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if not data:
        how = (f"ended by signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
               else f"ended with status {os.WEXITSTATUS(status)}")
        return Unknown(f"{MEMORY_LIMIT}: the process deciding {what} {how} (at most {_gib(memory)} of memory)")
    kind, payload, spent = pickle.loads(data)
    deadline.budget.spend(spent)
    if kind == "memory":
        return Unknown(f"{MEMORY_LIMIT}: {what} needs more than {_gib(memory)} of memory; use --engine native")
    if kind == "raise":
        raise payload
    return payload


def _gib(n: int) -> str:
    """n bytes in GiB, or MiB below one GiB."""
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB"


def _child(work: Callable[[], Any], memory: int, deadline: Deadline, out: int) -> None:
    """Run work under the cap and write (kind, payload, units spent) to `out`; exit without cleanup."""
    code = 0
    try:
        import faulthandler
        faulthandler.disable()  # a crash here at the cap (Z3 may segfault where an allocation fails) is told as Unknown
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops this process
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        parent = os.getppid()
        threading.Thread(target=_orphaned, args=(parent,), daemon=True).start()
        import resource
        page = os.sysconf("SC_PAGE_SIZE")
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * page
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)  # a cap set from outside stays if lower
        cap = min(c for c in (size + memory, soft, hard) if c != resource.RLIM_INFINITY)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
        before = deadline.budget.spent
        kind: str
        payload: Any = None
        try:
            kind, payload = "ok", work()
        except MemoryError:
            kind = "memory"
        except BaseException as exc:  # Z3 says "out of memory" in its own exception
            kind, payload = ("memory", None) if "out of memory" in str(exc) else ("raise", exc)
        spent = deadline.budget.spent - before
        try:
            data = pickle.dumps((kind, payload, spent))
        except Exception as exc:  # (an exception that does not pickle: told by its text)
            data = pickle.dumps(("raise", RuntimeError(f"{type(exc).__name__}: {exc}"), spent))
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _orphaned(parent: int) -> None:
    """End this child once its parent is gone (killed without the chance to stop it)."""
    while os.getppid() == parent:
        threading.Event().wait(0.5)
    os._exit(1)


def _collect(fd: int, pid: int, deadline: Deadline) -> bytes:
    """All the child writes to fd, looking at the clock and for Ctrl-C every POLL_S; on either (or
    any exception) the child is killed and reaped before it is raised."""
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], POLL_S)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
            else:
                deadline.check()
    except BaseException:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
        raise
