"""Inputs as people hold them (issue 33, item 3): a PyTorch CSV whose P, M, V and placement are
stated (`--param`, `--placement`), schedules read from standard input (`-`), `compare` over a CSV
beside built-ins, and `--json` on compile, export, viz and run.

The CSV case is torch 2.13's invalid `Schedule1F1B._get_pipeline_order()` (its last rank starts at
F1 and runs F(M)): read with M guessed from the largest microbatch, most of its errors blame the
other ranks for a "missing" microbatch M; with P and M stated, every error is on the last rank, at
its row and column.
"""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from schedc.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run_in(argv, stdin: str | None = None, monkeypatch=None):
    """(exit code, stdout, stderr) of `schedc argv`, with `stdin` as standard input."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8"))
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def torch_1f1b(tmp_path_factory):
    """torch's own 1F1B IR at P=3, M=6, written as torch's `_dump_csv` writes (None: an empty cell)."""
    S = pytest.importorskip("torch.distributed.pipelining.schedules")
    from test_torch_oracle import MockStage
    P, M = 3, 6
    order = S.Schedule1F1B(MockStage(0, P, P, 0), M).pipeline_order
    with pytest.raises(AssertionError, match="Rank 2, step 1"):  # torch's validator: rank 2 is at fault
        S._validate_schedule(order, P, P, M)
    path = tmp_path_factory.mktemp("torch") / "torch_1f1b.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        for r in range(P):
            writer.writerow(["" if a is None else str(a) for a in order[r]])
    return path


def _errors(out: str) -> list[dict]:
    return json.loads(out)["errors"]


# ---- a CSV states its P, M, V and placement ----
def test_guessed_microbatches_blame_ranks_that_are_not_at_fault(torch_1f1b, run_cli):
    """The reproducer: without P and M, M is read as 7 and ranks 0 and 1 are blamed, with no position."""
    code, out, _ = run_cli("check", str(torch_1f1b), "--json")
    assert code == 1
    errors = _errors(out)
    assert json.loads(out)["microbatches"] == 7
    assert {d["rank"] for d in errors} == {0, 1, 2}
    assert any("line" not in d for d in errors)


def test_stated_p_and_m_blame_the_rank_at_fault_at_its_cell(torch_1f1b, run_cli):
    code, out, err = run_cli("check", str(torch_1f1b), "--param", "P=3,M=6", "--placement", "loop", "--json")
    assert code == 1, err
    report = json.loads(out)
    assert (report["ranks"], report["microbatches"], report["params"]) == (3, 6, {"P": 3, "M": 6})
    errors = report["errors"]
    assert errors and all(d["rank"] == 2 and "line" in d and "column" in d for d in errors), errors
    line = torch_1f1b.read_text().splitlines()[2]
    column = line.index("2F6") + 1
    assert any(d["code"] == "bad-index" and (d["line"], d["column"]) == (3, column) and "microbatch 6" in d["message"]
               for d in errors), errors
    code, out, err = run_cli("check", str(torch_1f1b), "--param", "P=3,M=6")
    assert f"torch_1f1b.csv:3:{column}: error[bad-index]: rank 2, step 10: F(2,6)" in out + err


def test_a_stated_p_that_is_not_the_rows_is_an_error_naming_the_file(torch_1f1b, run_cli):
    code, _, err = run_cli("check", str(torch_1f1b), "--param", "P=4")
    assert code == 2
    assert "error[csv]: P=4 is stated, but the CSV has 3 row(s), one per rank" in err and "torch_1f1b.csv" in err


def test_a_csv_states_p_m_and_v_only(torch_1f1b, run_cli):
    code, _, err = run_cli("check", str(torch_1f1b), "--param", "MM=6")
    assert code == 2 and "error[unknown-param]" in err and "did you mean 'M'" in err
    code, _, err = run_cli("check", str(torch_1f1b), "--param", "M=0")
    assert code == 2 and "error[range]" in err


def test_a_stated_placement_finds_a_stage_on_the_wrong_rank_at_its_cell(tmp_path, run_cli):
    path = tmp_path / "zbv.csv"
    assert run_cli("export", "zbv", "--param", "P=2,M=2", "--to", "torch-csv", "--level", "compute",
                   "-o", str(path))[0] == 0
    code, out, _ = run_cli("check", str(path), "--placement", "vshape", "--param", "P=2,M=2,V=2")
    assert code == 0, out
    code, out, _ = run_cli("check", str(path), "--placement", "loop", "--json")
    assert code == 1
    wrong = [d for d in _errors(out) if d["code"] == "wrong-rank"]
    assert wrong and all("line" in d and d["line"] == d["rank"] + 1 for d in wrong)


def test_stated_stages_per_rank_make_a_missing_stage_an_error(tmp_path, run_cli):
    path = tmp_path / "one.csv"
    path.write_text("0F0,0B0\n1F0,1B0\n")
    assert run_cli("check", str(path))[0] == 0
    code, out, _ = run_cli("check", str(path), "--param", "V=2", "--json")
    assert code == 1 and json.loads(out)["stages"] == 4


def test_placement_is_for_csv_inputs(run_cli):
    code, _, err = run_cli("check", "1f1b", "--placement", "loop")
    assert code == 2 and "--placement applies to PyTorch CSVs only" in err


@pytest.mark.parametrize("command", ["check", "compile", "export", "compare"])
def test_legacy_notation_is_for_csv_inputs(run_cli, tmp_path, command):
    """`--notation legacy` on a .pp was read as if not given; it is refused as `--placement` is."""
    extra = ["--to", "ir-json"] if command == "export" else ["-o", str(tmp_path)] if command == "compile" else []
    code, out, err = run_cli(command, "1f1b", "--notation", "legacy", *extra)
    assert code == 2 and out == "", out
    assert "--notation: error[usage]: --notation legacy applies to PyTorch CSVs only" in err
    assert "is a schedc schedule" in err and "1f1b.pp" in err
    assert run_cli("check", "1f1b", "--notation", "current")[0] == 0


def test_legacy_notation_still_reads_a_csv(torch_1f1b, run_cli):
    code, _, err = run_cli("check", str(torch_1f1b), "--notation", "legacy")
    assert "--notation" not in err and code in (0, 1)


# ---- one --param list for several inputs ----
@pytest.mark.parametrize("argv, named", [
    (["compare", "1f1b", "gpipe", "--param", "p=2,m=2"], "--param p, m (1f1b takes M, P; gpipe takes M, P); "
                                                         "did you mean 'P', 'M'?"),
    (["check", "1f1b", "gpipe", "--param", "Q=2"], "--param Q (1f1b takes M, P; gpipe takes M, P)"),
    (["compare", "1f1b", "--param", "P=2,Q=2"], "--param Q (1f1b takes M, P)"),
    (["compare", "--param", "W=2"], "--param W (1f1b takes M, P; dualpipe takes M, P;"),
])
def test_a_param_no_input_takes_is_an_error_before_any_work(run_cli, argv, named):
    """With several inputs each takes the names it declares; one that none declares was ignored
    (exit 0, the defaults used): it is `unknown-param`, naming it and the inputs, and nothing ran."""
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "", out
    assert err.startswith("--param: error[unknown-param]: no input takes " + named), err


def test_a_param_some_input_takes_is_fine(torch_1f1b, run_cli):
    code, out, err = run_cli("check", "1f1b", "interleaved_1f1b", "--param", "P=2,M=4,V=2", "--json")
    assert code == 0, err
    assert [json.loads(line)["params"] for line in out.splitlines()] == [{"P": 2, "M": 4}, {"P": 2, "V": 2, "M": 4}]
    code, _, err = run_cli("check", "1f1b", str(torch_1f1b), "--param", "P=3,V=1")  # V: the CSV's
    assert "unknown-param" not in err
    code, out, err = run_cli("check", "1f1b", "nosuch.pp", "--param", "Q=2")  # unreadable: its own error
    assert code == 2 and "error[io]" in err and "unknown-param" not in err and "1f1b:" in out


def test_an_ir_json_input_takes_no_param(tmp_path, run_cli):
    path = tmp_path / "one.json"
    assert run_cli("export", "1f1b", "--to", "ir-json", "-o", str(path))[0] == 0
    code, _, err = run_cli("check", str(path), "--param", "P=2")
    assert code == 2 and "error[usage]: --param applies to .pp schedules and PyTorch CSVs only" in err
    other = tmp_path / "two.json"
    other.write_text(path.read_text())
    code, _, err = run_cli("check", str(path), str(other), "--param", "P=2")
    assert code == 2 and f"no input takes --param P ({path} takes none; {other} takes none)" in err
    assert run_cli("check", str(path), "1f1b", "--param", "P=2")[0] == 0


# ---- standard input ----
PP = "schedule tiny {\n  rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\n  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n}\n"


@pytest.mark.parametrize("argv", [["check", "-"], ["sim", "-"], ["export", "-", "--to", "ir-json"],
                                  ["compare", "-", "1f1b", "--param", "P=2,M=1"]])
def test_a_schedule_read_from_standard_input(argv, monkeypatch):
    code, out, err = run_in(argv, PP, monkeypatch)
    assert code == 0, err
    assert "tiny" in out or "<stdin>" in out


def test_compile_and_viz_read_standard_input(tmp_path, monkeypatch):
    code, out, err = run_in(["compile", "-", "-o", str(tmp_path / "b")], PP, monkeypatch)
    assert code == 0 and (tmp_path / "b" / "tiny.csv").exists(), err
    code, out, err = run_in(["viz", "-", "-o", str(tmp_path / "t.svg")], PP, monkeypatch)
    assert code == 0 and (tmp_path / "t.svg").exists(), err


def test_standard_input_errors_name_stdin_with_line_and_column(monkeypatch):
    code, _, err = run_in(["check", "-"], "schedule x {\n  rank 0: 0F0 0Q0\n}\n", monkeypatch)
    assert code == 2 and "<stdin>:2:15: error[bad-action]" in err
    code, out, _ = run_in(["check", "-", "--format", "torch-csv", "--param", "M=1"], "0F0,0B0\n0F1\n", monkeypatch)
    assert code == 1 and "<stdin>:2:1: error[bad-index]: rank 1, step 0: F(0,1): microbatch 1" in out


def test_a_csv_on_standard_input_takes_format_and_stated_shape(torch_1f1b, monkeypatch):
    code, out, _ = run_in(["check", "-", "--format", "torch-csv", "--param", "P=3,M=6", "--json"],
                          torch_1f1b.read_text(), monkeypatch)
    assert code == 1 and {d["rank"] for d in _errors(out)} == {2}
    assert all(d["file"] == "<stdin>" for d in _errors(out))


def test_a_sweep_over_standard_input_reads_it_once(monkeypatch):
    code, out, err = run_in(["check", "-", "--sweep", "P=2..3", "--param", "M=4"],
                            (ROOT / "schedules" / "1f1b.pp").read_text(), monkeypatch)
    assert code == 0, out + err


def test_standard_input_is_read_once(monkeypatch):
    code, _, err = run_in(["check", "-", "-"], PP, monkeypatch)
    assert code == 2 and "standard input (-) is given more than once" in err


# ---- pipes given as paths: `<(cmd)`, a FIFO ----
def _fifo_with_writer(path: Path, text: str) -> threading.Thread:
    """A FIFO at `path` whose writer (a thread) writes `text` as soon as a reader opens it."""
    os.mkfifo(path)
    writer = threading.Thread(target=path.write_text, args=(text,), daemon=True)
    writer.start()
    return writer


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_pipe_given_as_a_path_is_read_whole_and_once(tmp_path, run_cli):
    """A sweep loads the input at each instance: the pipe's text is read once and kept (a second
    read would find it empty); errors name the pipe's path."""
    one = tmp_path / "one"
    writer = _fifo_with_writer(one, (ROOT / "schedules" / "1f1b.pp").read_text())
    code, out, err = run_cli("check", str(one), "--sweep", "P=2..4", "--param", "M=4")
    writer.join(5)
    assert code == 0, out + err
    assert "3 of 3 instances hold" in out
    bad = tmp_path / "bad"
    writer = _fifo_with_writer(bad, "0F0,0B0\n0F1\n")
    code, out, _ = run_cli("check", str(bad), "--format", "torch-csv", "--param", "M=1")
    writer.join(5)
    assert code == 1 and f"{bad}:2:1: error[bad-index]: rank 1, step 0: F(0,1): microbatch 1" in out


