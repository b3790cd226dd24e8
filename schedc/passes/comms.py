"""Insert communication: compute level to communication level (docs/semantics.md's convention).

Every value that crosses ranks gets SEND_* right after its producer and RECV_* on the consumer's
rank. The ranks are stepped in lockstep rounds (one step per rank per round, ranks in order); a
receive is appended to the consumer's list in the round its sender runs. That global order is a
valid run in which each send meets its receive at once, so the result cannot deadlock even when
sends block until received, and each channel's receives are in its sends' order (FIFO match).

The pass works on integers: each step's needs, product and message are looked up once, for all
steps at a time, from deps.py's tables, the rounds only record the order in which the steps run,
and the lowered program is built from that order as columns (schedc/columns.py), its sends and
receives made as actions only when something asks for them.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from ..columns import CODE, COMPOUND, Columns, as_columns, objects
from ..errors import SchedcError
from ..ir import MAX_LOWERED_ACTIONS, Op, Program
from ..lazy_numpy import np
from ..rules import deps


def insert_comms(program: Program) -> Program:
    if program.level == "comms":
        return program
    steps = _Steps.of(program)
    return replace(program, ranks=_lowered(steps, _rounds(steps, program.num_ranks), program.num_ranks))


def within_limit(program: Program) -> Program:
    """The lowered program's size, counted before any of it is built: every value that crosses
    ranks adds a send and a receive; over MAX_LOWERED_ACTIONS is a `too-large` error, not a lowering that
    runs out of memory. A program with its communication already written passes as it is."""
    if program.level == "comms":
        return program
    total = lowered_size(program)
    if total > MAX_LOWERED_ACTIONS:
        raise SchedcError("too-large", f"lowering adds {total - program.num_actions:,} sends and receives: the "
                          f"program would have {total:,} actions, beyond the limit of {MAX_LOWERED_ACTIONS:,}",
                          where=program.source or program.name)
    return program


def lowered_size(program: Program) -> int:
    """How many actions `insert_comms` makes of one pipeline, counted without building them: a send
    and a receive for every value that crosses ranks (none for a program that has its own)."""
    if program.level == "comms":
        return program.num_actions
    return program.num_actions + 2 * len(_Steps.messages_of(program)["step"])


# deps.py's rule as arrays over op codes: the kind of value an op makes at its own (stage,
# microbatch), and its k-th need as (kind, stage offset); built at first use (numpy loads lazily)
_KIND = {"act": 0, "grad": 1}
NONE, OTHER = -1, -2  # no value (or rank); a compound's (looked up in `_Steps.compound`)
_SEND = {_KIND[deps.NEEDS[op][0][0]]: CODE[op] for op in (Op.SEND_F, Op.SEND_B)}  # what carries a kind of value
_RECEIVE = {_KIND[kind]: CODE[op] for op, (kind, _) in deps.DELIVERS.items()}


@lru_cache(maxsize=1)
def _tables() -> tuple[Any, list[tuple[Any, Any]], Any]:
    """(MAKES, NEEDS, CONSUMER_OFFSET): by op code the kind an op makes; per need, its kinds and
    stage offsets; by value kind, the offset of the stage that uses it."""
    makes = np.full(len(CODE), -1, dtype=np.int64)
    for op, kind in deps.MAKES.items():
        makes[CODE[op]] = _KIND[kind]
    needs = []
    for k in range(max(len(n) for n in deps.NEEDS.values())):
        kinds, offsets = np.full(len(CODE), -1, dtype=np.int64), np.zeros(len(CODE), dtype=np.int64)
        for op, wanted in deps.NEEDS.items():
            if len(wanted) > k:
                kinds[CODE[op]], offsets[CODE[op]] = _KIND[wanted[k][0]], wanted[k][1]
        needs.append((kinds, offsets))
    consumer = np.zeros(len(_KIND), dtype=np.int64)  # by value kind: the stage that uses a value of s is s + this
    for kind, off in deps.CONSUMER_OFFSET.items():
        consumer[_KIND[kind]] = off
    return makes, needs, consumer


@dataclass
class _Steps:
    """A compute-level program's steps, rank by rank, as integers. A value on a rank is the number
    `((stage * width + microbatch) * 2 + kind) * R + rank`; NONE stands for "no value". For each
    step: the values it needs on its rank (`need_a`, `need_b`), the value it makes there (`own`),
    and the value its message puts on the rank `dest` (`sent`; `dest` NONE: no message). A compound
    has OTHER in `need_a` and `dest`, and its needs, values and destinations in `compound`.
    `messages` holds columns of every message: the step and part that make its value, the kind (0
    an activation, 1 a gradient), the stage that made it, the stage that receives it, the
    microbatch and the destination rank."""

    columns: Columns
    rank: np.ndarray
    need_a: list[int]
    need_b: list[int]
    own: list[int]
    sent: list[int]
    dest: list[int]
    compound: dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]
    messages: dict[str, np.ndarray]

    @classmethod
    def of(cls, program: Program) -> "_Steps":
        cols, R = as_columns(program), program.num_ranks
        op, stage, mb = (a.astype(np.int64) for a in (cols.op, cols.stage, cols.microbatch))
        rank = np.repeat(np.arange(R, dtype=np.int64), np.diff(cols.starts))
        width = int(mb.max(initial=0)) + 1
        big = (int(stage.max(initial=0)) + 2) * width * 2 * R >= 2 ** 62  # Python integers, past int64
        number = (lambda a: a.astype(object)) if big else (lambda a: a)

        def on(kind, at, m, r):  # the value (kind, stage `at`, microbatch m) on rank r
            return ((number(at) * width + m) * 2 + kind) * R + r

        single, code = op != COMPOUND, np.where(op == COMPOUND, 0, op)  # compounds: part by part, below
        lo, hi = _segments(program, stage)
        needs = []
        for kinds, offsets in _tables()[1]:  # each op's k-th need, where the stage it names exists
            at = stage + offsets[code]
            ok = single & (kinds[code] >= 0) & (at >= lo) & (at < hi)
            needs.append(np.where(ok, on(kinds[code], at, mb, rank), NONE).tolist())
        kind = np.where(single, _tables()[0][code], -1)
        msg = cls._messages(program, cols, kind, stage, mb)
        msg["value"] = on(msg["kind"], msg["stage"], msg["mb"], msg["dest"])
        sent, dest = np.full(len(op), NONE, dtype=msg["value"].dtype), np.full(len(op), NONE)
        sent[msg["step"]], dest[msg["step"]] = msg["value"], msg["dest"]
        own = np.where(kind >= 0, on(kind, stage, mb, rank), NONE).tolist()
        steps = cls(cols, rank, *needs, own, sent.tolist(), dest.tolist(), {}, msg)
        compounds = np.flatnonzero(~single).tolist()
        if compounds:
            steps._add_compounds(compounds, program, width, on)
        return steps

    def _add_compounds(self, compounds: list[int], program: Program, width: int, on) -> None:
        """Each compound's needs, values and messages, part by part by deps.py's functions."""
        parts = []
        for i in compounds:
            needs, makes = _compound(self.columns.kept[i], i, int(self.rank[i]), program, width, parts)
            self.compound[i] = (needs, makes, ())
            self.need_a[i] = self.dest[i] = OTHER
        extra = {name: np.asarray([m[name] for m in parts], dtype=np.int64) for name in self.messages if name != "value"}
        extra["value"] = on(extra["kind"], extra["stage"], extra["mb"], extra["dest"])
        for m, v in zip(parts, extra["value"].tolist()):
            needs, makes, dests = self.compound[m["step"]]
            self.compound[m["step"]] = (needs, makes + (v,), dests + (m["dest"],))
        self.messages = {name: np.concatenate([self.messages[name], extra[name]]) for name in self.messages}

    @staticmethod
    def messages_of(program: Program) -> dict[str, np.ndarray]:
        """The messages of the program's single actions (compounds' are added by `of`)."""
        cols = as_columns(program)
        op, stage, mb = (a.astype(np.int64) for a in (cols.op, cols.stage, cols.microbatch))
        kind = np.where(op == COMPOUND, -1, _tables()[0][np.where(op == COMPOUND, 0, op)])
        msg = _Steps._messages(program, cols, kind, stage, mb)
        if cols.compounds:
            msg["step"] = np.concatenate([msg["step"], [0] * sum(
                deps.remote_consumer(a, program.placement, deps.stages_of(program)) is not None
                for i in np.flatnonzero(op == COMPOUND).tolist() for a in cols.kept[i].parts)])
        return msg

    @staticmethod
    def _messages(program: Program, cols: Columns, kind, stage, mb) -> dict[str, np.ndarray]:
        S, placement = program.num_stages, np.asarray(program.placement, dtype=np.int64)
        to = stage + _tables()[2][np.maximum(kind, 0)]  # the consumer (no value: `crosses` drops it)
        home = placement[np.clip(stage, 0, S - 1)]
        lo, hi = _segments(program, stage)
        crosses = (kind >= 0) & (to >= lo) & (to < hi) & (placement[np.clip(to, 0, S - 1)] != home)
        i = np.flatnonzero(crosses)
        return {"step": i, "part": np.zeros(len(i), dtype=np.int64), "kind": kind[i], "stage": stage[i],
                "receiver": to[i], "mb": mb[i], "dest": placement[to[i]]}


def _segments(program: Program, stage: np.ndarray) -> tuple[Any, Any]:
    """deps.py's `bounds` of each stage in `stage`: the first and one past the last stage its
    neighbours may be (0 and S, or arrays of its route's segment)."""
    stages = deps.stages_of(program)
    if isinstance(stages, int):
        return 0, stages
    S = program.num_stages
    at = np.clip(stage, 0, max(S - 1, 0))
    return np.asarray(stages.first, dtype=np.int64)[at], np.asarray(stages.stop, dtype=np.int64)[at]


def _compound(step, i: int, rank: int, program: Program, width: int, messages: list) -> tuple[tuple, tuple]:
    """Compound step i's needs and makes on its rank; its messages appended to `messages` (their
    values are added to what it puts by the caller)."""
    S, R = deps.stages_of(program), program.num_ranks

    def on(v, r):
        kind, s, m = v
        return ((s * width + m) * 2 + _KIND[kind]) * R + r
    needs = tuple(on(v, rank) for a in step.parts for v in deps.needs(a, S))
    makes = tuple(on(deps.produces(a), rank) for a in step.parts if deps.produces(a) is not None)
    for part, a in enumerate(step.parts):
        to = deps.remote_consumer(a, program.placement, S)
        if to is not None:
            messages.append({"step": i, "part": part, "kind": _KIND[deps.produces(a)[0]], "stage": a.stage,
                             "receiver": to, "mb": a.microbatch, "dest": program.placement[to]})
    return needs, makes


def _rounds(steps: _Steps, R: int) -> list[int]:
    """The steps (flat indices) in the order the lockstep rounds run them. A rank blocked at its
    last try stays blocked until a value is delivered to it, so only ranks that can move are
    visited: the work is linear in the steps, not in rounds x ranks (a drain over 65,536 ranks
    takes one round per rank). A rank woken later in its own round is tried in that round."""
    starts = steps.columns.starts
    pc, ends = list(starts[:-1]), starts[1:]
    need_a, need_b, own, sent, dest, compound = (steps.need_a, steps.need_b, steps.own, steps.sent, steps.dest,
                                                 steps.compound)
    have = {NONE}  # the values on their ranks (and NONE, which every step has)
    order: list[int] = []
    # the loop below runs once per step: its methods are looked up once
    has_all, put, add, run = have.issuperset, have.update, have.add, order.append
    pop, push = heapq.heappop, heapq.heappush
    this_round = [r for r in range(R) if pc[r] < ends[r]]
    while len(order) < len(own):
        if not this_round:
            stuck = ", ".join(f"rank {r} at {steps.columns.step(r, pc[r] - starts[r])}"
                              for r in range(R) if pc[r] < ends[r])
            raise SchedcError("deadlock", f"cannot insert communication: the compute order deadlocks ({stuck})")
        heapq.heapify(this_round)
        pending, next_round = set(this_round), set()
        while this_round:
            r = pop(this_round)
            i = pc[r]
            if i == ends[r]:
                continue
            a = need_a[i]
            if (a not in have or need_b[i] not in have) and (a != OTHER or not has_all(compound[i][0])):
                continue
            pc[r] = i + 1
            next_round.add(r)
            run(i)
            d = dest[i]
            if d == OTHER:  # a compound
                _, values, dests = compound[i]
                put(values)
            else:
                add(own[i])
                add(sent[i])
                dests = () if d == NONE else (d,)
            for d in dests:
                if d > r and d not in pending:  # its turn in this round is still to come
                    pending.add(d)
                    push(this_round, d)
                elif d < r:
                    next_round.add(d)
        this_round = list(next_round)
    return order


def _lowered(steps: _Steps, order: list[int], R: int) -> Columns:
    """The lowered columns: each rank's steps in `order`, every message's send appended to its
    rank right after its step, and its receive to the destination's list at the same moment."""
    cols, msg = steps.columns, steps.messages
    n = len(order)
    when = np.empty(n, dtype=np.int64)
    when[np.asarray(order, dtype=np.int64)] = np.arange(n)
    slots = 1 + 2 * (int(msg["part"].max(initial=0)) + 1)  # a step, then per message its send and receive
    at = when[msg["step"]] * slots + 2 * msg["part"]
    seq = np.concatenate([when * slots, at + 1, at + 2])
    rank = np.concatenate([steps.rank, steps.rank[msg["step"]], msg["dest"]])
    op = np.concatenate([cols.op, _codes(_SEND, msg["kind"]), _codes(_RECEIVE, msg["kind"])])
    stage = np.concatenate([cols.stage, msg["stage"], msg["receiver"]])
    mb = np.concatenate([cols.microbatch, msg["mb"], msg["mb"]])
    origin = np.concatenate([np.arange(n), msg["step"], msg["step"]])  # the step each is made from
    out = np.lexsort((seq, rank))
    spans = None if cols.spans is None else _take(cols.spans, origin[out])
    kept = None
    if cols.kept is not None:
        kept = np.concatenate([objects(cols.kept), np.full(2 * len(msg["step"]), None)])[out]
        if cols.compounds:  # a compound's messages carry the span of their own part
            part = np.concatenate([np.zeros(n, dtype=np.int64), msg["part"], msg["part"]])[out]
            spans = objects(spans)
            for j, (made, step) in enumerate(zip(kept, cols.kept[origin[out]])):
                if made is None and step is not None and len(step.parts) > 1:
                    spans[j] = step.parts[int(part[j])].span
    return Columns(op[out].astype(np.int8), _narrow(stage[out]), _narrow(mb[out]),
                   np.searchsorted(rank[out], np.arange(R + 1)), spans, kept)


def _narrow(values: np.ndarray) -> np.ndarray:
    """The values as 32-bit integers when they fit (half the memory of a big lowering)."""
    fits = not len(values) or (int(values.min()) >= -2 ** 31 and int(values.max()) < 2 ** 31)
    return values.astype(np.int32) if fits and values.dtype != object else values


def _codes(table: dict[int, int], kinds: np.ndarray) -> np.ndarray:
    """Op codes by kind of value (send or receive)."""
    return np.where(kinds == 0, table[0], table[1])


def _take(spans, index: np.ndarray):
    """spans[index] for each index, without making spans that are made on demand (a CSV's)."""
    if isinstance(spans, np.ndarray):
        return spans[index]
    return spans.take(index) if hasattr(spans, "take") else objects(spans)[index]


__all__ = ["insert_comms", "within_limit"]
