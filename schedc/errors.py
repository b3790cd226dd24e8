"""One error family for everything schedc rejects: a stable code, a message, and where.

`SchedcError` is raised for bad input (syntax, names, parameters, CSV cells, usage); it renders as
`file:line:col: error[CODE]: message` with the source line and a caret. `SchedcErrors` carries
several at once; `OutputError` is one about an output file, which it names. Exit codes used by the
CLI live here too, so scripts can rely on them, and what every layer's messages share: the "did you
mean" of a near miss (`closest`) and the `too-large` error of a number with too many digits (`integer`).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .span import Span, caret_lines, visible

MAX_DIGITS = 19  # no count or size schedc takes has more digits (2^62 has 19)

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
    omitted: int = 0  # > 0: not a finding but the line standing for this many of `code` left unlisted

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


def closest(name: str, options: Iterable[object]) -> str | None:
    """The option `name` most likely misspells: one that differs in case alone (`NCCL`: `nccl`),
    else the closest by difflib, else None (the "did you mean" of every error that offers one)."""
    import difflib  # (asked on a mistake only)
    named = [str(o) for o in options]
    folded = [o for o in named if o.lower() == name.lower()]
    close = folded or difflib.get_close_matches(name, named, n=1)
    return close[0] if close else None


def integer(text: str, what: str, span: Span | None = None, where: str | None = None) -> int:
    """Decimal digits (maybe signed) as an int; a number with more digits than MAX_DIGITS is a
    `too-large` error about `what`, before Python's own limit on digits could fail less clearly."""
    digits = text.strip().lstrip("+-").lstrip("0")
    if len(digits) > MAX_DIGITS:
        raise SchedcError("too-large", f"{what}: a number with {len(digits):,} digits is too large (at most "
                          f"{MAX_DIGITS})", span, where=where)
    return int(text)
