"""The fast path of `schedc check`: decide with array arithmetic that every check passes.

The same rules as schedc/lint.py, schedc/verify/channels.py, graph.py and rules/memory.py, asked as
whole-array questions (numpy), the dependencies read from deps.py's tables: indices and placement, one F and one B or I+W per (stage,
microbatch) in order, a receive before every remote use and a send after every remote producer,
FIFO payload matching, then the run itself over the happens-before prerequisites, and peak
activations. It answers only "all clear" (with the numbers) or "look closer": anything unusual
(a finding, groups, bounded buffers, message sizes, memory limits) goes to the detailed checks,
which explain. Without message sizes, memory is activations alone, at either level (receive
buffers and sent messages hold nothing), so its peaks are memory.py's. Property tests hold the two
paths to the same verdicts and peaks. With routes (docs/semantics.md, "Routes") the pairs off a
microbatch's route have no action and a need exists only inside its stage's route (`_routing`).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..columns import COMPOUND, KIND_CODE, OPS, as_columns, columns_of
from ..ir import SCHEDC_ONLY, CompoundKind, Op, Program
from ..lazy_numpy import np
from ..rules import deps, reductions
from ..rules.memory import ALLOCATES, FREES, activation_deltas
from ..rules.semantics import Semantics
from . import small
from .clear import RECEIVE_OF, SEND_OF, Clear, cleared
from .execute import run_ranks

_OPS = list(OPS)  # op codes are schedc/columns.py's
_CODE = {op: i for i, op in enumerate(_OPS)}
F, B, I, W = (_CODE[o] for o in (Op.F, Op.B, Op.I, Op.W))
_ALLOCATING = [_CODE[o] for o in ALLOCATES]  # inside a step these count first (rules/memory.py)
SF, RF, SB, RB = (_CODE[o] for o in (Op.SEND_F, Op.RECV_F, Op.SEND_B, Op.RECV_B))
_SCHEDC_ONLY = [_CODE[o] for o in SCHEDC_ONLY]  # explicit waits and the tied all-reduce: the detailed checks
_KINDS = (Op.F, Op.B, Op.I, Op.W)  # the rows of the position table below
_ADDS_GRADIENT = [_KINDS.index(o) for o in deps.ADDS_GRADIENT]  # its rows of the backwards a reduction waits for
assert deps.REDUCTIONS - {Op.REDUCE_GRAD} <= SCHEDC_ONLY  # REDUCE_GRAD is the one reduction asked here
assert reductions.ONCE >= deps.REDUCTIONS  # each reduction once a step: `_reduces_early` asks it
MAX_CELLS = 4_000_000  # stage x microbatch tables above this go to the detailed checks
assert deps.NEEDS[Op.B] == deps.NEEDS[Op.I]  # below, "the backward" (B, or I where split) stands for both


@lru_cache(maxsize=1)
def _peer_offset():
    """By op code: a send's or receive's other stage is its own + this."""
    table = np.zeros(len(_OPS), dtype=np.int64)
    for op, off in deps.PEER_OFFSET.items():
        table[_CODE[op]] = off
    return table


@dataclass(frozen=True)
class Link:
    """One need of deps.NEEDS as arrays over (stage, microbatch): the consumer's steps at stages
    lo..hi-1, the producer's steps at those stages + off, the ranks of both, and where the
    consumer exists (None: everywhere)."""

    kind: str
    off: int
    consumer: np.ndarray
    producer: np.ndarray
    c_rank: np.ndarray
    p_rank: np.ndarray
    exists: np.ndarray | None
    lo: int
    hi: int


def quick_check(program: Program, semantics: Semantics, limits: dict[int, float] | None) -> Clear | None:
    """`Clear` when every default check surely holds, else None (run the detailed checks): a
    small program in plain Python first (schedc/verify/small.py), else (or if that path cannot
    decide it) with arrays."""
    if program.forward_only:
        return None
    if semantics.posted or semantics.channel_buffer:  # (bounded:K: the detailed checks)
        if program.level != "compute":
            return None
        # no messages are written and (below) none has a size: every semantics waits for data
        # alone and holds no buffer, so the question is rendezvous's
        semantics = Semantics()
    if program.num_stages * program.num_microbatches > MAX_CELLS:
        return None
    if any(m.out for m in program.annotations.stage_memory[:program.num_stages]):  # (`memory_of`: 0 past them)
        return None  # messages have a size: receive buffers (at the compute level, those lowering
        # inserts) and unmatched sends count, which only the detailed walk (memory.py) places exactly
    if _size(program) <= small.MAX_ACTIONS:  # few actions: plain Python is faster than numpy's calls
        clear = small.quick_check(program, semantics, limits)
        if clear is not None:
            return clear
    return array_check(program, semantics, limits)


def array_check(program: Program, semantics: Semantics, limits: dict[int, float] | None) -> Clear | None:  # noqa: C901
    """`quick_check`'s decision with whole-array questions (the caller has excluded bounded
    buffers, posted sends, forward-only programs and message sizes)."""
    S, M, R = program.num_stages, program.num_microbatches, program.num_ranks
    arrays = _arrays(program)
    if arrays is None:
        return None
    op, stage, mb, rank, step, gid, lengths = arrays
    if len(op) > sum(lengths) and not _grows_only_forward(program):
        return None  # overlapped pairs, whose peak is inside a step: sizes as small.py's `_delta_table` asks
    if np.isin(op, _SCHEDC_ONLY).any():
        return None
    placement = np.asarray(program.placement, dtype=np.int64)
    # indices in range, actions on their stage's rank
    has_mb = mb >= 0
    if (stage < 0).any() or (stage >= S).any() or (has_mb & (mb >= M)).any():
        return None
    if (placement[stage] != rank).any():
        return None
    is_comm = (op == SF) | (op == RF) | (op == SB) | (op == RB)
    compute = (op == F) | (op == B) | (op == I) | (op == W)
    if is_comm.any():
        offset = np.zeros(len(_OPS), dtype=np.int64)
        for o, k in deps.PEER_OFFSET.items():
            offset[_CODE[o]] = k
        peer = stage + offset[op]
        if ((is_comm & ((peer < 0) | (peer >= S))).any()
                or (is_comm & (placement[np.clip(peer, 0, S - 1)] == rank)).any()):
            return None
    # one F, and one B or one I and one W, per (stage, microbatch) on its route, none off it;
    # positions for the order checks
    visit, segments = _routing(program)
    kind = np.select([op == F, op == B, op == I, op == W], [0, 1, 2, 3], -1)
    ck = ((kind * S + stage) * M + mb)[compute]
    counts = np.bincount(ck, minlength=4 * S * M).reshape(4, S, M)
    if (counts > 1).any() or not (counts[0] == (1 if visit is None else visit)).all():
        return None
    full = (counts[1] == 1) & (counts[2] == 0) & (counts[3] == 0)
    split = (counts[1] == 0) & (counts[2] == 1) & (counts[3] == 1)
    if not ((full | split).all() if visit is None else ((full | split) == visit).all() and not counts[1:, ~visit].any()):
        return None
    pos = np.full(4 * S * M, -1, dtype=np.int64)
    pos[ck] = step[compute]
    pos = pos.reshape(4, S, M)
    posF, posB, posI, posW = pos
    if _reduces_early(op, stage, step, pos):
        return None
    back = np.where(full, posB, posI)  # the step that makes the input gradient
    links = _links({deps.MAKES[Op.F]: posF, deps.MAKES[Op.B]: back},
                   ((Op.F, posF, visit), (Op.B, back, visit), (Op.W, posW, split)), placement, S, segments)
    for link in links:  # a need met on the consumer's own rank: its producer must come first there
        same = (link.c_rank == link.p_rank)[:, None]
        if link.exists is not None:
            same = same & link.exists
        if (same & (link.producer >= link.consumer)).any():
            return None  # a step before its own rank's producer: the detailed checks explain
    if is_comm.any():
        if not _communication(op, stage, mb, step, is_comm, links, S, M):
            return None
        prereq = _message_waits(op, stage, mb, rank, step, gid, is_comm, semantics, R)
        if prereq is None:
            return None
    else:
        prereq = _data_waits(links, lengths)
    if not _runs(prereq, lengths):
        return None
    peaks, peak_steps = _peaks(program, op, stage, rank, step, R)
    return cleared(program, peaks, [int(x) for x in peak_steps], limits)


def _reduces_early(op, stage, step, pos: np.ndarray) -> bool:
    """Does some REDUCE_GRAD(s) come no later than a backward that adds to stage s's gradients
    (deps.ADDS_GRADIENT; all on its rank, as placement was checked), or twice (rules/reductions.py's
    `ONCE`)? lint's `reduce-early` or `duplicate`."""
    reduce = op == _CODE[Op.REDUCE_GRAD]
    if not reduce.any():
        return False
    if len(np.unique(stage[reduce])) < int(np.count_nonzero(reduce)):
        return True
    last = pos[_ADDS_GRADIENT].max(axis=(0, 2))  # each stage's last such backward (-1: none)
    return bool((step[reduce] <= last[stage[reduce]]).any())


