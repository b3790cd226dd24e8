"""Fast structural checks of a Program, each finding located (file:line:col, rank and step).

Indices in range; every action on the rank its stage is placed on; exactly one F and one B or
one I + one W per (stage, microbatch), duplicates reported, not merged; F before B/I and I before
W on a rank; for explicit communication, a receive before every consumer of a remote value and a
send after every producer of one. Deadlock and memory are checked elsewhere (schedc/verify/).
"""
from __future__ import annotations

from collections import defaultdict

from .deps import delivers, message, needs, payload, peer_stage, produces, value_name
from .errors import Diagnostic
from .ir import Action, Op, Program, describe

MAX_PER_CODE = 20


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
    S, M = p.num_stages, p.num_microbatches
    for rank, step, a in p.actions():
        if not 0 <= a.stage < S:
            out.add("bad-index", f"{describe(a)}: stage {a.stage} is out of range 0..{S - 1}", rank, step, a)
            continue
        if a.microbatch is not None and not 0 <= a.microbatch < M:
            out.add("bad-index", f"{describe(a)}: microbatch {a.microbatch} is out of range 0..{M - 1}",
                    rank, step, a)
            continue
        home = p.placement[a.stage]
        if home != rank:
            out.add("wrong-rank", f"{describe(a)} runs on rank {rank}, but stage {a.stage} is placed "
                    f"on rank {home}", rank, step, a)
            continue
        if a.op.is_comm:
            peer = peer_stage(a)
            if not 0 <= peer < S:
                out.add("bad-comm", f"{describe(a)}: stage {a.stage} has no stage {peer} to talk to",
                        rank, step, a)
            elif p.placement[peer] == rank:
                out.add("bad-comm", f"{describe(a)}: stages {a.stage} and {peer} are both on rank "
                        f"{rank}; a rank does not message itself", rank, step, a)


def _counts(p: Program, out: Findings) -> None:
    seen: dict[tuple[Op, int, int], list[tuple[int, int, Action]]] = defaultdict(list)
    for rank, step, a in p.actions():
        if a.op.is_compute:
            seen[(a.op, a.stage, a.microbatch)].append((rank, step, a))
    for (op, s, m), where in seen.items():
        for rank, step, a in where[1:]:
            r0, s0, a0 = where[0]
            out.add("duplicate", f"{describe(a)} appears again (first at rank {r0}, step "
                    f"{display_step(a0, s0)}{_where(a0)})",
                    rank, step, a)
    legacy = [(s, m) for (op, s, m) in seen if op is Op.B and (Op.W, s, m) in seen and (Op.I, s, m) not in seen]
    if legacy and not any(op is Op.I for (op, _, _) in seen):
        s, m = legacy[0]
        rank, step, a = seen[(Op.B, s, m)][0]
        out.add("legacy-notation", f"B({s},{m}) and W({s},{m}) both appear ({len(legacy)} such pairs) and no I "
                "does: this reads as PyTorch's older notation, where B meant backward-input (today's I)",
                rank, step, a, notes=["read the file with --notation legacy (B -> I, BW -> B) if it came "
                                      "from an older PyTorch"])
        legacy_pairs = set(legacy)
    else:
        legacy_pairs = set()
    for s in range(p.num_stages):
        home = p.placement[s]
        for m in range(p.num_microbatches):
            has = {op: bool(seen.get((op, s, m))) for op in (Op.F, Op.B, Op.I, Op.W)}
            first = next((seen[(op, s, m)][0] for op in (Op.F, Op.B, Op.I, Op.W) if has[op]), None)
            rank, step, a = first if first else (home, len(p.ranks[home]), None)
            if not has[Op.F]:
                out.add("missing", f"F({s},{m}) is missing: every stage runs one forward per microbatch",
                        rank, step, a)
            if (s, m) in legacy_pairs:
                pass
            elif has[Op.B] and (has[Op.I] or has[Op.W]):
                out.add("mixed-backward", f"stage {s}, microbatch {m} has both B and I/W; use one B or "
                        "one I and one W", rank, step, a)
            elif not has[Op.B] and not has[Op.I] and not has[Op.W]:
                out.add("missing", f"the backward of stage {s}, microbatch {m} is missing (no B({s},{m}), "
                        f"and no I({s},{m}) + W({s},{m}))", rank, step, a)
            elif has[Op.I] != has[Op.W]:
                there, missing = ("I", "W") if has[Op.I] else ("W", "I")
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
    for rank, steps in enumerate(p.ranks):
        available: set = set()
        arriving: dict = {}
        sends: dict = defaultdict(int)
        recvs: dict = defaultdict(int)
        for step, st in enumerate(steps):
            for a in st.parts:
                v = delivers(a) or produces(a)
                if v is not None:
                    arriving.setdefault(v, display_step(a, step))
        owed: dict = {}
        for step, st in enumerate(steps):
            for a in st.parts:
                for v in needs(a, p.num_stages):
                    if v in available:
                        continue
                    at = arriving.get(v)
                    if a.op.is_comm:
                        out.add("order", f"{describe(a)} sends {value_name(v)} before it is computed"
                                + (f" (step {at})" if at is not None else ""), rank, step, a)
                    elif at is not None:
                        out.add("order", f"{describe(a)} needs {value_name(v)}, which arrives only "
                                f"later on this rank (step {at})", rank, step, a)
                    else:
                        src = v[1]
                        recv = "RECV_F" if v[0] == "act" else "RECV_B"
                        out.add("missing-recv", f"{describe(a)} needs {value_name(v)} from rank "
                                f"{p.placement[src]}, but rank {rank} never receives it (no "
                                f"{recv}({a.stage},{a.microbatch}))", rank, step, a)
                if a.op.is_comm:
                    key = (a.op, a.stage, a.microbatch)
                    counter = sends if a.op in (Op.SEND_F, Op.SEND_B) else recvs
                    counter[key] += 1
                    if counter[key] == 2:
                        out.add("duplicate", f"{describe(a)} appears twice on rank {rank}", rank, step, a)
                    if counter is sends:
                        owed.pop(payload(a), None)
            for a in st.parts:
                v = delivers(a) or produces(a)
                if v is not None:
                    available.add(v)
                if a.op.is_compute and message(a, p.placement, p.num_stages) is not None:
                    owed[produces(a)] = (step, a)
        for v, (step, a) in owed.items():
            send = message(a, p.placement, p.num_stages)[0]
            out.add("missing-send", f"{describe(a)} computes {value_name(v)} for rank "
                    f"{p.placement[peer_stage(send)]}, but rank {rank} never sends it afterwards (no "
                    f"{describe(send)})", rank, step, a)
