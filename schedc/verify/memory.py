"""Memory per rank in DESIGN.md's unit model: activations, receive buffers, eager send buffers.

Activations along each rank's order: F(s,m) allocates a_s; B frees a_s; I frees a_s - w_s; W frees
w_s (defaults: a_s = ir.default_share, w = a). A receive holds its message (the sender stage's `out`
size) from the moment it is posted until the action that consumes it. Under eager or bounded sends a
sent message stays until its receive is posted, which depends on timing: the worst case at each step counts every
earlier send whose receive need not have been posted yet, i.e. does not happen-before that step
(exact, from the happens-before graph of schedc/verify/graph.py). Under a backend a sent message
stays until its send is waited for, as torch's runtime holds the tensor: at its WAIT_SEND, else to
the end of the step. Inside a step, allocations come
before frees.

A compute-level program is counted as schedc lowers and runs it (DESIGN.md, "Memory at the compute
level"): on its lowering (schedc/passes), receive buffers included, each moment told at a step of
the user's program. `_Live` is the one accounting; `peak_memory` (the worst run, for `check`) and
`step_memory` (each step of a run, for the simulator's timed run) both read it. `op_delta` and
`peak_activations` give the same rule in sizes a caller chooses (`order greedy`'s cap, synth's
integer units, prove's whole units of `whole_deltas`), so no other module restates it.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict, deque
from dataclasses import dataclass
from fractions import Fraction
from math import gcd, lcm

from ..deps import delivers, needs, value_name
from ..ir import COMM, COMPUTE, RECVS, SENDS, WAITS, Action, Op, Program, describe
from .channels import Channels, Semantics, channels
from .graph import constraints

# the stage whose output a message carries, relative to the stage that names the send or receive
_SOURCE = {Op.SEND_F: 0, Op.RECV_F: -1, Op.SEND_B: -1, Op.RECV_B: 0}


def op_delta(op: Op, act: float, weight: float) -> float:
    """The activation an action allocates (> 0) or frees (< 0) when its stage's sizes are `act` (a)
    and `weight` (w): F allocates a; B frees a; I frees a - w; W frees w; other ops hold nothing."""
    if op is Op.F:
        return act
    if op is Op.B:
        return -act
    if op is Op.I:
        return weight - act
    return -weight if op is Op.W else 0.0


def whole_deltas(ops, act, weight) -> tuple[Fraction, dict[Op, int]]:
    """`op_delta` of each of `ops` (the compute ops a schedule runs) in the largest size in which
    all of them are whole numbers, for a stage of exact sizes `act` and `weight` (ints or
    Fractions): (that size, {op: its delta in it}). With `weight = act` that size is `act`: F adds
    one, B and W free one, I nothing (what prove counts and calls live activations)."""
    exact = {op: Fraction(op_delta(op, Fraction(act), Fraction(weight))) for op in ops}
    moved = [abs(d) for d in exact.values() if d]
    if not moved:
        return Fraction(1), {op: 0 for op in exact}
    scale = lcm(*(d.denominator for d in moved))
    unit = Fraction(gcd(*(int(d * scale) for d in moved)), scale)
    return unit, {op: int(d / unit) for op, d in exact.items()}


def activation_delta(program: Program, op: Op, stage: int) -> float:
    """`op_delta` in the program's sizes of that stage."""
    mem = program.annotations.memory_of(stage)
    return op_delta(op, mem.act, mem.weight)


def activation_deltas(program: Program) -> dict[Op, list[float]]:
    """`activation_delta` of every compute op on every stage: {op: [delta of stage 0, ...]}."""
    return _deltas(*stage_sizes(program)[:2])


def activation_delta_table(program: Program):
    """`activation_delta` as a numpy array by op code (schedc/columns.py's) and stage: 0 for an
    op that holds nothing. (The array paths look each step's delta up in it.)"""
    from ..columns import CODE, OPS  # (numpy: imported when asked)
    import numpy as np
    table = np.zeros((len(OPS), program.num_stages))
    for op, row in activation_deltas(program).items():
        table[CODE[op]] = row
    return table


