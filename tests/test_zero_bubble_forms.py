"""ZB-H1 and ZB-H2 reproduce the zero-bubble paper's closed forms (arXiv 2401.10241).

ZB-H1: makespan M(t_F + t_I + t_W) + (P-1)(t_F + t_I - t_W), i.e. a bubble of (P-1)(t_F + t_I - t_W)
per rank, with peak activations P (1F1B's). ZB-H2, the order `order greedy` builds under a 2P-1 cap (written out as loops): peak
activations 2P-1 and, once M >= 2P, every rank busy without a gap between its first and its last
action at t_F = t_I = t_W (the paper's zero bubble: a parallelogram).
"""
from __future__ import annotations

import dataclasses

import pytest

import schedc
from schedc.ir import StageCost
from schedc.simulate import simulate

COSTS = [(1, 1, 1), (2, 2, 1), (1, 2, 1), (3, 2, 1), (1, 1, 0.5), (2, 1, 1)]


def with_costs(program, F, I, W):  # noqa: E741
    stage = StageCost(F=F, B=I + W, I=I, W=W)
    ann = dataclasses.replace(program.annotations, stage_costs=(stage,) * program.num_stages)
    return dataclasses.replace(program, annotations=ann)


@pytest.mark.parametrize("P", [2, 3, 4, 8])
@pytest.mark.parametrize("M", [1, 2, 4, 8, 16, 32])
def test_zb_h1_bubble_and_memory(P, M):
    program = schedc.load("zb_h1", {"P": P, "M": M})
    report = schedc.check(program)
    assert report.ok
    assert max(report.peak_activation) == min(P, M)
    if M < P:
        return  # the closed form assumes the pipeline fills
    for F, I, W in COSTS:  # noqa: E741
        if W > F:
            continue  # the paper's setting: a deferred W fits into the gap an F leaves
        timeline = simulate(with_costs(program, F, I, W))
        assert timeline.makespan == pytest.approx(M * (F + I + W) + (P - 1) * (F + I - W)), (F, I, W)
        assert all(b == pytest.approx(M * (F + I + W)) for b in timeline.busy)


def test_zb_h1_equals_torchs_zero_bubble_with_one_chunk():
    for P, M in [(2, 4), (4, 8), (4, 12)]:
        ours = schedc.load("zb_h1", {"P": P, "M": M})
        zb1p = schedc.load("interleaved_zero_bubble", {"P": P, "V": 1, "M": M})
        assert ours.ranks == zb1p.ranks


@pytest.mark.parametrize("P", [2, 3, 4, 6])
@pytest.mark.parametrize("factor", [2, 3, 4])
def test_zb_h2_has_no_gaps_and_2p_minus_1_memory(P, factor):
    M = factor * P
    program = schedc.load("zb_h2", {"P": P, "M": M})
    report = schedc.check(program)
    assert report.ok
    assert max(report.peak_activation) == 2 * P - 1
    timeline = simulate(program)
    for r in range(P):
        span = timeline.end[r][-1] - timeline.start[r][0]
        assert span == pytest.approx(timeline.busy[r]), f"rank {r} has a gap"
    # the only idle time is the causal start offset: rank r cannot begin before r forwards
    assert timeline.makespan == pytest.approx(3 * M + (P - 1))


def test_zb_h2_fills_what_zb_h1_leaves_when_w_is_cheap():
    # with t_W < t_F ZB-H1 keeps (P-1)(t_F + t_I - t_W) of bubble; the 2P-1 cap lets ZB-H2 do better
    P, M = 4, 16
    h1 = simulate(with_costs(schedc.load("zb_h1", {"P": P, "M": M}), 1, 1, 0.5)).makespan
    h2 = simulate(with_costs(schedc.load("zb_h2", {"P": P, "M": M}), 1, 1, 0.5)).makespan
    assert h2 <= h1


def test_greedy_order_refuses_an_impossible_cap(tmp_path, run_cli):
    src = tmp_path / "tight.pp"
    src.write_text("schedule tight(P = 2, M = 2) { stages P\n place loop\n"
                   " order greedy(prefer = [I, F, W], memory = 0)\n"
                   " rank r { for m in 0 .. M { F(r, m); I(r, m); W(r, m) } } }\n")
    code, _, err = run_cli("check", str(src))
    assert code == 2 and "error[order]" in err and "memory <= 0" in err


@pytest.mark.parametrize("option, told", [
    ("memory = [F]", "order greedy's memory takes a number"),
    ("prefer = 3", "order greedy's prefer takes a list of compute kinds"),
    ("cap = 3", "'cap' is not an option"),
])
def test_greedy_order_says_which_option_has_the_wrong_form(tmp_path, run_cli, option, told):
    """A known option with a value of the wrong form is told as that, not as an unknown option."""
    src = tmp_path / "form.pp"
    src.write_text(f"schedule form(P = 2, M = 2) {{ stages P\n place loop\n order greedy({option})\n"
                   " rank r { for m in 0 .. M { F(r, m); B(r, m) } } }\n")
    code, _, err = run_cli("check", str(src))
    assert code == 2 and "error[order]" in err and told in err, err
    assert "form.pp:3:15:" in err


@pytest.mark.parametrize("P", [2, 4, 8])
@pytest.mark.parametrize("factor", [2, 4, 8])
def test_zbv_has_no_gaps_at_equal_costs(P, factor):
    # DESIGN.md: ZB-V has zero bubble when t_F = t_I = t_W: each rank works without a gap from its
    # first action to its last; the only idle time is the causal start offset of P - 1 forwards of
    # a chunk. Default costs: a rank's two chunks together cost t_F = t_I = t_W = 1, each 1/2.
    M = factor * P
    timeline = simulate(schedc.load("zbv", {"P": P, "M": M}))
    for r in range(P):
        assert timeline.end[r][-1] - timeline.start[r][0] == pytest.approx(timeline.busy[r]), r
        assert timeline.busy[r] == pytest.approx(3 * M)  # 1F1B's work per rank: the same model
    assert timeline.makespan == pytest.approx(3 * M + (P - 1) / 2)
