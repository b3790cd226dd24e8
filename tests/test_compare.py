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
    ideal = 3 * M  # F + B per microbatch of a rank-sized chunk at the default costs (ir.default_share)
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


def test_cli_table_is_sorted_and_marks_the_limit(run_cli):
    code, out, err = run_cli("compare", "--param", "P=4", "--param", "M=8", "--param", "V=2", "--memory-limit", "5")
    assert code == 0, err
    lines = out.splitlines()[1:]
    names = [ln.split()[0] for ln in lines]
    assert set(names) == set(NAMES)
    fitting = [ln for ln in lines if "over the memory limit" not in ln]
    spans = [float(ln.split()[ln.split().index(next(t for t in ln.split() if t.startswith("M="))) + 1])
             for ln in fitting]
    assert spans == sorted(spans) and len(fitting) < len(lines)
    assert "gpipe" in [ln.split()[0] for ln in lines if "over the memory limit" in ln]
    assert names.index("1f1b") < names.index("gpipe")


def test_cli_json_matches_the_module(run_cli):
    import json
    code, out, _ = run_cli("compare", "1f1b", "zb_h1", "gpipe", "--param", "P=4", "--param", "M=8",
                           "--cost", "F=1,I=1,W=0.5", "--json")
    assert code == 0
    got = [json.loads(line) for line in out.splitlines()]
    from schedc.costs import parse_cost_option
    want = compare(["1f1b", "zb_h1", "gpipe"], {"P": 4, "M": 8}, costs=parse_cost_option("F=1,I=1,W=0.5"))
    assert [g["schedule"] for g in got] == [w.name for w in want]
    assert [g["makespan"] for g in got] == pytest.approx([w.makespan for w in want])
    assert got[0]["schedule"] == "zb_h1"  # a cheap W is exactly what ZB-H1 exploits


def test_cli_json_is_valid_json_when_memory_overflows(run_cli):
    import json

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    code, out, err = run_cli("compare", "1f1b", "gpipe", "--param", "P=2", "--param", "M=2", "--cost", "act=1e308",
                             "--json")
    assert code == 0, err
    rows = [json.loads(line, parse_constant=refuse) for line in out.splitlines()]  # `Infinity` before
    assert [r["peak"] for r in rows] == [None, None] and rows[0]["peak_memory"] == [None, 1e308]


def test_cli_nothing_fits_exits_1_and_bad_name_exits_2(run_cli):
    code, out, err = run_cli("compare", "gpipe", "--param", "P=4", "--param", "M=8", "--memory-limit", "2")
    assert code == 1 and "no schedule" in err and "over the memory limit" in out
    code, _, err = run_cli("compare", "no_such_schedule", "--param", "P=2")
    assert code == 2 and "no such file or built-in" in err and "Traceback" not in err
    code, _, err = run_cli("compare", "--memory-limit", "-1")
    assert code == 2 and "--memory-limit" in err
