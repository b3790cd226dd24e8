"""The fast path of `schedc check` for small programs, in plain Python.

The same decision as schedc/verify/fast.py (read the rules there), asked one action at a time:
on a program of a few hundred actions, numpy's cost per call is more than the whole work. Like
the array path it answers only "all clear" (with the numbers) or "look closer" (None): anything it
does not decide goes to the detailed checks. It also clears DualPipe's overlapped pairs at the
compute level (`OVERLAP_F_B` compounds of computation: one step, two actions). The program is
read as flat lists, one entry per action (its rank, step, op code, stage and microbatch); the
needs and the payloads come from deps.py's tables, the activation sizes from memory.py, and the
run is execute.py's.
"""
from __future__ import annotations

from itertools import accumulate

from .. import deps
from ..columns import CODE, COMPOUND, columns_of
from ..ir import Action, CompoundKind, Op, Program
from .channels import Semantics
from .execute import run_ranks
from .fast import RECEIVE_OF, SEND_OF, Clear, cleared
from .memory import activation_deltas

MAX_ACTIONS = 1500  # programs up to this many steps take this path (beyond, the arrays are faster)
F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B = range(8)  # op codes (schedc/columns.py's): the ones this path knows
assert [CODE[op] for op in (Op.F, Op.B, Op.I, Op.W, Op.SEND_F, Op.RECV_F, Op.SEND_B, Op.RECV_B)] == list(range(8))
KINDS = ("act", "grad")  # a value's kind, as an index
# per op code of a send or receive: the offset of the stage at the other end, and the value it
# carries as (kind index, offset of the stage that made it) (deps.py's PEER_OFFSET, NEEDS, DELIVERS)
PEER = {CODE[op]: off for op, off in deps.PEER_OFFSET.items()}
CARRIES = {CODE[op]: (KINDS.index(deps.NEEDS[op][0][0]), 0) for op in (Op.SEND_F, Op.SEND_B)}
CARRIES.update({CODE[op]: (KINDS.index(kind), off) for op, (kind, off) in deps.DELIVERS.items()})
_SENDING = frozenset(CODE[op] for op in (Op.SEND_F, Op.SEND_B))
_SEND = {kind: CODE[op] for kind, op in SEND_OF.items()}  # the send of a value's kind
_RECEIVE = {need: CODE[op] for need, op in RECEIVE_OF.items()}  # the receive of a (kind, offset) need


class _Actions:
    """The program as flat lists, one entry per action: rank, step on its rank, op code, stage,
    microbatch (-1: none); the parts of a compound share a step."""

    __slots__ = ("rank", "step", "op", "stage", "mb", "lengths", "compounds")

    def __init__(self):
        self.rank, self.step, self.op, self.stage, self.mb = [], [], [], [], []
        self.lengths: list[int] = []
        self.compounds = False


def quick_check(program: Program, semantics: Semantics, limits: dict[int, float] | None) -> Clear | None:
    """fast.py's `Clear` when every default check surely holds, else None (run the detailed checks).
    The caller has excluded what neither fast path decides (bounded buffers, posted sends, forward
    only, message sizes)."""
    if program.p2p != "shared":
        return None
    acts = _actions(program)
    placement, S, M, R = program.placement, program.num_stages, program.num_microbatches, program.num_ranks
    pos = None if acts is None else _positions(acts, placement, S, M)
    needs = None if pos is None else _needs(pos, placement, S, M)
    if needs is None:
        return None
    comms = any(k >= SEND_F for k in acts.op)
    waits = _message_waits(acts, pos, needs, semantics, S, M, R) if comms else _data_waits(needs)
    if waits is None or not _runs(acts.lengths, waits):
        return None
    found = _peaks(program, acts)
    return None if found is None else cleared(program, *found, limits)


# ---- reading the program ----
def _actions(program: Program) -> _Actions | None:
    """The program's actions as flat lists; None for what this path does not decide (groups,
    communication inside a compound, actions other than computation, sends and receives)."""
    held = columns_of(program)
    out = _Actions()
    if held is not None:
        return _from_columns(held, out)
    for r, steps in enumerate(program.ranks):
        out.lengths.append(len(steps))
        for t, st in enumerate(steps):
            if st.__class__ is Action:
                _add(out, r, t, CODE[st.op], st.stage, st.microbatch)
            elif not _add_overlap(out, r, t, st):
                return None
    return out if all(k <= RECV_B for k in out.op) else None


