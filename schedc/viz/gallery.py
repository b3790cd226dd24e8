"""The gallery in viz/: every built-in schedule drawn at P=4, M=8 (V=2 where it has V), three
counterexamples (a deadlock, a crossed pair, a memory violation), two dependency graphs, and a
README.md that shows them.

Regenerate from a clone of the repository with `python -m schedc.viz.gallery`; `--check` only says
which files are stale (exit 1), which is what the test that keeps the gallery current does. The
dependency graphs are laid out by graphviz's `dot`, whose SVG differs between graphviz versions and
fonts, so their `.dot` source is what is compared; each graph's SVG records the hash of the source it
was drawn from, and is redrawn only when that source changes.
"""
from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..outputs import write_files

if TYPE_CHECKING:
    from .scene import Scene

SETTING = {"P": 4, "M": 8, "V": 2}  # V applies to the schedules that declare it
ROOT = Path(__file__).resolve().parents[2]  # the clone this module runs from
COMMAND = "python -m schedc.viz.gallery"


@dataclass(frozen=True)
class Entry:
    file: str  # the SVG's name in viz/
    title: str
    source: str  # where the schedule comes from, as the README shows it
    about: str
    scene: Scene
    svg: str


def _about(path: Path) -> str:
    """The schedule file's opening comment, joined into one sentence-like line."""
    lines = []
    for ln in path.read_text(encoding="utf-8").splitlines():
        if not ln.startswith("#"):
            break
        lines.append(ln.lstrip("#").strip())
    return " ".join(lines)


def _params_of(path: Path) -> list[str]:
    from ..parse import parse
    return [p.name for p in parse(path.read_text(encoding="utf-8"), str(path)).params]


def entries(root: Path = ROOT) -> list[Entry]:
    import schedc

    from ..resources import builtin_schedules
    from .scene import build_scene
    from .svg import render_svg
    out = []
    for name, path in builtin_schedules().items():
        params = {k: v for k, v in SETTING.items() if k in _params_of(path)}
        program = schedc.load(name, params)
        scene = build_scene(program, schedc.check(program))
        out.append(Entry(f"{name}.svg", scene.title, f"`schedules/{path.name}`", _about(path), scene,
                         render_svg(scene)))
    known = root / "tests" / "known"
    if not known.is_dir():
        raise SystemExit(f"the gallery is made from a clone of schedc: {known} is missing")
    examples = [
        ("known_pytorch_172668.svg", known / "pytorch_172668.pp", {}, None),
        ("known_tagless_order.svg", known / "tagless_order.pp", {}, None),
        ("1f1b_memory_limit_3.svg", None, {"P": 4, "M": 8}, 3),
    ]
    for file, known_path, params, limit in examples:
        program = schedc.load(str(known_path) if known_path else "1f1b", params or None)
        scene = build_scene(program, schedc.check(program, memory_limit=limit))
        source = f"`tests/known/{known_path.name}`" if known_path else "`1f1b` with `--memory-limit 3`"
        about = _about(known_path) if known_path else ("1F1B keeps min(P - r, M) activations on rank r, so rank 0 needs 4 "
                                           "and a limit of 3 fails at its fourth forward.")
        out.append(Entry(file, scene.title, source, about, scene, render_svg(scene)))
    return out


@dataclass(frozen=True)
class Graph:
    stem: str  # dag_<name>: the .dot source and the .svg drawn from it in viz/
    title: str
    source: str
    about: str
    dot: str  # the graphviz source: byte-stable, unlike dot's output


def graphs(root: Path = ROOT) -> list[Graph]:
    """The dependency graphs of the gallery: a small 1F1B, and the deadlock of pytorch#172668."""
    import schedc

    from .dag import dependency_graph
    out = []
    for stem, path, params, about in [
        ("dag_1f1b", None, {"P": 2, "M": 2}, "Every step a node, the ranks as rows, the edges the verifier's "
         "happens-before constraints (grey: program order, black: data); no cycle, so it cannot deadlock."),
        ("dag_known_pytorch_172668", root / "tests" / "known" / "pytorch_172668.pp", {}, None),
    ]:
        program = schedc.load(str(path) if path else "1f1b", params or None)
        report = schedc.check(program)
        source = f"`schedc viz tests/known/{path.name} --dag`" if path else "`schedc viz 1f1b --param P=2 --param M=2 --dag`"
        if not about:
            assert path is not None  # (a graph without its words is a file's: its opening comment says them)
            about = _about(path)
        out.append(Graph(stem, _title(program), source, about, dependency_graph(program, report).source))
    return out


