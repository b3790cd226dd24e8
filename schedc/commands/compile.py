"""`schedc compile`: parse, compile, check, and write the IR, the CSV, the program and the timeline."""
from __future__ import annotations

from pathlib import Path

from ..errors import SchedcError
from . import arguments, common



def add_arguments(q) -> None:
    arguments.inputs(q)
    q.add_argument("-o", "--output", default="build", metavar="DIR", help="output folder (default: build)")
    q.add_argument("--force", action="store_true", help="write outputs even if checks fail")
    q.add_argument("--json", action="store_true",
                   help="print one JSON object: the check's report and the files written (`outputs`)")
    arguments.checking(q)


def run(args, stdout, stderr) -> int:
    from ..columns import held_as_columns
    program = common.load(args.input, args, common.params(args.param))
    if not program.replicas:  # the steps as integer columns from the start: the checks and every output
        program = held_as_columns(program)  # read them so (millions, at the limits); a job's replicas share theirs
    report = common.run_checks(program, args)
    if not args.json:
        stdout.write(report.summary() + "\n")
    if report.ok is not True:
        stderr.write(report.render() + "\n")
        if not args.force:
            stderr.write("schedc: checks did not pass; nothing written (use --force to write anyway)\n")
            return _done(args, report, [], stdout)
    written = common.write_files(Path(args.output), _outputs(program, report, stderr))
    if not args.json:
        stdout.write("  wrote " + ", ".join(str(p) for p in written) + "\n")
    return _done(args, report, written, stdout)


def _outputs(program, report, stderr) -> dict[str, str]:
    """The files to write, by name: the IR, the PyTorch CSV, the program and the timeline (those
    that can be made, with a note for each that cannot)."""
    from ..columns import held_as_columns
    from ..interop.ir_json import dumps_ir
    from ..interop.torch_csv import to_torch_csv, torch_cannot_run
    stem = common.safe_stem(program.name)
    no_csv = torch_cannot_run(program)
    if no_csv is not None:
        stderr.write(f"schedc: no PyTorch CSV: {no_csv}\n")
    program = held_as_columns(program)  # the outputs read its steps as integer columns (millions, at the limits)
    can_lower = program.level == "comms" or report.ok is not False  # (not a compute-level one that fails)
    verified = str(report.semantics) if report.ok else None  # (both lowerings are checked again under it)
    csv = None
    if can_lower and no_csv is None:  # (a job of identical replicas: torch runs replica 0's schedule on each)
        # first: its lowering is the peak of memory
        csv = to_torch_csv(program.replica(0), "comms", verified=verified).dumps()
    outputs = {f"{stem}.json": dumps_ir(program)}
    if csv is not None:
        outputs[f"{stem}.csv"] = csv
    if can_lower:
        source = _lowered_source(program, report, verified, stderr)
        if source is not None:
            outputs[f"{stem}_program.py"] = source
    try:
        outputs[f"{stem}.svg"] = common.render_picture(program, report, ".svg").data  # a failing one (--force) shows why
    except SchedcError as e:
        if e.code != "too-large":
            raise
        stderr.write(f"schedc: no picture: {e.diagnostics[0].message}\n")
    return outputs


def _done(args, report, written, stdout) -> int:
    """The exit code of the report; with --json, first its one JSON object, `outputs` the files written."""
    if args.json:
        stdout.write(common.dumps_json({**report.to_dict(), "outputs": [str(p) for p in written]}) + "\n")
    return common.exit_of(report)


def _lowered_source(program, report, verified, stderr) -> str | None:
    """The runnable torch.distributed program (`<name>_program.py`); None, with a note, if a schedule
    written with --force cannot be lowered."""
    from ..lower import lower_to_torch
    try:
        return lower_to_torch(program, verified=verified).source
    except SchedcError as e:
        if report.ok and e.code != "too-large":
            raise
        stderr.write(f"schedc: no runnable program: {e.diagnostics[0].message}\n")
        return None