def _size(program: Program) -> int:
    """How many steps the program has (compounds count one)."""
    held = columns_of(program)
    return len(held.op) if held is not None else sum(map(len, program.ranks))


def _arrays(program: Program):
    """Flat per-action arrays (op, stage, microbatch or -1, rank, step, global step id) and each
    rank's number of steps, read from the program's columns (schedc/columns.py: held so, or read
    once from its actions). The parts of an overlapped pair share a step, its F first; None for
    other compounds (groups: the detailed checks)."""
    held = as_columns(program)
    if not len(held.op):
        return None
    lengths = np.diff(held.starts).tolist()
    if held.compounds:
        flat = _overlapped_pairs(held)
        if flat is None:
            return None
        op, stage, mb, gid = flat
    else:
        op, stage, mb = (a.astype(np.int64) for a in (held.op, held.stage, held.microbatch))
        gid = np.arange(len(held.op), dtype=np.int64)
    rank = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)[gid]
    step = gid - np.asarray(held.starts[:-1], dtype=np.int64)[rank]
    return op, stage, mb, rank, step, gid, lengths


def _overlapped_pairs(held):
    """The columns with each compound replaced by its parts, which keep its global step id: (op,
    stage, microbatch, global step id) per action. Inside a step allocations come before frees
    (rules/memory.py's rule), so a pair's F parts are put first: the running sum along the actions then
    peaks where the steps' does. None unless every compound is an OVERLAP_F_B of computations."""
    parts = held.parts
    if (parts.kind != KIND_CODE[CompoundKind.OVERLAP_F_B]).any():
        return None
    codes = parts.op.astype(np.int64)
    if not np.isin(codes, (F, B, I, W)).all():
        return None  # a send, receive or stage operation inside
    order = np.lexsort((~np.isin(codes, _ALLOCATING), parts.owner()))  # compound by compound, its F parts first
    op, stage, mb, gid = held.opened()
    op, stage, mb = op.astype(np.int64), stage.astype(np.int64), mb.astype(np.int64)
    slots = np.flatnonzero(held.op[gid] == COMPOUND)  # where the parts are, in order
    op[slots], stage[slots], mb[slots] = codes[order], parts.stage[order], parts.microbatch[order]
    return op, stage, mb, gid


