"""Data parallelism and collectives: the replicas of a pipeline, and the collectives that join them.

A program with `replicas D` runs D copies of its pipeline of P ranks; replica d's pipeline rank p
is rank d * P + p of the job. UNSHARD and REDUCE_GRAD are collectives over the data-parallel
group of the rank that issues them: the ranks that hold the same pipeline rank in every replica
(one process group per pipeline rank, as a pipeline x data-parallel device mesh makes it); RESHARD
frees memory on its rank alone. REDUCE_TIED is the all-reduce of the weights the first and the last stage share (a tied
embedding), over the ranks of those two stages in one replica. The k-th collective a member issues
on its group meets the k-th of every other member and completes once all of them have reached it;
so members must issue a group's collectives in one order, the same operation (on the same stage,
for a data-parallel group) (`order_findings`), and the job's happens-before graph is the replicas'
graphs joined by those waits (`job`): at the collective's place, or under a backend, for UNSHARD
(torch posts FSDP's all-gather and waits for it where the stage next computes), at that compute.
docs/semantics.md, "Collectives".
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..columns import has_op
from ..errors import Diagnostic
from ..ir import COLLECTIVES, Action, Op, Program, SharedRanks, describe
from ..rules.semantics import Semantics
from .channels import Channels, channels
from .graph import Constraints, Lane, constraints


@dataclass(frozen=True)
class Issue:
    """One collective as one member issues it: job rank, step, part of the step, the action."""

    rank: int
    step: int
    part: int
    action: Action


def groups(program: Program) -> dict[tuple, dict[int, list[Issue]]]:
    """Each group -> each member (a job rank) -> its collectives on the group, in issue order. A
    group is ("dp", p), the data-parallel group of pipeline rank p (members d * P + p), or ("tied",
    d), replica d's ranks of the first and the last stage (REDUCE_TIED)."""
    P, S = program.num_ranks, program.num_stages
    out: dict[tuple, dict[int, list[Issue]]] = {}
    ends = {program.placement[0], program.placement[S - 1]} if S else set()
    for d in range(program.dp):
        for p in ends:
            out.setdefault(("tied", d), {})[d * P + p] = []
        for p, steps in enumerate(program.replica(d).ranks):
            out.setdefault(("dp", p), {}).setdefault(d * P + p, [])
            for x, st in enumerate(steps):
                for k, a in enumerate(st.parts):
                    if a.op in COLLECTIVES:
                        key = ("tied", d) if a.op is Op.REDUCE_TIED else ("dp", p)
                        out.setdefault(key, {}).setdefault(d * P + p, []).append(Issue(d * P + p, x, k, a))
    return out


def joins_ranks(program: Program) -> bool:
    """Does some collective have more than one member (replicas, or a tied all-reduce between two
    ranks)? Then deadlock freedom is a question about the job (`job`), not each pipeline alone."""
    if program.dp == 1 and not has_op(program, Op.REDUCE_TIED):  # (asked of every check: no pass over the steps)
        return False
    return program.dp > 1 or any(len(members) > 1 and any(members.values())
                                 for key, members in groups(program).items() if key[0] == "tied")


def _signature(key, a: Action):
    """What must agree between the members' k-th collectives: the operation, and on a data-parallel
    group its stage too (the tied all-reduce names each member's own end of the model)."""
    return (a.op, a.stage) if key[0] == "dp" else (a.op,)


def _group_name(key, members) -> str:
    names = ", ".join(str(m) for m in sorted(members))
    return f"the data-parallel group of ranks {names}" if key[0] == "dp" else \
        f"the tied-weight group of ranks {names} (first and last stage)"


def order_findings(program: Program) -> list[Diagnostic]:
    """Where the members of a data-parallel group issue its collectives in different orders (or
    different numbers of them): the k-th of one would meet another operation, or wait forever."""
    out = []
    P = program.num_ranks
    for key, members in sorted(groups(program).items()):
        first, *others = sorted(members)
        ours = members[first]
        group = _group_name(key, members)
        for m in others:
            theirs = members[m]
            for k, (a, b) in enumerate(zip(ours, theirs)):
                if _signature(key, a.action) != _signature(key, b.action):
                    out.append(Diagnostic(
                        "collective-order",
                        f"rank {m} (replica {m // P}), step {b.step}: its collective #{k + 1} on {group} is "
                        f"{describe(b.action)}, but rank {first}'s is "
                        f"{describe(a.action)}: the group's k-th collectives meet, so they would combine "
                        "different tensors, or hang", b.action.span,
                        (f"rank {first} issues it at step {a.step}" + _at(a.action),), rank=m, step=b.step))
                    break
            else:
                if len(ours) != len(theirs):
                    short, long_ = (m, first) if len(theirs) < len(ours) else (first, m)
                    extra = members[long_][len(members[short])]
                    out.append(Diagnostic(
                        "collective-order",
                        f"rank {long_} (replica {long_ // P}), step {extra.step}: {describe(extra.action)} is its "
                        f"collective #{len(members[short]) + 1} on {group}, and "
                        f"rank {short} issues only {len(members[short])}: it waits forever",
                        extra.action.span, rank=long_, step=extra.step))
    return out


