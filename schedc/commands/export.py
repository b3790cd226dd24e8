"""`schedc export`: a schedule in another format, written by its registered writer
(schedc/interop/formats.py: PyTorch CSV, IR JSON)."""
from __future__ import annotations

from ..errors import EXIT_FAIL, EXIT_OK
from . import arguments, common



def add_arguments(q) -> None:
    from ..interop.formats import writable
    arguments.inputs(q)
    q.add_argument("--to", required=True, choices=writable(), help="output format")
    q.add_argument("--level", choices=["compute", "comms"],
                   help="compute, or comms: communication inserted (a schedule that fails its checks is refused); "
                        "default: comms for torch-csv (compute_comms), the program's own level for ir-json")
    q.add_argument("-o", "--output", metavar="FILE", help="output file (default, or `-`: standard output)")
    q.add_argument("--json", action="store_true",
                   help="print one JSON object: the format, the file written (`outputs`) or, without -o, the "
                        "exported text (`text`)")


def run(args, stdout, stderr) -> int:
    from ..interop.formats import FORMATS, Refused, writer
    program = common.load(args.input, args, common.params(args.param))
    level = args.level or FORMATS[args.to].level  # (None: the program's own)
    head = {"file": common.shown(args.input), "schedule": program.name, "params": dict(program.params), "to": args.to,
            "level": level or program.level}
    try:
        text = writer(args.to)(program, level=level)
    except Refused as refused:
        stderr.write(refused.report.render() + "\n")
        stderr.write(f"schedc: {refused.why}\n")
        if args.json:
            report = refused.report
            errors = [d.to_dict() for d in report.findings]
            omitted = {"errors_omitted": report.omitted} if report.omitted else {}
            stdout.write(common.dumps_json({**head, "ok": False, "errors": errors, **omitted, "why": refused.why,
                                            "outputs": []}) + "\n")
        return EXIT_FAIL
    written = common.write_file(args.output, text) if args.output else None
    if written is not None:
        stderr.write(f"wrote {written}\n")
    if args.json:
        shown = {"outputs": [str(written)]} if written is not None else {"outputs": [], "text": text}
        stdout.write(common.dumps_json({**head, "ok": True, "errors": [], **shown}) + "\n")
    elif written is None:
        common.write_data(stdout, text)
    return EXIT_OK
