"""Hypothesis strategies for testing schedules, checkers and pipeline runtimes against random inputs.

`programs()` builds valid compute-level programs by construction, `lowered_programs()` the same with
communication, `mutations(program)` broken variants with a label of what broke, `reorderings(program)`
variants that may or may not still be sound, and `sources()` schedule text from schedc's grammar.
The only schedc module that imports hypothesis (install the `hypothesis` extra).
"""
from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable
from dataclasses import replace
from typing import NamedTuple

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from .ir import (COMPUTE, Action, Annotations, Compound, CompoundKind, Op, Program, Route, StageCost, StageMemory,
                 format_step, placed)
from .rules.deps import Routes, Stages, needs, producer, stages_of, visits

__all__ = ["MAX_PAIRS", "MUTATION_KINDS", "PLACEMENTS", "Mutant", "lowered_programs", "mutations", "programs",
           "reorderings", "sources"]

PLACEMENTS = ("loop", "vshape", "table")
MAX_PAIRS = 2_048  # stage-microbatch pairs of the largest program one Hypothesis example can hold
MUTATION_KINDS = ("drop", "duplicate", "wrong-rank", "bad-index", "before-input", "swap-messages")
_KINDS = {"F": Op.F, "B": Op.B, "I": Op.I, "W": Op.W}
_ORDER = {Op.F: 0, Op.I: 1, Op.B: 2, Op.W: 3}  # ties among ready actions: forward first


# ---------------------------------------------------------------------------------------------
# Validation (Hypothesis's API style: keyword-only options, checked when the strategy is made)
# ---------------------------------------------------------------------------------------------
def _integer(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name}={value!r} must be an integer")
    if value < low:
        raise InvalidArgument(f"{name}={value!r} must be at least {low}")
    return value


def _bounds(what: str, lo, hi, low: int = 1) -> tuple[int, int]:
    lo, hi = _integer(f"min_{what}", lo, low), _integer(f"max_{what}", hi, low)
    if lo > hi:
        raise InvalidArgument(f"min_{what}={lo} is greater than max_{what}={hi}")
    return lo, hi


def _flag(name: str, value, allow_none: bool = False):
    if value is None and allow_none:
        return value
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r} must be True or False" + (" or None" if allow_none else ""))
    return value