def _at(a: Action) -> str:
    return "" if a.span is None else f" ({a.span.file}:{a.span.line})"


def job_channels(program: Program, semantics: Semantics, per_replica: list[Channels] | None = None) -> Channels:
    """Every replica's sends and receives (messages stay inside a replica) as `semantics` pairs them,
    with job rank numbers (`per_replica`: each replica's channels, when the caller has them)."""
    P = program.num_ranks
    sends: dict = {}
    recvs: dict = {}
    for d in range(program.dp):
        mine = per_replica[d] if per_replica is not None else channels(program.replica(d), semantics)
        for table, out in ((mine.sends, sends), (mine.recvs, recvs)):
            for ch, endpoints in table.items():
                key = (ch[0] + d * P, ch[1] + d * P, *ch[2:])
                out[key] = [e._replace(rank=e.rank + d * P, channel=key) for e in endpoints]
    return Channels(sends, recvs, semantics.one_stream_per_pair)


def job(program: Program, semantics: Semantics,  # noqa: C901
        per_replica: list[Channels] | None = None) -> tuple[Program, Constraints]:
    """The whole job as one program (replica after replica: rank d * P + p) and its happens-before
    constraints: each replica's, and for each collective the wait for every other member of its
    group to reach its partner (the member's collective of the same number). `per_replica`: each
    replica's channels, when the caller has them."""
    P, D = program.num_ranks, program.dp
    replicas = [program.replica(d) for d in range(D)]
    chans = per_replica if per_replica is not None else [channels(r, semantics) for r in replicas]
    per = [constraints(r, semantics, c) for r, c in zip(replicas, chans)]
    R = P * D
    base, total = [], R
    for c in per:
        base.append(total)
        total += len(c.lanes)

    def node(d: int, n: int) -> int:
        return d * P + n if n < P else base[d] + n - P

    prereq: list = [None] * total
    never: dict = {}
    starts: dict = {}
    lanes: list[Lane] = []
    for d, c in enumerate(per):
        for n, steps in enumerate(c.prereq):
            prereq[node(d, n)] = [[(node(d, q), j, why, k) for q, j, why, k in pre] for pre in steps]
        for (n, i), v in c.never.items():
            never[(node(d, n), i)] = v
        for (n, i), ranks in c.starts.items():
            starts[(node(d, n), i)] = [d * P + q for q in ranks]
        lanes.extend(Lane(d * P + lane.rank, None if lane.peer is None else d * P + lane.peer, tuple(
            tuple(e._replace(rank=d * P + e.rank, channel=(d * P + e.channel[0], d * P + e.channel[1], *e.channel[2:]))
                  for e in ops)
            for ops in lane.steps), lane.comm) for lane in c.lanes)
    flat_ranks = tuple(steps for r in replicas for steps in r.ranks)
    for members in groups(program).values():
        for m, issues in members.items():
            for k, issue in enumerate(issues):
                step, part, posted = issue.step, issue.part, False
                if semantics.posted and issue.action.op is Op.UNSHARD:  # awaited where the stage computes
                    at = _next_compute(flat_ranks[m], issue.step, issue.action.stage)
                    if at is not None:
                        (step, part), posted = at, True
                for m2, others in members.items():
                    if m2 == m:
                        continue
                    if k >= len(others):
                        never.setdefault((m, step), (f"waits for rank {m2}'s collective #{k + 1}, which it "
                                                     "never issues", part))
                    elif posted:  # the all-gather completes once every member has posted its part
                        prereq[m][step].append((m2, others[k].step, "collective-posted", part))
                    elif others[k].step > 0:  # reached once its rank finished the step before
                        prereq[m][step].append((m2, others[k].step - 1, "collective", part))
                    else:  # reached once its rank started
                        starts.setdefault((m, step), []).append(m2)
    ends = tuple(tuple(w if w.node is None else w._replace(node=node(d, w.node)) for w in waits)
                 for d, c in enumerate(per) for waits in (c.ends or ((),) * P))
    return flat_job(program), Constraints(prereq, never, tuple(lanes), any(c.posted for c in per), ends=ends,
                                          starts=starts)


def flat_job(program: Program) -> Program:
    """The job as one program: replica after replica, replica d's pipeline rank p as rank d * P + p."""
    if not program.replicas:
        return program
    ranks = SharedRanks(steps for d in range(program.dp) for steps in program.replica(d).ranks)
    return replace(program, num_ranks=len(ranks), ranks=ranks, replicas=())


def _next_compute(steps, after: int, stage: int) -> tuple[int, int] | None:
    """(step, part) of the first compute action of `stage` after step `after` on a rank."""
    for x in range(after + 1, len(steps)):
        for k, a in enumerate(steps[x].parts):
            if a.op.is_compute and a.stage == stage:
                return x, k
    return None
