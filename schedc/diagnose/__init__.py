"""`diagnose`: a hung job's Flight Recorder dumps (torch's, one per rank) read against the schedule
the job ran: its records mapped onto the lowered program (`match.py`, from `dumps.py`'s records),
then where each rank stopped, what it waits for, and the wait cycle or the missing operation, in
schedule terms with the schedule's lines (`explain.py`). docs/diagnose.md.
"""
from __future__ import annotations

from ..errors import SchedcError
from ..ir import Program
from .dumps import Dump, read_dumps
from .explain import Diagnosis, Wait, current_step, counts, dump_waits, follow, stops
from .match import Disagreement, Matching, match

__all__ = ["Diagnosis", "Dump", "diagnose", "read_dumps"]


def diagnose(dumps: list[Dump], program: Program, semantics: str | None = None) -> Diagnosis:
    """Read `dumps` against `program` (compute or communication level; replicas allowed) under
    `semantics` (default: the dumps' backend, gloo or nccl)."""
    from ..api import check
    from ..passes import lower
    if not dumps:
        raise SchedcError("usage", "no dumps to read", where="DUMPS")
    backend = _backend(dumps)
    sem = semantics or ("gloo" if backend == "gloo" else "nccl")
    lowered = lower(program)
    ranks = lowered.num_ranks * lowered.dp
    for dump in dumps:  # (a stray file of another job would change what the others are read as)
        if dump.rank >= ranks:
            raise SchedcError("dump", f"this is rank {dump.rank}'s dump, but the job runs ranks 0..{ranks - 1} (the "
                              f"schedule's {ranks}): give this job's dumps only", where=dump.file)
    report = check(lowered, semantics=sem)
    malformed = [e for e in report.errors if e.code in ("bad-index", "bad-comm")]
    if malformed:  # a stage or microbatch out of range, a message to no stage or to its own rank: no job
        raise SchedcError.many(malformed)  # ran it, and its operations cannot be matched to records
    m = match(dumps, lowered)
    step = current_step(m)
    stop_list = stops(m, ranks, step)
    deadlock = report.deadlock
    d = Diagnosis(program.name, backend, sem, ranks, stop_list, hang=False, agrees=False, matching=m)
    opened = any(s.first_open or s.open_outside for s in stop_list)
    if deadlock is not None and not m.disagreements:
        d.agrees = _agrees(m, deadlock, ranks, step, any(r.is_p2p for x in dumps for r in x.records))
    if deadlock is not None and d.agrees:
        _from_schedule(d, m, deadlock)
    elif opened:
        _from_dumps(d, m, deadlock is not None)
    missing = [r for r in range(ranks) if r not in m.matched]
    if missing and (d.hang or d.disagreements):
        d.notes.append("no dump for rank(s) " + ", ".join(map(str, missing)))
    return d


def _backend(dumps: list[Dump]) -> str:
    names = sorted({r.backend for x in dumps for r in x.records})
    if len(names) > 1:
        raise SchedcError("dump", f"the dumps mix backends ({', '.join(names)}): give one job's dumps",
                          where=dumps[0].file)
    return names[0] if names else "gloo"


def _issued(e, stuck: int | None) -> bool:
    """Has the schedule's deadlocked run issued this operation on its rank? Those before the step
    the rank stops at, and a reduction it waits in at that step (`stuck` None: it ran through its list)."""
    return stuck is None or e.step < stuck or (e.step == stuck and e.action.op.name.startswith("REDUCE"))


def _agrees(m: Matching, deadlock, ranks: int, step: int, p2p: bool) -> bool:
    """Do the dumps show what the schedule's deadlocked run issues, rank by rank, on every group
    (and channel, when the dumps record messages)? The first place they do not is a disagreement."""
    for r in range(ranks):
        if r not in m.matched:
            continue
        stuck = None if r in deadlock.ends else deadlock.stuck.get(r)
        for key, ops in sorted(m.expected.get(r, {}).items()):
            if key[0] in ("send", "recv") and not p2p:
                continue
            want = sum(1 for e in ops if _issued(e, stuck))
            got = counts(m, r, key, step)
            if got != want:
                from .match import where_text
                e = ops[min(got, want, len(ops) - 1)]
                m.disagreements.append(Disagreement(
                    r, f"rank {r}'s dump shows {got} operation(s) {where_text(key, m.members)} in training "
                    f"step {step}; the schedule's deadlocked run issues {want} there (the next is "
                    f"{_describe(e.action)} at step {e.step})", e.action))
                return False
    return True


def _describe(a) -> str:
    from ..ir import describe
    return describe(a)


