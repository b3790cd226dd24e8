"""Measured traces merged into one (`schedc trace merge`): the Perfetto traces `schedc run --trace`
writes on each node, and the ranks' own event files (`rank<R>.jsonl` under torchrun's `--trace-dir`),
as one trace of the whole job, each message an arrow from its post to its completion, also between
nodes (a message's two ends are found by its training step and value, as `measured_trace` pairs them).
"""
from __future__ import annotations

import json
from typing import Any

from ..errors import SchedcError
from .chrome_trace import measured_trace, read_part


def read(name: str, text: str) -> tuple[str, Any]:
    """("trace", a trace's JSON) or ("part", a rank's event records), by what `text` holds."""
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
    records = read_part(text)
    head = next((r for r in records if r.get("ev") == "rank" and isinstance(r.get("rank"), int)), None)
    if head is None:
        raise SchedcError("usage", f"{name}: neither a trace (JSON with traceEvents) nor a rank's event file "
                          "(rank<R>.jsonl, whose first line names the rank)", where=name)
    return "part", records


def merge(inputs: list[tuple[str, str]]) -> dict:
    """One trace of every input (`(name, text)`): the rank event files first made into one trace (their
    hosts aligned as `schedc run` aligns them), then every trace's events together, each rank once."""
    traces: list[tuple[str, dict]] = []
    parts: dict[int, list[dict]] = {}
    part_names: dict[int, str] = {}
    for name, text in inputs:
        kind, value = read(name, text)
        if kind == "trace":
            traces.append((name, value))
            continue
        rank = next(r["rank"] for r in value if r.get("ev") == "rank")
        if rank in parts:
            raise SchedcError("usage", f"rank {rank} is in both {part_names[rank]} and {name}", where=name)
        parts[rank], part_names[rank] = value, name
    if parts:
        traces.append((", ".join(part_names[r] for r in sorted(parts)), measured_trace(parts)))
    return _together(traces)


def _together(traces: list[tuple[str, dict]]) -> dict:
    owner: dict[int, str] = {}
    for name, doc in traces:
        for rank in doc["otherData"]["ranks"]:
            if rank in owner:
                raise SchedcError("usage", f"rank {rank} is in both {owner[rank]} and {name}", where=name)
            owner[rank] = name
    title = next((e for _, doc in traces for e in doc["traceEvents"] if e.get("ph") == "M" and e.get("pid") == 0),
                 {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "schedc (merged)"}})
    meta: list[dict] = []
    timed: list[dict] = []
    flows = 0
    for _, doc in traces:
        offset, top = flows, 0
        for event in doc["traceEvents"]:
            if event.get("ph") == "M":
                if event.get("pid") != 0:
                    meta.append(event)
                continue
            event = dict(event)
            if "bind_id" in event:
                top = max(top, event["bind_id"])
                event["bind_id"] += offset
            timed.append(event)
        flows = offset + top
    across = _bind_across(timed, flows)
    timed.sort(key=lambda e: (e.get("ts", 0), 1 if e.get("flow_in") else 0, -e.get("dur", 0)))
    return {"traceEvents": [title, *meta, *timed], "displayTimeUnit": "ms", "otherData": _other(traces, across)}


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


def _other(traces: list[tuple[str, dict]], across: int) -> dict:
    others = [doc["otherData"] for _, doc in traces]
    ranks = sorted(r for o in others for r in o["ranks"])
    listed = {r for o in others for r in o.get("missing_ranks", [])} | set(ranks)
    return {"schedule": next((o.get("schedule") for o in others if o.get("schedule")), ""),
            "source": "measured", "merged": [name for name, _ in traces], "ranks": ranks,
            "missing_ranks": sorted(listed - set(ranks)), "hosts": sum(o.get("hosts", 1) for o in others),
            "clock": "each host's monotonic clock, time 0 when its ranks left the starting barrier",
            "watchdog": [s for o in others for s in o.get("watchdog", [])],
            "stopped": {name: doc["otherData"].get("stopped") for name, doc in traces},
            "messages": sum(o.get("messages", 0) for o in others) + across, "messages_between_inputs": across}
