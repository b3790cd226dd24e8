"""`schedc prove` for schedules with routes (docs/prove.md, "Routes"): DualPipe is proved for every
setting, and mutants of it (a swapped pair, an action off its route, a missing forward, a route
that leaves a microbatch out) are refuted or at least not proved. Most bugs below are written
to appear only at P >= 6 or 8, past the concrete sweep (P <= 4 for DualPipe's M >= 2P), so the
symbolic obligations, not the sweep, must catch them; a memory limit is counted in the sizes a
routed schedule has.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import schedc
from schedc.errors import SchedcError
from schedc.prove import prove
from schedc.prove.model import model
from schedc.prove.smt import _producers
from schedc.rules.deps import needs
from schedc.ir import Action, Op

ROOT = Path(__file__).resolve().parents[1]
DUALPIPE = (ROOT / "schedules" / "dualpipe.pp").read_text()
PHASE1 = "for i in 0 .. 2 * after { F(st(0), mb(0, i)) }"
PHASE2 = "for i in 0 .. h + 1 { F(st(0), mb(0, 2 * after + i)); F(st(1), mb(1, i)) }"
ROUTE1 = "route microbatches M // 2 .. M: stages P .. 2 * P"


def mutant(tmp_path, name: str, old: str, new: str) -> Path:
    """dualpipe.pp with `old` replaced by `new`, named `name`."""
    assert old in DUALPIPE
    path = tmp_path / f"{name}.pp"
    path.write_text(DUALPIPE.replace(old, new).replace("schedule dualpipe(", f"schedule {name}("))
    return path


def check_at(path, **params) -> bool:
    """Does `schedc check` pass at these parameters (a compile error fails)?"""
    try:
        return schedc.check(schedc.load(str(path), params)).ok is True
    except SchedcError:
        return False


def test_the_model_keeps_the_routes():
    from schedc.parse import parse
    m = model(parse(DUALPIPE, "dualpipe.pp"))
    assert len(m.routes) == 2


def test_the_route_restriction_is_read_off_the_rule():
    """Each dependency across stages is confined to the consumer's run of stages, as deps.py says;
    a dependency on the stage itself is not (it is always there)."""
    rows = _producers()
    for kind, table in rows.items():
        for kinds, offset, confined in table:
            assert confined == (offset != 0), (kind, offset)
    # the offsets are deps.py's (F needs s - 1's activation, B the gradient of s + 1)
    assert {(o, c) for _, o, c in rows["F"]} == {(v[1] - 3, True) for v in needs(Action(Op.F, 3, 0), 9)}


@pytest.mark.slow  # ~25 s
def test_dualpipe_is_proved_and_agrees_with_check():
    proof = prove("dualpipe")
    assert proof.verdict == "proved", proof.to_dict()
    parts = {p.name: p for p in proof.parts}
    assert parts["well-formed"].status == "proved" and "route" in parts["well-formed"].detail
    assert parts["deadlock-free"].status == "proved"
    assert parts["memory"].status == "proved" and proof.memory_bound == "P + 1"
    # check agrees at every setting the sweep names and beyond it: passes, within P + 1 activations
    # (with routes the default activation size of a stage is R / L, L = P stages in one copy: 1)
    for P, M in ((2, 4), (2, 8), (4, 8), (6, 12), (6, 16), (8, 16), (10, 24)):
        report = schedc.check(schedc.load("dualpipe", {"P": P, "M": M}))
        assert report.ok is True, (P, M)
        assert max(report.peak_activation) <= P + 1, (P, M, report.peak_activation)
    assert max(schedc.check(schedc.load("dualpipe", {"P": 4, "M": 8})).peak_activation) == 5  # (tight)
    again = prove("dualpipe", certificate=proof.certificate)  # its certificate re-checks, without a search
    assert again.verdict == "proved" and again.memory_bound == "P + 1"


@pytest.mark.slow  # ~30 s
def test_a_memory_limit_is_counted_in_a_routed_copy_s_sizes(tmp_path):
    """The default activation size with routes is R / L (one copy of the model's L stages), as the
    compiler has it, not R / S: at P = 6 a limit of 4 is under the peak of 7, so check fails there."""
    limit = "  memory limit = P >= 6 ? (P + 1) // 2 + 1 : P + 1\n"
    path = mutant(tmp_path, "limited", "  place vshape", limit + "  place vshape")
    assert check_at(path, P=4, M=8) and not check_at(path, P=6, M=12)
    proof = prove(str(path))
    assert proof.verdict == "refuted" and proof.counterexample["params"] == {"P": 6, "M": 12}
    ok = mutant(tmp_path, "limited_ok", "  place vshape", "  memory limit = P + 1\n  place vshape")
    proof = prove(str(ok))
    assert proof.verdict == "proved"
    assert check_at(ok, P=6, M=12) and check_at(ok, P=10, M=30)  # (peak 11 = the limit)
    (part,) = [p for p in proof.parts if p.name == "memory limit"]
    assert part.status == "proved"


def test_an_action_off_its_route_is_refuted(tmp_path):
    path = mutant(tmp_path, "offroute", PHASE1, PHASE1.replace("mb(0, i)", "mb(h == 2 ? 1 : 0, i)"))
    assert check_at(path, P=4, M=8) and not check_at(path, P=8, M=16)
    proof = prove(str(path))
    assert proof.verdict == "refuted"
    assert proof.counterexample["params"] == {"P": 8, "M": 16}
    assert "off-route" in proof.counterexample["report"]


def test_a_route_that_leaves_a_microbatch_out_is_refuted(tmp_path):
    path = mutant(tmp_path, "lost", ROUTE1, ROUTE1.replace("M // 2 ..", "M // 2 + (P >= 6 ? 1 : 0) .."))
    proof = prove(str(path))
    assert proof.verdict == "refuted"
    assert proof.counterexample["params"] == {"P": 6, "M": 12}
    assert "on no route" in proof.counterexample["report"]


def test_a_missing_forward_is_refuted(tmp_path):
    """Z3's first counterexample (M in the tens of thousands) is too large to check; one among
    small settings is checked instead, and the smallest failing one reported."""
    path = mutant(tmp_path, "missing", PHASE1, PHASE1.replace("2 * after {", "2 * after - (h == 2 ? 1 : 0) {"))
    assert check_at(path, P=4, M=8) and not check_at(path, P=8, M=16)
    proof = prove(str(path))
    assert proof.verdict == "refuted" and proof.counterexample["params"] == {"P": 8, "M": 16}
    assert "missing" in proof.counterexample["report"]
    (part,) = [p for p in proof.parts if p.name == "well-formed"]
    assert part.status == "refuted" and "on its route" in part.detail


def test_a_swapped_pair_that_deadlocks_is_refuted(tmp_path):
    f0, f1 = "F(st(0), mb(0, 2 * after + i))", "F(st(1), mb(1, i))"
    path = mutant(tmp_path, "swapped", PHASE2, PHASE2.replace(f"{f0}; {f1}", f"{f1}; {f0}"))
    proof = prove(str(path))
    assert proof.verdict == "refuted"
    assert "deadlock" in proof.counterexample["report"]
    assert not check_at(path, **proof.counterexample["params"])


@pytest.mark.slow  # ~20 s
def test_a_swapped_pair_only_at_large_p_is_refuted(tmp_path):
    """Past the sweep (P <= 4): no timing orders the sampled instances, whose settings are then
    checked, and the smallest failing one is reported."""
    f0, f1 = "F(st(0), mb(0, 2 * after + i))", "F(st(1), mb(1, i))"
    body = PHASE2[PHASE2.index("{ ") + 2:-2]
    path = mutant(tmp_path, "swapped6", PHASE2, PHASE2.replace(
        body, f"if h == 2 {{ {f1}; {f0} }} else {{ {body} }}"))
    assert check_at(path, P=4, M=8) and not check_at(path, P=6, M=12)
    proof = prove(str(path))
    assert proof.verdict == "refuted" and proof.counterexample["params"] == {"P": 6, "M": 12}
    assert "deadlock" in proof.counterexample["report"]
