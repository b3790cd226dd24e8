"""A data-parallel job timed as one replica per class: replicas that run the same lists under the same
channel costs (schedc/verify/symmetry.py's classes, split by their links) run alike, so the job is
timed as its classes' first replicas joined by their collectives (each completes when the slowest
class's member has reached it), and that run is told of every job rank (`by_classes`). Exact: held
to the whole job's run by tests/test_simulate_replicas.py.
"""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Callable, Mapping

from .errors import SchedcError
from .ir import Program, SharedRanks
from .rules.deps import payload
from .rules.semantics import Semantics
from .timeline import Link, ReplicaMessages, Timeline, check_finite, check_links
from .verify.channels import channels
from .verify.symmetry import Classes, classes, real_deadlock, refined

# simulate.py's run of a job on its graph: (job, semantics, links, told) -> Timeline
Time = Callable[..., Timeline]


def timing_classes(program: Program, links: Mapping[tuple[int, int], Link]) -> Classes:
    """The job's replicas grouped by the lists they run and the costs of their channels (a link is
    keyed by job ranks; one between two replicas carries no message)."""
    P = program.num_ranks
    own: dict[int, list] = {}
    for (a, b), link in links.items():
        if a // P == b // P:
            d = a // P
            own.setdefault(d, []).append(((a - d * P, b - d * P), link))
    return refined(classes(program), lambda d: tuple(sorted(own.get(d, ()), key=lambda x: x[0])))


def by_classes(program: Program, semantics: Semantics, links: Mapping[tuple[int, int], Link], time: Time) -> Timeline:
    """The timed run of a job (`program`, with replicas) from the run of its classes' first replicas,
    each job rank's times those of its class's rank. A job that deadlocks is refused with the whole
    job's account when it fits the simulator whole, else with the reduced job's, told of real ranks."""
    check_links(links, program.num_ranks * program.dp)
    cls = timing_classes(program, links)
    try:
        run = time(cls.reduced(program), semantics, _reduced_links(links, cls), partial(_told, cls))
    except SchedcError as e:
        if e.code != "deadlock":
            raise
        try:
            time(program, semantics, links, None)  # the whole job's account, word for word, where it fits
        except SchedcError as whole:
            if whole.code == "deadlock":
                raise whole from None
        raise
    return _expand(run, cls)


def _reduced_links(links: Mapping[tuple[int, int], Link], cls: Classes) -> dict[tuple[int, int], Link]:
    """The links of each class's first replica, on that class's ranks of the reduced job."""
    P = cls.P
    at = {rep: c for c, rep in enumerate(cls.reps)}
    out = {}
    for (a, b), link in links.items():
        c = at.get(a // P)
        if c is not None and b // P == a // P:
            shift = (c - a // P) * P
            out[(a + shift, b + shift)] = link
    return out


def _real_program(program: Program, cls: Classes) -> Program:
    """The whole job as one program (verify/mesh.py's `flat_job`) from the reduced job's: each job
    rank runs its class's rank's lists (the same objects)."""
    ranks = SharedRanks(program.ranks[cls.reduced_rank(r)] for r in range(cls.D * cls.P))
    return replace(program, num_ranks=len(ranks), ranks=ranks, replicas=())


def _told(cls: Classes, program: Program, dead, cons) -> tuple[Program, object]:
    """The reduced job's deadlock (on `cons`, its constraints) told of the real job."""
    return _real_program(program, cls), real_deadlock(dead, cls, cons)


def _crossed(program: Program, semantics: Semantics, c: int, P: int) -> int:
    """Messages of class c's replica (ranks c * P ..) that reach a receive expecting another value: on
    each channel the k-th send meets the k-th receive, as the run pairs them."""
    chans = channels(replace(program, num_ranks=P, ranks=program.ranks[c * P:(c + 1) * P]), semantics)
    return sum(payload(s.action) != payload(r.action)
               for ch, sends in chans.sends.items() for s, r in zip(sends, chans.recvs.get(ch, ())))


def _expand(run: Timeline, cls: Classes) -> Timeline:
    """The run of the reduced job told of every job rank: rank d * P + p runs as its class's rank p."""
    P, R = cls.P, cls.D * cls.P
    check_finite(run.makespan, R)
    at = [cls.reduced_rank(r) for r in range(R)]

    def pick(xs):
        return tuple(xs[i] for i in at)
    paired = Semantics.parse(run.semantics)
    crossed = [_crossed(run.program, paired, c, P) for c in range(cls.k)] if run.mismatches else [0] * cls.k
    return Timeline(_real_program(run.program, cls), run.level, run.overlap, pick(run.start), pick(run.end),
                    pick(run.busy), run.makespan, ReplicaMessages(run.messages, P, cls.of),
                    sum(crossed[c] for c in cls.of), pick(run.posted), run.semantics, cls.D,
                    pick(run.collectives) if run.collectives else ())
