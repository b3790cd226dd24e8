"""Headless Chromium, run the one safe way: screenshot a page, or read its DOM and console.

Used to turn a timeline SVG into a PNG when `rsvg-convert` is absent, and by the tests that open
the HTML report. Every run gets a fresh profile folder (and TMPDIR), no network services, no sandbox when run
as root (Chromium refuses to start otherwise), and a timeout; it runs in a process group of its
own, killed whole on the way out (an interrupt or SIGTERM too), and its profile folder is removed.
"""
from __future__ import annotations

import os
import shutil
import signal
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
    """Open `url` (a file:// URL) headless; write a PNG screenshot and/or return the DOM and log.
    However it ends (done, the timeout, Ctrl-C or SIGTERM), no process of Chromium's is left
    running and its profile folder is gone."""
    binary = find_chromium()
    if binary is None:
        raise SchedcError("usage", "headless Chromium is not installed (Debian/Ubuntu: apt-get install "
                          "chromium); it is needed for PNG output unless rsvg-convert (librsvg2-bin) is present")
    # its TMPDIR (where it leaves org.chromium.Chromium.* when killed) and its profile; a short name,
    # as the Unix socket Chromium makes in its TMPDIR may have a path of 107 bytes at most
    work = tempfile.mkdtemp(prefix="schedc-")
    try:
        profile = os.path.join(work, "profile")
        os.mkdir(profile)
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
        return _run_group(argv, dict(os.environ, TMPDIR=work), timeout)
    finally:
        remove_folder(work)


def _run_group(argv: list[str], env: dict[str, str], timeout: float) -> PageRun:
    """Run `argv` as the leader of a process group of its own (Chromium's renderer, GPU, zygote and
    crash-handler processes join it), then kill whatever is left of the group, however the run
    ended; the leader is reaped."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", env=env, start_new_session=True)
    except OSError as exc:  # SCHEDC_CHROMIUM names a file that cannot run
        raise SchedcError("io", f"cannot start headless Chromium ({argv[0]}): {exc.strerror or exc}") from None
    with proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SchedcError("io", f"headless Chromium did not finish within {timeout:g} s") from None
        finally:
            kill_group(proc)
    return PageRun(proc.returncode, out, err)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to every process in `proc`'s group (it leads it), then wait for `proc` itself."""
    if hasattr(os, "killpg"):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # the group is empty: everything has ended
    proc.kill()
    proc.wait()


def remove_folder(folder: str, attempts: int = 5) -> None:
    """Remove `folder` and what is in it; tried again while it is still there (a process just
    killed may have created one last file as the first removal ran)."""
    for _ in range(attempts):
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.lexists(folder):
            return
