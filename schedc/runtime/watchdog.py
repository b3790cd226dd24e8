"""The watchdog: a send or receive that waits past the timeout stops the run with a report.

A daemon thread looks at what the rank is waiting for (set around every wait; torch releases the
GIL while it waits) and, past the timeout, writes a report naming the rank, the training step, the
program step and action, and what it waits for (the partner on the other rank), then ends the
process with `EXIT_TIMEOUT`. The peers see the connection close or time out themselves, so every
rank of a stuck run exits non-zero.
"""
from __future__ import annotations

import os
import sys
import threading
import time

EXIT_TIMEOUT = 124  # as coreutils' timeout(1)


class Watchdog:
    """`Watchdog(timeout_s)`; `None` disables it. `begin(...)`/`end()` bracket each wait."""

    def __init__(self, timeout: float | None, *, stream=None, exit=os._exit):
        self.timeout = timeout
        self._stream = stream
        self._exit = exit
        self._current = None  # (since, interpreter, current step, step of the send/recv, instr, why, consumer)
        self._thread = None
        self.fired = None  # the report, once it has fired (for in-process tests with a custom exit)

    def begin(self, interp, at: int, index: int, action, why: str, consumer=None) -> None:
        """The rank, at program step `at`, waits for the send or receive `action` posted at step `index`."""
        self._current = (time.monotonic(), interp, at, index, action, why, consumer)
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="schedc-watchdog", daemon=True)
            self._thread.start()

    def end(self) -> None:
        self._current = None

    def _watch(self) -> None:
        tick = min(0.1, self.timeout / 20)
        while True:
            time.sleep(tick)
            cur = self._current
            if cur is not None and time.monotonic() - cur[0] > self.timeout:
                self.fired = report = self.report(cur)
                stream = self._stream or sys.stderr
                stream.write(report + "\n")
                stream.flush()
                sys.stdout.flush()
                self._exit(EXIT_TIMEOUT)
                return

    def report(self, cur) -> str:
        since, interp, at, index, action, why, consumer = cur
        waited = time.monotonic() - since
        where = (f"program step {at} ({interp.steps[at]})" if at < len(interp.steps)
                 else "the end of its program (waiting for its sends)")
        return "\n".join([
            f"schedc watchdog: rank {interp.rank} waited {waited:.1f} s (timeout {self.timeout:g} s) and stops the run",
            f"  rank {interp.rank}, training step {interp.train_step}, at {where}:",
            f"    {interp.waits_for(index, action, why, consumer)}",
            f"  rank {interp.rank}'s program: {interp.context(at)}",
        ])
