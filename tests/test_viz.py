"""Pictures: the timeline's SVG structure (blocks per rank, placement, colours per kind), golden
structures, counterexamples drawn, aggregation, the HTML report in headless Chromium, the
dependency graph through graphviz, the CLI, and that the gallery in viz/ is current (its dependency
graphs by their .dot source, since dot's SVG differs between graphviz versions).

Golden files (tests/golden/viz/*.json) hold the structure of an SVG, not its pixels. Regenerate them
with `SCHEDC_UPDATE_GOLDEN=1 python -m pytest tests/test_viz.py -k golden`.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import compile_text

import schedc
from schedc.simulate import simulate
from schedc.viz import build_scene, palette, render, timeline_html, timeline_svg
from schedc.viz import scene as scene_module
from schedc.viz.browser import find_chromium, run_page
from schedc.viz.dag import INSTALL, MAX_DAG_STEPS, dependency_graph
from schedc.viz.svg import LEFT, MAX_WIDTH, RIGHT

HERE = Path(__file__).parent
KNOWN = HERE / "known"
GOLDEN = HERE / "golden" / "viz"
ROOT = HERE.parent
NS = {"s": "http://www.w3.org/2000/svg"}
UPDATE = bool(os.environ.get("SCHEDC_UPDATE_GOLDEN"))
SETTING = {"P": 4, "M": 8, "V": 2}


def builtin(name, **params):
    """A built-in schedule at SETTING (V only where it declares V), `params` overriding."""
    from schedc.parse import parse as parse_schedule
    from schedc.resources import builtin_schedules
    path = builtin_schedules()[name]
    declared = {p.name for p in parse_schedule(path.read_text(encoding="utf-8"), str(path)).params}
    return schedc.load(name, {k: v for k, v in {**SETTING, **params}.items() if k in declared})


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def blocks(root: ET.Element) -> list[ET.Element]:
    return [e for e in root.iter(f"{{{NS['s']}}}rect") if e.get("class", "").startswith("blk")]


def by_class(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(f"{{{NS['s']}}}{tag}") if cls in e.get("class", "").split()]


def structure(svg: str) -> dict:
    """What the golden files keep: per rank, each block's kind, stage, microbatch, place and colour."""
    root = parse(svg)
    ranks: dict[str, list] = {}
    for b in blocks(root):
        ranks.setdefault(b.get("data-rank"), []).append(
            [b.get("data-kind"), int(b.get("data-stage")), b.get("data-mb"), b.get("x"), b.get("width"), b.get("y"),
             b.get("fill"), " ".join(b.get("class").split()[2:])])
    cells = [[c.get("data-row"), c.get("data-kind"), c.get("x"), c.get("width"), c.get("fill-opacity")]
             for c in by_class(root, "rect", "cell")]
    arrows = [[e.get("class")] for tag in ("line", "path") for e in root.iter(f"{{{NS['s']}}}{tag}")
              if "arrow" in e.get("class", "")]
    return {"mode": root.get("data-mode"), "width": root.get("width"), "height": root.get("height"),
            "ranks": ranks, "cells": len(cells), "first_cells": cells[:20], "arrows": arrows,
            "moments": [[m.get("data-rank"), m.get("x1")] for m in by_class(root, "line", "moment")],
            "notes": [t.text for t in by_class(root, "text", "note")],
            "header": [t.text for t in root.iter(f"{{{NS['s']}}}text")
                       if t.get("class") in ("title", "metrics", "verdict")]}


# ---- blocks: one per step, placed by the simulator's times, coloured by kind ----
@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved_1f1b", "looped_bfs", "zb_h1", "zb_h2",
                                  "interleaved_zero_bubble", "zbv", "dualpipev"])
def test_one_block_per_step_placed_by_time_and_coloured_by_kind(name):
    program = builtin(name)
    timeline = simulate(program)
    root = parse(timeline_svg(program, schedc.check(program)))
    px, top, pitch = float(root.get("data-px")), float(root.get("data-top")), float(root.get("data-pitch"))
    drawn = blocks(root)
    assert len(drawn) == sum(len(s) for s in program.ranks)
    chunks = scene_module.chunk_of(program)
    V = max(chunks) + 1
    for b in drawn:
        r, x = int(b.get("data-rank")), int(b.get("data-step"))
        step = program.ranks[r][x]
        kind = scene_module.kind_of(step)
        assert b.get("data-kind") == kind
        assert b.get("fill") == palette.fill(kind, chunks[step.parts[0].stage], V)
        assert float(b.get("x")) == pytest.approx(LEFT + timeline.start[r][x] * px, abs=0.06)
        width = (timeline.end[r][x] - timeline.start[r][x]) * px
        assert float(b.get("width")) == pytest.approx(max(width, 1.0), abs=0.06)
        assert float(b.get("y")) == pytest.approx(top + r * pitch, abs=0.06)
        if step.parts[0].microbatch is not None and kind in "FBIW":
            assert int(b.get("data-mb")) == step.parts[0].microbatch


def test_kinds_have_distinct_okabe_ito_colours_and_later_chunks_are_lighter():
    kinds = ["F", "B", "I", "W", "OVERLAP"]
    colours = [palette.KIND_COLOUR[k] for k in kinds]
    assert len(set(colours)) == len(colours)
    assert set(colours) <= set(palette.OKABE_ITO.values())
    for k in kinds:
        light = palette.fill(k, 1, 2)
        assert light != palette.fill(k, 0, 2) and sum(palette._rgb(light)) > sum(palette._rgb(palette.fill(k)))
    program = builtin("zbv")
    root = parse(timeline_svg(program, schedc.check(program)))
    second = [b for b in blocks(root) if b.get("data-chunk") == "1"]
    assert second and all(b.get("stroke") == palette.KIND_COLOUR[b.get("data-kind")] for b in second)


def test_idle_time_memory_strips_and_title():
    program = builtin("1f1b")
    timeline = simulate(program)
    root = parse(timeline_svg(program, schedc.check(program)))
    rows = by_class(root, "rect", "row")
    assert len(rows) == 4 and all(r.get("fill") == "url(#idle)" for r in rows)  # idle shows through
    assert len(by_class(root, "path", "mem")) == 4
    peaks = [t.text for t in by_class(root, "text", "peak")]
    assert peaks == ["peak 4", "peak 3", "peak 2", "peak 1"]
    metrics = by_class(root, "text", "metrics")[0].text
    assert f"makespan {timeline.makespan:g}" in metrics and f"bubble {timeline.bubble_ratio:.1%}" in metrics
    assert "peak memory 4 (rank 0)" in metrics


def test_hover_text_names_kind_stage_microbatch_times_and_source():
    program = builtin("1f1b")
    root = parse(timeline_svg(program, schedc.check(program)))
    first = blocks(root)[0]
    title = first.find("s:title", NS).text
    assert "F(0,0)" in title and "stage 0" in title and "microbatch 0" in title
    assert "t 0 to 1" in title and "1f1b.pp:" in title


@pytest.mark.parametrize("name", ["1f1b", "zbv", "interleaved_1f1b"])
def test_legible_at_eight_ranks_and_32_microbatches(name):
    program = builtin(name, P=8, M=32)
    svg = timeline_svg(program, schedc.check(program))
    root = parse(svg)
    assert root.get("data-mode") == "time"
    assert float(root.get("width")) <= LEFT + MAX_WIDTH + RIGHT
    labels = by_class(root, "text", "lbl")
    compute = [b for b in blocks(root) if b.get("data-kind") in ("F", "B", "I", "W")]
    assert len(labels) >= len(compute)  # every compute block shows its microbatch number
    assert min(float(b.get("width")) for b in compute) >= 2 * 6.2 + 3  # two digits at full size
    assert {t.get("font-size") for t in labels} == {"10.5"}
    assert len(svg) < 1_000_000


def test_very_large_runs_are_aggregated_not_drawn_block_by_block():
    program = schedc.load("1f1b", {"P": 64, "M": 256})  # 32,768 steps
    svg = timeline_svg(program, schedc.check(program))
    root = parse(svg)
    assert root.get("data-mode") == "aggregate" and not blocks(root)
    cells = by_class(root, "rect", "cell")
    assert cells and {c.get("data-kind") for c in cells} == {"F", "B"}
    assert len(svg) < 6_000_000
    assert any("aggregated" in (t.text or "") for t in by_class(root, "text", "note"))


