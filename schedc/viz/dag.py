"""The dependency graph of a program through graphviz: one node per step, ranks as clusters.

Laid out as the timeline is: each rank a row (a cluster whose nodes share one of dot's ranks, in
program order from left to right), rank 0 on top and the others under it in order, which invisible
edges between the rows' first steps fix, so no edge between ranks can reorder the rows. Edges are
the happens-before constraints the verifier uses (schedc/verify/graph.py): program order (grey),
data (black), and "a send completes only after its receive is posted" and back (blue, dashed). The
wait-for cycle of a deadlock is drawn in red over it, its blocked steps outlined; crossed pairs and
memory violations are outlined too. Without graphviz's `dot` the .dot source is returned with a
note on how to install it.
"""
from __future__ import annotations

from ..errors import SchedcError
from ..ir import format_step
from . import palette
from .rendered import Rendered
from .scene import chunk_of, kind_of, what_of
from .text import dot

MAX_DAG_STEPS = 2_000  # past this a dependency graph is unreadable (and dot slow): draw the timeline instead

INSTALL = ("install graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz; "
           "conda: conda install graphviz)")

_EDGE = {
    "order": {"color": "#9A9A9A", "weight": "20", "arrowsize": "0.5"},
    "data": {"color": "#000000", "weight": "1", "arrowsize": "0.6"},
    "recv-posted": {"color": palette.OKABE_ITO["blue"], "style": "dashed", "weight": "0", "arrowsize": "0.6"},
    "send-posted": {"color": palette.OKABE_ITO["blue"], "style": "dashed", "weight": "0", "arrowsize": "0.6"},
    "buffer": {"color": palette.OKABE_ITO["sky_blue"], "style": "dashed", "weight": "0", "arrowsize": "0.6"},
}
RED = palette.ALARM_DARK  # the wait-for cycle and crossed pairs: the timeline arrows' red, no step's fill


def _node(r: int, x: int) -> str:
    return f"r{r}s{x}"


def dependency_graph(program, report):
    """A graphviz.Digraph of the program's steps and constraints (those of the report's analysis),
    the findings of `report` marked."""
    import graphviz
    steps = sum(len(s) for s in program.ranks)
    if steps > MAX_DAG_STEPS:
        raise SchedcError("too-large", f"{program.name} has {steps:,} steps; a dependency graph is drawn for at most "
                          f"{MAX_DAG_STEPS:,} (fewer ranks or microbatches, or draw the timeline without --dag)",
                          where="--dag")
    marks = _marks(program, report)
    g = graphviz.Digraph(name=dot(program.name), graph_attr={  # every text through dot(): shown as is
        "rankdir": "TB", "newrank": "true", "nodesep": "0.15", "ranksep": "0.35", "fontname": "Helvetica",
        "label": dot(_title(program, report)), "labelloc": "t", "fontsize": "14"},
        node_attr={"shape": "box", "style": "filled,rounded", "fontname": "Helvetica", "fontsize": "10",
                   "height": "0.3", "margin": "0.05,0.02"},
        edge_attr={"fontname": "Helvetica", "fontsize": "9"})
    chunks = chunk_of(program)
    V = max(chunks, default=0) + 1
    for r, rank_steps in enumerate(program.ranks):
        with g.subgraph(name=f"cluster_{r}", graph_attr={"label": f"rank {r}", "color": "#BBBBBB",
                                                         "style": "rounded", "rank": "same"}) as c:
            for x, st in enumerate(rank_steps):
                first = st.parts[0]
                chunk = chunks[first.stage] if 0 <= first.stage < len(chunks) else 0
                fill = palette.fill(kind_of(st), chunk, V)
                tooltip = f"{what_of(st)}: rank {r}, step {x}"
                attrs = {"label": dot(format_step(st)), "fillcolor": fill, "fontcolor": palette.text_colour(fill),
                         "tooltip": dot(tooltip)}
                mark = marks.get((r, x))
                if mark:
                    attrs.update({"color": RED, "penwidth": "3", "tooltip": dot(tooltip + "; " + mark)})
                else:
                    attrs["color"] = "#FFFFFF"
                c.node(_node(r, x), **attrs)
    rows = [r for r, steps in enumerate(program.ranks) if steps]
    for above, below in zip(rows, rows[1:]):  # the rows in rank order, top to bottom
        g.edge(_node(above, 0), _node(below, 0), style="invis", weight="0")
    for before, after, why in _edges(program, report):
        # an edge between ranks may point up (a gradient): it must not move the rows, nor one
        # against program order the steps of a row
        across = {} if before[0] == after[0] and before[1] < after[1] else {"constraint": "false"}
        g.edge(_node(*before), _node(*after), **_EDGE.get(why, _EDGE["data"]), **across)
    if report.deadlock is not None:
        for n, w in enumerate(report.deadlock.cycle, 1):
            if w.on_rank is None or w.on_step is None:
                continue
            g.edge(_node(w.rank, w.step), _node(w.on_rank, w.on_step), color=RED, penwidth="2.5",
                   fontcolor=RED, label=f"({n}) waits for", constraint="false")
    for m in report.mismatches[:20]:
        g.edge(_node(m.send_rank, m.send_step), _node(m.recv_rank, m.recv_step), color=RED,
               style="dashed", penwidth="2", fontcolor=RED, label="crossed", constraint="false")
    return g


