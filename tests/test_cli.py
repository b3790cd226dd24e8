"""The CLI as a user runs it: commands, outputs on disk, JSON, exit codes, errors."""
from __future__ import annotations

import errno
import io
import json
import os
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


def _raw_controls(text: str) -> list[str]:
    """The control characters in `text` a terminal would act on (tab and newline are layout)."""
    return [ch for ch in text if (ord(ch) < 0x20 and ch not in "\t\n") or 0x7F <= ord(ch) < 0xA0]


def test_control_characters_reach_the_terminal_escaped(run_cli, tmp_path):
    """A comment holding ESC [2J (clear the screen), a `require` message with a colour and a bell, a
    file name with an escape and a binary file's NULs: shown as \\x1b, the caret under the same text."""
    src = tmp_path / "clear\x1b[2J.pp"
    src.write_text('schedule s(P = 2, M = 2) {\n  stages \x01\t@ # \x1b[2J\x7f\n}\n')
    code, _, err = run_cli("check", str(src))
    assert code == 2 and not _raw_controls(err), err
    head, line, caret = err.splitlines()[:3]
    assert head.startswith(f"{tmp_path}/clear\\x1b[2J.pp:2:10: error[syntax]:")
    assert line == "   2 |   stages \\x01\t@ # \\x1b[2J\\x7f"
    assert caret == "     |          ^^^^"  # under the \\x01 it points at, the tab kept before the @
    assert line.index("@") == caret.index("^") + len("\\x01\t")
    req = tmp_path / "req.pp"
    req.write_text('schedule s(P = 2, M = 2) {\n  require M > 5 else "need \x1b[31mmore\x07"\n  stages P\n}\n')
    code, _, err = run_cli("check", str(req))
    assert code == 2 and not _raw_controls(err), err
    assert "error[require]: need \\x1b[31mmore\\x07 (M=2)" in err
    binary = tmp_path / "blob.pp"
    binary.write_bytes(b"\x00\x00abc\x00")
    code, _, err = run_cli("check", str(binary))
    assert code == 2 and not _raw_controls(err), err
    assert "   1 | \\x00\\x00abc\\x00" in err


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
    code, out, err = run_cli("export", str(src), "--to", "ir-json", "--level", "comms")
    assert code == 1 and out == "" and "nothing exported" in err


def test_export_ir_json_at_the_comms_level_is_lowered(run_cli, tmp_path):
    """`--level comms` was ignored for ir-json (the compute level written, and no `level` in --json)."""
    code, out, err = run_cli("export", "1f1b", "--param", "P=2,M=2", "--to", "ir-json", "--level", "comms", "--json")
    assert code == 0, err
    result = json.loads(out)
    ir = json.loads(result["text"])
    assert result["level"] == ir["level"] == "comms"
    assert ir["actions"][0] == ["0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1"]
    code, out, _ = run_cli("export", "1f1b", "--param", "P=2,M=2", "--to", "ir-json", "--json")
    assert code == 0 and json.loads(out)["level"] == json.loads(json.loads(out)["text"])["level"] == "compute"
    lowered = tmp_path / "lowered.json"
    assert run_cli("export", "1f1b", "--param", "P=2,M=2", "--to", "ir-json", "--level", "comms",
                   "-o", str(lowered))[0] == 0
    code, out, _ = run_cli("check", str(lowered))
    assert code == 0 and "16 actions (comms level); ok" in out
    code, out, err = run_cli("export", str(lowered), "--to", "ir-json", "--level", "compute")
    assert code == 2 and out == "" and "--level: error[usage]: 1f1b is at the comms level" in err


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


class _FailingStdout(io.StringIO):
    """Standard output on a disk that fails: every write raises `error`."""

    def __init__(self, error):
        super().__init__()
        self.error = error

    def write(self, text):
        raise self.error


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   OSError(errno.EIO, "Input/output error")])
@pytest.mark.parametrize("argv", [("export", "1f1b", "--param", "P=2,M=2", "--to", "torch-csv"),
                                  ("check", "1f1b", "--param", "P=2,M=2", "--json"),
                                  ("check", "no_such.pp", "--json"), ("--help",)])
