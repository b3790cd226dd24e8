"""Run every check on a Program and collect the findings in one `Report` (`run_checks`).

Structure first (schedc/lint.py); when the structure is sound, payload matching and deadlock
freedom under the chosen send semantics (schedc/verify/), and peak activations per rank.
`Report.to_dict()` is the JSON of `schedc check --json` (documented in the README).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .deps import payload
from .errors import Diagnostic
from .ir import Program, describe, format_step
from .lint import display_step, lint
from .verify.deadlock import Deadlock, find_deadlock, render_grid
from .verify.execute import RENDEZVOUS, Semantics, channels
from .verify.memory import peak_activation


@dataclass(frozen=True)
class Mismatch:
    """The k-th send on a channel meets the k-th receive, but they carry different payloads."""

    send_rank: int
    send_step: int
    send: object
    recv_rank: int
    recv_step: int
    recv: object

    def to_dict(self) -> dict:
        line = lambda a: None if a.span is None else a.span.line  # noqa: E731
        return {"send_rank": self.send_rank, "send": format_step(self.send), "recv_rank": self.recv_rank,
                "recv": format_step(self.recv), "send_line": line(self.send), "recv_line": line(self.recv)}


@dataclass
class Report:
    program: Program
    file: str | None
    semantics: Semantics = RENDEZVOUS
    errors: list[Diagnostic] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    deadlock: Deadlock | None = None
    peak_activation: tuple[float, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict:
        p = self.program
        return {
            "file": self.file,
            "schedule": p.name,
            "params": dict(p.params),
            "ranks": p.num_ranks,
            "stages": p.num_stages,
            "microbatches": p.num_microbatches,
            "level": p.level,
            "actions": p.num_actions,
            "semantics": str(self.semantics),
            "ok": self.ok,
            "errors": [d.to_dict() for d in self.errors],
            "mismatches": [m.to_dict() for m in self.mismatches],
            "deadlock": None if self.deadlock is None else self.deadlock.to_dict(),
            "peak_activation": [_number(x) for x in self.peak_activation],
        }

    def summary(self) -> str:
        p = self.program
        verdict = "ok" if self.ok else f"FAILED ({len(self.errors)} error(s))"
        text = (f"{p.name}: {p.num_ranks} ranks, {p.num_stages} stages, {p.num_microbatches} microbatches, "
                f"{p.num_actions} actions ({p.level} level); {verdict}")
        if self.peak_activation:
            text += "\n  peak activation per rank: [" + ", ".join(str(_number(x)) for x in self.peak_activation) + "]"
        return text

    def render(self) -> str:
        """Human-readable findings, then the grid for a deadlock."""
        parts = [d.render() for d in self.errors]
        if self.deadlock is not None:
            parts.append(render_grid(self.program, self.deadlock))
        return "\n".join(parts)


def _number(x: float):
    return int(x) if float(x).is_integer() else x


def run_checks(program: Program, *, semantics: Semantics = RENDEZVOUS, file: str | None = None) -> Report:
    report = Report(program, file if file is not None else program.source, semantics)
    report.errors.extend(lint(program))
    report.peak_activation = peak_activation(program) if not report.errors else ()
    if report.errors:
        return report
    chans = channels(program)
    for send, recv in chans.pairs():
        if payload(send.action) != payload(recv.action):
            report.mismatches.append(Mismatch(send.rank, send.step, send.action, recv.rank, recv.step, recv.action))
    for m in report.mismatches[:20]:
        step, send_step = display_step(m.recv, m.recv_step), display_step(m.send, m.send_step)
        report.errors.append(Diagnostic(
            "mismatch", f"rank {m.recv_rank}, step {step}: {describe(m.recv)} is paired with "
            f"{describe(m.send)} from rank {m.send_rank} (step {send_step}): messages pair in order on "
            f"{m.send_rank}->{m.recv_rank}, so this receive gets the wrong tensor", m.recv.span,
            rank=m.recv_rank, step=step))
    for ep in chans.unmatched():
        kind = "send" if ep.action.op.name.startswith("SEND") else "receive"
        other = "receive" if kind == "send" else "send"
        step = display_step(ep.action, ep.step)
        report.errors.append(Diagnostic(
            "unmatched", f"rank {ep.rank}, step {step}: {describe(ep.action)} is {kind} number "
            f"{ep.index + 1} on {ep.channel[0]}->{ep.channel[1]}, but that channel has no {other} "
            f"number {ep.index + 1}", ep.action.span, rank=ep.rank, step=step))
    dl = find_deadlock(program, semantics, chans)
    if dl is not None:
        report.deadlock = dl
        first = dl.cycle[0] if dl.cycle else None
        report.errors.append(Diagnostic(
            "deadlock", f"deadlock under {semantics} sends: {dl.cause}",
            first.action.span if first else None, rank=first.rank if first else None,
            step=display_step(first.action, first.step) if first else None))
    return report
