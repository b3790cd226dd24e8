"""schedc.strategies and schedc.testing, as a user meets them.

The docstring examples run; every option is validated when a strategy is made; generated programs
are valid by the independent oracles of tests/oracles.py and honour their options; they shrink to
the fewest ranks and microbatches; every mutation is rejected by schedc and by the oracles; the
assertions fail with schedc's report; and a ten-line test file finds a deliberately broken pass and
shrinks it to a two-rank, one-microbatch counterexample. examples/test_my_schedule.py (the example
in docs/testing.md) runs here too.
"""
from __future__ import annotations

import doctest
import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import schedc
import schedc.strategies
import schedc.testing
from schedc.ir import Compound, Op
from schedc.parse import parse
from schedc.passes import lower
from schedc.strategies import MUTATION_KINDS, lowered_programs, mutations, programs, reorderings, sources
from schedc.testing import assert_deadlock_free, assert_within_memory

from oracles import check, comms_oracle_problems, oracle_problems

ROOT = Path(__file__).resolve().parent.parent
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEMANTICS = ("rendezvous", "eager", "bounded:1")


@pytest.mark.parametrize("module", [schedc.strategies, schedc.testing], ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 5 and result.failed == 0


def test_hypothesis_is_imported_only_by_the_strategies():
    import subprocess
    code = "import sys, schedc, schedc.api, schedc.testing, schedc.cli; print('hypothesis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ---------------------------------------------------------------------------------------------
# Options are checked up front, with a sentence
# ---------------------------------------------------------------------------------------------
BAD_OPTIONS = [
    (dict(min_ranks=0), "min_ranks=0 must be at least 1"),
    (dict(min_ranks=3, max_ranks=2), "min_ranks=3 is greater than max_ranks=2"),
    (dict(max_microbatches=2.5), "max_microbatches=2.5 must be an integer"),
    (dict(max_ranks=True), "max_ranks=True must be an integer"),
    (dict(min_chunks=3, max_chunks=1), "min_chunks=3 is greater than max_chunks=1"),
    (dict(placements="loop"), "placements='loop' must be a collection of names, e.g. placements=('loop',)"),
    (dict(placements=()), "placements must not be empty"),
    (dict(placements=("loop", "ring")), "placements: unknown 'ring'"),
    (dict(kinds=("B",)), "kinds must include 'F'"),
    (dict(kinds=("F", "X")), "kinds: 'X' is not a compute kind"),
    (dict(kinds=("F", "W")), "'I' and 'W' come together"),
    (dict(kinds=("F", "B"), split_backward=True), "split_backward=True needs 'I' and 'W' in kinds"),
    (dict(kinds=("F", "I", "W"), split_backward=False), "split_backward=False needs 'B' in kinds"),
    (dict(split_backward="yes"), "split_backward='yes' must be True or False or None"),
    (dict(overlap=1), "overlap=1 must be True or False"),
    (dict(overlap=True, split_backward=True), "overlap=True pairs an F with a fused B"),
    (dict(costs=None), "costs=None must be True or False"),
    (dict(name=3), "name=3 must be a string"),
    (dict(kinds="FB"), "kinds='FB' must be a collection of names, e.g. kinds=('F', 'B')"),
    (dict(max_ranks=10**9), "max_ranks=1000000000: a program with more than 2,048 ranks does not fit"),
    (dict(max_microbatches=4096), "max_microbatches=4096: a program with more than 2,048 microbatches"),
    (dict(min_ranks=32, max_ranks=32, min_microbatches=64, max_microbatches=64, placements=("vshape",)),
     "the smallest program these options allow has 4,096 stage-microbatch pairs, more than fit"),
]


@pytest.mark.parametrize("options, message", BAD_OPTIONS, ids=[m for _, m in BAD_OPTIONS])
def test_bad_options_are_rejected_when_the_strategy_is_made(options, message):
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        programs(**options)
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        lowered_programs(**options)


def test_options_are_keyword_only():
    with pytest.raises(TypeError):
        programs(1, 4)  # noqa - the point of the test
    with pytest.raises(TypeError):
        sources("block")
    with pytest.raises(TypeError):
        mutations(schedc.load("gpipe"), ("drop",))


def test_bad_mutation_and_source_options():
    p = schedc.load("1f1b", {"P": 1, "M": 1})
    with pytest.raises(InvalidArgument, match="must be a schedc.ir.Program"):
        mutations("1f1b")
    with pytest.raises(InvalidArgument, match="unknown 'explode'"):
        mutations(p, kinds=("explode",))
    with pytest.raises(InvalidArgument, match=r"none of the mutation kinds \('wrong-rank', 'swap-messages'\) applies"):
        mutations(p, kinds=("wrong-rank", "swap-messages"))  # one rank, no messages
    with pytest.raises(InvalidArgument, match="max_moves=0 must be at least 1"):
        reorderings(p, max_moves=0)
    with pytest.raises(InvalidArgument, match="start='statement' is not a rule of the grammar"):
        sources(start="statement")
    with pytest.raises(InvalidArgument, match="literals='weird'"):
        sources(literals="weird")


# ---------------------------------------------------------------------------------------------
# Generated programs are valid and honour their options
# ---------------------------------------------------------------------------------------------
def _backward_kinds(p):
    return {a.op for _, _, a in p.actions() if a.op is not Op.F}


@FAST
@given(st.data())
def test_generated_programs_are_valid_and_honour_their_options(data):
    lo_r, lo_m = data.draw(st.integers(1, 3), label="min ranks"), data.draw(st.integers(1, 3), label="min mb")
    hi_r, hi_m = lo_r + data.draw(st.integers(0, 2)), lo_m + data.draw(st.integers(0, 3))
    placements = tuple(data.draw(st.lists(st.sampled_from(["loop", "vshape", "table"]), min_size=1, unique=True)))
    split = data.draw(st.sampled_from([None, True, False]), label="split_backward")
    overlap = split is not True and data.draw(st.booleans(), label="overlap")
    p = data.draw(programs(min_ranks=lo_r, max_ranks=hi_r, min_microbatches=lo_m, max_microbatches=hi_m,
                           placements=placements, min_chunks=1, max_chunks=3, split_backward=split,
                           overlap=overlap, costs=True, memory=True), label="program")
    assert oracle_problems(p) == []
    assert lo_r <= p.num_ranks <= hi_r and lo_m <= p.num_microbatches <= hi_m
    assert p.level == "compute" and len(p.ranks) == p.num_ranks
    R, S = p.num_ranks, p.num_stages
    shapes = {"loop": any(S == v * R and p.placement == tuple(s % R for s in range(S)) for v in (1, 2, 3)),
              "vshape": S == 2 * R and p.placement == tuple(min(s, 2 * R - 1 - s) for s in range(S)),
              "table": R <= S <= 3 * R}
    assert any(shapes[k] for k in placements), (placements, p.placement)
    kinds = _backward_kinds(p)
    if split is True:
        assert kinds <= {Op.I, Op.W}
    if split is False:
        assert kinds == {Op.B}
    if not overlap:
        assert not any(isinstance(step, Compound) for _, _, step in p.steps())
    assert len(p.annotations.stage_costs) == S and len(p.annotations.stage_memory) == S
    for c in p.annotations.stage_costs:
        assert 1 <= c.F <= 3 and c.B == c.I + c.W
    for m in p.annotations.stage_memory:
        assert 1 <= m.act <= 3 and 0 <= m.weight <= m.act and 0 <= m.out <= 2
    for sem in SEMANTICS:
        report = schedc.check(p, semantics=sem)
        assert report.ok, report.render()


@pytest.mark.parametrize("kinds, expected", [(("F", "B"), {Op.B}), (("F", "I", "W"), {Op.I, Op.W}),
                                             (("F", "B", "I", "W"), {Op.B, Op.I, Op.W})])
def test_kinds_choose_the_backward_forms(kinds, expected):
    seen = set()

    @settings(max_examples=30, deadline=None, database=None)
    @given(programs(kinds=kinds, min_ranks=2))
    def collect(p):
        seen.update(_backward_kinds(p))
    collect()
    assert seen == expected


@FAST
@given(lowered_programs(placements=("loop", "vshape", "table")))
def test_lowered_programs_are_sound_at_the_comms_level(p):
    crossing = any(p.placement[s] != p.placement[s + 1] for s in range(p.num_stages - 1))
    assert p.level == ("comms" if crossing else "compute")
    for sem in ("rendezvous", "eager"):
        assert comms_oracle_problems(p, sem) == []
    assert schedc.check(p).ok


def test_generated_programs_can_be_large_and_still_quick():
    import time

    @settings(max_examples=5, deadline=None, database=None)
    @given(programs(min_ranks=8, max_ranks=8, min_microbatches=32, max_microbatches=32, min_chunks=2, max_chunks=2,
                    placements=("loop",)))
    def big(p):
        assert p.num_actions >= 16 * 32 * 2 and oracle_problems(p) == []
    t0 = time.perf_counter()
    big()
    assert time.perf_counter() - t0 < 20


def test_the_largest_program_the_options_allow_is_drawn():
    """MAX_PAIRS is what one example holds: 2,048 stage-microbatch pairs with split backwards
    (6,144 actions) on a table placement, the costliest options, still draw; one more is refused."""
    from schedc.strategies import MAX_PAIRS

    @settings(max_examples=2, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(programs(min_ranks=16, max_ranks=16, min_microbatches=64, max_microbatches=64, min_chunks=2,
                    max_chunks=2, placements=("table",), split_backward=True))
    def largest(p):
        assert p.num_stages * p.num_microbatches == MAX_PAIRS and p.num_actions == 3 * MAX_PAIRS
    largest()
    M = MAX_PAIRS // 2 + 1  # vshape: 2 stages per rank
    with pytest.raises(InvalidArgument, match=f"has {2 * M:,} stage-microbatch pairs"):
        programs(min_ranks=1, max_ranks=1, min_microbatches=M, max_microbatches=M, placements=("vshape",))


# ---------------------------------------------------------------------------------------------
# Shrinking: towards fewer ranks and microbatches
# ---------------------------------------------------------------------------------------------
QUIET = settings(database=None, max_examples=500, deadline=None, derandomize=True)  # one answer on every run


def test_the_simplest_program_is_one_rank_one_microbatch():
    p = find(programs(), lambda p: True, settings=QUIET)
    assert (p.num_ranks, p.num_microbatches, p.num_stages) == (1, 1, 1)
    assert [str(s) for s in p.ranks[0]] == ["0F0", "0B0"]
    q = find(programs(min_ranks=3, min_microbatches=2), lambda p: True, settings=QUIET)
    assert (q.num_ranks, q.num_microbatches) == (3, 2)


def test_shrinking_keeps_only_what_the_failure_needs():
    p = find(programs(), lambda p: p.num_ranks >= 3, settings=QUIET)
    assert (p.num_ranks, p.num_microbatches) == (3, 1)
    q = find(programs(), lambda p: p.num_microbatches >= 4, settings=QUIET)
    assert (q.num_ranks, q.num_microbatches) == (1, 4)
    # a rank that holds two activations at once: one rank with two stages and one microbatch, or
    # one stage and two microbatches (both are four actions; the shrinker may stop at either).
    # Counted in activations: a stage's default size is its share of a rank's (ir.default_share)
    r = find(programs(), lambda p: max(schedc.check(p).peak_activation) >= 2 * p.annotations.memory_of(0).act,
             settings=QUIET)
    assert r.num_ranks == 1 and r.num_microbatches * r.num_stages == 2 and r.num_actions == 4, r


# ---------------------------------------------------------------------------------------------
# Mutations are rejected by schedc and by the oracles
# ---------------------------------------------------------------------------------------------
def _source_of(kind):
    """Programs that every mutation kind applies to."""
    if kind == "swap-messages":
        return lowered_programs(min_ranks=2, min_microbatches=2)
    if kind == "wrong-rank":
        return st.one_of(programs(min_ranks=2, overlap=True), lowered_programs(min_ranks=2))
    return st.one_of(programs(overlap=True, placements=("loop", "vshape", "table")),
                     lowered_programs(placements=("loop", "vshape", "table")))


@pytest.mark.parametrize("kind", MUTATION_KINDS)
def test_every_mutation_is_rejected_under_every_semantics(kind):
    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_source_of(kind).flatmap(lambda p: mutations(p, kinds=(kind,))))
    def rejected(mutant):
        broken, label = mutant
        assert mutant.kind == kind and label.startswith(kind + ": ")
        for sem in SEMANTICS:
            report = check(broken, sem)  # schedc.check, but see oracles.same_rank_inversion
            assert report.ok is False, (sem, label)
            assert report.render()
        if broken.level == "compute":
            assert oracle_problems(broken), label
        else:
            assert comms_oracle_problems(broken, "rendezvous") and comms_oracle_problems(broken, "eager"), label
    rejected()


def test_a_mutant_unpacks_and_says_what_broke():
    p = lower(schedc.load("1f1b", {"P": 2, "M": 2}))
    m = find(mutations(p, kinds=("drop",)), lambda m: True, settings=QUIET)
    broken, label = m
    assert label == "drop: removed 0F0 (rank 0, step 0)"
    assert broken.ranks[0] == p.ranks[0][1:]
    swap = find(mutations(p, kinds=("swap-messages",)), lambda m: True, settings=QUIET)
    assert swap.label.startswith("swap-messages: swapped 0SEND_F0 (rank 0, step 1) and 0SEND_F1")


@FAST
@given(st.one_of(programs(overlap=True), lowered_programs()).flatmap(
    lambda p: st.tuples(st.just(p), reorderings(p, max_moves=2))))
def test_reorderings_move_steps_within_their_rank(case):
    p, (q, label) = case
    assert label.startswith(("moved: ", "unchanged: "))
    assert label.count(" from step ") <= 2
    for before, after in zip(p.ranks, q.ranks, strict=True):
        assert Counter(map(str, before)) == Counter(map(str, after))


# ---------------------------------------------------------------------------------------------
# Source text from the grammar
# ---------------------------------------------------------------------------------------------
@FAST
@given(sources(start="block"))
def test_block_sources_are_rank_bodies(text):
    assert text.lstrip().startswith("{")
    parse(f"schedule s(P = 2, M = 2) {{\n  rank r {text}\n}}\n", "block.pp")


@settings(FAST, max_examples=15)
@given(sources(literals="any"))
def test_any_literal_sources_still_parse(text):
    parse(text, "any.pp")


@settings(FAST, max_examples=60)
@given(st.sampled_from(["typical", "any"]).flatmap(
    lambda literals: schedc.strategies._terminals(schedc.strategies._grammar(), literals)["NEW_NAME"]))
def test_a_name_being_bound_is_never_a_reserved_word(name):
    """The parser refuses a reserved word where a name is bound (`let for = 2`): the texts derived
    from the grammar never hold one there, so every one of them parses."""
    from schedc.parse import reserved_words
    assert name.endswith(" ") and name.strip().isidentifier() and name.strip() not in reserved_words()


def test_a_reserved_word_drawn_by_its_pattern_is_made_free():
    from schedc.parse import reserved_words
    assert {schedc.strategies._unreserved(w) for w in reserved_words()}.isdisjoint(reserved_words())
    assert schedc.strategies._unreserved("warm") == "warm"


@settings(FAST, max_examples=30)
@given(st.data())
def test_any_literal_comments_and_strings_hold_no_line_end(data):
    """A lone "\r" ends a line as "\n" does (universal newlines), and so a comment or a string:
    `schedule 0 { } #\r'` was drawn as a comment and did not parse."""
    from schedc.strategies import _grammar, _terminals
    terminals = _terminals(_grammar(), "any")
    comment, string = data.draw(terminals["COMMENT"]), data.draw(terminals["STRING"])
    assert "\r" not in comment and "\r" not in string
    parse(f"schedule s {{ }} {comment}", "comment.pp")


# ---------------------------------------------------------------------------------------------
# schedc.testing
# ---------------------------------------------------------------------------------------------
def test_assertions_pass_on_sound_schedules_and_quote_the_report_otherwise():
    good = lower(schedc.load("1f1b", {"P": 3, "M": 4}))
    for sem in SEMANTICS:
        assert_deadlock_free(good, semantics=sem)
    assert_deadlock_free(good, engine="z3")
    assert_within_memory(good, 3)
    assert_within_memory(good, {0: 3, 1: 2, 2: 1})
    with pytest.raises(AssertionError) as info:
        assert_within_memory(good, {0: 2, 1: 2, 2: 1})
    text = str(info.value)
    assert text.startswith("memory over the limit under rendezvous sends\n1f1b (P=3, M=4): 3 ranks,")
    assert "error[memory]: rank 0, step" in text and "over the limit of 2" in text and "live:" in text
    broken = schedc.load(str(ROOT / "tests" / "known" / "pytorch_172668.pp"))
    assert_deadlock_free(broken, semantics="eager")
    with pytest.raises(AssertionError) as info:
        assert_deadlock_free(broken)
    text = str(info.value)
    assert "both send before they receive" in text and "[0SEND_F1]" in text  # the cause and the grid
    with pytest.raises(AssertionError, match="no defined peak memory"):
        assert_within_memory(broken, 10)
    missing = good.with_ranks([good.ranks[0][:-1], *good.ranks[1:]])
    with pytest.raises(AssertionError, match="is not a sound schedule"):
        assert_deadlock_free(missing)
    with pytest.raises(TypeError):
        assert_within_memory(good, "3")
    with pytest.raises(ValueError):
        assert_within_memory(good, float("nan"))


# ---------------------------------------------------------------------------------------------
# Done means: ten lines find a broken pass and shrink it
# ---------------------------------------------------------------------------------------------
TEN_LINES = '''\
from hypothesis import given, settings
from schedc.strategies import lowered_programs
from schedc.testing import assert_deadlock_free

def prefetch_receives(program):  # deliberately broken: posts every receive before any compute
    later = lambda step: not step.parts[0].op.name.startswith("RECV")
    return program.with_ranks([sorted(steps, key=later) for steps in program.ranks])

@settings(deadline=None)
@given(lowered_programs(max_ranks=4, max_microbatches=8))
def test_prefetching_receives_keeps_schedules_deadlock_free(program):
    assert_deadlock_free(prefetch_receives(program))
'''


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_ten_line_test_finds_a_broken_pass_and_shrinks_it(tmp_path):
    assert len([line for line in TEN_LINES.splitlines() if line.strip()]) <= 10
    path = tmp_path / "test_prefetch.py"
    path.write_text(TEN_LINES, encoding="utf-8")
    user = _import(path, "test_prefetch")
    with pytest.raises(AssertionError) as info:
        user.test_prefetching_receives_keeps_schedules_deadlock_free()
    report = str(info.value)
    # the shrunk counterexample: two ranks, one microbatch, and schedc's report of the wait cycle
    assert report.startswith("the schedule deadlocks under rendezvous sends\n"
                             "generated: 2 ranks, 2 stages, 1 microbatch, comms level\n"), report
    assert "  rank 0: 0RECV_B0 0F0 0SEND_F0 0B0\n  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n" in report
    assert "error[deadlock]" in report
    assert "step    0" in report and "rank 0  [0RECV_B0]" in report  # the grid, blocked steps marked


def test_the_example_file_is_the_one_in_the_docs():
    text = (ROOT / "examples" / "test_my_schedule.py").read_text(encoding="utf-8")
    assert text.strip() in (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")


@pytest.mark.slow  # 15-20 s: the example's property tests run their full example counts
def test_the_example_file_runs():
    example = _import(ROOT / "examples" / "test_my_schedule.py", "test_my_schedule")
    tests = [getattr(example, n) for n in dir(example) if n.startswith("test_")]
    assert len(tests) >= 3
    for test in tests:
        test()


def _tiny_stages(stage_ids, num_stages):
    import torch
    stages = []
    for s in stage_ids:
        torch.manual_seed(s)
        stages.append(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh()))
    return stages


def _tiny_loss(output, target):
    import torch
    return torch.nn.functional.mse_loss(output, target)


def _tiny_batch(step, size):
    import torch
    gen = torch.Generator().manual_seed(step)
    return torch.randn(size, 3, generator=gen), torch.randn(size, 3, generator=gen)


def test_gradient_comparison_names_the_first_parameter_that_differs():
    """The comparison half of assert_same_gradients, on results made here (no ranks spawned):
    equal gradients pass; one perturbed entry fails naming its rank, stage and parameter."""
    pytest.importorskip("torch")
    from schedc.testing import _compare_gradients, as_double, reference_gradients
    program = schedc.load("1f1b", {"P": 2, "M": 2})
    low = lower(program)
    x, y = (as_double(t) for t in _tiny_batch(0, 4))
    loss, ref = reference_gradients(_tiny_stages, _tiny_loss, 2, x, y)
    results = [{"steps": [{"grads": {str(r): [g.clone() for _, g in ref[r]]}, "loss": loss if r == 1 else None}]}
               for r in range(2)]
    _compare_gradients(program, low, results, _tiny_stages, _tiny_loss, _tiny_batch, 1, 4, 1e-9, 1e-7)
    results[1]["steps"][0]["grads"]["1"][0][0, 0] += 1e-3
    with pytest.raises(AssertionError) as info:
        _compare_gradients(program, low, results, _tiny_stages, _tiny_loss, _tiny_batch, 1, 4, 1e-9, 1e-7)
    assert str(info.value).startswith("gradients differ from the unsplit model: rank 1, stage 1, parameter "
                                      "'0.weight', training step 1: largest difference 0.001")
    results[1]["steps"][0]["grads"]["1"][0][0, 0] -= 1e-3
    results[1]["steps"][0]["loss"] = loss * 2
    with pytest.raises(AssertionError, match="the loss differs from the unsplit model's"):
        _compare_gradients(program, low, results, _tiny_stages, _tiny_loss, _tiny_batch, 1, 4, 1e-9, 1e-7)


def test_functions_of_the_script_being_run_are_found_by_the_ranks(tmp_path, monkeypatch):
    """`build_stages` defined in the script run as `python script.py` (module `__main__`): the ranks
    imported `__main__`, their own, and failed with their tracebacks. They load the script's file
    under another name, so its `if __name__ == "__main__":` part does not run again."""
    import sys
    import types

    from schedc.testing import _resolve, _spec
    script = tmp_path / "my_test.py"
    script.write_text("def build_stages(ids, n):\n    return ['stage %d' % s for s in ids]\n"
                      "if __name__ == '__main__':\n    raise SystemExit('the script ran again')\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    exec(compile("def build_stages(ids, n):\n    return []\n", str(script), "exec"), main.__dict__)
    monkeypatch.setitem(sys.modules, "__main__", main)
    spec = _spec(main.build_stages, "build_stages")
    assert spec["module"] != "__main__" and spec["file"] == str(script)
    monkeypatch.delitem(sys.modules, spec["module"], raising=False)
    assert _resolve(spec)([0, 1], 2) == ["stage 0", "stage 1"]  # (as a rank finds it)
    del main.__file__
    main.__dict__.pop("__file__", None)
    with pytest.raises(TypeError, match="interactive session"):
        _spec(main.build_stages, "build_stages")


def test_gradient_assertion_wants_importable_functions():
    p = schedc.load("1f1b", {"P": 1, "M": 1})
    from schedc.testing import assert_same_gradients
    with pytest.raises(TypeError, match="not a module-level function"):
        assert_same_gradients(p, lambda ids, S: [])
    with pytest.raises(TypeError, match="pass loss_fn=..., or define loss_fn beside build_stages"):
        assert_same_gradients(p, _tiny_stages)
    with pytest.raises(ValueError, match="expected 'package.module:function'"):
        assert_same_gradients(p, "no_colon")
