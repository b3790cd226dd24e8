"""Issue 35's bad-input findings, each from its reproducer: internal errors (exit 4) on bad input, and
the files and positions errors name (a send to no stage beside a collective, a CSV cell past the
csv module's limit, IR JSON out of range, half a surrogate pair, CR-only line ends, output names
that collide, the detailed checks' `too-large` error)."""
from __future__ import annotations

import json
import re
import warnings
from dataclasses import replace

import pytest

import schedc
from schedc.commands.common import safe_stem
from schedc.ir import StageMemory

# ---- a send with no stage on the other end, in a job with a collective ----
SEND_TO_NO_STAGE = {
    "tied.pp": "schedule t {\n  stages 2\n  microbatches 1\n  rank 0: 1SEND_F0\n  rank 1: 0REDUCE_TIED\n}\n",
    "replicas.pp": "schedule t {\n  stages 2\n  microbatches 1\n  replicas 2\n  rank 0: 1SEND_F0\n  rank 1: 0F0\n}\n",
    "tied.csv": "9SEND_F6\r\n0REDUCE_TIED\r\n",
}


@pytest.mark.parametrize("name", sorted(SEND_TO_NO_STAGE))
def test_a_send_to_no_stage_beside_a_collective_is_bad_comm(run_cli, tmp_path, name):
    """The job's channels were paired before its replicas were linted: IndexError, exit 4. Now it is
    the `bad-comm` finding it is without a collective, at the send."""
    path = tmp_path / name
    path.write_text(SEND_TO_NO_STAGE[name], newline="")
    code, out, err = run_cli("check", str(path))
    assert code == 1, err
    line = 1 if name.endswith(".csv") else SEND_TO_NO_STAGE[name].splitlines().index(
        next(ln for ln in SEND_TO_NO_STAGE[name].splitlines() if "SEND_F" in ln)) + 1
    text = out + err
    assert f"{path}:{line}:" in text and "error[bad-comm]" in text and "to talk to" in text, text
    code, out, _ = run_cli("check", str(path), "--json")
    assert code == 1 and [e["code"] for e in json.loads(out)["errors"]] == ["bad-comm"]


# ---- a CSV cell past the csv module's field limit ----
@pytest.mark.parametrize("cell", ["x" * 140_000, '"' + "x" * 140_000 + '"'], ids=["plain", "quoted"])
def test_a_csv_cell_past_the_field_limit_is_a_csv_error_at_it(run_cli, tmp_path, cell):
    path = tmp_path / "long.csv"
    path.write_text(f"0F0,{cell}\r\n", newline="")
    code, out, err = run_cli("check", str(path))
    assert code == 2 and err.startswith(f"{path}:1:5: error[csv]: rank 0, step 1: a cell of ") \
        and "131,072" in err, err


# ---- IR JSON out of range ----
def _ir(run_cli, tmp_path, edit, name="ir.json"):
    path = tmp_path / name
    assert run_cli("export", "gpipe", "--param", "P=2,M=2", "--to", "ir-json", "-o", str(path))[0] == 0
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("limits", [{"5": 10}, {"-1": 10}, {"2": 1}, {"1e3": 1}])
def test_an_ir_memory_limit_of_a_rank_that_does_not_exist_is_refused(run_cli, tmp_path, limits):
    path = _ir(run_cli, tmp_path, lambda d: d["annotations"].__setitem__("memory_limit", limits))
    for command in ("check", "sim"):
        code, out, err = run_cli(command, str(path))
        assert code == 2 and "error[ir-json]" in err and "'annotations.memory_limit' names rank" in err, err


