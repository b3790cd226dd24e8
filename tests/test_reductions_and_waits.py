"""What `check` cleared and schedc's runtime or torch's then failed on or trained wrong (found by a
campaign of hand-written and generated schedules run on real gloo ranks, 2026-12-06):

- a reduction twice a step (`duplicate`: torch scales by 1/M at each REDUCE_GRAD, schedc's
  runtime sums the tied weights again) or in a forward-only schedule (`forward-only`);
- in a job with replicas, copies of a weight averaged on different sides of their sum
  (`reduce-order`, rules/reductions.py; trained to wrong gradients in tests/test_runtime_jobs.py);
- an explicit wait twice, or a WAIT_RECV after the action that took its value (`duplicate`,
  `order`: the runtime has nothing left to wait for and stops);
- under eager and bounded:K an explicit WAIT_SEND taken as done at once, where gloo waits for the
  receive: a program those semantics cleared hung on gloo (and `sim` met the cycle as an internal
  error). A WAIT_SEND now waits until its send is matched, so eager => gloo holds again.
"""
from __future__ import annotations

import pytest

import schedc
from schedc.rules.semantics import Semantics
from schedc.verify import small
from schedc.verify.fast import array_check

from conftest import compile_text
from oracles import job_run


def codes(program, semantics: str = "rendezvous") -> list[str]:
    return [e.code for e in schedc.check(program, semantics=semantics).errors]


# ---- a reduction once a step, and only with backwards ----
def test_a_second_reduce_grad_is_a_duplicate_on_every_path(tmp_path):
    path = tmp_path / "twice.csv"
    path.write_text("0F0,1F0,0F1,1F1,1B0,1B1,1REDUCE_GRAD,1REDUCE_GRAD,0B0,0B1,0REDUCE_GRAD\n")
    program = schedc.load(str(path))
    assert small.quick_check(program, Semantics(), None) is None  # (the fast paths leave it to lint)
    assert array_check(program, Semantics(), None) is None
    report = schedc.check(program)
    (e,) = report.errors
    assert e.code == "duplicate" and e.step == 7 and "scales them by 1/M at each" in e.message
    path.write_text("0F0,1F0,0F1,1F1,1B0,1B1,1REDUCE_GRAD,0B0,0B1,0REDUCE_GRAD\n")
    assert schedc.check(schedc.load(str(path))).ok is True


def test_a_large_csv_with_a_second_reduction_goes_past_the_array_path(tmp_path):
    M = small.MAX_ACTIONS // 4
    rows = [row.split(",") for row in schedc.to_torch_csv(schedc.load("1f1b", {"P": 2, "M": M})).splitlines()]
    rows[1].append("1REDUCE_GRAD")
    path = tmp_path / "large.csv"
    path.write_text("\n".join(",".join(row) for row in rows) + "\n")
    program = schedc.load(str(path))
    assert array_check(program, Semantics(), None) is None
    assert codes(program) == ["duplicate"]


def test_the_tied_all_reduce_once_per_end_and_both_ends_on_one_rank():
    twice = compile_text("schedule t { rank 0: 0F0 0B0 0REDUCE_TIED 0REDUCE_TIED\n"
                         " rank 1: 1F0 1B0 1REDUCE_TIED }")
    report = schedc.check(twice)
    assert [e.code for e in report.errors] == ["duplicate"]
    assert "summed once a step" in report.errors[0].message
    both = compile_text("schedule v { stages 2\n place [0, 0]\n rank 0: 0F0 1F0 1B0 0B0 0REDUCE_TIED 1REDUCE_TIED }")
    assert schedc.check(both).ok is True  # one per end: the runtime sums once


@pytest.mark.parametrize("op", ["REDUCE_GRAD", "REDUCE_TIED"])
def test_a_reduction_in_a_forward_only_schedule(op):
    program = compile_text(f"schedule f(P = 2, M = 2) {{\n forward only\n stages P\n place loop\n"
                           f" rank r {{ for m in 0 .. M {{ F(r, m) }} {op}(r) }}\n}}")
    report = schedc.check(program)
    assert [e.code for e in report.errors] == ["forward-only", "forward-only"]
    assert "no gradients to reduce" in report.errors[0].message


