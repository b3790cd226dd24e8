"""Forward-only schedules (inference, evaluation): declared `forward only` (or --forward-only for a
CSV), checked for structure, messages, deadlock and memory like any other schedule.

DeepSpeed's InferenceSchedule checks clean under every semantics; a crossed pair of forward
messages is caught; a backward in a forward-only schedule is an error of its own, and a training
schedule that forgot every backward is told it may mean `forward only`. In memory, a forward keeps
nothing for a backward: F holds its activation while it runs.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import schedc
from schedc.interop.ir_json import dumps_ir, read_ir_json
from schedc.passes import lower
from schedc.prove import prove
from schedc.simulate import simulate

from conftest import compile_text

DATA = Path(__file__).parent / "data" / "forward"
INFERENCE_CSV = "0F0,0SEND_F0,0F1,0SEND_F1\n1RECV_F0,1F0,1RECV_F1,1F1\n"


@pytest.mark.parametrize("P, M", [(2, 1), (3, 5), (4, 8), (5, 3)])
@pytest.mark.parametrize("semantics", ["rendezvous", "eager", "nccl", "gloo"])
def test_deepspeeds_inference_schedule_checks_clean(P, M, semantics):
    program = schedc.load(str(DATA / "ds_inference.pp"), {"P": P, "M": M})
    assert program.forward_only and program.level == "comms"
    report = schedc.check(program, semantics=semantics)
    assert report.ok, report.render()
    assert report.peak_activation == tuple([1.0] * P)  # one forward's activation at a time
    assert report.to_dict()["forward_only"] is True


def test_the_compute_level_form_lowers_to_forward_messages_only_and_simulates():
    program = compile_text("""schedule fwd(P = 3, M = 4) {
      forward only
      stages P
      place loop
      memory out = 2
      rank r { for m in 0 .. M { F(r, m) } }
    }""")
    assert schedc.check(program).ok
    lowered = lower(program)
    assert lowered.forward_only
    kinds = {a.op.value for steps in lowered.ranks for st in steps for a in st.parts}
    assert kinds == {"F", "SEND_F", "RECV_F"}
    assert schedc.check(lowered).ok
    assert simulate(program).makespan == pytest.approx(4 + 3 - 1)  # M + P - 1 forwards of one unit each
    # memory: while F runs, its activation (1) and, past the first stage, the received message (2)
    assert [pk.memory for pk in schedc.check(program).peak_memory] == [1, 3, 3]


def test_a_crossed_pair_of_forward_messages_is_caught():
    program = compile_text("""schedule crossed {
      forward only
      rank 0: 0F0 0F1 0SEND_F0 0SEND_F1
      rank 1: 1RECV_F1 1RECV_F0 1F0 1F1
    }""")
    report = schedc.check(program)
    assert not report.ok and report.mismatches
    m = report.mismatches[0]
    assert (m.send_rank, m.recv_rank) == (0, 1) and "RECV_F(1,1)" in report.render()


def test_a_forward_only_deadlock_is_found():
    # stages 0 and 2 on rank 0, 1 on rank 1: rank 0 waits to receive stage 2's input before sending
    program = compile_text("""schedule stuck {
      forward only
      stages 3
      place [0, 1, 0]
      rank 0: 0F0 2RECV_F0 0SEND_F0 2F0
      rank 1: 1RECV_F0 1F0 1SEND_F0
    }""")
    report = schedc.check(program)
    assert report.deadlock is not None and report.deadlock.stuck == {0: 1, 1: 0}
    assert schedc.check(program, semantics="gloo").ok  # posted: rank 0 goes on to send


def test_a_backward_in_a_forward_only_schedule_is_an_error():
    report = schedc.check(compile_text("""schedule f(P = 2, M = 2) {
      forward only
      stages P
      place loop
      rank r { for m in 0 .. M { F(r, m) } B(r, 0) }
    }"""))
    assert {d.code for d in report.errors} == {"forward-only"}
    assert "B(0,0) in a forward-only schedule" in report.render()


def test_a_schedule_without_any_backward_is_told_about_forward_only(tmp_path, run_cli):
    path = tmp_path / "inference.csv"
    path.write_text(INFERENCE_CSV)
    code, out, err = run_cli("check", str(path))
    assert code == 1 and "declare it with a `forward only` line, or --forward-only for a CSV" in out + err
    code, out, _ = run_cli("check", str(path), "--forward-only", "--json")
    assert code == 0 and json.loads(out)["forward_only"] is True
    assert schedc.from_torch_csv(str(path), forward_only=True).forward_only


def test_forward_only_survives_ir_json_and_is_declared_once():
    program = schedc.load(str(DATA / "ds_inference.pp"), {"P": 2, "M": 2})
    again = read_ir_json(dumps_ir(program), "again.json")
    assert again.forward_only and again.ranks == program.ranks
    with pytest.raises(schedc.SchedcError) as exc:
        compile_text("schedule twice { forward only\n forward only\n rank 0: 0F0 }")
    assert exc.value.code == "duplicate-decl"
    with pytest.raises(schedc.SchedcError) as exc:
        compile_text("schedule greedy { forward only\n order greedy(prefer = [F])\n rank 0: 0F0 }")
    assert exc.value.code == "order"


def test_compile_writes_a_forward_only_runnable_program_and_prove_says_unknown(tmp_path, run_cli):
    code, out, err = run_cli("compile", str(DATA / "ds_inference.pp"), "-o", str(tmp_path / "out"))
    assert code == 0, err
    (source,) = (tmp_path / "out").glob("*_program.py")
    assert "'forward_only': True" in source.read_text()  # the runtime runs it without autograd (tests/test_p2p.py)
    proof = prove(str(DATA / "ds_inference.pp"))
    assert proof.verdict == "unknown" and "forward-only" in proof.reason
