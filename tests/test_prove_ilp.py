"""The timing fit's integer program (schedc/prove/ilp.py) against brute force on small instances:
it finds a solution exactly when one exists within the bounds, the one it finds meets every row,
and no solution has a smaller weighted size."""
from __future__ import annotations

import itertools

from hypothesis import given, settings, strategies as st

import pytest

from schedc import solver
from schedc.prove import ilp, smt
from schedc.prove.ilp import CONSTANT_WEIGHT, Fit, minimise
from schedc.solver import Deadline


def cost(weights, x):
    return sum(w * abs(v) for w, v in zip(weights, x))


def meets(rows, x):
    return all(sum(c * x[i] for i, c in row.items()) >= 1 for row in rows)


problems = st.integers(1, 3).flatmap(lambda n: st.tuples(
    st.lists(st.dictionaries(st.integers(0, n - 1), st.integers(-6, 6).filter(bool), min_size=1), max_size=6),
    st.lists(st.integers(0, 3), min_size=n, max_size=n),
    st.lists(st.sampled_from([CONSTANT_WEIGHT, 1.0, 2.0]), min_size=n, max_size=n)))


@settings(max_examples=150, deadline=None)
@given(problems)
def test_the_integer_program_finds_the_smallest_solution_exactly_when_there_is_one(problem):
    rows, limits, weights = problem
    every = [x for x in itertools.product(*(range(-u, u + 1) for u in limits)) if meets(rows, x)]
    got = minimise(rows, limits, weights)
    if not every:
        assert got is None
        return
    assert got is not None and meets(rows, got)
    assert all(abs(v) <= u for v, u in zip(got, limits))
    assert abs(cost(weights, got) - min(cost(weights, x) for x in every)) < 1e-9


def test_the_fit_keeps_disallowed_features_at_zero_and_says_none_when_only_they_would_do():
    # t(b) - t(a) >= 1 within one statement, whose features are (1, M, m): the difference is in m
    rows = [[("s", [0, 0, 1])], [("s", [0, 1, 2])]]
    fit = Fit(4, allowed={"s": {0, 1}})  # m may not be used
    fit.add(rows)
    assert fit.solve(Deadline.after(10)) is None  # the first row is 0 >= 1 without m
    fit = Fit(4)
    fit.add(rows)
    assert fit.solve(Deadline.after(10)) == {"s": {2: 1}}  # the smallest: t = m


def test_what_highs_prints_goes_to_stderr_so_stdout_stays_the_commands(noisy_highs, capfd):
    assert minimise([{0: 1}], [3], [1.0]) == [1]
    out, err = capfd.readouterr()
    assert noisy_highs and out == ""
    assert "HiGHS: a raw line" in err and "HiGHS: a buffered line" in err


@pytest.mark.parametrize("make", [lambda: ilp.Fit(2), lambda: smt.Fit(2)])
def test_a_fit_being_built_looks_at_the_commands_clock(make):
    """Building a fit's rows (thousands of them, seconds of Z3 terms) stops at the command's
    `--timeout` (TimeUp), as the solver's own queries do: `prove zbv --timeout 1` took 3.8 s."""
    rows = [[("s", [1, k, 2])] for k in range(3 * ilp.ROWS_PER_CHECK)]
    fit = make()
    fit.add(rows[:1], solver.Deadline.after(60))  # (time left: added)
    with pytest.raises(solver.TimeUp):
        fit.add(rows, solver.Deadline(solver.clock() - 1, 1))  # (its clock has passed)
    fit.add(rows)  # (no deadline: every row)
