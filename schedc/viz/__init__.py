"""Pictures of schedules: the timeline (SVG, HTML, PNG), the dependency graph, and the gallery.

`timeline_svg(program, report)` and `timeline_html(program, report)` return text; `render(program,
report, suffix)` returns what `schedc viz -o FILE.suffix` writes (text, or bytes for a PNG). A
schedule the simulator cannot time is drawn in program order with its wait-for cycle. Nothing here
writes files except through the caller (the CLI writes atomically).
"""
from __future__ import annotations

from .scene import AGGREGATE_BINS, MAX_BLOCKS, MAX_ROWS, Scene, build_scene

__all__ = ["AGGREGATE_BINS", "MAX_BLOCKS", "MAX_ROWS", "Rendered", "Scene", "build_scene", "check_suffix", "render",
           "timeline_html", "timeline_svg"]


def timeline_svg(program, report=None, *, arrows: bool = False, overlap: bool = True, links=None) -> str:
    from .svg import render_svg
    return render_svg(build_scene(program, report, arrows=arrows, overlap=overlap, links=links))


def timeline_html(program, report=None, *, arrows: bool = False, overlap: bool = True, links=None) -> str:
    from .html import render_html
    return render_html(build_scene(program, report, arrows=arrows, overlap=overlap, links=links))


def render(program, report, suffix: str, *, dag: bool = False, arrows: bool = False, overlap: bool = True,
           links=None):
    """What to write for an output file ending in `suffix`: (data, note). `data` is str or bytes; a
    dependency graph without graphviz's `dot` comes back as its .dot source, with a note saying so
    (`Rendered.suffix` is then ".dot"), and a PNG timeline without a converter as its SVG (".svg")."""
    suffix = check_suffix(suffix, dag)
    if dag:
        from .dag import render_dag
        return render_dag(program, report, suffix)
    if suffix == ".svg":
        return Rendered(timeline_svg(program, report, arrows=arrows, overlap=overlap, links=links), suffix)
    if suffix == ".html":
        return Rendered(timeline_html(program, report, arrows=arrows, overlap=overlap, links=links), suffix)
    from .png import can_convert, fallback_note, svg_to_png
    svg = timeline_svg(program, report, arrows=arrows, overlap=overlap, links=links)
    if not can_convert():
        return Rendered(svg, ".svg", fallback_note())
    return Rendered(svg_to_png(svg), suffix)


def check_suffix(suffix: str, dag: bool = False) -> str:
    """The output suffix, lower case, if this kind of picture can be written as it (else a usage error)."""
    from ..errors import SchedcError
    suffix = suffix.lower()
    allowed = (".svg", ".png", ".dot") if dag else (".svg", ".html", ".png")
    if suffix not in allowed:
        what = "a dependency graph (--dag)" if dag else "a timeline"
        raise SchedcError("usage", f"cannot write {what} as {suffix or 'a file without a suffix'}; expected "
                          + ", ".join(f"OUT{s}" for s in allowed), where="-o")
    return suffix


class Rendered:
    """A picture ready to be written: its data (str or bytes), its suffix, and a note for the user."""

    def __init__(self, data, suffix: str, note: str | None = None):
        self.data, self.suffix, self.note = data, suffix, note

    def note_for(self, written, requested) -> str | None:
        """The note with the file written and the one asked for filled in."""
        return None if self.note is None else self.note.format(written=written, requested=requested)
