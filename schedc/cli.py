"""The `schedc` command line: argument parsing and wiring only.

`main(argv, stdout, stderr) -> int` so tests drive it with in-memory streams. Exit codes: 0 every
check holds, 1 a check fails, 2 bad input or usage, 4 an internal error (a bug in schedc).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from .errors import EXIT_FAIL, EXIT_INPUT, EXIT_OK, EXIT_UNKNOWN, SchedcError
from .options import memory_limit

EXIT_INTERNAL = 4
_PARAM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(-?\d+)")
_SWEEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(-?\d+)\.\.(-?\d+)")
MAX_SWEEP = 100_000


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as SchedcError instead of exiting."""

    def __init__(self, *args, stdout: TextIO | None = None, **kwargs):
        self._out = stdout
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise SchedcError("usage", f"{message} (see `{self.prog} --help`)")

    def exit(self, status=0, message=None):
        if message:
            self._print_message(message)
        raise _Exit(status)

    def _print_message(self, message, file=None):
        if message:
            (self._out or sys.stdout).write(message)


class _Exit(Exception):
    def __init__(self, status):
        self.status = status


def _parser(stdout: TextIO) -> _Parser:
    p = _Parser(prog="schedc", stdout=stdout,
                description="Compile and verify pipeline-parallel training schedules.")
    p.add_argument("--version", action="version", version=f"schedc {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def common(q, many=False):
        q.add_argument("inputs" if many else "input", nargs="+" if many else None, metavar="FILE|NAME",
                       help="a .pp schedule, a PyTorch .csv, a schedc .json, or a built-in name")
        q.add_argument("--param", action="append", default=[], metavar="K=V",
                       help="set a schedule parameter (repeatable), e.g. --param P=4")
        q.add_argument("--format", choices=["pp", "torch-csv", "ir-json"],
                       help="input format (default: by file extension)")
        q.add_argument("--notation", choices=["current", "legacy"], default="current",
                       help="PyTorch CSV notation: current (B = full backward) or legacy (B = backward-input, "
                            "BW = full backward)")

    def checking(q):
        q.add_argument("--semantics", default="rendezvous", help="rendezvous (default), eager, or bounded:K")
        q.add_argument("--engine", choices=["native", "z3"], default="native",
                       help="deadlock check: the native executor (default) or the Z3 solver")
        q.add_argument("--timeout", type=float, default=30.0, metavar="S", help="solver timeout in seconds")
        q.add_argument("--memory-limit", metavar="N|R=N,...",
                       help="memory limit per rank: one number, or rank=limit pairs, e.g. 0=4,1=3")

    q = sub.add_parser("list", help="built-in schedules and their parameters", stdout=stdout)
    q.add_argument("--json", action="store_true", help="one JSON object per schedule")

    q = sub.add_parser("compile", help="parse, compile and check; write <name>.json and <name>.csv",
                       stdout=stdout)
    common(q)
    q.add_argument("-o", "--output", default="build", metavar="DIR", help="output folder (default: build)")
    q.add_argument("--force", action="store_true", help="write outputs even if checks fail")
    checking(q)

    q = sub.add_parser("check", help="check schedules; one report (or JSON line) per input", stdout=stdout)
    common(q, many=True)
    q.add_argument("--json", action="store_true", help="print one JSON object per input, one per line")
    q.add_argument("--sweep", action="append", default=[], metavar="K=A..B",
                   help="check every value of a parameter in A..B (inclusive; repeatable)")
    q.add_argument("--viz", metavar="OUT.svg|OUT.html|OUT.png",
                   help="also draw the schedule; a failing one with its counterexample (one input)")
    checking(q)

    q = sub.add_parser("export", help="write a schedule in another format", stdout=stdout)
    common(q)
    q.add_argument("--to", required=True, choices=["torch-csv", "ir-json"], help="output format")
    q.add_argument("--level", choices=["compute", "comms"], default="comms",
                   help="torch-csv: compute_only or compute_comms (default)")
    q.add_argument("-o", "--output", metavar="FILE", help="output file (default: standard output)")

    q = sub.add_parser("sim", help="simulate a schedule in time: makespan, bubble, busy time, memory",
                       stdout=stdout)
    common(q)
    q.add_argument("--cost", action="append", default=[], metavar="K=V,...",
                   help="costs for every stage, e.g. F=1,I=1,W=1,B=2 (also act, weight, out, latency, "
                        "bandwidth, overhead); applied after --costs")
    q.add_argument("--costs", metavar="FILE", help="a TOML cost file, or a measured profile (.json)")
    q.add_argument("--no-overlap", action="store_true", help="communication holds the ranks it involves")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.add_argument("--trace", metavar="FILE", help="write a Chrome trace / Perfetto JSON of the timeline")
    q = sub.add_parser("compare", help="rank schedules for one setting by makespan, with bubble and peak memory",
                       stdout=stdout)
    q.add_argument("inputs", nargs="*", metavar="FILE|NAME",
                   help=".pp schedules or built-in names (default: every built-in schedule)")
    q.add_argument("--param", action="append", default=[], metavar="K=V",
                   help="the setting, e.g. --param P=4 --param M=8 --param V=2; each schedule takes the "
                        "parameters it declares")
    q.add_argument("--cost", action="append", default=[], metavar="K=V,...",
                   help="costs of one stage of a one-stage-per-rank split, e.g. F=1,I=1,W=1; applied after --costs")
    q.add_argument("--costs", metavar="FILE", help="a TOML cost file, or a measured profile (.json)")
    q.add_argument("--memory-limit", type=float, metavar="N",
                   help="mark (and rank last) schedules whose peak memory on some rank exceeds N")
    q.add_argument("--no-overlap", action="store_true", help="communication holds the ranks it involves")
    q.add_argument("--json", action="store_true", help="print one JSON object per schedule, best first")

    from .prove.command import add_parser as add_prove
    add_prove(sub, stdout)

    q = sub.add_parser("run", help="verify, lower and run a schedule on local ranks (or print the torchrun line)",
                       stdout=stdout)
    common(q)
    q.add_argument("--model", required=True, metavar="PKG.MOD:FN",
                   help="the model: build_stages(stage_ids, num_stages) in an importable module that also "
                        "defines loss_fn and make_batch, e.g. examples.mlp:build_stages")
    q.add_argument("--nproc", type=int, metavar="R", help="local ranks to start (default: the schedule's ranks)")
    q.add_argument("--backend", choices=["gloo", "nccl"], default="gloo", help="torch.distributed backend")
    q.add_argument("--steps", type=int, default=5, metavar="K", help="training steps (default 5)")
    q.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="watchdog: a send or receive waiting longer stops the run (default 300)")
    q.add_argument("--profile", metavar="OUT.json", help="write measured per-stage F/I/W/B times and message sizes")
    q.add_argument("--no-verify", action="store_true", help="run without checking the schedule first")
    q.add_argument("--semantics", default="rendezvous", help="send semantics to verify under (default rendezvous)")
    q.add_argument("--batch-size", type=int, metavar="N", help="samples per step (default 8 x microbatches)")
    q.add_argument("--dtype", choices=["bfloat16", "float16", "float32", "float64"], help="model and input dtype")
    q.add_argument("--lr", type=float, metavar="LR", help="SGD learning rate unless the model defines make_optimizer")
    q.add_argument("--print-torchrun", action="store_true",
                   help="write DIR/<name>_program.py and print the torchrun command instead of running")
    q.add_argument("-o", "--output", default="build", metavar="DIR", help="with --print-torchrun: output folder")

    q = sub.add_parser("viz", help="draw a schedule: timeline SVG/HTML/PNG, or its dependency graph (--dag)",
                       stdout=stdout, description=(
                           "Draw a schedule. It is checked first and the check summary is printed; a failing "
                           "schedule is drawn with its counterexample. Exits 0 once the picture is written, "
                           "whatever the checks found (the picture is the product); use schedc check, or "
                           "schedc check --viz OUT, for an exit code that fails with the schedule."))
    common(q)
    q.add_argument("-o", "--output", required=True, metavar="OUT.svg|OUT.html|OUT.png",
                   help="the picture; the suffix picks the format (--dag: .svg, .png or .dot)")
    q.add_argument("--dag", action="store_true", help="draw the dependency graph through graphviz instead")
    q.add_argument("--arrows", action="store_true", help="draw every message as an arrow from sender to receiver")
    q.add_argument("--cost", action="append", default=[], metavar="K=V,...",
                   help="costs for every stage, e.g. F=1,I=1,W=1,B=2; applied after --costs")
    q.add_argument("--costs", metavar="FILE", help="a TOML cost file, or a measured profile (.json)")
    checking(q)

    q = sub.add_parser("synth", help="find the fastest schedule for P, M, costs and a memory cap (Z3)",
                       stdout=stdout)
    from .synth.command import add_arguments as synth_arguments
    synth_arguments(q)
    return p