def _grows_only_forward(program: Program) -> bool:
    """Does only F grow activations, and every backward (B, I, W) shrink them or leave them?"""
    deltas = activation_deltas(program)
    return (all(d >= 0 for o in ALLOCATES for d in deltas.get(o, ()))
            and all(d <= 0 for o in FREES for d in deltas.get(o, ())))


def _routing(program: Program):
    """(visit, segments) of a program with routes: where a (stage, microbatch) runs, as an S x M mask,
    and each stage's (first, stop) of its route's stages (deps.Routes), as two arrays; (None, None)
    without routes (every pair runs, every stage's neighbours exist)."""
    stages = deps.stages_of(program)
    if isinstance(stages, int):
        return None, None
    S, M = program.num_stages, program.num_microbatches
    visit = np.zeros((S, M), dtype=bool)
    for r in program.routes:
        visit[r.stages[0]:r.stages[1], r.microbatches[0]:r.microbatches[1]] = True
    return visit, (np.asarray(stages.first, dtype=np.int64), np.asarray(stages.stop, dtype=np.int64))


def _links(made, consumers, placement, S, segments=None) -> list[Link]:
    """deps.NEEDS over the position tables: `made` maps a value kind to the steps that make it,
    `consumers` lists (op, its steps, where it exists) for F, the backward and W; with routes
    (`segments`: each stage's first and stop), a need of a stage beyond its route's ends exists nowhere."""
    out = []
    for op, steps, exists in consumers:
        for kind, off in deps.NEEDS[op]:
            lo, hi = max(0, -off), min(S, S - off)
            if lo >= hi:
                continue
            where = None if exists is None else exists[lo:hi]
            if segments is not None and off:
                at = np.arange(lo, hi) + off
                inside = ((at >= segments[0][lo:hi]) & (at < segments[1][lo:hi]))[:, None]
                where = inside if where is None else where & inside
            out.append(Link(kind, off, steps[lo:hi], made[kind][lo + off:hi + off], placement[lo:hi],
                            placement[lo + off:hi + off], where, lo, hi))
    return out


