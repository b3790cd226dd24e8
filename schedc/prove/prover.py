"""`prove`: a schedule sound for every size under the assumptions: proved, refuted, or unknown.

First every small setting is checked concretely (smallest first), so an M-dependent bug is refuted
with its smallest counterexample. Then, for schedules in the proof's fragment (schedc/prove/model.py),
well-formedness is discharged exactly and deadlock freedom and the memory bound by certificates
(schedc/prove/search.py) that Z3 checks for every setting; a schedule that is not linear (`stages
V * P`, `M // P`) is tried again in Z3's nonlinear integer arithmetic, then case by case for small
values of the parameter that makes it so. What cannot be proved is `unknown`, with the reason and
the bounded range that was checked instead, labelled as such.
"""
from __future__ import annotations

import time
from typing import Any
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import solver, syntax as ast
from ..errors import SchedcError
from . import collectives, smt
from .evaluator import Stop, evaluate
from .given import check_assumptions, check_bound
from .model import (Model, MemoryUnits, Unsupported, domain, memory_spec, memory_units, model, pins,
                    rank_lets, unroll)
from .sample import base_env, feature_names, rank_env
from .search import ConcreteFailure, cegis_timing, infer_bound, inside, peaks, setting_text, settings, unit_peaks

BOUNDED_MAX = 8         # each parameter of the concrete sweep runs over 0..BOUNDED_MAX
BOUNDED_SETTINGS = 250  # at most this many settings, smallest first
BOUNDED_STEPS = 200_000  # and no new setting once the checked programs hold this many steps in all (a
# count, not a time, so every machine checks the same settings): the built-ins' sweeps hold 650 (dualpipev)
# to 22,000 (interleaved zero bubble) steps and take about a second
SAMPLES = 25            # settings the certificates are fitted to
SAMPLE_MAX = 20         # with each parameter at most this (the smallest box that holds SAMPLES of them)


@dataclass(frozen=True)
class Part:
    """One property: proved, refuted or unknown, and how."""

    name: str
    status: str
    detail: str


@dataclass
class Proof:
    schedule: str
    assumptions: tuple[str, ...]
    verdict: str = "unknown"
    parts: list[Part] = field(default_factory=list)
    certificate: dict | None = None
    memory_bound: str | None = None
    counterexample: dict | None = None
    bounded: dict | None = None
    reason: str | None = None
    seconds: float = 0.0
    units: int = 0  # the solver's work, in Z3 resource units: unlike the seconds, the same on any machine
    swept: "Swept | None" = field(default=None, repr=False, compare=False)  # what the bounded sweep saw

    def to_dict(self) -> dict:
        return {"schedule": self.schedule, "assumptions": list(self.assumptions), "verdict": self.verdict,
                "parts": [vars(p) for p in self.parts], "memory_bound": self.memory_bound,
                "certificate": self.certificate, "counterexample": self.counterexample,
                "bounded": self.bounded, "reason": self.reason, "seconds": round(self.seconds, 3),
                "solver_units": self.units}


@dataclass
class Swept:
    """What the bounded sweep checked: every setting clean, with check's peak activation per rank at
    each; `limited`: some setting's file sets a memory limit (check held every rank within it);
    `whole`: every setting of the sweep was checked (none left out by the sweep's size)."""

    params: list[dict[str, int]]
    peaks: list[tuple[float, ...]]
    limited: bool
    whole: bool


def parse_condition(text: str, what: str) -> ast.Expr:
    """An expression from the command line (`P >= 2`, `min(P - r, M)`), in the language's syntax."""
    from ..parse import parse
    try:
        tree = parse(f"schedule x() {{ require {text} }}", what)
        (req,) = [i for i in tree.items if isinstance(i, ast.Require)]
        (c,) = req.constraints
        return c.cond
    except (SchedcError, ValueError):
        raise SchedcError("usage", f"{what} {text!r}: expected an expression such as 'P >= 2' or "
                          "'min(P - r, M)'", where=what) from None


def prove(source: str, *, assumptions: tuple[str, ...] = (), memory: str | None = None,
          timeout: float | None = None, budget: int | None = None, certificate: dict | None = None,
          log=lambda line: None) -> Proof:
    """Prove `source` (a .pp file or a built-in name) for every setting satisfying `assumptions`
    (expressions such as "M >= P") and its requires; `memory` is the bound to prove (default: the
    simplest that fits), `certificate` a saved one to re-check instead of searching, `log` gets
    progress lines. Raises SchedcError for bad input; every other outcome is in the Proof. The
    solver's work is budgeted in deterministic units (the *_UNITS below; `budget`, the whole proof's
    Z3 resource units, PROOF_UNITS by default), so the same input gives the same outcome on any
    machine. `timeout`, seconds on the wall clock (default None: no clock), is an outer guard the
    caller may set: past it, `unknown` with a reason that starts "time limit"."""
    whole = solver.Deadline.within(timeout, PROOF_UNITS if budget is None else budget, "the whole proof")
    return _prove(source, assumptions, memory, whole, certificate, log)


def _prove(source: str, assumptions, memory, deadline: solver.Deadline, certificate, log) -> Proof:  # noqa: C901
    """`prove` within `deadline`, the one clock every step below is given, with a budget of its own."""
    from ..api import read_text, resolve
    from ..parse import parse
    start = time.monotonic()
    path = resolve(source)
    _refuse_fixed(path)
    saved = path.with_name(path.stem + ".cert.json")  # a certificate kept with the schedule: re-checked first
    if certificate is None and saved.is_file():
        log(f"{path.stem}: re-checking the certificate saved with it ({saved.name})")
        try:
            first = _prove(source, assumptions, memory, deadline, read_certificate(saved), log)
        except SchedcError as exc:
            if exc.code != "certificate":
                raise
            log(f"  {exc.diagnostics[0].message}; searching instead")
        else:
            if first.verdict == "proved" or _timed_out(first):
                return first
            log("  the saved certificate does not prove it; searching instead")
    tree = parse(read_text(path), str(path))
    assumed = tuple(parse_condition(t, "--assume") for t in assumptions)
    bound = parse_condition(memory, "--memory") if memory is not None else None
    proof = Proof(tree.name, tuple(assumptions))
    try:
        m = unroll(model(tree), pins(assumed))
        unsupported = None
    except Unsupported as exc:
        m, unsupported = domain(tree), exc
    for name in ast.names_in(assumed):
        if name not in m.params:
            raise SchedcError("usage", f"--assume names '{name}', which is not a parameter of {tree.name} "
                              f"(its parameters: {', '.join(m.params)})", where="--assume")
    samples = settings(m, (), BOUNDED_MAX, BOUNDED_SETTINGS)
    check_assumptions(m, assumed, tuple(assumptions), samples)
    if bound is not None:
        check_bound(m, bound, memory, assumed, samples)

    if unsupported is None and _empty(m, assumed):
        raise SchedcError("usage", f"the assumptions and {tree.name}'s requires admit no setting at all, so "
                          "there is nothing to prove", where="--assume")
    try:
        done = _decide(proof, path, tree, m, unsupported, assumed, bound, deadline, certificate, log, start)
    except solver.TimeUp as exc:
        done = _unknown(proof, start, str(exc))
    done.units = deadline.budget.spent
    return done


