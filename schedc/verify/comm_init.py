"""The order in which a job's ranks first use their NCCL communicators (`comm-init-order`, nccl only).

Under NCCL, torch makes a communicator lazily, at its first use, and making it is a collective of its
members: a rank's single `isend`/`irecv` to a peer makes the 2-rank communicator of that pair
(ProcessGroupNCCL's `getKeySendRecv`), its first group (`batch_isend_irecv`) the pipeline process
group's own, with every rank of the pipeline, its first all-reduce on a group that group's. A rank
blocks there until every member has come to the same communicator, so when ranks first use shared
communicators in orders no one order agrees with (a cycle in "first used before"), or a member never
uses one the others do, the job hangs as it starts. docs/semantics.md, "Communicator creation".
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import Diagnostic
from ..ir import Action, Program, describe
from ..lint import display_step
from .analysis import Analysis
from ..rules.semantics import Semantics
from .channels import BATCHED, GRADIENTS, Channels, channels
from .mesh import groups

if TYPE_CHECKING:
    from .symmetry import Classes


@dataclass(frozen=True)
class FirstUse:
    """A rank's first use of a communicator: where, and which action makes it."""

    comm: tuple  # ("pair", low rank, high rank, communicator) or a collective group's key (verify/mesh.py)
    rank: int
    step: int
    part: int
    action: Action


def first_uses(program: Program, per_replica: list[Channels] | None = None,
               cls: Classes | None = None) -> dict[int, list[FirstUse]]:
    """Each job rank -> the communicators it uses, in the order it first uses them (a step's parts in
    the order listed, as schedc's runtime posts a group's members one `isend`/`irecv` at a time).
    `program` is at the communication level (a compute-level one's lowering: its `Analysis`'s
    `communication_level`); `per_replica`: each replica's channels, when the caller has them; `cls`:
    `program` is a job reduced to one replica per class (a group then has the members of the real job)."""
    uses: dict[int, dict[tuple, FirstUse]] = {}
    for use in [*_messages(program, per_replica), *_collectives(program, cls)]:
        seen = uses.setdefault(use.rank, {})
        if use.comm not in seen or _at(use) < _at(seen[use.comm]):
            seen[use.comm] = use
    return {rank: sorted(seen.values(), key=_at) for rank, seen in sorted(uses.items())}


def _at(use: FirstUse) -> tuple[int, int]:
    return use.step, use.part


def _messages(program: Program, per_replica: list[Channels] | None):
    """Every send and receive of every replica, on the communicator of its rank pair (job ranks), or a
    group's on its replica's pipeline process group's (`("batches", replica, communicator)`)."""
    P = program.num_ranks
    for d in range(program.dp):
        chans = per_replica[d] if per_replica is not None else channels(program.replica(d), _NCCL)
        for table in (*chans.sends.values(), *chans.recvs.values()):
            for ep in table:
                src, dst, comm, _ = ep.channel
                if comm & BATCHED:
                    yield FirstUse(("batches", d, comm & GRADIENTS), d * P + ep.rank, ep.step, ep.part, ep.action)
                    continue
                low, high = sorted((d * P + src, d * P + dst))
                yield FirstUse(("pair", low, high, comm), d * P + ep.rank, ep.step, ep.part, ep.action)


_NCCL = Semantics.parse("nccl")  # (the rule is NCCL's: its pairing, a group's operations apart)


