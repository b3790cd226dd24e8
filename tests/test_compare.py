"""`compare`: one model split by every schedule, ranked by makespan, with the published forms."""
from __future__ import annotations

import pytest

from schedc.compare import compare, render
from schedc.resources import builtin_schedules

NAMES = list(builtin_schedules())


def rows_by_name(P, M, V=2, **kw):
    return {r.name: r for r in compare(NAMES, {"P": P, "M": M, "V": V}, **kw)}


@pytest.mark.parametrize("P, M", [(2, 4), (4, 8), (4, 16), (8, 16)])
def test_ranked_by_makespan_with_the_published_forms(P, M):
    rows = compare(NAMES, {"P": P, "M": M, "V": 2})
    timed = [r for r in rows if r.skipped is None]
    assert [r.makespan for r in timed] == sorted(r.makespan for r in timed)
    by = {r.name: r for r in rows}
    ideal = 3 * M  # F + B per microbatch, unit F and I and W, one-stage-per-rank units
    # GPipe and 1F1B: bubble fraction (p-1)/(m+p-1) of the makespan
    for name in ("gpipe", "1f1b"):
        assert by[name].bubble_ratio == pytest.approx((P - 1) / (M + P - 1))
        assert by[name].makespan == pytest.approx(ideal + 3 * (P - 1))
    # interleaved 1F1B: bubble (p-1)/(v*m) relative to the ideal time
    assert by["interleaved_1f1b"].makespan - ideal == pytest.approx(ideal * (P - 1) / (2 * M))
    # ZB-H1 beats 1F1B at the same memory
    assert by["zb_h1"].makespan < by["1f1b"].makespan
    assert max(by["zb_h1"].peak_memory) == max(by["1f1b"].peak_memory) == P


def test_memory_limit_marks_and_orders_last():
    rows = compare(NAMES, {"P": 4, "M": 8, "V": 2}, memory_limit=4)
    flags = [r.over_limit for r in rows if r.skipped is None]
    assert flags == sorted(flags)  # fitting ones first
    by = {r.name: r for r in rows}
    assert by["gpipe"].over_limit and not by["1f1b"].over_limit
    assert "over the memory limit" in render(rows)


def test_a_setting_a_schedule_refuses_is_listed_with_the_reason():
    by = rows_by_name(4, 4)
    assert by["dualpipev"].skipped and "M >= 2P" in by["dualpipev"].skipped
    assert by["dualpipev"].makespan is None and "skipped" in render(list(by.values()))