def _title(program) -> str:
    params = ", ".join(f"{k}={v}" for k, v in program.params)
    return program.name + (f" ({params})" if params else "")


def _digest(dot: str) -> str:
    return hashlib.sha256(dot.encode("utf-8")).hexdigest()[:16]


_DRAWN_FROM = re.compile(r"<!-- schedc gallery: drawn by graphviz's dot from (\S+) \(sha256 ([0-9a-f]+)\)")


def drawn_from(svg_text: str) -> tuple[str, str] | None:
    """(the .dot file, its hash) a gallery graph's SVG was drawn from, or None."""
    m = _DRAWN_FROM.search(svg_text)
    return (m.group(1), m.group(2)) if m else None


def draw(graph: Graph) -> str:
    """The graph's SVG through `dot`, marked with the hash of the source it was drawn from."""
    import graphviz

    from .dag import INSTALL
    try:
        svg = graphviz.Source(graph.dot).pipe(format="svg", quiet=True).decode("utf-8")
    except graphviz.ExecutableNotFound:
        raise SystemExit(f"drawing {graph.stem}.svg needs graphviz's `dot` program: {INSTALL}") from None
    mark = (f"<!-- schedc gallery: drawn by graphviz's dot from {graph.stem}.dot (sha256 {_digest(graph.dot)}); "
            f"regenerate with {COMMAND} -->\n")
    at = svg.find("<svg")
    return svg[:at] + mark + svg[at:] if at >= 0 else mark + svg


def build(root: Path = ROOT) -> dict[str, str]:
    """Every compared file of the gallery: name -> text (the graphs' .dot sources, not their SVGs)."""
    items = entries(root)
    dags = graphs(root)
    files = {e.file: e.svg for e in items}
    files.update({f"{g.stem}.dot": g.dot for g in dags})
    files["README.md"] = _readme(items, dags)
    return files


def _readme(items: list[Entry], dags: list[Graph]) -> str:
    def num(x):
        return "" if x is None else (str(int(x)) if float(x).is_integer() else f"{x:.4g}")

    builtin = [e for e in items if not e.file.startswith(("known_", "1f1b_memory"))]
    failing = [e for e in items if e not in builtin]
    lines = [
        "# Gallery",
        "",
        f"Every built-in schedule at P={SETTING['P']}, M={SETTING['M']} (V={SETTING['V']} where it has V), drawn by",
        "`schedc viz` with the default costs, and three counterexamples. Every schedule splits the same model:",
        "a rank's share of it costs t_F = t_I = t_W = 1 (t_B = 2) and holds one unit of activation per",
        "microbatch, so with V chunks per rank each chunk takes 1/V of that. Ranks are rows,",
        "time runs to the right; F, B, I, W and overlapped pairs each have their own colour (Okabe-Ito, safe",
        "for colour-blind readers), the number in a block is its microbatch, a rank's later chunks are a lighter",
        "shade with an outline, hatched grey is idle time, and the blue strip under each rank is its live memory",
        "(its scale at the left, in units of activation memory).",
        "",
        f"Generated by `{COMMAND}` from the repository root; do not edit by hand (a test fails when this",
        "folder is stale).",
        "",
        "| schedule | makespan | bubble | peak memory per rank | picture |",
        "|---|---|---|---|---|",
    ]
    for e in builtin:
        s = e.scene
        peaks = ", ".join(num(r.peak_simulated) for r in s.summary)
        lines.append(f"| {e.title} | {num(s.makespan)} | {s.bubble:.1%} | {peaks} | [{e.file}]({e.file}) |")
    lines.append("")
    for e in builtin:
        lines += [f"## {e.title}", "", f"{e.about} ({e.source})", "", f"![{e.title}]({e.file})", ""]
    lines += ["# Counterexamples", "",
              "What `schedc check --viz out.svg` draws when a check fails: a deadlock in program order with the",
              "blocked steps outlined and the wait-for cycle as numbered red arrows; a crossed pair of messages;",
              "a memory violation with the moment and the live activations.", ""]
    for e in failing:
        lines += [f"## {e.title}", "", f"{e.about} ({e.source})", "", f"_{e.scene.verdict}_", "",
                  f"![{e.title}]({e.file})", ""]
    lines += ["# Dependency graphs", "",
              "What `schedc viz --dag` draws: one node per step, the ranks as rows (rank 0 on top, each in",
              "program order), and the happens-before constraints the verifier uses as edges (grey: program",
              "order, black: data, blue dashed: a send or receive waiting for its partner to be posted); a",
              "deadlock's wait-for cycle is red, its blocked steps outlined. Laid out by graphviz's `dot`; the",
              "`.dot` source of each is next to it.", ""]
    for g in dags:
        lines += [f"## {g.title}", "", f"{g.about} ({g.source}; source [{g.stem}.dot]({g.stem}.dot))", "",
                  f"![{g.title}, dependency graph]({g.stem}.svg)", ""]
    return "\n".join(lines)


