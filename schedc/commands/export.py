"""`schedc export`: a schedule in another format, written by its registered writer
(schedc/interop/formats.py: PyTorch CSV, IR JSON)."""
from __future__ import annotations

from ..errors import EXIT_FAIL, EXIT_OK
from ..outputs import write_data
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
    failing = _unchecked_failure(program, level)
    written = common.write_file(args.output, text) if args.output else None
    if written is not None:
        stderr.write(f"wrote {written}\n")
    if failing is not None:
        stderr.write(f"schedc: warning: {program.name} fails its checks ({_findings(failing)}), exported all the "
                     "same: what fails may not be in the exported file (a memory limit is not in a CSV), so it "
                     "can check ok there (`schedc check` shows why)\n")
    if args.json:
        shown = {"outputs": [str(written)]} if written is not None else {"outputs": [], "text": text}
        checks = {} if failing is None else {"checks": {"ok": False, "errors": failing.error_count,
                                                        "codes": list(dict.fromkeys(d.code for d in failing.errors))}}
        stdout.write(common.dumps_json({**head, "ok": True, "errors": [], **checks, **shown}) + "\n")
    elif written is None:
        write_data(stdout, text)
    return EXIT_OK


def _unchecked_failure(program, level):
    """The report of a schedule that fails its checks, exported where the writer did not check it
    (the compute level, or IR JSON as it is: a format conversion, which goes ahead), else None.
    A compute-level program lowered to the comms level was checked by the writer, and refused."""
    if level == "comms" and program.level == "compute":
        return None
    from ..report import run_checks
    report = run_checks(program)
    return report if report.ok is False else None


def _findings(report) -> str:
    """`2 errors: deadlock, memory`: how many findings, and their codes."""
    codes = ", ".join(dict.fromkeys(d.code for d in report.errors))
    n = report.error_count
    return f"{n} error{'s' if n != 1 else ''}: {codes}"
