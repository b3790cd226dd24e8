"""The Z3 engine against the native one, memory with buffers and limits, sweeps, unknown."""
from __future__ import annotations

import json

import pytest

import schedc
from conftest import compile_text
from schedc.passes import lower
from schedc.verify import solver
from test_known_failures import receives_before_consumers

CROSS = """schedule cross {
  rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
}"""


def _cases():
    yield compile_text(CROSS)
    for name, params in [("1f1b", {"P": 3, "M": 4}), ("interleaved_1f1b", {"P": 2, "V": 2, "M": 4}),
                         ("gpipe", {"P": 3, "M": 2})]:
        good = lower(schedc.load(name, params))
        yield good
        yield receives_before_consumers(good)
        yield schedc.load(name, params)


@pytest.mark.parametrize("semantics", ["rendezvous", "eager", "bounded:1"])
def test_z3_agrees_with_the_executor(semantics):
    for program in _cases():
        native = schedc.check(program, semantics=semantics)
        z3 = schedc.check(program, semantics=semantics, engine="z3")
        assert native.ok == z3.ok, program.name
        assert (native.deadlock is None) == (z3.deadlock is None)


def test_z3_witness_meets_every_constraint():
    program = lower(schedc.load("1f1b", {"P": 3, "M": 4}))
    report = schedc.check(program, engine="z3")
    assert report.ok and report.witness is not None
    from schedc.verify.execute import RENDEZVOUS, channels
    from schedc.verify.graph import constraints
    cons = constraints(program, RENDEZVOUS, channels(program))
    assert not cons.never
    edges = list(cons.edges())
    t = report.witness
    assert all(t[e.after[0]][e.after[1]] > t[e.before[0]][e.before[1]] for e in edges)


def test_z3_counterexample_names_the_blocked_sends():
    report = schedc.check(compile_text(CROSS), engine="z3")
    assert not report.ok
    cycle = report.to_dict()["deadlock"]["cycle"]
    assert {c["action"] for c in cycle} == {"0SEND_F1", "1SEND_B0"}
    assert {c["line"] for c in cycle} == {2, 3}


def test_solver_that_gives_up_is_unknown_not_fine(monkeypatch, run_cli, tmp_path):
    monkeypatch.setattr(solver, "MAX_STEPS", 3)
    report = schedc.check(schedc.load("1f1b", {"P": 2, "M": 2}), engine="z3")
    assert report.ok is None and "solver limit" in report.unknown
    code, out, _ = run_cli("check", "1f1b", "--engine", "z3", "--json")
    assert code == 3
    row = json.loads(out)
    assert row["ok"] is None and row["unknown"]


def test_receive_buffers_count_from_posting():
    p = compile_text("""schedule m { memory out = 1
      rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
      rank 1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1
    }""")
    report = schedc.check(p)
    assert report.ok
    assert report.to_dict()["peak_activation"] == [2, 1]
    # rank 0 holds both activations and the received gradient at RECV_B(0,0); rank 1 at most one
    # activation and one received activation (the buffer is freed by the F that consumes it)
    assert report.to_dict()["peak_memory"] == [3, 2]


def test_eager_send_buffers_stay_until_the_receive_is_posted():
    p = compile_text("""schedule m { memory out = 1
      rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
      rank 1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1
    }""")
    rendezvous = schedc.check(p).to_dict()["peak_memory"]
    eager = schedc.check(p, semantics="eager")
    assert eager.to_dict()["peak_memory"][0] == rendezvous[0] + 1
    peak = eager.peak_memory[0]
    assert any("unmatched SEND_F(0,1)" in item for item in peak.live)


def test_memory_limit_violation_has_a_witness(run_cli):
    code, out, _ = run_cli("check", "1f1b", "--param", "P=4", "--param", "M=8", "--memory-limit", "0=3", "--json")
    assert code == 1
    row = json.loads(out)
    assert row["memory_limit"] == [3, None, None, None]
    (v,) = row["memory_violations"]
    assert (v["rank"], v["memory"], v["limit"], v["action"]) == (0, 4, 3, "0F3")
    assert len(v["live"]) == 4 and v["line"] == 12
    assert run_cli("check", "1f1b", "--memory-limit", "4")[0] == 0
    assert run_cli("check", "1f1b", "--memory-limit", "x=1")[0] == 2


def test_memory_limit_annotation():
    p = compile_text("schedule m(P = 2, M = 4) { stages P\n memory limit = 3\n"
                     " rank r { for m in 0 .. M { F(r, m) }\n for m in 0 .. M { B(r, m) } } }")
    report = schedc.check(p)
    assert [e.code for e in report.errors] == ["memory", "memory"]


def test_sweep_json_lines_and_table(run_cli):
    code, out, _ = run_cli("check", "interleaved_1f1b", "--param", "V=2", "--sweep", "P=2..3", "--sweep", "M=4..6",
                           "--json")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 6
    excluded = [r for r in rows if "excluded" in r]
    assert [r["params"] for r in excluded] == [{"V": 2, "P": 2, "M": 5}]
    assert all(r["ok"] for r in rows if "excluded" not in r)
    code, out, _ = run_cli("check", "interleaved_1f1b", "--param", "V=2", "--sweep", "P=2..3", "--sweep", "M=4..6")
    assert out.splitlines()[1].split()[1:] == [".", "-", "."]


def test_sweep_reports_the_first_failure(run_cli, tmp_path):
    src = tmp_path / "mbug.pp"
    src.write_text("schedule mbug(P = 2, M = 2) { stages P\n rank r { for m in 0 .. M { F(r, m) }\n"
                   " for m in 0 .. min(M, 3) { B(r, m) } } }\n")
    code, out, _ = run_cli("check", str(src), "--sweep", "M=1..5")
    assert code == 1
    assert "M=4  X" in out and "first failure, at {'P': 2, 'M': 4}" in out and "error[missing]" in out
