"""Ordinary input that used to crash schedc (exit 4) or be reported badly (issue 19): each is now a
result, or an error with its code, exit 2 and, where it has one, its file, line and column."""
from __future__ import annotations

import json

import pytest

from schedc.errors import EXIT_FAIL, EXIT_INPUT, EXIT_OK

HUGE = "9" * 5000  # past Python's 4,300-digit limit on converting text to an int


def _write(tmp_path, name: str, data: str | bytes):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def _input_error(result, *needles: str) -> str:
    code, _, err = result
    assert code == EXIT_INPUT and "internal error" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


# ---- min and max of one argument ----
ONE_ARGUMENT = """schedule one(P = 2, M = 3) {
  stages P
  rank r {
    for m in 0 .. max(M) { F(r, m) }
    for m in 0 .. min(M) { B(r, m) }
  }
}
"""


def test_min_and_max_of_one_argument_are_that_argument(tmp_path, run_cli):
    code, out, err = run_cli("check", _write(tmp_path, "one.pp", ONE_ARGUMENT))
    assert code == EXIT_OK and "6 actions" not in out and "12 actions" in out, err


def test_the_prover_reads_min_and_max_of_one_argument_as_the_compiler_does(run_cli):
    code, out, err = run_cli("prove", "1f1b", "--memory", "max(min(P))", "-q")
    assert code == EXIT_OK and "at most max(min(P)) live activations" in out, err


# ---- compile --force on a program whose last stage sends ----
@pytest.mark.parametrize("name, text", [
    ("send.pp", "schedule send(P = 1, M = 1) {\n  stages 1\n  rank r { SEND_F(0, 0) }\n}\n"),
    ("send.csv", "0F0,0SEND_F0,0B0\n"),
])
def test_compile_force_writes_what_it_can_when_the_last_stage_sends(tmp_path, run_cli, name, text):
    code, _, err = run_cli("compile", _write(tmp_path, name, text), "--force", "-o", str(tmp_path / "out"))
    stem = name.split(".")[0]
    assert code == EXIT_FAIL and "internal error" not in err and "error[bad-comm]" in err, err
    assert "no runnable program" in err and "has no stage 1 on the other end" in err
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == [f"{stem}.csv", f"{stem}.json", f"{stem}.svg"]


# ---- nesting ----
def _nested_if(n: int) -> str:
    body = "F(r, m)"
    for _ in range(n):
        body = f"if P >= 1 {{ {body} }}"
    return body


def _nested_for(n: int) -> str:
    body = "F(r, m)"
    for i in range(n):
        body = f"for i{i} in 0 .. 1 {{ {body} }}"
    return body


def _long_sum(n: int) -> str:
    return "F(r, m + " + " + ".join(["0"] * n) + ")"


def _schedule(forward: str) -> str:
    return ("schedule deep(P = 2, M = 2) {\n  require P >= 1, M >= 1\n  stages P\n  place loop\n  rank r {\n"
            f"    for m in 0 .. M {{ {forward} }}\n    for m in 0 .. M {{ B(r, m) }}\n  }}\n}}\n")


@pytest.mark.parametrize("forward", [_nested_if(81), _nested_if(95)], ids=["if-81", "if-95"])
def test_nesting_within_the_limit_compiles_checks_and_proves(tmp_path, run_cli, forward):
    """95 nested `if`s are just within the limit, and `if` is the construct every pass spends the
    most recursion on."""
    path = _write(tmp_path, "deep.pp", _schedule(forward))
    code, _, err = run_cli("compile", path, "-o", str(tmp_path / "out"))
    assert code == EXIT_OK, err
    code, out, err = run_cli("prove", path, "-q")
    assert code == EXIT_OK and "proved" in out, err


@pytest.mark.parametrize("forward", [_nested_for(162), _long_sum(330), _nested_if(2000), _long_sum(5000)],
                         ids=["for-162", "sum-330", "if-2000", "sum-5000"])
def test_nesting_past_the_limit_is_a_too_large_error_where_it_starts(tmp_path, run_cli, forward):
    from schedc.parse import MAX_DEPTH
    path = _write(tmp_path, "deep.pp", _schedule(forward))
    for command in (("check",), ("prove", "-q")):
        err = _input_error(run_cli(*command[:1], path, *command[1:]), "error[too-large]",
                           f"nested more than {MAX_DEPTH} levels deep")
        assert err.startswith(f"{path}:6:"), err


# ---- numbers too long to convert ----
@pytest.mark.parametrize("argv, needle", [
    (("check", "1f1b", "--param", f"P={HUGE}"), "--param P: a number with 5,000 digits"),
    (("check", "1f1b", "--sweep", f"M=1..{HUGE}"), "--sweep M: a number with 5,000 digits"),
    (("synth", "--param", f"P={HUGE}", "--param", "M=2"), "--param P: a number with 5,000 digits"),
], ids=["param", "sweep", "synth"])
def test_a_5000_digit_option_is_an_input_error(run_cli, argv, needle):
    _input_error(run_cli(*argv), needle)


