"""`prove` refutes only where `check` fails, at the smallest setting it names, and counts memory as
`check` does (issue 30, items 4, 5, 6 and 10).

A saved certificate that no longer fits gives way to the search; "smallest failing setting" is the
smallest by the sum of the parameters, then each in turn; a file that compiles nowhere is bad input
(exit 2), as for `check`; and the memory count is check's rule (act, weight) in whole units.
"""
from __future__ import annotations

import itertools
import json
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedc
from schedc.errors import SchedcError
from schedc.prove import prove
from schedc.resources import builtin_schedules

ONE_F_ONE_B = builtin_schedules()["1f1b"].read_text()


def passes(path, **params) -> bool:
    try:
        return schedc.check(schedc.load(str(path), params)).ok is True
    except SchedcError:
        return False


# ---- item 4: a stale certificate saved with the schedule gives way to the search

def test_a_stale_saved_certificate_gives_way_to_the_search(tmp_path):
    path = tmp_path / "1f1b.pp"
    path.write_text(ONE_F_ONE_B)
    (tmp_path / "1f1b.cert.json").write_text(json.dumps(prove(str(path)).to_dict()))
    # one more warm-up forward: the same statements on the same lines, a larger memory bound
    path.write_text(ONE_F_ONE_B.replace("let warm = min(P - 1 - r, M)", "let warm = min(P - r, M)"))
    assert passes(path, P=1, M=2)  # where the old certificate's bound min(P - r, M) fails
    proof = prove(str(path))
    assert proof.verdict == "proved", (proof.reason, proof.counterexample)
    assert proof.memory_bound == "min(P - r + 1, M)"


def test_a_certificate_whose_memory_bound_fails_is_unknown_not_a_refutation(tmp_path, run_cli):
    path = tmp_path / "warm.pp"
    path.write_text(ONE_F_ONE_B)
    cert = tmp_path / "old.json"
    cert.write_text(json.dumps(prove(str(path)).to_dict()))
    path.write_text(ONE_F_ONE_B.replace("let warm = min(P - 1 - r, M)", "let warm = min(P - r, M)"))
    code, out, _ = run_cli("prove", str(path), "--certificate", str(cert), "-q")
    assert code == 3 and "refuted" not in out
    assert "the certificate's bound min(P - r, M) fails at P=1, M=2" in out


# ---- item 5: "smallest failing setting" is the smallest, by sum then each parameter

TWO_BUGS = """schedule two_bugs(P = 4, M = 8) {
  require P >= 1, M >= 1
  stages P
  place loop
  rank r {
    let warm = min(P - 1 - r, M)
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
    if P >= 31 and M >= 4 and r == 0 { B(1, 0) }
    if P >= 10 and r == 0 { B(0, 0) }
  }
}
"""


def test_the_smallest_failing_setting_is_the_smallest(tmp_path, run_cli):
    """Z3 finds the wrong-rank B(1, 0) at P=31, M=4 first; the duplicate B(0, 0) fails from P=10."""
    path = tmp_path / "two_bugs.pp"
    path.write_text(TWO_BUGS)
    proof = prove(str(path))
    assert proof.verdict == "refuted" and proof.counterexample.get("smallest", True)
    assert proof.counterexample["params"] == {"P": 10, "M": 1}
    assert not passes(path, P=10, M=1)
    before = [(P, M) for P, M in itertools.product(range(1, 11), range(1, 11))
              if (P + M, P) < (11, 10)]  # every setting before P=10, M=1 in the stated order
    assert all(passes(path, P=P, M=M) for P, M in before)
    code, out, _ = run_cli("prove", str(path), "-q")
    assert code == 1 and out.startswith("two_bugs: refuted at P=10, M=1 (smallest failing setting")


def test_a_refutation_not_shown_smallest_says_so(tmp_path, monkeypatch):
    from schedc.prove import prover
    path = tmp_path / "two_bugs.pp"
    path.write_text(TWO_BUGS)
    monkeypatch.setattr(prover, "LEAST_PAIRS", 10)  # no work left to look below the first failure found
    proof = prove(str(path))
    assert proof.verdict == "refuted" and proof.counterexample["smallest"] is False
    assert not passes(path, **proof.counterexample["params"])


# ---- item 6: input that compiles nowhere is an input error (exit 2), as in check and sim

@pytest.mark.parametrize("text", ["schedule bad {\n  rank 0: 0F0 0X0 0B0\n}\n",
                                  "schedule bad(M = 2) {\n  rank 0: 0F0 0B0\n  rank 1: 1F0 1Q0\n}\n"])
