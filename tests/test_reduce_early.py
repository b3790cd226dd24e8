"""Reductions come after their stage's backwards: a REDUCE_GRAD (or REDUCE_TIED) placed before a B
or W of a stage it reduces is `reduce-early` (schedc/rules/deps.py's `reduces`, read by lint, by both
fast paths and by the runtime's refusal).

torch's runtime reduces, and scales by 1/M, the partial sum of such a schedule and trains silently
wrong; schedc's runtime stopped at it with "after only k of its M backwards" after `check` had
passed it. The checks and `run` now refuse it before any rank starts, the runtime still refuses it
(with --no-verify) at the same action, and the fast paths do not clear it (a PyTorch CSV too).
"""
from __future__ import annotations

from dataclasses import replace
from itertools import product

import pytest
from hypothesis import given, settings, strategies as st

import schedc
from schedc.columns import held_as_columns
from schedc.ir import Action, Op
from schedc.passes.stage_ops import add_reduce_grad
from schedc.report import run_checks
from schedc.rules.semantics import Semantics
from schedc.span import span_text
from schedc.verify import small
from schedc.verify.fast import array_check

from conftest import compile_text

# 1F1B at P=2, M=3, with stage 0's REDUCE_GRAD before its last backward (the case of issue #30)
EARLY = """schedule early(P = 2, M = 3) {{
  stages P
  place loop
  {replicas}
  rank 0 {{ F(0, 0) F(0, 1) B(0, 0) F(0, 2) B(0, 1) {early}B(0, 2){late} }}
  rank 1 {{ F(1, 0) B(1, 0) F(1, 1) B(1, 1) F(1, 2) B(1, 2) REDUCE_GRAD(1) }}
}}"""


def early(replicas: int = 1, placed: str = "early") -> schedc.Program:
    text = EARLY.format(replicas=f"replicas {replicas}" if replicas > 1 else "",
                        early="REDUCE_GRAD(0) " if placed == "early" else "",
                        late=" REDUCE_GRAD(0)" if placed == "late" else "")
    return compile_text(text, name="early.pp")


