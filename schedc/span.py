"""Source positions: where in a schedule file (or a PyTorch CSV cell) something came from.

A `Span` is 1-based line and column, with an end, plus the source it points into so an error
can quote the line. CSV cells get a span too, with the rank (row) and step (column) they hold.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Source:
    """A named text: a schedule file, a CSV file, or a command-line argument."""

    name: str
    text: str = field(repr=False)

    def lines(self) -> list[str]:
        """Lines as the parser counts them: split at "\\n" only, a trailing "\\r" dropped."""
        return [ln[:-1] if ln.endswith("\r") else ln for ln in self.text.split("\n")]

    def line_text(self, line: int) -> str:
        lines = self.lines()
        return lines[line - 1] if 1 <= line <= len(lines) else ""


@dataclass(frozen=True, slots=True)
class Span:
    """A range in a source; `rank`/`step` are set for cells of a PyTorch CSV."""

    source: Source = field(repr=False, compare=False)
    line: int
    column: int
    end_line: int
    end_column: int
    rank: int | None = None
    step: int | None = None

    @property
    def file(self) -> str:
        return self.source.name

    def __str__(self) -> str:
        return f"{self.source.name}:{self.line}:{self.column}"

    @staticmethod
    def point(source: Source, line: int, column: int, width: int = 1) -> "Span":
        return Span(source, line, column, line, column + max(width, 1))


# what a terminal acts on instead of showing: C0 controls, DEL, C1 controls, and the bidirectional
# overrides and isolates that reorder a line as it is shown ("Trojan source")
_HIDDEN = frozenset([*range(0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def visible(text: str, keep: str = "\t") -> str:
    """`text` with what a terminal would act on (an escape sequence, a bell, a NUL, a carriage
    return) written out as `\\x1b` (`\\u202e` above 0xff), except the characters in `keep`; what
    diagnostics print of a file, its name and messages quoting it goes through this."""
    if not any(ord(ch) in _HIDDEN for ch in text):
        return text
    return "".join(_shown(ch) if ch not in keep else ch for ch in text)


def _shown(ch: str) -> str:
    code = ord(ch)
    if code not in _HIDDEN:
        return ch
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def caret_lines(span: Span) -> list[str]:
    """The quoted source line and a caret row under the span (single-line part); a control
    character is shown escaped (`visible`), and the caret stays under what it points at."""
    text = span.source.line_text(span.line)
    if not text and span.line > len(span.source.lines()):
        return []
    end = span.end_column if span.end_line == span.line else len(text) + 1
    start = 0
    if len(text) > 100:  # long lines (CSV rows): show a window around the span
        start = max(0, span.column - 1 - 40)
        shown = text[start : start + 100]
        text = ("..." if start else "") + shown + ("..." if start + 100 < len(text) else "")
        start -= 3 if start else 0
    gutter = f"{span.line:>4} | "
    before, under = text[: span.column - 1 - start], text[span.column - 1 - start : end - 1 - start]
    pad = "".join("\t" if ch == "\t" else " " * len(_shown(ch)) for ch in before)
    beyond = max(0, end - span.column - len(under))  # (a span past the line's end)
    width = max(1, min(sum(len(_shown(ch)) for ch in under) + beyond, 60))
    return [gutter + visible(text), " " * (len(gutter) - 2) + "| " + pad + "^" * width]


def span_text(span: Span) -> str:
    """The source text a span covers (its first line if it spans several)."""
    lines = span.source.lines()
    if not 1 <= span.line <= len(lines):
        return ""
    line = lines[span.line - 1]
    end = span.end_column - 1 if span.end_line == span.line else len(line)
    return line[span.column - 1 : end]
