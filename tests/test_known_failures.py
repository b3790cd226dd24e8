"""Known ways real pipeline schedules hang or cross tensors, kept as regression tests."""
from __future__ import annotations

from pathlib import Path

import pytest

import schedc
from schedc.rules.deps import delivers, needs
from schedc.ir import Action
from schedc.passes import lower

KNOWN = Path(__file__).parent / "known"
ARTIFACTS = Path(__file__).parent / "data" / "pytorch-artifacts"


def receives_before_consumers(program):
    """The tempting lowering: each receive right before the step that uses what it brings."""
    ranks = []
    for steps in program.ranks:
        pending, out = {}, []
        for st in steps:
            if isinstance(st, Action) and st.op.name.startswith("RECV"):
                pending[delivers(st)] = st
                continue
            for a in st.parts:
                for v in needs(a, program.num_stages):
                    if v in pending:
                        out.append(pending.pop(v))
            out.append(st)
        assert not pending
        ranks.append(out)
    return program.with_ranks(ranks)


def test_both_ranks_send_before_receiving_hangs_only_without_buffering(run_cli):
    code, out, _ = run_cli("check", str(KNOWN / "pytorch_172668.pp"))
    assert code == 1 and "rank 0 and rank 1 both send before they receive" in out
    assert "safe only if at least 1 message is buffered" in out
    assert run_cli("check", str(KNOWN / "pytorch_172668.pp"), "--semantics", "eager")[0] == 0
    assert run_cli("check", str(KNOWN / "pytorch_172668.pp"), "--semantics", "bounded:1")[0] == 0


def test_tagless_messages_in_different_orders_cross_tensors():
    report = schedc.check(schedc.load(str(KNOWN / "tagless_order.pp")), semantics="eager")
    assert not report.ok and report.deadlock is None
    crossed = {(m.to_dict()["send"], m.to_dict()["recv"]) for m in report.mismatches}
    assert crossed == {("0SEND_F1", "1RECV_F0"), ("0SEND_F0", "1RECV_F1")}


@pytest.mark.parametrize("name, params", [("interleaved_1f1b", {"P": 4, "V": 2, "M": 8}),
                                          ("1f1b", {"P": 4, "M": 8})])
def test_late_receives_deadlock_under_rendezvous(name, params):
    good = lower(schedc.load(name, params))
    assert schedc.check(good).ok
    late = receives_before_consumers(good)
    report = schedc.check(late)
    assert not report.ok and report.deadlock is not None
    # every action on the reported cycle is a send the executor really leaves blocked
    assert all(w.reason == "recv-not-posted" for w in report.deadlock.cycle)
    assert report.deadlock.min_buffer == 1
    assert schedc.check(late, semantics="eager").ok


def test_late_receives_on_a_v_shape_cross_payloads_under_eager():
    dualpipe = schedc.from_torch_csv(str(ARTIFACTS / "dualpipev_4rank_10mb.csv"))
    late = receives_before_consumers(lower(dualpipe))
    report = schedc.check(late, semantics="eager")
    assert not report.ok and report.mismatches
    m = report.mismatches[0].to_dict()
    assert m["send"] != m["recv"] and {m["send_rank"], m["recv_rank"]} <= {0, 1, 2, 3}


@pytest.mark.parametrize("name, extra", [("1f1b", {}), ("gpipe", {}), ("interleaved_1f1b", {"V": 2}),
                                         ("looped_bfs", {"V": 2}), ("zb_h1", {}), ("zb_h2", {}),
                                         ("interleaved_zero_bubble", {"V": 2}), ("zbv", {}), ("dualpipev", {})])
def test_builtins_hold_with_fewer_microbatches_than_stages(name, extra, run_cli):
    # pytorch/torchtitan#775: a schedule fine at M = 8 can hang at M = P - 1; ours must not
    argv = ["check", name, "--sweep", "P=2..6", "--sweep", "M=1..13", *sum((["--param", f"{k}={v}"]
                                                                            for k, v in extra.items()), [])]
    code, out, _ = run_cli(*argv)
    assert code == 0, out
    assert "X" not in out.split("instances hold")[0]


def test_lowered_builtins_hold_under_rendezvous_for_small_m():
    for P in (2, 3, 4):
        for M in (1, P - 1, P):
            for name, extra in (("1f1b", {}), ("interleaved_1f1b", {"V": 2}), ("looped_bfs", {"V": 2}),
                                ("zb_h1", {}), ("zb_h2", {}), ("interleaved_zero_bubble", {"V": 2}), ("zbv", {}),
                                ("dualpipev", {})):
                if M < 1:
                    continue
                try:
                    program = schedc.load(name, {"P": P, "M": M, **extra})
                except schedc.SchedcError:
                    continue  # excluded by its require
                assert schedc.check(lower(program)).ok, (name, P, M)
