"""Lay out a Scene as one SVG document: a row per rank, its memory strip and that strip's scale,
arrows (a counterexample's routed around the steps' labels by route.py), axis, legend, notes.

Every block is a `<rect class="blk KIND">` carrying its rank, step, kind, stage, microbatch, chunk,
start and end as data attributes (the golden tests and the HTML page read them); its hover text is
an SVG `<title>`. The output depends only on the Scene, so the gallery is reproducible.
"""
from __future__ import annotations

import math

from . import palette
from .route import BADGE_FONT, BADGE_R, Cell, Rows, badge_half_width, route, text_box
from .scene import Block, Scene
from .text import escape

LEFT, RIGHT = 78, 96  # room for "rank 12" and "peak 13"
UNITS_RIGHT = 64  # and for "peak 50.78 GiB / 43.92 GiB" when sizes have a unit
ROW_H, MEM_H, GAP = 22, 14, 9
ARROW_GAP = 28  # the gap under a row of a program-order picture with arrows: room for them and their numbers
TOP_TITLE = 22
MIN_BLOCK_PX = 18  # the shortest compute block is at least this wide, so two digits fit
STEP_PX = 34  # a cell of a program-order picture
MAX_WIDTH, MIN_WIDTH = 4000, 720  # of the plot area
AGGREGATE_WIDTH = 1200  # of an aggregated plot: two pixels per time bin
FONT = "DejaVu Sans, Verdana, Arial, sans-serif"
CHAR_PX = 6.2  # width of one digit at the largest label size, for deciding whether a label fits
LABEL_SIZES = (10.5, 9, 7.5)  # font sizes of a block's label, largest first
TEXT_CHAR_PX = 6.6  # average width of a character of 11-12 px text, for wrapping
BOLD_CHAR_PX = 7.6  # and of 12 px bold text (the verdict)
SCALE_FONT = 8  # the memory strip's scale


def _f(v: float) -> str:
    text = f"{v:.1f}"
    text = text.removesuffix(".0")
    return "0" if text == "-0" else text


class _Layout:
    def __init__(self, scene: Scene, header: bool = True):
        self.scene = scene
        lo, hi = scene.extent
        span = max(hi - lo, 1e-9)
        px: float
        if scene.mode == "step":
            px = STEP_PX
        elif scene.mode == "aggregate":
            px = AGGREGATE_WIDTH / span
        else:
            shortest = min((b.x1 - b.x0 for b in scene.blocks if b.kind not in ("COMM", "STAGE") and b.x1 > b.x0),
                           default=span / 40)
            px = MIN_BLOCK_PX / shortest
            px = min(px, MAX_WIDTH / span)
        px = max(px, MIN_WIDTH / span)
        self.px, self.lo = px, lo
        self.plot_w = span * px
        self.width = LEFT + self.plot_w + RIGHT + (UNITS_RIGHT if scene.units is not None else 0)
        self.chars = int((self.width - LEFT - 10) / TEXT_CHAR_PX)  # characters of text per line
        self.header = [("title", scene.title)] + [("metrics", t) for t in _wrap(scene.metrics, self.chars)]
        if scene.verdict:
            bold = int(self.chars * TEXT_CHAR_PX / BOLD_CHAR_PX)
            self.header += [("verdict", t) for t in _wrap(scene.verdict, bold)[:4]]
        if not header:
            self.header = []
        self.top = TOP_TITLE + 17 * (len(self.header) - 1) + 22 if self.header else 12
        routed = any(a.kind != "msg" for a in scene.arrows)
        self.pitch = ROW_H + MEM_H + (ARROW_GAP if routed else GAP)
        self.rows = {r: i for i, r in enumerate(scene.rows)}
        self.rows_h = self.pitch * len(scene.rows)

    def x(self, v: float) -> float:
        return LEFT + (v - self.lo) * self.px

    def y(self, rank: int) -> float:
        return self.top + self.rows[rank] * self.pitch

    def y_row(self, i: int) -> float:
        return self.top + i * self.pitch