@pytest.mark.parametrize("edit", [
    lambda d: [m.__setitem__("act", 1e308) for m in d["annotations"]["stage_memory"]],
    lambda d: d["annotations"]["stage_costs"][0].__setitem__("F", 1e308),
    lambda d: d["annotations"].__setitem__("latency", 2.0 ** 63),
    lambda d: d["annotations"].__setitem__("memory_limit", {"0": 1e308}),
    lambda d: d["annotations"]["stage_memory"][0].__setitem__("act", -1),
])
def test_ir_numbers_beyond_what_a_schedule_takes_are_refused(run_cli, tmp_path, edit):
    """A .pp refuses a number past 2^62 (schedc/expr.py); IR JSON near 1e308 gave `inf` peaks and a
    raw numpy warning."""
    path = _ir(run_cli, tmp_path, edit)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = run_cli("check", str(path))
    assert code == 2 and "error[ir-json]" in err and "0..2^62" in err and "inf" not in out, (out, err)


@pytest.mark.parametrize("edit,says", [
    ({"version": 2}, "'version' is 2: this schedc reads schedc IR version 1 only"),
    ({"version": "1"}, "'version' must be an integer, not a string"),
    ({"level": "weird"}, "'level' must be compute or comms, not 'weird'"),
    ({"level": "comms"}, "'level' is comms, but the actions are at the compute level"),
    ({"lines": "x"}, "'lines' must be a list, not a string"),
    ({"lines": [[1, 2]]}, "'lines' needs one list per rank (2), not 1"),
    ({"lines": [[1], [1]]}, "'lines' of rank 0 needs one entry per step (4), not 1"),
    ({"lines": [[1, 2, 3, 0], [None] * 4]}, "'lines' holds source line numbers from 1 or null, not 0"),
    ({"lines": [["3"] * 4, [None] * 4]}, "'lines[0][0]' must be an integer, not a string"),
    ({"ranks": 2.5}, "'ranks' must be an integer, not 2.5"),
    ({"forward_only": 1}, "'forward_only' must be true or false, not 1"),
    ({"actions": None}, "'actions' must be a list, not null"),
    ({"annotations": {"stage_costs": [{"F": "1"}]}}, "'annotations.stage_costs[0].F' must be a number, not a string"),
])
def test_ir_fields_are_validated_and_told_in_words(run_cli, tmp_path, edit, says):
    """`version`, `level` and `lines` were not read at all (version 2, level "weird", lines "x" were
    accepted), and a wrong type read "'F' must be (<class 'int'>, <class 'float'>)"."""
    path = _ir(run_cli, tmp_path, lambda d: d.update(edit))
    code, out, err = run_cli("check", str(path))
    assert code == 2 and f": error[ir-json]: cannot read schedc IR JSON: {says}" in err, err
    assert err.startswith(f"{path}:"), err


@pytest.mark.parametrize("edit,key,value", [
    (lambda d: d["params"].__setitem__("P", "__import__('os')"), "params.P", '"__import__'),
    (lambda d: d["params"].__setitem__("a b", 1.5), 'params["a b"]', "1.5"),
    (lambda d: d["annotations"]["stage_costs"][1].__setitem__("B", "2"), "annotations.stage_costs[1].B", '"2"'),
    (lambda d: d["actions"][1].__setitem__(2, 7), "actions[1][2]", "7"),
    (lambda d: d.__setitem__("ranks", "2"), "ranks", '"2"'),
])
def test_an_ir_value_error_names_its_key_and_points_at_it(run_cli, tmp_path, edit, key, value):
    """Trial 2, item 18: `'a parameter' must be an integer` at 1:1 named neither the key nor its
    place; the error names the key path and its caret is under the value, as json reads it."""
    path = _ir(run_cli, tmp_path, edit)
    path.write_text(json.dumps(json.loads(path.read_text()), indent=1))  # (one value a line: a line to find)
    code, out, err = run_cli("check", str(path))
    head = err.splitlines()[0]
    assert code == 2 and f"error[ir-json]: cannot read schedc IR JSON: '{key}' must be" in head, err
    line, column = map(int, head[len(str(path)) + 1:].split(":")[:2])
    assert path.read_text().splitlines()[line - 1][column - 1:].startswith(value), (head, line, column)