def test_aggregation_threshold(monkeypatch):
    program = builtin("1f1b")  # 64 steps
    monkeypatch.setattr(scene_module, "MAX_BLOCKS", 64)
    assert build_scene(program, schedc.check(program)).mode == "time"
    monkeypatch.setattr(scene_module, "MAX_BLOCKS", 63)
    scene = build_scene(program, schedc.check(program))
    assert scene.mode == "aggregate"
    # the aggregate keeps the busy time: per row, the cells' busy levels times their widths
    agg = scene.aggregate
    for row in range(4):
        busy = sum((e - b) * agg.bin_width * level for r, b, e, _, level in agg.cells if r == row)
        assert busy == pytest.approx(simulate(program).busy[row], rel=0.1)


def test_grouped_rows_hold_one_distinct_ranks_bins_at_a_time():
    """The aggregate bins each distinct rank once and adds it to its rows at once: holding every
    distinct rank's bins (7 kinds x 600 bins) together took 2.4 GB for gpipe at P=65,536 (fuzz seed
    127); here 1,024 ranks: 52 MB at the peak that way, 12 MB now."""
    import tracemalloc
    program = schedc.load("gpipe", {"P": 1024, "M": 2})
    report = schedc.check(program)
    tracemalloc.start()
    try:
        scene = build_scene(program, report)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert scene.mode == "aggregate" and scene.aggregate.group == 8
    assert peak < 20 * 2 ** 20, peak


def test_many_ranks_are_grouped_into_rows():
    program = schedc.load("gpipe", {"P": 300, "M": 2})
    scene = build_scene(program, schedc.check(program))
    assert scene.mode == "aggregate" and scene.aggregate.group == 3 and len(scene.rows) == 100
    assert scene.row_labels[0] == "ranks 0-2"


def test_message_arrows():
    program = builtin("1f1b")
    root = parse(timeline_svg(program, schedc.check(program), arrows=True))
    assert len(by_class(root, "line", "msg")) == len(simulate(program).messages) == 48
    assert not by_class(parse(timeline_svg(program, schedc.check(program))), "line", "msg")


@pytest.mark.parametrize("argv,said", [
    (["1f1b", "--param", "P=64,M=256", "--arrows", "-o", "{o}/a.svg"], "--arrows: no message arrows in an aggregated"),
    (["{fail}", "--arrows", "-o", "{o}/f.html"], "--arrows: the picture of a failing schedule is drawn in program order"),
])
def test_arrows_a_picture_cannot_draw_are_said(tmp_path, run_cli, argv, said):
    """`--arrows` on an aggregated picture or a failing schedule's counterexample draws no message
    arrow; viz says so on standard error (it used to write the same picture without a word)."""
    fail = str(KNOWN / "pytorch_172668.pp")
    code, _, err = run_cli("viz", *[a.format(o=tmp_path, fail=fail) for a in argv])
    assert code == 0 and f"schedc: {said}" in err, err
    code, _, err = run_cli("viz", "1f1b", "--arrows", "-o", str(tmp_path / "t.svg"))
    assert code == 0 and "--arrows:" not in err, err  # drawn: nothing to say


@pytest.mark.parametrize("argv,said", [
    (["--arrows", "--dag", "-o", "{o}/d.dot"], "--arrows draws messages on the timeline; the dependency graph"),
    (["--timeout", "5", "-o", "{o}/t.svg"], "--timeout is the Z3 solver's seconds: give --engine z3 too"),
])
def test_options_viz_would_ignore_are_usage_errors(tmp_path, run_cli, argv, said):
    code, _, err = run_cli("viz", "1f1b", *[a.format(o=tmp_path) for a in argv])
    assert code == 2 and said in err and not list(tmp_path.iterdir()), err
    code, _, err = run_cli("compile", "1f1b", "--timeout", "5", "-o", str(tmp_path / "c"))
    assert code == 2 and "--timeout is the Z3 solver's seconds" in err, err  # compile as viz (and check)


def _legend_and_verdict(root):
    texts = [t.text or "" for t in root.iter(f"{{{NS['s']}}}text")]
    verdict = next(t.text for t in root.iter(f"{{{NS['s']}}}text") if t.get("class") == "verdict")
    return texts, verdict


def test_failing_pictures_count_in_words_and_name_each_mark_in_the_legend():
    """Counts take their plural (`2 mismatches`, `1 memory violation`, not `2 mismatch`, `1 memory`);
    broken structure fails whatever the sends do, so its title names no semantics; the outline on
    the steps a structural finding names, and the stuck steps of a deadlock apart from its cycle,
    each have a legend entry (the stuck ones shared the cycle's); an nccl wait is said in words."""
    texts, verdict = _legend_and_verdict(parse(timeline_svg(*_checked(builtin("1f1b"), memory_limit=3))))
    assert verdict == "FAILED under rendezvous sends: 1 memory violation"
    program = compile_text("schedule dup {\n  rank 0: 0F0 0F1 0F1 0B0 0B1\n  rank 1: 1F0 1B0 1F1\n}\n")
    texts, verdict = _legend_and_verdict(parse(timeline_svg(program, schedc.check(program))))
    assert verdict == "FAILED: 1 duplicate, 1 missing action"
    assert "named by a finding" in texts
    assert any(t.startswith("outlined, the steps the findings name: rank 0, step 2 (duplicate)") for t in texts)
    program = compile_text("schedule early_receive {\n  rank 0: 0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0B0 0RECV_B1 0B1\n"
                           "  rank 1: 1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1\n}\n")
    root = parse(timeline_svg(program, schedc.check(program, semantics="nccl")))
    texts, verdict = _legend_and_verdict(root)
    assert verdict == "DEADLOCK under nccl sends"
    assert "blocked (on the wait-for cycle)" in texts and "where a rank is stuck" in texts
    assert not any("partner-queued" in t for t in texts)
    assert any("waits for its partner, queued behind an earlier operation" in t for t in texts)


def _checked(program, **options):
    return program, schedc.check(program, **options)


# ---- counterexamples ----
def test_a_deadlock_is_drawn_in_program_order_with_its_cycle():
    program = schedc.load(str(KNOWN / "pytorch_172668.pp"))
    report = schedc.check(program)
    root = parse(timeline_svg(program, report))
    assert root.get("data-mode") == "step"
    drawn = {(int(b.get("data-rank")), int(b.get("data-step"))): b for b in blocks(root)}
    assert len(drawn) == 16
    for w in report.deadlock.cycle:
        assert "cycle" in drawn[(w.rank, w.step)].get("class").split()
    assert {k for k, b in drawn.items() if "not-run" in b.get("class")} == {(r, x) for r in (0, 1) for x in range(4, 8)}
    assert float(drawn[(0, 3)].get("x")) == LEFT + 3 * float(root.get("data-px"))  # one cell per step
    waits = by_class(root, "path", "wait")
    assert len(waits) == len(report.deadlock.cycle) == 2
    notes = [t.text for t in by_class(root, "text", "note")]
    assert any("both send before they receive" in n for n in notes)
    assert any(n.startswith("(1) rank 0, step 3: SEND_F(0,1) waits for its receive on rank 1") for n in notes)
    verdict = by_class(root, "text", "verdict")[0].text
    assert verdict.startswith("DEADLOCK under rendezvous sends")


def test_a_compute_level_deadlock_is_drawn_too():
    program = compile_text("""schedule crossed {
      rank 0: 0F0 0B0 0F1 0B1
      rank 1: 1F1 1B1 1F0 1B0
    }""")
    report = schedc.check(program)
    assert report.deadlock is not None
    root = parse(timeline_svg(program, report))
    assert root.get("data-mode") == "step"
    assert by_class(root, "rect", "cycle") and by_class(root, "path", "wait")


def test_the_program_order_memory_strip_follows_the_one_memory_rule():
    """An I whose `weight` exceeds `act` adds memory as it frees (after the step's allocations):
    the picture's strip is verify/memory.py's count, not its own walk."""
    from schedc.rules.memory import stage_sizes
    from schedc.verify.memory import activations_along
    program = compile_text("""schedule crossed {
      memory act = 1, weight = 3
      rank 0: 0F0 0I0 0W0 0F1 0I1 0W1
      rank 1: 1F1 1I1 1W1 1F0 1I0 1W0
    }""")
    report = schedc.check(program)
    assert report.deadlock is not None
    scene = build_scene(program, report)
    assert scene.mode == "step"
    act, weight, _ = stage_sizes(program)
    for r, steps in enumerate(program.ranks):
        want = [(0.0, 0.0)]
        for x, (during, after) in enumerate(activations_along([st.parts for st in steps], act, weight)):
            want += [(float(x), during), (float(x + 1), after)]
        assert list(scene.memory[r]) == want
    assert scene.memory[0][3] == (1.0, 1.0)  # I(0,0) runs with 1 held; it leaves 3 (1 - (1 - 3))


