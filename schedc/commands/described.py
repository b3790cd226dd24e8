"""What `sim`, `check`, `compare` and `viz` add under a model and hardware description: a limit in
GiB on all a rank holds (the accelerator's memory by default), less the model states it holds for
the whole run, which is what is left for activations and message buffers; and outputs that say
seconds and GiB, with each rank's model states and total, and the units in JSON (docs/units.md).
"""
from __future__ import annotations

from dataclasses import replace

from ..outputs import ALIKE, alike_replicas


def device_limits(setup, program, limit) -> tuple[float, ...]:
    """Each rank's limit on all it holds, in GiB: `limit` (one for every rank, or {rank: GiB} for
    some) or else the accelerator's memory."""
    ranks = program.num_ranks * program.dp  # every rank of a data-parallel job
    if limit is None:
        return (setup.memory,) * ranks
    if isinstance(limit, dict):
        return tuple(limit.get(r, setup.memory) for r in range(ranks))
    return (float(limit),) * ranks


def room(setup, program, limit) -> dict[int, float]:
    """{rank: GiB left for activations and message buffers}: its device limit less its model states
    (0 when the model states alone do not fit)."""
    states = setup.model_states(program)
    return {r: max(0.0, lim - states[r]) for r, lim in enumerate(device_limits(setup, program, limit))}


def totals(states, peaks) -> list[float]:
    return [a + b for a, b in zip(states, peaks)]


# ---- check ----
def explain(report, setup, limit) -> None:
    """Each memory finding of `report` with a note in the user's terms: the rank's model states, its
    total and its device limit (the finding itself counts activations and buffers against what is
    left)."""
    states = setup.model_states(report.program, report.replicas)
    device = device_limits(setup, report.program, limit)
    worst = {pk.rank: pk for pk in report.memory_violations}
    for i, d in enumerate(report.errors):
        if d.code != "memory" or d.rank not in worst:
            continue
        r = d.rank
        note = (f"sizes are GiB; rank {r} also holds {gib_text(states[r])} of model states (weights, gradients, "
                f"optimizer state) for the whole run, so it needs {gib_text(states[r] + worst[r].memory)} of its "
                f"{gib_text(device[r])}: the limit above is what the model states leave for activations and buffers")
        report.errors[i] = replace(d, notes=d.notes + (note,))


def check_fields(report, setup, limit) -> dict:
    """The keys `check --json` adds under a description (the report's own keys count activations and
    buffers against what the model states leave)."""
    p = report.program
    states = setup.model_states(p, report.replicas)
    peaks = list(report.peak_sizes)
    return {"units": setup.units().to_dict(), "setup": setup.to_dict(), "model_states": _rounded(states),
            "total_memory": _rounded(totals(states, peaks)) if peaks else [],
            "total_memory_limit": _rounded(device_limits(setup, p, limit))}


def check_text(report, setup, limit) -> str:
    """`check`'s summary under a description: its first line, then memory per rank in GiB."""
    p = report.program
    lines = [report.summary().splitlines()[0], f"  {setup.title}; sizes in GiB"]
    states = setup.model_states(p, report.replicas)
    device = device_limits(setup, p, limit)
    peaks = list(report.peak_sizes)
    if not peaks:
        lines.append("  model states per rank: [" + ", ".join(f"{x:.4g}" for x in states) + "]")
        return "\n".join(lines)
    lines.append(f"  per rank: model states + peak activations and buffers (worst over every run "
                 f"{report.semantics} allows) = total, and its limit")
    lines += _rank_table(["rank", "model states", "activations+buffers", "total", "limit"],
                         [[r, states[r], peaks[r], states[r] + peaks[r], device[r]] for r in range(p.num_ranks)],
                         report.replicas)
    return "\n".join(lines)


def _rank_table(head: list[str], rows: list[list], replicas: int) -> list[str]:
    """`_table` of a row per rank (its rank first); a job whose replicas' rows are alike, replica 0's
    and a line that says so (`alike_replicas`)."""
    P = alike_replicas([row[1:] for row in rows], replicas)
    if not P:
        return [_table(head, rows)]
    return [_table(head, rows[:P]), "  " + ALIKE.format(D=replicas, P=P)]


