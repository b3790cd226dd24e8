"""The import graph between schedc's own modules: no circle, and every import points down the layers.

Every `import` counts, at module level and inside functions alike (a function-level import is still
a dependency; it only hides a circle until the function runs). Third-party packages are not counted.
"""
from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "schedc"

# The layers, lowest first (docs/design.md, "Layout"). A module imports modules of its own layer or
# lower ones; the command line at the top may import anything. Names are relative to `schedc`
# ("" is `schedc/__init__.py`, whose names load lazily); `rules` is the package, `rules.*` its modules.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground floor: positions, errors, the IR, the rules", ("span", "errors", "ir", "rules", "rules.*", "jobs",
                                                            "jobs.*", "lazy_numpy", "collection")),
    ("the language, columns and plumbing", ("syntax", "parse", "parser_table", "parser_standalone", "expr", "loops", "order", "compiler",
                                             "columns", "inputs", "outputs", "signals", "resources", "units", "estimate",
                                             "solver", "capped",
                                             "progress")),
    ("structural checks and passes", ("lint", "passes", "passes.*")),
    ("the checks", ("verify", "verify.*", "report")),
    ("timing, formats, lowering, runtime", ("timeline", "simulate", "simulate_*", "costs", "hardware", "calibration",
                                            "interop",
                                            "interop.*", "importers", "importers.*", "lower", "lower.*", "runtime", "runtime.*")),
    ("the library's front door: load and check", ("", "api", "options")),
    ("tools on whole schedules", ("prove", "prove.*", "synth", "synth.*", "compare", "plan", "plan_bounds", "viz", "viz.*", "diagnose",
                                  "diagnose.*", "torch",
                                  "testing", "strategies")),
    ("the command line", ("cli", "__main__", "commands", "commands.*")),
)

# Known debts: (importer, imported) pairs that run up the layers, each with why it stays for now.
# New code does not add to this set; an entry leaves when its import is gone.
ALLOWED: frozenset[tuple[str, str]] = frozenset()


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _owner(name: str) -> str | None:
    """The schedc module a dotted name lands in (`verify.clear.Clear` lands in `verify.clear`), or None."""
    while name not in MODULES:
        if "." not in name:
            return None
        name = name.rpartition(".")[0]
    return name


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The schedc module names one import statement names, relative imports resolved."""
    if isinstance(node, ast.Import):
        return [a.name.removeprefix("schedc").removeprefix(".") for a in node.names
                if a.name.split(".")[0] == "schedc"]
    if node.level == 0:
        if (node.module or "").split(".")[0] != "schedc":
            return []
        base = node.module.removeprefix("schedc").removeprefix(".")
    else:
        here = module.split(".") if module else []
        if MODULES[module].name != "__init__.py":
            here = here[:-1]
        here = here[:len(here) - (node.level - 1)]
        base = ".".join(here + ([node.module] if node.module else []))
    return [f"{base}.{a.name}".lstrip(".") if f"{base}.{a.name}".lstrip(".") in MODULES else base
            for a in node.names]


def import_graph() -> dict[str, dict[str, int]]:
    """importer -> {imported: line of its first import}, over every import statement of every module."""
    graph: dict[str, dict[str, int]] = {m: {} for m in MODULES}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in map(_owner, _targets(module, node)):
                    if target is not None and target != module:
                        graph[module].setdefault(target, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = [stack.pop()]
            while component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return sorted(found)


def layer_of(module: str) -> int:
    homes = [i for i, (_, patterns) in enumerate(LAYERS) if any(fnmatch(module, p) for p in patterns)]
    assert len(homes) == 1, f"schedc.{module} belongs to {len(homes)} layers; place it in exactly one of LAYERS"
    return homes[0]


def test_the_graph_sees_imports_everywhere():
    graph = import_graph()
    assert "rules.deps" in graph["verify.channels"]            # module level, relative
    assert "api" in graph["compare"]                           # inside a function
    assert "api" in graph["synth.repeat"]                      # `from .. import api`
    assert "" in graph["viz.gallery"]                          # `import schedc`


def test_every_module_has_one_layer():
    for module in MODULES:
        layer_of(module)


def test_the_ir_imports_nothing_of_ours_but_spans_and_errors():
    assert set(import_graph()["ir"]) <= {"span", "errors"}


def test_the_checker_never_lowers():
    """The checks read one analysis made by schedc/report.py, which adds the lowering to it: nothing
    under schedc/verify/ imports the passes (schedc/verify/analysis.py)."""
    graph = import_graph()
    lowering = [f"{m} -> {t}" for m, targets in graph.items() if m == "verify" or m.startswith("verify.")
                for t in targets if t == "passes" or t.startswith("passes.")]
    assert not lowering, "the checker imports the lowering:\n" + "\n".join(lowering)
    assert "passes" in graph["report"]


def test_no_import_circle():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_imports_point_down_the_layers():
    graph = import_graph()
    upward = sorted((f"{a} (layer {layer_of(a)}, line {line})", f"{b} (layer {layer_of(b)})")
                    for a, targets in graph.items() for b, line in targets.items()
                    if layer_of(b) > layer_of(a) and (a, b) not in ALLOWED)
    assert not upward, "imports running up the layers:\n" + "\n".join(f"{a} -> {b}" for a, b in upward)


def test_every_allowed_debt_is_still_owed():
    graph = import_graph()
    paid = [(a, b) for a, b in sorted(ALLOWED) if not (b in graph[a] and layer_of(b) > layer_of(a))]
    assert not paid, f"paid debts, remove them from ALLOWED: {paid}"


def test_cycles_names_each_circle_once():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}, "e": {"f": 1}, "f": {"e": 1}}
    assert cycles(graph) == [["a", "b", "c"], ["e", "f"]]
