"""Per-rank action lists held as columns: an op code, a stage and a microbatch per step.

A PyTorch CSV and a lowered program can hold millions of actions; as columns they take a few bytes
each, the checks' fast path (schedc/verify/fast.py) reads them as they are, and an `Action` is made
only when something asks for a rank's steps (a report, a picture, the runtime). A compound step
(DualPipe's overlapped pair, a group) has its parts in columns of their own (`Parts`). `Columns`
stands for the tuple of per-rank step tuples: indexing, iterating, `len`, `==` and `hash` all see those tuples.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from itertools import accumulate, chain
from operator import attrgetter
from typing import cast

from .collection import PAUSED
from .ir import COMM, Compound, CompoundKind, Op, Program, Step, unchecked_action
from .lazy_numpy import np

OPS = tuple(Op)  # an action's op code is its index here
CODE = {op: i for i, op in enumerate(OPS)}
COMM_CODES = frozenset(CODE[op] for op in COMM)
COMPOUND = -1  # op code of a compound step (its parts: `Columns.parts`; stage 0, microbatch NO_MICROBATCH)
NO_MICROBATCH = -1  # microbatch of UNSHARD, RESHARD, REDUCE_GRAD
KINDS = tuple(CompoundKind)  # a compound's kind code is its index here
KIND_CODE = {kind: i for i, kind in enumerate(KINDS)}


@lru_cache(maxsize=1)
def _is_comm():
    """By op code: a send or receive? (COMPOUND, -1, is the last: no)"""
    table = np.zeros(len(OPS) + 1, dtype=bool)
    table[sorted(COMM_CODES)] = True
    return table


class Parts:
    """The parts of the compound steps of some columns, as columns of their own: compound c is step
    `step[c]` of the columns (increasing), of kind `KINDS[kind[c]]`, and its parts, in order, are
    entries `starts[c]` to `starts[c + 1] - 1` of `op`, `stage` and `microbatch` (op codes, stages,
    microbatches or NO_MICROBATCH). `spans`, when given, holds each part's span (read from compound
    objects); a part made from the columns has its step's span."""

    __slots__ = ("step", "kind", "starts", "op", "stage", "microbatch", "spans")

    def __init__(self, step, kind, starts, op, stage, microbatch, spans=None):
        self.step, self.kind, self.starts, self.op, self.stage, self.microbatch = (
            _frozen(np.asarray(a, dtype=t)) for a, t in zip((step, kind, starts, op, stage, microbatch),
                                                           (np.int64, np.int8, np.int64, np.int8, np.int64, np.int64)))
        self.spans = spans

    @classmethod
    def of(cls, steps: Sequence[Compound], at) -> "Parts":
        """The parts of the compound objects `steps`, which are steps `at` of the columns."""
        parts = list(chain.from_iterable(map(_PARTS_OF, steps)))
        n, c = len(parts), len(steps)
        return cls(at, np.fromiter(map(KIND_CODE.__getitem__, map(_KIND_OF, steps)), dtype=np.int8, count=c),
                   list(accumulate(map(len, map(_PARTS_OF, steps)), initial=0)),
                   np.fromiter(map(CODE.__getitem__, map(_OP_OF, parts)), dtype=np.int8, count=n),
                   np.fromiter(map(_STAGE_OF, parts), dtype=np.int64, count=n),
                   _microbatches(list(map(_MB_OF, parts))), objects(list(map(_SPAN_OF, parts))))

    def __len__(self) -> int:
        return len(self.step)

    @property
    def sizes(self) -> np.ndarray:
        """Each compound's number of parts."""
        return np.diff(self.starts)

    def owner(self) -> np.ndarray:
        """Each part's compound (its index here)."""
        return np.repeat(np.arange(len(self.step), dtype=np.int64), self.sizes)

    def renumbered(self, step) -> "Parts":
        """These parts, compound c now at step `step[c]` (in the same order)."""
        return Parts(step, self.kind, self.starts, self.op, self.stage, self.microbatch, self.spans)

    def compound(self, c: int, span) -> Compound:
        """Compound c as an object with the step's `span`, each part with its own (`spans`) or that one."""
        lo, hi = int(self.starts[c]), int(self.starts[c + 1])
        ops, stages, mbs = (a[lo:hi].tolist() for a in (self.op, self.stage, self.microbatch))
        spans = self.spans[lo:hi].tolist() if self.spans is not None else [span] * (hi - lo)
        return Compound(KINDS[int(self.kind[c])], tuple(unchecked_action(OPS[o], s, None if m < 0 else m, sp)
                                                       for o, s, m, sp in zip(ops, stages, mbs, spans)), span)


