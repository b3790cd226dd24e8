"""Every hung rank is named where it hangs (issue 30, item 7): a rank that has run through its list
but waits, at the end of the step, for sends whose receives are never posted is stuck there (under
gloo as under nccl), never at a step it ran past; in `check`'s text and grid, its JSON and `sim`.
The places are held to tests/oracles.py's `posted_hangs` on generated programs."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

import schedc
from schedc.ir import describe
from schedc.strategies import lowered_programs

from conftest import compile_text
from oracles import posted_hangs
from test_backends import posted_early_or_late

# gloo: ranks 1 and 2 wait for each other (rank 1's explicit wait needs rank 2's RECV_F(2,0), posted
# after F(2,1), whose activation rank 1 sends after the wait); rank 0 runs through its list and waits
# at the end of the step for SEND_F(0,1), whose receive rank 1 never posts. A 3-rank gloo run of it
# (`schedc run --nproc 3 --no-verify --timeout 3`) stops rank 0 "at the end of its program (waiting
# for its sends): waits for its SEND_F(0,1) ... to be received by rank 1's RECV_F(1,1)".
ENDS_GLOO = """schedule ends {
  forward only
  p2p tagged
  rank 0: 0F0 0SEND_F0 0F1 0SEND_F1
  rank 1: 1RECV_F0 1F0 1SEND_F0 1WAIT_SEND_F0 1RECV_F1 1F1 1SEND_F1
  rank 2: 2RECV_F1 2F1 2RECV_F0 2F0
}"""
# nccl: ranks 1 and 2 cross on their stream (each receive issued before the send its partner waits
# behind); rank 0 runs through its list, its stream to rank 1 stuck at SEND_F(0,1) (its step 3)
ENDS_NCCL = """schedule ran_past {
  forward only
  rank 0: 0F0 0SEND_F0 0F1 0SEND_F1
  rank 1: 1RECV_F0 1F0 3RECV_F0 1SEND_F0 3F0 1RECV_F1 1F1 1SEND_F1 3RECV_F1 3F1
  rank 2: 2RECV_F0 2F0 2SEND_F0 2RECV_F1 2F1 2SEND_F1
}"""
WAITING = "rank 0 stops at the end of the step, waiting for SEND_F(0,1) to complete: for rank 1 to post RECV_F(1,1)"


@pytest.mark.parametrize("text, semantics, others", [(ENDS_GLOO, "gloo", {1: 3, 2: 1}),
                                                     (ENDS_NCCL, "nccl", {1: 4, 2: 1})], ids=["gloo", "nccl"])
def test_a_rank_waiting_for_its_sends_is_stuck_at_the_end_of_the_step(text, semantics, others):
    program = compile_text(text)
    report = schedc.check(program, semantics=semantics)
    assert report.deadlock.stuck == {0: 4, **others}  # rank 0's list has 4 steps: it waits after them
    assert [describe(w.action) for w in report.deadlock.ends[0]] == ["SEND_F(0,1)"]
    (finding,) = report.errors
    assert WAITING in finding.notes
    rank0 = next(line for line in report.render().splitlines() if line.startswith("rank 0 "))
    assert rank0.split() == ["rank", "0", "0F0", "0SEND_F0", "0F1", "0SEND_F1", "[end]"]  # not [0SEND_F1]
    stuck = report.to_dict()["deadlock"]["stuck"]
    assert stuck[0] == {"rank": 0, "step": 4, "end_of_step": True, "sends": ["0SEND_F1"]}
    assert stuck[1] == {"rank": 1, "step": others[1], "end_of_step": False, "sends": []}
    z3 = schedc.check(program, semantics=semantics, engine="z3")
    assert z3.deadlock.stuck == report.deadlock.stuck


@pytest.mark.parametrize("text, semantics", [(ENDS_GLOO, "gloo"), (ENDS_NCCL, "nccl")], ids=["gloo", "nccl"])
def test_sim_names_the_rank_at_the_end_of_the_step(tmp_path, run_cli, text, semantics):
    path = tmp_path / "ends.pp"
    path.write_text(text)
    code, out, err = run_cli("sim", str(path), "--semantics", semantics)
    assert code == 1 and WAITING in out + err
    assert "rank 0 stops at step 3" not in out + err  # a step it ran past


def test_the_check_json_names_every_hung_rank(tmp_path, run_cli):
    path = tmp_path / "ends.pp"
    path.write_text(ENDS_GLOO)
    code, out, _ = run_cli("check", str(path), "--semantics", "gloo", "--json")
    assert code == 1
    assert [(s["rank"], s["end_of_step"]) for s in json.loads(out)["deadlock"]["stuck"]] == [
        (0, True), (1, False), (2, False)]


def test_the_gloo_verdict_says_what_the_model_says():
    report = schedc.check(compile_text(ENDS_GLOO), semantics="gloo")
    message = report.errors[0].message
    assert "buffered" not in message and "each completes once its partner is posted" in message


def test_abstract_semantics_stop_ranks_at_their_sends():
    """Under rendezvous a send blocks where it stands: rank 0 stops at its SEND_F(0,1), in its list."""
    report = schedc.check(compile_text(ENDS_GLOO))
    assert report.deadlock.stuck[0] == 3 and not report.deadlock.ends


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lowered_programs(min_ranks=2, max_ranks=4, max_microbatches=4).flatmap(posted_early_or_late),
       st.sampled_from(["nccl", "gloo"]))
def test_every_hung_rank_is_named_where_the_oracle_hangs_it(variant, semantics):
    program, label = variant
    report = schedc.check(program, semantics=semantics)
    if any(d.code != "deadlock" for d in report.errors) or report.mismatches:
        event("structure or payloads wrong")
        return
    hangs = posted_hangs(program, semantics)
    event(f"{semantics}: {'deadlock' if hangs else 'ok'}, {sum(x == len(program.ranks[r]) for r, x in hangs.items())} "
          "at the end")
    assert (report.deadlock.stuck if report.deadlock else {}) == hangs, label