def test_a_program_that_only_buffered_sends_complete_is_timed_under_them():
    program = schedc.load(str(KNOWN / "pytorch_172668.pp"))
    report = schedc.check(program, semantics="eager")
    assert report.ok and schedc.check(program).deadlock is not None
    scene = build_scene(program, report)  # the simulator times the run the check allows (eager)
    assert scene.mode == "time" and scene.makespan == simulate(program, semantics="eager").makespan
    assert not any(b.mark == "cycle" for b in scene.blocks)


def test_a_crossed_pair_is_marked_with_its_arrow():
    program = schedc.load(str(KNOWN / "tagless_order.pp"))
    report = schedc.check(program)
    root = parse(timeline_svg(program, report))
    crossed = {(int(b.get("data-rank")), int(b.get("data-step"))) for b in by_class(root, "rect", "crossed")}
    assert crossed == {(m.send_rank, m.send_step) for m in report.mismatches} | {
        (m.recv_rank, m.recv_step) for m in report.mismatches}
    assert len(by_class(root, "path", "cross")) == 2


def test_a_memory_violation_shows_the_moment_and_the_live_set():
    program = builtin("1f1b")
    report = schedc.check(program, memory_limit=3)
    root = parse(timeline_svg(program, report))
    assert root.get("data-mode") == "time"
    moments = by_class(root, "line", "moment")
    assert [m.get("data-rank") for m in moments] == ["0"]
    live = {(b.get("data-kind"), b.get("data-mb")) for b in by_class(root, "rect", "live")}
    assert live == {("F", str(m)) for m in range(4)}
    assert len(by_class(root, "line", "limit")) == 4
    notes = " ".join(t.text for t in by_class(root, "text", "note"))
    assert "over its limit of 3" in notes and "activation of F(0,3)" in notes


def test_structural_errors_are_marked_in_program_order():
    program = compile_text("""schedule broken {
      rank 0: 0F0 0F0 0B0
      rank 1: 1F0 1B0
    }""")
    report = schedc.check(program)
    assert not report.ok and report.errors[0].code == "duplicate"
    scene = build_scene(program, report)
    assert scene.mode == "step" and any(b.mark == "error" for b in scene.blocks)


# ---- golden structures ----
GOLDEN_CASES = {
    "1f1b": lambda: (builtin("1f1b"), None, {}),
    "interleaved_1f1b": lambda: (builtin("interleaved_1f1b"), None, {}),
    "zbv": lambda: (builtin("zbv"), None, {}),
    "dualpipev": lambda: (builtin("dualpipev"), None, {}),
    "1f1b_arrows": lambda: (builtin("1f1b", P=2, M=3), None, {"arrows": True}),
    "deadlock_pytorch_172668": lambda: (schedc.load(str(KNOWN / "pytorch_172668.pp")), None, {}),
    "mismatch_tagless_order": lambda: (schedc.load(str(KNOWN / "tagless_order.pp")), None, {}),
    "memory_limit_1f1b": lambda: (builtin("1f1b"), {"memory_limit": 3}, {}),
    "aggregate_1f1b_64x256": lambda: (schedc.load("1f1b", {"P": 64, "M": 256}), None, {}),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_svg_structure(case):
    program, check_options, options = GOLDEN_CASES[case]()
    report = schedc.check(program, **(check_options or {}))
    got = structure(timeline_svg(program, report, **options))
    path = GOLDEN / f"{case}.json"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    assert path.is_file(), f"no golden file {path}; run SCHEDC_UPDATE_GOLDEN=1 python -m pytest tests/test_viz.py -k golden"
    want = json.loads(path.read_text(encoding="utf-8"))
    assert got == want, (f"the SVG structure of {case} changed; if that is intended, regenerate with "
                         "SCHEDC_UPDATE_GOLDEN=1 python -m pytest tests/test_viz.py -k golden")


# ---- the HTML report ----
def test_html_is_self_contained_with_summary_and_checks():
    program = builtin("zbv")
    page = timeline_html(program, schedc.check(program))
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    outside = [u for u in __import__("re").findall(r"https?://[^\s\"'<>]+", page) if u != "http://www.w3.org/2000/svg"]
    assert outside == []
    assert "<script src" not in page and "<link" not in page
    assert "<h2>Summary</h2>" in page and "<h2>Checks</h2>" in page and "checks hold under rendezvous" in page
    assert page.count('class="blk ') == 192 and "<title>F(" not in page  # hover comes from the page's script


def _chromium_or_skip():
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("headless Chromium is missing; .ci/run installs Debian's chromium")
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    return binary


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("source", ["zbv", "deadlock"])
def test_html_renders_in_headless_chromium_without_console_errors(source, tmp_path):
    _chromium_or_skip()
    if source == "zbv":
        program = schedc.load("zbv", {"P": 4, "M": 8})
        expect_blocks = 192
    else:
        program = schedc.load(str(KNOWN / "pytorch_172668.pp"))
        expect_blocks = 16
    page = tmp_path / "report.html"
    page.write_text(timeline_html(program, schedc.check(program)), encoding="utf-8")
    shot = tmp_path / "shot.png"
    run = run_page(page.as_uri(), screenshot=shot, size=(1400, 900))
    assert run.console == [], run.console
    width, height = _png_size(shot.read_bytes())
    assert (width, height) == (1400, 900) and shot.stat().st_size > 20_000  # a blank page is a few kB
    dom = run_page(page.as_uri() + "#selftest", dump_dom=True)
    assert dom.console == [], dom.console
    assert 'data-schedc="rendered"' in dom.stdout
    assert f'data-blocks="{expect_blocks}"' in dom.stdout
    hover = __import__("re").search(r'data-selftest="([^"]*)"', dom.stdout).group(1)
    assert "kind forward F, rank 0, step 0" in hover and "stage 0, microbatch 0" in hover
    assert ("start 0, end 0.5" in hover) == (source == "zbv")  # a chunk: half a rank-sized F
    assert "source " in hover and ".pp:" in hover


def test_the_console_check_catches_a_script_error(tmp_path):
    _chromium_or_skip()
    page = tmp_path / "bad.html"
    program = builtin("1f1b", P=2, M=2)
    page.write_text(timeline_html(program, schedc.check(program)).replace("(function () {", "(function () { nope();", 1),
                    encoding="utf-8")
    run = run_page(page.as_uri(), dump_dom=True)
    assert any("nope is not defined" in line for line in run.console)
    assert 'data-schedc="rendered"' not in run.stdout


def _script_trap():
    """1F1B (P=2, M=2) with `<!--<script>` and `</script>` in a comment its hover box shows, and in its name."""
    from dataclasses import replace
    source = (ROOT / "schedules" / "1f1b.pp").read_text(encoding="utf-8")
    program = compile_text(source.replace("{ F(r, m) }", "{ F(r, m) }  # <!--<script> </script>"), {"P": 2, "M": 2})
    return replace(program, name="trap<!--<script></script>")


def test_script_text_in_a_source_or_name_stays_inside_the_html_script():
    program = _script_trap()
    page = timeline_html(program, schedc.check(program))
    script = page[page.index("<script>") + len("<script>"):page.rindex("</script>")]
    assert "<!--" not in script and "<script" not in script and "</script" not in script
    assert "\\u003c!--\\u003cscript>" in script  # still shown: the hover box decodes it
    assert "<title>schedc: trap&lt;!--&lt;script&gt;&lt;/script&gt;" in page


def test_script_text_in_a_source_does_not_break_the_page_in_headless_chromium(tmp_path):
    _chromium_or_skip()
    page = tmp_path / "trap.html"
    program = _script_trap()
    page.write_text(timeline_html(program, schedc.check(program)), encoding="utf-8")
    dom = run_page(page.as_uri() + "#selftest", dump_dom=True)
    assert dom.console == [], dom.console
    assert 'data-schedc="rendered"' in dom.stdout and 'data-blocks="8"' in dom.stdout
    hover = __import__("re").search(r'data-selftest="([^"]*)"', dom.stdout).group(1)
    assert "&lt;!--&lt;script&gt; &lt;/script&gt;" in hover  # the comment, shown as text


def test_characters_xml_forbids_in_a_name_keep_the_svg_valid():
    from dataclasses import replace
    program = replace(builtin("1f1b", P=2, M=2), name="bad\x01\x0b\x1fname\ufffe")
    root = parse(timeline_svg(program, schedc.check(program)))  # raised "not well-formed (invalid token)" before
    title = next(t.text for t in root.iter(f"{{{NS['s']}}}text") if t.get("class") == "title")
    assert title.startswith("bad\ufffd\ufffd\ufffdname\ufffd")


def test_png_output(tmp_path):
    if find_chromium() is None and shutil.which("rsvg-convert") is None:
        _chromium_or_skip()
    program = builtin("1f1b")
    data = render(program, schedc.check(program), ".png").data
    svg_width = float(parse(timeline_svg(program, schedc.check(program))).get("width"))
    assert _png_size(data)[0] == int(svg_width + 0.999)


# ---- the dependency graph ----
def test_dependency_graph_clusters_ranks_and_draws_the_cycle_in_red():
    program = schedc.load(str(KNOWN / "pytorch_172668.pp"))
    report = schedc.check(program)
    source = dependency_graph(program, report).source
    assert "subgraph cluster_0" in source and "subgraph cluster_1" in source
    assert source.count("r0s") >= 8 and source.count("r1s") >= 8
    red = [ln for ln in source.splitlines() if "waits for" in ln]
    assert len(red) == 2 and all(palette.ALARM_DARK in ln for ln in red)  # the timeline's red, not B's vermillion
    blocked = [ln for ln in source.splitlines() if "penwidth=3" in ln]
    assert len(blocked) == 2 and all(palette.ALARM_DARK in ln for ln in blocked)  # the blocked steps outlined


def test_dependency_graph_edges_are_the_verifiers_constraints():
    program = schedc.load("1f1b", {"P": 2, "M": 2})
    source = dependency_graph(program, schedc.check(program)).source
    # 8 steps: 6 program-order edges and 4 cross-rank data edges (2 activations, 2 gradients); the
    # invisible edge that puts rank 1's row under rank 0's is no constraint
    edges = [ln for ln in source.splitlines() if "->" in ln and "style=invis" not in ln]
    assert len(edges) == 10


def _dot_or_skip():
    if shutil.which("dot") is None:
        if os.environ.get("CI"):
            pytest.fail("graphviz's dot is missing; .ci/run installs Debian's graphviz")
        pytest.skip("graphviz is not installed")


def test_a_name_ending_in_a_backslash_cannot_inject_into_the_dot_file():
    """`{ inj [URL=evil] //\\`: the final backslash used to escape the closing quote of the graph's
    name, so the name's text became DOT, a node `inj` with a URL."""
    import subprocess
    from dataclasses import replace
    _dot_or_skip()
    name = "{ inj [URL=evil] //\\"
    program = replace(builtin("1f1b", P=2, M=2), name=name)
    source = dependency_graph(program, schedc.check(program)).source
    done = subprocess.run(["dot", "-Tjson"], input=source, capture_output=True,
                          text=True, timeout=60, check=True)
    graph = json.loads(done.stdout)
    nodes = [o for o in graph["objects"] if "nodes" not in o and "subgraphs" not in o]
    assert sorted(o["name"] for o in nodes) == sorted(f"r{r}s{x}" for r in range(2) for x in range(4))
    assert not any("URL" in o for o in [graph, *graph["objects"]])
    drawn = [op["text"] for op in graph["_ldraw_"] if op["op"] == "T"]  # the title as dot draws it
    assert len(drawn) == 1 and drawn[0].startswith(name + " (P=2, M=2): dependencies")


def test_characters_xml_forbids_in_a_name_keep_the_dependency_graph_svg_valid(tmp_path, run_cli):
    _dot_or_skip()
    from schedc.interop.ir_json import dumps_ir
    ir = json.loads(dumps_ir(builtin("1f1b", P=2, M=2)))
    ir["schedule"] = "bad\x01\x0bname"
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(ir), encoding="utf-8")
    out = tmp_path / "dag.svg"
    code, _, err = run_cli("viz", str(src), "--dag", "-o", str(out))
    assert code == 0, err
    parse(out.read_text(encoding="utf-8"))  # raised "not well-formed (invalid token)" before