def _version() -> str:
    from . import __version__
    return __version__


def main(argv: list[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        args = _parser(stdout).parse_args(argv if argv is not None else sys.argv[1:])
        if args.command is None:
            _parser(stdout).print_help()
            return EXIT_INPUT
        if args.command == "run":
            return _run(args, stdout, stderr)
        if args.command == "viz":
            return _viz(args, stdout, stderr)
        if args.command == "synth":
            from .synth.command import run as synth
            return synth(args, stdout, stderr, _write_all)
        return {"list": _list, "compile": _compile, "check": _check, "export": _export, "sim": _sim,
                "compare": _compare, "prove": _prove}[args.command](
            args, stdout, stderr)
    except _Exit as e:
        return e.status if isinstance(e.status, int) else EXIT_INPUT
    except SchedcError as e:
        stderr.write(e.render() + "\n")
        return EXIT_INPUT
    except KeyboardInterrupt:
        stderr.write("schedc: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # a bug in schedc: say so briefly, no traceback unless asked
        if os.environ.get("SCHEDC_DEBUG"):
            raise
        stderr.write(f"schedc: internal error: {type(e).__name__}: {e}\n"
                     "  this is a bug in schedc; rerun with SCHEDC_DEBUG=1 for a traceback and report it\n")
        return EXIT_INTERNAL


def entry() -> None:
    sys.exit(main(sys.argv[1:], sys.stdout, sys.stderr))


def _params(pairs: list[str]) -> dict[str, int]:
    out = {}
    for text in pairs:
        m = _PARAM.fullmatch(text.strip())
        if not m:
            raise SchedcError("usage", f"--param {text!r}: expected NAME=INTEGER, e.g. --param P=4",
                              where="--param")
        out[m.group(1)] = int(m.group(2))
    return out


def _load(name: str, args, params=None, strict=True):
    from .api import detect_format, load
    fmt = args.format or detect_format(name)
    return load(name, params if fmt == "pp" else None, fmt=fmt, notation=args.notation, strict_params=strict)


# ---- commands ----
def _list(args, stdout, stderr) -> int:
    from .parse import parse
    from .resources import builtin_schedules
    from .span import span_text
    rows = []
    for name, path in builtin_schedules().items():
        text = path.read_text(encoding="utf-8")
        tree = parse(text, str(path))
        params = {p.name: (span_text(p.default.span) if p.default is not None else None) for p in tree.params}
        about = next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.startswith("#")), "")
        rows.append({"name": name, "params": params, "about": about, "file": str(path)})
    if args.json:
        for row in rows:
            stdout.write(json.dumps(row) + "\n")
        return EXIT_OK
    width = max((len(r["name"]) for r in rows), default=4)
    for row in rows:
        params = " ".join(f"{k}={v}" if v is not None else k for k, v in row["params"].items())
        stdout.write(f"{row['name']:<{width}}  {params:<18} {row['about']}\n")
    return EXIT_OK


def _run_checks(program, args):
    from .api import check
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= 86_400):
        raise SchedcError("usage", f"--timeout {args.timeout}: expected seconds in (0, 86400]", where="--timeout")
    limit = memory_limit(args.memory_limit)
    if isinstance(limit, dict) and any(not 0 <= r < program.num_ranks for r in limit):
        bad = next(r for r in limit if not 0 <= r < program.num_ranks)
        raise SchedcError("usage", f"--memory-limit names rank {bad}, but {program.name} has ranks "
                          f"0..{program.num_ranks - 1}", where="--memory-limit")
    return check(program, semantics=args.semantics, engine=args.engine, timeout=args.timeout, memory_limit=limit)


