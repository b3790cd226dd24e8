"""The compiler: parameters, requirements, names, placement, loops, annotations, limits."""
from __future__ import annotations

import pytest

from conftest import compile_text
from schedc.errors import SchedcError
from schedc.ir import Action, Op, format_step
from schedc.span import span_text


def rows(program):
    return [" ".join(format_step(s) for s in steps) for steps in program.ranks]


def error_of(text, params=None):
    with pytest.raises(SchedcError) as info:
        compile_text(text, params)
    return info.value.diagnostics[0]


SIMPLE = """
schedule s(P = 2, M = 2) {
  require M >= 1 else "need a microbatch"
  stages P
  place loop
  rank r {
    for m in 0 .. M { F(r, m) }
    for m in reversed(0 .. M) { B(r, m) }
  }
}
"""


def test_params_defaults_and_overrides():
    p = compile_text(SIMPLE)
    assert (p.num_ranks, p.num_stages, p.num_microbatches) == (2, 2, 2)
    assert dict(p.params) == {"P": 2, "M": 2}
    assert rows(p) == ["0F0 0F1 0B1 0B0", "1F0 1F1 1B1 1B0"]
    p3 = compile_text(SIMPLE, {"P": 3, "M": 1})
    assert rows(p3) == ["0F0 0B0", "1F0 1B0", "2F0 2B0"]


def test_actions_keep_their_source_lines():
    p = compile_text(SIMPLE)
    lines = {format_step(s): s.span.line for s in p.ranks[0]}
    assert lines["0F0"] == 7 and lines["0B1"] == 8


def test_require_uses_its_message_and_shows_the_values():
    d = error_of(SIMPLE, {"M": 0})
    assert d.code == "require"
    assert d.message == "need a microbatch (M=0)"
    assert d.span.line == 3


def test_require_default_message_quotes_the_condition():
    d = error_of("schedule s(P = 2) { require P > 5 \n ranks P }")
    assert d.message == "requirement 'P > 5' does not hold (P=2)"


def test_unknown_parameter_lists_the_known_ones():
    d = error_of(SIMPLE, {"Q": 3})
    assert d.code == "unknown-param" and "P, M" in d.message.replace("M, P", "P, M")
    d = error_of(SIMPLE, {"MM": 3})
    assert "did you mean 'M'" in d.message


def test_parameter_without_default_must_be_given():
    d = error_of("schedule s(P) { ranks P }")
    assert d.code == "missing-param" and "--param P=" in d.message


def test_unknown_names_are_errors_even_on_paths_not_taken():
    d = error_of("schedule s(P = 1) { stages 1\n rank r { if r > 5 { F(0, warmup) } } }")
    assert d.code == "unknown-name" and "'warmup'" in d.message and d.span.line == 2


def test_did_you_mean_for_names_and_actions():
    d = error_of("schedule s(P = 1) { let warm = 1\n rank r { F(0, wram) } }")
    assert "did you mean 'warm'" in d.message
    d = error_of("schedule s(P = 1) { rank r { FF(0, 0) } }")
    assert d.code == "unknown-action" and "did you mean" in d.message


def test_redefinition_is_an_error():
    d = error_of("schedule s(P = 1) { let x = 1\n rank r { let x = 2 } }")
    assert d.code == "redefined" and any("first defined" in n for n in d.notes)


def test_division_by_zero_and_types():
    assert error_of("schedule s(P = 1) { let z = P - 1\n let y = 3 // z }").code == "division-by-zero"
    assert error_of("schedule s(P = 1) { stages 1 \n rank r { F(0, 1 < 2) } }").code == "type"
    assert error_of("schedule s(P = 1) { stages 1 \n rank r { F(0.5, 0) } }").code == "type"


