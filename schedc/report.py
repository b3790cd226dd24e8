"""Run every check on a Program and collect the findings in one `Report` (`run_checks`).

Structure first (schedc/lint.py); when the structure is sound, payload matching, deadlock freedom
under the chosen send semantics (the native executor, or Z3 with `engine="z3"`), and memory per
rank against its limit (schedc/verify/). The program is analysed once (`Analysis`,
schedc/verify/analysis.py: its channels, constraints, and the lowering, made here when a check
needs it) and every check reads that analysis; the report keeps it. `Report.to_dict()` is the JSON
of `schedc check --json` (documented in docs/checks.md); `ok` is True, False, or None when a solver
could not decide.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .errors import Diagnostic, SchedcError
from .outputs import finite_only, per_rank_list, rounded
from .ir import RECVS, Action, Program, describe, format_step, is_group, sizes_text
from .lint import MAX_PER_CODE, display_step, lint, reduce_order
from .rules.deps import delivers, payload, value_name
from .rules.memory import exceeds, job_limits
from .rules.semantics import RENDEZVOUS, Semantics
from .verify.analysis import Analysis, counted_lowered
from .verify.channels import ONE_SIDED_GROUP, apart_partners, as_paired, describe_channel
from .verify.clear import Clear, over_limit
from .verify.fast import quick_check
from .verify.runtime_hangs import add_runtime_findings, reads_communication_level, runtime_view

# The detailed checks' modules are imported where they are called: a program the fast checks clear
# (most small ones) is checked without them (`schedc check NAME` as a whole process, docs/limits.md).
if TYPE_CHECKING:
    from .verify.deadlock import Deadlock
    from .verify.memory import Peak

ENGINES = ("native", "z3")
MAX_DETAILED_ACTIONS = 2_000_000  # the detailed checks take ~20-30 us and 1-1.5 KB an action: 40-60 s, 2-3 GB here
MEMORY_RUN = "worst"  # `peak_memory` is the worst over every run the semantics allows (sim's is "timed")


def _line(a: Action | None):
    return None if a is None or a.span is None else a.span.line


@dataclass(frozen=True)
class Mismatch:
    """The k-th send on a channel meets the k-th receive, but they carry different payloads."""

    send_rank: int
    send_step: int
    send: Action
    recv_rank: int
    recv_step: int
    recv: Action
    channel: tuple = ()  # the channel they pair on (channels.py)

    def to_dict(self) -> dict:
        return {"send_rank": self.send_rank, "send": format_step(self.send), "recv_rank": self.recv_rank,
                "recv": format_step(self.recv), "send_line": _line(self.send), "recv_line": _line(self.recv)}


@dataclass
class Report:
    program: Program
    file: str | None
    semantics: Semantics = RENDEZVOUS
    engine: str = "native"
    errors: list[Diagnostic] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    deadlock: Deadlock | None = None
    unknown: str | None = None  # why a solver could not decide
    witness: tuple[tuple[int, ...], ...] | None = None  # a timing that meets every constraint (z3)
    peak_activation: tuple[float, ...] = ()
    # each rank's worst moment (`peak_memory`); a cleared program's are made when first asked for
    _peaks: tuple[Peak, ...] | Clear = field(default=(), repr=False)
    memory_limit: tuple[float | None, ...] = ()
    memory_violations: list[Peak] = field(default_factory=list)
    replicas: int = 1  # a data-parallel job: `program` is the whole job, replica after replica
    p2p: str = "shared"  # the program's `p2p` line (its messages pair as `program.p2p` says under this semantics)
    notes: tuple[str, ...] = ()  # what the verdict assumes that the program does not say (channels.as_paired)
    # the one analysis every check read (channels, constraints, lowering): the pictures draw from it
    analysis: Analysis | None = field(default=None, repr=False, compare=False)
    detailed: bool = False  # did the detailed checks run (what the fast checks could not clear)?

    @property
    def peak_memory(self) -> tuple[Peak, ...]:
        if isinstance(self._peaks, Clear):
            self._peaks = self._peaks.peak_memory
        return self._peaks

    @peak_memory.setter
    def peak_memory(self, peaks: tuple[Peak, ...] | Clear) -> None:
        self._peaks = peaks

    @property
    def peak_sizes(self) -> tuple[float, ...]:
        """Each rank's peak memory (`peak_memory`'s sizes; a cleared program's without making its peaks)."""
        if isinstance(self._peaks, Clear):
            return self._peaks.peak_activation  # (no message has a size there: memory is activations)
        return tuple(pk.memory for pk in self._peaks)

    @property
    def findings(self) -> list[Diagnostic]:
        """`errors` but the lines standing for findings left unlisted (`omitted`)."""
        return [d for d in self.errors if not d.omitted]

    @property
    def omitted(self) -> dict[str, int]:
        """Per code, how many findings are counted but not listed (beyond lint's MAX_PER_CODE of it)."""
        out: dict[str, int] = {}
        for d in self.errors:
            if d.omitted:
                out[d.code] = out.get(d.code, 0) + d.omitted
        return out

    @property
    def error_count(self) -> int:
        """Every finding, listed or not."""
        return len(self.findings) + sum(self.omitted.values())

    @property
    def ok(self) -> bool | None:
        if self.errors:
            return False
        return None if self.unknown is not None else True

    def to_dict(self) -> dict:
        p = self.program
        out: dict[str, object] = {
            "file": self.file,
            "schedule": p.name,
            "params": dict(p.params),
            "ranks": p.num_ranks,
            "stages": p.num_stages,
            "microbatches": p.num_microbatches,
            "level": p.level,
            **({"forward_only": True} if p.forward_only else {}),  # (these keys appear only when so)
            **({"replicas": self.replicas} if self.replicas > 1 else {}),
            **({"p2p": self.p2p} if self.p2p != "shared" else {}),
            **({"routes": [{"microbatches": list(r.microbatches), "stages": list(r.stages)} for r in p.routes]}
               if p.routes else {}),
            "actions": p.num_actions,
            "semantics": str(self.semantics),
            "engine": self.engine,
            "ok": self.ok,
            "errors": [d.to_dict() for d in self.findings],
            **({"errors_omitted": self.omitted} if self.omitted else {}),
            "mismatches": [m.to_dict() for m in self.mismatches],
            "deadlock": None if self.deadlock is None else self.deadlock.to_dict(p),
            "unknown": self.unknown,
            "peak_activation": [_number(x) for x in self.peak_activation],
            "peak_memory": [_number(x) for x in self.peak_sizes],
            "memory_run": MEMORY_RUN,
            "memory_limit": [None if x is None else _number(x) for x in self.memory_limit],
            "memory_violations": [_peak_dict(pk, self.memory_limit[pk.rank]) for pk in self.memory_violations],
        }
        if self.witness is not None:
            out["witness"] = [list(row) for row in self.witness]
        if self.notes:
            out["notes"] = list(self.notes)
        return finite_only(out)  # strict JSON: a size past the floats is null, as `--json` writes it

    def summary(self) -> str:
        p = self.program
        verdict = {True: "ok", None: f"UNKNOWN ({self.unknown})"}.get(self.ok, f"FAILED ({self._counted()})")
        text = (f"{p.name}: {sizes_text(p)} ({p.level} level{', forward only' if p.forward_only else ''}"
                f"{f', {self.replicas} replicas of {p.num_ranks // self.replicas} ranks' if self.replicas > 1 else ''}"
                f"{f', p2p {self.p2p}' if self.p2p != 'shared' else ''}); {verdict}")
        text += "".join(f"\n  note: {n}" for n in self.notes)
        if self.peak_activation:
            text += "\n  peak activation per rank: " + per_rank_list(self.peak_activation, self.replicas, _numbers)
        if self.peak_sizes:
            text += (f"\n  peak memory per rank (worst over every run {self.semantics} allows, receive buffers "
                     "included): " + self.peaks_text())
        return text

    def peaks_text(self) -> str:
        """Each rank's peak memory as the summary lists it (`[2.5, 1.5]`)."""
        return per_rank_list(self.peak_sizes, self.replicas, _numbers)

    def _counted(self) -> str:
        """The number of findings, and how many of each code are listed when some are not."""
        shown = f", {MAX_PER_CODE} shown per kind" if self.omitted else ""
        return f"{self.error_count} error(s){shown}"

    def render(self) -> str:
        """Human-readable findings, then the grid for a deadlock."""
        parts = [d.render() if d.span or d.where or not self.file else replace(d, where=self.file).render()
                 for d in self.errors]  # (a finding located in no line, a missing action: its file at least)
        if self.deadlock is not None:
            from .verify.deadlock import render_grid
            parts.append(render_grid(self.program, self.deadlock))
        return "\n".join(parts)