def _collectives(program: Program, cls: Classes | None):
    """Every collective on a group of more than one member in the real job (a lone member needs no
    communicator; in a reduced job, each member stands for its class's replicas)."""
    P = program.num_ranks
    for key, members in groups(program).items():
        if (len(members) if cls is None else sum(len(cls.members[r // P]) for r in members)) < 2:
            continue
        for issues in members.values():
            for i in issues:
                yield FirstUse(key, i.rank, i.step, i.part, i.action)


def creation_cycle(uses: dict[int, list[FirstUse]]) -> list[tuple[FirstUse, FirstUse]] | None:  # noqa: C901
    """A cycle of "first used before" among communicators, as (rank's earlier use, its later use)
    pairs, one per rank on the cycle; None when one order of creation suits every rank."""
    edges: dict[tuple, list[tuple[FirstUse, FirstUse]]] = {}
    for seq in uses.values():
        for a, b in zip(seq, seq[1:]):
            edges.setdefault(a.comm, []).append((a, b))
    state: dict[tuple, int] = {}  # 1: on the current path, 2: done
    path: list[tuple[FirstUse, FirstUse]] = []

    def visit(comm) -> list | None:
        state[comm] = 1
        for a, b in edges.get(comm, ()):
            path.append((a, b))
            if state.get(b.comm) == 1:
                start = next(i for i, (x, _) in enumerate(path) if x.comm == b.comm)
                return path[start:]
            if b.comm not in state:
                found = visit(b.comm)
                if found:
                    return found
            path.pop()
        state[comm] = 2
        return None

    for comm in sorted(edges, key=repr):
        if comm not in state:
            found = visit(comm)
            if found:
                k = found.index(min(found, key=lambda e: (e[0].rank, _at(e[0]))))
                return found[k:] + found[:k]  # told from its lowest rank
    return None


def comm_init_findings(analysis: Analysis, cls: Classes | None = None) -> list[Diagnostic]:
    """The `comm-init-order` finding of a job whose ranks first use communicators in a cyclic order
    (as schedc lowers and runs it: the analysis' `communication_level`). With `cls`, the analysis is
    of a job reduced to one replica per class: a cycle there is one of the real job (the reduced
    job's communicators are the real job's that its replicas use), and a cycle of the real job maps
    onto one there (each replica first uses its class's first replica's communicators, renamed, in
    the same order), so the finding is told of the real job's ranks."""
    per_replica = analysis.replica_channels if analysis.program.level == "comms" else None  # (else the lowering's)
    program = analysis.communication_level
    uses = first_uses(program, per_replica, cls)
    # (the first only, as for cycles: the flat job's and the reduced job's first are the same replica's)
    findings = [_absent_finding(use, absent, cls) for use, absent in absent_members(uses, program.num_ranks)[:1]]
    cycle = creation_cycle(uses)
    if cycle is None:
        return findings
    if cls is not None:
        cycle = [(_real(a, cls), _real(b, cls)) for a, b in cycle]
    first = cycle[0][0]
    told = "; ".join(f"rank {a.rank} first uses {_name(a.comm)} ({describe(a.action)}, step "
                     f"{display_step(a.action, a.step)}) before {_name(b.comm)} ({describe(b.action)}, step "
                     f"{display_step(b.action, b.step)})" for a, b in cycle)
    return [Diagnostic(
        "comm-init-order", f"the ranks make their NCCL communicators in orders that cannot agree: {told}; each "
        "is made at its first use by all its members together, so each of these ranks waits in one for a rank "
        "that waits in another", first.action.span,
        ("torch makes NCCL communicators lazily (on first use) unless the process group is initialised "
         "eagerly; NVIDIA/Megatron-LM#5240 hung so with lazily made 2-rank communicators",),
        rank=first.rank, step=display_step(first.action, first.step)), *findings]


def absent_members(uses: dict[int, list[FirstUse]], P: int) -> list[tuple[FirstUse, list[int]]]:
    """For each pipeline process group's communicator that groups post on (`("batches", replica,
    communicator)`: ranks d * P .. d * P + P - 1 its members) and that some member never uses: the
    first use by its lowest rank that uses it, and the members that never do."""
    users: dict[tuple, dict[int, FirstUse]] = {}
    for rank, seq in uses.items():
        for use in seq:
            if use.comm[0] == "batches":
                users.setdefault(use.comm, {})[rank] = use
    out = []
    for comm, by_rank in sorted(users.items()):
        d = comm[1]
        absent = [r for r in range(d * P, (d + 1) * P) if r not in by_rank]
        if absent:
            out.append((by_rank[min(by_rank)], absent))
    return out


def _absent_finding(use: FirstUse, absent: list[int], cls: Classes | None) -> Diagnostic:
    """The `comm-init-order` finding of a pipeline whose ranks post groups on a communicator that
    some of its ranks never join."""
    if cls is not None:
        use, absent = _real(use, cls), [cls.real(r) for r in absent]
    ranks = ", ".join(map(str, absent))
    return Diagnostic(
        "comm-init-order", f"rank {use.rank} first posts a group on {_name(use.comm)} ({describe(use.action)}, step "
        f"{display_step(use.action, use.step)}), which NCCL makes at its first use with every rank of the process "
        f"group, and rank{'s' if len(absent) > 1 else ''} {ranks} never post{'' if len(absent) > 1 else 's'} a group "
        "on it: the ranks that do wait in its making forever", use.action.span,
        ("torch's batch_isend_irecv: with NCCL, if it is the first collective call in the group, all ranks of the "
         "group must participate; initialise the process group eagerly (device_id) or make every rank post a "
         "group first",), rank=use.rank, step=display_step(use.action, use.step))


def _real(use: FirstUse, cls: Classes) -> FirstUse:
    """A reduced job's first use told of the real job: its rank and its communicator's ranks."""
    comm = use.comm
    if comm[0] == "pair":
        low, high = sorted((cls.real(comm[1]), cls.real(comm[2])))
        comm = ("pair", low, high, comm[3])
    elif comm[0] in ("tied", "batches"):
        comm = (comm[0], cls.reps[comm[1]], *comm[2:])
    return replace(use, comm=comm, rank=cls.real(use.rank))


def _name(comm: tuple) -> str:
    if comm[0] == "pair":
        _, low, high, which = comm
        return f"the communicator of ranks {low} and {high}" + (" for gradients" if which == GRADIENTS else "")
    if comm[0] == "batches":
        _, d, which = comm
        return (f"the {'gradients' if which == GRADIENTS else 'pipeline'} process group's communicator"
                + (f" of replica {d}" if d else ""))
    kind, index = comm
    return f"the data-parallel group of pipeline rank {index}" if kind == "dp" else \
        f"the tied-weights group of replica {index}"
