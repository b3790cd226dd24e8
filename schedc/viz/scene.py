"""What a picture shows, before any drawing: blocks per rank, arrows, memory, marks and the title.

`build_scene(program, report)` decides how to draw a schedule. One the simulator can time is drawn
in time (`mode="time"`, every step from its start to its end); past MAX_BLOCKS steps or MAX_ROWS
ranks it is aggregated into AGGREGATE_BINS time bins per row (`mode="aggregate"`). One that cannot
finish is drawn in program order, one cell per step (`mode="step"`), with the blocked steps and the
wait-for cycle marked. Crossed pairs and memory violations are marked in either mode. The SVG and
HTML writers (svg.py, html.py) only lay out what the Scene says.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..columns import KIND_CODE, OPS, columns_of
from ..errors import SchedcError
from ..units import Units
from ..ir import WAITS, Action, Compound, CompoundKind, Op, Program, Step, count_of, describe, format_step, sizes_text

MAX_BLOCKS = 10_000  # more steps than this are aggregated (an SVG of ~250 bytes per block stays < 3 MB)
MAX_ROWS = 128  # more ranks than this are aggregated into groups of ranks
AGGREGATE_BINS = 600  # time bins per row in the aggregated picture
MAX_ARROWS = 5_000  # message arrows drawn (--arrows); the rest are counted in a note
STEP_WINDOW = 160  # columns of a program-order picture; a longer one shows the window around the failure
STEP_ROWS = 64  # rows of a program-order picture; more show the ranks on the cycle and around it
MAX_MARKED = 20  # crossed pairs and memory violations marked (as `schedc check` reports them)

# the checks whose findings leave the structure sound (anything else is a structural error)
_RUN_CODES = frozenset({"mismatch", "unmatched", "deadlock", "memory"})

_WAIT_LABEL = {"recv-not-posted": "waits for its receive", "send-not-posted": "waits for its send",
               "buffer-full": "channel full", "value": "waits for the value", "never": "never comes",
               "partner-queued": "waits for its partner, queued behind an earlier operation",
               "recv-not-done": "waits for its receive to complete", "not-posted": "waits for its partner to be posted",
               "collective-not-reached": "waits for the other ranks to reach the collective",
               "collective-not-posted": "waits for the other ranks to post the collective"}
# a finding's code as the verdict counts it: `2 mismatches`, `1 memory violation`, else `2 <code> errors`
_COUNTED = {"mismatch": ("mismatch", "mismatches"), "memory": ("memory violation", None),
            "duplicate": ("duplicate", None), "missing": ("missing action", None),
            "unmatched": ("unmatched message", None)}
_COMM_LABEL = {Op.SEND_F: "→F", Op.RECV_F: "←F", Op.SEND_B: "→B", Op.RECV_B: "←B"}
_STAGE_LABEL = {Op.UNSHARD: "U", Op.RESHARD: "R", Op.REDUCE_GRAD: "RG", Op.REDUCE_TIED: "RT"}


@dataclass
class Block:
    """One step of one rank: where it sits on the x axis (time, or step index) and how it looks."""

    rank: int
    step: int
    kind: str  # F B I W OVERLAP COMM STAGE
    x0: float
    x1: float
    label: str  # drawn inside the block when it fits (the microbatch)
    chunk: int  # the stage's position among the rank's stages (0: its first chunk)
    text: str  # compact form, 2F0
    what: str  # as the language writes it, F(2,0)
    stage: int
    microbatch: int | None
    where: str | None  # file name and line of the action (no folders: pictures do not depend on paths)
    line: int | None
    mark: str = ""  # "" | cycle | blocked | not-run | crossed | live | error
    note: str = ""  # why it is marked


@dataclass(frozen=True)
class Arrow:
    """From (rank, x) to (rank, x); `kind` is msg (a message), wait (the wait-for cycle) or cross.
    A wait or cross arrow joins two steps (`src_step`, `dst_step`): it is routed around the labels."""

    src_rank: int
    src_x: float
    dst_rank: int
    dst_x: float
    kind: str
    label: str = ""
    src_step: int | None = None
    dst_step: int | None = None


@dataclass
class Finding:
    """One finding of the check, once: its diagnostic as the check renders it (with its source line),
    the number the picture marks it with ("" if none) and the picture's note on it ("" if none)."""

    code: str
    text: str
    number: str = ""
    note: str = ""


