"""The measured profile `schedc run --profile` writes, in the format the simulator's cost model reads.

    {"format": "schedc-profile", "version": 1, "unit": "s", "meta": {...},
     "stages": {"0": {"F": s, "I": s, "W": s, "B": s}, ...},
     "ranks": {"0": {"dispatch": s}, ...},
     "messages": {"0": bytes, ..., "latency": s, "overhead": s,
                  "channels": {"0->1": {"latency": s, "overhead": s}, ...}},
     "spread": {"stages": {"0": {"F": [f, ...], ...}, ...}, "overhead": {"0->1": [f, ...], ...}},
     "activations": {"0": bytes, ...}, "memory": {"0": {"peak_allocated": bytes}, ...}}

`stages[s]` holds the mean seconds of one action of stage s on one microbatch; `messages[s]` the
bytes of stage s's output (the activation it sends to s+1; the gradient coming back is the same
size), for every stage but the last. A schedule runs either B or I and W for a stage; the missing
ones are derived: B = I + W, or I = W = B / 2. `ranks[r].dispatch` is rank r's time per program
step that is neither compute nor posting nor waiting (the interpreter's own work: its loop, the
step's bookkeeping), which the simulator charges before each step.

`activations[s]` is the most bytes one microbatch's forward of stage s saved for its backward,
measured with torch's saved-tensor hooks (each storage once; the stage's parameters left out; the
loss's saved tensors counted with the last stage): what `sim`, `check` and `compare --profile`
calibrate the activation model with (schedc/calibration.py). `memory[r].peak_allocated`
is rank r's `torch.cuda.max_memory_allocated()` over the run, where it ran on a GPU.

`spread` says how the times varied: for each time and each channel's posting overhead, the means of
PARTS equally large groups of the sorted measurements, divided by their mean (factors of mean 1).
`schedc sim --samples` draws from them (schedc/simulate_sampled.py).

Communication, measured per message from both ranks' timestamps (one monotonic clock per host, so
only for channels whose two ranks share a host): a message is posted once both its send and its
receive have been posted (the simulator's rendezvous). A receive that found its data not there yet
(that waited at least `BLOCKED` seconds) shows the message's latency: the time from that point to
the end of its wait. One that did not wait shows only a bound (its data was there when its wait
began, so the latency was at most the time from that point to there): it counts as that bound, or
as the mean of its channel's waited latencies where that is less. Leaving those out would keep only
the messages slow enough to be waited for (half of the receives, and the slow half: the mean was
then 1.5 to 2.5 times as large, and the simulator over by up to 15%). `latency` is the mean over
both. `overhead` is the mean time a rank spends inside one
isend or irecv (LogP's `o`: rank time, not overlapped). Each channel gets its own values, and the
top level the mean over all messages. `meta` says how many ranks share how many cores and where
each rank's step time went. Pure Python.
"""
from __future__ import annotations

import json

from ..outputs import dumps_json, write_file

BLOCKED = 50e-6  # a receive whose wait took longer found its data not there yet
PARTS = 16  # a measured spread: the means of this many equally large groups of the sorted times


def parts_of(values: list[float], parts: int = PARTS) -> list[float]:
    """The means of `parts` equally large groups of the sorted `values` (as many as there are
    values, when fewer; a value on a boundary is shared by the two groups in proportion): the shape
    of their distribution, tails included, in a few numbers whose mean is the values' mean."""
    xs = sorted(values)
    n = len(xs)
    k = min(parts, n)
    prefix = [0.0]
    for x in xs:
        prefix.append(prefix[-1] + x)

    def first(i: int) -> float:  # the sum of the first i * n / k values (fractions of one included)
        whole, rest = divmod(i * n, k)
        return prefix[whole] + (xs[whole] * rest / k if rest else 0.0)
    return [(first(i + 1) - first(i)) * k / n for i in range(k)]


def _factors(parts: list[float]) -> list[float]:
    """`parts` divided by their mean (all 1 when they are all 0)."""
    mean = sum(parts) / len(parts) if parts else 0.0
    return [round(p / mean, 4) for p in parts] if mean > 0 else [1.0]


def build_profile(per_rank: list[dict]) -> dict:  # noqa: C901
    """Merge every rank's measurements (`entry.interp_profile`, in rank order) into the profile JSON."""
    times: dict[str, dict] = {}
    parts: dict[str, dict] = {}
    messages: dict[str, int] = {}
    for part in per_rank:
        for stage, ops in part["times"].items():
            times.setdefault(stage, {}).update(ops)
        for stage, ops in part.get("spread", {}).items():
            parts.setdefault(stage, {}).update(ops)
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
    out_messages: dict = {s: messages[s] for s in sorted(messages, key=int)}
    saved = {s: b for part in per_rank for s, b in part.get("saved", {}).items()}
    peaks = {str(r): {"peak_allocated": part["peak_allocated"]} for r, part in enumerate(per_rank)
             if part.get("peak_allocated") is not None}
    if not all("comm" in part for part in per_rank):  # measurements without communication timing
        return {"stages": stages, "messages": out_messages, **_memory(saved, peaks)}
    links, meta = communication(per_rank)
    out_messages.update(links)
    out = {"format": "schedc-profile", "version": 1, "unit": "s", "meta": meta, "stages": stages}
    ranks = {}
    for rank, part in enumerate(per_rank):
        where, steps = meta["time_per_step"].get(str(rank)), part.get("program_steps")
        if where and steps:
            ranks[str(rank)] = {"dispatch": max(0.0, where["other"]) / steps}
    if ranks:
        out["ranks"] = ranks
    out["messages"] = out_messages
    if parts:
        out["spread"] = {"stages": {s: _stage_spread(parts[s]) for s in sorted(parts, key=int)},
                         "overhead": _overhead_spread(per_rank)}
    out.update(_memory(saved, peaks))
    return out