def _exit_of(report) -> int:
    return {True: EXIT_OK, None: EXIT_UNKNOWN}.get(report.ok, EXIT_FAIL)


def _worse(a: int, b: int) -> int:
    rank = {EXIT_OK: 0, EXIT_UNKNOWN: 1, EXIT_FAIL: 2, EXIT_INPUT: 3}
    return a if rank[a] >= rank[b] else b


def _compile(args, stdout, stderr) -> int:
    from .interop.ir_json import dumps_ir
    from .interop.torch_csv import to_torch_csv
    program = _load(args.input, args, _params(args.param))
    report = _run_checks(program, args)
    stdout.write(report.summary() + "\n")
    if report.ok is not True:
        stderr.write(report.render() + "\n")
        if not args.force:
            stderr.write("schedc: checks did not pass; nothing written (use --force to write anyway)\n")
            return _exit_of(report)
    stem = _safe_stem(program.name)
    outputs = {f"{stem}.json": dumps_ir(program)}
    if program.level == "comms" or report.ok is not False:
        outputs[f"{stem}.csv"] = to_torch_csv(program, "comms").dumps()
        source = _lowered_source(program, report, stderr)
        if source is not None:
            outputs[f"{stem}_program.py"] = source
    outputs[f"{stem}.svg"] = _picture(program, report, ".svg").data  # a failing one (--force) shows why
    written = _write_all(Path(args.output), outputs)
    stdout.write("  wrote " + ", ".join(str(p) for p in written) + "\n")
    return _exit_of(report)


