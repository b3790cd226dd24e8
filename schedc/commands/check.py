"""`schedc check`: one report per input, or a sweep over parameter ranges with its table."""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import EXIT_FAIL, EXIT_INPUT, EXIT_OK, EXIT_UNKNOWN, SchedcError
from ..inputs import integer
from ..options import clock_limit, memory_limit
from ..outputs import dumps_json
from ..progress import progress
from . import common, described


_SWEEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(-?\d+)\.\.(-?\d+)")


MAX_SWEEP = 100_000
MAX_SWEEP_ACTIONS = 2_000_000  # the actions of all the instances a sweep checks, together (about 15 s at the slowest)


class SolverTime:
    """`--timeout`, the solver's seconds for the whole command when the user gives it (by default
    there is no clock: each query's budget of Z3 resource units bounds it): the inputs of one
    `check`, or the instances of a sweep, share it. Only `--engine z3` spends it; the native engine
    has no clock (its work is bounded by the limits)."""

    def __init__(self, args):
        from ..solver import clock
        self.seconds, self.on = clock_limit(args.timeout, "--timeout"), args.engine == "z3"
        self.end = None if self.seconds is None else clock() + self.seconds

    def left(self) -> float | None:
        """Seconds left for the next check (the whole `--timeout` when no solver runs; None: no clock)."""
        from ..solver import clock
        if self.end is None:
            return None
        return self.end - clock() if self.on else self.seconds


def run(args, stdout, stderr) -> int:  # noqa: C901
    from ..rules.semantics import Semantics
    params = common.params(args.param)
    Semantics.parse(args.semantics)  # a bad value is a usage error before any work
    setup = common.description(args)  # seconds and GiB from a model and hardware description, or None
    limit = memory_limit(args.memory_limit, sized=setup is not None)
    if args.viz and (args.sweep or len(args.inputs) != 1):
        raise SchedcError("usage", "--viz draws one schedule: give one input and no --sweep", where="--viz")
    if args.viz:
        common.picture_suffix(Path(args.viz), dag=False)
    if args.sweep:
        return _sweep(args, params, stdout, stderr, setup)
    worst = EXIT_OK
    solver_time = SolverTime(args)
    for name in args.inputs:
        try:
            # one --param list for several schedules: each takes the parameters it declares
            program = _described(common.load(name, args, params, strict=len(args.inputs) == 1), setup)
        except SchedcError as e:
            worst = EXIT_INPUT
            stderr.write(e.render() + "\n")
            if args.json:
                stdout.write(common.input_error_json(e, name) + "\n")
            continue
        left = solver_time.left()
        report = common.run_checks(program, args, setup, timeout=None if left is None else max(0.001, left))
        if setup is not None:
            described.explain(report, setup, limit)
        worst = common.worse(worst, common.exit_of(report))
        if args.json:
            extra = described.check_fields(report, setup, limit) if setup is not None else {}
            stdout.write(dumps_json({**report.to_dict(), **extra}) + "\n")
        else:
            stdout.write((described.check_text(report, setup, limit) if setup is not None else report.summary())
                         + "\n")
            if report.ok is not True:
                stdout.write(report.render() + "\n")
        if args.viz:
            units = described.picture_units(setup, program, limit) if setup is not None else None
            common.write_picture(program, report, Path(args.viz), stderr, units=units)
    return worst


def _described(program, setup):
    """The program in seconds and GiB under a description (schedc/costs.py puts them on it)."""
    if setup is None:
        return program
    from ..costs import Costs
    return Costs(setup.source, derived=setup).apply(program)


def _bound(m: re.Match, group: int) -> int:
    """The low (group 2) or high (group 3) end of a `--sweep NAME=LOW..HIGH` range."""
    return integer(m.group(group), f"--sweep {m.group(1)}", where="--sweep")


