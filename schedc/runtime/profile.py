"""The measured profile `schedc run --profile` writes, in the format the simulator's cost model reads.

    {"stages": {"0": {"F": s, "I": s, "W": s, "B": s}, ...}, "messages": {"0": bytes, ...}}

`stages[s]` holds the mean seconds of one action of stage s on one microbatch; `messages[s]` the
bytes of stage s's output (the activation it sends to s+1; the gradient coming back is the same
size), for every stage but the last. A schedule runs either B or I and W for a stage; the missing
ones are derived: B = I + W, or I = W = B / 2. Pure Python.
"""
from __future__ import annotations

import json
import os
import tempfile


def build_profile(per_rank: list[dict]) -> dict:
    """Merge every rank's measurements (`entry.interp_profile`) into the profile JSON."""
    times: dict[str, dict] = {}
    messages: dict[str, int] = {}
    for part in per_rank:
        for stage, ops in part["times"].items():
            times.setdefault(stage, {}).update(ops)
        messages.update(part["messages"])
    stages = {}
    for stage in sorted(times, key=int):
        ops = times[stage]
        f = ops.get("F", 0.0)
        if "I" in ops or "W" in ops:
            i, w = ops.get("I", 0.0), ops.get("W", 0.0)
            b = ops.get("B", i + w)
        else:
            b = ops.get("B", 0.0)
            i = w = b / 2
        stages[stage] = {"F": f, "I": i, "W": w, "B": b}
    return {"stages": stages, "messages": {s: messages[s] for s in sorted(messages, key=int)}}


def write_profile(path: str, profile: dict) -> None:
    """Write atomically (a temporary file renamed into place)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".profile.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(profile, fh, indent=1)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_profile(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
