"""Insert communication: compute level to communication level (docs/semantics.md's convention).

Every value that crosses ranks gets SEND_* right after its producer and RECV_* on the consumer's
rank. The ranks are stepped in lockstep rounds (one step per rank per round, ranks in order); a
receive is appended to the consumer's list in the round its sender runs. That global order is a
valid run in which each send meets its receive at once, so the result cannot deadlock even when
sends block until received, and each channel's receives are in its sends' order (FIFO match).

The pass works on integers: each action's needs, product and message are looked up once, for all
actions at a time, from deps.py's tables (a compound's parts too: schedc/columns.py's `Parts`); the
round each step runs in is found in one pass over the steps (`_when`; the rounds themselves,
`_rounds`, where a value is made twice or never comes), and the lowered program is built from that
order as columns, its sends and receives made as actions only when something asks for them. A small
program held as actions is lowered the same way in plain Python (`_lower_small`).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import accumulate, chain
from typing import Any

from ..columns import CODE, COMPOUND, OPS, Columns, as_columns, held_as_columns, objects, with_columns
from ..errors import SchedcError
from ..ir import MAX_LOWERED_ACTIONS, Action, Op, Program, Step, unchecked_action
from ..lazy_numpy import np
from ..rules import deps


def insert_comms(program: Program) -> Program:
    if program.level == "comms":
        return program
    if _small(program):
        lowered = _lower_small(program)
        return lowered if isinstance(lowered, Program) else replace(program, ranks=lowered)
    steps = _Steps.of(program)
    when = _when(steps, program.num_ranks)
    if when is None:  # (a value made twice, or one that never comes: the rounds, run as they are)
        when = _position(_rounds(steps, program.num_ranks))
    return with_columns(program, _lowered(steps, when, program.num_ranks))


def within_limit(program: Program) -> Program:
    """The lowered program's size, counted before any of it is built: every value that crosses
    ranks adds a send and a receive; over MAX_LOWERED_ACTIONS is a `too-large` error, not a lowering that
    runs out of memory. A program with its communication already written passes as it is."""
    if program.level == "comms" or 3 * program.num_actions <= MAX_LOWERED_ACTIONS:
        return program  # (each action sends at most one message: a send and a receive more)
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
    return program.num_actions + 2 * len(_Steps.messages_of(program)["action"])


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
    """A compute-level program's actions as integers (a compound's parts one by one, each with its
    step). A value on a rank is the number `((stage * width + microbatch) * 2 + kind) * R + rank`;
    NONE stands for "no value". Per action (`needs`, `own`, `step`): the values it needs on its
    rank (one array per need), the value it makes there, and its step. `messages` holds columns of
    every message: the action, step and part that make its value, the kind (0 an activation, 1 a
    gradient), the stage that made it, the stage that receives it, the microbatch, the destination
    rank and the value it puts there. `rank`: each step's rank."""

    columns: Columns
    rank: np.ndarray
    needs: list[np.ndarray]
    own: np.ndarray
    step: np.ndarray
    messages: dict[str, np.ndarray]

    @classmethod
    def of(cls, program: Program) -> "_Steps":
        cols, R = as_columns(program), program.num_ranks
        op, stage, mb, step = (a.astype(np.int64) for a in cols.opened())  # (a compound's parts share its step)
        rank = np.repeat(np.arange(R, dtype=np.int64), np.diff(cols.starts))
        width = int(mb.max(initial=0)) + 1
        big = (int(stage.max(initial=0)) + 2) * width * 2 * R >= 2 ** 62  # Python integers, past int64
        number = (lambda a: a.astype(object)) if big else (lambda a: a)
        where = rank[step]  # each action's rank

        def on(kind, at, m, r):  # the value (kind, stage `at`, microbatch m) on rank r
            return ((number(at) * width + m) * 2 + kind) * R + r

        lo, hi = _segments(program, stage)
        needs = []
        for kinds, offsets in _tables()[1]:  # each op's k-th need, where the stage it names exists
            at = stage + offsets[op]
            ok = (kinds[op] >= 0) & (at >= lo) & (at < hi)
            needs.append(np.where(ok, on(kinds[op], at, mb, where), NONE))
        kind = _tables()[0][op]
        msg = cls._messages(program, kind, stage, mb)
        msg["step"] = step[msg["action"]]
        msg["part"] = msg["action"] - np.searchsorted(step, msg["step"])
        msg["value"] = on(msg["kind"], msg["stage"], msg["mb"], msg["dest"])
        return cls(cols, rank, needs, np.where(kind >= 0, on(kind, stage, mb, where), NONE), step, msg)

    def lists(self):
        """Per step, as lists for `_rounds`: the values it needs (`need_a`, `need_b`), the value it
        makes (`own`) and the value its message puts (`sent`) on the rank `dest` (NONE: no message);
        a compound has OTHER in `need_a` and `dest`, and in `compound` its needs, values and
        destinations, part by part (NONE where a part has none)."""
        cols, msg, needs, own = self.columns, self.messages, self.needs, self.own
        n = len(cols.op)
        single = cols.op != COMPOUND
        first = np.searchsorted(self.step, np.arange(n))  # each step's first action
        at = first[single]  # (the one action of each single step)

        def per_step(values, other):
            out = np.full(n, other, dtype=values.dtype)
            out[single] = values[at]
            return out.tolist()
        alone = single[msg["step"]]
        sent, dest = np.full(n, NONE, dtype=msg["value"].dtype), np.where(single, NONE, OTHER)
        sent[msg["step"][alone]], dest[msg["step"][alone]] = msg["value"][alone], msg["dest"][alone]
        compound = {}
        if cols.compounds:
            parts = cols.parts
            owner = parts.owner()
            k = np.arange(len(parts.op)) - parts.starts[owner]  # each part's place in its compound
            part = first[parts.step][owner] + k
            mval, mdest = np.full(len(own), NONE, dtype=msg["value"].dtype), np.full(len(own), NONE)
            mval[msg["action"]], mdest[msg["action"]] = msg["value"], msg["dest"]

            def rows(*columns):  # each compound's values of these columns, part by part (NONE past its parts)
                width = int(parts.sizes.max())
                out = np.full((len(parts), len(columns) * width), NONE, dtype=np.result_type(*columns))
                for j, c in enumerate(columns):
                    out[owner, j * width + k] = c[part]
                return out.tolist()
            compound = dict(zip(parts.step.tolist(), zip(rows(*needs), rows(own, mval), rows(mdest))))
        return (per_step(needs[0], OTHER), per_step(needs[1], NONE), per_step(own, NONE), sent.tolist(),
                dest.tolist(), compound)

    @staticmethod
    def messages_of(program: Program) -> dict[str, np.ndarray]:
        """The messages of the program's actions (a compound's, part by part)."""
        op, stage, mb, _ = (a.astype(np.int64) for a in as_columns(program).opened())
        return _Steps._messages(program, _tables()[0][op], stage, mb)

    @staticmethod
    def _messages(program: Program, kind, stage, mb) -> dict[str, np.ndarray]:
        """Per action (`kind`, `stage`, `mb`: the kind of value it makes, -1 none) that sends what
        it makes: its index (`action`), the kind, its stage, the stage that receives it, the
        microbatch and the destination rank."""
        S, placement = program.num_stages, np.asarray(program.placement, dtype=np.int64)
        to = stage + _tables()[2][np.maximum(kind, 0)]  # the consumer (no value: `crosses` drops it)
        home = placement[np.clip(stage, 0, S - 1)]
        lo, hi = _segments(program, stage)
        crosses = (kind >= 0) & (to >= lo) & (to < hi) & (placement[np.clip(to, 0, S - 1)] != home)
        i = np.flatnonzero(crosses)
        return {"action": i, "kind": kind[i], "stage": stage[i], "receiver": to[i], "mb": mb[i],
                "dest": placement[to[i]]}