_number = rounded  # a size as reports show it (schedc/outputs.py)


def _numbers(sizes) -> str:
    """Sizes as reports list them, each distinct one written once (a job's ranks repeat a few)."""
    shown = {x: str(_number(x)) for x in set(sizes)}
    return ", ".join(map(shown.__getitem__, sizes))


def _peak_dict(pk: Peak, limit) -> dict:
    return {"rank": pk.rank, "step": display_step(pk.action, pk.step),
            "action": None if pk.action is None else format_step(pk.action),
            "line": _line(pk.action), "memory": _number(pk.memory), "limit": limit, "live": list(pk.live),
            "inserted": None if pk.inserted is None else format_step(pk.inserted)}


def run_checks(program: Program, *, semantics: Semantics = RENDEZVOUS, **options) -> Report:
    """Every check of `program` (`_checks`), then the runtimes' own hangs (schedc/verify/runtime_hangs.py),
    all on one analysis of it (`report.analysis`)."""
    report = _checks(program, semantics=semantics, **options)
    analysis = report.analysis
    assert analysis is not None  # (`_checks` puts it in every report)
    view, cls = runtime_view(analysis)  # (a job whose replicas repeat: one replica per class)
    if reads_communication_level(report, semantics):
        _lowered(view)
    add_runtime_findings(report, view, cls)
    analysis.release()  # (the report keeps its analysis; the pictures ask it again for what they draw)
    return report


