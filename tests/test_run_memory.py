"""`schedc run` and the memory of the run it starts (trial 2, item 1), its outputs and its hint.

Completion nests (a program that completes under rendezvous completes on either backend), memory
does not: on a backend a sent message is held until its send is waited for, at the step's end. So
`run` checks the program as it will run under the backend's own semantics before any rank starts,
and refuses it, as a failing check, when a memory limit breaks there; `compile` says so in a note.
Also: two outputs naming one file are refused (item 4), the `schedc sim` line `run --profile`
suggests reproduces the run and works (item 5), and an interrupted `run --json` still prints its
object (item 10). Ranks are started for real once (`test_a_limit_that_holds_on_gloo_runs...`); the
other tests stand a fake launcher in for them.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from schedc.errors import EXIT_FAIL, EXIT_INPUT, EXIT_INTERRUPTED

ROOT = Path(__file__).resolve().parent.parent

# The trial's ml.pp: 1F1B with messages of 0.5; its limit holds under rendezvous ([2.5, 1.5]) but
# not on gloo, where rank 0 reaches 4.5 (5 with its receives posted early).
ML = """schedule ml(P = 2, M = 4) {
  stages P
  place loop
  memory limit = LIMIT, out = 0.5
  rank r {
    let warm = min(P - 1 - r, M)
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
"""


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # (`examples.mlp` is found from the current folder, as the ranks find it)


def _ml(tmp_path: Path, limit: str) -> str:
    path = tmp_path / f"ml{limit}.pp"
    path.write_text(ML.replace("LIMIT", limit))
    return str(path)


class _FakeLaunch:
    """Stands in for `schedc.runtime.launch.launch`: records the call, prints one step line as the
    last stage's rank does, copies a profile where rank 0 would write it, and then returns (every
    rank finished) or raises KeyboardInterrupt (`interrupt`)."""

    def __init__(self, interrupt: bool = False):
        self.calls, self.interrupt = [], interrupt

    def __call__(self, argv, nproc, stdout, stderr, **kw):
        from schedc.runtime.launch import Launched
        self.calls.append(argv)
        stdout.write("step 1/1     10.00 ms  loss 1.500000\n")
        if "--profile" in argv:
            Path(argv[argv.index("--profile") + 1]).write_text(_profile())
        if self.interrupt:
            raise KeyboardInterrupt
        return Launched(returncodes=(0,) * nproc, killed=())


def _profile() -> str:
    """A profile of a 2-rank run, as `run --profile` writes one (a calibration case's, without the
    keys the calibration tests add)."""
    data = json.loads((ROOT / "tests" / "data" / "calibration" / "transformer_1f1b_cpu.json").read_text())
    data.pop("derived", None)
    return json.dumps(data)


@pytest.fixture
def fake_launch(monkeypatch):
    import schedc.runtime.launch as launch
    fake = _FakeLaunch()
    monkeypatch.setattr(launch, "launch", fake)
    return fake


def test_a_limit_verified_under_rendezvous_that_gloo_breaks_is_refused(tmp_path, run_cli, at_root, fake_launch):
    """Item 1: ok under rendezvous with peaks [2.5, 1.5], but the gloo run reaches 4.5: refused as
    a failing check is (exit 1, the findings shown, no rank started), saying why."""
    ml = _ml(tmp_path, "2.5")
    code, out, err = run_cli("run", ml, "--model", "examples.mlp:build_stages", "--steps", "1")
    assert code == EXIT_FAIL and not fake_launch.calls, (out, err)
    assert "ok\n" in out and "worst over every run rendezvous allows" in out and "[2.5, 1.5]" in out
    assert "on --backend gloo: the program under gloo too: FAILED" in out
    assert "error[memory]" in err and "Traceback" not in err
    assert ("the program's memory is verified under rendezvous, but on gloo the run holds every sent message "
            "until its send is waited for (at the step's end)") in err
    assert "rank 0 reaches 4.5, over its limit of 2.5" in err and "not running (--no-verify runs it anyway)" in err
    code, out, err = run_cli("run", ml, "--model", "examples.mlp:build_stages", "--steps", "1", "--json")
    report = json.loads(out)
    assert code == EXIT_FAIL and report["ok"] is False and report["semantics"] == "gloo"
    assert report["errors"][0]["code"] == "memory" and report["steps"] == [] and report["outputs"] == []
    code, out, err = run_cli("run", ml, "--model", "examples.mlp:build_stages", "--print-torchrun",
                             "-o", str(tmp_path / "out"))
    assert code == EXIT_FAIL and not (tmp_path / "out").exists()
    # --receives early: its own check under gloo, which says why too
    code, out, err = run_cli("run", ml, "--model", "examples.mlp:build_stages", "--receives", "early")
    assert code == EXIT_FAIL and "rank 0 reaches 5, over its limit of 2.5" in err and not fake_launch.calls


def test_no_verify_still_runs_it(tmp_path, run_cli, at_root, fake_launch):
    code, out, err = run_cli("run", _ml(tmp_path, "2.5"), "--model", "examples.mlp:build_stages", "--steps", "1",
                             "--no-verify")
    assert code == 0 and len(fake_launch.calls) == 1, err


def test_on_nccl_the_limit_is_checked_under_nccl(tmp_path, run_cli):
    code, out, err = run_cli("run", _ml(tmp_path, "2.5"), "--model", "examples.mlp:build_stages", "--backend",
                             "nccl", "--print-torchrun", "-o", str(tmp_path / "out"))
    assert code == EXIT_FAIL and "on --backend nccl: the program under nccl too: FAILED" in out
    assert "verified under rendezvous, but on nccl the run holds" in err and "reaches 4.5" in err


def test_the_fallback_from_early_receives_is_checked_and_its_peaks_shown(tmp_path, run_cli):
    """At a limit of 4.5 the early-posted program (5) does not fit; receives where lowering places
    them do (4.5), which run checks under gloo and prints the peaks of, beside rendezvous's."""
    code, out, err = run_cli("run", _ml(tmp_path, "4.5"), "--model", "examples.mlp:build_stages",
                             "--print-torchrun", "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert "posted early, the program does not check under gloo: rank 0 reaches 5, over its limit of 4.5" in out
    assert "on --backend gloo: the program under gloo too: ok" in out
    assert "peak memory per rank on gloo, as this run posts and waits (worst over every run gloo allows" in out
    assert out.rstrip().splitlines()[-2].endswith("[4.5, 3]")


def test_a_limit_that_holds_on_gloo_runs_and_its_profile_hint_works(tmp_path, run_cli, at_root):
    """Ranks started for real, with a profile of any name; the `schedc sim` line it suggests keeps
    the run's parameters and its receives' placement, and runs."""
    profile = tmp_path / "measured.txt"
    code, out, err = run_cli("run", _ml(tmp_path, "4.5"), "--param", "M=4", "--model", "examples.mlp:build_stages",
                             "--steps", "2", "--profile", str(profile))
    assert code == 0, err
    assert "step 2/2" in out and profile.is_file()
    hint = err[err.index("`schedc sim") + 1:]
    hint = hint[:hint.index("`")]
    assert f" --param M=4 --lower --costs {profile}" in hint, hint
    words = shlex.split(hint)
    code, out, err = run_cli(*words[1:])
    assert code == 0 and "comms level" in out, err


def test_the_hint_after_early_receives_lowers_them_early(tmp_path, run_cli, at_root, fake_launch):
    for extra, lower in ((["--receives", "early"], "--lower early"), ([], "--lower early"),
                         (["--receives", "needed"], "--lower --costs")):
        profile = tmp_path / "p.prof"
        code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=4", "--model", "examples.mlp:build_stages",
                                 "--steps", "1", "--profile", str(profile), *extra)
        assert code == 0, err
        assert f"`schedc sim 1f1b --param P=2,M=4 {lower}" in err, (extra, err)
        hint = err[err.index("`schedc sim") + 1:]
        code, out, err = run_cli(*shlex.split(hint[:hint.index("`")])[1:])
        assert code == 0, err


def test_two_outputs_naming_one_file_are_refused_before_the_run(tmp_path, run_cli, at_root, fake_launch):
    """Item 4: --trace and --profile naming one file (as given, or by another spelling), or an
    output that is the input, or --profile over the program --print-torchrun writes."""
    same = tmp_path / "same.json"
    for trace, profile in ((same, same), (same, tmp_path / "." / "same.json")):
        code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                                 "--trace", str(trace), "--profile", str(profile))
        assert code == EXIT_INPUT and "error[usage]" in err and "is that file too" in err, err
        assert out == "" and not fake_launch.calls and not same.exists()
    ml = _ml(tmp_path, "4.5")
    code, out, err = run_cli("run", ml, "--model", "examples.mlp:build_stages", "--trace", ml)
    assert code == EXIT_INPUT and "over its own input" in err and not fake_launch.calls  # (cli.py's rule)
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                             "--print-torchrun", "-o", str(tmp_path), "--profile", str(tmp_path / "1f1b_program.py"))
    assert code == EXIT_INPUT and "is that file too" in err and out == ""


