"""`schedc check`: one report per input, or a sweep over parameter ranges with its table."""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import EXIT_FAIL, EXIT_INPUT, EXIT_OK, EXIT_UNKNOWN, SchedcError
from ..inputs import integer
from ..options import clock_limit, memory_limit
from ..outputs import check_output, dumps_json
from ..progress import progress
from . import arguments, common, described


_SWEEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(-?[0-9]+)\.\.(-?[0-9]+)")


MAX_SWEEP = 100_000
# A sweep's work, counted in units of about 1 us of CPU time: what one instance costs however small
# (loading, compiling, reporting; under a model and hardware, twice), each of its ranks, and each of
# its actions, ten times as much when the detailed checks run (what the fast checks cannot clear).
MAX_SWEEP_WORK = 12_000_000
SWEEP_INSTANCE, SWEEP_RANK, SWEEP_ACTION, SWEEP_DETAILED = 100, 8, 2, 20


def instance_work(program, setup) -> int:
    """The units an instance is charged before it is checked (as if the fast checks clear it)."""
    return SWEEP_INSTANCE * (1 if setup is None else 2) + SWEEP_RANK * program.num_ranks + \
        SWEEP_ACTION * program.num_actions


def too_much_sweep(n: int, total: int, instance: dict):
    raise SchedcError("too-large", f"the sweep's instances take more than {MAX_SWEEP_WORK:,} units of work in all "
                      f"(reached at instance {n} of {total}, {instance}); sweep fewer or smaller settings "
                      "(see Limits in the docs)", where="--sweep")


class SolverTime:
    """`--timeout`, the solver's seconds for the whole command when the user gives it (by default
    there is no clock: each query's budget of Z3 resource units bounds it): the inputs of one
    `check`, or the instances of a sweep, share it. Only `--engine z3` spends it; the native engine
    has no clock (its work is bounded by the limits)."""

    def __init__(self, args):
        self.seconds, self.on = clock_limit(args.timeout, "--timeout"), args.engine == "z3"
        self.end = None
        if self.seconds is not None:  # (no clock: the solver's module is not imported for one)
            from ..solver import clock
            self.end = clock() + self.seconds

    def left(self) -> float | None:
        """Seconds left for the next check (the whole `--timeout` when no solver runs; None: no clock)."""
        if self.end is None:
            return None
        from ..solver import clock
        return self.end - clock() if self.on else self.seconds



def add_arguments(q) -> None:
    arguments.inputs(q, many=True)
    q.add_argument("--json", action="store_true", help="print one JSON object per input, one per line")
    q.add_argument("--sweep", action="append", default=[], metavar="K=A..B",
                   help="check every value of a parameter in A..B (inclusive; repeatable)")
    q.add_argument("--viz", metavar="OUT.svg|OUT.html|OUT.png",
                   help="also draw the schedule; a failing one with its counterexample (one input)")
    arguments.checking(q)
    arguments.describing(q)


def run(args, stdout, stderr) -> int:  # noqa: C901
    from ..rules.semantics import Semantics
    params = common.params(args.param)
    Semantics.parse(args.semantics)  # a bad value is a usage error before any work
    arguments.timeout_needs_z3(args)
    setup = common.description(args)  # seconds and GiB from a model and hardware description, or None
    limit = memory_limit(args.memory_limit, sized=setup is not None)
    if args.viz and (args.sweep or len(args.inputs) != 1):
        raise SchedcError("usage", "--viz draws one schedule: give one input and no --sweep", where="--viz")
    if args.viz:
        common.picture_suffix(Path(args.viz), dag=False)
        check_output(args.viz)  # before any work: a folder that is a file or not writable, a read-only picture
    common.one_stdin(args.inputs)
    if len(args.inputs) > 1:  # (one input is read strictly: its own error names its parameters)
        common.known_params(args.inputs, args, params)
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
        report = common.run_checks(program, args, setup, timeout=None if left is None else max(0.001, left),
                                    file=name)
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
    first_error: tuple[dict, SchedcError] | None = None
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
            if e.code == "usage":
                raise  # (the command's, not the instance's)
            if e.code == "require":
                results[values] = "-"
                if args.json:
                    stdout.write(dumps_json({"params": instance, "excluded": e.diagnostics[0].message}) + "\n")
                continue
            # the schedule does not compile at this setting (an index out of range, a division by zero):
            # marked, told at the end with the setting, and the sweep goes on
            results[values] = "E"
            worst = common.worse(worst, EXIT_INPUT)
            first_error = first_error or (instance, e)
            if args.json:
                stdout.write(dumps_json({"params": instance, **json.loads(common.input_error_json(e, args.inputs[0]))})
                             + "\n")
            continue
        work += instance_work(program, setup)
        if work > MAX_SWEEP_WORK:
            too_much_sweep(n, total, instance)
        program = _described(program, setup)
        report = common.run_checks(program, args, setup, timeout=left, file=args.inputs[0])
        if report.detailed:  # (the next instance is refused if this one crossed the bound)
            work += (SWEEP_DETAILED - SWEEP_ACTION) * program.num_actions
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
                     "'-' excluded by require" + (", 'E' does not compile" if first_error else "") + ")\n")
        if ran_out is not None:
            stdout.write(ran_out + "\n")
        if first_error is not None:
            stdout.write(f"first setting that does not compile, {first_error[0]}:\n{first_error[1].render()}\n")
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
        head = f"{names[0] + chr(92) + names[1]:<6} " + " ".join(f"{c:>{width}}" for c in cols)
        lines = [head] + [f"{r:<6} " + " ".join(f"{results[(r, c)]:>{width}}" for c in cols) for r in rows]
        return "\n".join(lines)
    return "\n".join(" ".join(f"{n}={v}" for n, v in zip(names, values)) + f"  {mark}"
                     for values, mark in results.items())

