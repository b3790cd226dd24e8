"""Where a counterexample's arrows go: from a blocked (or crossed) step to the step it waits for (or
pairs with), around the steps' labels, and where each arrow's number sits.

An arrow leaves its step through the edge that faces the other step's row and enters that step
through its facing edge, so it never passes over either label. Between neighbouring rows it stays
in the band between them (the memory strip and the gap); past a row it crosses in a vertical
channel chosen clear of that row's labels. Its number sits on it where it covers no label and no
other number. Pure geometry, in the SVG's pixels: svg.py draws what `route` returns.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Box = tuple[float, float, float, float]  # x0, y0, x1, y1
Point = tuple[float, float]

# width of a character in em, near DejaVu Sans (the pictures' first font), rounded up: a label's box
# is estimated on the large side, so an arrow kept out of it is kept off the drawn text
_EM = {"→": 0.84, "←": 0.84, "|": 0.34, " ": 0.32, ".": 0.32, ",": 0.32}
BADGE_R = 6.5  # radius of an arrow's number
BADGE_FONT = 9.5
CLEAR = 1.5  # space kept between an arrow's stroke (or number) and a label
STROKE = 2.2  # width of an arrow's line
CORNER = 5.0  # radius of the corners of an arrow that passes rows


def char_em(c: str) -> float:
    if c in _EM:
        return _EM[c]
    if c.isdigit():
        return 0.64
    if c.isupper():
        return 0.76
    return 0.64


def text_box(text: str, size: float, cx: float, baseline: float) -> Box:
    """The box of `text` at font `size`, centred on cx (text-anchor="middle") on `baseline`."""
    w = sum(char_em(c) for c in text) * size
    return (cx - w / 2, baseline - 0.8 * size, cx + w / 2, baseline + 0.25 * size)


@dataclass(frozen=True)
class Cell:
    """A step as drawn: its box, and the row it is drawn in (0 at the top)."""

    x0: float
    y0: float
    x1: float
    y1: float
    row: int

    @property
    def cx(self) -> float:
        return (self.x0 + self.x1) / 2


@dataclass(frozen=True)
class Rows:
    """The rows' geometry: the top of row i is `top + i * pitch`, its steps `height` high."""

    top: float
    pitch: float
    height: float
    left: float  # the plot's x range
    right: float

    def row_top(self, i: int) -> float:
        return self.top + i * self.pitch

    def band_mid(self, above: int) -> float:
        """The middle of the band between row `above` and the row under it."""
        return self.row_top(above) + self.height + (self.pitch - self.height) / 2


@dataclass
class Route:
    d: str  # SVG path data: absolute M, L, C
    points: list[Point]  # the path sampled every pixel or two, in order
    badge: Point | None = None  # where the arrow's number is drawn


def route(arrows: list[tuple[Cell, Cell, str]], rows: Rows, labels: list[tuple[Box, int]],
          cells: Sequence[tuple[Cell, bool]] = ()) -> list[Route]:
    """A route for each (from, to, number) arrow. `labels` are the label boxes drawn, with their
    row; `cells` every step drawn and whether it has a thick outline (a leg along its edge would
    hide in the outline)."""
    ends = _ports(arrows)
    routes: list[Route | None] = [None] * len(arrows)
    passing = []
    for i, (a, b, _) in enumerate(arrows):
        p0, p1 = ends[(i, 0)], ends[(i, 1)]
        if abs(a.row - b.row) == 1:
            ym = rows.band_mid(min(a.row, b.row))
            segs = [[p0, (p0[0], ym), (p1[0], ym), p1]]
        elif a.row == b.row:
            if abs(p0[0] - p1[0]) < 1:
                p0, p1 = (p0[0] - 4, p0[1]), (p1[0] + 4, p1[1])
            dip = 0.8 * (rows.pitch - rows.height)
            segs = [[p0, (p0[0], p0[1] + dip), (p1[0], p1[1] + dip), p1]]
        else:
            passing.append(i)
            continue
        routes[i] = Route(_path(segs), _sample(segs))
    legs: list[float] = []
    for n, i in enumerate(passing):  # after the others, so their legs keep off them
        a, b, _ = arrows[i]
        p0, p1 = ends[(i, 0)], ends[(i, 1)]
        lane = [0.0, 6.0, -6.0, 12.0, -12.0][n % 5]
        down = b.row > a.row
        y1 = rows.band_mid(a.row if down else a.row - 1) + lane
        y2 = rows.band_mid(b.row - 1 if down else b.row) + lane
        between = range(min(a.row, b.row) + 1, max(a.row, b.row))
        lo, hi = rows.row_top(between[0]), rows.row_top(between[-1]) + rows.height
        drawn = [x for r in routes if r is not None for x, y in r.points if lo <= y <= hi] + legs
        xc = _channel(p0[0], p1[0], rows, [box for box, r in labels if r in between],
                      [(c, thick) for c, thick in cells if c.row in between], drawn)
        legs.append(xc)
        segs = _rounded([p0, (p0[0], y1), (xc, y1), (xc, y2), (p1[0], y2), p1])
        routes[i] = Route(_path(segs), _sample(segs))
    done = [r for r in routes if r is not None]
    assert len(done) == len(routes)  # every arrow has its route: a direct one, or one passing rows
    _badges(done, [number for _, _, number in arrows], [box for box, _ in labels],
            [(c.x0, c.y0, c.x1, c.y1) for c, _ in cells])
    return done


