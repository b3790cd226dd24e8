"""One error family for everything schedc rejects: a stable code, a message, and where.

`SchedcError` is raised for bad input (syntax, names, parameters, CSV cells, usage); it renders as
`file:line:col: error[CODE]: message` with the source line and a caret. `SchedcErrors` carries
several at once; `OutputError` is one about an output file, which it names. Exit codes used by the CLI live here too, so scripts can rely on them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .span import Span, caret_lines, visible

EXIT_OK = 0  # every check holds
EXIT_FAIL = 1  # a check fails (structure, deadlock, ...)
EXIT_INPUT = 2  # bad input or usage
EXIT_UNKNOWN = 3  # a solver gave up (verifier)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM), handled as Ctrl-C is (schedc/signals.py)
_LAYOUT = "\t\n"  # the control characters a message or a note may hold as such (a grid's rows)


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

    def render(self, severity: str = "error") -> str:
        """The text for a terminal: control characters of the file's name, its lines, the message
        (a `require`'s own) and the notes are shown escaped (`visible`), never sent raw."""
        message = visible(self.message, keep=_LAYOUT)
        if self.span is not None:
            head = f"{visible(str(self.span), keep='')}: {severity}[{self.code}]: {message}"
            body = caret_lines(self.span)
        else:
            prefix = f"{visible(self.where, keep='')}: " if self.where else ""
            head = f"{prefix}{severity}[{self.code}]: {message}"
            body = []
        return "\n".join([head, *body, *(f"  = note: {visible(n, keep=_LAYOUT)}" for n in self.notes)])

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


class OutputError(SchedcError):
    """An output that cannot be written (code `io`): `output` is its path, which `--json` reports
    as the error's `file` in place of the input's."""

    def __init__(self, message: str, output: str):
        super().__init__("io", message, where=output)
        self.output = output