def _refuse_fixed(path: Path) -> None:
    """A PyTorch CSV or an IR .json is one compiled program, one fixed setting: there is nothing to
    prove for every size, and `check` decides that setting. A usage error that says so (not the
    parser's complaint that the text is not a schedule)."""
    from ..interop.formats import by_extension
    form = by_extension(str(path))
    if form.name != "pp":
        raise SchedcError("usage", f"prove takes a .pp schedule or a built-in name, and {path} is {form.what}: "
                          "one fixed setting, with no parameters to prove it for; `schedc check "
                          f"{path}` checks it", where=str(path))


def _timed_out(proof: Proof) -> bool:
    """The proof stopped at the command's time limit (solver.TimeUp)."""
    return proof.verdict == "unknown" and (proof.reason or "").startswith(solver.TIME_LIMIT)


def _decide(proof, path, tree, m, unsupported, assumed, bound, deadline, certificate, log, start) -> Proof:
    """The verdict: the bounded sweep; if that checked every setting there is, a proof by checking
    (_by_checking); else the proof in linear, then nonlinear arithmetic, then case by case (raises
    solver.TimeUp once the command's limit passes), and an `unknown` of a certificate given to re-check
    gives way to the checking too."""
    log(f"{tree.name}: checking small settings concretely")
    units = _units(m) if unsupported is None else None
    failure = _bounded(proof, path, m, assumed, bound, units, deadline)
    if failure is not None:
        proof.verdict, proof.counterexample = "refuted", failure
        return _done(proof, start)
    every = _every_setting(proof, m, assumed, bound, units)
    if every and certificate is None:
        log("  the sweep checked every setting there is: proved by checking")
        return _by_checking(proof, m, bound, units, start)
    done = _search(proof, path, tree, m, unsupported, assumed, bound, deadline, certificate, log, start, units)
    if every and done.verdict == "unknown":
        return _by_checking(proof, m, bound, units, start)
    return done


BOX_SETTINGS = 10_000  # the most settings of the sweep's box (each parameter 0..BOUNDED_MAX) looked through to
# tell whether the sweep met every setting of the domain


def _every_setting(proof: Proof, m: Model, assumed, bound, units) -> bool:
    """The bounded sweep checked every setting the schedule can take, clean: it has no parameters, or
    Z3 shows every setting of the assumptions and requires has each parameter in 0..BOUNDED_MAX, each
    setting of that box is inside or outside them without doubt (`inside` evaluated without an error),
    and the sweep left none of them out. With `--memory`, the sweep must also have counted the bound
    (units: the count is check's)."""
    import itertools
    swept = proof.swept
    if swept is None or not swept.whole or not swept.params or (bound is not None and units is None):
        return False
    if not m.params:
        return True
    if (BOUNDED_MAX + 1) ** len(m.params) > BOX_SETTINGS:
        return False
    try:
        if not smt.Encoding(m, assumed).inside_box(BOUNDED_MAX):
            return False
    except Unsupported:
        return False
    return all(_decided(m, assumed, dict(zip(m.params, values)))
               for values in itertools.product(range(BOUNDED_MAX + 1), repeat=len(m.params)))


def _decided(m: Model, assumed, params) -> bool:
    """Whether `inside` decides this setting without an evaluation error (which it counts as outside)."""
    try:
        env = base_env(m, params)
        for e in m.requires + tuple(assumed):
            if not evaluate(e, env, m.functions):
                return True
        for e in (m.ranks, m.stages, m.microbatches):
            evaluate(e, env, m.functions)
        return True
    except (Stop, ZeroDivisionError, KeyError, TypeError):
        return False


def _by_checking(proof: Proof, m: Model, bound, units, start) -> Proof:
    """`proved`, by exhaustion: `check` passed at every setting the schedule can take (_every_setting),
    and a proof claims what `check` checks at each setting. The memory bound is `--memory`'s (counted at
    each setting), else the simplest closed form equal to every setting's peak (every setting is a
    sample), else check's peaks as they are."""
    from ..ir import count_of
    swept = proof.swept
    assert swept is not None  # (_every_setting saw it)
    n = len(swept.params)
    where = "at its one setting" if not m.params else f"at each of the {count_of(n, 'setting')} there are"
    out = Proof(proof.schedule, proof.assumptions, "proved", bounded={**(proof.bounded or {}), "every_setting": True},
                swept=swept)
    out.parts = [
        Part("well-formed", "proved", f"check finds every stage runs F and B (or I then W) of every microbatch "
                                      f"exactly once, on the rank that holds it, {where}"),
        Part("deadlock-free", "proved", f"check finds no deadlock under rendezvous sends {where}")]
    mem_text = _text(bound) if bound is not None else (infer_bound(m, swept.params, units.sizes)
                                                     if units is not None else None)
    if mem_text is not None and units is not None:
        expr = bound if bound is not None else parse_condition(mem_text, "--memory")
        out.memory_bound = mem_text
        out.parts.append(Part("memory", "proved", _memory_text(m, expr, mem_text, units) + f"; counted {where}"))
    elif n == 1:
        out.parts.append(Part("memory", "proved", f"check's peak activation per rank {where}: "
                              f"[{', '.join(_number(x) for x in swept.peaks[0])}]"))
    else:
        top = max((x for peaks in swept.peaks for x in peaks), default=0)
        out.parts.append(Part("memory", "proved", f"check counts each rank's peak activation {where}; the "
                              f"largest is {_number(top)}"))
    if swept.limited:
        out.parts.append(Part("memory limit", "proved", f"check finds every rank within the file's memory limit "
                              f"{where}"))
    return _done(out, start)


