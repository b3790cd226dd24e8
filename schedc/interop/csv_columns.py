"""Read a PyTorch schedule CSV straight into columns (schedc/columns.py), a whole file at a time.

The common file (plain ASCII cells like `2F0`, `1SEND_F3` and `(0F3;7B1)OVERLAP_F_B`, commas, `\\n` or
`\\r\\n` rows) is parsed with array arithmetic over its bytes; anything else (quotes, spaces, the legacy
notation, a cell that does not parse, sizes over the limits) is read by the cell-by-cell reader of
torch_csv.py, which explains what is wrong. Both give the same program. A large file whose other
cells read is not read again cell by cell: the array reader names the cells and rows it could not
read (`Unread`), and the cell-by-cell reader reads those alone.
"""
from __future__ import annotations

import csv
import struct
from bisect import bisect_right
from functools import lru_cache
from itertools import accumulate, chain
from typing import cast

import numpy as np

from .. import ir
from ..columns import CODE, COMPOUND, KINDS, NO_MICROBATCH, Columns, Parts
from ..ir import MAX_INDEX_DIGITS, Annotations, Op, Program, StageCost, StageMemory, Step, placed
from ..span import Source, Span

COMMA, NEWLINE, CR = ord(","), ord("\n"), ord("\r")
MAX_LETTERS = 12  # an op name packs into an int64 at 5 bits a letter (REDUCE_GRAD has 11)
CHUNK = 1 << 20  # bytes parsed at a time (whole rows), so the work arrays stay small for big files
_DIGIT, _LETTER, _SEP = (np.zeros(256, dtype=bool) for _ in range(3))  # byte classes
_DIGIT[np.frombuffer(b"0123456789", np.uint8)] = True
_LETTER[np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ_", np.uint8)] = True
_SEP[[COMMA, NEWLINE]] = True


def _pack(name: str) -> int:
    """An op name as one integer: its letters (A-Z as 1-26, `_` as 27) in base 32."""
    value = 0
    for ch in name:
        value = value * 32 + (27 if ch == "_" else ord(ch) - 64)
    return value


_OP_KEYS = {_pack(op.value): op for op in Op}
_KEYS = np.array(sorted(_OP_KEYS), dtype=np.int64)
_KEY_CODE = np.array([CODE[_OP_KEYS[k]] for k in _KEYS.tolist()], dtype=np.int8)
_KEY_HAS_MB = np.array([_OP_KEYS[k].has_microbatch for k in _KEYS.tolist()], dtype=bool)


class CsvSpans:
    """The span of each action read from a CSV (its row, column, width and step: integer arrays,
    or lists for a small file), made when asked for. A small file's are found from its lines only
    then (`lines`: its rows of plain cells; `starts`: where each row's actions begin), as a check
    names few actions or none."""

    __slots__ = ("source", "_where", "_lines", "_starts")

    def __init__(self, source: Source, row=None, column=None, width=None, step=None, *, lines=None, starts=None):
        self.source, self._lines, self._starts = source, lines, starts
        self._where = None if lines is not None else (row, column, width, step)

    @property
    def where(self) -> tuple:
        """(row, column, width, step) of every action."""
        if self._where is None:
            self._where = _places(self._lines)
        return self._where

    @property
    def row(self):
        return self.where[0]

    @property
    def column(self):
        return self.where[1]

    @property
    def width(self):
        return self.where[2]

    @property
    def step(self):
        return self.where[3]

    def take(self, index) -> "CsvSpans":
        """The spans of the actions at `index` (an array of positions)."""
        return CsvSpans(self.source, *(np.asarray(a)[index] for a in self.where))

    def __getitem__(self, i):
        if self._where is None and not isinstance(i, slice):  # one action's: found in its row alone
            starts = self._starts
            if not 0 <= i < starts[-1]:
                i = range(starts[-1])[i]  # (a negative index, or IndexError)
            r = bisect_right(starts, i) - 1
            column, width, step = _place(self._lines[r], i - starts[r])
            return Span(self.source, r + 1, column, r + 1, column + width, r, step)
        if isinstance(i, slice):
            rows, cols, widths, steps = (_listed(a[i]) for a in self.where)
            return [Span(self.source, r + 1, c, r + 1, c + w, r, s) for r, c, w, s in zip(rows, cols, widths, steps)]
        row, column, width, step = self.where
        r, c = int(row[i]), int(column[i])
        return Span(self.source, r + 1, c, r + 1, c + int(width[i]), r, int(step[i]))


def _listed(values) -> list:
    return values.tolist() if isinstance(values, np.ndarray) else values


class Unread:
    """What the array reader could not read of a file whose other cells it read: `rows`, the rows
    holding bytes no plain cell has (quotes, spaces, lower case, a lone "\\r", not ASCII) or a cell
    longer than the csv module takes, to be read whole; `cells`, (row, column, width, step) of each other cell that is not an action as
    the arrays read them, in file order. The cell-by-cell reader reads these alone."""

    __slots__ = ("rows", "cells")

    def __init__(self, rows: list[int], cells: tuple[list[int], list[int], list[int], list[int]]):
        self.rows, self.cells = rows, cells

    def by_row(self) -> list[tuple[int, list[tuple[int, int, int]] | None]]:
        """(row, its cells' (column, width, step), or None for a row read whole), rows in order."""
        cells: dict[int, list[tuple[int, int, int]]] = {}
        whole = set(self.rows)
        for r, column, width, step in zip(*self.cells):
            if r not in whole:
                cells.setdefault(r, []).append((column, width, step))
        return sorted([(r, None) for r in whole] + list(cells.items()))  # type: ignore[arg-type]


def read_columns(text: str, name: str, program_name: str, limits: tuple[int, int, int]) -> Program | Unread | None:
    """The program in a CSV's `text`; None when the cell-by-cell reader must read it, or `Unread`
    (a larger file) when it must read only some rows and cells. `limits`: the most ranks, stages
    and microbatches (beyond them, that reader says so). A small file is read cell by cell in plain
    Python (`_read_small`), a larger one with array arithmetic over its bytes (`_read_arrays`): the
    same program either way."""
    if len(text) <= SMALL_BYTES:
        return _read_small(text, name, program_name, limits)
    return _read_arrays(text, name, program_name, limits, locate=True)


def _read_arrays(text: str, name: str, program_name: str, limits: tuple[int, int, int],  # noqa: C901
                 *, locate: bool = False) -> Program | Unread | None:
    """The program in the text, or None for the cell-by-cell reader; `locate`: `Unread` for it
    instead, when every cell but some it names is read."""
    b = _bytes(text)
    if b is None:
        return None
    apart: list[int] = []
    plain = _PLAIN[b]
    if not plain.all():  # quotes, spaces, lower case: those rows are the cell-by-cell reader's
        if not locate:
            return None
        apart, b = _set_apart(b, plain)
    compounds = None
    marks = np.flatnonzero(_PAREN[b])
    if len(marks):  # compound cells: read apart (`_compounds`), each a plain placeholder here
        ends = np.flatnonzero(_SEP[b])
        b, shaped = _regular(b, ends, marks)
        if len(shaped[0]):
            compounds = _compounds(b, ends, shaped)
            b = compounds.placeholders
    row, column, width, step, op, stage, mb, bad = _read_cells(b)
    if compounds is not None:
        column, width = compounds.column, compounds.width
        bad[compounds.cells[compounds.bad]] = True
        over = width > csv.field_size_limit()  # (a compound's cell: torch's csv.reader refuses it)
        if over.any():
            apart = sorted(set(apart) | set(row[over].tolist()))
    if apart or bad.any():
        if not locate:
            return None
        return Unread(apart, tuple(a[bad].tolist() for a in (row, column, width, step)))  # type: ignore[arg-type]
    parts, held = None, [(stage, row)]
    if compounds is not None:
        op[compounds.cells], stage[compounds.cells], mb[compounds.cells] = COMPOUND, 0, NO_MICROBATCH
        parts = compounds.parts
        plain = op != COMPOUND
        held = [(stage[plain], row[plain]), (parts.stage, row[np.repeat(parts.step, parts.sizes)])]
    last_mb = max(int(m.max(initial=NO_MICROBATCH)) for m in (mb, *([] if parts is None else [parts.microbatch])))
    num_ranks = int(np.count_nonzero(b == NEWLINE))
    max_ranks, max_stages, max_mbs = limits
    top = max(int(s.max(initial=-1)) for s, _ in held)
    if not len(stage) or num_ranks > max_ranks or top >= max_stages or last_mb >= max_mbs:
        return None
    return _program(text, name, program_name, num_ranks, (op, stage, mb, parts), held, last_mb,
                    (row, column, width, step))


def _bytes(text: str) -> np.ndarray | None:
    """The text's bytes, rows ended in "\\n" (the "\\r" of a "\\r\\n", or at the very end, dropped; any
    other stays) and every character that is not ASCII a `?` (one byte each: columns stay); None
    for an empty text."""
    try:
        data = text.encode("ascii")
    except UnicodeEncodeError:
        data = text.encode("ascii", "replace")
    b = np.frombuffer(data, dtype=np.uint8)
    cr = np.flatnonzero(b == CR)
    if len(cr):  # a "\r" ends a row (right before "\n", or at the end of the file), or is the row's error
        b = np.delete(b, cr[np.append(b, NEWLINE)[cr + 1] == NEWLINE])
    if not len(b):
        return None
    return b if b[-1] == NEWLINE else np.append(b, np.uint8(NEWLINE))


def _set_apart(b: np.ndarray, plain: np.ndarray) -> tuple[list[int], np.ndarray]:
    """The rows holding a byte that is not `plain`, and the bytes with those rows emptied (their
    "\\n" kept: the other rows keep their numbers and columns)."""
    newlines = np.flatnonzero(b == NEWLINE)
    rows = np.unique(np.searchsorted(newlines, np.flatnonzero(~plain)))
    starts = np.concatenate([[0], newlines[:-1] + 1])
    keep = np.ones(len(b), dtype=bool)
    keep[_ranges(starts[rows], newlines[rows])] = False
    return rows.tolist(), b[keep]


def _read_cells(b: np.ndarray):
    """(row, column, width, step, op code, stage, microbatch, bad) of every nonempty cell of the
    bytes, a stretch of rows at a time; `bad`: the cell is not a plain action (its numbers are
    then of no use)."""
    parts = []
    for lo, hi, first_row in _chunks(b):
        part = _cells(b[lo:hi])
        part[0] += first_row
        parts.append(part)
    row, column, width, step, stage, key, mb, mb_digits, bad = (np.concatenate(p) for p in zip(*parts))
    at = np.searchsorted(_KEYS, key).clip(0, len(_KEYS) - 1)
    bad |= _KEYS[at] != key  # not an op name (BW, a typo): the cell-by-cell reader explains
    bad |= _KEY_HAS_MB[at] != mb_digits  # a microbatch missing or extra
    return row, column, width, step, _KEY_CODE[at], stage, np.where(mb_digits, mb, NO_MICROBATCH), bad


def _program(text: str, name: str, program_name: str, num_ranks: int, steps, held, last_mb: int, where) -> Program:
    """The program of the cells read: `steps`, op codes, stages and microbatches (NO_MICROBATCH: none)
    as arrays and the compounds' parts, and each cell's (row, column, width, step); `held`, the stage and
    row of every action, in groups in row order (plain cells, compounds' parts): a stage runs on the
    rank of its first cell."""
    op, stage, microbatch, parts = steps
    row = np.asarray(where[0])
    num_stages = max(int(s.max(initial=-1)) for s, _ in held) + 1
    placement = list(placed("loop", num_stages, num_ranks))
    first_row = np.full(num_stages, num_ranks, dtype=np.int64)
    for stages_of, rows_of in held:  # every action runs on the rank of its stage
        stages, first = np.unique(stages_of, return_index=True)
        first_row[stages] = np.minimum(first_row[stages], rows_of[first])
    for s in np.flatnonzero(first_row < num_ranks).tolist():
        placement[s] = int(first_row[s])
    ranks = Columns(op, stage, microbatch, np.searchsorted(row, np.arange(num_ranks + 1)),
                    CsvSpans(Source(name, text), *where), parts=parts)
    return Program(name=program_name, num_ranks=num_ranks, num_stages=num_stages,
                   num_microbatches=max(last_mb + 1, 1), placement=tuple(placement), ranks=_as_ranks(ranks),
                   source=name)


OPEN, CLOSE, SEMICOLON = ord("("), ord(")"), ord(";")
_PAREN = np.zeros(256, dtype=bool)
_PAREN[[OPEN, CLOSE, SEMICOLON]] = True
_PLAIN = _DIGIT | _LETTER | _SEP | _PAREN  # the bytes of the file's plain cells
_KIND_KEYS = {_pack(kind.value): i for i, kind in enumerate(KINDS)}
_KIND_KEY_LIST = np.array(sorted(_KIND_KEYS), dtype=np.int64)
_KIND_KEY_CODE = np.array([_KIND_KEYS[k] for k in sorted(_KIND_KEYS)], dtype=np.int8)


class _Compounds:
    """The compound cells of a file's bytes: `placeholders`, the bytes with each compound cell
    written `0F0` (so the plain reader reads the rest), `cells` (their places among the nonempty
    cells), `column` and `width` of every nonempty cell as the file has them, `parts`, and `bad`:
    each compound that is not one (the cell-by-cell reader says why)."""

    __slots__ = ("placeholders", "cells", "column", "width", "parts", "bad")
    placeholders: np.ndarray
    cells: np.ndarray
    column: np.ndarray
    width: np.ndarray
    parts: Parts
    bad: np.ndarray


def _regular(b: np.ndarray, ends: np.ndarray, marks: np.ndarray):
    """The bytes (`ends`: their separators; `marks`: where their brackets and `;`s are) with each
    cell that holds a bracket or a `;` but is not shaped `(...)KIND` (one `(` first, one `)`, every
    `;` between them) written as `X`s, the same width: a cell the plain reader finds bad; and the
    `(`, `)` and `;` left, in order."""
    what = b[marks]
    opens, closes, semis = (marks[what == c] for c in (OPEN, CLOSE, SEMICOLON))
    if _shaped(ends, opens, closes, semis):  # (the common file: at the cost of these checks alone)
        return b, (opens, closes, semis)
    starts = np.concatenate([[0], ends[:-1] + 1])
    cell = np.searchsorted(ends, marks)  # (a byte's cell: the first separator after it ends it)
    count = (np.bincount(cell[what == c], minlength=len(ends)) for c in (OPEN, CLOSE))
    close_at = np.zeros(len(ends), dtype=np.int64)
    close_at[cell[what == CLOSE]] = closes
    shaped = (next(count) == 1) & (next(count) == 1) & (b[starts] == OPEN)
    semi = what == SEMICOLON
    shaped[cell[semi][semis > close_at[cell[semi]]]] = False  # a `;` after the `)`
    wrong = np.zeros(len(ends), dtype=bool)
    wrong[cell] = True
    wrong &= ~shaped
    out = b.copy()
    out[_ranges(starts[wrong], ends[wrong])] = ord("X")
    left = ~wrong[cell]
    return out, tuple(marks[left & (what == c)] for c in (OPEN, CLOSE, SEMICOLON))


def _shaped(ends: np.ndarray, opens: np.ndarray, closes: np.ndarray, semis: np.ndarray) -> bool:
    """Whether every cell with a bracket or a `;` is shaped `(...)KIND` (`_regular`)."""
    cell = np.searchsorted(ends, opens)
    first = np.where(cell > 0, ends[cell - 1] + 1, 0)
    if len(closes) != len(opens) or (first != opens).any() or (np.searchsorted(ends, closes) != cell).any():
        return False  # a bracket other than first in its cell, or not one closing bracket in each compound
    at = np.searchsorted(opens, semis, side="right") - 1  # each `;`'s compound: the last `(` before it
    return not (len(semis) and ((at < 0).any() or (semis >= closes[at.clip(0)]).any()))


def _compounds(b: np.ndarray, ends: np.ndarray, marks: tuple[np.ndarray, np.ndarray, np.ndarray]) -> _Compounds:
    """Every cell `(part;part...)KIND` of the bytes (rows ending in "\n", `ends` their separators,
    `marks` their `(`, `)` and `;`; every cell with one so shaped: `_regular`); `bad` where KIND is
    not a compound's kind, or a part is empty or not an action."""
    starts = np.concatenate([[0], ends[:-1] + 1])
    opens, closes, semis = marks
    cell = np.searchsorted(ends, opens)  # (a byte's cell: the first separator after it ends it)
    at = np.searchsorted(opens, semis, side="right") - 1  # each `;`'s compound: between its brackets
    kind = _kinds(b, closes + 1, ends[cell])
    inner = _inner(b, opens, closes)  # the parts, a compound a row
    owner, _, _, _, op, stage, mb, bad_part = _read_cells(inner)
    counts = np.bincount(owner, minlength=len(opens))
    bad = (kind < 0) | (counts != np.bincount(at, minlength=len(opens)) + 1)  # (+1: an empty part)
    bad[owner[bad_part]] = True
    full = ends > starts
    out = _Compounds()
    out.cells, out.bad = np.searchsorted(np.flatnonzero(full), cell), bad
    out.parts = Parts(out.cells, kind, np.concatenate([[0], np.cumsum(counts)]), op, stage, mb)
    row_start = starts[np.concatenate([[True], b[ends[:-1]] == NEWLINE])]  # where each row begins
    line = np.searchsorted(row_start, starts[full], side="right") - 1
    out.column, out.width = starts[full] - row_start[line] + 1, (ends - starts)[full]
    keep = np.ones(len(b), dtype=bool)
    keep[_ranges(opens + 3, ends[cell])] = False  # each compound cell but its first three bytes
    placeholders = b.copy()
    placeholders[opens], placeholders[opens + 1], placeholders[opens + 2] = ord("0"), ord("F"), ord("0")
    out.placeholders = placeholders[keep]
    return out


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The indices lo[k] .. hi[k] - 1 of every k, one range after another (each hi[k] >= lo[k])."""
    size = hi - lo
    return np.repeat(lo - np.concatenate([[0], np.cumsum(size)[:-1]]), size) + np.arange(int(size.sum()))


def _kinds(b: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The kind code of the letters b[lo[c]:hi[c]] of each compound c; -1 where they are not a kind."""
    code = np.full(len(lo), -1, dtype=np.int8)
    size = hi - lo
    sized = np.flatnonzero((size >= 1) & (size <= MAX_LETTERS))
    if not len(sized):
        return code
    lo, hi, size = lo[sized], hi[sized], size[sized]
    pos = _ranges(lo, hi)
    letters = b[pos]
    first = np.concatenate([[0], np.cumsum(size)[:-1]])
    from_end = np.repeat(hi - 1, size) - pos
    value = np.add.reduceat(np.where(letters == ord("_"), 27, letters.astype(np.int64) - 64) << (5 * from_end), first)
    at = np.searchsorted(_KIND_KEY_LIST, value).clip(0, len(_KIND_KEY_LIST) - 1)
    found = _KIND_KEY_LIST[at] == value
    digit = _DIGIT[letters]  # (the other bytes after a `)` are letters: `_regular`)
    if digit.any():
        found &= ~np.logical_or.reduceat(digit, first)
    code[sized[found]] = _KIND_KEY_CODE[at[found]]
    return code


def _inner(b: np.ndarray, opens: np.ndarray, closes: np.ndarray) -> np.ndarray:
    """The bytes between each compound's brackets as a row of cells (`;` as `,`, the row ended)."""
    out = b[_ranges(opens + 1, closes + 1)]  # (the closing bracket becomes the row's end)
    out[out == SEMICOLON] = COMMA
    out[out == CLOSE] = NEWLINE
    return out


SMALL_BYTES = 16_384  # files up to this size are read cell by cell (numpy's calls cost more than the work)
_DIGITS = "0123456789"
_OP_CODES = {op.value: (CODE[op], op.has_microbatch) for op in Op}
_RECORD = np.dtype([("op", "i1"), ("stage", "i8"), ("mb", "i8")])  # a cell's numbers, packed (17 bytes)
_PACK = struct.Struct("=bqq").pack  # (the same layout)
_PARSED: dict[str, bytes] = {}  # a cell's text -> its record: op code, stage, microbatch or NO_MICROBATCH
MAX_PARSED = 1 << 16  # cells kept (the cells of a schedule's files repeat: 0F0, 1SEND_F0, ...)


def _read_small(text: str, name: str, program_name: str, limits: tuple[int, int, int]) -> Program | None:
    """`_read_arrays`, one cell at a time: the same program, or None for the same files (the spans
    found from the lines when asked for). Each cell's numbers are kept packed as one record, so the
    file's records, joined, are its three columns at once (a compound's record says only that it
    is one: its parts are read from `_PARTS`)."""
    lines = _plain_lines(text)
    if lines is None:
        return None
    rows = [line.split(",") for line in lines]
    full = [row if "" not in row else [cell for cell in row if cell] for row in rows]  # (empty cells: idle steps)
    cells = list(chain.from_iterable(full))
    records = _records(cells)
    if not records:
        return None
    cells_read = np.frombuffer(records, _RECORD)
    op, stage, mb = cells_read["op"], cells_read["stage"], cells_read["mb"]
    starts = list(accumulate(map(len, full), initial=0))
    parts = _small_parts(cells) if "(" in text else None
    if parts is None:
        stages, mbs = stage.tolist(), set(mb.tolist())  # (few: a set)
        held = [set(stages[starts[r]:starts[r + 1]]) for r in range(len(rows))]  # each rank's stages
    else:
        held, mbs = _held_with_parts(stage.tolist(), mb.tolist(), starts, parts)
    max_ranks, max_stages, max_mbs = limits
    R, S, last_mb = len(rows), max(map(max, filter(None, held))) + 1, max(mbs)
    if R > max_ranks or S > max_stages or last_mb >= max_mbs:
        return None
    placement, seen = list(placed("loop", S, R)), set[int]()
    for r, here in enumerate(held):  # every action runs on the rank of its stage: where the stage is first seen
        for s in here - seen:
            placement[s] = r
        seen |= here
    ranks = Columns(op, stage, mb, starts, CsvSpans(Source(name, text), lines=lines, starts=starts), parts=parts)
    return Program(name=program_name, num_ranks=R, num_stages=S, num_microbatches=max(last_mb + 1, 1),
                   placement=tuple(placement), ranks=_as_ranks(ranks), source=name, annotations=_defaults(S, R))


def _as_ranks(cols: Columns) -> tuple[tuple[Step, ...], ...]:
    """The columns as `Program.ranks`, typed as the tuple of per-rank step tuples they stand for
    (indexing, iterating, `len`, `==`, `hash`), as columns.with_columns gives a program them."""
    return cast("tuple[tuple[Step, ...], ...]", cols)


def _small_parts(cells: list[str]) -> Parts | None:
    """The parts of the compound cells among `cells` (every cell parsed), or None if there is none."""
    at = [i for i, cell in enumerate(cells) if cell[0] == "("]
    if not at:
        return None
    read = [_PARTS.get(cells[i]) or _compound_parts(cells[i]) for i in at]  # (the cache may have been cleared)
    records = np.frombuffer(b"".join(r[1] for r in read), _RECORD)  # type: ignore[index]  # (all parsed)
    sizes = [len(r[1]) // _RECORD.itemsize for r in read]  # type: ignore[index]
    return Parts(at, [r[0] for r in read], list(accumulate(sizes, initial=0)),  # type: ignore[index]
                 records["op"], records["stage"], records["mb"])


def _held_with_parts(stages: list[int], mbs: list[int], starts: list[int], parts: Parts):
    """Each rank's stages and every microbatch (a compound's are its parts')."""
    ops_at = set(parts.step.tolist())
    owner = np.repeat(parts.step, parts.sizes).tolist()
    held = [{s for i, s in enumerate(stages[lo:hi], lo) if i not in ops_at} for lo, hi in zip(starts, starts[1:])]
    for i, s in zip(owner, parts.stage.tolist()):
        held[bisect_right(starts, i) - 1].add(s)
    return held, {m for i, m in enumerate(mbs) if i not in ops_at} | set(parts.microbatch.tolist())


def _defaults(S: int, R: int) -> Annotations:
    """`Annotations().complete(S, R)`, every stage's default times and sizes, made directly (the
    same value, without `complete`'s `dataclasses.replace`), once per shape and share (immutable)."""
    return _defaults_of(S, R, ir.default_share(S, R))


@lru_cache(maxsize=64)
def _defaults_of(S: int, R: int, share: float) -> Annotations:
    # (`share` is only part of the key: what is kept follows ir.default_share, the one rule)
    return Annotations((StageCost.default(S, R),) * S, (StageMemory.default(S, R),) * S)


def _records(cells: list[str]) -> bytes | None:
    """The cells' records (`_RECORD`), joined; None if a cell does not parse."""
    try:
        return b"".join(map(_PARSED.__getitem__, cells))
    except KeyError:  # cells not seen before: parsed once each
        known: dict[str, bytes] = {}
        for cell in set(cells):
            record = _PARSED.get(cell) or _parse_cell(cell)
            if record is None:
                return None
            known[cell] = record
        return b"".join(map(known.__getitem__, cells))


def _places(lines: list[str]) -> tuple[list[int], list[int], list[int], list[int]]:
    """(row, 1-based column, width, step) of every nonempty cell of the lines, row by row."""
    where: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
    for r, line in enumerate(lines):
        row = line.split(",")
        widths = list(map(len, row))
        columns = list(accumulate([w + 1 for w in widths[:-1]], initial=1))
        full: list[int] | range
        if "" in row:  # empty (idle) cells take a step and a place in the line, and hold nothing
            full = [k for k, cell in enumerate(row) if cell]
            row, widths, columns = [row[k] for k in full], [widths[k] for k in full], [columns[k] for k in full]
        else:
            full = range(len(row))
        for values, more in zip(where, ([r] * len(row), columns, widths, full)):
            values += more
    return where


def _place(line: str, k: int) -> tuple[int, int, int]:
    """(1-based column, width, step) of the k-th nonempty cell of a line: `_places` of one cell,
    the line split only up to it when no cell before it is empty."""
    row = line.split(",", k + 1)
    step = k
    if "" in row[:k + 1]:  # (empty cells take a step and a place in the line, and hold nothing)
        row = line.split(",")
        step = [j for j, cell in enumerate(row) if cell][k]
    return step + 1 + sum(map(len, row[:step])), len(row[step]), step


def _plain_lines(text: str) -> list[str] | None:
    """The rows of an ASCII file whose rows end in "\n" or "\r\n" (a "\r" also at the very end),
    else None. (A cell of anything but digits, capitals and `_` does not parse: `_read_small`
    returns None for it.)"""
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        if text.find("\r") not in (-1, len(text) - 1):
            return None
        text = text.rstrip("\r")
    if not text or not text.isascii():
        return None
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def _parse_cell(cell: str) -> bytes | None:
    """A cell's record (`_RECORD`): digits, an op name, maybe digits; or a compound's (`_parse_compound`)."""
    if cell[0] == "(":
        return _parse_compound(cell)
    head = cell.rstrip(_DIGITS)
    name = head.lstrip(_DIGITS)
    stage, mb = head[:len(head) - len(name)], cell[len(head):]
    known = _OP_CODES.get(name)
    if known is None or not stage or len(stage) > MAX_INDEX_DIGITS or len(mb) > MAX_INDEX_DIGITS \
            or known[1] != bool(mb):
        return None
    if len(_PARSED) >= MAX_PARSED:
        _PARSED.clear()
        _PARTS.clear()
    record = _PARSED[cell] = _PACK(known[0], int(stage), int(mb) if mb else NO_MICROBATCH)
    return record


_KIND_CODES = {kind.value: i for i, kind in enumerate(KINDS)}
_PARTS: dict[str, tuple[int, bytes]] = {}  # a compound cell's text -> its kind code and its parts' records
_COMPOUND_RECORD = _PACK(COMPOUND, 0, NO_MICROBATCH)  # what a compound cell's own record says


def _parse_compound(cell: str) -> bytes | None:
    """A compound cell's record, `(part;part...)KIND` with each part a plain cell (as ir.parse_step
    reads it, which reads more: it says what is wrong with the rest); its parts go to `_PARTS`."""
    parts = _compound_parts(cell)
    if parts is None:
        return None
    _PARSED[cell] = _COMPOUND_RECORD
    return _COMPOUND_RECORD


def _compound_parts(cell: str) -> tuple[int, bytes] | None:
    close = cell.find(")")
    kind = _KIND_CODES.get(cell[close + 1:])
    if kind is None or close < 0 or cell.count("(") != 1 or cell.count(")") != 1:
        return None
    pieces = cell[1:close].split(";")
    records = [_PARSED.get(piece) or _parse_cell(piece) for piece in pieces if piece and piece[0] != "("]
    if len(records) != len(pieces) or None in records:
        return None
    if len(_PARSED) >= MAX_PARSED:
        _PARSED.clear()
        _PARTS.clear()
    got = _PARTS[cell] = (kind, b"".join(records))  # type: ignore[arg-type]  # (None is not in it)
    return got


def _chunks(b: np.ndarray):
    """(lo, hi, first row) of stretches of whole rows of about CHUNK bytes."""
    lo, row = 0, 0
    while lo < len(b):
        hi = len(b) if lo + CHUNK >= len(b) else lo + CHUNK + int(np.argmax(b[lo + CHUNK:] == NEWLINE)) + 1
        yield lo, hi, row
        row += int(np.count_nonzero(b[lo:hi] == NEWLINE))
        lo = hi


def _cells(b: np.ndarray):
    """Per nonempty cell of the bytes `b` (rows ending in "\\n"): its row, 1-based column, width and
    step (its place in the row, empty cells counted), and the three runs it must be made of, digits,
    letters and maybe digits: the stage, the op name packed by `_pack`, the microbatch and whether
    it has one; and whether it is bad: not made so, or an index with too many digits."""
    sep = _SEP[b]
    ends = np.flatnonzero(sep)  # cell i is b[ends[i-1] + 1 : ends[i]]
    starts = np.concatenate([[0], ends[:-1] + 1])
    newline = b[ends] == NEWLINE
    row_of_cell = np.cumsum(newline) - newline
    row_first_cell = np.flatnonzero(np.concatenate([[True], newline[:-1]]))
    step_of_cell = np.arange(len(ends)) - row_first_cell[row_of_cell]
    line_start = starts[row_first_cell][row_of_cell]
    full = ends > starts
    cell = np.flatnonzero(full)
    if not len(cell):  # blank rows and empty cells only
        return [row_of_cell[cell]] + [np.zeros(0, dtype=np.int64)] * 6 + [np.zeros(0, dtype=bool)] * 2
    # runs of digits or letters inside the cells: where each begins, its kind, and its place in its cell
    inside = np.flatnonzero(~sep)
    kind = _DIGIT[b[inside]]  # True: a digit, False: a letter
    new_cell = np.zeros(len(b), dtype=bool)
    new_cell[starts[full]] = True
    begins = new_cell[inside] | np.concatenate([[True], kind[1:] != kind[:-1]])
    run_start = np.flatnonzero(begins)
    run_cell = np.cumsum(new_cell[inside])[run_start] - 1  # index among the nonempty cells
    run_place = np.arange(len(run_start)) - np.flatnonzero(new_cell[inside][run_start])[run_cell]
    run_digit = kind[run_start]
    run_len = np.diff(np.append(run_start, len(inside)))
    runs = np.bincount(run_cell, minlength=int(full.sum()))
    expect_digit = run_place != 1  # digits, letters, digits
    bad = (runs < 2) | (runs > 3)
    wrong = run_digit != expect_digit
    long = np.flatnonzero(run_len > MAX_INDEX_DIGITS)  # (few: an op name of 10 to 12 letters is one)
    wrong[long[run_len[long] > np.where(run_digit[long], MAX_INDEX_DIGITS, MAX_LETTERS)]] = True
    if wrong.any():
        bad[run_cell[wrong]] = True
    # each run's value: digits in base 10, letters packed in base 32 (`_pack`); a bad cell's are of no use
    run_of = np.cumsum(begins) - 1
    from_end = run_start[run_of] + run_len[run_of] - 1 - np.arange(len(inside))  # (a long run's wraps: bad)
    byte = b[inside].astype(np.int64)
    weight = np.where(kind, (byte - ord("0")) * 10 ** from_end,
                      np.where(byte == ord("_"), 27, byte - 64) << (5 * from_end))
    value = np.add.reduceat(weight, run_start)
    first_run = np.flatnonzero(run_place == 0)
    n = len(first_run)
    has_mb = runs == 3
    mb = np.zeros(n, dtype=np.int64)
    mb[has_mb] = value[first_run[has_mb] + 2]
    return [row_of_cell[cell], starts[cell] - line_start[cell] + 1, ends[cell] - starts[cell], step_of_cell[cell],
            value[first_run], value[np.minimum(first_run + 1, len(value) - 1)], mb, has_mb, bad]
