"""The expression evaluator (schedc/expr.py) on its own: every operator and built-in function,
integer semantics (floor division and modulo as in Python, docs/language.md), the errors with their
spans (division by zero, unknown names and functions, arity, types, overflow, nesting), `let`
functions, and, on generated expressions, the evaluator in both of its modes (an environment's, as
the prover uses it, and the compiler's local variables) held to a plain Python reference."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from schedc.compiler import compile_schedule
from schedc.errors import SchedcError
from schedc.expr import (ANY, BOOL, INT, MAX_CALL_NESTING, MAX_INT, NUM, SPILL_DEPTH, compile_expr,
                         compile_function)
from schedc.parse import parse
from schedc.span import span_text

NAMES = ("a", "b", "c")


class Scope:
    """A scope of value names (each of unknown type) and `let` functions."""

    def __init__(self, names=NAMES, functions=None):
        self.names, self.functions = set(names), dict(functions or {})

    def lookup(self, name):
        return name in self.names

    def function(self, name):
        return self.functions.get(name)

    def all_names(self):
        return sorted(self.names)


def expr(text: str):
    """The syntax tree of one expression (the condition of a `require`)."""
    tree = parse(f"schedule e {{ require {text} }}", "e.pp")
    return tree.items[0].constraints[0].cond


def ev(text: str, scope=None, **env):
    return compile_expr(expr(text), scope or Scope())(env)


def error(text: str, scope=None, **env) -> SchedcError:
    with pytest.raises(SchedcError) as e:
        ev(text, scope, **env)
    return e.value


def covered(err: SchedcError) -> str:
    """The source text the error's span covers."""
    return span_text(err.diagnostics[0].span)


# ---- operators ----
@pytest.mark.parametrize("text, value", [
    ("1 + 2", 3), ("1 - 2", -1), ("3 * -4", -12), ("-(2 - 5)", 3), ("--4", 4),
    # floor division and modulo round towards negative infinity, as Python's
    ("7 // 2", 3), ("-7 // 2", -4), ("7 // -2", -4), ("-7 // -2", 3),
    ("7 % 3", 1), ("-7 % 3", 2), ("7 % -3", -2), ("-7 % -3", -1), ("0 % 5", 0), ("6 // 3", 2),
    # precedence and associativity: * // % bind tighter than + -, and both go left to right
    ("2 + 3 * 4", 14), ("(2 + 3) * 4", 20), ("10 - 4 - 3", 3), ("100 // 10 // 3", 3), ("7 % 4 * 2", 6),
    ("-2 * 3", -6), ("- 7 // 2", -4),
])
def test_integer_operators(text, value):
    got = ev(text)
    assert got == value and type(got) is int


@pytest.mark.parametrize("text, value", [
    ("1 == 1", True), ("1 == 2", False), ("1 != 2", True), ("2 != 2", False),
    ("1 < 2", True), ("2 < 2", False), ("2 <= 2", True), ("3 <= 2", False),
    ("3 > 2", True), ("2 > 2", False), ("2 >= 2", True), ("1 >= 2", False),
    ("1 < 2 and 2 < 3", True), ("1 < 2 and 3 < 2", False), ("1 > 2 or 2 < 3", True), ("1 > 2 or 3 < 2", False),
    ("not 1 == 2", True), ("not not 1 == 2", False), ("not 1 > 2 and 1 > 2", False),
    ("1 > 2 and 1 > 2 or 1 < 2", True),  # and binds tighter than or
    ("1 + 1 == 2", True), ("-1 < 0", True),
])
def test_comparisons_and_logic(text, value):
    got = ev(text)
    assert got is value


@pytest.mark.parametrize("text, value", [
    ("1 < 2 ? 10 : 20", 10), ("1 > 2 ? 10 : 20", 20),
    ("1 > 2 ? 1 : 1 > 3 ? 2 : 3", 3),  # the ternary nests to the right
])
def test_ternary(text, value):
    assert ev(text) == value


