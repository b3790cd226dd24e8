"""`schedc compare`: rank schedules for one setting by makespan (schedc/compare.py)."""
from __future__ import annotations

from ..errors import EXIT_FAIL, EXIT_OK, SchedcError
from ..options import memory_limit
from ..outputs import dumps_json
from . import arguments, common



def add_arguments(q) -> None:
    from ..interop.formats import readable
    from ..ir import PLACEMENTS
    q.add_argument("inputs", nargs="*", metavar="FILE|NAME",
                   help=".pp schedules, PyTorch .csv files, schedc .json files or built-in names, mixed "
                        "(default: every built-in schedule; - reads standard input)")
    q.add_argument("--param", action="append", default=[], metavar="K=V",
                   help="the setting, e.g. --param P=4,M=8,V=2 (repeatable; each name once); each schedule "
                        "takes the parameters it declares, a PyTorch CSV P and M as what it states")
    q.add_argument("--format", choices=readable(), help="input format (default: by file extension; .pp for -)")
    q.add_argument("--notation", choices=["current", "legacy"], default="current",
                   help="PyTorch CSV notation (see schedc check --help)")
    q.add_argument("--placement", choices=PLACEMENTS, help="a PyTorch CSV's placement: loop or vshape")
    q.add_argument("--forward-only", action="store_true",
                   help="the schedules run forwards alone (inference): no backward is expected")
    q.add_argument("--semantics", help="check and time under this send semantics (default rendezvous; "
                                       "see schedc check --help)")
    arguments.costs(q, "costs for every stage of every schedule, as written (not divided by V), e.g. "
                       "F=1,I=1,W=1; applied after --costs")
    q.add_argument("--memory-limit", metavar="N",
                   help="mark (and rank last) schedules whose peak memory on some rank exceeds N (with a "
                        "description: GiB, or a size such as 80GiB; default the accelerator's memory)")
    q.add_argument("--no-overlap", action="store_true", help="communication holds the ranks it involves")
    q.add_argument("--json", action="store_true", help="print one JSON object per schedule, best first")
    arguments.describing(q)


def run(args, stdout, stderr) -> int:
    """Rank schedules (default: every built-in) for one setting; exit 1 if none fits the memory limit."""
    from ..compare import compare, render
    from ..resources import builtin_schedules
    from ..rules.semantics import Semantics
    names = args.inputs or list(builtin_schedules())
    common.one_stdin(names)
    params = common.params(args.param)
    common.known_params(names, args, params)  # a name no schedule takes: an error, before any work
    semantics = Semantics.parse(args.semantics) if args.semantics else None  # a bad value: usage, before any work
    if semantics is not None and semantics.modifiers:
        raise SchedcError("usage", f"{semantics}: compare times schedules; what +{' and +'.join(semantics.modifiers)} "
                          f"adds is checked (`schedc check`), not timed: compare under {semantics.base}",
                          where="--semantics")
    setup = common.description(args)  # seconds and GiB from a model and hardware description, or None
    limit = memory_limit(args.memory_limit, sized=setup is not None)
    if isinstance(limit, dict):
        raise SchedcError("usage", f"--memory-limit {args.memory_limit!r}: compare takes one limit for every rank, "
                          "e.g. 8 (or 80GiB with a model and hardware description)", where="--memory-limit")
    if setup is not None and limit is None:
        limit = setup.memory  # the accelerator's
    costs = common.costs(args, setup)
    overlap = not args.no_overlap and (costs is None or costs.overlap is not False)
    rows = compare(names, params, costs=costs, memory_limit=limit, overlap=overlap,
                   semantics=semantics, load=lambda name, values: common.load(name, args, values, strict=False))
    if args.json:
        for row in rows:
            stdout.write(dumps_json(row.to_dict()) + "\n")
    else:
        stdout.write(render(rows, limit) + "\n")
    fitting = [r for r in rows if r.skipped is None and not r.over_limit]
    if not fitting:
        within = f" within memory {limit:.4g}{' GiB' if setup is not None else ''}" if limit is not None else ""
        stderr.write(f"schedc: no schedule runs in this setting{within}\n")
        return EXIT_FAIL
    return EXIT_OK

