"""`schedc compare`: rank schedules for one setting by makespan (schedc/compare.py)."""
from __future__ import annotations

import math

from ..errors import EXIT_FAIL, EXIT_OK, SchedcError
from ..outputs import dumps_json
from . import common


def run(args, stdout, stderr) -> int:
    """Rank schedules (default: every built-in) for one setting; exit 1 if none fits the memory limit."""
    from ..compare import compare, render
    from ..resources import builtin_schedules
    names = args.inputs or list(builtin_schedules())
    if args.memory_limit is not None and not (math.isfinite(args.memory_limit) and args.memory_limit >= 0):
        raise SchedcError("usage", f"--memory-limit {args.memory_limit}: expected a non-negative number",
                          where="--memory-limit")
    costs = common.costs(args)
    overlap = not args.no_overlap and (costs is None or costs.overlap is not False)
    rows = compare(names, common.params(args.param), costs=costs, memory_limit=args.memory_limit, overlap=overlap)
    if args.json:
        for row in rows:
            stdout.write(dumps_json(row.to_dict()) + "\n")
    else:
        stdout.write(render(rows) + "\n")
    fitting = [r for r in rows if r.skipped is None and not r.over_limit]
    if not fitting:
        stderr.write("schedc: no schedule runs in this setting" +
                     (f" within memory {args.memory_limit:g}" if args.memory_limit is not None else "") + "\n")
        return EXIT_FAIL
    return EXIT_OK

