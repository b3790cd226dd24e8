"""Deadlock findings: the smallest wait-for cycle, its cause in one sentence, and a grid.

Built on the executor (schedc/verify/execute.py): the ranks that are stuck, what each one's step
waits for, the shortest cycle among those waits, and (for communication that deadlocks only
because sends block) the smallest per-channel buffer K that makes the schedule safe.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ..ir import Action, Program, describe, format_step
from .execute import Channels, Outcome, Semantics, Wait, channels, execute


@dataclass(frozen=True)
class Deadlock:
    semantics: Semantics
    cycle: tuple[Wait, ...]  # one wait per rank on the cycle, in cycle order
    stuck: dict[int, int]  # every stuck rank -> the step it is stuck at
    cause: str
    min_buffer: int | None  # smallest K with which bounded:K sends finish, if any

    def to_dict(self) -> dict:
        return {
            "semantics": str(self.semantics),
            "cause": self.cause,
            "cycle": [_wait_dict(w) for w in self.cycle],
            "stuck": [{"rank": r, "step": s} for r, s in sorted(self.stuck.items())],
            "min_buffer": self.min_buffer,
        }


def _line(a: Action | None):
    return None if a is None or a.span is None else a.span.line


def _wait_dict(w: Wait) -> dict:
    return {
        "rank": w.rank, "step": w.step, "action": format_step(w.action), "line": _line(w.action),
        "reason": w.reason,
        "waits_for": {"rank": w.on_rank, "step": w.on_step,
                      "action": None if w.on_action is None else format_step(w.on_action),
                      "line": _line(w.on_action)},
    }


def find_deadlock(program: Program, semantics: Semantics, chans: Channels | None = None) -> Deadlock | None:
    chans = chans or channels(program)
    outcome = execute(program, semantics, chans)
    if outcome.finished:
        return None
    cycle = shortest_cycle(outcome)
    min_buffer = None
    if program.level == "comms" and semantics.kind != "eager" and any(
            w.reason in ("recv-not-posted", "buffer-full") for w in cycle):
        min_buffer = _smallest_buffer(program, chans, semantics)
    stuck = {r: outcome.pcs[r] for r in outcome.waits}
    return Deadlock(semantics, cycle, stuck, _cause(cycle, min_buffer), min_buffer)


def shortest_cycle(outcome: Outcome) -> tuple[Wait, ...]:
    """The shortest cycle in the wait-for graph of stuck ranks (or the longest chain if none)."""
    edges: dict[int, list[Wait]] = {r: [w for w in ws if w.on_rank is not None] for r, ws in outcome.waits.items()}
    best: list[Wait] | None = None
    for start in list(edges)[:256]:
        parent: dict[int, Wait | None] = {start: None}
        queue = deque([start])
        found = None
        while queue and found is None:
            r = queue.popleft()
            for w in edges.get(r, []):
                if w.on_rank == start:
                    found = w
                    break
                if w.on_rank not in parent and w.on_rank in edges:
                    parent[w.on_rank] = w
                    queue.append(w.on_rank)
        if found is None:
            continue
        path = [found]
        node = found.rank
        while parent[node] is not None:
            path.append(parent[node])
            node = parent[node].rank
        path.reverse()
        if best is None or len(path) < len(best):
            best = path
    if best is not None:
        return tuple(best)
    # no cycle among stuck ranks: each waits for something that never comes
    return tuple(ws[0] for ws in outcome.waits.values() if ws)


def _smallest_buffer(program: Program, chans: Channels, semantics: Semantics) -> int | None:
    if not execute(program, Semantics("eager"), chans).finished:
        return None
    lo, hi = max(1, semantics.buffer + 1), max((len(v) for v in chans.sends.values()), default=1)
    if not execute(program, Semantics("bounded", hi), chans).finished:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if execute(program, Semantics("bounded", mid), chans).finished:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _what(w: Wait) -> str:
    if w.on_action is None:
        if w.reason in ("value", "never"):
            return f"rank {w.rank} waits at {describe(w.action)} for something that never comes"
        other = "a receive" if w.reason != "send-not-posted" else "a send"
        return f"rank {w.rank} waits at {describe(w.action)} for {other} on rank {w.on_rank} that never comes"
    verb = {"recv-not-posted": "to post", "send-not-posted": "to post", "buffer-full": "to drain the channel at",
            "value": "to run"}[w.reason]
    return f"rank {w.rank} waits at {describe(w.action)} for rank {w.on_rank} {verb} {describe(w.on_action)}"


def _cause(cycle: tuple[Wait, ...], min_buffer: int | None) -> str:
    if not cycle:
        return "the run stops before every rank reaches the end of its list"
    ranks = [w.rank for w in cycle]
    sends_block = all(w.reason in ("recv-not-posted", "buffer-full") for w in cycle)
    if sends_block and len(cycle) >= 2:
        who = " and ".join(f"rank {r}" for r in ranks) if len(ranks) == 2 else \
            "ranks " + ", ".join(map(str, ranks)) + " each"
        both = " both" if len(ranks) == 2 else ""
        lead = f"{who}{both} send before they receive"
        if min_buffer is not None:
            chans_text = ", ".join(sorted({f"{w.rank}->{w.on_rank}" for w in cycle}))
            plural = "message is" if min_buffer == 1 else "messages are"
            return f"{lead}; safe only if at least {min_buffer} {plural} buffered on {chans_text}"
        return lead
    text = "; ".join(_what(w) for w in cycle)
    if len(cycle) >= 2 and all(w.on_rank is not None for w in cycle) and cycle[-1].on_rank == cycle[0].rank:
        text += " - a cycle"
    if min_buffer is not None:
        text += f"; safe only if at least {min_buffer} message(s) are buffered per channel"
    return text


def render_grid(program: Program, deadlock: Deadlock, width: int = 6) -> str:
    """Rank-by-step grid around where the ranks stopped; [..] marks a blocked step."""
    stuck = deadlock.stuck
    if not stuck:
        return ""
    lo = max(0, min(stuck.values()) - width)
    hi = min(max(len(s) for s in program.ranks), max(stuck.values()) + 3)
    cells = []
    for r, steps in enumerate(program.ranks):
        row = []
        for x in range(lo, hi):
            if x >= len(steps):
                row.append("")
            else:
                text = format_step(steps[x])
                row.append(f"[{text}]" if stuck.get(r) == x else text)
        cells.append(row)
    widths = [max([len(f"{x}")] + [len(c[i]) for c in cells]) for i, x in enumerate(range(lo, hi))]
    head = "step    " + " ".join(f"{x:<{w}}" for x, w in zip(range(lo, hi), widths))
    lines = [head]
    for r, row in enumerate(cells):
        lines.append(f"rank {r:<3}" + " ".join(f"{c:<{w}}" for c, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


_WHY = {"data": "value", "recv-posted": "recv-not-posted", "send-posted": "send-not-posted",
        "buffer": "buffer-full"}


def deadlock_from_core(program: Program, semantics: Semantics, chans: Channels, result) -> Deadlock:
    """A Deadlock told from a solver's unsat core (schedc/verify/solver.py's Counterexample)."""
    def first(step):
        return program.ranks[step[0]][step[1]].parts[0]

    waits = []
    for e in result.core:
        if e.why == "order":
            continue
        target = e.before if e.why == "data" else (e.before[0], e.before[1] + 1)
        waits.append(Wait(e.after[0], e.after[1], first(e.after), _WHY[e.why], target[0], target[1], first(target)))
    for imp in result.impossible:
        waits.append(Wait(imp.step[0], imp.step[1], first(imp.step), "never"))
    cycle = tuple(waits)
    min_buffer = None
    if program.level == "comms" and semantics.kind != "eager" and any(
            w.reason in ("recv-not-posted", "buffer-full") for w in cycle):
        min_buffer = _smallest_buffer(program, chans, semantics)
    stuck = {w.rank: w.step for w in cycle}
    return Deadlock(semantics, cycle, stuck, _cause(cycle, min_buffer), min_buffer)