@dataclass(frozen=True)
class Moment:
    """A memory violation: a vertical line on a rank's row at x, with its label."""

    rank: int
    x: float
    label: str


@dataclass
class Aggregate:
    """A run too large for blocks: per row (a rank, or a group of ranks) and time bin, the kind that
    took most of the time and the fraction of the bin the row was busy."""

    bins: int
    bin_width: float
    cells: list[tuple[int, int, int, str, float]]  # (row, first bin, last bin + 1, kind, busy level)
    memory: list[list[float]]  # per row, per bin: the highest live memory of its ranks
    group: int  # ranks per row


@dataclass
class RankSummary:
    rank: int
    steps: int
    actions: int
    busy: float | None
    idle: float | None
    peak_simulated: float | None
    peak_checked: float | None
    limit: float | None


@dataclass
class Scene:
    mode: str  # time | step | aggregate
    name: str
    params: tuple[tuple[str, int], ...]
    num_ranks: int
    num_stages: int
    num_microbatches: int
    chunks: int  # the most stages any rank holds
    title: str
    metrics: str
    verdict: str
    ok: bool | None
    rows: list[int]  # ranks drawn, top to bottom (aggregate: the first rank of each group)
    row_labels: list[str]
    extent: tuple[float, float]  # x range: time, or step index
    x_label: str  # "time" or "step"
    blocks: list[Block] = field(default_factory=list)
    arrows: list[Arrow] = field(default_factory=list)
    moments: list[Moment] = field(default_factory=list)
    memory: dict[int, tuple[tuple[float, float], ...]] = field(default_factory=dict)  # rank -> (x, live)
    memory_max: float = 0.0
    routes: int = 0  # routes whose stages are each rank's chunks, one a route in order (DualPipe: 2); else 0
    limits: dict[int, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    summary: list[RankSummary] = field(default_factory=list)
    aggregate: Aggregate | None = None
    sources: dict[str, str] = field(default_factory=dict)  # "file:line" -> the source line
    makespan: float | None = None
    bubble: float | None = None
    peak: float | None = None
    findings: list[Finding] = field(default_factory=list)  # the check's findings, each once
    grid: str = ""  # the check's rank-by-step grid of a deadlock
    units: Units | None = None  # schedc/units.py `Units` the numbers are labelled with (None: the schedule's units)
    unused: list[str] = field(default_factory=list)  # options asked for that this picture cannot apply, and why

    @property
    def kinds(self) -> list[str]:
        order = ["F", "B", "I", "W", "OVERLAP", "COMM", "STAGE"]
        present = {b.kind for b in self.blocks}
        if self.aggregate is not None:
            present |= {c[3] for c in self.aggregate.cells}
        return [k for k in order if k in present]


def build_scene(program: Program, report, *, timeline=None, arrows: bool = False, overlap: bool = True,
                links=None, units=None) -> Scene:
    """The Scene of a program, drawn from what the caller computed: its report (schedc/report.py's,
    never checked again here) and its simulated timeline (simulated here only if not given and the
    run can be timed; None when it cannot finish). `overlap` and `links` are the simulator's
    settings; `units` (schedc/units.py) labels times and sizes, its note heads the notes."""
    structural = [d for d in report.errors if d.code not in _RUN_CODES]
    # crossed pairs are about the order messages pair in, so they are drawn in program order too
    untimed = ("structure" if structural else "deadlock" if report.deadlock is not None else
               "mismatch" if report.mismatches else None)
    if timeline is None and untimed is None:
        timeline = _simulate(program, overlap, links, report.semantics)
        if timeline is None:
            untimed = "deadlock"
    elif untimed is not None:
        timeline = None
    if report.replicas > 1 or timeline is not None and timeline.replicas > 1:
        # a data-parallel job is drawn whole (rank d * P + p is replica d's rank p), as timed: lowered
        program = timeline.program if timeline is not None else report.program
    scene = _frame(program, report, timeline, untimed, units)
    if timeline is None:
        _program_order(scene, program, report, structural)
        if arrows:
            scene.unused.append("--arrows: the picture of a failing schedule is drawn in program order, "
                                "with its counterexample's arrows, not the messages'")
    elif program.num_actions and (sum(_lengths(program)) > MAX_BLOCKS or program.num_ranks > MAX_ROWS):
        _aggregated(scene, program, timeline)
        if arrows:
            scene.unused.append(f"--arrows: no message arrows in an aggregated picture (more than "
                                f"{MAX_BLOCKS:,} steps or {MAX_ROWS} ranks: each row is binned in time, "
                                "not drawn step by step)")
    else:
        _timed(scene, program, timeline, arrows)
    _mark_findings(scene, program, report, timeline)
    scene.summary = _summary(program, report, timeline)
    return scene


def _simulate(program: Program, overlap: bool, links, semantics=None):
    """The timed run under the report's semantics (a backend times posted and awaited operations)."""
    from ..simulate import simulate
    try:
        return simulate(program, overlap=overlap, links=links, semantics=semantics)
    except SchedcError as e:
        if e.code in ("deadlock", "bad-index", "bad-action"):
            return None
        raise


# ---- the frame: title, metrics, verdict ----
_UNTIMED = {
    "deadlock": "not timed: the run cannot finish, so it is drawn in program order (one cell per step)",
    "mismatch": "drawn in program order (one cell per step): on each channel the k-th send meets the k-th receive",
    "structure": "not timed: the structure is broken, so it is drawn in program order (one cell per step)",
}


def _frame(program: Program, report, timeline, untimed: str | None, units=None) -> Scene:
    params = ", ".join(f"{k}={v}" for k, v in program.params)
    t, m = (f" {units.time}", f" {units.memory}") if units is not None else ("", "")
    title = program.name + (f" ({params})" if params else "")
    sizes = sizes_text(program)
    if timeline is not None:
        peaks = timeline.peak_memory
        peak = max(peaks, default=0.0)
        who = peaks.index(peak) if peaks else 0
        metrics = (f"makespan {_num(timeline.makespan)}{t} · bubble {timeline.bubble_ratio:.1%} · "
                   f"peak memory {_num(peak)}{m} (rank {who}) · {sizes}")
        mode, x_label, extent = "time", "time" + (f" ({units.time})" if units else ""), (0.0, max(timeline.makespan, 1e-9))
        makespan, bubble = timeline.makespan, timeline.bubble_ratio
    else:
        peak = max(report.peak_activation, default=None)
        metrics = (_UNTIMED[untimed or "deadlock"] + (f" · peak activation {_num(peak)}{m}" if peak is not None else "") + f" · {sizes}")
        mode, x_label, extent = "step", "step", (0.0, 1.0)
        makespan = bubble = None
    verdict, ok = _verdict(report)
    ranks_held = [0] * program.num_ranks
    for r in program.placement:
        if 0 <= r < program.num_ranks:
            ranks_held[r] += 1
    scene = Scene(mode, program.name, program.params, program.num_ranks, program.num_stages,
                  program.num_microbatches, max(ranks_held, default=1), title, metrics, verdict, ok,
                  list(range(program.num_ranks)), [f"rank {r}" for r in range(program.num_ranks)],
                  extent, x_label, makespan=makespan, bubble=bubble, peak=peak)
    scene.units = units
    scene.routes = _chunks_by_route(program)
    if units is not None and units.note:
        scene.notes.append(units.note)
    scene.findings = [Finding(d.code, d.render()) for d in report.errors]
    if report.deadlock is not None:
        from ..verify.deadlock import render_grid
        scene.grid = render_grid(report.program, report.deadlock)  # a data-parallel job's: its ranks are the job's
    scene.limits = {r: limit for r, limit in enumerate(report.memory_limit) if limit is not None}
    if not scene.limits:
        scene.limits = dict(program.annotations.memory_limit)
    return scene


def _verdict(report) -> tuple[str, bool | None]:
    sem = str(report.semantics)
    if report.ok is True:
        return f"checks hold under {sem} sends", True
    if report.ok is None:
        return f"checks could not decide: {report.unknown}", None
    codes = []
    for d in report.errors:
        if d.code not in codes:
            codes.append(d.code)
    counts = ", ".join(count_of(sum(d.code == c for d in report.errors), *_COUNTED.get(c, (f"{c} error", None)))
                       for c in codes if c != "deadlock")
    if report.deadlock is not None:  # its cause is a finding: told once, under the picture
        return f"DEADLOCK under {sem} sends" + (f" (and {counts})" if counts else ""), False
    if not any(c in _RUN_CODES for c in codes):  # broken structure fails whatever the sends do
        return f"FAILED: {counts}", False
    return f"FAILED under {sem} sends: {counts}", False


def _explain(scene: Scene, code: str, k: int, note: str, number: str = "") -> None:
    """The picture's note on the k-th finding of `code` (the check reports them in the order the
    scene marks them): added to the notes, and kept with the finding so a page shows it once."""
    scene.notes.append(note)
    found = [f for f in scene.findings if f.code == code]
    if k < len(found):
        found[k].note, found[k].number = note, number


def _chunks_by_route(program: Program) -> int:
    """How many routes there are when each rank's k-th chunk is on the k-th run of stages (DualPipe's
    two directions: a lighter block is then a later route's); 0 otherwise."""
    runs = sorted({r.stages for r in program.routes})
    if len(runs) < 2:
        return 0
    run_of = [next(k for k, (lo, hi) in enumerate(runs) if lo <= s < hi) for s in range(program.num_stages)]
    held: dict[int, list[int]] = {}
    for s, r in enumerate(program.placement):
        held.setdefault(r, []).append(run_of[s])
    return len(runs) if all(runs_of == list(range(len(runs))) for runs_of in held.values()) else 0


# ---- blocks ----
def chunk_of(program: Program) -> list[int]:
    """stage -> its position among the stages of its rank."""
    seen: dict[int, int] = {}
    out = []
    for s in range(program.num_stages):
        r = program.placement[s] if s < len(program.placement) else -1
        out.append(seen.get(r, 0))
        seen[r] = seen.get(r, 0) + 1
    return out


def _lengths(program: Program) -> list[int]:
    """Each rank's number of steps (from its columns when the program holds them so: no action is made)."""
    held = columns_of(program)
    return [len(steps) for steps in program.ranks] if held is None else np.diff(held.starts).tolist()


def kind_of(step: Step) -> str:
    if isinstance(step, Compound):
        return "OVERLAP" if step.kind is CompoundKind.OVERLAP_F_B else "COMM"
    if step.op.is_compute:
        return step.op.value
    return "COMM" if step.op.is_comm or step.op in WAITS else "STAGE"


_KINDS = ["F", "B", "I", "W", "OVERLAP", "COMM", "STAGE"]  # an aggregated cell's kinds, in the legend's order
_KIND_OF_OP = np.array([_KINDS.index(kind_of(Action(op, 0, 0 if op.has_microbatch else None))) for op in OPS])


def _kind_codes(program: Program, r: int):
    """The kind of each of rank r's steps, as its index in _KINDS (from the op codes, and a compound's
    kind, when the program holds its steps as columns)."""
    held = columns_of(program)
    if held is None:
        return np.array([_KINDS.index(kind_of(st)) for st in program.ranks[r]])
    lo, hi = held.starts[r], held.starts[r + 1]
    kinds = _KIND_OF_OP[held.op[lo:hi]]
    if held.compounds:
        parts = held.parts
        c_lo, c_hi = np.searchsorted(parts.step, [lo, hi])
        kinds[parts.step[c_lo:c_hi] - lo] = np.where(parts.kind[c_lo:c_hi] == KIND_CODE[CompoundKind.OVERLAP_F_B],
                                                     _KINDS.index("OVERLAP"), _KINDS.index("COMM"))
    return kinds


def _label(step: Step, mode: str) -> str:
    if isinstance(step, Compound):
        if step.kind is CompoundKind.OVERLAP_F_B:
            return "|".join("" if a.microbatch is None else str(a.microbatch) for a in step.parts)
        return "grp" if mode == "step" else ""
    if step.op.is_compute:
        return str(step.microbatch)
    if mode != "step":
        return ""
    if step.op.is_comm:
        return f"{_COMM_LABEL[step.op]}{step.microbatch}"
    return _STAGE_LABEL.get(step.op, "")


def what_of(step: Step) -> str:
    if isinstance(step, Compound):
        return f"{step.kind.value}(" + ", ".join(describe(a) for a in step.parts) + ")"
    return describe(step)


def _where(a: Action) -> tuple[str | None, int | None]:
    if a.span is None:
        return None, None
    return f"{Path(a.span.file).name}:{a.span.line}", a.span.line


def _block(scene: Scene, chunks: list[int], r: int, x: int, st: Step, x0: float, x1: float) -> Block:
    first = st.parts[0]
    where, line = _where(first)
    if first.span is not None and where is not None and where not in scene.sources:  # (where: from the span)
        text = first.span.source.line_text(first.span.line).strip()
        scene.sources[where] = text if len(text) <= 160 else text[:157] + "..."
    chunk = chunks[first.stage] if 0 <= first.stage < len(chunks) else 0
    return Block(r, x, kind_of(st), x0, x1, _label(st, scene.mode), chunk, format_step(st), what_of(st), first.stage,
                 first.microbatch, where, line)


def _timed(scene: Scene, program: Program, timeline, arrows: bool) -> None:
    chunks = chunk_of(program)
    for r, x, st, start, end in timeline.steps():
        scene.blocks.append(_block(scene, chunks, r, x, st, start, end))
    scene.memory = {r: timeline.memory(r) for r in range(program.num_ranks)}
    scene.memory_max = max([v for pts in scene.memory.values() for _, v in pts] + list(scene.limits.values()) + [0.0])
    if arrows:
        _message_arrows(scene, timeline)


def _message_arrows(scene: Scene, timeline) -> None:
    """A message from its departure on the sender to the consumer's start (compute level) or its arrival."""
    messages = timeline.messages
    compute = timeline.level == "compute"
    for i, m in enumerate(messages):
        if i >= MAX_ARROWS:
            scene.notes.append(f"{len(messages) - MAX_ARROWS:,} more messages are not drawn "
                               f"(at most {MAX_ARROWS:,} arrows)")
            break
        end = m.arrival
        if compute and m.dst_step >= 0:
            end = max(end, timeline.start[m.dst_rank][m.dst_step])
        kind, s, mb = m.value
        what = f"activation of F({s},{mb})" if kind == "act" else f"gradient of stage {s}, microbatch {mb}"
        scene.arrows.append(Arrow(m.src_rank, m.departure, m.dst_rank, end, "msg", what))


def _program_order(scene: Scene, program: Program, report, structural) -> None:
    """One cell per step; the steps where ranks stop, the wait-for cycle, and what never ran."""
    from ..rules.memory import stage_sizes
    from ..verify.memory import activations_along
    deadlock = report.deadlock
    if deadlock is None and not structural and not _rendezvous_checked(report):
        # the checks passed under buffered sends, but the simulator times rendezvous sends
        from ..verify.deadlock import find_deadlock
        from ..rules.semantics import RENDEZVOUS
        deadlock = find_deadlock(program, RENDEZVOUS)
        if deadlock is not None:
            scene.notes.append(f"times are simulated with rendezvous sends, under which this program stops: "
                               f"{deadlock.cause}; it finishes under {report.semantics}")
    stuck = dict(deadlock.stuck) if deadlock is not None else {}
    cycle = tuple(deadlock.cycle) if deadlock is not None else ()
    longest = max((len(s) for s in program.ranks), default=0)
    lo, hi = 0, longest
    if longest > STEP_WINDOW:
        focus = sorted(set(stuck.values()) | {w.step for w in cycle} | {w.on_step for w in cycle if w.on_step is not None})
        centre = focus[0] if focus else 0
        lo = max(0, min(centre - STEP_WINDOW // 2, longest - STEP_WINDOW))
        hi = lo + STEP_WINDOW
        scene.notes.append(f"showing steps {lo}..{hi - 1} of {longest}, around where the ranks stop")
    rows = list(range(program.num_ranks))
    if len(rows) > STEP_ROWS:
        keep = sorted({w.rank for w in cycle} | {w.on_rank for w in cycle if w.on_rank is not None} | set(stuck))
        keep = (keep or rows)[:STEP_ROWS]
        rows = keep
        scene.notes.append(f"showing {len(rows)} of {program.num_ranks} ranks: those on the wait-for cycle "
                           "and the stuck ones")
    scene.rows, scene.row_labels = rows, [f"rank {r}" for r in rows]
    scene.extent = (float(lo), float(max(hi, lo + 1)))
    chunks = chunk_of(program)
    act, weight, _ = stage_sizes(program)
    for r in rows:
        steps = program.ranks[r]
        series = [(float(lo), 0.0)]
        counted = [[a for a in st.parts if 0 <= a.stage < program.num_stages] for st in steps]
        for x, (st, (during, live)) in enumerate(zip(steps, activations_along(counted, act, weight,
                                                                                     program.forward_only))):
            if not lo <= x < hi:
                continue
            block = _block(scene, chunks, r, x, st, float(x), float(x + 1))
            if r in stuck and x > stuck[r]:
                block.mark, block.note = "not-run", "never runs: the rank is stuck at an earlier step"
            elif stuck.get(r) == x:
                block.mark, block.note = "blocked", "the rank is stuck here"
            scene.blocks.append(block)
            series += [(float(x), during), (float(x + 1), live)]
        scene.memory[r] = tuple(series)
    scene.memory_max = max([v for pts in scene.memory.values() for _, v in pts] + list(scene.limits.values()) + [0.0])
    by_pos = {(b.rank, b.step): b for b in scene.blocks}
    if deadlock is report.deadlock and deadlock is not None:
        _explain(scene, "deadlock", 0, f"deadlock: {deadlock.cause}")
    for n, w in enumerate(cycle, 1):
        b = by_pos.get((w.rank, w.step))
        label = _WAIT_LABEL.get(w.reason, w.reason)
        target = ""
        if w.on_rank is not None:
            target = f" on rank {w.on_rank}" + (f", step {w.on_step}" if w.on_step is not None else "") + (
                f" ({describe(w.on_action)})" if w.on_action is not None else "")
        where = f" [{_where(w.action)[0]}]" if w.action.span is not None else ""
        text = f"rank {w.rank}, step {w.step}: {describe(w.action)} {label}{target}{where}"
        if b is not None:
            b.mark, b.note = "cycle", f"blocked ({n}): {text}"
        drawn = w.on_rank is not None and w.on_step is not None and w.rank in rows and w.on_rank in rows
        if drawn:
            scene.arrows.append(Arrow(w.rank, w.step + 0.5, w.on_rank, w.on_step + 0.5, "wait", str(n),
                                      w.step, w.on_step))
        scene.notes.append(f"({n}) {text}")
    outlined = []
    for d in structural[:MAX_MARKED]:
        if d.rank is None or d.step is None or d.rank not in rows:
            continue
        b = by_pos.get((d.rank, _index(program, d.rank, d.step)))
        if b is not None and not b.mark:
            b.mark, b.note = "error", f"{d.code}: {d.message}"
            outlined.append(f"rank {d.rank}, step {b.step} ({d.code})")
    if structural:
        scene.notes.append(f"the structure is broken ({count_of(len(structural), 'finding')}), so the run is not "
                           "timed")
        if outlined:  # (each finding's message is the check's, listed once with the findings)
            scene.notes.append("outlined, the steps the findings name: " + "; ".join(outlined))


def _rendezvous_checked(report) -> bool:
    """Whether the report's deadlock check has already answered for rendezvous sends (the
    simulator's), so a report without a deadlock needs no second search."""
    from ..rules.semantics import RENDEZVOUS
    return report.semantics == RENDEZVOUS and report.unknown is None


def _index(program: Program, rank: int, shown: int) -> int:
    """The program index of the step a finding names (a CSV cell's column, or the index itself)."""
    steps = program.ranks[rank] if 0 <= rank < len(program.ranks) else ()
    if any(st.parts[0].span is not None and st.parts[0].span.step is not None for st in steps):
        for x, st in enumerate(steps):
            if st.parts[0].span is not None and st.parts[0].span.step == shown:
                return x
    return shown


def _aggregated(scene: Scene, program: Program, timeline) -> None:
    R = program.num_ranks
    group = max(1, math.ceil(R / MAX_ROWS))
    rows = list(range(0, R, group))
    scene.mode = "aggregate"
    scene.rows = rows
    scene.row_labels = [f"rank {r}" if group == 1 else f"ranks {r}-{min(R, r + group) - 1}" for r in rows]
    bins = AGGREGATE_BINS
    span = max(timeline.makespan, 1e-9)
    width = span / bins
    edges = np.linspace(0.0, span, bins + 1)
    busy = np.zeros((len(rows), len(_KINDS), bins))
    memory = np.zeros((len(rows), bins))
    alike: dict[tuple, int] = {}  # ranks that run the same steps at the same times (a job's replicas): once
    shares: dict[tuple[int, int], int] = {}  # (row, distinct rank) -> its ranks in the row
    for r, length in enumerate(_lengths(program)):
        if length:
            key = tuple(map(id, (program.ranks[r], timeline.start[r], timeline.end[r], timeline.memory_during[r])))
            first = alike.setdefault(key, r)
            shares[(r // group, first)] = shares.get((r // group, first), 0) + 1
    rows_of: dict[int, list[tuple[int, int]]] = {}  # distinct rank -> (row, its ranks there)
    for (row, first), n in shares.items():
        rows_of.setdefault(first, []).append((row, n))
    for first, where in rows_of.items():  # (each binned once and added at once: 65,536 distinct ranks'
        by_kind, held = _binned(program, timeline, first, edges, width)  # bins held together took 2.4 GB)
        for row, n in where:
            busy[row] += n * by_kind
            np.maximum(memory[row], held, out=memory[row])
    per_row = np.array([min(R, r + group) - r for r in rows], dtype=float)[:, None]
    total = busy.sum(axis=1) / (per_row * width)
    dominant = busy.argmax(axis=1)
    cells = []
    for i in range(len(rows)):
        level = np.round(np.clip(total[i], 0, 1) * 10) / 10
        b = 0
        while b < bins:
            e = b + 1
            while e < bins and dominant[i, e] == dominant[i, b] and level[e] == level[b]:
                e += 1
            if level[b] > 0:
                cells.append((i, b, e, _KINDS[int(dominant[i, b])], float(level[b])))
            b = e
    scene.aggregate = Aggregate(bins, width, cells, [list(map(float, m)) for m in memory], group)
    scene.memory_max = float(max(memory.max(initial=0.0), max(scene.limits.values(), default=0.0)))
    steps = sum(_lengths(program))
    scene.notes.append(f"aggregated: {steps:,} steps on {R:,} ranks is more than {MAX_BLOCKS:,} steps or "
                       f"{MAX_ROWS} ranks; each row is {'a rank' if group == 1 else f'{group} ranks'}, each cell "
                       f"1/{bins} of the run, coloured by the kind that took most of it and shaded by how busy "
                       "the row was")


def _binned(program: Program, timeline, r: int, edges, width: float):
    """Rank r's busy time per kind and time bin, and the highest memory it holds in each bin."""
    bins = len(edges) - 1
    by_kind = np.zeros((len(_KINDS), bins))
    starts = np.asarray(timeline.start[r], dtype=float)
    ends = np.asarray(timeline.end[r], dtype=float)
    code = _kind_codes(program, r)
    for k in range(len(_KINDS)):
        mask = code == k
        if mask.any():
            by_kind[k] = np.diff(_cumulative(starts[mask], ends[mask], edges))
    during = np.asarray(timeline.memory_during[r], dtype=float)
    after = np.asarray(timeline.memory_after[r], dtype=float)
    idx = np.clip((starts / width).astype(int), 0, bins - 1)
    held = np.zeros(bins)  # what is live as each bin begins: after the last step that started before it
    last = np.searchsorted(starts, edges[:-1], side="left") - 1
    held[last >= 0] = after[last[last >= 0]]
    np.maximum.at(held, idx, during)
    return by_kind, held


def _cumulative(starts, ends, edges):
    """Busy time up to each edge, for non-overlapping intervals in order."""
    d = ends - starts
    done = np.concatenate([[0.0], np.cumsum(d)])
    i = np.searchsorted(ends, edges, side="right")  # intervals that ended by the edge
    partial = np.zeros_like(edges)
    inside = i < len(starts)
    j = i[inside]
    partial[inside] = np.clip(edges[inside] - starts[j], 0.0, d[j])
    return done[i] + partial


# ---- findings marked in either mode ----
def _mark_findings(scene: Scene, program: Program, report, timeline) -> None:
    if scene.mode == "aggregate":
        for k, m in enumerate(report.mismatches[:MAX_MARKED]):
            _explain(scene, "mismatch", k, f"crossed: rank {m.recv_rank} step {m.recv_step} {describe(m.recv)} "
                     f"receives {describe(m.send)} from rank {m.send_rank} step {m.send_step}")
        for k, pk in enumerate(report.memory_violations[:MAX_MARKED]):
            _explain(scene, "memory", k, _violation_note(pk, report))
        return
    by_pos = {(b.rank, b.step): b for b in scene.blocks}

    def centre(rank: int, step: int) -> float | None:
        b = by_pos.get((rank, step))
        return None if b is None else (b.x0 + b.x1) / 2

    numbered = sum(a.kind == "wait" for a in scene.arrows)
    for n, m in enumerate(report.mismatches[:MAX_MARKED], numbered + 1):
        note = (f"({n}) crossed pair: {describe(m.recv)} on rank {m.recv_rank}, step {m.recv_step} receives "
                f"{describe(m.send)} sent by rank {m.send_rank}, step {m.send_step} (on {m.send_rank}->{m.recv_rank} "
                "the k-th send meets the k-th receive)")
        for rank, step in ((m.send_rank, m.send_step), (m.recv_rank, m.recv_step)):
            b = by_pos.get((rank, step))
            if b is not None and b.mark in ("", "live"):
                b.mark, b.note = "crossed", note
        a, c = centre(m.send_rank, m.send_step), centre(m.recv_rank, m.recv_step)
        if a is not None and c is not None:
            scene.arrows.append(Arrow(m.send_rank, a, m.recv_rank, c, "cross", str(n), m.send_step, m.recv_step))
        _explain(scene, "mismatch", n - numbered - 1, note, str(n))
    for k, pk in enumerate(report.memory_violations[:MAX_MARKED]):
        step = by_pos.get((pk.rank, pk.step)) if program.level == report.program.level else None
        if step is None:  # (a compute-level job is drawn lowered: its steps are not the report's)
            continue
        limit = report.memory_limit[pk.rank] if pk.rank < len(report.memory_limit) else None
        scene.moments.append(Moment(pk.rank, step.x0, f"{_num(pk.memory)} > limit {_num(limit)}"))
        forwards = {(a.stage, a.microbatch): b for b in scene.blocks if b.rank == pk.rank
                    for a in program.ranks[b.rank][b.step].parts if a.op is Op.F}
        from ..verify.memory import live_activations
        for key in live_activations(program, pk.rank, pk.step):
            b = forwards.get(key)
            if b is not None and b.mark == "":
                b.mark, b.note = "live", f"live when rank {pk.rank} goes over its memory limit"
        _explain(scene, "memory", k, _violation_note(pk, report))


def _violation_note(pk, report) -> str:
    limit = report.memory_limit[pk.rank] if pk.rank < len(report.memory_limit) else None
    at = f" ({describe(pk.action)})" if pk.action is not None else ""
    return (f"memory: rank {pk.rank} at step {pk.step}{at} holds {_num(pk.memory)}, over its limit of "
            f"{_num(limit)}; live: " + "; ".join(pk.live))


def _summary(program: Program, report, timeline) -> list[RankSummary]:
    out = []
    peaks = timeline.peak_memory if timeline is not None else None  # a property: compute it once
    idle = timeline.idle if timeline is not None else None
    checked_peaks = report.peak_sizes
    actions = _actions_per_rank(program)
    for r, length in enumerate(_lengths(program)):
        checked = checked_peaks[r] if r < len(checked_peaks) else (
            report.peak_activation[r] if r < len(report.peak_activation) else None)
        limit = report.memory_limit[r] if r < len(report.memory_limit) else None
        out.append(RankSummary(
            r, length, actions[r],
            timeline.busy[r] if timeline is not None else None,
            idle[r] if idle is not None else None,
            peaks[r] if peaks is not None else None, checked, limit))
    return out


def _actions_per_rank(program: Program) -> list[int]:
    """Each rank's number of actions (a compound's parts each one; from the columns when the program
    holds its steps so, else once per list: a job's replicas share theirs)."""
    held = columns_of(program)
    if held is None:
        counted: dict[int, int] = {}
        return [_actions(steps, counted) for steps in program.ranks]
    steps = np.diff(held.starts)
    if held.compounds:  # (each compound's parts but one more)
        parts = held.parts
        np.add.at(steps, np.searchsorted(held.starts, parts.step, side="right") - 1, parts.sizes - 1)
    return steps.tolist()


def _actions(steps, counted: dict[int, int]) -> int:
    """The actions of one rank's steps (a compound's parts each), counted once per list."""
    n = counted.get(id(steps))
    if n is None:
        n = counted[id(steps)] = sum(len(st.parts) for st in steps)
    return n


def _num(x) -> str:
    if x is None:
        return "none"
    x = float(x)
    return str(int(x)) if x.is_integer() else f"{x:.4g}"
