"""The CLI as a user runs it: commands, outputs on disk, JSON, exit codes, errors."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import schedc
from schedc.interop.torch_csv import read_torch_csv

BAD_ORDER = "schedule bad {\n  rank 0: 0F0 0B0\n  rank 1: 1B0 1F0\n}\n"


def test_list_names_every_builtin(run_cli):
    code, out, _ = run_cli("list")
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    on_disk = sorted(p.stem for p in (Path(schedc.__file__).resolve().parent.parent / "schedules").glob("*.pp"))
    assert names == on_disk and {"1f1b", "gpipe", "interleaved_1f1b", "looped_bfs", "dualpipev"} <= set(names)
    code, out, _ = run_cli("list", "--json")
    rows = {r["name"]: r for r in map(json.loads, out.splitlines())}
    assert rows["interleaved_1f1b"]["params"] == {"P": 4, "V": 2, "M": 8}  # numbers, not their text


def test_compile_writes_ir_and_csv(run_cli, tmp_path):
    code, out, err = run_cli("compile", "1f1b", "--param", "P=4", "--param", "M=8", "-o", str(tmp_path / "build"))
    assert code == 0, err
    assert "4 ranks, 4 stages, 8 microbatches" in out and "peak activation per rank: [4, 3, 2, 1]" in out
    ir = json.loads((tmp_path / "build" / "1f1b.json").read_text())
    assert ir["format"] == "schedc-ir" and ir["ranks"] == 4 and len(ir["actions"]) == 4
    assert ir["params"] == {"P": 4, "M": 8}
    csv_text = (tmp_path / "build" / "1f1b.csv").read_bytes().decode()
    prog = read_torch_csv(csv_text).to_program()
    assert prog.level == "comms" and schedc.check(prog).ok
    # the IR file loads back to the same program
    again = schedc.load(str(tmp_path / "build" / "1f1b.json"))
    assert again.ranks == schedc.load("1f1b", {"P": 4, "M": 8}).ranks


def test_compile_of_a_file_path(run_cli, tmp_path):
    root = Path(schedc.__file__).resolve().parent.parent
    code, out, err = run_cli("compile", str(root / "schedules" / "interleaved_1f1b.pp"), "--param", "P=4",
                             "--param", "V=2", "--param", "M=8", "-o", str(tmp_path))
    assert code == 0, err
    assert (tmp_path / "interleaved_1f1b.json").exists() and (tmp_path / "interleaved_1f1b.csv").exists()


def test_compile_refuses_a_failing_schedule_and_writes_nothing(run_cli, tmp_path):
    src = tmp_path / "bad.pp"
    src.write_text(BAD_ORDER)
    out_dir = tmp_path / "out"
    code, out, err = run_cli("compile", str(src), "-o", str(out_dir))
    assert code == 1
    assert "error[order]" in err and "nothing written" in err
    assert not out_dir.exists() or list(out_dir.iterdir()) == []
    code, _, _ = run_cli("compile", str(src), "-o", str(out_dir), "--force")
    assert code == 1 and (out_dir / "bad.json").exists()
    assert not [p for p in out_dir.iterdir() if p.name.endswith(".tmp")]


def test_check_json_lines_in_order(run_cli, tmp_path):
    bad = tmp_path / "bad.pp"
    bad.write_text(BAD_ORDER)
    csv_path = tmp_path / "one.csv"
    # (one --param list: the CSV takes P and M as what it states, so it is written for them)
    csv_path.write_text(schedc.to_torch_csv(schedc.load("gpipe", {"P": 2, "M": 3}), "compute"))
    code, out, _ = run_cli("check", "1f1b", str(bad), str(csv_path), "--json", "--param", "P=2", "--param", "M=3")
    assert code == 1
    reports = [json.loads(line) for line in out.splitlines()]
    assert [r["ok"] for r in reports] == [True, False, True]
    first = reports[0]
    for key in ("file", "schedule", "params", "ranks", "stages", "microbatches", "ok", "errors", "deadlock",
                "peak_activation"):
        assert key in first
    assert first["params"] == {"P": 2, "M": 3} and first["peak_activation"] == [2, 1]
    err = reports[1]["errors"][0]
    assert (err["code"], err["line"], err["column"], err["rank"], err["step"]) == ("order", 3, 11, 1, 0)
    assert reports[2]["schedule"] == "one" and reports[2]["level"] == "compute"


def test_check_text_for_a_deadlock(run_cli, tmp_path):
    src = tmp_path / "dl.pp"
    src.write_text("schedule dl {\n rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
                   " rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n}\n")
    code, out, _ = run_cli("check", str(src))
    assert code == 1
    assert "error[deadlock]" in out and "[0SEND_F1]" in out
    code, out, _ = run_cli("check", str(src), "--semantics", "eager")
    assert code == 0


def test_bad_input_exits_2_with_a_located_message(run_cli, tmp_path):
    src = tmp_path / "syntax.pp"
    src.write_text("schedule s {\n  stages 2 3\n}\n")
    code, out, err = run_cli("check", str(src))
    assert code == 2
    assert err.startswith(f"{src}:2:12: error[syntax]:")
    assert "Traceback" not in err
    code, _, err = run_cli("check", "no_such_schedule")
    assert code == 2 and "no such file or built-in schedule" in err
    code, _, err = run_cli("compile", "1f1b", "--param", "P=four")
    assert code == 2 and "expected NAME=INTEGER" in err
    code, _, err = run_cli("compile", "1f1b", "--param", "Q=4")
    assert code == 2 and "has no parameter 'Q'" in err
    code, _, err = run_cli("frobnicate")
    assert code == 2 and "error[usage]" in err
    code, _, err = run_cli("check", "1f1b", "--semantics", "nope")
    assert code == 2


def test_bad_csv_cell_is_located(run_cli, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("0F0,0B0\n1F0,1Q0\n")
    code, out, err = run_cli("check", str(bad), "--json")
    assert code == 2
    row = json.loads(out)
    e = row["errors"][0]
    assert (e["line"], e["column"], e["rank"], e["step"]) == (2, 5, 1, 1)
    assert f"{bad}:2:5: error[csv]: rank 1, step 1:" in err


def test_export_levels(run_cli, tmp_path):
    out_file = tmp_path / "out.csv"
    code, _, err = run_cli("export", "interleaved_1f1b", "--param", "P=4", "--param", "V=2", "--param", "M=8",
                           "--to", "torch-csv", "--level", "comms", "-o", str(out_file))
    assert code == 0, err
    prog = read_torch_csv(out_file.read_bytes().decode()).to_program()
    assert prog.num_ranks == 4 and prog.level == "comms" and schedc.check(prog).ok
    code, out, _ = run_cli("export", "gpipe", "--param", "P=2", "--param", "M=2", "--to", "torch-csv",
                           "--level", "compute")
    assert code == 0 and out == "0F0,0F1,0B0,0B1\r\n1F0,1F1,1B0,1B1\r\n"


def test_export_of_a_failing_schedule_refuses_comms(run_cli, tmp_path):
    src = tmp_path / "bad.pp"
    src.write_text(BAD_ORDER)
    code, out, err = run_cli("export", str(src), "--to", "torch-csv")
    assert code == 1 and out == "" and "nothing exported" in err


HANG = "schedule stuck {\n  rank 0: 0F0 0RECV_B0 0B0 0SEND_F0\n  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n}\n"
DEFERRED = ("0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD\n"
            "1UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD\n")


@pytest.mark.parametrize("name,text", [("stuck.pp", HANG), ("deferred.csv", DEFERRED)],
                         ids=["pp", "torch-csv"])
def test_export_refuses_written_communication_that_deadlocks(run_cli, tmp_path, name, text):
    """A schedule whose sends and receives are written out (a .pp or torch's own comms CSV) is checked
    too before `--level comms` writes it; `--level compute` and IR JSON still write it, to study."""
    src = tmp_path / name
    src.write_text(text)
    code, out, err = run_cli("export", str(src), "--to", "torch-csv", "-o", str(tmp_path / "out.csv"))
    assert code == 1 and "error[deadlock]: deadlock under rendezvous" in err and "nothing exported" in err
    assert f"{src}:" in err and not (tmp_path / "out.csv").exists()
    code, out, err = run_cli("export", str(src), "--to", "torch-csv", "--json")
    row = json.loads(out)
    assert code == 1 and row["ok"] is False and [e["code"] for e in row["errors"]] == ["deadlock"]
    for level in (("--level", "compute"), ("--to", "ir-json")):
        argv = ("--to", "torch-csv", *level) if level[0] == "--level" else level
        code, out, err = run_cli("export", str(src), *argv)
        assert code == 0 and out, err


def test_version_and_help(run_cli):
    code, out, _ = run_cli("--version")
    assert code == 0 and out.strip() == f"schedc {schedc.__version__}"
    code, out, _ = run_cli("check", "--help")
    assert code == 0 and "--semantics" in out


HEAVY = ("z3", "numpy", "scipy", "torch", "graphviz")
# What `schedc check NAME` of a small built-in does not use, so does not import (#34: the whole process
# in at most 0.12 s of CPU, bench/cli_latency.py): the arrays (plain Python checks it), the solver,
# torch, lark's optional `regex`, the presets and importers, and the detailed checks' modules (the
# fast checks clear it) and the lowering.
UNUSED_BY_A_SMALL_CHECK = HEAVY + (
    "lark", "regex", "importlib.metadata", "tomllib", "fractions", "difflib", "schedc.hardware", "schedc.solver",
    "schedc.costs", "schedc.passes", "schedc.interop.torch_csv", "schedc.verify.deadlock", "schedc.verify.graph",
    "schedc.verify.memory", "schedc.verify.mesh", "schedc.verify.shapes", "schedc.verify.comm_init")


@pytest.mark.parametrize("run, light", [
    ("import schedc", HEAVY),
    ("import schedc.prove", HEAVY),  # the prover's names load on first use
    ("main(['--version'])", HEAVY),
    ("import runpy\nsys.argv = ['schedc', '--version']\ntry:\n    runpy.run_module('schedc', run_name='__main__')\n"
     "except SystemExit:\n    pass", HEAVY),  # python -m schedc --version
    ("main(['list'])", HEAVY),
    ("main(['check', '1f1b'])", UNUSED_BY_A_SMALL_CHECK),
    ("main(['check', '1f1b', '--param', 'P=4,M=8', '--json'])", UNUSED_BY_A_SMALL_CHECK),
    ("main(['check', 'zbv', 'interleaved_1f1b', '--param', 'P=4,M=8'])", UNUSED_BY_A_SMALL_CHECK),
])
def test_light_work_loads_no_heavy_modules(run, light):
    """What a user runs often stays fast: no solver, arrays, model or drawing library is imported."""
    probe = (f"import sys\nfrom schedc.cli import main\n{run}\n" if run.startswith("main") else
             f"import sys\n{run}\n") + f"print([m for m in {light!r} if m in sys.modules])\n"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parent)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]", f"{run} loads {res.stdout.strip().splitlines()[-1]}"


# ---------------------------------------------------------------------------------------------
# Command-line habits (issue 20, item 5)
# ---------------------------------------------------------------------------------------------
def test_python_dash_m_is_the_cli():
    res = subprocess.run([sys.executable, "-m", "schedc", "--version"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == f"schedc {schedc.__version__}", res.stderr
    res = subprocess.run([sys.executable, "-m", "schedc", "check", "no_such_schedule"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "no such file or built-in schedule" in res.stderr


PROGRAM = """\
import atexit, sys, threading, time
from schedc.cli import entry
atexit.register(lambda: print("atexit ran", file=sys.stderr))
def late():
    time.sleep(0.2)
    print("the thread ran", flush=True)
if sys.argv[1] == "thread":
    threading.Thread(target=late).start()
sys.argv = ["schedc", "check", sys.argv[2]]
entry()
"""


@pytest.mark.parametrize("thread", ["thread", "none"])
@pytest.mark.parametrize("schedule, code", [("1f1b", 0), (str(Path(__file__).parent / "known" / "pytorch_172668.pp"), 1)])
def test_the_program_leaves_as_a_normal_exit_does(tmp_path, thread, schedule, code):
    """`entry` as the program leaves without the interpreter's teardown (cli._leave), and without
    anything a user sees changed: the exit code, the output whole, the atexit functions run, and a
    thread still running let finish first."""
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    res = subprocess.run([sys.executable, str(script), thread, schedule], capture_output=True, text=True, timeout=120)
    assert res.returncode == code, res.stderr
    report = res.stdout.replace("the thread ran\n", "")
    assert report.startswith(("1f1b: 4 ranks", "pytorch_172668")) and res.stderr.endswith("atexit ran\n")
    assert ("the thread ran" in res.stdout) == (thread == "thread")
    if code == 1:
        assert "deadlock" in report


@pytest.mark.parametrize("argv", [
    ("check", "no_such.pp"), ("check", "1fb1"), ("check", "1f1b", "--param", "P=x"),
    ("check", "1f1b", "--param", "Q=2"), ("check", "1f1b", "--sweep", "M=1..3", "--param", "P=x"),
    ("sim", "no_such.pp"), ("sim", "1fb1"), ("sim", "1f1b", "--param", "P=x"),
    ("compare", "1fb1"), ("compare", "1f1b", "--param", "P=x"),
    ("prove", "no_such.pp"), ("prove", "1fb1"),
    ("synth", "--param", "P=x", "--param", "M=4"), ("synth", "--param", "P=2"),
])
def test_json_input_errors_are_one_json_object(run_cli, argv):
    """With --json, an input error is one JSON object on stdout (the shape `check` gives per input); the
    message stays on stderr and the exit code is 2."""
    code, out, err = run_cli(*argv, "--json")
    assert code == 2 and "error[" in err
    (line,) = out.splitlines()
    got = json.loads(line)
    assert got["ok"] is False and got["input_error"] is True
    assert got["errors"] and all(e["code"] and e["message"] for e in got["errors"])


def test_a_repeated_param_is_a_usage_error_and_commas_separate(run_cli):
    code, _, err = run_cli("compile", "1f1b", "--param", "P=4", "--param", "P=8")
    assert code == 2 and "error[usage]" in err and "--param P is given twice (P=4 and P=8)" in err
    code, _, err = run_cli("check", "1f1b", "--param", "P=4,M=8,P=2")
    assert code == 2 and "given twice" in err
    code, out, err = run_cli("check", "1f1b", "--param", "P=2,M=3", "--json")
    assert code == 0, err
    assert json.loads(out)["params"] == {"P": 2, "M": 3}
    code, _, err = run_cli("check", "1f1b", "--param", "P=2,")
    assert code == 2 and "expected NAME=INTEGER" in err


def test_list_descriptions_are_whole_sentences(run_cli):
    code, out, _ = run_cli("list", "--json")
    rows = {r["name"]: r for r in map(json.loads, out.splitlines())}
    assert rows["1f1b"]["about"].endswith("then alternates one forward and one backward, then drains.")
    assert all(r["about"].endswith(".") for r in rows.values()), [r["about"] for r in rows.values()]
    code, out, _ = run_cli("list")
    assert len(out.splitlines()) == len(rows)  # one line per schedule
    assert "then drains." in out


@pytest.mark.parametrize("argv, hint", [
    (("chek", "1f1b"), "did you mean 'check'?"),
    (("check", "1f1b", "--format", "torch_csv"), "did you mean 'torch-csv'?"),
    (("check", "1fb1"), "did you mean '1f1b'?"),
    (("compare", "zbh1"), "did you mean 'zb_h1'?"),
])
def test_did_you_mean_for_commands_and_builtins(run_cli, argv, hint):
    code, _, err = run_cli(*argv)
    assert code == 2 and hint in err, err


@pytest.mark.parametrize("edit, hint", [
    (("  stages P", "  stage P"), "did you mean 'stages'?"),
    (("  place loop", "  plac loop"), "did you mean 'place'?"),
    (("for m in 0 .. warm ", "fro m in 0 .. warm "), "'fro' is read as a name; did you mean 'for'?"),
    (("  stages P", "  stages P\n  memory act=1, wieght=2"), "did you mean 'weight'?"),
])
def test_did_you_mean_for_keywords_and_settings(run_cli, tmp_path, edit, hint):
    src = tmp_path / "typo.pp"
    text = (Path(schedc.__file__).resolve().parent.parent / "schedules" / "1f1b.pp").read_text()
    assert edit[0] in text
    src.write_text(text.replace(edit[0], edit[1], 1))
    code, _, err = run_cli("check", str(src))
    assert code == 2 and hint in err, err


@pytest.mark.parametrize("script", sorted(p.name for p in (Path(__file__).resolve().parent.parent / "bench").glob("*.py")))
def test_bench_scripts_print_help_without_running(script):
    path = Path(__file__).resolve().parent.parent / "bench" / script
    res = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage:") and "--help" in res.stdout, res.stdout[:300]


class _Terminal(io.StringIO):
    """An in-memory standard error that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("argv, line", [
    (("prove", "gpipe"), "deadlock freedom"),
    (("check", "gpipe", "--sweep", "P=1..25", "--sweep", "M=1..20"), "checked 500/500"),
])
def test_progress_on_a_terminal_only(argv, line):
    """Progress lines go to standard error when it is a terminal, and not with --json or -q, nor when piped."""
    from schedc.cli import main
    for stderr, shown in ((_Terminal(), True), (io.StringIO(), False)):
        out = io.StringIO()
        assert main(list(argv), out, stderr) == 0, stderr.getvalue()
        assert (line in stderr.getvalue()) is shown, stderr.getvalue()
        assert line not in out.getvalue()
    stderr = _Terminal()
    assert main([*argv, "--json"], io.StringIO(), stderr) == 0
    assert line not in stderr.getvalue()


def test_progress_helper():
    from schedc.progress import progress
    tty, pipe = _Terminal(), io.StringIO()
    progress(tty, prefix="x: ")("one")
    progress(tty, quiet=True)("two")
    progress(pipe)("three")
    assert tty.getvalue() == "x: one\n" and pipe.getvalue() == ""
