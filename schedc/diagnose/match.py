"""The dumps' records mapped onto the lowered program: each rank's expected operations (a send, a
receive or a collective of one action, on its channel or group), the dumps' process groups told
as the schedule's groups, and the k-th record of a rank on a channel or group taken as the k-th
operation the schedule issues there (step after training step). What does not fit is a
`Disagreement`: where the dump and the schedule first part.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import SchedcError
from ..ir import COLLECTIVES, RECVS, SENDS, Action, Op, Program, describe
from ..verify.mesh import groups as schedule_groups
from .dumps import Dump, Record

# the operation names a dump gives each kind of schedule operation (torch's FR names, any backend)
GATHERS = ("all_gather", "_allgather_base", "_all_gather_base", "all_gather_into_tensor_coalesced",
           "ALLGATHER_coalesced", "all_gather_single")
REDUCES = ("all_reduce", "allreduce_coalesced", "reduce_scatter", "_reduce_scatter_base",
           "reduce_scatter_tensor_coalesced", "REDUCE_SCATTER_coalesced", "reduce_scatter_single")


@dataclass(frozen=True)
class Expected:
    """One operation of the lowered program: job rank, lowered step, the action, its channel or
    group (`("send", peer)`, `("recv", peer)`, or a group key of schedc/verify/mesh.py), and its
    number there on this rank (1-based, within one training step)."""

    rank: int
    step: int
    action: Action
    key: tuple
    number: int

    @property
    def is_collective(self) -> bool:
        return self.key[0] not in ("send", "recv")


@dataclass(frozen=True)
class Matched:
    """A record and the operation it is: `expected`, in training step `train_step`."""

    record: Record
    expected: Expected
    train_step: int


@dataclass(frozen=True)
class Disagreement:
    """Where a rank's dump and the schedule first part, in a sentence, with the action it concerns."""

    rank: int
    message: str
    action: Action | None = None
    record: Record | None = None


@dataclass
class Matching:
    """Every rank's expected operations by key, its matched records, the records outside the
    schedule (the runtime's own), and the disagreements."""

    program: Program  # the lowered job, replicas as ranks d * P + p
    expected: dict[int, dict[tuple, list[Expected]]]
    members: dict[tuple, tuple[int, ...]]  # group key -> its job ranks
    matched: dict[int, list[Matched]] = field(default_factory=dict)
    outside: dict[int, list[Record]] = field(default_factory=dict)
    disagreements: list[Disagreement] = field(default_factory=list)
    crossed: list[Disagreement] = field(default_factory=list)  # the schedule's own collective-order, seen done
    pg_names: dict[str, tuple] = field(default_factory=dict)  # a dump's group name -> schedule group key


def expected_ops(lowered: Program) -> tuple[dict[int, dict[tuple, list[Expected]]], dict[tuple, tuple[int, ...]]]:
    """Each job rank's operations by channel or group, in issue order, and each group's members."""
    P = lowered.num_ranks
    keyed: dict[int, dict[tuple, list[Expected]]] = {}
    for d in range(lowered.dp):
        for p, steps in enumerate(lowered.replica(d).ranks):
            rank = d * P + p
            mine = keyed.setdefault(rank, {})
            for x, step in enumerate(steps):
                for a in step.parts:
                    key = _key(lowered, a, d, p)
                    if key is not None:
                        ops = mine.setdefault(key, [])
                        ops.append(Expected(rank, x, a, key, len(ops) + 1))
    members = {key: tuple(sorted(ms)) for key, ms in schedule_groups(lowered).items()}
    return keyed, members


def _key(lowered: Program, a: Action, d: int, p: int) -> tuple | None:
    P = lowered.num_ranks
    if a.op in SENDS or a.op in RECVS:
        other = a.stage + 1 if a.op in (Op.SEND_F, Op.RECV_B) else a.stage - 1
        if not 0 <= other < len(lowered.placement):  # (as lint says it; it may stop at an earlier finding)
            raise SchedcError("bad-comm", f"{describe(a)}: stage {a.stage} has no stage "
                              f"{other} to talk to", a.span)
        return ("send" if a.op in SENDS else "recv", d * P + lowered.placement[other])
    if a.op in COLLECTIVES:
        return ("tied", d) if a.op is Op.REDUCE_TIED else ("dp", p)
    return None


