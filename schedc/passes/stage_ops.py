"""Insert the per-stage actions torch's lowering adds: UNSHARD / RESHARD and REDUCE_GRAD.

torch's `_PipelineScheduleRuntime` runs a compute-level schedule through `_add_unshard_reshard`,
`_add_reduce_grad` and `_add_send_recv`; a communication-level CSV is run as written, so it must
carry these itself: REDUCE_GRAD is where torch scales gradients by 1/M (its `scale_grads`) and
finishes FSDP's gradient reduction, UNSHARD / RESHARD gather and free FSDP-sharded stages. They
have no microbatch and no dependencies (deps.py); schedc's own runtime ignores them.

Both passes find where the stage actions go (`Move`s) and place them; a program held as columns
(schedc/columns.py) is read and extended as columns, without an action per step.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

from ..columns import CODE, COMPOUND, NO_MICROBATCH, OPS, Columns, columns_of, has_op, objects, with_columns
from ..ir import Action, Op, Program, Step
from ..lazy_numpy import np
from ..rules.deps import ADDS_GRADIENT as _BACKWARDS  # the actions that finish a microbatch's weight gradient
from ..rules.time import step_collectives

MAX_ACTIVE_STAGES = 3  # torch's default prefetch window for `_add_unshard_reshard`


_COMPUTE = frozenset(op for op in Op if op.is_compute)


@lru_cache(maxsize=1)
def _is_compute() -> Any:
    """By op code: a compute action (made at first use: numpy loads lazily)."""
    return np.array([op in _COMPUTE for op in OPS], dtype=bool)


@lru_cache(maxsize=1)
def _is_backward() -> Any:
    """By op code: an action that finishes a microbatch's weight gradient."""
    return np.array([op in _BACKWARDS for op in OPS], dtype=bool)


Move = tuple[int, Op, int]  # a stage action to add to a rank: (the step it goes before, its op, its stage)


def _computes(steps: Sequence[Step]) -> list[tuple[int, ...]]:
    """The stages each step computes on (most steps are one action: no tuple of parts is made for them)."""
    return [((st.stage,) if st.op in _COMPUTE else ()) if st.__class__ is Action
            else tuple(a.stage for a in st.parts if a.op in _COMPUTE) for st in steps]


def add_unshard_reshard(program: Program, max_active_stages: int = MAX_ACTIVE_STAGES) -> Program:
    """Before each compute step, UNSHARD the next `max_active_stages` stages the rank computes on
    and RESHARD the active ones it does not; RESHARD whatever is still active at the end.

    As torch's `_add_unshard_reshard` on a compute-level program (the same actions in the same
    order); communication steps are passed through and skipped when looking ahead. A program that
    already has UNSHARD actions is left as it is. Steps held as columns are read run by run: a run
    of single compute steps on one stage has one window, so only its first step moves.
    """
    if has_op(program, Op.UNSHARD):
        return program
    held = columns_of(program)
    if held is not None:
        return with_columns(program, _placed(held, [_run_moves(held, r, max_active_stages) for r in range(len(held))]))
    return program.with_ranks(_with_moves(steps, _moves(_windows(_computes(steps), max_active_stages), len(steps)))
                              for steps in program.ranks)


