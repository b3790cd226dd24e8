"""Find the files schedc ships: the grammar and the built-in schedules.

In a wheel they are the data packages `schedc.grammar` and `schedc.schedules`; in a source
checkout they are the top-level `grammar/` and `schedules/` folders beside this package.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _data_dir(folder: str) -> Path:
    installed = _PACKAGE / folder  # inside an installed wheel: schedc/grammar, schedc/schedules
    return installed if installed.is_dir() else _PACKAGE.parent / folder


def grammar_path() -> Path:
    return _data_dir("grammar") / "schedc.lark"


def schedules_dir() -> Path:
    return _data_dir("schedules")


def builtin_schedules() -> dict[str, Path]:
    """Built-in schedule name (the file stem) -> path, sorted by name."""
    return dict(_listed(schedules_dir()))


@lru_cache(maxsize=4)
def _listed(folder: Path) -> tuple[tuple[str, Path], ...]:
    """The schedules shipped in `folder`, listed once (every `load` of a built-in asks)."""
    return tuple((p.stem, p) for p in sorted(folder.glob("*.pp")))
