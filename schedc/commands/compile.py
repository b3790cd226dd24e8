"""`schedc compile`: parse, compile, check, and write the IR, the CSV, the program and the timeline.

Each run leaves the folder with this run's outputs only: one it cannot make (too large, a schedule
torch cannot run, one written with --force) is named with why, and an earlier run's file of that
name is removed (or, if it is not compile's to remove, a warning names it)."""
from __future__ import annotations

from pathlib import Path

from ..errors import SchedcError
from ..outputs import check_writable, not_over_inputs, write_replacing
from . import arguments, common

# What compile writes for a schedule, by suffix after its stem, and what each is called in a note.
KINDS = {".json": "IR", ".csv": "PyTorch CSV", "_program.py": "runnable program", ".svg": "picture"}


def add_arguments(q) -> None:
    arguments.inputs(q)
    q.add_argument("-o", "--output", default="build", metavar="DIR", help="output folder (default: build)")
    q.add_argument("--force", action="store_true",
                   help="write outputs even if checks fail (those that can be made; the others are named)")
    q.add_argument("--json", action="store_true",
                   help="print one JSON object: the check's report and the files written (`outputs`)")
    arguments.checking(q)


def run(args, stdout, stderr) -> int:
    from ..columns import held_as_columns
    folder = Path(args.output)
    arguments.timeout_needs_z3(args)
    check_writable(folder)  # before any work: a file in the folder's place, a folder not writable
    program = common.load(args.input, args, common.params(args.param))
    names = output_names(program.name)
    check_writable(folder, names)  # and each output (a read-only one), before the checks
    _not_over_the_input(args.input, folder, names)
    if not program.replicas:  # the steps as integer columns from the start: the checks and every output
        program = held_as_columns(program)  # read them so (millions, at the limits); a job's replicas share theirs
    report = common.run_checks(program, args, file=args.input)
    report = _memory_on_backends(program, args, report)
    if not args.json:
        stdout.write(report.summary() + "\n")
    if report.ok is not True:
        stderr.write(report.render() + "\n")
        if not args.force:
            stderr.write("schedc: checks did not pass; nothing written (use --force to write anyway)\n")
            return _done(args, report, None, {}, stdout)
    files, skipped = _outputs(program, report, stderr)
    done = write_replacing(folder, files, names)
    missing = {str(folder / name): why for name, why in skipped.items()}
    for path, why in done.kept:
        stderr.write(f"schedc: warning: {path} is an earlier run's output, not written this time, and was not "
                     f"removed ({why}): it does not match the files written beside it\n")
    if not args.json:
        _say(done, missing, stdout)
    return _done(args, report, done, missing, stdout)


def _memory_on_backends(program, args, report):
    """The report, with a note when a memory limit applies and the program, verified under a
    semantics of its own, exceeds it when run on a backend (gloo or nccl: a sent message is held
    until its send is waited for, at the step's end; docs/semantics.md, "Memory"). The program
    records the semantics verified under, and its memory was verified under that one only; the
    backend is not known here, so compile writes it and says so (`schedc run` refuses it on that
    backend)."""
    import argparse
    from dataclasses import replace
    from ..outputs import rounded
    from ..rules.semantics import Semantics
    if report.ok is not True or not any(x is not None for x in report.memory_limit):
        return report
    over = {}
    for backend in sorted((str(b) for b in Semantics.backends()), key=lambda b: b != "gloo"):  # gloo first
        if report.semantics.base == Semantics.parse(backend):
            continue
        on = common.run_checks(program, argparse.Namespace(**{**vars(args), "semantics": backend,
                                                              "engine": "native", "timeout": None}))
        if on.memory_violations:
            over[backend] = ", ".join(f"rank {pk.rank} reaches {rounded(pk.memory)} (limit "
                                      f"{rounded(on.memory_limit[pk.rank])})" for pk in on.memory_violations)
    notes = [f"memory is verified under {report.semantics} only: on " + "; on ".join(f"{b} {o}" for b, o in over.items())
             + ", over the memory limit (a backend holds each sent message until its send is waited for, at the "
             f"step's end); `schedc run --backend {'|'.join(over)}` refuses it"] if over else []
    return replace(report, notes=(*report.notes, *notes)) if notes else report


def _not_over_the_input(source: str, folder: Path, names: list[str]) -> None:
    """An output that would replace the input file itself (`compile build/x.csv` writes build/x.csv)
    is refused before any work: the input (a compute-level CSV torchtitan reads, say) would be lost
    (`outputs.not_over_inputs`, every command's rule)."""
    not_over_inputs([(folder / name, kind) for name, kind in zip(names, KINDS.values())], [source],
                    "compile", "choose another output folder with -o")


