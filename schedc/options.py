"""Values of command-line options that several commands take, parsed once: `--memory-limit`.

`memory_limit("8")` is 8.0 for every rank; `memory_limit("0=4,1=3")` is `{0: 4.0, 1: 3.0}`; bad
text is a usage error that names the option.
"""
from __future__ import annotations

import math

from .errors import SchedcError


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
