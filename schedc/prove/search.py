"""Find the certificates: fit them to small concrete instances, then check them for every size.

Timing: one affine function per statement (of 1, the parameters, the rank, the lets in scope and
the loop variables), fitted so that it increases along every sampled rank order and dependency,
then checked by Z3 for all settings; a failure adds that setting to the samples (CEGIS). The fit is
Z3's for a linear model and an integer program (ilp.py) for a nonlinear one. Memory:
the bound is the user's, or the simplest `a*X + b*r + c` or min of up to three such that equals
every sampled peak (or, in a nonlinear model, a product of two parameters such as `V * M`); its
proof needs no certificate (schedc/prove/smt.py `memory` and `capacity`).
"""
from __future__ import annotations

import itertools

from .. import solver, syntax as ast
from ..ir import COMPUTE, Action, Op
from ..rules.deps import needs, produces
from ..verify.memory import peak_activations
from . import ilp, smt
from .evaluator import Stop, evaluate
from .model import Model, rank_lets
from .sample import feature_names, instances, rank_env

FIT_BOUNDS = (2, 4, 8, 16, 64)  # coefficient bounds tried in turn, smallest (simplest certificate) first;
# a linear model starts at 4
LAST_CONSTANT = 512  # the constant term's bound at the last: long literal lists start late (P = 8)


def settings(m: Model, assumptions, hi: int, limit: int):
    """Parameter settings inside the domain, smallest first (by sum, then lexicographically)."""
    out = []
    for values in sorted(itertools.product(range(0, hi + 1), repeat=len(m.params)), key=lambda v: (sum(v), v)):
        params = dict(zip(m.params, values))
        if inside(m, assumptions, params):
            out.append(params)
            if len(out) >= limit:
                break
    return out


def inside(m: Model, assumptions, params) -> bool:
    from .sample import base_env
    try:
        env = base_env(m, params)
        if not all(evaluate(e, env, m.functions) for e in m.requires + tuple(assumptions)):
            return False
        return all(evaluate(e, env, m.functions) >= 1 for e in (m.ranks, m.stages, m.microbatches))
    except (Stop, ZeroDivisionError, KeyError, TypeError):
        return False


def _edges(m: Model, ranks):
    """(a, b) pairs of sampled instances: consecutive on a rank, and producer -> consumer."""
    made = {}
    for insts in ranks:
        for i in insts:
            v = produces(Action(Op[i.stmt.kind], i.stage, i.microbatch))
            if v is not None:
                made[v] = i
    S = 1 + max((i.stage for insts in ranks for i in insts), default=0)
    for insts in ranks:
        yield from ((a, b) for a, b in zip(insts, insts[1:]) if a.step != b.step)  # the parts of a step: one time
        for b in insts:
            for v in needs(Action(Op[b.stmt.kind], b.stage, b.microbatch), S):
                if v in made:
                    yield made[v], b


def timing_rows(m: Model, samples) -> list:
    """t(b) - t(a) >= 1 for every sampled edge a -> b, as rows for smt.Fit."""
    rows = []
    for params in samples:
        for a, b in _edges(m, instances(m, params)):
            rows.append(edge_row(a.stmt.key, a.features, b.stmt.key, b.features))
    return rows


def edge_row(ka, fa, kb, fb) -> list:
    """t(b) - t(a) >= 1 for features fa of a (certificate key ka) and fb of b, as a smt.Fit row;
    within one statement (or step) only the difference counts, so such rows repeat and are shared."""
    if ka == kb:
        return [(kb, [y - x for x, y in zip(fa, fb)])]
    return [(kb, list(fb)), (ka, [-x for x in fa])]


def _named(m: Model, found) -> dict:
    """{stmt index: {feature name: coefficient}} for every statement (zero where none); the parts
    of an overlap step get their step's one function."""
    out = {}
    for x in m.stmts:
        names = feature_names(m, x)
        out[x.index] = {names[i]: c for i, c in sorted(found.get(x.key, {}).items())}
    return out