# ---- sim ----
def sim_fields(timeline, setup) -> dict:
    """The keys `sim --json` adds under a description; `memory_limit` is what the model states leave
    of the accelerator's memory (as in check's report), `memory_fits` whether each rank's total fits."""
    states = setup.model_states(timeline.program, timeline.replicas)
    total = totals(states, timeline.peak_memory)
    return {"units": setup.units().to_dict(), "setup": setup.to_dict(), "model_states": _rounded(states),
            "total_memory": _rounded(total), "memory_limit": _rounded(max(0.0, setup.memory - x) for x in states),
            "total_memory_limit": _rounded(setup.memory for _ in states),
            "memory_fits": all(t <= setup.memory + 1e-9 for t in total)}


def sim_text(timeline, setup, trace) -> str:
    """`sim`'s text under a description: seconds and GiB, and each rank's model states and total."""
    from ..ir import sizes_text
    p = timeline.program
    params = ", ".join(f"{k}={v}" for k, v in p.params)
    states = setup.model_states(p, timeline.replicas)
    lines = [f"{p.name}{f' ({params})' if params else ''}: {sizes_text(p, routes=False)}, {timeline.level} level, "
             f"overlap {'on' if timeline.overlap else 'off'}",
             f"  {setup.title}; times in seconds, sizes in GiB",
             f"  makespan {timeline.makespan:.4g} s, bubble ratio {timeline.bubble_ratio:.4f}"]
    dp = list(timeline.collectives)
    lines += _rank_table(["rank", "busy", "idle", *(["dp comm"] if dp else []), "peak memory", "model states",
                          "total"],
                         [[r, busy, idle, *([dp[r]] if dp else []), peak, states[r], peak + states[r]]
                          for r, (busy, idle, peak) in enumerate(zip(timeline.busy, timeline.idle,
                                                                     timeline.peak_memory))], timeline.replicas)
    lines += ["  peak memory: activations and receive buffers of this timed run (`schedc check` reports the worst "
              "over every run the semantics allows); total: with the model states (weights, gradients, optimizer "
              "state) each rank holds for the whole run"]
    if dp:
        lines.append("  dp comm: each rank's data-parallel collectives (its stages' gradient reduction, at the step's "
                     "end where the schedule places none, and FSDP's gathers), beside its compute; the makespan "
                     "includes what compute does not hide")
    total = list(totals(states, timeline.peak_memory))
    P = alike_replicas(total, timeline.replicas)  # (alike: replica 0's ranks, in each replica)
    over = [r for r, t in enumerate(total[:P] if P else total) if t > setup.memory + 1e-9]
    if over:
        lines.append(f"  rank{'s' if len(over) > 1 else ''} {', '.join(map(str, over))} "
                     f"need{'' if len(over) > 1 else 's'} more than the "
                     f"{gib_text(setup.memory)} a rank may hold on {setup.hardware.name} (its memory less the "
                     f"reserve){f' in each of the {timeline.replicas:,} replicas' if P else ''}")
    if trace:
        lines.append(f"  wrote {trace}")
    return "\n".join(lines)


# ---- viz ----
def picture_units(setup, program, limit):
    """The units a picture labels its numbers with, and its note on what the memory strip holds."""
    states = setup.model_states(program)
    device = device_limits(setup, program, limit)
    same = len(set(device)) == 1
    return setup.units(
        f"{setup.title}. Memory is activations and message buffers in GiB; each rank also holds its model "
        f"states for the whole run ([{', '.join(f'{x:.4g}' for x in states)}] GiB), so the limit drawn is "
        f"{gib_text(device[0]) if same else 'its device limit'} less them")


def gib_text(x: float) -> str:
    """schedc/units.py's `gib_text` (that module imported when a description is given)."""
    from ..units import gib_text as text
    return text(x)


def _rounded(values) -> list:
    from ..outputs import rounded
    return [rounded(x) for x in values]


def _table(head: list[str], rows: list[list]) -> str:
    cells = [head] + [[str(row[0])] + [f"{x:.4g}" for x in row[1:]] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    return "\n".join("  " + "  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells)
