"""The backends `nccl` and `gloo`: sends and receives posted and awaited as torch's runtime does.

The two programs of the communication-model issue get the verdicts the runtimes give them (gloo
completes both; nccl hangs on both, and the report names the order on the streams), a verdict
under an abstract semantics says what the backends make of the program, and on generated
programs both engines agree with an independent oracle (tests/oracles.py `posted_run`) and the
semantics nest as they must: rendezvous => nccl => gloo, eager => gloo.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

import schedc
from schedc.ir import Op, format_step
from schedc.strategies import lowered_programs

from conftest import compile_text
from oracles import posted_run

PREFETCH = """schedule prefetch {
  rank 0: 0RECV_B0 0F0 0SEND_F0 0B0
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
}"""

TORCH_CSV = (
    "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0F2,0SEND_F2,0RECV_B1,0RECV_B2,0B1,0F3,0SEND_F3,0B2,"
    "0RECV_B3,0B3,0REDUCE_GRAD,0RESHARD\n"
    "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1RECV_F2,1B1,1SEND_B1,1F2,1RECV_F3,1B2,1SEND_B2,1F3,1B3,"
    "1SEND_B3,1REDUCE_GRAD,1RESHARD\n")


@pytest.fixture()
def torch_csv(tmp_path):
    path = tmp_path / "torch.csv"
    path.write_text(TORCH_CSV)
    return schedc.load(str(path))


def test_an_early_posted_receive_completes_on_gloo_and_hangs_nccl():
    program = compile_text(PREFETCH)
    for semantics in ("rendezvous", "eager", "bounded:4"):
        assert schedc.check(program, semantics=semantics).deadlock is not None, semantics
    assert schedc.check(program, semantics="gloo").ok
    report = schedc.check(program, semantics="nccl")
    assert report.deadlock is not None
    (error,) = report.errors
    # the counterexample names the order on each stream
    assert "under nccl" in error.message
    assert "rank 1 issues RECV_F(1,0) before SEND_B(1,0) on its stream to rank 0" in error.message
    assert "rank 0 issues RECV_B(0,0) before SEND_F(0,0) on its stream to rank 1" in error.message
    assert report.deadlock.stuck == {0: 3, 1: 1}  # where each rank waits: B(0,0) and F(1,0)
    assert report.to_dict()["semantics"] == "nccl"


def test_the_torch_csv_completes_on_gloo_and_a_blocking_verdict_says_so(torch_csv):
    assert schedc.check(torch_csv, semantics="gloo").ok
    nccl = schedc.check(torch_csv, semantics="nccl")
    assert nccl.deadlock is not None
    assert "rank 0 issues RECV_B(0,2) before SEND_F(0,3)" in nccl.errors[0].message
    default = schedc.check(torch_csv)
    assert default.deadlock is not None and str(default.semantics) == "rendezvous"
    (note,) = default.errors[0].notes
    assert "under rendezvous semantics" in note and "under gloo it completes" in note
    assert "under nccl it deadlocks too" in note


def test_the_command_line_takes_the_backends_and_reports_them(tmp_path, run_cli):
    path = tmp_path / "prefetch.pp"
    path.write_text(PREFETCH)
    code, out, _ = run_cli("check", str(path), "--semantics", "gloo", "--json")
    assert code == 0 and json.loads(out)["semantics"] == "gloo"
    code, out, err = run_cli("check", str(path), "--semantics", "nccl")
    assert code == 1 and "deadlock under nccl" in out + err
    code, _, err = run_cli("check", str(path), "--semantics", "mpi")
    assert code == 2 and "nccl or gloo" in err


@pytest.mark.parametrize("semantics", ["nccl", "gloo"])
def test_both_engines_tell_one_verdict_under_a_backend(semantics, torch_csv):
    for program in (compile_text(PREFETCH), torch_csv, schedc.passes.lower(schedc.load("zbv"))):
        native = schedc.check(program, semantics=semantics)
        z3 = schedc.check(program, semantics=semantics, engine="z3")
        assert (native.deadlock is None) == (z3.deadlock is None)
        assert z3.ok is native.ok


@st.composite
def posted_early_or_late(draw, program):
    """A lowered program with some receives moved earlier (posted ahead, as a prefetch) and some
    sends moved later, each staying on the legal side of the step that needs or makes its value:
    programs whose verdict depends on the semantics."""
    ranks = [list(steps) for steps in program.ranks]
    said = []
    for _ in range(draw(st.integers(1, 6))):
        r = draw(st.integers(0, len(ranks) - 1))
        comm = [i for i, step in enumerate(ranks[r]) if step.parts[0].op.is_comm]
        if not comm:
            continue
        i = draw(st.sampled_from(comm))
        step = ranks[r].pop(i)
        if step.parts[0].op in (Op.RECV_F, Op.RECV_B):
            j = draw(st.integers(0, i))  # earlier: still before the action that needs it
        else:
            j = draw(st.integers(i, len(ranks[r])))  # later: still after the action that made it
        ranks[r].insert(j, step)
        said.append(f"{format_step(step)} on rank {r}: step {i} -> {j}")
    return program.with_ranks(ranks), "; ".join(said)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lowered_programs(min_ranks=2, max_ranks=4, max_microbatches=4).flatmap(posted_early_or_late),
       st.sampled_from(["native", "native", "z3"]))
def test_backend_verdicts_agree_with_the_oracle_and_nest(variant, engine):
    program, label = variant
    verdict = {}
    for semantics in ("rendezvous", "eager", "nccl", "gloo"):
        report = schedc.check(program, semantics=semantics, engine=engine if semantics in ("nccl", "gloo") else "native")
        if any(d.code != "deadlock" for d in report.errors) or report.mismatches:
            event("structure or payloads wrong")
            return  # broken structure or crossed payloads: not a question of the semantics
        verdict[semantics] = report.deadlock is None
    event(f"rendezvous={verdict['rendezvous']} nccl={verdict['nccl']} gloo={verdict['gloo']}")
    assert verdict["nccl"] == posted_run(program, "nccl"), label
    assert verdict["gloo"] == posted_run(program, "gloo"), label
    assert verdict["nccl"] or not verdict["rendezvous"], label  # rendezvous => nccl
    assert verdict["gloo"] or not verdict["nccl"], label  # nccl => gloo
    assert verdict["gloo"] or not verdict["eager"], label  # eager => gloo


def test_an_explicit_wait_makes_the_rank_wait_where_it_stands():
    early = compile_text("""schedule early {
      rank 0: 0RECV_B0 0WAIT_RECV_B0 0F0 0SEND_F0 0B0
      rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
    }""")
    report = schedc.check(early, semantics="gloo")  # without the wait it completes (above)
    assert report.deadlock is not None
    waits = {(w.rank, w.reason) for w in report.deadlock.cycle}
    assert (0, "send-not-posted") in waits
    nccl = schedc.check(early, semantics="nccl")
    assert nccl.deadlock.stuck[0] == 1  # at the wait, not at B(0,0) as without it
    late = compile_text("""schedule late {
      rank 0: 0RECV_B0 0F0 0SEND_F0 0WAIT_SEND_F0 0WAIT_RECV_B0 0B0
      rank 1: 1RECV_F0 1WAIT_RECV_F0 1F0 1B0 1SEND_B0 1WAIT_SEND_B0
    }""")
    assert schedc.check(late, semantics="gloo").ok
    for semantics in ("rendezvous", "eager"):  # blocking at their place: a wait finds them done
        assert schedc.check(late, semantics=semantics).deadlock is not None
        assert schedc.check(compile_text(PREFETCH), semantics=semantics).deadlock is not None


def test_a_wait_needs_its_operation_posted_before_it_on_its_rank():
    report = schedc.check(compile_text("""schedule w {
      rank 0: 0F0 0WAIT_SEND_F0 0SEND_F0 0RECV_B0 0B0
      rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1WAIT_RECV_B0
    }"""))
    found = {(d.code, d.rank) for d in report.errors}
    assert found == {("order", 0), ("missing", 1)}
    assert "WAIT_SEND_F(0,0) waits for SEND_F(0,0), which comes later, at step 2" in report.render()
    assert "WAIT_RECV_B(1,0) waits for RECV_B(1,0), which rank 1 never posts" in report.render()


def test_waits_are_schedc_only_and_export_says_so():
    late = compile_text("schedule w { rank 0: 0F0 0SEND_F0 0WAIT_SEND_F0 0RECV_B0 0B0\n"
                        " rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 }")
    assert schedc.check(late).ok
    with pytest.raises(schedc.SchedcError) as exc:
        schedc.to_torch_csv(late)
    assert "WAIT_SEND_F" in exc.value.diagnostics[0].message


def test_under_gloo_a_send_awaited_where_it_stands_waits_for_its_receive():
    from schedc.verify.channels import channels
    from schedc.rules.semantics import Semantics
    from schedc.verify.graph import constraints
    program = compile_text("""schedule w {
      rank 0: 0F0 0SEND_F0 0WAIT_SEND_F0 0RECV_B0 0B0
      rank 1: 1F0x
    }""".replace("1F0x", "1RECV_F0 1F0 1B0 1SEND_B0"))
    assert schedc.check(program, semantics="gloo").ok  # its receive is posted at once
    cons = constraints(program, Semantics("gloo"), channels(program, Semantics("gloo")))
    assert (1, 0, "recv-posted", 0) in cons.prereq[0][2]  # the wait needs rank 1's RECV_F(1,0) posted
    unposted = program.with_ranks([program.ranks[0], program.ranks[1][1:]])  # no RECV_F(1,0) at all
    cons = constraints(unposted, Semantics("gloo"), channels(unposted, Semantics("gloo")))
    assert cons.never[(0, 2)][0] == "waits for a receive that is never posted"


def test_a_picture_under_a_backend_is_timed_as_posted():
    from schedc.viz import build_scene
    program = compile_text(PREFETCH)
    scene = build_scene(program, schedc.check(program, semantics="gloo"), arrows=True)
    assert scene.mode == "time" and scene.makespan is not None
    assert scene.arrows  # the messages, drawn from departure to arrival
    assert build_scene(program, schedc.check(program, semantics="nccl")).mode == "step"  # deadlock: program order
