"""The parser: the grammar's forms become the AST, and syntax errors say where and what."""
from __future__ import annotations

import pytest

from schedc import syntax as ast
from schedc.errors import SchedcError
from schedc.parse import parse

FULL = """
# a comment
schedule demo(P = 4, M = 8, V) {
  require P >= 1, M >= P else "need M >= P"
  stages V * P
  ranks P
  microbatches M
  place s -> s < P ? s : 2 * P - 1 - s
  cost F = 1, I = 1.5, W = 0.5
  cost stage 0: F = 2
  cost rank 1: speed = 0.5
  memory act = 2, weight = 1
  memory rank 0: limit = 8
  let half = P // 2
  rank r {
    for m in 0 .. M step 2 { F(r, m); }
    for m in reversed(0 .. M) { if m % 2 == 0 and not r > 2 { B(r, m) } elif m == 1 { I(r, m) } else { W(r, m) } }
    group(SEND_F(r, 0), RECV_B(r, 1))
    overlap(F(0, 1), B(7, 0))
    UNSHARD(r)
  }
  rank 3: 3F0 3SEND_F0 (0F3;3B1)OVERLAP_F_B 3UNSHARD
}
"""


def test_every_form_parses_into_the_ast():
    tree = parse(FULL, "demo.pp")
    assert tree.name == "demo"
    assert [p.name for p in tree.params] == ["P", "M", "V"]
    assert tree.params[2].default is None
    kinds = [type(i).__name__ for i in tree.items]
    assert kinds == ["Require", "Decl", "Decl", "Decl", "Placement", "Annotation", "Annotation",
                     "Annotation", "Annotation", "Annotation", "Let", "RankBody", "RankLiteral"]
    req = tree.items[0]
    assert req.constraints[1].message == "need M >= P" and req.constraints[0].message is None
    place = tree.items[4]
    assert place.kind == "expr" and place.var == "s" and isinstance(place.expr, ast.Ternary)
    body = tree.items[11]
    assert body.var == "r"
    loop = body.body[0]
    assert isinstance(loop, ast.For) and loop.step is not None and not loop.reversed
    rev = body.body[1]
    assert rev.reversed and isinstance(rev.body[0], ast.If) and len(rev.body[0].branches) == 2
    literal = tree.items[12]
    assert literal.index == 3 and [a.text for a in literal.actions] == \
        ["3F0", "3SEND_F0", "(0F3;3B1)OVERLAP_F_B", "3UNSHARD"]


def test_spans_point_at_the_source():
    tree = parse(FULL, "demo.pp")
    literal = tree.items[12]
    span = literal.actions[2].span
    line = FULL.splitlines()[span.line - 1]
    assert line[span.column - 1: span.end_column - 1] == "(0F3;3B1)OVERLAP_F_B"
    assert str(span).startswith("demo.pp:")


def test_an_unclosed_brace_is_pointed_at():
    with pytest.raises(SchedcError) as info:
        parse("schedule x {\n  rank r {\n    F(0, 0)\n\n", "b.pp")
    assert "opened at b.pp:2:10" in info.value.render()


def test_schedule_names_may_start_with_a_digit():
    assert parse("schedule 1f1b-v2 { }").name == "1f1b-v2"


def test_operator_precedence():
    tree = parse("schedule x { let a = 1 + 2 * 3 - 4 // 2 }")
    e = tree.items[0].value
    assert e.op == "-" and e.left.op == "+" and e.left.right.op == "*" and e.right.op == "//"


@pytest.mark.parametrize("src, line, col, words", [
    ("schedule x { rank r { F(0, 0) }", 1, 32, "not closed"),
    ("schedule x { rank r { F(0, 0) $ } }", 1, 31, "unexpected character '$'"),
    ("schedule x {\n  stages 2 3\n}", 2, 12, "unexpected '3'"),
    ("schedule { }", 1, 10, "schedule name"),
    ("schedule x { rank 0: 0F0 0F1 garbage }", 1, 30, "unexpected"),
])
def test_syntax_errors_are_located(src, line, col, words):
    with pytest.raises(SchedcError) as info:
        parse(src, "bad.pp")
    d = info.value.diagnostics[0]
    assert d.code == "syntax"
    assert (d.span.line, d.span.column) == (line, col)
    assert words in d.message
    text = info.value.render()
    assert text.startswith(f"bad.pp:{line}:{col}: error[syntax]:")
    assert "^" in text.splitlines()[2]