# ---- the command line ----
def test_dag_svg_through_dot(tmp_path, run_cli):
    if shutil.which("dot") is None:
        if os.environ.get("CI"):
            pytest.fail("graphviz's dot is missing; .ci/run installs Debian's graphviz")
        pytest.skip("graphviz is not installed")
    out = tmp_path / "dag.svg"
    code, _, _ = run_cli("viz", str(KNOWN / "pytorch_172668.pp"), "--dag", "-o", str(out))
    assert code == 0 and out.is_file()
    root = parse(out.read_text(encoding="utf-8"))
    assert root.tag.endswith("svg") and "cluster_0" in out.read_text(encoding="utf-8")


def test_dag_without_dot_writes_the_source_and_says_how_to_install(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    out = tmp_path / "dag.svg"
    code, _, err = run_cli("viz", "1f1b", "--param", "P=2", "--param", "M=2", "--dag", "-o", str(out))
    assert code == 0 and not out.exists()
    dot = tmp_path / "dag.dot"
    assert dot.is_file() and dot.read_text(encoding="utf-8").startswith("digraph")
    assert INSTALL in err and "apt-get install graphviz" in err
    assert f"dot -Tsvg {dot} -o {out}" in err


def test_dag_refuses_huge_programs(run_cli, tmp_path):
    code, _, err = run_cli("viz", "1f1b", "--param", "P=32", "--param", "M=64", "--dag", "-o", str(tmp_path / "x.svg"))
    assert code == 2 and "too-large" in err and f"{MAX_DAG_STEPS:,}" in err


def test_viz_writes_svg_html_and_png(run_cli, tmp_path):
    for suffix in (".svg", ".html"):
        out = tmp_path / f"zbv{suffix}"
        code, stdout, err = run_cli("viz", "zbv", "--param", "P=4", "--param", "M=8", "-o", str(out))
        assert code == 0 and out.is_file() and f"wrote {out}" in err and "zbv: 4 ranks" in stdout
    assert "makespan 25.5 " in (tmp_path / "zbv.svg").read_text(encoding="utf-8")  # the same model as 1F1B
    assert not list(tmp_path.glob("*.tmp"))


def test_viz_writes_a_real_png(run_cli, tmp_path):
    from schedc.viz.png import can_convert
    if not can_convert():
        if os.environ.get("CI"):
            pytest.fail("no PNG converter: .ci/run installs Debian's chromium")
        pytest.skip("neither rsvg-convert nor headless Chromium is installed")
    png, svg = tmp_path / "x.png", tmp_path / "x.svg"
    code, _, err = run_cli("viz", "1f1b", "-o", str(png))
    assert code == 0 and f"wrote {png}" in err and "schedc:" not in err, err
    assert run_cli("viz", "1f1b", "-o", str(svg))[0] == 0
    root = parse(svg.read_text(encoding="utf-8"))
    data = png.read_bytes()
    assert _png_size(data) == (int(float(root.get("width")) + 0.999), int(float(root.get("height")) + 0.999))
    assert len(data) > 10_000  # 64 coloured blocks with labels, not an empty canvas


def test_png_without_a_converter_writes_the_svg_and_says_how_to_install(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))  # neither rsvg-convert nor chromium
    monkeypatch.delenv("SCHEDC_CHROMIUM", raising=False)
    png = tmp_path / "x.png"
    code, _, err = run_cli("viz", "1f1b", "--param", "P=2", "--param", "M=2", "-o", str(png))
    svg = tmp_path / "x.svg"
    assert code == 0 and not png.exists() and svg.is_file()
    assert len(blocks(parse(svg.read_text(encoding="utf-8")))) == 8
    assert "no PNG converter was found" in err and "apt-get install librsvg2-bin" in err
    assert f"rsvg-convert --format=png {svg} -o {png}" in err and f"wrote {svg}" in err


