"""Sizes and times with units: `80GiB` and `300GB/s` read, seconds and GiB written.

`size("80GiB", ...)` is 80 * 2**30 bytes; a plain number has no unit (`Quantity.unit` None) and means
whatever unit its reader counts in. Binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB, TB) units
and B, any letter case. `Units` says what a program's times and sizes are counted in, for outputs.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import SchedcError

GIB = 2 ** 30
SIZE_UNITS = {"B": 1, "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9, "TB": 10 ** 12,
              "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "TiB": 2 ** 40}
_BY_LOWER = {k.lower(): v for k, v in SIZE_UNITS.items()}
_QUANTITY = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan)\s*([A-Za-z]*)\s*", re.I)
UNIT_LIST = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"


@dataclass(frozen=True)
class Quantity:
    """A number as given: in bytes when it had a unit (`unit` says which), else as written."""

    value: float
    unit: str | None = None


def size(text: str, what: str, code: str = "usage", where: str | None = None) -> Quantity:
    """`80GiB`, `1.5 GB`, `512mib` (bytes) or a plain number; finite and non-negative. A bad unit or
    number is a `code` error naming `what` (e.g. "--memory-limit '80GiB'")."""
    m = _QUANTITY.fullmatch(text)
    if not m:
        raise SchedcError(code, f"{what}: expected a number, optionally with a unit ({UNIT_LIST}), e.g. 80GiB",
                          where=where)
    from .inputs import Underflow, read_float
    number, unit = read_float(m.group(1)), m.group(2)
    if isinstance(number, Underflow):
        raise SchedcError(code, f"{what}: {number} is too small for a float, and would be read as 0 (write 0 if "
                          "that is meant)", where=where)
    if not math.isfinite(number) or number < 0:
        raise SchedcError(code, f"{what}: expected a finite, non-negative size", where=where)
    if not unit:
        return Quantity(number)
    scale = _BY_LOWER.get(unit.lower())
    if scale is None:
        from .expr import did_you_mean
        raise SchedcError(code, f"{what}: unknown unit '{unit}'; expected one of {UNIT_LIST} (e.g. 80GiB)"
                          f"{did_you_mean(unit, SIZE_UNITS)}", where=where)
    return Quantity(number * scale, next(k for k in SIZE_UNITS if k.lower() == unit.lower()))


def rate(text: str, what: str, code: str = "costs", where: str | None = None) -> float:
    """Bytes per second from `300GB/s` (or a plain number of bytes per second)."""
    body = text.strip()
    if body.lower().endswith("/s"):
        body = body[:-2]
    return size(body, what, code, where).value


@dataclass(frozen=True)
class Units:
    """What a program's times and sizes are counted in, and how outputs label them: `time` and
    `memory` are unit names ("s", "GiB"); `note` says anything a reader of a picture needs."""

    time: str = "s"
    memory: str = "GiB"
    note: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"time": self.time, "memory": self.memory}


def seconds_text(x: float) -> str:
    """A time in seconds as outputs show it: 4 significant digits, then `s`."""
    return f"{x:.4g} s"


def gib_text(x: float) -> str:
    """A size in GiB as outputs show it: 4 significant digits, then `GiB`."""
    return f"{x:.4g} GiB"