def _search(proof, path, tree, m, unsupported, assumed, bound, deadline, certificate, log, start, units) -> Proof:  # noqa: C901
    """The proof for every setting: in linear, then nonlinear arithmetic, then case by case."""
    if unsupported is not None:
        return _unknown(proof, start, f"outside the proof's fragment: {unsupported.reason}"
                        + (f" (line {unsupported.span.line})" if unsupported.span else ""))
    nonlinear_cert = (certificate or {}).get("arithmetic") == "nonlinear"
    try:
        if nonlinear_cert:
            raise Unsupported("the certificate is for nonlinear arithmetic")
        _symbolic(proof, path, m, assumed, bound, deadline, certificate, log)
    except Unsupported as exc:
        why = "" if nonlinear_cert else f"not linear: {exc.reason}" + (f" (line {exc.span.line})" if exc.span else "")
        log("  not linear: trying Z3's nonlinear integer arithmetic")
        other = Proof(proof.schedule, proof.assumptions, bounded=proof.bounded)
        # at most NONLINEAR_UNITS of solver work in all: when Z3 cannot decide, the cases below run
        # next; a certificate to re-check needs no search and no cases, so its queries have no such cap
        until = deadline if nonlinear_cert else deadline.share(NONLINEAR_UNITS, "the attempt in nonlinear arithmetic")
        try:
            _symbolic(other, path, replace(m, nonlinear=True), assumed, bound, until, certificate, log)
            failed = next((p.detail for p in other.parts if p.status != "proved"), None)
        except Unsupported as again:
            failed = again.reason
        if other.verdict == "refuted" or (failed is None and other.parts):
            other.verdict = "refuted" if other.verdict == "refuted" else "proved"
            _settle(other, path, m, assumed, bound, units, deadline)
            return _done(other, start)
        why = "; ".join(x for x in (why, f"in nonlinear arithmetic: {failed}") if x)
        if certificate is None:
            _cases(proof, path, tree, assumed, bound, units, deadline, exc, log)
        if proof.verdict == "refuted":  # one of the cases failed, and the concrete check agrees
            return _done(proof, start)
        return _unknown(proof, start, why)
    if proof.verdict == "refuted":
        _settle(proof, path, m, assumed, bound, units, deadline)
        return _done(proof, start)
    statuses = {p.status for p in proof.parts}
    proof.verdict = "proved" if statuses == {"proved"} else "unknown"
    if proof.verdict == "unknown" and proof.reason is None:
        proof.reason = next(p.detail for p in proof.parts if p.status != "proved")
    return _done(proof, start)


def read_certificate(path) -> dict:
    """A certificate from a JSON file: the output of `schedc prove --json`, or its `certificate`."""
    from ..inputs import loads_json, read_text
    data = loads_json(read_text(path, "the certificate"), str(path), "certificate")
    cert = data.get("certificate", data) if isinstance(data, dict) else None
    if not isinstance(cert, dict) or not isinstance(cert.get("timing"), dict) or \
            not isinstance(cert.get("memory", {}), dict):
        raise SchedcError("certificate", "expected a certificate: an object with `timing` (and `memory`), each an "
                          "object, as `schedc prove --json` writes", where=str(path))
    return cert


# Solver budgets, in Z3 resource units (its `rlimit` count, see schedc/solver.py): deterministic, so
# the same input gives the same verdict and certificate on a busy machine as on an idle one (the
# wall clock, `--timeout`, is an outer guard only the user sets). Measured with z3 5.4 over every proof in
# tests/test_prove*.py and tests/test_synth*.py: Z3 does 1M to 20M units a second here, and one
# nonlinear query takes from 3M to 160M units by the seed and by what the process did before (its
# memory layout), so these keep far more headroom than the largest measurement:
WELL_FORMED_UNITS = 1_000_000_000  # one well-formedness query: a nonlinear "stage index in range"
# takes 6M to 160M (interleaved 1F1B, interleaved zero bubble); every linear one under 1.2M (dualpipev)
QUERY_UNITS = 300_000_000  # any other query (memory, limits, annotations, a certificate's re-check):
# the largest takes 9.4M, 57M in all with its restarts (a memory bound of interleaved zero bubble)
NONLINEAR_UNITS = 2_500_000_000  # the whole attempt in nonlinear arithmetic, fits included: interleaved
# zero bubble's takes 147M to 292M, interleaved 1F1B's 11M to 220M, looped BFS's 3M to 48M
PROOF_UNITS = 10_000_000_000  # the whole proof (`--budget`): the built-ins take 58,000 (gpipe) to 292M
# (interleaved zero bubble: 55 s at about 5M units a second), so this is some 34 times the largest,
# about half an hour of Z3 here; it bounds what a proof that cannot end well spends (each step above
# has its own share of it)
WELL_FORMED_BOX = 24  # a well-formedness counterexample too large to check is sought again with parameters <= this
CASES = range(1, 5)  # a parameter that makes the schedule nonlinear is tried at each of these values


def _cases(proof, path, tree, assumed, bound, units, deadline, exc, log) -> None:
    """Not linear for every value of some parameter: prove each small value of it separately
    (pinned, the loops over it unrolled). Recorded as parts; the verdict stays unknown."""
    from ..span import span_text
    try:
        text = span_text(exc.span) if exc.span else ""
    except Exception:
        text = ""
    base = model(tree)
    fixed = pins(assumed)
    defaults = {p.name: (p.default.value if isinstance(p.default, ast.Num) else 1 << 30) for p in tree.params}
    for name in sorted((p for p in base.params if p in _words(text) and p not in fixed), key=lambda p: defaults[p]):
        results = []
        for k in CASES:
            pin = ast.BinOp("==", ast.Var(name, tree.span), ast.Num(k, tree.span), tree.span)
            sub = Proof(proof.schedule, proof.assumptions + (f"{name} == {k}",))
            log(f"  case {name} = {k}")
            try:
                m = unroll(base, pins(assumed + (pin,)))
                failure = _bounded(sub, path, m, assumed + (pin,), bound, units, deadline)
                if failure is None:
                    _symbolic(sub, path, m, assumed + (pin,), bound, deadline, None, log)
                    if sub.verdict == "refuted":
                        _settle(sub, path, m, assumed + (pin,), bound, units, deadline)
                else:
                    sub.verdict, sub.counterexample = "refuted", failure
            except Unsupported:
                break
            if sub.verdict == "refuted":
                assert sub.counterexample is not None  # (a refutation carries its counterexample)
                proof.verdict, proof.counterexample = "refuted", {**sub.counterexample, "within": f"{name} == {k}"}
                return
            if {p.status for p in sub.parts} != {"proved"}:
                break
            results.append((k, sub.memory_bound))
        if len(results) == len(CASES):
            bounds = "; ".join(f"{name} = {k}: memory {b}" for k, b in results)
            proof.parts.append(Part(f"each {name} in {CASES.start}..{CASES.stop - 1}", "proved",
                                    f"proved separately for each {name} in {CASES.start}..{CASES.stop - 1} (every "
                                    f"value of the other parameters); not for every {name}. {bounds}"))
            return


