"""The Z3 engine against the native one, memory with buffers and limits, sweeps, unknown."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import schedc
import schedc.api
from conftest import compile_text
from schedc.passes import lower
from schedc.strategies import lowered_programs, programs
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
    from schedc.verify.execute import channels
    from schedc.rules.semantics import RENDEZVOUS
    from schedc.verify.graph import constraints
    cons = constraints(program, RENDEZVOUS, channels(program, RENDEZVOUS))
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
    # rank 1 may start late: as rank 0 posts RECV_B(0,0), neither of its forwards' messages need be
    # received yet (docs/semantics.md, "Memory": ranks start at any time)
    assert eager.to_dict()["peak_memory"][0] == rendezvous[0] + 2
    peak = eager.peak_memory[0]
    assert any("sent message of SEND_F(0,0)" in item for item in peak.live)
    assert any("sent message of SEND_F(0,1)" in item for item in peak.live)


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


def test_a_sweep_marks_a_setting_that_does_not_compile_and_goes_on(run_cli, tmp_path):
    """1F1B whose warm-up goes negative when M < P - 1 - r: those settings are `E`, the first is told
    with its setting and error, the rest of the grid is checked, and the exit code says bad input."""
    src = tmp_path / "late.pp"
    src.write_text("schedule late(P = 4, M = 8) {\n  require P >= 1, M >= 1\n  stages P\n  place loop\n"
                   "  rank r {\n    let warm = P - 1 - r\n    for m in 0 .. warm { F(r, m) }\n"
                   "    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }\n"
                   "    for m in M - warm .. M { B(r, m) }\n  }\n}\n")
    code, out, _ = run_cli("check", str(src), "--sweep", "P=1..4", "--sweep", "M=1..4")
    assert code == 2
    lines = out.splitlines()
    assert lines[0].index("1") == lines[1].index(".")  # the header's columns over the rows'
    assert [line.split()[1:] for line in lines[3:5]] == [["E", ".", ".", "."], ["E", "E", ".", "."]]
    assert "13 of 16 instances hold" in out and "'E' does not compile" in out
    assert "first setting that does not compile, {'P': 3, 'M': 1}:" in out and "error[range]" in out
    code, out, _ = run_cli("check", str(src), "--sweep", "P=3..3", "--sweep", "M=1..2", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 2 and rows[0]["params"] == {"P": 3, "M": 1} and rows[0]["input_error"] is True
    assert rows[0]["errors"][0]["code"] == "range" and rows[1]["ok"] is True


# Issue 17, item 6: both engines tell one deadlock the same way (the same stuck steps and cycle).
RING3_COMPUTE = """schedule ring3 {
  # each rank's first forward needs the previous rank's, which that rank runs second: a 3-cycle
  rank 0: 3F0 0F0 3B0 0B0
  rank 1: 1F0 4F0 4B0 1B0
  rank 2: 2F0 5F0 5B0 2B0
}"""

RING3_COMMS = """schedule ring3 {
  # each rank receives before it sends, around the ring 0 -> 1 -> 2 -> 0
  rank 0: 3RECV_F0 0F0 0SEND_F0 3F0 3SEND_F0 3RECV_B0 3B0 3SEND_B0 0RECV_B0 0B0
  rank 1: 1RECV_F0 1F0 1SEND_F0 4RECV_F0 4F0 4SEND_F0 4RECV_B0 4B0 4SEND_B0 1RECV_B0 1B0 1SEND_B0
  rank 2: 2RECV_F0 2F0 2SEND_F0 5RECV_F0 5F0 5B0 5SEND_B0 2RECV_B0 2B0 2SEND_B0
}"""

CHAIN3 = """schedule chain3 {
  rank 0: 0RECV_B0 0F0 0SEND_F0 0B0
  rank 1: 1RECV_B0 1RECV_F0 1F0 1SEND_F0 1B0 1SEND_B0
  rank 2: 2RECV_F0 2F0 2B0 2SEND_B0
}"""


def _deadlocking():
    yield "ring3 compute", compile_text(RING3_COMPUTE)
    yield "ring3 comms", compile_text(RING3_COMMS)
    yield "chain3", compile_text(CHAIN3)
    yield "cross", compile_text(CROSS)
    yield "1f1b receives first", receives_before_consumers(lower(schedule("1f1b", P=3, M=4)))
    yield "interleaved receives first", receives_before_consumers(lower(schedule("interleaved_1f1b", P=3, V=2, M=3)))


def schedule(name, **params):
    return schedc.load(name, params)


@pytest.mark.parametrize("semantics", ["rendezvous", "bounded:1"])
def test_both_engines_report_the_same_stuck_steps_and_cycle(semantics):
    for what, program in _deadlocking():
        native = schedc.check(program, semantics=semantics)
        if native.deadlock is None:
            continue  # finishes with a buffer
        solved = schedc.check(program, semantics=semantics, engine="z3")
        assert solved.to_dict()["deadlock"] == native.to_dict()["deadlock"], what
        assert solved.render() == native.render(), what
        stuck = native.deadlock.stuck
        assert all(stuck.get(w.rank) == w.step for w in solved.deadlock.cycle), what


def test_z3_names_every_rank_of_three_where_it_stops():
    for text, cycle_ranks in ((RING3_COMPUTE, [0, 1, 2]), (RING3_COMMS, [0, 1, 2]), (CHAIN3, [1, 2])):
        dl = schedc.check(compile_text(text), engine="z3").to_dict()["deadlock"]
        assert dl["stuck"] == [{"rank": r, "step": 0, "end_of_step": False, "sends": []} for r in range(3)], text
        assert sorted(c["rank"] for c in dl["cycle"]) == cycle_ranks, text
        assert all(c["step"] == 0 for c in dl["cycle"]), text


def test_engines_that_disagree_give_unknown_not_an_inconsistent_report(monkeypatch):
    from schedc.solver import Proved, Refuted
    good, bad = lower(schedule("1f1b", P=2, M=2)), compile_text(RING3_COMMS)
    monkeypatch.setattr(solver, "prove_deadlock_free", lambda *a, **k: Refuted())
    report = schedc.check(good, engine="z3")
    assert report.ok is None and report.deadlock is None and "disagree" in report.unknown
    monkeypatch.setattr(solver, "prove_deadlock_free", lambda *a, **k: Proved(()))
    report = schedc.check(bad, engine="z3")
    assert report.ok is None and report.deadlock is None and "disagree" in report.unknown


# Issue 17, item 3: memory at the compute level is the memory of the program as schedc lowers and
# runs it (DESIGN.md, "Memory at the compute level"), receive buffers included.
def _1f1b_with_messages():
    """1F1B at P=4, M=8 whose activations are 4 units and whose messages carry 1."""
    text = schedc.api.read_text(schedc.api.resolve("1f1b"))
    return compile_text(text.replace("  place loop", "  memory act = 4, out = 1\n  place loop", 1))


# eager: rank 0 may hold all four of its warm-up forwards' messages when it posts RECV_B(0,0), rank 1
# having not started (docs/semantics.md, "Memory": ranks start at any time)
@pytest.mark.parametrize("semantics, peaks", [("rendezvous", [17, 14, 10, 5]), ("eager", [21, 16, 11, 6])])
def test_compute_level_memory_counts_the_receive_buffers_lowering_inserts(semantics, peaks):
    program = _1f1b_with_messages()
    assert program.level == "compute"
    report = schedc.check(program, semantics=semantics, memory_limit=16)
    row = report.to_dict()
    assert row["peak_activation"] == [16, 12, 8, 4]  # activations only, in compute order
    assert row["peak_memory"] == peaks
    assert row["peak_memory"] == schedc.check(lower(program), semantics=semantics).to_dict()["peak_memory"]
    over = [r for r in range(4) if peaks[r] > 16]
    assert report.ok is False and [v["rank"] for v in row["memory_violations"]] == over
    for error in (e for e in report.errors if e.code == "memory"):
        assert error.span is not None and "receive" in error.message and "lowering inserts" in error.message
    for v in row["memory_violations"]:  # an action of the user's program, on its own line
        step = program.ranks[v["rank"]][v["step"]]
        assert v["action"] == str(step) and step.parts[0].op.is_compute and v["line"] is not None
        assert any("inserted by lowering" in item for item in v["live"])


def test_a_memory_violation_at_an_inserted_receive_points_at_the_users_step():
    # rank 0 holds F(0,0)'s activation (1) when the gradient for B(0,0) arrives (2 units): the peak
    # is at the receive lowering inserts before B(0,0), so the report names B(0,0) and says so
    program = compile_text("""schedule m { memory act = 1, out = 2
      rank 0: 0F0 0B0
      rank 1: 1F0 1B0
    }""")
    report = schedc.check(program, memory_limit={0: 2.5})
    (error,) = report.errors
    assert error.code == "memory" and error.rank == 0
    assert error.span is not None and error.span.line == 2
    assert "receive" in error.message and "lowering inserts" in error.message and "B(0,0)" in error.message
    (v,) = report.to_dict()["memory_violations"]
    assert (v["action"], v["step"], v["memory"], v["line"], v["inserted"]) == ("0B0", 1, 3, 2, "0RECV_B0")


def test_a_memory_violation_at_an_inserted_send_points_at_its_producer():
    # under eager, rank 1 holds F(1,0) (1), the received F(0,1) (1) and its own unmatched gradient
    # of I(1,0) (1) just after I(1,0): the send lowering inserts there is the peak
    program = compile_text("""schedule m {
      memory stage 0: act = 1, weight = 0, out = 1
      rank 0: 0F0 0F1 0B1 0B0
      rank 1: 1F0 1I0 1W0 1F1 1I1 1W1
    }""")
    report = schedc.check(program, semantics="eager", memory_limit={1: 2.5})
    (error,) = report.errors
    assert error.code == "memory" and error.span.line == 4
    assert "the send that lowering inserts after I(1,0)" in error.message
    (v,) = report.to_dict()["memory_violations"]
    assert (v["action"], v["step"], v["memory"], v["inserted"]) == ("1I0", 1, 3, "1SEND_B0")
    assert schedc.check(program, memory_limit={1: 2.5}).ok  # rendezvous: the send is no buffer


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_ranks=3, max_microbatches=4, overlap=True, placements=("loop", "vshape", "table"), memory=True),
       st.sampled_from(["rendezvous", "eager", "bounded:1"]))
def test_compute_level_memory_is_the_lowered_programs(program, semantics):
    """One memory model: a compute-level check reports its lowering's peaks, on every path."""
    from schedc.report import run_checks
    from schedc.rules.semantics import Semantics
    sem = Semantics.parse(semantics)
    lowered = run_checks(lower(program), semantics=sem, fast=False)
    for fast in (True, False):
        report = run_checks(program, semantics=sem, fast=fast)
        assert report.ok, report.render()
        assert [pk.memory for pk in report.peak_memory] == [pk.memory for pk in lowered.peak_memory]
        assert report.peak_activation == lowered.peak_activation


