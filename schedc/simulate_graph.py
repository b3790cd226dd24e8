"""Time a communication-level run under a semantics other than rendezvous (`schedc sim --semantics`),
or a data-parallel job: which runs exist is decided on the semantics' happens-before graph
(schedc/verify/graph.py, with the nccl streams; verify/mesh.py's for a job, with its collectives),
and its nodes are timed in one topological sweep by simulate.py's rule, plus, under nccl, that an
operation leaves only once the previous one of its rank pair is done on both streams, and that a
collective completes once every member of its group has reached it.
"""
from __future__ import annotations

from array import array
from typing import Mapping

from .errors import SchedcError
from .ir import COLLECTIVES, COMM, COMPUTE, RECVS, SENDS, WAITS, Compound, Op, Program, describe, is_group
from .rules.deps import needs, payload, produces, stages_of, value_name
from .rules.semantics import Semantics
from .rules.time import collective_span, collective_time, step_time, timed
from .timeline import Messages, Timeline, check_finite, check_links, dispatch_times
from .verify.channels import channels
from .verify.deadlock import end_of_step_notes, find_deadlock
from .verify.graph import constraints
from .rules.memory import message_size
from .verify.mesh import groups, job, job_channels, joins_ranks

_COLLECTIVE = ("collective", "collective-posted")  # the waits verify/mesh.py adds between a group's members


