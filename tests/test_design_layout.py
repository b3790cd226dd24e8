"""docs/design.md's layout table names every module under schedc/: each top-level module by its
path, each package by its folder and, in the same row, each of its modules by its file name."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "schedc"


def _rows() -> list[str]:
    page = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    table = page.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in table.splitlines() if line.startswith("| `")]


def test_every_module_is_in_the_layout_table():
    rows = _rows()
    missing = []
    for path in sorted(PACKAGE.iterdir()):
        if path.suffix == ".py":
            if not any(f"`schedc/{path.name}`" in row.split(" | ")[0] for row in rows):
                missing.append(f"schedc/{path.name}")
        elif (path / "__init__.py").exists():
            row = next((r for r in rows if f"`schedc/{path.name}/`" in r.split(" | ")[0]), None)
            if row is None:
                missing.append(f"schedc/{path.name}/")
                continue
            missing += [f"schedc/{path.name}/{m.name}" for m in sorted(path.glob("*.py"))
                        if m.name != "__init__.py" and f"`{m.name}`" not in row]
    assert missing == [], f"docs/design.md's layout table does not name {missing}"