def _lowered_source(program, report, stderr) -> str | None:
    """The runnable torch.distributed program (`<name>_program.py`); None, with a note, if a schedule
    written with --force cannot be lowered."""
    from .lower import lower_to_torch
    try:
        return lower_to_torch(program, verified=str(report.semantics) if report.ok else None).source
    except SchedcError as e:
        if report.ok:
            raise
        stderr.write(f"schedc: no runnable program: {e.diagnostics[0].message}\n")
        return None


_RANK_EXITS = {1: "failed", 2: "could not start (bad usage or model)", 124: "was stopped by the watchdog"}


def _run(args, stdout, stderr) -> int:
    """Verify (unless --no-verify), lower, and run on local ranks, or print the torchrun line."""
    import shlex
    from .lower import lower_to_torch
    from .verify.execute import Semantics
    if args.steps < 1:
        raise SchedcError("usage", f"--steps {args.steps}: expected at least 1", where="--steps")
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= 86_400):
        raise SchedcError("usage", f"--timeout {args.timeout}: expected seconds in (0, 86400]", where="--timeout")
    semantics = Semantics.parse(args.semantics)
    program = _load(args.input, args, _params(args.param))
    nproc = program.num_ranks if args.nproc is None else args.nproc
    if nproc != program.num_ranks:
        raise SchedcError("usage", f"--nproc {nproc}: {program.name} runs on {program.num_ranks} ranks",
                          where="--nproc")
    verified = None
    if not args.no_verify:
        checks = argparse.Namespace(semantics=str(semantics), engine="native", timeout=30.0, memory_limit=None)
        report = _run_checks(program, checks)
        stdout.write(report.summary() + "\n")
        if report.ok is not True:
            stderr.write(report.render() + "\n")
            stderr.write("schedc: checks did not pass; not running (--no-verify runs it anyway)\n")
            return _exit_of(report)
        verified = str(semantics)
    lowered = lower_to_torch(program, verified=verified)
    rank_args = ["--model", args.model, "--steps", str(args.steps), "--timeout", str(args.timeout),
                 "--backend", args.backend]
    for flag, value in (("--batch-size", args.batch_size), ("--dtype", args.dtype), ("--lr", args.lr),
                        ("--profile", os.path.abspath(args.profile) if args.profile else None)):
        if value is not None:
            rank_args += [flag, str(value)]
    name = f"{_safe_stem(program.name)}_program.py"
    if args.print_torchrun:
        (path,) = _write_all(Path(args.output), {name: lowered.source})
        stdout.write(shlex.join(lowered.torchrun_command(str(path), args.model, rank_args[2:])) + "\n")
        return EXIT_OK
    from .runtime.launch import launch
    with tempfile.TemporaryDirectory(prefix="schedc-run-") as folder:
        (path,) = _write_all(Path(folder), {name: lowered.source})
        done = launch([sys.executable, str(path), *rank_args], nproc, stdout=stdout, stderr=stderr,
                      grace=min(args.timeout, 30.0) + 5.0)
    if done.ok:
        return EXIT_OK
    how = [f"rank {r} " + (_RANK_EXITS.get(code, f"exited with {code}") if code >= 0 else
                           f"was stopped (signal {-code})") for r, code in enumerate(done.returncodes) if code != 0]
    stderr.write("schedc: the run failed: " + "; ".join(how) + " (every rank exited)\n")
    # every failing rank rejected its arguments or model: bad input, not a failed run
    return EXIT_INPUT if all(code in (0, 2) for code in done.returncodes) else EXIT_FAIL