def fits(record: Record, action: Action) -> bool:
    """Can the record be this action's operation?"""
    if record.op in ("send", "recv"):
        return (action.op in SENDS) == (record.op == "send") and action.op in SENDS | RECVS
    if action.op is Op.UNSHARD:
        return record.op in GATHERS
    return action.op in (Op.REDUCE_GRAD, Op.REDUCE_TIED) and record.op in REDUCES


def _schedule_op(record: Record) -> bool:
    """Could a schedule action have made this record at all (not a barrier, not a batch's marker)?"""
    return record.op in ("send", "recv") or record.op in GATHERS or record.op in REDUCES


def _numel(shape) -> int:
    n = 1
    for x in shape:
        n *= x if isinstance(x, int) else 1
    return n


def _tiny(record: Record) -> bool:
    """A collective of at most one element: a runtime's own (schedc run opens each communicator with
    one and averages the loss with one), when the group also carries larger ones."""
    shapes = record.sizes[0] if record.sizes else ()
    return all(_numel(s) <= 1 for s in shapes)


def match(dumps: list[Dump], lowered: Program) -> Matching:
    """Map every dump's records onto the lowered job."""
    from ..verify.mesh import flat_job
    expected, members = expected_ops(lowered)
    m = Matching(flat_job(lowered), expected, members)
    m.pg_names = _pg_names(dumps, expected, members)
    world = tuple(range(lowered.num_ranks * lowered.dp))
    for dump in dumps:
        _match_rank(m, dump, world)
    _cross_check(m)
    return m


def _pg_names(dumps: list[Dump], expected, members) -> dict[str, tuple]:
    """A dump's process group name -> the schedule's group it is: by its members (pg_config; for
    gloo, which does not say, the ranks that recorded collectives on it), and by what it carries."""
    seen: dict[str, set[int]] = {}
    ops: dict[str, set[str]] = {}
    stated: dict[str, tuple] = {}
    for dump in dumps:
        for name, (_desc, ranks) in dump.groups.items():
            stated[name] = ranks
        for r in dump.records:
            if not r.is_p2p and _schedule_op(r):
                seen.setdefault(r.pg, set()).add(dump.rank)
                ops.setdefault(r.pg, set()).add(r.op)
    out: dict[str, tuple] = {}
    for name, ranks in seen.items():
        known = stated.get(name)
        candidates = [key for key, ms in members.items()
                      if (set(ms) == set(known) if known else ranks <= set(ms)) and
                      _carries(expected, key, ms, ops[name])]
        if candidates:
            out[name] = sorted(candidates, key=lambda k: (k[0] != "dp", k))[0]
    return out


def _carries(expected, key, ms, names: set[str]) -> bool:
    """Does the schedule issue, on group `key`, operations of the kinds the dump shows there?"""
    acts = [e.action for r in ms for e in expected.get(r, {}).get(key, [])]
    if not acts:
        return False
    want = {"gather" if a.op is Op.UNSHARD else "reduce" for a in acts}
    got = {"gather" if n in GATHERS else "reduce" for n in names}
    return bool(want & got)


def _match_rank(m: Matching, dump: Dump, world) -> None:
    rank = dump.rank
    mine = m.expected.get(rank)
    matched, outside = m.matched.setdefault(rank, []), m.outside.setdefault(rank, [])
    if mine is None:
        m.disagreements.append(Disagreement(rank, f"the schedule has ranks 0..{len(m.expected) - 1}, and "
                                            f"{dump.file} is rank {rank}'s dump"))
        return
    by_key: dict[tuple, list[Record]] = {}
    for r in dump.records:
        key = _record_key(m, dump, r, world)
        if key is None:
            outside.append(r)
        else:
            by_key.setdefault(key, []).append(r)
    for key, records in by_key.items():
        if key[0] not in ("send", "recv") and any(not _tiny(r) for r in records):
            outside += [r for r in records if _tiny(r)]
            records = [r for r in records if not _tiny(r)]
        _match_key(m, rank, key, records, mine.get(key, []), matched)
    matched.sort(key=lambda x: (x.train_step, x.expected.step, x.record.index))