def output_names(name: str) -> list[str]:
    """The files compile writes for the schedule `name` (in KINDS' order), when it can make each."""
    stem = common.safe_stem(name)
    return [stem + suffix for suffix in KINDS]


def _say(done, missing: dict[str, str], stdout) -> None:
    """The summary's lines about files: written, not written (why: in the notes above), removed."""
    stdout.write("  wrote " + ", ".join(str(p) for p in done.written) + "\n")
    if missing:
        stdout.write("  not written: " + ", ".join(missing) + " (see the notes on standard error)\n")
    for path in done.removed:
        stdout.write(f"  removed the stale {path}: an earlier run's output that this run did not write\n")


def _outputs(program, report, stderr) -> tuple[dict[str, str | bytes], dict[str, str]]:
    """The files to write, by name: the IR, the PyTorch CSV, the program and the timeline (those
    that can be made); and those that cannot, by name, with why (each also a note on `stderr`)."""
    from ..columns import held_as_columns
    from ..interop.ir_json import dumps_ir
    from ..interop.torch_csv import to_torch_csv, torch_cannot_run
    names = output_names(program.name)
    json_name, csv_name, program_name, svg_name = names
    kinds = dict(zip(names, KINDS.values()))
    skipped: dict[str, str] = {}

    def skip(name: str, why: str) -> None:
        stderr.write(f"schedc: no {kinds[name]}: {why}\n")
        skipped[name] = why

    unlowered = _not_lowered(program, report)
    no_csv = unlowered or torch_cannot_run(program)
    program = held_as_columns(program)  # the outputs read its steps as integer columns (millions, at the limits)
    verified = str(report.semantics) if report.ok else None  # (both lowerings are checked again under it)
    outputs: dict[str, str | bytes] = {json_name: dumps_ir(program)}
    if no_csv is not None:
        skip(csv_name, no_csv)
    else:  # (a job of identical replicas: torch runs replica 0's schedule on each)
        # first: its lowering is the peak of memory
        outputs[csv_name] = to_torch_csv(program.replica(0), "comms", verified=verified).dumps()
    if unlowered is not None:
        skip(program_name, unlowered)
    else:
        source = _lowered_source(program, report, verified, lambda why: skip(program_name, why))
        if source is not None:
            outputs[program_name] = source
    try:
        outputs[svg_name] = common.render_picture(program, report, ".svg").data  # a failing one (--force) shows why
    except SchedcError as e:
        if e.code != "too-large":
            raise
        skip(svg_name, e.diagnostics[0].message)
    return {name: outputs[name] for name in names if name in outputs}, skipped


def _not_lowered(program, report) -> str | None:
    """Why a schedule written with --force is not lowered (no CSV, no runnable program), or None:
    communication is inserted only into a compute-level schedule that passes its checks (or that
    could not be decided); a communication-level one is lowered as it is."""
    if program.level == "comms" or report.ok is not False:
        return None
    codes = ", ".join(dict.fromkeys(d.code for d in report.errors)) or "failed"
    return (f"the schedule fails its checks ({codes}), and schedc inserts communication only into a "
            "compute-level schedule that passes them")


def _done(args, report, done, missing: dict[str, str], stdout) -> int:
    """The exit code of the report; with --json, first its one JSON object: `outputs` the files
    written, `not_written` those that could not be made (with why), `removed` an earlier run's
    files removed and `stale` those kept (with why)."""
    if args.json:
        files = {"outputs": [str(p) for p in done.written] if done else [],
                 "not_written": [{"file": path, "why": why} for path, why in missing.items()],
                 "removed": [str(p) for p in done.removed] if done else [],
                 "stale": [{"file": str(p), "why": why} for p, why in done.kept] if done else []}
        stdout.write(common.dumps_json({**report.to_dict(), **files}) + "\n")
    return common.exit_of(report)


def _lowered_source(program, report, verified, skip) -> str | None:
    """The runnable torch.distributed program (`<name>_program.py`); None, with `skip(why)`, if a
    schedule written with --force (or one too large) cannot be lowered. Written with --force, its
    docstring says it is unverified."""
    from ..lower import lower_to_torch
    try:
        return lower_to_torch(program, verified=verified, unverified="force").source
    except SchedcError as e:
        if report.ok and e.code != "too-large":
            raise
        skip(e.diagnostics[0].message)
        return None
