"""The fast path of `schedc check` for small programs, in plain Python.

The same decision as schedc/verify/fast.py (read the rules there), asked in plain Python: on a
program of a few hundred actions, numpy's cost per call is more than the whole work. Like the
array path it answers only "all clear" (with the numbers) or "look closer" (None): anything it
does not decide goes to the detailed checks. It also clears DualPipe's overlapped pairs at the
compute level (`OVERLAP_F_B` compounds of computation: one step, two actions). The program is
read as flat lists, one entry per action (its step, op code, stage and microbatch) rank by rank, into
a table of each action's step, whose slices (a stage's microbatches) answer most rules at once; the
needs and the payloads come from deps.py's tables, the activation sizes from rules/memory.py, and the
run is execute.py's (`run_ranks`; with sends and receives, where a step waits on at most one
other, its simpler form `_run`). With routes, a (stage, microbatch) off its microbatch's route has
no action (its entries stay -1) and a stage's neighbours are its route's (deps.py's `Routes`).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from functools import lru_cache
from itertools import accumulate, chain, pairwise, repeat
from operator import attrgetter, gt, lt

from ..columns import CODE, COMPOUND, KIND_CODE, OPS, columns_of
from ..ir import Action, CompoundKind, Op, Program
from ..lazy_numpy import np
from ..rules import deps, reductions
from ..rules.memory import ALLOCATES, FREES, op_delta
from ..rules.semantics import Semantics
from .clear import RECEIVE_OF, SEND_OF, Clear, cleared
from .execute import run_ranks

MAX_ACTIONS = 1500  # programs up to this many steps take this path (beyond, the arrays are faster)
F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B = range(8)  # op codes (schedc/columns.py's): the ones this path knows
assert [CODE[op] for op in (Op.F, Op.B, Op.I, Op.W, Op.SEND_F, Op.RECV_F, Op.SEND_B, Op.RECV_B)] == list(range(8))
_STAGE_OPS = frozenset(CODE[op] for op in (Op.UNSHARD, Op.RESHARD, Op.REDUCE_GRAD))
_REDUCTIONS = frozenset(CODE[op] for op in deps.REDUCTIONS) & _STAGE_OPS  # (REDUCE_TIED: the detailed checks)
_ADDS_GRADIENT = tuple(CODE[op] for op in deps.ADDS_GRADIENT)
assert reductions.ONCE >= deps.REDUCTIONS  # each reduction once a step: `_reduce_late` asks it
assert all(off == 0 for _, off in deps.NEEDS[Op.W])  # only F and the backward, which always exist, need across ranks
_SEND = {kind: CODE[op] for kind, op in SEND_OF.items()}  # the send of a value's kind
_RECEIVE = {need: CODE[op] for need, op in RECEIVE_OF.items()}  # the receive of a (kind, offset) need
_ALLOCATING = frozenset(CODE[op] for op in ALLOCATES)  # inside a step these count first (rules/memory.py)
_FREEING = frozenset(CODE[op] for op in FREES)  # and these after the step's peak
OVERLAP = KIND_CODE[CompoundKind.OVERLAP_F_B]


class _Actions:
    """The program as flat lists, one entry per action, rank by rank: step on its rank, op code,
    stage, microbatch (-1: none); rank r's actions are `starts[r]` to `starts[r + 1] - 1`, and it
    has `lengths[r]` steps (the parts of a compound share a step). `comms`: some action is a send
    or receive. `columns`: the op code, stage and microbatch arrays they were read from, if any."""

    __slots__ = ("step", "op", "stage", "mb", "starts", "lengths", "comms", "compounds", "columns", "extra",
                 "reductions")

    def __init__(self):
        self.step, self.op, self.stage, self.mb = [], [], [], []
        self.starts: list[int] = [0]
        self.lengths: list[int] = []
        self.comms = self.compounds = False
        self.columns = None
        self.extra: list[tuple[int, int]] = []  # (rank, stage) of each per-stage operation of torch's
        self.reductions: list[tuple[int, int]] = []  # (step, stage) of each REDUCE_GRAD among them

    def indices(self, S: int, M: int) -> tuple[list[int], list[int]]:
        """Each action's op * S + stage, and its place in a table over (op code, stage,
        microbatch), (op * S + stage) * M + microbatch (every index in range)."""
        if self.columns is not None:  # (numpy's arithmetic, once per array, is faster than a loop)
            op, stage, mb = self.columns
            op_stage = op.astype(np.int64) * S + stage
            return op_stage.tolist(), (op_stage * M + mb).tolist()
        op_stage = [k * S + s for k, s in zip(self.op, self.stage)]
        return op_stage, [k * M + m for k, m in zip(op_stage, self.mb)]


def quick_check(program: Program, semantics: Semantics, limits: dict[int, float] | None) -> Clear | None:
    """clear.py's `Clear` when every default check surely holds, else None (run the detailed checks).
    The caller has excluded what neither fast path decides (bounded buffers, posted sends, forward
    only, message sizes)."""
    if program.p2p != "shared":
        return None
    acts = _actions(program)
    if acts is None:
        return None
    placement, S, M = program.placement, program.num_stages, program.num_microbatches
    stages = deps.stages_of(program)
    op_stages, keys = acts.indices(S, M)
    pos = _positions(acts, keys, placement, S, M, stages)
    cross = None if pos is None or not _reduce_late(acts, pos, S, M) else _needs(pos, placement, S, M, stages)
    if pos is None or cross is None:  # (cross is None where pos is)
        return None
    if acts.comms:  # sends and receives: the messages decide the waits
        if not _messages_run(acts, pos, cross, semantics, S, M):
            return None
    elif not _runs(acts.lengths, _data_waits(cross)):
        return None
    found = _peaks(program, acts, op_stages)
    return None if found is None else cleared(program, *found, limits)


# ---- reading the program ----
def _actions(program: Program) -> _Actions | None:
    """The program's actions as flat lists; None for what this path does not decide (groups,
    communication inside a compound, actions other than computation, sends and receives)."""
    held = columns_of(program)
    out = _Actions()
    if held is not None:
        return _from_columns(held, out)
    for steps in program.ranks:
        out.lengths.append(len(steps))
        for t, st in enumerate(steps):
            if st.__class__ is Action:
                _add(out, t, CODE[st.op], st.stage, st.microbatch)
            elif not _add_overlap(out, t, st):
                return None
        out.starts.append(len(out.op))
    top = max(out.op, default=F)
    out.comms = top >= SEND_F
    return out if top <= RECV_B else None


def _from_columns(held, out: _Actions) -> _Actions | None:
    ops = held.op.tolist()
    codes = set(ops)  # (few: faster to bound than the list)
    top = max(codes, default=F)
    if top > RECV_B and not _STAGE_OPS.issuperset(k for k in codes if k > RECV_B):
        return None
    if COMPOUND in codes:
        return _from_parts(held, ops, out)
    if top > RECV_B:
        return _without_stage_ops(held, ops, out)
    out.op, out.stage, out.mb = ops, held.stage.tolist(), held.microbatch.tolist()
    out.columns = (held.op, held.stage, held.microbatch)
    out.starts = held.starts
    out.lengths = [b - a for a, b in pairwise(held.starts)]
    out.step = list(chain.from_iterable(map(range, out.lengths)))
    out.comms = top >= SEND_F
    return out


def _without_stage_ops(held, ops, out: _Actions) -> _Actions:
    """Columns with torch's per-stage operations (UNSHARD, RESHARD, REDUCE_GRAD, as torch's CSVs
    hold them): each keeps its step, and is not an action here. Without replicas (the caller's
    condition) each is a collective of one member, which waits for nothing and holds nothing; the
    array path asks only that its stage be in range and on its rank, and so does `_positions`
    (`extra`); a REDUCE_GRAD must also come after its stage's backwards (`reductions`, `_reduce_late`)."""
    stages, mbs, starts = held.stage.tolist(), held.microbatch.tolist(), held.starts
    out.lengths = [b - a for a, b in pairwise(starts)]
    steps = list(chain.from_iterable(map(range, out.lengths)))
    keep = [i for i, k in enumerate(ops) if k <= RECV_B]
    out.extra = [(bisect_right(starts, i) - 1, stages[i]) for i, k in enumerate(ops) if k > RECV_B]
    out.reductions = [(steps[i], stages[i]) for i, k in enumerate(ops) if k in _REDUCTIONS]
    out.starts = [bisect_left(keep, a) for a in starts]
    out.step, out.op = [steps[i] for i in keep], [ops[i] for i in keep]
    out.stage, out.mb = [stages[i] for i in keep], [mbs[i] for i in keep]
    out.comms = max(out.op, default=F) >= SEND_F
    return out