def _title(program, report) -> str:
    params = ", ".join(f"{k}={v}" for k, v in program.params)
    head = program.name + (f" ({params})" if params else "")
    if report.deadlock is not None:
        return f"{head}: deadlock under {report.semantics.phrase()} (the cycle in red)"
    if report.ok is False:
        return f"{head}: checks fail ({', '.join(sorted({d.code for d in report.errors}))})"
    return f"{head}: dependencies (grey: program order, black: data, blue dashed: send/receive posting)"


def _marks(program, report) -> dict[tuple[int, int], str]:
    marks: dict[tuple[int, int], str] = {}
    if report.deadlock is not None:
        for r, x in report.deadlock.stuck.items():
            marks[(r, x)] = "stuck here"
        for w in report.deadlock.cycle:
            marks[(w.rank, w.step)] = f"blocked: {w.reason}"
    for m in report.mismatches[:20]:
        marks[(m.send_rank, m.send_step)] = "crossed pair (send)"
        marks[(m.recv_rank, m.recv_step)] = "crossed pair (receive)"
    for pk in report.memory_violations:
        marks[(pk.rank, pk.step)] = f"memory {pk.memory:g} over the limit"
    return {k: v for k, v in marks.items() if 0 <= k[0] < len(program.ranks) and 0 <= k[1] < len(program.ranks[k[0]])}


def _edges(program, report):
    """(before, after, why) of every constraint the checks read (the report's analysis); program order
    only when the structure is broken."""
    try:
        cons = report.analysis.constraints
        # an nccl stream's step is drawn as the step of the rank that posts its operation
        edges = [(cons.where(e.before)[:2], cons.where(e.after)[:2], e.why) for e in cons.edges()]
        edges = [(b, a, why) for b, a, why in edges if b != a]
    except (IndexError, KeyError, ValueError):  # indices out of range: the structure check has said so
        edges = [((r, x - 1), (r, x), "order") for r, s in enumerate(program.ranks) for x in range(1, len(s))]
    seen = set()
    for before, after, why in edges:
        if (before, after) in seen or not (0 <= before[1] < len(program.ranks[before[0]])):
            continue
        seen.add((before, after))
        yield before, after, why


def render_dag(program, report, suffix: str):
    """The graph as `suffix` (.svg, .png or .dot); the .dot source with a note when `dot` is missing."""
    import graphviz

    g = dependency_graph(program, report)
    if suffix == ".dot":
        return Rendered(g.source, ".dot")
    try:
        data = g.pipe(format=suffix[1:], quiet=True)
    except graphviz.ExecutableNotFound:
        return Rendered(g.source, ".dot", f"graphviz's `dot` program was not found, so the graph is written as "
                        f"its .dot source; {INSTALL}, then run: dot -T{suffix[1:]} {{written}} -o {{requested}}")
    return Rendered(data.decode("utf-8") if suffix == ".svg" else data, suffix)
