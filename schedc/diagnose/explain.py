"""A hang told in schedule terms: where each rank stopped (its last completed and first open
operation, as schedule actions with their lines), what it waits for, and the wait cycle or the
missing operation. When the dumps agree with the deadlock `check` finds in the schedule, that
deadlock is the explanation (under gloo the dumps hold collectives only: the schedule says where
the ranks wait on messages); otherwise the open records' partners make the wait-for graph.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import Diagnostic
from ..ir import Action, describe
from .match import Matched, Matching, where_text


@dataclass(frozen=True)
class Stop:
    """Where one rank stopped: its last completed and first open schedule operation in its dump
    (training step `train_step`), and the step the schedule's deadlock stops it at, if any."""

    rank: int
    dumped: bool
    train_step: int
    last_done: Matched | None
    first_open: Matched | None
    open_outside: tuple = ()  # open records that are not the schedule's (the runtime's own)
    at: tuple[int, Action] | None = None  # (lowered step, action) where it waits, when known
    end_of_step: bool = False  # it ran through its list and waits for its sends
    finished: bool = False  # it ran through its list (the schedule's run, which the dump agrees with)


@dataclass(frozen=True)
class Wait:
    """Rank `rank` waits (in `action`) for rank `on_rank` (to reach `on_action`), in a sentence."""

    rank: int
    action: Action | None
    on_rank: int | None
    on_action: Action | None
    text: str


@dataclass
class Diagnosis:
    schedule: str
    backend: str
    semantics: str
    ranks: int
    stops: list[Stop]
    hang: bool
    agrees: bool  # the dumps agree with the schedule's own deadlock
    cycle: list[Wait] = field(default_factory=list)
    chain: list[Wait] = field(default_factory=list)  # no cycle: the waits that end at the missing operation
    missing: str | None = None
    matching: Matching | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def disagreements(self):
        return self.matching.disagreements if self.matching else []

    @property
    def crossed(self):
        return self.matching.crossed if self.matching else []

    @property
    def found(self) -> bool:
        return self.hang or bool(self.disagreements) or bool(self.crossed)

    def findings(self) -> list[Diagnostic]:
        """The hang and the first disagreement, each at its line in the schedule."""
        out = []
        for c in self.crossed[:1]:
            out.append(Diagnostic("collective-order", c.message, c.action.span if c.action else None,
                                  where=None if c.action is not None and c.action.span else self.schedule))
        if self.disagreements:
            d = self.disagreements[0]
            more = len(self.disagreements) - 1
            out.append(Diagnostic("dump-mismatch", f"the dumps and the schedule part: {d.message}",
                                  d.action.span if d.action is not None else None,
                                  (f"and {more} more place(s) where they differ",) if more else (),
                                  where=None if d.action is not None else self.schedule))
        if self.hang:
            waits = self.cycle or self.chain
            head = waits[0] if waits else None
            what = "a wait cycle" if self.cycle else ("a missing operation" if self.missing else "a hang")
            text = "; ".join(w.text for w in waits) + (" - a cycle" if self.cycle else "")
            if self.missing:
                text += f"; {self.missing}"
            span = next((w.action.span for w in waits if w.action is not None and w.action.span is not None), None)
            source = "the schedule's own deadlock, which the dumps confirm" if self.agrees else "the dumps"
            out.append(Diagnostic("hang", f"{what} ({source}): {text or 'every rank waits'}", span,
                                  tuple(self.notes), where=None if span else self.schedule,
                                  rank=head.rank if head else None))
        return out

    def render(self) -> str:
        lines = [self.summary()]
        if self.found:
            lines.append("where each rank stopped:")
            lines += ["  " + stop_text(s, self) for s in self.stops]
        lines += [d.render() for d in self.findings()]
        return "\n".join(lines)

    def summary(self) -> str:
        verdict = ("a hang, explained" if self.hang else "no hang in the dumps") + \
            ("; members combined different operations" if self.crossed else "") + \
            (f"; the dumps and the schedule differ ({len(self.disagreements)})" if self.disagreements else "")
        dumped = sum(s.dumped for s in self.stops)
        return (f"{self.schedule}: {dumped} of {self.ranks} ranks' Flight Recorder dumps ({self.backend}), "
                f"read against the schedule under {self.semantics}: {verdict}")

    def to_dict(self) -> dict:
        return {
            "schedule": self.schedule, "backend": self.backend, "semantics": self.semantics,
            "ranks": self.ranks, "hang": self.hang, "agrees_with_schedule": self.agrees,
            "ok": not self.found,
            "stops": [_stop_dict(s) for s in self.stops],
            "cycle": [_wait_dict(w) for w in self.cycle],
            "chain": [_wait_dict(w) for w in self.chain],
            "missing": self.missing,
            "disagreements": [{"rank": d.rank, "message": d.message, "line": _line(d.action)}
                              for d in self.disagreements],
            "collective_order": [{"rank": d.rank, "message": d.message, "line": _line(d.action)}
                                 for d in self.crossed],
            "errors": [d.to_dict() for d in self.findings()],
        }


def _line(a: Action | None):
    return None if a is None or a.span is None else a.span.line


def _at(a: Action | None) -> str:
    return "" if a is None or a.span is None else f" ({a.span.file}:{a.span.line})"


def _op(x: Matched | None) -> str:
    if x is None:
        return "none"
    return f"{x.record.text()} = {describe(x.expected.action)} at step {x.expected.step}{_at(x.expected.action)}"