def _deltas(act, weight) -> dict[Op, list[float]]:
    """`op_delta` of every compute op on every stage, given the stages' sizes."""
    return {op: [op_delta(op, a, w) for a, w in zip(act, weight)] for op in (Op.F, Op.B, Op.I, Op.W)}


def stage_sizes(program: Program) -> tuple[list[float], list[float], list[float]]:
    """(act, weight, out) of every stage, from the program's annotations."""
    mems = [program.annotations.memory_of(s) for s in range(program.num_stages)]
    return [m.act for m in mems], [m.weight for m in mems], [m.out for m in mems]


def message_size(program: Program, a: Action) -> float:
    """Bytes (units) a send or receive carries: the output of the stage the activation leaves."""
    return program.annotations.memory_of(a.stage + _SOURCE[a.op]).out


class _PerStage(dict):
    """stage -> a size, computed on first use: a rank's walk touches only its own stages, so building
    the tables costs nothing per stage of the program (a walk per rank stays linear in the actions).
    Indexed as the list of every stage's value would be (negative and out-of-range stages alike)."""

    __slots__ = ("of",)

    def __init__(self, of):
        super().__init__()
        self.of = of

    def __missing__(self, s):
        v = self[s] = self.of(s)
        return v


def _empty(_size) -> int:
    """An empty message (its stage's size looked up first, so a stage out of range fails as a list would)."""
    return 0


class _Sizes:
    """Per-stage sizes, looked up once: each message's (`out`), and what each compute op allocates
    (`grows[op][s]`, F) or frees (`frees[op][s]`, B, I, W; in a forward-only program, F frees what
    it allocated as its step ends: nothing is kept for a backward). `_Sizes.of(program)`: the program's.
    `out` None: every message is empty (an activations-only walk)."""

    def __init__(self, act, weight, out=None, forward_only: bool = False):
        self.out = list(out) if out is not None else _PerStage(lambda s: _empty(act[s]))
        self.stages = len(act)
        self.grows = {Op.F: _PerStage(lambda s: op_delta(Op.F, act[s], weight[s]))}
        self.frees = {op: _PerStage(lambda s, op=op: -op_delta(op, act[s], weight[s])) for op in (Op.B, Op.I, Op.W)}
        if forward_only:
            self.frees[Op.F] = self.grows[Op.F]

    @classmethod
    def of(cls, program: Program) -> "_Sizes":
        return cls(*stage_sizes(program), forward_only=program.forward_only)

    def message(self, a: Action) -> float:
        """`message_size` from the table."""
        return self.out[a.stage + _SOURCE[a.op]]


class _Live:
    """What one rank holds as it runs its steps in order: activations and receive buffers.

    `allocate(step)` then `free(step)` for each step: F allocates its activation and a receive its
    buffer; a buffer is freed by the action that needs its value (schedc/deps.py), an activation by
    B, I and W. With `detail`, it also keeps which activations are held (for `items`)."""

    __slots__ = ("sizes", "act", "buf", "acts", "bufs", "unmatched")

    def __init__(self, sizes: _Sizes, detail: bool = False):
        self.sizes = sizes
        self.act = self.buf = 0  # integer sizes keep integer counts
        self.acts: dict | None = {} if detail else None  # (stage, microbatch) -> activation held
        self.bufs: dict = {}  # value -> (size, the receive that holds it); empty messages hold nothing
        self.unmatched: tuple[Action, ...] = ()  # sent messages held, when a caller says so

    @property
    def total(self) -> float:
        """Everything held: activations, receive buffers, and the unmatched sent messages."""
        sent = sum(self.sizes.message(a) for a in self.unmatched) if self.unmatched else 0.0
        return self.act + self.buf + sent

    def allocate(self, parts) -> None:
        for a in parts:
            op = a.op
            if op is Op.F:
                size = self.sizes.grows[op][a.stage]
                self.act += size
                if self.acts is not None:
                    self.acts[(a.stage, a.microbatch)] = size
            elif op in RECVS:
                size = self.sizes.message(a)
                if size:
                    self.bufs[delivers(a)] = (size, a)
                    self.buf += size

    def free(self, parts) -> None:
        bufs, frees = self.bufs, self.sizes.frees
        for a in parts:
            op = a.op
            if bufs and op in COMPUTE:
                for v in needs(a, self.sizes.stages):
                    held = bufs.pop(v, None)
                    if held is not None:
                        self.buf -= held[0]
            table = frees.get(op)
            if table is not None:
                d = table[a.stage]
                self.act -= d
                if self.acts is not None:
                    self._forget(a, d)

    def _forget(self, a: Action, d: float) -> None:
        """`d` of F(a.stage, a.microbatch)'s activation is freed."""
        key = (a.stage, a.microbatch)
        left = self.acts.get(key, 0.0) - d
        if left <= 1e-12:
            self.acts.pop(key, None)
        else:
            self.acts[key] = left

    def items(self, lowered: bool) -> tuple[str, ...]:
        """What is held, one line each (`lowered`: the sends and receives are lowering's)."""
        by = ", inserted by lowering" if lowered else ""
        live = [f"activation of F({s},{m}): {_num(v)}" for (s, m), v in self.acts.items() if v > 0]
        for v, a in self.bufs.values():
            if v > 0:
                what = (f"receive buffer for {value_name(delivers(a))} ({describe(a)}{by})" if lowered
                        else f"receive buffer of {describe(a)}")
                live.append(f"{what}: {_num(v)}")
        live += [f"sent message of {describe(a)}{by}, held: {_num(self.sizes.message(a))}" for a in self.unmatched
                 if self.sizes.message(a) > 0]
        return tuple(live)