def test_a_failed_write_to_stdout_is_an_io_error(argv, error):
    """A full disk or an I/O error under standard output is bad input's exit 2, `error[io]` in one
    line, not an internal error (exit 4); a JSON input error is not tried on it again."""
    from schedc.cli import main
    err = io.StringIO()
    code = main(list(argv), _FailingStdout(error), err)
    assert code == 2, err.getvalue()
    assert err.getvalue().splitlines()[-1] == f"standard output: error[io]: cannot write: {error.strerror}"
    assert "internal error" not in err.getvalue()


def test_a_closed_pipe_is_still_a_quiet_exit_0():
    from schedc.cli import main
    err = io.StringIO()
    assert main(["check", "1f1b", "--json"], _FailingStdout(BrokenPipeError(errno.EPIPE, "Broken pipe")), err) == 0
    assert err.getvalue() == ""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_stdout_to_dev_full_is_one_line_and_exit_2(unbuffered):
    """The process as a user runs it, its standard output on /dev/full, written as it goes or
    buffered to the end (the failure then comes at the last flush): one line, exit 2, and nothing
    from the interpreter's own flush at exit."""
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", "schedc", "check", "1f1b", "--param", "P=2,M=2", "--json"],
                             stdout=full, stderr=subprocess.PIPE, text=True, timeout=60,
                             env={**os.environ, "PYTHONUNBUFFERED": unbuffered})
    assert res.returncode == 2 and res.stderr == "standard output: error[io]: cannot write: No space left on device\n"