def _from_columns(held, out: _Actions) -> _Actions | None:
    ops = held.op.tolist()
    if any(k > RECV_B for k in ops):
        return None
    if COMPOUND in ops:
        return _from_kept(held, ops, out)
    out.op, out.stage, out.mb = ops, held.stage.tolist(), held.microbatch.tolist()
    starts = held.starts
    for r in range(len(held)):
        n = starts[r + 1] - starts[r]
        out.lengths.append(n)
        out.rank += [r] * n
        out.step += range(n)
    return out


def _from_kept(held, ops, out: _Actions) -> _Actions | None:
    """Columns holding compounds (kept whole): step by step."""
    stages, mbs, starts = held.stage.tolist(), held.microbatch.tolist(), held.starts
    for r in range(len(held)):
        out.lengths.append(starts[r + 1] - starts[r])
        for t, i in enumerate(range(starts[r], starts[r + 1])):
            if ops[i] != COMPOUND:
                _add(out, r, t, ops[i], stages[i], None if mbs[i] < 0 else mbs[i])
            elif not _add_overlap(out, r, t, held.kept[i]):
                return None
    return out


def _add(out: _Actions, r: int, t: int, op: int, stage: int, mb: int | None) -> None:
    out.rank.append(r)
    out.step.append(t)
    out.op.append(op)
    out.stage.append(stage)
    out.mb.append(-1 if mb is None else mb)


def _add_overlap(out: _Actions, r: int, t: int, step) -> bool:
    """An overlapped pair of computations, part by part; False for any other compound."""
    if step.kind is not CompoundKind.OVERLAP_F_B or any(CODE[a.op] > W for a in step.parts):
        return False
    for a in step.parts:
        _add(out, r, t, CODE[a.op], a.stage, a.microbatch)
    out.compounds = True
    return True


# ---- the checks ----
def _positions(acts: _Actions, placement, S: int, M: int) -> list[int] | None:
    """Every index in range, every action on its stage's rank, each at most once, sends and
    receives to another rank; one F, and one B or one I and one W, per (stage, microbatch). The
    step of each action: `pos[(op * S + stage) * M + microbatch]` (-1: absent)."""
    SM = S * M
    pos = [-1] * (8 * SM)
    for r, t, k, s, m in zip(acts.rank, acts.step, acts.op, acts.stage, acts.mb):
        if not (0 <= s < S and 0 <= m < M) or placement[s] != r:
            return None
        key = k * SM + s * M + m
        if pos[key] >= 0:
            return None
        pos[key] = t
        if k >= SEND_F:
            peer = s + PEER[k]
            if not 0 <= peer < S or placement[peer] == r:
                return None
    if -1 in pos[:SM]:
        return None  # a missing F
    for b, i, w in zip(pos[B * SM:(B + 1) * SM], pos[I * SM:(I + 1) * SM], pos[W * SM:(W + 1) * SM]):
        if (b >= 0) == (i >= 0) or (i >= 0) != (w >= 0):
            return None  # no backward, or both forms, or an I without its W
    return pos


def _needs(pos: list[int], placement, S: int, M: int) -> list[tuple] | None:
    """deps.NEEDS over every (stage, microbatch): a need met on the consumer's own rank must come
    first there (else None); the needs met across ranks, as (kind, offset, consumer's stage,
    microbatch, rank and step, producer's rank and step)."""
    SM = S * M
    forward = pos[:SM]
    back = [b if b >= 0 else i for b, i in zip(pos[B * SM:(B + 1) * SM], pos[I * SM:(I + 1) * SM])]
    made = {"act": forward, "grad": back}
    cross = []
    for op, steps in ((Op.F, forward), (Op.B, back), (Op.W, pos[W * SM:(W + 1) * SM])):
        for kind, off in deps.NEEDS[op]:
            producers = made[kind]
            for s in range(max(0, -off), min(S, S - off)):
                here, there = placement[s], placement[s + off]
                for c in range(s * M, (s + 1) * M):
                    step, p = steps[c], producers[c + off * M]
                    if step < 0:  # (W where the backward is not split)
                        continue
                    if here != there:
                        cross.append((kind, off, s, c - s * M, here, step, there, p))
                    elif p >= step:
                        return None
    return cross


def _data_waits(needs) -> list[tuple]:
    """Compute level: a step waits for the producer of a value made on another rank, as
    (rank, step, rank waited on, its step)."""
    return [(rank, step, p_rank, p_step) for *_, rank, step, p_rank, p_step in needs]