def _run_moves(cols: Columns, r: int, window: int) -> list[Move]:
    """Rank r's UNSHARD / RESHARD, from its runs of single compute steps on one stage (and its
    compound steps, each the stages of its compute parts); from the last step of each stage alone
    when the rank computes on no more stages than the window holds (`_few_stages`)."""
    lo, hi = cols.starts[r], cols.starts[r + 1]
    ops = cols.op[lo:hi]
    single = _is_compute()[ops] & (ops != COMPOUND)
    parts = cols.parts if cols.compounds else None
    c_lo, c_hi = np.searchsorted(parts.step, [lo, hi]) if parts is not None else (0, 0)
    if parts is None or c_hi == c_lo:  # (no compound here)
        at = np.flatnonzero(single)
        stages = cols.stage[lo:hi][at]
        if window >= 1 and len(np.unique(stages)) <= window:
            return _few_stages(at, stages, hi - lo)
        first = np.flatnonzero(np.diff(stages, prepend=stages[:1] - 1) != 0)  # where each run begins
        runs = [(s,) for s in stages[first].tolist()]
        return _moves(_windows(runs, window, at[first].tolist()), hi - lo)
    owner = parts.owner()
    computing = _is_compute()[parts.op] & (owner >= c_lo) & (owner < c_hi)
    steps = np.concatenate([np.flatnonzero(single), parts.step[owner[computing]] - lo])  # (each compute action's)
    order = np.argsort(steps, kind="stable")  # (a compound's parts in their order)
    stages = np.concatenate([cols.stage[lo:hi][single], parts.stage[computing]])[order]
    if window >= 1 and len(np.unique(stages)) <= window:
        return _few_stages(steps[order], stages, hi - lo)
    of: dict[int, tuple[int, ...]] = {}  # a compound's compute stages, in order
    for i, s in zip(parts.step[owner[computing]].tolist(), parts.stage[computing].tolist()):
        of[i] = of.get(i, ()) + (s,)
    at = np.flatnonzero(single | (ops == COMPOUND))
    stage = np.where(ops[at] == COMPOUND, -1, cols.stage[lo:hi][at])
    keep = (np.diff(stage, prepend=-1) != 0) | (stage < 0)  # (a single step on its previous single step's stage: one run)
    computes, where = [], []
    for x, s in zip(at[keep].tolist(), stage[keep].tolist()):
        here = (s,) if s >= 0 else of.get(lo + x, ())
        if here:
            computes.append(here)
            where.append(x)
    return _moves(_windows(computes, window, where), hi - lo)


def _few_stages(steps: np.ndarray, stages: np.ndarray, end: int) -> list[Move]:
    """`_moves` for a rank whose compute actions (at `steps`, on `stages`, in order) cover no more
    stages than the window holds: the window of each step is every stage computed on from it, in
    the order first computed on (`_upcoming` cuts nothing), so it changes only at the first step
    and after each stage's last: its windows there alone give the same moves."""
    if not len(steps):
        return _moves([], end)
    distinct, first = np.unique(stages, return_index=True)
    last = np.zeros(len(distinct), dtype=np.int64)
    np.maximum.at(last, np.searchsorted(distinct, stages), steps)  # each stage's last compute step
    after = np.searchsorted(steps, last, side="right")  # the compute action after it, if any
    changes = sorted(set(steps[after[after < len(steps)]].tolist()))
    windows = [(int(steps[0]), distinct[np.argsort(first)].tolist())]
    windows += [(x, [s for s, t in zip(distinct.tolist(), last.tolist()) if t >= x]) for x in changes]
    return _moves(windows, end)


def _windows(computes: Sequence[tuple[int, ...]], window: int, steps: list[int] | None = None):
    """(step, window) for each step that computes: its `_upcoming` stages. `steps`: the step of each
    entry of `computes` (default: its index)."""
    at = steps if steps is not None else range(len(computes))
    return [(i, stages) for i, stages in zip(at, _upcoming(computes, window)) if stages is not None]


def _moves(windows, end: int) -> list[Move]:
    """The stage actions torch adds, from the window of each step that computes ((step, stages), in
    order): evict the active stages not in the window, fetch its stages not active; at the end
    (`end`: the rank's length), RESHARD whatever is still active."""
    # a set, updated in torch's order: torch evicts in the set's iteration order, and so do we
    active: set[int] = set()
    out: list[Move] = []
    for i, stages in windows:
        evict = [s for s in active if s not in stages]
        fetch = [s for s in stages if s not in active]
        for s in evict:
            active.remove(s)
            out.append((i, Op.RESHARD, s))
        for s in fetch:
            active.add(s)
            out.append((i, Op.UNSHARD, s))
    out.extend((end, Op.RESHARD, s) for s in list(active))
    return out


def _with_moves(steps, moves: list[Move]) -> list[Step]:
    """The steps with each move's action placed before its step (moves in order)."""
    out: list[Step] = []
    done = 0
    for i, op, s in moves:
        out.extend(steps[done:i])
        done = i
        out.append(Action(op, s))
    out.extend(steps[done:])
    return out


