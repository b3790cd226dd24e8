"""Fast structural checks of a Program, each finding located (file:line:col, rank and step).

Indices in range; every action on the rank its stage is placed on; exactly one F and one B or
one I + one W per (stage, microbatch), duplicates reported, not merged; F before B/I and I before
W on a rank; for explicit communication, a receive before every consumer of a remote value and a
send after every producer of one. Deadlock and memory are checked elsewhere (schedc/verify/).
"""
from __future__ import annotations

from collections import defaultdict

from .deps import consumer_stage, delivers, message, needs, payload, peer_stage, produces, value_name
from .errors import Diagnostic
from .ir import COMPUTE, SENDS, Action, Op, Program, describe

MAX_PER_CODE = 20
MAX_PAIRS = 10_000_000  # (stage, microbatch) pairs a program can have and still fit the action limit


class Findings:
    """Collects diagnostics, keeping at most MAX_PER_CODE of each code (and counting the rest)."""

    def __init__(self):
        self.items: list[Diagnostic] = []
        self.dropped: dict[str, int] = defaultdict(int)
        self._count: dict[str, int] = defaultdict(int)

    def add(self, code: str, message: str, rank: int, step: int, action: Action | None = None,
            notes=()) -> None:
        self._count[code] += 1
        if self._count[code] > MAX_PER_CODE:
            self.dropped[code] += 1
            return
        span = action.span if action is not None else None
        step = display_step(action, step)
        self.items.append(Diagnostic(code, f"rank {rank}, step {step}: {message}", span,
                                     tuple(notes), rank=rank, step=step))

    def codes(self) -> set[str]:
        return set(self._count)

    def result(self) -> list[Diagnostic]:
        extra = [Diagnostic(code, f"... and {n} more '{code}' finding(s)") for code, n in self.dropped.items()]
        return self.items + extra


def display_step(action: Action | None, step: int) -> int:
    """The step a user sees: a CSV cell's column (idle cells count, as in torch), else the index."""
    if action is not None and action.span is not None and action.span.step is not None:
        return action.span.step
    return step


def lint(program: Program) -> list[Diagnostic]:
    """All structural findings of a program (empty when it is well formed)."""
    out = Findings()
    pairs = program.num_stages * program.num_microbatches
    if pairs > MAX_PAIRS:
        out.add("too-large", f"{program.num_stages:,} stages x {program.num_microbatches:,} microbatches is "
                f"{pairs:,} (stage, microbatch) pairs, more than {MAX_PAIRS:,}; the schedule cannot be complete "
                f"with {program.num_actions:,} actions", 0, 0, None)
        return out.result()
    _indices(program, out)
    if out.codes():
        return out.result()  # the checks below assume valid indices
    _counts(program, out)
    _order(program, out)
    if program.level == "comms":
        _communication(program, out)
    return out.result()


def _where(action: Action) -> str:
    return "" if action.span is None else f" (written at {action.span.file}:{action.span.line})"


def _indices(p: Program, out: Findings) -> None:
    S, M, placement = p.num_stages, p.num_microbatches, p.placement
    for rank, step, a in _bad_candidates(p):
        if not 0 <= a.stage < S:
            out.add("bad-index", f"{describe(a)}: stage {a.stage} is out of range 0..{S - 1}", rank, step, a)
            continue
        if a.microbatch is not None and not 0 <= a.microbatch < M:
            out.add("bad-index", f"{describe(a)}: microbatch {a.microbatch} is out of range 0..{M - 1}",
                    rank, step, a)
            continue
        home = placement[a.stage]
        if home != rank:
            out.add("wrong-rank", f"{describe(a)} runs on rank {rank}, but stage {a.stage} is placed "
                    f"on rank {home}", rank, step, a)
            continue
        if a.op.is_comm:
            peer = peer_stage(a)
            if not 0 <= peer < S:
                out.add("bad-comm", f"{describe(a)}: stage {a.stage} has no stage {peer} to talk to",
                        rank, step, a)
            elif placement[peer] == rank:
                out.add("bad-comm", f"{describe(a)}: stages {a.stage} and {peer} are both on rank "
                        f"{rank}; a rank does not message itself", rank, step, a)


def _bad_candidates(p: Program):
    """The actions that might fail an index or placement check (a fast scan; most programs: none)."""
    S, M, placement = p.num_stages, p.num_microbatches, p.placement
    for rank, steps in enumerate(p.ranks):
        for step, st in enumerate(steps):
            for a in st.parts:
                s, m = a.stage, a.microbatch
                if not (0 <= s < S and (m is None or 0 <= m < M) and placement[s] == rank) or a.op.is_comm:
                    yield rank, step, a


