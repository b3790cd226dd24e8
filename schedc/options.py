"""Values of command-line options that several commands take, parsed once: `--param`,
`--memory-limit`, `--costs`/`--cost`, and time limits in seconds.

`params(["P=4,M=8"])` is `{"P": 4, "M": 8}` (as is `params(["P=4", "M=8"])`); `memory_limit("8")`
is 8.0 for every rank and `memory_limit("0=4,1=3")` is `{0: 4.0, 1: 3.0}`; under a model and
hardware description (sizes in GiB) `memory_limit("80GiB", sized=True)` is 80.0. Bad text is a
usage error that names the option.
"""
from __future__ import annotations

import math
import re

from .errors import SchedcError
from .inputs import integer

PARAM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(-?[0-9]+)")  # (ASCII digits: not `P=٣`)


MAX_SECONDS = 86_400


def seconds(value: float, flag: str) -> float:
    """A time limit (`--timeout`, `--time-limit`): finite, positive, at most a day. A message shows
    the value as it was typed (`--timeout 0`, not `0.0`; `--timeout 'abc'`: `seconds_option`)."""
    if isinstance(value, str) or not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise SchedcError("usage", f"{flag} {_shown(value)}: expected seconds in (0, {MAX_SECONDS}]", where=flag)
    return float(value)


class Typed(float):
    """A number read from an option, as argparse's `type` gives it: a float that a message shows as
    it was typed (`str`). Pickled, copied or computed with, it is a plain float."""

    text: str

    def __new__(cls, text: str) -> "Typed":
        value = super().__new__(cls, text)
        value.text = text.strip()
        return value

    def __str__(self) -> str:
        return self.text

    def __reduce__(self):
        return float, (float(self),)


class NotANumber(str):
    """An option's text that is not a number, as argparse's `type` gives it, for the command to
    refuse (`seconds`, `units`) with an error that names the option: an input error like any bad
    value (with --json, a JSON error object too), not one of argparse's."""


def _shown(value) -> str:
    """A value as a message shows it: text that is not a number quoted, a number as typed, a whole
    number given from Python as an integer (0, not 0.0)."""
    if isinstance(value, str):
        return repr(str(value))
    if isinstance(value, Typed):
        return str(value)
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def seconds_option(text: str) -> float | NotANumber:
    """argparse's `type` for a time limit: a `Typed` float (checked by `seconds`), or `NotANumber`."""
    try:
        return Typed(text)
    except ValueError:
        return NotANumber(text)


def units_option(text: str) -> int | NotANumber:
    """argparse's `type` for a budget of Z3 resource units: an int (checked by `units`), or `NotANumber`."""
    try:
        return int(text)
    except ValueError:
        return NotANumber(text)


def clock_limit(value: float | None, flag: str) -> float | None:
    """An optional wall-clock guard (`prove --timeout`, `synth --time-limit`, `check --timeout`):
    None (the default: no clock, the command's budgets alone bound it) or `seconds`."""
    return None if value is None else seconds(value, flag)


def units(value: int | None, flag: str) -> int | None:
    """A budget of solver work (`--budget`), in Z3 resource units: None (the command's default) or
    a positive count."""
    if value is not None and (isinstance(value, str) or value < 1):
        raise SchedcError("usage", f"{flag} {_shown(value)}: expected a positive number of Z3 resource units",
                          where=flag)
    return value


def solver_limits(q, whose: str, default_units: int, clock_flag: str, on_clock: str) -> None:
    """`--budget UNITS` (whose solver work, `default_units` unless given) and the wall clock beside it
    (`clock_flag`, off by default), as prove and synth take them; read back with `units` and
    `clock_limit`."""
    q.add_argument("--budget", type=units_option, default=None, metavar="UNITS",
                   help=f"{whose} solver work in Z3 resource units, the same on any machine (default "
                        f"{default_units:,})")
    q.add_argument(clock_flag, type=seconds_option, default=None, metavar="S",
                   help=f"{on_clock} after S seconds on the wall clock (default: no clock; the budget bounds it)")


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


def costs(files: str | None, settings: list[str], label: str = "the schedule", setup=None):
    """The costs of a model and hardware description (`setup`, schedc/hardware.py), then --costs
    FILE, then each --cost K=V,... (later ones win); None if none is given. `label` names a base
    that holds no settings, which `Costs.then` leaves out of the result's `source` (a message about
    costs given only by --cost is at `--cost`, not at `the defaults, --cost`)."""
    if not (files or settings or setup):
        return None
    from .costs import Costs, load_costs, parse_cost_option
    out = Costs(setup.source, derived=setup) if setup is not None else None
    if files:
        out = load_costs(files) if out is None else out.then(load_costs(files))
    out = out or Costs(label)
    for text in settings:
        out = out.then(parse_cost_option(text))
    return out


def memory_limit(text: str | None, sized: bool = False):
    """One limit for every rank (a float) or {rank: limit}. With `sized` (the sizes are GiB, from a
    model and hardware description) a value may carry a unit, `80GiB`, `512MiB`, `80GB`, and a plain
    number is GiB; without, sizes are the schedule's own units and a unit is a usage error."""
    if text is None:
        return None
    try:
        if "=" not in text:
            return _limit(text, text, sized)
        out = {}
        for part in text.split(","):
            rank, value = part.split("=")
            out[int(rank)] = _limit(value, text, sized)
        return out
    except ValueError:
        raise SchedcError("usage", f"--memory-limit {text!r}: expected a non-negative number or rank=limit "
                          "pairs, e.g. 8 or 0=4,1=3", where="--memory-limit") from None


def _limit(value: str, text: str, sized: bool) -> float:
    """One value of --memory-limit (ValueError for text that is not a size at all)."""
    from .units import GIB, size
    if not value.strip() or not any(c.isdigit() for c in value) and value.strip().lower() not in ("inf", "nan"):
        raise ValueError
    q = size(value, f"--memory-limit {text!r}", "usage", "--memory-limit")
    if q.unit is None:
        return q.value
    if not sized:
        raise SchedcError("usage", f"--memory-limit {text!r}: a size in {q.unit} needs sizes in bytes, from a model "
                          "and hardware description (check, sim, compare and viz take --model and --hardware, or "
                          "--setup FILE: docs/units.md); without one, sizes count the schedule's units (one unit: a "
                          "microbatch's activations of a rank-sized chunk), so give a plain number",
                          where="--memory-limit")
    return q.value / GIB
