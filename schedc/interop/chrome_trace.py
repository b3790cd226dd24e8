"""Timelines as Chrome trace / Perfetto JSON (ui.perfetto.dev): simulated (`chrome_trace`) or measured
by `schedc run --trace` (`measured_trace`), in one layout, so the two open side by side.

Each rank is a process, `rank R`, with two tracks: `compute` (F, B, I, W, OVERLAP_F_B; in a run also
make_batch and the optimizer step) and `communication` (the posting of each send and receive, named
as the action; `wait X` while the rank is blocked on a message; UNSHARD, RESHARD, REDUCE_GRAD; and two
instants per message, `SEND_F(0,1) posted` when its send is posted and `RECV_F(1,1) done` when its
receive completes). A compute-level program shows the messages its lowering adds, under the same
names. Every message is a flow arrow from its `posted` instant to its `done` instant (flow events v2:
`bind_id` with `flow_out` / `flow_in`; viewers draw from the end of the first slice to the start of
the second, and both are instants, so the arrow runs exactly from the post to the completion and
never back in time). Live memory per rank is a counter. Timestamps are microseconds.
"""
from __future__ import annotations

import json
import math
from typing import Iterable

from ..errors import SchedcError
from ..ir import COMM, COMPUTE, RECVS, SENDS, Compound, Program, describe
from ..outputs import dumps_json
from ..rules.deps import delivers, message, needs, payload, produces, stages_of
from ..timeline import Timeline

COMPUTE_TRACK, COMM_TRACK = 0, 1
TRACK_NAMES = ("compute", "communication")
_EPS = 1e-12


def pid_of(rank: int) -> int:
    """The trace's process id of a rank (1-based: viewers treat pid 0 as the idle process)."""
    return rank + 1


def tid_of(rank: int, track: int) -> int:
    """The thread id of one of a rank's tracks, unique over the whole trace."""
    return 2 * rank + 1 + track


class _Trace:
    """The events of one trace: metadata for R ranks, slices, flows; times in the source's unit."""

    def __init__(self, title: str, ranks: Iterable[int], scale: float):
        self.scale = scale
        self.events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": title}}]
        self.meta: list[dict] = []
        for r in ranks:
            self.meta.append({"name": "process_name", "ph": "M", "pid": pid_of(r), "args": {"name": f"rank {r}"}})
            self.meta.append({"name": "process_sort_index", "ph": "M", "pid": pid_of(r), "args": {"sort_index": r}})
            for track, name in enumerate(TRACK_NAMES):
                self.meta.append({"name": "thread_name", "ph": "M", "pid": pid_of(r), "tid": tid_of(r, track),
                                  "args": {"name": name}})
                self.meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid_of(r), "tid": tid_of(r, track),
                                  "args": {"sort_index": track}})
        self.timed: list[dict] = []
        self._flows = 0

    def us(self, t: float) -> float:
        return round(t * self.scale, 3)

    def slice(self, rank: int, track: int, name: str, cat: str, t0: float, t1: float, args: dict) -> dict:
        ts, te = self.us(t0), self.us(max(t0, t1))
        event = {"name": name, "cat": cat, "ph": "X", "pid": pid_of(rank), "tid": tid_of(rank, track), "ts": ts,
                 "dur": round(te - ts, 3), "args": {"rank": rank, **args}}
        self.timed.append(event)
        return event

    def flow(self, out: dict, into: dict) -> None:
        """An arrow from the end of slice `out` to the start of slice `into`."""
        self._flows += 1
        out.update(bind_id=self._flows, flow_out=True)
        into.update(bind_id=self._flows, flow_in=True)

    def finish(self, other: dict) -> dict:
        # time order; at equal times an arrow's first slice before its second (importers bind a flow's
        # end only to a flow already begun), and a slice before the slices it holds
        self.timed.sort(key=lambda e: (e["ts"], 1 if e.get("flow_in") else 0, -e.get("dur", 0)))
        return {"traceEvents": self.events + self.meta + self.timed, "displayTimeUnit": "ms", "otherData": other}