def _lowered(analysis: Analysis) -> Analysis:
    """The analysis with its program's lowering (schedc/passes), made the first time a check needs
    it: only then, as lowering a program that deadlocks fails."""
    if analysis.needs_lowering:
        from .passes import lower
        analysis.lowered = lower(analysis.program)
    return analysis


def _checks(program: Program, *, semantics: Semantics = RENDEZVOUS, engine: str = "native",
            timeout_s: float | None = None, memory_limit: dict[int, float] | None = None,
            file: str | None = None, fast: bool = True) -> Report:
    declared, (program, note) = program.p2p, as_paired(program, semantics)
    analysis = Analysis(program, semantics)  # (each part made when a check first reads it)
    # the fast paths (plain Python for a small program, else arrays); what they cannot clear gets
    # the detailed checks. They clear one pipeline without collectives only, so a program they clear
    # joins no ranks, and they go first (`joins_ranks` costs a pass over the program's steps).
    # Limits are left to the caller: a program whose only finding is a rank over its memory limit
    # gets the detailed memory walk alone (it says where and what is live), not every detailed check.
    clear = quick_check(program, semantics, None) if fast and engine == "native" and program.dp == 1 else None
    if clear is None:
        _refuse_detailed(program, file)
        from .verify.mesh import joins_ranks
    if clear is None and joins_ranks(program):  # replicas, or a tied all-reduce between two ranks: the job's question
        report = _check_job(analysis, memory_limit, file if file is not None else program.source)
        report.p2p, report.notes, report.detailed = declared, (note,) if note else (), True
        return report
    report = Report(program, file if file is not None else program.source, semantics, engine,
                    p2p=declared, notes=(note,) if note else (), analysis=analysis)
    report.detailed = clear is None
    if clear is not None:
        report.peak_activation = clear.peak_activation
        if over_limit(program, clear.peak_activation, memory_limit):
            _memory(report, analysis, memory_limit)
            return report
        report.peak_memory = clear  # (its peaks' actions are made only if asked for)
        report.memory_limit = _limits(program, memory_limit)
        return report
    report.errors.extend(lint(program))
    if report.errors:
        return report
    from .verify.deadlock import deadlock_of
    from .verify.memory import peak_activation
    report.peak_activation = peak_activation(program)
    chans = analysis.channels
    _match(report, chans)
    report.notes += _one_sided_groups(program, semantics, chans)
    if engine == "z3":
        _deadlock_z3(report, analysis, timeout_s)
    else:
        report.deadlock = deadlock_of(analysis)
    if report.deadlock is not None:
        _deadlock_finding(report, _other_backends(program, semantics, chans, declared))
        return report
    if report.mismatches:
        return report
    _memory(report, analysis, memory_limit)
    return report


def lint_findings(program: Program) -> list[Diagnostic]:
    """lint's findings (schedc/lint.py): none at once when the fast checks clear the program, and
    past MAX_DETAILED_ACTIONS a `too-large` error, as for the detailed checks."""
    if program.dp == 1 and quick_check(program, RENDEZVOUS, None) is not None:
        return []
    _refuse_detailed(program)
    return lint(program)


