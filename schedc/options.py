"""Values of command-line options that several commands take, parsed once: `--param`,
`--memory-limit`, `--costs`/`--cost`, and time limits in seconds.

`params(["P=4,M=8"])` is `{"P": 4, "M": 8}` (as is `params(["P=4", "M=8"])`); `memory_limit("8")`
is 8.0 for every rank and `memory_limit("0=4,1=3")` is `{0: 4.0, 1: 3.0}`; bad text is a usage
error that names the option.
"""
from __future__ import annotations

import math
import re

from .errors import SchedcError
from .inputs import integer

PARAM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(-?\d+)")


MAX_SECONDS = 86_400


def seconds(value: float, flag: str) -> float:
    """A time limit (`--timeout`, `--time-limit`): finite, positive, at most a day."""
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise SchedcError("usage", f"{flag} {value}: expected seconds in (0, {MAX_SECONDS}]", where=flag)
    return value


def params(pairs: list[str]) -> dict[str, int]:
    """The values of every `--param` (each `NAME=INTEGER`, or several separated by commas:
    `P=4,M=8`); a name given twice is a usage error, not a silent override."""
    out: dict[str, int] = {}
    for text in pairs:
        for part in text.split(","):
            m = PARAM.fullmatch(part.strip())
            if not m:
                raise SchedcError("usage", f"--param {text!r}: expected NAME=INTEGER, e.g. --param P=4 "
                                  "or --param P=4,M=8", where="--param")
            name, value = m.group(1), integer(m.group(2), f"--param {m.group(1)}", where="--param")
            if name in out:
                raise SchedcError("usage", f"--param {name} is given twice ({name}={out[name]} and "
                                  f"{name}={value}); give each parameter once", where="--param")
            out[name] = value
    return out


def costs(files: str | None, settings: list[str], label: str = "the schedule"):
    """The costs of --costs FILE, then each --cost K=V,... (later ones win); None if neither is given
    (`label` names where the costs come from when only --cost is)."""
    if not (files or settings):
        return None
    from .costs import Costs, load_costs, parse_cost_option
    out = load_costs(files) if files else Costs(label)
    for text in settings:
        out = out.then(parse_cost_option(text))
    return out


def memory_limit(text: str | None):
    if text is None:
        return None
    try:
        if "=" not in text:
            out = float(text)
            values = [out]
        else:
            out = {}
            for part in text.split(","):
                rank, value = part.split("=")
                out[int(rank)] = float(value)
            values = list(out.values())
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise ValueError
        return out
    except ValueError:
        raise SchedcError("usage", f"--memory-limit {text!r}: expected a non-negative number or rank=limit "
                          "pairs, e.g. 8 or 0=4,1=3", where="--memory-limit") from None
