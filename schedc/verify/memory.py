"""Memory per rank, the worst case: activations, receive buffers, eager send buffers along every run.

What each action holds is schedc/rules/memory.py's rule (F(s,m) allocates a_s; B frees a_s; I frees
a_s - w_s; W frees w_s; a message weighs the `out` of the stage below the boundary it crosses;
inside a step, allocations come before frees); this module counts it over the runs a semantics
allows. A receive holds its message from the moment it is posted until the action that consumes it.
Under eager or bounded sends a sent message stays from its send's completion until its receive is
posted, which depends on timing (ranks start at any time): the worst case at each moment of a step
(its posting, its completion, inside a group as its sends go) counts every message whose receive
need not be posted by then, i.e. does not happen-before it (exact, from the happens-before graph of
schedc/verify/graph.py, the collectives' waits included). Under a backend a sent message stays until
its send is waited for, as torch's runtime holds the tensor: at its WAIT_SEND, else to the end of
the step.

A compute-level program is counted as schedc lowers and runs it (DESIGN.md, "Memory at the compute
level"): on its lowering, which the caller makes (report.py adds it to the `Analysis` the checks
read, schedc/verify/analysis.py), receive buffers included, each moment told at a step of the
user's program. `_Live` is the one accounting; `peak_memory` (the worst run, for `check`) and
`step_memory` (each step of a run, for the simulator's timed run) both read it; `peak_activations`
gives it along one rank's steps in sizes a caller chooses (`order greedy`'s cap, synth's integer
units, prove's whole units).
"""
from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import NamedTuple

from ..ir import COMPUTE, RECVS, WAITS, Action, Program, describe
from ..rules.deps import Stages, delivers, needs, stages_of, value_name
from ..rules.memory import ALLOCATES, FREES, activation_deltas, allocated, freed, message_stage, stage_sizes
from ..rules.semantics import Semantics
from .analysis import Analysis, Run, inserted_op, user_steps
from .channels import Channels, Endpoint


def activation_delta_table(program: Program):
    """schedc/rules/memory.py's `activation_deltas` as a numpy array by op code (schedc/columns.py's)
    and stage: 0 for an op that holds nothing. (The array paths look each step's delta up in it.)"""
    from ..columns import CODE, OPS  # (numpy: imported when asked)
    import numpy as np
    table = np.zeros((len(OPS), program.num_stages))
    for op, row in activation_deltas(program).items():
        table[CODE[op]] = row
    return table


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
    as its step starts (`grows[op][s]`, F) or frees as it ends (`frees[op][s]`, B, I, W; F too in a
    forward-only program), by schedc/rules/memory.py's `allocated` and `freed`. `_Sizes.of(program)`: the program's.
    `out` None: every message is empty (an activations-only walk)."""

    def __init__(self, act, weight, out=None, forward_only: bool = False, stages: Stages | None = None):
        self.out = list(out) if out is not None else _PerStage(lambda s: _empty(act[s]))
        self.stages: Stages = len(act) if stages is None else stages  # (deps.py's `stages`: routes, if any)
        self.grows = {op: _PerStage(lambda s, op=op: allocated(op, act[s], weight[s])) for op in ALLOCATES}
        frees = FREES + (tuple(ALLOCATES) if forward_only else ())
        self.frees = {op: _PerStage(lambda s, op=op: freed(op, act[s], weight[s], forward_only)) for op in frees}

    @classmethod
    def of(cls, program: Program) -> "_Sizes":
        return cls(*stage_sizes(program), forward_only=program.forward_only, stages=stages_of(program))

    def message(self, a: Action) -> float:
        """schedc/rules/memory.py's `message_size` from the table."""
        return self.out[message_stage(a)]


