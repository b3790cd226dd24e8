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

from ..deps import delivers, needs
from ..ir import Action, Op, Program, describe
from .execute import Channels, Semantics
from .graph import constraints


def activation_delta(program: Program, op: Op, stage: int) -> float:
    mem = program.annotations.memory_of(stage)
    return {Op.F: mem.act, Op.B: -mem.act, Op.I: -(mem.act - mem.weight), Op.W: -mem.weight}.get(op, 0.0)


def message_size(program: Program, a: Action) -> float:
    """Bytes (units) a send or receive carries: the output of the stage the activation leaves."""
    source = {Op.SEND_F: a.stage, Op.RECV_F: a.stage - 1, Op.SEND_B: a.stage - 1, Op.RECV_B: a.stage}[a.op]
    return program.annotations.memory_of(source).out


def peak_activation(program: Program) -> tuple[float, ...]:
    peaks = []
    for steps in program.ranks:
        live = peak = 0.0
        for step in steps:
            deltas = [activation_delta(program, a.op, a.stage) for a in step.parts]
            live += sum(d for d in deltas if d > 0)
            peak = max(peak, live)
            live += sum(d for d in deltas if d < 0)
        peaks.append(peak)
    return tuple(peaks)


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
    peaks = []
    for r, steps in enumerate(program.ranks):
        acts: dict[tuple[int, int], float] = {}
        bufs: dict = {}
        best = Peak(r, 0.0, 0, None, ())
        for x, step in enumerate(steps):
            for a in step.parts:
                if a.op.is_comm and a.op.name.startswith("RECV"):
                    bufs[delivers(a)] = (message_size(program, a), a)
                elif activation_delta(program, a.op, a.stage) > 0:
                    acts[(a.stage, a.microbatch)] = acts.get((a.stage, a.microbatch), 0.0) + \
                        activation_delta(program, a.op, a.stage)
            sends = unmatched.get((r, x), ())
            total = sum(acts.values()) + sum(v for v, _ in bufs.values()) + sum(message_size(program, s) for s in sends)
            if total > best.memory:
                live = [f"activation of F({s},{m}): {_num(v)}" for (s, m), v in acts.items() if v > 0]
                live += [f"receive buffer of {describe(a)}: {_num(v)}" for v, a in bufs.values() if v > 0]
                live += [f"unmatched {describe(s)}: {_num(message_size(program, s))}" for s in sends
                         if message_size(program, s) > 0]
                best = Peak(r, total, x, step.parts[0], tuple(live))
            for a in step.parts:
                for v in needs(a, program.num_stages):
                    bufs.pop(v, None)
                d = activation_delta(program, a.op, a.stage)
                if d < 0:
                    key = (a.stage, a.microbatch)
                    acts[key] = acts.get(key, 0.0) + d
                    if acts[key] <= 1e-12:
                        del acts[key]
        peaks.append(best)
    return tuple(peaks)


def _num(x: float):
    return int(x) if float(x).is_integer() else x


def _unmatched_sends(program: Program, semantics: Semantics, chans: Channels) -> dict:
    """(rank, step) -> sends posted up to that step whose receive may not be posted yet."""
    if semantics.kind == "rendezvous" or not chans.sends:
        return {}
    edges, _ = constraints(program, semantics, chans)
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
