"""Programs held as columns (schedc/columns.py): the CSV read at once (interop/csv_columns.py) and the
lowering (passes/comms.py) give the very programs the cell-by-cell reader and the actions would,
spans included, and `Columns` acts as the tuple of per-rank tuples it stands for."""
from __future__ import annotations

import pickle

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import schedc
from schedc.columns import Columns, as_columns, columns_of
from schedc.errors import SchedcError
from schedc.interop.csv_columns import read_columns
from schedc.interop.torch_csv import TorchCsv, _stem, program_from_csv, read_torch_csv, to_torch_csv
from schedc.ir import Compound, format_step
from schedc.passes import lower
from schedc.resources import builtin_schedules
from schedc.strategies import programs

LIMITS = (65_536, 1_000_000, 1_000_000)


def _read_both(text: str, name: str = "t.csv"):
    """(columns, cell by cell) readings of `text`: a Program or the SchedcError's messages; the
    columnar one is None where it hands the text to the other reader."""
    try:
        slow = read_torch_csv(text, name).to_program()
    except SchedcError as e:
        slow = [d.message for d in e.diagnostics]
    return read_columns(text, name, _stem(name), LIMITS), slow


def _same_program(fast, slow) -> None:
    assert fast == slow
    assert (fast.num_ranks, fast.num_stages, fast.num_microbatches, fast.placement, fast.level, fast.num_actions) == \
        (slow.num_ranks, slow.num_stages, slow.num_microbatches, slow.placement, slow.level, slow.num_actions)
    for row_fast, row_slow in zip(fast.ranks, slow.ranks):
        for a, b in zip(row_fast, row_slow):
            assert (a.span, a.span.rank, a.span.step, a.span.source.text) == \
                (b.span, b.span.rank, b.span.step, b.span.source.text)


EDGES = ["0F0,0B0\r\n", "0F0,,0B0\n1F0\n", "0F0\n\n1F0", "0F0\n\n", ",0F0,,0B0\r\n", "0F0\r", "00F00\n", "0F0",
         "\n0F0", "0F0,\n", "0F10,0B10,1SEND_F3,0UNSHARD,2REDUCE_GRAD\n", "0F0,0X0\n", "0F0,0BW0\n", "0F 0\n",
         "0F0\r0B0\n", "0UNSHARD3\n", "0F\n", "F0\n", "1234567890F0\n", ",\n,\n", '"0F0"\n', "0SEND_FF0\n",
         "0F0B0\n", "(0F0;1B0)OVERLAP_F_B\n", "0f0\n", "\n", "", "0F0,0B0\r\n\r\n1F0,1B0\r\n", "0F0\t\n"]


@pytest.mark.parametrize("text", EDGES)
def test_the_csv_read_at_once_is_the_csv_read_cell_by_cell(text):
    fast, slow = _read_both(text)
    if fast is not None:
        _same_program(fast, slow)
    # and through the public entry point, whichever reader reads it
    try:
        assert program_from_csv(text, "t.csv") == read_torch_csv(text, "t.csv").to_program()
    except SchedcError as e:
        with pytest.raises(SchedcError) as again:
            read_torch_csv(text, "t.csv").to_program()
        assert [d.message for d in again.value.diagnostics] == [d.message for d in e.diagnostics]


def test_plain_files_are_read_at_once():
    assert all(read_columns(t, "t.csv", "t", LIMITS) is not None for t in ["0F0,0B0\r\n", ",0F0\n\n", "0F0"])


@pytest.mark.parametrize("name", sorted(builtin_schedules()))
def test_every_builtin_lowered_reads_back_the_same_at_once(name):
    params = {"P": 4, "M": 8} if name == "dualpipe" else {"P": 3, "M": 6, "V": 2}  # (DualPipe: P even)
    program = lower(schedc.load(name, params, strict_params=False))
    text = TorchCsv(tuple(tuple(row) for row in program.ranks)).dumps()
    fast, slow = _read_both(text, f"{name}.csv")
    _same_program(fast, slow)  # (DualPipeV's compounds too: read at once, each part with its cell's span)
    # (a CSV has no routes: DualPipe's cells read back as one 8-stage pipeline, which is not DualPipe)
    assert schedc.check(fast).ok is (not program.routes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_ranks=4, max_microbatches=5), st.randoms(use_true_random=False))
def test_mutated_csv_text_reads_the_same_both_ways(program, rng):
    text = TorchCsv(tuple(tuple(row) for row in lower(program).ranks)).dumps()
    for _ in range(3):  # a byte changed, dropped or repeated: both readers agree, or hand over
        i = rng.randrange(len(text)) if text else 0
        choice = rng.choice([",", "\n", "\r", "F", "B", "9", "_", "", text[i:i + 3]])
        variant = text[:i] + choice + text[i + 1:]
        fast, slow = _read_both(variant)
        if fast is not None:
            _same_program(fast, slow)


