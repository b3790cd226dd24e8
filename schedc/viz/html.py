"""One self-contained HTML report: the timeline with hover details, the summary table, the check results.

No network: the SVG, the styles and the script are inline, and a Content-Security-Policy forbids
anything else, so the page renders the same offline. The title, metrics, verdict and notes are
page text that wraps with the window, and the timeline is scaled to the window's width (a button
shows it at full size), so the page never scrolls sideways; each finding is told once, under
Checks. Hovering a block shows its kind, stage, microbatch, start, end and source line. When the
page has rendered, the script sets `data-schedc="rendered"` on the body (the Chromium test reads it).
"""
from __future__ import annotations

from .palette import KIND_NAME
from .scene import Scene
from .svg import render_svg
from .text import escape, script_json

_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
        "font-src 'none'; connect-src 'none'")

_STYLE = """
body{font-family:DejaVu Sans,Verdana,Arial,sans-serif;margin:18px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 6px}
.metrics{margin:0 0 4px}.ok{color:#1B5E20;font-weight:bold}.fail{color:#8B1A00;font-weight:bold}
.unknown{color:#8A6D00;font-weight:bold}
#chart{border:1px solid #ddd;padding:4px;overflow-x:auto}
#chart svg{display:block;max-width:100%;height:auto}#chart.full svg{max-width:none}
#zoom{font-size:12px;margin:4px 0}#zoom[hidden]{display:none}
.notes{font-size:13px;color:#333;padding-left:20px}.notes li,.findings li{margin:2px 0;overflow-wrap:anywhere}
.wide{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f2f2f2}pre{background:#f7f7f7;border:1px solid #ddd;padding:8px;overflow-x:auto;font-size:12px}
.findings{padding-left:0;list-style:none}.findings pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:4px 0}
.num{color:#8B1A00;font-weight:bold}
#tip{position:fixed;pointer-events:none;background:#fffff4;border:1px solid #888;padding:6px 8px;font-size:12px;
max-width:520px;box-shadow:2px 2px 6px rgba(0,0,0,.25);white-space:pre-wrap;z-index:10}
#tip b{font-size:13px}.src{font-family:DejaVu Sans Mono,monospace;color:#333}
#status{color:#777;font-size:11px;margin-top:16px}
"""

_SCRIPT = """
(function () {
  var tip = document.getElementById("tip");
  var status = document.getElementById("status");
  window.addEventListener("error", function (e) {
    document.body.setAttribute("data-schedc", "error");
    status.textContent = "script error: " + e.message;
  });
  function show(rect, ev) {
    var d = rect.dataset;
    var lines = [];
    lines.push("<b>" + esc(d.what) + "</b>");
    lines.push("kind " + esc(KINDS[d.kind] || d.kind) + ", rank " + d.rank + ", step " + d.step);
    lines.push("stage " + d.stage + (d.mb !== "" ? ", microbatch " + d.mb : "") + ", chunk " + d.chunk);
    lines.push(MODE === "time" ? "start " + d.start + ", end " + d.end : "not timed (program order)");
    if (d.where) {
      lines.push("source " + esc(d.where) + (SOURCE[d.where] ? ": <span class=src>" + esc(SOURCE[d.where]) + "</span>" : ""));
    }
    if (d.note) { lines.push("<span class=fail>" + esc(d.note) + "</span>"); }
    tip.innerHTML = lines.join("\\n");
    tip.hidden = false;
    move(ev);
  }
  function move(ev) {
    var x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + tip.offsetWidth > window.innerWidth) { x = ev.clientX - tip.offsetWidth - 10; }
    if (y + tip.offsetHeight > window.innerHeight) { y = ev.clientY - tip.offsetHeight - 10; }
    tip.style.left = Math.max(0, x) + "px";
    tip.style.top = Math.max(0, y) + "px";
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c];
    });
  }
  var chart = document.getElementById("chart");
  var zoom = document.getElementById("zoom");
  var svg = chart.querySelector("svg");
  function fits() {  // the button only when the picture is scaled down to the window
    var full = chart.classList.contains("full");
    zoom.hidden = !full && svg.getBoundingClientRect().width >= svg.width.baseVal.value - 0.5;
    zoom.textContent = full ? "Fit to the window" : "Show at full size (scrolls sideways)";
  }
  zoom.addEventListener("click", function () { chart.classList.toggle("full"); fits(); });
  window.addEventListener("resize", fits);
  fits();
  var blocks = document.querySelectorAll("#chart rect.blk");
  for (var i = 0; i < blocks.length; i++) {
    blocks[i].addEventListener("mouseenter", function (ev) { show(this, ev); });
    blocks[i].addEventListener("mousemove", move);
    blocks[i].addEventListener("mouseleave", function () { tip.hidden = true; });
  }
  if (location.hash === "#selftest" && blocks.length) {  // hover the first block, report what the box says
    blocks[0].dispatchEvent(new MouseEvent("mouseenter", {clientX: 20, clientY: 20}));
    document.body.setAttribute("data-selftest", tip.hidden ? "no tip" : tip.textContent);
  }
  status.textContent = "rendered " + blocks.length + " blocks";
  document.body.setAttribute("data-blocks", String(blocks.length));
  document.body.setAttribute("data-schedc", "rendered");
})();
"""


