"""`schedc synth`: read the options, run the search, print the result and write the `.pp` file.

Exit codes as the rest of the CLI: 0 a schedule was found (optimal or not, as it says), 1 no
schedule fits the memory limit (with the reason), 2 bad input. (3, no schedule within the time
limit, does not arise: the start always gives one, and the search only improves on it.)
"""
from __future__ import annotations

import shlex
import time
from pathlib import Path

from ..errors import EXIT_FAIL, EXIT_OK, SchedcError
from .. import options
from ..options import memory_limit
from ..outputs import dumps_json
from ..progress import progress
from ..solver import ctrl_c

QUIET_S = 1.0  # progress lines start once a search has run this long


def add_arguments(q) -> None:
    q.add_argument("--param", action="append", default=[], metavar="K=V",
                   help="P (ranks) and M (microbatches), e.g. --param P=4,M=8 (or --param P=4 --param M=8)")
    q.add_argument("--cost", action="append", default=[], metavar="K=V,...",
                   help="costs for every stage, e.g. F=1,I=1,W=1 (also act, weight, latency); after --costs")
    q.add_argument("--costs", metavar="FILE", help="a TOML cost file, or a measured profile (.json)")
    q.add_argument("--memory-limit", metavar="N|R=N,...", help="activation memory cap per rank")
    q.add_argument("--placement", choices=["loop", "vshape"], default="loop",
                   help="loop: stage r on rank r (default); vshape: 2P stages, down the ranks and back")
    from .search import SEARCH_UNITS
    options.solver_limits(q, "the search's", SEARCH_UNITS, "--time-limit", "stop searching")
    q.add_argument("--repeat", action="store_true",
                   help="write each rank's steady state as a loop: one schedule for every M from the "
                        "smallest that checks clean (schedc prove can prove it for all of them)")
    q.add_argument("-o", "--output", metavar="OUT.pp", help="write the schedule here")
    q.add_argument("--json", action="store_true", help="print one JSON object")


def run(args, stdout, stderr, write_all) -> int:
    """`write_all(folder, {name: text})` writes atomically (the CLI's)."""
    from ..costs import Costs
    from .emit import to_pp
    from .problem import build_problem
    from .search import Infeasible, synthesize
    options.clock_limit(args.time_limit, "--time-limit")
    options.units(args.budget, "--budget")
    params = _params(args.param)
    costs = options.costs(args.costs, args.cost, "the defaults") or Costs("the defaults")
    problem = build_problem(params["P"], params["M"], placement=args.placement, costs=costs,
                            memory_limit=memory_limit(args.memory_limit))
    began, say = time.monotonic(), progress(stderr, quiet=args.json, prefix="schedc synth: ")

    def report(text: str) -> None:
        if time.monotonic() - began >= QUIET_S:
            say(text)

    with ctrl_c():
        outcome = synthesize(problem, time_limit_s=args.time_limit, budget=args.budget, progress=report)
    if isinstance(outcome, Infeasible):
        stderr.write(f"error[infeasible]: no schedule: {outcome.reason}\n")
        if args.json:
            stdout.write(dumps_json({**_head(problem), "status": "infeasible", "ok": False, "errors": [
                {"code": "infeasible", "message": f"no schedule: {outcome.reason}"}], "reason": outcome.reason}) + "\n")
        return EXIT_FAIL
    command = "schedc synth " + shlex.join(_shown_argv(args))
    text, repeat = to_pp(outcome, command), None
    if args.repeat:
        from .repeat import for_every_m
        repeat = for_every_m(outcome, command)
        if isinstance(repeat, str):
            stderr.write(f"schedc synth: warning: no loop form, writing the list for M={problem.M}: {repeat}\n")
        else:
            text = repeat.text
    written = None
    if args.output:
        out = Path(args.output)
        written = write_all(out.parent, {out.name: text})[0]
    if args.json:
        stdout.write(dumps_json({**_json(outcome, written), **_repeat_json(repeat, args.repeat)}) + "\n")
    else:
        stdout.write(_text(outcome, written, repeat) + "\n")
    return EXIT_OK


def _repeat_json(repeat, asked: bool) -> dict:
    if not asked:
        return {}
    if isinstance(repeat, str):
        return {"repeat": {"ok": False, "reason": repeat}}
    return {"repeat": {"ok": True, "min_M": repeat.low, "modulus": repeat.modulus, "checked": list(repeat.checked)}}