def unit_peaks(ranks, sizes: tuple[int, int] = (1, 1)) -> list[int]:
    """Peak memory per rank in whole units, the units a bound of `prove` is stated in:
    schedc/rules/memory.py's rule on every stage with (act, weight) = `sizes` in units
    (model.MemoryUnits.sizes; by default one unit each: F allocates one, B or W frees it, I frees
    nothing; inside a step allocations come before frees). `ranks`: per rank, its steps, each a
    sequence of action kinds ("F", "B", ...)."""
    act, weight = (sizes[0],), (sizes[1],)  # every action counted on one stage: only its kind matters
    # (integer sizes give an integer peak: int() keeps it)
    return [int(peak_activations([[Action(Op(k), 0, 0) for k in kinds if k in COMPUTE] for kinds in steps], act, weight))
            for steps in ranks]


def peaks(m: Model, params, deadline=None, sizes: tuple[int, int] = (1, 1)) -> list[int]:
    """unit_peaks of the model's instances at these parameters (no compiling), within `deadline`."""
    out = []
    for insts in instances(m, params, deadline):
        steps: list[list] = []
        for a, b in zip([None, *insts], insts):
            if a is not None and a.step == b.step:
                steps[-1].append(b.stmt.kind)
            else:
                steps.append([b.stmt.kind])
        out.append(steps)
    return unit_peaks(out, sizes)


def infer_bound(m: Model, samples, sizes: tuple[int, int] = (1, 1)) -> str | None:
    """The simplest expression in the parameters and the rank equal to every sampled peak (in the
    whole units of `sizes`, see unit_peaks)."""
    points = []
    for params in samples:
        for r, peak in enumerate(peaks(m, params, sizes=sizes)):
            points.append((rank_env(m, params, r), peak))
    terms: list[tuple[str, ...]] = [(p,) for p in m.params]
    if m.nonlinear:  # and products of two parameters (`V * M`)
        terms += list(itertools.combinations(m.params, 2))
    # in the parameters; failing that, in the lets at the top of the rank body (`warm + 1`)
    lets = [(x.name,) for x in rank_lets(m)]
    return _bound_in(m, points, terms) or (_bound_in(m, points, lets) if lets else None)


def _bound_in(m: Model, points, terms) -> str | None:  # noqa: C901
    order = [t[0] for t in terms]
    top = max((peak for _, peak in points), default=0)
    lins = []
    for p in (None, *terms):
        for a in ((0,) if p is None else (1, 2, 3, 4)):
            for b in (0, -1, 1, -2):
                for c in (range(-1, top + 2) if p is None else (0, 1, -1)):  # a constant: any up to the peak
                    lins.append(((p, a), b, c))

    def value(lin, env):
        (p, a), b, c = lin
        return (a * _product(env[x] for x in p) if p else 0) + b * env[m.rank_var] + c

    def text(lin):
        (p, a), b, c = lin
        parts = [f"{a} * {' * '.join(p)}" if a > 1 else " * ".join(p)] if p else []
        if b:
            parts.append(f"{'-' if b < 0 else '+'} {abs(b)} * {m.rank_var}" if abs(b) > 1
                         else f"{'-' if b < 0 else '+'} {m.rank_var}")
        if c or not parts:
            parts.append(f"{'-' if c < 0 else '+'} {abs(c)}")
        s = " ".join(parts)
        return s[2:] if s.startswith("+ ") else ("-" + s[2:] if s.startswith("- ") else s)

    def cost(lin):
        (p, a), b, c = lin
        return (p is not None) + (b != 0) + (c != 0)
    # the bound is a min of linear upper bounds, each tight somewhere: the smallest such set
    uppers = [lin for lin in sorted(lins, key=cost) if all(value(lin, env) >= peak for env, peak in points)]
    for size in (1, 2, 3):
        for combo in itertools.combinations(uppers[:60], size):
            if all(min(value(x, env) for x in combo) == peak for env, peak in points):
                shown = sorted(combo, key=lambda lin: (len(lin[0][0]), order.index(lin[0][0][0])) if lin[0][0]
                               else (3, 0))
                return text(shown[0]) if size == 1 else f"min({', '.join(text(x) for x in shown)})"
    return None


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


class ConcreteFailure(Exception):
    """A setting the search met where the schedule itself fails its checks (`counterexample`)."""

    def __init__(self, counterexample: dict):
        super().__init__(counterexample.get("summary", ""))
        self.counterexample = counterexample


