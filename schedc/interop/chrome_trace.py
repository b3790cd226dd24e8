"""A simulated timeline as Chrome trace / Perfetto JSON (ui.perfetto.dev, chrome://tracing).

One process, one track (tid) per rank; a complete event ("ph": "X") per step, named like `F(2,3)`;
a flow arrow ("ph": "s" then "f", same id) per message from the send (at the compute level, the
producer) to the receive (the consumer); data in flight as async slices when a message takes time;
live activations per rank as counters. `chrome_trace(timeline)` returns the JSON object.
"""
from __future__ import annotations

from ..ir import Compound, describe
from ..outputs import dumps_json
from ..simulate import Timeline

PID = 0


def chrome_trace(timeline: Timeline, *, scale: float = 1e6) -> dict:
    """The trace as a JSON-ready dict. Timestamps are microseconds: simulated time x `scale` (the
    default reads simulated time as seconds)."""
    program = timeline.program

    def us(t: float) -> float:
        return round(t * scale, 3)

    out_of: dict[tuple[int, int], list[int]] = {}
    into: dict[tuple[int, int], list[int]] = {}
    for i, m in enumerate(timeline.messages):
        if m.dst_step >= 0:
            out_of.setdefault((m.src_rank, m.src_step), []).append(i)
            into.setdefault((m.dst_rank, m.dst_step), []).append(i)

    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": PID, "args": {
        "name": f"schedc {program.name} ({timeline.level} level, overlap {'on' if timeline.overlap else 'off'})"}}]
    for r in range(program.num_ranks):
        events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": r, "args": {"name": f"rank {r}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": r, "args": {"sort_index": r}})

    for r, x, st, start, end in timeline.steps():
        ts, te = us(start), us(end)
        parts = st.parts
        if isinstance(st, Compound):
            name = f"{st.kind.value}(" + ", ".join(describe(a) for a in parts) + ")"
            args = {"kind": st.kind.value, "stage": [a.stage for a in parts],
                    "microbatch": [a.microbatch for a in parts], "parts": [describe(a) for a in parts]}
        else:
            name = describe(st)
            args = {"kind": st.op.value, "stage": st.stage, "microbatch": st.microbatch}
        args.update(rank=r, step=x, start=start, end=end)
        events.append({"name": name, "cat": args["kind"], "ph": "X", "pid": PID, "tid": r, "ts": ts,
                       "dur": round(te - ts, 3), "args": args})
        # flow events right after their slice, strictly inside it when it has a length, so every
        # viewer binds them to this slice
        inside = round((ts + te) / 2, 3) if te - ts >= 0.002 else ts
        for i in out_of.get((r, x), ()):
            events.append(_flow("s", i, timeline, r, inside))
        for i in into.get((r, x), ()):
            events.append({**_flow("f", i, timeline, r, inside), "bp": "e"})

    for i, m in enumerate(timeline.messages):
        if m.arrival > m.departure:
            name = _message_name(m)
            common = {"name": name, "cat": "transfer", "pid": PID, "id": len(timeline.messages) + i,
                      "args": {"from_rank": m.src_rank, "to_rank": m.dst_rank}}
            events.append({**common, "ph": "b", "ts": us(m.departure)})
            events.append({**common, "ph": "e", "ts": us(m.arrival)})

    for r in range(program.num_ranks):
        for t, live in timeline.memory(r):
            events.append({"name": f"memory rank {r}", "ph": "C", "pid": PID, "ts": us(t),
                           "args": {"live": live}})

    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"schedule": program.name, "params": dict(program.params), "level": timeline.level,
                          "overlap": timeline.overlap, "makespan": timeline.makespan,
                          "bubble_ratio": timeline.bubble_ratio, "time_scale_us": scale}}


def dumps_trace(timeline: Timeline, *, scale: float = 1e6) -> str:
    return dumps_json(chrome_trace(timeline, scale=scale), separators=(",", ":")) + "\n"


def _message_name(m) -> str:
    kind, s, mb = m.value
    return f"{'activation' if kind == 'act' else 'gradient'} ({s},{mb}) {m.src_rank}->{m.dst_rank}"


def _flow(phase: str, i: int, timeline: Timeline, rank: int, ts: float) -> dict:
    m = timeline.messages[i]
    # viewers pair "s" and "f" by (id, cat, name): keep them equal for both ends
    return {"name": _message_name(m), "cat": "message", "ph": phase, "id": i, "pid": PID, "tid": rank, "ts": ts,
            "args": {"departure": m.departure, "arrival": m.arrival}}
