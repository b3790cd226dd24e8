"""Memory per rank in DESIGN.md's unit model: activations, receive buffers, eager send buffers.

Activations along each rank's order: F(s,m) allocates a_s; B frees a_s; I frees a_s - w_s; W frees
w_s (defaults a = 1, w = a). A receive holds its message (the sender stage's `out` size) from the
moment it is posted until the action that consumes it. Under eager or bounded sends a sent message
stays until its receive is posted, which depends on timing: the worst case at each step counts every
earlier send whose receive need not have been posted yet, i.e. does not happen-before that step
(exact, from the happens-before graph of schedc/verify/graph.py). Inside a step, allocations come
before frees.
"""
from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass

from ..ir import Action, Op, Program, describe
from .channels import Channels, Semantics
from .graph import constraints


def activation_delta(program: Program, op: Op, stage: int) -> float:
    mem = program.annotations.memory_of(stage)
    return {Op.F: mem.act, Op.B: -mem.act, Op.I: -(mem.act - mem.weight), Op.W: -mem.weight}.get(op, 0.0)


def message_size(program: Program, a: Action) -> float:
    """Bytes (units) a send or receive carries: the output of the stage the activation leaves."""
    source = {Op.SEND_F: a.stage, Op.RECV_F: a.stage - 1, Op.SEND_B: a.stage - 1, Op.RECV_B: a.stage}[a.op]
    return program.annotations.memory_of(source).out


class _Sizes:
    """Per-stage sizes, looked up once: act, weight and out."""

    def __init__(self, program: Program):
        mems = [program.annotations.memory_of(s) for s in range(program.num_stages)]
        self.act = [m.act for m in mems]
        self.weight = [m.weight for m in mems]
        self.out = [m.out for m in mems]


def _walk(program: Program, sizes: _Sizes, rank: int, sends_at: dict | None, stop: int | None = None):
    """Walk one rank's order: (peak activation, peak memory, step of the memory peak), or, with
    `stop`, the live items at that step."""
    act, weight, out = sizes.act, sizes.weight, sizes.out
    F, B, I, W, RF, RB = Op.F, Op.B, Op.I, Op.W, Op.RECV_F, Op.RECV_B
    live_act = peak_act = 0.0
    live_buf = 0.0
    peak_mem, peak_step = 0.0, 0
    acts: dict = {}
    bufs: dict = {}
    for x, st in enumerate(program.ranks[rank]):
        frees = []
        for a in st.parts:
            op, s = a.op, a.stage
            if op is F:
                live_act += act[s]
                acts[(s, a.microbatch)] = act[s]
                frees.append(("act", s - 1, a.microbatch))
            elif op is RF:
                size = out[s - 1]
                bufs[("act", s - 1, a.microbatch)] = (size, a)
                live_buf += size
            elif op is RB:
                size = out[s]
                bufs[("grad", s + 1, a.microbatch)] = (size, a)
                live_buf += size
            elif op is B or op is I:
                frees.append(("grad", s + 1, a.microbatch))
        pending = sends_at.get(x, ()) if sends_at else ()
        extra = sum(out[a.stage] if a.op is Op.SEND_F else out[a.stage - 1] for a in pending) if pending else 0.0
        if stop == x:
            live = [f"activation of F({s},{m}): {_num(v)}" for (s, m), v in acts.items() if v > 0]
            live += [f"receive buffer of {describe(a)}: {_num(v)}" for v, a in bufs.values() if v > 0]
            live += [f"unmatched {describe(a)}: {_num(message_size(program, a))}" for a in pending
                     if message_size(program, a) > 0]
            return tuple(live)
        peak_act = max(peak_act, live_act)
        total = live_act + live_buf + extra
        if total > peak_mem:
            peak_mem, peak_step = total, x
        for key in frees:
            held = bufs.pop(key, None)
            if held is not None:
                live_buf -= held[0]
        for a in st.parts:
            op, s = a.op, a.stage
            if op is B or op is I or op is W:
                d = act[s] if op is B else (act[s] - weight[s] if op is I else weight[s])
                live_act -= d
                key = (s, a.microbatch)
                left = acts.get(key, 0.0) - d
                if left <= 1e-12:
                    acts.pop(key, None)
                else:
                    acts[key] = left
    return peak_act, peak_mem, peak_step


def peak_activation(program: Program) -> tuple[float, ...]:
    sizes = _Sizes(program)
    return tuple(_walk(program, sizes, r, None)[0] for r in range(program.num_ranks))


@dataclass(frozen=True)
class Peak:
    """The worst moment of one rank: its memory, the step, and what is live then."""

    rank: int
    memory: float
    step: int
    action: Action | None
    live: tuple[str, ...]


def peak_memory(program: Program, semantics: Semantics, chans: Channels) -> tuple[Peak, ...]:
    """Worst-case memory per rank over every run the semantics allows (the program must not deadlock)."""
    unmatched = _unmatched_sends(program, semantics, chans)
    by_rank: dict[int, dict] = defaultdict(dict)
    for (r, x), sends in unmatched.items():
        by_rank[r][x] = sends
    sizes = _Sizes(program)
    peaks = []
    for r, steps in enumerate(program.ranks):
        _, memory, step = _walk(program, sizes, r, by_rank.get(r))
        if not steps or memory <= 0:
            peaks.append(Peak(r, 0.0, 0, None, ()))
            continue
        live = _walk(program, sizes, r, by_rank.get(r), stop=step)
        peaks.append(Peak(r, memory, step, steps[step].parts[0], live))
    return tuple(peaks)


def _num(x: float):
    return int(x) if float(x).is_integer() else x


def _unmatched_sends(program: Program, semantics: Semantics, chans: Channels) -> dict:
    """(rank, step) -> sends posted up to that step whose receive may not be posted yet."""
    if semantics.kind == "rendezvous" or not chans.sends:
        return {}
    edges = list(constraints(program, semantics, chans).edges())
    receivers = sorted({ch[1] for ch in chans.sends})
    reach = _reach(program, edges, receivers)
    out: dict = defaultdict(list)
    for (a, b), sends in chans.sends.items():
        recvs = chans.recvs.get((a, b), [])
        for k, send in enumerate(sends):
            recv_posted_at = recvs[k].step - 1 if k < len(recvs) else None
            for x in range(send.step, len(program.ranks[a])):
                # the receive is certainly posted once b's step before it happens-before a's step x
                known = reach[b].get((a, x - 1), -1) if x > 0 else -1
                if recv_posted_at is not None and (recv_posted_at < 0 or recv_posted_at <= known):
                    break
                out[(a, x)].append(send.action)
    return out


def _reach(program: Program, edges, ranks: list[int]) -> dict[int, dict]:
    """For each rank b: node -> the last step of b that happens-before (or is) the node."""
    preds = defaultdict(list)
    indeg = defaultdict(int)
    nodes = [(r, i) for r, steps in enumerate(program.ranks) for i in range(len(steps))]
    for e in edges:
        preds[e.after].append(e.before)
        indeg[e.after] += 1
    succs = defaultdict(list)
    for e in edges:
        succs[e.before].append(e.after)
    order, queue = [], deque(n for n in nodes if indeg[n] == 0)
    while queue:
        n = queue.popleft()
        order.append(n)
        for m in succs[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                queue.append(m)
    out = {}
    for b in ranks:
        best: dict = {}
        for n in order:
            v = max((best[p] for p in preds[n]), default=-1)
            if n[0] == b:
                v = max(v, n[1])
            best[n] = v
        out[b] = best
    return out
