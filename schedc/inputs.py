"""How schedc reads what users give it: text files, JSON and integers, every failure an error.

A text file is UTF-8, read exactly as written; a byte order mark at its start is skipped (a
schedule's is kept, for its format to judge: a PyTorch CSV refuses it, as torch's reader does), and
a byte that is not UTF-8 is an `io` error at its line and column. JSON that does not parse is an
error at its line and column, as is a number too long for Python to convert (over 4,300 digits).
An integer in an option or a file's key has at most MAX_DIGITS digits (`too-large` otherwise).
A decimal number is read by `read_float`, which tells a number written nonzero but too small for a
float (`1e-400`, read as 0.0) from 0: the readers of cost and size values refuse it.
"""
from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

from .errors import MAX_DIGITS, SchedcError, integer  # noqa: F401  (integer, MAX_DIGITS: read from here too)
from .span import Source, Span

BOM = b"\xef\xbb\xbf"
BOM_TEXT = "\ufeff"  # (the mark decoded, as a schedule's text keeps it)
STDIN, STDIN_NAME = "-", "<stdin>"  # the input that is standard input, and the name its errors give


def read_text(path: Path | str, what: str = "the file", *, keep_bom: bool = False) -> str:
    """The text of a file the user named (`what` says which, in the message if it cannot be read),
    or of a pipe (read whole, once: waiting for its writer as `cat` does); `keep_bom`: `decode`'s."""
    if str(path) == "":
        raise SchedcError("io", f"cannot read {what}: the path is empty", where="input")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SchedcError("io", f"cannot read {what}: {exc.strerror}", where=str(path)) from None
    return decode(data, str(path), keep_bom=keep_bom)


def is_pipe(path: str) -> bool:
    """Whether `path` names a pipe: a FIFO, or a shell's process substitution `<(cmd)` (`/dev/fd/63`)."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def read_stdin(*, keep_bom: bool = False) -> str:
    """Standard input's text (an input given as `-`), read to its end; its errors name `<stdin>`;
    `keep_bom`: `decode`'s."""
    stream = getattr(sys.stdin, "buffer", None)
    try:
        data = stream.read() if stream is not None else sys.stdin.read().encode("utf-8")
    except OSError as exc:
        raise SchedcError("io", f"cannot read standard input: {exc.strerror}", where=STDIN_NAME) from None
    return decode(data, STDIN_NAME, keep_bom=keep_bom)


def decode(data: bytes, name: str, *, keep_bom: bool = False) -> str:
    """`data` as text (no newline translation), a leading byte order mark dropped, or with
    `keep_bom` kept as U+FEFF (a schedule's text: its format says what the mark means, `skip_bom`)."""
    body = data[len(BOM):] if data.startswith(BOM) else data
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:  # (located in the text after the mark, as an editor shows it)
        raise _not_utf8(body, exc.start, name) from None
    return BOM_TEXT + text if keep_bom and body is not data else text


def skip_bom(text: str) -> str:
    """`text` without the byte order mark it starts with, if it does (what `decode` drops)."""
    return text[1:] if text.startswith(BOM_TEXT) else text


def _not_utf8(data: bytes, at: int, name: str) -> SchedcError:
    """The error for the first byte that is not UTF-8 (at offset `at`), at its line and column."""
    line_start = data.rfind(b"\n", 0, at) + 1
    line = data.count(b"\n", 0, at) + 1
    column = len(data[line_start:at].decode("utf-8")) + 1  # the text before it decodes: it is the first
    source = Source(name, data.decode("utf-8", errors="replace"))
    return SchedcError("io", f"the file is not UTF-8 text: byte 0x{data[at]:02x} is not UTF-8",
                       Span.point(source, line, column))


class Underflow(float):
    """What `read_float` gives for a number written nonzero that is too small for a float (`1e-400`):
    0.0, which prints as written (`text`), for its reader to refuse where it can point at the key."""

    text: str

    def __new__(cls, text: str) -> "Underflow":
        value = super().__new__(cls, 0.0)
        value.text = text
        return value

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


