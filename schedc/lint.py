"""Fast structural checks of a Program, each finding located (file:line:col, rank and step).

Indices in range; every action on the rank its stage is placed on; exactly one F and one B or
one I + one W per (stage, microbatch) (a forward-only program: one F and no backward), duplicates
reported, not merged; every value an action needs
made on its rank before it, by the one rule of schedc/rules/deps.py at both levels (F before B/I, I before
W, F(s-1,m) before F(s,m) when both stages share a rank); for explicit communication, a receive
before every consumer of a remote value and a send after every producer of one; a reduction of a
stage's gradients after every backward that adds to them (deps.py's `reduces`). Deadlock and
memory are checked elsewhere (schedc/verify/).
"""
from __future__ import annotations

from collections import defaultdict

from .errors import Diagnostic
from .ir import COMPUTE, SENDS, WAITS, Action, Op, Program, describe
from .rules.reductions import ONCE, order_breaks
from .rules.deps import (ADDS_GRADIENT, RECEIVES, REDUCTIONS, bounds, consumer_stage, delivers, message, needs,
                         Routes, payload, peer_stage, produces, reduces, route_problems, stages_of, taker, takers, value_name, visited,
                         visits)

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

    def count_dropped(self, code: str, n: int) -> None:
        """Count `n` more findings of `code` that are not listed (beyond the MAX_PER_CODE that are)."""
        if n > 0:
            self._count[code] += n
            self.dropped[code] += n

    def codes(self) -> set[str]:
        return set(self._count)

    def result(self) -> list[Diagnostic]:
        extra = [Diagnostic(code, f"... and {n} more '{code}' finding(s)", omitted=n)
                 for code, n in self.dropped.items()]
        return self.items + extra


def display_step(action: Action | None, step: int) -> int:
    """The step a user sees: a CSV cell's column (idle cells count, as in torch), else the index."""
    if action is not None and action.span is not None and action.span.step is not None:
        return action.span.step
    return step


def shown_step(program: Program, rank: int, index: int) -> int:
    """`display_step` of a rank's step given by its index; its list's length (a rank at the end of the
    step, waiting for its sends) is the step after its last."""
    steps = program.ranks[rank]
    if 0 <= index < len(steps):
        return display_step(steps[index].parts[0], index)
    return index if not steps or index < 0 else shown_step(program, rank, len(steps) - 1) + 1 + index - len(steps)


def lint(program: Program) -> list[Diagnostic]:
    """All structural findings of a program (empty when it is well formed)."""
    out = Findings()
    pairs = program.num_stages * program.num_microbatches
    if pairs > MAX_PAIRS:
        out.add("too-large", f"{program.num_stages:,} stages x {program.num_microbatches:,} microbatches is "
                f"{pairs:,} (stage, microbatch) pairs, more than {MAX_PAIRS:,}; the schedule cannot be complete "
                f"with {program.num_actions:,} actions", 0, 0, None)
        return out.result()
    if program.routes:
        for k, why in route_problems(program.num_stages, program.num_microbatches, program.routes):
            out.add("route", f"{program.routes[k]}: {why}", 0, 0, None)
        if out.codes():
            return out.result()  # the checks below read the routes
    _indices(program, out)
    if out.codes():
        return out.result()  # the checks below assume valid indices
    _counts(program, out)
    _inputs(program, out)
    _waits(program, out)
    _reductions(program, out)
    if program.level == "comms":
        _communication(program, out)
    return out.result()


def _where(action: Action) -> str:
    return "" if action.span is None else f" (written at {action.span.file}:{action.span.line})"