def test_columns_act_as_the_tuple_of_rank_tuples():
    text = TorchCsv(tuple(tuple(r) for r in lower(schedc.load("1f1b", {"P": 3, "M": 4})).ranks)).dumps()
    program = program_from_csv(text, "c.csv")
    cols = columns_of(program)
    assert isinstance(cols, Columns)
    as_tuple = tuple(tuple(row) for row in read_torch_csv(text, "c.csv").to_program().ranks)
    assert cols == as_tuple and as_tuple == cols and hash(cols) == hash(as_tuple)
    assert len(cols) == 3 and cols[-1] == as_tuple[-1] and cols[1:] == as_tuple[1:]
    assert [cols.step(r, i) for r in range(3) for i in range(len(as_tuple[r]))] == [a for row in as_tuple for a in row]
    assert cols.step(0, -1) == as_tuple[0][-1]
    with pytest.raises(IndexError):
        cols[3]
    assert as_tuple[2][1] in cols[2] and cols.index(as_tuple[1]) == 1
    assert pickle.loads(pickle.dumps(program)) == program
    assert program.num_actions == sum(len(r) for r in as_tuple) and program.level == "comms"


def test_nothing_is_made_until_a_rank_is_asked_for():
    program = program_from_csv(TorchCsv(lower(schedc.load("1f1b", {"P": 4, "M": 8})).ranks).dumps(), "n.csv")
    assert schedc.check(program).ok
    assert columns_of(program)._rows == [None] * 4  # the check read the columns alone
    program.ranks[2]
    assert [row is None for row in columns_of(program)._rows] == [True, True, False, True]


def test_lowering_keeps_the_programs_own_steps_and_spans():
    program = schedc.load("dualpipev", {"P": 2, "M": 4})
    lowered = lower(program)
    kept = {id(st) for row in program.ranks for st in row}
    for row in lowered.ranks:
        for step in row:
            if isinstance(step, Compound) or step.op.is_compute:
                assert id(step) in kept  # the very objects, not copies
    for row in lowered.ranks:  # a message's span is its producer's: the compound's part
        for step in row:
            for a in step.parts:
                assert a.span is not None and a.span.file.endswith("dualpipev.pp")


def test_columns_read_from_actions_keep_them():
    program = schedc.load("zbv", {"P": 2, "M": 3})
    cols = as_columns(program)
    assert all(a is b for ra, rb in zip(cols, program.ranks) for a, b in zip(ra, rb))


@pytest.mark.parametrize("name", ["1f1b", "zbv", "interleaved_1f1b"])
def test_the_csv_written_from_columns_is_the_csv_written_from_actions(name):
    table = to_torch_csv(schedc.load(name, {"P": 3, "M": 6, "V": 2}, strict_params=False), "comms")
    assert isinstance(table.rows, Columns)
    assert table.dumps() == TorchCsv(tuple(tuple(row) for row in table.rows), table.name).dumps()
    assert [format_step(st) for st in table.rows[0]] == table.dumps().split("\r\n")[0].split(",")


def test_a_compounds_sends_follow_it_part_by_part():
    """A compound's messages are sent right after it, in the order of its parts (deps.message)."""
    from schedc.rules.deps import message
    program = schedc.load("dualpipev", {"P": 3, "M": 6})
    lowered, seen = lower(program), 0
    for row in lowered.ranks:
        for i, step in enumerate(row):
            if isinstance(step, Compound):
                sends = [m[0] for a in step.parts if (m := message(a, program.placement, program.num_stages))]
                assert list(row[i + 1:i + 1 + len(sends)]) == sends
                assert all(a.span is b.span for a, b in zip(row[i + 1:], sends))
                seen += len(sends)
    assert seen


def test_a_big_file_read_in_stretches_of_rows_is_read_the_same(monkeypatch):
    from schedc.interop import csv_columns
    monkeypatch.setattr(csv_columns, "CHUNK", 16)  # many stretches, some of blank rows only
    text = _lowered_text("1f1b", {"P": 3, "M": 5}).replace("\r\n", "\r\n\r\n,,,\r\n", 1)
    fast, slow = _read_both(text)
    assert fast is not None
    _same_program(fast, slow)


def _lowered_text(name: str, params: dict) -> str:
    return TorchCsv(tuple(tuple(row) for row in lower(schedc.load(name, params)).ranks)).dumps()


# ---- a large file's bad cells: named by the arrays (`Unread`) and read alone, with the same error ----
def _rows(text: str) -> list[list[str]]:
    return [row.split(",") for row in text.split("\r\n")[:-1]]


def _joined(rows: list[list[str]]) -> str:
    return "".join(",".join(row) + "\r\n" for row in rows)


def _edited(text: str, edit) -> str:
    rows = _rows(text)
    edit(rows)
    return _joined(rows)


def _every(k: int, *cells: str):
    def edit(rows):
        n = 0
        for row in rows:
            for c in range(0, len(row), k):
                row[c], n = cells[n % len(cells)], n + 1
    return edit


def _put(*edits):
    def edit(rows):
        for r, c, cell in edits:
            rows[r][c] = cell
    return edit


