"""schedc's one door to Z3: the `z3` handle (imported on the first query, never by `import schedc`),
fresh contexts, solvers with the fixed seed, the answers `Proved`, `Refuted` or `Unknown`, and the one
`Deadline` a command gives every query and long loop: a deterministic `Budget` of Z3 resource units
(the same answers on a busy machine as on an idle one), within the wall clock as an outer guard
that only the user sets (no command has one by default).
"""
from __future__ import annotations

import gc
import math
import os
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any, Callable, Iterable, Iterator, TypeVar

SEED = 0
_T = TypeVar("_T")


class _Z3:
    """The z3 module, imported when a name of it is first asked for (each then kept, as a module's)."""

    def __getattr__(self, name: str) -> Any:
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
    `least` (False: asked for the smallest, but the budget ran out before it was shown smallest); `why`,
    in words, when it fails without a model; `core`, what cannot all hold, for an unsat core."""

    params: dict[str, Any] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    least: bool = True
    why: str = ""
    core: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Unknown:
    """No answer (the solver gave up, ran out of its budget, or the query is beyond it): never "fine"."""

    reason: str


Result = Proved | Refuted | Unknown

_Z3_CODE = f"{os.sep}z3{os.sep}"  # in the path of z3's own Python files
_pending = threading.Event()  # a Ctrl-C that arrived where raising it would be lost (see `ctrl_c`)


@contextmanager
def ctrl_c() -> Iterator[None]:
    """Within this block (main thread), Ctrl-C raises KeyboardInterrupt as usual, except inside
    z3's Python API or a destructor (ctypes would wrap it in an ArgumentError; in `__del__`, where
    Z3 frees terms, Python would print and drop it): then it is kept, and raised at the next
    `Deadline.check`, `watched` item or running query's poll."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
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
BUDGET = "solver budget exhausted"  # how an `Unknown` says a deterministic budget ran out
POLL_S = 0.05  # how often a running query looks at the clock and for Ctrl-C
RLIMIT_MAX = 2**32 - 1  # Z3 keeps a query's rlimit in 32 bits


def clock() -> float:
    """The wall clock every Deadline reads (time.monotonic; a test may slow it down or speed it up)."""
    return time.monotonic()


class TimeUp(Exception):
    """The command's wall-clock limit passed: whatever is running stops, and the command answers
    `unknown (time limit)` (or, for a search, the best found so far)."""

    def __init__(self, seconds: float):
        super().__init__(f"{TIME_LIMIT}: stopped after the {seconds:g} s allowed")
        self.seconds = seconds

    def __reduce__(self) -> tuple[type, tuple[float]]:  # (pickled from a capped child: schedc/capped.py)
        return TimeUp, (self.seconds,)


class Budget:
    """Solver work allowed, in Z3 resource units (its `rlimit` count: steps of work, the same on a
    busy machine as on an idle one, for one Z3 version), named for the message when it runs out.
    A budget made by `Deadline.share` spends its parent's too, so the queries of a step together
    never pass the step's share, nor the shares above it. `units` None: no limit of its own."""

    def __init__(self, units: int | None = None, name: str = "", parent: "Budget | None" = None):
        self.units, self.name, self.parent, self.spent = units, name, parent, 0

    def left(self) -> int | None:
        """Units left here and above (None: no limit anywhere)."""
        mine = None if self.units is None else max(0, self.units - self.spent)
        up = self.parent.left() if self.parent is not None else None
        return up if mine is None else mine if up is None else min(mine, up)

    def spend(self, units: int) -> None:
        self.spent += units
        if self.parent is not None:
            self.parent.spend(units)

    def exhausted(self) -> str | None:
        """Why no work is left, naming the first budget from here up that ran out; else None."""
        b: Budget | None = self
        while b is not None:
            if b.units is not None and b.spent >= b.units:
                return f"{BUDGET}: {b.units:,} Z3 resource units for {b.name}"
            b = b.parent
        return None