# ---- simulated ----
def chrome_trace(timeline: Timeline, *, scale: float = 1e6) -> dict:
    """The simulated timeline as a JSON-ready dict. Timestamps are microseconds: simulated time x
    `scale` (the default reads simulated time as seconds)."""
    program = timeline.program
    tr = _Trace(f"schedc {program.name} (simulated, {timeline.level} level, overlap "
                f"{'on' if timeline.overlap else 'off'})", range(program.num_ranks), scale)
    messages = list(timeline.messages)
    names = [_names(timeline, m) for m in messages]
    arriving: list[dict] = [{} for _ in range(program.num_ranks)]  # rank -> value -> the message bringing it
    sends: list[dict] = [{} for _ in range(program.num_ranks)]  # compute level: rank -> step -> its messages
    for i, m in enumerate(messages):
        arriving[m.dst_rank][m.value] = i
        if timeline.level == "compute":
            sends[m.src_rank].setdefault(m.src_step, []).append(i)
    for r in range(program.num_ranks):
        _rank_steps(tr, timeline, r, messages, names, arriving[r], sends[r])
    _messages(tr, timeline, messages, names)
    for r in range(program.num_ranks):
        for t, live in timeline.memory(r):
            tr.timed.append({"name": f"memory rank {r}", "ph": "C", "pid": pid_of(r), "ts": tr.us(t),
                             "args": {"live": live}})
    return tr.finish({"schedule": program.name, "params": dict(program.params), "source": "simulated",
                      "level": timeline.level, "overlap": timeline.overlap, "makespan": timeline.makespan,
                      "bubble_ratio": timeline.bubble_ratio, "time_scale_us": scale, "messages": len(messages)})


def _rank_steps(tr: _Trace, timeline: Timeline, r: int, messages: list, names: list, arriving: dict,
                sends: dict) -> None:
    """One rank's steps: compute slices, the posting of its sends and receives, its waits."""
    program = timeline.program
    starts, ends = timeline.start[r], timeline.end[r]
    posts = timeline.posted[r] if timeline.posted else [0.0] * len(starts)
    free = 0.0  # when the rank was released by its previous step
    for x, st in enumerate(program.ranks[r]):
        start, end = starts[x], ends[x]
        base = {"step": x, "start": start, "end": end}
        if all(a.op in COMPUTE for a in st.parts):
            came = [arriving[v] for a in st.parts for v in needs(a, stages_of(program)) if v in arriving]
            if came and start > free + _EPS:  # idle: waiting for the input that came last
                last = max(came, key=lambda i: messages[i].arrival)
                tr.slice(r, COMM_TRACK, f"wait {names[last][1]}", "wait", free, start,
                         {"step": x, "message": _value_text(messages[last].value)})
            name, args = _step_name(st)
            tr.slice(r, COMPUTE_TRACK, name, args["kind"], start, end, {**args, **base})
            free = end
            for i in sends.get(x, ()):  # compute level: the output leaves as its lowering sends it
                m = messages[i]
                tr.slice(r, COMM_TRACK, names[i][0], "post", end, posts[x],
                         {**_message_args(names[i][0], m), "step": x})
                free = max(free, posts[x])
                if not timeline.overlap and m.arrival > posts[x]:  # held until it has arrived
                    tr.slice(r, COMM_TRACK, f"wait {names[i][0]}", "wait", posts[x], m.arrival, {"step": x})
                    free = max(free, m.arrival)
        elif all(a.op in COMM for a in st.parts):
            for a in st.parts:
                tr.slice(r, COMM_TRACK, describe(a), "post", start, posts[x],
                         {"kind": a.op.value, "stage": a.stage, "microbatch": a.microbatch,
                          "group": isinstance(st, Compound), **base})
            if end > posts[x] + _EPS:  # overlap off: the rank is held until its messages have arrived
                tr.slice(r, COMM_TRACK, f"wait {_step_name(st)[0]}", "wait", posts[x], end, {"step": x})
            free = end
        else:  # UNSHARD, RESHARD, REDUCE_GRAD: collectives, each over its span (beside the rank's compute)
            for a in st.parts:
                tr.slice(r, COMM_TRACK, describe(a), "collective", start, end, {"kind": a.op.value, "stage": a.stage,
                                                                               **base})
            free = max(free, start)


def _messages(tr: _Trace, timeline: Timeline, messages: list, names: list) -> None:
    """Each message: the instant its send is posted, the instant its receive completes, the arrow
    between them, and the data in flight (an async slice on the receiving rank)."""
    for i, m in enumerate(messages):
        p = timeline.posted[m.src_rank][m.src_step] if timeline.posted else m.departure
        sent = tr.slice(m.src_rank, COMM_TRACK, f"{names[i][0]} posted", "posted", p, p,
                        {**_message_args(names[i][0], m), "posted": p, "step": m.src_step})
        where = {"step": m.dst_step} if timeline.level == "comms" else {"consumer_step": m.dst_step}
        done = tr.slice(m.dst_rank, COMM_TRACK, f"{names[i][1]} done", "done", m.arrival, m.arrival,
                        {**_message_args(names[i][1], m), "departure": m.departure, "arrival": m.arrival, **where})
        tr.flow(sent, done)
        if m.arrival > m.departure:
            common = {"name": f"{_value_text(m.value)} {m.src_rank}->{m.dst_rank}", "cat": "transfer",
                      "pid": pid_of(m.dst_rank), "id": i + 1, "args": {"from_rank": m.src_rank, "to_rank": m.dst_rank}}
            tr.timed.append({**common, "ph": "b", "ts": tr.us(m.departure)})
            tr.timed.append({**common, "ph": "e", "ts": tr.us(m.arrival)})