def _counts(p: Program, out: Findings) -> None:
    first: dict[tuple[Op, int, int], tuple[int, int, Action]] = {}
    compute = COMPUTE
    for rank, steps in enumerate(p.ranks):
        for step, st in enumerate(steps):
            for a in st.parts:
                if a.op in compute:
                    key = (a.op, a.stage, a.microbatch)
                    if key in first:
                        r0, s0, a0 = first[key]
                        out.add("duplicate", f"{describe(a)} appears again (first at rank {r0}, step "
                                f"{display_step(a0, s0)}{_where(a0)})", rank, step, a)
                    else:
                        first[key] = (rank, step, a)
    has = {op: set() for op in (Op.F, Op.B, Op.I, Op.W)}
    for op, s, m in first:
        has[op].add((s, m))
    F, B, I, W = has[Op.F], has[Op.B], has[Op.I], has[Op.W]
    legacy_pairs = (B & W) - I
    if legacy_pairs and not I:
        s, m = min(legacy_pairs)
        rank, step, a = first[(Op.B, s, m)]
        out.add("legacy-notation", f"B({s},{m}) and W({s},{m}) both appear ({len(legacy_pairs)} such pairs) and "
                "no I does: this reads as PyTorch's older notation, where B meant backward-input (today's I)",
                rank, step, a, notes=["read the file with --notation legacy (B -> I, BW -> B) if it came "
                                      "from an older PyTorch"])
    else:
        legacy_pairs = set()
    total = p.num_stages * p.num_microbatches
    suspects = (B & (I | W)) | (I ^ W)
    if len(F) < total or len(B | I | W) < total:  # something is missing: look at every pair
        suspects |= {(s, m) for s in range(p.num_stages) for m in range(p.num_microbatches)
                     if (s, m) not in F or ((s, m) not in B and (s, m) not in I and (s, m) not in W)}
    for s, m in sorted(suspects - legacy_pairs):
        found = next((first[(op, s, m)] for op in (Op.F, Op.B, Op.I, Op.W) if (op, s, m) in first), None)
        home = p.placement[s]
        rank, step, a = found if found else (home, len(p.ranks[home]), None)
        sm = (s, m)
        if sm not in F:
            out.add("missing", f"F({s},{m}) is missing: every stage runs one forward per microbatch",
                    rank, step, a)
        if sm in B and (sm in I or sm in W):
            out.add("mixed-backward", f"stage {s}, microbatch {m} has both B and I/W; use one B or "
                    "one I and one W", rank, step, a)
        elif sm not in B and sm not in I and sm not in W:
            out.add("missing", f"the backward of stage {s}, microbatch {m} is missing (no B({s},{m}), "
                    f"and no I({s},{m}) + W({s},{m}))", rank, step, a)
        elif (sm in I) != (sm in W):
            there, missing = ("I", "W") if sm in I else ("W", "I")
            out.add("missing", f"{missing}({s},{m}) is missing: {there}({s},{m}) needs its partner",
                    rank, step, a)


def _order(p: Program, out: Findings) -> None:
    for rank, steps in enumerate(p.ranks):
        done: dict[tuple[Op, int, int], int] = {}
        later: dict[tuple[Op, int, int], int] = {}
        for step, st in enumerate(steps):
            for a in st.parts:
                if a.op.is_compute:
                    later.setdefault((a.op, a.stage, a.microbatch), display_step(a, step))
        for step, st in enumerate(steps):
            for a in st.parts:
                if a.op in (Op.B, Op.I):
                    key = (Op.F, a.stage, a.microbatch)
                    if key not in done:
                        at = later.get(key)
                        when = f"F({a.stage},{a.microbatch}) comes later, at step {at}" if at is not None \
                            else f"F({a.stage},{a.microbatch}) never runs on this rank"
                        out.add("order", f"{describe(a)} runs before its forward: {when}", rank, step, a)
                if a.op is Op.W:
                    key = (Op.I, a.stage, a.microbatch)
                    if key not in done and (Op.I, a.stage, a.microbatch) in later:
                        out.add("order", f"{describe(a)} runs before I({a.stage},{a.microbatch}) "
                                f"(at step {later[key]}): W needs I's result", rank, step, a)
            for a in st.parts:
                if a.op.is_compute:
                    done[(a.op, a.stage, a.microbatch)] = step


def _communication(p: Program, out: Findings) -> None:
    """With explicit communication, every remote value must be received before it is used."""
    S, placement = p.num_stages, p.placement
    sends = SENDS
    for rank, steps in enumerate(p.ranks):
        arriving: dict = {}
        for step, st in enumerate(steps):
            for a in st.parts:
                v = delivers(a) or produces(a)
                if v is not None and v not in arriving:
                    arriving[v] = display_step(a, step)
        available: set = set()
        seen_comm: set = set()
        owed: dict = {}
        for step, st in enumerate(steps):
            parts = st.parts
            for a in parts:
                for v in needs(a, S):
                    if v not in available:
                        _unavailable(p, out, rank, step, a, v, arriving.get(v))
                if a.op.is_comm:
                    key = (a.op, a.stage, a.microbatch)
                    if key in seen_comm:
                        out.add("duplicate", f"{describe(a)} appears twice on rank {rank}", rank, step, a)
                    seen_comm.add(key)
                    if a.op in sends:
                        owed.pop(payload(a), None)
            for a in parts:
                v = delivers(a) or produces(a)
                if v is not None:
                    available.add(v)
                    dest = consumer_stage(a, S) if a.op.is_compute else None
                    if dest is not None and placement[dest] != rank:
                        owed[v] = (step, a)
        for v, (step, a) in owed.items():
            send = message(a, placement, S)[0]
            out.add("missing-send", f"{describe(a)} computes {value_name(v)} for rank "
                    f"{placement[peer_stage(send)]}, but rank {rank} never sends it afterwards (no "
                    f"{describe(send)})", rank, step, a)


def _unavailable(p: Program, out: Findings, rank: int, step: int, a: Action, v, at) -> None:
    if a.op.is_comm:
        out.add("order", f"{describe(a)} sends {value_name(v)} before it is computed"
                + (f" (step {at})" if at is not None else ""), rank, step, a)
    elif at is not None:
        out.add("order", f"{describe(a)} needs {value_name(v)}, which arrives only later on this rank "
                f"(step {at})", rank, step, a)
    else:
        recv = "RECV_F" if v[0] == "act" else "RECV_B"
        out.add("missing-recv", f"{describe(a)} needs {value_name(v)} from rank {p.placement[v[1]]}, but "
                f"rank {rank} never receives it (no {recv}({a.stage},{a.microbatch}))", rank, step, a)
