"""A sweep's work is counted in units of about 1 us of CPU time (issue 35), not in actions alone:
`check --sweep` with `--model` (the detailed checks, ~14 us an action) took 34 s beside a loaded
machine within the old bound of 2M actions, and `--sweep P=1..100000` 11 s alone (per-rank work).
The tests assert where a sweep stops, never a time.
"""
from __future__ import annotations

from schedc.commands import check as check_command

MODEL = ("--model", "llama2-7b", "--hardware", "a100-80gb")


def test_instances_checked_in_detail_are_charged_their_detailed_work(run_cli, monkeypatch):
    monkeypatch.setattr(check_command, "MAX_SWEEP_WORK", 20_000)
    code, out, err = run_cli("check", "1f1b", "--param", "P=4", "--sweep", "M=1..100", *MODEL)
    # (100 + 100) + 8 * 4 + 2 * 8M before an instance, 18 * 8M more once checked in detail:
    # 20,048 after M=14, so M=15 is not checked
    assert code == 2 and "error[too-large]" in err and "instance 15 of 100" in err, err
    assert "Traceback" not in err


def test_ranks_are_charged(run_cli, monkeypatch):
    monkeypatch.setattr(check_command, "MAX_SWEEP_WORK", 20_000)
    code, out, err = run_cli("check", "1f1b", "--param", "M=1", "--sweep", "P=1..1000")
    # 100 + 8P + 2 * 2P units an instance: 19,600 after P=49
    assert code == 2 and "instance 50 of 1000" in err, err


def test_a_sweep_over_the_instance_cap_is_refused_before_it_starts(run_cli):
    code, out, err = run_cli("check", "1f1b", "--sweep", "M=1..100001")
    assert code == 2 and "error[usage]" in err and "100,001 instances; the limit is 100,000" in err, err
    assert out == ""