SMALL = dict(max_ranks=3, max_microbatches=4, placements=("loop", "vshape", "table"))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(programs(overlap=True, memory=True, **SMALL), programs(**SMALL),
                 lowered_programs(memory=True, **SMALL), lowered_programs(**SMALL)),
       st.sampled_from(["rendezvous", "eager"]), st.sampled_from([None, 0.5, 1.0]))
def test_fast_and_detailed_paths_give_one_memory_figure(program, semantics, slack):
    """The fast path (schedc/verify/fast.py) clears only what the detailed path clears, with the
    same peaks; what it cannot count exactly it declines."""
    from schedc.report import run_checks
    from schedc.rules.semantics import Semantics
    from schedc.verify.fast import quick_check
    sem = Semantics.parse(semantics)
    detailed = run_checks(program, semantics=sem, fast=False)
    peaks = [pk.memory for pk in detailed.peak_memory]
    limits = None if slack is None else {r: max(m - slack, 0.0) for r, m in enumerate(peaks)}
    clear = quick_check(program, sem, limits)
    if clear is not None:
        assert detailed.ok and [pk.memory for pk in clear.peak_memory] == peaks
        assert clear.peak_activation == detailed.peak_activation
    limited = run_checks(program, semantics=sem, fast=False, memory_limit=limits)
    quick = run_checks(program, semantics=sem, memory_limit=limits)
    assert quick.ok == limited.ok and [pk.memory for pk in quick.peak_memory] == peaks
    # over a limit and otherwise clear, only the memory walk runs after the fast path: the same report
    assert quick.to_dict() == limited.to_dict() and quick.render() == limited.render()