def _segments(program: Program, stage: np.ndarray) -> tuple[Any, Any]:
    """deps.py's `bounds` of each stage in `stage`: the first and one past the last stage its
    neighbours may be (0 and S, or arrays of its route's segment)."""
    stages = deps.stages_of(program)
    if isinstance(stages, int):
        return 0, stages
    S = program.num_stages
    at = np.clip(stage, 0, max(S - 1, 0))
    return np.asarray(stages.first, dtype=np.int64)[at], np.asarray(stages.stop, dtype=np.int64)[at]


def _rounds(steps: _Steps, R: int) -> list[int]:
    """`_run_rounds` of the program's steps."""
    return _run_rounds(steps.lists(), steps.columns.starts, R, steps.columns.step)


def _run_rounds(lists, starts: list[int], R: int, step_at) -> list[int]:
    """The steps (flat indices) in the order the lockstep rounds run them. A rank blocked at its
    last try stays blocked until a value is delivered to it, so only ranks that can move are
    visited: the work is linear in the steps, not in rounds x ranks (a drain over 65,536 ranks
    takes one round per rank). A rank woken later in its own round is tried in that round.
    `lists`: `_Steps.lists`; `starts`: where each rank's steps begin; `step_at(r, i)`: rank r's step i."""
    pc, ends = list(starts[:-1]), starts[1:]
    need_a, need_b, own, sent, dest, compound = lists
    have = {NONE}  # the values on their ranks (and NONE, which every step has)
    order: list[int] = []
    # the loop below runs once per step: its methods are looked up once
    has_all, put, add, run = have.issuperset, have.update, have.add, order.append
    pop, push = heapq.heappop, heapq.heappush
    this_round = [r for r in range(R) if pc[r] < ends[r]]
    while len(order) < len(own):
        if not this_round:
            stuck = ", ".join(f"rank {r} at {step_at(r, pc[r] - starts[r])}"
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
                elif 0 <= d < r:  # (NONE: a compound's part that sends nothing)
                    next_round.add(d)
        this_round = list(next_round)
    return order


SMALL_STEPS = 192  # programs held as actions up to this many steps are lowered in plain Python (`_lower_small`)


def _small(program: Program) -> bool:
    return type(program.ranks) is tuple and sum(map(len, program.ranks)) <= SMALL_STEPS and not program.replicas


def held_unless_small(program: Program) -> Program:
    """The program with its steps held as columns (`held_as_columns`), unless it is small and held as
    actions: `insert_comms` lowers that one in plain Python."""
    return program if _small(program) else held_as_columns(program)


def _lower_small(program: Program):  # noqa: C901 - the rounds' loop, one step at a time
    """`insert_comms` of a small program held as actions, in plain Python (numpy's calls cost more
    than the work): the rounds of `_when`, found in one pass (a value on a rank, numbered
    `((microbatch * S + stage) * 2 + kind) * R + rank`, is known with the round it can first be
    used in there), each step's sends and receives made as it runs, then the steps by round and
    rank with each send right after its step and its receive on its rank at that moment; the same
    steps. A program this pass does not decide as `_when` would (a value made twice, a step that
    waits for ever, an action on a stage the program does not have) is lowered as a large one,
    which says why."""
    R = program.num_ranks
    per_m = 2 * program.num_stages * R  # (a microbatch more)
    rule = _Rule(program)
    plan_of = rule.plans.get
    flat = list(chain.from_iterable(program.ranks))
    starts = list(accumulate(map(len, program.ranks), initial=0))
    key = [0] * len(flat)  # each step's round * R + rank, once it has run
    sent: list = [None] * len(flat)  # each step's (send, destination rank, receive), part by part
    made: dict[int, int] = {}  # a value on a rank -> the first round its rank can use it in
    made_at = made.get
    waiting: dict[int, list[int]] = {}  # a value on a rank -> the ranks waiting for it
    pc, last = starts[:-1], [-1] * R
    work = list(range(R - 1, -1, -1))
    while work:
        r = work.pop()
        x, hi, t = pc[r], starts[r + 1], last[r]
        while x < hi:
            st = flat[x]
            ready, parts = t + 1, []
            for a in ((st,) if st.__class__ is Action else st.parts):
                plan = plan_of((a.op, a.stage)) or rule.plan(a)
                if plan is None:
                    return insert_comms(held_as_columns(program))  # (a stage past the ends: the arrays clip it)
                base = (a.microbatch or 0) * per_m + r
                for v in plan[0]:
                    q = made_at(v + base)
                    if q is None:  # not made yet: wait for it
                        waiting.setdefault(v + base, []).append(r)
                        break
                    if q > ready:
                        ready = q
                else:
                    parts.append((a, plan, base))
                    continue
                break
            else:
                t = ready
                key[x] = t * R + r
                for a, (_, makes, message), base in parts:
                    if makes == NONE:
                        continue
                    v = makes + base
                    values = ((v, t),) if message is None else ((v, t), (v - r + message[0], t + (r > message[0])))
                    for v, q in values:
                        if v in made:
                            return insert_comms(held_as_columns(program))  # (made twice)
                        made[v] = q
                        if v in waiting:
                            work += waiting.pop(v)
                    if message is not None:
                        to, send_op, receive_op, receiver = message
                        one = (unchecked_action(send_op, a.stage, a.microbatch, a.span), to,
                               unchecked_action(receive_op, receiver, a.microbatch, a.span))
                        if sent[x] is None:
                            sent[x] = [one]
                        else:
                            sent[x].append(one)
                x += 1
                continue
            break
        pc[r], last[r] = x, t
    if pc != starts[1:]:
        return insert_comms(held_as_columns(program))  # (a step waits for ever: the rounds say where)
    rows: list[list[Step]] = [[] for _ in range(R)]
    for x in sorted(range(len(flat)), key=key.__getitem__):
        row = rows[key[x] % R]
        row.append(flat[x])
        if sent[x] is not None:
            for send, to, receive in sent[x]:
                row.append(send)
                rows[to].append(receive)
    return tuple(map(tuple, rows))


class _Rule:
    """deps.py's rule (its tables) for one program's (op, stage) pairs, as `_lower_small` reads it;
    `plans` holds those worked out so far."""

    def __init__(self, program: Program):
        self.R, self.S, self.placement = program.num_ranks, program.num_stages, program.placement
        self.stages = deps.stages_of(program)
        self.plans: dict[tuple, tuple] = {}

    def plan(self, a: Action) -> tuple | None:
        """The rule for (a.op, a.stage), kept in `plans`: the values it needs and the one it makes,
        numbered as `_lower_small` numbers them but for microbatch 0 on rank 0, and its message:
        (destination rank, send op, receive op, receiving stage), or None; None for a stage the
        program does not have."""
        R, placement, s = self.R, self.placement, a.stage
        if not 0 <= s < self.S:
            return None
        lo, hi = deps.bounds(self.stages, s)  # (a routed stage's neighbours are its route's)
        plan: tuple = ((), NONE, None)
        if a.microbatch is not None:
            needs = tuple((2 * (s + off) + _KIND[kind]) * R for kind, off in deps.NEEDS.get(a.op, ()) if lo <= s + off < hi)
            kind = deps.MAKES.get(a.op)
            message = None
            if kind is not None:
                to = s + deps.CONSUMER_OFFSET[kind]
                if lo <= to < hi and placement[to] != placement[s]:
                    message = (placement[to], OPS[_SEND[_KIND[kind]]], OPS[_RECEIVE[_KIND[kind]]], to)
            plan = (needs, NONE if kind is None else (2 * s + _KIND[kind]) * R, message)
        self.plans[(a.op, a.stage)] = plan
        return plan


def _position(order) -> np.ndarray:
    """Each step's place in `order` (a list or an array of the steps)."""
    when = np.empty(len(order), dtype=np.int64)
    when[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    return when


def _when(steps: _Steps, R: int) -> np.ndarray | None:  # noqa: C901 - one loop, once per step
    """Each step's place in the order `_rounds` runs the steps, found as the round each runs in:
    the round after its rank's previous step, and no earlier than the round its inputs from other
    ranks are made in, or the round after it when their rank comes after its own (the ranks of a
    round run in order); the order is by round, then by rank. None when some value on a rank is
    made twice, or a step waits for one that is never made before it (`_rounds` decides those)."""
    sources = _sources(steps)
    if sources is None:
        return None
    src_a, src_b, more = sources
    starts = steps.columns.starts
    n = starts[-1]
    rnd = [-1] * n  # the round of each step, once it has run
    last = [-1] * R
    pc = list(starts[:-1])
    woken: list[int | list[int] | None] = [None] * n  # a step -> the rank, or ranks, waiting for it
    work = list(range(R))  # the ranks to visit, in order (a woken rank is added at the end)
    for r in work:
        x, hi, t = pc[r], starts[r + 1], last[r]
        while x < hi:
            ready = t + 1
            a = src_a[x]
            if a != NONE:  # a source is 2 * its step, + 1 when its rank comes later: the round after it
                q = rnd[a >> 1]
                if q < 0:  # not made yet: wait for it
                    waits = a >> 1
                    break
                if q + (a & 1) > ready:
                    ready = q + (a & 1)
                b = src_b[x]
                if b != NONE:
                    q = rnd[b >> 1]
                    if q < 0:
                        waits = b >> 1
                        break
                    if q + (b & 1) > ready:
                        ready = q + (b & 1)
                    if more and x in more:
                        waits = next((p >> 1 for p in more[x] if rnd[p >> 1] < 0), NONE)
                        if waits != NONE:
                            break
                        ready = max([ready] + [rnd[p >> 1] + (p & 1) for p in more[x]])
            rnd[x] = t = ready
            w = woken[x]
            if w is not None:  # (a rank, or a list of ranks: no list for one, which the collector would track)
                if w.__class__ is int:
                    work.append(w)
                else:
                    work += w
                woken[x] = None
            x += 1
        pc[r], last[r] = x, t
        if x < hi:  # (stopped: rank r waits for step `waits`)
            w = woken[waits]
            if w is None:
                woken[waits] = r
            elif w.__class__ is int:
                woken[waits] = [w, r]
            else:
                w.append(r)
    if pc != starts[1:]:  # (a rank stopped for ever)
        return None
    return _position(np.lexsort((steps.rank, np.asarray(rnd, dtype=np.int64))))


def _sources(steps: _Steps):
    """Per step, the steps of other ranks that make the values it needs: (`src_a`, `src_b`, `more`),
    a source the step p as 2 * p, + 1 when its rank comes after the step's, NONE for none, `more`
    a step's sources where it has more than two. None if a value on a rank is made twice, or a
    value is made on the step's rank only after it, or never reaches it."""
    needs, own, step = steps.needs, steps.own, steps.step
    msg, rank = steps.messages, steps.rank
    n, R = len(steps.columns.op), len(steps.columns)
    made = own != NONE
    wanted = [k != NONE for k in needs]
    want = np.concatenate([k[w] for k, w in zip(needs, wanted)])
    consumer = np.concatenate([step[w] for w in wanted])
    producer = _makers(want, [(own[made], step[made]), (msg["value"], msg["step"])], R)
    if producer is None:
        return None
    local = rank[producer] == rank[consumer]
    if (local & (producer >= consumer)).any():
        return None
    consumer, producer = consumer[~local], producer[~local]
    source = 2 * producer + (rank[producer] > rank[consumer])
    order = np.argsort(consumer, kind="stable")
    consumer, source = consumer[order], source[order]
    new = np.concatenate([[True], consumer[1:] != consumer[:-1]])  # a step's first source
    nth = np.arange(len(consumer)) - np.maximum.accumulate(np.where(new, np.arange(len(consumer)), 0))
    src_a, src_b = np.full(n, NONE, dtype=np.int64), np.full(n, NONE, dtype=np.int64)
    src_a[consumer[nth == 0]], src_b[consumer[nth == 1]] = source[nth == 0], source[nth == 1]
    more: dict[int, list[int]] = {}
    for x in np.unique(consumer[nth == 2]).tolist():
        lo, hi = np.searchsorted(consumer, [x, x + 1])
        more[x] = source[lo:hi].tolist()
    return src_a.tolist(), src_b.tolist(), more


def _makers(want: np.ndarray, made: list[tuple[np.ndarray, np.ndarray]], R: int) -> np.ndarray | None:
    """The step that makes each value of `want` (values on ranks, as `_Steps` numbers them), from
    `made`'s (values, the step that makes each) groups; None if a value is made twice or one wanted
    is not made. Values are looked up by (kind, stage, microbatch) in a table when there are few,
    each group's values on distinct ranks (a value is made once and sent to one rank)."""
    keys = [v // R for v, _ in made] if want.dtype != object else None
    top = max([int(want.max(initial=-1)) // R] + [int(k.max(initial=-1)) for k in keys or []]) + 1 if keys else 0
    if keys is None or top > 4 * sum(map(len, keys)) + 4096:
        values = np.concatenate([v for v, _ in made])
        by = np.concatenate([b for _, b in made])
        order = np.argsort(values, kind="stable")
        values, by = values[order], by[order]
        if len(values) > 1 and (values[1:] == values[:-1]).any():
            return None
        at = np.searchsorted(values, want).clip(0, max(len(values) - 1, 0))
        return None if len(want) and (not len(values) or (values[at] != want).any()) else by[at]
    producer, on = np.full(len(want), NONE, dtype=np.int64), want % R
    wanted = want // R
    for key, (values, by) in zip(keys, made):
        if np.bincount(key, minlength=top).max(initial=0) > 1:
            return None  # (made twice, or sent to two ranks)
        maker, rank = np.full(top, NONE, dtype=np.int64), np.full(top, NONE, dtype=np.int64)
        maker[key], rank[key] = by, values % R
        here = rank[wanted] == on
        if ((producer != NONE) & here).any():
            return None  # made on the rank, and sent to it too
        producer = np.where(here, maker[wanted], producer)
    return None if (producer == NONE).any() else producer


def _lowered(steps: _Steps, when: np.ndarray, R: int) -> Columns:
    """The lowered columns: each rank's steps in the order of `when`, every message's send appended
    to its rank right after its step, and its receive to the destination's list at the same moment."""
    cols, msg = steps.columns, steps.messages
    n = len(when)
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
    parts = None
    if cols.compounds:
        place = np.empty(len(out), dtype=np.int64)
        place[out] = np.arange(len(out))
        parts = cols.parts.renumbered(place[cols.parts.step])  # (each rank's steps keep their order)
        if kept is not None:  # a compound's messages carry the span of their own part
            spans = _part_spans(cols, objects(spans), origin[out], np.concatenate(
                [np.zeros(n, dtype=np.int64), msg["part"], msg["part"]])[out], np.flatnonzero(out >= n))
    return Columns(op[out].astype(np.int8), _narrow(stage[out]), _narrow(mb[out]),
                   np.searchsorted(rank[out], np.arange(R + 1)), spans, kept, parts)


def _part_spans(cols: Columns, spans: np.ndarray, origin: np.ndarray, part: np.ndarray, messages: np.ndarray):
    """The spans of the lowered steps with each message of a compound's part at that part's span
    (`messages`: where the sends and receives are; `origin`, `part`: the step and part each is made from)."""
    parts = cols.parts
    from_compound = messages[cols.op[origin[messages]] == COMPOUND]
    c = np.searchsorted(parts.step, origin[from_compound])
    if parts.spans is not None:
        spans[from_compound] = parts.spans[parts.starts[c] + part[from_compound]]
    else:
        for j, i, k in zip(from_compound.tolist(), origin[from_compound].tolist(), part[from_compound].tolist()):
            spans[j] = cols.kept[i].parts[k].span
    return spans


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


__all__ = ["held_unless_small", "insert_comms", "within_limit"]