def _sweep(args, params, stdout, stderr, setup=None) -> int:  # noqa: C901
    """Check every combination of the swept parameter ranges; a table, then the first failure."""
    import itertools
    limit = memory_limit(args.memory_limit, sized=setup is not None)
    if len(args.inputs) != 1:
        raise SchedcError("usage", "--sweep checks one schedule at a time", where="--sweep")
    ranges = {}
    for text in args.sweep:
        m = _SWEEP.fullmatch(text.strip())
        if not m or _bound(m, 2) > _bound(m, 3):
            raise SchedcError("usage", f"--sweep {text!r}: expected NAME=LOW..HIGH, e.g. --sweep M=1..64",
                              where="--sweep")
        ranges[m.group(1)] = range(_bound(m, 2), _bound(m, 3) + 1)
    total = 1
    for r in ranges.values():
        total *= len(r)
    if total > MAX_SWEEP:
        raise SchedcError("usage", f"the sweep has {total:,} instances; the limit is {MAX_SWEEP:,}", where="--sweep")
    names = list(ranges)
    results: dict[tuple, str] = {}
    first_failure = None
    worst = EXIT_OK
    say = progress(stderr, quiet=args.json or total < 500)  # long sweeps only
    work = 0
    solver_time, ran_out = SolverTime(args), None
    for n, values in enumerate(itertools.product(*ranges.values()), 1):
        instance = {**params, **dict(zip(names, values))}
        if n % max(1, total // 10) == 0:
            say(f"  checked {n}/{total}")
        left = solver_time.left()
        if ran_out is not None or (left is not None and left <= 0):
            ran_out = ran_out or (f"time limit: the sweep's --timeout of {args.timeout:g} s ran out before "
                                  f"instance {n} of {total}; it and the rest are unknown")
            results[values] = "?"
            worst = common.worse(worst, EXIT_UNKNOWN)
            if args.json:
                stdout.write(dumps_json({"params": instance, "ok": None, "unknown": ran_out}) + "\n")
            continue
        try:
            program = common.load(args.inputs[0], args, instance)
        except SchedcError as e:
            if e.code != "require":
                raise
            results[values] = "-"
            if args.json:
                stdout.write(dumps_json({"params": instance, "excluded": e.diagnostics[0].message}) + "\n")
            continue
        work += program.num_actions
        if work > MAX_SWEEP_ACTIONS:
            raise SchedcError("too-large", f"the sweep's instances hold more than {MAX_SWEEP_ACTIONS:,} actions in "
                              f"all (reached at instance {n} of {total}, {instance}); sweep fewer or smaller "
                              "settings", where="--sweep")
        program = _described(program, setup)
        report = common.run_checks(program, args, setup, timeout=left)
        if setup is not None:
            described.explain(report, setup, limit)
        code = common.exit_of(report)
        worst = common.worse(worst, code)
        results[values] = {EXIT_OK: ".", EXIT_UNKNOWN: "?"}.get(code, "X")
        if code == EXIT_FAIL and first_failure is None:
            first_failure = report
        if args.json:
            extra = described.check_fields(report, setup, limit) if setup is not None else {}
            stdout.write(dumps_json({**report.to_dict(), **extra}) + "\n")
    if all(v == "-" for v in results.values()):
        raise SchedcError("usage", "every instance of the sweep is excluded by the schedule's require; "
                          "nothing was checked", where="--sweep")
    if not args.json:
        stdout.write(_sweep_table(names, ranges, results) + "\n")
        held = sum(v == "." for v in results.values())
        stdout.write(f"{held} of {len(results)} instances hold ('.' holds, 'X' fails, '?' unknown, "
                     "'-' excluded by require)\n")
        if ran_out is not None:
            stdout.write(ran_out + "\n")
        if first_failure is not None:
            stdout.write(f"first failure, at {dict(first_failure.program.params)}:\n")
            summary = (described.check_text(first_failure, setup, limit) if setup is not None
                       else first_failure.summary())
            stdout.write(summary + "\n" + first_failure.render() + "\n")
    return worst


def _sweep_table(names, ranges, results) -> str:
    if len(names) == 2:
        rows, cols = ranges[names[0]], ranges[names[1]]
        width = max(len(str(c)) for c in cols)
        head = f"{names[0]}\\{names[1]:<3} " + " ".join(f"{c:>{width}}" for c in cols)
        lines = [head] + [f"{r:<6} " + " ".join(f"{results[(r, c)]:>{width}}" for c in cols) for r in rows]
        return "\n".join(lines)
    return "\n".join(" ".join(f"{n}={v}" for n, v in zip(names, values)) + f"  {mark}"
                     for values, mark in results.items())

