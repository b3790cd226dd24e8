"""Insert communication: compute level to communication level (docs/semantics.md's convention).

Every value that crosses ranks gets SEND_* right after its producer and RECV_* on the consumer's
rank. The ranks are stepped in lockstep rounds (one step per rank per round, ranks in order); a
receive is appended to the consumer's list in the round its sender runs. That global order is a
valid run in which each send meets its receive at once, so the result cannot deadlock even when
sends block until received, and each channel's receives are in its sends' order (FIFO match).
"""
from __future__ import annotations

from collections import deque

from ..deps import delivers, message, needs, produces
from ..errors import SchedcError
from ..ir import Program


def insert_comms(program: Program) -> Program:
    if program.level == "comms":
        return program
    S, placement = program.num_stages, program.placement
    queues = [deque(steps) for steps in program.ranks]
    out: list[list] = [[] for _ in program.ranks]
    have: list[set] = [set() for _ in program.ranks]
    remaining = sum(len(q) for q in queues)
    while remaining:
        progress = False
        for r, queue in enumerate(queues):
            if not queue:
                continue
            step = queue[0]
            if any(v not in have[r] for a in step.parts for v in needs(a, S)):
                continue
            queue.popleft()
            remaining -= 1
            progress = True
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
        if not progress:
            stuck = ", ".join(f"rank {r} at {queue[0]}" for r, queue in enumerate(queues) if queue)
            raise SchedcError("deadlock", f"cannot insert communication: the compute order deadlocks ({stuck})")
    return program.with_ranks(out)
