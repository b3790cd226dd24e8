"""Synthesised schedules against the built-in ones at the same memory cap.

Run `python bench/synth.py` (`--quick`: the P=4, M=8 rows only). For each setting and cap
(P, 1.5P and 2P-1 activations per rank) it runs `schedc synth`'s search and simulates ZB-H1,
ZB-H2 and 1F1B under the same costs; a built-in whose peak memory is over the cap is marked `*`
(it does not qualify). Then it says whether each target is met, and why not if not:
  1. P=4, M=8, t_F = t_I = t_W = 1: provably optimal (gap 0) within 60 s;
  2. P=8, M=16, same costs: at least as good as ZB-H1 at the same memory within 120 s;
  3. a last stage twice as slow: strictly better than every built-in that fits the cap.
Rows marked `extra` have no target: caps below P, where no built-in fits, and a latency of 1 per
message, where ZB-H1's fixed order is no longer the best; `start` is the makespan of the schedule
the search started from (greedy or built-in), so `start - synth` is what the solver added.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from schedc.api import load  # noqa: E402
from schedc.costs import Costs, parse_cost_option, toml_costs  # noqa: E402
from schedc.simulate import simulate  # noqa: E402
from schedc.synth.problem import build_problem  # noqa: E402
from schedc.synth.search import Infeasible, synthesize  # noqa: E402

BUILTINS = ("zb_h1", "zb_h2", "1f1b")


def unit_costs(P: int) -> Costs:
    return parse_cost_option("F=1,I=1,W=1")


def slow_last(P: int) -> Costs:
    return toml_costs(f"F = 1\nI = 1\nW = 1\n[stage.{P - 1}]\nF = 2\nI = 2\nW = 2\n", "last stage twice as slow")


def latency_1(P: int) -> Costs:
    return parse_cost_option("F=1,I=1,W=1,latency=1")


def caps(P: int) -> list[float]:
    return [P, 1.5 * P, 2 * P - 1]


def small_caps(P: int) -> list[float]:
    return [P // 2, P - 1]


# (label, P, M, costs, caps, time limit, target)
SETTINGS = [
    ("unit", 4, 8, unit_costs, caps, 60.0, "optimal"),
    ("unit", 8, 16, unit_costs, caps, 120.0, "zb_h1"),
    ("last 2x", 4, 8, slow_last, caps, 60.0, "beat"),
    ("last 2x", 8, 16, slow_last, caps, 120.0, "beat"),
    ("unit", 4, 8, unit_costs, small_caps, 60.0, "extra"),
    ("unit", 8, 16, unit_costs, small_caps, 120.0, "extra"),
    ("lat 1", 4, 8, latency_1, caps, 60.0, "extra"),
    ("lat 1", 8, 16, latency_1, caps, 120.0, "extra"),
]


def builtin(name: str, P: int, M: int, costs: Costs) -> tuple[float, float]:
    """(makespan, peak activations) of a built-in under the costs."""
    program = costs.apply(load(name, {"P": P, "M": M}))
    timeline = simulate(program)
    return timeline.makespan, max(timeline.peak_memory)


def verdict(target: str, outcome, elapsed: float, limit: float, cap: float, rows: dict) -> str:
    made = outcome.best.makespan
    fits = {n: ms for n, (ms, peak) in rows.items() if peak <= cap + 1e-9}
    if target == "extra":
        best_name = min(fits, key=fits.get) if fits else None
        how = "optimal" if outcome.optimal else f"not proven optimal ({outcome.stopped})"
        return f"extra: {how}" + (f"; best built-in that fits: {best_name} {fits[best_name]:g}" if best_name else
                                  "; no built-in fits")
    if target == "optimal":
        if outcome.optimal and elapsed <= limit:
            return "met (gap 0)"
        return f"NOT met: gap {outcome.gap:.1%} after {elapsed:.0f} s"
    if target == "zb_h1":
        zb, peak = rows["zb_h1"]
        if peak > cap + 1e-9:
            return "n/a (ZB-H1 over the cap)"
        return "met" if made <= zb + 1e-9 and elapsed <= limit else f"NOT met ({made:g} > {zb:g})"
    best_name = min(fits, key=fits.get) if fits else None
    if best_name is None or made < fits[best_name] - 1e-9:
        return "met" + (f" (beats {best_name} {fits[best_name]:g})" if best_name else " (no built-in fits)")
    if fits[best_name] <= outcome.lower_bound + 1e-9:
        return f"NOT met: ties {best_name} ({fits[best_name]:g}), which is at the proven lower bound"
    return f"NOT met: {best_name} has {fits[best_name]:g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the P=4, M=8 rows only")
    args = ap.parse_args(argv)
    settings = [s for s in SETTINGS if not args.quick or (s[1], s[2]) == (4, 8) and s[-1] != "extra"]
    head = (f"{'costs':<8} {'P':>2} {'M':>3} {'cap':>5} {'start':>6} {'synth':>6} {'bound':>6} {'gap':>6} {'time s':>7} "
            + " ".join(f"{n:>7}" for n in BUILTINS) + "  target")
    print(head)
    print("-" * len(head))
    all_met = True
    for label, P, M, make_costs, make_caps, limit, target in settings:
        costs = make_costs(P)
        rows = {n: builtin(n, P, M, costs) for n in BUILTINS}
        for cap in make_caps(P):
            t0 = time.monotonic()
            outcome = synthesize(build_problem(P, M, costs=costs, memory_limit=cap), time_limit_s=limit)
            elapsed = time.monotonic() - t0
            if isinstance(outcome, Infeasible):
                print(f"{label:<8} {P:>2} {M:>3} {cap:>5g}  infeasible: {outcome.reason}")
                all_met = False
                continue
            cells = " ".join(f"{ms:>6g}{'*' if peak > cap + 1e-9 else ' '}" for ms, peak in rows.values())
            said = verdict(target, outcome, elapsed, limit, cap, rows)
            all_met &= said.startswith(("met", "n/a", "extra"))
            print(f"{label:<8} {P:>2} {M:>3} {cap:>5g} {outcome.start.makespan:>6g} {outcome.best.makespan:>6g} {outcome.lower_bound:>6g} "
                  f"{outcome.gap:>6.1%} {elapsed:>7.1f} {cells}  {said}")
            sys.stdout.flush()
    print("* over the cap (peak activations above it): does not qualify at this memory")
    print("targets: " + ("all met" if all_met else "NOT all met (see the target column)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
