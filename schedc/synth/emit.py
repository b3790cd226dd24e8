"""The synthesised schedule as a `.pp` file: a comment header saying how it was found, then the
literal per-rank lists (`rank 0: 0F0 0F1 0I0 ...`) with the placement, costs, sizes and memory
limit it was found for, so `schedc check` and `schedc sim` judge it under the same settings.
"""
from __future__ import annotations

from ..ir import DEFAULT_SPEED
from ..ir import count_of
from .problem import Problem
from .search import Outcome


def number(x: float) -> str:
    """A number as the language reads it (integers, or decimals without an exponent)."""
    if not abs(float(x)) <= 2 ** 62:  # beyond the language's range: shown as it is, never stated in a file
        return f"{float(x):g}"
    if float(x).is_integer():
        return str(int(x))
    text = f"{x:.12f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def describe_costs(problem: Problem) -> list[str]:
    """Times per stage (grouped when equal), rank speeds and latencies, in the user's units."""
    ann = problem.program.annotations
    groups: list[tuple[tuple, list[int]]] = []
    for s in range(problem.S):
        c, m = ann.cost_of(s), ann.memory_of(s)
        key = (c.F, c.I, c.W, m.act, m.weight)
        if groups and groups[-1][0] == key:
            groups[-1][1].append(s)
        else:
            groups.append((key, [s]))
    lines = []
    for (F, I, W, act, weight), stages in groups:
        which = f"stage {stages[0]}" if len(stages) == 1 else f"stages {stages[0]}-{stages[-1]}"
        lines.append(f"{which}: F={number(F)} I={number(I)} W={number(W)} act={number(act)} weight={number(weight)}")
    speeds = [(r, v) for r, v in enumerate(ann.rank_speed) if v != DEFAULT_SPEED]
    if speeds:
        lines.append("rank speed: " + ", ".join(f"{r}={number(v)}" for r, v in speeds))
    lats = sorted({problem.seconds(v) for v in problem.latency.values()})
    lines.append("latency: " + ("0" if not lats or lats == [0.0] else
                                ", ".join(f"{a}->{b}={number(problem.seconds(v))}"
                                          for (a, b), v in sorted(problem.latency.items()) if v)
                                if len(lats) > 1 else number(lats[0])))
    return lines


def to_pp(outcome: Outcome, command: str | None = None) -> str:
    p = outcome.problem
    head = header(outcome, command)
    body = [f"schedule {p.program.name} {{", *settings(p, head)]
    for r, row in enumerate(outcome.best.program(p).ranks):
        body.append(f"  rank {r}: " + " ".join(str(a) for a in row))
    body.append("}")
    too_large = [line.strip() for line in body if line.lstrip().startswith(("cost", "memory"))
                 and "e+" in line]  # a number beyond the language's range (2^62) is shown with an exponent
    if too_large:
        from ..errors import SchedcError
        raise SchedcError("costs", f"the schedule found cannot be written: {too_large[0]!r} is beyond what a "
                          "schedule can state (at most 2^62); use smaller costs or sizes")
    return "\n".join(head + body) + "\n"


def header(outcome: Outcome, command: str | None) -> list[str]:
    """The comment lines saying how the schedule was found and how good it is."""
    p, best = outcome.problem, outcome.best
    caps = ", ".join("none" if c is None else number(c) for c in p.cap_given)
    status = ("optimal (proved: no schedule is shorter)" if outcome.optimal else
              f"not proven optimal ({why_stopped(outcome)}); gap {outcome.gap:.1%}")
    return [f"# Synthesised by `schedc synth`{f': {command}' if command else ''}",
            f"# P={p.P}, M={p.M}, placement {p.placement}, {count_of(p.S, 'stage')}; memory limit per rank: {caps}",
            *(f"# costs {line}" for line in describe_costs(p)),
            f"# makespan {number(best.makespan)}, lower bound {number(outcome.lower_bound)}: {status}",
            f"# start: {outcome.start.origin} (makespan {number(outcome.start.makespan)}); "
            f"{len(outcome.queries)} solver quer{'y' if len(outcome.queries) == 1 else 'ies'}, "
            f"{outcome.elapsed:.1f} s",
            "# peak activations per rank: " + ", ".join(number(x * float(p.memory_unit)) for x in best.peaks)]


def settings(p: Problem, head: list[str]) -> list[str]:  # noqa: C901
    """The declarations (stages, placement, costs, sizes, memory limit) the schedule was found for;
    what the language cannot say is noted in `head`."""
    ann = p.program.annotations
    body = [f"  stages {p.S}", f"  place {p.placement}"]
    per_stage = [_stage_settings(ann, s) for s in range(p.S)]
    common = max(per_stage, key=per_stage.count)  # written once; the stages that differ get their own line
    body += [f"  cost {common[0]}", f"  memory {common[1]}"]
    for s, (cost, memory) in enumerate(per_stage):
        if cost != common[0]:
            body.append(f"  cost stage {s}: {cost}")
        if memory != common[1]:
            body.append(f"  memory stage {s}: {memory}")
    for r, v in enumerate(ann.rank_speed):
        if v != DEFAULT_SPEED:
            body.append(f"  cost rank {r}: speed = {number(v)}")
    lats = {v for v in p.latency.values()}
    if len(lats) == 1 and lats != {0}:
        body.append(f"  cost latency = {number(p.seconds(lats.pop()))}")
    elif len(lats) > 1:
        head.append("# per-channel latencies are not part of the language: simulate with the same --costs file")
    ann = p.program.annotations
    from ..expr import MAX_INT
    if any(c is not None and not c <= MAX_INT for c in p.cap_given):  # no schedule can reach it: not stated
        head.append("# memory limit per rank beyond what a schedule can state (2^62), so none is written: "
                    + ", ".join("-" if c is None else f"{float(c):g}" for c in p.cap_given))
    elif any(ann.memory_of(s).out for s in range(p.program.num_stages)):
        # synth caps activations; `check` also counts message buffers, so the limit is stated, not checked
        head.append("# memory limit per rank (activations; the messages' buffers are not part of the cap): "
                    + ", ".join("-" if c is None else number(c) for c in p.cap_given))
    elif len(set(p.cap_given)) == 1 and p.cap_given[0] is not None:
        body.append(f"  memory limit = {number(p.cap_given[0])}")
    else:
        body += [f"  memory rank {r}: limit = {number(c)}" for r, c in enumerate(p.cap_given) if c is not None]
    return body


def _stage_settings(ann, s: int) -> tuple[str, str]:
    c, m = ann.cost_of(s), ann.memory_of(s)
    return (f"F = {number(c.F)}, I = {number(c.I)}, W = {number(c.W)}",
            f"act = {number(m.act)}, weight = {number(m.weight)}" + (f", out = {number(m.out)}" if m.out else ""))


def why_stopped(outcome: Outcome) -> str:
    """Why the search stopped before it proved its best optimal: the clock, Ctrl-C, or why its last
    unknown query was (a budget that ran out, named)."""
    gave_up = next((q.why for q in reversed(outcome.queries) if q.answer == "unknown"), "the solver gave up")
    return {"time-limit": "stopped at the time limit", "interrupted": "interrupted"}.get(outcome.stopped or "", gave_up)