def _refuse_detailed(program: Program, file: str | None = None) -> None:
    """A `too-large` error, before any detailed pass, for a program beyond MAX_DETAILED_ACTIONS (named
    by its file, or by the schedule's name for one from no file)."""
    count = program.num_actions
    if program.replicas:  # a job's replicas that run one program are checked once (schedc/verify/symmetry.py)
        from .verify.symmetry import distinct_actions
        count = distinct_actions(program)
    if count > MAX_DETAILED_ACTIONS:
        where = file or program.source or program.name
        raise SchedcError("too-large", f"{count:,} actions, and the fast checks did not clear them (a "
                          "finding, or what only the detailed checks decide: bounded buffers or posted sends at the "
                          "communication level, messages with a size, groups, waits, replicas, forward only); the "
                          f"detailed checks, which say what is wrong, take at most {MAX_DETAILED_ACTIONS:,} actions: "
                          "check it at fewer microbatches", where=where)


def _check_job(analysis: Analysis, limits, file) -> Report:
    """A pipeline x data-parallel job (`replicas D`): each replica's structure (once for replicas
    that run the same schedule) and messages, the order of every data-parallel group's
    collectives, then deadlock freedom and memory of the whole job, whose rank d * P + p is replica
    d's pipeline rank p (schedc/verify/mesh.py). The native executor decides (the Z3 engine checks
    one pipeline). Replicas that run one program are checked once (`_check_classes`)."""
    from .verify.symmetry import classes
    cls = classes(analysis.program)
    if cls.k < cls.D:
        reduced = _check_classes(analysis, limits, file, cls)
        if reduced is not None:
            return reduced
    return _check_flat_job(analysis, limits, file)


def _flat_fits(program: Program) -> bool:
    """Does the whole job, every replica spelled out, fit the detailed checks' limit?"""
    return program.num_actions * program.dp <= MAX_DETAILED_ACTIONS


def _check_classes(analysis: Analysis, limits, file, cls) -> Report | None:  # noqa: C901
    """The job checked as one replica per class of replicas that run the same lists (the classes'
    first replicas, schedc/verify/symmetry.py), each finding told with the real job's ranks.
    Exact (docs/checks.md): the job's runs are the reduced job's, each class's replicas copying
    their first. A job with a finding that fits the detailed checks whole is left to them (None),
    so its counterexample is the one the whole job gives."""
    from .verify.deadlock import find_deadlock
    from .verify.memory import peak_activation, peak_memory
    from .verify.mesh import flat_job, order_findings
    from .verify.symmetry import real_deadlock
    program, semantics = analysis.program, analysis.semantics
    P, D, fits = program.num_ranks, program.dp, _flat_fits(program)
    reduced = cls.reduced(program)
    sub = Analysis(reduced, semantics)
    report = Report(flat_job(program), file, semantics, "native", replicas=D, analysis=analysis)
    for c, rep in enumerate(cls.reps):
        report.errors.extend(_in_replica(diag, rep, P, cls.members[c][1:]) for diag in lint(reduced.replica(c)))
    if report.errors:
        return None if fits else report
    peaks = [x for c in range(cls.k) for x in peak_activation(reduced.replica(c))]
    report.peak_activation = tuple(cls.expand(peaks))
    scratch = Report(reduced, file, semantics)
    for c, chans in enumerate(sub.replica_channels):
        _match(scratch, chans, c * P, P)
    mixed = [_in_replica(diag, rep, P, cls.members[c][1:]) for c, rep in enumerate(cls.reps)
             for diag in reduce_order(reduced.replica(c), D)]
    found = scratch.errors or order_findings(reduced) or mixed
    if found and fits:
        return None
    if found:  # told of every replica, as the whole job tells them
        by_class = sub.replica_channels
        for d in range(D):
            _match(report, by_class[cls.of[d]], d * P, P)
        report.errors.extend(order_findings(program))
        report.errors.extend(mixed)
    flat, cons = sub.job
    deadlock = find_deadlock(flat, semantics, cons=cons)
    if deadlock is not None:
        if fits:
            return None
        report.deadlock = real_deadlock(deadlock, cls, cons)
        _deadlock_finding(report, (f"ranks are numbered replica by replica: rank d * {P} + p is pipeline rank p "
                                   "of replica d", f"replicas of one schedule are checked once: this is replica "
                                   f"{', '.join(str(d) for d in cls.reps)}'s run, and every replica that runs the same "
                                   "lists stops as it does"))
        return report
    if report.errors:
        return report
    counted = _counted(sub)
    report.peak_memory = cls.expand_peaks(peak_memory(counted))
    report.memory_limit = job_limits(program.annotations.memory_limit, P, D * P, limits)
    _over_limits(report)
    if report.errors and fits:
        return None
    return report