def _head(problem) -> dict:
    ann = problem.program.annotations
    return {"schedule": problem.program.name, "params": {"P": problem.P, "M": problem.M},
            "placement": problem.placement, "ranks": problem.P, "stages": problem.S, "microbatches": problem.M,
            "costs": {k: [getattr(ann.cost_of(s), k) for s in range(problem.S)] for k in ("F", "I", "W")}
            | {"act": [ann.memory_of(s).act for s in range(problem.S)],
               "weight": [ann.memory_of(s).weight for s in range(problem.S)],
               "speed": list(ann.speeds(problem.P)),
               "latency": _latency(problem)},
            "memory_limit": list(problem.cap_given)}


def _latency(problem):
    """One number when every channel has the same latency, else {"A->B": latency}."""
    values = set(problem.latency.values())
    if len(values) <= 1:
        return problem.seconds(values.pop()) if values else 0.0
    return {f"{a}->{b}": problem.seconds(v) for (a, b), v in sorted(problem.latency.items())}


def _json(outcome, written) -> dict:
    p, best = outcome.problem, outcome.best
    return {**_head(p), "status": "optimal" if outcome.optimal else "feasible", "ok": True, "errors": [],
            "optimal": outcome.optimal, "makespan": best.makespan, "lower_bound": outcome.lower_bound,
            "gap": outcome.gap, "stopped": outcome.stopped, "solve_time": round(outcome.elapsed, 3),
            "start": {"origin": outcome.start.origin, "makespan": outcome.start.makespan},
            "found_by": best.origin,
            "queries": [{"makespan_at_most": p.seconds(q.T), "answer": q.answer, "seconds": round(q.seconds, 3)}
                        for q in outcome.queries],
            "peak_memory": [float(x * p.memory_unit) for x in best.peaks],
            "order": [[str(a) for a in row] for row in best.program(p).ranks],
            "output": str(written) if written else None}


def _text(outcome, written, repeat=None) -> str:
    from ..ir import count_of
    from .emit import describe_costs, number, why_stopped
    p, best = outcome.problem, outcome.best
    caps = {c for c in p.cap_given}
    cap = ("none" if caps == {None} else f"{number(caps.pop())} per rank" if len(caps) == 1 else
           "[" + ", ".join("none" if c is None else number(c) for c in p.cap_given) + "]")
    verdict = "optimal" if outcome.optimal else f"not proven optimal ({why_stopped(outcome)})"
    lines = [f"{p.program.name}: P={p.P}, M={p.M}, placement {p.placement}, {count_of(p.S, 'stage')}; memory limit {cap}",
             *(f"  costs {line}" for line in describe_costs(p)),
             f"  makespan {number(best.makespan)}, lower bound {number(outcome.lower_bound)}, gap "
             f"{outcome.gap:.1%}: {verdict}",
             f"  start: {outcome.start.origin} (makespan {number(outcome.start.makespan)}); found by "
             f"{best.origin}; {len(outcome.queries)} solver quer{'y' if len(outcome.queries) == 1 else 'ies'} "
             f"in {outcome.elapsed:.1f} s",
             "  peak activations per rank: [" + ", ".join(number(x * float(p.memory_unit)) for x in best.peaks) + "]"]
    lines += [f"  rank {r}: " + " ".join(str(a) for a in row) for r, row in enumerate(best.program(p).ranks)]
    if repeat is not None and not isinstance(repeat, str):
        lines.append(f"  loop form: {repeat.every} (checked clean at {repeat.checked[0]}.."
                     f"{repeat.checked[-1]}; for every M: `schedc prove`)")
    if written:
        lines.append(f"  wrote {written}")
    return "\n".join(lines)


def _params(pairs) -> dict[str, int]:
    out = options.params(pairs)
    for name in out:
        if name not in ("P", "M"):
            raise SchedcError("unknown-param", f"--param {name}: synth takes P (ranks) and M "
                              "(microbatches)", where="--param")
    missing = [k for k in ("P", "M") if k not in out]
    if missing:
        raise SchedcError("missing-param", "synth needs " + " and ".join(f"--param {k}=..." for k in missing),
                          where="--param")
    return out


def _shown_argv(args) -> list[str]:
    out = [x for p in args.param for x in ("--param", p)] + (["--costs", args.costs] if args.costs else [])
    out += [x for c in args.cost for x in ("--cost", c)]
    for flag, value in (("--memory-limit", args.memory_limit),
                        ("--placement", None if args.placement == "loop" else args.placement),
                        ("--budget", None if args.budget is None else str(args.budget))):
        if value:
            out += [flag, value]
    return out + (["--repeat"] if args.repeat else [])