def render_svg(scene: Scene, *, titles: bool = True, header: bool = True, notes: bool = True) -> str:
    """The Scene as SVG text. `titles=False` leaves out the per-block `<title>` (the HTML page shows
    its own hover box); `header=False` the title, metrics and verdict, and `notes=False` the notes
    under the picture (the HTML page writes them as text that wraps with the window)."""
    L = _Layout(scene, header)
    out: list[str] = []
    body: list[str] = []
    _rows(body, scene, L)
    if scene.aggregate is not None:
        _aggregate(body, scene, L)
    else:
        _blocks(body, scene, L, titles)
    _moments(body, scene, L)
    _arrows(body, scene, L)
    y: float = L.top + L.rows_h
    y = _axis(body, scene, L, y)
    y = _legend(body, scene, L, y + 8)
    if notes:
        y = _notes(body, scene, L, y + 6)
    width = L.width
    height = y + 10
    out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{_f(width)}" height="{_f(height)}" '
               f'viewBox="0 0 {_f(width)} {_f(height)}" font-family="{FONT}" font-size="11" '
               f'data-mode="{scene.mode}" data-ranks="{scene.num_ranks}" data-px="{L.px:.6g}" '
               f'data-left="{LEFT}" data-top="{_f(L.top)}" data-pitch="{L.pitch}">')
    out.append(_defs())
    out.append('<rect width="100%" height="100%" fill="#FFFFFF"/>')
    out += _header(scene, L)
    out += body
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _defs() -> str:
    return ("<defs>"
            f'<pattern id="idle" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
            f'<rect width="6" height="6" fill="{palette.IDLE}"/><line x1="0" y1="0" x2="0" y2="6" '
            f'stroke="{palette.IDLE_HATCH}" stroke-width="2"/></pattern>'
            '<marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
            'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#444444"/></marker>'
            '<marker id="alarm" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="4.5" markerHeight="4.5" '
            f'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="{palette.ALARM_DARK}"/></marker>'
            "<style>.lbl{pointer-events:none}.blk:hover{stroke:#000;stroke-width:2}</style>"
            "</defs>")


def _header(scene: Scene, L: _Layout) -> list[str]:
    out = []
    y = TOP_TITLE
    for cls, text in L.header:
        if cls == "title":
            style = 'font-size="16" font-weight="bold"'
        elif cls == "metrics":
            style = 'font-size="12"'
        else:
            style = f'font-size="12" font-weight="bold" fill="{"#1B5E20" if scene.ok else palette.ALARM_DARK}"'
        out.append(f'<text class="{cls}" x="{LEFT}" y="{y}" {style}>{escape(text)}</text>')
        y += 17 if cls != "title" else 19
    return out


def _rows(out: list[str], scene: Scene, L: _Layout) -> None:
    mem_max = scene.memory_max or 1.0
    for i, (r, label) in enumerate(zip(scene.rows, scene.row_labels)):
        y = L.y_row(i)
        out.append(f'<text class="rank" x="{LEFT - 8}" y="{_f(y + ROW_H / 2 + 4)}" text-anchor="end">{escape(label)}</text>')
        out.append(f'<rect class="row" data-rank="{r}" x="{LEFT}" y="{_f(y)}" width="{_f(L.plot_w)}" '
                   f'height="{ROW_H}" fill="url(#idle)"/>')
        my = y + ROW_H + 1
        out.append(f'<rect class="memrow" x="{LEFT}" y="{_f(my)}" width="{_f(L.plot_w)}" height="{MEM_H}" '
                   'fill="#F6F6F6"/>')
        peak = None
        if scene.aggregate is not None:
            values = scene.aggregate.memory[i]
            w = scene.aggregate.bin_width
            pts = [(k * w, v) for k, v in enumerate(values)]
            pts = [(x, v) for (x, v) in pts] + [(len(values) * w, values[-1] if values else 0.0)]
            peak = max(values, default=0.0)
        else:
            pts = list(scene.memory.get(r, ()))
            peak = max((v for _, v in pts), default=None)
        if pts:
            d = [f"M{_f(L.x(pts[0][0]))},{_f(my + MEM_H)}"]
            prev = 0.0
            for x, v in pts:
                d.append(f"L{_f(L.x(x))},{_f(my + MEM_H - MEM_H * prev / mem_max)}")
                d.append(f"L{_f(L.x(x))},{_f(my + MEM_H - MEM_H * v / mem_max)}")
                prev = v
            d.append(f"L{_f(L.x(scene.extent[1]))},{_f(my + MEM_H - MEM_H * prev / mem_max)}")
            d.append(f"L{_f(L.x(scene.extent[1]))},{_f(my + MEM_H)}Z")
            out.append(f'<path class="mem" data-rank="{r}" d="{"".join(d)}" fill="{palette.MEMORY}" '
                       f'fill-opacity="0.55" stroke="#2E7DAF" stroke-width="0.8"/>')
        limit = scene.limits.get(r)
        if limit is not None and scene.memory_max:
            ly = my + MEM_H - MEM_H * limit / mem_max
            out.append(f'<line class="limit" x1="{LEFT}" x2="{_f(LEFT + L.plot_w)}" y1="{_f(ly)}" y2="{_f(ly)}" '
                       f'stroke="{palette.ALARM}" stroke-dasharray="4,3" stroke-width="1"/>')
        if peak is not None:
            u = f" {scene.units.memory}" if scene.units is not None else ""
            text = f"peak {_num(peak)}{u}" + (f" / {_num(limit)}{u}" if limit is not None else "")
            out.append(f'<text class="peak" x="{_f(LEFT + L.plot_w + 6)}" y="{_f(my + MEM_H - 3)}" '
                       f'font-size="10" fill="#2E6F9A">{escape(text)}</text>')
        _memory_scale(out, scene, my, mem_max)