PROGRAM = """\
import atexit, sys, threading, time
from schedc.cli import entry
atexit.register(lambda: print("atexit ran", file=sys.stderr))
def late(path):
    time.sleep(0.2)
    with open(path, "w") as mark:
        mark.write("the thread ran")
if sys.argv[1] == "thread":
    threading.Thread(target=late, args=(sys.argv[3],)).start()
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
    mark = tmp_path / "thread-ran"
    res = subprocess.run([sys.executable, str(script), thread, schedule, str(mark)], capture_output=True, text=True, timeout=120)
    assert res.returncode == code, res.stderr
    report = res.stdout
    assert report.startswith(("1f1b: 4 ranks", "pytorch_172668")) and res.stderr.endswith("atexit ran\n")
    assert mark.exists() == (thread == "thread")
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


def test_list_json_is_one_object_per_schedule_a_line(run_cli):
    """As check's and compare's (docs/cli.md, JSON): JSON lines, not one document."""
    code, out, _ = run_cli("list", "--json")
    lines = out.splitlines()
    assert code == 0 and len(lines) == len(run_cli("list")[1].splitlines())
    assert all(set(json.loads(line)) == {"name", "params", "about", "file"} for line in lines)


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
    (("check", "1f1b", "--semantics", "rendevous"), "did you mean 'rendezvous'?"),
    (("sim", "1f1b", "--semantics", "eagr"), "did you mean 'eager'?"),
    (("compare", "1f1b", "--semantics", "NCCL"), "did you mean 'nccl'?"),
    (("check", "1f1b", "--semantics", "nccl+shape"), "did you mean 'nccl+shapes'?"),
    (("check", "1f1b", "--semantics", "bouned:2"), "did you mean 'bounded:2'?"),
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


# ---- compile: what it did not write, and an earlier run's files ----
def _compile(run_cli, out, *extra):
    return run_cli("compile", "1f1b", "--param", "P=4,M=8", "-o", str(out), *extra)


def test_a_finding_on_no_line_names_its_file(run_cli, tmp_path):
    """A missing action has no line to point at (a rank with an empty body): its finding still names
    the file, as every other does."""
    src = tmp_path / "e.pp"
    src.write_text("schedule e(P=2, M=1) { stages P place loop rank 0 { F(0,0); B(0,0) } rank 1 { } }\n")
    code, out, _ = run_cli("check", str(src))
    assert code == 1 and f"\n{src}: error[missing]: rank 1, step 0: F(1,0) is missing" in out, out


def test_compile_never_writes_over_its_own_input(run_cli, tmp_path):
    """`compile build/zbv.csv` (the default -o) would replace the compute-level CSV it read with
    the lowered one: refused before any work, the input as it was."""
    out = tmp_path / "build"
    out.mkdir()
    csv = out / "zbv.csv"
    assert run_cli("export", "zbv", "--param", "P=2,M=4", "--to", "torch-csv", "--level", "compute",
                   "-o", str(csv))[0] == 0
    before = csv.read_bytes()
    code, stdout, err = run_cli("compile", str(csv), "-o", str(out))
    assert code == 2 and "over its own input" in err and stdout == "", (stdout, err)
    assert csv.read_bytes() == before and sorted(p.name for p in out.iterdir()) == ["zbv.csv"]
    assert run_cli("compile", str(csv), "-o", str(tmp_path / "elsewhere"))[0] == 0


@pytest.mark.parametrize("argv,output", [
    (("export", "{csv}", "--to", "torch-csv", "-o", "{csv}"), "output"),
    (("export", "{csv}", "--to", "ir-json", "-o", "{link}"), "output"),  # a link to the input is the input
    (("viz", "{csv}", "-o", "{csv}"), "output"),
    (("check", "{csv}", "--viz", "{csv}"), "--viz output"),
    (("sim", "1f1b", "--param", "P=2,M=2", "--costs", "{costs}", "--trace", "{costs}"), "--trace output"),
    (("sim", "{csv}", "--trace", "{csv}"), "--trace output"),
    (("trace", "merge", "{costs}", "-o", "{costs}"), "output"),
    (("run", "{csv}", "--model", "m:f", "--trace", "{csv}"), "--trace output"),
])
def test_no_command_writes_over_its_own_input(run_cli, tmp_path, argv, output):
    """Trial 2, item 17: export, sim --trace, trace merge and viz replaced their inputs (a measured
    profile, a rank's event file, a schedule's source); one rule, compile's, refuses every output
    that is an input file, before any work, the input as it was."""
    csv, costs, link = tmp_path / "s.csv", tmp_path / "c.toml", tmp_path / "l.csv"
    csv.write_text("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n")
    costs.write_text("F = 1\nB = 2\n")
    link.symlink_to(csv)
    before = {p: p.read_bytes() for p in (csv, costs)}
    argv = [a.format(csv=csv, costs=costs, link=link) for a in argv]
    code, out, err = run_cli(*argv)
    name = "schedc trace merge" if argv[0] == "trace" else f"schedc {argv[0]}"
    assert code == 2 and f"error[io]: {name} would write its {output} over its own input" in err, err
    assert {p: p.read_bytes() for p in before} == before and link.is_symlink()


def test_export_of_a_failing_schedule_says_so(run_cli, tmp_path):
    """Trial 2, item 17: a schedule that fails its memory limit exported at the compute level
    (a format conversion, which goes ahead) gets a warning with its findings, as the CSV, which
    holds no limit, would then check ok; --json says it under `checks`. A passing one gets none."""
    pp = tmp_path / "mem.pp"
    pp.write_text("schedule memlim(P = 4, M = 8) {\n  stages P\n  place loop\n  memory limit = 3\n"
                  "  rank r { for m in 0 .. M { F(r, m) } for m in 0 .. M { B(r, m) } }\n}\n")
    code, out, err = run_cli("export", str(pp), "--to", "torch-csv", "--level", "compute", "-o", str(tmp_path / "m.csv"))
    assert code == 0 and "warning: memlim fails its checks (4 errors: memory), exported all the same" in err
    code, out, err = run_cli("export", str(pp), "--to", "ir-json", "--json")
    assert code == 0 and json.loads(out)["checks"] == {"ok": False, "errors": 4, "codes": ["memory"]}
    code, out, err = run_cli("export", "1f1b", "--to", "torch-csv", "--level", "compute", "--json")
    assert code == 0 and "checks" not in json.loads(out) and err == ""


def test_no_output_name_starts_with_a_dash(run_cli, tmp_path, monkeypatch):
    """Trial 2, item 6: a schedule named `-h` (a CSV `-h.csv`, an IR's "schedule") made
    `-h_program.py`, and `--print-torchrun -o .` printed `torchrun ... -h_program.py`, which
    torchrun reads as `-h`. Its stem is `h--` and a hash now, as any name that is not plain."""
    import shlex
    from schedc.commands.common import safe_stem
    assert safe_stem("-h").startswith("h--") and safe_stem("--").startswith("schedule--")
    assert safe_stem("-h") != safe_stem("h") and not safe_stem("-.-x").startswith(("-", "."))
    monkeypatch.chdir(tmp_path)
    Path("-h.csv").write_text("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n")
    assert run_cli("compile", "./-h.csv", "-o", "out")[0] == 0
    assert sorted(p.name for p in Path("out").iterdir())[0].startswith("h--")
    assert all(not p.name.startswith("-") for p in Path("out").iterdir())
    code, out, err = run_cli("run", "./-h.csv", "--model", "examples.mlp:build_stages", "--print-torchrun", "-o", ".")
    line = next(ln for ln in out.splitlines() if ln.startswith("torchrun"))
    assert code == 0 and not any(w.startswith("-") and w.endswith(".py") for w in shlex.split(line)), line


def test_compile_removes_an_earlier_runs_program_it_did_not_write_this_time(run_cli, tmp_path, monkeypatch):
    out = tmp_path / "out"
    (out / "keep").mkdir(parents=True)
    (out / "other_program.py").write_text("not ours\n")  # another schedule's: never touched
    assert _compile(run_cli, out)[0] == 0 and (out / "1f1b_program.py").is_file()
    monkeypatch.setattr("schedc.lower.codegen.MAX_RUNNABLE_ACTIONS", 100)  # now too large to write
    code, stdout, err = _compile(run_cli, out)
    assert code == 0 and "no runnable program" in err, err
    assert "not written: " + str(out / "1f1b_program.py") in stdout
    assert f"removed the stale {out / '1f1b_program.py'}" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["1f1b.csv", "1f1b.json", "1f1b.svg", "keep",
                                                      "other_program.py"]
    monkeypatch.undo()
    assert _compile(run_cli, out)[0] == 0  # all four again, nothing said removed
    monkeypatch.setattr("schedc.lower.codegen.MAX_RUNNABLE_ACTIONS", 100)
    code, stdout, _ = _compile(run_cli, out, "--json")
    report = json.loads(stdout)
    assert report["removed"] == [str(out / "1f1b_program.py")] and report["stale"] == []
    assert [m["file"] for m in report["not_written"]] == [str(out / "1f1b_program.py")]
    assert "at most 100" in report["not_written"][0]["why"]


def test_compile_force_removes_the_csv_and_program_it_cannot_make_and_says_why(run_cli, tmp_path):
    out = tmp_path / "out"
    assert _compile(run_cli, out)[0] == 0
    code, stdout, err = _compile(run_cli, out, "--force", "--memory-limit", "2")
    assert code == 1, err
    csv, program = out / "1f1b.csv", out / "1f1b_program.py"
    for kind in ("PyTorch CSV", "runnable program"):
        assert f"schedc: no {kind}: the schedule fails its checks (memory)" in err, err
    assert f"not written: {csv}, {program}" in stdout
    assert f"removed the stale {csv}" in stdout and f"removed the stale {program}" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["1f1b.json", "1f1b.svg"]


def test_compile_force_names_what_a_missing_backward_leaves_unwritten(run_cli, tmp_path):
    src = tmp_path / "nob.pp"
    src.write_text("schedule nob {\n  rank 0: 0F0 0F1 0B0\n  rank 1: 1F0 1B0 1F1 1B1\n}\n")
    code, stdout, err = run_cli("compile", str(src), "--force", "-o", str(tmp_path / "out"), "--json")
    assert code == 1
    report = json.loads(stdout)
    assert report["outputs"] == [str(tmp_path / "out" / n) for n in ("nob.json", "nob.svg")]
    missing = {Path(m["file"]).name: m["why"] for m in report["not_written"]}
    assert set(missing) == {"nob.csv", "nob_program.py"} and all("(missing)" in why for why in missing.values())


def test_compile_keeps_an_earlier_output_that_is_a_link_and_warns(run_cli, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "mine.py"
    elsewhere.write_text("the user's own file\n")
    (out / "1f1b_program.py").symlink_to(elsewhere)
    monkeypatch.setattr("schedc.lower.codegen.MAX_RUNNABLE_ACTIONS", 100)
    code, stdout, err = _compile(run_cli, out, "--json")
    assert code == 0 and f"warning: {out / '1f1b_program.py'} is an earlier run's output" in err, err
    assert "symbolic link" in err and json.loads(stdout)["stale"][0]["file"] == str(out / "1f1b_program.py")
    assert (out / "1f1b_program.py").is_symlink() and elsewhere.read_text() == "the user's own file\n"


def test_compile_refuses_a_file_as_its_folder_before_any_work(run_cli, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    code, stdout, err = _compile(run_cli, afile)
    assert code == 2 and stdout == "" and f"{afile}: error[io]: is a file, not a folder" in err, err
    code, stdout, _ = _compile(run_cli, afile / "sub", "--json")
    error = json.loads(stdout)
    assert code == 2 and error["file"] == str(afile / "sub")  # the output, not the input
    assert error["errors"][0]["message"] == f"cannot create the output folder: {afile} is a file, not a folder"
    assert afile.read_text() == "x"


@pytest.mark.parametrize("argv, said", [
    (["export", "1f1b", "--param", "P=2,M=2", "--to", "torch-csv", "-o", ""], "-o/--output: error[usage]: the path is empty"),
    (["sim", "1f1b", "--trace", ""], "--trace: error[usage]: the path is empty"),
    (["check", "1f1b", "--param", "P=\u0663,M=2"], "expected NAME=INTEGER"),  # (an Arabic-Indic three)
    (["check", "1f1b", "--sweep", "P=1..\uff13"], "expected NAME=LOW..HIGH"),  # (a full-width three)
    (["sim", "1f1b", "--param", "P=2,M=2", "--samples", "0"], "--samples 0: give 1 to 10,000 sampled runs"),
    (["sim", "1f1b", "--param", "P=2,M=2", "--seed", "3"], "--seed is the seed of sampled runs"),
])
def test_options_a_user_mistypes_are_refused_not_read_otherwise(run_cli, argv, said):
    """From a user trial: `-o ""` wrote to standard output, a non-ASCII digit read as a number,
    `--samples 0` and a `--seed` without `--samples` were ignored."""
    code, out, err = run_cli(*argv)
    assert code == 2 and said in err and out == "", (out, err)


def _json_file(run_cli, tmp_path, command, name, *extra):
    """The `file` of each JSON object `command --json` prints for input `name`."""
    more = {"viz": ["-o", str(tmp_path / "x.svg")], "compile": ["-o", str(tmp_path / "build")],
            "export": ["--to", "torch-csv"],
            "run": ["--model", "examples.mlp:build_stages", "--print-torchrun", "-o", str(tmp_path / "run")]}
    code, out, err = run_cli(command, name, *extra, "--json", *more.get(command, []))
    assert code in (0, 1, 2) and out, err
    return [json.loads(line)["file"] for line in out.splitlines()]


@pytest.mark.parametrize("command", ["check", "sim", "viz", "compile", "export", "run"])
def test_every_command_names_an_input_in_json_as_the_user_gave_it(run_cli, tmp_path, monkeypatch, command):
    """From a user trial: a built-in's `file` was its path for check, viz and compile (and a failing
    run's check) but its name for sim and export; now every command says what was typed, whether
    it succeeds, fails its checks or cannot read the input."""
    assert _json_file(run_cli, tmp_path, command, "1f1b", "--param", "P=2,M=2") == ["1f1b"]
    monkeypatch.chdir(tmp_path)
    Path("bad.pp").write_text(BAD_ORDER)  # fails its checks (compile and run say so in JSON too)
    Path("ok.pp").write_text("schedule ok {\n  rank 0: 0F0 0B0\n}\n")
    assert _json_file(run_cli, tmp_path, command, "./ok.pp") == ["./ok.pp"]
    assert _json_file(run_cli, tmp_path, command, "./bad.pp") == ["./bad.pp"]
    assert _json_file(run_cli, tmp_path, command, "1f1b", "--param", "Q=2") == ["1f1b"]  # an input error


def test_a_builtins_path_is_where_its_lines_are(run_cli):
    """The top-level `file` is the name typed; an error in a built-in's text still names the file
    its line is in, and `list --json` gives that file."""
    code, out, _ = run_cli("check", "1f1b", "--param", "P=2,M=2", "--json")
    assert code == 0 and json.loads(out)["file"] == "1f1b"
    code, out, _ = run_cli("list", "--json")
    rows = {r["name"]: r for r in map(json.loads, out.splitlines())}
    assert Path(rows["1f1b"]["file"]).name == "1f1b.pp" and Path(rows["1f1b"]["file"]).is_file()