@pytest.mark.parametrize("name, text, needle", [
    ("c.toml", f"F = {HUGE}\n", "c.toml:1:5: error[costs]: a number has more than 4,300 digits"),
    ("s.toml", f"[stage.{HUGE}]\nF = 1\n", "error[too-large]: stage: a number with 5,000 digits"),
    ("ch.toml", f'[channel."0->{HUGE}"]\nlatency = 1\n', "error[too-large]: a channel's rank"),
    ("p.json", f'{{"stages": {{"0": {{"F": {HUGE}}}}}}}', "p.json:1:24: error[costs]: a number has more than"),
], ids=["toml-value", "toml-stage", "toml-channel", "profile"])
def test_a_5000_digit_cost_is_an_input_error(tmp_path, run_cli, name, text, needle):
    _input_error(run_cli("sim", "1f1b", "--costs", _write(tmp_path, name, text)), needle)


def test_a_cost_file_nested_thousands_deep_is_an_input_error(tmp_path, run_cli):
    costs = _write(tmp_path, "deep.toml", "x = " + "[" * 3000 + "]" * 3000 + "\n")
    _input_error(run_cli("sim", "1f1b", "--costs", costs), "error[costs]: the TOML is nested too deeply")


def test_a_5000_digit_number_in_a_certificate_or_an_ir_file_is_an_input_error(tmp_path, run_cli):
    cert = _write(tmp_path, "c.json", f'{{"timing": {{"0": {{"1": {HUGE}}}}}}}')
    _input_error(run_cli("prove", "1f1b", "--certificate", cert), f"{cert}:1:24: error[certificate]")
    ir = _write(tmp_path, "ir.json", f'{{"format": "schedc-ir", "ranks": {HUGE}}}')
    _input_error(run_cli("check", ir), f"{ir}:1:34: error[ir-json]: a number has more than 4,300 digits")