# Steps a trace may draw: each takes about 4.5 events, 950 bytes of the file and 6.6 KB of memory while
# the trace is made (1F1B at P=64, M=1024: 131,072 steps, 124 MB, 0.87 GB, 7.7 s); a job's replicas all count
MAX_TRACE_STEPS = 250_000


def check_trace_size(program: Program) -> None:
    """A `too-large` error, before anything is timed, when the trace of `program` (every replica of a
    job) would draw more than MAX_TRACE_STEPS steps."""
    from ..verify.mesh import flat_job
    steps = flat_job(program).num_actions  # (every replica's: each list counted once, as the simulator counts)
    if steps > MAX_TRACE_STEPS:
        raise SchedcError("too-large", f"a trace of {program.name} would draw {steps:,} steps, more than the "
                          f"{MAX_TRACE_STEPS:,} a trace may hold (docs/limits.md; at the limit about 240 MB): "
                          "trace fewer microbatches, ranks or replicas", where="--trace")


def dumps_trace(timeline: Timeline, *, scale: float = 1e6) -> str:
    return dumps_json(chrome_trace(timeline, scale=scale), separators=(",", ":")) + "\n"


def _step_name(st) -> tuple[str, dict]:
    """`F(2,3)` or `OVERLAP_F_B(F(0,1), B(0,0))`, and the step's args."""
    if isinstance(st, Compound):
        parts = st.parts
        return (f"{st.kind.value}(" + ", ".join(describe(a) for a in parts) + ")",
                {"kind": st.kind.value, "stage": [a.stage for a in parts],
                 "microbatch": [a.microbatch for a in parts], "parts": [describe(a) for a in parts]})
    return describe(st), {"kind": st.op.value, "stage": st.stage, "microbatch": st.microbatch}


def _names(timeline: Timeline, m) -> tuple[str, str]:
    """The send and the receive that carry message m, as the program (or its lowering) names them."""
    program = timeline.program
    src, dst = program.ranks[m.src_rank][m.src_step], None
    if timeline.level == "compute":
        made = next(a for a in src.parts if produces(a) == m.value)
        pair = message(made, program.placement, stages_of(program))
        assert pair is not None  # m crosses ranks, so its producer has a remote consumer: a (send, receive)
        return describe(pair[0]), describe(pair[1])
    dst = program.ranks[m.dst_rank][m.dst_step]
    send = next((a for a in src.parts if a.op in SENDS and payload(a) == m.value), src.parts[0])
    recv = next((a for a in dst.parts if a.op in RECVS and delivers(a) == m.value), dst.parts[0])
    return describe(send), describe(recv)


def _message_args(name: str, m) -> dict:
    return {"kind": name.split("(")[0], "value": _value_text(m.value), "from_rank": m.src_rank, "to_rank": m.dst_rank}


def _value_text(value) -> str:
    kind, s, mb = value
    return f"{'activation' if kind == 'act' else 'gradient'} ({s},{mb})"


# ---- measured ----
_FIELDS = {"rank": ("host", "sync", "schedule"), "compute": ("k", "x", "name", "t0", "t1"),
           "phase": ("k", "name", "t0", "t1"), "post": ("k", "x", "name", "t0", "t1", "value"),
           "wait": ("k", "x", "name", "t0", "t1"), "done": ("k", "x", "name", "t", "value"),
           "collective": ("k", "x", "name", "t0", "t1"), "stop": ("t", "report", "name", "since", "kind")}


def read_part(text: str) -> list[dict]:
    """One rank's event lines (schedc/runtime/trace.py); a line cut short by a stop, or one this
    reader does not know, is left out (`read_part_counted` also says how many)."""
    return read_part_counted(text)[0]


def read_part_counted(text: str) -> tuple[list[dict], int, bool]:
    """`read_part`'s records, the number of lines left out (blank lines aside), and whether the
    last of them is the file's last line cut short (no line end: the file was truncated mid-line)."""
    records = []
    skipped, cut = 0, False
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        ev = record.get("ev") if isinstance(record, dict) else None  # (any JSON value: a list is not a key)
        if isinstance(ev, str) and ev in _FIELDS and all(key in record for key in _FIELDS[ev]):
            records.append(record)
        else:
            skipped += 1
            cut = i == len(lines) - 1 and not text.endswith(("\n", "\r"))
    return records, skipped, cut