def _check_flat_job(analysis: Analysis, limits, file) -> Report:
    """The job checked whole, every replica spelled out (`_check_job`)."""
    from .verify.deadlock import find_deadlock
    from .verify.memory import peak_activation, peak_memory
    from .verify.mesh import flat_job, order_findings
    program, semantics = analysis.program, analysis.semantics
    P, D = program.num_ranks, program.dp
    replicas = [program.replica(d) for d in range(program.dp)]
    report = Report(flat_job(program), file, semantics, "native", replicas=program.dp, analysis=analysis)
    for d, copies in _distinct(replicas).items():
        report.errors.extend(_in_replica(diag, d, P, copies) if D > 1 else diag for diag in lint(replicas[d]))
    if report.errors:  # before any pairing: a send to no stage has no channel (`bad-comm`)
        return report
    flat, cons = analysis.job
    report.peak_activation = tuple(x for r in replicas for x in peak_activation(r))
    for d, chans in enumerate(analysis.replica_channels):
        _match(report, chans, d * P, P if D > 1 else None)
    report.errors.extend(order_findings(program))
    for d, copies in _distinct(replicas).items():
        report.errors.extend(_in_replica(diag, d, P, copies) for diag in reduce_order(replicas[d], D))
    # every finding is told (a mismatch or a collective out of order hides no deadlock)
    report.deadlock = find_deadlock(flat, semantics, cons=cons)
    if report.deadlock is not None:
        _deadlock_finding(report, (f"ranks are numbered replica by replica: rank d * {P} + p is pipeline rank p "
                                   "of replica d",) if D > 1 else ())
        return report
    if report.errors:
        return report
    report.peak_memory = peak_memory(_counted(analysis))  # the whole job's: its collectives order the runs
    report.memory_limit = job_limits(program.annotations.memory_limit, P, flat.num_ranks, limits)
    _over_limits(report)
    return report


def _one_sided_groups(program: Program, semantics: Semantics, chans) -> tuple[str, ...]:
    """A note, under a semantics other than nccl, where a message is grouped on one end only: NCCL
    posts a group on the process group's communicator and a single operation on the pair's, so the
    two never meet there (docs/semantics.md, "Groups under nccl"); the nccl verdict says so."""
    if semantics.one_stream_per_pair or program.level != "comms":
        return ()

    def grouped(ep) -> bool:
        return is_group(program.ranks[ep.rank][ep.step])

    for send, recv in chans.pairs():
        if grouped(send) != grouped(recv):
            return (f"rank {send.rank}'s {describe(send.action)} and rank {recv.rank}'s {describe(recv.action)} "
                    "meet here, but one is in a group and the other is not: on NCCL a group and a single "
                    "operation travel on different communicators and never meet (--semantics nccl)",)
    return ()


def _deadlock_finding(report: Report, notes: tuple[str, ...]) -> None:
    """The `deadlock` finding of the report's deadlock, at the first wait of its cycle."""
    from .verify.deadlock import end_of_step_notes
    dl = report.deadlock
    assert dl is not None  # (each caller has just found the report's deadlock)
    first = dl.cycle[0] if dl.cycle else None
    report.errors.append(Diagnostic(
        "deadlock", f"deadlock under {report.semantics.phrase()}: {dl.cause}",
        first.action.span if first else None, (*end_of_step_notes(dl), *notes), rank=first.rank if first else None,
        step=display_step(first.action, first.step) if first else None))


def _distinct(replicas: list[Program]) -> dict[int, list[int]]:
    """Each replica whose schedule no earlier replica runs -> the later replicas that run it too."""
    out: dict[int, list[int]] = {}
    for d, replica in enumerate(replicas):
        first = next((e for e in out if replicas[e].ranks == replica.ranks), None)
        out.setdefault(d, []) if first is None else out[first].append(d)
    return out