def test_viz_exits_0_for_a_failing_schedule_and_says_it_fails(run_cli, tmp_path):
    out = tmp_path / "dl.svg"
    code, stdout, err = run_cli("viz", str(KNOWN / "pytorch_172668.pp"), "-o", str(out))
    assert code == 0 and out.is_file(), err
    assert "FAILED (1 error(s))" in stdout.splitlines()[0]
    assert "error[deadlock]: deadlock under rendezvous sends" in stdout
    assert "fails its checks" in stdout and "schedc check gives the exit code" in stdout
    assert run_cli("check", str(KNOWN / "pytorch_172668.pp"))[0] == 1  # check keeps its exit code
    code, stdout, _ = run_cli("viz", "1f1b", "-o", str(out))
    assert code == 0 and stdout.splitlines()[0].endswith("; ok") and "fails" not in stdout
    code, stdout, _ = run_cli("viz", "--help")
    assert code == 0 and "Exits 0 once the picture is written" in " ".join(stdout.split())


def test_viz_costs_change_the_times(run_cli, tmp_path):
    out = tmp_path / "a.svg"
    assert run_cli("viz", "1f1b", "--cost", "F=1,B=3", "-o", str(out))[0] == 0
    assert "makespan 44" in out.read_text(encoding="utf-8")  # (M + P - 1)(t_F + t_B) = 11 * 4


def test_viz_rejects_an_unknown_suffix_before_any_work(run_cli, tmp_path):
    code, _, err = run_cli("viz", "1f1b", "-o", str(tmp_path / "a.txt"))
    assert code == 2 and "OUT.svg, OUT.html, OUT.png" in err and not list(tmp_path.iterdir())
    code, _, err = run_cli("viz", "1f1b", "--dag", "-o", str(tmp_path / "a.html"))
    assert code == 2 and "OUT.svg, OUT.png, OUT.dot" in err


def test_check_viz_draws_the_counterexample(run_cli, tmp_path):
    out = tmp_path / "dl.svg"
    code, stdout, err = run_cli("check", str(KNOWN / "pytorch_172668.pp"), "--viz", str(out))
    assert code == 1 and "deadlock" in stdout and out.is_file()
    assert parse(out.read_text(encoding="utf-8")).get("data-mode") == "step"
    code, _, err = run_cli("check", "1f1b", "gpipe", "--viz", str(out))
    assert code == 2 and "--viz draws one schedule" in err


def _count_work(monkeypatch) -> dict:
    """Count the checks, simulations and deadlock searches a command runs (each found by name where
    it is called from)."""
    import schedc.api
    import schedc.report
    import schedc.simulate
    import schedc.verify.deadlock
    calls = {"checks": 0, "simulate": 0, "deadlock": 0}

    def counted(key, fn):
        def wrapper(*args, **kwargs):
            calls[key] += 1
            return fn(*args, **kwargs)
        return wrapper
    monkeypatch.setattr(schedc.api, "run_checks", counted("checks", schedc.api.run_checks))
    monkeypatch.setattr(schedc.simulate, "simulate", counted("simulate", schedc.simulate.simulate))
    # (report.py imports them from schedc.verify.deadlock when it calls them)
    for name in ("find_deadlock", "deadlock_of"):
        monkeypatch.setattr(schedc.verify.deadlock, name, counted("deadlock", getattr(schedc.verify.deadlock, name)))
    return calls


@pytest.mark.parametrize("command", ["check", "viz"])
@pytest.mark.parametrize("source, want", [
    ("1f1b", {"checks": 1, "simulate": 1, "deadlock": 0}),  # the fast path clears it; drawn in time
    (str(KNOWN / "tagless_order.pp"), {"checks": 1, "simulate": 0, "deadlock": 1}),  # crossed: program order
    (str(KNOWN / "pytorch_172668.pp"), {"checks": 1, "simulate": 0, "deadlock": 1}),  # deadlock: program order
], ids=["ok", "crossed", "deadlock"])
def test_a_command_that_draws_runs_each_check_once(command, source, want, run_cli, tmp_path, monkeypatch):
    """The picture is drawn from the command's report: no second check or deadlock search."""
    calls = _count_work(monkeypatch)
    out = tmp_path / "a.svg"
    run_cli(command, source, *(["--viz"] if command == "check" else ["-o"]), str(out))
    assert out.is_file() and calls == want


def test_the_pictures_draw_the_timeline_they_are_given(monkeypatch):
    """A timeline passed in is drawn as it is (the same picture, no second simulation)."""
    program = builtin("1f1b", P=2, M=3)
    report = schedc.check(program)
    timeline = simulate(program)
    calls = _count_work(monkeypatch)
    assert timeline_svg(program, report, timeline=timeline) == timeline_svg(program, report)
    assert calls == {"checks": 0, "simulate": 1, "deadlock": 0}  # only the call without a timeline simulates
    assert render(program, report, ".html", timeline=timeline).data == timeline_html(program, report, timeline=timeline)
    assert calls["simulate"] == 1


def test_compile_writes_the_timeline_svg(run_cli, tmp_path):
    code, stdout, _ = run_cli("compile", "1f1b", "-o", str(tmp_path))
    assert code == 0
    svg = tmp_path / "1f1b.svg"
    assert svg.is_file() and f"{svg}" in stdout
    assert len(blocks(parse(svg.read_text(encoding="utf-8")))) == 64


def test_compile_force_writes_the_counterexample(run_cli, tmp_path):
    code, _, _ = run_cli("compile", str(KNOWN / "pytorch_172668.pp"), "--force", "-o", str(tmp_path))
    assert code == 1
    root = parse((tmp_path / "pytorch_172668.svg").read_text(encoding="utf-8"))
    assert root.get("data-mode") == "step" and by_class(root, "path", "wait")


# ---- the gallery ----
def test_the_gallery_in_viz_is_current():
    from schedc.viz.gallery import COMMAND, build, stale
    files = build()
    names = {f"{n}.svg" for n in schedc.api.builtin_schedules()}
    assert names <= set(files) and "README.md" in files
    for name in names:
        assert "![" in files["README.md"] and f"({name})" in files["README.md"]
    diff = stale(ROOT / "viz", files)
    assert diff == [], f"the gallery in viz/ is stale ({'; '.join(diff)}); regenerate it with `{COMMAND}`"


def test_the_gallery_shows_dependency_graphs_compared_by_their_dot_source(tmp_path):
    from schedc.viz.gallery import build, drawn_from, stale
    files = build()
    dots = sorted(n for n in files if n.endswith(".dot"))
    assert dots == ["dag_1f1b.dot", "dag_known_pytorch_172668.dot"]
    assert all(files[n].startswith("digraph") for n in dots)
    assert "(1) waits for" in files["dag_known_pytorch_172668.dot"]  # the deadlock's cycle, drawn red
    assert "waits for" not in files["dag_1f1b.dot"]
    for n in dots:
        svg = n[:-4] + ".svg"
        assert f"]({svg})" in files["README.md"] and f"]({n})" in files["README.md"]
        text = (ROOT / "viz" / svg).read_text(encoding="utf-8")
        assert parse(text).tag.endswith("svg") and drawn_from(text)[0] == n
    # the SVG's own text (graphviz's layout) is not compared; the source it was drawn from is
    gallery = tmp_path / "viz"
    shutil.copytree(ROOT / "viz", gallery)
    assert stale(gallery, files) == []
    svg = gallery / "dag_1f1b.svg"
    svg.write_text(svg.read_text(encoding="utf-8").replace('<g id="graph0"', '<g id="graph0" data-x="1"'),
                   encoding="utf-8")
    assert stale(gallery, files) == []  # another graphviz: other bytes, same source
    changed = dict(files, **{"dag_1f1b.dot": files["dag_1f1b.dot"].replace("rankdir=TB", "rankdir=LR")})
    assert stale(gallery, changed) == ["dag_1f1b.dot: out of date", "dag_1f1b.svg: not drawn from the current dag_1f1b.dot"]
    svg.unlink()
    (gallery / "dag_old.dot").write_text("digraph {}", encoding="utf-8")
    assert stale(gallery, files) == ["dag_1f1b.svg: missing", "dag_old.dot: not part of the gallery any more"]


def test_gallery_has_no_machine_paths():
    from schedc.viz.gallery import build
    for name, text in build().items():
        assert str(ROOT) not in text, name