def _memory_unit(scene: Scene, value: float) -> str:
    """What the memory strips count in: GiB under a model and hardware description, else the
    schedule's units of activation memory."""
    if scene.units is not None:
        return scene.units.memory
    return "unit" if value == 1 else "units"


def _memory_scale(out: list[str], scene: Scene, my: float, mem_max: float) -> None:
    """The strip's scale, left of it: a tick at 0 and one at the top (the most memory any strip
    shows), labelled with the unit."""
    g = ['<g class="memscale" fill="#2E6F9A" stroke="#2E6F9A" font-size="%s" text-anchor="end">' % SCALE_FONT]
    for value, y, dy in ((mem_max, my, 6.2), (0.0, my + MEM_H, 0.0)):
        g.append(f'<line x1="{LEFT - 3}" x2="{LEFT}" y1="{_f(y)}" y2="{_f(y)}" stroke-width="0.8"/>')
        text = f"{_num(value)} {_memory_unit(scene, value)}" if value else "0"
        g.append(f'<text class="memtick" x="{LEFT - 5}" y="{_f(y + dy)}" stroke="none" data-value="{value:.6g}">'
                 f"{escape(text)}</text>")
    g.append("</g>")
    out.append("".join(g))


_MARK_STYLE = {
    "cycle": f'stroke="{palette.ALARM_DARK}" stroke-width="3"',
    "blocked": f'stroke="{palette.ALARM}" stroke-width="3"',
    "error": f'stroke="{palette.ALARM}" stroke-width="3"',
    "crossed": f'stroke="{palette.ALARM_DARK}" stroke-width="3" stroke-dasharray="4,2"',
    "live": f'stroke="{palette.ALARM_DARK}" stroke-width="2"',
}


def _drawn(scene: Scene, L: _Layout, b: Block) -> tuple[float, float, float, float, float | None]:
    """Where a block is drawn (x, y, width, height) and the font size of its label (None: no label)."""
    y = L.y(b.rank)
    x0 = L.x(b.x0)
    w = (b.x1 - b.x0) * L.px
    tick = b.kind in ("COMM", "STAGE") and scene.mode != "step"
    if tick:  # posting a send or receive takes (almost) no time: a mark along the row's top
        return x0, y, max(w, 2.0), ROW_H * 0.4, None
    w = max(w, 1.0)
    return x0, y, w, ROW_H, _label_size(b.label, w) if b.label else None


def _label_baseline(L: _Layout, rank: int) -> float:
    return L.y(rank) + ROW_H / 2 + 4