def _communication(op, stage, mb, step, is_comm, links, S, M) -> bool:
    """Exactly the messages the compute needs, each received before use and sent after made: a
    need across ranks is a send of the value after its producer, on the producer's stage, and a
    receive of it before its consumer, on the consumer's stage (deps.NEEDS, DELIVERS)."""
    comm = (Op.SEND_F, Op.RECV_F, Op.SEND_B, Op.RECV_B)
    ckind = np.select([op == _CODE[o] for o in comm], list(range(len(comm))), -1)
    key = ((ckind * S + stage) * M + mb)[is_comm]
    counts = np.bincount(key, minlength=len(comm) * S * M).reshape(len(comm), S, M)
    if (counts > 1).any():
        return False
    pos = np.full(len(comm) * S * M, -1, dtype=np.int64)
    pos[key] = step[is_comm]
    pos = pos.reshape(len(comm), S, M)
    want = np.zeros((len(comm), S, M), dtype=bool)
    for link in links:
        if link.off == 0:
            continue
        cross = np.broadcast_to((link.c_rank != link.p_rank)[:, None], link.consumer.shape)
        if link.exists is not None:
            cross = cross & link.exists
        recv, send = comm.index(RECEIVE_OF[(link.kind, link.off)]), comm.index(SEND_OF[link.kind])
        want[recv, link.lo:link.hi] |= cross
        want[send, link.lo + link.off:link.hi + link.off] |= cross
        if not (np.where(cross, pos[recv, link.lo:link.hi] < link.consumer, True).all()
                and np.where(cross, pos[send, link.lo + link.off:link.hi + link.off] > link.producer, True).all()):
            return False
    return bool((counts == want).all())