@dataclass(frozen=True)
class Deadline:
    """The limits a command passes down to every query and every long loop: `budget`, the solver
    work this step may spend (deterministic: a query that runs out of it is `Unknown` with the
    budget named, on any machine), within `end`, the command's own wall-clock limit (`seconds`
    after it started: the outer guard; passing it raises TimeUp at the next `check`, which loops
    call, or stops the running query)."""

    end: float
    seconds: float
    budget: Budget = field(default_factory=Budget)

    @classmethod
    def after(cls, seconds: float | None) -> "Deadline":
        """The command's limits from now: `seconds` on the wall clock (None: no clock at all, the
        default of every command: its budgets alone bound it)."""
        return cls(math.inf, math.inf) if seconds is None else cls(clock() + seconds, seconds)

    @classmethod
    def within(cls, seconds: float | None, units: int, name: str) -> "Deadline":
        """A command's deadline: at most `units` of solver work in all (`name` says whose, when it
        runs out), within `seconds` on the wall clock if given."""
        return cls.after(seconds).share(units, name)

    @classmethod
    def only(cls, units: int, name: str) -> "Deadline":
        """A budget and no clock: for a small query no command waits on (a fact of an encoding)."""
        return cls(math.inf, math.inf).share(units, name)

    def share(self, units: int, name: str) -> "Deadline":
        """This step's share: at most `units` of solver work (`name` says whose, when it runs out),
        drawn from this deadline's budget, within the same clock."""
        return replace(self, budget=Budget(units, name, self.budget))

    def left(self) -> float:
        """Seconds left on the command's clock (negative once it passed)."""
        return self.end - clock()

    def exhausted(self) -> str | None:
        """Why this step's budget has no work left (see Budget.exhausted), else None."""
        return self.budget.exhausted()

    def check(self) -> None:
        """Raise TimeUp once the command's own limit has passed (or a Ctrl-C kept by `ctrl_c`)."""
        _interrupted()
        if clock() >= self.end:
            raise TimeUp(self.seconds)


def context() -> Any:
    """A fresh Z3 context: one per query or encoding, so no query sees another's terms."""
    return z3.Context()


def make(ctx: Any, logic: str | None = None, nonlinear: bool = False, seed: int = 0) -> Any:
    """A solver in ctx (for `logic`, if given; for nonlinear integer arithmetic, `nonlinear_tactic`'s)
    with the fixed seed (plus `seed`, for a restart on another path) and no clock of Z3's own: every
    query is budgeted in resource units (`check` with a Deadline's budget), so that verdicts do
    not depend on load, and the command's wall clock, when the user sets one, stops it from outside."""
    if nonlinear:
        s = nonlinear_tactic(ctx).solver()
    else:
        s = z3.SolverFor(logic, ctx=ctx) if logic else z3.Solver(ctx=ctx)
    s.set(random_seed=SEED + seed)
    s.set("ctrl_c", False)  # Ctrl-C reaches Python (see `check`), which interrupts the query
    return s


def watched(items: Iterable[_T], deadline: Deadline, every: int = 1024) -> Iterator[_T]:
    """items, looking at `deadline` every `every` of them (TimeUp once the command's limit passed):
    for loops in Python that build a query or count, whose length grows with the input."""
    for n, item in enumerate(items):
        if n % every == 0:
            deadline.check()
        yield item


SMT_CONFLICTS = 20_000  # the SMT core's first attempt at a nonlinear problem (Z3's own cuts it after 2 s)
NLSAT_CONFLICTS = 20_000  # nlsat's attempt after it (Z3's own cuts it after 3 s)