def stop_text(s: Stop, d: Diagnosis) -> str:
    if not s.dumped:
        where = "no dump"
    else:
        where = f"last completed {_op(s.last_done)}; first open {_op(s.first_open)}"
        if s.open_outside:
            where += "; open outside the schedule: " + ", ".join(r.text() for r in s.open_outside)
    if s.end_of_step:
        at = "at the end of its list, waiting for its sends"
    elif s.finished or (not d.hang and s.dumped):
        at = "ran through its list"
    elif s.at is not None:
        at = f"at step {s.at[0]}, {describe(s.at[1])}{_at(s.at[1])}"
    else:
        at = "place unknown" if not s.first_open else f"in {describe(s.first_open.expected.action)}"
    return f"rank {s.rank}: {at}; dump: {where}"


def _stop_dict(s: Stop) -> dict:
    def op(x: Matched | None):
        if x is None:
            return None
        return {"record": x.record.text(), "record_id": x.record.record_id, "action": describe(x.expected.action),
                "step": x.expected.step, "line": _line(x.expected.action), "training_step": x.train_step}
    return {"rank": s.rank, "dumped": s.dumped, "training_step": s.train_step,
            "finished": s.finished, "step": None if s.at is None else s.at[0], "action": None if s.at is None else describe(s.at[1]),
            "line": None if s.at is None else _line(s.at[1]), "end_of_step": s.end_of_step,
            "last_completed": op(s.last_done), "first_open": op(s.first_open),
            "open_outside": [r.text() for r in s.open_outside]}


def _wait_dict(w: Wait) -> dict:
    return {"rank": w.rank, "action": None if w.action is None else describe(w.action), "line": _line(w.action),
            "waits_for": {"rank": w.on_rank, "action": None if w.on_action is None else describe(w.on_action),
                          "line": _line(w.on_action)},
            "text": w.text}


# ---- building it ----

def stops(m: Matching, ranks: int, train_step: int) -> list[Stop]:
    out = []
    for r in range(ranks):
        ms = [x for x in m.matched.get(r, []) if x.train_step <= train_step]
        done = [x for x in ms if x.record.done]
        opened = [x for x in ms if not x.record.done]
        outside = tuple(rec for rec in m.outside.get(r, []) if not rec.done)
        out.append(Stop(r, r in m.matched, train_step, done[-1] if done else None,
                        opened[0] if opened else None, outside))
    return out


def current_step(m: Matching) -> int:
    """The training step the job hung in: the earliest with an open record (else the last recorded)."""
    opened = [x.train_step for ms in m.matched.values() for x in ms if not x.record.done]
    if opened:
        return min(opened)
    return max((x.train_step for ms in m.matched.values() for x in ms), default=1)


def counts(m: Matching, rank: int, key: tuple, train_step: int) -> int:
    """How many of its operations on `key` the rank's dump shows it issued in the training step."""
    return sum(1 for x in m.matched.get(rank, []) if x.expected.key == key and x.train_step == train_step)


def dump_waits(m: Matching, stop_list: list[Stop]) -> dict[int, Wait]:
    """Each rank with an open schedule operation -> whom it waits for, read from the dumps alone."""
    waits: dict[int, Wait] = {}
    for s in stop_list:
        x = s.first_open
        if x is None:
            continue
        e, k, t = x.expected, x.expected.number, x.train_step
        where = where_text(e.key, m.members)
        if e.is_collective:
            for other in m.members.get(e.key, ()):
                if other != s.rank and counts(m, other, e.key, t) < k:
                    waits[s.rank] = _partner_wait(m, s.rank, e, other, e.key, k,
                                                  f"rank {s.rank} waits in {describe(e.action)} (its collective "
                                                  f"#{k} {where}, step {e.step}) for rank {other}")
                    break
        else:
            back = ("recv" if e.key[0] == "send" else "send", s.rank)
            other = e.key[1]
            if counts(m, other, back, t) < k:
                verb = "receive" if e.key[0] == "send" else "send"
                waits[s.rank] = _partner_wait(m, s.rank, e, other, back, k,
                                              f"rank {s.rank}'s {describe(e.action)} (step {e.step}) waits for "
                                              f"rank {other} to {verb} it")
    return waits


def _partner_wait(m: Matching, rank: int, e, other: int, key: tuple, k: int, head: str) -> Wait:
    ops = m.expected.get(other, {}).get(key, [])
    partner = ops[(k - 1) % len(ops)].action if ops and k <= len(ops) else None
    if other not in m.matched:
        tail = f", whose dump is missing ({describe(partner)} at its step {ops[k - 1].step})" if partner else \
            ", whose dump is missing"
    elif partner is None:
        tail = f", whose program has no partner for it: it issues {len(ops)} there"
    else:
        tail = f" to reach {describe(partner)} (its step {ops[k - 1].step}{_at(partner)}), which its dump does not show"
    return Wait(rank, e.action, other, partner, head + tail)


def follow(waits: dict[int, Wait]) -> tuple[list[Wait], list[Wait]]:
    """The first wait cycle among the waits (ranks in order), else the longest chain."""
    best: list[Wait] = []
    for start in sorted(waits):
        path: list[Wait] = []
        seen: dict[int, int] = {}
        r: int | None = start
        while r is not None and r in waits and r not in seen:
            seen[r] = len(path)
            path.append(waits[r])
            r = waits[r].on_rank
        if r is not None and r in seen:
            cycle = path[seen[r]:]
            return cycle, []
        if len(path) > len(best):
            best = path
    return [], best