def _indices(p: Program, out: Findings) -> None:  # noqa: C901
    S, M, placement = p.num_stages, p.num_microbatches, p.placement
    stages = stages_of(p)
    for rank, step, a in _bad_candidates(p):
        if not 0 <= a.stage < S:
            out.add("bad-index", f"{describe(a)}: stage {a.stage} is out of range 0..{S - 1}", rank, step, a)
            continue
        if a.microbatch is not None and not 0 <= a.microbatch < M:
            out.add("bad-index", f"{describe(a)}: microbatch {a.microbatch} is out of range 0..{M - 1}",
                    rank, step, a)
            continue
        if a.microbatch is not None and p.routes and not visits(stages, a.stage, a.microbatch):
            out.add("off-route", f"{describe(a)}: microbatch {a.microbatch} does not run through stage {a.stage} "
                    f"(its route: {_route_of(p, a.microbatch)})", rank, step, a)
            continue
        if a.op is Op.REDUCE_TIED and p.routes:
            out.add("bad-index", f"{describe(a)}: a schedule with routes runs copies of the model's first and "
                    "last stage, and the tied all-reduce joins one of each; it is not supported with routes",
                    rank, step, a)
            continue
        if a.op is Op.REDUCE_TIED and a.stage not in (0, S - 1):
            out.add("bad-index", f"{describe(a)}: the tied all-reduce joins the first and the last stage "
                    f"(0 and {S - 1}); stage {a.stage} is neither", rank, step, a)
            continue
        home = placement[a.stage]
        if home != rank:
            out.add("wrong-rank", f"{describe(a)} runs on rank {rank}, but stage {a.stage} is placed "
                    f"on rank {home}", rank, step, a)
            continue
        if a.op.is_comm:
            peer = peer_stage(a)
            assert peer is not None, a  # (a send or receive has a peer stage)
            lo, hi = bounds(stages, a.stage)
            if not lo <= peer < hi:
                on = f" on its route (stages {lo} .. {hi - 1})" if p.routes else ""
                out.add("bad-comm", f"{describe(a)}: stage {a.stage} has no stage {peer} to talk to{on}",
                        rank, step, a)
            elif placement[peer] == rank:
                out.add("bad-comm", f"{describe(a)}: stages {a.stage} and {peer} are both on rank "
                        f"{rank}; a rank does not message itself", rank, step, a)


def _route_of(p: Program, m: int) -> str:
    """Microbatch m's route, in words."""
    stages = stages_of(p)
    r = stages.route(m) if isinstance(stages, Routes) else None
    return f"stages {r.stages[0]} .. {r.stages[1] - 1}" if r is not None else "none"


def _bad_candidates(p: Program):
    """The actions that might fail an index or placement check (a fast scan; most programs: none;
    with routes, every action: its microbatch's route is asked of each)."""
    S, M, placement = p.num_stages, p.num_microbatches, p.placement
    if p.routes:
        yield from ((rank, step, a) for rank, step, a in p.actions())
        return
    for rank, steps in enumerate(p.ranks):
        for step, st in enumerate(steps):
            for a in st.parts:
                s, m = a.stage, a.microbatch
                if not (0 <= s < S and (m is None or 0 <= m < M) and placement[s] == rank) or a.op.is_comm \
                        or a.op is Op.REDUCE_TIED:
                    yield rank, step, a


def _counts(p: Program, out: Findings) -> None:
    first: dict[tuple[Op, int, int | None], tuple[int, int, Action]] = {}
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
    has: dict[Op, set[tuple[int, int | None]]] = {op: set() for op in (Op.F, Op.B, Op.I, Op.W)}
    for op, s, m in first:
        has[op].add((s, m))
    if p.forward_only:
        _forward_only(p, out, first, has)
        return
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
    backward = B | I | W
    incomplete = _incomplete_pairs(p, F, backward)
    suspects = (B & (I | W)) | (I ^ W) | set(incomplete)
    _pair_findings(p, out, first, sorted(suspects - legacy_pairs), has)
    # pairs past the first MAX_PER_CODE incomplete ones are counted, not listed: their number is
    # arithmetic, so a CSV whose one action names microbatch 999,999 costs what its actions do
    listed = sum((sm not in F) + (sm not in backward) for sm in incomplete)
    out.count_dropped("missing", _missing_count(p, F, backward) - listed)


def _forward_only(p: Program, out: Findings, first: dict, has: dict) -> None:
    """A forward-only program: one F per (stage, microbatch), and no backward at all."""
    for (op, s, m), (rank, step, a) in first.items():
        if op is not Op.F:
            out.add("forward-only", f"{describe(a)} in a forward-only schedule: it runs forwards alone, "
                    "with no backward", rank, step, a)
    F, stages = has[Op.F], stages_of(p)
    missing = visited(stages, p.num_microbatches) - len(F)
    listed = 0
    for s in range(p.num_stages):
        if listed == MAX_PER_CODE or not missing:
            break
        for m in range(p.num_microbatches):
            if (s, m) not in F and visits(stages, s, m):
                home = p.placement[s]
                out.add("missing", f"F({s},{m}) is missing: every stage runs one forward per microbatch",
                        home, len(p.ranks[home]), None)
                listed += 1
                if listed == MAX_PER_CODE:
                    break
    out.count_dropped("missing", missing - listed)