def _ports(arrows) -> dict[tuple[int, int], Point]:
    """Where each arrow leaves and enters its steps: on the edge facing the other step's row (the
    bottom edge when both are on one row), spread along the edge when several arrows share it."""
    sides: dict[tuple, list[tuple[float, int, int]]] = {}
    for i, (a, b, _) in enumerate(arrows):
        for end, (cell, other) in enumerate(((a, b), (b, a))):
            side = "bottom" if other.row >= cell.row else "top"
            sides.setdefault((cell, side), []).append((other.cx, i, end))
    out = {}
    for (cell, side), users in sides.items():
        users.sort()
        n = len(users)
        spacing = min(12.0, (cell.x1 - cell.x0) / (n + 1))
        y = cell.y1 if side == "bottom" else cell.y0
        for k, (_, i, end) in enumerate(users):
            out[(i, end)] = (cell.cx + (k - (n - 1) / 2) * spacing, y)
    return out


def _channel(xs: float, xt: float, rows: Rows, boxes: list[Box], cells: list[tuple[Cell, bool]],
             taken: list[float]) -> float:
    """The x of the vertical leg of an arrow that passes rows: clear of those rows' labels (and not
    close to them), off the edges of outlined steps, apart from the other arrows there, and as near
    halfway between its ends as that allows. Candidates: the steps' edges and a little either side."""
    want = (xs + xt) / 2
    edges = {v for c, _ in cells for v in (c.x0, c.x1)}
    candidates = {want} | {e + d for e in edges for d in (0.0, -5.0, 5.0, -9.0, 9.0)}
    half = STROKE / 2 + CLEAR
    spans = {(b[0], b[2]) for b in boxes}  # the rows' columns line up: their labels' spans repeat
    thick = {v for c, outlined in cells if outlined for v in (c.x0, c.x1)}
    taken_at = {round(t) for t in taken}

    def cost(x: float) -> float:
        hits = sum(x0 - half < x < x1 + half for x0, x1 in spans)
        near = sum(x0 - 6 < x < x1 + 6 for x0, x1 in spans)
        along = sum(abs(x - v) < 3.5 for v in thick)
        crowd = sum(abs(x - t) < 6 for t in taken_at)
        return 10_000 * hits + 60 * near + 100 * along + 50 * min(crowd, 1) + 0.5 * abs(x - want)

    inside = [x for x in candidates if rows.left + 2 <= x <= rows.right - 2] or [want]
    return min(sorted(inside), key=cost)


def _rounded(points: list[Point]) -> list[list[Point]]:
    """A polyline as segments, its corners rounded (each a cubic within the corner's two legs)."""
    pts = [p for k, p in enumerate(points) if k == 0 or math.dist(p, points[k - 1]) > 0.01]
    segs: list[list[Point]] = []
    start = pts[0]
    for k in range(1, len(pts) - 1):
        prev, at, nxt = pts[k - 1], pts[k], pts[k + 1]
        r = min(CORNER, math.dist(prev, at) / 2, math.dist(at, nxt) / 2)
        a = _towards(at, prev, r)
        b = _towards(at, nxt, r)
        segs.append([start, a])
        segs.append([a, at, at, b])
        start = b
    segs.append([start, pts[-1]])
    return segs


def _towards(p: Point, q: Point, r: float) -> Point:
    d = math.dist(p, q)
    return p if d == 0 else (p[0] + (q[0] - p[0]) * r / d, p[1] + (q[1] - p[1]) * r / d)


def _f(v: float) -> str:
    text = f"{v:.1f}".removesuffix(".0")
    return "0" if text == "-0" else text


