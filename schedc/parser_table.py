"""The grammar's LALR tables, made once rather than in every process.

Building them from grammar/schedc.lark takes lark 60-80 ms; reading them back takes a few. They are
read from the package (grammar/schedc.lark.json, made by `python -m schedc.parser_table`), else from
the user's cache folder, else built and put there. JSON, never pickle; keyed by a hash of the grammar.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .resources import grammar_path


def _import_lark():
    """lark, imported without the third-party `regex` module when that is installed and not yet
    imported: lark imports it if it can (7-10 ms, more than the rest of schedc's parser) only to
    offer `regex=True` and Unicode categories (`\\p{L}`) in terminals, which schedc's grammar does
    not use (its terminals are compiled by `re` either way, and their widths found by `re`'s parser)."""
    if "lark" not in sys.modules and "regex" not in sys.modules:
        sys.modules["regex"] = None  # type: ignore[assignment]  # (`import regex` raises ImportError)
        try:
            import lark
        finally:
            if "regex" in sys.modules and sys.modules["regex"] is None:
                del sys.modules["regex"]  # (anyone else's `import regex` finds it again)
    import lark
    return lark


if TYPE_CHECKING:
    import lark
    from lark import Lark
else:
    lark = _import_lark()
    Lark = lark.Lark

FORMAT = 1  # bumped when the file's layout changes
OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": True}
_ITEMS = "\x00items"  # a JSON object standing for a dict whose keys are not all strings


def table_path() -> Path:
    """The table shipped beside the grammar (in a wheel: schedc/grammar/schedc.lark.json)."""
    return grammar_path().with_suffix(".lark.json")


def key(grammar: str) -> str:
    """What a table must have been made from: this grammar, these options, this lark, this format."""
    made_from = json.dumps([FORMAT, lark.__version__, sorted(OPTIONS.items()), grammar])
    return hashlib.sha256(made_from.encode("utf-8")).hexdigest()


def load(**options: Any) -> Lark:
    """The parser of the grammar with `options` (those lark allows when loading: `transformer`,
    `lexer_callbacks`, ...), from the first good table: shipped, cached, or built now."""
    grammar = grammar_path().read_text(encoding="utf-8")
    want = key(grammar)
    found = _loaded(table_path(), want, options)
    if found is not None:
        return found
    path = cache_path(want)  # (made only when the shipped table does not serve)
    found = _loaded(path, want, options) if path is not None else None
    if found is not None:
        return found
    built = Lark(grammar, **OPTIONS)
    if path is not None:
        write(path, want, built)
    if not options:
        return built
    try:
        return Lark._load_from_dict(*_serialized(built), **options)
    except Exception:  # a lark that cannot load its own tables back: built with the options instead
        return Lark(grammar, **OPTIONS, **options)


def _loaded(path: Path, want: str, options: dict) -> Lark | None:
    data = read(path, want)
    if data is None:
        return None
    try:
        return Lark._load_from_dict(data["data"], data["memo"], **options)
    except Exception:  # tables this lark cannot read back (another layout): built instead
        return None


def build() -> Lark:
    """The parser built from the grammar itself (60-80 ms), with the grammar kept (`.grammar`)."""
    return Lark(grammar_path().read_text(encoding="utf-8"), **OPTIONS)


# ---- the file: a first line naming the key and the hash of the rest, then the tables as JSON ----
def read(path: Path, want: str) -> dict | None:
    """The tables in `path` if it holds those of key `want`, intact; None otherwise (missing,
    another grammar or lark, cut short, or changed since it was written)."""
    try:
        raw = path.read_bytes()
        head, _, body = raw.partition(b"\n")
        meta = json.loads(head)
        if meta.get("key") != want or meta.get("sha256") != hashlib.sha256(body).hexdigest():
            return None
        return json.loads(body, object_hook=_decode)
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def dumps(want: str, parser: Lark) -> bytes:
    data, memo = _serialized(parser)
    body = json.dumps(_encode({"data": data, "memo": memo}), separators=(",", ":"), sort_keys=True).encode()
    head = json.dumps({"key": want, "lark": lark.__version__, "sha256": hashlib.sha256(body).hexdigest()})
    return head.encode() + b"\n" + body


def write(path: Path, want: str, parser: Lark, mode: int = 0o600) -> bool:
    """Put the tables in `path` whole or not at all (a temporary file renamed); False if it cannot."""
    import tempfile
    try:
        text = dumps(want, parser)
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
    except (OSError, TypeError, ValueError):  # (TypeError: tables of a lark holding what JSON cannot)
        return False


def _serialized(parser: Lark) -> tuple[dict, dict]:
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


def main() -> int:
    """Write the table shipped with the grammar (after changing grammar/schedc.lark, or lark)."""
    grammar = grammar_path().read_text(encoding="utf-8")
    path = table_path()
    if not write(path, key(grammar), Lark(grammar, **OPTIONS), mode=0o644):
        sys.stderr.write(f"could not write {path}\n")
        return 1
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
