"""Bad cost and memory values get one code, `costs`, wherever they are given (a schedule's `cost` or
`memory` line, a cost file, a profile, `--cost`), with the value in the message; a number written
nonzero that a float reads as 0 is refused, not read as 0 (a bandwidth of 0 is infinite); the
options' messages name the option and show what was typed (docs/errors.md, docs/cli.md)."""
from __future__ import annotations

import json
import pickle

import pytest

from schedc.costs import Costs, parse_cost_option, profile_costs, toml_costs
from schedc.errors import SchedcError
from schedc.inputs import Underflow, read_float

ONE_F_ONE_B = """schedule s(P = 2, M = 2) {{
  stages P
  place loop
  {extra}
  rank r {{
    for m in 0 .. M {{ F(r, m) }}
    for m in 0 .. M {{ B(r, m) }}
  }}
}}
"""


def _pp(tmp_path, extra: str):
    path = tmp_path / "s.pp"
    path.write_text(ONE_F_ONE_B.format(extra=extra))
    return str(path)


# ---- 1. one code for a bad value, with the value shown ----
@pytest.mark.parametrize("extra, params, message", [
    ("memory act = -1", (), "memory act is -1; memory sizes are non-negative"),
    ("cost F = 100 - M", ("--param", "M=101"), "cost F evaluates to -1 at M=101; costs are non-negative"),
    ("memory limit = 0.5 - 1", (), "memory limit evaluates to -0.5; memory limits are non-negative"),
    ("cost stage 1: B = P - 3", (), "cost stage 1: B evaluates to -1 at P=2; costs are non-negative"),
    ("cost rank 0: speed = 0", (), "cost rank 0: speed is 0; a rank's speed is positive"),
])
def test_a_bad_value_in_a_schedule_is_costs_with_its_value(run_cli, tmp_path, extra, params, message):
    path = _pp(tmp_path, extra)
    for command in ("check", "sim"):
        code, _, err = run_cli(command, path, *params)
        assert code == 2 and f"error[costs]: {message}" in err, err


def test_a_condition_for_a_cost_is_still_a_type_error(run_cli, tmp_path):
    code, _, err = run_cli("check", _pp(tmp_path, "memory act = (1 < 2)"))
    assert code == 2 and "error[type]: memory act must be a number, not a condition" in err, err


def test_a_negative_greedy_memory_cap_is_an_order_error(run_cli, tmp_path):
    code, _, err = run_cli("check", _pp(tmp_path, "order greedy(memory = P - 3)"))
    assert code == 2 and "error[order]: order greedy's memory evaluates to -1 at P=2; the cap is non-negative" in err


@pytest.mark.parametrize("setting, message", [
    ("F=-1", "--cost: error[costs]: F must be a non-negative number, not -1"),
    ("X=1", "--cost: error[costs]: --cost 'X=1': unknown key 'X'; expected one of F, B, I, W"),
    ("f=1", "did you mean 'F'?"),
    ("F=abc", "--cost: error[costs]: --cost 'F=abc': expected KEY=NUMBER pairs"),
    ("F=1,F=2", "--cost: error[costs]: --cost 'F=1,F=2': F is given twice"),
    ("F=inf", "--cost: error[costs]: F must be finite, not inf"),
])
def test_every_bad_cost_option_is_costs(run_cli, setting, message):
    code, _, err = run_cli("sim", "1f1b", "--cost", setting)
    assert code == 2 and message in err, err