class _Live:
    """What one rank holds as it runs its steps in order: activations and receive buffers.

    `allocate(step)` then `free(step)` for each step: F allocates its activation and a receive its
    buffer; a buffer is freed by the action that needs its value (schedc/rules/deps.py), an activation by
    B, I and W. With `detail`, it also keeps which activations are held (for `items`)."""

    __slots__ = ("sizes", "act", "buf", "acts", "bufs", "unmatched")

    def __init__(self, sizes: _Sizes, detail: bool = False):
        self.sizes = sizes
        self.act: float = 0  # integer sizes keep integer counts
        self.buf: float = 0
        self.acts: dict[tuple[int, int | None], float] | None = {} if detail else None  # (stage, microbatch) -> activation held
        self.bufs: dict = {}  # value -> (size, the receive that holds it); empty messages hold nothing
        self.unmatched: tuple[Action, ...] = ()  # sent messages held, when a caller says so

    @property
    def total(self) -> float:
        """Everything held: activations, receive buffers, and the unmatched sent messages."""
        sent = sum(self.sizes.message(a) for a in self.unmatched) if self.unmatched else 0.0
        return self.act + self.buf + sent

    def allocate(self, parts) -> None:
        grows = self.sizes.grows
        for a in parts:
            op = a.op
            table = grows.get(op)
            if table is not None:
                size = table[a.stage]
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
        acts = self.detail()
        key = (a.stage, a.microbatch)
        left = acts.get(key, 0.0) - d
        if left <= 1e-12:
            acts.pop(key, None)
        else:
            acts[key] = left

    def detail(self) -> dict[tuple[int, int | None], float]:
        """The activations held, (stage, microbatch) -> size: kept by a `_Live` made with `detail`."""
        if self.acts is None:
            raise ValueError("which activations are held is kept only with detail")
        return self.acts

    def items(self, lowered: bool) -> tuple[str, ...]:
        """What is held, one line each (`lowered`: the sends and receives are lowering's)."""
        by = ", inserted by lowering" if lowered else ""
        live = [f"activation of F({s},{m}): {_num(v)}" for (s, m), v in self.detail().items() if v > 0]
        for value, (v, a) in self.bufs.items():
            if v > 0:
                what = (f"receive buffer for {value_name(value)} ({describe(a)}{by})" if lowered
                        else f"receive buffer of {describe(a)}")
                live.append(f"{what}: {_num(v)}")
        live += [f"sent message of {describe(a)}{by}, held: {_num(self.sizes.message(a))}" for a in self.unmatched
                 if self.sizes.message(a) > 0]
        return tuple(live)


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


def step_memory(program: Program, semantics: Semantics | None = None, lowered: Program | None = None
                ) -> tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]:
    """Per rank, (memory while each step runs, after its allocations; memory once it has finished,
    after its frees), activations and receive buffers, for each step of `program`: the simulator's
    timed run, whose sends meet their receives as they are posted; under a backend (`semantics`)
    a sent message is held until its send is waited for, as in `peak_memory`. A compute-level
    program whose messages have a size is counted on its lowering, which the caller gives (`lowered`;
    `counted_lowered` says when); an inserted receive adds to the step it comes before."""
    held = _activations_of_columns(program, semantics)
    if held is not None:
        return held
    run = Run.of(program, lowered)
    sizes = _Sizes.of(run.program)
    inserted = run.user_step is not None  # (steps lowering inserted count toward the user's steps)
    held = {}
    if semantics is not None and semantics.posted:
        held, _ = _held_sends(Analysis(run.program, semantics), sizes)
    out = []
    for r, steps in enumerate(run.program.ranks):
        starts, ends = [0.0] * len(steps), [0.0] * len(steps)  # sent messages first held at, last held at each step
        for h in held.get(r, ()):  # (a backend's: held alike at both moments of a step)
            first, stop = h.posted
            starts[first] += sizes.message(h.action)
            ends[stop - 1] += sizes.message(h.action)
        live, during, after, sending = _Live(sizes), [], [], 0.0
        for x, st in enumerate(steps):
            live.allocate(st.parts)
            sending += starts[x]
            if inserted and inserted_op(st) is not None:
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
    """`step_memory` of a program held as columns (millions of steps, at the limits), not
    forward-only, whose messages have no size, under a semantics that does not hold sent
    messages: memory is then activations alone, and each step's allocations (F's) and its frees
    (B's, I's or W's: a compound's parts' in their order) are summed in order per rank as arrays,
    as `_Live` sums them. None for any other program (or for a table of (op, stage) deltas much
    larger than the program)."""
    from ..columns import CODE, OPS, columns_of  # (numpy: imported when asked)
    import numpy as np
    cols = columns_of(program)
    S = program.num_stages
    if (cols is None or program.forward_only or (semantics is not None and semantics.posted)
            or any(stage_sizes(program)[2]) or len(OPS) * S > 4 * len(cols.op) + 4096):
        return None
    op, stage, _, step = cols.opened()
    if len(stage) and (stage.min() < 0 or stage.max() >= S):
        return None
    delta = activation_delta_table(program)[op, stage]
    frees = ~np.isin(op, [CODE[o] for o in ALLOCATES])  # counted after the step's allocations
    first = np.searchsorted(step, np.arange(len(cols.op) + 1))  # each step's first action (and the end)
    count = np.diff(first)[step]  # the actions of each action's step
    at = first[step] + np.arange(len(op))  # each action's allocation: 2 * first + its place in the step
    changes = np.zeros(2 * len(op))  # per step: its actions' allocations, then their frees, in order
    changes[at[~frees]], changes[at[frees] + count[frees]] = delta[~frees], delta[frees]
    during, after = 2 * first[:-1] + np.diff(first) - 1, 2 * first[1:] - 1  # where each step's two sums end
    out = []
    for lo, hi in zip(cols.starts, cols.starts[1:]):
        base = 2 * first[lo]
        with np.errstate(over="ignore", invalid="ignore"):  # (sizes near 1e308 sum to inf, as `_Live` sums them)
            live = np.cumsum(changes[base:2 * first[hi]])  # one sum after another, in order
        out.append((tuple(live[during[lo:hi] - base].tolist()), tuple(live[after[lo:hi] - base].tolist())))
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