# ---- counterexample arrows keep off the blocked steps' labels (issue 20, item 7) ----
def _ring(P: int, M: int) -> str:
    """Interleaved forwards where rank 0 starts with its second stage: each rank waits for the one
    above it and rank 0 for the last, a wait-for cycle through every rank (rank 0's arrow passes
    all the others)."""
    rows = []
    for r in range(P):
        steps = [f"{P}F0"] if r == 0 else []
        steps += [f"{r}F{m}" for m in range(M)] + [f"{r + P}F{m}" for m in range(M) if (r, m) != (0, 0)]
        steps += [f"{r + P}B{m}" for m in range(M)] + [f"{r}B{m}" for m in range(M)]
        rows.append(f"  rank {r}: " + " ".join(steps))
    return f"schedule ring{P} {{\n  stages {2 * P}\n  microbatches {M}\n  place loop\n" + "\n".join(rows) + "\n}\n"


COUNTEREXAMPLES = {
    "pytorch_172668": lambda: schedc.load(str(KNOWN / "pytorch_172668.pp")),
    "compute_level": lambda: compile_text("schedule crossed {\n rank 0: 0F0 0B0 0F1 0B1\n rank 1: 1F1 1B1 1F0 1B0\n}"),
    "ring_of_4": lambda: compile_text(_ring(4, 1)),
    "ring_of_4_narrow_cells": lambda: compile_text(_ring(4, 8)),  # 34-pixel cells, "→F1"-wide labels
    "ring_of_8": lambda: compile_text(_ring(8, 2)),
    "tagless_order": lambda: schedc.load(str(KNOWN / "tagless_order.pp")),
    "megatron_interleaved_p2": lambda: schedc.load(str(KNOWN / "megatron_interleaved_p2.pp")),
}

_WIDEST_EM = 0.85  # no glyph of a label (digits, F B I W U R G, arrows, |) is wider than this, in DejaVu Sans


def _label_boxes(root: ET.Element, marks: set[str]) -> list[tuple[tuple[float, float, float, float], str]]:
    """The label text boxes of the steps marked with one of `marks`, estimated on the large side
    (every character as wide as the widest), each with the step's rank and step."""
    cells = []
    for b in blocks(root):
        if marks & set(b.get("class").split()):
            x, y, w, h = (float(b.get(k)) for k in ("x", "y", "width", "height"))
            cells.append((x, y, w, h, f"rank {b.get('data-rank')}, step {b.get('data-step')}"))
    out = []
    for t in by_class(root, "text", "lbl"):
        tx, ty, size = float(t.get("x")), float(t.get("y")), float(t.get("font-size"))
        for x, y, w, h, where in cells:
            if abs(tx - (x + w / 2)) < 0.06 and y <= ty <= y + h:
                half = len(t.text) * _WIDEST_EM * size / 2
                out.append(((tx - half, ty - 0.8 * size, tx + half, ty + 0.25 * size), f"{where} ({t.text})"))
    return out


def _path_points(d: str) -> list[tuple[float, float]]:
    """Points along an SVG path of absolute M, L, Q and C commands, at least one per pixel."""
    import math
    import re
    tokens = re.findall(r"[MLQC]|-?\d+(?:\.\d+)?", d)
    points, at, cmd, i = [], None, None, 0
    while i < len(tokens):
        if tokens[i] in "MLQC":
            cmd, i = tokens[i], i + 1
            continue
        n = {"M": 1, "L": 1, "Q": 2, "C": 3}[cmd]
        ctrl = [(float(tokens[i + 2 * k]), float(tokens[i + 2 * k + 1])) for k in range(n)]
        i += 2 * n
        if cmd == "M":
            at = ctrl[0]
            points.append(at)
            continue
        seg = [at, *ctrl]
        steps = max(2, math.ceil(sum(math.dist(p, q) for p, q in zip(seg, seg[1:]))))
        for k in range(1, steps + 1):
            t = k / steps
            pts = seg
            while len(pts) > 1:  # de Casteljau
                pts = [(p[0] + (q[0] - p[0]) * t, p[1] + (q[1] - p[1]) * t) for p, q in zip(pts, pts[1:])]
            points.append(pts[0])
        at = seg[-1]
    return points


def _arrowhead(points) -> list[tuple[float, float]]:
    """Points covering the arrowhead at the path's end: 10 px long, 5 px either side (the marker
    `alarm` is 4.5 strokes of 2.2 px), its tip a pixel past the end."""
    import math
    (x0, y0), (x1, y1) = points[-4], points[-1]
    n = math.dist((x0, y0), (x1, y1)) or 1.0
    ux, uy = (x1 - x0) / n, (y1 - y0) / n
    out = []
    for along in range(-9, 2):
        spread = 5 * (1 - (along + 9) / 10)
        for side in (-spread, 0.0, spread):
            out.append((x1 + ux * along - uy * side, y1 + uy * along + ux * side))
    return out


def _inside(p, box, margin) -> bool:
    return box[0] - margin < p[0] < box[2] + margin and box[1] - margin < p[1] < box[3] + margin


@pytest.mark.parametrize("case", sorted(COUNTEREXAMPLES))
def test_counterexample_arrows_do_not_cross_the_blocked_steps_labels(case):
    """No segment of a wait-for (or crossed-pair) arrow, nor its head or its number, passes over the
    label of a blocked (or crossed) step: computed from the SVG, label boxes against the arrows'
    paths sampled every pixel, with the stroke's half width as margin."""
    program = COUNTEREXAMPLES[case]()
    root = parse(timeline_svg(program, schedc.check(program)))
    assert root.get("data-mode") == "step"
    paths = by_class(root, "path", "wait") + by_class(root, "path", "cross")
    assert paths
    boxes = _label_boxes(root, {"cycle", "blocked", "crossed"})
    assert boxes  # the steps have labels to keep off
    for path in paths:
        points = _path_points(path.get("d"))
        half = float(path.get("stroke-width")) / 2
        for box, where in boxes:
            over = [p for p in points if _inside(p, box, half)]
            assert not over, f"arrow {path.get('d')} passes over the label of {where} at {over[0]}"
            assert not [p for p in _arrowhead(points) if _inside(p, box, 0)], f"arrowhead over {where}"
    numbers = by_class(root, "rect", "arrow-num")
    assert len(numbers) >= 1
    for n in numbers:
        x, y, w, h = (float(n.get(k)) for k in ("x", "y", "width", "height"))
        for box, where in boxes:
            assert not (x < box[2] and box[0] < x + w and y < box[3] and box[1] < y + h), f"number over {where}"


def test_each_arrow_leaves_its_blocked_step_and_ends_at_the_step_it_waits_for():
    """The route still says what the cycle says: from the edge of each blocked step to the edge of
    the step it waits for (rank 0 of the ring waits for rank 3, passing ranks 1 and 2)."""
    program = compile_text(_ring(4, 1))
    report = schedc.check(program)
    root = parse(timeline_svg(program, report))
    rects = {(int(b.get("data-rank")), int(b.get("data-step"))):
             [float(b.get(k)) for k in ("x", "y", "width", "height")] for b in blocks(root)}

    def on_edge(p, rank, step):
        x, y, w, h = rects[(rank, step)]
        return x <= p[0] <= x + w and (abs(p[1] - y) < 0.06 or abs(p[1] - (y + h)) < 0.06)

    waits = by_class(root, "path", "wait")
    assert len(waits) == len(report.deadlock.cycle) == 4
    for w, path in zip(report.deadlock.cycle, waits):
        points = _path_points(path.get("d"))
        assert on_edge(points[0], w.rank, w.step) and on_edge(points[-1], w.on_rank, w.on_step)
    labels = sorted(t.text for t in by_class(root, "text", "arrow-label"))
    assert labels == ["1", "2", "3", "4"]


_GEOMETRY_SCRIPT = """
<script>
(function () {
  var bad = [], checked = 0;
  var blocked = [];
  document.querySelectorAll("rect.blk.cycle, rect.blk.blocked, rect.blk.crossed").forEach(function (r) {
    blocked.push(r.getBBox());
  });
  var labels = [];
  document.querySelectorAll("text.lbl").forEach(function (t) {
    var b = t.getBBox(), cx = b.x + b.width / 2, cy = b.y + b.height / 2;
    blocked.forEach(function (c) {
      if (cx > c.x && cx < c.x + c.width && cy > c.y && cy < c.y + c.height) { labels.push([t.textContent, b]); }
    });
  });
  document.querySelectorAll("path.arrow").forEach(function (p) {
    var half = p.getAttribute("stroke-width") / 2, n = p.getTotalLength();
    for (var s = 0; s <= n; s += 0.5) {
      var q = p.getPointAtLength(s);
      labels.forEach(function (l) {
        var b = l[1];
        if (q.x > b.x - half && q.x < b.x + b.width + half && q.y > b.y - half && q.y < b.y + b.height + half) {
          bad.push(l[0] + "@" + q.x.toFixed(1) + "," + q.y.toFixed(1));
        }
      });
      checked++;
    }
  });
  document.body.setAttribute("data-labels", String(labels.length));
  document.body.setAttribute("data-checked", String(checked));
  document.body.setAttribute("data-over", bad.slice(0, 5).join(" "));
})();
</script>
"""


