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
    assert json.loads(out)["bounded"] == {"settings": 0, "largest": {}, "ok": True, "parameters": ["P", "M"],
                                             "every_setting": False}


def test_a_synthesised_list_is_proved_by_checking_its_one_setting(tmp_path, run_cli):
    # was "unknown: no closed form in P, M and the rank matches the sampled peaks" (exit 3) with
    # "memory limit unknown", though check passes at the one setting such a file has
    out = tmp_path / "s.pp"
    code, _, err = run_cli("synth", "--param", "P=3,M=4", "--memory-limit", "3", "-o", str(out))
    assert code == 0, err
    code, text, _ = run_cli("prove", str(out), "-q")
    assert code == 0, text
    assert text.startswith("synth_loop_p3_m4: proved at its one setting (it has no parameters), by checking it")
    parts = {line.split()[0]: line for line in text.splitlines()[1:] if line.startswith("  ")}
    assert "check finds no deadlock under rendezvous sends at its one setting" in parts["deadlock-free"]
    assert "memory limit   proved   check finds every rank within the file's memory limit" in text
    code, text, _ = run_cli("prove", str(out), "--json")
    got = json.loads(text)
    assert code == 0 and got["verdict"] == "proved" and got["certificate"] is None
    assert got["bounded"]["every_setting"] is True and got["bounded"]["parameters"] == []
    assert {p["name"]: p["status"] for p in got["parts"]} == {
        "well-formed": "proved", "deadlock-free": "proved", "memory": "proved", "memory limit": "proved"}


def test_parameters_bounded_to_the_sweep_are_proved_by_checking_every_setting(run_cli):
    code, text, _ = run_cli("prove", "1f1b", "--assume", "P <= 2", "--assume", "M <= 3", "--json")
    got = json.loads(text)
    assert code == 0 and got["verdict"] == "proved" and got["bounded"]["every_setting"] is True
    assert got["bounded"]["settings"] == 6 and got["memory_bound"] == "min(P - r, M)"  # equal at all 6
    assert "at each of the 6 settings there are" in got["parts"][1]["detail"]


NINE = """\
schedule nine(P = 4, M = 2) {
  require P >= 1, P <= LAST, M >= 1, M <= 2
  stages P
  place loop
  rank r {
    let warm = P == 9 ? min(r, M) : min(P - 1 - r, M)
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
"""


@pytest.mark.parametrize("last, verdict", [(8, "proved"), (9, "refuted")])
def test_checking_is_a_proof_only_when_the_sweep_met_every_setting(last, verdict, tmp_path):
    # the sweep checks each parameter up to 8: with P <= 9 the domain holds P = 9, which it never met
    # (and where this schedule deadlocks), so no proof by checking; with P <= 8 it met all 16
    from schedc.prove import prove
    path = tmp_path / "nine.pp"
    path.write_text(NINE.replace("LAST", str(last)))
    p = prove(str(path))
    assert p.verdict == verdict
    if verdict == "proved":
        assert p.bounded["every_setting"] is True and p.bounded["settings"] == 16
    else:
        assert p.counterexample["params"] == {"P": 9, "M": 2}


def test_a_parameter_unbounded_below_is_not_checked_exhaustively(tmp_path):
    # parameters may be negative (check takes --param K=-1): K <= 1 alone leaves infinitely many
    from schedc.prove import prove
    path = tmp_path / "k.pp"
    path.write_text("schedule k(P = 2, M = 2, K = 0) {\n  require P <= 2, M <= 2, K <= 1\n  stages P\n"
                    "  place loop\n  rank r {\n    for m in 0 .. M { F(r, m) }\n    for m in 0 .. M { B(r, M - 1 - m) }\n"
                    "  }\n}\n")
    p = prove(str(path))
    assert p.verdict == "proved" and p.bounded["every_setting"] is False and p.certificate is not None
    p = prove(str(path), assumptions=("K >= 0",))
    assert p.verdict == "proved" and p.bounded["every_setting"] is True and p.certificate is None


def test_a_domain_past_every_sample_names_the_bound_and_ends_quickly(monkeypatch):
    # `prove 1f1b --assume 'P >= 100000000'` took ~21 s (two descents of 10,000 one-step queries
    # each, towards settings far past any checked concretely) to end with "the bound fails
    # symbolically at {'P': 100000000, 'M': 1}, too large to confirm concretely", a bound guessed
    # from no samples at all, not named
    from schedc import solver
    from schedc.prove import prove
    asked = []
    real = solver.check

    def counted(*args, **kwargs):
        asked.append(1)
        assert len(asked) < 3000, "a descent asks for each smaller value in turn"
        return real(*args, **kwargs)
    monkeypatch.setattr(solver, "check", counted)
    p = prove("1f1b", assumptions=("P >= 100000000",))
    assert p.verdict == "unknown" and [x.status for x in p.parts] == ["proved", "proved", "unknown"]
    assert p.reason.startswith("no setting with each parameter at most 20 satisfies the assumptions, so there are "
                               "no sampled peaks to guess a bound from; state one with --memory")
    p = prove("1f1b", assumptions=("P >= 100000000",), memory="min(P - r, M)")
    assert p.verdict == "proved"  # as before, with the timing found from the halving descents
    p = prove("1f1b", assumptions=("P >= 100000000",), memory="min(P - r - 1, M)")
    assert p.verdict == "unknown" and p.reason == ("the memory bound min(P - r - 1, M) fails symbolically at "
                                                   "P=100000000, M=1, too large to count concretely")


def test_the_json_object_has_the_commands_file_ok_and_errors(tmp_path, run_cli):
    """docs/cli.md, "JSON": a one-object command opens with the input as given and has `ok` and
    `errors`; a refutation's errors are check's at the failing setting, a bound's a `memory` error."""
    code, out, _ = run_cli("prove", "1f1b", "--json")
    doc = json.loads(out)
    assert code == 0 and list(doc)[0] == "file" and doc["file"] == "1f1b"
    assert doc["ok"] is True and doc["errors"] == []
    path = tmp_path / "wrong.pp"
    path.write_text(ONE_WRONG)
    code, out, _ = run_cli("prove", str(path), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["errors"]
    setting = doc["counterexample"]["params"]
    assert doc["errors"] == json.loads(run_cli("check", str(path), "--param",
                                               ",".join(f"{k}={v}" for k, v in setting.items()),
                                               "--json")[1])["errors"]
    code, out, _ = run_cli("prove", "1f1b", "--memory", "P - r - 1", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and [(e["code"], e["rank"]) for e in doc["errors"]] == [("memory", 0)]