def _memory(saved: dict[str, int], peaks: dict[str, dict]) -> dict:
    """The profile's measured memory: `activations` per stage, `memory` per rank (a GPU's peak)."""
    out: dict = {}
    if saved:
        out["activations"] = {s: saved[s] for s in sorted(saved, key=int)}
    if peaks:
        out["memory"] = peaks
    return out


def _stage_spread(parts: dict[str, list[float]]) -> dict[str, list[float]]:
    """One stage's spread of F, I, W and B; the missing ones derived as their means are (B's parts
    the sums of I's and W's, or I and W varying as B does)."""
    out = {op: _factors(p) for op, p in parts.items()}
    if "B" not in parts and "I" in parts and "W" in parts and len(parts["I"]) == len(parts["W"]):
        out["B"] = _factors([i + w for i, w in zip(parts["I"], parts["W"])])
    if "B" in parts:
        for op in ("I", "W"):
            out.setdefault(op, out["B"])
    return {op: out[op] for op in ("F", "I", "W", "B") if op in out}


def _overhead_spread(per_rank: list[dict]) -> dict[str, list[float]]:
    """Each channel's posting overhead (rank time inside one isend or irecv), as factors."""
    posts: dict[tuple[int, int], list[float]] = {}
    for rank, part in enumerate(per_rank):
        for _step, role, _kind, _stage, _mb, peer, posted, returned, *_ in part.get("comm", ()):
            posts.setdefault((rank, peer) if role == "S" else (peer, rank), []).append(returned - posted)
    return {f"{a}->{b}": _factors(parts_of(v)) for (a, b), v in sorted(posts.items())}


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def communication(per_rank: list[dict]) -> tuple[dict, dict]:  # noqa: C901
    """(latency, overhead and channels for `messages`; `meta`) from every rank's message records."""
    hosts = [part.get("host") for part in per_rank]
    sends: dict = {}
    recvs: dict = {}
    overheads: dict[tuple[int, int], list[float]] = {}
    for rank, part in enumerate(per_rank):
        for step, role, kind, stage, mb, peer, posted, returned, began, ended in part["comm"]:
            channel = (rank, peer) if role == "S" else (peer, rank)
            overheads.setdefault(channel, []).append(returned - posted)
            (sends if role == "S" else recvs)[(step, kind, stage, mb)] = (channel, returned, began, ended)
    latencies: dict[tuple[int, int], list[float]] = {}  # of the receives that waited
    bounds: dict[tuple[int, int], list[float]] = {}  # of the others: at most this
    matched = 0
    for key, (channel, r_posted, began, ended) in recvs.items():
        sent = sends.get(key)
        if sent is None or sent[0] != channel or hosts[channel[0]] != hosts[channel[1]]:
            continue  # no common clock (or not matched)
        matched += 1
        leaves = max(sent[1], r_posted)
        if ended - began >= BLOCKED:
            latencies.setdefault(channel, []).append(max(0.0, ended - leaves))
        else:
            bounds.setdefault(channel, []).append(max(0.0, began - leaves))
    blocked = sum(map(len, latencies.values()))
    for channel, waited in latencies.items():  # the bounds, where under the waited mean, count too
        typical = _mean(waited)
        waited += [min(b, typical) for b in bounds.get(channel, ())]
    links: dict = {}
    every_lat = [x for xs in latencies.values() for x in xs]
    every_over = [x for xs in overheads.values() for x in xs]
    if every_lat:
        links["latency"] = _mean(every_lat)
    if every_over:
        links["overhead"] = _mean(every_over)
    channels = {}
    for ch in sorted(set(latencies) | set(overheads)):
        one = {}
        if ch in latencies:
            one["latency"] = _mean(latencies[ch])
        if ch in overheads:
            one["overhead"] = _mean(overheads[ch])
        channels[f"{ch[0]}->{ch[1]}"] = one
    if channels:
        links["channels"] = channels
    R = len(per_rank)
    per_host: dict = {}
    for rank, h in enumerate(hosts):
        per_host.setdefault(h, []).append(rank)
    cores = min(part.get("cores", 1) for part in per_rank)
    busiest = max(len(v) for v in per_host.values())
    where = {}
    for rank, part in enumerate(per_rank):
        rows = part.get("steps") or []
        if rows:  # StepTime: begin, end, compute, waited, posting
            n = len(rows)
            step = sum(r[1] - r[0] for r in rows) / n
            compute, waited, posting = (sum(r[k] for r in rows) / n for k in (2, 3, 4))
            where[str(rank)] = {"step": step, "compute": compute, "waited": waited, "posting": posting,
                                "other": step - compute - waited - posting}
    meta = {"ranks": R, "hosts": len(per_host), "cores": cores, "ranks_per_core": busiest / cores,
            "oversubscribed": busiest > cores, "steps": max((len(p.get("steps") or []) for p in per_rank), default=0),
            "messages_timed": matched, "latency_samples": blocked, "blocked_s": BLOCKED,
            "time_per_step": where}
    return links, meta


def write_profile(path: str, profile: dict) -> None:
    """Write as every output is written (schedc/outputs.py): atomically, as strict JSON."""
    write_file(path, dumps_json(profile, indent=1) + "\n")


def read_profile(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
