"""Insert communication: compute level to communication level (docs/semantics.md's convention).

Every value that crosses ranks gets SEND_* right after its producer and RECV_* on the consumer's
rank. The ranks are stepped in lockstep rounds (one step per rank per round, ranks in order); a
receive is appended to the consumer's list in the round its sender runs. That global order is a
valid run in which each send meets its receive at once, so the result cannot deadlock even when
sends block until received, and each channel's receives are in its sends' order (FIFO match).
"""
from __future__ import annotations

import heapq
from collections import deque

from ..deps import delivers, message, needs, produces, remote_consumer
from ..errors import SchedcError
from ..ir import MAX_ACTIONS, Program


def insert_comms(program: Program) -> Program:
    if program.level == "comms":
        return program
    S, placement = program.num_stages, program.placement
    queues = [deque(steps) for steps in program.ranks]
    out: list[list] = [[] for _ in program.ranks]
    have: list[set] = [set() for _ in program.ranks]
    remaining = sum(len(q) for q in queues)
    # The lockstep rounds, visiting only the ranks that can move: a rank blocked at its last try
    # stays blocked until a value is delivered to it, so each try either runs a step or follows a
    # delivery, and the work is linear in the actions, not in rounds x ranks (a drain over 65,536
    # ranks takes one round per rank). A rank woken later in its own round is tried in that round.
    this_round = [r for r, q in enumerate(queues) if q]
    while remaining:
        if not this_round:
            stuck = ", ".join(f"rank {r} at {queue[0]}" for r, queue in enumerate(queues) if queue)
            raise SchedcError("deadlock", f"cannot insert communication: the compute order deadlocks ({stuck})")
        heapq.heapify(this_round)
        pending, next_round = set(this_round), set()
        while this_round:
            r = heapq.heappop(this_round)
            queue = queues[r]
            if not queue:
                continue
            step = queue[0]
            if any(v not in have[r] for a in step.parts for v in needs(a, S)):
                continue
            queue.popleft()
            remaining -= 1
            next_round.add(r)
            out[r].append(step)
            for a in step.parts:
                v = produces(a)
                if v is not None:
                    have[r].add(v)
            for a in step.parts:
                pair = message(a, placement, S)
                if pair is not None:
                    send, recv = pair
                    dest = placement[recv.stage]
                    out[r].append(send)
                    out[dest].append(recv)
                    have[dest].add(delivers(recv))
                    if dest > r and dest not in pending:  # its turn in this round is still to come
                        pending.add(dest)
                        heapq.heappush(this_round, dest)
                    elif dest < r:
                        next_round.add(dest)
        this_round = list(next_round)
    return program.with_ranks(out)


def within_limit(program: Program) -> Program:
    """The lowered program's size, counted before any of it is built: every value that crosses
    ranks adds a send and a receive; over MAX_ACTIONS is a `too-large` error, not a lowering that
    runs out of memory. A program with its communication already written passes as it is."""
    if program.level == "comms":
        return program
    S, placement = program.num_stages, program.placement
    crossing = sum(remote_consumer(a, placement, S) is not None
                   for steps in program.ranks for st in steps for a in st.parts)
    total = program.num_actions + 2 * crossing
    if total > MAX_ACTIONS:
        raise SchedcError("too-large", f"lowering adds {2 * crossing:,} sends and receives: the program would "
                          f"have {total:,} actions, beyond the limit of {MAX_ACTIONS:,}")
    return program