def test_a_file_that_compiles_nowhere_is_bad_input(tmp_path, run_cli, text):
    path = tmp_path / "bad.pp"
    path.write_text(text)
    with pytest.raises(SchedcError) as info:
        prove(str(path))
    assert info.value.code == "bad-action"
    for command in ("check", "sim", "prove"):
        code, out, err = run_cli(command, str(path))
        assert code == 2 and "error[bad-action]" in err and "refuted" not in out, command


# ---- item 10: memory counted by check's rule, in check's units

LAG = """schedule lag(M = 4) {
  require M >= 1
  ranks 1
  stages 1
  place loop
  memory act = 2, weight = 1, limit = 3
  rank 0 {
    F(0, 0)
    I(0, 0)
    for m in 1 .. M { F(0, m); W(0, m - 1); I(0, m) }
    W(0, M - 1)
  }
}
"""


def test_a_split_backward_is_counted_as_check_counts_it(tmp_path, run_cli):
    """I frees act - weight: check's peak is 3 (1.5 activations), within the limit at every M."""
    path = tmp_path / "lag.pp"
    path.write_text(LAG)
    assert all(passes(path, M=M) for M in (1, 2, 7, 300))
    proof = prove(str(path))
    assert proof.verdict == "proved", proof.reason
    assert proof.memory_bound == "min(2 * M, 3)"
    (limit,) = [p for p in proof.parts if p.name == "memory limit"]
    assert limit.status == "proved"
    # a bound below check's peak is refuted, and told in check's figures
    code, out, _ = run_cli("prove", str(path), "--memory", "2", "-q")
    assert code == 1 and "refuted at M=2" in out and "check's peak activation: 3" in out
    assert check_peak(path, M=2) == 3


def check_peak(path, **params) -> float:
    return max(schedc.check(schedc.load(str(path), params)).peak_activation)


ZB_LAZY = """schedule lazy(P = 4, M = 8) {{
  require P >= 1, M >= 1
  stages P
  place loop
  memory act = {act}, weight = {weight}
  rank r {{
    let warm = min(P - 1 - r, M)
    for m in 0 .. warm {{ F(r, m) }}
    for m in 0 .. M - warm {{ F(r, m + warm); I(r, m) }}
    for m in M - warm .. M {{ I(r, m) }}
    for m in 0 .. M {{ W(r, m) }}
  }}
}}
"""


@settings(max_examples=25, deadline=None)
@given(sizes=st.sampled_from([("2", "1"), ("3", "1"), ("1", "1"), ("0.5", "0.25"), ("5", "2"), ("4", "0")]),
       P=st.integers(1, 5), M=st.integers(1, 7))
def test_the_proofs_count_times_its_unit_is_checks_peak(tmp_path_factory, sizes, P, M):
    """Invariant: the prover's count at a setting, in whole units, times the unit's size, is the
    peak activation `check` reports there, rank by rank."""
    from schedc.parse import parse
    from schedc.prove.model import memory_units, model
    from schedc.prove.search import peaks
    text = ZB_LAZY.format(act=sizes[0], weight=sizes[1])
    path = tmp_path_factory.mktemp("lazy") / "lazy.pp"
    path.write_text(text)
    m = model(parse(text, str(path)))
    units = memory_units(m)
    assert units.act == Fraction(sizes[0])
    counted = [float(Fraction(p) * units.act * units.unit) for p in peaks(m, {"P": P, "M": M}, sizes=units.sizes)]
    checked = schedc.check(schedc.load(str(path), {"P": P, "M": M})).peak_activation
    assert counted == pytest.approx(list(checked)), (sizes, P, M)


def test_sizes_the_count_cannot_follow_make_memory_unknown_never_refuted(tmp_path):
    """A weight over act (an I adds memory) and per-stage sizes: unknown, with check's reason."""
    for memory in ("memory act = 1, weight = 2", "memory stage 0: act = 3"):
        path = tmp_path / "sized.pp"
        path.write_text(ZB_LAZY.replace("memory act = {act}, weight = {weight}", memory)
                        .replace("{{", "{").replace("}}", "}"))
        proof = prove(str(path), memory="1")
        assert proof.verdict == "unknown", memory
        (part,) = [p for p in proof.parts if p.name == "memory"]
        assert part.status == "unknown" and "the count cannot be `check`'s" in part.detail
