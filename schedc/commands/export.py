"""`schedc export`: a schedule in another format, written by its registered writer
(schedc/interop/formats.py: PyTorch CSV, IR JSON)."""
from __future__ import annotations

from ..errors import EXIT_FAIL, EXIT_OK
from . import arguments, common



def add_arguments(q) -> None:
    from ..interop.formats import writable
    arguments.inputs(q)
    q.add_argument("--to", required=True, choices=writable(), help="output format")
    q.add_argument("--level", choices=["compute", "comms"], default="comms",
                   help="torch-csv: compute_only or compute_comms (default)")
    q.add_argument("-o", "--output", metavar="FILE", help="output file (default: standard output)")


def run(args, stdout, stderr) -> int:
    from ..interop.formats import Refused, writer
    program = common.load(args.input, args, common.params(args.param))
    try:
        text = writer(args.to)(program, level=args.level)
    except Refused as refused:
        stderr.write(refused.report.render() + "\n")
        stderr.write(f"schedc: {refused.why}\n")
        return EXIT_FAIL
    if args.output:
        written = common.write_file(args.output, text)
        stderr.write(f"wrote {written}\n")
    else:
        stdout.write(text)
    return EXIT_OK
