"""The precedences every schedule the search considers meets, and what follows from them.

Data dependencies (with channel latency), the symmetry-breaking order of microbatches, and, where
memory reduces to it, "F(s,k) waits for W(s,k-c)"; then per job the earliest start (head), the
least time after its end (tail), and which jobs of its rank are sure to come before or after it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Op
from ..rules.memory import op_delta
from .problem import Problem

# Symmetry breaking: on every rank the F's of one stage run in increasing microbatch order, and so
# do its I's and its W's. This loses nothing, because microbatches are identical (same times, same
# sizes, dependencies only between equal microbatch indices). Take any valid schedule and, for each
# (stage, kind), give the k-th one to start the label k, keeping every start time. It is still
# valid: when the k-th F(s) starts, k distinct F(s) have started, each after its own F(s-1)'s output
# arrived, so k outputs of F(s-1) had arrived; F(s-1)'s run one after another on one rank and a
# channel has one latency, so they arrive in the order they start: the k-th (now F(s-1,k)) had
# arrived. The same counting holds for I(s) (needing F(s) and I(s+1)) and W(s) (needing I(s)).
# Memory on a rank depends only on how many F, I and W of each stage have run, and the makespan
# only on the times, so both are unchanged. Hence some optimal schedule is in increasing order.


@dataclass(frozen=True)
class Graph:
    """`succ[u]`: (v, lag) pairs; `head[u]`, `tail[u]` in time units; `after[u]`: bitset of the
    jobs that must start after u ends (reachable from u); `memory_edges`: True when every cap is
    expressed by edges alone (one stage per rank, W frees all of F's activation)."""

    succ: tuple[tuple[tuple[int, int], ...], ...]
    topo: tuple[int, ...]
    head: tuple[int, ...]
    tail: tuple[int, ...]
    after: tuple[int, ...]
    memory_edges: bool

    def ordered(self, x: int, y: int) -> bool:
        """Whether x is sure to come before y."""
        return bool(self.after[x] >> y & 1)


def build_graph(problem: Problem) -> Graph:  # noqa: C901
    n = len(problem.jobs)
    succ: list[dict[int, int]] = [dict() for _ in range(n)]

    def add(u: int, v: int, lag: int) -> None:
        if succ[u].get(v, -1) < lag:
            succ[u][v] = lag

    for u, v, lag in problem.edges():
        add(u, v, lag)
    for s in range(problem.S):  # symmetry breaking (see above)
        for kind in ("F", "I", "W"):
            for m in range(problem.M - 1):
                u = problem.job(kind, s, m)
                add(u, problem.job(kind, s, m + 1), problem.jobs[u].dur)
    memory_edges = _memory_edges(problem, add)
    topo = _topological(succ)
    head = [0] * n
    for u in topo:
        for v, lag in succ[u].items():
            if head[u] + lag > head[v]:
                head[v] = head[u] + lag
    tail = [0] * n
    after = [0] * n
    for u in reversed(topo):
        du = problem.jobs[u].dur
        best, bits = 0, 0
        for v, lag in succ[u].items():
            best = max(best, lag - du + problem.jobs[v].dur + tail[v])
            bits |= (1 << v) | after[v]
        tail[u], after[u] = best, bits
    return Graph(tuple(tuple(d.items()) for d in succ), tuple(topo), tuple(head), tuple(tail), tuple(after),
                 memory_edges)


def _memory_edges(problem: Problem, add) -> bool:
    """With one stage per rank and W freeing all that F allocated, live memory at F(s,k) is
    act * (k + 1 - #W(s) done), and W's end in order: within a cap of c activations, F(s,k) starts
    after W(s,k-c) ends. Returns False when memory needs the solver's counting constraints."""
    plain = True
    for r in range(problem.P):
        cap = problem.cap[r]
        if cap is None:
            continue
        stages = problem.stages_of(r)
        if len(stages) != 1 or not _w_frees_the_forward(problem, stages[0]):
            plain = False
            continue
        s = stages[0]
        c = int(cap // op_delta(Op.F, problem.act[s], problem.weight[s]))  # (whole units: int() keeps the value)
        for k in range(c, problem.M):
            w = problem.job("W", s, k - c)
            add(w, problem.job("F", s, k), problem.jobs[w].dur)
    return plain


def _w_frees_the_forward(problem: Problem, s: int) -> bool:
    """Stage s's W frees all that its F allocated (schedc/rules/memory.py's `op_delta`): its I, nothing."""
    act, weight = problem.act[s], problem.weight[s]
    return -op_delta(Op.W, act, weight) == op_delta(Op.F, act, weight)


def _topological(succ: list[dict[int, int]]) -> list[int]:
    n = len(succ)
    indeg = [0] * n
    for d in succ:
        for v in d:
            indeg[v] += 1
    ready = [u for u in range(n) if indeg[u] == 0]
    out = []
    while ready:
        u = ready.pop()
        out.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    if len(out) != n:
        raise AssertionError("synth: the precedence graph has a cycle")
    return out