def _words(text: str) -> set[str]:
    import re
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


def _done(proof: Proof, start: float) -> Proof:
    proof.seconds = time.monotonic() - start
    return proof


def _unknown(proof: Proof, start: float, reason: str) -> Proof:
    proof.verdict, proof.reason = "unknown", reason
    return _done(proof, start)


def _bounded(proof: Proof, path: Path, m: Model, assumed, bound, units, deadline):  # noqa: C901
    """Check small settings concretely, smallest first: the smallest failing setting (see
    _least_failing: the sweep's box leaves some out), or None. A file that compiles at none of
    them is bad input: its error is raised (exit 2), as `check` and `sim` raise it."""
    from ..api import check, load
    checked, steps_checked = 0, 0
    largest: dict[str, int] = {}
    passed: list[dict[str, int]] = []
    failure: dict[str, Any] | None
    swept = Swept([], [], False, True)
    sweep = settings(m, assumed, BOUNDED_MAX, BOUNDED_SETTINGS + 1)
    if len(sweep) > BOUNDED_SETTINGS:  # (one more asked for only to tell whether the sweep holds them all)
        sweep, swept.whole = sweep[:BOUNDED_SETTINGS], False
    for n, params in enumerate(sweep):
        deadline.check()
        if steps_checked >= BOUNDED_STEPS:
            swept.whole = False
            break
        try:
            program = load(str(path), params)
        except SchedcError as exc:
            if _outside(exc):
                continue
            if checked == 0 and not _compiles_somewhere(path, sweep[n + 1:], deadline):
                raise
            failure = {"params": params, "property": "compile error",
                       "report": "\n".join(d.render() for d in exc.diagnostics)}
            return _least_failing(path, m, assumed, failure, deadline, bound, units, passed)
        checked += 1
        steps_checked += sum(len(rank) for rank in program.ranks)
        for k, v in params.items():
            largest[k] = max(largest.get(k, v), v)
        report = check(program)
        failure = None
        if report.ok is not True:
            failure = {"params": params, "property": "checks", "summary": report.summary(), "report": report.render()}
        elif bound is not None and units is not None:
            steps = [[[a.op.value for a in st.parts] for st in rank] for rank in program.ranks]
            failure = _over_bound(m, bound, params, unit_peaks(steps, units.sizes), units)
        if failure is not None:
            return _least_failing(path, m, assumed, failure, deadline, bound, units, passed)
        passed.append(params)
        swept.peaks.append(tuple(report.peak_activation))
        swept.limited = swept.limited or bool(program.annotations.memory_limit)
    swept.params = passed
    proof.swept = swept
    proof.bounded = {"settings": checked, "largest": largest, "ok": True, "parameters": list(m.params),
                     "every_setting": False}
    return None


def _compiles_somewhere(path: Path, sweep, deadline) -> bool:
    """Some setting of the sweep compiles (one outside the schedule's domain does not count)."""
    from ..api import load
    for params in sweep:
        deadline.check()
        try:
            load(str(path), params)
            return True
        except SchedcError as exc:
            if _outside(exc):
                continue
    return False


def _units(m: Model) -> MemoryUnits | None:
    """The units memory is counted in (model.memory_units), None where the count cannot be check's."""
    try:
        return memory_units(m)
    except Unsupported:
        return None


def _settle(proof: Proof, path: Path, m: Model, assumed, bound, units, deadline) -> None:
    """A refutation found symbolically (and confirmed concretely at its setting) is stated at the
    smallest failing setting, or marked as not shown to be it (_least_failing)."""
    if proof.verdict == "refuted":
        assert proof.counterexample is not None  # (a refutation carries its counterexample)
        proof.counterexample = _least_failing(path, m, assumed, proof.counterexample, deadline, bound, units)


def _outside(exc: SchedcError) -> bool:
    """The setting is outside the schedule's domain (a `require`, or a size below 1), not a bug."""
    return exc.code == "require" or (exc.code == "range" and exc.diagnostics[0].message.startswith("the number of"))


def _empty(m: Model, assumed) -> bool:
    try:
        return smt.Encoding(m, assumed).empty()
    except Unsupported:  # not linear: the bounded sweep will say whether any setting exists
        return False


def _over_bound(m: Model, expr, params, got, units: MemoryUnits) -> dict | None:
    """The counterexample if some rank's peak in `got` (in `units`) exceeds the bound at these
    parameters, told in `check`'s sizes too."""
    for r, peak in enumerate(got):
        limit = evaluate(expr, rank_env(m, params, r), m.functions)
        if peak > limit:
            return {"params": params, "property": "memory", "rank": r, "report": "",
                    "summary": f"rank {r} holds {_unit_words(units, peak)} at its peak (check's peak activation: "
                               f"{_number(peak * _unit_size(m, params, units))}); the bound {_text(expr)} is {limit}"}
    return None


def _unit_words(units: MemoryUnits, n: int | None = None) -> str:
    """What the count is of (`activations`, `units of 2`), after the count `n` if given (`1 activation`)."""
    from ..ir import count_of
    if units.one_per_forward:
        return "activations" if n is None else count_of(n, "activation")
    # (only the file's act makes a unit other than one: act is set here)
    size = _number(units.act * units.unit)  # type: ignore[operator]
    return f"units of {size}" if n is None else f"{count_of(n, 'unit')} of {size}"


def _unit_size(m: Model, params, units: MemoryUnits):
    """One counted unit in check's sizes at these parameters: the file's act, or the default R / S (R / L
    with routes of L stages), x the unit."""
    from fractions import Fraction
    if units.act is not None:
        return units.act * units.unit
    env = base_env(m, params)
    copy = (m.routes[0].stage_stop, m.routes[0].stage_start) if m.routes else (m.stages, ast.Num(0, m.stages.span))
    stages = evaluate(copy[0], env, m.functions) - evaluate(copy[1], env, m.functions)  # (one copy of the model's)
    return Fraction(evaluate(m.ranks, env, m.functions), stages) * units.unit


