"""Rank schedules for one setting: makespan, bubble ratio and peak memory under the user's costs.

`compare(names, params, costs=..., memory_limit=...)` loads each schedule with the parameters it
declares, checks it, simulates it (schedc/simulate.py) and returns rows sorted by makespan; a
schedule whose `require` refuses the setting, or that fails its checks, is listed with the reason;
over a memory limit it is marked, not hidden. Every schedule splits the same model because every
command's default times and sizes do (a stage takes its share of a rank-sized chunk,
schedc/ir.py `default_share`); costs the user gives are taken as written. What `schedc compare` prints.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .errors import SchedcError
from .outputs import rounded


@dataclass(frozen=True)
class Row:
    name: str
    params: tuple[tuple[str, int], ...]
    makespan: float | None = None
    bubble_ratio: float | None = None
    peak_memory: tuple[float, ...] = ()
    over_limit: bool = False
    skipped: str | None = None  # why there are no numbers

    @property
    def peak(self) -> float | None:
        return max(self.peak_memory) if self.peak_memory else None

    def to_dict(self) -> dict:
        shown = (lambda x: None if x is None else rounded(x))
        return {"schedule": self.name, "params": dict(self.params), "makespan": shown(self.makespan),
                "bubble_ratio": shown(self.bubble_ratio), "peak_memory": [rounded(x) for x in self.peak_memory],
                "peak": shown(self.peak), "over_limit": self.over_limit, "skipped": self.skipped}


def compare(names, params: Mapping[str, int], *, costs=None, memory_limit: float | None = None,
            overlap: bool = True) -> list[Row]:
    """One row per schedule: fitting ones first by makespan, then those over the limit, then skipped."""
    from .api import check, load
    from .simulate import simulate
    rows = []
    for name in names:
        try:
            program = load(name, dict(params), strict_params=False)
        except SchedcError as exc:
            if exc.code != "require":
                raise
            rows.append(Row(name, tuple(params.items()), skipped=exc.diagnostics[0].message))
            continue
        used = program.params
        if costs is not None:
            program = costs.apply(program)
        report = check(program)
        if report.ok is not True:
            first = report.errors[0].message if report.errors else report.unknown
            rows.append(Row(name, used, skipped=f"fails its checks: {first}"))
            continue
        timeline = simulate(program, overlap=overlap, links=costs.links(program) if costs is not None else None)
        peaks = tuple(pk.memory for pk in report.peak_memory)
        over = memory_limit is not None and max(peaks, default=0.0) > memory_limit + 1e-9
        rows.append(Row(name, used, timeline.makespan, timeline.bubble_ratio, peaks, over))
    return sorted(rows, key=lambda r: (r.skipped is not None, r.over_limit,
                                       r.makespan if r.makespan is not None else 0.0, r.name))


def render(rows: list[Row]) -> str:
    """The table `schedc compare` prints."""
    def fmt(x):
        return "-" if x is None else (f"{x:g}" if isinstance(x, float) else str(x))
    head = ["schedule", "params", "makespan", "bubble", "peak", "peak memory per rank"]
    body = []
    for r in rows:
        params = " ".join(f"{k}={v}" for k, v in r.params)
        if r.skipped is not None:
            body.append([r.name, params, "-", "-", "-", f"skipped: {r.skipped}"])
            continue
        per_rank = "[" + ", ".join(fmt(float(x)) for x in r.peak_memory) + "]"
        body.append([r.name, params, fmt(r.makespan), f"{r.bubble_ratio:.3f}", fmt(r.peak),
                     per_rank + ("  over the memory limit" if r.over_limit else "")])
    widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:-1], widths)) + "  " + row[-1] for row in [head] + body]
    return "\n".join(line.rstrip() for line in lines)
