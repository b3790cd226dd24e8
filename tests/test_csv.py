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


# ---- a byte order mark (Excel's "CSV UTF-8", some editors): torch's reader takes it as part of the first cell ----
BOM = b"\xef\xbb\xbf"
SMALL = "0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n"


def _large(name: str = "1f1b", params: dict | None = None) -> str:
    """A lowered built-in's CSV over csv_columns.SMALL_BYTES: the array reader's."""
    import schedc
    from schedc.interop.csv_columns import SMALL_BYTES
    from schedc.interop.torch_csv import to_torch_csv
    text = to_torch_csv(schedc.load(name, params or {"P": 4, "M": 128})).dumps()
    assert len(text) > SMALL_BYTES
    return text


def _bom_message(first: str) -> str:
    return (f"error[csv]: the file starts with a byte order mark (U+FEFF, bytes EF BB BF), which torch's reader "
            f"takes as part of the first cell: it reads '\\ufeff{first}', which is no action (\"Invalid action "
            "string\"), and cannot load the file; save it as UTF-8 without a byte order mark (in Excel, \"CSV "
            "(Comma delimited)\" rather than \"CSV UTF-8\")")


@pytest.mark.parametrize("size", ["small", "large", "compounds"])
@pytest.mark.parametrize("notation", ["current", "legacy"])
def test_a_csv_that_starts_with_a_byte_order_mark_is_refused_at_its_first_cell(run_cli, tmp_path, size, notation):
    text = {"small": lambda: SMALL, "large": _large, "compounds": lambda: _large("dualpipev", {"P": 4, "M": 64})}[size]()
    path = tmp_path / "bom.csv"
    path.write_bytes(BOM + text.encode())
    code, out, err = run_cli("check", str(path), "--notation", notation)
    first = text.split(",")[0]
    head, line, caret = err.splitlines()[:3]
    assert code == 2 and head == f"{path}:1:1: {_bom_message(first)}", err
    assert line.startswith(f"   1 | {first},") and caret == "     | " + "^" * len(first)  # (the line as editors show it)
    code, out, _ = run_cli("check", str(path), "--json", "--notation", notation)
    [error] = json.loads(out)["errors"]
    assert (code, error["code"], error["line"], error["column"], error["rank"], error["step"]) == (2, "csv", 1, 1, 0, 0)


def test_torch_refuses_a_csv_that_starts_with_a_byte_order_mark(tmp_path):
    """torch 2.13's `_PipelineScheduleRuntime._load_csv`: csv.reader over the file opened in the default
    encoding, then `_Action.from_str` of each cell, whose regular expression the mark defeats."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    path = tmp_path / "bom.csv"
    for data, loads in ((SMALL.encode(), True), (BOM + SMALL.encode(), False)):
        path.write_bytes(data)
        runtime = object.__new__(schedules._PipelineScheduleRuntime)  # (no stages: reading is all that runs)
        runtime.pipeline_order = {}
        try:
            runtime._load_csv(str(path), "compute_comms")
        except RuntimeError as exc:
            assert not loads and "Invalid action string: \ufeff0F0" in str(exc)
        except AttributeError:  # (read, then its lowering asks for the stages it was not given)
            assert loads and runtime.pipeline_order == {}
        else:
            raise AssertionError("torch's reader neither read nor refused the file")


@pytest.mark.parametrize("argv", [
    ("check", "{path}"), ("check", "{path}", "--param", "P=2,M=2"), ("sim", "{path}"), ("compare", "{path}", "1f1b"),
    ("export", "{path}", "--to", "ir-json"), ("viz", "{path}", "-o", "{tmp}/x.svg"), ("compile", "{path}", "-o", "{tmp}/out"),
    ("check", "--format", "torch-csv", "{txt}"), ("diagnose", "--schedule", "{path}", "{tmp}"),
    ("plan", "--gpus", "2", "--global-batch", "4", "--model", "llama3-8b", "--hardware", "h100-80gb", "{path}"),
])
def test_every_command_refuses_a_csv_with_a_byte_order_mark(run_cli, tmp_path, argv):
    (tmp_path / "bom.csv").write_bytes(BOM + SMALL.encode())
    (tmp_path / "bom.txt").write_bytes(BOM + SMALL.encode())
    names = {"path": str(tmp_path / "bom.csv"), "txt": str(tmp_path / "bom.txt"), "tmp": str(tmp_path)}
    code, _, err = run_cli(*(a.format(**names) for a in argv))
    assert code == 2 and "1:1: error[csv]: the file starts with a byte order mark" in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "x.svg").exists()


def test_standard_input_and_the_api_refuse_a_csv_with_a_byte_order_mark(tmp_path, monkeypatch):
    import io
    import sys

    import schedc
    from schedc.api import load_text
    from schedc.cli import main
    from schedc.interop.torch_csv import program_from_csv
    path = tmp_path / "bom.csv"
    path.write_bytes(BOM + SMALL.encode())
    calls = [lambda: schedc.from_torch_csv(str(path)), lambda: schedc.load(str(path), notation="legacy"),
             lambda: load_text("\ufeff" + SMALL, "bom.csv", "torch-csv"), lambda: read_torch_csv("\ufeff" + SMALL),
             lambda: program_from_csv("\ufeff" + _large(), "bom.csv")]
    for call in calls:
        with pytest.raises(SchedcError, match="the file starts with a byte order mark") as info:
            call()
        assert info.value.code == "csv" and (info.value.diagnostics[0].span.line, info.value.diagnostics[0].span.column) == (1, 1)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BOM + SMALL.encode()), encoding="utf-8"))
    out, err = io.StringIO(), io.StringIO()
    assert main(["check", "-", "--format", "torch-csv"], out, err) == 2
    assert err.getvalue().startswith(f"<stdin>:1:1: {_bom_message('0F0')}")


def test_a_byte_order_mark_elsewhere_is_the_cell_it_is_in():
    """(Only a file's first bytes are a byte order mark: inside, U+FEFF is a character of its cell.)"""
    with pytest.raises(SchedcError) as info:
        read_torch_csv("0F0,0B0\r\n\ufeff1F0,1B0\r\n", "mid.csv")
    d = info.value.diagnostics[0]
    assert (d.span.line, d.span.column, d.message) == (2, 1, "rank 1, step 0: invalid action '\\ufeff1F0'; expected "
                                                       "[stage][kind][microbatch], e.g. 2F0, 1SEND_F3, 0UNSHARD")