def _from_parts(held, ops, out: _Actions) -> _Actions | None:  # noqa: C901
    """Columns holding compounds: step by step, a compound's parts (`Columns.parts`) in its place
    (torch's per-stage operations as `_without_stage_ops` takes them)."""
    parts = held.parts
    if set(parts.kind.tolist()) != {OVERLAP} or max(parts.op.tolist()) > W:
        return None  # groups, or communication inside a compound
    stages, mbs, starts = held.stage.tolist(), held.microbatch.tolist(), held.starts
    at = dict(zip(parts.step.tolist(), pairwise(parts.starts.tolist())))
    p_op, p_stage, p_mb = parts.op.tolist(), parts.stage.tolist(), parts.microbatch.tolist()
    step, op, stage, mb = out.step, out.op, out.stage, out.mb
    for r in range(len(held)):
        out.lengths.append(starts[r + 1] - starts[r])
        for t, i in enumerate(range(starts[r], starts[r + 1])):
            if ops[i] == COMPOUND:
                lo, hi = at[i]
                step += [t] * (hi - lo)
                op += p_op[lo:hi]
                stage += p_stage[lo:hi]
                mb += p_mb[lo:hi]
            elif ops[i] <= RECV_B:
                step.append(t)
                op.append(ops[i])
                stage.append(stages[i])
                mb.append(mbs[i])
            else:  # UNSHARD, RESHARD, REDUCE_GRAD (the caller has excluded others)
                out.extra.append((r, stages[i]))
                if ops[i] in _REDUCTIONS:
                    out.reductions.append((t, stages[i]))
        out.starts.append(len(op))
    out.comms = max(op) >= SEND_F
    out.compounds = True
    return out


