"""SIGTERM (what `timeout`, Slurm and Kubernetes send) handled as Ctrl-C is: it raises
KeyboardInterrupt in the main thread, so every `finally` runs (temporary files removed, helper
processes stopped) and the command ends with the exit code for a stop by that signal.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Iterator

from .errors import EXIT_INTERRUPTED, EXIT_TERMINATED

_terminated = threading.Event()  # the last interrupt came from SIGTERM, not Ctrl-C


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Do what Ctrl-C does now: call the SIGINT handler in place (it may keep the interrupt for a
    safer moment, as `solver.ctrl_c` does inside Z3), or raise KeyboardInterrupt when SIGINT has
    none (ignored, as for a job started with `&` by a script)."""
    _terminated.set()
    on_int = signal.getsignal(signal.SIGINT)
    if callable(on_int):
        on_int(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt


def terminate_as_interrupt() -> Callable[[], None]:
    """From now on (main thread only; elsewhere nothing changes) SIGTERM is an interrupt, unless
    it is ignored (`nohup`-like parents keep it so). Returns the function that restores the old
    handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)
    if previous == signal.SIG_IGN:
        return lambda: None
    signal.signal(signal.SIGTERM, _on_sigterm)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    return restore


@contextmanager
def interrupts() -> Iterator[None]:
    """Within this block SIGTERM is an interrupt; `exit_code()` then tells the two apart."""
    _terminated.clear()
    restore = terminate_as_interrupt()
    try:
        yield
    finally:
        restore()


def exit_code() -> int:
    """The exit code for the interrupt being handled: 143 (128 + SIGTERM) after SIGTERM, else 130
    (128 + SIGINT), as a shell reports a command the signal stopped."""
    return EXIT_TERMINATED if _terminated.is_set() else EXIT_INTERRUPTED


def terminated() -> bool:
    """Whether the interrupt being handled came from SIGTERM."""
    return _terminated.is_set()