@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="no bash for a process substitution")
def test_a_process_substitution_is_read(tmp_path):
    """`schedc check <(cat 1f1b.pp)` as a shell runs it: `/dev/fd/63`, a pipe, not "not a file"."""
    script = f"{sys.executable} -m schedc check <(cat {ROOT / 'schedules' / 'gpipe.pp'}) --param P=2,M=3"
    done = subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("gpipe: 2 ranks, 2 stages, 3 microbatches")


def test_an_empty_path_is_said_to_be_empty(run_cli):
    code, _, err = run_cli("check", "")
    assert code == 2 and err.startswith("input: error[io]: the path is empty"), err


# ---- compare over mixed inputs ----
def test_compare_ranks_a_csv_beside_built_ins_with_one_param(tmp_path, run_cli):
    path = tmp_path / "mine.csv"
    assert run_cli("export", "1f1b", "--param", "P=4,M=8", "--to", "torch-csv", "--level", "compute",
                   "-o", str(path))[0] == 0
    code, out, err = run_cli("compare", str(path), "1f1b", "zbv", "--param", "P=4,M=8", "--json")
    assert code == 0, err
    rows = {r["schedule"]: r for r in map(json.loads, out.splitlines())}
    assert rows[str(path)]["params"] == {"P": 4, "M": 8} and rows[str(path)]["makespan"] == rows["1f1b"]["makespan"]
    assert rows["zbv"]["skipped"] is None
    code, out, err = run_cli("compare", str(path), "interleaved_1f1b", "--param", "P=4,M=8,V=2", "--json")
    assert code == 0 and all(json.loads(r)["skipped"] is None for r in out.splitlines()), out  # V: not the CSV's
    code, _, err = run_cli("compare", str(path), "1f1b", "--param", "P=2,M=8")
    assert code == 2 and "P=2 is stated, but the CSV has 4 row(s)" in err