def _blocks(out: list[str], scene: Scene, L: _Layout, titles: bool) -> None:
    for b in scene.blocks:
        colour = palette.fill(b.kind, b.chunk, scene.chunks)
        x0, yy, w, h, size = _drawn(scene, L, b)
        if b.mark == "not-run":
            colour = palette.mix(colour, "#FFFFFF", 0.7)
        if b.mark in _MARK_STYLE:
            stroke = _MARK_STYLE[b.mark]
        elif b.chunk > 0 and scene.chunks > 1:
            stroke = f'stroke="{palette.KIND_COLOUR[b.kind]}" stroke-width="1.5"'
        else:
            stroke = 'stroke="#FFFFFF" stroke-width="0.6"'
        classes = f"blk {b.kind}" + (f" {b.mark}" if b.mark else "")
        attrs = (f'class="{classes}" x="{_f(x0)}" y="{_f(yy)}" width="{_f(w)}" height="{_f(h)}" fill="{colour}" '
                 f'{stroke} data-rank="{b.rank}" data-step="{b.step}" data-kind="{b.kind}" data-stage="{b.stage}" '
                 f'data-mb="{"" if b.microbatch is None else b.microbatch}" data-chunk="{b.chunk}" '
                 f'data-start="{b.x0:.6g}" data-end="{b.x1:.6g}" data-what="{escape(b.what)}"'
                 + (f' data-where="{escape(b.where)}"' if b.where else "")
                 + (f' data-note="{escape(b.note)}"' if b.note else ""))
        if titles:
            out.append(f"<rect {attrs}><title>{escape(hover_text(scene, b))}</title></rect>")
        else:
            out.append(f"<rect {attrs}/>")
        if size is not None:
            fg = palette.text_colour(colour)
            out.append(f'<text class="lbl" x="{_f(x0 + w / 2)}" y="{_f(_label_baseline(L, b.rank))}" '
                       f'text-anchor="middle" font-size="{size}" fill="{fg}">{escape(b.label)}</text>')


def _label_size(label: str, width: float) -> float | None:
    """The largest font size (of three) at which the label fits the block, or None."""
    for size in LABEL_SIZES:
        if len(label) * CHAR_PX * size / LABEL_SIZES[0] + 3 <= width:
            return size
    return None


def hover_text(scene: Scene, b: Block) -> str:
    when = (f"t {b.x0:.6g} to {b.x1:.6g}" if scene.mode == "time" else "not timed (program order)")
    mb = "" if b.microbatch is None else f", microbatch {b.microbatch}"
    text = f"{b.what} ({b.text}): rank {b.rank}, step {b.step}, stage {b.stage}{mb}, chunk {b.chunk}; {when}"
    if b.where:
        text += f"; {b.where}"
    if b.note:
        text += f"\n{b.note}"
    return text


def _aggregate(out: list[str], scene: Scene, L: _Layout) -> None:
    agg = scene.aggregate
    assert agg is not None  # (render_svg draws the cells of an aggregate scene alone)
    for row, b0, b1, kind, level in agg.cells:
        y = L.y_row(row)
        x0, x1 = L.x(b0 * agg.bin_width), L.x(b1 * agg.bin_width)
        out.append(f'<rect class="cell {kind}" x="{_f(x0)}" y="{_f(y)}" width="{_f(max(x1 - x0, 0.5))}" '
                   f'height="{ROW_H}" fill="{palette.KIND_COLOUR[kind]}" fill-opacity="{level:.1f}" '
                   f'data-row="{row}" data-kind="{kind}" data-busy="{level:.1f}"/>')


def _moments(out: list[str], scene: Scene, L: _Layout) -> None:
    for m in scene.moments:
        if m.rank not in L.rows:
            continue
        y = L.y(m.rank)
        x = L.x(m.x)
        out.append(f'<line class="moment" data-rank="{m.rank}" x1="{_f(x)}" x2="{_f(x)}" y1="{_f(y - 4)}" '
                   f'y2="{_f(y + ROW_H + MEM_H + 2)}" stroke="{palette.ALARM_DARK}" stroke-width="2"/>')
        out.append(f'<text class="moment-label" x="{_f(x + 3)}" y="{_f(y - 1)}" font-size="10" '
                   f'fill="{palette.ALARM_DARK}" font-weight="bold">{escape(m.label)}</text>')