def _add(out: _Actions, t: int, op: int, stage: int, mb: int | None) -> None:
    out.step.append(t)
    out.op.append(op)
    out.stage.append(stage)
    out.mb.append(-1 if mb is None else mb)


def _add_overlap(out: _Actions, t: int, step) -> bool:
    """An overlapped pair of computations, part by part; False for any other compound."""
    if step.kind is not CompoundKind.OVERLAP_F_B or any(CODE[a.op] > W for a in step.parts):
        return False
    for a in step.parts:
        _add(out, t, CODE[a.op], a.stage, a.microbatch)
    out.compounds = True
    return True


# ---- the checks ----
# Tables are lists over (op code, stage, microbatch), `pos[(op * S + stage) * M + microbatch]` the
# step of that action on its rank (-1: absent): a stage's M entries are a slice, so most rules are
# asked of whole slices at once (min, max, comparisons mapped over two slices).
def _positions(acts: _Actions, keys: list[int], placement, S: int, M: int, stages: deps.Stages) -> list[int] | None:
    """Every index in range, every action on its stage's rank, each at most once; one F, and one
    B or one I and one W, per (stage, microbatch). The step of each action, as a table (above;
    `keys`: each action's place in it). (A send or receive to a stage outside the program or on
    its own rank is none the compute needs: `_messages_run` turns it away when it counts the
    messages.) With routes, only the pairs on a route have actions (`stages`)."""
    SM = S * M
    op, mbs = acts.op, set(acts.mb)  # (few: faster to bound than the list)
    if not op or min(mbs) < 0 or max(mbs) >= M or not _on_their_ranks(acts, placement, S):
        return None
    pos = [-1] * (8 * SM)
    for key, t in zip(keys, acts.step):
        pos[key] = t
    if pos.count(-1) != 8 * SM - len(op):
        return None  # an action twice
    if not isinstance(stages, int):
        return _routed_positions(pos, S, M, stages)
    if -1 in pos[:SM]:
        return None  # a missing F
    b, i, w = pos[B * SM:(B + 1) * SM], pos[I * SM:(I + 1) * SM], pos[W * SM:(W + 1) * SM]
    if i.count(-1) == SM and w.count(-1) == SM:
        return pos if -1 not in b else None  # no split backward: every B there
    for x, y, z in zip(b, i, w):
        if (x >= 0) == (y >= 0) or (y >= 0) != (z >= 0):
            return None  # no backward, or both forms, or an I without its W
    return pos


