"""The parser's tables are read, not built, in every process; a small check never imports numpy.

schedc/parser_table.py: the standalone runtime's tables and the table shipped beside the grammar are
current; another grammar (or lark) builds its tables once and keeps them in the user's private cache;
a changed or cut file there is not read (the tables are built again and the file put right), and a
cache others can write is not used.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from schedc import parser_table
from schedc.parse import parse

ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_table_is_the_grammars():
    """After a change to grammar/schedc.lark: `python -m schedc.parser_table` writes it again."""
    grammar = parser_table.grammar_path().read_text(encoding="utf-8")
    assert parser_table.read(parser_table.table_path(), parser_table.key(grammar)) is not None


def test_the_standalone_runtime_is_the_grammars_and_lark_s():
    """schedc/parser_standalone.py is the installed lark's runtime (so that the tables lark builds
    load into it), without tables of its own (the shipped table's are read: a literal of them took
    100 ms to compile where bytecode is not written). After a change to lark: `python -m
    schedc.parser_table` writes it again."""
    import lark
    text = parser_table.standalone_path().read_text(encoding="utf-8")
    assert parser_table.runtime.__version__ == lark.__version__
    assert "import pickle" not in text and "\nDATA = (" not in text and "\nMEMO = (" not in text


@pytest.fixture
def other_grammar(tmp_path, monkeypatch):
    """The grammar with a comment more (another key: the shipped table does not serve it), a
    private cache folder, and a count of the times the tables are built."""
    folder = tmp_path / "grammar"
    folder.mkdir()
    text = parser_table.grammar_path().read_text(encoding="utf-8") + "\n// changed\n"
    (folder / "schedc.lark").write_text(text, encoding="utf-8")
    monkeypatch.setattr(parser_table, "grammar_path", lambda: folder / "schedc.lark")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    built = []
    real = parser_table._built

    def counting(grammar):
        built.append(1)
        return real(grammar)

    monkeypatch.setattr(parser_table, "_built", counting)
    key = parser_table.key(text)
    return built, parser_table.cache_path(key), key


def _works(p) -> None:
    assert p.parse("schedule s { stages 1 rank 0: 0F0 0B0 }").data == "start"


def test_another_grammar_is_built_once_then_read_from_the_cache(other_grammar):
    built, cached, key = other_grammar
    assert not cached.exists()
    _works(parser_table.load())
    assert built == [1] and cached.is_file()
    assert oct(cached.stat().st_mode & 0o777) == "0o600" and oct(cached.parent.stat().st_mode & 0o777) == "0o700"
    _works(parser_table.load())
    assert built == [1]  # read back, not built
    assert parser_table.read(cached, key) is not None


@pytest.mark.parametrize("damage", ["cut", "changed", "not json", "another key", "empty"])
def test_a_damaged_cache_file_is_built_again_and_put_right(other_grammar, damage):
    built, cached, key = other_grammar
    parser_table.load()
    raw = cached.read_bytes()
    head, body = raw.split(b"\n", 1)
    cached.write_bytes({
        "cut": raw[:len(raw) // 2],
        "changed": head + b"\n" + body.replace(b'"RBRACE"', b'"RPAR"', 1),  # tables that would parse wrongly
        "not json": b"\x80\x04pickle?\n" + body,
        "another key": head.replace(key.encode(), b"0" * 64) + b"\n" + body,
        "empty": b"",
    }[damage])
    _works(parser_table.load())
    assert built == [1, 1]
    assert parser_table.read(cached, key) is not None  # written again, whole


def test_tables_that_lark_cannot_load_are_built_instead(other_grammar):
    """A file with the right key and hash whose content is not lark's (another lark's layout)."""
    built, cached, key = other_grammar
    body = json.dumps({"data": {}, "memo": {}}).encode()
    import hashlib
    head = json.dumps({"key": key, "sha256": hashlib.sha256(body).hexdigest()}).encode()
    cached.write_bytes(head + b"\n" + body)
    _works(parser_table.load())
    assert built == [1]


def test_tables_the_runtime_cannot_read_say_how_to_put_it_right(other_grammar, monkeypatch):
    """Tables that another lark than the runtime's built, in a layout the runtime cannot read: the
    error says how to write the runtime of that lark."""
    built, cached, key = other_grammar

    def refuse(cls, *args, **kwargs):
        raise ValueError("another layout")

    monkeypatch.setattr(parser_table.Lark, "_load_from_dict", classmethod(refuse))
    with pytest.raises(RuntimeError, match=r"cannot read \(another layout\): run `python -m schedc.parser_table`"):
        parser_table.load(lexer_callbacks={})
    assert built == [1]


def test_a_cache_others_can_write_is_not_used(other_grammar):
    built, cached, key = other_grammar
    cached.parent.chmod(0o777)
    assert parser_table.cache_path(key) is None
    _works(parser_table.load())
    _works(parser_table.load())
    assert built == [1, 1] and not cached.exists()


def test_no_cache_folder_to_be_had_still_parses(other_grammar, tmp_path, monkeypatch):
    built, _, _ = other_grammar
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file where the folder would be
    _works(parser_table.load())
    assert built == [1]


def _run(code: str, **env) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_checking_a_builtin_imports_neither_numpy_nor_builds_the_tables(tmp_path):
    code = ("import io, sys\n"
            "import lark\n"
            "built = []\n"
            "real = lark.Lark.__init__\n"
            "lark.Lark.__init__ = lambda self, *a, **k: (built.append(1), real(self, *a, **k))[1]\n"
            "from schedc.cli import main\n"
            "out = io.StringIO()\n"
            "code = main(['check', '1f1b', '--param', 'P=4,M=8'], out, io.StringIO())\n"
            "print(code, 'numpy' in sys.modules, len(built), out.getvalue().splitlines()[0])\n")
    code, numpy, built, first = _run(code, XDG_CACHE_HOME=str(tmp_path)).split(" ", 3)
    assert (code, numpy, built) == ("0", "False", "0"), first
    assert first.endswith("ok\n") or first.strip().endswith("ok")
    assert not any(tmp_path.iterdir())  # the shipped table served: nothing written to the cache


def test_a_large_program_keeps_the_array_paths():
    code = ("import sys, schedc\n"
            "p = schedc.load('1f1b', {'P': 8, 'M': 512})\n"
            "print(schedc.check(p).ok, 'numpy' in sys.modules)\n")
    assert _run(code).split() == ["True", "True"]


def test_parse_gives_the_same_tree_as_lark_s_tree_transformed(tmp_path):
    """The AST made while parsing equals what the parse tree's transform gave (spans included),
    for every built-in: the tree of the tools' parser() holds the same forms."""
    from schedc.parse import parser
    for path in sorted((ROOT / "schedules").glob("*.pp")):
        text = path.read_text(encoding="utf-8")
        tree = parser().parse(text)
        ast = parse(text, str(path))
        assert tree.data == "start" and ast.name == str(tree.children[0].children[0])
