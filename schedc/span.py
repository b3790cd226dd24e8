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


def caret_lines(span: Span) -> list[str]:
    """The quoted source line and a caret row under the span (single-line part)."""
    text = span.source.line_text(span.line)
    if not text and span.line > len(span.source.lines()):
        return []
    end = span.end_column if span.end_line == span.line else len(text) + 1
    width = max(1, min(end - span.column, 60))
    start = 0
    if len(text) > 100:  # long lines (CSV rows): show a window around the span
        start = max(0, span.column - 1 - 40)
        shown = text[start : start + 100]
        text = ("..." if start else "") + shown + ("..." if start + 100 < len(text) else "")
        start -= 3 if start else 0
    gutter = f"{span.line:>4} | "
    pad = "".join("\t" if ch == "\t" else " " for ch in text[: span.column - 1 - start])
    return [gutter + text, " " * (len(gutter) - 2) + "| " + pad + "^" * width]


def span_text(span: Span) -> str:
    """The source text a span covers (its first line if it spans several)."""
    lines = span.source.lines()
    if not 1 <= span.line <= len(lines):
        return ""
    line = lines[span.line - 1]
    end = span.end_column - 1 if span.end_line == span.line else len(line)
    return line[span.column - 1 : end]