def test_a_duplicate_reduction_is_refuted_by_the_proof_beyond_the_samples(tmp_path):
    """Rank 0 reduces twice only from P = 12 on, past the settings `prove` samples (P <= 8): the
    proof's own obligation (prove/collectives.py) finds it, and `check` confirms it there."""
    from schedc.prove import prove
    path = tmp_path / "dup.pp"
    path.write_text("""schedule dup(P = 2, M = 2) {
  require P >= 1, M >= 1
  stages P
  place loop
  rank r {
    for m in 0 .. M { F(r, m) }
    for m in reversed(0 .. M) { B(r, m) }
    REDUCE_GRAD(r)
    if P >= 12 and r == 0 { REDUCE_GRAD(r) }
  }
}""")
    proof = prove(str(path))
    assert proof.verdict == "refuted", proof
    assert proof.counterexample["params"]["P"] >= 12


# ---- waits ----
@pytest.mark.parametrize("semantics", ["rendezvous", "gloo", "nccl"])
def test_a_wait_after_the_action_that_took_its_value(semantics):
    late = compile_text("schedule w { rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\n"
                        " rank 1: 1RECV_F0 1F0 1WAIT_RECV_F0 1B0 1SEND_B0 }")
    report = schedc.check(late, semantics=semantics)
    (e,) = report.errors
    assert e.code == "order" and (e.rank, e.step) == (1, 2)
    assert "whose value F(1,0) takes earlier, at step 1" in e.message
    before = compile_text("schedule w { rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\n"
                          " rank 1: 1RECV_F0 1WAIT_RECV_F0 1F0 1B0 1SEND_B0 }")
    assert schedc.check(before, semantics=semantics).ok is True


def test_a_second_wait_for_one_operation():
    twice = compile_text("schedule w { rank 0: 0F0 0SEND_F0 0WAIT_SEND_F0 0WAIT_SEND_F0 0RECV_B0 0B0\n"
                         " rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 }")
    (e,) = schedc.check(twice).errors
    assert e.code == "duplicate" and e.step == 3 and "is waited for already" in e.message


# both ranks wait for a send whose receive comes after their own wait: gloo hangs, and so do eager
# and bounded:K now (before: cleared, and `schedc run --semantics eager` hung on gloo)
WAIT_SEND = """schedule waits {
  stages 3
  forward only
  place [0, 1, 0]
  rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0WAIT_SEND_F1 2RECV_F0 2F0 2RECV_F1 2F1
  rank 1: 1RECV_F0 1F0 1SEND_F0 1WAIT_SEND_F0 1RECV_F1 1F1 1SEND_F1
}"""


@pytest.mark.parametrize("semantics", ["eager", "bounded:1", "bounded:2", "gloo", "rendezvous"])
def test_an_explicit_wait_for_a_send_waits_until_it_is_matched(semantics):
    program = compile_text(WAIT_SEND)
    report = schedc.check(program, semantics=semantics)
    assert report.deadlock is not None and job_run(program, semantics) is False
    without = compile_text(WAIT_SEND.replace(" 0WAIT_SEND_F1", "").replace(" 1WAIT_SEND_F0", ""))
    assert (schedc.check(without, semantics=semantics).deadlock is None) == job_run(without, semantics)


@pytest.mark.parametrize("semantics", ["eager", "bounded:1"])
def test_sim_and_z3_agree_with_the_deadlock(run_cli, tmp_path, semantics):
    path = tmp_path / "waits.pp"
    path.write_text(WAIT_SEND)
    code, out, err = run_cli("sim", str(path), "--semantics", semantics)
    assert code == 1 and "internal error" not in out + err and "deadlock" in out + err
    assert schedc.check(compile_text(WAIT_SEND), semantics=semantics, engine="z3").deadlock is not None


# ---- reduce-order: told beside a deadlock, as collective-order is ----
def test_reduce_order_is_told_beside_the_jobs_deadlock():
    """Replica 0 averages stage 1 before its tied all-reduce and replica 1 after it; replica 0's
    rank 0 does the tied all-reduce first, so the collectives wait in a cycle across the groups."""
    from dataclasses import replace
    one = compile_text("schedule j { rank 0: 0F0 0B0 0REDUCE_TIED 0REDUCE_GRAD\n"
                       " rank 1: 1F0 1B0 1REDUCE_GRAD 1REDUCE_TIED }")
    two = compile_text("schedule j { rank 0: 0F0 0B0 0REDUCE_GRAD 0REDUCE_TIED\n"
                       " rank 1: 1F0 1B0 1REDUCE_TIED 1REDUCE_GRAD }")
    job = replace(one, replicas=(two.ranks,))
    report = schedc.check(job)
    found = [e.code for e in report.errors]
    assert "reduce-order" in found and "deadlock" in found, report.render()
    assert job_run(job, "rendezvous") is False
