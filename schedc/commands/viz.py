"""`schedc viz`: draw one schedule, checked first so a failing one shows why."""
from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_OK, SchedcError
from ..outputs import check_output
from . import arguments, common, described



def add_arguments(q) -> None:
    q.description = ("Draw a schedule. It is checked first and the check summary is printed; a failing "
                     "schedule is drawn with its counterexample. Exits 0 once the picture is written, "
                     "whatever the checks found (the picture is the product); use schedc check, or "
                     "schedc check --viz OUT, for an exit code that fails with the schedule.")
    arguments.inputs(q)
    q.add_argument("-o", "--output", required=True, metavar="OUT.svg|OUT.html|OUT.png",
                   help="the picture; the suffix picks the format (--dag: .svg, .png or .dot)")
    q.add_argument("--dag", action="store_true", help="draw the dependency graph through graphviz instead")
    q.add_argument("--arrows", action="store_true", help="draw every message as an arrow from sender to receiver")
    q.add_argument("--json", action="store_true",
                   help="print one JSON object: the check's report and the picture written (`outputs`)")
    arguments.costs(q, "costs for every stage, e.g. F=1,I=1,W=1,B=2; applied after --costs")
    arguments.checking(q)
    arguments.describing(q)


def run(args, stdout, stderr) -> int:
    """Draw one schedule (checked first, so a failing one shows its counterexample). Exit 0 once the
    picture is written, whatever the checks found."""
    from ..columns import held_as_columns
    if args.dag and args.arrows:
        raise SchedcError("usage", "--arrows draws messages on the timeline; the dependency graph (--dag) draws "
                          "each message as an edge already: give one of them", where="--arrows")
    arguments.timeout_needs_z3(args)
    common.picture_suffix(Path(args.output), args.dag)
    check_output(args.output)  # before any work: a folder that is a file or not writable, a read-only picture
    program = common.load(args.input, args, common.params(args.param))
    overlap, links, units = True, None, None
    setup = common.description(args)  # seconds and GiB from a model and hardware description, or None
    costs = common.costs(args, setup)
    if costs is not None:
        program = costs.apply(program)
        overlap, links = costs.overlap is not False, costs.links(program)
    report = common.run_checks(program, args, setup, file=args.input)
    limit = common.memory_limit(args.memory_limit, sized=True) if setup is not None else None
    if setup is not None:
        described.explain(report, setup, limit)
        units = described.picture_units(setup, program, limit)
    if not args.json:
        _say(report, setup, limit, stdout)
    program = held_as_columns(program)  # drawn from integer columns (millions of steps, at the limits)
    written = common.write_picture(program, report, Path(args.output), stderr, dag=args.dag, arrows=args.arrows,
                                   overlap=overlap, links=links, units=units)
    if args.json:
        extra = described.check_fields(report, setup, limit) if setup is not None else {}
        stdout.write(common.dumps_json({**report.to_dict(), **extra, "outputs": [str(written)]}) + "\n")
    return EXIT_OK


def _say(report, setup, limit, stdout) -> None:
    """The check's summary (in seconds and GiB under a description) and, for a failing schedule, why."""
    if setup is not None:
        stdout.write(described.check_text(report, setup, limit) + "\n")
    else:
        stdout.write(report.summary() + "\n")
    if report.ok is not True:  # visible, though viz still exits 0
        for d in report.errors:
            stdout.write(f"  error[{d.code}]: {d.message}\n")
        verdict = "fails its checks" if report.ok is False else "could not be decided"
        stdout.write(f"  the schedule {verdict}; the picture shows why (schedc viz exits 0 all the same: "
                     "schedc check gives the exit code)\n")