def peak_memory(analysis: Analysis) -> tuple[Peak, ...]:
    """Worst-case memory per rank of the analysed program over every run its semantics allows (the
    program must not deadlock); a compute-level program as schedc lowers and runs it (the
    analysis' `run`, on its `counted` analysis). A job whose collectives join ranks (replicas, a
    tied all-reduce) is counted whole, its ranks numbered as schedc/verify/mesh.py's `job` numbers
    them: a collective's wait orders the runs as a message does."""
    from .mesh import flat_job, joins_ranks
    program, run, counted = analysis.program, analysis.run, analysis.counted
    if joins_ranks(program):
        flat, cons = counted.job
        counted = Analysis(flat, analysis.semantics, chans=counted.job_channels, cons=cons)
        steps = tuple(map(user_steps, flat.ranks)) if run.user_step is not None else None
        program, run = flat_job(program), Run(flat, steps)
    sizes = _Sizes.of(counted.program)
    held, cuts = _held_sends(counted, sizes)
    return tuple(_rank_peak(program, run, sizes, r, held.get(r, ()), cuts.get(r, {})) for r in range(program.num_ranks))


def _rank_peak(program: Program, run: Run, sizes: _Sizes, r: int, held, cuts) -> Peak:
    """One rank's worst moment, told at the user's step (`held`: its sent messages' spans; `cuts`:
    inside its groups, `_group_cuts`)."""
    steps = run.program.ranks[r]
    memory, x, moment = _worst_step(steps, sizes, held, cuts)
    if not steps or memory <= 0:
        return Peak(r, 0.0, 0, None, ())
    if moment == 2:
        sent = cuts[x][0]
    else:
        sent = tuple(h.action for h in held if h.at(moment)[0] <= x < h.at(moment)[1])
    live = _live_at(run, sizes, r, x, sent)
    buffers = live.total - live.act
    items = live.items(run.user_step is not None)
    if run.user_step is None:
        return Peak(r, memory, x, steps[x].parts[0], items, buffers)
    y = run.user_step[r][x]
    st = steps[x]
    inserted = st if isinstance(st, Action) and inserted_op(st) is not None else None  # (inserted: an Action)
    return Peak(r, memory, y, program.ranks[r][y].parts[0], items, buffers, True, inserted)


def _worst_step(steps, sizes: _Sizes, held, cuts) -> tuple[float, int, int]:
    """(the most one rank holds, the first step where it does, the moment: 0 as the step is posted,
    1 as it completes, 2 inside a group (`cuts`)), the sent messages it holds (`held`) included. A
    step's allocations count at every moment: a receive's buffer from its posting, a compute
    step's at once (at the communication level no other rank's step comes between its posting and
    its completion); only the sent messages held differ."""
    sent = [[0.0] * (len(steps) + 1) for _ in range(2)]  # per moment, a running sum of the spans' ends
    for h in held:
        size = sizes.message(h.action)
        for moment in (0, 1):
            first, stop = h.at(moment)
            if first < stop:
                sent[moment][first] += size
                sent[moment][stop] -= size
    live = _Live(sizes)
    peak, where, when, posted, completed = 0.0, 0, 0, 0.0, 0.0
    for x, st in enumerate(steps):
        live.allocate(st.parts)
        posted += sent[0][x]
        completed += sent[1][x]
        inside = cuts[x][1] if x in cuts else 0.0
        total = live.total + max(posted, completed, inside)
        if total > peak:
            peak, where, when = total, x, 2 if inside > max(posted, completed) else int(completed > posted)
        live.free(st.parts)
    return peak, where, when


