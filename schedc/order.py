"""Declarative ordering: greedy list scheduling by stated priorities under a memory cap.

`order greedy(prefer = [I, F, W], memory = 2 * P - 1)` takes the actions each rank body lists and
orders them the way zero-bubble schedules are built: time runs under the schedule's cost
annotations (unit times by default, communication and dispatch free); whenever a rank is free it starts the
ready action of the most preferred kind (ties: the one listed first), an F only if the rank's live
activations stay within the cap. Actions of one kind and stage keep their listed order. The rule
of what is ready is schedc/rules/deps.py's, what each action allocates or frees schedc/rules/memory.py's;
the result is an ordinary per-rank order.
"""
from __future__ import annotations

import heapq
from collections import deque

from .errors import SchedcError
from .ir import DEFAULT_SPEED, Action, Annotations, Op, Program
from .rules.deps import needs, produces, stages_of
from .span import Span
from .rules.memory import activation_delta

KINDS = {"F": Op.F, "B": Op.B, "I": Op.I, "W": Op.W}


MAX_CACHED_ACTIONS = 4_000  # orders of programs up to this size are kept: the same program, the same order
MAX_CACHED = 32  # orders kept; then the cache starts again
_ORDERED: dict[tuple[object, ...], Program] = {}


def greedy_order(program: Program, prefer: tuple[Op, ...], cap: float | None, span: Span | None) -> Program:
    """The program with each rank's actions in greedy order (the module's docstring). The order of
    a small program is computed once: a built-in loaded again, or a property test's thousands of
    calls, find it made. The key holds the actions' spans, so a report still points at the file
    the program came from."""
    if program.num_actions > MAX_CACHED_ACTIONS:
        return _greedy_order(program, prefer, cap, span)
    key = (program, tuple(a.span for _, _, a in program.actions()), program.source, prefer, cap)
    hit = _ORDERED.get(key)
    if hit is None:
        hit = _greedy_order(program, prefer, cap, span)
        if len(_ORDERED) >= MAX_CACHED:
            _ORDERED.clear()
        _ORDERED[key] = hit
    return hit


def _greedy_order(program: Program, prefer: tuple[Op, ...], cap: float | None, span: Span | None) -> Program:  # noqa: C901
    ann = program.annotations
    rank_of_kind = {op: i for i, op in enumerate(prefer)}
    queues: list[dict[tuple[Op, int], deque[tuple[int, Action]]]] = []
    for r, steps in enumerate(program.ranks):
        table: dict[tuple[Op, int], deque[tuple[int, Action]]] = {}
        for index, st in enumerate(steps):
            if not isinstance(st, Action) or not st.op.is_compute:
                raise SchedcError("bad-action", f"order greedy orders single compute actions; rank {r} lists "
                                  f"{st}", st.span or span)
            if st.op not in rank_of_kind:
                raise SchedcError("bad-action", f"order greedy: {st.op.value} is not in prefer", st.span or span)
            table.setdefault((st.op, st.stage), deque()).append((index, st))
        queues.append(table)
    done_at: dict[tuple[str, int, int], float] = {}  # value -> time it exists
    live = [0.0] * program.num_ranks
    out: list[list[Action]] = [[] for _ in program.ranks]
    left = [len(s) for s in program.ranks]
    events = [(0.0, r) for r in range(program.num_ranks) if left[r]]  # (time a rank is free, rank)
    heapq.heapify(events)
    finishes: list[float] = []  # pending completion times, to wake waiting ranks
    waiting: list[int] = []
    while events:
        t, r = heapq.heappop(events)
        choice = _pick(queues[r], t, done_at, rank_of_kind, live[r], cap, program)
        if choice is None:
            later = [f for f in finishes if f > t]
            if not later:
                waiting.append(r)
                continue
            heapq.heappush(events, (min(later), r))
            continue
        key, (_, a) = choice
        queues[r][key].popleft()
        if not queues[r][key]:
            del queues[r][key]
        cost = _cost(ann, a, r)
        end = t + cost
        v = produces(a)
        if v is not None:
            done_at[v] = end
        live[r] += activation_delta(program, a.op, a.stage)
        out[r].append(a)
        left[r] -= 1
        finishes.append(end)
        if left[r]:
            heapq.heappush(events, (end, r))
        for w in waiting:  # something new will exist at `end`
            heapq.heappush(events, (end, w))
        waiting.clear()
    stuck = [r for r in range(program.num_ranks) if left[r]]
    if stuck:
        r = stuck[0]
        head = sorted((q[0] for q in queues[r].values()), key=lambda x: x[0])[0][1]
        why = f" under memory <= {cap:g}" if cap is not None else ""
        raise SchedcError("order", f"order greedy cannot go on{why}: rank {r} has {left[r]} action(s) left, "
                          f"first {head}, and none can start", span)
    return program.with_ranks(out)


def _pick(table: dict[tuple[Op, int], deque[tuple[int, Action]]], t: float,
          done_at: dict[tuple[str, int, int], float], rank_of_kind: dict[Op, int], live: float, cap: float | None,
          program: Program) -> tuple[tuple[Op, int], tuple[int, Action]] | None:
    S = stages_of(program)
    best = None
    for key, q in table.items():
        index, a = q[0]
        if any(done_at.get(v, float("inf")) > t for v in needs(a, S)):
            continue
        if a.op is Op.F and cap is not None and live + activation_delta(program, a.op, a.stage) > cap + 1e-9:
            continue
        rank = (rank_of_kind[a.op], index)
        if best is None or rank < best[0]:
            best = (rank, key, q[0])
    return None if best is None else (best[1], best[2])


def _cost(ann: Annotations, a: Action, rank: int) -> float:
    c = ann.cost_of(a.stage)
    return {Op.F: c.F, Op.B: c.B, Op.I: c.I, Op.W: c.W}[a.op] / (ann.speed_of(rank) or DEFAULT_SPEED)