# ---- costs that overflow the simulated times ----
@pytest.mark.parametrize("command", [("viz", "-o", "x.svg"), ("sim",), ("sim", "--json")])
def test_costs_that_overflow_the_times_are_an_input_error(tmp_path, run_cli, command, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = _input_error(run_cli(command[0], "1f1b", "--cost", "latency=1e308", *command[1:]),
                       "error[costs]: the simulated times overflow")
    assert not (tmp_path / "x.svg").exists(), err


def test_compare_with_overflowing_costs_is_an_input_error(run_cli):
    _input_error(run_cli("compare", "--cost", "F=1e308"), "error[costs]: the simulated times overflow")


# ---- what prove is given on the command line ----
@pytest.mark.parametrize("argv, needle", [
    (("--memory", "x"), "--memory: error[unknown-name]: --memory 'x': unknown name 'x'"),
    (("--memory", "foo(P)"), "error[unknown-function]: --memory 'foo(P)'"),
    (("--memory", "P // 0"), "--memory: error[division-by-zero]: --memory 'P // 0' at P=1, M=1, rank 0:"),
    (("--memory", "P // (P - 3)"), "error[division-by-zero]: --memory 'P // (P - 3)' at P=3, M=1, rank 0"),
    (("--memory", "P >= 1"), "error[type]: --memory 'P >= 1': expected a number"),
    (("--assume", "P // 0 >= 1"), "--assume: error[division-by-zero]: --assume 'P // 0 >= 1' at P=1, M=1:"),
    (("--assume", "M // (P - 2) >= 0"), "error[division-by-zero]: --assume 'M // (P - 2) >= 0' at P=2, M=1"),
    (("--assume", "P"), "error[type]: --assume 'P': expected a condition"),
])
def test_a_bad_assumption_or_bound_is_an_input_error_not_a_verdict(run_cli, argv, needle):
    err = _input_error(run_cli("prove", "1f1b", "-q", *argv), needle)
    assert "proved" not in err


def test_an_unknown_name_in_a_bound_lists_the_names_it_may_use(run_cli):
    _input_error(run_cli("prove", "1f1b", "-q", "--memory", "x"), "--memory may use M, P, r, warm")


def test_assumptions_are_read_in_order_as_requires_are(run_cli):
    """Where an assumption is false the ones after it are not evaluated, as the compiler's
    `require`s: a division guarded by an earlier assumption (or by `and`) is fine."""
    _input_error(run_cli("prove", "1f1b", "-q", "--assume", "M // (P - 2) >= 0", "--assume", "P >= 3"),
                 "error[division-by-zero]")
    for argv in (("--assume", "P >= 3", "--assume", "M // (P - 2) >= 0"), ("--assume", "P >= 3 and M // (P - 2) >= 0")):
        code, out, err = run_cli("prove", "1f1b", "-q", *argv)
        assert code == EXIT_OK and "proved" in out, err


def test_a_division_that_may_be_by_zero_past_the_samples_is_not_proved():
    """Z3's side conditions of a division by b (0 <= j < b) must not make the settings where b <= 0
    vanish from the domain: the check that b is positive asks without them."""
    from dataclasses import replace

    from schedc import solver
    from schedc.api import read_text, resolve
    from schedc.parse import parse
    from schedc.prove import smt
    from schedc.prove.model import model, pins, unroll
    from schedc.prove.prover import parse_condition
    from schedc.solver import Deadline
    assumed = (parse_condition("M // (P - 20) >= 0", "--assume"),)
    path = resolve("1f1b")
    m = replace(unroll(model(parse(read_text(path), str(path))), pins(assumed)), nonlinear=True)
    enc = smt.Encoding(m, assumed)
    verdicts = [enc.run(f, Deadline.after(10.0), domain=False) for f in smt.divisors(enc)]
    assert any(isinstance(v, solver.Refuted) and v.params["P"] <= 20 for v in verdicts), verdicts


# ---- messages ----
@pytest.mark.parametrize("name, data, where", [
    ("bad.pp", b"schedule x(P = 2, M = 2) {\n  stages P # caf\xe9\n}\n", "bad.pp:2:17:"),
    ("bad.csv", b"0F0,0B0\n1F0,\xff1B0\n", "bad.csv:2:5:"),
])
def test_a_file_that_is_not_utf8_is_reported_at_its_first_bad_byte(tmp_path, run_cli, name, data, where):
    path = _write(tmp_path, name, data)
    err = _input_error(run_cli("check", path), f"{tmp_path / where} error[io]: the file is not UTF-8 text")
    assert "^" in err  # the line, quoted, with a caret under the byte


def test_cost_files_and_certificates_that_are_not_utf8_are_located_too(tmp_path, run_cli):
    costs = _write(tmp_path, "c.toml", b"F = 1\nB = 2 # \xff\n")
    _input_error(run_cli("sim", "1f1b", "--costs", costs), f"{costs}:2:9: error[io]")
    cert = _write(tmp_path, "c.json", b"\xff{}")
    _input_error(run_cli("prove", "1f1b", "--certificate", cert), f"{cert}:1:1: error[io]")


BOM_PP = "schedule bom(P = 2, M = 2) {\n  stages P\n  rank r { F(r, 0); F(r, 1); B(r, 0); B(r, 1) }\n}\n"


@pytest.mark.parametrize("name, text", [("bom.pp", BOM_PP), ("bom.json", None)])
def test_a_utf8_byte_order_mark_is_skipped(tmp_path, run_cli, name, text):
    """(A PyTorch CSV's is refused: torch's reader takes it as part of the first cell, tests/test_csv.py.)"""
    if text is None:  # an IR file
        code, out, err = run_cli("export", "1f1b", "--param", "P=2,M=2", "--to", "ir-json")
        assert code == EXIT_OK, err
        text = out
    code, out, err = run_cli("check", _write(tmp_path, name, b"\xef\xbb\xbf" + text.encode()))
    assert code == EXIT_OK and " ok" in out, err


def test_a_schedule_with_a_byte_order_mark_still_names_the_parameters_it_takes(tmp_path, run_cli):
    path = _write(tmp_path, "bom.pp", b"\xef\xbb\xbf" + BOM_PP.encode())
    _input_error(run_cli("check", path, "1f1b", "--param", "Q=2"), "--param: error[unknown-param]: no input takes "
                 f"--param Q ({path} takes M, P; 1f1b takes M, P)")


def test_a_byte_order_mark_before_a_cost_file_is_skipped(tmp_path, run_cli):
    costs = _write(tmp_path, "c.toml", b"\xef\xbb\xbfF = 2\n")
    code, out, err = run_cli("sim", "1f1b", "--costs", costs)
    assert code == EXIT_OK, err


def test_an_ir_file_is_reported_under_the_path_the_user_gave(tmp_path, run_cli):
    original = tmp_path / "first.json"
    assert run_cli("export", "1f1b", "--to", "ir-json", "-o", str(original))[0] == EXIT_OK
    data = json.loads(original.read_text())
    data["actions"][0][0] = "9F0"  # a stage out of range: a check failure
    moved = _write(tmp_path, "moved.json", json.dumps(data))
    code, out, _ = run_cli("check", moved, "--json")
    assert code == EXIT_FAIL and json.loads(out)["file"] == moved
    assert data["source"] != moved