class Columns(Sequence):
    """Steps rank by rank: `op[i]`, `stage[i]`, `microbatch[i]` (integer numpy arrays, made read-only)
    of step i, rank r's steps being `starts[r]` to `starts[r + 1]`. `spans[i]` is step i's span (or
    `spans` is None); `kept[i]`, when `kept` is given, is a step that exists already (taken as it is
    from another program) or None (made from the columns). A compound step has op code COMPOUND and
    its parts in `parts` (given, or read from the compounds `kept` holds)."""

    __slots__ = ("op", "stage", "microbatch", "starts", "spans", "kept", "_parts", "_rows", "_counts")

    def __init__(self, op, stage, microbatch, starts, spans=None, kept=None, parts: Parts | None = None):
        self.op, self.stage, self.microbatch = (_frozen(a) for a in (op, stage, microbatch))
        self.starts = list(starts)
        self.spans, self.kept = spans, kept
        self._parts = parts
        self._rows: list[tuple[Step, ...] | None] = [None] * (len(self.starts) - 1)
        self._counts: tuple[int, str, bool] | None = None

    # ---- the tuple of per-rank tuples it stands for ----
    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, r):
        if isinstance(r, slice):
            return tuple(self[i] for i in range(*r.indices(len(self))))
        r = range(len(self._rows))[r]  # negative indices, and IndexError past the end
        row = self._rows[r]
        if row is None:
            row = self._rows[r] = self._make(self.starts[r], self.starts[r + 1])
        return row

    def __iter__(self):
        return (self[r] for r in range(len(self)))

    def __eq__(self, other):
        if isinstance(other, (Columns, tuple)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self):  # pickled as the tuples it stands for (a pickle is read without schedc's numpy arrays)
        return (tuple, (tuple(self),))

    # ---- without making the actions ----
    def step(self, rank: int, index: int) -> Step:
        """Step `index` of `rank`, made alone (the rank's other steps are not)."""
        row = self._rows[rank]
        if row is not None:
            return row[index]
        i = range(self.starts[rank], self.starts[rank + 1])[index]
        if self.kept is not None and self.kept[i] is not None:
            return self.kept[i]
        if self.op[i] == COMPOUND:
            return self._compound(i)
        m = int(self.microbatch[i])
        return unchecked_action(OPS[int(self.op[i])], int(self.stage[i]), None if m < 0 else m,
                                None if self.spans is None else self.spans[i])

    def made(self, rank: int) -> tuple[Step, ...]:
        """Rank `rank`'s steps, made afresh and not kept (for a pass over a big program that needs
        each rank's actions once: the code generator)."""
        row = self._rows[rank]
        return row if row is not None else self._make(self.starts[rank], self.starts[rank + 1])

    @property
    def compounds(self) -> bool:
        """Whether any step is a compound (its parts are in `parts`)."""
        return self._count()[2]

    @property
    def parts(self) -> Parts:
        """The parts of the compound steps (none when there is no compound)."""
        if self._parts is None:
            at = np.flatnonzero(self.op == COMPOUND)
            self._parts = Parts.of(self.kept[at].tolist() if len(at) else [], at)
        return self._parts

    def opened(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every action, a compound's parts in its place in order: (op code, stage, microbatch,
        step), `step` the index of the step each belongs to (the parts of a compound share theirs)."""
        n = len(self.op)
        parts = self.parts
        if not len(parts):
            return self.op, self.stage, self.microbatch, np.arange(n, dtype=np.int64)
        count = np.ones(n, dtype=np.int64)
        count[parts.step] = parts.sizes
        step = np.repeat(np.arange(n, dtype=np.int64), count)
        slots = np.flatnonzero(self.op[step] == COMPOUND)  # (compound by compound, its parts in order)
        op, stage, mb = self.op[step], self.stage[step].astype(np.int64), self.microbatch[step].astype(np.int64)
        op[slots], stage[slots], mb[slots] = parts.op, parts.stage, parts.microbatch
        return op, stage, mb, step

    @property
    def num_actions(self) -> int:
        return self._count()[0]

    @property
    def level(self) -> str:
        """`comms` if any step is (or, in a compound, has) a send or receive, else `compute`."""
        return self._count()[1]

    def _count(self) -> tuple[int, str, bool]:
        """(actions, level, whether any step is a compound), found once."""
        if self._counts is None:
            compound = bool((self.op == COMPOUND).any())
            parts = self.parts if compound else None
            count = len(self.op) if parts is None else len(self.op) - len(parts) + len(parts.op)
            comms = bool(_is_comm()[self.op].any()) or (parts is not None and bool(_is_comm()[parts.op].any()))
            self._counts = (count, "comms" if comms else "compute", compound)
        return self._counts

    def _make(self, lo: int, hi: int) -> tuple[Step, ...]:
        """Steps lo..hi-1, made from the columns (or taken from `kept`)."""
        ops, stages, mbs = (a[lo:hi].tolist() for a in (self.op, self.stage, self.microbatch))
        spans = self.spans[lo:hi] if self.spans is not None else [None] * (hi - lo)
        kept = list(self.kept[lo:hi]) if self.kept is not None else [None] * (hi - lo)
        if COMPOUND in ops:  # compounds not kept: made from their parts
            for k in (k for k, o in enumerate(ops) if o == COMPOUND and kept[k] is None):
                kept[k] = self._compound(lo + k, spans[k])
        return tuple(k if k is not None else unchecked_action(OPS[o], s, None if m < 0 else m, sp)
                     for o, s, m, sp, k in zip(ops, stages, mbs, spans, kept))

    def _compound(self, i: int, span=None) -> Compound:
        """Compound step i, made from its parts (with `span`, else its own)."""
        if span is None and self.spans is not None:
            span = self.spans[i]
        parts = self.parts
        return parts.compound(int(np.searchsorted(parts.step, i)), span)


def _frozen(values) -> np.ndarray:
    """A read-only view of the values: columns never change once made (an array that is read-only
    already, as a file's records are, is taken as it is)."""
    if isinstance(values, np.ndarray) and not values.flags.writeable:
        return values
    out = np.asarray(values).view()
    out.flags.writeable = False
    return out


def columns_of(program) -> Columns | None:
    """The program's steps as columns if it holds them so (a CSV read, a lowering), else None."""
    return program.ranks if type(program.ranks) is Columns else None  # (an ABC's isinstance is slow)


def with_columns(program: Program, cols: Columns) -> Program:
    """The program with its steps held as `cols`. `Program.ranks` is typed as the tuple of per-rank
    step tuples, which columns stand for (indexing, iterating, `len`, `==`, `hash`): the one place
    a program is given columns for them."""
    return replace(program, ranks=cast("tuple[tuple[Step, ...], ...]", cols))


def as_columns(program) -> Columns:
    """The program's steps as columns: held so already, or read from its actions, which the columns
    keep (`kept`), so the steps they stand for are the very same objects."""
    held = columns_of(program)
    if held is not None:
        return held
    with PAUSED:  # (lists of the program's millions of objects: the collector would walk them as they are made)
        return _read(program)


def _read(program) -> Columns:
    """`as_columns` of a program held as actions."""
    steps = list(chain.from_iterable(program.ranks))
    parts, singles = None, steps
    if Compound in set(map(type, steps)):
        at = [i for i, st in enumerate(steps) if st.__class__ is Compound]
        parts = Parts.of([steps[i] for i in at], at)
        singles = steps.copy()
        for i in at:  # (read as an F here, then marked a compound)
            singles[i] = _STAND_IN
    op = np.fromiter(map(CODE.__getitem__, map(_OP_OF, singles)), dtype=np.int8, count=len(singles))
    stage = np.fromiter(map(_STAGE_OF, singles), dtype=np.int64, count=len(singles))
    mb = _microbatches(list(map(_MB_OF, singles)))
    if parts is not None:
        op[parts.step], stage[parts.step], mb[parts.step] = COMPOUND, 0, NO_MICROBATCH
    starts = list(accumulate(map(len, program.ranks), initial=0))
    return Columns(op, stage, mb, starts, objects(list(map(_SPAN_OF, steps))), objects(steps), parts)


_OP_OF, _STAGE_OF, _MB_OF, _SPAN_OF, _PARTS_OF, _KIND_OF = (
    attrgetter(name) for name in ("op", "stage", "microbatch", "span", "parts", "kind"))
_STAND_IN = unchecked_action(Op.F, 0, 0)


def _microbatches(values: list) -> np.ndarray:
    """Microbatch indices as integers, None as NO_MICROBATCH: read as they are when none is None
    (a compound's parts, most programs' steps), else as floats (None is nan), which is exact below
    2^53; beyond, one by one."""
    if None not in values:
        return np.asarray(values, dtype=np.int64) if values else np.zeros(0, dtype=np.int64)
    floats = np.array(values, dtype=np.float64)
    if np.nanmax(np.abs(floats), initial=0) < 2 ** 53:
        return np.where(np.isnan(floats), NO_MICROBATCH, floats).astype(np.int64)
    return np.asarray([NO_MICROBATCH if m is None else m for m in values], dtype=np.int64)


def has_op(program, op: Op) -> bool:
    """Whether any action of the program is `op`, read from its columns when it holds them."""
    held = columns_of(program)
    if held is None:
        return any(a.op is op for row in program.ranks for st in row for a in st.parts)
    return bool((held.op == CODE[op]).any()) or (held.compounds and bool((held.parts.op == CODE[op]).any()))


def held_as_columns(program):
    """The program with its steps held as columns (`as_columns`): a pass that changes only how
    the steps are held, for the passes after it to read them as arrays."""
    return program if columns_of(program) is not None else with_columns(program, as_columns(program))


def objects(values) -> np.ndarray:
    """The values as a numpy array of objects, each kept whole (never unpacked into a deeper array)."""
    if isinstance(values, np.ndarray) and values.dtype == object:
        return values
    values = values if hasattr(values, "__len__") else list(values)
    return np.fromiter(values, dtype=object, count=len(values))


__all__ = ["CODE", "COMPOUND", "Columns", "KINDS", "KIND_CODE", "NO_MICROBATCH", "OPS", "Parts", "as_columns", "columns_of", "has_op", "held_as_columns", "objects"]