def _in_replica(diag: Diagnostic, d: int, P: int, copies=()) -> Diagnostic:
    """A finding about one replica's pipeline, told with the job's rank number (and, said once, of
    the `copies`: the replicas that run the same schedule)."""
    notes = diag.notes
    if copies:
        at = "" if diag.rank is None else f": the same at rank {', '.join(str(e * P + diag.rank) for e in copies)}"
        notes += (f"replica {', '.join(map(str, copies))} run{'s' if len(copies) == 1 else ''} the same "
                  f"schedule{at}",)
    if diag.rank is None:
        return replace(diag, message=f"replica {d}: {diag.message}", notes=notes)
    head = f"rank {diag.rank}, "
    message = diag.message
    if message.startswith(head):
        message = f"rank {d * P + diag.rank} (replica {d}), " + message[len(head):]
    return replace(diag, message=message, rank=d * P + diag.rank, notes=notes)


def _other_backends(program: Program, semantics: Semantics, chans, declared: str) -> tuple[str, ...]:
    """A deadlock's verdict is about its semantics: say what the runtimes' backends make of the
    program (posted and awaited as torch's runtime does), when that differs."""
    if program.level != "comms":
        return ()
    from .verify.execute import channels, execute
    verdicts = []
    for other in Semantics.backends():
        if other == semantics.base:
            continue
        seen, _ = as_paired(replace(program, p2p=declared), other)
        same = seen.p2p == program.p2p and chans.batches_apart == other.one_stream_per_pair
        paired = chans if same else channels(seen, other)
        if any(payload(s.action) != payload(r.action) for s, r in paired.pairs()):
            why = "NCCL ignores tags" if seen.p2p != program.p2p else "NCCL posts groups apart from single operations"
            verdicts.append(f"under {other} its messages pair otherwise and cross ({why})")
            continue
        verdicts.append(f"under {other} it {'completes' if execute(seen, other, paired).finished else 'deadlocks too'}")
    notes = []
    if any(v.endswith("completes") for v in verdicts):
        notes.append(f"this verdict is under {semantics} semantics; {' and '.join(verdicts)} (--semantics "
                     "nccl|gloo: sends and receives posted and awaited as torch's runtime does)")
    if semantics.one_stream_per_pair and declared == "shared":
        split = replace(program, p2p="split")
        if execute(split, semantics, channels(split, semantics)).finished:
            notes.append("with activations and gradients on communicators of their own (a `p2p split` line, "
                         f"or --p2p split: a stream each) it completes under {semantics.base}")
    return tuple(notes)


MAX_MISMATCHES_TOLD = 20  # mismatch errors a report spells out (`mismatches` holds them all)


def _match(report: Report, chans, offset: int = 0, per_replica: int | None = None) -> None:
    """Mismatched pairs and unmatched sends or receives on `chans`, one finding each. The channels
    of replica d of a job are numbered in its own pipeline: `offset` (d * P) makes them job ranks,
    and `per_replica` (P, in a job of several replicas) names the replica beside the rank."""
    def rank(r: int) -> str:
        return f"rank {r}" if per_replica is None else f"rank {r} (replica {r // per_replica})"

    def job(channel: tuple) -> tuple:
        return (channel[0] + offset, channel[1] + offset, *channel[2:])

    found = [Mismatch(send.rank + offset, send.step, send.action, recv.rank + offset, recv.step, recv.action,
                      job(send.channel))
             for send, recv in chans.pairs() if payload(send.action) != payload(recv.action)]
    told = max(0, MAX_MISMATCHES_TOLD - len(report.mismatches))
    report.mismatches.extend(found)
    for m in found[:told]:
        step, send_step = display_step(m.recv, m.recv_step), display_step(m.send, m.send_step)
        report.errors.append(Diagnostic(
            "mismatch", f"{rank(m.recv_rank)}, step {step}: {describe(m.recv)} is paired with "
            f"{describe(m.send)} from rank {m.send_rank} (step {send_step}): messages pair in order on "
            f"{describe_channel(m.channel)}, so this receive gets the wrong tensor", m.recv.span,
            rank=m.recv_rank, step=step))
    loose = chans.unmatched()
    apart = apart_partners(loose) if loose and chans.batches_apart else set()
    for ep in loose:
        kind = "send" if ep.action.op.name.startswith("SEND") else "receive"
        other = "receive" if kind == "send" else "send"
        step = display_step(ep.action, ep.step)
        report.errors.append(Diagnostic(
            "unmatched", f"{rank(ep.rank + offset)}, step {step}: {describe(ep.action)} is {kind} number "
            f"{ep.index + 1} on {describe_channel(job(ep.channel))}, but that channel has no {other} "
            f"number {ep.index + 1}", ep.action.span, (ONE_SIDED_GROUP,) if ep[:3] in apart else (),
            rank=ep.rank + offset, step=step))