def simulate_graph(program: Program, semantics: Semantics, links: Mapping, draw=None,  # noqa: C901
                   told=None) -> Timeline:
    """The timed run of a comms-level `program` under `semantics` (overlap on: posting is the only
    rank time communication takes). `links`: (sending rank, receiving rank) -> timeline.Link;
    `draw`, as `simulate`'s, scales each compute time and posting overhead. `told(program, deadlock,
    cons)`, for a job reduced to one replica per class (simulate_replicas.py): the deadlock, and the
    program it names, told of the real job.

    Which runs exist is the question of `semantics`' own graph. Times follow simulate.py's
    asynchronous rule, under which a rank's blocking at a send or receive never delays it (only a
    consumer waits, for its data): that is the posted graph of gloo (eager, bounded:K and
    rendezvous runs time as gloo's; nccl's adds its streams). An explicit wait waits under a
    backend; under an abstract semantics its operation completed at its place, and it is free."""
    timing = semantics.timed_as
    pipeline = program.num_ranks  # (the ranks of one replica: a rank's speed is its pipeline rank's)
    lead = dispatch_times(program.annotations, pipeline) or (0.0,) * pipeline  # (its dispatch too)
    collective = _collectives(program)  # (rank, step, part) -> its group, number on it and members
    if joins_ranks(program):  # replicas, or a tied all-reduce: the whole job, joined by its collectives
        flat, cons = job(program, timing)
        decided = cons if timing == semantics else job(program, semantics)[1]
        dead = find_deadlock(flat, semantics, cons=decided)
        chans, program = job_channels(program, semantics), flat
    else:
        chans = channels(program, semantics)
        cons = constraints(program, timing, chans)
        given = cons if timing == semantics else None
        if told is not None and given is None:  # (a reduced job: decided on its constraints, as a job is)
            given = constraints(program, semantics, chans)
        dead = find_deadlock(program, semantics, chans, given)
        decided = given if given is not None else cons
    if dead is not None:
        if told is not None:
            program, dead = told(program, dead, decided)
        raise _deadlock(program, semantics, dead)
    R, S = program.num_ranks, program.num_stages
    stages = stages_of(program)
    K = 2 * S  # value key: microbatch * K + 2 * stage + (0 act | 1 grad), as simulate.py's
    ann = program.annotations
    lat0, bw0 = float(ann.latency), float(ann.bandwidth)
    check_links(links, R)
    link = {(a, b): (float(v.latency), float(v.bandwidth), float(v.overhead)) for (a, b), v in links.items()}
    speeds = []
    for r in range(R):
        speed = ann.speed_of(r % pipeline)
        if not speed > 0:
            raise SchedcError("costs", f"rank {r} has speed {speed}; a rank's speed must be positive")
        speeds.append(float(speed))

    def key(v) -> int:
        return v[2] * K + 2 * v[1] + (v[0] == "grad")

    # every send and receive by (rank, step, part); its partner (FIFO per channel); its stream step
    ends, partner = {}, {}
    for table in (chans.sends, chans.recvs):
        for endpoints in table.values():
            for e in endpoints:
                ends[e[:3]] = e
    for ch, sends in chans.sends.items():
        for send, recv in zip(sends, chans.recvs.get(ch, ())):
            partner[send[:3]], partner[recv[:3]] = recv, send
    lane_of = {e[:3]: (j, i) for j, lane in enumerate(cons.lanes) for i, ops in enumerate(lane.steps) for e in ops}
    mine = {(e.rank, e.action.op, e.action.stage, e.action.microbatch): e for e in ends.values()}
    lengths = cons.lengths()
    start = [[0.0] * lengths[r] for r in range(R)]
    end = [[0.0] * lengths[r] for r in range(R)]
    post_at = [array("d", bytes(8 * lengths[r])) for r in range(R)]
    done = [[0.0] * len(lane.steps) for lane in cons.lanes]  # nccl: when each stream step completed
    busy = [0.0] * R
    have: list[dict[int, float]] = [{} for _ in range(R)]  # value key -> when it is present on the rank
    posted: dict = {}  # (rank, step, part) -> when that send or receive was posted
    arrival: dict = {}  # (rank, step, part) of a receive -> when its message arrived
    chan_free: dict = {}
    msgs = array("d")
    mismatches = 0
    waits_block = semantics.posted
    spans: dict = {}  # (group, k) -> (start, end) of the group's k-th collective, once known
    reached: dict = {}  # (group, k) -> when each member that has posted it did (an UNSHARD timed as posted)
    group_end: dict = {}  # group -> when its latest collective ends
    gathered: dict = {}  # (rank, stage) -> when its latest UNSHARD ends (the stage's computes wait)
    spent = [0.0] * R  # each rank's seconds of collectives
    at: dict = {}  # (rank, step) -> (start, end) of a collective step that takes time

    def settle(g, k, when: float, d: float, members, op, stage) -> None:
        """The group's k-th collective is reached by every member at `when`: its span, for each member."""
        span = spans[(g, k)] = collective_span(when, group_end.get(g, 0.0), d)
        group_end[g] = span[1]
        for m, x in members:
            spent[m] += d
            at[(m, x)] = span
            if op is Op.UNSHARD:
                gathered[(m, stage)] = span[1]

    def travel(ch, size: float, when: float):
        lat, bw = link.get(ch, (lat0, bw0, 0.0))[:2]
        if size and bw:
            departure = max(when, chan_free.get(ch, 0.0))
            chan_free[ch] = departure + size / bw
            return departure, departure + size / bw + lat
        return when, when + lat

    def message(send, recv, when: float) -> float:
        """Time the message of a matched pair, ready to leave at `when`; returns its arrival."""
        nonlocal mismatches
        got = payload(recv.action)
        if payload(send.action) != got:  # the receive expects another value: silent wrong data
            mismatches += 1
        departure, arrived = travel(send.channel[:2], float(message_size(program, recv.action)), when)
        arrival[recv[:3]] = arrived
        msgs.extend((send.rank, send.step, recv.rank, recv.step, key(got), departure, arrived))
        return arrived

    for n, i in _topological(cons, lengths):
        if n >= R:  # an nccl stream step: each operation leaves once both streams are at it
            j = n - R
            head = done[j][i - 1] if i else 0.0
            finish = head
            for e in cons.lanes[j].steps[i]:
                other = partner[e[:3]]
                send, recv = (e, other) if e.action.op in SENDS else (other, e)
                t = arrival.get(recv[:3])
                if t is None:  # the first of the two streams to get here times it
                    pj, pi = lane_of[other[:3]]
                    t = message(send, recv, max(head, posted[e[:3]], posted[other[:3]],
                                                done[pj][pi - 1] if pi else 0.0))
                finish = max(finish, t)
            done[j][i] = finish
            for e in cons.lanes[j].steps[i]:
                if e.action.op in RECVS:  # torch waits for the step's work: the value is there now
                    have[e.rank][key(payload(e.action))] = finish
            continue
        r = n
        st = program.ranks[r][i]
        parts = st.parts
        t = (end[r][i - 1] if i else 0.0) + lead[r % pipeline]
        first = parts[0].op
        for q, j, why, _ in cons.prereq[r][i]:  # a collective: once every member has reached (or posted) it
            if why in _COLLECTIVE:  # (a member reaches it once it has dispatched the step, as this rank)
                came = end[q][j] + (lead[q % pipeline] if why == "collective" else 0.0)
                if came > t:
                    t = came
        if first in COLLECTIVES:  # a member whose first step it is reaches it once dispatched
            for q in cons.starts.get((r, i), ()):
                t = max(t, lead[q % pipeline])
        if first in COMPUTE:  # F, B, I, W, or an OVERLAP_F_B pair: once its inputs are here
            for a in parts:
                gate = gathered.get((r, a.stage))
                if gate is not None and gate > t:  # its weights, gathered (FSDP's UNSHARD)
                    t = gate
                for v in needs(a, stages):
                    tv = have[r].get(key(v))
                    if tv is None:  # a structural error `schedc check` names (sim checks first)
                        raise SchedcError("deadlock", f"the program deadlocks: rank {r} stops at step {i}, "
                                          f"{describe(a)}: it needs {value_name(v)}, which never reaches rank {r}",
                                          a.span)
                    t = max(t, tv)
            d = step_time([timed(ann.cost_of(a.stage), a.op.value, 1.0 if draw is None else draw.time(a.op, a.stage))
                           for a in parts]) / speeds[r]
            if not d >= 0:
                raise SchedcError("costs", f"rank {r}, step {i}: a negative time ({d})")
            start[r][i], end[r][i] = t, t + d
            busy[r] += d
            for a in parts:
                made = produces(a)
                if made is not None:
                    have[r][key(made)] = t + d
            continue
        if first in COMM:  # a send or receive, or a group: posted, and the rank goes on
            if st.__class__ is Compound and not is_group(st):
                raise SchedcError("bad-action", f"rank {r}, step {i}: {st.kind.value} holds communication")
            for a in parts:
                if a.op in SENDS:
                    t = max(t, have[r].get(key(payload(a)), 0.0))
            start[r][i] = t
            members = [ends[(r, i, k)] for k in range(len(parts))]
            t += sum(_posting(link.get(e.channel[:2], (0.0, 0.0, 0.0))[2], e.channel, pipeline, draw)
                     for e in members)
            post_at[r][i] = end[r][i] = t
            for e in members:
                posted[e[:3]] = t
                mate = partner.get(e[:3])
                if mate is None or cons.lanes or mate[:3] not in posted:
                    continue  # never matched, timed by its streams, or timed when its partner is posted
                send, recv = (e, mate) if e.action.op in SENDS else (mate, e)
                have[recv.rank][key(payload(recv.action))] = message(send, recv, max(t, posted[mate[:3]]))
            continue
        # UNSHARD, REDUCE_GRAD, REDUCE_TIED: collectives (rules/time.py); RESHARD: free; a wait, under
        # a backend, for its operation
        for k, a in enumerate(parts):
            if a.op in COLLECTIVES:
                g, number, members = collective[(r, i, k)]
                d = collective_time(ann.cost_of(a.stage), a.op)
                if not d or (g, number) in spans:
                    continue
                if timing.posted and a.op is Op.UNSHARD:  # posted: it starts once the last member posts it
                    times = reached.setdefault((g, number), [])
                    times.append(t)
                    if len(times) == len(members):
                        settle(g, number, max(times), d, members, a.op, a.stage)
                else:  # reached by every member (its prerequisites), this rank last
                    settle(g, number, t, d, members, a.op, a.stage)
            target = WAITS.get(a.op)
            if target is None or not waits_block:
                continue
            waited = mine.get((r, target, a.stage, a.microbatch))
            if waited is None or waited.step > i:  # waits for nothing (the structure check says so)
                continue
            if cons.lanes:
                j, x = lane_of[waited[:3]]
                t = max(t, done[j][x])
            elif target in RECVS:  # gloo: a receive completes when its message has arrived
                t = max(t, arrival[waited[:3]])
            else:  # gloo: a send completes once its receive is posted
                mate = partner.get(waited[:3])
                if mate is not None and mate[:3] in posted:
                    t = max(t, posted[mate[:3]])
        start[r][i] = end[r][i] = t
    arrivals = list(memoryview(msgs)[6::7])
    makespan = max([end[r][-1] for r in range(R) if lengths[r]] + arrivals + [d[-1] for d in done if d] + [0.0]
                   + [e for _, e in spans.values()])
    check_finite(makespan, R)
    for (r, x), (s0, e0) in at.items():  # a collective's step shows its span (it released its rank at once)
        start[r][x], end[r][x] = s0, e0
    return Timeline(program, "comms", True, tuple(map(tuple, start)), tuple(map(tuple, end)), tuple(busy),
                    makespan, Messages(msgs.tobytes(), K), mismatches, tuple(post_at), str(semantics),
                    R // pipeline, collectives=tuple(spent) if any(spent) else ())


def _collectives(program: Program) -> dict:
    """Each collective of a program or job, by (job rank, step, part): (its group, its number on the
    group, the group's members' (job rank, step) of that number) (verify/mesh.py `groups`)."""
    by_number: dict = {}
    for g, members in groups(program).items():
        for issues in members.values():
            for k, issue in enumerate(issues):
                by_number.setdefault((g, k), []).append(issue)
    return {(e.rank, e.step, e.part): (g, k, [(m.rank, m.step) for m in issues])
            for (g, k), issues in by_number.items() for e in issues}


def _posting(overhead: float, channel, pipeline: int, draw) -> float:
    """A channel's posting overhead, scaled by a drawn factor in a sampled run (a job's ranks drawn
    as their pipeline ranks')."""
    if draw is None or not overhead:
        return overhead
    return overhead * draw.post((channel[0] % pipeline) * pipeline + channel[1] % pipeline)


def _topological(cons, lengths) -> list[tuple[int, int]]:  # noqa: C901
    """Every node (rank or stream, step) after its predecessor and its prerequisites (the graph is
    acyclic: the deadlock check came first)."""
    base = []
    total = 0
    for n, length in enumerate(lengths):
        base.append(total)
        total += length
    indeg = [0] * total
    succ: list[list[int]] = [[] for _ in range(total)]
    for n, steps in enumerate(cons.prereq):
        b = base[n]
        for i, pre in enumerate(steps):
            if i:
                succ[b + i - 1].append(b + i)
                indeg[b + i] += 1
            for q, j, _, _ in pre:
                succ[base[q] + j].append(b + i)
                indeg[b + i] += 1
    node: list[tuple[int, int]] = []
    for n, length in enumerate(lengths):
        node.extend((n, i) for i in range(length))
    ready = [g for g in range(total) if indeg[g] == 0]
    out = []
    while ready:
        g = ready.pop()
        out.append(node[g])
        for h in succ[g]:
            indeg[h] -= 1
            if not indeg[h]:
                ready.append(h)
    if len(out) != total:  # the deadlock check says otherwise: a bug, not the user's
        raise AssertionError("the happens-before graph has a cycle the deadlock check did not find")
    return out


def _deadlock(program: Program, semantics: Semantics, dead) -> SchedcError:
    from .lint import display_step
    first = dead.cycle[0] if dead.cycle else None
    ends = dict(zip(sorted(dead.ends), end_of_step_notes(dead)))
    notes = [ends[r] if r in ends else f"rank {r} stops at step {display_step(program.ranks[r][x].parts[0], x)}, "
             f"{', '.join(describe(a) for a in program.ranks[r][x].parts)}"
             for r, x in sorted(dead.stuck.items())[:8]]
    notes.append(f"`schedc check --semantics {semantics}` shows the wait-for cycle")
    return SchedcError("deadlock", f"the program deadlocks under {semantics.phrase()}: {dead.cause}",
                       first.action.span if first else None, notes)
