"""Lower bounds on the makespan, from the precedence graph alone (no solver).

The longest chain (head + duration + tail of any job), and per rank the one-machine relaxation:
the rank must run all its jobs, none before its head, each followed by its tail; Jackson's
preemptive schedule (longest tail first) solves that relaxation exactly, so its value is a bound.
"""
from __future__ import annotations

import heapq

from .graph import Graph
from .problem import Problem


def lower_bound(problem: Problem, graph: Graph) -> int:
    chain = max(graph.head[u] + j.dur + graph.tail[u] for u, j in enumerate(problem.jobs))
    return max([chain] + [rank_bound(problem, graph, r) for r in range(problem.P)])


def rank_bound(problem: Problem, graph: Graph, r: int) -> int:
    """Jackson's preemptive schedule of rank r's jobs with release dates (heads) and tails."""
    jobs = sorted((graph.head[u], u) for u, j in enumerate(problem.jobs) if j.rank == r)
    left = {u: problem.jobs[u].dur for _, u in jobs}
    ready: list[tuple[int, int]] = []  # (-tail, job)
    t, i, best = 0, 0, 0
    while i < len(jobs) or ready:
        if not ready and t < jobs[i][0]:
            t = jobs[i][0]
        while i < len(jobs) and jobs[i][0] <= t:
            u = jobs[i][1]
            heapq.heappush(ready, (-graph.tail[u], u))
            i += 1
        q, u = ready[0]
        until = jobs[i][0] if i < len(jobs) else None
        run = left[u] if until is None else min(left[u], until - t)
        t += run
        left[u] -= run
        if left[u] == 0:
            heapq.heappop(ready)
            best = max(best, t - q)
    return best
