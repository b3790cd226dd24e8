"""Verdicts that do not depend on machine load (issue 19): `prove` and `synth` budget solver work in
deterministic units (Z3's resource count, HiGHS's nodes) and keep the wall clock as the outer guard
only. A clock that crawls or races changes neither verdict nor certificate; a tiny budget gives
`unknown` naming it, every time; the same proof in two processes gives the same JSON.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from schedc import solver
from schedc.prove import prove
from schedc.prove import prover as prover_module
from schedc.synth import search as synth_search
from schedc.synth.problem import build_problem
from schedc.synth.search import synthesize

DAY = 86_400  # the outer limit when the clock is scaled: far beyond what any run here takes
SCALED = """
import json, sys
from schedc import solver
from schedc.prove import prove
real, factor = solver.clock, float(sys.argv[2])
began = real()
solver.clock = lambda: began + (real() - began) * factor  # what every Deadline reads
print(json.dumps(prove(sys.argv[1], timeout=86_400).to_dict()))
"""


def scale_clock(monkeypatch, factor: float) -> None:
    """Make solver.clock, the time every Deadline reads, run `factor` times as fast as the real one."""
    real = solver.clock
    began = real()
    monkeypatch.setattr(solver, "clock", lambda: began + (real() - began) * factor)


def without_seconds(proof) -> dict:
    """A proof's JSON but for the seconds it took (the one field the clock may change)."""
    got = proof.to_dict()
    assert got.pop("seconds") >= 0
    return got


def proved_with_clock(name: str, factor: float) -> dict:
    """`prove(name)` in a fresh process whose clock runs `factor` times as fast as the real one (a
    fresh process each: Z3's work depends on what the process did before), its JSON but the seconds."""
    res = subprocess.run([sys.executable, "-c", SCALED, name, str(factor)], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got.pop("seconds") >= 0
    return got


def same_but_for_layout(got: dict, want: dict) -> None:
    """The same JSON, Z3's count of work within a thousandth (see the test of two processes below)."""
    assert abs(got["solver_units"] - want["solver_units"]) <= want["solver_units"] // 1000
    assert {**got, "solver_units": want["solver_units"]} == want


@pytest.mark.parametrize("name, factors", [
    # the clock crawls (nothing waits for it to move), and races (a minute of it passes in 60 ms, as on
    # a machine a thousand times busier); ZB-H1's proof takes about a second, ZB-H2's ten times its work
    ("zb_h1", (1e-3, 1e3)),
    pytest.param("zb_h2", (1e-3, 1e3), marks=pytest.mark.slow),
    pytest.param("looped_bfs", (1e3,), marks=pytest.mark.slow),  # nonlinear: Z3's tactic, HiGHS's nodes
])
def test_a_clock_that_crawls_or_races_changes_neither_verdict_nor_certificate(name, factors):
    want = proved_with_clock(name, 1.0)
    assert want["verdict"] == "proved" and want["solver_units"] > 0
    for factor in factors:
        same_but_for_layout(proved_with_clock(name, factor), want)  # verdict, certificate, sweep, work


def test_a_tiny_budget_gives_unknown_naming_it_the_same_every_time(monkeypatch, run_cli):
    monkeypatch.setattr(prover_module, "WELL_FORMED_UNITS", 50)
    first, second = (without_seconds(prove("1f1b")) for _ in range(2))
    assert first == second
    assert first["verdict"] == "unknown"
    assert "solver budget exhausted: 50 Z3 resource units for one well-formedness query" in first["reason"]
    assert "time limit" not in first["reason"]
    code, out, err = run_cli("prove", "1f1b", "-q")
    assert code == 3 and "unknown: Z3 gave up on 'every stage and microbatch index is in range' (solver " \
                         "budget exhausted: 50 Z3 resource units for one well-formedness query)" in out
    assert "Traceback" not in err


def test_the_clock_running_out_says_time_limit_not_budget():
    proof = prove("zb_h2", timeout=0.05)
    assert proof.verdict == "unknown" and proof.reason.startswith("time limit: stopped after the 0.05 s allowed")


@pytest.mark.parametrize("name", ["zb_h1", pytest.param("zb_h2", marks=pytest.mark.slow),
                                  pytest.param("interleaved_1f1b", marks=pytest.mark.slow)])
def test_the_same_proof_in_two_processes_gives_the_same_json(name):
    """Two processes (other hash seeds, other memory layouts): the same JSON but for the seconds, and
    Z3's count of work within a thousandth. Z3's search reads the memory layout, which the system
    randomises per process, so its count may differ by a few units in millions (interleaved 1F1B: 55.3M
    units, two values 913 apart), never by what a timing-dependent answer costs (millions)."""
    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "OMP_NUM_THREADS": "1"}
        res = subprocess.run([sys.executable, "-m", "schedc", "prove", name, "-q", "--json"], capture_output=True,
                             text=True, env=env, timeout=600)
        assert res.returncode == 0, res.stderr
        got = json.loads(res.stdout)
        got.pop("seconds")
        runs.append(got)
    first, second = runs
    assert first["verdict"] == "proved" and first["certificate"]["timing"]
    same_but_for_layout(second, first)