def test_a_bad_value_in_a_cost_file_is_costs_too(run_cli, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("act = -1\n")
    code, _, err = run_cli("sim", "1f1b", "--costs", str(path))
    assert code == 2 and f"{path}:1:1: error[costs]: act must be a non-negative number, not -1" in err, err


# ---- 2. messages: where, which help, as typed ----
def test_synth_points_at_the_cost_option_not_at_the_defaults(run_cli):
    code, _, err = run_cli("synth", "--param", "P=2,M=2", "--cost", "dispatch=0.3")
    assert code == 2 and err.startswith("--cost: error[usage]: synth models no dispatch time"), err


def test_a_settingless_base_is_left_out_of_the_source(tmp_path):
    assert Costs("the defaults").then(parse_cost_option("F=1")).source == "--cost"
    twice = Costs("the schedule").then(parse_cost_option("F=1")).then(parse_cost_option("B=2"))
    assert twice.source == "--cost"
    assert toml_costs("F = 1\n", "c.toml").then(parse_cost_option("B=2")).source == "c.toml, --cost"


def test_an_option_a_command_does_not_take_points_at_its_help(run_cli):
    code, _, err = run_cli("check", "1f1b", "--cost", "out=1")
    assert code == 2 and "unrecognized arguments: --cost out=1 (see `schedc check --help`)" in err, err
    code, _, err = run_cli("--nosuch")
    assert code == 2 and "(see `schedc --help`)" in err


@pytest.mark.parametrize("argv, message", [
    (("synth", "--param", "P=2,M=2", "--budget", "abc"), "--budget: error[usage]: --budget 'abc': expected a positive"),
    (("prove", "1f1b", "--budget", "1.5"), "--budget: error[usage]: --budget '1.5': expected a positive"),
    (("synth", "--param", "P=2,M=2", "--time-limit", "0"), "--time-limit: error[usage]: --time-limit 0: expected"),
    (("synth", "--param", "P=2,M=2", "--time-limit", "x"), "--time-limit: error[usage]: --time-limit 'x': expected"),
    (("prove", "1f1b", "--timeout", "0"), "--timeout: error[usage]: --timeout 0: expected seconds"),
    (("check", "1f1b", "--engine", "z3", "--timeout", "1e9"), "--timeout: error[usage]: --timeout 1e9: expected seconds"),
    (("check", "1f1b", "--engine", "z3", "--timeout", "0.0"), "--timeout: error[usage]: --timeout 0.0: expected seconds"),
])
def test_budgets_and_time_limits_are_told_as_typed(run_cli, argv, message):
    code, out, err = run_cli(*argv)
    assert code == 2 and err.startswith(message) and out == "", err


def test_a_budget_that_is_not_a_number_is_an_input_error_under_json(run_cli):
    code, out, err = run_cli("prove", "1f1b", "--budget", "abc", "--json")
    assert code == 2 and json.loads(out)["errors"][0]["message"].startswith("--budget 'abc'")


def test_a_time_limit_read_as_typed_is_a_plain_float_elsewhere():
    from schedc.options import Typed, seconds
    t = Typed("1e2")
    assert str(t) == "1e2" and t == 100.0 and f"{t:g}" == "100"
    assert type(pickle.loads(pickle.dumps(t))) is float and type(seconds(t, "--timeout")) is float


# ---- 3. a positive number a float reads as 0 ----
@pytest.mark.parametrize("text, underflows", [
    ("1e-400", True), ("-1e-400", True), ("0." + "0" * 400 + "1", True), ("1_0e-400", True),
    ("0", False), ("0.0", False), ("0e5", False), ("-0.0", False), ("1e-300", False), ("5e-324", False),
])
def test_read_float_tells_an_underflow_from_zero(text, underflows):
    value = read_float(text)
    assert isinstance(value, Underflow) == underflows and (value == 0 or not underflows)
    if underflows:
        assert str(value) == text


@pytest.mark.parametrize("setting", ["bandwidth=1e-400", "F=1e-400", "latency=1e-999"])
def test_a_cost_option_that_underflows_is_refused(run_cli, setting):
    code, _, err = run_cli("sim", "1f1b", "--cost", setting)
    key, value = setting.split("=")
    assert code == 2 and f"--cost: error[costs]: {key} must be 0 or a number a float can hold, not {value}" in err
    if key == "bandwidth":
        assert "(an infinite bandwidth)" in err


def test_zero_and_small_costs_are_still_read(run_cli):
    for setting in ("bandwidth=0", "F=0", "latency=1e-300,bandwidth=inf"):
        code, _, err = run_cli("sim", "1f1b", "--cost", setting)
        assert code == 0, err


def test_cost_files_and_profiles_refuse_an_underflow_at_its_key():
    with pytest.raises(SchedcError) as info:
        toml_costs("F = 1\n[channel.\"0->1\"]\nbandwidth = 1e-400\n", "c.toml")
    d = info.value.diagnostics[0]
    assert d.code == "costs" and d.span.line == 3 and "not 1e-400" in d.message
    with pytest.raises(SchedcError) as info:
        profile_costs(json.dumps({"stages": {"0": {"F": 1}}}).replace("1}", "1e-400}"), "p.json")
    d = info.value.diagnostics[0]
    assert d.code == "costs" and d.message.startswith("stages.0.F: must be 0 or a number a float can hold, not 1e-400")


def test_sizes_and_schedule_decimals_refuse_an_underflow(run_cli, tmp_path):
    code, _, err = run_cli("check", "1f1b", "--memory-limit", "1e-400")
    assert code == 2 and "--memory-limit: error[usage]: --memory-limit '1e-400': 1e-400 is too small" in err, err
    from schedc.units import rate
    with pytest.raises(SchedcError, match="too small for a float"):
        rate("1e-400GB/s", "[link] bandwidth")
    code, _, err = run_cli("check", _pp(tmp_path, "cost F = 0." + "0" * 400 + "1"))
    assert code == 2 and "error[too-large]: the number 0.0000000000... is too small for a float" in err, err
