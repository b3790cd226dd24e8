"""`prove` claims exactly what `check` checks at every setting it covers (issue 17).

A proof covers the file's memory sizes, limits and annotations, not only the unit count; a
refutation names a setting where `check` really fails, the smallest; and every setting the
search meets on its way is checked concretely, so a failure found there is never `unknown`.
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

import schedc
from schedc.errors import SchedcError
from schedc.prove import prove

DATA = Path(__file__).parent / "data" / "prove"


def check_at(name: str, **params) -> bool:
    """Does `schedc check` pass at these parameters (a compile error fails)?"""
    try:
        return schedc.check(schedc.load(str(DATA / f"{name}.pp"), params)).ok is True
    except SchedcError:
        return False


@pytest.mark.parametrize("name, P, M", [("limit_19", 20, 20), ("act3_limit30", 11, 11)])
def test_a_memory_limit_in_the_file_is_refuted_where_check_fails(name, P, M):
    proof = prove(str(DATA / f"{name}.pp"))
    assert proof.verdict == "refuted"
    assert proof.counterexample["params"] == {"P": P, "M": M}
    assert proof.counterexample.get("smallest", True)
    assert not check_at(name, P=P, M=M)
    # the smallest: one less of either parameter passes
    assert check_at(name, P=P - 1, M=M) and check_at(name, P=P, M=M - 1)


def test_a_memory_limit_that_holds_is_part_of_the_proof():
    proof = prove(str(DATA / "act3_limit3p.pp"))
    assert proof.verdict == "proved"
    (part,) = [p for p in proof.parts if p.name == "memory limit"]
    assert part.status == "proved" and "3 x (min(P - r, M))" in part.detail
    for P, M in ((64, 512), (37, 5), (9, 300)):  # far beyond the sweep, as the claim says
        assert check_at("act3_limit3p", P=P, M=M)


def test_a_limit_the_proof_cannot_model_is_unknown_not_proved():
    proof = prove(str(DATA / "sized_messages.pp"))
    assert proof.verdict == "unknown"
    (part,) = [p for p in proof.parts if p.name == "memory limit"]
    assert part.status == "unknown" and "memory out" in part.detail


def test_an_annotation_the_compiler_refuses_beyond_the_sweep_is_refuted():
    proof = prove(str(DATA / "late_cost.pp"))
    assert proof.verdict == "refuted"
    assert proof.counterexample["params"] == {"P": 11, "M": 1}
    assert not check_at("late_cost", P=11, M=1) and check_at("late_cost", P=10, M=1)


def test_a_failing_setting_the_timing_search_meets_is_a_refutation():
    proof = prove(str(DATA / "warmup_from_50.pp"))
    assert proof.verdict == "refuted"
    assert proof.counterexample["params"] == {"P": 3, "M": 50}
    assert proof.counterexample.get("smallest", True)
    assert "deadlock" in proof.counterexample["summary"] + proof.counterexample["report"]
    assert not check_at("warmup_from_50", P=3, M=50)
    assert check_at("warmup_from_50", P=2, M=50) and check_at("warmup_from_50", P=3, M=49)


# ---- property: on generated parametric schedules, every verdict agrees with `check` far beyond the sweep

WARMUPS = ["min(P - 1 - r, M)", "min(P - r, M)", "M", "min(2 * (P - 1 - r), M)", "min(r, M)",
           "(M >= {k} and r == 0) ? 0 : min(P - 1 - r, M)", "(P >= {k} and r == 1) ? 0 : min(P - 1 - r, M)"]
MEMORY = ["", "memory limit = {n}", "memory act = {a}, limit = {n}", "memory limit = {c} * P",
          "memory act = {a}, limit = {c} * P + {n}", "memory limit = {n}\n  memory rank {k0}: limit = {c} * M",
          "memory limit = {n}, out = 1", "cost F = {n} - P"]


def source(warm: str, memory: str) -> str:
    return f"""schedule generated(P = 4, M = 8) {{
  require P >= 1, M >= 1
  stages P
  place loop
  {memory}
  rank r {{
    let warm = {warm}
    for m in 0 .. warm     {{ F(r, m) }}
    for m in 0 .. M - warm {{ F(r, m + warm); B(r, m) }}
    for m in M - warm .. M {{ B(r, m) }}
  }}
}}
"""


def passes(path, P: int, M: int) -> bool:
    try:
        return schedc.check(schedc.load(str(path), {"P": P, "M": M})).ok is True
    except SchedcError:
        return False


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(warm=st.sampled_from(WARMUPS), memory=st.sampled_from(MEMORY), k=st.integers(2, 40),
       k0=st.integers(0, 3), n=st.integers(1, 40), a=st.sampled_from(["2", "3", "0.5"]), c=st.integers(1, 3),
       far=st.lists(st.tuples(st.integers(1, 64), st.integers(1, 512)), min_size=3, max_size=3))
def test_generated_verdicts_agree_with_check_beyond_the_sweep(tmp_path, warm, memory, k, k0, n, a, c, far):
    path = tmp_path / "generated.pp"
    path.write_text(source(warm.format(k=k), memory.format(k0=k0, n=n, a=a, c=c)))
    proof = prove(str(path))
    if proof.verdict == "proved":  # the claim covers every setting: check it well beyond the sweep
        for P, M in far:
            assert passes(path, P, M), (warm, memory, P, M)
    elif proof.verdict == "refuted":  # a real failure, and nothing smaller fails next to it
        P, M = proof.counterexample["params"]["P"], proof.counterexample["params"]["M"]
        assert not passes(path, P, M)
        if proof.counterexample.get("smallest", True):
            assert (P == 1 or passes(path, P - 1, M)) and (M == 1 or passes(path, P, M - 1))


def test_the_default_activation_size_is_each_stages_share_of_a_rank_chunk():
    """docs/semantics.md "Units": R / S per stage, as the compiler's default; the limit proof reads
    it as a number where the stages are a fixed multiple of the ranks, and as R / S otherwise."""
    from schedc.parse import parse
    from schedc.prove import smt
    from schedc.prove.model import memory_spec, model
    from schedc.resources import builtin_schedules

    def share(name):
        tree = parse(builtin_schedules()[name].read_text(), name)
        m = model(tree)
        return smt.share(smt.Encoding(m, ()), memory_spec(m))
    assert share("1f1b") == 1 and share("zbv") == Fraction(1, 2)
    for name, P, M in (("1f1b", 5, 7), ("zbv", 3, 6)):
        program = schedc.load(name, {"P": P, "M": M})
        assert {program.annotations.memory_of(s).act for s in range(program.num_stages)} == {float(share(name))}