@pytest.mark.parametrize("where, operand", [
    ("if m { F(r, m) } else { F(r, m) }", "m"),
    ("if m == 0 { F(r, m) } elif m { F(r, m) } else { F(r, m) }", "m"),
    ("F(r, m ? 1 : 0)", "m"),
    ("if m and 1 { F(r, m) } else { F(r, m) }", "m"),
    ("if m < 0 or 1 { F(r, m) } else { F(r, m) }", "1"),
    ("if not m { F(r, m) } else { F(r, m) }", "m"),
    ("if r - r { F(r, m) } else { F(r, m) }", "r - r"),
    ("if P > 100 { if m { F(r, m) } } else { F(r, m) }", "m"),  # a branch never taken, as the prover says
    ("let on(c) = c ? 1 : 0\n F(r, m * on(m)) ", "c"),
])
def test_a_number_is_not_a_condition(where, operand):
    text = f"schedule s(P = 2, M = 2) {{ stages P\n place loop\n rank r {{ for m in 0 .. M {{ {where} }}\n" \
           "  for m in 0 .. M { B(r, m) } } }"
    d = error_of(text)
    assert d.code == "type" and "expected a condition, got an integer" in d.message
    assert span_text(d.span) == operand


@pytest.mark.parametrize("require, operand", [("P", "P"), ("P > 0 and M", "M"), ("M - 1 or P > 0", "M - 1")])
def test_a_requirement_that_is_a_number_is_a_type_error(require, operand):
    d = error_of(f"schedule s(P = 2, M = 2) {{\n require {require}\n stages P }}")
    assert d.code == "type" and "expected a condition" in d.message
    assert (d.span.line, span_text(d.span)) == (2, operand)


def test_conditions_that_are_conditions_still_compile():
    program = compile_text("""schedule s(P = 2, M = 2) { stages P
 place loop
 let pick(c, a, b) = c ? a : b
 rank r { for m in 0 .. M { if m != 0 and not m < 0 { F(r, pick(m > 0, m, 0)) } else { F(r, m == 0 ? 0 : 1) } }
          for m in 0 .. M { B(r, m) } } }""")
    assert rows(program) == ["0F0 0F1 0B0 0B1", "1F0 1F1 1B0 1B1"]


def test_actions_are_statements_and_functions_are_values():
    assert error_of("schedule s(P = 1) { let x = F(0, 0) }").code == "unknown-function"
    assert error_of("schedule s(P = 1) { rank r { min(1, 2) } }").code == "unknown-action"


def test_min_max_abs_ternary_and_logic():
    p = compile_text("""
    schedule s(P = 3) { stages P
      rank r { F(r, max(0, min(r, 1)) * 0 + abs(-2) - 2); B(r, r > 0 and not r == 2 ? 0 : 0 + 0) } }""")
    assert rows(p) == ["0F0 0B0", "1F0 1B0", "2F0 2B0"]


def test_placements():
    loop = compile_text("schedule s(P = 2) { microbatches 1\n stages 4\n place loop\n rank r { } }")
    assert loop.placement == (0, 1, 0, 1)
    v = compile_text("schedule s(P = 2) { microbatches 1\n stages 4\n place vshape\n rank r { } }")
    assert v.placement == (0, 1, 1, 0)
    e = compile_text("schedule s(P = 2) { microbatches 1\n stages 4\n place s -> s // 2\n rank r { } }")
    assert e.placement == (0, 0, 1, 1)
    t = compile_text("schedule s(P = 2) { microbatches 1\n stages 3\n place [1, 0, 1]\n rank r { } }")
    assert t.placement == (1, 0, 1)


def test_placement_errors():
    assert error_of("schedule s(P = 2) { microbatches 1\n stages 3\n place [1, 0]\n rank r { } }").code == "placement"
    assert error_of("schedule s(P = 2) { microbatches 1\n stages 2\n place [0, 2]\n rank r { } }").code == "placement"
    assert error_of("schedule s(P = 2) { microbatches 1\n stages 3\n place vshape\n rank r { } }").code == "placement"


def test_literal_form_infers_counts_and_placement():
    p = compile_text("""
    schedule pasted {
      rank 0: 0F0 0F1 0B0 0B1
      rank 1: 1F0 1B0 1F1 1B1
    }""")
    assert (p.num_ranks, p.num_stages, p.num_microbatches, p.placement) == (2, 2, 2, (0, 1))
    assert p.ranks[1][1] == Action(Op.B, 1, 0)