def _number(x) -> str:
    """A size as check prints it: whole numbers without a point."""
    return str(int(x)) if x == int(x) else f"{float(x):g}"


def _symbolic(proof, path, m, assumed, bound, deadline, certificate, log):  # noqa: C901
    for hi in range(6, SAMPLE_MAX + 1):  # the smallest SAMPLES settings; a narrow domain (M >= 2P, P even) reaches further
        samples = settings(m, assumed, hi, SAMPLES)
        if len(samples) >= SAMPLES:
            break
    names = {x.index: feature_names(m, x) for x in m.stmts}
    log("  well-formedness")
    proof.parts.append(_well_formed(proof, path, m, assumed, deadline))
    if proof.verdict == "refuted":
        return
    if (same := collectives.replicas_proved(m)) is not None:
        proof.parts.append(Part("replicas", "proved", same))
    log("  deadlock freedom: timing certificate")
    refute = _refuter(path, m)
    try:
        if certificate is not None:
            _matches(certificate, m)
            timing = {int(k): v for k, v in certificate["timing"].items()}
            why = _check_timing(m, assumed, timing, names, deadline, refute)
        else:
            timing, why = cegis_timing(m, assumed, samples, deadline, log, refute=refute)
    except ConcreteFailure as exc:
        log(f"  the schedule fails its checks at {setting_text(exc.counterexample['params'])}; "
            "looking for a smaller failing setting")
        proof.verdict, proof.counterexample = "refuted", exc.counterexample  # made the smallest by _settle
        proof.parts.append(Part("deadlock-free", "refuted", "a setting the timing search met fails its checks"))
        return
    ordered = timing is not None and why is None
    if ordered:
        proof.parts.append(Part("deadlock-free", "proved", "under rendezvous sends: the timing certificate "
                                "increases along every rank's order and every data dependency, so the "
                                "happens-before graph has no cycle; schedc inserts each send with its receive "
                                "in one global order, so the lowered program is deadlock-free and matched"))
    else:
        proof.parts.append(Part("deadlock-free", "unknown", why))
    log("  memory")
    mem_text, expr, argument = _memory(proof, m, assumed, bound, deadline, certificate, samples, ordered,
                                     refute, log)
    if proof.verdict == "refuted":
        return
    limit = _limit(proof, path, m, assumed, expr if proof.memory_bound else None, deadline)
    if limit is not None:
        proof.parts.append(limit)
        if proof.verdict == "refuted":
            return
    proof.certificate = {"schedule": m.name, "assumptions": list(proof.assumptions),
                         "arithmetic": "nonlinear" if m.nonlinear else "linear",
                         "features": {str(k): list(v) for k, v in names.items()},
                         "statements": {str(x.index): {"line": x.span.line, "action": _action_text(x)}
                                        for x in m.stmts},
                         "timing": {str(k): v for k, v in (timing or {}).items()},
                         "memory": {"bound": mem_text, "argument": argument}}


def _memory(proof, m, assumed, bound, deadline, certificate, samples, ordered, refute, log):  # noqa: C901
    """The memory part, counted by check's rule in whole units (model.memory_units): the bound is
    the user's (`--memory`: a claim, refuted where the count confirms it fails), the certificate's
    (failing, it gives way: unknown, or the search), or guessed from the samples (failing, guessed
    again). Appends the part; returns (the bound's text, its expression, the argument made)."""
    try:
        units = memory_units(m)
    except Unsupported as exc:
        proof.parts.append(Part("memory", "unknown", f"the count cannot be `check`'s: {exc.reason}"
                                + (f" (line {exc.span.line})" if exc.span else "")))
        return None, None, None
    capacity = _capacity_only(m, assumed)  # stages per rank vary: counted in rank order, or capacity
    mem_text = _text(bound) if bound is not None else (certificate or {}).get("memory", {}).get("bound")
    inferred = mem_text is None  # a guess from the samples, not a claim to refute the schedule with
    if inferred and not samples:  # nothing to guess from (a guess would fail at a setting too large to count)
        proof.parts.append(Part("memory", "unknown", f"no setting with each parameter at most {SAMPLE_MAX} "
                                "satisfies the assumptions, so there are no sampled peaks to guess a bound from; "
                                "state one with --memory"))
        return None, None, None
    if inferred:
        mem_text = infer_bound(m, samples, units.sizes)
    if mem_text is None:
        proof.parts.append(Part("memory", "unknown", "no closed form in P, M and the rank matches the sampled "
                                "peaks; state one with --memory"))
        return None, None, None
    expr = bound if bound is not None else parse_condition(mem_text, "--memory")
    why, argument = _check_memory(m, assumed, expr, deadline, capacity, units, ordered)
    tries = 0
    while isinstance(why, dict) and inferred and tries < 3:
        # the bound was only inferred: its counterexample refutes the guess, not the schedule
        # (unless the schedule fails its checks there)
        if (cex := refute(why["params"])) is not None:
            proof.verdict, proof.counterexample = "refuted", cex
            return mem_text, expr, argument
        tries += 1
        samples = samples + [why["params"]]
        mem_text = infer_bound(m, samples, units.sizes)
        if mem_text is None:
            why = "no closed form in P, M and the rank matches the sampled peaks; state one with --memory"
            break
        log(f"  memory: the bound guessed first fails at {setting_text(why['params'])}; trying {mem_text}")
        expr = parse_condition(mem_text, "--memory")
        why, argument = _check_memory(m, assumed, expr, deadline, capacity, units, ordered)
    if isinstance(why, dict) and bound is not None:  # the user's claim fails, confirmed by the count
        proof.verdict, proof.counterexample = "refuted", why
        return mem_text, expr, argument
    if isinstance(why, dict) and (cex := refute(why["params"])) is not None:
        proof.verdict, proof.counterexample = "refuted", cex
        return mem_text, expr, argument
    if isinstance(why, dict):
        which = "the last bound guessed from the samples" if inferred else f"the certificate's bound {mem_text}"
        why = f"{which} fails at {setting_text(why['params'])} ({why['summary']}); state one with --memory"
    if isinstance(why, str) and inferred and "--memory" not in why:
        why += " (a bound guessed from the samples; state one with --memory)"
    proof.memory_bound = mem_text if why is None else None
    proof.parts.append(Part("memory", "proved" if why is None else "unknown",
                            _memory_text(m, expr, mem_text, units) if why is None else why))
    return mem_text, expr, argument


