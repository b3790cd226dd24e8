"""A program format is one registered object (schedc/interop/formats.py; docs/design.md, "How to add
an export format"): `--format`, `export --to`, the extension inference and docs/cli.md's lists are
the registry's, every format with a reader and a writer round-trips, and a format registered
in-process is exported and read by the CLI with no other edit."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import schedc
from schedc.interop import formats
from schedc.interop.formats import FORMATS, Format, by_extension, readable, writable

ROOT = Path(__file__).resolve().parent.parent
BOTH = [f.name for f in FORMATS.values() if f.read and f.write]


def _choices(run_cli, command: str, option: str) -> list[str]:
    code, out, _ = run_cli(command, "--help")
    assert code == 0
    return re.search(rf"{option} \{{([^}}]*)\}}", out).group(1).split(",")


def test_the_cli_choices_are_the_registry(run_cli):
    for command in ("check", "export", "sim", "compile", "viz", "run"):
        assert _choices(run_cli, command, "--format") == list(readable())
    assert _choices(run_cli, "export", "--to") == list(writable())


def test_docs_list_the_registry():
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert f"--to {'|'.join(writable())} " in page
    assert f"--format {'|'.join(readable())}`" in page


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_each_extension_picks_its_format(fmt):
    for ext in FORMATS[fmt].extensions:
        assert by_extension(f"dir.x/schedule{ext.upper()}").name == fmt
    assert by_extension("schedule.txt").name == "pp"


@pytest.mark.parametrize("name,params", [("1f1b", "P=2,M=3"), ("zbv", "P=2,M=4"), ("interleaved_1f1b", "P=2,M=4")])
@pytest.mark.parametrize("fmt", BOTH)
def test_each_format_round_trips_through_the_cli(run_cli, tmp_path, fmt, name, params):
    out = tmp_path / f"out{FORMATS[fmt].extensions[0]}"
    code, _, err = run_cli("export", name, "--param", params, "--to", fmt, "-o", str(out))
    assert code == 0, err
    again = tmp_path / f"again{FORMATS[fmt].extensions[0]}"
    code, _, err = run_cli("export", str(out), "--to", fmt, "-o", str(again))  # read by its extension
    assert code == 0, err
    read, reread = schedc.load(str(out)), schedc.load(str(again))
    assert _rows(read) == _rows(reread) and schedc.check(read).ok
    if fmt == "ir-json":  # (the IR is the program itself; a CSV is its lowering for torch)
        assert _rows(read) == _rows(schedc.load(name, {k: int(v) for k, v in (kv.split("=") for kv in params.split(","))}))


def _rows(program):
    from schedc.ir import format_step
    return (program.num_ranks, program.num_stages, program.num_microbatches,
            [[format_step(s) for s in rank] for rank in program.ranks])


def test_a_registered_format_is_exported_and_read_with_no_other_edit(run_cli, tmp_path):
    def write(program, **_):
        from schedc.ir import format_step
        return "\n".join(" ".join(format_step(s) for s in rank) for rank in program.ranks) + "\n"

    def read(text, name, **_):
        body = "\n".join(f"  rank {r}: {line}" for r, line in enumerate(text.splitlines()))
        return schedc.api.load_text(f"schedule rows {{\n{body}\n}}\n", name)

    formats.register(Format("rows", (".rows",), "one line of steps per rank", read=read, write=write))
    try:
        code, out, err = run_cli("export", "1f1b", "--param", "P=2,M=2", "--to", "rows")
        assert code == 0, err
        assert out.startswith("0F0 ")
        (tmp_path / "s.rows").write_text(out)
        code, out, err = run_cli("check", str(tmp_path / "s.rows"))
        assert code == 0, err
        assert "rows" in _choices(run_cli, "check", "--format")
    finally:
        formats.unregister("rows")
    assert "rows" not in writable()
