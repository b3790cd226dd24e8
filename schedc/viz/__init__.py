"""Pictures of schedules: the timeline (SVG, HTML, PNG), the dependency graph, and the gallery.

`timeline_svg(program, report)` and `timeline_html(program, report)` return text; `render(program,
report, suffix)` returns what `schedc viz -o FILE.suffix` writes (text, or bytes for a PNG). Each
draws what it is given: the caller's report (the caller checks once; nothing here checks) and
simulated timeline (`timeline=`, simulated here only when none is passed). A schedule the
simulator cannot time is drawn in program order with its wait-for cycle. Nothing here writes files
except through the caller (the CLI writes atomically).
"""
from __future__ import annotations

from .rendered import Rendered
from .scene import AGGREGATE_BINS, MAX_BLOCKS, MAX_ROWS, Scene, build_scene

__all__ = ["AGGREGATE_BINS", "MAX_BLOCKS", "MAX_ROWS", "Rendered", "Scene", "build_scene", "check_suffix", "render",
           "timeline_html", "timeline_svg"]


def timeline_svg(program, report, *, timeline=None, arrows: bool = False, overlap: bool = True,
                 links=None, units=None) -> str:
    """The timeline as SVG text, from `report` and `timeline` (simulated here if None);
    `units` (schedc/units.py `Units`) labels times and sizes, as under a model and hardware description."""
    from .svg import render_svg
    return render_svg(build_scene(program, report, timeline=timeline, arrows=arrows, overlap=overlap, links=links,
                                  units=units))


def timeline_html(program, report, *, timeline=None, arrows: bool = False, overlap: bool = True,
                  links=None, units=None) -> str:
    """The timeline as one HTML page, from `report` and `timeline` (simulated here if None)."""
    from .html import render_html
    return render_html(build_scene(program, report, timeline=timeline, arrows=arrows, overlap=overlap, links=links,
                                   units=units))


def render(program, report, suffix: str, *, dag: bool = False, timeline=None, arrows: bool = False,
           overlap: bool = True, links=None, units=None):
    """What to write for an output file ending in `suffix`: (data, note). `data` is str or bytes; a
    dependency graph without graphviz's `dot` comes back as its .dot source, with a note saying so
    (`Rendered.suffix` is then ".dot"), and a PNG timeline without a converter as its SVG (".svg").
    `report` and `timeline` are what the caller computed (a timeline None: simulated here when needed)."""
    suffix = check_suffix(suffix, dag)
    if dag:
        from .dag import render_dag
        return render_dag(program, report, suffix)
    scene = build_scene(program, report, timeline=timeline, arrows=arrows, overlap=overlap, links=links, units=units)
    if suffix == ".html":
        from .html import render_html
        return Rendered(render_html(scene), suffix, unused=scene.unused)
    from .svg import render_svg
    svg = render_svg(scene)
    if suffix == ".svg":
        return Rendered(svg, suffix, unused=scene.unused)
    from .png import can_convert, fallback_note, svg_to_png
    if not can_convert():
        return Rendered(svg, ".svg", fallback_note(), unused=scene.unused)
    return Rendered(svg_to_png(svg), suffix, unused=scene.unused)


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
