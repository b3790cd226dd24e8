"""PyTorch pipelining CSV, read and written exactly (`_load_csv` / `_dump_csv`).

One row per rank, one action per cell in compact notation, an empty cell an idle step. Both the
`compute_only` and `compute_comms` forms; UNSHARD/RESHARD/REDUCE_GRAD and OVERLAP_F_B compounds
are kept. Notation: today's (`B` full backward, `I` backward-input) by default; `legacy` reads
older PyTorch, where `B` meant backward-input and `BW` the full backward.
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping, cast

from ..columns import COMPOUND, KIND_CODE, OPS, Columns, columns_of, has_op
from ..compiler import MAX_MICROBATCHES, MAX_RANKS, MAX_STAGES
from ..errors import SchedcError
from ..inputs import BOM_TEXT
from ..lazy_numpy import np
from ..expr import did_you_mean
from ..ir import (SCHEDC_ONLY, Action, ActionSyntaxError, Annotations, CompoundKind, Op, Program, Step, format_step, is_group, parse_step,
                  PLACEMENTS, placed)
from ..span import Source, Span
from .compact import step_texts

if TYPE_CHECKING:
    from .csv_columns import Unread

NOTATIONS = ("current", "legacy")



def torch_cannot_run(program: Program) -> str | None:
    """Why torch's runtime cannot run the program as written, or None: actions it has no name for
    (it awaits by its own convention and has no tied all-reduce), messages it would pair otherwise
    (it sends every message on one communicator with one tag), or replicas that differ (it runs one
    schedule on every data-parallel replica: the CSV of a job is its replica 0's), or routes (it runs
    every microbatch through every stage, stage 0 reading the inputs and the last computing the loss),
    or a last stage whose forwards run out of microbatch order (`torch_loss_order`)."""
    return torch_has_no_form(program) or torch_loss_order(program)


def torch_loss_order(program: Program, found: tuple[int, int, Action, int] | None = None, *,
                     fix: str = "run the schedule with `schedc run`") -> str | None:
    """Why torch's runtime would run the program's backwards on other microbatches' losses, or None:
    schedc/rules/losses.py (its last stage's forwards out of microbatch order; `found`, the
    `late_forward` already found, if any); `fix`, what else to do than ordering them."""
    from ..lint import shown_step
    found = found or late_forward(program)
    if found is None:
        return None
    rank, step, a, n = found
    return (f"{program.name}'s last stage runs F({a.stage},{a.microbatch}) as its forward number {n + 1} (rank {rank}, "
            f"step {shown_step(program, rank, step)}): torch's runtime keeps the last stage's losses in the order its "
            f"forwards run and gives the backward of microbatch i the i-th, so the backward of microbatch {n} would "
            f"take microbatch {a.microbatch}'s loss: torch stops there (\"Failed to run stage backward\", \"Loss for "
            "microbatch ... is not available\") or trains to wrong gradients; run the "
            f"last stage's forwards in microbatch order{', or ' + fix if fix else ''}")


def late_forward(program: Program) -> tuple[int, int, Action, int] | None:
    """schedc/rules/losses.py's `out_of_order`, its rule (`first_late`) read from the columns of a
    program that holds them: a CSV read makes no action but the one found (every check asks, so the
    last stage's rank is read as lists, in plain Python)."""
    from ..rules.losses import asked, first_late, out_of_order
    held, where = columns_of(program), asked(program)
    if held is None or where is None:
        return out_of_order(program)
    last, rank = where
    lo, hi = held.starts[rank], held.starts[rank + 1]
    ops, stages, mbs = (a[lo:hi].tolist() for a in (held.op, held.stage, held.microbatch))
    if COMPOUND in ops:  # (a compound's parts in its place)
        parts = _rank_parts(held, lo, hi)
        actions = [(k, OPS[po], ps, pm) for k, o in enumerate(ops)
                   for po, ps, pm in (parts[k] if o == COMPOUND else ((o, stages[k], mbs[k]),))]
    else:
        actions = list(zip(range(hi - lo), map(OPS.__getitem__, ops), stages, mbs))
    found = first_late(actions, last)
    if found is None:
        return None
    k, m, n = found
    x = lo + k
    span = held.spans[x] if held.spans is not None else None
    if ops[k] == COMPOUND and held.kept is not None and held.kept[x] is not None:  # (a part's own span)
        span = next((a.span for a in held.kept[x].parts if a.op is Op.F and a.stage == last), span)
    return rank, k, Action(Op.F, last, m, span), n


def _rank_parts(held, lo: int, hi: int) -> dict[int, list[tuple[int, int, int]]]:
    """The parts (op code, stage, microbatch) of each compound among steps lo..hi-1 of the columns,
    by the step's place from lo."""
    table = held.parts
    c0, c1 = (int(c) for c in np.searchsorted(table.step, [lo, hi]))
    at, starts = table.step[c0:c1].tolist(), table.starts[c0:c1 + 1].tolist()
    a, b = starts[0], starts[-1]
    cells = list(zip(*(v[a:b].tolist() for v in (table.op, table.stage, table.microbatch))))
    return {x - lo: cells[s - a:e - a] for x, s, e in zip(at, starts, starts[1:])}


def torch_has_no_form(program: Program) -> str | None:
    """`torch_cannot_run`'s reasons but the loss order: what torch's runtime and CSV cannot say."""
    if program.routes:
        return (f"{program.name}'s microbatches take routes ({'; '.join(map(str, program.routes))}); torch's runtime "
                "runs every microbatch through every stage, from stage 0 to the last, and its CSV has no routes")
    if any(steps != program.ranks for steps in program.replicas):
        return (f"{program.name}'s data-parallel replicas run different schedules; torch's runtime runs one "
                "schedule on every replica")
    if columns_of(program) is not None:  # (steps held as columns, millions of them, are asked as arrays)
        own = next((op for op in Op if op in SCHEDC_ONLY and has_op(program, op)), None)
    else:
        own = next((a.op for steps in program.ranks for st in steps for a in st.parts if a.op in SCHEDC_ONLY), None)
    if own is not None:
        return (f"{program.name} has {own.value} actions, which torch's runtime has no name for (it awaits "
                "by its own convention and has no tied all-reduce)")
    if program.p2p != "shared":
        return (f"{program.name} declares `p2p {program.p2p}`; torch's runtime sends every message on one "
                "communicator with one tag, so it would pair them otherwise")
    return None


@dataclass(frozen=True)
class TorchCsv:
    """The cells of a PyTorch schedule CSV: a row per rank; `None` is an empty (idle) cell. The rows
    of a lowering are its columns (schedc/columns.py), written without making their actions."""

    rows: tuple[tuple[Step | None, ...], ...]
    name: str = "<csv>"
    flattened: bool = False  # whether groups were flattened into their parts (the rows may then check otherwise)

    def dumps(self) -> str:
        """The file text exactly as torch's `_dump_csv` writes it (csv module, CRLF rows)."""
        if isinstance(self.rows, Columns):
            return _dumps_columns(self.rows)
        buf = io.StringIO(newline="")
        writer = csv.writer(buf)
        for row in self.rows:
            writer.writerow(["" if cell is None else format_step(cell) for cell in row])
        return buf.getvalue()

    def to_program(self, name: str | None = None) -> Program:
        """Drop idle cells; infer stages, microbatches and placement from the actions."""
        ranks = tuple(tuple(c for c in row if c is not None) for row in self.rows)
        if len(ranks) > MAX_RANKS:
            raise SchedcError("too-large", f"the CSV has {len(ranks):,} rows (ranks); the limit is {MAX_RANKS:,}",
                              where=self.name)
        for row in ranks:
            for st in row:
                for a in st.parts:
                    if a.stage >= MAX_STAGES or (a.microbatch or 0) >= MAX_MICROBATCHES:
                        raise SchedcError("too-large", f"{format_step(st)}: stage and microbatch indices must be "
                                          f"below {MAX_STAGES:,} and {MAX_MICROBATCHES:,}", a.span)
        stages = [a.stage for row in ranks for st in row for a in st.parts]
        mbs = [a.microbatch for row in ranks for st in row for a in st.parts if a.microbatch is not None]
        num_stages = max(stages, default=-1) + 1
        placement = list(placed("loop", num_stages, max(len(ranks), 1)))
        seen = set()
        for r, row in enumerate(ranks):
            for st in row:
                for a in st.parts:  # every action runs on the rank of its stage
                    if a.stage not in seen:
                        seen.add(a.stage)
                        placement[a.stage] = r
        return Program(
            name=name or _stem(self.name),
            num_ranks=len(ranks),
            num_stages=max(num_stages, 1),
            num_microbatches=max(max(mbs, default=-1) + 1, 1),
            placement=tuple(placement) or (0,),
            ranks=ranks,
            source=self.name,
        )


def program_from_csv(text: str, name: str = "<csv>", *, notation: str = "current") -> Program:
    """`read_torch_csv(text, name, notation=notation).to_program()`: the common file read at once
    into columns (csv_columns.py), anything else cell by cell. Cells the columns cannot read, in a
    file otherwise read, are read alone (`_read_unread`): their error is the file's, as the cell by
    cell reader gives it, without reading the file's other cells again."""
    _refuse_bom(text, name)
    if notation == "current":
        from .csv_columns import Unread, read_columns
        read = read_columns(text, name, _stem(name), (MAX_RANKS, MAX_STAGES, MAX_MICROBATCHES))
        if isinstance(read, Unread):  # (it returns the rows it read when they read: spaces, quotes)
            return _read_table(text, name, notation, _read_unread(text, name, read)).to_program()
        if read is not None:
            return read
    return read_torch_csv(text, name, notation=notation).to_program()


STATED = {"P": "ranks (one row each)", "M": "microbatches", "V": "stages per rank"}  # what --param states of a CSV


def stated(program: Program, params: Mapping[str, int] | None = None, placement: str | None = None, *,
           strict: bool = True) -> Program:
    """The program of a CSV with what its reader states about it (`--param P=,M=,V=`, `--placement`)
    in place of what the cells suggest (the ranks are its rows, M one more than the largest
    microbatch, the stages up to the largest index, each on the rank of its first cell). A cell
    outside what is stated is then the check's error at its own row and column (`bad-index`,
    `wrong-rank`), not `missing` actions blamed on other ranks. `strict` (the CSV is the one input):
    a name besides P, M and V is an `unknown-param` error; else (one --param list for several
    schedules) the CSV takes P and M and ignores the rest, V too, as schedules without chunks do."""
    given = {k: v for k, v in (params or {}).items() if strict or k in ("P", "M")}
    if not given and placement is None:
        return program
    _check_stated(program, given, placement)
    R = program.num_ranks
    S = given["V"] * R if "V" in given else program.num_stages
    if placement is not None:
        where = placed(placement, S, R)
    else:  # the stages as read, any new one placed by loop
        where = tuple(program.placement[s] if s < program.num_stages else s % R for s in range(S))
    return replace(program, num_stages=S, num_microbatches=given.get("M", program.num_microbatches),
                   placement=where, annotations=Annotations(),
                   params=tuple((k, given[k]) for k in STATED if k in given))


def _check_stated(program: Program, given: Mapping[str, int], placement: str | None) -> None:
    for key, value in given.items():
        if key not in STATED:
            told = ", ".join(f"{k}: {w}" for k, w in STATED.items())
            raise SchedcError("unknown-param", f"a PyTorch CSV states only P, M and V ({told}), not "
                              f"'{key}'{did_you_mean(key, STATED)}", where="--param")
        if value < 1:
            raise SchedcError("range", f"{key}={value}: the {STATED[key]} must be at least 1", where="--param")
    if "P" in given and given["P"] != program.num_ranks:
        raise SchedcError("csv", f"P={given['P']} is stated, but the CSV has {program.num_ranks} row(s), one per "
                          "rank", where=program.source or program.name)
    if placement is not None and placement not in PLACEMENTS:
        raise SchedcError("usage", f"unknown placement {placement!r}; expected one of {', '.join(PLACEMENTS)}",
                          where="--placement")


def _dumps_columns(cols: Columns) -> str:
    """`TorchCsv.dumps` of rows held as columns, without making their actions: cells are compact
    texts (`2F0`, `(0F3;7B1)OVERLAP_F_B`), which the csv module writes unquoted."""
    return "".join(",".join(step_texts(cols, r)) + "\r\n" for r in range(len(cols)))


def _lowered_for_torch(program: Program, verified: str | None) -> Program:
    """`lower_for_torch`'s program, checked again under `verified` when the schedule was checked."""
    from ..passes import lower_for_torch
    lowered = lower_for_torch(program)
    if verified is not None:
        from ..lower.codegen import validate_torch_lowering
        validate_torch_lowering(lowered, verified)
    return lowered


def _has_groups(cols: Columns) -> bool:
    return cols.compounds and bool((cols.parts.kind == KIND_CODE[CompoundKind.GROUP]).any())


def _stem(name: str) -> str:
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    return base[:-4] if base.lower().endswith(".csv") else base


def read_torch_csv(text: str, name: str = "<csv>", *, notation: str = "current") -> TorchCsv:
    """Parse a PyTorch schedule CSV; a bad cell is an error at file:line:col (rank, step)."""
    _refuse_bom(text, name)
    return _read_table(text, name, notation)


def _read_table(text: str, name: str, notation: str, known: dict[int, tuple[Step | None, ...]] | None = None) -> TorchCsv:
    """`read_torch_csv` of a text without a byte order mark; `known`, rows read already."""
    known = known or {}
    source = Source(name, text)
    lines = source.lines()  # a blank line is a rank with no actions, as torch's csv.reader reads it
    if lines and lines[-1] == "":
        lines.pop()
    if not text.strip():
        raise SchedcError("csv", "the CSV file is empty: expected one row of actions per rank",
                          Span.point(source, 1, 1))
    errors = _CellErrors()
    rows = [known[rank] if rank in known else _read_row(line, source, rank, notation, errors)
            for rank, line in enumerate(lines)]
    errors.raise_any()
    return TorchCsv(tuple(rows), name)


def _read_row(line: str, source: Source, rank: int, notation: str, errors: "_CellErrors") -> tuple[Step | None, ...]:
    """The cells of row `rank`, each bad one's error added to `errors`; a row that is not CSV is an
    error at once (a carriage return inside it, a cell over the csv module's limit)."""
    if "\r" in line:
        col = line.index("\r") + 1
        raise SchedcError("csv", "a carriage return inside a row: rows must end with \\n or \\r\\n",
                          Span(source, rank + 1, col, rank + 1, col + 1, rank, None))
    row: list[Step | None] = []
    for step, (column, cell) in enumerate(_cells(line, source, rank)):
        text_cell = cell.strip()
        if not text_cell:
            row.append(None)
            continue
        span = Span(source, rank + 1, column, rank + 1, column + len(cell), rank, step)
        try:
            row.append(parse_step(text_cell, span, notation=notation))
        except ActionSyntaxError as exc:
            errors.add(str(exc), span)
    return tuple(row)


class _CellErrors:
    """The errors of a CSV's bad cells, in file order, as they are reported: one for the legacy
    notation's `BW` cells (the first, counting the others), then the others, 20 in all."""

    SHOWN = 20

    def __init__(self) -> None:
        self.legacy: list[tuple[str, Span]] = []  # the first BW cell's (message, span)
        self.legacy_count = 0  # (how many there are)
        self.others: list[tuple[str, Span]] = []  # the first SHOWN others

    def add(self, message: str, span: Span) -> None:
        if "--notation legacy" in message:
            self.legacy_count += 1
            if not self.legacy:
                self.legacy.append((message, span))
        elif len(self.others) < self.SHOWN:
            self.others.append((message, span))

    def raise_any(self) -> None:
        if not self.legacy_count and not self.others:
            return
        diagnostics = []
        for message, span in self.legacy + self.others:
            d = SchedcError("csv", f"rank {span.rank}, step {span.step}: {message}", span).diagnostics[0]
            diagnostics.append(d)
        if self.legacy_count > 1:  # one message for the notation, not one per cell
            first = diagnostics[0]
            diagnostics[0] = first.__class__(first.code, first.message, first.span,
                                             (f"{self.legacy_count - 1} more cell(s) spell BW too",))
        raise SchedcError.many(diagnostics[:self.SHOWN])


def _read_unread(text: str, name: str, unread: "Unread") -> dict[int, tuple[Step | None, ...]]:
    """The error of the cells the columns could not read (csv_columns.Unread), as `read_torch_csv`
    gives it: the rows named read whole, each other cell named alone (its row is plain: cells
    split at commas), every other cell known good. When they all read (spaces, quotes), the rows
    read whole, for `_read_table` to keep."""
    read: dict[int, tuple[Step | None, ...]] = {}
    if not text or text.isspace():  # (the empty file's own error)
        return read
    source = Source(name, text)
    lines, errors = source.lines(), _CellErrors()
    said: dict[str, str | None] = {}  # a cell's text -> what is wrong with it, or None
    limit = csv.field_size_limit()
    for rank, cells in unread.by_row():
        line = lines[rank]
        if cells is None or any(width > limit for _, width, _ in cells):  # (the csv module's own error)
            read[rank] = _read_row(line, source, rank, "current", errors)
            continue
        for column, width, step in cells:
            cell = line[column - 1:column - 1 + width]
            if cell not in said:  # (an error is the cell's text's alone: each text parsed once)
                said[cell] = _parse_error(cell.strip()) if cell.strip() else None
            message = said[cell]
            if message is not None:
                errors.add(message, Span(source, rank + 1, column, rank + 1, column + width, rank, step))
    errors.raise_any()
    return read


def _parse_error(cell: str) -> str | None:
    """What is wrong with a cell's text (`parse_step`'s message), or None."""
    try:
        parse_step(cell)
    except ActionSyntaxError as exc:
        return str(exc)
    return None


_FIRST_CELL = re.compile(r"[^,\r\n]*")


def _refuse_bom(text: str, name: str) -> None:
    """A `csv` error for a file that starts with a byte order mark (Excel's "CSV UTF-8", some
    editors): torch's `_load_csv` opens the file in the default encoding, so the mark is part of the
    first cell, which `_Action.from_str` refuses: schedc must not clear a file torch cannot load."""
    if not text.startswith(BOM_TEXT):
        return
    rest = text[1:]
    first = _FIRST_CELL.match(rest).group()  # type: ignore[union-attr]  # (it matches the empty text too)
    shown = repr(BOM_TEXT + first[:40]) + ("..." if len(first) > 40 else "")
    raise SchedcError("csv", f"the file starts with a byte order mark (U+FEFF, bytes EF BB BF), which torch's reader "
                      f"takes as part of the first cell: it reads {shown}, which is no action (\"Invalid action "
                      "string\"), and cannot load the file; save it as UTF-8 without a byte order mark (in Excel, "
                      "\"CSV (Comma delimited)\" rather than \"CSV UTF-8\")",
                      Span(Source(name, rest), 1, 1, 1, 1 + max(len(first), 1), 0, 0))  # (the line as editors show it)


def _cells(line: str, source: Source | None = None, rank: int = 0):
    """(1-based column, text) of each cell, as the csv module splits the line; none for a blank line.
    A cell over the csv module's field limit (which torch's reader has too) is an error at it."""
    if not line:
        return []
    try:
        texts = next(csv.reader([line]))
    except csv.Error as exc:
        raise _unreadable_row(line, source, rank, exc) from None
    if '"' not in line:
        starts = [0]
        for i, ch in enumerate(line):
            if ch == ",":
                starts.append(i + 1)
        return [(start + 1, cell) for start, cell in zip(starts, texts)]
    out, col, i = [], 1, 0
    for cell in texts:  # quoted cells: find where each one begins in the raw line
        out.append((col, cell))
        in_quotes = False
        while i < len(line) and (in_quotes or line[i] != ","):
            in_quotes ^= line[i] == '"'
            i += 1
        i += 1
        col = i + 1
    return out


def _unreadable_row(line: str, source: Source | None, rank: int, exc: csv.Error) -> SchedcError:
    """The `csv` error for a row the csv module refuses: at its first cell over the field limit."""
    limit = csv.field_size_limit()
    for step, (start, end) in enumerate(_raw_cells(line)):
        if end - start > limit:
            return SchedcError("csv", f"rank {rank}, step {step}: a cell of {end - start:,} characters; a CSV "
                               f"cell holds at most {limit:,} (Python's csv module, which torch reads "
                               "schedules with, refuses a longer one)",
                               None if source is None else Span(source, rank + 1, start + 1, rank + 1, end + 1,
                                                                rank, step))
    return SchedcError("csv", f"rank {rank}: the row cannot be read as CSV ({exc})",
                       None if source is None else Span.point(source, rank + 1, 1))


def _raw_cells(line: str):
    """(start, end) offsets of each cell's raw text in the line, quotes included."""
    in_quotes, start = False, 0
    for i, ch in enumerate(line):
        if ch == '"':
            in_quotes = not in_quotes
        elif ch == "," and not in_quotes:
            yield start, i
            start = i + 1
    yield start, len(line)


def to_torch_csv(program: Program, level: str = "comms", *, verified: str | None = None) -> TorchCsv:
    """The rows torch would load: `compute` keeps compute actions only (torch lowers it itself),
    `comms` lowers first as torch's own lowering does (`lower_for_torch`: UNSHARD / RESHARD, REDUCE_GRAD,
    then SEND / RECV), so torch's runtime scales the gradients as it does for its own schedules.

    Groups are flattened (torch's CSV has no groups); compounds like OVERLAP_F_B are kept.
    `verified`: the semantics the schedule was checked under (None: not checked); at `comms` the
    lowering, before its groups are flattened, is checked again under it (translation validation,
    `lower.codegen.validate_torch_lowering`), and an internal error if it does not pass.
    """
    if level not in ("compute", "comms"):
        raise SchedcError("usage", f"unknown level {level!r}; expected compute or comms", where="--level")
    if program.routes:  # (the callers ask `torch_cannot_run` first; a CSV would run it otherwise)
        raise SchedcError("usage", str(torch_cannot_run(program)), where=program.source or program.name)
    if level == "comms":
        program = _lowered_for_torch(program, verified)
    held = columns_of(program)
    if level == "comms" and held is not None and not _has_groups(held):
        # no groups to flatten: the rows are the columns, which stand for the per-rank step tuples
        # (TorchCsv.dumps writes them as columns)
        return TorchCsv(cast("tuple[tuple[Step | None, ...], ...]", held), program.name)
    rows, flattened = [], False
    for steps in program.ranks:
        row: list[Step] = []
        for st in steps:
            if is_group(st):
                row.extend(st.parts)
                flattened = True
            else:
                row.append(st)
        if level == "compute":
            row = [st for st in row if all(a.op.is_compute for a in st.parts)]
        rows.append(tuple(row))
    if not any(rows):  # (blank rows alone: a CSV no reader takes, schedc's included)
        raise SchedcError("usage", f"{program.name} has no compute actions (its {program.num_actions:,} all "
                          "communicate): nothing to write at the compute level; use --level comms", where="--level")
    return TorchCsv(tuple(rows), program.name, flattened)