def _drawn(files: dict[str, str]) -> dict[str, str]:
    """The SVG of every graph in `files` -> the .dot source it must be drawn from."""
    return {name[:-4] + ".svg": name for name in files if name.endswith(".dot")}


def _current_drawing(folder: Path, svg: str, dot_name: str, dot: str) -> bool:
    path = folder / svg
    return path.is_file() and drawn_from(path.read_text(encoding="utf-8")) == (dot_name, _digest(dot))


def stale(folder: Path, files: dict[str, str]) -> list[str]:
    """What differs between `folder` and the gallery: missing, changed, or left over; a graph's SVG
    is current when it was drawn from the current .dot source (its text depends on graphviz)."""
    out = []
    for name, text in files.items():
        path = folder / name
        if not path.is_file():
            out.append(f"{name}: missing")
        elif path.read_text(encoding="utf-8") != text:
            out.append(f"{name}: out of date")
    drawn = _drawn(files)
    for svg, dot_name in drawn.items():
        if not (folder / svg).is_file():
            out.append(f"{svg}: missing")
        elif not _current_drawing(folder, svg, dot_name, files[dot_name]):
            out.append(f"{svg}: not drawn from the current {dot_name}")
    if folder.is_dir():
        for path in sorted([*folder.glob("*.svg"), *folder.glob("*.dot")]):
            if path.name not in files and path.name not in drawn:
                out.append(f"{path.name}: not part of the gallery any more")
    return out


def write(folder: Path, files: dict[str, str], dags: Sequence[Graph] = ()) -> None:
    """Write the gallery; a graph's SVG is redrawn (through `dot`) only when its source changed."""
    folder.mkdir(parents=True, exist_ok=True)
    drawn = _drawn(files)
    svgs = {f"{g.stem}.svg": draw(g) for g in dags
            if not _current_drawing(folder, f"{g.stem}.svg", f"{g.stem}.dot", g.dot)}
    for path in [*folder.glob("*.svg"), *folder.glob("*.dot")]:
        if path.name not in files and path.name not in drawn:
            path.unlink()
    write_files(folder, {**files, **svgs})  # atomically, as every output (schedc/outputs.py)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=COMMAND, description="Regenerate the gallery of schedule pictures in viz/.")
    p.add_argument("--out", type=Path, default=ROOT / "viz", help="output folder (default: viz/ of this clone)")
    p.add_argument("--check", action="store_true", help="write nothing; list stale files and exit 1 if any")
    args = p.parse_args(argv)
    files = build()
    if args.check:
        diff = stale(args.out, files)
        for line in diff:
            print(line)
        if diff:
            print(f"the gallery is stale; run `{COMMAND}`", file=sys.stderr)
        return 1 if diff else 0
    write(args.out, files, graphs())
    print(f"wrote {len(files)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