def test_the_operators_that_short_circuit_do_not_evaluate_the_other_side():
    assert ev("1 < 2 ? 5 : 1 // 0") == 5
    assert ev("1 > 2 ? 1 // 0 : 6") == 6
    assert ev("1 > 2 and 1 // 0 == 0") is False
    assert ev("1 < 2 or 1 // 0 == 0") is True


@pytest.mark.parametrize("text, value", [
    ("min(3, 1, 2)", 1), ("max(3, 1, 2)", 3), ("min(-4, 2)", -4), ("max(-4, -2)", -2),
    ("min(7)", 7), ("max(7)", 7), ("abs(-5)", 5), ("abs(5)", 5), ("abs(0)", 0),
    ("min(a, b) + max(a, b)", 9), ("abs(a - b) * 2", 2), ("max(a * b, 21 // a)", 20),
])
def test_builtin_functions(text, value):
    assert ev(text, a=4, b=5) == value


def test_decimals_are_numbers_and_are_refused_where_an_integer_is_needed():
    assert ev("0.5 + 1") == 1.5
    assert ev("2 * 0.25") == 0.5
    assert ev("max(1, 1.5)") == 1.5
    assert ev("a < 0.5", a=0) is True
    for text in ("0.5 // 1", "3 % 1.5"):
        err = error(text)
        assert err.code == "type" and "expected an integer, got a decimal number" in str(err)
    err = error("a // 2", a=1.5)  # a name's value of the wrong type, found at run time
    assert err.code == "type" and covered(err) == "a"


def test_a_condition_is_not_a_number():
    err = error("(1 < 2) + 1")
    assert err.code == "type" and "expected a number, got a condition" in str(err)
    assert covered(err) == "1 < 2"
    err = error("a * 2", a=True)
    assert err.code == "type" and covered(err) == "a"
    err = error("min(1, 2 > 1)")
    assert err.code == "type" and covered(err) == "2 > 1"


def test_a_decimal_is_not_a_condition():
    err = error("a ? 1 : 2", a=0.5)
    assert err.code == "type" and "expected a condition, got a decimal number" in str(err)


@pytest.mark.parametrize("text, operand", [
    ("3 ? 1 : 2", "3"), ("0 ? 1 : 2", "0"), ("1 and 2", "1"), ("1 < 2 and 2", "2"), ("0 or 0", "0"),
    ("1 > 2 or 2 - 1", "2 - 1"), ("not 0", "0"), ("not (1 < 2 and 1 + 1)", "1 + 1"), ("0.5 ? 1 : 2", "0.5"),
    ("(1 < 2 ? 1 : 2) ? 3 : 4", "1 < 2 ? 1 : 2"),
])
def test_a_number_is_not_a_condition(text, operand):
    """Known to be a number as it is compiled: refused then (as the prover refuses it), at the operand."""
    with pytest.raises(SchedcError) as e:
        compile_expr(expr(text), Scope())
    assert e.value.code == "type" and "expected a condition, got a" in str(e.value)
    assert covered(e.value) == operand


@pytest.mark.parametrize("text", ["a ? 1 : 2", "a and 1 < 2", "1 > 2 or a", "not a", "b < 1 and (a ? b : c) == 0"])
@pytest.mark.parametrize("value", [0, 1, -3])
def test_a_name_whose_value_is_an_integer_is_not_a_condition(text, value):
    """A name of unknown type: the integer it holds is refused when it is read as a condition (0
    or not), at the name."""
    err = error(text, a=value, b=0, c=0)
    assert err.code == "type" and "expected a condition, got an integer" in str(err)
    assert covered(err) == "a"
    ev(text, a=value == 0, b=0, c=0)  # a condition there is fine: no error


