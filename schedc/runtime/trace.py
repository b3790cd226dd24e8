"""What a rank did, and when: the measured events `schedc run --trace` turns into a Perfetto trace.

Each rank appends one JSON object per line to its own file (`rank<R>.jsonl` in `--trace-dir`), written
as it happens, so a rank stopped by the watchdog, killed or crashed leaves every event up to that
moment. Times are `time.perf_counter()` seconds (one clock per host); the first line holds the
rank's clock when it left a barrier all ranks pass together, which aligns hosts. The format is read
by schedc/interop/chrome_trace.py (`measured_trace`). Pure Python.

    {"ev": "rank", "format": FORMAT, "version": 1, "rank", "ranks", "host", "pid", "sync", "schedule",
     "params": the schedule's parameters, "boot": the host's boot id (Linux: one monotonic clock per
     boot), "run": an id every rank of one run shares (rank 0's)}
    {"ev": "compute", "k": training step, "x": program step, "name": "F(1,0)", "t0", "t1"}
    {"ev": "post", "k", "x", "name": "SEND_F(0,1)", "t0", "t1", "value": [kind, stage, mb], "peer",
     "at": when a send's data was handed to the backend (its post; a receive has none)}
    {"ev": "wait", "k", "x": step of the awaited send/receive, "name": "wait RECV_F(1,1)", "t0", "t1"}
    {"ev": "done", "k", "x", "name": "RECV_F(1,1) done", "t", "value"}   (a receive completed)
    {"ev": "collective", "k", "x", "name": "REDUCE_GRAD(1)", "t0", "t1"}
    {"ev": "phase", "k", "name": "make_batch" | "the optimizer step" | ..., "t0", "t1"}
    {"ev": "stop", "t", "report": watchdog report, "name": what ran or waited, "since", "kind"}
"""
from __future__ import annotations

import json
import os
import socket
import threading

FORMAT = "schedc-run-trace"
VERSION = 1


def step_name(step) -> str:
    """The name a trace gives a runtime step: `F(1,0)`, `OVERLAP_F_B(F(0,1), B(0,0))`, as the
    simulated trace names the same step."""
    if hasattr(step, "parts"):
        return f"{step.kind}(" + ", ".join(str(p) for p in step.parts) + ")"
    return str(step)


def _boot() -> str:
    """This machine's boot id ("" where there is none): ranks with the same host name and boot id
    read one monotonic clock, so `trace merge` can put them on it even from different files."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


class Recorder:
    """Appends this rank's events to `path`, one line each, flushed as written (thread-safe: the
    watchdog writes the last line from its own thread). A write that fails (a full disk) does not
    stop the rank mid-run: the events stop there, and `error` keeps why for the rank to say at the end."""

    def __init__(self, path: str, *, rank: int, ranks: int, schedule: str, params: dict | None = None):
        self.path = path
        self.error: OSError | None = None
        self._fh = open(path, "w", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()
        boot = _boot()
        self._head = {"ev": "rank", "format": FORMAT, "version": VERSION, "rank": rank, "ranks": ranks,
                      "host": socket.gethostname(), "pid": os.getpid(), "schedule": schedule,
                      "params": dict(params or {}), **({"boot": boot} if boot else {})}

    def _write(self, record: dict) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            if self._fh.closed or self.error is not None:
                return
            try:
                self._fh.write(line)
            except OSError as exc:
                self.error = exc

    def start(self, sync: float, run: str | None = None) -> None:
        """The first line: this rank's clock as it left the barrier every rank passes together, and
        the run's id (`trace merge` refuses to join the ranks of different runs)."""
        self._write({**self._head, "sync": sync, **({"run": run} if run else {})})

    def compute(self, k: int, x: int, name: str, t0: float, t1: float) -> None:
        self._write({"ev": "compute", "k": k, "x": x, "name": name, "t0": t0, "t1": t1})

    def post(self, k: int, x: int, name: str, t0: float, t1: float, value, peer: int,
             at: float | None = None) -> None:
        """A send or receive posted between t0 and t1; a send's data was issued `at`."""
        record = {"ev": "post", "k": k, "x": x, "name": name, "t0": t0, "t1": t1, "value": list(value), "peer": peer}
        if at is not None:
            record["at"] = at
        self._write(record)

    def wait(self, k: int, x: int | None, name: str, t0: float, t1: float) -> None:
        """A wait at step `x` (None: before the first step, for a message shape)."""
        self._write({"ev": "wait", "k": k, "x": x, "name": f"wait {name}", "t0": t0, "t1": t1})

    def done(self, k: int, x: int, name: str, t: float, value) -> None:
        self._write({"ev": "done", "k": k, "x": x, "name": f"{name} done", "t": t, "value": list(value)})

    def collective(self, k: int, x: int, name: str, t0: float, t1: float) -> None:
        self._write({"ev": "collective", "k": k, "x": x, "name": name, "t0": t0, "t1": t1})

    def phase(self, k: int, name: str, t0: float, t1: float) -> None:
        self._write({"ev": "phase", "k": k, "name": name, "t0": t0, "t1": t1})

    def stop(self, t: float, report: str, name: str, since: float, kind: str) -> None:
        """The watchdog stops the run: what was running or waiting, since when."""
        self._write({"ev": "stop", "t": t, "report": report, "name": name, "since": since, "kind": kind})

    def close(self) -> None:
        with self._lock:
            try:
                self._fh.close()  # (closed even when its last flush fails)
            except OSError as exc:
                self.error = self.error or exc