def measured_trace(parts: dict[int, list[dict]], *, title: str = "", stopped: dict | None = None) -> dict:  # noqa: C901
    """The trace of a run from its ranks' event lines (`read_part`), by rank. The ranks of one host
    share its monotonic clock; each host's time 0 is when its ranks left the barrier they pass
    together at the start. `stopped` (from the launcher: which ranks ended how) goes to otherData."""
    found = {r: next((rec for rec in recs if rec["ev"] == "rank"), None) for r, recs in parts.items()}
    heads = {r: head for r, head in found.items() if head is not None}
    ranks = sorted(heads)
    origin: dict[tuple, float] = {}  # (host name, boot id): the ranks reading one clock
    for r in ranks:
        host = (heads[r]["host"], heads[r].get("boot", ""))
        origin[host] = min(origin.get(host, math.inf), heads[r]["sync"])
    schedule = next((heads[r]["schedule"] for r in ranks), "")
    same = {key: next((heads[r][key] for r in ranks if key in heads[r]), None) for key in ("params", "run", "ranks")}
    tr = _Trace(title or f"schedc {schedule} (measured by schedc run)", ranks, 1e6)
    sends: dict[tuple, dict] = {}
    completions: dict[tuple, dict] = {}
    stops = []
    for r in ranks:
        zero = origin[(heads[r]["host"], heads[r].get("boot", ""))]
        for rec in parts[r]:
            ev = rec["ev"]
            args = {"train_step": rec.get("k"), "step": rec.get("x")}
            if ev == "compute":
                tr.slice(r, COMPUTE_TRACK, rec["name"], rec["name"].split("(")[0], rec["t0"] - zero, rec["t1"] - zero,
                         args)
            elif ev == "phase":
                tr.slice(r, COMPUTE_TRACK, rec["name"], "phase", rec["t0"] - zero, rec["t1"] - zero,
                         {"train_step": rec.get("k")})
            elif ev == "post":
                value = tuple(rec["value"])
                kind = rec["name"].split("(")[0]
                slice_ = tr.slice(r, COMM_TRACK, rec["name"], "post", rec["t0"] - zero, rec["t1"] - zero,
                                  {**args, "kind": kind, "value": _value_text(value), "peer": rec.get("peer")})
                if kind.startswith("SEND"):  # posted when the data's send was issued
                    at = rec.get("at", rec["t0"]) - zero
                    sends[(rec["k"], value)] = tr.slice(r, COMM_TRACK, f"{rec['name']} posted", "posted", at, at,
                                                        slice_["args"])
            elif ev == "wait":
                tr.slice(r, COMM_TRACK, rec["name"], "wait", rec["t0"] - zero, rec["t1"] - zero, args)
            elif ev == "done":
                value = tuple(rec["value"])
                completions[(rec["k"], value)] = tr.slice(r, COMM_TRACK, rec["name"], "done", rec["t"] - zero,
                                                          rec["t"] - zero, {**args, "value": _value_text(value)})
            elif ev == "collective":
                tr.slice(r, COMM_TRACK, rec["name"], "collective", rec["t0"] - zero, rec["t1"] - zero, args)
            elif ev == "stop":
                track = COMM_TRACK if rec["kind"] in ("wait", "communication") else COMPUTE_TRACK
                tr.slice(r, track, rec["name"], "unfinished", rec["since"] - zero, rec["t"] - zero,
                         {"unfinished": True, "stopped_by": "watchdog"})
                tr.timed.append({"name": "the watchdog stops the run", "cat": "watchdog", "ph": "i", "s": "p",
                                 "pid": pid_of(r), "tid": tid_of(r, track), "ts": tr.us(rec["t"] - zero),
                                 "args": {"report": rec["report"]}})
                stops.append({"rank": r, "name": rec["name"], "at_us": tr.us(rec["t"] - zero),
                              "report": rec["report"]})
    for key, out in sends.items():
        into = completions.get(key)
        if into is not None:
            tr.flow(out, into)
    hosts = sorted(origin)
    # the run's identity (`trace merge` joins only parts of one run), and each host's clock at time 0
    # with its ranks (`trace merge` puts the ranks of one host, from different files, on one clock)
    who = {"params": same["params"], "run": same["run"], "world": same["ranks"]}
    clocks = [{"host": h, "boot": b, "zero": origin[(h, b)],
               "ranks": [r for r in ranks if (heads[r]["host"], heads[r].get("boot", "")) == (h, b)]} for h, b in hosts]
    return tr.finish({"schedule": schedule, **{k: v for k, v in who.items() if v is not None},
                      "source": "measured", "ranks": ranks, "clocks": clocks,
                      "missing_ranks": sorted(set(parts) - set(ranks)), "hosts": len(hosts),
                      "clock": "each host's monotonic clock, time 0 when its ranks left the starting barrier",
                      "watchdog": stops, "stopped": stopped, "messages": sum(k in completions for k in sends)})


__all__ = ["chrome_trace", "dumps_trace", "measured_trace", "read_part", "read_part_counted", "pid_of", "tid_of"]
