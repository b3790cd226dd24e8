"""The CSV reader's own edges: idle cells, blank rows, quoted cells, positions."""
from __future__ import annotations

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
