"""Measured traces merged into one (`schedc trace merge`): the Perfetto traces `schedc run --trace`
writes on each node, and the ranks' own event files (`rank<R>.jsonl` under torchrun's `--trace-dir`),
as one trace of the whole job, each message an arrow from its post to its completion, also between
nodes (a message's two ends are found by its training step and value, as `measured_trace` pairs them).

Every input must be a part of one run: inputs whose schedule, parameters, rank count or run id
(whichever both record) differ are refused, naming the two files. Ranks of one host (its name and
boot id: one monotonic clock) are put on that clock, whichever files they come from; only hosts
apart are aligned by the barrier before the first step.
"""
from __future__ import annotations

import json
import math
from typing import Any

from ..errors import SchedcError
from .chrome_trace import measured_trace, pid_of, read_part_counted


def read(name: str, text: str) -> tuple[str, Any]:
    """("trace", a trace's JSON) or ("part", (a rank's event records, lines left out, last line cut)),
    by what `text` holds."""
    stripped = text.lstrip()
    if stripped.startswith("{") and '"traceEvents"' in stripped[:4096]:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise SchedcError("usage", f"{name}: not a trace's JSON ({exc})", where=name) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list) \
                or not isinstance(doc.get("otherData"), dict) or not isinstance(doc["otherData"].get("ranks"), list):
            raise SchedcError("usage", f"{name}: not a trace schedc wrote (no traceEvents and otherData.ranks)",
                              where=name)
        return "trace", doc
    records, skipped, cut = read_part_counted(text)
    head = next((r for r in records if r.get("ev") == "rank" and isinstance(r.get("rank"), int)), None)
    if head is None:
        raise SchedcError("usage", f"{name}: neither a trace (JSON with traceEvents) nor a rank's event file "
                          "(rank<R>.jsonl, whose first line names the rank)", where=name)
    return "part", (records, skipped, cut)


def merge(inputs: list[tuple[str, str]]) -> dict:
    """One trace of every input (`(name, text)`), each rank once: each rank event file first made
    into a trace of its own, then every trace's events together, the ranks of one host on its clock.
    `otherData.unread_lines` says, by file, how many lines of a rank file could not be read."""
    traces: list[tuple[str, dict]] = []
    unread: dict[str, dict] = {}
    for name, text in inputs:
        kind, value = read(name, text)
        if kind == "trace":
            traces.append((name, value))
            continue
        records, skipped, cut = value
        rank = next(r["rank"] for r in records if r.get("ev") == "rank")
        traces.append((name, measured_trace({rank: records})))
        if skipped:
            unread[name] = {"lines": skipped, "last_cut_short": cut}
    _one_run(traces)
    doc = _together(traces)
    doc["otherData"]["unread_lines"] = unread
    return doc


_SAME = (("schedule", "schedule"), ("params", "parameters"), ("world", "rank count"), ("run", "run id"))


def _one_run(traces: list[tuple[str, dict]]) -> None:
    """Refuse inputs that are not parts of one run: what identifies it (the schedule, its parameters,
    the rank count, the run's id), wherever two inputs both record it, must agree."""
    seen: dict[str, tuple[str, Any]] = {}
    for name, doc in traces:
        other = doc["otherData"]
        for key, what in _SAME:
            value = other.get(key)
            if value in (None, ""):
                continue
            if key in seen and seen[key][1] != value:
                first, was = seen[key]
                raise SchedcError("usage", f"{first} and {name} are not parts of one run: {what} "
                                  f"{_shown(key, was)} in {first}, {_shown(key, value)} in {name}", where=name)
            seen.setdefault(key, (name, value))


def _shown(key: str, value: Any) -> str:
    if key == "params" and isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "(none)"
    return str(value)


