"""Progress lines for long work (prove, synth, run, check sweeps), by one rule.

A progress line goes to standard error only when that stream is a terminal and the command was not
asked for JSON or quiet (`--json`, `-q`): piped or redirected, a command prints only its results.
"""
from __future__ import annotations

from typing import Callable, TextIO

Progress = Callable[[str], None]


def on_terminal(stream: TextIO) -> bool:
    """Is `stream` an open terminal? (False for pipes, files, in-memory streams and closed streams.)"""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def progress(stream: TextIO, *, quiet: bool = False, prefix: str = "") -> Progress:
    """A function that writes `prefix + line` to `stream` and flushes, when `stream` is a terminal
    and not `quiet`; otherwise one that does nothing."""
    if quiet or not on_terminal(stream):
        return lambda line: None

    def write(line: str) -> None:
        stream.write(prefix + line + "\n")
        stream.flush()
    return write