def cegis_timing(m: Model, assumptions, samples, deadline, log, rounds: int = 30, refute=None):
    """A timing certificate that holds for every setting, or (None, reason). Each round fits the
    rows (one fit per coefficient bound, see _fit), checks every obligation, and adds the edge
    of each counterexample as a row. `refute(params)` checks each setting a candidate fails at
    concretely (a counterexample dict, or None); a failing one raises ConcreteFailure, and so does a
    sampled setting that fails when no certificate orders the samples (their edges may close a
    cycle). A nonlinear model's certificate is first sought with products
    by the number of ranks only (a rank's time scales with P), then with every product; its sampled
    rows join the fit lazily, the most violated first (a few hundred decide what thousands would).
    The narrower template gets TEMPLATE_UNITS of `deadline`'s solver work, the last what is left."""
    if m.nonlinear:  # rows join lazily, so more settings cost little and tell more
        samples = samples + [p for p in settings(m, assumptions, POOL_MAX, POOL_SETTINGS) if p not in samples]
    pool = timing_rows(m, samples)
    names = _names(m)
    why = "no timing template"
    templates = _templates(m, names)
    for n, allowed in enumerate(templates):
        share = deadline if n == len(templates) - 1 else deadline.share(TEMPLATE_UNITS, "a narrower timing template")
        cert, why = _cegis(m, assumptions, pool, names, allowed, share, log, rounds, refute)
        if cert is not None:
            return cert, None
    if why.startswith(NO_FIT) and refute is not None:  # the samples' own edges may close a cycle: check them
        for params in samples:
            if (cex := refute(params)) is not None:
                raise ConcreteFailure(cex)
    return None, why


def _templates(m: Model, names) -> list:
    """The features a certificate may use, narrowest first: {stmt key: feature indices} or None
    (all of them)."""
    if not m.nonlinear or not isinstance(m.ranks, ast.Var) or m.ranks.name not in m.params:
        return [None]
    by = f"*{m.ranks.name}"
    return [{x.key: {i for i, f in enumerate(names[x.index]) if "*" not in f or f.endswith(by)}
             for x in m.stmts}, None]


def _cegis(m, assumptions, pool, names, allowed, deadline, log, rounds, refute):  # noqa: C901
    # a linear model's fit takes every sampled row at once and is fast; a nonlinear model's rows
    # carry products (large numbers): it starts from a few, bound 2, and adds the ones it violates
    bounds = list(FIT_BOUNDS) if m.nonlinear else list(FIT_BOUNDS[1:])
    active = pool[:FIRST_ROWS] if m.nonlinear else list(pool)
    fitter = _fit(m, bounds, allowed)
    fitter.add(active, deadline)
    round_ = 0
    while round_ < rounds:
        if (spent := deadline.exhausted()) is not None:
            return None, f"{spent}, while searching for a timing certificate"
        found = fitter.solve(_fit_share(deadline, bounds))
        while found is None and len(bounds) > 1 and deadline.exhausted() is None:
            bounds.pop(0)  # rows only grow: a smaller bound cannot work again (or ran out of its budget)
            fitter = _fit(m, bounds, allowed)
            fitter.add(active, deadline)
            found = fitter.solve(_fit_share(deadline, bounds))
        if found is None:
            return None, (f"{NO_FIT} (in the parameters, the rank, the lets and the loop variables, "
                          f"coefficients up to {FIT_BOUNDS[-1]}, constants up to {LAST_CONSTANT}) "
                          "orders the sampled instances")
        values = ((_value(row, found), n) for n, row in enumerate(pool))
        violated = [pool[n] for _, n in sorted(vn for vn in values if vn[0] < 1)]  # the most violated first
        if violated:  # the samples already refute it: no need to ask Z3
            active += violated[:ROWS_PER_FIT]
            fitter.add(violated[:ROWS_PER_FIT])
            continue
        round_ += 1
        cert = _named(m, found)
        enc = smt.Encoding(m, assumptions)
        failed = []
        # a nonlinear model's counterexamples are sought among small settings first (their rows are
        # small numbers, which keep the fit fast), then anywhere
        for box in ((BOX, None) if m.nonlinear else (None,)):
            for (x, y, _edge), formula, shown in smt.timing(enc, cert, names):
                share = (deadline.share(TIMING_UNITS, "one timing obligation") if box is None
                         else deadline.share(BOX_UNITS, "one timing obligation among small settings"))
                verdict = enc.run(enc.within(formula, box), share, shown, smallest=not m.nonlinear)
                if isinstance(verdict, solver.Unknown):
                    if box is not None:
                        continue
                    return None, f"Z3 gave up on a timing obligation ({verdict.reason})"
                if isinstance(verdict, solver.Refuted):
                    if refute is not None and (cex := refute(verdict.params)) is not None:
                        raise ConcreteFailure(cex)
                    fa = [verdict.detail[f"a.f{i}"] for i in range(len(names[x.index]))]
                    fb = [verdict.detail[f"b.f{i}"] for i in range(len(names[y.index]))]
                    failed.append(edge_row(x.key, fa, y.key, fb))
                    if len(failed) == 1:
                        log(f"  timing candidate {round_} fails at {setting_text(verdict.params)}; learning from it")
            if failed:
                break
        if not failed:
            return cert, None
        active += failed
        fitter.add(failed)
    return None, f"the timing search did not converge in {rounds} rounds"