def _routed_positions(pos: list[int], S: int, M: int, routes: deps.Routes) -> list[int] | None:
    """`_positions`' last rules with routes: on its route, a pair has one F and one backward form;
    off it, no action at all."""
    SM = S * M
    for s in range(S):
        for m in range(M):
            k = s * M + m
            f, b, i, w = pos[k], pos[B * SM + k], pos[I * SM + k], pos[W * SM + k]
            if not routes.visits(s, m):
                if max(f, b, i, w, *(pos[c * SM + k] for c in range(SEND_F, RECV_B + 1))) >= 0:
                    return None  # an action off the route
            elif f < 0 or (b >= 0) == (i >= 0) or (i >= 0) != (w >= 0):
                return None  # no F, no backward, or both forms, or an I without its W
    return pos


def _reduce_late(acts: _Actions, pos: list[int], S: int, M: int) -> bool:
    """Does every REDUCE_GRAD(s) come after each backward that adds to stage s's gradients
    (deps.ADDS_GRADIENT, on its rank: all are, by `_on_their_ranks`), once (rules/reductions.py's
    `ONCE`)? Else lint's `reduce-early` or `duplicate`."""
    if len({s for _, s in acts.reductions}) < len(acts.reductions):
        return False
    SM = S * M
    for t, s in acts.reductions:
        if any(x >= t for k in _ADDS_GRADIENT for x in pos[k * SM + s * M:k * SM + (s + 1) * M]):
            return False
    return True


def _on_their_ranks(acts: _Actions, placement, S: int) -> bool:
    """Is every action (and every per-stage operation of torch's) on its stage's rank? (So every
    stage is in range.)"""
    held: list[set[int]] = [set() for _ in acts.lengths]  # each rank's stages
    for s, r in enumerate(placement[:S]):
        if 0 <= r < len(held):
            held[r].add(s)
    stage, starts = acts.stage, acts.starts
    return (all(here.issuperset(stage[starts[r]:starts[r + 1]]) for r, here in enumerate(held))
            and all(s in held[r] for r, s in acts.extra))


def _needs(pos: list[int], placement, S: int, M: int, stages: deps.Stages) -> list[tuple] | None:
    """deps.NEEDS over every (stage, microbatch): a need met on the consumer's own rank must come
    first there (else None); the needs met across ranks, a stage at a time, as (kind, offset,
    consumer's stage and rank, producer's rank, the consumer's steps and the producer's, over the
    microbatches; -1 for a microbatch whose route does not run through the stage). A stage's
    neighbours are those of its route (`stages`)."""
    SM = S * M
    forward = pos[:SM]
    b, i = pos[B * SM:(B + 1) * SM], pos[I * SM:(I + 1) * SM]
    back = b if i.count(-1) == SM else [x if x >= 0 else y for x, y in zip(b, i)]  # (B, or I where split)
    made = {deps.MAKES[Op.F]: forward, deps.MAKES[Op.B]: back}  # a value kind -> the steps that make it
    cross = []
    consumers = [(Op.F, forward), (Op.B, back)]
    w = pos[W * SM:(W + 1) * SM]
    if w.count(-1) < SM:  # (no W at all when no backward is split)
        consumers.append((Op.W, w))
    for op, steps in consumers:
        for kind, off in deps.NEEDS[op]:
            producers = made[kind]
            if not off:  # the value of the consumer's own stage: made on its own rank, for every stage at once
                if not _before(producers, steps):
                    return None
                continue
            for s in range(max(0, -off), min(S, S - off)):
                lo, hi = deps.bounds(stages, s)
                if not lo <= s + off < hi:
                    continue  # (the end of its route)
                here, there = placement[s], placement[s + off]
                consumer, producer = steps[s * M:(s + 1) * M], producers[(s + off) * M:(s + off + 1) * M]
                if here != there:
                    cross.append((kind, off, s, here, there, consumer, producer))
                elif not _before(producer, consumer):
                    return None
    return cross


