"""Findings of a user trial of `schedc prove`: fixed inputs refused plainly, proofs by checking
every setting of a finite domain, settings and counts told in words, bounds named."""
from __future__ import annotations

import json

import pytest

from schedc.api import load
from schedc.interop.formats import writer


@pytest.mark.parametrize("fmt, suffix", [("torch-csv", ".csv"), ("ir-json", ".json")])
def test_a_fixed_program_is_a_usage_error_pointing_to_check(fmt, suffix, tmp_path, run_cli):
    # a CSV or an IR file is one compiled program at one setting: not the parser's complaint that
    # its text is no schedule ("unexpected '0UNSHARD'; expected 'schedule'"), but what prove takes
    path = tmp_path / f"x{suffix}"
    path.write_text(writer(fmt)(load("1f1b")))
    code, out, err = run_cli("prove", str(path))
    assert code == 2 and out == "" and "error[usage]" in err and "error[syntax]" not in err
    assert "prove takes a .pp schedule or a built-in name" in err and f"schedc check {path}" in err


ONE_WRONG = """\
schedule backwards_first(P = 2, M = 2) {
  require P >= 1, M >= 1
  stages P
  place loop
  rank r {
    for m in 0 .. M { B(r, m) }
    for m in 0 .. M { F(r, m) }
  }
}
"""


def test_counts_of_one_are_singular(tmp_path, run_cli):
    # "1 ranks, 1 stages, 1 microbatches" in a refutation, "1 activations" in a memory refutation
    path = tmp_path / "backwards_first.pp"
    path.write_text(ONE_WRONG)
    code, out, _ = run_cli("prove", str(path), "-q")
    assert code == 1 and "backwards_first: 1 rank, 1 stage, 1 microbatch, 2 actions" in out, out
    code, out, _ = run_cli("prove", "1f1b", "--memory", "P - r - 1", "-q")
    assert code == 1 and "rank 0 holds 1 activation at its peak" in out, out
    code, out, _ = run_cli("prove", "1f1b", "--memory", "1", "--assume", "M == 1", "-q")
    assert code == 0 and "at most 1 live activation on rank r" in out, out
    code, out, _ = run_cli("synth", "--param", "P=1,M=2")
    assert code == 0 and "placement loop, 1 stage;" in out, out


LITERAL_BAD = """\
schedule literal_bad {
  stages 2
  place loop
  rank 0: 0B0 0F0
  rank 1: 1F0 1B0
}
"""


def test_a_schedule_without_parameters_is_refuted_at_its_one_setting_in_words(tmp_path, run_cli):
    # was "refuted at  (smallest failing setting; checks)": an empty setting, and no smaller one to seek
    path = tmp_path / "literal_bad.pp"
    path.write_text(LITERAL_BAD)
    code, out, _ = run_cli("prove", str(path), "-q")
    assert code == 1 and out.startswith("literal_bad: refuted at its one setting (it has no parameters; checks)")
    code, out, _ = run_cli("prove", str(path), "--json")
    got = json.loads(out)
    assert code == 1 and got["counterexample"]["params"] == {} and got["bounded"] is None


def test_a_sweep_that_meets_no_setting_says_so(run_cli):
    # was "bounded check, not a proof: 0 settings (), all clean"
    code, out, _ = run_cli("prove", "1f1b", "--assume", "P >= 9", "-q")
    assert "0 settings" not in out and "()" not in out
    assert "checked concretely: none: no setting with each parameter at most 8 satisfies the assumptions" in out
    code, out, _ = run_cli("prove", "1f1b", "--assume", "P >= 9", "--json")
    assert json.loads(out)["bounded"] == {"settings": 0, "largest": {}, "ok": True, "parameters": ["P", "M"]}