def _choices(name: str, value, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise InvalidArgument(f"{name}={value!r} must be a collection of names, e.g. {name}=({value!r},)")
    if not isinstance(value, Iterable):
        raise InvalidArgument(f"{name}={value!r} must be a collection, a subset of {allowed}")
    out = tuple(dict.fromkeys(value))
    if not out:
        raise InvalidArgument(f"{name} must not be empty; choose from {allowed}")
    bad = [x for x in out if x not in allowed]
    if bad:
        raise InvalidArgument(f"{name}: unknown {', '.join(map(repr, bad))}; expected some of {allowed}")
    return out


def _backward_forms(kinds, split_backward) -> tuple[bool, ...]:  # noqa: C901
    """Which backward forms the options allow: (False,) fused B only, (True,) I + W only, or both."""
    if isinstance(kinds, Op):
        kinds = (kinds,)
    if isinstance(kinds, str):
        raise InvalidArgument(f"kinds={kinds!r} must be a collection of names, e.g. kinds=('F', 'B')")
    if not isinstance(kinds, Iterable):
        raise InvalidArgument(f"kinds={kinds!r} must be a collection of 'F', 'B', 'I', 'W'")
    names = set()
    for k in kinds:
        key = k.value if isinstance(k, Op) else k
        if key not in _KINDS:
            raise InvalidArgument(f"kinds: {k!r} is not a compute kind; expected some of 'F', 'B', 'I', 'W'")
        names.add(key)
    if "F" not in names:
        raise InvalidArgument("kinds must include 'F': every microbatch runs a forward on every stage")
    if ("I" in names) != ("W" in names):
        raise InvalidArgument("kinds: 'I' and 'W' come together (a split backward is I then W)")
    fused, split = "B" in names, "I" in names
    if not (fused or split):
        raise InvalidArgument("kinds must include 'B', or 'I' and 'W': every forward needs a backward")
    _flag("split_backward", split_backward, allow_none=True)
    if split_backward is True and not split:
        raise InvalidArgument("split_backward=True needs 'I' and 'W' in kinds")
    if split_backward is False and not fused:
        raise InvalidArgument("split_backward=False needs 'B' in kinds")
    if split_backward is not None:
        return (split_backward,)
    return tuple(form for form, ok in ((False, fused), (True, split)) if ok)


def _fits(r_lo, r_hi, m_lo, m_hi, v_lo, v_hi, shapes) -> None:
    """Refuse options under which no program fits in one Hypothesis example (MAX_PAIRS)."""
    for what, value in (("ranks", r_hi), ("microbatches", m_hi), ("chunks", v_hi)):
        if value > MAX_PAIRS:
            raise InvalidArgument(f"max_{what}={value}: a program with more than {MAX_PAIRS:,} {what} does not fit "
                                  f"in one Hypothesis example (at most {MAX_PAIRS:,} stage-microbatch pairs)")
    smallest = min(2 * r_lo if shape == "vshape" else r_lo * v_lo for shape in shapes) * m_lo
    if smallest > MAX_PAIRS:
        raise InvalidArgument(f"the smallest program these options allow has {smallest:,} stage-microbatch pairs, "
                              f"more than fit in one Hypothesis example ({MAX_PAIRS:,}); lower min_ranks, "
                              "min_chunks or min_microbatches")


def _program(name: str, value) -> Program:
    if not isinstance(value, Program):
        raise InvalidArgument(f"{name} must be a schedc.ir.Program, not {type(value).__name__}")
    return value


# ---------------------------------------------------------------------------------------------
# Valid programs
# ---------------------------------------------------------------------------------------------
def programs(*, min_ranks: int = 1, max_ranks: int = 4, min_microbatches: int = 1, max_microbatches: int = 6,
             placements: Collection[str] = ("loop", "vshape"), min_chunks: int = 1, max_chunks: int = 2,
             kinds: Collection[str] = ("F", "B", "I", "W"), split_backward: bool | None = None,
             overlap: bool = False, costs: bool = False, memory: bool = False, routes: bool = False,
             name: str = "generated") -> st.SearchStrategy[Program]:
    """Valid compute-level programs, by construction; they shrink towards fewer ranks and microbatches.

    A program has R ranks in `min_ranks..max_ranks` and M microbatches in
    `min_microbatches..max_microbatches`. Its placement is one of `placements`: `"loop"` (V chunks
    per rank, V in `min_chunks..max_chunks`, stage s on rank s % R), `"vshape"` (2R stages, down
    the ranks and back up) or `"table"` (R..V*R stages, each on any rank; a rank may hold none).
    Each stage runs a fused backward `B` or a split one (`I` then `W`): `split_backward=True` or
    `False` fixes the form, `None` draws it per stage among the forms `kinds` allows. Every rank's
    list is one order of the dependency graph of docs/semantics.md, so the program is sound and deadlock-free
    under every send semantics. `overlap=True` lets an F and a B that are ready together on a rank
    run as one `OVERLAP_F_B`; `costs=True` and `memory=True` draw per-stage times (F, I, W in 1..3,
    B = I + W) and sizes (`act` 1..3, `weight` 0..act, `out` 0..2). `routes=True` draws programs
    with two routes, as DualPipe runs (docs/semantics.md, "Routes"): the stages are two copies of
    one model, the first microbatches (at least one) run through the first copy and the rest
    through the second; the shapes place the model's L stages as above (`"vshape"`: L = R, the
    second copy up the ranks as DualPipe places it), with 2L stages in all; at least 2
    microbatches. One example holds at most
    `MAX_PAIRS` (2,048) stage-microbatch pairs: options whose smallest program is larger, or a
    maximum above that, are refused; larger draws inside the bounds are discarded by Hypothesis.

    >>> import schedc
    >>> from hypothesis import given, settings
    >>> from schedc.strategies import programs
    >>> @settings(max_examples=20, deadline=None)
    ... @given(programs(max_ranks=3, max_microbatches=4))
    ... def test_generated_programs_check_ok(program):
    ...     assert schedc.check(program).ok
    >>> test_generated_programs_check_ok()

    Options are checked when the strategy is made:

    >>> programs(min_ranks=3, max_ranks=2)
    Traceback (most recent call last):
    ...
    hypothesis.errors.InvalidArgument: min_ranks=3 is greater than max_ranks=2
    >>> programs(kinds=("F", "I"))
    Traceback (most recent call last):
    ...
    hypothesis.errors.InvalidArgument: kinds: 'I' and 'W' come together (a split backward is I then W)
    """
    r_lo, r_hi = _bounds("ranks", min_ranks, max_ranks)
    m_lo, m_hi = _bounds("microbatches", min_microbatches, max_microbatches)
    v_lo, v_hi = _bounds("chunks", min_chunks, max_chunks)
    shapes = _choices("placements", placements, PLACEMENTS)
    _fits(r_lo, r_hi, m_lo, m_hi, v_lo, v_hi, shapes)
    forms = _backward_forms(kinds, split_backward)
    overlap, costs, memory = _flag("overlap", overlap), _flag("costs", costs), _flag("memory", memory)
    if _flag("routes", routes):
        if m_hi < 2:
            raise InvalidArgument(f"routes=True needs two microbatches at least (one per route); max_microbatches={m_hi}")
        m_lo = max(m_lo, 2)
    if not isinstance(name, str):
        raise InvalidArgument(f"name={name!r} must be a string")
    if overlap and forms == (True,):
        raise InvalidArgument("overlap=True pairs an F with a fused B; it needs 'B' in kinds and "
                              "split_backward other than True")
    return _programs(r_lo, r_hi, m_lo, m_hi, v_lo, v_hi, shapes, forms, overlap, costs, memory, routes, name)


@st.composite
def _programs(draw, r_lo, r_hi, m_lo, m_hi, v_lo, v_hi, shapes, forms, overlap, costs, memory, routed, name):  # noqa: C901
    shape = draw(st.sampled_from(shapes), label="placement")
    R = draw(st.integers(r_lo, r_hi), label="ranks")
    M = draw(st.integers(m_lo, m_hi), label="microbatches")
    if routed:  # two copies of a model of L stages; the first `cut` microbatches through the first
        L = R if shape == "vshape" else R * draw(st.integers(v_lo, v_hi), label="chunks")
        S = 2 * L
        if shape == "table":
            placement = tuple(draw(st.lists(st.integers(0, R - 1), min_size=S, max_size=S), label="table"))
        else:
            placement = placed(shape, S, R)
        cut = draw(st.integers(1, M - 1), label="cut")
        routes: tuple[Route, ...] = (Route((0, cut), (0, L)), Route((cut, M), (L, S)))
    elif shape == "vshape":
        S = 2 * R
        placement = placed("vshape", S, R)
    elif shape == "loop":
        S = R * draw(st.integers(v_lo, v_hi), label="chunks")
        placement = placed("loop", S, R)
    else:
        S = draw(st.integers(R * v_lo, R * v_hi), label="stages")
        placement = tuple(draw(st.lists(st.integers(0, R - 1), min_size=S, max_size=S), label="table"))
    if len(forms) == 1:
        split = (forms[0],) * S
    else:
        split = tuple(draw(st.lists(st.booleans(), min_size=S, max_size=S), label="split backward"))
    if not routed:
        routes = ()
    stages: Stages = Routes(S, M, routes) if routes else S
    ranks = _topological_order(draw, R, S, M, placement, split, overlap, r_hi * max(v_hi, 2) * (2 if routed else 1),
                               stages)
    annotations = Annotations(stage_costs=tuple(draw(_stage_costs()) for _ in range(S)) if costs else (),
                              stage_memory=tuple(draw(_stage_memory()) for _ in range(S)) if memory else ())
    return Program(name=name, num_ranks=R, num_stages=S, num_microbatches=M, placement=placement,
                   ranks=ranks, annotations=annotations, routes=routes)


def _needs(op: Op, s: int, m: int, stages: Stages, split: tuple[bool, ...]) -> list[tuple[Op, int, int]]:
    """The producers of what (op, s, m) needs (schedc/rules/deps.py's rule), as (op, stage, microbatch)."""
    return [producer(v, Op.I if split[v[1]] else Op.B) for v in needs(Action(op, s, m), stages)]


def _key(node):
    op, s, m = node
    return (m, s, _ORDER[op])


def _topological_order(draw, R, S, M, placement, split, overlap, stage_cap, stages: Stages):  # noqa: C901
    """Per-rank lists from one random topological order of the dependency graph (a valid run).

    Every action gets a priority byte; whenever several are ready, the one with the lowest
    (priority, microbatch, stage, kind) runs next. Any topological order arises this way (give each
    action its position), every byte 0 is the canonical order (the earliest microbatch's ready
    action first, the lowest stage, a forward before a backward), and the bytes are drawn microbatch by microbatch in blocks of one fixed
    size, so removing microbatches or ranks leaves the priorities of the rest alone: programs shrink
    towards fewer ranks and microbatches without losing the order that made a test fail. Few
    draws keep large programs fast to generate.
    """
    nodes: list = []
    waiting: dict = {}
    users: dict = {}
    for m in range(M):
        for s in range(S):
            if not visits(stages, s, m):  # (routes: the stages of its copy alone)
                continue
            for op in ((Op.F, Op.I, Op.W) if split[s] else (Op.F, Op.B)):
                node = (op, s, m)
                nodes.append(node)
                waiting[node] = set(_needs(op, s, m, stages, split))
                for d in waiting[node]:
                    users.setdefault(d, []).append(node)
    # The byte of (op, s, m) sits at a place that depends on s and m alone (up to the largest
    # number of stages the options allow), unless that layout would be large: then compactly.
    width = max(stage_cap, S)
    if M * width * 3 <= _SPREAD_BYTES:
        slot = {node: (node[2] * width + node[1]) * 3 + _SLOT[node[0]] for node in nodes}
    else:
        slot = {node: i for i, node in enumerate(nodes)}
    drawn = _priorities(draw, max(slot.values()) + 1)
    priority = {node: drawn[slot[node]] for node in nodes}

    def rank_key(node):
        return (priority[node], *_key(node))

    ready = sorted((n for n in nodes if not waiting[n]), key=rank_key)
    keys = [rank_key(n) for n in ready]
    ranks: list[list] = [[] for _ in range(R)]

    def finish(node):
        for u in users.get(node, ()):
            waiting[u].discard(node)
            if not waiting[u]:
                k = rank_key(u)
                i = bisect.bisect(keys, k)
                keys.insert(i, k)
                ready.insert(i, u)

    def take(i):
        keys.pop(i)
        return ready.pop(i)

    while ready:
        node = take(0)
        op, s, m = node
        partner = None
        if overlap and op is Op.F:
            same = [i for i, x in enumerate(ready) if x[0] is Op.B and placement[x[1]] == placement[s]]
            if same and draw(st.integers(0, 3), label="overlap") == 3:
                partner = take(same[draw(st.integers(0, len(same) - 1)) if len(same) > 1 else 0])
        if partner is None:
            ranks[placement[s]].append(Action(op, s, m))
        else:
            ranks[placement[s]].append(Compound(CompoundKind.OVERLAP_F_B, (Action(*node), Action(*partner))))
            finish(partner)
        finish(node)
    return tuple(tuple(r) for r in ranks)


_BLOCK = 32
_SPREAD_BYTES = 4096
_SLOT = {Op.F: 0, Op.B: 1, Op.I: 1, Op.W: 2}


def _priorities(draw, n: int) -> list[int]:
    out: list[int] = []
    while len(out) < n:
        out.extend(draw(st.binary(min_size=_BLOCK, max_size=_BLOCK), label="priorities"))
    return out[:n]


def _stage_costs():
    one = st.integers(1, 3).map(float)
    return st.builds(lambda f, i, w: StageCost(F=f, B=i + w, I=i, W=w), one, one, one)


@st.composite
def _stage_memory(draw):
    act = draw(st.integers(1, 3))
    return StageMemory(act=float(act), weight=float(draw(st.integers(0, act))), out=float(draw(st.integers(0, 2))))


def lowered_programs(**options) -> st.SearchStrategy[Program]:
    """`programs(**options)` with communication inserted (`schedc.passes.lower`): comms-level programs
    that are sound and deadlock-free under every send semantics. Takes the options of `programs`.

    >>> import schedc
    >>> from hypothesis import given, settings
    >>> from schedc.strategies import lowered_programs
    >>> @settings(max_examples=20, deadline=None)
    ... @given(lowered_programs(min_ranks=2, max_ranks=3))
    ... def test_lowered_programs_are_comms_level(program):
    ...     assert program.level == "comms"
    ...     assert schedc.check(program, semantics="rendezvous").ok
    >>> test_lowered_programs_are_comms_level()
    """
    from .passes import lower
    return programs(**options).map(lower)


# ---------------------------------------------------------------------------------------------
# Broken and perturbed variants
# ---------------------------------------------------------------------------------------------
class Mutant(NamedTuple):
    """A broken variant of a program and a sentence saying what broke (`kind: details`)."""

    program: Program
    label: str

    @property
    def kind(self) -> str:
        return self.label.split(":", 1)[0]


def mutations(program: Program, *, kinds: Collection[str] = MUTATION_KINDS) -> st.SearchStrategy[Mutant]:
    """Broken variants of a sound program, as `Mutant(program, label)` pairs (tuples, so they unpack).

    Each kind is broken under every send semantics, so a checker must reject it:

    - `drop`: a step is removed (a missing action, or a message without its partner);
    - `duplicate`: a step is repeated somewhere on its rank;
    - `wrong-rank`: a compute step moves to a rank its stage is not placed on (needs 2+ ranks);
    - `bad-index`: a step's microbatch (or stage) is moved out of range;
    - `before-input`: a step moves to just before a step on its rank that makes what it needs
      (B before its F, W before its I, a consumer before its receive, a send before its producer);
    - `swap-messages`: two receives (or two sends) on one channel that carry different values trade
      places, so messages meet the wrong partner (needs a comms-level program).

    `kinds` chooses among them; kinds that do not apply to `program` are skipped (at least one must).
    Combine with `programs()` through `flatmap`:

    >>> import schedc
    >>> from hypothesis import given, settings
    >>> from schedc.strategies import mutations, programs
    >>> @settings(max_examples=20, deadline=None)
    ... @given(programs().flatmap(mutations))
    ... def test_checker_rejects_mutants(mutant):
    ...     broken, label = mutant
    ...     assert not schedc.check(broken).ok, label
    >>> test_checker_rejects_mutants()
    """
    program = _program("program", program)
    chosen = _choices("kinds", kinds, MUTATION_KINDS)
    candidates = {kind: _MUTATORS[kind][0](program) for kind in chosen}
    usable = tuple(kind for kind in chosen if candidates[kind])
    if not usable:
        raise InvalidArgument(f"none of the mutation kinds {chosen} applies to {program.name!r} "
                              f"({program.num_ranks} ranks, {program.num_actions} actions, {program.level} level)")
    return st.sampled_from(usable).flatmap(lambda kind: _MUTATORS[kind][1](program, candidates[kind]))


def _ranks(p: Program) -> list[list]:
    return [list(steps) for steps in p.ranks]


def _at(p: Program, rank: int, step: int) -> str:
    return f"{format_step(p.ranks[rank][step])} (rank {rank}, step {step})"


def _is_core(step) -> bool:
    """Compute or send/receive: steps whose loss or repetition breaks any program."""
    return all(a.op in COMPUTE or a.op.is_comm for a in step.parts)


def _core_steps(p: Program):
    return [(r, i) for r, i, step in p.steps() if _is_core(step)]


@st.composite
def _drop(draw, p: Program, where):
    r, i = draw(st.sampled_from(where))
    ranks = _ranks(p)
    ranks[r].pop(i)
    return Mutant(p.with_ranks(ranks), f"drop: removed {_at(p, r, i)}")


@st.composite
def _duplicate(draw, p: Program, where):
    r, i = draw(st.sampled_from(where))
    ranks = _ranks(p)
    j = draw(st.integers(0, len(ranks[r])), label="insert at")
    ranks[r].insert(j, ranks[r][i])
    return Mutant(p.with_ranks(ranks), f"duplicate: repeated {_at(p, r, i)} at step {j}")


def _compute_steps(p: Program):
    if p.num_ranks < 2:
        return []
    return [(r, i) for r, i, step in p.steps() if all(a.op in COMPUTE for a in step.parts)]


@st.composite
def _wrong_rank(draw, p: Program, where):
    r, i = draw(st.sampled_from(where))
    dest = draw(st.sampled_from([q for q in range(p.num_ranks) if q != r]), label="to rank")
    ranks = _ranks(p)
    step = ranks[r].pop(i)
    j = draw(st.integers(0, len(ranks[dest])), label="insert at")
    ranks[dest].insert(j, step)
    return Mutant(p.with_ranks(ranks), f"wrong-rank: moved {_at(p, r, i)} to rank {dest}, step {j}")


def _indexed_steps(p: Program):
    return [(r, i) for r, i, step in p.steps() if isinstance(step, Action) and (step.op in COMPUTE or step.op.is_comm)]


@st.composite
def _bad_index(draw, p: Program, where):
    r, i = draw(st.sampled_from(where))
    a = p.ranks[r][i]
    field = draw(st.sampled_from(["microbatch", "stage"]), label="field")
    if field == "microbatch":
        off_route = [m for m in range(p.num_microbatches) if not visits(stages_of(p), a.stage, m)]  # (routes)
        value = draw(st.sampled_from([p.num_microbatches, p.num_microbatches + 1, 10 * p.num_microbatches + 7]
                                     + off_route[:1]))
    else:
        value = draw(st.sampled_from([p.num_stages, p.num_stages + 1]))
    ranks = _ranks(p)
    ranks[r][i] = replace(a, **{field: value})
    return Mutant(p.with_ranks(ranks), f"bad-index: {_at(p, r, i)} became {format_step(ranks[r][i])} "
                  f"({p.num_stages} stages, {p.num_microbatches} microbatches)")


def _input_pairs(p: Program):
    """(rank, consumer step, producer step) with the producer earlier on the same rank."""
    from .rules.deps import delivers, needs, produces
    out = []
    S = stages_of(p)
    for r, steps in enumerate(p.ranks):
        made: dict[tuple[str, int, int], int] = {}
        for i, step in enumerate(steps):
            for a in step.parts:
                for v in needs(a, S):
                    j = made.get(v)
                    if j is not None and j != i:
                        out.append((r, i, j))
            for a in step.parts:
                value = produces(a) or delivers(a)
                if value is not None:
                    made.setdefault(value, i)
    return sorted(set(out))


@st.composite
def _before_input(draw, p: Program, where):
    r, i, j = draw(st.sampled_from(where))
    ranks = _ranks(p)
    step = ranks[r].pop(i)
    ranks[r].insert(j, step)
    return Mutant(p.with_ranks(ranks), f"before-input: moved {_at(p, r, i)} to step {j}, before "
                  f"{format_step(p.ranks[r][j])}, which makes what it needs")


def _message_swaps(p: Program):
    """Pairs of plain sends (or receives) on one channel with different payloads."""
    from .rules.deps import payload
    from .rules.semantics import RENDEZVOUS
    from .verify.channels import channels
    if p.level != "comms":
        return []
    try:
        chans = channels(p, RENDEZVOUS)  # (as every semantics but nccl pairs them: a group with a single operation)
    except (IndexError, KeyError):  # a send naming a stage outside the program
        return []
    out = []
    for table in (chans.sends, chans.recvs):
        for ends in table.values():
            plain = [e for e in ends if isinstance(p.ranks[e.rank][e.step], Action)]
            for x, e in enumerate(plain):
                for f in plain[x + 1:]:
                    if payload(e.action) != payload(f.action):
                        out.append((e.rank, e.step, f.step))
    return out


@st.composite
def _swap_messages(draw, p: Program, where):
    r, i, j = draw(st.sampled_from(where))
    ranks = _ranks(p)
    ranks[r][i], ranks[r][j] = ranks[r][j], ranks[r][i]
    return Mutant(p.with_ranks(ranks), f"swap-messages: swapped {_at(p, r, i)} and {format_step(p.ranks[r][j])} "
                  f"(step {j}), so messages on their channel meet the wrong partner")


_MUTATORS = {
    "drop": (_core_steps, _drop),
    "duplicate": (_core_steps, _duplicate),
    "wrong-rank": (_compute_steps, _wrong_rank),
    "bad-index": (_indexed_steps, _bad_index),
    "before-input": (_input_pairs, _before_input),
    "swap-messages": (_message_swaps, _swap_messages),
}


def reorderings(program: Program, *, max_moves: int = 3) -> st.SearchStrategy[Mutant]:
    """Variants of a program with 1..max_moves steps moved within their rank, as `Mutant`s whose label
    lists the moves. Unlike `mutations`, a variant may still be sound, or deadlock only under some
    send semantics: what differential tests need to compare two checkers' verdicts near the boundary.
    Every action stays on its rank, so only order, matching and deadlock can go wrong.

    >>> import schedc
    >>> from hypothesis import given, settings
    >>> from schedc.strategies import lowered_programs, reorderings
    >>> @settings(max_examples=20, deadline=None)
    ... @given(lowered_programs(min_ranks=2).flatmap(reorderings))
    ... def test_eager_sends_never_add_a_deadlock(variant):
    ...     program, label = variant
    ...     if schedc.check(program, semantics="rendezvous").ok:
    ...         assert schedc.check(program, semantics="eager").ok, label
    >>> test_eager_sends_never_add_a_deadlock()
    """
    program = _program("program", program)
    moves = _integer("max_moves", max_moves)
    return _reorderings(program, moves)


@st.composite
def _reorderings(draw, p: Program, max_moves: int):
    ranks = _ranks(p)
    movable = [r for r, steps in enumerate(ranks) if len(steps) >= 2]
    if not movable:
        return Mutant(p, "unchanged: no rank has two steps to reorder")
    said = []
    for _ in range(draw(st.integers(1, max_moves), label="moves")):
        r = draw(st.sampled_from(movable), label="rank")
        i = draw(st.integers(0, len(ranks[r]) - 1), label="from")
        step = ranks[r].pop(i)
        j = draw(st.integers(0, len(ranks[r])), label="to")
        ranks[r].insert(j, step)
        said.append(f"{format_step(step)} on rank {r} from step {i} to {j}")
    return Mutant(p.with_ranks(ranks), "moved: " + "; ".join(said))


# ---------------------------------------------------------------------------------------------
# Source text from the grammar
# ---------------------------------------------------------------------------------------------
_LITERALS = ("typical", "any")
_NAMES = ["r", "m", "i", "k", "v", "x", "P", "M", "V", "warm", "F", "B", "I", "W", "SEND_F", "RECV_F",
          "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRAD", "group", "overlap", "min", "max", "abs",
          "act", "weight", "out", "limit", "speed", "dispatch", "latency", "bandwidth", "prefer", "Q"]
_OPS = ["F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRAD"]


def _unreserved(word: str) -> str:
    """`word`, or `word_` if it is reserved: a name a binding may take (so a derived text parses)."""
    from .parse import reserved_words
    return word + "_" if word in reserved_words() else word


def _grammar():
    from .parse import parser
    return parser()


def _terminals(grammar, literals: str) -> dict:
    """Strategies for the grammar's terminals: keywords and punctuation followed by a blank (tokens
    need a separator), whitespace and comments between them; `typical` draws names and numbers from
    a small vocabulary so that texts get past name resolution, `any` each terminal's full pattern.
    A name being bound (NEW_NAME) is never a reserved word, which the parser refuses there."""
    def sep(strategy):
        return strategy.map(lambda s: s + " ")

    def raw(name):
        return st.from_regex(grammar.get_terminal(name).pattern.to_regexp(), fullmatch=True)

    out = {t.name: st.just(t.pattern.value + " ") for t in grammar.terminals if t.pattern.type == "str"}
    if literals == "any":
        out.update({name: sep(raw(name)) for name in ("NAME", "SCHED_NAME", "INT", "DECIMAL",
                                                       "COMPACT", "COMPOUND_TEXT")})
        out["NEW_NAME"] = sep(raw("NEW_NAME").map(_unreserved))
        # a lone "\r" ends a line (schedc/parse.py reads universal newlines), so inside a string or a
        # comment, which end at a line's end, it is no character of theirs
        out["STRING"] = sep(raw("STRING").map(lambda s: s.replace("\r", " ")))
        out["WS"] = raw("WS")
        out["COMMENT"] = raw("COMMENT").map(lambda s: s.replace("\r", "") + "\n")
        return out
    compact = st.builds(lambda s, op, m: f"{s}{op}{'' if op in ('UNSHARD', 'RESHARD', 'REDUCE_GRAD') else m}",
                        st.integers(0, 4), st.sampled_from(_OPS), st.integers(0, 5))
    compound = st.builds(lambda parts, kind: "(" + ";".join(parts) + ")" + kind,
                         st.lists(compact, min_size=1, max_size=3),
                         st.sampled_from(["OVERLAP_F_B", "GROUP", "OVERLAP_F_B", "GROUP", "FOO"]))
    out.update({
        "NAME": sep(st.sampled_from(_NAMES)),
        "NEW_NAME": sep(st.sampled_from([n for n in _NAMES if _unreserved(n) == n])),
        "SCHED_NAME": sep(st.sampled_from(["s", "1f1b", "my-sched", "x_2"])),
        "INT": sep(st.one_of(st.integers(0, 9).map(str), st.sampled_from(["12", "64", "4611686018427387904"]))),
        "DECIMAL": sep(st.sampled_from(["0.5", "1.0", "2.25", "10.0"])),
        "STRING": sep(st.sampled_from(['"M must be at least P"', '""', '"x \\"quoted\\" y"', '"\\u00e9t\\u00e9"'])),
        "COMPACT": sep(st.one_of(compact, raw("COMPACT"))),
        "COMPOUND_TEXT": sep(st.one_of(compound, raw("COMPOUND_TEXT"))),
        "WS": st.sampled_from([" ", "\n", "\t", "\r\n", "  \n  "]),
        "COMMENT": st.sampled_from(["# note\n", "#\n", "# { not code }\n"]),
    })
    return out


def sources(*, start: str = "start", literals: str = "typical") -> st.SearchStrategy[str]:
    """Text derived from schedc's grammar (`hypothesis.extra.lark` over `schedc.parse.parser()`).

    Every text parses (`start="start"`, the default, derives whole schedule files; no name being
    bound is a reserved word, which the parser refuses: docs/language.md); most fail to
    compile, which is the point: whatever the text, schedc may only raise a located SchedcError.
    `start` names another rule to derive a fragment (`"block"`: a rank body `{ ... }`, `"expr"`),
    for splicing into a fixed header. `literals="typical"` draws names and numbers from a small
    vocabulary, so texts get further into the compiler; `literals="any"` uses each terminal's full
    regular expression (any name, integer, string escape, and any character in strings and
    comments), with ASCII for the grammar's own keywords and punctuation.

    >>> from hypothesis import given, settings
    >>> from schedc.parse import parse
    >>> from schedc.strategies import sources
    >>> @settings(max_examples=10, deadline=None)
    ... @given(sources())
    ... def test_grammar_texts_parse(text):
    ...     parse(text, "generated.pp")
    >>> test_grammar_texts_parse()
    """
    from hypothesis.extra.lark import from_lark, get_terminal_names
    if not isinstance(start, str):
        raise InvalidArgument(f"start={start!r} must be the name of a grammar rule")
    if literals not in _LITERALS:
        raise InvalidArgument(f"literals={literals!r}; expected one of {_LITERALS}")
    grammar = _grammar()
    rules = sorted({r.origin.name for r in grammar.rules if not str(r.origin.name).startswith("_")})
    if start not in rules:
        raise InvalidArgument(f"start={start!r} is not a rule of the grammar; rules: {', '.join(rules)}")
    terminals, compiled, ignore = grammar.grammar.compile([start], ())
    used = get_terminal_names(terminals, compiled, ignore)
    explicit = {k: v for k, v in _terminals(grammar, literals).items() if k in used}
    alphabet = st.characters(min_codepoint=1, max_codepoint=126) if literals == "any" else None
    if alphabet is None:
        return from_lark(grammar, start=start, explicit=explicit)
    return from_lark(grammar, start=start, explicit=explicit, alphabet=alphabet)