@dataclass(frozen=True)
class _Run:
    """The program whose memory is counted and, when it is the lowering of the user's compute-level
    program, the user's step each of its steps belongs to (`user_step[r][x]`; None: the user's own
    program). A receive lowering inserts belongs to the step it comes before (its consumer comes
    later), a send to the step it follows (its producer)."""

    program: Program
    user_step: tuple[tuple[int, ...], ...] | None = None


def _as_run(program: Program) -> _Run:
    """The program as schedc runs it: a compute-level program whose messages have a size is lowered
    (without sizes, lowering adds nothing to count and the program is its own run)."""
    if program.level == "comms" or not any(_Sizes.of(program).out):
        return _Run(program)
    from ..passes import lower
    lowered = lower(program)
    return _Run(lowered, tuple(_user_steps(steps) for steps in lowered.ranks))


def _user_steps(steps) -> tuple[int, ...]:
    """For one rank of a lowering: the user's step each step belongs to (see `_Run`)."""
    out, seen = [], 0
    for st in steps:
        op = _inserted_op(st)
        out.append(max(seen - 1, 0) if op in SENDS else seen)
        if op is None:
            seen += 1
    return tuple(out)


def _inserted_op(st) -> Op | None:
    """The op of a send or receive lowering inserted, None for the user's own steps (a lowered
    compute-level program has no other communication)."""
    return st.op if st.__class__ is Action and st.op in COMM else None


def peak_activation(program: Program) -> tuple[float, ...]:
    """Peak live activations per rank along its order (no buffers)."""
    act, weight, _ = stage_sizes(program)
    return tuple(float(peak_activations([st.parts for st in steps], act, weight, program.forward_only))
                 for steps in program.ranks)


def peak_activations(steps, act, weight, forward_only: bool = False) -> float:
    """Peak live activations along one rank's steps (each a sequence of actions), stage s's sizes
    being `act[s]` and `weight[s]`: inside a step, allocations come before frees. Integer sizes
    give an integer (synth's memory units, prove's unit sizes)."""
    return max((during for during, _ in activations_along(steps, act, weight, forward_only)), default=0)


def activations_along(steps, act, weight, forward_only: bool = False):
    """For each step (a sequence of actions) of one rank, in order: (live activations while it
    runs, after its allocations; live activations once it has finished, after its frees)."""
    live = _Live(_Sizes(act, weight, None, forward_only))
    for parts in steps:
        live.allocate(parts)
        during = live.act
        live.free(parts)
        yield during, live.act


