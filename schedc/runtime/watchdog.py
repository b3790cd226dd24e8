"""The watchdog: an action, a send or receive, or a phase of training that takes past the timeout
stops the run with a report.

A daemon thread looks at what the rank is doing (set before every action, around every wait, and
around the phases outside the program: building the model, make_batch, the optimizer step, the final
barrier; torch releases the GIL while it computes and waits) and, past the timeout, writes a report
naming the rank, the training step, the program step and action, and what it waits for (the partner
on the other rank), runs the `on_stop` callbacks (the trace writes its last line), and ends the
process with `EXIT_TIMEOUT` a moment later (`linger`: the ranks stuck with it reach their own
timeouts and report too, instead of seeing the connection close). Every rank of a stuck run exits
non-zero. A hang that holds the GIL (native code that never releases it) starves the thread:
faulthandler then dumps the rank's stack and ends it, `backstop` seconds past the limit.
"""
from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time

EXIT_TIMEOUT = 124  # as coreutils' timeout(1)


class Watchdog:
    """`Watchdog(timeout_s)`; `None` disables it. `running(...)` before each action, `begin(...)` /
    `resume()` around each wait, `phase(...)` outside the program, `end()` when idle."""

    def __init__(self, timeout: float | None, *, stream=None, exit=os._exit, rank: int | None = None):
        self.timeout = timeout
        self.rank = rank
        self._stream = stream
        self._exit = exit
        # (since, interpreter, current step, step of the send/recv, instr, why, consumer); why is
        # "send" or "recv" for a wait, "run" for an action, "phase" (instr is then the text, and
        # consumer the phase's limit in seconds)
        self._current: tuple | None = None
        self._running: tuple | None = None  # (interpreter, step) of the action being run, resumed after its waits
        self._thread: threading.Thread | None = None
        self._closed = False
        self.on_stop: list = []  # callables (report, current) run before the process ends
        self.fired: str | None = None  # the report, once it has fired (for in-process tests with a custom exit)

    def running(self, interp, at: int) -> None:
        """The rank starts program step `at` (an action, or a compound step)."""
        self._running = (interp, at)
        self._current = (time.monotonic(), interp, at, at, None, "run", None)
        self._start()

    def begin(self, interp, at: int, index: int, action, why: str, consumer=None) -> None:
        """The rank, at program step `at`, waits for the send or receive `action` posted at step `index`."""
        self._current = (time.monotonic(), interp, at, index, action, why, consumer)
        self._start()

    def resume(self) -> None:
        """A wait is over: time the action that waited again (from now), if there is one."""
        run = self._running
        self._current = None if run is None else (time.monotonic(), run[0], run[1], run[1], None, "run", None)

    def phase(self, text: str, *, limit: float | None = None) -> None:
        """The rank is outside its program: `text` says where ("in make_batch (training step 2)").
        `limit` (at least the timeout) gives a phase that may take long, as building the model, more."""
        self._running = None
        self._current = (time.monotonic(), None, -1, -1, text, "phase", max(limit or 0.0, self.timeout or 0.0))
        self._start()

    def end(self) -> None:
        self._running = None
        self._current = None

    def close(self) -> None:
        """Stop watching (the run is over): the thread ends and the backstop is cancelled."""
        self.end()
        self._closed = True
        if self._thread is not None:
            faulthandler.cancel_dump_traceback_later()

    def _start(self) -> None:
        if self._thread is None and self.timeout is not None and not self._closed:
            self._thread = threading.Thread(target=self._watch, name="schedc-watchdog", daemon=True)
            self._thread.start()

    @property
    def _timeout(self) -> float:
        """The timeout, while watching (the watching thread starts only with one)."""
        assert self.timeout is not None
        return self.timeout

    @property
    def linger(self) -> float:
        """Seconds between the report and the exit, for the ranks waiting on this one to report."""
        return min(1.0, self._timeout / 2)

    @property
    def backstop(self) -> float:
        """Seconds past an activity's limit after which faulthandler ends a rank whose watchdog
        cannot run (native code holding the GIL)."""
        return max(2.0, min(30.0, self._timeout))

    def _watch(self) -> None:
        tick = min(0.1, max(0.005, self._timeout / 20))
        armed, armed_for = 0.0, None
        while not self._closed:
            cur, now = self._current, time.monotonic()
            if cur is None:  # nothing watched: no backstop either
                if armed_for is not None:
                    faulthandler.cancel_dump_traceback_later()
                    armed_for = None
            elif cur is not armed_for or now - armed >= 1.0:  # re-armed while this thread runs
                faulthandler.dump_traceback_later(_limit(cur, self._timeout) + self.backstop, exit=True)
                armed, armed_for = now, cur
            time.sleep(tick)
            cur = self._current
            if cur is not None and not self._closed and time.monotonic() - cur[0] > _limit(cur, self._timeout):
                self.fired = report = self.report(cur)
                for fn in self.on_stop:
                    try:
                        fn(report, cur)
                    except Exception:  # the report matters more than the trace's last line
                        pass
                stream = self._stream or sys.stderr
                stream.write(report + "\n")
                stream.flush()
                sys.stdout.flush()
                # the exit needs the GIL back after the linger: if native code holds it, faulthandler ends the rank
                faulthandler.dump_traceback_later(self.linger + self.backstop, exit=True)
                time.sleep(self.linger)
                faulthandler.cancel_dump_traceback_later()
                self._exit(EXIT_TIMEOUT)
                return
        faulthandler.cancel_dump_traceback_later()

    def report(self, cur) -> str:
        since, interp, at, index, action, why, consumer = cur
        waited = time.monotonic() - since
        rank = interp.rank if interp is not None else self.rank
        if why == "phase":
            return "\n".join([
                f"schedc watchdog: rank {rank} spent {waited:.1f} s {action} (limit {consumer:g} s) "
                "and stops the run",
                f"  rank {rank} was {action}, outside its program, and that has not returned"])
        where = (f"program step {at} ({interp.steps[at]})" if at < len(interp.steps)
                 else "the end of its program (waiting for its sends)")
        if why == "run":
            step = interp.steps[at]
            return "\n".join([
                f"schedc watchdog: rank {rank} ran {step} for {waited:.1f} s (timeout {self.timeout:g} s) "
                "and stops the run",
                f"  rank {rank}, training step {interp.train_step}, at {where}:",
                f"    {step} has not returned: {_what(step)} hangs or is far slower than the timeout",
                f"  rank {rank}'s program: {interp.context(at)}",
            ])
        return "\n".join([
            f"schedc watchdog: rank {rank} waited {waited:.1f} s (timeout {self.timeout:g} s) and stops the run",
            f"  rank {rank}, training step {interp.train_step}, at {where}:",
            f"    {interp.waits_for(index, action, why, consumer)}",
            f"  rank {rank}'s program: {interp.context(at)}",
        ])


def _limit(cur, timeout: float) -> float:
    """How long the activity `cur` may take: the timeout, or a phase's own (larger) limit."""
    return cur[6] if cur[5] == "phase" else timeout


_WORDS = {"F": "the forward", "B": "the backward", "I": "the input backward", "W": "the weight backward"}


def _what(step) -> str:
    """`the forward of stage 1 on microbatch 0`, in words (a compound: its parts)."""
    if hasattr(step, "parts"):
        return " and ".join(_what(p) for p in step.parts)
    word = _WORDS.get(step.op)
    if word is None:
        return str(step)
    return f"{word} of stage {step.stage} on microbatch {step.microbatch}"