def test_specific_rank_bodies_override_the_generic_one():
    p = compile_text("schedule s(P = 2, M = 1) { stages 2\n rank r { F(r, 0); B(r, 0) }\n rank 1 { F(1, 0); B(1, 0) } }")
    assert rows(p) == ["0F0 0B0", "1F0 1B0"]
    assert error_of("schedule s(P = 2) { rank 0 { }\n rank 0 { } }").code == "duplicate-decl"
    assert error_of("schedule s(P = 2) { rank 5 { } }").code == "range"
    assert error_of("schedule s(P = 2) { rank 0 { } }").code == "missing-rank"


def test_bad_literal_action_is_located():
    d = error_of("schedule s {\n  rank 0: 0F0 0Q1\n}")
    assert d.code == "bad-action" and (d.span.line, d.span.column) == (2, 15)


def test_groups_and_overlaps():
    p = compile_text("""schedule s(P = 2) { stages 4
      place vshape
      rank 0 { overlap(F(0, 0), B(3, 0)); group(SEND_F(0, 0), RECV_B(0, 0)) }
      rank 1 { } }""")
    assert [format_step(s) for s in p.ranks[0]] == ["(0F0;3B0)OVERLAP_F_B", "(0SEND_F0;0RECV_B0)GROUP"]
    assert error_of("schedule s(P = 1) { rank 0 { group(F(0, 0)) } }").code == "bad-action"
    assert error_of("schedule s(P = 1) { rank 0 { overlap(F(0, 0)) } }").code == "arity"


def test_next_counts_per_kind_and_stage_and_w_next_takes_the_oldest_waiting_i():
    p = compile_text("""schedule s(P = 1) { stages 2
      place s -> 0
      rank 0 { F(0, next); F(1, next); F(0, next); F(1, next)
               I(1, next); B(1, next); I(0, next); W(next); W(next); B(0, next) } }""")
    assert [format_step(a) for a in p.ranks[0]] == ["0F0", "1F0", "0F1", "1F1", "1I0", "1B1", "0I0", "1W0",
                                                    "0W0", "0B1"]
    d = error_of("schedule s(P = 1) { stages 2\n  place s -> 0\n"
                 "  rank 0 { F(0, 0); F(1, 0); I(1, 0); overlap(F(0, 1), W(next)) } }")
    assert d.code == "bad-action" and "W(next) cannot be part of overlap" in d.message


def test_annotations_resolve_per_stage_and_rank():
    p = compile_text("""schedule s(P = 2) { stages 2
      cost F = 2, I = 1, W = 3
      cost stage 1: F = 5
      cost rank 1: speed = 0.5
      memory act = 4
      memory stage 0: weight = 1
      memory rank 1: limit = 10
      microbatches 1
      rank r { } }""")
    a = p.annotations
    assert (a.stage_costs[0].F, a.stage_costs[0].B, a.stage_costs[1].F) == (2.0, 4.0, 5.0)
    assert a.rank_speed == (1.0, 0.5)
    assert (a.stage_memory[0].act, a.stage_memory[0].weight, a.stage_memory[1].weight) == (4.0, 1.0, 4.0)
    assert a.memory_limit == ((1, 10.0),)
    assert error_of("schedule s(P = 1) { cost X = 1 }").code == "unknown-setting"
    assert error_of("schedule s(P = 1) { stages 1 microbatches 1 cost stage 3: F = 1 rank r { } }").code == "range"


def test_huge_parameters_are_refused_quickly():
    d = error_of("schedule s(P = 2, M = 8) { stages P\n rank r { for m in 0 .. M { F(r, m) } } }",
                 {"M": 10**9})
    assert d.code == "too-large"
    d = error_of("schedule s(P = 2) { rank r { for i in 0 .. 1000000000 { } } }")
    assert d.code == "too-large" and "loop" in d.message
    assert error_of("schedule s(P = 2) { ranks P * 100000 }").code == "range"
    assert error_of("schedule s(P = 4611686018427387904) { let x = P * P }").code == "too-large"


def test_loop_step_zero():
    assert error_of("schedule s(P = 1) { rank r { for i in 0 .. 3 step 0 { } } }").code == "range"
