"""Deadlock findings: the smallest wait-for cycle, its cause in one sentence, and a grid.

Built on the executor (schedc/verify/execute.py): the ranks that are stuck, what each one's step
waits for (a rank past its list: the sends it waits for at the end of the step), the shortest cycle
among those waits, and (for communication that deadlocks only because sends block) the smallest
per-channel buffer K that makes the schedule safe.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..ir import Action, Program, describe, format_step
from ..lint import shown_step
from ..rules.semantics import Semantics
from .analysis import Analysis
from .execute import Channels, Outcome, Wait, channels, execute
from ..solver import Proved


@dataclass(frozen=True)
class Deadlock:
    semantics: Semantics
    cycle: tuple[Wait, ...]  # one wait per rank on the cycle, in cycle order
    stuck: dict[int, int]  # every stuck rank -> the step it is stuck at (its list's length: the end of the step)
    cause: str
    min_buffer: int | None  # smallest K with which bounded:K sends finish, if any
    ends: dict = field(default_factory=dict)  # rank past its list -> the sends it waits for there (execute.Wait)

    def to_dict(self, program: Program) -> dict:
        """The JSON of `deadlock`; steps are the ones a user sees (`schedc.lint.display_step`)."""
        return {
            "semantics": str(self.semantics),
            "cause": self.cause,
            "cycle": [_wait_dict(program, w) for w in self.cycle],
            "stuck": [{"rank": r, "step": shown_step(program, r, s), "end_of_step": r in self.ends,
                       "sends": [format_step(w.action) for w in self.ends.get(r, ())]}
                      for r, s in sorted(self.stuck.items())],
            "min_buffer": self.min_buffer,
        }


def _line(a: Action | None):
    return None if a is None or a.span is None else a.span.line


def _wait_dict(program: Program, w: Wait) -> dict:
    on_step = None if w.on_rank is None or w.on_step is None else shown_step(program, w.on_rank, w.on_step)
    return {
        "rank": w.rank, "step": shown_step(program, w.rank, w.step), "action": format_step(w.action),
        "line": _line(w.action), "reason": w.reason,
        "waits_for": {"rank": w.on_rank, "step": on_step,
                      "action": None if w.on_action is None else format_step(w.on_action),
                      "line": _line(w.on_action)},
    }


def find_deadlock(program: Program, semantics: Semantics, chans: Channels | None = None,
                  cons=None) -> Deadlock | None:
    """The deadlock of a program under a semantics, or None; `cons`: its constraints, when the caller
    built them (a data-parallel job's, verify/mesh.py)."""
    if cons is not None:
        return _deadlock(program, semantics, chans, cons, None)
    chans = chans or channels(program, semantics)
    return _deadlock(program, semantics, chans, None, chans)


def deadlock_of(analysis: Analysis) -> Deadlock | None:
    """The deadlock of the analysed program under its semantics, or None (`find_deadlock` on the
    analysis' channels and constraints)."""
    return _deadlock(analysis.program, analysis.semantics, analysis.channels, analysis.constraints, analysis.channels)


def _deadlock(program: Program, semantics: Semantics, chans, cons, buffered: Channels | None) -> Deadlock | None:
    """The deadlock; `buffered`: the channels to seek the smallest buffer that would do on (a
    single pipeline's; None for a job)."""
    outcome = execute(program, semantics, chans, cons)
    if outcome.finished:
        return None
    cycle = shortest_cycle(outcome)
    min_buffer = None
    if buffered is not None and program.level == "comms" and semantics.channel_buffer is not None and any(
            w.reason in ("recv-not-posted", "buffer-full") for w in cycle):
        min_buffer = _smallest_buffer(program, buffered, semantics)
    R = program.num_ranks
    stuck = {r: outcome.pcs[r] for r in sorted([*outcome.waits, *outcome.ends]) if r < R}
    return Deadlock(semantics, cycle, stuck, cause_of(cycle, min_buffer), min_buffer, outcome.ends)


def end_of_step_notes(deadlock: Deadlock) -> list[str]:
    """One sentence per rank that ran through its list and hangs at the end of the step, waiting for
    its sends: "rank 0 stops at the end of the step, waiting for SEND_F(0,1) to complete: for rank 1
    to post RECV_F(1,1)"."""
    return [f"rank {r} stops at the end of the step, waiting for " + "; ".join(_end_wait(w) for w in waits)
            for r, waits in sorted(deadlock.ends.items())]


def _end_wait(w: Wait) -> str:
    what = f"{describe(w.action)} to complete"
    if w.on_action is None:
        return f"{what}, and its receive is never posted"
    if w.reason == "partner-queued":  # nccl: the partner sits behind an earlier operation of its stream
        return f"{what}: its partner {describe(w.on_action)} is queued on rank {w.on_rank}'s stream"
    return f"{what}: for rank {w.on_rank} to post {describe(w.on_action)}"


def shortest_cycle(outcome: Outcome) -> tuple[Wait, ...]:
    """The shortest cycle in the wait-for graph of stuck ranks (or the longest chain if none)."""
    edges: dict[int, list[Wait]] = {n: [w for w in ws if w.on is not None] for n, ws in outcome.waits.items()}
    best: list[Wait] | None = None
    for start in list(edges)[:256]:
        parent: dict[int, Wait | None] = {start: None}
        queue = deque([start])
        found = None
        while queue and found is None:
            r = queue.popleft()
            for w in edges.get(r, []):
                if w.on == start:
                    found = w
                    break
                if w.on not in parent and w.on in edges:
                    parent[w.on] = w
                    queue.append(w.on)
        if found is None:
            continue
        path = [found]
        node = found.at
        while (back := parent[node]) is not None:
            path.append(back)
            node = back.at
        path.reverse()
        if best is None or len(path) < len(best):
            best = path
    if best is not None:
        return tuple(best)
    # no cycle among stuck ranks: each waits for something that never comes
    return tuple(ws[0] for ws in outcome.waits.values() if ws)


def _smallest_buffer(program: Program, chans: Channels, semantics: Semantics) -> int | None:
    if program.p2p == "tagged":
        return None  # bounded buffers are modelled for messages that pair in order (channels.as_paired)
    if not execute(program, Semantics.buffered(None), chans).finished:
        return None
    buffer = semantics.channel_buffer
    if buffer is None:
        return None  # sends never block: no buffer to seek (the caller asks only under a bounded one)
    lo, hi = max(1, buffer + 1), max((len(v) for v in chans.sends.values()), default=1)
    if not execute(program, Semantics.buffered(hi), chans).finished:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if execute(program, Semantics.buffered(mid), chans).finished:
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
    if w.node is not None:  # an nccl stream's head
        assert w.on_rank is not None, w  # a wait that names an action names its rank (execute.Wait)
        peer = f"the stream of ranks {min(w.rank, w.on_rank)} and {max(w.rank, w.on_rank)}" if w.on_rank != w.rank \
            else f"rank {w.rank}'s own list"
        if w.reason == "partner-queued":
            return (f"on rank {w.rank}'s stream to rank {w.on_rank}, {describe(w.action)} waits for its partner "
                    f"{describe(w.on_action)}, which is queued on rank {w.on_rank}'s stream behind an earlier operation")
        if w.reason == "not-posted":
            return f"on rank {w.rank}'s stream, {describe(w.action)} waits for rank {w.rank} to post it"
        return (f"on rank {w.rank}'s stream, {describe(w.action)} waits for rank {w.on_rank} to post "
                f"{describe(w.on_action)} ({peer})")
    if w.reason in ("recv-not-done", "send-not-done"):
        return (f"rank {w.rank} waits at {describe(w.action)} for {describe(w.on_action)} to complete on its "
                f"stream to {_peer_of(w.on_action)}")
    if w.reason == "partner-queued":
        return (f"rank {w.rank} waits at {describe(w.action)} for rank {w.on_rank}'s {describe(w.on_action)}, "
                "queued on its stream")
    if w.reason == "collective-not-posted":
        return (f"rank {w.rank} waits at {describe(w.action)} for the all-gather its UNSHARD({w.action.stage}) "
                f"began, which completes once rank {w.on_rank} posts its partner {describe(w.on_action)}")
    if w.reason == "collective-not-reached":
        return (f"rank {w.rank} waits at the collective {describe(w.action)} for rank {w.on_rank} to reach its "
                f"partner {describe(w.on_action)}")
    verb = {"recv-not-posted": "to post", "send-not-posted": "to post", "buffer-full": "to drain the channel at",
            "value": "to run"}[w.reason]
    return f"rank {w.rank} waits at {describe(w.action)} for rank {w.on_rank} {verb} {describe(w.on_action)}"


def _peer_of(action: Action) -> str:
    from ..rules.deps import peer_stage
    stage = peer_stage(action)
    return f"the rank of stage {stage}" if stage is not None else "its peer"


def cause_of(cycle: tuple[Wait, ...], min_buffer: int | None) -> str:
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
    if len(cycle) >= 2 and all(w.reason == "partner-queued" and w.node is not None for w in cycle):
        # nccl streams: each pair of partners sits behind the other's head, in issue order
        order = "; ".join(f"rank {n.rank} issues {describe(n.action)} before {describe(w.partner)} on its stream "
                          f"to rank {w.rank}" for w, n in zip(cycle, cycle[1:] + cycle[:1]))
        return (f"{order}: each operation at the head of a stream waits for a partner queued behind the other "
                "(nccl runs a rank pair's operations on one communicator in the order they were issued)")
    text = "; ".join(_what(w) for w in cycle)
    if len(cycle) >= 2 and all(w.on_rank is not None for w in cycle) and cycle[-1].on_rank == cycle[0].rank:
        text += " - a cycle"
    if min_buffer is not None:
        text += f"; safe only if at least {min_buffer} message(s) are buffered per channel"
    return text


def render_grid(program: Program, deadlock: Deadlock, width: int = 6) -> str:
    """Rank-by-step grid around where the ranks stopped; [..] marks a blocked step, [end] a rank that
    ran through its list and waits for its sends at the end of the step. The columns are the steps a
    user sees: a CSV's columns, its idle cells left empty."""
    if not deadlock.stuck:
        return ""
    stuck = {r: shown_step(program, r, i) for r, i in deadlock.stuck.items()}
    lo = max(0, min(stuck.values()) - width)
    last = max(shown_step(program, r, len(s) - 1) + 1 for r, s in enumerate(program.ranks))
    hi = min(max(last, max(stuck.values()) + 1), max(stuck.values()) + 3)
    cells = [_grid_row(program, r, lo, hi, stuck.get(r)) for r in range(len(program.ranks))]
    widths = [max([len(f"{x}")] + [len(row.get(x, "")) for row in cells]) for x in range(lo, hi)]
    lines = ["step    " + " ".join(f"{x:<{w}}" for x, w in zip(range(lo, hi), widths))]
    for r, row in enumerate(cells):
        text = " ".join(f"{row.get(x, ''):<{w}}" for x, w in zip(range(lo, hi), widths))
        lines.append(f"rank {r:<3}" + text.rstrip())
    return "\n".join(lines)


def _grid_row(program: Program, rank: int, lo: int, hi: int, blocked: int | None) -> dict[int, str]:
    """One rank's cells whose shown step is in lo..hi-1 (a step is never shown before its index)."""
    row = {}
    for x, st in enumerate(program.ranks[rank][:hi]):
        col = shown_step(program, rank, x)
        if lo <= col < hi:
            row[col] = f"[{format_step(st)}]" if col == blocked else format_step(st)
    if blocked is not None and blocked == shown_step(program, rank, len(program.ranks[rank])) and lo <= blocked < hi:
        row[blocked] = "[end]"  # the end of the step, where it waits for its sends
    return row


def disagreement(result, deadlock: Deadlock | None) -> str | None:
    """Why the solver's verdict (schedc/verify/solver.py) contradicts the executor's run, if it does.

    Both answer one question over one graph (schedc/verify/graph.py), so a disagreement is a bug in
    schedc: the caller reports `unknown` with this reason instead of either verdict.
    """
    if isinstance(result, Proved):
        if deadlock is None:
            return None
        return ("the engines disagree (a bug in schedc): Z3 finds a timing that meets every constraint, "
                f"but the run stops: {deadlock.cause}")
    if deadlock is not None:
        return None
    return ("the engines disagree (a bug in schedc): Z3 finds that the constraints cannot all hold, "
            "but the run reaches the end of every rank's list")
