"""How long `schedc prove` takes on each built-in, and what it concludes.

Run `python bench/prove.py` (`--quick`: gpipe, 1f1b, zb_h1, dualpipev only). For each schedule it
prints the verdict, the memory bound, the seconds, and the ratio to the anchor measured in the same
run: `schedc check` over the same settings the prover's concrete sweep covers (each parameter up
to 8, at most 250 settings), i.e. what a bounded check costs. A ratio near 1 means a proof for every
size costs about what checking the small sizes costs. A schedule that is proved in one run and not
in the next, or that gets much slower, shows up here, not in a timed unit test.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from schedc.api import check, load  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.parse import parse  # noqa: E402
from schedc.prove import prove  # noqa: E402
from schedc.prove.model import domain  # noqa: E402
from schedc.prove.prover import BOUNDED_MAX, BOUNDED_SETTINGS  # noqa: E402
from schedc.prove.search import settings  # noqa: E402
from schedc.resources import builtin_schedules  # noqa: E402

QUICK = ("gpipe", "1f1b", "zb_h1", "dualpipev")


def anchor(name: str) -> tuple[float, int]:
    """Seconds to compile and check every small setting, and how many there were."""
    path = builtin_schedules()[name]
    m = domain(parse(path.read_text(), str(path)))
    began, count = time.perf_counter(), 0
    for params in settings(m, (), BOUNDED_MAX, BOUNDED_SETTINGS):
        try:
            report = check(load(name, params))
        except SchedcError:
            continue
        count += 1
        assert report.ok is True, (name, params)
    return time.perf_counter() - began, count


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="four quick schedules only")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per proof (default: no clock, the budgets)")
    args = ap.parse_args(argv)
    names = QUICK if args.quick else tuple(sorted(builtin_schedules()))
    print(f"{'schedule':<24} {'verdict':<8} {'memory bound':<28} {'prove s':>8} {'check s':>8} {'settings':>8} "
          f"{'ratio':>6}")
    print("-" * 96)
    for name in names:
        began = time.perf_counter()
        p = prove(name, timeout=args.timeout)
        took = time.perf_counter() - began
        base, count = anchor(name)
        print(f"{name:<24} {p.verdict:<8} {p.memory_bound or '-':<28} {took:>8.1f} {base:>8.1f} {count:>8} "
              f"{took / max(base, 1e-9):>6.1f}", flush=True)
    print("ratio: prove's seconds / the seconds `schedc check` takes over the small settings it also sweeps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