def _path(segs: list[list[Point]]) -> str:
    out = [f"M{_f(segs[0][0][0])},{_f(segs[0][0][1])}"]
    for s in segs:
        if len(s) == 2:
            out.append(f"L{_f(s[1][0])},{_f(s[1][1])}")
        else:
            out.append("C" + " ".join(f"{_f(x)},{_f(y)}" for x, y in s[1:]))
    return "".join(out)


def bezier(seg: list[Point], t: float) -> Point:
    """The point at t of a segment given by 2 (a line) or 4 (a cubic) control points."""
    if len(seg) == 2:
        (x0, y0), (x1, y1) = seg
        return x0 + (x1 - x0) * t, y0 + (y1 - y0) * t
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = seg
    u = 1 - t
    return (u ** 3 * x0 + 3 * u * u * t * x1 + 3 * u * t * t * x2 + t ** 3 * x3,
            u ** 3 * y0 + 3 * u * u * t * y1 + 3 * u * t * t * y2 + t ** 3 * y3)


def _sample(segs: list[list[Point]]) -> list[Point]:
    out = [segs[0][0]]
    for s in segs:
        n = max(2, math.ceil(sum(math.dist(s[k], s[k + 1]) for k in range(len(s) - 1))))
        out += [bezier(s, k / n) for k in range(1, n + 1)]
    return out


def badge_half_width(label: str) -> float:
    """Half the width of the badge that shows an arrow's number (a circle, or a pill for "3,4")."""
    return max(BADGE_R, sum(char_em(c) for c in label) * BADGE_FONT / 2 + 3.5)


def _badges(routes: list[Route], labels: list[str], boxes: list[Box], cells: list[Box]) -> None:
    """A place on each numbered arrow for its number: over no label and no other number, if it can
    be off the other arrows and the steps, clear of its own arrowhead, and near a third of the way
    from its start (the waiting step)."""
    placed: list[Box] = []
    grid: dict[tuple[int, int], list[tuple[int, Point]]] = {}  # the routes' points by 16-pixel square
    for j, o in enumerate(routes):
        for p in o.points:
            grid.setdefault((int(p[0] // 16), int(p[1] // 16)), []).append((j, p))

    def crosses_another(i: int, box: Box) -> bool:
        for gx in range(int((box[0] - 1) // 16), int((box[2] + 1) // 16) + 1):
            for gy in range(int((box[1] - 1) // 16), int((box[3] + 1) // 16) + 1):
                if any(j != i and _inside(p, box, 1.0) for j, p in grid.get((gx, gy), ())):
                    return True
        return False

    for i, r in enumerate(routes):
        if not labels[i]:
            continue
        hw = badge_half_width(labels[i])
        lengths = [0.0]
        for p, q in zip(r.points, r.points[1:]):
            lengths.append(lengths[-1] + math.dist(p, q))
        total = lengths[-1]
        xs, ys = [p[0] for p in r.points], [p[1] for p in r.points]
        near = (min(xs) - hw - 4, min(ys) - BADGE_R - 4, max(xs) + hw + 4, max(ys) + BADGE_R + 4)
        near_boxes = [b for b in boxes if _overlap(near, b, 0.0)]
        near_cells = [b for b in cells if _overlap(near, b, 0.0)]
        best, best_cost = None, math.inf
        for step in range(2, 23):
            f = step * 0.04  # 0.08 .. 0.88 of the way
            at = f * total
            if at < BADGE_R - 1 or total - at < BADGE_R + 11:  # off its step; clear of the arrowhead
                continue
            c = r.points[min(range(len(lengths)), key=lambda j: abs(lengths[j] - at))]
            box = (c[0] - hw, c[1] - BADGE_R, c[0] + hw, c[1] + BADGE_R)
            cost = 10 * abs(f - 0.3)
            cost += 10_000 * sum(_overlap(box, b, CLEAR) for b in near_boxes)
            cost += 1_000 * sum(_overlap(box, q, 1.0) for q in placed)
            cost += 30 * crosses_another(i, box)
            cost += 5 * sum(_overlap(box, b, 0.0) for b in near_cells)
            if cost < best_cost:
                best, best_cost = (c, box), cost
        if best is None:
            c = r.points[len(r.points) // 3]
            best = (c, (c[0] - hw, c[1] - BADGE_R, c[0] + hw, c[1] + BADGE_R))
        r.badge = best[0]
        placed.append(best[1])


def _overlap(a: Box, b: Box, margin: float) -> bool:
    return a[0] < b[2] + margin and b[0] < a[2] + margin and a[1] < b[3] + margin and b[1] < a[3] + margin


def _inside(p: Point, box: Box, margin: float) -> bool:
    return box[0] - margin < p[0] < box[2] + margin and box[1] - margin < p[1] < box[3] + margin