def test_an_ir_file_without_version_level_or_lines_still_reads(run_cli, tmp_path):
    path = _ir(run_cli, tmp_path, lambda d: [d.pop(k) for k in ("version", "level", "lines")])
    assert run_cli("check", str(path))[0] == 0
    path = _ir(run_cli, tmp_path, lambda d: d.update(lines=[[None] * 4, [1, 2, 3, 4]]))
    assert run_cli("check", str(path))[0] == 0


def test_a_speed_that_overflows_the_times_is_a_clean_error_without_warnings(run_cli, tmp_path):
    path = _ir(run_cli, tmp_path, lambda d: d["annotations"].__setitem__("rank_speed", [1e-308, 1e-308]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = run_cli("sim", str(path))
    assert code == 2 and "error[costs]: the simulated times overflow" in err, err


def test_a_speed_of_zero_is_refused_where_it_is_written(run_cli, tmp_path):
    """`cost rank 0: speed = 0` passed `check` and failed `sim` with an unlocated `costs` error: the
    file's line now, and the IR JSON's field, before any command runs."""
    src = tmp_path / "s.pp"
    src.write_text("schedule s(P = 2, M = 2) {\n  stages P\n  cost rank 0: speed = 0\n"
                   "  rank r { for m in 0 .. M { F(r, m) }\n for m in 0 .. M { B(r, m) } }\n}\n")
    for command in ("check", "sim"):
        code, _, err = run_cli(command, str(src))
        assert code == 2 and f"{src}:3:24: error[costs]: cost rank 0: speed is 0; a rank's speed is positive" in err, err
    path = _ir(run_cli, tmp_path, lambda d: d["annotations"].__setitem__("rank_speed", [0, 1]))
    code, _, err = run_cli("check", str(path))
    assert code == 2 and "error[ir-json]" in err and "'annotations.rank_speed[0]' must be positive" in err, err


def test_messages_whose_times_overflow_are_a_clean_error_without_warnings(run_cli, tmp_path):
    """The one-pass simulator sends messages of a described model's sizes: a latency near the floats'
    end made numpy's scalar add warn before the clean error (fuzz seed 113)."""
    setup = tmp_path / "setup.toml"
    setup.write_text('[model]\npreset = "gpt3-1.3b"\n[hardware]\npreset = "a100-80gb"\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = run_cli("sim", "interleaved_zero_bubble", "--param", "P=4,V=1", "--cost",
                                 "F=1e308,B=1e308,latency=1e308", "--setup", str(setup))
    assert code == 2 and "error[costs]: the simulated times overflow" in err, err


def test_a_report_dict_is_strict_json_even_for_sizes_past_the_floats():
    program = schedc.load("gpipe", {"P": 2, "M": 2})
    huge = replace(program, annotations=replace(program.annotations, stage_memory=(StageMemory(act=1e308),) * 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc = schedc.check(huge).to_dict()
    json.dumps(doc, allow_nan=False)
    assert doc["peak_memory"] == [None, None]


# ---- half a surrogate pair ----
@pytest.mark.parametrize("name", ["a\ud800b", "\udc00", "\udc7f"])
def test_a_json_name_with_half_a_surrogate_pair_is_an_input_error(run_cli, tmp_path, name):
    path = _ir(run_cli, tmp_path, lambda d: d.__setitem__("schedule", name))
    assert "\\ud" in path.read_text()  # (json.dumps escapes it)
    for command in (["check"], ["sim"], ["compile", "-o", str(tmp_path / "out")]):
        code, out, err = run_cli(*command, str(path))
        assert code == 2 and "error[ir-json]: a string holds half a surrogate pair" in err, err
    assert not (tmp_path / "out").exists()


def test_a_whole_surrogate_pair_reads_and_so_does_a_byte_that_is_not_utf8():
    """A file name such as b"\\xff.csv" is "\\udcff.csv" in Python, and in the IR JSON of its program."""
    from schedc.inputs import loads_json
    assert loads_json('["\\ud83d\\ude00", "\\\\ud800", "\\udcff"]', "x.json", "ir-json") == \
        ["\U0001F600", "\\ud800", "\udcff"]


# ---- CR-only line ends ----
CR_ONLY = ("schedule t {\r  stages 2  # two stages\r  microbatches 1\r  rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\r"
           "  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1X\r}\r")


@pytest.mark.parametrize("ends", ["\r", "\r\n", "\n"])
def test_a_comment_ends_at_a_lone_cr_and_positions_count_it_as_a_line_end(run_cli, tmp_path, ends):
    path = tmp_path / "cr.pp"
    path.write_bytes(CR_ONLY.replace("\r", ends).encode())
    code, out, err = run_cli("check", str(path))
    assert code == 2 and err.startswith(f"{path}:5:37: error[bad-action]: invalid action '1X'"), err
    assert "\n   5 |   rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1X\n" in err
    path.write_bytes(CR_ONLY.replace(" 1X", "").replace("\r", ends).encode())
    assert run_cli("check", str(path))[0] == 0


# ---- output names ----
def test_different_names_never_share_output_files(run_cli, tmp_path):
    out = tmp_path / "out"
    for i, name in enumerate(["a b", "a_b", "a/b", "x" * 150, "x" * 100]):
        path = _ir(run_cli, tmp_path, lambda d, name=name: d.__setitem__("schedule", name), f"in{i}.json")
        assert run_cli("compile", str(path), "-o", str(out))[0] == 0
    assert len(list(out.iterdir())) == 5 * 4
    assert safe_stem("a_b") == "a_b" and safe_stem("gpipe") == "gpipe"
    names = ["a b", "a_b", "a/b", "a.b.", "a.b", "", "..", "a_b--c8687a08", safe_stem("a b")]
    assert len({safe_stem(n) for n in set(names)}) == len(set(names)) == 8
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]{1,100}", safe_stem(n)) for n in names + ["x" * 300])


# ---- the detailed checks' too-large error names the file ----
def test_the_detailed_checks_too_large_error_names_the_file(run_cli, tmp_path, monkeypatch):
    from schedc import report
    monkeypatch.setattr(report, "MAX_DETAILED_ACTIONS", 1)
    path = tmp_path / "tied.pp"  # a collective joins two ranks: only the detailed checks decide
    path.write_text("schedule t {\n  stages 2\n  microbatches 1\n  rank 0: 0F0 0B0 0REDUCE_TIED\n"
                    "  rank 1: 1F0 1B0 1REDUCE_TIED\n}\n")
    code, out, err = run_cli("check", str(path))
    assert code == 2 and err.startswith(f"{path}: error[too-large]: "), err


@pytest.mark.parametrize("line, said", [
    ("cost F = 1, F = 2", "'F' is set twice in this `cost` line"),
    ("memory act = 1, act = 2", "'act' is set twice in this `memory` line"),
    ("order greedy(memory = 2, memory = 3)", "order greedy's 'memory' is given twice"),
])
def test_a_setting_given_twice_is_an_error_not_a_silent_choice(run_cli, tmp_path, line, said):
    src = tmp_path / "twice.pp"
    src.write_text(f"schedule t(P = 2, M = 2) {{\n  stages P\n  {line}\n"
                   "  rank r { for m in 0 .. M { F(r, m) }\n for m in 0 .. M { B(r, m) } }\n}\n")
    code, _, err = run_cli("check", str(src))
    assert code == 2 and "error[duplicate-decl]" in err and said in err and f"{src}:3:" in err, err
    code, _, err = run_cli("sim", "1f1b", "--param", "P=2,M=2", "--cost", "F=1,B=2,F=3")
    assert code == 2 and "F is given twice" in err, err