def _pair_findings(p: Program, out: Findings, first: dict, pairs, has: dict) -> None:
    """`missing` and `mixed-backward` findings of the given (stage, microbatch) pairs, each at the
    action it is about (`_at`): the backward whose forward is missing, the forward whose backward is,
    the I whose W is (and the W whose I is), the second backward form of a mixed pair."""
    F, B, I, W = has[Op.F], has[Op.B], has[Op.I], has[Op.W]
    for s, m in pairs:
        sm = (s, m)
        if sm not in F:
            out.add("missing", f"F({s},{m}) is missing: every stage runs one forward per microbatch",
                    *_at(p, first, sm, (Op.B, Op.I, Op.W)))
        if sm in B and (sm in I or sm in W):
            out.add("mixed-backward", f"stage {s}, microbatch {m} has both B and I/W; use one B or "
                    "one I and one W", *_second_form(first, sm))
        elif sm not in B and sm not in I and sm not in W:
            hint = () if B or I or W else ("no action is a backward: if the schedule runs forwards alone "
                                           "(inference), declare it with a `forward only` line, or "
                                           "--forward-only for a CSV",)
            out.add("missing", f"the backward of stage {s}, microbatch {m} is missing (no B({s},{m}), "
                    f"and no I({s},{m}) + W({s},{m}))", *_at(p, first, sm, (Op.F,)), notes=hint)
        elif (sm in I) != (sm in W):
            there, missing = ("I", "W") if sm in I else ("W", "I")
            out.add("missing", f"{missing}({s},{m}) is missing: {there}({s},{m}) needs its partner",
                    *_at(p, first, sm, (Op[there],)))


def _at(p: Program, first: dict, sm: tuple[int, int], ops: tuple[Op, ...]) -> tuple[int, int, Action | None]:
    """(rank, step, action) of the first of `ops` (in that order) the pair `sm` has, else the end of
    its stage's rank (no action to point at)."""
    s, m = sm
    found = next((first[(op, s, m)] for op in ops if (op, s, m) in first), None)
    home = p.placement[s]
    return found if found else (home, len(p.ranks[home]), None)


def _second_form(first: dict, sm: tuple[int, int]) -> tuple:
    """Of a pair with both a B and an I or W: the first action of the backward form listed second
    (the B, or the first of the I and W), which is the one that mixes them."""
    s, m = sm
    b = first[(Op.B, s, m)]
    split = min((first[(op, s, m)] for op in (Op.I, Op.W) if (op, s, m) in first), key=_position)
    return max(b, split, key=_position)


def _position(found: tuple) -> tuple[int, int]:
    """Where an action found at (rank, step, action) is listed, to order two of one stage."""
    rank, step, _ = found
    return rank, step


def _incomplete_pairs(p: Program, F: set, backward: set) -> list[tuple[int, int]]:
    """The first MAX_PER_CODE (stage, microbatch) pairs, in order, without an F or any backward;
    the scan stops there, so it looks at no more pairs than the program has actions plus that."""
    found: list[tuple[int, int]] = []
    if _missing_count(p, F, backward) == 0:
        return found
    stages = stages_of(p)
    for s in range(p.num_stages):
        for m in range(p.num_microbatches):
            if ((s, m) not in F or (s, m) not in backward) and visits(stages, s, m):
                found.append((s, m))
                if len(found) == MAX_PER_CODE:
                    return found
    return found


def _missing_count(p: Program, F: set, backward: set) -> int:
    """How many `missing` findings of a forward or of any backward the program has (F and
    `backward` hold only valid pairs: indices were checked first)."""
    total = visited(stages_of(p), p.num_microbatches)
    return (total - len(F)) + (total - len(backward))


def _inputs(p: Program, out: Findings) -> None:  # noqa: C901
    """Every value an action needs (schedc/rules/deps.py) that its own rank makes or receives must be there
    before it: listed later, it is an `order` error, at the compute level as at the comms level.

    A value its rank never makes is an `order` error too (torch's validator says the same). A value
    made on another rank is the deadlock check's question at the compute level; at the comms level it
    needs a receive on this rank (`missing-recv`).
    """
    S, placement, comms = stages_of(p), p.placement, p.level == "comms"
    for rank, steps in enumerate(p.ranks):
        arriving = _arrivals(steps)
        available: set = set()
        for step, st in enumerate(steps):
            for a in st.parts:
                for v in needs(a, S):
                    if v in available:
                        continue
                    if v in arriving:
                        _too_late(out, rank, step, a, v, *arriving[v])
                    elif placement[v[1]] == rank:
                        out.add("order", f"{describe(a)} needs {value_name(v)}, which is never made on this "
                                "rank", rank, step, a)
                    elif comms:
                        _never_received(p, out, rank, step, a, v)
            for a in st.parts:
                made = delivers(a) or produces(a)
                if made is not None:
                    available.add(made)