@pytest.mark.parametrize("text, kind", [
    ("1 + 2", INT), ("7 // 2", INT), ("1 < 2", BOOL), ("not 1 < 2", BOOL), ("1 < 2 and a", BOOL),
    ("0.5", NUM),
    ("0.5 + 1", NUM), ("a", ANY), ("1 < 2 ? 1 : 2", INT), ("a ? 1 : 0.5", NUM), ("a ? 1 : 1 < 2", ANY),
    ("min(1, 2)", INT), ("max(1, 0.5)", NUM), ("a // 2", INT), ("-a", NUM),
])
def test_the_inferred_type(text, kind):
    assert compile_expr(expr(text), Scope()).type == kind


# ---- errors and their spans ----
@pytest.mark.parametrize("text, divisor", [
    ("a // b", "b"), ("a % b", "b"), ("1 // 0", "0"), ("7 % 0", "0"),
    ("a // (b - b)", "b - b"), ("(a + 1) % (b * 0)", "b * 0"), ("min(a // b, 1)", "b"),
])
def test_division_by_zero_is_an_error_at_the_divisor(text, divisor):
    err = error(text, a=3, b=0)
    assert err.code == "division-by-zero"
    assert covered(err) == divisor
    assert f"'{divisor}' is 0" in str(err)
    assert err.diagnostics[0].span.file == "e.pp"


def test_division_by_a_nonzero_value_of_either_sign_is_fine():
    assert ev("a // b", a=9, b=-4) == -3
    assert ev("a % b", a=9, b=-4) == -3


def test_unknown_names_are_errors_even_on_a_path_never_taken():
    for text in ("foo + 1", "1 > 2 ? foo : 1", "1 > 2 and foo == 1"):
        with pytest.raises(SchedcError) as e:
            compile_expr(expr(text), Scope(("food", "a")))
        err = e.value
        assert err.code == "unknown-name" and covered(err) == "foo"
        assert "unknown name 'foo'; did you mean 'food'?" in str(err)
    with pytest.raises(SchedcError) as e:
        compile_expr(expr("zzz"), Scope(("a",)))
    assert "did you mean" not in str(e.value)


def test_unknown_functions_and_actions_in_expressions():
    err = error("mn(1, 2)")
    assert err.code == "unknown-function" and covered(err) == "mn"
    assert "did you mean 'min'?" in str(err) and "functions are: min, max, abs" in str(err)
    for action in ("F(0, 1)", "SEND_F(0, 1)", "group(F(0, 1))"):
        err = error(f"1 + {action}")
        assert err.code == "unknown-function" and "is an action" in str(err)


@pytest.mark.parametrize("text", ["abs(1, 2)", "abs()", "min()", "max()"])
def test_builtin_arity(text):
    err = error(text)
    assert err.code == "arity" and covered(err) == text


@pytest.mark.parametrize("text, at", [
    ("a * a", "a * a"), ("a + a", "a + a"), ("-a - a", "-a - a"), ("1 + (a * 4)", "a * 4"),
    ("max(1, a * 2)", "a * 2"),
])
def test_overflow_is_an_error_at_the_operation(text, at):
    err = error(text, a=2**61 + 1)
    assert err.code == "too-large" and "beyond ±2^62" in str(err)
    assert covered(err) == at


def test_values_up_to_the_limit_are_fine():
    assert ev("a + a", a=2**61) == MAX_INT
    assert ev("-a - a", a=2**61) == -MAX_INT
    assert ev("a * 2 - a", a=2**61) == 2**61
    assert ev("4611686018427387904") == MAX_INT


def test_a_literal_beyond_the_limit_is_refused_when_read():
    with pytest.raises(SchedcError) as e:
        ev("4611686018427387905 + 0")
    assert e.value.code == "too-large"
    assert covered(e.value) == "4611686018427387905"


def test_deep_expressions_evaluate():
    depth = 4 * SPILL_DEPTH  # beyond the depth at which the emitter writes a nested function
    text = "(" * depth + "1" + " + a)" * depth
    assert ev(text, a=2) == 1 + 2 * depth
    text = "0" + " + a" * depth  # a long left-leaning chain
    assert ev(text, a=3) == 3 * depth


