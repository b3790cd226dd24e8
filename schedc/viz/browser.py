"""Headless Chromium, run the one safe way: screenshot a page, or read its DOM and console.

Used to turn a timeline SVG into a PNG when `rsvg-convert` is absent, and by the tests that open
the HTML report. Every run gets a fresh profile folder, no network services, no sandbox when run
as root (Chromium refuses to start otherwise), and a timeout.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import SchedcError

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_S = 90.0


def find_chromium() -> str | None:
    override = os.environ.get("SCHEDC_CHROMIUM")
    if override:
        return shutil.which(override) or (override if Path(override).is_file() else None)
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass(frozen=True)
class PageRun:
    returncode: int
    stdout: str  # the DOM, with --dump-dom
    stderr: str  # Chromium's log, console messages included ("CONSOLE" lines)

    @property
    def console(self) -> list[str]:
        """What the page wrote to its console, errors included (Chromium logs them as CONSOLE)."""
        return [ln for ln in self.stderr.splitlines() if ":CONSOLE" in ln]


def run_page(url: str, *, screenshot: Path | None = None, dump_dom: bool = False,
             size: tuple[int, int] = (1400, 900), timeout: float = TIMEOUT_S) -> PageRun:
    """Open `url` (a file:// URL) headless; write a PNG screenshot and/or return the DOM and log."""
    binary = find_chromium()
    if binary is None:
        raise SchedcError("usage", "headless Chromium is not installed (Debian/Ubuntu: apt-get install "
                          "chromium); it is needed for PNG output unless rsvg-convert (librsvg2-bin) is present")
    with tempfile.TemporaryDirectory(prefix="schedc-chromium-") as profile:
        argv = [binary, "--headless", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
                "--hide-scrollbars", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                f"--window-size={int(size[0])},{int(size[1])}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            argv.append("--no-sandbox")
        if screenshot is not None:
            argv.append(f"--screenshot={screenshot}")
        if dump_dom:
            argv.append("--dump-dom")
        argv.append(url)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, errors="replace", check=False)
        except subprocess.TimeoutExpired:
            raise SchedcError("io", f"headless Chromium did not finish within {timeout:g} s") from None
    return PageRun(done.returncode, done.stdout, done.stderr)