def _memory_text(m, expr, mem_text, units: MemoryUnits) -> str:
    lets = [x for x in rank_lets(m) if x.name in ast.names_in(expr)]
    where = f", where {', '.join(f'{x.name} = {_text(x.value)}' for x in lets)}" if lets else ""
    if units.one_per_forward:
        how = "one per forward, freed by its B or W: check's peak activation is this x the activation size"
    else:
        d = units.deltas
        how = ", ".join(f"{k} {'adds' if d[k] > 0 else 'frees'} {abs(d[k])}" for k in ("F", "B", "I", "W")
                        if d.get(k)) + ", by check's sizes"
    one = mem_text.strip() == "1"  # `at most 1 live activation`
    what = ("live activation" if one else "live activations") if units.one_per_forward else \
        _unit_words(units, 1)[2:] if one else _unit_words(units)
    return f"at most {mem_text} {what} on rank {m.rank_var} ({how}){where}"


def _limit(proof, path, m, assumed, bound, deadline) -> Part | None:
    """The file's `memory limit`s hold at every setting: the proved bound, in the file's sizes, is
    within each rank's limit (smt.over_limit). None when the file sets no limit. A setting where it
    is not is checked concretely: a refutation if `check` fails there (made the smallest failing
    setting by _settle), else unknown."""
    try:
        spec = memory_spec(m)
    except Unsupported as exc:
        if not any(s.name == "limit" for a in m.annotations if a.what == "memory" for s in a.settings):
            return None
        return Part("memory limit", "unknown", f"the file's memory limit is beyond this proof: {exc.reason}"
                    + (f" (line {exc.span.line})" if exc.span else ""))
    if not spec.limits:
        return None
    lines = ", ".join(str(e.span.line) for _, e in spec.limits)
    if bound is None:
        return Part("memory limit", "unknown", f"the file's memory limit (line {lines}) needs a proved memory "
                    "bound, and there is none")
    enc = smt.Encoding(m, assumed)
    size = smt.share(enc, spec)  # asked of Z3 once: the formula and the text below both read it
    try:
        (what, formula, shown), = smt.over_limit(enc, lambda r: enc.int(bound, enc.at_rank(r)), spec, size)
    except Unsupported as exc:
        return Part("memory limit", "unknown", f"the file's memory limit (line {lines}): {exc.reason}")
    verdict = enc.run(formula, _one(deadline), shown, smallest=True)
    scaled = (_text(bound) if size == 1 else f"{_fraction(size)} x ({_text(bound)})" if size is not None
              else f"R / S x ({_text(bound)})")
    if isinstance(verdict, solver.Proved):
        return Part("memory limit", "proved", f"{scaled} is within the file's memory limit "
                    f"(line {lines}) on every rank")
    if isinstance(verdict, solver.Unknown):
        return Part("memory limit", "unknown", f"Z3 gave up on the file's memory limit ({verdict.reason})")
    cex = _concrete(path, m, verdict.params, what="memory limit")
    if cex is not None:
        proof.verdict, proof.counterexample = "refuted", cex  # made the smallest by _settle
        return Part("memory limit", "refuted", f"over the file's memory limit at {setting_text(verdict.params)}")
    return Part("memory limit", "unknown", f"the bound {scaled} is over the file's memory limit "
                f"(line {lines}) at {setting_text(verdict.params)}, where the schedule itself stays within it: "
                "prove a tighter bound with --memory")


def _fraction(x) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def _matches(cert: dict, m: Model) -> None:
    """A certificate names the statements it was made for; refuse one made for other statements."""
    want = {str(x.index): {"line": x.span.line, "action": _action_text(x)} for x in m.stmts}
    ok = cert.get("statements") == want and set(cert.get("timing", {})) == set(want) and all(
        isinstance(f, dict) and all(isinstance(c, int) for c in f.values()) for f in cert["timing"].values())
    feats = {str(x.index): set(feature_names(m, x)) for x in m.stmts}
    ok = ok and all(set(f) <= feats[k] for k, f in cert["timing"].items())
    ok = ok and all(cert["timing"][str(x.index)] == cert["timing"][str(x.key)] for x in m.stmts)  # one step, one time
    if not ok:
        raise SchedcError("certificate", f"the certificate does not fit {m.name} as it is now: it must list "
                          "the same actions on the same lines, with integer coefficients (make a new one with "
                          "`schedc prove --json`)", where="--certificate")