def nonlinear_tactic(ctx: Any) -> Any:
    """Z3's own strategy for nonlinear integer problems (its `qfnia` tactic: a preamble of
    simplifications, an attempt by bit-blasting, the SMT core, nlsat, the SMT core again) with the
    attempts it cuts off by wall-clock time (2 s, 3 s) cut off by counted conflicts instead: with
    those, the work a query took, and so its answer near a budget, depended on the machine's load.
    Every limit left is counted (conflicts, steps, memory); the query's budget bounds the whole."""
    def t(name: str, *params: object) -> Any:
        tactic = z3.Tactic(name, ctx)
        return z3.With(tactic, *params) if params else tactic

    preamble = z3.Then(t("simplify"), t("propagate-values"), t("solve-eqs"),
                       t("ctx-simplify", "max_depth", 30, "max_steps", 5_000_000),
                       t("simplify", "pull_cheap_ite", True, "local_ctx", True, "local_ctx_limit", 10_000_000),
                       t("elim-uncnstr"), z3.OrElse(t("cofactor-term-ite"), t("skip")))
    bits = z3.With(z3.Then(t("simplify"), t("propagate-values"),
                           t("simplify", "local_ctx", True, "local_ctx_limit", 10_000_000),
                           t("max-bv-sharing"), t("bit-blast", "max_memory", 100),
                           t("sat", "max_memory", 100, "max_conflicts", 500)),
                   "flat", False, "hi_div0", True, "elim_and", True, "blast_distinct", True)
    by_bits = z3.Then(t("simplify", "hoist_mul", True), t("nla2bv", "nla2bv_max_bv_size", 64),
                      z3.OrElse(bits, t("skip")), t("fail-if-undecided"))
    som = t("simplify", "som", True)
    smt_first = z3.Then(som, t("smt", "max_conflicts", SMT_CONFLICTS), t("fail-if-undecided"))
    nlsat = z3.Then(som, t("qfnra-nlsat", "max_conflicts", NLSAT_CONFLICTS), t("fail-if-undecided"))
    return z3.Then(t("simplify"), preamble, z3.OrElse(by_bits, smt_first, nlsat, z3.Then(som, t("smt"))))


def check(s: Any, *assumptions: Any, deadline: Deadline | None = None) -> Any:
    """s.check(*assumptions) within `deadline`'s budget, which it spends (Z3's rlimit: the query
    stops, `unknown`, where its units run out; with none left it is not asked), watched (see
    `watch`): Ctrl-C or the command's limit passing interrupts the query (Z3 then stops within
    milliseconds) and is raised here. Without a deadline, no budget and no clock."""
    if deadline is None:
        return watch(lambda: s.check(*assumptions), None, stop=s.ctx.interrupt)
    deadline.check()  # the clock, before each query: a loop of quick ones (a descent) ends on time too
    units = deadline.budget.left()
    if units == 0:
        return z3.unknown
    s.set("rlimit", 0 if units is None else min(units, RLIMIT_MAX))  # 0: no limit
    before = _count(s)
    verdict = watch(lambda: s.check(*assumptions), deadline, stop=s.ctx.interrupt)
    deadline.budget.spend(_count(s) - before)
    return verdict


def reason(s: Any, deadline: Deadline | None = None) -> str:
    """Why s's last check answered unknown: the budget that ran out, named (see Budget.exhausted),
    else Z3's own reason."""
    why: str = (deadline.exhausted() if deadline is not None else None) or s.reason_unknown()
    return why


def _count(s: Any) -> int:
    """Z3's resource count in s's context so far (it only grows)."""
    stats = s.statistics()
    count: int = stats.get_key_value("rlimit count") if "rlimit count" in stats.keys() else 0
    return count


def watch(work: Callable[[], _T], deadline: Deadline | None = None, stop: Callable[[], object] | None = None) -> _T:
    """work() run in a worker thread (Z3 and HiGHS release the GIL) so the main thread keeps
    watching: Ctrl-C (KeyboardInterrupt) or the command's limit passing (TimeUp) is raised within
    POLL_S, whatever the solver is doing, after `stop()` (then the worker is waited for; without
    `stop` it is left to end by its own time limit, a daemon thread). Python's garbage collector
    waits meanwhile."""
    out: list[Any] = [None, None]

    def run() -> None:
        try:
            out[0] = work()
        except BaseException as exc:  # z3.Z3Exception once stopped: raised below if it was not us
            out[1] = exc

    worker = threading.Thread(target=run, name="schedc-solver", daemon=True)
    collecting = gc.isenabled()
    gc.disable()  # no garbage collection while the worker runs: it could free Z3 terms from this thread in
    # the middle of a query (a context is not thread-safe), at a moment that depends on timing, which
    # changes how Z3 numbers later terms, so the work and answers of later queries: not deterministic
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
    finally:
        if collecting:
            gc.enable()
    if out[1] is not None:
        raise out[1]
    result: _T = out[0]
    return result


def value(model: Any, term: Any) -> int:
    """The integer term's value in model (a variable the model leaves free counts as 0)."""
    got: int = model.eval(term, model_completion=True).as_long()
    return got