def step_memory(program: Program, semantics: Semantics | None = None) -> tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]:
    """Per rank, (memory while each step runs, after its allocations; memory once it has finished,
    after its frees), activations and receive buffers, for each step of `program`: the simulator's
    timed run, whose sends meet their receives as they are posted; under a backend (`semantics`)
    a sent message is held until its send is waited for, as in `peak_memory`. A compute-level
    program is counted on its lowering; an inserted receive adds to the step it comes before."""
    held = _activations_of_columns(program, semantics)
    if held is not None:
        return held
    run = _as_run(program)
    sizes = _Sizes.of(run.program)
    lowered = run.user_step is not None
    held = {}
    if semantics is not None and semantics.posted:
        held = _held_sends(run.program, semantics, channels(run.program), sizes)
    out = []
    for r, steps in enumerate(run.program.ranks):
        starts, ends = [0.0] * len(steps), [0.0] * len(steps)  # sent messages first held at, last held at each step
        for first, stop, a in held.get(r, ()):
            starts[first] += sizes.message(a)
            ends[stop - 1] += sizes.message(a)
        live, during, after, sending = _Live(sizes), [], [], 0.0
        for x, st in enumerate(steps):
            live.allocate(st.parts)
            sending += starts[x]
            if lowered and _inserted_op(st) is not None:
                live.free(st.parts)
                sending -= ends[x]
                continue
            during.append(live.total + sending)
            live.free(st.parts)
            sending -= ends[x]
            after.append(live.total + sending)
        out.append((tuple(during), tuple(after)))
    return tuple(out)


def _activations_of_columns(program: Program, semantics: Semantics | None):
    """`step_memory` of a program held as columns (millions of steps, at the limits) without
    compounds, not forward-only, whose messages have no size, under a semantics that does not hold
    sent messages: memory is then activations alone, and each step's allocation (an F's) and its
    free (a B's, I's or W's) are summed in order per rank as arrays, as `_Live` sums them. None for
    any other program (or for a table of (op, stage) deltas much larger than the program)."""
    from ..columns import CODE, OPS, columns_of  # (numpy: imported when asked)
    import numpy as np
    cols = columns_of(program)
    S = program.num_stages
    if (cols is None or cols.compounds or program.forward_only or (semantics is not None and semantics.posted)
            or any(stage_sizes(program)[2]) or len(OPS) * S > 4 * len(cols.op) + 4096):
        return None
    if len(cols.stage) and (cols.stage.min() < 0 or cols.stage.max() >= S):
        return None
    delta = activation_delta_table(program)[cols.op, cols.stage]
    frees = cols.op != CODE[Op.F]
    changes = np.zeros((len(delta), 2))  # per step: (its allocation, its free)
    changes[~frees, 0], changes[frees, 1] = delta[~frees], delta[frees]
    out = []
    for lo, hi in zip(cols.starts, cols.starts[1:]):
        live = np.cumsum(changes[lo:hi].ravel())  # one sum after another, in order
        out.append((tuple(live[0::2].tolist()), tuple(live[1::2].tolist())))
    return tuple(out)


@dataclass(frozen=True)
class Peak:
    """The worst moment of one rank: its memory, the step of the user's program, its action, what is
    live then, and how much of it is messages (receive buffers, sent messages still held).
    `lowered`: counted on the program's lowering (a compute-level program); `inserted`: the send or
    receive lowering inserts (just after or before that step) when the moment is its posting."""

    rank: int
    memory: float
    step: int
    action: Action | None
    live: tuple[str, ...]
    buffers: float = 0.0
    lowered: bool = False
    inserted: Action | None = None


def peak_memory(program: Program, semantics: Semantics, chans: Channels | None = None) -> tuple[Peak, ...]:
    """Worst-case memory per rank over every run the semantics allows (the program must not
    deadlock); a compute-level program as schedc lowers and runs it. `chans`: the program's
    channels, if already known."""
    run = _as_run(program)
    counted = run.program
    if run.user_step is not None or chans is None:
        chans = channels(counted)
    sizes = _Sizes.of(counted)
    held = _held_sends(counted, semantics, chans, sizes)
    return tuple(_rank_peak(program, run, sizes, r, held.get(r, ())) for r in range(program.num_ranks))