def _upcoming(computes: Sequence[tuple[int, ...]], count: int) -> list[list[int] | None]:
    """For each step that computes (its stages, `computes`), the first `count` distinct stages
    computed on from it (torch's `next_stage_indices`: whole steps, so a compound may give one
    more); None for the others.

    Built from the last step back, each from the next one's (stages with the step that first
    computes on them): linear in the steps, where scanning ahead from each step was quadratic."""
    out: list[list[int] | None] = [None] * len(computes)
    ahead: list[tuple[int, int]] = []  # (stage, step) from the step after
    stages: list[int] = []  # the stages of `ahead`
    for i in range(len(computes) - 1, -1, -1):
        here = computes[i]
        if not here:
            continue
        if len(here) == 1 and count > 1 and stages and stages[0] == here[0]:
            # the stage the next window starts with, again: the window keeps its stages, this step
            # first computing on it (entries after the first keep their steps, so the cut is the same)
            ahead[0] = (stages[0], i)
            out[i] = stages
            continue
        own = list(dict.fromkeys(here))
        merged = [(s, i) for s in own] + [(s, j) for s, j in ahead if s not in own]
        cut = next((k + 1 for k in range(max(count, 1) - 1, len(merged))
                    if k + 1 == len(merged) or merged[k + 1][1] != merged[k][1]), len(merged))
        ahead = merged[:cut]
        out[i] = stages = [s for s, _ in ahead]
    return out


def add_reduce_grad(program: Program) -> Program:
    """REDUCE_GRAD(s) right after the step that runs stage s's last (M-th) B or W.

    As torch's `_add_reduce_grad`. A program that already has REDUCE_GRAD actions is left as it is.
    """
    if has_op(program, Op.REDUCE_GRAD):
        return program
    M = program.num_microbatches
    held = columns_of(program)
    if held is not None:
        return with_columns(program, _placed(held, _last_backwards(held, M)))
    ranks = []
    for steps in program.ranks:
        done: dict[int, int] = {}
        moves: list[Move] = []  # after the step of each stage's M-th backward, in order
        for i, step in enumerate(steps):
            for a in ((step,) if step.__class__ is Action else step.parts):
                if a.op in _BACKWARDS:
                    n = done[a.stage] = done.get(a.stage, 0) + 1
                    if n == M:
                        moves.append((i + 1, Op.REDUCE_GRAD, a.stage))
        ranks.append(_with_moves(steps, moves))
    return program.with_ranks(ranks)


def _last_backwards(cols: Columns, M: int) -> list[list[Move]]:
    """Per rank, REDUCE_GRAD(s) after the step of stage s's M-th backward on it, in step order (a
    compound's backward parts in their order)."""
    op, stage, _, step = cols.opened()
    i = np.flatnonzero(_is_backward()[op])  # (actions, in order)
    rank = np.searchsorted(cols.starts, step[i], side="right") - 1
    by = np.lexsort((i, stage[i], rank))  # each (rank, stage)'s backwards in order, one after another
    group = np.r_[True, (np.diff(rank[by]) != 0) | (np.diff(stage[i][by]) != 0)]
    first = np.maximum.accumulate(np.where(group, np.arange(len(by)), 0))
    nth = np.sort(by[np.arange(len(by)) - first == M - 1])  # (ranks in order, then steps)
    moves: list[list[Move]] = [[] for _ in range(len(cols))]
    for r, x, s in zip(rank[nth].tolist(), step[i[nth]].tolist(), stage[i[nth]].tolist()):
        moves[r].append((x - cols.starts[r] + 1, Op.REDUCE_GRAD, s))
    return moves


def _placed(cols: Columns, moves: list[list[Move]]) -> Columns:
    """The columns with rank r's `moves[r]` placed among its steps, each before the step it names
    (in order; at the end of the rank, after its last step): no action is made (a compound's parts
    go with it, and the compounds kept stay, with their parts' spans)."""
    at = [cols.starts[r] + i for r, rank_moves in enumerate(moves) for i, _, _ in rank_moves]
    ops = [CODE[op] for rank_moves in moves for _, op, _ in rank_moves]
    stages = [s for rank_moves in moves for _, _, s in rank_moves]
    spans = None if cols.spans is None else np.insert(_span_objects(cols.spans), at, None)
    kept = parts = None
    if cols.compounds:  # (an old step moves by the moves placed at or before it)
        parts = cols.parts.renumbered(cols.parts.step + np.searchsorted(at, cols.parts.step, side="right"))
        kept = None if cols.kept is None else np.insert(objects(cols.kept), at, None)
    starts = np.asarray(cols.starts) + np.cumsum([0] + [len(rank_moves) for rank_moves in moves])
    return Columns(np.insert(cols.op, at, ops), np.insert(cols.stage, at, stages),
                   np.insert(cols.microbatch, at, NO_MICROBATCH), starts.tolist(), spans, kept, parts)


