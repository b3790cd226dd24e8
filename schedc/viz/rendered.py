"""A picture ready to be written (`Rendered`): what `schedc.viz.render` and the dependency graph
return, with the suffix it is written as and a note for the user when that differs from the one asked.
"""
from __future__ import annotations

from collections.abc import Sequence


class Rendered:
    """A picture ready to be written: its data (str or bytes), its suffix, and a note for the user."""

    def __init__(self, data, suffix: str, note: str | None = None, unused: Sequence[str] = ()):
        self.data, self.suffix = data, suffix
        self.unused = tuple(unused)  # options the picture could not apply, each said with why
        self._template = note  # ({written} and {requested} filled in by `note_for`)
        self.note = "\n".join([*self.unused, *([note] if note else [])]) or None

    def note_for(self, written, requested) -> str | None:
        """The note with the file written and the one asked for filled in: one line for each option
        not applied, then the format's note; lines after the first prefixed as the CLI prefixes it."""
        lines = [*self.unused, *([self._template.format(written=written, requested=requested)] if self._template else [])]
        return "\nschedc: ".join(lines) or None
