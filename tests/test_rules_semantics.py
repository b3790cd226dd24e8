"""What blocks when (schedc/rules/semantics.py): the text form both ways, each question's answer
per kind, and the kinds outside the known set refused. That every engine's verdict is unchanged by
reading these answers is held by the differential tests (test_differential*.py, test_backends.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from schedc.errors import SchedcError
from schedc.rules.semantics import MODIFIERS, RENDEZVOUS, Semantics, names

BACKENDS = names(posted=True)

NAMES = ("rendezvous", "eager", "bounded:1", "bounded:3", "nccl", "gloo", "nccl+shapes", "nccl+lazy",
         "nccl+shapes+lazy", "gloo+shapes")


@pytest.mark.parametrize("text", NAMES)
def test_parse_and_print_round_trip(text):
    assert str(Semantics.parse(text)) == text
    assert Semantics.parse(str(Semantics.parse(text))) == Semantics.parse(text)


def test_bounded_zero_is_rendezvous_and_the_default():
    assert Semantics.parse("bounded:0") == RENDEZVOUS == Semantics()
    with pytest.raises(SchedcError) as e:  # what the error lists says so, not "K a positive integer"
        Semantics.parse("bounded:-1")
    assert "bounded:K (K >= 0 messages; bounded:0 is rendezvous)" in e.value.diagnostics[0].message


def test_a_buffer_past_the_digit_limit_is_too_large():
    """bounded:99999999999999999999999 was taken (docs/limits.md: 19 digits)."""
    assert Semantics.parse("bounded:" + "9" * 19).buffer == int("9" * 19)
    with pytest.raises(SchedcError) as e:
        Semantics.parse("bounded:" + "9" * 23)
    assert e.value.code == "too-large" and "23 digits is too large (at most 19)" in e.value.diagnostics[0].message


@pytest.mark.parametrize("text, hint", [("rendevous", "rendezvous"), ("eagr", "eager"), ("NCCL", "nccl"),
                                        ("Gloo+Shapes", "gloo+shapes"), ("bounde:4", "bounded:4")])
def test_a_near_miss_gets_a_suggestion(text, hint):
    with pytest.raises(SchedcError) as e:
        Semantics.parse(text)
    assert e.value.diagnostics[0].message.endswith(f"; did you mean '{hint}'?")


@pytest.mark.parametrize("text", ["bounded:²", "bounded:-1", "gloo+lazy", "mpi"])
def test_no_suggestion_without_a_near_miss_that_reads(text):
    with pytest.raises(SchedcError) as e:
        Semantics.parse(text)
    assert e.value.code == "usage" and "did you mean" not in e.value.diagnostics[0].message


@pytest.mark.parametrize("text", ["Rendezvous", "bounded", "bounded:-1", "bounded:x", "mpi", "gloo+lazy",
                                  "eager+shapes", "nccl+shapes+shapes", "nccl+fast", ""])
def test_unknown_text_is_a_usage_error(text):
    with pytest.raises(SchedcError) as e:
        Semantics.parse(text)
    assert e.value.code == "usage"


@pytest.mark.parametrize("kwargs", [dict(kind="mpi"), dict(kind="bounded", buffer=0), dict(kind="eager", buffer=2),
                                    dict(kind="rendezvous", shapes=True), dict(kind="gloo", lazy=True)])
def test_constructing_an_unknown_semantics_raises(kwargs):
    with pytest.raises(ValueError):
        Semantics(**kwargs)


# each question's answer, per kind: (posted, channel_buffer, send_waits_for_receive, sent_held_until,
# one_stream_per_pair, pairs_by_tag)
ANSWERS = {
    "rendezvous": (False, 0, True, None, False, True),
    "eager": (False, None, False, "matched", False, True),
    "bounded:3": (False, 3, False, "matched", False, True),
    "nccl": (True, None, False, "waited for", True, False),
    "gloo": (True, None, False, "waited for", False, True),
    "nccl+shapes": (True, None, False, "waited for", True, False),
}


@pytest.mark.parametrize("text", ANSWERS)
def test_each_question_per_kind(text):
    s = Semantics.parse(text)
    assert (s.posted, s.channel_buffer, s.send_waits_for_receive, s.sent_held_until, s.one_stream_per_pair,
            s.pairs_by_tag) == ANSWERS[text]


def test_an_abstract_semantics_is_timed_as_gloo_and_a_backend_as_itself():
    for text in ("rendezvous", "eager", "bounded:2"):
        assert Semantics.parse(text).timed_as == Semantics("gloo")
    for text in ("nccl", "gloo", "nccl+lazy"):
        assert Semantics.parse(text).timed_as == Semantics.parse(text)


def test_buffered_is_the_blocking_family_by_its_buffer():
    assert Semantics.buffered(0) == RENDEZVOUS
    assert Semantics.buffered(None) == Semantics.parse("eager")
    assert Semantics.buffered(4) == Semantics.parse("bounded:4")
    assert [str(b) for b in Semantics.backends()] == list(BACKENDS)


def test_base_drops_the_modifiers():
    assert Semantics.parse("nccl+shapes+lazy").base == Semantics("nccl")
    assert Semantics.parse("nccl+lazy").modifiers == ("lazy",) and set(MODIFIERS) == {"shapes", "lazy"}


def test_verdicts_nest_towards_the_backends():
    """rendezvous => nccl => gloo, bounded:K => eager => gloo (docs/semantics.md): every verdict holds
    on gloo, and on nccl only rendezvous's and nccl's."""
    nccl, gloo = Semantics("nccl"), Semantics("gloo")
    for text in NAMES:
        s = Semantics.parse(text)
        assert s.holds_on(gloo)
        assert s.holds_on(nccl) is (text in ("rendezvous", "nccl") or text.startswith("nccl+"))


@settings(deadline=None, max_examples=100)
@given(k=st.integers(0, 50))
def test_a_channel_buffers_what_bounded_says(k):
    s = Semantics.parse(f"bounded:{k}")
    assert s.channel_buffer == k and s.send_waits_for_receive is (k == 0) and str(s) == str(Semantics.buffered(k))


def test_the_runtime_vouches_as_the_rule_says():
    from schedc.runtime.backends import vouches
    assert vouches("rendezvous", "nccl") and vouches("nccl+shapes", "nccl") and vouches("eager", "gloo")
    assert not vouches("eager", "nccl") and not vouches("gloo", "nccl") and not vouches("bounded:2", "nccl")
    assert vouches("something else", "gloo") and not vouches("something else", "nccl")


def test_no_engine_names_a_semantics_kind():
    """The rule lives in schedc/rules/semantics.py: no other module compares a semantics' kind or
    reads its raw buffer (issue #31's grep, kept)."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent / "schedc"
    kinds = "|".join(("rendezvous", "eager", "bounded", *BACKENDS))
    pattern = re.compile(rf"""\.kind\s*(==|!=|in|not in)\s*\(?["']({kinds})|semantics\.(kind|buffer)\b|kind in BACKENDS""")
    found = [f"{p.relative_to(root)}:{n}: {line.strip()}" for p in root.rglob("*.py") if p.parent.name != "rules"
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