def _well_formed(proof, path, m, assumed, deadline) -> Part:  # noqa: C901
    routed = (("routes", "the routes describe a program at every setting"),) if m.routes else ()
    for which, text in routed + (
            ("range", "every stage and microbatch index is in range" + (", every action on its microbatch's route"
                                                                         if m.routes else "")),
            ("placement", "every action runs on the rank that holds its stage"),
            ("unique", "no action repeats, no microbatch has both B and I/W"),
            ("exists", "every stage runs F and B (or I and W) of every microbatch"
             + (" on its route" if m.routes else "")),
            ("collectives", collectives.TEXT)):
        enc = smt.Encoding(m, assumed)
        obligations = collectives.obligations(enc) if which == "collectives" else smt.well_formed(enc, which)
        for x, y, formula, shown in obligations:
            verdict = enc.run(formula, deadline.share(WELL_FORMED_UNITS, "one well-formedness query"), shown)
            if isinstance(verdict, solver.Unknown):
                return Part("well-formed", "unknown", f"Z3 gave up on '{text}' ({verdict.reason})")
            if isinstance(verdict, solver.Refuted):
                cex = _concrete(path, m, verdict.params, what=text)
                if cex is None and not _small_enough(m, verdict.params):  # too large to check: look among small ones
                    small = enc.run(enc.within(formula, WELL_FORMED_BOX), _one(deadline), shown)
                    if isinstance(small, solver.Refuted):
                        verdict, cex = small, _concrete(path, m, small.params, what=text)
                if cex is not None:
                    proof.verdict, proof.counterexample = "refuted", cex
                    return Part("well-formed", "refuted", text)
                return Part("well-formed", "unknown", f"'{text}' fails symbolically at {setting_text(verdict.params)}, "
                            "which the concrete check does not confirm")
    enc = smt.Encoding(m, assumed)
    try:
        annotations = list(smt.annotation_values(enc))
    except Unsupported as exc:
        return Part("well-formed", "unknown", f"an annotation the proof cannot evaluate: {exc.reason}"
                    + (f" (line {exc.span.line})" if exc.span else ""))
    for (what, item, _), formula, shown in annotations:
        verdict = enc.run(formula, _one(deadline), shown, smallest=True)
        if isinstance(verdict, solver.Refuted):
            cex = _concrete(path, m, verdict.params, what=f"annotation: {what}")
            if cex is not None:
                proof.verdict, proof.counterexample = "refuted", cex
                return Part("well-formed", "refuted", f"the annotation on line {item.span.line}: {what}")
        if not isinstance(verdict, solver.Proved):
            return Part("well-formed", "unknown", f"the annotation on line {item.span.line}: cannot show {what} "
                        "for every setting" + (f" (fails at {setting_text(verdict.params)} symbolically, not "
                                               "concretely)" if isinstance(verdict, solver.Refuted) else ""))
    if m.nonlinear:
        enc = smt.Encoding(m, assumed)
        for formula in smt.divisors(enc):
            verdict = enc.run(formula, _one(deadline), domain=False)
            if not isinstance(verdict, solver.Proved):
                return Part("well-formed", "unknown", "a division by a quantity that varies may divide by zero or "
                            "less" + (f" (at {setting_text(verdict.params)})" if isinstance(verdict, solver.Refuted) else ""))
    what = ("every stage of each microbatch's route runs F and B (or I then W) of it exactly once, on the rank "
            "that holds it, and no action is off its microbatch's route" if m.routes else
            "every stage runs F and B (or I then W) of every microbatch exactly once, on the rank that holds it")
    return Part("well-formed", "proved", what + (f"; {collectives.TEXT}" if m.collectives else ""))


def _one(deadline: solver.Deadline) -> solver.Deadline:
    """One query's share of the solver's work (QUERY_UNITS)."""
    return deadline.share(QUERY_UNITS, "one query")


def _check_timing(m, assumed, timing, names, deadline, refute=None):
    enc = smt.Encoding(m, assumed)
    for what, formula, shown in smt.timing(enc, timing, names):
        verdict = enc.run(formula, _one(deadline), shown)
        if isinstance(verdict, solver.Unknown):
            return f"Z3 gave up on a timing obligation ({verdict.reason})"
        if isinstance(verdict, solver.Refuted):
            if refute is not None and (cex := refute(verdict.params)) is not None:
                raise ConcreteFailure(cex)
            x, y, edge = what
            return (f"the timing certificate fails at {setting_text(verdict.params)}: {_action_text(x)} (line {x.span.line}) "
                    f"must come before {_action_text(y)} (line {y.span.line}) by {edge}")
    return None


def _check_memory(m, assumed, expr, deadline, capacity: bool, units: MemoryUnits, ordered: bool = False):
    """(None if the bound holds everywhere, the smallest counterexample (a dict, confirmed on the
    concrete instance) if it fails somewhere, else why this proof cannot tell; the argument made).
    `capacity`: the stages per rank vary, so the live activations are counted in rank order
    (smt.counted), or failing that bounded by capacity (smt.capacity); else counted per stage in
    microbatch order (smt.memory). `ordered`: a timing certificate is proved, so every free follows
    its forward (B and I need F's activation, W needs I's gradient: each comes later in time, and
    time increases along the rank's order), which need not be asked of Z3 again. Counted in
    `units`: check's rule in whole units (model.memory_units)."""
    enc = smt.Encoding(m, assumed)
    bound = (lambda r: enc.int(expr, enc.at_rank(r)))
    if not capacity:
        try:
            return _per_stage(m, enc, expr, bound, deadline, units), "counted"
        except Unsupported as exc:  # (routes that share stages)
            return exc.reason, "counted"
    try:
        why = _in_rank_order(m, enc, expr, bound, deadline, ordered, units)
    except Unsupported as exc:
        why = exc.reason
    if why is None or isinstance(why, dict):
        return why, "rank order"
    try:
        obligations = list(smt.capacity(enc, bound, units.deltas["F"]))
    except Unsupported as exc:
        return f"counting in rank order: {why}; and by capacity: {exc.reason}", "capacity"
    for what, formula, shown in obligations:
        verdict = enc.run(formula, _one(deadline), shown, smallest=True)
        if isinstance(verdict, solver.Unknown):
            return f"Z3 gave up on the memory bound ({verdict.reason})", "capacity"
        if isinstance(verdict, solver.Refuted):
            try:
                over = _confirmed(m, expr, verdict, deadline, units)
            except Stop:
                over = None
            return over or (f"counting in rank order: {why}; and by capacity the proof only shows bounds of "
                            f"at least (stages) x (microbatches) x (an F's units) per rank, and {_text(expr)} is "
                            f"less at {setting_text(verdict.params)}"), "capacity"
    return None, "capacity"


def _in_rank_order(m, enc, expr, bound, deadline, ordered, units):
    """The memory bound by counting instances in rank order (smt.counted): None, a confirmed
    counterexample, or why not."""
    if not ordered and (why := _frees_follow(enc, deadline, units)) is not None:
        return why
    for what, formula, shown in smt.counted(enc, bound, units.deltas):
        verdict = enc.run(formula, _one(deadline), shown, smallest=True)
        if isinstance(verdict, solver.Unknown):
            return f"Z3 gave up on the memory bound ({verdict.reason})"
        if isinstance(verdict, solver.Refuted):
            try:
                over = _confirmed(m, expr, verdict, deadline, units)
            except Stop:
                return _unconfirmed(expr, verdict.params, "too large to count concretely")
            return over or _unconfirmed(expr, verdict.params, "where the concrete count does not confirm it")
    return None


def _frees_follow(enc, deadline, units):
    for what, formula, shown in smt.frees_follow(enc, smt.freeing(units.deltas)):
        verdict = enc.run(formula, _one(deadline), shown)
        if not isinstance(verdict, solver.Proved):
            return (f"a free may come before its forward ({_action_text(what[1])}, line {what[1].span.line})"
                    if isinstance(verdict, solver.Refuted) else f"Z3 gave up on the order of frees ({verdict.reason})")
    return None