_MANTISSA_DIGIT = re.compile(r"[1-9]")


def read_float(text: str) -> float:
    """`float(text)` (a ValueError for text that is not a number), except that a number written
    nonzero which a float rounds to 0 (`1e-400`, `0.` and 400 zeros and a 1) is an `Underflow`, not
    0.0: a positive cost read as zero would mean something else (a bandwidth of 0 is infinite). The
    one reader of decimal numbers for costs and sizes (--cost, cost files, profiles, sizes with
    units, a schedule's decimals), and the `parse_float` of the readers of cost and hardware files."""
    value = float(text)
    if value == 0 and _MANTISSA_DIGIT.search(re.split(r"[eE]", text.strip(), maxsplit=1)[0]):
        return Underflow(text.strip())
    return value


def loads_json(text: str, name: str, code: str, costs: bool = False):
    """The JSON value in `text` (from the file `name`; with `costs`, its decimals read by
    `read_float`, for the reader to refuse an `Underflow`); what is not JSON is a `code` error, and so
    is a string holding half a surrogate pair (`"\\ud800"`: no character, and no UTF-8 for it). The
    halves U+DC80..U+DCFF are let through: Python's name for a byte that is not UTF-8 (a file name
    such as b"\\xff.csv"), which it writes back as that byte."""
    try:
        value = json.loads(text, parse_float=read_float if costs else None)
    except json.JSONDecodeError as exc:
        raise SchedcError(code, f"not JSON: {exc.msg}",
                          Span.point(Source(name, text), exc.lineno, exc.colno)) from None
    except RecursionError:
        raise SchedcError(code, "the JSON is nested too deeply to read", where=name) from None
    except ValueError:  # a number past Python's limit on converting digits to an int
        raise too_long_number(text, name, code) from None
    if _SURROGATE.search(text):  # (a scan in C; the escapes are walked only when there is one)
        _refuse_lone_surrogate(text, name, code)
    return value


_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
_RAW_SURROGATE = re.compile(r"[\ud800-\udc7f]")  # (a text given as a str, not read from a file, can hold one)
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)


def _refuse_lone_surrogate(text: str, name: str, code: str) -> None:
    """A `code` error at the first half of a surrogate pair in `text` that stands alone."""
    lone = _RAW_SURROGATE.search(text) or _lone_surrogate(text)
    if lone is None:
        return
    line = text.count("\n", 0, lone.start()) + 1
    column = lone.start() - (text.rfind("\n", 0, lone.start()) + 1) + 1
    shown = lone.group(0).encode("ascii", "backslashreplace").decode()
    quoted = Source(name, _RAW_SURROGATE.sub("\ufffd", text))  # (the caret line must print too)
    raise SchedcError(code, f"a string holds half a surrogate pair ({shown}): no character, and no UTF-8 text "
                      "can hold it", Span.point(quoted, line, column, len(lone.group(0))))


def _lone_surrogate(text: str) -> re.Match | None:
    """The first `\\uD800`-`\\uDC7F` escape of JSON `text` (which parsed: each backslash opens an
    escape) that is not half of a high-low pair, or None."""
    high = None  # a high half waiting for its low half
    for m in _ESCAPE.finditer(text):
        unit = int(m.group(1), 16) if m.group(1) else -1
        if high is not None:
            if 0xDC00 <= unit <= 0xDFFF and m.start() == high.end():
                high = None
                continue
            return high
        if 0xDC00 <= unit <= 0xDC7F:
            return m
        if 0xD800 <= unit <= 0xDBFF:
            high = m
    return high


def too_long_number(text: str, name: str, code: str) -> SchedcError:
    """The error for a number with more digits than Python converts, at the first such number."""
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
    found = re.search(r"\d{%d,}" % (limit + 1), text)
    message = f"a number has more than {limit:,} digits"
    if found is None:
        return SchedcError(code, message, where=name)
    source = Source(name, text)
    line = text.count("\n", 0, found.start()) + 1
    column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
    return SchedcError(code, message, Span.point(source, line, column, 12))
