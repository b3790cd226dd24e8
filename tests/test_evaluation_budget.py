"""The evaluation budget (issue 35): loop iterations, weighted by the operations of their bodies, and
`let` function evaluations are counted together (schedc/expr.py's `Meter`), so a small file cannot
run for an hour below every documented limit. Each test asserts the error, its place and exit code,
never a time: the budget is lowered where the refusal would otherwise take seconds.
"""
from __future__ import annotations

import pytest

from schedc import expr
from schedc.compiler import compile_schedule
from schedc.errors import SchedcError
from schedc.parse import parse


def _chain(n: int = 240, iterations: int = 19_000_000, body: str = "      let y = f{last}(i)") -> str:
    """The fuzzer's file: `n` chained one-line functions, the last called once per iteration of a
    long loop that makes no action (6.6 KB, 2 actions; 73 minutes before the budget)."""
    lets = ["  let f0(x) = x % 7"] + [f"  let f{i}(x) = f{i - 1}(x) + 1" for i in range(1, n)]
    return "\n".join(["schedule chain(P = 1, M = 1) {", *lets, "  rank r {",
                      f"    for i in 0 .. {iterations} {{", body.format(last=n - 1), "      if y < 0 { F(0, 0) }",
                      "    }", "    F(0, 0); B(0, 0)", "  }", "}"]) + "\n"


def _fan(n: int) -> str:
    """Functions each calling the previous one twice on different arguments: 2^n evaluations that
    the memo tables cannot share, in the header (no loop at all)."""
    lets = ["  let g0(x) = x % 7"] + [f"  let g{i}(x) = g{i - 1}(2 * x) + g{i - 1}(2 * x + 1)" for i in range(1, n)]
    return "\n".join(["schedule fan(P = 1, M = 1) {", *lets, f"  let z = g{n - 1}(1)",
                      "  rank r { F(0, 0); B(0, 0) }", "}"]) + "\n"


def test_the_chained_functions_in_a_long_loop_are_refused_at_the_statement_that_calls_them(run_cli, tmp_path,
                                                                                             monkeypatch):
    """The real file runs its 19M iterations' charge (about 530M steps) under the budget and is
    refused in the functions after about 3 s; here a shorter loop under a smaller budget."""
    assert len(_chain().encode()) < 7000
    path = tmp_path / "chain.pp"
    path.write_text(_chain(iterations=50_000), encoding="utf-8")
    monkeypatch.setattr(expr, "MAX_STEPS", 2_000_000)
    code, out, err = run_cli("check", str(path))
    assert code == 2, (out, err)
    assert f"{path}:244:7: error[too-large]: evaluating this takes more than 2,000,000 steps" in err, err
    assert "244 |       let y = f239(i)" in err and "^^^^^^^^^" in err, err


def test_a_long_loop_is_charged_its_iterations_times_its_body_before_it_starts(run_cli, tmp_path):
    """At the real budget: 19M iterations of a body of about 60 steps are refused at the `for` line
    at once, before one iteration runs."""
    heavy = "      let y = " + " + ".join(["i"] * 12)
    path = tmp_path / "loop.pp"
    path.write_text(_chain(n=2, body=heavy), encoding="utf-8")
    code, out, err = run_cli("check", str(path))
    assert code == 2 and f"{path}:5:5: error[too-large]: evaluating this takes more than " \
                          f"{expr.MAX_STEPS:,} steps" in err, err
    assert "for i in 0 .. 19000000 {" in err


def test_functions_the_memo_cannot_share_are_refused_where_they_are_called(run_cli, tmp_path, monkeypatch):
    path = tmp_path / "fan.pp"
    path.write_text(_fan(60), encoding="utf-8")
    monkeypatch.setattr(expr, "MAX_STEPS", 1_000_000)
    code, out, err = run_cli("check", str(path))
    assert code == 2 and f"{path}:62:11: error[too-large]" in err and "let z = g59(1)" in err, err


def test_what_an_expansion_is_charged_does_not_depend_on_what_ran_before(monkeypatch):
    """The memo tables are emptied when a budget starts: an expansion refused once is refused again
    (it would otherwise find the first one's values and pass), and one that fits always fits."""
    tree = parse(_fan(14), "fan.pp")
    monkeypatch.setattr(expr, "MAX_STEPS", 10**12)
    compile_schedule(tree)
    needed = 10**12 - expr.METER.left
    monkeypatch.setattr(expr, "MAX_STEPS", needed - 1)
    for _ in range(2):
        with pytest.raises(SchedcError) as err:
            compile_schedule(tree)
        assert err.value.code == "too-large"
    monkeypatch.setattr(expr, "MAX_STEPS", needed)
    for _ in range(2):
        compile_schedule(tree)
        assert expr.METER.left == 0


def test_a_placement_is_charged_once_per_stage(monkeypatch):
    """`place s -> E` is evaluated for every stage (up to 1,000,000 of them)."""
    wide = "min(" + ", ".join(["s"] * 200) + ")"
    text = f"schedule p(M = 1) {{\n  stages 1000000\n  ranks 1\n  place s -> {wide} * 0\n  rank 0 {{ F(0, 0); B(0, 0) }}\n}}\n"
    monkeypatch.setattr(expr, "MAX_STEPS", 10_000_000)
    with pytest.raises(SchedcError) as err:
        compile_schedule(parse(text, "place.pp"))
    assert err.value.code == "too-large" and err.value.diagnostics[0].span.line == 4


def test_an_expression_evaluated_alone_has_a_budget_of_its_own(monkeypatch):
    """Outside an expansion (the prover's evaluations), each evaluation of an expression that calls
    memoized functions runs on a budget of its own: a Stop, not a hang."""
    from schedc.prove.evaluator import Stop, evaluate
    tree = parse(_fan(60), "fan.pp")
    functions = {item.name: (item.params, item.value) for item in tree.items
                 if getattr(item, "params", None) is not None}
    call = next(item.value for item in tree.items if getattr(item, "name", None) == "z")
    monkeypatch.setattr(expr, "MAX_STEPS", 1_000_000)
    with pytest.raises(Stop, match="steps"):
        evaluate(call, {}, functions)
