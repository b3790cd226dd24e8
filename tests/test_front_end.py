"""One front end: the compiler and the prover read one loop-level IR (schedc/loops.py).

Generated parametric sources (lets, loops with steps and `reversed`, if/elif/else, overlaps,
`rank N` bodies beside the generic one) are compiled at several settings; the prover's instances
must be the compiler's actions, and the statements' frames (what the symbolic proof reads) must
enumerate exactly those actions, statement by statement and in order.
"""
from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings, strategies as st

from schedc import loops
from schedc.compiler import compile_schedule
from schedc.errors import SchedcError
from schedc.parse import parse
from schedc.prove.model import Unsupported, model
from schedc.prove.sample import instances

from oracles import frames_instances

SMALL = st.integers(0, 3)


@st.composite
def exprs(draw, names: tuple[str, ...]):
    """A small integer expression over the names in scope."""
    atom = st.one_of(SMALL.map(str), st.sampled_from(names))
    a, b = draw(atom), draw(atom)
    return draw(st.sampled_from([a, f"{a} + {b}", f"max({a} - {b}, 0)", f"min({a}, {b})", f"({a} + {b}) % 3"]))


@st.composite
def conds(draw, names):
    return f"{draw(exprs(names))} {draw(st.sampled_from(['<', '<=', '==', '!=', '>=']))} {draw(exprs(names))}"


@st.composite
def blocks(draw, names: tuple[str, ...], depth: int, counter: list):
    """Statements with names unique along every path (the language forbids shadowing)."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["act", "act", "let", "for", "if", "overlap"] if depth < 3 else ["act", "let"]))
        counter[0] += 1
        fresh = f"v{counter[0]}"
        if kind == "act":
            out.append(f"{draw(st.sampled_from('FB'))}({draw(exprs(names))}, {draw(exprs(names))})")
        elif kind == "overlap":
            out.append(f"overlap(F({draw(exprs(names))}, {draw(exprs(names))}), "
                       f"B({draw(exprs(names))}, {draw(exprs(names))}))")
        elif kind == "let":
            out.append(f"let {fresh} = {draw(exprs(names))}")
            names = names + (fresh,)
        elif kind == "for":
            head = f"{draw(exprs(names))} .. {draw(exprs(names))}"
            head = draw(st.sampled_from([head, head, f"{head} step 2", f"reversed({head})"]))
            body = draw(blocks(names + (fresh,), depth + 1, counter))
            out.append(f"for {fresh} in {head} {{ {body} }}")
        else:
            text = f"if {draw(conds(names))} {{ {draw(blocks(names, depth + 1, counter))} }}"
            if draw(st.booleans()):
                text += f" elif {draw(conds(names))} {{ {draw(blocks(names, depth + 1, counter))} }}"
            if draw(st.booleans()):
                text += f" else {{ {draw(blocks(names, depth + 1, counter))} }}"
            out.append(text)
    return "\n".join(out)


@st.composite
def sources(draw) -> str:
    counter = [0]
    generic = draw(blocks(("P", "M", "r"), 0, counter))
    own = ""
    if draw(st.booleans()):
        own = f"rank 0 {{ {draw(blocks(('P', 'M'), 0, counter))} }}\n"
    elif draw(st.booleans()):
        own = "rank 1: 0F0 1B2 (0F1;1B0)OVERLAP_F_B\n"
    return (f"schedule gen(P = 2, M = 2) {{\n  stages 8\n  microbatches 8\n  place s -> s % P\n"
            f"  let top = P + 1\n{own}  rank r {{\n{generic}\n  }}\n}}\n")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=sources(), P=st.integers(1, 4), M=st.integers(1, 4))
def test_the_prover_reads_what_the_compiler_expands(text, P, M):
    tree = parse(text, "gen.pp")
    try:
        program = compile_schedule(tree, {"P": P, "M": M})
    except SchedcError:
        assume(False)
    try:
        m = model(tree)
    except Unsupported:
        assume(False)
    got = instances(m, {"P": P, "M": M})
    compiled = [[(a.op.value, a.stage, a.microbatch) for st_ in rank for a in st_.parts] for rank in program.ranks]
    assert [[(i.stmt.kind, i.stage, i.microbatch) for i in rank] for rank in got] == compiled
    assert [[(i.stmt.index, i.stage, i.microbatch) for i in rank] for rank in got] == frames_instances(m, {"P": P, "M": M})
    for rank in got:  # the parts of one step share its number; steps are numbered in order
        steps = [i.step for i in rank]
        assert steps == sorted(steps)


def test_one_ir_per_tree_numbers_every_call_site_and_loop_once():
    text = ("schedule s(P = 2, M = 2) {\n stages 2\n place loop\n rank 0: 0F0 0F1\n"
            " rank r { for m in 0 .. M { F(r, m) } for m in 0 .. M { if m > 0 { B(r, m) } else { B(r, 0) } } }\n}\n")
    tree = parse(text, "s.pp")
    ir = loops.build(tree)
    assert loops.build(tree) is ir  # built once per tree
    assert ir.num_sites == 5 and [b.rank for b in ir.bodies] == [0, None]
    sites = [n for n in _walk(ir.generic.nodes) if isinstance(n, loops.Site)]
    assert [s.index for s in sites] == [2, 3, 4]
    assert [n.id for n in _walk(ir.generic.nodes) if isinstance(n, loops.Loop)] == [1, 2]


def _walk(nodes):
    for n in nodes:
        yield n
        if isinstance(n, loops.Loop):
            yield from _walk(n.body)
        elif isinstance(n, loops.Branch):
            for _, body in n.arms:
                yield from _walk(body)
            yield from _walk(n.orelse)