def test_compare_takes_semantics_and_forward_only(tmp_path, run_cli):
    code, out, err = run_cli("compare", "1f1b", "zb_h1", "--param", "P=2,M=4", "--semantics", "gloo", "--json")
    assert code == 0, err
    assert len(out.splitlines()) == 2
    code, _, err = run_cli("compare", "1f1b", "--semantics", "gloo+nosuch")
    assert code == 2
    inference = tmp_path / "inference.csv"
    inference.write_text("0F0,0SEND_F0,0F1,0SEND_F1\n1RECV_F0,1F0,1RECV_F1,1F1\n")
    code, out, err = run_cli("compare", str(inference), "--forward-only", "--json")
    assert code == 0, err
    assert json.loads(out)["skipped"] is None
    code, out, _ = run_cli("compare", str(inference), "--json")
    assert json.loads(out)["skipped"].startswith("fails its checks")


# ---- --json everywhere ----
def test_compile_json_lists_the_outputs(tmp_path, run_cli):
    code, out, _ = run_cli("compile", "1f1b", "--param", "P=2,M=2", "-o", str(tmp_path), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["ok"] is True and doc["errors"] == [] and len(doc["outputs"]) == 4
    assert all(p.startswith(str(tmp_path)) for p in doc["outputs"])
    bad = tmp_path / "bad.pp"
    bad.write_text("schedule bad {\n  rank 0: 0B0 0F0\n}\n")
    code, out, _ = run_cli("compile", str(bad), "-o", str(tmp_path / "x"), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["errors"] and doc["outputs"] == []


def test_export_json_holds_the_text_or_the_file(tmp_path, run_cli):
    code, out, _ = run_cli("export", "1f1b", "--param", "P=2,M=2", "--to", "torch-csv", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["ok"] and doc["text"].startswith("0UNSHARD,0F0") and doc["outputs"] == []
    code, out, _ = run_cli("export", "1f1b", "--param", "P=2,M=2", "--to", "torch-csv", "--json",
                           "-o", str(tmp_path / "a.csv"))
    assert code == 0 and json.loads(out)["outputs"] == [str(tmp_path / "a.csv")]
    bad = tmp_path / "bad.pp"
    bad.write_text("schedule bad {\n  rank 0: 0B0 0F0\n}\n")
    code, out, _ = run_cli("export", str(bad), "--to", "torch-csv", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["errors"] and "text" not in doc


def test_viz_json_is_the_report_and_the_picture(tmp_path, run_cli):
    code, out, _ = run_cli("viz", "1f1b", "--param", "P=2,M=2", "-o", str(tmp_path / "t.svg"), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["ok"] and doc["outputs"] == [str(tmp_path / "t.svg")]
    code, out, err = run_cli("viz", "nosuch", "-o", str(tmp_path / "t.svg"), "--json")
    assert code == 2 and json.loads(out)["input_error"] is True


def test_run_json_without_running(tmp_path, run_cli):
    bad = tmp_path / "bad.pp"
    bad.write_text("schedule bad {\n  rank 0: 0B0 0F0\n}\n")
    code, out, _ = run_cli("run", str(bad), "--model", "examples.mlp:build_stages", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["steps"] == []
    code, out, _ = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                           "--print-torchrun", "-o", str(tmp_path), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["torchrun"][0].startswith("torchrun") and doc["outputs"]


@pytest.mark.slow
def test_run_json_is_the_runs_steps_and_losses(tmp_path, run_cli):
    pytest.importorskip("torch")
    profile = tmp_path / "profile.json"
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                             "--steps", "2", "--timeout", "60", "--profile", str(profile), "--json")
    assert code == 0, err
    doc = json.loads(out)  # standard output is the JSON alone
    assert doc["ok"] is True and doc["verified"] == "gloo" and doc["exit_codes"] == [0, 0]
    assert [s["step"] for s in doc["steps"]] == [1, 2]
    assert all(s["time_ms"] > 0 and s["loss"] == s["loss"] for s in doc["steps"])
    assert doc["steps_timed"] == 1 and doc["median_step_ms"] > 0
    assert doc["outputs"] == [str(profile)] and profile.exists()