def test_an_interrupted_json_run_prints_what_it_did(tmp_path, run_cli, at_root, monkeypatch):
    """Item 10: Ctrl-C during the run: exit 130, and with --json the object still, `ok` false,
    `interrupted`, the steps that finished and the trace written."""
    import schedc.runtime.launch as launch
    monkeypatch.setattr(launch, "launch", _FakeLaunch(interrupt=True))
    trace = tmp_path / "t.json"
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                             "--json", "--trace", str(trace))
    assert code == EXIT_INTERRUPTED and "schedc: interrupted" in err
    result = json.loads(out)
    assert result["ok"] is False and result["interrupted"] is True and result["outputs"] == [str(trace)]
    assert result["errors"][0]["code"] == "interrupted" and result["steps"][0]["loss"] == 1.5
    assert result["file"] == "1f1b" and result["exit_codes"] is None and trace.is_file()


def test_compile_says_memory_was_verified_under_its_semantics_only(tmp_path, run_cli):
    code, out, err = run_cli("compile", _ml(tmp_path, "2.5"), "-o", str(tmp_path / "b"))
    assert code == 0, err
    assert ("note: memory is verified under rendezvous only: on gloo rank 0 reaches 4.5 (limit 2.5), rank 1 "
            "reaches 3 (limit 2.5); on nccl") in out
    assert "`schedc run --backend gloo|nccl` refuses it" in out
    code, out, err = run_cli("compile", _ml(tmp_path, "4.5"), "-o", str(tmp_path / "c"))
    assert code == 0 and "note:" not in out
    code, out, err = run_cli("compile", _ml(tmp_path, "2.5"), "-o", str(tmp_path / "d"), "--semantics", "gloo")
    assert code == EXIT_FAIL


def test_costs_read_a_profile_of_any_name(tmp_path, run_cli):
    profile = tmp_path / "run.profile"
    profile.write_text(_profile())
    code, out, err = run_cli("sim", "1f1b", "--param", "P=2,M=4", "--lower", "--costs", str(profile))
    assert code == 0, err