def _record_key(m: Matching, dump: Dump, r: Record, world) -> tuple | None:
    if not _schedule_op(r):
        return None
    if r.op in ("send", "recv"):
        ranks = dump.groups.get(r.pg, ("", world))[1]
        if r.peer is None or r.peer >= len(ranks):
            return None
        return (r.op, ranks[r.peer])
    return m.pg_names.get(r.pg)


def _match_key(m: Matching, rank: int, key: tuple, records: list[Record], ops: list[Expected],
               out: list[Matched]) -> None:
    where = _where(m, key)
    if not ops:
        r = records[0]
        m.disagreements.append(Disagreement(rank, f"rank {rank} recorded {r.text()} {where}, where the schedule "
                                            f"gives it no operation", record=r))
        return
    for k, r in enumerate(records):
        e = ops[k % len(ops)]
        if not fits(r, e.action):
            m.disagreements.append(Disagreement(
                rank, f"rank {rank}'s operation #{k + 1} {where} is {r.text()} in its dump, but the "
                f"schedule's is {_name(e.action)} at step {e.step}", e.action, r))
            return
        out.append(Matched(r, e, k // len(ops) + 1))


def _cross_check(m: Matching) -> None:
    """The members of a group combine their k-th collectives: their sizes must agree."""
    by_seq: dict[tuple, list[Matched]] = {}
    for matched in m.matched.values():
        for x in matched:
            if x.expected.is_collective:
                by_seq.setdefault((x.expected.key, x.train_step, x.record.seq), []).append(x)
    for (key, _t, seq), xs in sorted(by_seq.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        signs = {(x.expected.action.op, x.expected.action.stage if key[0] == "dp" else None) for x in xs}
        if len(signs) > 1:
            a, b = xs[0], next(x for x in xs if x.expected.action != xs[0].expected.action)
            m.crossed.append(Disagreement(
                b.record.rank, f"collective #{seq} {_where(m, key)} met {_name(a.expected.action)} on rank "
                f"{a.record.rank} (step {a.expected.step}{_line_of(a.expected.action)}) and "
                f"{_name(b.expected.action)} on rank {b.record.rank} (step {b.expected.step}): both dumps "
                "record it, so the members combined different tensors", b.expected.action, b.record))
        sizes = {x.record.sizes[0] for x in xs}
        if len(sizes) > 1:
            a, b = xs[0], next(x for x in xs if x.record.sizes[0] != xs[0].record.sizes[0])
            m.disagreements.append(Disagreement(
                b.record.rank, f"collective #{seq} {_where(m, key)} combines tensors of different sizes: "
                f"rank {a.record.rank} gave {_shape(a.record)} as {_name(a.expected.action)}, rank "
                f"{b.record.rank} gave {_shape(b.record)} as {_name(b.expected.action)}: the members issued "
                "different operations there", b.expected.action, b.record))


def _line_of(a: Action) -> str:
    return "" if a.span is None else f", line {a.span.line}"


def _shape(r: Record) -> str:
    return ", ".join("[" + ", ".join(str(x) for x in s) + "]" for s in r.sizes[0]) or "nothing"


def _name(a: Action) -> str:
    from ..ir import describe
    return describe(a)


def _where(m: Matching, key: tuple) -> str:
    return where_text(key, m.members)


def where_text(key: tuple, members: dict) -> str:
    """`on the data-parallel group of ranks 0, 2` / `to rank 1` / `from rank 0`."""
    if key[0] == "send":
        return f"to rank {key[1]}"
    if key[0] == "recv":
        return f"from rank {key[1]}"
    ranks = ", ".join(str(r) for r in members.get(key, ()))
    kind = "data-parallel group" if key[0] == "dp" else "tied-weight group"
    return f"on the {kind} of ranks {ranks}"