@pytest.mark.parametrize("case", ["pytorch_172668", "ring_of_4_narrow_cells"])
def test_counterexample_arrows_keep_off_the_labels_as_chromium_draws_them(case, tmp_path):
    """The same, with the browser's own geometry: the label boxes from its fonts (getBBox) and the
    arrows from its path lengths (getPointAtLength)."""
    _chromium_or_skip()
    import re
    program = COUNTEREXAMPLES[case]()
    page = tmp_path / "arrows.html"
    page.write_text("<!DOCTYPE html><html><body>" + timeline_svg(program, schedc.check(program)) + _GEOMETRY_SCRIPT
                    + "</body></html>", encoding="utf-8")
    dom = run_page(page.as_uri(), dump_dom=True)
    labels = int(re.search(r'data-labels="(\d+)"', dom.stdout).group(1))
    checked = int(re.search(r'data-checked="(\d+)"', dom.stdout).group(1))
    over = re.search(r'data-over="([^"]*)"', dom.stdout).group(1)
    assert labels >= 2 and checked > 100
    assert over == "", f"arrows over blocked steps' labels: {over}"


# ---- the dependency graph: ranks as rows, rank 0 on top; the cycle red (issue 20, item 7) ----
def _hue_saturation(colour: str) -> tuple[float, float]:
    import colorsys
    r, g, b = (int(colour[k:k + 2], 16) / 255 for k in (1, 3, 5))
    h, _, s = colorsys.rgb_to_hls(r, g, b)
    return h * 360, s


DAG_CASES = {
    "pytorch_172668": lambda: schedc.load(str(KNOWN / "pytorch_172668.pp")),  # drew rank 1 on top
    "interleaved_1f1b": lambda: builtin("interleaved_1f1b", P=4, M=4),  # drew rank 3 above rank 2
    "ring_of_4": lambda: compile_text(_ring(4, 1)),  # drew the ranks bottom to top
    "tagless_order": lambda: schedc.load(str(KNOWN / "tagless_order.pp")),
}


def test_the_dependency_graph_source_lays_ranks_out_as_rows_in_order():
    """In the .dot source: each rank's cluster is one row (rank=same, its steps chained in program
    order), invisible edges stack the rows rank 0 first, and no edge between ranks moves a row."""
    import re
    program = DAG_CASES["interleaved_1f1b"]()
    source = dependency_graph(program, schedc.check(program)).source
    assert "rankdir=TB" in source
    for r in range(program.num_ranks):
        cluster = source[source.index(f"subgraph cluster_{r} {{"):]
        assert "rank=same" in cluster[:cluster.index("}")]
    chain = re.findall(r"r(\d+)s0 -> r(\d+)s0 \[style=invis", source)
    assert chain == [(str(r), str(r + 1)) for r in range(program.num_ranks - 1)]
    for a, b, attrs in re.findall(r"r(\d+)s\d+ -> r(\d+)s\d+ \[(.*)\]", source):
        if a != b and "invis" not in attrs:
            assert "constraint=false" in attrs


def test_the_dependency_graph_cycle_and_crossed_pairs_are_red_in_the_source():
    """"The cycle in red": a red (hue within 15 degrees of pure red, saturated) that is not the fill
    of any kind of step (the old vermillion was the colour of every B)."""
    from schedc.viz.dag import RED
    hue, sat = _hue_saturation(RED)
    assert (hue < 15 or hue > 345) and sat > 0.6
    assert RED not in {palette.fill(k, c, 3) for k in palette.KIND_COLOUR for c in range(3)}
    for case, marker, count in (("pytorch_172668", "waits for", 2), ("tagless_order", "crossed", 2)):
        program = DAG_CASES[case]()
        lines = [ln for ln in dependency_graph(program, schedc.check(program)).source.splitlines()
                 if marker in ln and "->" in ln]
        assert len(lines) == count and all(f'color="{RED}"' in ln for ln in lines), lines