# Issue 17, item 4: each report says which run its peak describes.
def test_check_says_its_peak_is_the_worst_run(run_cli):
    code, out, _ = run_cli("check", "1f1b", "--json")
    assert json.loads(out)["memory_run"] == "worst"
    code, out, _ = run_cli("check", "1f1b", "--semantics", "eager")
    assert "peak memory per rank (worst over every run eager allows, receive buffers included): [4, 3, 2, 1]" in out


def test_a_sweep_whose_instances_take_too_much_work_in_all_stops_with_a_clear_error(run_cli, monkeypatch):
    from schedc.commands import check as check_command
    monkeypatch.setattr(check_command, "MAX_SWEEP_WORK", 20_000)
    code, out, err = run_cli("check", "1f1b", "--param", "P=4", "--sweep", "M=1..100")
    assert code == 2 and "error[too-large]" in err and "more than 20,000 units of work in all" in err
    # 1F1B at P=4, cleared by the fast checks: 100 + 8 * 4 + 2 * 8M units an instance; 19,992 after M=42
    assert "Traceback" not in err and "instance 43 of 100" in err, err


def test_a_z3_sweep_shares_its_timeout_and_marks_what_it_did_not_reach_unknown(run_cli, monkeypatch):
    # fuzz finding: each instance had the whole --timeout, so `check zb_h2 --engine z3 --timeout 5
    # --sweep M=1..200` had no bound. A clock that moves one second per instance checked (and not
    # while one is checked) makes it deterministic.
    from schedc import solver as solver_module
    from schedc.commands import check as check_command
    now = [0.0]
    monkeypatch.setattr(solver_module, "clock", lambda: now[0])
    checks = check_command.common.run_checks

    def one_second_each(*args, **kwargs):
        try:
            return checks(*args, **kwargs)
        finally:
            now[0] += 1.0
    monkeypatch.setattr(check_command.common, "run_checks", one_second_each)
    code, out, _ = run_cli("check", "1f1b", "--param", "P=2", "--engine", "z3", "--timeout", "2.5",
                           "--sweep", "M=1..6")
    marks = [line.split()[-1] for line in out.splitlines()[:6]]
    assert code == 3 and marks == [".", ".", ".", "?", "?", "?"]
    assert "the sweep's --timeout of 2.5 s ran out before instance 4 of 6" in out
    now[0] = 0.0
    code, out, _ = run_cli("check", "1f1b", "--param", "P=2", "--engine", "z3", "--timeout", "2.5",
                           "--sweep", "M=1..6", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["ok"] for r in rows] == [True, True, True, None, None, None]
    assert rows[-1]["params"] == {"P": 2, "M": 6} and "time limit" in rows[-1]["unknown"]
    # without --timeout there is no clock: the same sweep checks every instance
    now[0] = 0.0
    code, out, _ = run_cli("check", "1f1b", "--param", "P=2", "--engine", "z3", "--sweep", "M=1..6")
    assert code == 0 and "6 of 6 instances hold" in out
    # the native engine has no clock: --timeout without --engine z3 would do nothing, so it is refused
    now[0] = 0.0
    code, out, err = run_cli("check", "1f1b", "--param", "P=2", "--timeout", "2.5", "--sweep", "M=1..6")
    assert code == 2 and "--timeout is the Z3 solver's seconds: give --engine z3 too" in err, err
    code, out, _ = run_cli("check", "1f1b", "--param", "P=2", "--sweep", "M=1..6")
    assert code == 0 and "6 of 6 instances hold" in out


def test_over_its_memory_limit_and_otherwise_clear_only_the_memory_walk_runs(monkeypatch):
    # fuzz finding: `check 1f1b --param P=1000,M=1000 --memory-limit 3` ran every detailed check
    # (22 s) when the fast path had cleared all but the limit; the memory walk alone says where (6 s)
    import schedc.report as report_module
    import schedc.verify.deadlock

    def refuse(*args, **kwargs):
        raise AssertionError("a detailed check ran again")
    program = schedc.load("1f1b", {"P": 4, "M": 8})
    monkeypatch.setattr(report_module, "lint", refuse)
    for name in ("find_deadlock", "deadlock_of"):  # (report.py imports them when it calls them)
        monkeypatch.setattr(schedc.verify.deadlock, name, refuse)
    report = schedc.check(program, memory_limit=3)
    assert [e.code for e in report.errors] == ["memory"] and "over the limit of 3" in report.errors[0].message
    assert report.peak_activation == (4, 3, 2, 1)