def _from_schedule(d: Diagnosis, m: Matching, deadlock) -> None:
    """The schedule's deadlock, which the dumps agree with: each rank's place, the cycle."""
    from dataclasses import replace
    d.hang = True
    prog = m.program
    d.stops = [replace(s, at=(deadlock.stuck[s.rank], _action_at(prog, s.rank, deadlock.stuck[s.rank]))
                       if s.rank in deadlock.stuck and s.rank not in deadlock.ends else None,
                       end_of_step=s.rank in deadlock.ends) for s in d.stops]
    waits = [Wait(w.rank, w.action, w.on_rank, w.on_action, _wait_text(w, m)) for w in deadlock.cycle]
    closed = len(waits) > 1 and waits[-1].on_rank == waits[0].rank
    if closed or (len(waits) == 1 and waits[0].on_rank == waits[0].rank):
        d.cycle = waits
    else:
        d.chain = waits
        if any(w.reason == "never" for w in deadlock.cycle):
            d.missing = "the schedule gives these operations no partner"
    d.stops = [replace(s, finished=s.dumped and s.rank not in deadlock.stuck) for s in d.stops]
    d.notes.append(deadlock.cause)
    if d.backend == "gloo":
        d.notes.append("gloo records collectives only: where a rank waits on a message is the schedule's "
                       "answer, and every rank's collectives in the dumps are the ones it gives")


def _action_at(prog, rank: int, step: int):
    steps = prog.ranks[rank]
    return steps[step].parts[0] if step < len(steps) else steps[-1].parts[-1]


_WHY = {
    "collective-not-posted": "for the collective it posted, until rank {q} posts its {b}",
    "collective-not-reached": "in the collective, for rank {q} to reach its {b}",
    "value": "for rank {q} to run {b}",
    "send-not-posted": "for rank {q} to send {b}",
    "recv-not-posted": "for rank {q} to post its receive {b}",
    "recv-not-done": "for its {b} to complete",
    "send-not-done": "for its {b} to complete",
    "partner-queued": "for rank {q}'s {b}, queued behind an earlier operation of its stream",
    "not-posted": "for rank {q} to post {b}",
    "buffer-full": "for rank {q} to receive {b} (the channel is full)",
}


def _wait_text(w, m: Matching) -> str:
    at = f"at step {w.step}, {_describe(w.action)}" + _at(w.action)
    if w.reason == "never" or w.on_rank is None:
        return f"rank {w.rank} waits {at} for " + _never(w, m)
    why = _WHY.get(w.reason, "for rank {q}'s {b}").format(q=w.on_rank, b=_describe(w.on_action) + _at(w.on_action)
                                                           if w.on_action is not None else "step")
    return f"rank {w.rank} waits {at} {why}"


def _never(w, m: Matching) -> str:
    """Whose operation never comes: the members that issue fewer on the group, or the peer."""
    from .match import where_text
    for key, ops in m.expected.get(w.rank, {}).items():
        for e in ops:
            if e.step == w.step and e.action == w.action:
                others = [r for r in m.members.get(key, (key[1],) if key[0] in ("send", "recv") else ())
                          if r != w.rank]
                back = key if e.is_collective else ("recv" if key[0] == "send" else "send", w.rank)
                short = [r for r in others if len(m.expected.get(r, {}).get(back, [])) < e.number]
                if short:
                    return (f"rank {short[0]}'s operation #{e.number} {where_text(key, m.members)}, which its "
                            f"program never issues (it issues {len(m.expected.get(short[0], {}).get(back, []))})")
    return "an operation no rank issues"


def _at(a) -> str:
    return "" if a is None or a.span is None else f" (line {a.span.line})"


def _from_dumps(d: Diagnosis, m: Matching, deadlocks: bool) -> None:
    """The dumps' own waits: each open operation and the partner that has not come."""
    from dataclasses import replace
    d.hang = True
    d.stops = [replace(s, at=(s.first_open.expected.step, s.first_open.expected.action)
                       if s.first_open and s.first_open.expected.action.op.name.startswith("REDUCE") else None)
               for s in d.stops]
    waits = dump_waits(m, d.stops)
    d.cycle, d.chain = follow(waits)
    end = (d.chain or d.cycle)[-1] if (d.chain or d.cycle) else None
    if d.chain and end is not None and end.on_rank is not None and end.on_action is None and end.on_rank in m.matched:
        d.missing = f"the missing operation: rank {end.on_rank} has no partner for {_describe(end.action)}"
    if not deadlocks and end is not None and end.on_action is not None and end.on_rank in m.matched:
        m.disagreements.append(Disagreement(
            end.on_rank, f"rank {end.on_rank}'s dump does not show {_describe(end.on_action)}, which every run of "
            f"the schedule reaches (check finds no deadlock under {d.semantics})", end.on_action))
    if not deadlocks:
        d.notes.append(f"the schedule completes in every run under {d.semantics} (check finds no deadlock): "
                       "the job did not run it as written, or a rank stopped for a reason of its own")