def render_html(scene: Scene) -> str:
    svg = render_svg(scene, titles=False, header=False, notes=False)
    verdict_class = {True: "ok", False: "fail", None: "unknown"}[scene.ok]
    told = {f.note for f in scene.findings if f.note}  # the notes on findings are told with them, under Checks
    notes = [n for n in scene.notes if n not in told]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>schedc: {escape(scene.title)}</title>",
        f"<style>{_STYLE}</style></head>",
        "<body>",
        f"<h1>{escape(scene.title)}</h1>",
        f'<p class="metrics">{escape(scene.metrics)}</p>',
        f'<p class="verdict {verdict_class}">{escape(scene.verdict)}</p>',
        '<p class="hint">Hover over a block for its kind, stage, microbatch, times and source line.'
        + (" This run is aggregated: blocks are not drawn one by one." if scene.mode == "aggregate" else "")
        + "</p>",
        '<button id="zoom" type="button" hidden></button>',
        f'<div id="chart">{svg}</div>',
        ('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>") if notes else "",
        '<div id="tip" hidden></div>',
        "<h2>Summary</h2>",
        _summary_table(scene),
        "<h2>Checks</h2>",
        _checks(scene),
        '<p id="status">loading</p>',
        "<script>",
        "var SOURCE = " + script_json(scene.sources) + ";",
        "var KINDS = " + script_json(KIND_NAME) + ";",
        "var MODE = " + script_json(scene.mode) + ";",
        _SCRIPT,
        "</script>",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def _summary_table(scene: Scene) -> str:
    timed = scene.makespan is not None
    t, m = (f" ({scene.units.time})", f", {scene.units.memory}") if scene.units is not None else ("", "")
    head = ["rank", "steps", "actions"]
    if timed:
        head += [f"busy{t}", f"idle{t}", "utilisation", f"peak memory (simulated{m})"]
    head += [f"peak memory (checked, worst case{m})", f"limit{' (' + m[2:] + ')' if m else ''}"]
    rows = ['<div class="wide"><table><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for s in scene.summary:
        cells: list[object] = [s.rank, s.steps, s.actions]
        if timed:
            util = s.busy / scene.makespan if scene.makespan and s.busy is not None else 0.0  # (timed: busy is)
            cells += [_num(s.busy), _num(s.idle), f"{util:.1%}", _num(s.peak_simulated)]
        cells += [_num(s.peak_checked), _num(s.limit) if s.limit is not None else ""]
        rows.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
    rows.append("</table></div>")
    if timed:
        rows.append(f"<p>makespan {_num(scene.makespan)}{' ' + scene.units.time if scene.units else ''}, "
                    f"bubble ratio {scene.bubble:.4f} "
                    "(1 - total busy / (ranks x makespan))</p>")
    return "\n".join(rows)


def _checks(scene: Scene) -> str:
    """Each finding once: as the check reports it (with its source line), after the number the
    picture marks it with; then the grid of where the ranks stop."""
    if not scene.findings:
        out = ['<p>No findings.</p>' if scene.ok else f"<p>No findings to show: {escape(scene.verdict)}.</p>"]
    else:
        out = ['<ol class="findings">']
        for f in scene.findings:
            num = f'<span class="num">({escape(f.number)})</span> ' if f.number else ""
            out.append(f'<li><pre class="finding">{num}{escape(f.text)}</pre></li>')
        out.append("</ol>")
    if scene.grid:
        out.append("<p>Where the ranks stop ([..] marks a blocked step):</p>")
        out.append("<pre>" + escape(scene.grid) + "</pre>")
    return "\n".join(out)


def _num(x) -> str:
    if x is None:
        return ""
    x = float(x)
    return str(int(x)) if x.is_integer() else f"{x:.6g}"
