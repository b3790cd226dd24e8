"""A picture ready to be written (`Rendered`): what `schedc.viz.render` and the dependency graph
return, with the suffix it is written as and a note for the user when that differs from the one asked.
"""
from __future__ import annotations


class Rendered:
    """A picture ready to be written: its data (str or bytes), its suffix, and a note for the user."""

    def __init__(self, data, suffix: str, note: str | None = None):
        self.data, self.suffix, self.note = data, suffix, note

    def note_for(self, written, requested) -> str | None:
        """The note with the file written and the one asked for filled in."""
        return None if self.note is None else self.note.format(written=written, requested=requested)
