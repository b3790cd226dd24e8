"""`schedc.load` reads a file named by its path with one open (`api._file_text`); anything else
(a built-in's name, no such file, a directory, a pipe, text that is not UTF-8) is resolved and read
as `resolve` and `read_text` do, with their errors.
"""
from __future__ import annotations

import os

import pytest

import schedc
from schedc.api import _file_text, load_text, read_text, resolve
from schedc.errors import SchedcError


def _error(name: str) -> str:
    with pytest.raises(SchedcError) as info:
        schedc.load(name)
    return info.value.render()


def test_a_file_is_read_in_one_open_as_read_text_reads_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf0F0,0B0\n")
    # (a schedule's byte order mark is kept, for its format to judge: a PyTorch CSV refuses it)
    assert _file_text("bom.csv") == read_text(resolve("bom.csv"), keep_bom=True) == "\ufeff0F0,0B0\n"
    assert read_text(resolve("bom.csv")) == "0F0,0B0\n"  # (any other file: the mark skipped)
    (tmp_path / "a.csv").write_bytes(b"0F0,0B0\n")
    program = schedc.load("./a.csv")  # (reports name the file as it was given)
    assert program == load_text("0F0,0B0\n", "./a.csv", "torch-csv") and program.source == "./a.csv"


def test_anything_but_a_readable_file_is_resolved_and_reported_as_before(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dir.csv").mkdir()
    (tmp_path / "bad.csv").write_bytes(b"0F0,0B0\n1F0,\xff1B0\n")
    assert _file_text("dir.csv") is None and _file_text("nope.csv") is None and _file_text("bad.csv") is None
    assert _error("dir.csv").startswith("dir.csv: error[io]: dir.csv is not a file")
    assert "no such file or built-in schedule: 'nope.csv'" in _error("nope.csv")
    assert _error("./bad.csv").startswith("bad.csv:2:5: error[io]: the file is not UTF-8 text")  # (read_text's name)
    assert schedc.load("1f1b", {"P": 2, "M": 2}).source == str(resolve("1f1b"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_pipe_is_not_a_file_and_opening_it_does_not_wait_for_a_writer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("pipe.csv")
    assert _file_text("pipe.csv") is None
    assert _error("pipe.csv").startswith("pipe.csv: error[io]: pipe.csv is a pipe, not a file, and this reads files")


def test_an_empty_path_is_said_to_be_empty():
    """Not "error[io]:  is not a file" (the empty path is the current directory to `Path`)."""
    assert _error("") == "input: error[io]: the path is empty: name a file or a built-in schedule"


CALLS = {
    "from_torch_csv": lambda path, notation: schedc.from_torch_csv(path, notation=notation),
    "load": lambda path, notation: schedc.load(path, notation=notation),
    "load_text": lambda path, notation: load_text("0F0,0B0\n", path, "torch-csv", notation=notation),
    "torch.schedule": lambda path, notation: _torch_schedule(path, notation),
}


def _torch_schedule(path, notation):
    import schedc.torch  # (the notation is refused before torch is imported: no torch needed)
    return schedc.torch.schedule(path, [object()], 1, notation=notation)


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("notation", ["ancient", "Legacy", None])
def test_an_unknown_notation_is_the_usage_error_the_cli_gives(tmp_path, call, notation):
    """The API read any other value as the current notation, silently; `--notation` refuses it."""
    path = tmp_path / "a.csv"
    path.write_text("0F0,0B0\n")
    with pytest.raises(SchedcError) as info:
        CALLS[call](str(path), notation)
    assert info.value.code == "usage"
    assert info.value.render().startswith(f"notation: error[usage]: invalid notation: {notation!r} "
                                          "(choose from 'current', 'legacy')")
    assert CALLS["load"](str(path), "legacy").num_actions == 2  # (the two it takes still read)
