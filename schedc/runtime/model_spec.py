"""A `--model pkg.mod:fn` checked in the launching process, before any rank starts, without importing
it (it imports torch): the form, the module found where the ranks will look (the current folder
first, as with `python -m`, then PYTHONPATH), and, read from its source, the function and its companions `loss_fn` and
`make_batch` defined there. Each rank still imports it (schedc/runtime/entry.py's `load_model`)."""
from __future__ import annotations

import ast
import importlib.util
import os
import sys

from ..errors import SchedcError

COMPANIONS = ("loss_fn", "make_batch")


def check_form(spec: str) -> tuple[str, str]:
    """(module, function) of `spec`, or a SchedcError if it is not `pkg.module:function` (what a rank
    can import anywhere: also checked for a torchrun line printed for other machines)."""
    module_name, _, fn_name = spec.partition(":")
    if not module_name or not fn_name or not all(p.isidentifier() for p in module_name.split(".")) \
            or not fn_name.isidentifier():
        raise _error(spec, "expected pkg.module:function, e.g. examples.mlp:build_stages")
    return module_name, fn_name


def check(spec: str) -> None:
    """A SchedcError (usage, at --model) saying what is wrong with `spec`, or nothing."""
    module_name, fn_name = check_form(spec)
    found = _find(module_name, spec)
    if found is None or not found.origin or not found.origin.endswith(".py"):
        return  # a compiled or namespace module: the ranks find out
    try:
        with open(found.origin, encoding="utf-8") as f:
            tree = ast.parse(f.read(), found.origin)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
        raise _error(spec, f"{module_name} cannot be read: {type(exc).__name__}: {exc}") from None
    names, open_ended = _top_level_names(tree)
    if open_ended:
        return  # `from x import *` or a module __getattr__: only importing it can tell
    if fn_name not in names:
        raise _error(spec, f"{module_name} ({found.origin}) defines no {fn_name}")
    missing = [n for n in COMPANIONS if n not in names]
    if missing:
        raise _error(spec, f"{module_name} must also define {' and '.join(missing)} (loss_fn(output, target); "
                     "make_batch(step, batch_size) -> (inputs, targets))")


def _find(module_name: str, spec: str):
    """The module's spec as a rank finds it: from the current folder, PYTHONPATH (the ranks inherit
    the environment), then this process's path."""
    cwd = os.getcwd()
    added = [p for p in [cwd, *os.environ.get("PYTHONPATH", "").split(os.pathsep)] if p and p not in sys.path]
    sys.path[:0] = added
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as exc:  # a parent package that is missing or fails
        raise _error(spec, f"cannot find {module_name}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a parent package's __init__ that fails
        raise _error(spec, f"importing {module_name.rpartition('.')[0]} failed: {type(exc).__name__}: {exc}") from None
    finally:
        for p in added:
            sys.path.remove(p)
    if found is None:
        raise _error(spec, f"no module {module_name} here (from {cwd}, or on the Python path)")
    return found


def _top_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    """The names a module binds at its top level (also inside top-level if/try), and whether it may
    bind others (`import *`, a module `__getattr__`)."""
    names: set[str] = set()
    open_ended = False
    body = list(tree.body)
    while body:
        node = body.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                open_ended |= alias.name == "*"
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            body += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                     *(h for handler in getattr(node, "handlers", []) for h in handler.body)]
    return names, open_ended or "__getattr__" in names


def _error(spec: str, why: str) -> SchedcError:
    return SchedcError("usage", f"--model {spec}: {why}", where="--model")