def test_a_share_spends_every_budget_above_it_and_names_the_first_that_ran_out():
    top = solver.Deadline.after(DAY).share(100, "the step")
    query = top.share(60, "one query")
    assert query.budget.left() == 60 and top.budget.left() == 100
    query.budget.spend(60)
    assert query.exhausted() == "solver budget exhausted: 60 Z3 resource units for one query"
    assert top.exhausted() is None and top.budget.left() == 40
    assert top.share(60, "another query").budget.left() == 40  # never more than the step has left
    top.share(60, "another query").budget.spend(45)
    assert top.exhausted() == "solver budget exhausted: 100 Z3 resource units for the step"
    assert solver.Deadline.after(DAY).budget.left() is None  # the command's own: no limit but the clock


def test_a_query_with_no_budget_left_is_not_asked():
    import z3
    ctx = solver.context()
    s = solver.make(ctx)
    s.add(z3.Int("x", ctx) > 0)
    spent = solver.Deadline.after(DAY).share(0, "nothing")
    assert solver.check(s, deadline=spent) == z3.unknown
    assert solver.reason(s, spent) == "solver budget exhausted: 0 Z3 resource units for nothing"
    assert solver.check(s, deadline=solver.Deadline.after(DAY).share(10**6, "enough")) == z3.sat


SMALL = dict(P=4, M=8, memory_limit=3)  # the solver finds a better schedule, then shows none is better


def synth_outcome(**kw):
    outcome = synthesize(build_problem(SMALL["P"], SMALL["M"], memory_limit=SMALL["memory_limit"]), **kw)
    return (outcome.best.program(outcome.problem).ranks, outcome.bound, outcome.optimal, outcome.stopped,
            [(q.T, q.answer, q.why) for q in outcome.queries])


def test_synth_finds_the_same_with_a_crawling_or_racing_clock(monkeypatch):
    want = synth_outcome(time_limit_s=DAY)
    assert want[2] is True and len(want[4]) > 1  # optimal, after more than one query
    for factor in (1e-3, 1e3):
        with monkeypatch.context() as patch:
            scale_clock(patch, factor)
            assert synth_outcome(time_limit_s=DAY) == want, factor


def test_synth_with_a_tiny_budget_stops_naming_it_the_same_every_time(monkeypatch, run_cli, tmp_path):
    monkeypatch.setattr(synth_search, "QUERY_UNITS", 10)
    monkeypatch.setattr(synth_search, "PATIENT_UNITS", 20)
    first, second = synth_outcome(time_limit_s=DAY), synth_outcome(time_limit_s=DAY)
    assert first == second
    assert first[2] is False and first[3] == "solver-unknown"
    whys = {why for _, answer, why in first[4] if answer == "unknown"}
    assert "solver budget exhausted: 10 Z3 resource units for one query in the bisection" in whys
    code, out, _ = run_cli("synth", "--param", "P=4", "--param", "M=8", "--memory-limit", "3")
    assert code == 0 and "not proven optimal (solver budget exhausted: 20 Z3 resource units for a last query)" in out


# ---- issue 35: no clock by default; a time limit, when the user sets one, says so apart from a budget ----

def racing_clock(monkeypatch) -> None:
    """A clock that passes a day at every reading: any wall-clock limit it is read against runs out
    at once, so a command that answers under it has no clock."""
    ticks = iter(range(10**9))
    monkeypatch.setattr(solver, "clock", lambda: float(next(ticks)) * DAY)


@pytest.mark.parametrize("argv, flag", [
    (["prove", "1f1b"], "timeout"), (["synth", "--param", "P=2,M=2"], "time_limit"),
    (["check", "1f1b", "--engine", "z3"], "timeout"), (["compile", "1f1b"], "timeout"),
])
def test_no_command_has_a_wall_clock_limit_by_default(argv, flag):
    import io
    from schedc.cli import _parser
    args = _parser(io.StringIO(), argv).parse_args(argv)
    assert getattr(args, flag) is None