def _message_waits(op, stage, mb, rank, step, gid, is_comm, semantics, R):
    """Prerequisites from FIFO-matched messages; None if a pair's payloads differ."""
    s_idx = np.nonzero(is_comm & ((op == SF) | (op == SB)))[0]
    r_idx = np.nonzero(is_comm & ((op == RF) | (op == RB)))[0]
    if len(s_idx) != len(r_idx):
        return None
    # payload key (is gradient, stage it comes from, microbatch); a receive names the receiving stage
    width, depth = int(stage.max()) + 2, int(max(mb.max(), 0)) + 1
    s_key = ((op[s_idx] == SB) * width + stage[s_idx]) * depth + mb[s_idx]
    r_origin = stage[r_idx] + _peer_offset()[op[r_idx]]
    r_key = ((op[r_idx] == RB) * width + r_origin) * depth + mb[r_idx]
    # each send's payload partner (unique, by the count checks) gives the channel's other end
    s_order, r_order = np.argsort(s_key, kind="stable"), np.argsort(r_key, kind="stable")
    if not (s_key[s_order] == r_key[r_order]).all():
        return None
    dest = np.empty(len(s_idx), dtype=np.int64)
    dest[s_order] = rank[r_idx][r_order]
    src = np.empty(len(r_idx), dtype=np.int64)
    src[r_order] = rank[s_idx][s_order]
    # FIFO: the k-th send on (a, b) meets the k-th receive on (a, b)
    s_chan, r_chan = rank[s_idx] * R + dest, src * R + rank[r_idx]
    s_fifo, r_fifo = np.lexsort((step[s_idx], s_chan)), np.lexsort((step[r_idx], r_chan))
    if not (s_chan[s_fifo] == r_chan[r_fifo]).all() or not (s_key[s_fifo] == r_key[r_fifo]).all():
        return None  # crossed payloads: the detailed checks report the mismatch
    sends, recvs = s_idx[s_fifo], r_idx[r_fifo]
    # a receive completes only after its send is posted (the send's previous step completed) ...
    has = step[sends] > 0
    waits = [(gid[recvs][has], rank[sends][has], step[sends][has] - 1)]
    if semantics.send_waits_for_receive:  # ... and a send only after its receive is posted
        has = step[recvs] > 0
        waits.append((gid[sends][has], rank[recvs][has], step[recvs][has] - 1))
    return waits


def _data_waits(links, lengths):
    """Compute level: a step waits for the producer of a value made on another rank."""
    base = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    waits = []
    for link in links:
        cross = np.broadcast_to((link.c_rank != link.p_rank)[:, None], link.consumer.shape)
        if link.exists is not None:
            cross = cross & link.exists
        if not cross.any():
            continue
        M = link.consumer.shape[1]
        c_rank = np.repeat(link.c_rank[:, None], M, axis=1)
        p_rank = np.repeat(link.p_rank[:, None], M, axis=1)
        waits.append(((base[c_rank] + link.consumer)[cross], p_rank[cross], link.producer[cross]))
    return waits


def _runs(waits, lengths) -> bool:
    """Flat prerequisite arrays for execute's `run_ranks`: does every rank reach the end of its list?"""
    total = int(sum(lengths))
    if waits:
        who = np.concatenate([w[0] for w in waits])
        q = np.concatenate([w[1] for w in waits])
        j = np.concatenate([w[2] for w in waits])
        order = np.argsort(who, kind="stable")
        who, q, j = who[order], q[order], j[order]
        starts = np.searchsorted(who, np.arange(total + 1)).tolist()
        tq, tj = q.tolist(), j.tolist()
    else:
        starts, tq, tj = [0] * (total + 1), [], []
    return run_ranks(list(lengths), list(lengths), starts, tq, tj) == list(lengths)


def _peaks(program, op, stage, rank, step, R):
    """Peak activations per rank along each rank's order (its actions, an overlapped pair's F
    first), and the step where each peak is reached."""
    from .memory import activation_delta_table  # (the detailed walk's module: the array path alone needs this)
    delta = activation_delta_table(program)[op, stage]  # rules/memory.py's deltas
    peaks, where = [0.0] * R, [0] * R
    starts = np.searchsorted(rank, np.arange(R + 1))
    longest = int(np.diff(starts).max(initial=0))
    if R * longest <= 4 * len(delta) + 4096:  # ranks of similar lengths: every rank's sums at once
        grid = np.zeros((R, longest))  # each row a rank's deltas, then zeros (a sum that stays)
        grid[rank, np.arange(len(delta)) - starts[rank]] = delta
        run = np.cumsum(grid, axis=1)  # row by row, in order: the same sums as one rank's cumsum
        k = run.argmax(axis=1)  # the first action at the peak
        top = run[np.arange(R), k]
        for r in np.flatnonzero(top > 0).tolist():
            peaks[r], where[r] = float(top[r]), int(step[starts[r] + k[r]])
        return peaks, where
    for r in range(R):
        d = delta[starts[r]:starts[r + 1]]
        if not len(d):
            continue
        run = np.cumsum(d)
        k = int(np.argmax(run))
        if run[k] > 0:
            peaks[r], where[r] = float(run[k]), int(step[starts[r] + k])
    return peaks, where
