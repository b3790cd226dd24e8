"""The IR: compact text both ways, value checks, and Program helpers."""
from __future__ import annotations

import pytest

from schedc.ir import ActionSyntaxError, Action, Compound, CompoundKind, Op, format_step, parse_step


@pytest.mark.parametrize("text", ["2F0", "1SEND_F3", "0RECV_B12", "0UNSHARD", "3RESHARD", "12REDUCE_GRAD",
                                  "(0F3;3B1)OVERLAP_F_B", "(1SEND_F3;1RECV_B2)GROUP", "7W9", "4I0"])
def test_compact_text_round_trips(text):
    assert format_step(parse_step(text)) == text


def test_parsed_fields():
    assert parse_step("1SEND_F3") == Action(Op.SEND_F, 1, 3)
    assert parse_step("0UNSHARD") == Action(Op.UNSHARD, 0, None)
    c = parse_step("(0F3;3B1)OVERLAP_F_B")
    assert c == Compound(CompoundKind.OVERLAP_F_B, (Action(Op.F, 0, 3), Action(Op.B, 3, 1)))


@pytest.mark.parametrize("text, words", [
    ("2X0", "invalid action"), ("2F", "needs a microbatch"), ("0UNSHARD1", "takes no microbatch"),
    ("()GROUP", "empty compound"), ("(0F1)MERGE", "unknown compound"), ("F0", "invalid action"),
    ("2BW0", "--notation legacy"), ("(0F1;(1F1)GROUP)GROUP", "do not nest"),
])
def test_bad_compact_text(text, words):
    with pytest.raises(ActionSyntaxError, match=None) as info:
        parse_step(text)
    assert words in str(info.value)


def test_legacy_notation():
    assert parse_step("2B0", notation="legacy") == Action(Op.I, 2, 0)
    assert parse_step("2BW0", notation="legacy") == Action(Op.B, 2, 0)
    assert parse_step("2W0", notation="legacy") == Action(Op.W, 2, 0)


def test_spans_do_not_affect_equality():
    from schedc.span import Source, Span
    span = Span.point(Source("a.pp", "x"), 1, 1)
    assert Action(Op.F, 0, 0, span) == Action(Op.F, 0, 0)
    assert hash(Action(Op.F, 0, 0, span)) == hash(Action(Op.F, 0, 0))


def test_microbatch_presence_is_checked():
    with pytest.raises(ValueError):
        Action(Op.F, 0, None)
    with pytest.raises(ValueError):
        Action(Op.UNSHARD, 0, 1)