def _arrows(out: list[str], scene: Scene, L: _Layout) -> None:
    routed = []
    for a in scene.arrows:
        if a.src_rank not in L.rows or a.dst_rank not in L.rows:
            continue
        if a.kind != "msg":
            routed.append(a)
            continue
        down = L.rows[a.dst_rank] >= L.rows[a.src_rank]
        y1 = L.y(a.src_rank) + (ROW_H if down else 0)
        y2 = L.y(a.dst_rank) + (0 if down else ROW_H)
        x1, x2 = L.x(a.src_x), L.x(a.dst_x)
        out.append(f'<line class="arrow msg" x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" '
                   'stroke="#444444" stroke-opacity="0.55" stroke-width="0.8" marker-end="url(#head)">'
                   f"<title>{escape(a.label)}</title></line>")
    if routed:
        _routed(out, scene, L, routed)


def _routed(out: list[str], scene: Scene, L: _Layout, arrows) -> None:
    """The wait-for cycle's arrows and crossed pairs: from step to step around the labels (route.py),
    each numbered where its number covers no label."""
    cells: dict[tuple[int, int | None], Cell] = {}
    labels, drawn = [], []
    for b in scene.blocks:
        x0, y0, w, h, size = _drawn(scene, L, b)
        cell = Cell(x0, y0, x0 + w, y0 + h, L.rows[b.rank])
        cells[(b.rank, b.step)] = cell
        drawn.append((cell, b.mark in _MARK_STYLE))
        if size is not None:
            labels.append((text_box(b.label, size, x0 + w / 2, _label_baseline(L, b.rank)), cell.row))

    def cell_of(rank: int, step: int | None, x: float) -> Cell:
        found = cells.get((rank, step))
        if found is not None:
            return found
        y = L.y(rank)  # not drawn (outside the window shown): a cell's width at x
        return Cell(L.x(x) - L.px / 2, y, L.x(x) + L.px / 2, y + ROW_H, L.rows[rank])

    # arrows between the same two steps (two crossed pairs of one grouped step) are drawn as one, "3,4"
    joined: dict[tuple, list] = {}
    for a in arrows:
        joined.setdefault((a.kind, a.src_rank, a.src_step, a.src_x, a.dst_rank, a.dst_step, a.dst_x), []).append(a)
    arrows = [group[0] for group in joined.values()]
    numbers = [",".join(a.label for a in group if a.label) for group in joined.values()]
    ends = [(cell_of(a.src_rank, a.src_step, a.src_x), cell_of(a.dst_rank, a.dst_step, a.dst_x), n)
            for a, n in zip(arrows, numbers)]
    routes = route(ends, Rows(L.top, L.pitch, ROW_H, LEFT, LEFT + L.plot_w), labels, drawn)
    for a, n, r in zip(arrows, numbers, routes):
        dash = ' stroke-dasharray="5,3"' if a.kind == "cross" else ""
        out.append(f'<path class="arrow {a.kind}" d="{r.d}" fill="none" stroke="{palette.ALARM_DARK}" '
                   f'stroke-width="2.2"{dash} marker-end="url(#alarm)"><title>{escape(n)}</title></path>')
    for n, r in zip(numbers, routes):  # the numbers over every line, explained in the notes
        if n and r.badge is not None:
            lx, ly = r.badge
            hw = badge_half_width(n)
            out.append(f'<rect class="arrow-num" x="{_f(lx - hw)}" y="{_f(ly - BADGE_R)}" width="{_f(2 * hw)}" '
                       f'height="{_f(2 * BADGE_R)}" rx="{BADGE_R}" fill="#FFFFFF" stroke="{palette.ALARM_DARK}" '
                       'stroke-width="1.5"/>')
            out.append(f'<text class="arrow-label" x="{_f(lx)}" y="{_f(ly + 3.3)}" text-anchor="middle" '
                       f'font-size="{BADGE_FONT}" font-weight="bold" fill="{palette.ALARM_DARK}">{escape(n)}</text>')


