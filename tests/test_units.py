"""Units (issue 17 item 8; docs/semantics.md, "Units"): every command describes the same model.

Default times and sizes are a rank-sized chunk's (t_F = t_I = t_W = 1, t_B = 2, one unit of
activation per microbatch); a stage of a schedule with S = V x R stages takes its share R/S
(schedc/ir.py `default_share`, the one place the rule is written). Values the user gives are taken
as written; a profile measured on n stages is split over a schedule with V x n stages. So `sim`,
`check`, `compare` and `viz` give one answer, and the published closed forms come out of them
directly, for schedules with V chunks per rank as for V = 1.
"""
from __future__ import annotations

import itertools
import json

import pytest

import schedc
from schedc.compare import compare
from schedc.costs import profile_costs
from schedc.simulate import simulate

P4M8 = ("--param", "P=4", "--param", "M=8")
BUILTINS = ("gpipe", "1f1b", "interleaved_1f1b", "looped_bfs", "zb_h1", "zb_h2", "interleaved_zero_bubble",
            "zbv", "dualpipev")


def cli_json(run_cli, *argv) -> dict:
    code, out, err = run_cli(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


# ---- one model in every command ----
def test_zbv_and_1f1b_give_the_same_numbers_in_sim_check_compare_and_viz(run_cli, tmp_path):
    # ZB-V at P=4, M=8 peaks at P units, as in the zero-bubble paper, and runs in 3M + (P-1)/2
    for name, makespan, peak in (("zbv", 25.5, 4), ("1f1b", 33, 4)):
        _one_answer(run_cli, tmp_path, name, makespan, peak)


def _one_answer(run_cli, tmp_path, name, makespan, peak):
    """sim, check, compare and viz (its SVG and HTML title) say `makespan` and `peak` for `name`."""
    sim = cli_json(run_cli, "sim", name, *P4M8)
    assert sim["makespan"] == makespan and max(sim["peak_memory"]) == peak
    checked = cli_json(run_cli, "check", name, *P4M8)
    assert max(checked["peak_activation"]) == peak and max(checked["peak_memory"]) == peak
    (row,) = [json.loads(line) for line in run_cli("compare", name, *P4M8, "--json")[1].splitlines()]
    assert (row["makespan"], row["peak"], row["bubble_ratio"]) == (makespan, peak, sim["bubble_ratio"])
    for suffix in (".svg", ".html"):
        out = tmp_path / f"{name}{suffix}"
        code, _, err = run_cli("viz", name, *P4M8, "-o", str(out))
        assert code == 0, err
        assert f"makespan {makespan:g} · bubble {sim['bubble_ratio']:.1%} · peak memory {peak} " in out.read_text()


def test_every_builtin_does_the_same_work_per_rank():
    # the same model: each rank runs M microbatches through its share of it, F + I + W = 3 per
    # microbatch, however many chunks it holds
    P, M = 4, 8
    for name in BUILTINS:
        program = schedc.load(name, {"P": P, "M": M, "V": 2}, strict_params=False)
        assert simulate(program).busy == (3.0 * M,) * P, name


# ---- the published closed forms (DESIGN.md, "Cost model and metrics"), at the defaults ----
def test_gpipe_and_1f1b_bubble_at_the_defaults():
    for name, (p, m) in itertools.product(("gpipe", "1f1b"), itertools.product(range(1, 6), range(1, 9))):
        tl = simulate(schedc.load(name, {"P": p, "M": m}))
        assert tl.bubble_ratio == pytest.approx((p - 1) / (m + p - 1), abs=1e-12), (name, p, m)


def test_interleaved_bubble_is_p_minus_1_over_v_m_of_the_ideal_at_the_defaults():
    # ideal: a rank's work on the whole model, 3m whatever V; the ramps add (p - 1) chunk-sized F + B
    checked = 0
    for p, v in itertools.product(range(1, 6), range(1, 5)):
        for m in range(p, 3 * p + 1):
            try:
                program = schedc.load("interleaved_1f1b", {"P": p, "V": v, "M": m})
            except schedc.SchedcError:
                continue  # torch's M restriction (the schedule's `require`)
            ideal = 3.0 * m
            tl = simulate(program)
            assert (tl.makespan - ideal) / ideal == pytest.approx((p - 1) / (v * m), abs=1e-12), (p, v, m)
            checked += 1
    assert checked > 50


@pytest.mark.parametrize("P", [2, 3, 4, 8])
@pytest.mark.parametrize("factor", [2, 3])
def test_zbv_has_zero_bubble_and_peaks_at_p_at_the_defaults(P, factor):
    M = factor * P
    program = schedc.load("zbv", {"P": P, "M": M})
    report = schedc.check(program)
    assert report.ok and report.peak_activation == (P,) * P  # memory p, as in the paper (1F1B's)
    tl = simulate(program)
    for r in range(P):  # no gap from a rank's first action to its last: only the causal start offset
        assert tl.end[r][-1] - tl.start[r][0] == pytest.approx(tl.busy[r])
    assert tl.makespan == pytest.approx(3 * M + (P - 1) / 2)


# ---- what the user gives is taken as written ----
def test_file_values_are_absolute_and_the_rest_takes_its_share(tmp_path, run_cli):
    src = ("schedule two(P = 2, M = 2) { stages 2 * P\n place loop\n cost F = 2\n memory act = 3\n"
           " cost stage 1: W = 4\n memory stage 2: act = 5\n"
           " rank r { for m in 0 .. M { F(r, m) } for m in 0 .. M { F(r + P, m) }\n"
           "          for m in 0 .. M { B(r + P, m) } for m in 0 .. M { B(r, m) } } }\n")
    path = tmp_path / "two.pp"
    path.write_text(src)
    ann = schedc.load(str(path)).annotations
    assert [c.F for c in ann.stage_costs] == [2, 2, 2, 2]  # a global `cost F` is per stage, as written
    assert [(c.I, c.W, c.B) for c in ann.stage_costs] == [(0.5, 0.5, 1), (0.5, 4, 4.5), (0.5, 0.5, 1), (0.5, 0.5, 1)]
    assert [(m.act, m.weight, m.out) for m in ann.stage_memory] == [(3, 3, 0), (3, 3, 0), (5, 5, 0), (3, 3, 0)]


def test_cost_options_and_files_are_absolute_per_stage(run_cli, tmp_path):
    toml = tmp_path / "unit.toml"
    toml.write_text("F = 1\nI = 1\nW = 1\nact = 1\n")
    for how in (("--cost", "F=1,I=1,W=1,act=1"), ("--costs", str(toml))):
        sim = cli_json(run_cli, "sim", "zbv", *P4M8, *how)
        assert sim["makespan"] == 51 and max(sim["peak_memory"]) == 8  # every chunk a whole unit: twice the model
        rows = [json.loads(line) for line in run_cli("compare", "zbv", *P4M8, *how, "--json")[1].splitlines()]
        assert (rows[0]["makespan"], rows[0]["peak"]) == (51, 8)


# ---- measured profiles ----
MEASURED = {"format": "schedc-profile", "version": 1, "unit": "s",
            "stages": {"0": {"F": 0.5, "I": 0.25, "W": 0.25, "B": 0.5, "act": 8},
                       "1": {"F": 1.0, "I": 0.5, "W": 0.5, "B": 1.0, "act": 4}},
            "messages": {"0": 64}}


def test_a_profile_measured_on_p_stages_is_split_over_v_chunks(tmp_path, run_cli):
    costs = profile_costs(json.dumps(MEASURED), "p.json")
    ann = costs.apply(schedc.load("1f1b", {"P": 2, "M": 2})).annotations  # P stages: as measured
    assert [(c.F, c.I) for c in ann.stage_costs] == [(0.5, 0.25), (1.0, 0.5)] and ann.stage_memory[0].act == 8
    for name, extra in (("interleaved_1f1b", {"V": 2}), ("zbv", {})):
        ann = costs.apply(schedc.load(name, {"P": 2, "M": 4, **extra})).annotations
        # chunks 0 and 1 are measured stage 0 cut in two, chunks 2 and 3 stage 1 (model order)
        halves = [(0.25, 0.125, 0.125, 0.25)] * 2 + [(0.5, 0.25, 0.25, 0.5)] * 2
        assert [(c.F, c.I, c.W, c.B) for c in ann.stage_costs] == halves
        assert [(m.act, m.weight) for m in ann.stage_memory] == [(4, 4)] * 2 + [(2, 2)] * 2
        assert [m.out for m in ann.stage_memory] == [64] * 4  # a boundary tensor keeps its size
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(MEASURED))
    args = ("interleaved_1f1b", "--param", "P=2", "--param", "V=2", "--param", "M=4", "--costs", str(path))
    sim = cli_json(run_cli, "sim", *args)
    assert sim["costs"]["F"] == [0.25, 0.25, 0.5, 0.5]
    (row,) = [json.loads(line) for line in run_cli("compare", *args, "--json")[1].splitlines()]
    assert row["makespan"] == sim["makespan"]