# ---- `let` functions ----
def scope_with(*lets: tuple[str, tuple[str, ...], str], names=NAMES) -> Scope:
    """A scope with `let` functions, each (name, params, body), defined in order."""
    scope = Scope(names)
    for name, params, body in lets:
        e = expr(body)
        scope.functions[name] = (params, compile_function(params, e, scope), e.span)
    return scope


def test_let_functions():
    scope = scope_with(("sq", ("x",), "x * x"), ("f", ("x", "y"), "sq(x) - y + a"))
    assert ev("f(3, 1)", scope, a=10) == 18
    assert ev("f(b, b) + sq(2)", scope, a=0, b=-2) == 10
    with pytest.raises(SchedcError) as e:
        ev("f(1)", scope, a=0)
    assert e.value.code == "arity" and "f takes 2 argument(s) (x, y), got 1" in str(e.value)


def test_a_chain_of_functions_each_calling_the_one_before_twice_is_memoized():
    lets = [("f0", ("x",), "x + 1")] + [(f"f{i}", ("x",), f"f{i - 1}(x) + f{i - 1}(x) - x") for i in range(1, 60)]
    scope = scope_with(*lets)
    # f_i(x) = 2 f_{i-1}(x) - x = x + 2^i; unmemoized this would be 2^59 calls
    assert ev("f59(a)", scope, a=5) == 5 + 2**59


def test_a_function_nesting_too_deep_is_refused_where_it_is_defined():
    lets = [("g0", ("x",), "x")] + [(f"g{i}", ("x",), f"g{i - 1}(x) + 1") for i in range(1, MAX_CALL_NESTING)]
    with pytest.raises(SchedcError) as e:
        scope_with(*lets)
    assert e.value.code == "too-large" and f"at most {MAX_CALL_NESTING}" in str(e.value)


def test_division_by_zero_inside_a_function_names_the_divisor_in_its_body():
    scope = scope_with(("d", ("x", "y"), "x // y"))
    err = error("d(4, a - a)", scope, a=1)
    assert err.code == "division-by-zero" and covered(err) == "y"


# ---- generated expressions against a Python reference ----
class Overflow(Exception):
    pass


def _checked(v: int) -> int:
    if abs(v) > MAX_INT:
        raise Overflow
    return v


_LEAVES = st.one_of(
    st.integers(0, 12).map(str),
    st.sampled_from(["0", "1"]),  # often: a divisor of zero
    st.sampled_from(["4611686018427387904", "2305843009213693952", "1000000007"]),
    st.sampled_from(NAMES),
)
_CMP = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])


def _conditions(ints):
    """Comparisons of `ints`, joined by and, or and not."""
    base = st.tuples(st.just("bin"), _CMP, ints, ints)
    return st.recursive(base, lambda c: st.one_of(
        st.tuples(st.just("bin"), st.sampled_from(["and", "or"]), c, c), st.tuples(st.just("not"), c)), max_leaves=3)


def _extend(inner):
    cmp = st.tuples(st.just("bin"), _CMP, inner, inner)
    return st.one_of(
        st.tuples(st.just("bin"), st.sampled_from(["+", "-", "*", "//", "%"]), inner, inner),
        st.tuples(st.just("neg"), inner),
        st.tuples(st.just("call"), st.sampled_from(["min", "max"]), inner),
        st.tuples(st.just("call"), st.sampled_from(["min", "max"]), inner, inner, inner),
        st.tuples(st.just("call"), st.just("abs"), inner),
        st.tuples(st.just("if"), st.one_of(cmp, st.tuples(st.just("not"), cmp)), inner, inner),
    )


