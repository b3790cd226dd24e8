"""`schedc compile`: parse, compile, check, and write the IR, the CSV, the program and the timeline."""
from __future__ import annotations

from pathlib import Path

from ..errors import SchedcError
from . import common


def run(args, stdout, stderr) -> int:
    from ..interop.ir_json import dumps_ir
    from ..interop.torch_csv import to_torch_csv
    from ..ir import torch_cannot_run
    program = common.load(args.input, args, common.params(args.param))
    report = common.run_checks(program, args)
    stdout.write(report.summary() + "\n")
    if report.ok is not True:
        stderr.write(report.render() + "\n")
        if not args.force:
            stderr.write("schedc: checks did not pass; nothing written (use --force to write anyway)\n")
            return common.exit_of(report)
    stem = common.safe_stem(program.name)
    outputs = {f"{stem}.json": dumps_ir(program)}
    no_csv = torch_cannot_run(program)
    if no_csv is not None:
        stderr.write(f"schedc: no PyTorch CSV: {no_csv}\n")
    if program.level == "comms" or report.ok is not False:
        if no_csv is None:  # (a job of identical replicas: torch runs replica 0's schedule on each)
            outputs[f"{stem}.csv"] = to_torch_csv(program.replica(0), "comms").dumps()
        source = _lowered_source(program, report, stderr)
        if source is not None:
            outputs[f"{stem}_program.py"] = source
    outputs[f"{stem}.svg"] = common.render_picture(program, report, ".svg").data  # a failing one (--force) shows why
    written = common.write_files(Path(args.output), outputs)
    stdout.write("  wrote " + ", ".join(str(p) for p in written) + "\n")
    return common.exit_of(report)


def _lowered_source(program, report, stderr) -> str | None:
    """The runnable torch.distributed program (`<name>_program.py`); None, with a note, if a schedule
    written with --force cannot be lowered."""
    from ..lower import lower_to_torch
    try:
        return lower_to_torch(program, verified=str(report.semantics) if report.ok else None).source
    except SchedcError as e:
        if report.ok and e.code != "too-large":
            raise
        stderr.write(f"schedc: no runnable program: {e.diagnostics[0].message}\n")
        return None