LONG = "(" + ";".join(f"0F{m}" for m in range(20_000)) + ")GROUP"  # a compound over the csv module's field limit
BAD_CELLS = {  # name: (schedule, the edit, whether the arrays name what is wrong)
    "one at the end": ("1f1b", _put((-1, -5, "0X5")), True),
    "one first": ("1f1b", _put((0, 0, "0X5")), True),
    "every 7th, BW among them": ("1f1b", _every(7, "0X5", "0BW3", "7Q", "0F0;", "1234567890F0", "0SEND_F"), True),
    "every cell BW": ("1f1b", _every(1, "12BW1000"), True),
    "one BW": ("1f1b", _put((2, 9, "2BW4")), True),
    "a quoted cell, then a bad one": ("1f1b", _put((0, 4, '"0F0,1B0"'), (3, 7, "0X5")), True),
    "a bad cell, then a quote that is not closed": ("1f1b", _put((0, 4, "0X5"), (3, 7, '"0F0')), True),
    "a bad cell, then a carriage return in a row": ("1f1b", _put((0, 4, "0X5"), (3, 7, "0F\r0")), True),
    "spaces around a cell, read": ("1f1b", _put((1, 3, " 1F0 ")), True),
    "not ASCII": ("1f1b", _put((2, 5, "0F０"), (3, 3, "é")), True),
    "a bad cell over the field limit": ("1f1b", _put((1, 2, "0X" * 70_000), (2, 2, "0X5")), True),
    "a compound over the field limit": ("1f1b", _put((1, 2, LONG), (2, 2, "0X5")), True),
    "compounds: a bad kind, part, empty part, bracket": (
        "dualpipev", _put((0, 40, "(0F0;1B0)XYZ"), (1, 41, "(0F0;1X0)OVERLAP_F_B"), (2, 40, "(0F0;)OVERLAP_F_B"),
                          (3, 40, "(0F0"), (3, 50, "((0F0))OVERLAP_F_B"), (3, 60, "(0F0)OVERLAP_F_B;")), True),
    "compounds: every 5th cell bad": ("dualpipev", _every(5, "()OVERLAP_F_B", "0F0)", "(0F0;1B0)", "0X5", "0BW0"), True),
}


def _same_outcome(text: str) -> None:
    """`program_from_csv` (the arrays, then the cells they name) as `read_torch_csv` alone: the same
    program, or the same error to the letter."""
    try:
        expected = read_torch_csv(text, "big.csv").to_program()
    except SchedcError as e:
        with pytest.raises(SchedcError) as got:
            program_from_csv(text, "big.csv")
        assert got.value.render() == e.render()
        assert [d.to_dict() for d in got.value.diagnostics] == [d.to_dict() for d in e.diagnostics]
        return
    _same_program(program_from_csv(text, "big.csv"), expected)


@pytest.mark.parametrize("case", sorted(BAD_CELLS))
def test_a_large_files_bad_cells_are_reported_as_the_cell_by_cell_reader_reports_them(case):
    from schedc.interop.csv_columns import Unread
    name, edit, named = BAD_CELLS[case]
    text = _edited(_large_text(name), edit)
    assert isinstance(read_columns(text, "big.csv", "big", LIMITS), Unread) is named
    _same_outcome(text)


def test_a_large_file_with_a_bad_cell_reads_that_cell_alone(monkeypatch):
    """The arrays read every other cell: the cell-by-cell reader parses one cell, and no row."""
    from schedc.interop import torch_csv
    text = _edited(_large_text("1f1b"), _put((-1, -5, "0X5"), (0, 3, "0X5")))
    parsed = []
    monkeypatch.setattr(torch_csv, "parse_step", lambda cell, *a, **k: parsed.append(cell) or _parse(cell, *a, **k))
    monkeypatch.setattr(torch_csv, "_read_row", None)  # (a row read whole would fail)
    with pytest.raises(SchedcError) as info:
        program_from_csv(text, "big.csv")
    assert parsed == ["0X5"]  # (once per distinct text)
    assert [(d.span.line, d.span.step) for d in info.value.diagnostics] == [(1, 3), (4, len(_rows(text)[-1]) - 5)]


def _parse(cell, *args, **kwargs):
    from schedc.ir import parse_step
    return parse_step(cell, *args, **kwargs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["1f1b", "dualpipev"]), st.randoms(use_true_random=False))
def test_a_large_file_changed_anywhere_reads_as_the_cell_by_cell_reader_reads_it(name, rng):
    text = _large_text(name)
    for _ in range(rng.choice([1, 2, 5, 40])):  # bytes changed, dropped or added
        i = rng.randrange(len(text))
        piece = rng.choice([",", "\n", "\r", "\r\n", "F", "B", "X", "9", "_", "", "(", ")", ";", '"', " ", "é", "BW",
                            "OVERLAP_F_B", text[i:i + 3]])
        text = text[:i] + piece + text[i + rng.choice([0, 1]):]
    _same_outcome(text)


def _large_text(name: str) -> str:
    from schedc.interop.csv_columns import SMALL_BYTES
    text = to_torch_csv(schedc.load(name, {"P": 4, "M": 128 if name == "1f1b" else 64}), "comms").dumps()
    assert len(text) > SMALL_BYTES  # (the array reader's)
    return text