# integer expressions and conditions, as trees: ("bin", op, x, y), ("neg", x), ("not", x),
# ("call", name, *args), ("if", cond, then, orelse); leaves are literals and names
INTS = st.recursive(_LEAVES, _extend, max_leaves=12)
CONDS = _conditions(INTS)


def render(t) -> str:
    if isinstance(t, str):
        return t
    kind, *args = t
    if kind == "bin":
        op, x, y = args
        return f"({render(x)} {op} {render(y)})"
    if kind == "neg":
        return f"(-{render(args[0])})"
    if kind == "not":
        return f"(not {render(args[0])})"
    if kind == "call":
        return f"{args[0]}({', '.join(render(a) for a in args[1:])})"
    return f"({render(args[0])} ? {render(args[1])} : {render(args[2])})"


_OPS = {"+": lambda x, y: _checked(x + y), "-": lambda x, y: _checked(x - y), "*": lambda x, y: _checked(x * y),
        "//": lambda x, y: x // y, "%": lambda x, y: x % y,
        "==": lambda x, y: x == y, "!=": lambda x, y: x != y, "<": lambda x, y: x < y,
        "<=": lambda x, y: x <= y, ">": lambda x, y: x > y, ">=": lambda x, y: x >= y}


def reference(t, env):
    """Plain Python, left to right, raising ZeroDivisionError or Overflow as the language's errors."""
    if isinstance(t, str):
        return env[t] if t in env else int(t)
    kind, *args = t
    if kind == "bin":
        op, x, y = args
        if op == "and":
            return bool(reference(x, env)) and bool(reference(y, env))
        if op == "or":
            return bool(reference(x, env)) or bool(reference(y, env))
        return _OPS[op](reference(x, env), reference(y, env))
    if kind == "neg":
        return -reference(args[0], env)
    if kind == "not":
        return not reference(args[0], env)
    if kind == "call":
        values = [reference(a, env) for a in args[1:]]
        return abs(values[0]) if args[0] == "abs" else {"min": min, "max": max}[args[0]](values)
    return reference(args[1], env) if reference(args[0], env) else reference(args[2], env)


def expected(t, env):
    try:
        return reference(t, env), None
    except ZeroDivisionError:
        return None, "division-by-zero"
    except Overflow:
        return None, "too-large"


_ENV = st.fixed_dictionaries({n: st.one_of(st.integers(-20, 20), st.integers(-MAX_INT, MAX_INT)) for n in NAMES})


@settings(max_examples=300)
@given(INTS, _ENV)
def test_evaluation_agrees_with_python(t, env):
    value, code = expected(t, env)
    run = compile_expr(expr(render(t)), Scope())
    if code is None:
        got = run(env)
        assert got == value and type(got) is int
    else:
        with pytest.raises(SchedcError) as e:
            run(env)
        assert e.value.code == code


@settings(max_examples=200)
@given(CONDS, _ENV)
def test_conditions_agree_with_python(t, env):
    value, code = expected(t, env)
    run = compile_expr(expr(render(t)), Scope())
    if code is None:
        assert run(env) is value
    else:
        with pytest.raises(SchedcError) as e:
            run(env)
        assert e.value.code == code


@settings(max_examples=40)
@given(INTS, _ENV)
def test_the_compilers_local_mode_agrees_with_python(t, env):
    """The same expressions written into a rank body's code (names as local variables): a step runs
    iff the expression equals the reference's value; an error is the reference's."""
    value, code = expected(t, env)
    target = value if code is None else 0
    text = (f"schedule e(a = 0, b = 0, c = 0) {{ stages 1 ranks 1 microbatches 1\n"
            f"  rank r {{ if {render(t)} == {target} {{ F(0, 0) }} }} }}")
    tree = parse(text, "e.pp")
    if code is None:
        program = compile_schedule(tree, env)
        assert len(program.ranks[0]) == 1
    else:
        with pytest.raises(SchedcError) as e:
            compile_schedule(tree, env)
        assert e.value.code == code
        assert e.value.diagnostics[0].span.line == 2
