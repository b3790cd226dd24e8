"""The CSV reader's own edges: idle cells, blank rows, quoted cells, positions; and the step
numbers a CSV's report shows (the CSV column everywhere, idle cells counted)."""
from __future__ import annotations

import json
import re

import pytest

from schedc.errors import SchedcError
from schedc.interop.torch_csv import read_torch_csv


@pytest.mark.parametrize("text", ["0F0,0B0\r\n\r\n1F0,1B0\r\n", "0F0,,0B0\r\n\r\n", ",1F0\r\n"])
def test_blank_rows_and_idle_cells_round_trip(text):
    table = read_torch_csv(text)
    assert table.dumps() == text
    assert len(table.rows) == text.count("\r\n")


def test_steps_count_idle_cells_as_torch_does():
    table = read_torch_csv(",0F0,,0B0\r\n")
    steps = [cell.span.step for cell in table.rows[0] if cell is not None]
    assert steps == [1, 3]


def test_quoted_cells_keep_their_columns():
    with pytest.raises(SchedcError) as info:
        read_torch_csv('"0F0","0X0"\r\n', "q.csv")
    d = info.value.diagnostics[0]
    assert (d.span.line, d.span.column, d.span.step) == (1, 7, 1)


def test_empty_file_is_an_error():
    with pytest.raises(SchedcError) as info:
        read_torch_csv("\n", "e.csv")
    assert info.value.code == "csv"


def test_export_writes_no_compute_level_csv_of_communication_alone(run_cli, tmp_path):
    """The fuzzer's (seed 79; bench/README.md, "Fuzzing"): exporting at the compute level a CSV of
    sends, receives and an UNSHARD wrote blank rows, a CSV that does not read back (exit 0)."""
    path = tmp_path / "input.csv"
    path.write_text("1RECV_F0,0SEND_F1,0UNSHARD,9SEND_F0\r\n2SEND_F1\r\n")
    out = tmp_path / "out" / "x.csv"
    code, _, err = run_cli("export", str(path), "--to", "torch-csv", "--level", "compute", "-o", str(out))
    assert code == 2 and "--level: error[usage]: input has no compute actions (its 5 all communicate)" in err
    assert not out.parent.exists()


# Issue 17, item 7: every step a report shows for a CSV is the column of the named cell.
IDLE_DEADLOCK = (",0F0,0F1,,0SEND_F0,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\r\n"
                 "1RECV_F0,,1F0,1B0,,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\r\n")
IDLE_COMPUTE_DEADLOCK = "0F0,,0B0,,0F1,0B1\r\n,1F1,,1B1,1F0,,1B0\r\n"
IDLE_MEMORY = "0F0,,0F1,,0F2,0B0,,0B1,0B2\r\n,1F0,1B0,,1F1,1B1,1F2,1B2\r\n"


def _cell(text: str, rank: int, step: int) -> str:
    return text.split("\r\n")[rank].split(",")[step]


def _check_json(run_cli, tmp_path, text, *args) -> dict:
    path = tmp_path / "idle.csv"
    path.write_bytes(text.encode())
    code, out, err = run_cli("check", str(path), "--json", *args)
    assert code == 1, err
    return json.loads(out)


@pytest.mark.parametrize("text", [IDLE_DEADLOCK, IDLE_COMPUTE_DEADLOCK])
def test_a_deadlock_in_a_csv_names_csv_columns_everywhere(run_cli, tmp_path, text):
    row = _check_json(run_cli, tmp_path, text)
    dl = row["deadlock"]
    assert dl is not None, row["errors"]
    for entry in dl["cycle"]:
        assert _cell(text, entry["rank"], entry["step"]) == entry["action"], entry
        on = entry["waits_for"]
        assert _cell(text, on["rank"], on["step"]) == on["action"], entry
    for entry in dl["stuck"]:
        assert _cell(text, entry["rank"], entry["step"]) != ""
    blocked = {(c["rank"], c["step"]) for c in dl["cycle"]}
    assert blocked <= {(s["rank"], s["step"]) for s in dl["stuck"]}
    assert all((e["rank"], e["step"]) in blocked for e in row["errors"]), row["errors"]


def test_a_memory_violation_in_a_csv_names_the_csv_column(run_cli, tmp_path):
    row = _check_json(run_cli, tmp_path, IDLE_MEMORY, "--memory-limit", "2")
    [v] = row["memory_violations"]
    assert _cell(IDLE_MEMORY, v["rank"], v["step"]) == v["action"]
    [e] = row["errors"]
    assert (e["code"], e["rank"], e["step"]) == ("memory", v["rank"], v["step"])


def _grid_cells(header: str, row: str) -> dict[int, str]:
    """The cells of one grid row by the step number printed above them."""
    labels = {m.start(): int(m.group()) for m in re.finditer(r"\d+", header) if m.start() >= 8}
    return {labels[m.start()]: m.group() for m in re.finditer(r"\S+", row) if m.start() >= 8}


def test_the_deadlock_grid_of_a_csv_keeps_its_idle_cells(run_cli, tmp_path):
    path = tmp_path / "idle.csv"
    path.write_bytes(IDLE_DEADLOCK.encode())
    code, out, err = run_cli("check", str(path))
    lines = (out + err).splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("step "))
    header, *rows = lines[head:head + 3]
    for rank, row in enumerate(rows):
        cells = _grid_cells(header, row)
        assert cells, row
        for step, text in cells.items():
            assert _cell(IDLE_DEADLOCK, rank, step) == text.strip("[]"), (header, row)
        assert cells[5] == ("[0SEND_F1]", "[1SEND_B0]")[rank]