def test_by_default_prove_synth_and_check_z3_answer_whatever_the_clock_does(monkeypatch, run_cli):
    # `prove interleaved_zero_bubble` did 291,803,280 resource units every time, yet answered
    # `unknown` at the default --timeout 300 under load and `proved` in 55 s quiet
    racing_clock(monkeypatch)
    code, out, _ = run_cli("prove", "zb_h1", "-q")
    assert code == 0 and "zb_h1: proved for every setting" in out, out
    code, out, _ = run_cli("synth", "--param", "P=4,M=8", "--memory-limit", "3", "--json")
    report = json.loads(out)
    assert code == 0 and report["optimal"] is True and report["stopped"] is None
    code, out, _ = run_cli("check", "zbv", "--engine", "z3", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and report["witness"]
    code, out, _ = run_cli("check", "1f1b", "--param", "P=2", "--engine", "z3", "--sweep", "M=1..4")
    assert code == 0 and "4 of 4 instances hold" in out


def test_a_time_limit_the_user_sets_says_so_apart_from_a_budget(monkeypatch, run_cli):
    from schedc.verify import solver as deadlock_solver
    racing_clock(monkeypatch)
    code, out, _ = run_cli("prove", "zb_h1", "-q", "--timeout", "5")
    assert code == 3 and "zb_h1: unknown: time limit: stopped after the 5 s allowed" in out
    assert "budget" not in out
    code, out, _ = run_cli("prove", "zb_h1", "-q", "--budget", "1000")
    assert code == 3 and "solver budget exhausted: 1,000 Z3 resource units for the whole proof" in out
    assert "time limit" not in out
    code, out, _ = run_cli("check", "zbv", "--engine", "z3", "--timeout", "5", "--json")
    assert code == 3 and json.loads(out)["unknown"] == \
        "time limit: the wall-clock limit (--timeout) ran out while Z3 decided deadlock freedom"
    monkeypatch.setattr(deadlock_solver, "DEADLOCK_UNITS", 10)
    code, out, _ = run_cli("check", "zbv", "--engine", "z3", "--json")
    assert code == 3 and json.loads(out)["unknown"] == \
        "solver budget exhausted: 10 Z3 resource units for the deadlock query"
    monkeypatch.setattr(synth_search, "SEARCH_UNITS", 10)
    code, out, _ = run_cli("synth", "--param", "P=4,M=8", "--memory-limit", "3")
    assert code == 0 and "not proven optimal (solver budget exhausted: 10 Z3 resource units for the search)" in out
    code, out, _ = run_cli("synth", "--param", "P=4,M=8", "--memory-limit", "3", "--budget", "10", "--json")
    assert json.loads(out)["stopped"] == "solver-unknown"
    code, out, _ = run_cli("synth", "--param", "P=4,M=8", "--memory-limit", "3", "--time-limit", "5")
    assert code == 0 and "not proven optimal (stopped at the time limit)" in out


@pytest.mark.parametrize("argv, message", [
    (["prove", "1f1b", "--budget", "0"], "--budget 0: expected a positive number of Z3 resource units"),
    (["synth", "--param", "P=2,M=2", "--budget", "-5"], "--budget -5: expected a positive number"),
    (["prove", "1f1b", "--timeout", "0"], "--timeout 0: expected seconds"),
    (["check", "1f1b", "--engine", "z3", "--timeout", "-1"], "--timeout -1: expected seconds"),
])
def test_bad_budgets_and_time_limits_are_usage_errors(argv, message, run_cli):
    code, _, err = run_cli(*argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_a_descent_to_the_smallest_counterexample_from_far_away_takes_few_queries(monkeypatch):
    # `prove 1f1b --assume 'P >= 10**18'` with no clock: the descent asked for each smaller P in
    # turn, one small query at a time, for an hour or more before its budget ended it (the old
    # default --timeout 300 hid it); it now halves the distance after PLAIN_STEPS queries (10,000 by
    # default, so that every shorter descent returns the model it always did; 64 here, to be quick)
    from schedc.prove import smt
    monkeypatch.setattr(smt, "PLAIN_STEPS", 64)
    asked = []
    real = solver.check

    def counted(*args, **kwargs):
        asked.append(1)
        assert len(asked) < 3000, "the descent asks for each smaller value in turn"
        return real(*args, **kwargs)
    monkeypatch.setattr(solver, "check", counted)
    proof = prove("1f1b", assumptions=("P >= 1000000000000000000",), memory="min(P - r - 1, M)")
    assert proof.verdict == "unknown" and "too large to count concretely" in proof.reason
    assert "P=1000000000000000000, M=1," in proof.reason  # the smallest: the descent ended at the bound
    assert len(asked) < 2000, len(asked)  # (the whole proof's queries: about 1,000; plain steps, 10**18)


def test_a_query_past_the_solvers_step_limit_is_unknown_before_its_constraints_are_built(monkeypatch):
    """The fuzzer's (seed 83; bench/README.md, "Fuzzing"): `compile gpipe --param P=1000,M=1000
    --engine z3` built the deadlock query's constraints for 2M steps (30 s) only to find them past
    the 200,000-step limit. The steps are counted first (here with the limit made small)."""
    import schedc
    from schedc.verify import graph, solver as vsolver
    monkeypatch.setattr(vsolver, "MAX_STEPS", 10)

    def no_constraints(*args, **kwargs):
        raise AssertionError("the constraints were built")
    monkeypatch.setattr(graph, "constraints", no_constraints)
    report = schedc.check(schedc.load("1f1b", {"P": 2, "M": 4}), engine="z3")
    assert report.ok is None and report.unknown == "16 steps is beyond the solver limit of 10; use --engine native"