def _live_at(run: Run, sizes: _Sizes, r: int, x: int, sent) -> _Live:
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


def live_activations(program: Program, rank: int, step: int) -> list[tuple[int, int | None]]:
    """The (stage, microbatch) of the forwards whose activations the rank holds while step `step`
    of its list runs (after that step's allocations, before its frees), by the one rule above."""
    live = _Live(_Sizes.of(program), detail=True)
    steps = program.ranks[rank]
    for st in steps[:step]:
        live.allocate(st.parts)
        live.free(st.parts)
    live.allocate(steps[step].parts)
    return sorted(k for k, v in live.detail().items() if v > 1e-12)


def _num(x: float):
    return int(x) if float(x).is_integer() else x


class Held(NamedTuple):
    """A sent message its rank may still hold, at each of two moments of its steps: as a step is
    posted (`posted`: the steps x with first <= x < stop) and as it completes (`completed`)."""

    posted: tuple[int, int]
    completed: tuple[int, int]
    action: Action

    def at(self, moment: int) -> tuple[int, int]:
        return self.completed if moment else self.posted


def _held_sends(counted: Analysis, sizes: _Sizes) -> tuple[dict, dict]:
    """rank -> the `Held` spans of each sent message of some size the rank may still hold (the
    program counted, as analysed). Under eager or bounded sends a message is held from its send's
    completion until its receive is posted, in the worst run its happens-before graph allows; under a
    backend, as torch's runtime holds a sent tensor, until its send is waited for: at its explicit
    WAIT_SEND, else at the end of the step (its last step), at both moments. Rendezvous holds none."""
    program, semantics, chans = counted.program, counted.semantics, counted.channels
    sends = [(ch, k, send) for ch, endpoints in chans.sends.items() for k, send in enumerate(endpoints)
             if sizes.message(send.action) > 0]
    if semantics.sent_held_until is None or not sends:
        return {}, {}
    out: dict = defaultdict(list)
    if semantics.posted:
        waited = {(r, WAITS[a.op], a.stage, a.microbatch): x for r, steps in enumerate(program.ranks)
                  for x, st in enumerate(steps) for a in st.parts if a.op in WAITS}
        for ch, _, send in sends:
            act = send.action
            stop = waited.get((send.rank, act.op, act.stage, act.microbatch), len(program.ranks[send.rank]) - 1) + 1
            span = (send.step, max(stop, send.step + 1))
            out[send.rank].append(Held(span, span, act))
        return out, {}
    cons = counted.constraints
    waits, buffer = _waits_for_room(program, semantics, chans, sends), semantics.channel_buffer
    known, kept = _known_posted(program, cons, {(send.rank, ch[1]) for ch, _, send in sends},
                                {w[1] for w in waits.values()})
    for ch, k, send in sends:
        a, b, x = ch[0], ch[1], send.step
        end = len(program.ranks[a])
        recvs = chans.recvs.get(ch, [])
        # a send completes as its step is posted unless it waits for room (bounded:K, its k-th with k >= K)
        at_once = buffer is None or k < buffer
        if k >= len(recvs):  # never received: held to the end
            posted, done = end, end
        else:
            # a's step i completes once the receive (b's step y) is surely posted when row[i] >= y
            row, y = known[a, b], recvs[k].step
            done = bisect_left(row, y, x)
            posted = done + 1 if done < len(row) else end
            done = done if done < len(row) else end
            if at_once and (row[x - 1] if x > 0 else -1) < y:
                x -= 1  # held as its own step is posted too
        out[a].append(Held((x + 1, min(posted, end)), (send.step, done), send.action))
    return out, _group_cuts(sizes, chans, sends, waits, known, kept)


def _waits_for_room(program: Program, semantics: Semantics, chans: Channels, sends) -> dict:
    """(rank, step, part) of each sent message of some size that a group posts and that waits for
    room (bounded:K, the k-th with k >= K) -> (the channel's receive it waits for, the step whose
    completion posts that receive: (rank, -1) for the rank's start). A group's sends complete one by
    one, so the moments between its posting and its completion count too (`_group_cuts`)."""
    out: dict[tuple[int, int, int], tuple[Endpoint, tuple[int, int]]] = {}
    buffer = semantics.channel_buffer
    if not buffer:  # (a buffer of K > 0: bounded:K)
        return out
    for ch, k, send in sends:
        recvs = chans.recvs.get(ch, [])
        grouped = len(program.ranks[send.rank][send.step].parts) > 1
        if grouped and buffer <= k < len(recvs) + buffer:
            room = recvs[k - buffer]
            out[send.rank, send.step, send.part] = (room, (room.rank, room.step - 1))
    return out