@pytest.mark.parametrize("semantics", ["rendezvous", "gloo"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_reduction_before_its_stages_last_backward_is_refused(semantics, replicas):
    report = schedc.check(early(replicas), semantics=semantics)
    assert [d.code for d in report.errors] == ["reduce-early"], report.render()
    (finding,) = report.errors
    assert finding.rank == 0 and finding.step == 5  # told once, not once per identical replica
    assert span_text(finding.span) == "REDUCE_GRAD(0)" and finding.span.line == 5
    assert "REDUCE_GRAD(0) reduces stage 0's gradients before 1 of the 3 backwards" in finding.message
    assert finding.notes[0] == "B(0,2) comes after it, at step 6 (written at early.pp:5)"
    if replicas > 1:
        assert "rank 0 (replica 0)" in finding.message
        assert finding.notes[-1] == "replica 1 runs the same schedule: the same at rank 2"
    fine = schedc.check(early(replicas, placed="late"), semantics=semantics)
    assert fine.ok, fine.render()


def test_replicas_that_differ_are_told_each():
    program = compile_text("""schedule dp(P = 2, M = 2) {
      stages P
      place loop
      replicas 3
      rank r, replica d {
        for m in 0 .. M { F(r, m) }
        if d == 1 and r == 0 { B(r, 0) REDUCE_GRAD(r) B(r, 1) } else { B(r, 0) B(r, 1) REDUCE_GRAD(r) }
      }
    }""")
    report = schedc.check(program, semantics="gloo")
    assert [(d.code, d.rank) for d in report.errors] == [("reduce-early", 2)]
    assert "rank 2 (replica 1), step 3: REDUCE_GRAD(0)" in report.errors[0].message


def test_a_split_backwards_w_adds_to_the_gradients_and_its_i_does_not():
    body = "rank 0: 0F0 0I0 {w}0REDUCE_GRAD {late}"
    assert schedc.check(compile_text("schedule s { " + body.format(w="0W0 ", late="") + " }")).ok
    report = schedc.check(compile_text("schedule s { " + body.format(w="", late="0W0") + " }"))
    assert [d.code for d in report.errors] == ["reduce-early"]
    assert report.errors[0].notes[0].startswith("W(0,0) comes after it")


def test_the_tied_all_reduce_waits_for_both_ends_on_a_rank_that_holds_both():
    text = "schedule v {{ stages 4\n place vshape\n ranks 2\n rank 0: 0F0 3F0 3B0 {order}\n rank 1: 1F0 2F0 2B0 1B0 }}"
    report = schedc.check(compile_text(text.format(order="0REDUCE_TIED 0B0 3REDUCE_TIED")))
    assert [d.code for d in report.errors] == ["reduce-early"]
    said = "REDUCE_TIED(0) reduces stage 0 and stage 3's gradients before 1 of the 2 backwards"
    assert said in report.errors[0].message
    assert schedc.check(compile_text(text.format(order="0B0 0REDUCE_TIED 3REDUCE_TIED"))).ok


def test_every_reduction_is_told_up_to_three_backwards_each():
    program = add_reduce_grad(schedc.load("gpipe", {"P": 1, "M": 5}))
    steps = list(program.ranks[0])
    steps.insert(steps.index(Action(Op.B, 0, 0)), steps.pop())  # REDUCE_GRAD(0) before every backward
    (finding,) = schedc.check(program.with_ranks([steps])).errors
    assert "before 5 of the 5 backwards" in finding.message
    assert [n.split(" comes")[0] for n in finding.notes[:3]] == ["B(0,0)", "B(0,1)", "B(0,2)"]
    assert finding.notes[3] == "and 2 more backward(s) of stage 0"


def _moved(program: schedc.Program, rank: int, to: int) -> schedc.Program:
    """The program with rank `rank`'s REDUCE_GRAD moved to position `to` of its steps."""
    steps = list(program.ranks[rank])
    at = next(i for i, st in enumerate(steps) if st.parts[0].op is Op.REDUCE_GRAD)
    steps.insert(to, steps.pop(at))
    return program.with_ranks([steps if r == rank else row for r, row in enumerate(program.ranks)])


@settings(deadline=None, max_examples=60)
@given(P=st.integers(1, 4), M=st.integers(1, 5), data=st.data())
def test_a_reduction_is_clean_after_its_stages_last_backward_and_refused_before_it(P, M, data):
    """Moving a REDUCE_GRAD anywhere after the last B of its stage keeps 1F1B clean; anywhere before
    it is one `reduce-early` finding, from the fast paths and the detailed checks alike."""
    program = add_reduce_grad(schedc.load("1f1b", {"P": P, "M": M}))
    rank = data.draw(st.integers(0, P - 1))
    without = [step for step in program.ranks[rank] if step.parts[0].op is not Op.REDUCE_GRAD]
    last = max(i for i, step in enumerate(without) if step.parts[0].op is Op.B)
    to = data.draw(st.integers(0, len(without)))
    moved = _moved(program, rank, to)
    columns = held_as_columns(moved)  # as a CSV is held
    # held as actions, the array path decides; held as columns, small.py: each clears it iff it is clean
    assert (array_check(moved, Semantics(), None) is not None) == (to > last)
    assert (small.quick_check(columns, Semantics(), None) is not None) == (to > last)
    for held, semantics, fast in product((moved, columns), ("rendezvous", "gloo"), (True, False)):
        report = run_checks(held, semantics=Semantics.parse(semantics), fast=fast)
        if to > last:
            assert report.ok, report.render()
        else:
            assert [(d.code, d.rank) for d in report.errors] == [("reduce-early", rank)], report.render()


CSV = ("0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0F2,0SEND_F2,0RECV_B1,0B1,{early}0RECV_B2,0B2,{late}0RESHARD\n"
       "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1RECV_F2,1B1,1SEND_B1,1F2,1B2,1SEND_B2,1REDUCE_GRAD,1RESHARD\n")


def test_a_torch_csv_with_an_early_reduction_is_not_cleared_by_the_fast_paths(tmp_path):
    path = tmp_path / "early.csv"
    path.write_text(CSV.format(early="0REDUCE_GRAD,", late=""))
    program = schedc.load(str(path))
    semantics = Semantics()
    assert small.quick_check(program, semantics, None) is None
    assert array_check(program, semantics, None) is None
    report = schedc.check(program)
    assert [d.code for d in report.errors] == ["reduce-early"]
    assert span_text(report.errors[0].span) == "0REDUCE_GRAD" and report.errors[0].step == 11
    path.write_text(CSV.format(early="", late="0REDUCE_GRAD,"))
    fine = schedc.load(str(path))
    assert small.quick_check(fine, semantics, None) is not None
    assert array_check(fine, semantics, None) is not None


def test_a_large_csv_goes_the_array_path_and_is_refused(tmp_path):
    """Past small.py's MAX_ACTIONS the array path decides: it too leaves an early reduction to lint."""
    M = small.MAX_ACTIONS // 4
    text = schedc.to_torch_csv(schedc.load("1f1b", {"P": 2, "M": M}))
    rows = [row.split(",") for row in text.splitlines()]
    rows[0].insert(rows[0].index("0B0"), rows[0].pop(rows[0].index("0REDUCE_GRAD")))
    path = tmp_path / "large.csv"
    path.write_text("\n".join(",".join(row) for row in rows) + "\n")
    program = schedc.load(str(path))
    assert array_check(program, Semantics(), None) is None
    report = schedc.check(program)
    assert [d.code for d in report.errors] == ["reduce-early"]
    assert f"before {M} of the {M} backwards" in report.errors[0].message


def test_run_refuses_it_before_any_rank_starts(run_cli, tmp_path, monkeypatch):
    import schedc.runtime.launch as launch

    def no_launch(*args, **kwargs):
        raise AssertionError("a rank was started")
    monkeypatch.setattr(launch, "launch", no_launch)
    path = tmp_path / "early.pp"
    path.write_text(EARLY.format(replicas="replicas 2", early="REDUCE_GRAD(0) ", late=""))
    code, out, err = run_cli("run", str(path), "--model", "examples.mlp:build_stages", "--backend", "gloo",
                             "--semantics", "gloo")
    assert code == 1, err
    assert "error[reduce-early]: rank 0 (replica 0), step 5: REDUCE_GRAD(0)" in err
    assert "checks did not pass; not running" in err


@pytest.mark.parametrize("case", ["REDUCE_GRAD, replicas", "REDUCE_TIED, both ends on the rank"])
def test_the_runtime_refuses_at_the_action_check_finds(case, monkeypatch):
    """Unverified (`run --no-verify`), schedc's runtime stops at the reduction `check` names, with
    the rule's code; one rank in-process: the refusal comes before any collective is issued."""
    torch = pytest.importorskip("torch")
    from schedc.lower import lower_to_torch
    from schedc.runtime.entry import split
    from schedc.runtime.interpreter import PipelineInterpreter, StepFailure
    if case.startswith("REDUCE_GRAD"):
        program = compile_text("schedule g { rank 0: 0F0 0F1 0B0 0REDUCE_GRAD 0B1 }")
        program = replace(program, replicas=(program.ranks,))
        S, extra = 1, {"dp_group": object()}
        said = "REDUCE_GRAD(0) averages its stage's gradients over the data-parallel group after only 1 of stage 0's 2"
    else:
        program = compile_text("schedule t { stages 2\n place [0, 0]\n"
                               " rank 0: 0F0 1F0 1B0 0REDUCE_TIED 0B0 1REDUCE_TIED }")
        S, extra = 2, {}
        said = "REDUCE_TIED(0) sums the tied weights' gradients after only 0 of stage 0's 1"
    (finding,) = schedc.check(program).errors
    assert finding.code == "reduce-early"
    table = lower_to_torch(program).table
    torch.manual_seed(0)
    modules = {s: torch.nn.Linear(2, 2, bias=False).double() for s in range(S)}
    if S == 2:
        extra["tied"] = {s: [modules[s].weight] for s in range(S)}
    interp = PipelineInterpreter(table, 0, modules, lambda y, t: ((y - t) ** 2).mean(), group=object(), **extra)
    # (the stand-in groups make no communicator: the refusal comes before any collective)
    monkeypatch.setattr(interp, "_open_communicators", lambda: None)
    M = table.num_microbatches
    x = torch.randn(2 * M, 2, dtype=torch.float64)
    with pytest.raises(StepFailure) as failed:
        interp.step(split(x, M), split(x, M))
    assert failed.value.index == finding.step  # the same action (one rank: the table is the program)
    assert said in str(failed.value) and "reduce-early" in str(failed.value)
