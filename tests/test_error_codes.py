"""The table of error codes in docs/errors.md lists exactly the codes schedc can emit, read from the code.

A code is the first argument of `SchedcError(...)`, `Diagnostic(...)` or of a call with a code and a
message to any function whose first parameter is `code` (lint's `Findings.add`). In the first two a
code that is not a literal may only pass an existing code on (`code`, `exc.code`, `d.code`), so no
code can hide in a variable.
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "schedc").rglob("*.py"))


def _trees():
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in SOURCES]


def _takes_code(trees) -> set[str]:
    """Names of the callables whose first argument is a code."""
    out = {"SchedcError", "Diagnostic"}
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in node.args.args if a.arg not in ("self", "cls")]
                if names[:1] == ["code"] and node.name != "__init__":
                    out.add(node.name)
    return out


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _literals(arg: ast.expr) -> list[str] | None:
    """The codes an argument can be, or None if it is not made of string literals."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.IfExp):
        a, b = _literals(arg.body), _literals(arg.orelse)
        return a + b if a is not None and b is not None else None
    return None


def _passes_code_on(arg: ast.expr) -> bool:
    return (isinstance(arg, ast.Name) and arg.id == "code") or (isinstance(arg, ast.Attribute) and arg.attr == "code")


@lru_cache(maxsize=1)
def emitted_codes() -> dict[str, set[str]]:
    """Every code the code can emit -> the files that emit it."""
    trees = _trees()
    names = _takes_code(trees)
    out: dict[str, set[str]] = {}
    for path, tree in trees:
        for node in ast.walk(tree):
            name = _callee(node) if isinstance(node, ast.Call) else None
            strict = name in ("SchedcError", "Diagnostic")
            if not (strict or (name in names and len(node.args) >= 2)):
                continue  # (a set's `add(x)` is not lint's `add(code, message, ...)`)
            arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "code"), None)
            if arg is None:
                continue
            codes = _literals(arg)
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            assert codes is not None or not strict or _passes_code_on(arg), \
                f"{where}: a code that is not a literal: {ast.unparse(arg)}"
            for code in codes or ():
                out.setdefault(code, set()).add(where)
    return out


def documented_codes() -> list[str]:
    """The codes in docs/errors.md's table (the rows after its `| code | exit | meaning |` header)."""
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    table = text[text.index("| code | exit | meaning |"):].split("\n\n", 1)[0]
    return re.findall(r"^\| `([a-z-]+)` \|", table, re.M)


def test_the_docs_list_exactly_the_codes_schedc_emits():
    emitted, listed = emitted_codes(), documented_codes()
    assert len(listed) == len(set(listed)), "a code is listed twice"
    missing = {c: sorted(w) for c, w in emitted.items() if c not in listed}
    assert not missing, f"emitted, not in docs/errors.md's table: {missing}"
    assert not set(listed) - set(emitted), f"in docs/errors.md's table, never emitted: {set(listed) - set(emitted)}"
    assert any("lint.py" in w for w in emitted["missing-send"])  # the scan reads lint's Findings.add too