NO_FIT = "no affine timing"  # how the reason begins when no certificate orders the sampled instances
POOL_MAX, POOL_SETTINGS = 10, 80  # a nonlinear model's pool of sampled settings
BOX = 24  # a nonlinear model's counterexamples: first with every parameter at most BOX
# Solver budgets in Z3 resource units (deterministic: see schedc/solver.py and the measurements beside
# prover.py's budgets, over every proof in tests/test_prove*.py and tests/test_synth*.py):
TIMING_UNITS = 300_000_000  # one timing obligation: the largest takes 5.2M (interleaved 1F1B), but a
# nonlinear one's work varies tenfold with the seed and the process's history
BOX_UNITS = 10_000_000  # one among small settings (nonlinear): the largest takes 0.4M (looped BFS);
# out of budget, the obligation is asked again without the box
TEMPLATE_UNITS = 1_000_000_000  # a nonlinear model's narrower template (products by P only), checks and
# fits: interleaved zero bubble's search takes 100M to 150M, interleaved 1F1B's 1M to 37M
FIT_UNITS = 150_000_000  # one Z3 fit (linear models) at a bound that is not the last: the largest that
# succeeds takes 36M (a synthesised loop form), zbv's 10M; one that does not gives way to the next bound
LAST_FIT_UNITS = 1_200_000_000  # the fit at the last bound, the search's last chance
FIRST_ROWS = 64  # the sampled rows the fit starts from (the smallest settings' edges come first)
ROWS_PER_FIT = 100  # at most this many violated sampled rows join the fit at a time


def _value(row, found) -> int:
    return sum(found.get(k, {}).get(i, 0) * x for k, xs in row for i, x in enumerate(xs) if x)


def _fit(m: Model, bounds, allowed):
    """The fit at the smallest bound left. A nonlinear model's rows carry products (large numbers)
    that Z3's integer search drowns in: it gets the integer program of ilp.Fit (HiGHS, smallest
    coefficients first), with constants up to 8 at least under a template (the time of a rank's
    first action may sit a few steps in). A linear model keeps Z3's fit: any solution of its rows
    will do, and Z3's tend to hold beyond the samples where the smallest, tight ones do not."""
    constant = LAST_CONSTANT if len(bounds) == 1 else (max(8, bounds[0]) if allowed is not None else None)
    if m.nonlinear:
        return ilp.Fit(bounds[0], constant, allowed, nodes=ilp.LAST_NODES if len(bounds) == 1 else ilp.NODES)
    return smt.Fit(bounds[0], constant, allowed)


def _fit_share(deadline, bounds):
    """One fit's share: a small bound that is slow to decide gives way to the next one. Z3's fit
    spends resource units (FIT_UNITS, LAST_FIT_UNITS); the integer program counts its nodes
    instead (ilp.NODES, ilp.LAST_NODES, given where `_fit` makes it)."""
    last = len(bounds) == 1
    return deadline.share(LAST_FIT_UNITS if last else FIT_UNITS,
                          "the timing fit at its last bound" if last else f"the timing fit at bound {bounds[0]}")


def _names(m: Model) -> dict:
    return {x.index: feature_names(m, x) for x in m.stmts}


ONE_SETTING = "the schedule's one setting (it has no parameters)"


def setting_text(params: dict) -> str:
    """A setting as the output shows it: `P=2, M=3` (a schedule without parameters: ONE_SETTING)."""
    return ", ".join(f"{k}={v}" for k, v in params.items()) or ONE_SETTING
