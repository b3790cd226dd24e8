"""schedc's one door to Z3: the `z3` handle (imported on the first query, never by `import schedc`),
a fresh context per query or encoding, solvers with the fixed seed and their per-query timeout, and
the one vocabulary of answers: `Proved`, `Refuted` (with what refutes it) or `Unknown` (with why),
and the one wall-clock `Deadline` a command passes down to every query and every long loop.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

SEED = 0


class _Z3:
    """The z3 module, imported when a name of it is first asked for (each then kept, as a module's)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):  # introspection (copy, pickle, doctest) is no query: load nothing
            raise AttributeError(name)
        import z3
        value = getattr(z3, name)
        setattr(self, name, value)
        return value


z3 = _Z3()


@dataclass(frozen=True)
class Proved:
    """The claim holds; `witness` shows it when the query has one (synthesis: each rank's order)."""

    witness: object = None


@dataclass(frozen=True)
class Refuted:
    """The claim fails: at the parameter values `params`, with `detail` (named values there) and
    `least` (False: asked for the smallest, but time ran out before it was shown smallest); `why`,
    in words, when it fails without a model; `core`, what cannot all hold, for an unsat core."""

    params: dict = field(default_factory=dict)
    detail: dict = field(default_factory=dict)
    least: bool = True
    why: str = ""
    core: tuple = ()


@dataclass(frozen=True)
class Unknown:
    """No answer (the solver gave up, ran out of time, or the query is beyond it): never "fine"."""

    reason: str


Result = Proved | Refuted | Unknown

_Z3_CODE = f"{os.sep}z3{os.sep}"  # in the path of z3's own Python files
_pending = threading.Event()  # a Ctrl-C that arrived where raising it would be lost (see `ctrl_c`)


@contextmanager
def ctrl_c():
    """Within this block (main thread), Ctrl-C raises KeyboardInterrupt as usual, except inside
    z3's Python API or a destructor (ctypes would wrap it in an ArgumentError; in `__del__`, where
    Z3 frees terms, Python would print and drop it): then it is kept, and raised at the next
    `Deadline.check`, `watched` item or running query's poll."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        while frame is not None:
            if frame.f_code.co_name == "__del__" or _Z3_CODE in frame.f_code.co_filename:
                _pending.set()
                return
            frame = frame.f_back
        raise KeyboardInterrupt

    _pending.clear()
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted() -> None:
    """Raise a Ctrl-C kept by `ctrl_c`."""
    if _pending.is_set():
        _pending.clear()
        raise KeyboardInterrupt


TIME_LIMIT = "time limit"  # how an `Unknown` (or a stopped search) says the wall clock ran out
POLL_S = 0.05  # how often a running query looks at the clock and for Ctrl-C


class TimeUp(Exception):
    """The command's wall-clock limit passed: whatever is running stops, and the command answers
    `unknown (time limit)` (or, for a search, the best found so far)."""

    def __init__(self, seconds: float):
        super().__init__(f"{TIME_LIMIT}: stopped after the {seconds:g} s allowed")
        self.seconds = seconds


@dataclass(frozen=True)
class Deadline:
    """When work must end: `at` (this step's share of the time, time.monotonic()) within `end`
    (the command's own limit, `seconds` after it started). Passing `end` raises TimeUp at the next
    `check` (loops call it) or stops the running query; passing only `at` makes queries short."""

    at: float
    end: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        now = time.monotonic()
        return cls(now + seconds, now + seconds, seconds)

    def within(self, seconds: float) -> "Deadline":
        """This step's share: at most `seconds` from now, never past this deadline."""
        return replace(self, at=min(self.at, time.monotonic() + seconds))

    def left(self) -> float:
        """Seconds left of this step's share (negative once it passed)."""
        return min(self.at, self.end) - time.monotonic()

    def expired(self) -> bool:
        return self.left() <= 0

    def check(self) -> None:
        """Raise TimeUp once the command's own limit has passed (or a Ctrl-C kept by `ctrl_c`)."""
        _interrupted()
        if time.monotonic() >= self.end:
            raise TimeUp(self.seconds)

    def query(self, cap: float | None = None, floor: float = 1.0) -> float:
        """Seconds one query may take: what is left of this share, at most `cap`, at least `floor`
        (a share that ran out still lets a query try), never past the command's limit (TimeUp)."""
        self.check()
        share = max(floor, self.left() if cap is None else min(cap, self.left()))
        return min(share, self.end - time.monotonic())


def context():
    """A fresh Z3 context: one per query or encoding, so no query sees another's terms."""
    return z3.Context()


def make(ctx, timeout_s: float | None = None, logic: str | None = None):
    """A solver in ctx (for `logic`, if given) with the fixed seed and, if given, its timeout."""
    s = z3.SolverFor(logic, ctx=ctx) if logic else z3.Solver(ctx=ctx)
    s.set(random_seed=SEED)
    s.set("ctrl_c", False)  # Ctrl-C reaches Python (see `check`), which interrupts the query
    if timeout_s is not None:
        limit(s, timeout_s)
    return s


def limit(s, timeout_s: float) -> None:
    """The wall-clock time s's next checks may take (Z3 counts milliseconds, at least one)."""
    s.set(timeout=max(1, int(timeout_s * 1000)))


def watched(items, deadline: Deadline, every: int = 1024):
    """items, looking at `deadline` every `every` of them (TimeUp once the command's limit passed):
    for loops in Python that build a query or count, whose length grows with the input."""
    for n, item in enumerate(items):
        if n % every == 0:
            deadline.check()
        yield item


def check(s, *assumptions, deadline: Deadline | None = None):
    """s.check(*assumptions), watched (see `watch`): Ctrl-C or the command's limit passing
    interrupts the query (Z3 then stops within milliseconds) and is raised here."""
    return watch(lambda: s.check(*assumptions), deadline, stop=s.ctx.interrupt)


def watch(work, deadline: Deadline | None = None, stop=None):
    """work() run in a worker thread (Z3 and HiGHS release the GIL) so the main thread keeps
    watching: Ctrl-C (KeyboardInterrupt) or the command's limit passing (TimeUp) is raised within
    POLL_S, whatever the solver is doing, after `stop()` (then the worker is waited for; without
    `stop` it is left to end by its own time limit, a daemon thread)."""
    out: list = [None, None]

    def run():
        try:
            out[0] = work()
        except BaseException as exc:  # z3.Z3Exception once stopped: raised below if it was not us
            out[1] = exc

    worker = threading.Thread(target=run, name="schedc-solver", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(POLL_S)
            _interrupted()
            if deadline is not None and worker.is_alive():
                deadline.check()
    except BaseException:
        if stop is not None:
            stop()
            worker.join()
        raise
    if out[1] is not None:
        raise out[1]
    return out[0]


def value(model, term) -> int:
    """The integer term's value in model (a variable the model leaves free counts as 0)."""
    return model.eval(term, model_completion=True).as_long()
