"""`schedc diagnose`: a hung job's Flight Recorder dumps read against its schedule: where each rank
stopped, what it waits for, the wait cycle or the missing operation, at the schedule's lines
(schedc/diagnose/). Exit 0: no hang in the dumps; 1: a hang explained, or dumps that differ from
the schedule; 2: bad input."""
from __future__ import annotations

from ..errors import EXIT_FAIL, EXIT_OK
from ..outputs import dumps_json
from . import arguments, common


def add_arguments(q) -> None:
    from ..interop.formats import readable
    q.add_argument("dumps", nargs="+", metavar="DUMP",
                   help="torch Flight Recorder dumps, one per rank (JSON or pickle; the rank ends the file's "
                        "name, as in TORCH_FR_DUMP_TEMP_FILE's files), or folders of them")
    q.add_argument("--schedule", required=True, metavar="FILE|NAME",
                   help="the schedule the job ran: a .pp file, a PyTorch .csv, a schedc .json or a built-in name")
    q.add_argument("--param", action="append", default=[], metavar="K=V",
                   help="the schedule's parameters, e.g. --param P=4,M=8 (repeatable)")
    q.add_argument("--format", choices=readable(), help="the schedule's format (default: by file extension)")
    arguments.reading(q)
    q.add_argument("--semantics", metavar="BACKEND",
                   help="read the schedule under this semantics (default: the dumps' backend, gloo or nccl)")
    q.add_argument("--json", action="store_true", help="print one JSON object")


def run(args, stdout, stderr) -> int:
    from ..diagnose import diagnose, read_dumps
    from ..rules.semantics import Semantics
    if args.semantics is not None:
        Semantics.parse(args.semantics)
    program = common.load(args.schedule, args, common.params(args.param))
    dumps = read_dumps(args.dumps)
    result = diagnose(dumps, program, semantics=args.semantics)
    if args.json:
        stdout.write(dumps_json(result.to_dict()) + "\n")
    else:
        stdout.write(result.render() + "\n")
    return EXIT_FAIL if result.found else EXIT_OK
