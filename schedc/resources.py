"""Find the files schedc ships: the grammar and the built-in schedules.

In a wheel they are the data packages `schedc.grammar` and `schedc.schedules`; in a source
checkout they are the top-level `grammar/` and `schedules/` folders beside this package.
"""
from __future__ import annotations

import importlib.resources
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent


def _data_dir(package: str, folder: str) -> Path:
    try:
        found = importlib.resources.files(package)
        path = Path(str(found))
        if path.is_dir():
            return path
    except (ModuleNotFoundError, TypeError):
        pass
    return _REPO / folder


def grammar_path() -> Path:
    return _data_dir("schedc.grammar", "grammar") / "schedc.lark"


def schedules_dir() -> Path:
    return _data_dir("schedc.schedules", "schedules")


def builtin_schedules() -> dict[str, Path]:
    """Built-in schedule name (the file stem) -> path, sorted by name."""
    return {p.stem: p for p in sorted(schedules_dir().glob("*.pp"))}