def _group_cuts(sizes: _Sizes, chans: Channels, sends, waits: dict, known, kept) -> dict:  # noqa: C901
    """rank -> step -> (the sent messages held, their size) at the worst moment inside a group whose
    sends wait for room: after its posting, once some of those sends completed (each set of them in
    turn: a group has few parts). Exact: a moment is the posting and the room those sends waited for."""
    if not waits:
        return {}
    mine = defaultdict(list)  # rank -> (step, channel, k, send) of its sent messages of some size
    for ch, k, send in sends:
        mine[send.rank].append((send.step, ch, k, send))
    receivers = defaultdict(list)  # rank -> the ranks it sends messages of some size to
    for a, b in known:
        receivers[a].append(b)
    groups = defaultdict(list)  # (rank, step) -> its sends that wait for room
    for key in waits:
        groups[key[:2]].append(key)
    out: dict = defaultdict(dict)
    for (a, x), blocked in groups.items():
        for n in range(1, 1 << len(blocked)):
            clock = {b: (known[a, b][x - 1] if x > 0 else -1) for b in receivers[a]}
            for i, key in enumerate(blocked):
                if n >> i & 1:
                    for b, v in kept[waits[key][1]].items():
                        if b in clock:
                            clock[b] = max(clock[b], v)
            held = []
            for step, ch, k, send in mine[a]:
                if step > x:
                    continue
                room = waits.get((a, step, send.part)) if step == x else None
                if room is not None and clock[ch[1]] < room[0].step:
                    continue  # not sent yet: it waits for room
                recvs = chans.recvs.get(ch, [])
                if k >= len(recvs) or clock[ch[1]] < recvs[k].step:
                    held.append(send.action)
            size = sum(sizes.message(h) for h in held)
            if size > out[a].get(x, ((), 0.0))[1]:
                out[a][x] = (tuple(held), size)
    return out


MAX_HOLD_WORK = 1_000_000_000  # steps x receiving ranks: the exact hold analysis's work (about a second)


def _known_posted(program: Program, cons, pairs: set[tuple[int, int]], keep=frozenset()) -> tuple[dict, dict]:  # noqa: C901
    """(a, b) -> for each step x of rank a, the latest step of rank b surely posted when a's step x
    completes (b's step y is posted when its step y - 1 completes, its first when b starts, which
    may be at any time: surely, when that happens-before a's step x; -1: not even its first). And
    for each step of `keep` ((q, -1): rank q's start), the same over every receiving rank b: {b: step}.
    One pass in topological order carries, per step, a vector over the receiving ranks (a vector
    clock restricted to them): linear in steps x receiving ranks, which MAX_HOLD_WORK bounds (a
    `too-large` error past it, before the pass). Steps on a cycle (a deadlock) and after it are left
    out: their rows end there."""
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
                          "semantics, or without message sizes", where=program.source or program.name)
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
    rows: dict[tuple[int, int], list[int]] = {pair: [] for pair in pairs}
    held: dict = {}  # the vectors of steps whose waiters are not all counted yet
    last: list[np.ndarray | None] = [None] * len(lengths)  # each rank's latest vector
    none = np.full(len(receivers), -1, dtype=np.int64)
    uses = {p: len(w) for p, w in waiters.items()}  # waiters not yet counted, per held vector
    starts = cons.starts
    kept = {(q, j): {q: 0} for q, j in keep if j < 0}  # a start: only its rank's first step is posted
    queue = deque((r, 0) for r in range(len(lengths)) if lengths[r] and waiting[r, 0] == 0)
    while queue:
        r, i = node = queue.popleft()
        latest = last[r]
        v = latest if latest is not None else none
        if cross.get(node) or r in col or node in starts:
            v = v.copy()
            for p in cross.get(node, ()):
                np.maximum(v, held[p], out=v)
                uses[p] -= 1
                if not uses[p]:
                    del held[p]
            for q in starts.get(node, ()):  # it waits for rank q to start: q's first step is posted
                if q in col:
                    v[col[q]] = max(v[col[q]], 0)
            if r in col:
                v[col[r]] = i + 1
        last[r] = v
        for b in wanted.get(r, ()):
            rows[r, b].append(int(v[col[b]]))
        if node in keep:
            kept[node] = {b: int(v[col[b]]) for b in receivers}
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
    return rows, kept