def _rank_peak(program: Program, run: _Run, sizes: _Sizes, r: int, held) -> Peak:
    """One rank's worst moment, told at the user's step (`held`: its sent messages' spans)."""
    steps = run.program.ranks[r]
    memory, x = _worst_step(steps, sizes, held)
    if not steps or memory <= 0:
        return Peak(r, 0.0, 0, None, ())
    live = _live_at(run, sizes, r, x, tuple(a for first, stop, a in held if first <= x < stop))
    buffers = live.total - live.act
    items = live.items(run.user_step is not None)
    if run.user_step is None:
        return Peak(r, memory, x, steps[x].parts[0], items, buffers)
    y = run.user_step[r][x]
    inserted = steps[x] if _inserted_op(steps[x]) is not None else None
    return Peak(r, memory, y, program.ranks[r][y].parts[0], items, buffers, True, inserted)


def _worst_step(steps, sizes: _Sizes, held) -> tuple[float, int]:
    """(the most one rank holds, the first step where it does), the sent messages it holds (`held`:
    (first step, step after the last, send) spans) included."""
    sent = [0.0] * (len(steps) + 1)  # what the spans add at each step, as a running sum of their ends
    for first, stop, a in held:
        size = sizes.message(a)
        sent[first] += size
        sent[stop] -= size
    live = _Live(sizes)
    peak, where, sending = 0.0, 0, 0.0
    for x, st in enumerate(steps):
        live.allocate(st.parts)
        sending += sent[x]
        total = live.total + sending
        if total > peak:
            peak, where = total, x
        live.free(st.parts)
    return peak, where


def _live_at(run: _Run, sizes: _Sizes, r: int, x: int, sent) -> _Live:
    """What rank r holds at step x of the counted program (after its allocations), sent messages
    still unmatched (`sent`) included."""
    live = _Live(sizes, detail=True)
    steps = run.program.ranks[r]
    for st in steps[:x]:
        live.allocate(st.parts)
        live.free(st.parts)
    live.allocate(steps[x].parts)
    live.unmatched = tuple(sent)
    return live


def live_activations(program: Program, rank: int, step: int) -> list[tuple[int, int]]:
    """The (stage, microbatch) of the forwards whose activations the rank holds while step `step`
    of its list runs (after that step's allocations, before its frees), by the one rule above."""
    live = _Live(_Sizes.of(program), detail=True)
    steps = program.ranks[rank]
    for st in steps[:step]:
        live.allocate(st.parts)
        live.free(st.parts)
    live.allocate(steps[step].parts)
    return sorted(k for k, v in live.acts.items() if v > 1e-12)


def _num(x: float):
    return int(x) if float(x).is_integer() else x


def _held_sends(program: Program, semantics: Semantics, chans: Channels, sizes: _Sizes) -> dict:
    """rank -> (first step, step after the last, send) of each sent message of some size the rank
    may still hold there. Under eager or bounded sends a message is held until its receive is surely
    posted; under a backend, as torch's runtime holds a sent tensor, until its send is waited for:
    at its explicit WAIT_SEND, else at the end of the step (its last step). Rendezvous holds none."""
    sends = [(ch, k, send) for ch, endpoints in chans.sends.items() for k, send in enumerate(endpoints)
             if sizes.message(send.action) > 0]
    if semantics.kind == "rendezvous" or not sends:
        return {}
    out: dict = defaultdict(list)
    if semantics.posted:
        waits = {(r, WAITS[a.op], a.stage, a.microbatch): x for r, steps in enumerate(program.ranks)
                 for x, st in enumerate(steps) for a in st.parts if a.op in WAITS}
        for ch, _, send in sends:
            a = send.action
            stop = waits.get((send.rank, a.op, a.stage, a.microbatch), len(program.ranks[send.rank]) - 1) + 1
            out[send.rank].append((send.step, max(stop, send.step + 1), a))
        return out
    known = _known_posted(program, constraints(program, semantics, chans),
                          {(send.rank, ch[1]) for ch, _, send in sends})
    for ch, k, send in sends:
        a, b = ch[0], ch[1]
        recvs = chans.recvs.get(ch, [])
        posted_at = recvs[k].step - 1 if k < len(recvs) else None  # posting it is finishing the step before
        if posted_at is None:  # never received: held to the end
            stop = len(program.ranks[a])
        elif posted_at < 0:  # posted before anything runs
            stop = send.step
        else:
            # the receive is certainly posted at a's step x once b's step before it happens-before
            # a's step x - 1: the first such x from the send on (a row only grows along a's list)
            row = known[a, b]
            j = bisect_left(row, posted_at, max(0, send.step - 1))
            stop = j + 1 if j < len(row) else len(program.ranks[a])
        if stop > send.step:
            out[a].append((send.step, stop, send.action))
    return out