def _span_objects(spans) -> np.ndarray:
    """The spans as an array of objects (a CSV's, made on demand, are made now)."""
    return spans if isinstance(spans, np.ndarray) else objects(spans[:])


def add_step_collectives(program: Program) -> Program:
    """A data-parallel step's collectives where the schedule does not place them, as `schedc run`
    does: REDUCE_GRAD(s) at the end of its rank's list (in stage order) for each stage whose
    reduction takes time (a description's `R`) and that the rank does not reduce; UNSHARD(s) at the
    start (in the order the rank first computes on them) for each stage whose weights are gathered
    (`U`, FSDP) and that the rank does not gather. Each replica of a job gets its own (replicas that
    share their lists, once). A program whose collectives take no time is returned as it is."""
    reduce, gather = step_collectives([program.annotations.cost_of(s) for s in range(program.num_stages)])
    if not reduce and not gather:
        return program
    lists = program.each_replica(lambda one: _with_step_collectives(one, reduce, gather))
    return replace(program, ranks=lists[0], replicas=tuple(lists[1:]))


def _with_step_collectives(program: Program, reduce: set[int], gather: set[int]):
    """One pipeline's rank lists with the step's implicit collectives (`add_step_collectives`)."""
    held = columns_of(program)
    opened = held.opened() if held is not None and held.compounds else None
    moves: list[list[Move]] = []
    for r in range(program.num_ranks):
        ops, computed = _stage_ops_and_computes(program, held, r, opened)
        mine = [s for s in range(program.num_stages) if program.placement[s] == r]
        n = len(program.ranks[r]) if held is None else held.starts[r + 1] - held.starts[r]
        moves.append([(0, Op.UNSHARD, s) for s in computed if s in gather and (Op.UNSHARD, s) not in ops]
                     + [(n, Op.REDUCE_GRAD, s) for s in mine if s in reduce and (Op.REDUCE_GRAD, s) not in ops])
    if held is not None:
        return _placed(held, moves)
    return program.with_ranks(_with_moves(steps, rank_moves) for steps, rank_moves in zip(program.ranks, moves)).ranks


def _stage_ops_and_computes(program: Program, held: Columns | None, r: int, opened=None) -> tuple[set, list[int]]:
    """Rank r's (op, stage) of its UNSHARD and REDUCE_GRAD actions, and the stages it computes on,
    in the order it first does (`opened`: the columns' `opened()`, when they hold compounds)."""
    if held is not None:
        lo, hi = held.starts[r], held.starts[r + 1]
        op, stage = held.op[lo:hi], held.stage[lo:hi]
        if opened is not None:  # (a compound's parts in its place)
            op, stage, _, step = opened
            lo, hi = np.searchsorted(step, [lo, hi])
            op, stage = op[lo:hi], stage[lo:hi]
        ops: set[tuple[Op, int]] = {(o, int(s)) for o in (Op.UNSHARD, Op.REDUCE_GRAD) for s in np.unique(stage[op == CODE[o]])}
        at = np.flatnonzero(_is_compute()[op])
        first = np.unique(stage[at], return_index=True)
        return ops, [int(s) for _, s in sorted(zip(first[1].tolist(), first[0].tolist()))]
    ops = set()
    computed: dict[int, None] = {}  # (a dict: the stages in the order first computed on)
    for st in program.ranks[r]:
        for a in st.parts:
            if a.op in (Op.UNSHARD, Op.REDUCE_GRAD):
                ops.add((a.op, a.stage))
            elif a.op in _COMPUTE:
                computed.setdefault(a.stage, None)
    return ops, list(computed)
