"""`schedc export`: a schedule in another format (PyTorch CSV, IR JSON)."""
from __future__ import annotations

from ..errors import EXIT_FAIL, EXIT_OK, SchedcError
from . import common


def run(args, stdout, stderr) -> int:
    program = common.load(args.input, args, common.params(args.param))
    if args.to == "ir-json":
        from ..interop.ir_json import dumps_ir
        text = dumps_ir(program)
    else:
        from ..api import check
        from ..columns import held_as_columns
        from ..interop.torch_csv import to_torch_csv, torch_cannot_run
        why = torch_cannot_run(program)
        if why is not None:
            raise SchedcError("usage", why + ": export it as IR JSON (--to ir-json)", where="--to torch-csv")
        program = program.replica(0)  # (a job of identical replicas: torch runs this on each)
        if args.level == "comms" and program.level == "compute":
            report = check(program)
            if not report.ok:  # communication can only be inserted into a sound compute order
                stderr.write(report.render() + "\n")
                stderr.write("schedc: the schedule fails its checks; nothing exported\n")
                return EXIT_FAIL
        table = to_torch_csv(held_as_columns(program), args.level)  # (lowered and written from integer columns)
        if args.level == "comms" and table.flattened:
            flat = check(table.to_program(program.name))
            if flat.ok is False:  # groups do not survive the CSV: what torch would run must check too
                stderr.write(flat.render() + "\n")
                stderr.write("schedc: as a PyTorch CSV (which has no groups) the schedule fails its checks; "
                             "nothing exported\n")
                return EXIT_FAIL
        text = table.dumps()
    if args.output:
        written = common.write_file(args.output, text)
        stderr.write(f"wrote {written}\n")
    else:
        stdout.write(text)
    return EXIT_OK