def _axis(out: list[str], scene: Scene, L: _Layout, y: float) -> float:
    lo, hi = scene.extent
    out.append(f'<line class="axis" x1="{LEFT}" x2="{_f(LEFT + L.plot_w)}" y1="{_f(y)}" y2="{_f(y)}" stroke="#555555"/>')
    step = _tick(L.px, 56)
    if scene.mode == "step":
        step = max(1, math.ceil(step))
    first = math.ceil(lo / step) * step
    t = first
    count = 0
    after = LEFT + L.plot_w + 6  # where the axis's name goes: past the last tick's number
    while t <= hi + 1e-9 and count < 400:
        x = L.x(t)
        out.append(f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{_f(y)}" y2="{_f(y + 4)}" stroke="#555555"/>')
        out.append(f'<text class="tick" x="{_f(x)}" y="{_f(y + 15)}" text-anchor="middle" font-size="10">'
                   f"{_num(t)}</text>")
        after = max(after, x + len(_num(t)) * 3.4 + 5)
        t = first + (count + 1) * step
        count += 1
    out.append(f'<text x="{_f(after)}" y="{_f(y + 15)}" font-size="10" fill="#555555">'
               f"{scene.x_label}</text>")
    return y + 22


def _tick(px: float, min_px: float) -> float:
    raw = min_px / px
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * power >= raw:
            return m * power
    return 10 * power


def _legend(out: list[str], scene: Scene, L: _Layout, y: float) -> float:
    items: list[tuple[str, str]] = []  # (swatch svg, text)
    for k in scene.kinds:
        items.append((f'fill="{palette.KIND_COLOUR[k]}"', palette.KIND_NAME[k]))
    if scene.chunks > 1 and scene.aggregate is None:
        items.append((f'fill="{palette.fill("F", 1, 2)}" stroke="{palette.KIND_COLOUR["F"]}" stroke-width="1.5"',
                      "later route (lighter)" if scene.routes else "later chunk (lighter)"))
    items.append(('fill="url(#idle)"', "idle"))
    unit = scene.units.memory if scene.units is not None else "units of activation memory"
    items.append((f'fill="{palette.MEMORY}" fill-opacity="0.55"', f"live memory, in {unit}"))
    marks = {b.mark for b in scene.blocks}
    if "cycle" in marks:
        items.append((f'fill="#FFFFFF" {_MARK_STYLE["cycle"]}', "blocked (on the wait-for cycle)"))
    if "blocked" in marks:
        items.append((f'fill="#FFFFFF" {_MARK_STYLE["blocked"]}', "where a rank is stuck"))
    if "error" in marks:
        items.append((f'fill="#FFFFFF" {_MARK_STYLE["error"]}', "named by a finding"))
    if "not-run" in marks:
        items.append((f'fill="{palette.mix(palette.KIND_COLOUR["F"], "#FFFFFF", 0.7)}"', "never runs"))
    if "crossed" in marks:
        items.append((f'fill="#FFFFFF" stroke="{palette.ALARM_DARK}" stroke-width="3" stroke-dasharray="4,2"',
                      "crossed pair"))
    if "live" in marks:
        items.append((f'fill="#FFFFFF" stroke="{palette.ALARM_DARK}" stroke-width="2"', "live at the violation"))
    x: float = LEFT
    limit = LEFT + max(L.plot_w, 400)
    out.append('<g class="legend">')
    for swatch, text in items:
        w = 22 + len(text) * 6.3 + 14
        if x + w > limit and x > LEFT:
            x, y = LEFT, y + 18
        out.append(f'<rect x="{_f(x)}" y="{_f(y)}" width="16" height="12" {swatch}/>')
        out.append(f'<text x="{_f(x + 21)}" y="{_f(y + 10)}" font-size="11">{escape(text)}</text>')
        x += w
    out.append("</g>")
    return y + 18


def _notes(out: list[str], scene: Scene, L: _Layout, y: float) -> float:
    for note in scene.notes[:40]:
        for line in _wrap(note, L.chars):
            y += 14
            out.append(f'<text class="note" x="{LEFT}" y="{_f(y)}" font-size="11" fill="#333333">{escape(line)}</text>')
    return y


def _wrap(text: str, width: int) -> list[str]:
    words, lines, line = text.split(" "), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = "    " + w
        else:
            line = f"{line} {w}" if line else w
    if line:
        lines.append(line)
    return lines


def _num(x: float) -> str:
    x = float(x)
    return str(int(x)) if x.is_integer() else f"{x:.4g}"