def _together(traces: list[tuple[str, dict]]) -> dict:
    owner: dict[int, str] = {}
    for name, doc in traces:
        for rank in doc["otherData"]["ranks"]:
            if rank in owner:
                raise SchedcError("usage", f"rank {rank} is in both {owner[rank]} and {name}", where=name)
            owner[rank] = name
    zero = _zeros(traces)
    title = next((e for _, doc in traces for e in doc["traceEvents"] if e.get("ph") == "M" and e.get("pid") == 0),
                 {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "schedc (merged)"}})
    meta: list[dict] = []
    timed: list[dict] = []
    flows = 0
    for _, doc in traces:
        offset, top = flows, 0
        shift = {pid_of(r): round((c["zero"] - zero[(c["host"], c["boot"])]) * 1e6, 3)
                 for c in doc["otherData"].get("clocks", []) for r in c["ranks"]}
        for event in doc["traceEvents"]:
            if event.get("ph") == "M":
                if event.get("pid") != 0:
                    meta.append(event)
                continue
            event = dict(event)
            moved = shift.get(event["pid"], 0.0) if isinstance(event.get("pid"), int) else 0.0
            if moved and "ts" in event:  # onto its host's clock as the other files read it
                event["ts"] = round(event["ts"] + moved, 3)
            if "bind_id" in event:
                top = max(top, event["bind_id"])
                event["bind_id"] += offset
            timed.append(event)
        flows = offset + top
    across = _bind_across(timed, flows)
    timed.sort(key=lambda e: (e.get("ts", 0), 1 if e.get("flow_in") else 0, -e.get("dur", 0)))
    return {"traceEvents": [title, *meta, *timed], "displayTimeUnit": "ms", "otherData": _other(traces, across, zero)}


def _zeros(traces: list[tuple[str, dict]]) -> dict[tuple, float]:
    """Each host's time 0 over all inputs: the earliest its ranks left the starting barrier."""
    zero: dict[tuple, float] = {}
    for _, doc in traces:
        for c in doc["otherData"].get("clocks", []):
            key = (c["host"], c["boot"])
            zero[key] = min(zero.get(key, math.inf), c["zero"])
    return zero


def _bind_across(timed: list[dict], flows: int) -> int:
    """Arrows for messages whose ends are in different inputs (a send posted on one node, received on
    another): a `posted` instant and a `done` instant of one training step and value, each unbound."""
    posted = {_key(e): e for e in timed if e.get("cat") == "posted" and not e.get("flow_out")}
    across = 0
    for done in timed:
        if done.get("cat") != "done" or done.get("flow_in"):
            continue
        out = posted.pop(_key(done), None)
        if out is not None:
            across += 1
            out.update(bind_id=flows + across, flow_out=True)
            done.update(bind_id=flows + across, flow_in=True)
    return across


def _key(event: dict) -> tuple:
    args = event.get("args", {})
    return args.get("train_step"), args.get("value")


def _other(traces: list[tuple[str, dict]], across: int, zero: dict[tuple, float]) -> dict:
    others = [doc["otherData"] for _, doc in traces]
    ranks = sorted(r for o in others for r in o["ranks"])
    listed = {r for o in others for r in o.get("missing_ranks", [])} | set(ranks)
    clocks = [{"host": h, "boot": b, "zero": z,
               "ranks": sorted(r for o in others for c in o.get("clocks", []) if (c["host"], c["boot"]) == (h, b)
                               for r in c["ranks"])} for (h, b), z in sorted(zero.items())]
    hosts = len(zero) + sum(o.get("hosts", 1) for o in others if "clocks" not in o)  # (older traces: no host names)
    identity = {key: next((o[key] for o in others if o.get(key) not in (None, "")), None)
                for key in ("params", "world", "run")}
    return {"schedule": next((o.get("schedule") for o in others if o.get("schedule")), ""),
            **{k: v for k, v in identity.items() if v is not None},
            "source": "measured", "merged": [name for name, _ in traces], "ranks": ranks,
            "missing_ranks": sorted(listed - set(ranks)), "hosts": hosts, "clocks": clocks,
            "clock": "each host's monotonic clock, time 0 when its ranks left the starting barrier",
            "watchdog": [s for o in others for s in o.get("watchdog", [])],
            "stopped": {name: doc["otherData"].get("stopped") for name, doc in traces},
            "messages": sum(o.get("messages", 0) for o in others) + across, "messages_between_inputs": across}
