"""The executor, deadlock reports (cycle, cause, buffer), mismatches and peak activations."""
from __future__ import annotations

import pytest

import schedc
from conftest import compile_text
from schedc.rules.semantics import Semantics
from schedc.verify.execute import execute
from schedc.verify.memory import peak_activation

CROSS = """schedule cross {
  rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
}"""

EXCHANGE = """schedule exchange {
  # rank 1 takes the next activation before it sends the gradient back
  rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
  rank 1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1
}"""


def test_semantics_parse():
    assert str(Semantics.parse("bounded:3")) == "bounded:3"
    assert Semantics.parse("bounded:0") == Semantics.parse("rendezvous")
    with pytest.raises(schedc.SchedcError):
        Semantics.parse("lazy")


def test_deadlock_under_rendezvous_but_not_eager():
    p = compile_text(CROSS)
    assert not execute(p, Semantics.parse("rendezvous")).finished
    assert execute(p, Semantics.parse("eager")).finished
    report = schedc.check(p)
    assert not report.ok
    dl = report.deadlock
    assert sorted(w.rank for w in dl.cycle) == [0, 1]
    assert {str(w.action) for w in dl.cycle} == {"0SEND_F1", "1SEND_B0"}
    assert dl.min_buffer == 1
    assert "rank 0 and rank 1 both send before they receive" in dl.cause
    assert "at least 1 message is buffered" in dl.cause
    d = report.to_dict()["deadlock"]
    assert d["semantics"] == "rendezvous" and len(d["cycle"]) == 2
    entry = d["cycle"][0]
    assert set(entry) >= {"rank", "step", "action", "line", "waits_for"} and entry["line"] == 2
    assert schedc.check(p, semantics="eager").ok


def test_grid_marks_the_blocked_steps():
    text = schedc.check(compile_text(CROSS)).render()
    assert "[0SEND_F1]" in text and "[1SEND_B0]" in text
    assert "rank 0" in text and "rank 1" in text


def test_a_correct_exchange_finishes_under_every_semantics():
    p = compile_text(EXCHANGE)
    for sem in ("rendezvous", "eager", "bounded:1"):
        assert execute(p, Semantics.parse(sem)).finished, sem
        assert schedc.check(p, semantics=sem).ok


def test_compute_level_cycle_is_reported_with_lines():
    # each rank runs its backward before the other's gradient exists: B(0,0) needs I/B(1,0)
    p = compile_text("""schedule c {
      rank 0: 0F0 0F1 0B1 0B0
      rank 1: 1F0 1B0 1F1 1B1
    }""")
    assert schedc.check(p).ok  # fine: nothing circular
    q = compile_text("""schedule c {
      rank 0: 0F0 0B0 0F1 0B1
      rank 1: 1F1 1B1 1F0 1B0
    }""")
    report = schedc.check(q)
    assert not report.ok and report.deadlock is not None
    assert {w.rank for w in report.deadlock.cycle} == {0, 1}
    assert all(w.action.span.line in (2, 3) for w in report.deadlock.cycle)


def test_payload_mismatch_is_its_own_error():
    p = compile_text("""schedule m {
      rank 0: 0F0 0F1 0SEND_F1 0SEND_F0 0RECV_B0 0B0 0RECV_B1 0B1
      rank 1: 1RECV_F0 1RECV_F1 1F0 1F1 1B0 1SEND_B0 1B1 1SEND_B1
    }""")
    report = schedc.check(p, semantics="eager")
    assert not report.ok
    assert {e.code for e in report.errors} == {"mismatch"}
    m = report.to_dict()["mismatches"][0]
    assert (m["send"], m["recv"], m["send_rank"], m["recv_rank"]) == ("0SEND_F1", "1RECV_F0", 0, 1)
    assert m["send_line"] == 2 and m["recv_line"] == 3


def test_unmatched_send():
    p = compile_text("""schedule u {
      rank 0: 0F0 0SEND_F0 0SEND_F0 0RECV_B0 0B0
      rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
    }""")
    codes = {e.code for e in schedc.check(p).errors}
    assert "duplicate" in codes


@pytest.mark.parametrize("P, M", [(2, 1), (4, 2), (4, 8), (8, 3)])
def test_1f1b_peak_activation_is_min_p_minus_r_m(P, M):
    p = schedc.load("1f1b", {"P": P, "M": M})
    assert peak_activation(p) == tuple(float(min(P - r, M)) for r in range(P))


def test_i_frees_activation_minus_weight():
    p = compile_text("""schedule z { memory act = 3, weight = 1
      rank 0: 0F0 0F1 0I0 0I1 0W0 0W1
    }""")
    assert peak_activation(p) == (6.0,)
    q = compile_text("schedule z { memory act = 3, weight = 1\n rank 0: 0F0 0I0 0F1 0W0 0I1 0W1\n}")
    assert peak_activation(q) == (4.0,)


def test_a_group_posts_its_members_together():
    # the exchange that deadlocks when each rank sends first is fine when send and receive are one group
    grouped = compile_text("""schedule g {
      rank 0: 0F0 0F1 0SEND_F0 (0SEND_F1;0RECV_B0)GROUP 0B0 0RECV_B1 0B1
      rank 1: 1RECV_F0 1F0 1B0 (1SEND_B0;1RECV_F1)GROUP 1F1 1B1 1SEND_B1
    }""")
    assert schedc.check(grouped).ok
    assert not schedc.check(compile_text(CROSS)).ok


def test_bounded_buffer_semantics():
    p = compile_text(CROSS)
    assert not execute(p, Semantics.parse("rendezvous")).finished
    assert execute(p, Semantics.parse("bounded:1")).finished