def _per_stage(m, enc, expr, bound, deadline, units):  # noqa: C901
    """The memory bound counted per stage (smt.memory), each group of smt.memory_groups in
    microbatch order: None, a confirmed counterexample, or why not."""
    if (why := _frees_follow(enc, deadline, units)) is not None:
        return why
    directions = []
    groups = smt.memory_groups(units.deltas)
    for kinds, _ in groups:
        label = "forwards" if kinds == ("F",) else f"{' and '.join(kinds)}s"
        for direction in (1, -1):
            failed = None
            for what, formula, shown in smt.memory_order(enc, kinds, direction):
                verdict = enc.run(formula, _one(deadline), shown)
                if isinstance(verdict, solver.Unknown):
                    return f"Z3 gave up on the order of the {label} ({verdict.reason})"
                if isinstance(verdict, solver.Refuted):
                    failed = (what, verdict)
                    break
            if failed is None:
                directions.append(direction)
                break
        else:
            assert failed is not None  # (the loop over both directions ends by `break` or with a failure)
            what, verdict = failed
            return (f"the {label} of a stage run in neither increasing nor decreasing microbatch order "
                    f"(e.g. at {setting_text(verdict.params)}, {_action_text(what[1])}, line {what[1].span.line}), which "
                    "this proof needs")
    worst = None
    for what, formula, shown in smt.memory(enc, bound, groups, tuple(directions)):
        verdict = enc.run(formula, _one(deadline), shown, smallest=True)
        if isinstance(verdict, solver.Unknown):
            return f"Z3 gave up on the memory bound ({verdict.reason})"
        if isinstance(verdict, solver.Refuted):
            size = (sum(verdict.params.values()), tuple(verdict.params.values()))
            if worst is None or size < worst[0]:
                worst = (size, verdict)
    if worst is None:
        return None
    params = worst[1].params
    try:
        over = _confirmed(m, expr, worst[1], deadline, units)
    except Stop:
        return _unconfirmed(expr, params, "too large to count concretely")
    return over or _unconfirmed(expr, params, "where the concrete count does not confirm it")


def _unconfirmed(expr, params, why: str) -> str:
    """Why a memory bound Z3 refutes is not a refutation: the bound, named, and the setting."""
    return f"the memory bound {_text(expr)} fails symbolically at {setting_text(params)}, {why}"


def _confirmed(m: Model, expr, verdict, deadline, units) -> dict | None:
    """Z3's memory counterexample if the concrete count (in `units`) confirms it (Stop: too large
    to count), marked `smallest: false` when Z3's budget ran out before showing that no smaller
    setting fails."""
    over = _over_bound(m, expr, verdict.params, peaks(m, verdict.params, deadline, units.sizes), units)
    if over and not verdict.least:
        over = {**over, "smallest": False}
    return over


def _capacity_only(m, assumed) -> bool:
    """The memory proof for a nonlinear model whose stages per rank vary: the capacity argument
    (smt.capacity), not the exact count (smt.memory), which needs a fixed number."""
    if not m.nonlinear:
        return False
    try:
        smt.Encoding(m, assumed).stages_per_rank()
        return False
    except Unsupported:
        return True


def _refuter(path, m: Model):
    """`refute(params)`: the counterexample if `check` fails at a setting the search met (each
    setting checked once), else None."""
    seen: dict = {}

    def refute(params):
        key = tuple(sorted(params.items()))
        if key not in seen:
            seen[key] = _concrete(path, m, params, what="checks")
        return seen[key]
    return refute


LEAST_PAIRS = 2_000_000  # the most work spent looking for a smaller failing setting (stages x microbatches)


def _least_failing(path, m: Model, assumed, cex: dict, deadline, bound=None, units=None, passed=()) -> dict:
    """The smallest failing setting at or below the failing one in `cex` (a setting where `check`
    fails, or the user's `bound` does, in `units`): every setting before it (by sum of parameters,
    then each parameter in turn, the order the output states) is checked concretely, but for those
    in `passed` (already checked and clean), within LEAST_PAIRS of work and CONCRETE_PAIRS a setting
    (else marked `smallest: false`) and `deadline`'s clock (TimeUp)."""
    target = tuple(cex["params"][p] for p in m.params)
    least = {k: v for k, v in cex.items() if k != "smallest"}
    spent = 0
    for values in _by_size(len(m.params), sum(target)):
        if values >= target and sum(values) == sum(target):
            return least
        deadline.check()
        params = dict(zip(m.params, values))
        if params in passed or not inside(m, assumed, params):
            continue
        env = base_env(m, params)
        spent += evaluate(m.stages, env, m.functions) * evaluate(m.microbatches, env, m.functions)
        if spent > LEAST_PAIRS or not _small_enough(m, params):
            return {**least, "smallest": False}
        found = _concrete(path, m, params, what="checks")
        if found is None and bound is not None and units is not None:
            found = _over_bound(m, bound, params, peaks(m, params, deadline, units.sizes), units)
        if found is not None:
            return found
    return least


def _by_size(n: int, most: int):
    """Tuples of n non-negative integers with sum at most `most`, by sum, then lexicographically."""
    def parts(k, total):
        if k == 1:
            yield (total,)
            return
        for first in range(total + 1):
            for rest in parts(k - 1, total - first):
                yield (first, *rest)
    for total in range(most + 1):
        yield from parts(n, total) if n else ([()] if total == 0 else [])


CONCRETE_PAIRS = 1_000_000  # the largest setting checked concretely: stages x microbatches


def _concrete(path, m: Model, params, what):
    """The counterexample if `check` fails at these parameters (a compile error included); None
    if it passes, or if the setting is too large to check (CONCRETE_PAIRS)."""
    from ..api import check, load
    if not _small_enough(m, params):
        return None
    try:
        program = load(str(path), params)
    except SchedcError as exc:
        if _outside(exc):
            return None
        return {"params": params, "property": what, "report": "\n".join(d.render() for d in exc.diagnostics)}
    report = check(program)
    if report.ok is not True:
        return {"params": params, "property": what, "summary": report.summary(), "report": report.render()}
    return None


def _small_enough(m: Model, params) -> bool:
    try:
        env = base_env(m, params)
        return evaluate(m.stages, env, m.functions) * evaluate(m.microbatches, env, m.functions) <= CONCRETE_PAIRS
    except (Stop, KeyError, TypeError):
        return False


def _text(e) -> str:
    from ..span import span_text
    return span_text(e.span)


def _action_text(x) -> str:
    return f"{x.kind}({_text(x.stage)}, {_text(x.microbatch)})"