def _waits(p: Program, out: Findings) -> None:
    """An explicit wait (WAIT_RECV_F(s, m), ...) waits once for that send or receive, posted earlier
    on its own rank; a wait for a receive comes before the action that takes the received value
    (which waits for the receive itself: after it, the runtime has nothing left to wait for)."""
    users = takers(p)
    for rank, steps in enumerate(p.ranks):
        posted = _first_posts(steps)
        waited: set = set()
        for step, st in enumerate(steps):
            for a in st.parts:
                target = WAITS.get(a.op)
                if target is None:
                    continue
                what = describe(Action(target, a.stage, a.microbatch))
                key = (target, a.stage, a.microbatch)
                at = posted.get(key)
                if at is None:
                    out.add("missing", f"{describe(a)} waits for {what}, which rank {rank} never posts", rank, step, a)
                elif at[0] >= step:
                    out.add("order", f"{describe(a)} waits for {what}, which comes "
                            f"{'in the same step' if at[0] == step else f'later, at step {display_step(at[1], at[0])}'}",
                            rank, step, a)
                elif key in waited:
                    out.add("duplicate", f"{describe(a)} appears twice on rank {rank}: {what} is waited for "
                            "already", rank, step, a)
                else:
                    waited.add(key)
                    brought = delivers(at[1])  # (None for a send: it brings nothing, and nothing takes it)
                    found = users.get((rank, brought)) if brought is not None else None
                    _wait_after_taker(out, p, rank, step, a, what, taker(found, at[0]))


def _first_posts(steps) -> dict:
    """(op, stage, microbatch) -> (step, action) of a rank's first send or receive of each."""
    posted: dict = {}
    for step, st in enumerate(steps):
        for a in st.parts:
            if a.op.is_comm:
                posted.setdefault((a.op, a.stage, a.microbatch), (step, a))
    return posted


def _wait_after_taker(out: Findings, p: Program, rank: int, step: int, a: Action, what: str, found) -> None:
    """A wait for a receive listed after the action that takes its value (`found`: its (step, part),
    deps.py's `taker`), which waited for the receive already."""
    if found is not None and found[0] < step:
        x, k = found
        b = p.ranks[rank][x].parts[k]
        out.add("order", f"{describe(a)} waits for {what}, whose value {describe(b)} takes earlier, at step "
                f"{display_step(b, x)}: {describe(b)} waited for the receive, so nothing is left to wait for "
                "(place the wait before it, or leave it out)", rank, step, a)


def _reductions(p: Program, out: Findings) -> None:
    """Every backward that adds to the gradients a reduction reads (B or W of its stages, on its
    rank) comes before it: one listed after it is a `reduce-early` finding at the reduction. A
    reduction runs once a step (`duplicate`) and only where there are backwards (`forward-only`)."""
    for rank, steps in enumerate(p.ranks):
        found: list[tuple[int, Action]] = []
        seen: set = set()
        backwards: dict[int, list[tuple[int, Action]]] = defaultdict(list)  # stage -> its B and W, in order
        for step, st in enumerate(steps):
            for a in st.parts:
                if a.op in ADDS_GRADIENT:
                    backwards[a.stage].append((step, a))
                elif a.op in REDUCTIONS:
                    if p.forward_only:
                        out.add("forward-only", f"{describe(a)} in a forward-only schedule: it runs no backward, "
                                "so there are no gradients to reduce", rank, step, a)
                    elif (a.op, a.stage) in seen and a.op in ONCE:
                        out.add("duplicate", f"{describe(a)} appears twice on rank {rank}: {_AGAIN[a.op]}",
                                rank, step, a)
                    else:
                        seen.add((a.op, a.stage))
                        found.append((step, a))
        for step, a in found:
            stages = reduces(a, p.placement)
            later = sorted(((x, b) for s in stages for x, b in backwards[s] if x > step), key=lambda e: e[0])
            if later:
                _reduce_early(out, rank, step, a, stages, later, sum(len(backwards[s]) for s in stages))