def _message_waits(acts: _Actions, pos: list[int], needs, semantics: Semantics, S: int, M: int,
                   R: int) -> list[tuple] | None:
    """Exactly the messages the compute needs, each received before use and sent after it is made;
    then FIFO pairing on each channel (payloads must agree) and the waits it makes: a receive
    completes after its send is posted, and under rendezvous a send after its receive is posted."""
    SM = S * M
    for kind, off, s, m, _, consumer, _, producer in needs:
        received, sent = pos[_RECEIVE[kind, off] * SM + s * M + m], pos[_SEND[kind] * SM + (s + off) * M + m]
        if not (0 <= received < consumer and sent > producer):
            return None
    # each message: its rank, step, whether it is the send, and the value it carries (a number)
    messages = [(r, t, k in _SENDING, (CARRIES[k][0] * S + s + CARRIES[k][1]) * M + m)
                for r, t, k, s, m in zip(acts.rank, acts.step, acts.op, acts.stage, acts.mb) if k >= SEND_F]
    if 2 * len(needs) != len(messages):
        return None  # a message no computation needs
    rank_of = [[-1, -1] for _ in range(2 * SM)]  # value -> [rank of its receive, rank of its send]
    for r, _, sending, value in messages:
        rank_of[value][sending] = r
    posted, taken = {}, {}  # channel (from * R + to) -> the values in FIFO order, and the steps
    for r, t, sending, value in messages:
        channel = r * R + rank_of[value][0] if sending else rank_of[value][1] * R + r
        (posted if sending else taken).setdefault(channel, []).append((value, t))
    waits = []
    rendezvous = semantics.kind == "rendezvous"
    for channel, sends in posted.items():
        recvs = taken.get(channel, ())
        if [v for v, _ in sends] != [v for v, _ in recvs]:
            return None  # crossed payloads: the detailed checks report the mismatch
        src, dst = divmod(channel, R)
        for (_, si), (_, ri) in zip(sends, recvs):
            if si > 0:
                waits.append((dst, ri, src, si - 1))
            if rendezvous and ri > 0:
                waits.append((src, si, dst, ri - 1))
    return waits


def _runs(lengths: list[int], waits: list[tuple]) -> bool:
    """execute's `run_ranks` over the waits: does every rank reach the end of its list?"""
    base = list(accumulate(lengths, initial=0))
    counts = [0] * (base[-1] + 1)  # waits of each step (numbered rank by rank), counted, then placed
    for rank, step, _, _ in waits:
        counts[base[rank] + step + 1] += 1
    starts = list(accumulate(counts))
    tq, tj, at = [0] * len(waits), [0] * len(waits), starts[:-1]
    for rank, step, q, j in waits:
        g = base[rank] + step
        tq[at[g]], tj[at[g]] = q, j
        at[g] += 1
    return run_ranks(lengths, list(lengths), starts, tq, tj) == lengths


def _peaks(program: Program, acts: _Actions) -> tuple[list[float], list[int]] | None:
    """Peak activations per rank along its order and the first step at each peak: inside a step,
    allocations (F's) come before frees (memory.py's rule). None if some backward grows memory
    (odd sizes: the detailed checks count those)."""
    deltas = activation_deltas(program)
    if any(d > 0 for op in (Op.B, Op.I, Op.W) for d in deltas[op]) or any(d < 0 for d in deltas[Op.F]):
        return None
    table = [deltas[op] for op in (Op.F, Op.B, Op.I, Op.W)]
    R = program.num_ranks
    peaks, where, live = [0.0] * R, [0] * R, [0.0] * R
    if not acts.compounds:  # a step is one action: only an F can reach a new peak
        for r, t, k, s in zip(acts.rank, acts.step, acts.op, acts.stage):
            if k <= W:
                live[r] += table[k][s]
                if k == F and live[r] > peaks[r]:
                    peaks[r], where[r] = live[r], t
        return peaks, where
    rank, step, op, stage = acts.rank, acts.step, acts.op, acts.stage
    i, n = 0, len(op)
    while i < n:  # step by step: its allocations, its peak, then its frees
        r, t, j = rank[i], step[i], i + 1
        while j < n and step[j] == t and rank[j] == r:
            j += 1
        for x in range(i, j):
            if op[x] == F:
                live[r] += table[F][stage[x]]
        if live[r] > peaks[r]:
            peaks[r], where[r] = live[r], t
        for x in range(i, j):
            if F < op[x] <= W:
                live[r] += table[op[x]][stage[x]]
        i = j
    return peaks, where