def _check(args, stdout, stderr) -> int:
    from .verify.execute import Semantics
    params = _params(args.param)
    Semantics.parse(args.semantics)  # a bad value is a usage error before any work
    memory_limit(args.memory_limit)
    if args.viz and (args.sweep or len(args.inputs) != 1):
        raise SchedcError("usage", "--viz draws one schedule: give one input and no --sweep", where="--viz")
    if args.viz:
        _picture_suffix(Path(args.viz), dag=False)
    if args.sweep:
        return _sweep(args, params, stdout, stderr)
    worst = EXIT_OK
    for name in args.inputs:
        try:
            # one --param list for several schedules: each takes the parameters it declares
            program = _load(name, args, params, strict=len(args.inputs) == 1)
        except SchedcError as e:
            worst = EXIT_INPUT
            stderr.write(e.render() + "\n")
            if args.json:
                stdout.write(json.dumps({"file": name, "ok": False, "input_error": True,
                                         "errors": [d.to_dict() for d in e.diagnostics]}) + "\n")
            continue
        report = _run_checks(program, args)
        worst = _worse(worst, _exit_of(report))
        if args.json:
            stdout.write(json.dumps(report.to_dict()) + "\n")
        else:
            stdout.write(report.summary() + "\n")
            if report.ok is not True:
                stdout.write(report.render() + "\n")
        if args.viz:
            _write_picture(program, report, Path(args.viz), stderr)
    return worst