_AGAIN = {Op.REDUCE_GRAD: "a stage's gradients are reduced once a step (torch's runtime scales them by 1/M at "
                          "each REDUCE_GRAD; schedc's averages them once)",
          Op.REDUCE_TIED: "the tied weights' gradients are summed once a step (a second sum adds the other end's "
                          "gradient again)"}


def reduce_order(program: Program, replicas: int) -> list[Diagnostic]:
    """The `reduce-order` findings of one replica's pipeline (a well-formed one) in a job of
    `replicas` data-parallel replicas: copies of a weight averaged on different sides of their sum
    (rules/reductions.py). Told beside the job's other findings, as `collective-order` is: the
    structure holds, and a deadlock is still asked."""
    out = Findings()
    for rank, step, a, why in order_breaks(program.ranks, program.placement, stages_of(program), replicas):
        out.add("reduce-order", why, rank, step, a)
    return out.result()


def _reduce_early(out: Findings, rank: int, step: int, a: Action, stages, later, total: int) -> None:
    """`a` reduces the gradients of `stages` before the backwards `later` ((step, action)) add to them."""
    whose = " and ".join(f"stage {s}" for s in stages) + "'s"
    shown = [f"{describe(b)} comes after it, at step {display_step(b, x)}{_where(b)}" for x, b in later[:3]]
    if len(later) > 3:
        shown.append(f"and {len(later) - 3} more backward(s) of {whose[:-2]}")
    out.add("reduce-early", f"{describe(a)} reduces {whose} gradients before {len(later)} of the {total} "
            "backwards (B or W) that add to them: torch's runtime would reduce, and scale by 1/M, a partial "
            "sum", rank, step, a, notes=[*shown, "place it after the last of them (torch's lowering puts "
                                        "REDUCE_GRAD right after a stage's last backward)"])


def _arrivals(steps) -> dict:
    """Each value made or received on a rank -> (step, action) of its first maker or receive."""
    arriving: dict = {}
    for step, st in enumerate(steps):
        for a in st.parts:
            v = delivers(a) or produces(a)
            if v is not None and v not in arriving:
                arriving[v] = (step, a)
    return arriving


def _too_late(out: Findings, rank: int, step: int, a: Action, v, at: int, source: Action) -> None:
    """`a` needs `v`, which `source` makes or receives on this rank only at step `at` (one message
    for both levels: both actions and both steps)."""
    when = "runs in the same step" if at == step else f"comes later, at step {display_step(source, at)}"
    out.add("order", f"{describe(a)} needs {value_name(v)}, but {describe(source)} {when}", rank, step, a)


def _never_received(p: Program, out: Findings, rank: int, step: int, a: Action, v) -> None:
    """`a` needs `v` from another rank, and no receive on this rank brings it."""
    recv = RECEIVES[v[0]].value
    out.add("missing-recv", f"{describe(a)} needs {value_name(v)} from rank {p.placement[v[1]]}, but "
            f"rank {rank} never receives it (no {recv}({a.stage},{a.microbatch}))", rank, step, a)


def _communication(p: Program, out: Findings) -> None:  # noqa: C901
    """With explicit communication, no action is posted twice and every remote value is sent."""
    S, placement = stages_of(p), p.placement
    sends = SENDS
    for rank, steps in enumerate(p.ranks):
        seen_comm: set = set()
        owed: dict = {}
        for step, st in enumerate(steps):
            parts = st.parts
            for a in parts:
                if a.op.is_comm:
                    key = (a.op, a.stage, a.microbatch)
                    if key in seen_comm:
                        out.add("duplicate", f"{describe(a)} appears twice on rank {rank}", rank, step, a)
                    seen_comm.add(key)
                    if a.op in sends:
                        owed.pop(payload(a), None)
            for a in parts:
                v = produces(a)
                if v is not None:
                    dest = consumer_stage(a, S)
                    if dest is not None and placement[dest] != rank:
                        owed[v] = (step, a)
        for v, (step, a) in owed.items():
            pair = message(a, placement, S)
            assert pair is not None, a  # (owed: a value for a stage on another rank, a on its own: indices checked)
            send, recv = pair
            out.add("missing-send", f"{describe(a)} computes {value_name(v)} for rank "
                    f"{placement[recv.stage]}, but rank {rank} never sends it afterwards (no "
                    f"{describe(send)})", rank, step, a)