MAX_HOLD_WORK = 1_000_000_000  # steps x receiving ranks: the exact hold analysis's work (about a second)


def _known_posted(program: Program, cons, pairs: set[tuple[int, int]]) -> dict[tuple[int, int], list[int]]:
    """(a, b) -> for each step x of rank a, the last step of rank b that happens-before (or is)
    a's step x. One pass in topological order carries, per step, a vector over the receiving ranks
    (a vector clock restricted to them): linear in steps x receiving ranks, which MAX_HOLD_WORK
    bounds (a `too-large` error past it, before the pass). Steps on a cycle (a deadlock) and after
    it are left out: their rows end there."""
    import numpy as np
    from ..errors import SchedcError
    receivers = sorted({b for _, b in pairs})
    col = {b: j for j, b in enumerate(receivers)}
    lengths = [len(steps) for steps in program.ranks]
    work = sum(lengths) * len(receivers)
    if work > MAX_HOLD_WORK:
        raise SchedcError("too-large", f"holding sent messages of some size under eager or bounded sends is "
                          f"worked out over {sum(lengths):,} steps x {len(receivers):,} receiving ranks, more "
                          f"than the {MAX_HOLD_WORK:,} allowed; check it under rendezvous or a backend's "
                          "semantics, or without message sizes")
    cross = defaultdict(list)  # step -> the steps of other ranks it waits for
    waiters = defaultdict(list)  # step -> the steps of other ranks that wait for it
    waiting = defaultdict(int)  # step -> how many of the steps it waits for are not yet counted
    for r, steps in enumerate(cons.prereq):
        for i, pre in enumerate(steps):
            ahead = 0  # a prerequisite later on its own rank: a cycle, never counted
            for q, j, _, _ in pre:
                if q != r:
                    cross[r, i].append((q, j))
                    waiters[q, j].append((r, i))
                elif j >= i:
                    ahead += 1
                # an earlier step of its own rank comes with program order, carried along the rank
            waiting[r, i] = len(cross[r, i]) + (i > 0) + ahead
    wanted = defaultdict(list)  # sender a -> the receivers b whose rows it keeps
    for a, b in sorted(pairs):
        wanted[a].append(b)
    rows = {pair: [] for pair in pairs}
    held: dict = {}  # the vectors of steps whose waiters are not all counted yet
    last = [None] * len(lengths)  # each rank's latest vector
    none = np.full(len(receivers), -1, dtype=np.int64)
    uses = {p: len(w) for p, w in waiters.items()}  # waiters not yet counted, per held vector
    queue = deque((r, 0) for r in range(len(lengths)) if lengths[r] and waiting[r, 0] == 0)
    while queue:
        r, i = node = queue.popleft()
        v = last[r] if last[r] is not None else none
        if cross.get(node) or r in col:
            v = v.copy()
            for p in cross.get(node, ()):
                np.maximum(v, held[p], out=v)
                uses[p] -= 1
                if not uses[p]:
                    del held[p]
            if r in col:
                v[col[r]] = i
        last[r] = v
        for b in wanted.get(r, ()):
            rows[r, b].append(int(v[col[b]]))
        if uses.get(node):
            held[node] = v
        for m in waiters.get(node, ()):
            waiting[m] -= 1
            if not waiting[m]:
                queue.append(m)
        if i + 1 < lengths[r]:
            waiting[r, i + 1] -= 1
            if not waiting[r, i + 1]:
                queue.append((r, i + 1))
    return rows