@pytest.mark.parametrize("case", sorted(DAG_CASES))
def test_the_dependency_graph_draws_rank_0_on_top_and_the_cycle_red(case):
    """In the SVG dot draws: the rank clusters top to bottom in rank order, each rank's steps left to
    right in program order, and the cycle's (or crossed pairs') edges stroked red."""
    import re
    from schedc.viz.dag import RED
    _dot_or_skip()
    program = DAG_CASES[case]()
    report = schedc.check(program)
    svg = render(program, report, ".svg", dag=True).data
    root = parse(svg)
    groups = {g.find("s:title", NS).text: g for g in root.iter(f"{{{NS['s']}}}g")
              if g.get("class") in ("cluster", "node", "edge")}

    def top(g):  # the smallest y of the group's outline (dot's SVG: y grows downwards)
        shape = next(e for e in g.iter() if e.tag in (f"{{{NS['s']}}}path", f"{{{NS['s']}}}polygon"))
        text = shape.get("d") or shape.get("points")
        return min(float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", text)[1::2])

    def centre_x(g):  # a node's label (inside the link dot wraps a node with a tooltip in)
        return float(next(g.iter(f"{{{NS['s']}}}text")).get("x"))

    tops = [top(groups[f"cluster_{r}"]) for r in range(program.num_ranks)]
    assert tops == sorted(tops) and len(set(tops)) == len(tops), f"rows top to bottom: {tops}"
    for r, steps in enumerate(program.ranks):
        xs = [centre_x(groups[f"r{r}s{x}"]) for x in range(len(steps))]
        assert xs == sorted(xs), f"rank {r} in program order"
    red = [(w.rank, w.step, w.on_rank, w.on_step) for w in report.deadlock.cycle] if report.deadlock else [
        (m.send_rank, m.send_step, m.recv_rank, m.recv_step) for m in report.mismatches]
    for a, x, b, y in red:
        edges = [g for name, g in groups.items() if name == f"r{a}s{x}->r{b}s{y}"]
        strokes = {p.get("stroke").upper() for g in edges for p in g.iter(f"{{{NS['s']}}}path")}
        assert RED.upper() in strokes, (a, x, b, y, strokes)


# ---- the memory strip's scale, the HTML page fitting the window, each finding once ----
def test_the_memory_strip_has_a_scale_in_units_of_activation_memory():
    program = builtin("1f1b")
    root = parse(timeline_svg(program, schedc.check(program)))
    strips = by_class(root, "rect", "memrow")
    scales = [g for g in root.iter(f"{{{NS['s']}}}g") if g.get("class") == "memscale"]
    assert len(scales) == len(strips) == 4
    for strip, scale in zip(strips, scales):
        y0 = float(strip.get("y"))
        y1 = y0 + float(strip.get("height"))
        ticks = [float(t.get("y1")) for t in scale.findall("s:line", NS)]
        assert ticks == [y0, y1]  # a tick at the strip's top and one at its bottom
        labels = [t.text for t in scale.findall("s:text", NS)]
        assert labels == ["4 units", "0"]  # the most any rank holds (rank 0's peak), and zero
    legend = [t.text for t in root.iter(f"{{{NS['s']}}}text") if "live memory" in (t.text or "")]
    assert legend == ["live memory, in units of activation memory"]
    # the scale is the strip's: rank 0's memory reaches its top, rank 3's (peak 1) a quarter of the way
    for rank, share in ((0, 1.0), (3, 0.25)):
        path = by_class(root, "path", "mem")[rank].get("d")
        ys = [float(v) for v in __import__("re").findall(r"[ML]-?[\d.]+,(-?[\d.]+)", path)]
        y0 = float(strips[rank].get("y"))
        height = float(strips[rank].get("height"))
        assert min(ys) == pytest.approx(y0 + height * (1 - share), abs=0.06)


def test_the_memory_strip_scale_speaks_gib_under_a_model_description(run_cli, tmp_path):
    out = tmp_path / "zbv.html"
    code, _, err = run_cli("viz", "zbv", "--param", "P=4,M=8", "--model", "llama2-7b", "--hardware", "h100-80gb",
                           "-o", str(out))
    assert code == 0, err
    page = out.read_text(encoding="utf-8")
    root = parse(page[page.index("<svg"):page.index("</svg>") + len("</svg>")])
    tops = [t.text for t in by_class(root, "text", "memtick") if t.text != "0"]
    assert len(tops) == 4 and all(t.endswith(" GiB") for t in tops)
    assert float(tops[0].split()[0]) > 40  # tens of GiB of activations, not units
    assert any(t.text == "live memory, in GiB" for t in root.iter(f"{{{NS['s']}}}text"))


_FIT_PAGE = """<!DOCTYPE html><html><body style="margin:0">
%s
<script>
window.addEventListener("load", function () {
  var out = [];
  document.querySelectorAll("iframe").forEach(function (f) {
    var d = f.contentDocument, root = d.documentElement, chart = d.getElementById("chart");
    var svg = chart.querySelector("svg").getBoundingClientRect();
    var row = [f.width, root.scrollWidth - root.clientWidth, chart.scrollWidth - chart.clientWidth,
               Math.round(svg.right - root.clientWidth), d.body.getAttribute("data-schedc")];
    var zoom = d.getElementById("zoom"), scaled = !zoom.hidden;
    if (scaled) { zoom.click(); }  // at full size the picture scrolls inside its frame, not the page
    row.push(scaled ? (chart.scrollWidth > chart.clientWidth) + "/" + (root.scrollWidth - root.clientWidth) : "-");
    out.push(row.join(":"));
  });
  document.body.setAttribute("data-fit", out.join(" "));
});
</script></body></html>"""


@pytest.mark.parametrize("source", ["1f1b_P8_M32", "deadlock"])
def test_the_html_page_fits_the_window_at_common_widths(source, tmp_path):
    """At 1024, 1280, 1366 and 1920 pixels the page does not scroll sideways and the picture (4,000 px
    wide for 1F1B at P=8, M=32) is inside the window: it is scaled to it."""
    _chromium_or_skip()
    import html
    import re
    program = builtin("1f1b", P=8, M=32) if source != "deadlock" else compile_text(_ring(4, 8))
    report = timeline_html(program, schedc.check(program))
    frames = "".join(f'<iframe width="{w}" height="700" srcdoc="{html.escape(report, quote=True)}"></iframe>'
                     for w in (1024, 1280, 1366, 1920))
    page = tmp_path / "fit.html"
    page.write_text(_FIT_PAGE % frames, encoding="utf-8")
    dom = run_page(page.as_uri(), dump_dom=True, size=(2000, 800))
    assert dom.console == [], dom.console
    fit = re.search(r'data-fit="([^"]*)"', dom.stdout).group(1).split()
    assert len(fit) == 4, fit
    natural = float(parse(report[report.index("<svg"):report.index("</svg>") + 6]).get("width"))
    for row in fit:
        width, page_over, chart_over, svg_over, state, zoomed = row.split(":")
        assert state == "rendered", row
        assert int(page_over) <= 0 and int(chart_over) <= 0 and int(svg_over) <= 0, f"scrolls sideways: {row}"
        # scaled down, the page offers the full size, which scrolls in the chart's frame only
        assert (zoomed != "-") == (natural > int(width) - 46), row
        assert zoomed in ("-", "true/0"), row


def _visible_text(page: str) -> list[str]:
    """The text a reader sees on a page, one entry per element's text, without scripts, styles and
    hover titles."""
    from html.parser import HTMLParser

    class Text(HTMLParser):
        def __init__(self):
            super().__init__()
            self.hidden, self.out = 0, []

        def handle_starttag(self, tag, attrs):
            self.hidden += tag in ("script", "style", "title")

        def handle_endtag(self, tag):
            self.hidden -= tag in ("script", "style", "title")

        def handle_data(self, data):
            if not self.hidden and data.strip():
                self.out += [ln.strip() for ln in data.splitlines() if ln.strip()]
    parser = Text()
    parser.feed(page)
    return parser.out


SEVERAL_FINDINGS = {
    "crossed_pairs": lambda: (schedc.load(str(KNOWN / "tagless_order.pp")), {}),
    "eight_crossed_pairs": lambda: (schedc.load(str(KNOWN / "megatron_interleaved_p2.pp")), {}),
    "memory_violations": lambda: (builtin("1f1b"), {"memory_limit": 2}),
    "deadlock_cycle_of_4": lambda: (compile_text(_ring(4, 1)), {}),
    "broken_structure": lambda: (compile_text("schedule broken {\n rank 0: 0F0 0F0 0B0 0B0\n rank 1: 1F0 1B0\n}"), {}),
}


@pytest.mark.parametrize("case", sorted(SEVERAL_FINDINGS))
def test_each_finding_appears_once_on_the_html_page(case):
    program, options = SEVERAL_FINDINGS[case]()
    report = schedc.check(program, **options)
    assert len(report.errors) >= 2 or report.deadlock is not None
    page = timeline_html(program, report)
    text = _visible_text(page)
    whole = "\n".join(text)
    for d in report.errors:
        assert whole.count(d.message) == 1, f"{d.message!r} appears {whole.count(d.message)} times"
    # the source lines quoted under findings on one line of the file are alike; the findings are not
    long_lines = [t for t in text if len(t) > 40 and not __import__("re").match(r"\d*\s*\|", t)]
    repeated = {t for t in long_lines if long_lines.count(t) > 1}
    assert not repeated, f"told more than once: {sorted(repeated)}"
    flowing = " ".join(" ".join(text).split())  # the text as read, lines wrapped in the picture joined
    for note in build_scene(program, report).notes:  # the picture's notes: at most once (a finding's is told by it)
        assert flowing.count(" ".join(note.split())) <= 1, f"{note!r} is told more than once"
    if report.deadlock is not None:
        assert whole.count(report.deadlock.cause) == 1
        for n in range(1, len(report.deadlock.cycle) + 1):
            assert sum(t.startswith(f"({n}) rank") for t in text) == 1  # each arrow explained once
    if report.mismatches:  # the picture's numbers lead to the findings
        assert sum("(1)" in t for t in text) == 1 and "(1) " in page


@pytest.mark.parametrize("case", sorted(SEVERAL_FINDINGS))
def test_each_finding_appears_once_in_the_svg(case):
    program, options = SEVERAL_FINDINGS[case]()
    report = schedc.check(program, **options)
    root = parse(timeline_svg(program, report))
    notes = [t.text for t in by_class(root, "text", "note")]
    header = [t.text for t in root.iter(f"{{{NS['s']}}}text") if t.get("class") in ("title", "metrics", "verdict")]
    whole = " ".join(" ".join(s.split()) for s in notes + header)
    if report.deadlock is not None:  # the cause under the picture, not also in the verdict
        assert whole.count(" ".join(report.deadlock.cause.split())) == 1
    lines = [n for n in notes if len(n) > 40]
    assert len(lines) == len(set(lines))


def test_an_arrow_within_one_row_dips_under_it_clear_of_the_labels():
    """A wait on the same rank (an nccl stream's queue) leaves and enters through the bottom edges
    and stays in the band under the row; several arrows on one edge leave it apart."""
    from schedc.viz.route import Cell, Rows, route, text_box
    rows = Rows(top=100, pitch=64, height=22, left=78, right=800)
    a, b, c = (Cell(78 + 34 * k, 100, 112 + 34 * k, 122, 0) for k in (0, 3, 5))
    labels = [(text_box("→F1", 10.5, cell.cx, 115), 0) for cell in (a, b, c)]
    routes = route([(a, b, "1"), (a, c, "2"), (c, c, "")], rows, labels, [(x, True) for x in (a, b, c)])
    for r in routes:
        points = _path_points(r.d)
        assert all(p[1] >= 122 - 0.06 for p in points)  # under the row: never over a step of it
        assert max(p[1] for p in points) < 164  # above the next row
        for box, _ in labels:
            assert not any(_inside(p, box, 1.1) for p in points)
    starts = [_path_points(r.d)[0][0] for r in routes[:2]]
    assert abs(starts[0] - starts[1]) >= 8  # two arrows leave rank 0's first step apart
    assert routes[0].badge and routes[1].badge and routes[2].badge is None