def _deadlock_z3(report: Report, analysis: Analysis, timeout_s: float | None) -> None:
    """Z3 decides; a deadlock is told from the executor's run, as the native engine tells it, so the
    two engines give one report (the stuck steps, the cycle). Verdicts that differ are `unknown`."""
    from .solver import Proved, Unknown
    from .verify.deadlock import deadlock_of, disagreement
    from .verify.solver import MAX_STEPS, prove_deadlock_free
    steps = sum(len(r) for r in analysis.program.ranks)  # (at most the query's: nccl's streams add theirs)
    if steps > MAX_STEPS:  # before the constraints are built: 2M actions took 30 s to refuse (seed 83)
        report.unknown = f"{steps:,} steps is beyond the solver limit of {MAX_STEPS:,}; use --engine native"
        return
    result = prove_deadlock_free(analysis.program, analysis.semantics, analysis.channels, timeout_s=timeout_s,
                                 cons=analysis.constraints)
    if isinstance(result, Unknown):
        report.unknown = result.reason
        return
    native = deadlock_of(analysis)
    why = disagreement(result, native)
    if why is not None:
        report.unknown = why
    elif isinstance(result, Proved):
        # the deadlock query's witness: each rank's step times, a tuple of int tuples (verify/solver.py)
        assert isinstance(result.witness, tuple)
        report.witness = result.witness
    else:
        report.deadlock = native


def _limits(program: Program, limits: dict[int, float] | None) -> tuple[float | None, ...]:
    return job_limits(program.annotations.memory_limit, program.num_ranks, program.num_ranks, limits)


def _memory(report: Report, analysis: Analysis, limits: dict[int, float] | None) -> None:
    from .verify.memory import peak_memory
    report.peak_memory = peak_memory(_counted(analysis))
    report.memory_limit = _limits(analysis.program, limits)
    _over_limits(report)


def _counted(analysis: Analysis) -> Analysis:
    """The analysis, with the lowering its memory is counted on when that is the program's run."""
    return _lowered(analysis) if counted_lowered(analysis.program) else analysis


def _over_limits(report: Report) -> None:
    """A `memory` finding for each rank whose peak (`report.peak_memory`) is over its limit."""
    for pk in report.peak_memory:
        limit = report.memory_limit[pk.rank]
        if limit is not None and exceeds(pk.memory, limit):
            report.memory_violations.append(pk)
            report.errors.append(Diagnostic(
                "memory", f"rank {pk.rank}, step {display_step(pk.action, pk.step)}: memory reaches "
                f"{_number(pk.memory)}{_moment(pk)}, over the limit of {_number(limit)}"
                f"{_messages(pk, report.semantics)}",
                pk.action.span if pk.action is not None else None, ("live: " + "; ".join(pk.live),),
                rank=pk.rank, step=display_step(pk.action, pk.step)))


def _moment(pk: Peak) -> str:
    """Where a rank peaks, in the user's program: its action, or the send or receive that lowering
    inserts just after or before it."""
    if pk.action is None:
        return ""
    if pk.inserted is None:
        return f" at {describe(pk.action)}"
    # (an inserted step is a send or a receive, of a microbatch: it carries a value)
    if pk.inserted.op in RECVS:
        received = delivers(pk.inserted)
        assert received is not None
        return (f" at the receive that lowering inserts before {describe(pk.action)} (for "
                f"{value_name(received)})")
    sent = payload(pk.inserted)
    assert sent is not None
    return (f" at the send that lowering inserts after {describe(pk.action)} (of "
            f"{value_name(sent)})")


def _messages(pk: Peak, semantics: Semantics) -> str:
    """How much of a peak is messages, and whose."""
    if pk.buffers <= 0:
        return ""
    held = semantics.sent_held_until
    what = "receive buffers" if held is None else f"receive buffers and sent messages not yet {held}"
    whose = " that lowering inserts" if pk.lowered else ""
    return f"; {_number(pk.buffers)} of it in {what}{whose}"