def _before(producer: list[int], consumer: list[int]) -> bool:
    """Does each consumer that exists (step >= 0) come after its producer, on one rank?"""
    if min(consumer) >= 0:
        return all(map(lt, producer, consumer))
    return not any(0 <= c <= p for p, c in zip(producer, consumer))  # (W where the backward is not split)


def _data_waits(cross) -> list[tuple]:
    """Compute level: a step waits for the producer of a value made on another rank, as
    (rank, step, rank waited on, its step)."""
    return [(here, c, there, p) for _, _, _, here, there, consumer, producer in cross
            for c, p in zip(consumer, producer) if c >= 0]


def _messages_run(acts: _Actions, pos: list[int], cross, semantics: Semantics, S: int, M: int) -> bool:
    """Exactly the messages the compute needs, each received before use and sent after it is made;
    FIFO pairing on each channel (payloads must agree); then the run over the waits it makes: a
    receive completes after its send is posted, and under rendezvous a send after its receive is
    posted. A value's send and receive are found by their table entries."""
    SM = S * M
    messages: dict[tuple[int, int], tuple[list[int], list[int]]] = {}  # channel (from, to) -> send steps, receive steps
    needed = 0
    for kind, off, s, here, there, consumer, producer in cross:
        at = _RECEIVE[kind, off] * SM + s * M
        received = pos[at:at + M]
        at = _SEND[kind] * SM + (s + off) * M
        sent = pos[at:at + M]
        if min(consumer) < 0:  # (routes: the microbatches that run through the stage alone)
            on = [i for i, c in enumerate(consumer) if c >= 0]
            consumer, producer, received, sent = ([x[i] for i in on] for x in (consumer, producer, received, sent))
        if min(received, default=0) < 0 or not all(map(lt, received, consumer)) or not all(map(gt, sent, producer)):
            return False
        sends, receives = messages.setdefault((there, here), ([], []))
        sends += sent
        receives += received
        needed += 2 * len(consumer)
    if 4 * SM - pos[4 * SM:].count(-1) != needed:
        return False  # a message no computation needs
    waits: list[list[tuple[int, int, int]]] = [[] for _ in acts.lengths]  # per rank: (step, rank waited on, its step)
    rendezvous = semantics.send_waits_for_receive
    for (src, dst), (sends, receives) in messages.items():
        if not _in_order(sends, receives):
            return False  # crossed payloads: the detailed checks report the mismatch
        waits[dst] += zip(receives, repeat(src), sends)
        if rendezvous:
            waits[src] += zip(sends, repeat(dst), receives)
    for w in waits:
        w.sort()
    return _run(acts.lengths, waits)


def _in_order(sends: list[int], receives: list[int]) -> bool:
    """On a channel the k-th send meets the k-th receive, so the payloads agree iff the receives
    (steps of one rank) come in the order of their sends (steps of another)."""
    if not all(map(lt, sends, sends[1:])):  # (sends listed out of order: sort the pairs by send)
        receives = [r for _, r in sorted(zip(sends, receives))]
    return all(map(lt, receives, receives[1:]))


