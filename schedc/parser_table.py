"""The grammar's LALR parser, made once rather than in every process.

Building its tables takes lark 60-80 ms. schedc/parser_standalone.py (lark's standalone tool's output:
lark's LALR runtime, made by `python -m schedc.parser_table`) parses without importing lark, from the
tables shipped in grammar/schedc.lark.json; for another grammar (or lark), from the user's cache
folder, else built by lark and put there (JSON, never pickle; keyed by a hash).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .resources import grammar_path


def _import(name: str):
    """The module `name` (lark, or its standalone runtime), imported without the third-party `regex`
    module when that is installed and not yet imported: lark imports it if it can (7-10 ms) only to
    offer `regex=True` and Unicode categories (`\\p{L}`) in terminals, which schedc's grammar does
    not use (its terminals are compiled by `re` either way, and their widths found by `re`'s parser)."""
    import importlib
    if name not in sys.modules and "regex" not in sys.modules:
        sys.modules["regex"] = None  # type: ignore[assignment]  # (`import regex` raises ImportError)
        try:
            return importlib.import_module(name)
        finally:
            if "regex" in sys.modules and sys.modules["regex"] is None:
                del sys.modules["regex"]  # (anyone else's `import regex` finds it again)
    return importlib.import_module(name)


if TYPE_CHECKING:
    from . import parser_standalone as runtime
    from .parser_standalone import Lark
else:
    try:
        runtime = _import("schedc.parser_standalone")  # (lark's runtime: parse.py's trees, tokens and errors)
        Lark = runtime.Lark
    except ImportError:  # (not written yet: `python -m schedc.parser_table` writes it)
        runtime = Lark = None

FORMAT = 1  # bumped when the file's layout changes
OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": True}
_ITEMS = "\x00items"  # a JSON object standing for a dict whose keys are not all strings


def _lark():
    """lark itself, which builds the tables (the runtime above only reads them)."""
    return _import("lark")


def standalone_path() -> Path:
    """schedc/parser_standalone.py, which `main` writes."""
    return Path(__file__).resolve().parent / "parser_standalone.py"


def table_path() -> Path:
    """The table shipped beside the grammar (in a wheel: schedc/grammar/schedc.lark.json)."""
    return grammar_path().with_suffix(".lark.json")


def key(grammar: str, version: str | None = None) -> str:
    """What a table must have been made from: this grammar, these options, this format, and the
    lark (`version`; by default the runtime's, which reads the table)."""
    import hashlib
    made = json.dumps([FORMAT, version or runtime.__version__, sorted(OPTIONS.items()), grammar])
    return hashlib.sha256(made.encode("utf-8")).hexdigest()


def load(**options: Any) -> Lark:
    """The parser of the grammar with `options` (those lark allows when loading: `transformer`,
    `lexer_callbacks`, ...), from the first good table: the runtime's own, shipped, cached, or
    built now."""
    grammar = grammar_path().read_text(encoding="utf-8")
    want = key(grammar)
    found = _loaded(table_path(), want, options)
    if found is not None:
        return found
    path = cache_path(want)  # (made only when the shipped table does not serve)
    found = _loaded(path, want, options) if path is not None else None
    if found is not None:
        return found
    built = _built(grammar)
    if path is not None:
        write(path, want, built)
    try:
        return Lark._load_from_dict(*_serialized(built), **options)
    except Exception as exc:  # (tables of another lark than the runtime's, in another layout)
        raise RuntimeError(f"lark {_lark().__version__} built tables that schedc's parser (lark "
                           f"{runtime.__version__}'s runtime) cannot read ({exc}): run `python -m "
                           "schedc.parser_table` to write the runtime of this lark") from None


def _loaded(path: Path, want: str, options: dict) -> Lark | None:
    data = read(path, want)
    if data is None:
        return None
    try:
        return Lark._load_from_dict(data["data"], data["memo"], **options)
    except Exception:  # tables this lark cannot read back (another layout): built instead
        return None


def _built(grammar: str):
    """lark's parser built from `grammar` (60-80 ms): a `lark.Lark`, with the grammar kept."""
    return _lark().Lark(grammar, **OPTIONS)


def build():
    """The parser built from the grammar itself (60-80 ms), with the grammar kept (`.grammar`): lark's
    own, for tools (schedc/strategies.py derives texts from it)."""
    return _built(grammar_path().read_text(encoding="utf-8"))


# ---- the file: a first line naming the key and the hash of the rest, then the tables as JSON ----
def read(path: Path, want: str) -> dict | None:
    """The tables in `path` if it holds those of key `want`, intact; None otherwise (missing,
    another grammar or lark, cut short, or changed since it was written)."""
    try:
        raw = path.read_bytes()
        head, _, body = raw.partition(b"\n")
        meta = json.loads(head)
        import hashlib
        if meta.get("key") != want or meta.get("sha256") != hashlib.sha256(body).hexdigest():
            return None
        return json.loads(body, object_hook=_decode)
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def dumps(want: str, parser) -> bytes:
    """The file of lark's parser `parser`'s tables, of key `want`."""
    import hashlib
    data, memo = _serialized(parser)
    body = json.dumps(_encode({"data": data, "memo": memo}), separators=(",", ":"), sort_keys=True).encode()
    head = json.dumps({"key": want, "lark": _lark().__version__, "sha256": hashlib.sha256(body).hexdigest()})
    return head.encode() + b"\n" + body


def write(path: Path, want: str, parser, mode: int = 0o600) -> bool:
    """Put the tables in `path` whole or not at all (a temporary file renamed); False if it cannot."""
    try:
        return _replace(path, dumps(want, parser), mode)
    except (TypeError, ValueError):  # (TypeError: tables of a lark holding what JSON cannot)
        return False


def _replace(path: Path, text: bytes, mode: int) -> bool:
    """`text` put in `path` whole or not at all (a temporary file renamed); False if it cannot."""
    import tempfile
    try:
        fd, tmp = tempfile.mkstemp(prefix=".parser-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return True
    except OSError:
        return False


def _serialized(parser) -> tuple[dict, dict]:
    _lark()
    from lark.grammar import Rule
    from lark.lexer import TerminalDef
    return parser.memo_serialize([TerminalDef, Rule])


def _encode(value: Any) -> Any:
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _encode(v) for k, v in value.items()}
        return {_ITEMS: [[_encode(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (str, int, float)):
        return value
    raise TypeError(f"cannot write {type(value).__name__} into a parser table")


def _decode(obj: dict) -> Any:
    if len(obj) == 1 and _ITEMS in obj:
        return {k: v for k, v in obj[_ITEMS]}
    return obj


# ---- the user's cache: a folder only its owner can write ----
def cache_path(want: str) -> Path | None:
    """Where this user's copy of the tables of key `want` lives: $XDG_CACHE_HOME/schedc (or
    ~/.cache/schedc), made with mode 0700. None when there is no such folder to be had, or it is
    not the user's own and private (a table others can write is not read)."""
    try:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        if not os.path.isabs(base):
            return None
        folder = Path(base) / "schedc"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.stat()
        if (hasattr(os, "getuid") and st.st_uid != os.getuid()) or st.st_mode & 0o022:
            return None
        return folder / f"parser-{want[:32]}.json"
    except (OSError, RuntimeError):
        return None


# ---- the standalone runtime: lark's own tool, its tables, and what they were made from ----
def standalone_text(grammar: str, parser) -> str:
    """schedc/parser_standalone.py for lark's parser `parser` of `grammar`: lark.tools.standalone's
    output (uncompressed: no pickle) with two lines left out and without its tables, which are read
    from the table shipped beside the grammar: as a Python literal they took 100 ms to compile in
    every process that may not write bytecode (PYTHONDONTWRITEBYTECODE), against 8 ms to read."""
    from lark.tools.standalone import gen_standalone
    lines: list[str] = []
    gen_standalone(parser, output=lambda *items: lines.append(" ".join(map(str, items))))
    # (left out: pickle, imported for compressed tables, and lark's package's own `__version__`, which
    # would be schedc's here: the module's `__version__` is lark's)
    dropped = {"import pickle, zlib, base64", "from . import __version__"}
    body = "\n".join(line for line in "\n".join(lines).split("\n") if line.strip() not in dropped)
    body = _without_tables(body)
    return ('"""lark\'s LALR runtime, to parse without importing lark (the tables: grammar/schedc.lark.json).\n\n'
            "Generated by `python -m schedc.parser_table` (after a change to the grammar, or to lark) with lark's\n"
            "standalone tool; its code is lark's, under the Mozilla Public License 2.0 (below). Not edited by hand.\n"
            '"""\n' + body + "\n")


def _without_tables(body: str) -> str:
    """The standalone's text less its `DATA = (...)` and `MEMO = (...)` literals and the function
    that reads them (`Lark_StandAlone`): schedc reads the tables through `load`."""
    out: list[str] = []
    skipping = False
    for line in body.split("\n"):
        if line in ("DATA = (", "MEMO = ("):
            skipping = True
            continue
        if skipping:
            skipping = line != ")"
            continue
        if line.startswith("def Lark_StandAlone(") or line.startswith("  return Lark._load_from_dict(DATA"):
            continue
        out.append(line)
    return "\n".join(out)


def main() -> int:
    """Write the runtime and the table shipped with the grammar (after changing grammar/schedc.lark,
    or lark)."""
    lark = _lark()
    grammar = grammar_path().read_text(encoding="utf-8")
    built = _built(grammar)
    writes = ((table_path(), lambda path: write(path, key(grammar, lark.__version__), built, mode=0o644)),
              (standalone_path(), lambda path: _replace(path, standalone_text(grammar, built).encode(), 0o644)))
    for path, put in writes:
        if not put(path):
            sys.stderr.write(f"could not write {path}\n")
            return 1
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
