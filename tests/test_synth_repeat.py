"""`schedc synth --repeat`: the steady state as a loop, one schedule for every M. The file gives
back the very order found, checks clean at every M it claims (and beyond), and `schedc prove`
proves it for every M; without a loop form it says why and writes the list."""
from __future__ import annotations

import json

import pytest

from schedc.api import check, load
from schedc.errors import SchedcError
from schedc.prove import prove
from schedc.synth.repeat import RankFold, body, fold_rank


def synth(run_cli, tmp_path, *args):
    out = tmp_path / "every.pp"
    code, stdout, stderr = run_cli("synth", *args, "--repeat", "--time-limit", "60", "-o", str(out), "--json")
    assert code == 0, stderr
    return json.loads(stdout), out, stderr


def orders(program):
    return [[str(a) for a in rank] for rank in program.ranks]


@pytest.mark.parametrize("P, M, cap, extra", [(4, 16, "4", ()), (4, 16, "5", ()), (4, 16, "6", ()),
                                              (3, 12, "3", ("--cost", "F=1,I=2,W=1,latency=1"))])
def test_the_loop_form_is_the_order_found_and_holds_for_every_m_it_claims(run_cli, tmp_path, P, M, cap, extra):
    report, out, _ = synth(run_cli, tmp_path, "--param", f"P={P}", "--param", f"M={M}", "--memory-limit", cap,
                           *extra)
    rep = report["repeat"]
    assert rep["ok"] is True and rep["min_M"] <= M
    assert orders(load(str(out), {"M": M})) == report["order"]  # the very order synthesised
    text = out.read_text()
    assert f"require M >= {rep['min_M']}" in text and "for i in 0 .." in text
    step = rep["modulus"]
    for m in range(rep["min_M"], M + 6 * step, step):  # beyond what synth itself checked, too
        program = load(str(out), {"M": m})
        assert check(program).ok is True, m
        assert max(len(r) for r in program.ranks) >= 3 * m  # every microbatch's F, I, W
    below = rep["min_M"] - step
    if below >= 1:  # the require is the smallest M that works: without it, the next M down fails
        loose = tmp_path / "loose.pp"
        loose.write_text(text.replace(f"require M >= {rep['min_M']}", "require M >= 1"))
        try:
            ok = check(load(str(loose), {"M": below})).ok is True
        except SchedcError:
            ok = False
        assert not ok, below


@pytest.mark.parametrize("P, M, cap, modulus", [
    (2, 8, 2, 2),  # a block of two microbatches: `require M % 2 == 0`, loops over (M - 2) // 2
    pytest.param(4, 16, 4, 1, marks=pytest.mark.slow),  # 15-40 s to prove
])
def test_prove_proves_a_synthesised_loop_form_for_every_m(run_cli, tmp_path, P, M, cap, modulus):
    from schedc.parse import parse
    from schedc.prove.model import model
    from schedc.prove.search import peaks
    report, out, _ = synth(run_cli, tmp_path, "--param", f"P={P}", "--param", f"M={M}", "--memory-limit", str(cap))
    assert report["repeat"]["ok"] is True and report["repeat"]["modulus"] == modulus
    p = prove(str(out))
    assert p.verdict == "proved", p.reason
    assert p.memory_bound is not None
    for m in (report["repeat"]["min_M"], M, 2 * M + modulus):
        peak = max(peaks(model(parse(out.read_text(), str(out))), {"M": m}))
        assert peak <= cap


def test_without_a_loop_form_the_list_is_written_and_the_reason_given(run_cli, tmp_path):
    report, out, stderr = synth(run_cli, tmp_path, "--param", "P=2", "--param", "M=2")
    assert report["repeat"]["ok"] is False and report["repeat"]["reason"]
    assert "no loop form" in stderr
    assert "rank 0:" in out.read_text()  # the literal list, which checks clean
    assert check(load(str(out))).ok is True
    listed = prove(str(out))  # no `ranks` or `microbatches` declared: counted from the lists
    assert listed.verdict == "proved", listed.reason
    assert listed.memory_bound == str(int(max(report["peak_memory"])))


def test_fold_finds_the_longest_repetition_and_body_counts_back_from_m():
    row = [("F", 0, 0), ("F", 0, 1)] + [x for i in range(5) for x in (("F", 0, i + 2), ("B", 0, i))] + \
          [("B", 0, 5), ("B", 0, 6)]
    f = fold_rank(row, 7)
    assert f == RankFold((("F", 0, 0), ("F", 0, 1)), (("F", 0, 2), ("B", 0, 0)), 1, 5, (("B", 0, 5), ("B", 0, 6)))
    assert body(f, 7) == "F(0, 0); F(0, 1); for i in 0 .. M - 2 { F(0, i + 2); B(0, i) }; B(0, M - 2); B(0, M - 1)"
    assert fold_rank([("F", 0, 0), ("B", 0, 0)], 1) is None  # too short to repeat
    two = [x for i in range(3) for x in (("F", 0, 2 * i), ("F", 0, 2 * i + 1), ("B", 0, 2 * i), ("B", 0, 2 * i + 1))]
    assert fold_rank(two, 6).step == 2 and fold_rank(two, 6).count == 3