def _run(lengths: list[int], waits: list[list[tuple[int, int, int]]]) -> bool:
    """execute's `run_ranks` when a step waits on at most one other: rank r's step t, for each
    (t, q, j) of `waits[r]` (in order of t), completes once rank q has reached its step j (completed
    the ones before); its other steps wait on nothing. Does every rank reach the end of its list?"""
    R = len(lengths)
    pc = [w[0][0] if w else n for w, n in zip(waits, lengths)] + [0]  # where each rank is: at its first wait
    # (pc[R]: a rank that never moves; each rank ends waiting on it at its end, so every scan stops)
    lists = [iter(w + [(n, R, 1)]) for w, n in zip(waits, lengths)]
    head = [next(w) for w in lists]  # the wait each rank is at
    watchers: list[list[int]] = [[] for _ in range(R + 1)]
    work = list(range(R))
    while work:
        r = work.pop()
        t, q, j = head[r]
        if pc[q] >= j:
            for t, q, j in lists[r]:
                if pc[q] < j:
                    break
            head[r], pc[r] = (t, q, j), t
            if watchers[r]:
                work += watchers[r]
                watchers[r] = []
        watchers[q].append(r)
    return pc[:R] == lengths


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


def _peaks(program: Program, acts: _Actions, op_stages: list[int]) -> tuple[list[float], list[int]] | None:  # noqa: C901
    """Peak activations per rank along its order and the first step at each peak: inside a step,
    allocations (F's) come before frees (rules/memory.py's rule). None if some backward grows memory
    (odd sizes: the detailed checks count those). `op_stages`: each action's op * S + stage."""
    S, R = program.num_stages, program.num_ranks
    sizes = program.annotations.stage_memory
    sizes = sizes[:S] if len(sizes) >= S else tuple(map(program.annotations.memory_of, range(S)))
    table = _delta_table(tuple(map(_ACT_WEIGHT, sizes)))
    if table is None:
        return None
    peaks, where = [0.0] * R, [0] * R
    starts, step = acts.starts, acts.step
    if not acts.compounds:  # a step holds at most one action, and only an F grows memory: the running
        # sums' first top (the steps of torch's per-stage operations hold none)
        for r in range(R):
            sums = list(accumulate(map(table.__getitem__, op_stages[starts[r]:starts[r + 1]]), initial=0.0))
            top = max(sums)
            if top > 0:
                peaks[r], where[r] = top, step[starts[r] + sums.index(top) - 1]
        return peaks, where
    by_op = [table[k * S:(k + 1) * S] for k in (F, B, I, W)]
    op, stage = acts.op, acts.stage
    for r in range(R):
        i, end, live = starts[r], starts[r + 1], 0.0
        while i < end:  # step by step: its allocations, its peak, then its frees
            t, j = step[i], i + 1
            while j < end and step[j] == t:
                j += 1
            for x in range(i, j):
                if op[x] in _ALLOCATING:
                    live += by_op[op[x]][stage[x]]
            if live > peaks[r]:
                peaks[r], where[r] = live, t
            for x in range(i, j):
                if op[x] in _FREEING:
                    live += by_op[op[x]][stage[x]]
            i = j
    return peaks, where


_ACT_WEIGHT = attrgetter("act", "weight")  # (what `op_delta` reads of a stage's sizes)


@lru_cache(maxsize=256)
def _delta_table(sizes: tuple[tuple[float, float], ...]) -> list[float] | None:
    """rules/memory.py's `op_delta` by op code and stage, at `[op * S + stage]` (sends and receives: 0),
    for stages of these sizes (act, weight); None if a backward grows memory or an F frees it."""
    table = [op_delta(op, act, weight) for op in OPS[:RECV_B + 1] for act, weight in sizes]
    S = len(sizes)
    if (any(d > 0 for k in _FREEING for d in table[k * S:(k + 1) * S])
            or any(d < 0 for k in _ALLOCATING for d in table[k * S:(k + 1) * S])):
        return None
    return table
