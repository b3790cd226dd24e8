"""Per-rank action lists held as columns: an op code, a stage and a microbatch per step.

A PyTorch CSV and a lowered program can hold millions of actions; as columns they take a few bytes
each, the checks' fast path (schedc/verify/fast.py) reads them as they are, and an `Action` is made
only when something asks for a rank's steps (a report, a picture, the runtime). `Columns` stands for
the tuple of per-rank step tuples: indexing, iterating, `len`, `==` and `hash` all see those tuples.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from itertools import chain
from operator import attrgetter

from .ir import COMM, Compound, Op, Step, unchecked_action
from .lazy_numpy import np

OPS = tuple(Op)  # an action's op code is its index here
CODE = {op: i for i, op in enumerate(OPS)}
COMM_CODES = frozenset(CODE[op] for op in COMM)
COMPOUND = -1  # op code of a step kept whole from another program (a compound): see `Columns.kept`
NO_MICROBATCH = -1  # microbatch of UNSHARD, RESHARD, REDUCE_GRAD


@lru_cache(maxsize=1)
def _is_comm():
    """By op code: a send or receive? (COMPOUND, -1, is the last: no)"""
    table = np.zeros(len(OPS) + 1, dtype=bool)
    table[sorted(COMM_CODES)] = True
    return table


class Columns(Sequence):
    """Steps rank by rank: `op[i]`, `stage[i]`, `microbatch[i]` (integer numpy arrays, made read-only)
    of step i, rank r's steps being `starts[r]` to `starts[r + 1]`. `spans[i]` is step i's span (or
    `spans` is None); `kept[i]`, when `kept` is given, is a step that exists already (taken as it is
    from another program: a compound always, op code COMPOUND) or None (made from the columns)."""

    __slots__ = ("op", "stage", "microbatch", "starts", "spans", "kept", "_rows", "_counts")

    def __init__(self, op, stage, microbatch, starts, spans=None, kept=None):
        self.op, self.stage, self.microbatch = (_frozen(a) for a in (op, stage, microbatch))
        self.starts = list(starts)
        self.spans, self.kept = spans, kept
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
        """Whether any step is a compound (then the columns do not list every action)."""
        return self._count()[2]

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
            compound = np.flatnonzero(self.op == COMPOUND).tolist()
            parts = [a for i in compound for a in self.kept[i].parts]
            comms = bool(_is_comm()[self.op].any()) or any(a.op in COMM for a in parts)
            self._counts = (len(self.op) - len(compound) + len(parts), "comms" if comms else "compute", bool(compound))
        return self._counts

    def _make(self, lo: int, hi: int) -> tuple[Step, ...]:
        """Steps lo..hi-1, made from the columns (or taken from `kept`)."""
        ops, stages, mbs = (a[lo:hi].tolist() for a in (self.op, self.stage, self.microbatch))
        spans = self.spans[lo:hi] if self.spans is not None else [None] * (hi - lo)
        kept = self.kept[lo:hi] if self.kept is not None else [None] * (hi - lo)
        return tuple(k if k is not None else unchecked_action(OPS[o], s, None if m < 0 else m, sp)
                     for o, s, m, sp, k in zip(ops, stages, mbs, spans, kept))


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


def as_columns(program) -> Columns:
    """The program's steps as columns: held so already, or read from its actions, which the columns
    keep (`kept`), so the steps they stand for are the very same objects."""
    held = columns_of(program)
    if held is not None:
        return held
    steps = list(chain.from_iterable(program.ranks))
    if Compound in set(map(type, steps)):
        single = [type(st) is not Compound for st in steps]
        op = [CODE[st.op] if one else COMPOUND for st, one in zip(steps, single)]
        stage = [st.stage if one else 0 for st, one in zip(steps, single)]
        mb = [st.microbatch if one else None for st, one in zip(steps, single)]
    else:
        op = list(map(CODE.__getitem__, map(attrgetter("op"), steps)))
        stage, mb = (list(map(attrgetter(name), steps)) for name in ("stage", "microbatch"))
    starts = np.cumsum([0] + [len(row) for row in program.ranks]).tolist()
    mb = _microbatches(mb)
    return Columns(np.asarray(op, dtype=np.int8), np.asarray(stage, dtype=np.int64), mb, starts,
                   objects(list(map(attrgetter("span"), steps))), objects(steps))


def _microbatches(values: list) -> np.ndarray:
    """Microbatch indices as integers, None as NO_MICROBATCH: read as floats (None is nan), which
    is exact below 2^53; beyond, one by one."""
    floats = np.array(values, dtype=np.float64) if values else np.zeros(0)
    if np.nanmax(np.abs(floats), initial=0) < 2 ** 53:
        return np.where(np.isnan(floats), NO_MICROBATCH, floats).astype(np.int64)
    return np.asarray([NO_MICROBATCH if m is None else m for m in values], dtype=np.int64)


def has_op(program, op: Op) -> bool:
    """Whether any action of the program is `op`, read from its columns when it holds them."""
    held = columns_of(program)
    if held is None:
        return any(a.op is op for row in program.ranks for st in row for a in st.parts)
    return bool((held.op == CODE[op]).any()) or (held.compounds and any(
        a.op is op for i in np.flatnonzero(held.op == COMPOUND).tolist() for a in held.kept[i].parts))


def held_as_columns(program):
    """The program with its steps held as columns (`as_columns`): a pass that changes only how
    the steps are held, for the passes after it to read them as arrays."""
    return program if columns_of(program) is not None else replace(program, ranks=as_columns(program))


def objects(values) -> np.ndarray:
    """The values as a numpy array of objects, each kept whole (never unpacked into a deeper array)."""
    if isinstance(values, np.ndarray) and values.dtype == object:
        return values
    values = values if hasattr(values, "__len__") else list(values)
    return np.fromiter(values, dtype=object, count=len(values))


__all__ = ["CODE", "COMPOUND", "Columns", "NO_MICROBATCH", "OPS", "as_columns", "columns_of", "has_op", "held_as_columns", "objects"]
