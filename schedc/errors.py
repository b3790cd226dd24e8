"""One error family for everything schedc rejects: a stable code, a message, and where.

`SchedcError` is raised for bad input (syntax, names, parameters, CSV cells, usage); it renders as
`file:line:col: error[CODE]: message` with the source line and a caret. `SchedcErrors` carries
several at once. Exit codes used by the CLI live here too, so scripts can rely on them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .span import Span, caret_lines

EXIT_OK = 0  # every check holds
EXIT_FAIL = 1  # a check fails (structure, deadlock, ...)
EXIT_INPUT = 2  # bad input or usage
EXIT_UNKNOWN = 3  # a solver gave up (verifier)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM), handled as Ctrl-C is (schedc/signals.py)


@dataclass(frozen=True)
class Diagnostic:
    """A located message: used for input errors and for check findings alike."""

    code: str
    message: str
    span: Span | None = None
    notes: tuple[str, ...] = ()
    where: str | None = None  # a location that is not a span, e.g. "--param"
    rank: int | None = None  # for findings about a step of a program
    step: int | None = None
    omitted: int = 0  # > 0: not a finding but the line standing for this many of `code` left unlisted

    def render(self, severity: str = "error") -> str:
        if self.span is not None:
            loc = str(self.span)
            head = f"{loc}: {severity}[{self.code}]: {self.message}"
            body = caret_lines(self.span)
        else:
            prefix = f"{self.where}: " if self.where else ""
            head = f"{prefix}{severity}[{self.code}]: {self.message}"
            body = []
        return "\n".join([head, *body, *(f"  = note: {n}" for n in self.notes)])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.span is not None:
            out["file"] = self.span.file
            out["line"] = self.span.line
            out["column"] = self.span.column
        rank = self.rank if self.rank is not None else (self.span.rank if self.span else None)
        step = self.step if self.step is not None else (self.span.step if self.span else None)
        if rank is not None:
            out["rank"] = rank
            out["step"] = step
        if self.notes:
            out["notes"] = list(self.notes)
        return out


class SchedcError(Exception):
    """Bad input: one or more diagnostics, each rendered with its location."""

    def __init__(self, code: str, message: str, span: Span | None = None,
                 notes: tuple[str, ...] | list[str] = (), where: str | None = None):
        self.diagnostics: tuple[Diagnostic, ...] = (
            Diagnostic(code, message, span, tuple(notes), where),
        )
        super().__init__(message)

    @classmethod
    def many(cls, diagnostics: list[Diagnostic]) -> "SchedcError":
        err = cls.__new__(cls)
        Exception.__init__(err, diagnostics[0].message if diagnostics else "")
        err.diagnostics = tuple(diagnostics)
        return err

    @property
    def code(self) -> str:
        return self.diagnostics[0].code

    def render(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)

    def __str__(self) -> str:
        return self.render()
