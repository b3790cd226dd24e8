"""A timeline SVG as a PNG (through `rsvg-convert` when present, else headless Chromium); the CLI writes it
(schedc/outputs.py)."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import SchedcError
from .browser import find_chromium, remove_folder, run_page


def svg_size(svg: str) -> tuple[int, int]:
    m = re.search(r'<svg[^>]*\swidth="([\d.]+)"[^>]*\sheight="([\d.]+)"', svg)
    if not m:
        raise ValueError("not a schedc SVG: no width and height")
    return int(float(m.group(1)) + 0.999), int(float(m.group(2)) + 0.999)


INSTALL = ("install rsvg-convert (Debian/Ubuntu: apt-get install librsvg2-bin; macOS: brew install librsvg) "
           "or headless Chromium (Debian/Ubuntu: apt-get install chromium)")


def can_convert() -> bool:
    """Whether a PNG can be made here: `rsvg-convert` or headless Chromium is on the PATH."""
    return shutil.which("rsvg-convert") is not None or find_chromium() is not None


def fallback_note() -> str:
    """What the CLI says when it writes the SVG because no converter is installed ({written},
    {requested} filled in by `Rendered.note_for`)."""
    return (f"no PNG converter was found, so the timeline is written as SVG; {INSTALL}, "
            "then run: rsvg-convert --format=png {written} -o {requested}")


def svg_to_png(svg: str) -> bytes:
    rsvg = shutil.which("rsvg-convert")
    if rsvg:
        done = subprocess.run([rsvg, "--format=png", "--background-color=white"], input=svg.encode("utf-8"),
                              capture_output=True, timeout=120, check=False)
        if done.returncode == 0 and done.stdout.startswith(b"\x89PNG"):
            return done.stdout
    if find_chromium() is None:
        raise SchedcError("usage", f"PNG output needs a converter: {INSTALL}; or write -o OUT.svg instead",
                          where="-o")
    width, height = svg_size(svg)
    folder = tempfile.mkdtemp(prefix="schedc-png-")
    try:
        page, shot = Path(folder) / "timeline.svg", Path(folder) / "timeline.png"
        page.write_text(svg, encoding="utf-8")
        run = run_page(page.as_uri(), screenshot=shot, size=(width, height))
        if not shot.is_file():
            raise SchedcError("io", "headless Chromium did not write the screenshot: "
                              + (run.stderr.strip().splitlines() or ["no output"])[-1])
        return shot.read_bytes()
    finally:
        remove_folder(folder)  # after Chromium's group is gone (run_page), whatever ended the run
