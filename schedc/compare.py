"""Rank schedules for one setting: makespan, bubble ratio and peak memory under the user's costs.

`compare(names, params, costs=..., memory_limit=...)` loads each schedule with the parameters it
declares, checks it, simulates it (schedc/simulate.py) and returns rows sorted by makespan; a
schedule whose `require` refuses the setting, or that fails its checks, is listed with the reason;
over a memory limit it is marked, not hidden. Every schedule splits the same model because every
command's default times and sizes do (a stage takes its share of a rank-sized chunk,
schedc/ir.py `default_share`); costs the user gives are taken as written. Under a model and hardware
description (`costs.derived`, schedc/hardware.py) times are seconds and sizes GiB, a step's time
includes its data-parallel collectives (schedc/rules/time.py), each row adds its
ranks' model states, and a schedule fits when every rank's total is within the limit (by default the
accelerator's memory): the first row that fits is the fastest that does. What `schedc compare` prints.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from .errors import SchedcError
from .inputs import STDIN, STDIN_NAME
from .outputs import per_rank_list, rounded
from .verify.symmetry import distinct_actions


@dataclass(frozen=True)
class Row:
    name: str
    params: tuple[tuple[str, int], ...]
    makespan: float | None = None
    bubble_ratio: float | None = None
    peak_memory: tuple[float, ...] = ()
    over_limit: bool = False
    skipped: str | None = None  # why there are no numbers
    model_states: tuple[float, ...] | None = None  # GiB per rank, under a description (None: unit counts)
    fastest: bool = False  # under a description: the fastest schedule that fits
    # seconds of data-parallel collectives on the rank that spends the most in them (rules/time.py),
    # hidden under compute or not; the makespan includes what is not hidden (0 when none take time)
    collectives: float = 0.0
    replicas: int = 1  # a data-parallel job's: its lists per rank are the whole job's

    @property
    def peak(self) -> float | None:
        return max(self.peak_memory) if self.peak_memory else None

    @property
    def total_memory(self) -> tuple[float, ...]:
        """Per rank, model states and peak memory together (under a description; else peak memory)."""
        if self.model_states is None or not self.peak_memory:
            return self.peak_memory
        return tuple(a + b for a, b in zip(self.model_states, self.peak_memory))

    def to_dict(self) -> dict[str, Any]:
        shown = (lambda x: None if x is None else rounded(x))
        out: dict[str, Any] = {"schedule": self.name, "params": dict(self.params), "makespan": shown(self.makespan),
               "bubble_ratio": shown(self.bubble_ratio), "peak_memory": [rounded(x) for x in self.peak_memory],
               "peak": shown(self.peak), "over_limit": self.over_limit, "skipped": self.skipped}
        if self.model_states is not None:
            total = self.total_memory
            out.update({"units": {"time": "s", "memory": "GiB"}, "model_states": [rounded(x) for x in self.model_states],
                        "total_memory": [rounded(x) for x in total], "total": shown(max(total) if total else None),
                        "fits": self.skipped is None and not self.over_limit, "fastest": self.fastest,
                        "collectives": rounded(self.collectives)})
        return out


MAX_COMPARED_ACTIONS = 3_000_000  # the actions of every schedule a compare checks and simulates, together (~15 s)


def _load_declared(name: str, values: Mapping[str, int]):
    """The schedule `name`, taking the parameters it declares (`schedc.api.load`)."""
    from .api import load
    return load(name, values, strict_params=False)


def compare(names, params: Mapping[str, int], *, costs=None, memory_limit: float | None = None,
            overlap: bool = True, semantics=None, load=None) -> list[Row]:
    """One row per schedule: fitting ones first by makespan, then those over the limit, then skipped.
    Under a description (`costs.derived`) `memory_limit` is GiB on all a rank holds, by default the
    accelerator's memory. `semantics`: checked and timed under it (default rendezvous); `load(name,
    params)`: how a schedule is read (default `schedc.api.load`, each taking the parameters it
    declares; a PyTorch CSV takes P and M as what it states)."""
    from .api import check
    from .simulate import simulate
    load = load or _load_declared
    setup = getattr(costs, "derived", None)
    if setup is not None and memory_limit is None:
        memory_limit = setup.memory
    rows, total = [], 0
    for given in names:
        name = STDIN_NAME if given == STDIN else given
        try:
            program = load(given, dict(params))
        except SchedcError as exc:
            if exc.code != "require":
                raise
            rows.append(Row(name, tuple(params.items()), skipped=exc.diagnostics[0].message))
            continue
        total += distinct_actions(program)  # (a data-parallel job's replicas that run alike: once)
        if total > MAX_COMPARED_ACTIONS:  # before simulating the one past it
            raise SchedcError("too-large", f"the schedules compared hold more than {MAX_COMPARED_ACTIONS:,} actions "
                              f"in all ({name} reaches {total:,}); compare fewer schedules or at fewer microbatches")
        used = program.params
        if setup is not None and program.model_stages > setup.model.layers:  # (routes: the stages of one copy)
            rows.append(Row(name, used, skipped=f"{program.model_stages} stages, more than {setup.model.name}'s "
                            f"{setup.model.layers} layers"))
            continue
        if costs is not None:
            program = costs.apply(program)
        report = check(program, semantics=semantics or "rendezvous")
        if report.ok is not True:
            first = report.errors[0].message if report.errors else report.unknown
            rows.append(Row(name, used, skipped=f"fails its checks: {first}"))
            continue
        timeline = simulate(program, overlap=overlap, links=costs.links(program) if costs is not None else None,
                            semantics=semantics)
        peaks = report.peak_sizes
        row = Row(name, used, timeline.makespan, timeline.bubble_ratio, peaks,
                  model_states=setup.model_states(program) if setup is not None else None,
                  collectives=max(timeline.collectives, default=0.0), replicas=report.replicas)
        over = memory_limit is not None and max(row.total_memory, default=0.0) > memory_limit + 1e-9
        rows.append(replace(row, over_limit=over))
    rows.sort(key=lambda r: (r.skipped is not None, r.over_limit, r.makespan if r.makespan is not None else 0.0,
                             r.name))
    if setup is not None and rows and rows[0].skipped is None and not rows[0].over_limit:
        rows[0] = replace(rows[0], fastest=True)
    return rows


def render(rows: list[Row], limit: float | None = None) -> str:
    """The table `schedc compare` prints; under a description, in seconds and GiB (each rank's model
    states and peak memory together), then the fastest schedule that fits within `limit` GiB."""
    described = any(r.model_states is not None for r in rows)

    def fmt(x):
        if x is None:
            return "-"
        return (f"{x:.4g}" if described else f"{x:g}") if isinstance(x, float) else str(x)
    head = (["schedule", "params", "time (s)", "bubble", "peak (GiB)", "model states + activations and buffers, "
             "GiB per rank"] if described else ["schedule", "params", "makespan", "bubble", "peak", "peak memory per rank"])
    dp = any(r.collectives for r in rows)  # a column for the data-parallel collectives, where some take time
    if dp:
        head.insert(3, "dp comm (s)")
    body = []
    for r in rows:
        params = " ".join(f"{k}={v}" for k, v in r.params)
        if r.skipped is not None:
            body.append([r.name, params, "-", *(["-"] if dp else []), "-", "-", f"skipped: {r.skipped}"])
            continue
        memory = r.total_memory
        per_rank = per_rank_list(memory, r.replicas, lambda xs: ", ".join(fmt(float(x)) for x in xs))
        body.append([r.name, params, fmt(r.makespan), *([fmt(r.collectives)] if dp else []), f"{r.bubble_ratio:.3f}",
                     fmt(max(memory) if memory else None),
                     per_rank + ("  over the memory limit" if r.over_limit else "")])
    widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:-1], widths)) + "  " + row[-1] for row in [head] + body]
    if described:
        within = f" within {limit:.4g} GiB per rank" if limit is not None else ""
        best = next((r for r in rows if r.fastest), None)
        lines.append(f"fastest that fits{within}: {best.name} ({' '.join(f'{k}={v}' for k, v in best.params)}), "
                     f"{best.makespan:.4g} s" if best is not None else f"no schedule fits{within}")
    return "\n".join(line.rstrip() for line in lines)