def test_compare_splits_a_profile_for_every_schedule():
    # a profile of 4 equal stages (t seconds each for F, I and W): every schedule at P=4 is the
    # default model scaled by t, with no stage left at the default unit next to the seconds
    t = 0.004
    doc = {"stages": {str(s): {"F": t, "I": t, "W": t, "B": 2 * t} for s in range(4)}}
    measured = {r.name: r for r in compare(BUILTINS, {"P": 4, "M": 8, "V": 2}, costs=profile_costs(json.dumps(doc)))}
    default = {r.name: r for r in compare(BUILTINS, {"P": 4, "M": 8, "V": 2})}
    for name in BUILTINS:
        assert measured[name].makespan == pytest.approx(default[name].makespan * t), name


def test_a_profile_that_does_not_divide_the_stages_is_a_clear_error(tmp_path, run_cli):
    doc = {"stages": {str(s): {"F": 1, "B": 2} for s in range(4)}}
    path = tmp_path / "four.json"
    path.write_text(json.dumps(doc))
    for command in ("sim", "compare"):  # 6 stages from a profile of 4
        code, out, err = run_cli(command, "interleaved_1f1b", "--param", "P=3", "--param", "V=2", "--param", "M=6",
                                 "--costs", str(path))
        assert code == 2 and "Traceback" not in err + out, err
        assert "error[costs]: the profile measured 4 stages, but interleaved_1f1b has 6, not a multiple of 4" in err


# ---- the rule lives in one function ----
def test_every_reader_takes_the_default_share_from_one_function(monkeypatch, tmp_path, run_cli):
    def numbers():
        program = schedc.load("1f1b", {"P": 2, "M": 2})
        sim = cli_json(run_cli, "sim", "1f1b", "--param", "P=2", "--param", "M=2")
        (row,) = compare(["1f1b"], {"P": 2, "M": 2})
        csv = tmp_path / "1f1b.csv"
        csv.write_text(schedc.to_torch_csv(program, level="compute"))
        return (simulate(program).makespan, sim["makespan"], row.makespan, schedc.check(program).peak_activation,
                row.peak_memory, schedc.check(schedc.from_torch_csv(str(csv))).peak_activation)

    before = numbers()
    assert before == (9, 9, 9, (2, 1), (2, 1), (2, 1))
    monkeypatch.setattr("schedc.ir.default_share", lambda num_stages, num_ranks: 2.0)
    assert numbers() == (18, 18, 18, (4, 2), (4, 2), (4, 2))