def _sweep(args, params, stdout, stderr) -> int:
    """Check every combination of the swept parameter ranges; a table, then the first failure."""
    import itertools
    if len(args.inputs) != 1:
        raise SchedcError("usage", "--sweep checks one schedule at a time", where="--sweep")
    ranges = {}
    for text in args.sweep:
        m = _SWEEP.fullmatch(text.strip())
        if not m or int(m.group(2)) > int(m.group(3)):
            raise SchedcError("usage", f"--sweep {text!r}: expected NAME=LOW..HIGH, e.g. --sweep M=1..64",
                              where="--sweep")
        ranges[m.group(1)] = range(int(m.group(2)), int(m.group(3)) + 1)
    total = 1
    for r in ranges.values():
        total *= len(r)
    if total > MAX_SWEEP:
        raise SchedcError("usage", f"the sweep has {total:,} instances; the limit is {MAX_SWEEP:,}", where="--sweep")
    names = list(ranges)
    results: dict[tuple, str] = {}
    first_failure = None
    worst = EXIT_OK
    for n, values in enumerate(itertools.product(*ranges.values()), 1):
        instance = {**params, **dict(zip(names, values))}
        if total >= 500 and not args.json and n % max(1, total // 10) == 0:  # progress on long sweeps
            stderr.write(f"  checked {n}/{total}\n")
        try:
            program = _load(args.inputs[0], args, instance)
        except SchedcError as e:
            if e.code != "require":
                raise
            results[values] = "-"
            if args.json:
                stdout.write(json.dumps({"params": instance, "excluded": e.diagnostics[0].message}) + "\n")
            continue
        report = _run_checks(program, args)
        code = _exit_of(report)
        worst = _worse(worst, code)
        results[values] = {EXIT_OK: ".", EXIT_UNKNOWN: "?"}.get(code, "X")
        if code == EXIT_FAIL and first_failure is None:
            first_failure = report
        if args.json:
            stdout.write(json.dumps(report.to_dict()) + "\n")
    if all(v == "-" for v in results.values()):
        raise SchedcError("usage", "every instance of the sweep is excluded by the schedule's require; "
                          "nothing was checked", where="--sweep")
    if not args.json:
        stdout.write(_sweep_table(names, ranges, results) + "\n")
        held = sum(v == "." for v in results.values())
        stdout.write(f"{held} of {len(results)} instances hold ('.' holds, 'X' fails, '?' unknown, "
                     "'-' excluded by require)\n")
        if first_failure is not None:
            stdout.write(f"first failure, at {dict(first_failure.program.params)}:\n")
            stdout.write(first_failure.summary() + "\n" + first_failure.render() + "\n")
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


def _export(args, stdout, stderr) -> int:
    program = _load(args.input, args, _params(args.param))
    if args.to == "ir-json":
        from .interop.ir_json import dumps_ir
        text = dumps_ir(program)
    else:
        from .api import check
        from .interop.torch_csv import to_torch_csv
        if args.level == "comms" and program.level == "compute":
            report = check(program)
            if not report.ok:  # communication can only be inserted into a sound compute order
                stderr.write(report.render() + "\n")
                stderr.write("schedc: the schedule fails its checks; nothing exported\n")
                return EXIT_FAIL
        table = to_torch_csv(program, args.level)
        if args.level == "comms":
            flat = check(table.to_program(program.name))
            if flat.ok is False:  # groups do not survive the CSV: what torch would run must check too
                stderr.write(flat.render() + "\n")
                stderr.write("schedc: as a PyTorch CSV (which has no groups) the schedule fails its checks; "
                             "nothing exported\n")
                return EXIT_FAIL
        text = table.dumps()
    if args.output:
        written = _write_all(Path(args.output).parent, {Path(args.output).name: text})
        stderr.write(f"wrote {written[0]}\n")
    else:
        stdout.write(text)
    return EXIT_OK


def _sim(args, stdout, stderr) -> int:
    """Simulate one schedule under its costs (overridden by --costs, then --cost)."""
    from .costs import Costs, load_costs, parse_cost_option
    from .interop.chrome_trace import dumps_trace
    from .lint import lint
    from .simulate import simulate
    costs = load_costs(args.costs) if args.costs else Costs("the schedule")
    for text in args.cost:
        costs = costs.then(parse_cost_option(text))
    program = _load(args.input, args, _params(args.param))
    program = costs.apply(program)
    overlap = False if args.no_overlap else costs.overlap is not False

    def fail(diagnostics) -> int:
        stderr.write("\n".join(d.render() for d in diagnostics) + "\n")
        if args.json:
            stdout.write(json.dumps({"file": args.input, "ok": False,
                                     "errors": [d.to_dict() for d in diagnostics]}) + "\n")
        return EXIT_FAIL

    found = lint(program)
    if found:  # times of a schedule that is not sound mean nothing
        return fail(found)
    try:
        timeline = simulate(program, overlap=overlap, links=costs.links(program))
    except SchedcError as e:
        if e.code != "deadlock":
            raise
        return fail(e.diagnostics)
    written = None
    if args.trace:
        written = _write_all(Path(args.trace).parent, {Path(args.trace).name: dumps_trace(timeline)})[0]
    if args.json:
        stdout.write(json.dumps(_sim_dict(args.input, timeline, costs, written)) + "\n")
    else:
        stdout.write(_sim_text(timeline, written) + "\n")
    if timeline.mismatches:
        stderr.write(f"schedc: {timeline.mismatches} message(s) reach a receive that expects another value "
                     "(silent wrong data); `schedc check` names them\n")
        return EXIT_FAIL
    return EXIT_OK


def _prove(args, stdout, stderr) -> int:
    from .prove.command import run
    return run(args, stdout, stderr)


def _compare(args, stdout, stderr) -> int:
    """Rank schedules (default: every built-in) for one setting; exit 1 if none fits the memory limit."""
    from .compare import compare, render
    from .costs import Costs, load_costs, parse_cost_option
    from .resources import builtin_schedules
    names = args.inputs or list(builtin_schedules())
    if args.memory_limit is not None and not (math.isfinite(args.memory_limit) and args.memory_limit >= 0):
        raise SchedcError("usage", f"--memory-limit {args.memory_limit}: expected a non-negative number",
                          where="--memory-limit")
    costs = None
    if args.costs or args.cost:
        costs = load_costs(args.costs) if args.costs else Costs("the schedule")
        for text in args.cost:
            costs = costs.then(parse_cost_option(text))
    overlap = not args.no_overlap and (costs is None or costs.overlap is not False)
    rows = compare(names, _params(args.param), costs=costs, memory_limit=args.memory_limit, overlap=overlap)
    if args.json:
        for row in rows:
            stdout.write(json.dumps(row.to_dict()) + "\n")
    else:
        stdout.write(render(rows) + "\n")
    fitting = [r for r in rows if r.skipped is None and not r.over_limit]
    if not fitting:
        stderr.write("schedc: no schedule runs in this setting" +
                     (f" within memory {args.memory_limit:g}" if args.memory_limit is not None else "") + "\n")
        return EXIT_FAIL
    return EXIT_OK


def _sim_dict(file, timeline, costs, trace) -> dict:
    p = timeline.program
    ann = p.annotations
    stage_costs = [ann.cost_of(s) for s in range(p.num_stages)]
    return {"file": file, "schedule": p.name, "params": dict(p.params), "ranks": p.num_ranks,
            "stages": p.num_stages, "microbatches": p.num_microbatches, "actions": p.num_actions,
            "ok": timeline.mismatches == 0, **timeline.to_dict(),
            "costs": {**{k: [getattr(c, k) for c in stage_costs] for k in ("F", "B", "I", "W")},
                      "speed": [ann.rank_speed[r] if r < len(ann.rank_speed) else 1.0 for r in range(p.num_ranks)],
                      "latency": ann.latency, "bandwidth": ann.bandwidth,
                      "channels": {f"{a}->{b}": {"latency": link.latency, "bandwidth": link.bandwidth,
                                                 **({"overhead": link.overhead} if link.overhead else {})}
                                   for (a, b), link in costs.links(p).items()}},
            "trace": str(trace) if trace else None}


def _sim_text(timeline, trace) -> str:
    def num(x: float) -> str:
        return f"{x:.6g}"
    p = timeline.program
    params = ", ".join(f"{k}={v}" for k, v in p.params)
    lines = [f"{p.name}{f' ({params})' if params else ''}: {p.num_ranks} ranks, {p.num_stages} stages, "
             f"{p.num_microbatches} microbatches, {p.num_actions} actions, {timeline.level} level, "
             f"overlap {'on' if timeline.overlap else 'off'}",
             f"  makespan {num(timeline.makespan)}, bubble ratio {timeline.bubble_ratio:.4f}",
             "  rank        busy        idle  peak memory"]
    for r, (busy, idle, peak) in enumerate(zip(timeline.busy, timeline.idle, timeline.peak_memory)):
        lines.append(f"  {r:>4}  {num(busy):>10}  {num(idle):>10}  {num(peak):>11}")
    if trace:
        lines.append(f"  wrote {trace}")
    return "\n".join(lines)


def _viz(args, stdout, stderr) -> int:
    """Draw one schedule (checked first, so a failing one shows its counterexample). Exit 0 once the
    picture is written, whatever the checks found."""
    _picture_suffix(Path(args.output), args.dag)
    program = _load(args.input, args, _params(args.param))
    overlap, links = True, None
    if args.costs or args.cost:
        from .costs import Costs, load_costs, parse_cost_option
        costs = load_costs(args.costs) if args.costs else Costs("the schedule")
        for text in args.cost:
            costs = costs.then(parse_cost_option(text))
        program = costs.apply(program)
        overlap, links = costs.overlap is not False, costs.links(program)
    report = _run_checks(program, args)
    stdout.write(report.summary() + "\n")
    if report.ok is not True:  # visible, though viz still exits 0
        for d in report.errors:
            stdout.write(f"  error[{d.code}]: {d.message}\n")
        verdict = "fails its checks" if report.ok is False else "could not be decided"
        stdout.write(f"  the schedule {verdict}; the picture shows why (schedc viz exits 0 all the same: "
                     "schedc check gives the exit code)\n")
    _write_picture(program, report, Path(args.output), stderr, dag=args.dag, arrows=args.arrows,
                   overlap=overlap, links=links)
    return EXIT_OK


def _picture_suffix(out: Path, dag: bool) -> None:
    from .viz import check_suffix
    check_suffix(out.suffix, dag)


def _picture(program, report, suffix: str, **options):
    from .viz import render
    return render(program, report, suffix, **options)


def _write_picture(program, report, out: Path, stderr, **options) -> Path:
    """Draw to `out` (its suffix picks the format), atomically; a note if it had to be another format."""
    from .viz.png import write_bytes
    picture = _picture(program, report, out.suffix, **options)
    target = out.with_suffix(picture.suffix) if picture.suffix != out.suffix.lower() else out
    if isinstance(picture.data, bytes):
        written = write_bytes(target, picture.data)
    else:
        (written,) = _write_all(target.parent, {target.name: picture.data})
    if picture.note:
        stderr.write(f"schedc: {picture.note_for(written, out)}\n")
    stderr.write(f"wrote {written}\n")
    return written


def _safe_stem(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.\-]", "_", name).strip(".") or "schedule"
    return stem[:100]


def _write_all(folder: Path, files: dict[str, str]) -> list[Path]:
    """Write every file or none: each goes to a temporary file first, then all are renamed."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SchedcError("io", f"cannot create the output folder: {exc.strerror}", where=str(folder)) from None
    temps: list[tuple[str, Path]] = []
    try:
        for name, text in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            temps.append((tmp, folder / name))
        for tmp, final in temps:
            os.replace(tmp, final)
    except OSError as exc:
        for tmp, _ in temps:
            Path(tmp).unlink(missing_ok=True)
        raise SchedcError("io", f"cannot write the outputs: {exc.strerror}", where=str(folder)) from None
    return [final for _, final in temps]
