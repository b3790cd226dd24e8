"""The simulator, cost files, Chrome traces and `schedc sim`: closed forms, hand-computed cases,
the two levels of one schedule, deadlock, and the trace's structure.

Every expected number below comes from a formula or a hand derivation written next to it.
"""
from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import schedc
import schedc.api
from conftest import compile_text
from schedc.costs import Costs, load_costs, parse_cost_option, profile_costs, toml_costs
from schedc.ir import StageCost
from schedc.lint import lint
from schedc.passes import lower
from schedc.rules.semantics import RENDEZVOUS
from schedc.simulate import Link, simulate
from schedc.strategies import lowered_programs, programs
from schedc.verify.execute import execute
from schedc.verify.memory import peak_activation


def load(name, costs="", **params):
    program = schedc.load(name, params)
    return parse_cost_option(costs).apply(program) if costs else program


def loadable(name, **params):
    try:
        return schedc.load(name, params)
    except schedc.SchedcError as e:
        assert e.code == "require"  # the schedule's own constraint, e.g. interleaved's M multiple
        return None


# ---- closed forms (DESIGN.md, "Cost model and metrics") ----
# GPipe and 1F1B: makespan (m + p - 1)(t_F + t_B), so bubble (p - 1)/(m + p - 1). Exact when every
# stage has the same t_F and t_B, every rank the same speed, and communication is free. The paper
# states it for t_B = 2 t_F, but the ratio does not matter: each rank does m (t_F + t_B) of work,
# and the last backward of rank 0 waits for p - 1 forwards and p - 1 backwards of the ramp.
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("t_b", [2.0, 1.0, 3.0])
def test_gpipe_and_1f1b_bubble_closed_form(name, t_b):
    for p, m in itertools.product(range(1, 9), range(1, 17)):
        tl = simulate(load(name, f"F=1,B={t_b}", P=p, M=m))
        assert tl.makespan == (m + p - 1) * (1 + t_b), (p, m)
        assert tl.busy == (m * (1 + t_b),) * p
        assert tl.bubble_ratio == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)


# Interleaved 1F1B (Megatron): v chunks per rank, each chunk t_f, t_b. Ideal time per rank v m (t_f
# + t_b); the bubble adds (p - 1)(t_f + t_b), so relative to ideal it is (p - 1)/(v m). Exact under
# the same assumptions as above and m >= p: torch's order then keeps every rank busy between the
# ramps. (Its M must also be a multiple of max(1, M // P); the schedule's `require` enforces it.)
def test_interleaved_bubble_relative_to_ideal():
    checked = 0
    for p, v in itertools.product(range(1, 7), range(1, 5)):
        for m in range(p, 3 * p + 1):
            program = loadable("interleaved_1f1b", P=p, V=v, M=m)
            if program is None:
                continue
            tl = simulate(parse_cost_option("F=1,B=2").apply(program))
            ideal = v * m * 3.0
            assert tl.makespan == ideal + (p - 1) * 3.0, (p, v, m)
            assert (tl.makespan - ideal) / ideal == pytest.approx((p - 1) / (v * m), abs=1e-12)
            checked += 1
    assert checked > 100


# With m < p (and v > 1) torch's interleaved order is not that schedule: a round has only m
# microbatches, and chunk c + 1 of microbatch 0 on rank 0 needs chunk c of it from rank p - 1, which
# is p steps away. Rank 0 runs m steps of chunk c, then waits p - m steps, at each of the v - 1 chunk
# boundaries, going down (forwards) and again coming back (backwards). So the makespan is
# (v m + (p - 1) + (v - 1)(p - m))(t_f + t_b), and (p - 1)/(v m) does not hold. Checked here too.
def test_interleaved_with_fewer_microbatches_than_ranks():
    checked = 0
    for p, v, m in itertools.product(range(2, 8), range(2, 5), range(1, 8)):
        if m >= p:
            continue
        program = loadable("interleaved_1f1b", P=p, V=v, M=m)
        tl = simulate(parse_cost_option("F=1,B=3").apply(program))
        assert tl.makespan == (v * m + (p - 1) + (v - 1) * (p - m)) * 4.0, (p, v, m)
        assert (tl.makespan - v * m * 4.0) / (v * m * 4.0) > (p - 1) / (v * m)
        checked += 1
    assert checked > 50


def test_1f1b_peak_activations():
    for p, m in itertools.product(range(1, 9), range(1, 13)):
        program = load("1f1b", P=p, M=m)
        tl = simulate(program)
        assert tl.peak_memory == tuple(float(min(p - r, m)) for r in range(p)), (p, m)
        assert tl.peak_memory == peak_activation(program)  # the verifier's order-based count agrees
        for r in range(p):  # and memory over time starts and ends empty, peaking at the peak
            points = tl.memory(r)
            assert points[-1][1] == 0 and max(v for _, v in points) == tl.peak_memory[r]
            assert all(a[0] <= b[0] for a, b in zip(points, points[1:]))


def test_gpipe_keeps_every_microbatch_alive():
    tl = simulate(load("gpipe", P=3, M=5))
    assert tl.peak_memory == (5.0, 5.0, 5.0)


# ---- per-stage costs, speeds, I/W, latency, bandwidth, overlap: by hand ----
TWO = """schedule two {{
  cost F = 1, B = 2
  {extra}
  rank 0: 0F0 0F1 0B0 0B1
  rank 1: 1F0 1B0 1F1 1B1
}}"""


def test_per_stage_costs_by_hand():
    # stage 1's forward takes 3. rank 0: F(0,0) 0-1, F(0,1) 1-2, B(0,0) waits for B(1,0).
    # rank 1: F(1,0) 1-4, B(1,0) 4-6, F(1,1) 6-9, B(1,1) 9-11. rank 0: B(0,0) 6-8, B(0,1) 11-13.
    tl = simulate(compile_text(TWO.format(extra="cost stage 1: F = 3")))
    assert tl.start == ((0, 1, 6, 11), (1, 4, 6, 9))
    assert tl.end == ((1, 2, 8, 13), (4, 6, 9, 11))
    assert tl.makespan == 13 and tl.busy == (6, 10)
    assert tl.bubble_ratio == pytest.approx(1 - 16 / 26)


def test_rank_speed_divides_times():
    # rank 1 at half speed: its F takes 2, its B 4. F(0,0) 0-1, F(1,0) 1-3, B(1,0) 3-7, F(1,1) 7-9,
    # B(1,1) 9-13; rank 0: F(0,1) 1-2, B(0,0) 7-9, B(0,1) 13-15.
    tl = simulate(compile_text(TWO.format(extra="cost rank 1: speed = 0.5")))
    assert tl.end == ((1, 2, 9, 15), (3, 7, 9, 13))
    assert tl.makespan == 15 and tl.busy == (6, 12)


def test_split_backward_takes_w_off_the_critical_path():
    # I(1,0) sends the gradient on; W(1,0) runs while rank 0 does I(0,0).
    # rank 1: F 1-2, I 2-3, W 3-4; rank 0: F 0-1, I 3-4, W 4-5. With a fused B it would be 1+1+2+2.
    split = compile_text("schedule s {\n rank 0: 0F0 0I0 0W0\n rank 1: 1F0 1I0 1W0\n}")
    fused = compile_text("schedule f {\n rank 0: 0F0 0B0\n rank 1: 1F0 1B0\n}")
    assert simulate(split).makespan == 5
    assert simulate(fused).makespan == 6


def test_overlap_pair_runs_as_one_action():
    # rank 0 runs F(0,1) and B(0,0) as one action of 1 + 2; it starts when B(0,0)'s gradient is there.
    # rank 0: F(0,0) 0-1, then OVERLAP waits for B(1,0): rank 1 F(1,0) 1-2, B(1,0) 2-4, so 4-7.
    # rank 1: F(1,1) needs F(0,1) (ends 7): 7-8, B(1,1) 8-10; rank 0: B(0,1) 10-12.
    p = compile_text("schedule o {\n rank 0: 0F0 (0F1;0B0)OVERLAP_F_B 0B1\n rank 1: 1F0 1B0 1F1 1B1\n}")
    tl = simulate(p)
    assert tl.start[0] == (0, 4, 10) and tl.end[0] == (1, 7, 12)
    assert tl.busy == (6, 6) and tl.peak_memory[0] == 2


# GPipe with latency L: stage s runs F(s, j) from s (t_F + L) + j t_F (rank 0 streams its forwards
# and every later stage gets them L after), so the last forward ends at (p-1)(t_F + L) + m t_F; the
# backwards climb back the same way. Makespan (m + p - 1)(t_F + t_B) + 2 (p - 1) L: latency adds to
# the critical path once per hop, not per microbatch (communication overlaps compute).
# Without overlap each rank holds until its output has arrived, so every forward and backward
# that sends costs t + L: makespan (m + p - 1)(t_F + t_B) + 2 (p + m - 2) L (p >= 2).
def test_latency_adds_to_the_critical_path_once_per_hop():
    L = 0.25
    for p, m in itertools.product(range(2, 7), range(1, 9)):
        costs = f"F=1,B=2,latency={L}"
        assert simulate(load("gpipe", costs, P=p, M=m)).makespan == pytest.approx((m + p - 1) * 3 + 2 * (p - 1) * L)
        off = simulate(load("gpipe", costs, P=p, M=m), overlap=False).makespan
        assert off == pytest.approx((m + p - 1) * 3 + 2 * (p + m - 2) * L)


def test_latency_of_one_channel():
    # GPipe P=2 M=1 (F, F, B, B = 1+1+2+2) with latency 0.5 on 0->1 only: the activation is late by
    # 0.5, the gradient (1->0) is not.
    program = load("gpipe", "F=1,B=2", P=2, M=1)
    assert simulate(program).makespan == 6
    assert simulate(program, links={(0, 1): Link(latency=0.5)}).makespan == 6.5
    assert simulate(program, links={(1, 0): Link(latency=0.25)}).makespan == 6.25


def test_bandwidth_and_one_message_at_a_time_per_channel():
    # stage 0's output (activation 0->1 and gradient 1->0) is 4 units; bandwidth 2: 2 per message.
    # 0->1: F(0,0) ends 1, arrives 3; F(0,1) ends 2 but the channel is busy until 3: arrives 5.
    # rank 1: F(1,0) 3-4, F(1,1) 5-6, B(1,0) 6-8, B(1,1) 8-10; 1->0: arrive 10 and 12.
    # rank 0: B(0,0) 10-12, B(0,1) 12-14.
    program = compile_text("""schedule bw {
  cost F = 1, B = 2, bandwidth = 2
  memory stage 0: out = 4
  rank 0: 0F0 0F1 0B0 0B1
  rank 1: 1F0 1F1 1B0 1B1
}""")
    tl = simulate(program)
    assert tl.start == ((0, 1, 10, 12), (3, 5, 6, 8))
    assert [(m.departure, m.arrival) for m in tl.messages] == [(1, 3), (3, 5), (8, 10), (10, 12)]
    assert tl.makespan == 14


# GPipe P=2 M=2 written with explicit communication, latency L, receives posted late (just before
# their use) or early (all at the start). A message leaves once both ends are posted.
# late, overlap on: F(1,0) 1+L..2+L, RECV_F(1,1) posted 2+L so the activation arrives 2+2L;
#   F(1,1) ..3+2L, B(1,0) ..5+2L (arrives 5+3L), B(1,1) ..7+2L; B(0,0) 5+3L..7+3L, RECV_B(0,1) posted
#   7+3L, arrives 7+4L, B(0,1) ..9+4L. Makespan 9 + 4L: posting late costs a latency per message.
# late, overlap off: each send and receive holds both ranks until the arrival; the same 9 + 4L.
# early, overlap on: as the compute level, 9 + 2L (the latency formula above).
# early, overlap off: rank 1 is held by RECV_F(1,0) until 1+L and by RECV_F(1,1) until 2+2L (rank 0
#   sends it after F(0,1), 1+L..2+L); F, F, B until 6+2L, SEND_B holds until 6+3L, B(1,1) ..8+3L,
#   SEND_B until 8+4L; rank 0 waits in RECV_B(0,1) until 8+4L, then B, B: makespan 12 + 4L.
LATE = """schedule late {
  cost F = 1, B = 2, latency = 0.5
  rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
  rank 1: 1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1
}"""
EARLY = """schedule early {
  cost F = 1, B = 2, latency = 0.5
  rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0RECV_B1 0B0 0B1
  rank 1: 1RECV_F0 1RECV_F1 1F0 1F1 1B0 1SEND_B0 1B1 1SEND_B1
}"""


def test_overlap_on_and_off_at_the_comms_level():
    L = 0.5
    late, early = compile_text(LATE), compile_text(EARLY)
    assert simulate(late).makespan == 9 + 4 * L
    assert simulate(late, overlap=False).makespan == 9 + 4 * L
    assert simulate(late, overlap=False).end[1] == (1 + L, 2 + L, 2 + 2 * L, 3 + 2 * L, 5 + 2 * L, 5 + 3 * L,
                                                      7 + 3 * L, 7 + 4 * L)
    assert simulate(early).makespan == 9 + 2 * L == simulate(load("gpipe", "F=1,B=2,latency=0.5", P=2, M=2)).makespan
    off = simulate(early, overlap=False)
    assert off.makespan == 12 + 4 * L and off.busy == (6, 6)
    assert [(m.departure, m.arrival) for m in simulate(early).messages][:2] == [(1, 1 + L), (2, 2 + L)]


def test_comms_and_compute_levels_agree_at_zero_latency():
    rng = random.Random(4)
    cases = 0
    for name in ("gpipe", "1f1b", "interleaved_1f1b", "looped_bfs"):
        for p, m in itertools.product(range(1, 6), range(1, 9)):
            program = loadable(name, P=p, M=m, **({"V": 2} if name in ("interleaved_1f1b", "looped_bfs") else {}))
            if program is None:
                continue
            costs = tuple(StageCost(F=rng.randint(1, 4), B=rng.randint(1, 8)) for _ in range(program.num_stages))
            speed = tuple(rng.choice([0.5, 1.0, 2.0]) for _ in range(p))
            program = replace(program, annotations=replace(program.annotations, stage_costs=costs, rank_speed=speed))
            compute, comms = simulate(program), simulate(lower(program))
            assert compute.level == "compute" and comms.level == ("comms" if p > 1 else "compute")
            assert comms.makespan == compute.makespan, (name, p, m)
            assert comms.busy == compute.busy and comms.peak_memory == compute.peak_memory
            assert len(comms.messages) == len(compute.messages)
            # the compute steps start at the same times on both levels
            for r in range(p):
                starts = [t for rr, _, st, t, _ in comms.steps() if rr == r and not st.parts[0].op.is_comm]
                assert starts == [t for rr, _, _, t, _ in compute.steps() if rr == r]
            cases += 1
    assert cases > 100


def test_blocking_communication_is_never_faster():
    for p, m in itertools.product(range(2, 5), range(1, 6)):
        lowered = lower(load("1f1b", "F=1,B=2,latency=0.1", P=p, M=m))
        assert simulate(lowered, overlap=False).makespan >= simulate(lowered).makespan


# ---- deadlock: the same verdict as the rendezvous executor ----
def test_a_deadlocking_program_raises():
    program = schedc.load("tests/known/pytorch_172668.pp")
    with pytest.raises(schedc.SchedcError) as info:
        simulate(program)
    assert info.value.code == "deadlock"
    assert "rank 0 stops at step 3, SEND_F(0,1)" in info.value.render()
    assert schedc.check(program).deadlock is not None


def test_a_compute_level_cycle_raises():
    program = compile_text("schedule bad {\n  rank 0: 0F0 0B0\n  rank 1: 1B0 1F0\n}")
    with pytest.raises(schedc.SchedcError) as info:
        simulate(program)
    assert info.value.code == "deadlock"
    assert "rank 1 stops at step 0, B(1,0): it needs the activation of F(1,0)" in info.value.render()


def test_deadlock_verdict_matches_the_executor_on_mutated_programs():
    rng = random.Random(11)
    seen = {True: 0, False: 0}
    for trial in range(600):
        p, m = rng.randint(2, 3), rng.randint(1, 3)
        program = lower(load(rng.choice(["gpipe", "1f1b"]), P=p, M=m))
        ranks = [list(steps) for steps in program.ranks]
        for _ in range(rng.randint(1, 3)):  # swap adjacent steps
            r = rng.randrange(p)
            if len(ranks[r]) > 1:
                i = rng.randrange(len(ranks[r]) - 1)
                ranks[r][i], ranks[r][i + 1] = ranks[r][i + 1], ranks[r][i]
        mutated = program.with_ranks(ranks)
        if lint(mutated):  # e.g. a send before its value exists: structure, not deadlock
            continue
        finishes = execute(mutated, RENDEZVOUS).finished
        try:
            simulate(mutated)
            simulated = True
        except schedc.SchedcError as e:
            assert e.code == "deadlock"
            simulated = False
        assert simulated == finishes, [[str(s) for s in steps] for steps in ranks]
        seen[finishes] += 1
    assert seen[True] > 20 and seen[False] > 20


def test_mismatched_payloads_are_counted():
    tl = simulate(schedc.load("tests/known/tagless_order.pp"))
    assert tl.mismatches == 2  # both activations cross over: each receive gets the other one
    assert simulate(lower(load("1f1b", P=3, M=4))).mismatches == 0


# ---- costs from the command line and from files ----
def test_cost_option_overrides_the_schedule():
    base = compile_text(TWO.format(extra="cost stage 1: F = 3"))
    program = parse_cost_option("F=1,I=2,W=1").apply(base)
    assert all(c == StageCost(F=1, B=3, I=2, W=1) for c in program.annotations.stage_costs)  # B = I + W
    assert simulate(program).makespan == (2 + 2 - 1) * (1 + 3)
    assert base.annotations.stage_costs[1].F == 3  # a new program; the old one is unchanged
    with pytest.raises(schedc.SchedcError) as info:
        parse_cost_option("F=fast")
    assert info.value.code == "costs"  # (as in a cost file: docs/errors.md)
    with pytest.raises(schedc.SchedcError):
        parse_cost_option("X=1")
    with pytest.raises(schedc.SchedcError):
        parse_cost_option("F=-1")


def test_bandwidth_0_is_infinite_and_a_negative_one_is_refused(run_cli, tmp_path):
    """From a user trial: `--cost bandwidth=0` is infinite bandwidth (messages take their latency
    alone), which no help said; a negative value is an error that says what 0 means."""
    def makespan(*cost):
        code, out, err = run_cli("sim", "1f1b", "--param", "P=4,M=8", *cost, "--json")
        assert code == 0, err
        return json.loads(out)["makespan"]
    free = makespan("--cost", "latency=1")
    assert free == makespan("--cost", "latency=1,out=1,bandwidth=0") == makespan("--cost", "latency=1,out=1,bandwidth=inf")
    assert makespan("--cost", "latency=1,out=1,bandwidth=1") > free
    for command in ("sim", "compare", "viz"):
        code, out, _ = run_cli(command, "--help")
        assert "bandwidth=0 is infinite" in " ".join(out.split()), command
    (tmp_path / "c.toml").write_text('[channel."0->1"]\nbandwidth = -2\n')
    for cost in (["--cost", "bandwidth=-1"], ["--cost", "bandwidth=-inf"], ["--costs", str(tmp_path / "c.toml")]):
        code, out, err = run_cli("sim", "1f1b", *cost)
        assert code == 2 and out == "" and "error[costs]: bandwidth must be a non-negative number (0 or inf: an " \
            "infinite bandwidth" in err, err


def test_bandwidth_0_frees_a_descriptions_link_but_its_latency():
    """Under a model and hardware description `--cost bandwidth=0` replaces the link's bandwidth:
    messages then take the link's latency alone."""
    from schedc.hardware import describe
    setup = describe(model="llama3-8b", hardware="h100-80gb")
    program = load("1f1b", P=4, M=8)
    derived = Costs("setup", derived=setup).apply(program)
    assert derived.annotations.bandwidth > 0 and derived.annotations.latency > 0
    freed = Costs("setup", derived=setup).then(parse_cost_option("bandwidth=0")).apply(program)
    assert freed.annotations.bandwidth == 0 and freed.annotations.latency == derived.annotations.latency
    assert simulate(freed).makespan < simulate(derived).makespan


COSTS_TOML = """\
# every stage
F = 1.0
B = 2.0
latency = 0.5
overlap = false

[stage.1]
F = 3      # the slow stage

[rank.0]
speed = 2.0

[channel."1->0"]
latency = 0.0
"""


def test_toml_cost_file(tmp_path):
    path = tmp_path / "costs.toml"
    path.write_text(COSTS_TOML)
    costs = load_costs(str(path))
    assert costs.overlap is False
    program = costs.apply(load("gpipe", P=2, M=1))
    ann = program.annotations
    assert ann.stage_costs[0].F == 1 and ann.stage_costs[1].F == 3 and ann.rank_speed == (2.0, 1.0)
    assert ann.latency == 0.5 and costs.links(program) == {(1, 0): Link(0.0, 0.0)}
    # by hand, overlap off: F(0,0) 0-0.5 (speed 2), held until 1.0 (latency 0.5 to rank 1);
    # F(1,0) 1-4, B(1,0) 4-6, gradient back at once (channel 1->0 has latency 0); B(0,0) 6-7.
    tl = simulate(program, overlap=costs.overlap, links=costs.links(program))
    assert tl.end == ((0.5, 7.0), (4.0, 6.0)) and tl.makespan == 7


@pytest.mark.parametrize("text, where, message", [
    ("F = 1\nB = = 2\n", "costs.toml:2:5", "not valid TOML"),
    ("F = 1\n[stage.0]\nFx = 2\n", "costs.toml:3:1", "unknown setting 'Fx'"),
    ("F = 1\n[rank.1]\nspeed = 0\n", "costs.toml:3:1", "speed must be a positive number"),
    ("F = -2\n", "costs.toml:1:1", "F must be a non-negative number"),
    ("G = 1\n", "costs.toml:1:1", "unknown key 'G'"),
    ('[channel."0-1"]\nlatency = 1\n', "costs.toml:1:1", "expected \"A->B\""),
    ("overlap = 1\n", "costs.toml:1:1", "overlap must be true or false"),
])
def test_bad_toml_points_at_the_line(text, where, message):
    with pytest.raises(schedc.SchedcError) as info:
        toml_costs(text, "costs.toml")
    rendered = info.value.render()
    assert info.value.code == "costs" and rendered.startswith(where) and message in rendered


def test_cost_file_indices_must_exist():
    with pytest.raises(schedc.SchedcError) as info:
        toml_costs("[stage.7]\nF = 2\n", "c.toml").apply(load("1f1b", P=2, M=2))
    assert "stage 7 is not a stage of 1f1b (0..1)" in info.value.render()


PROFILE = {
    "format": "schedc-profile", "version": 1, "unit": "s", "meta": {"device": "test"},
    "stages": {"0": {"F": 0.5, "I": 0.25, "W": 0.5, "out": 2}, "1": {"F": 1.0, "B": 1.5}},
    "ranks": {"1": {"speed": 0.5}},
    "messages": {"latency": 0.125, "bandwidth": 4, "channels": {"1->0": {"latency": 0}}},
}


def test_measured_profile(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(PROFILE))
    costs = load_costs(str(path))
    program = costs.apply(load("gpipe", P=2, M=1))
    ann = program.annotations
    assert ann.stage_costs[0] == StageCost(F=0.5, B=0.75, I=0.25, W=0.5)  # B = I + W when not measured
    assert ann.stage_costs[1] == StageCost(F=1.0, B=1.5, I=1.0, W=1.0)
    assert ann.rank_speed == (1.0, 0.5) and ann.latency == 0.125 and ann.bandwidth == 4
    # by hand: both messages carry stage 0's output, 2 units: 2 / 4 = 0.5 on the wire, plus latency
    # 0.125 on 0->1 and 0 on 1->0. F(0,0) 0-0.5, arrives 1.125; rank 1 at half speed: F(1,0)
    # 1.125-3.125, B(1,0) 3.125-6.125; the gradient arrives 6.625; B(0,0) 6.625-7.375.
    tl = simulate(program, links=costs.links(program))
    assert tl.makespan == 7.375 and tl.start == ((0, 6.625), (1.125, 3.125))


@pytest.mark.parametrize("doc, message", [
    ({"stages": {"0": {"F": "fast"}}}, "stages.0.F: must be a non-negative number"),
    ({"stages": {"x": {"F": 1}}}, "expected a number"),
    ({"format": "other", "stages": {}}, "format: 'other' is not a schedc profile"),
    ({"stages": {}, "extra": 1}, "unknown key 'extra'"),
    ({"ranks": {}}, "a profile needs \"stages\""),
    ({"stages": {}, "messages": {"latncy": 1}}, "messages.latncy: unknown key"),
])
def test_bad_profiles(doc, message):
    with pytest.raises(schedc.SchedcError) as info:
        profile_costs(json.dumps(doc), "p.json")
    assert info.value.code == "costs" and message in info.value.render()
    with pytest.raises(schedc.SchedcError) as info:
        profile_costs("{\n  \"stages\": [\n}", "p.json")
    assert info.value.render().startswith("p.json:3:1")


# What each rank of `schedc run --profile` measures (entry.interp_profile): 1F1B, P=2, M=2, stage 0
# on rank 0, stage 1 on rank 1, both running B; rank 0 sends 1024 bytes of activation per microbatch.
MEASURED = [{"times": {"0": {"F": 0.5, "B": 1.5}}, "messages": {"0": 1024}},
            {"times": {"1": {"F": 0.25, "B": 1.0}}, "messages": {}}]


def test_the_runtimes_profile_drives_sim_and_viz(tmp_path, run_cli):
    from schedc.runtime.profile import build_profile, write_profile
    path = tmp_path / "profile.json"
    write_profile(str(path), build_profile(MEASURED))  # what the runtime does after the last step
    assert json.loads(path.read_text())["messages"] == {"0": 1024}
    args = ("1f1b", "--param", "P=2", "--param", "M=2", "--costs", str(path))
    code, out, err = run_cli("sim", *args, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["costs"]["F"] == [0.5, 0.25] and doc["costs"]["B"] == [1.5, 1.0]
    assert doc["costs"]["I"] == [0.75, 0.5]  # I = W = B / 2 when only B was measured
    # by hand: F(0,0) 0-0.5, F(0,1) 0.5-1; F(1,0) 0.5-0.75, B(1,0) 0.75-1.75, F(1,1) 1.75-2,
    # B(1,1) 2-3; B(0,0) 1.75-3.25, B(0,1) 3.25-4.75 (unit costs: 9)
    assert doc["makespan"] == 4.75
    # the message sizes: at 4096 bytes per second each message takes 0.25 s on the wire, which
    # delays F(1,0) to 0.75-1, B(1,0) 1-2 (arrives 2.25), F(1,1) 2-2.25, B(1,1) 2.25-3.25 (arrives
    # 3.5); B(0,0) 2.25-3.75, B(0,1) 3.75-5.25
    code, out, err = run_cli("sim", *args, "--json", "--cost", "bandwidth=4096")
    assert code == 0 and json.loads(out)["makespan"] == 5.25, err
    svg = tmp_path / "t.svg"
    code, out, err = run_cli("viz", *args, "-o", str(svg))
    assert code == 0, err
    assert "makespan 4.75 " in svg.read_text()
    code, out, err = run_cli("viz", *args, "--cost", "bandwidth=4096", "-o", str(svg))
    assert code == 0 and "makespan 5.25 " in svg.read_text(), err


def test_posting_overhead_holds_both_ranks_at_both_levels():
    # GPipe P=2 M=1, F=1, B=2, overhead o = 0.5, latency 0.25: F(0,0) 0-1, its send posted at 1.5,
    # arrives 1.75; rank 1 posted its receive at 0.5 and starts F(1,0) at 1.75, B(1,0) 2.75-4.75,
    # send posted 5.25, arrives 5.5; B(0,0) 5.5-7.5 (6 + 2o + 2 latency); the same lowered.
    from schedc.passes import lower
    program = load("gpipe", P=2, M=1)
    for text, makespan in (("F=1,B=2", 6.0), ("F=1,B=2,overhead=0.5", 7.0), ("F=1,B=2,overhead=0.5,latency=0.25", 7.5)):
        costs = parse_cost_option(text)
        for prog in (program, lower(program)):
            timed = costs.apply(prog)
            for overlap in (True, False):
                tl = simulate(timed, overlap=overlap, links=costs.links(timed))
                assert tl.makespan == makespan, (text, overlap)
                assert tl.busy == (3.0, 3.0)  # posting is not compute
    # per channel, from a profile and a TOML file: only 1->0 costs, so only the gradient's posts do
    doc = {"stages": {"0": {"F": 1, "B": 2}, "1": {"F": 1, "B": 2}},
           "messages": {"channels": {"1->0": {"overhead": 0.5}}}}
    for costs in (profile_costs(json.dumps(doc), "p.json"),
                  toml_costs("F = 1\nB = 2\n[channel.\"1->0\"]\noverhead = 0.5\n", "c.toml")):
        timed = costs.apply(program)
        # B(1,0) ends at 4, its send is posted at 4.5; rank 0 posted its receive at 1.5: B(0,0) 4.5-6.5
        assert simulate(timed, links=costs.links(timed)).makespan == 6.5
    top = profile_costs(json.dumps({"stages": {}, "messages": {"overhead": 0.25}}), "p.json")
    assert set(top.links(program)) == {(0, 1), (1, 0)} and top.links(program)[(0, 1)].overhead == 0.25


def test_a_top_level_overhead_links_the_channels_messages_take_not_every_pair():
    """The fuzzer's (bench/README.md, "Fuzzing"): `viz zb_h2 --param P=5000 --cost overhead=0.1`
    built a link for each of the 25M pairs of ranks (MemoryError past 7 GB); only the ranks of
    adjacent stages exchange messages, and timing with those alone is timing with every pair."""
    costs = parse_cost_option("F=1,overhead=0.1")
    big = costs.apply(schedc.load("zb_h2", {"P": 5000, "M": 2}))
    assert len(costs.links(big)) == 2 * (5000 - 1)
    for name, params in [("1f1b", {"P": 4, "M": 8}), ("zbv", {"P": 3, "M": 6}), ("interleaved_1f1b", {"P": 3, "M": 6})]:
        timed = costs.apply(schedc.load(name, params))
        R, links = timed.num_ranks, costs.links(timed)
        every = {(a, b): Link(0.0, 0.0, 0.1) for a in range(R) for b in range(R) if a != b}
        for sem in ("rendezvous", "gloo"):
            tl = simulate(timed, links=links, semantics=sem)
            assert tl.makespan == simulate(timed, links=every, semantics=sem).makespan, (name, sem)


# Two ranks' message records as entry.interp_profile returns them: (training step, "S" | "R", kind,
# stage, microbatch, peer rank, posted, post returned, wait began, wait ended), perf_counter seconds.
TIMED = [{"times": {"0": {"F": 0.5, "B": 1.5}}, "messages": {"0": 1024}, "host": "h", "cores": 1,
          "steps": [[0.0, 10.0, 2.0, 5.0, 1.0]],
          "comm": [(2, "S", "act", 0, 0, 1, 1.0, 1.5, 3.0, 3.0),
                   (2, "R", "grad", 1, 0, 1, 2.0, 2.25, 2.5, 4.25)]},  # blocked: arrived 4.25
         {"times": {"1": {"F": 0.25, "B": 1.0}}, "messages": {}, "host": "h", "cores": 1,
          "steps": [[0.0, 9.0, 1.0, 6.0, 1.0]],
          "comm": [(2, "R", "act", 0, 0, 0, 0.5, 1.0, 1.0, 2.0),  # blocked: the send was posted at 1.5
                   (2, "S", "grad", 1, 0, 0, 3.0, 4.0, 5.0, 5.0)]}]


def test_the_profile_measures_latency_and_overhead_per_channel():
    from schedc.runtime.profile import build_profile
    prof = build_profile(TIMED)
    msg = prof["messages"]
    # 0->1: posted by both at 1.5, the receive's wait ended at 2: 0.5; 1->0: both at 4, ended 4.25
    assert msg["channels"] == {"0->1": {"latency": 0.5, "overhead": 0.5}, "1->0": {"latency": 0.25, "overhead": 0.625}}
    assert msg["latency"] == 0.375 and msg["overhead"] == 0.5625 and msg["0"] == 1024
    meta = prof["meta"]
    assert meta["ranks"] == 2 and meta["cores"] == 1 and meta["oversubscribed"] and meta["latency_samples"] == 2
    assert meta["time_per_step"]["0"] == {"step": 10.0, "compute": 2.0, "waited": 5.0, "posting": 1.0, "other": 2.0}
    costs = profile_costs(json.dumps(prof), "p.json")  # costs.py reads all of it
    links = costs.links(load("1f1b", P=2, M=2))
    assert links[(0, 1)].latency == 0.5 and links[(1, 0)].overhead == 0.625
    two_hosts = [dict(TIMED[0]), dict(TIMED[1], host="other")]  # no common clock: no latency
    assert "latency" not in build_profile(two_hosts)["messages"]


@pytest.mark.parametrize("messages, message", [
    ({"0": {"bytes": 3}}, "messages.0: expected the bytes of stage 0's output"),
    ({"0": -1}, "messages.0: must be a non-negative number"),
    ({"0": True}, "messages.0: expected the bytes of stage 0's output"),
    ({"one": 4}, "messages.one: unknown key 'one'; expected a stage number"),
])
def test_bad_message_sizes_in_a_profile(messages, message):
    with pytest.raises(schedc.SchedcError) as info:
        profile_costs(json.dumps({"stages": {"0": {"F": 1}}, "messages": messages}), "p.json")
    assert info.value.code == "costs" and message in info.value.render()
    with pytest.raises(schedc.SchedcError) as info:  # a stage the schedule does not have
        profile_costs(json.dumps({"stages": {}, "messages": {"5": 4}}), "p.json").apply(load("1f1b", P=2, M=2))
    assert "stage 5 is not a stage of 1f1b (0..1)" in info.value.render()


def test_a_profile_gives_an_output_size_once():
    doc = {"stages": {"0": {"F": 1, "out": 8}}, "messages": {"0": 8}}
    assert dict(dict(profile_costs(json.dumps(doc)).stages)[0])["out"] == 8
    doc["messages"]["0"] = 16
    with pytest.raises(schedc.SchedcError, match="output size is given twice"):
        profile_costs(json.dumps(doc))


def test_costs_compose():
    both = toml_costs("F = 2\n[stage.0]\nB = 5\n", "c.toml").then(parse_cost_option("F=1"))
    program = both.apply(load("1f1b", P=2, M=1))
    assert [c.F for c in program.annotations.stage_costs] == [1, 1]
    assert [c.B for c in program.annotations.stage_costs] == [5, 2]
    assert Costs().apply(program).annotations == program.annotations


# ---- Chrome trace: tests/test_trace.py ----


# ---- the command line ----
def test_sim_prints_the_metrics(run_cli):
    code, out, err = run_cli("sim", "1f1b", "--param", "P=4", "--param", "M=8", "--cost", "F=1,B=2")
    assert code == 0, err
    assert "makespan 33, bubble ratio 0.2727" in out  # (8 + 4 - 1) * 3, 3 / 11
    rows = [line.split() for line in out.splitlines()[3:7]]
    assert rows == [[str(r), "24", "9", str(4 - r)] for r in range(4)]


def test_sim_json_and_trace(run_cli, tmp_path):
    trace = tmp_path / "out" / "t.json"
    code, out, err = run_cli("sim", "gpipe", "--param", "P=3", "--param", "M=2", "--json",
                             "--cost", "F=1,B=2,latency=0.5", "--no-overlap", "--trace", str(trace))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["ok"] is True and doc["level"] == "compute" and doc["overlap"] is False
    assert doc["makespan"] == (2 + 3 - 1) * 3 + 2 * (3 + 2 - 2) * 0.5  # the formula above, overlap off
    assert doc["bubble_ratio"] == pytest.approx(1 - 3 * 6 / (3 * doc["makespan"]))
    assert doc["busy"] == [6, 6, 6] and doc["peak_memory"] == [2, 2, 2] and doc["messages"] == 8
    assert doc["costs"]["F"] == [1, 1, 1] and doc["costs"]["latency"] == 0.5
    assert doc["trace"] == str(trace)
    assert json.loads(trace.read_text())["otherData"]["makespan"] == doc["makespan"]


LIMITED = "schedule lim {{\n  memory {limit}\n  rank 0: 0F0 0F1 0F2 0B0 0B1 0B2\n}}\n"


@pytest.mark.parametrize("limit, fits, said", [
    ("limit = 2", False, "memory limit (the schedule's): rank 0 peaks at 3, over its limit of 2; `schedc check` "
                         "says where"),
    ("limit = 3", True, "memory limit (the schedule's): every rank's peak of this run is within it"),
])
def test_sim_holds_its_peaks_to_the_schedules_memory_limit(run_cli, tmp_path, limit, fits, said):
    """From a user trial: `check` failed a schedule over its `memory limit`, while `sim` printed the
    peaks without the limit. Now the limit is a column beside them, and a line says whether they
    fit (sim's exit code is its own: `check` is the one that fails over the limit)."""
    path = tmp_path / "lim.pp"
    path.write_text(LIMITED.format(limit=limit))
    code, out, err = run_cli("sim", str(path))
    assert code == 0 and said in out, (out, err)
    assert out.splitlines()[2].split() == ["rank", "busy", "idle", "peak", "memory", "limit"]
    assert out.splitlines()[3].split() == ["0", "9", "0", "3", limit.split()[-1]]
    code, out, _ = run_cli("sim", str(path), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["peak_memory"] == [3] and doc["memory_limit"] == [int(limit.split()[-1])]
    assert doc["memory_fits"] is fits
    assert run_cli("check", str(path))[0] == (0 if fits else 1)


def test_sim_without_a_limit_says_none_and_a_jobs_replicas_take_their_ranks(run_cli, tmp_path):
    code, out, _ = run_cli("sim", "1f1b", "--json")
    assert code == 0 and json.loads(out)["memory_limit"] == [None] * 4 and json.loads(out)["memory_fits"] is None
    assert "limit" not in run_cli("sim", "1f1b")[1]
    job = Path(__file__).parent / "data" / "diagnose" / "gpipe_dp.pp"
    path = tmp_path / "job.pp"
    path.write_text(job.read_text().replace("  replicas 2\n", "  replicas 2\n  memory rank 1: limit = 1\n"))
    sim, check = (json.loads(run_cli(c, str(path), "--json")[1]) for c in ("sim", "check"))
    assert sim["memory_limit"] == check["memory_limit"] == [None, 1, None, 1] and sim["memory_fits"] is False
    code, out, _ = run_cli("sim", str(path))
    assert code == 0 and "rank 1 peaks at 2, over its limit of 1" in out and "rank 3" not in out  # (alike: replica 0)


def test_sim_under_a_description_holds_each_total_to_the_accelerator(run_cli):
    code, out, _ = run_cli("sim", "1f1b", "--model", "llama3-70b", "--hardware", "h100-80gb", "--json")
    doc = json.loads(out)
    hardware = doc["setup"]["hardware"]
    memory = (hardware["memory"] - hardware["reserve"]) / 2**30  # GiB a rank may hold
    assert code == 0 and doc["memory_fits"] is False and doc["total_memory_limit"] == [pytest.approx(memory)] * 4
    assert doc["memory_limit"] == [pytest.approx(max(0, memory - x)) for x in doc["model_states"]]
    assert any(t > memory for t in doc["total_memory"])


def _strict_json(text: str):
    """Parse as JSON only: Python's `Infinity`/`NaN` extension is an error."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_sim_json_and_trace_are_valid_json_when_memory_overflows(run_cli, tmp_path):
    """An activation size near the largest float makes a rank's memory overflow to inf: the JSON and
    the trace's memory counters write it as null, never the invalid `Infinity`."""
    trace = tmp_path / "t.json"
    code, out, err = run_cli("sim", "1f1b", "--param", "P=2", "--param", "M=2", "--cost", "act=1e308",
                             "--json", "--trace", str(trace))
    assert code == 0, err
    doc = _strict_json(out)
    assert doc["peak_memory"] == [None, 1e308] and doc["makespan"] == 9
    counters = [e["args"]["live"] for e in _strict_json(trace.read_text())["traceEvents"] if e["ph"] == "C"]
    assert None in counters and 1e308 in counters


def test_sim_costs_file_and_errors(run_cli, tmp_path):
    good = tmp_path / "c.toml"
    good.write_text("F = 1\nB = 2\n[stage.1]\nF = 3\n")
    code, out, err = run_cli("sim", str(tmp_path / "two.pp"), "--costs", str(good))
    assert code == 2 and "no such file" in err
    (tmp_path / "two.pp").write_text(TWO.format(extra=""))
    code, out, err = run_cli("sim", str(tmp_path / "two.pp"), "--costs", str(good), "--json")
    assert code == 0 and json.loads(out)["makespan"] == 13  # test_per_stage_costs_by_hand
    bad = tmp_path / "bad.toml"
    bad.write_text("F = 1\n[stage.0]\nspeed = 2\n")
    code, out, err = run_cli("sim", "1f1b", "--costs", str(bad))
    assert code == 2 and err.startswith(f"{bad}:3:1: error[costs]: unknown setting 'speed'")
    code, out, err = run_cli("sim", "1f1b", "--cost", "F=")
    assert code == 2 and "--cost: error[costs]" in err


def test_sim_refuses_what_cannot_run(run_cli):
    code, out, err = run_cli("sim", "tests/known/pytorch_172668.pp", "--json")
    assert code == 1 and "error[deadlock]" in err
    doc = json.loads(out)
    assert doc["ok"] is False and doc["errors"][0]["code"] == "deadlock"
    code, out, err = run_cli("sim", "tests/known/tagless_order.pp")
    assert code == 1 and "2 message(s) reach a receive that expects another value" in err
    code, out, err = run_cli("sim", "tests/known/tagless_order.pp", "--json")  # (docs/cli.md: ok and errors)
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and [e["code"] for e in doc["errors"]] == ["mismatch"]
    code, out, err = run_cli("sim", "1f1b", "--json")
    assert code == 0 and json.loads(out)["errors"] == []


# ---- issue 17, item 4: one memory model; the sim's peak is its one timed run's ----
def test_the_timed_peak_counts_receive_buffers_as_check_does():
    # 1F1B at P=4, M=8, 4 units of activation, messages of 1 (tests/test_engines_memory.py): rank
    # r holds min(P - r, M) activations plus the buffers of the receives lowering inserts
    text = schedc.api.read_text(schedc.api.resolve("1f1b"))
    program = compile_text(text.replace("  place loop", "  memory act = 4, out = 1\n  place loop", 1))
    for p in (program, lower(program)):
        tl = simulate(p)
        assert tl.peak_memory == (17.0, 14.0, 10.0, 5.0), p.level
        assert tl.peak_memory == tuple(pk.memory for pk in schedc.check(p).peak_memory)
        for r in range(4):
            assert max(v for _, v in tl.memory(r)) == tl.peak_memory[r] and tl.memory(r)[-1][1] == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(programs(max_ranks=3, max_microbatches=4, overlap=True, memory=True, costs=True),
                 lowered_programs(max_ranks=3, max_microbatches=4, memory=True, costs=True)),
       st.sampled_from(["rendezvous", "bounded:1", "eager"]))
def test_the_timed_peak_is_at_most_the_worst_the_semantics_allows(program, semantics):
    timed = simulate(program).peak_memory
    worst = [pk.memory for pk in schedc.check(program, semantics=semantics).peak_memory]
    assert all(t <= w + 1e-9 for t, w in zip(timed, worst)), (timed, worst)
    if semantics == "rendezvous":  # the run's sends meet their receives: nothing else is held
        assert list(timed) == worst


def test_sim_says_its_peak_is_the_timed_run(run_cli):
    code, out, err = run_cli("sim", "1f1b", "--json")
    assert code == 0, err
    assert json.loads(out)["memory_run"] == "timed"
    code, out, err = run_cli("sim", "1f1b")
    assert "peak memory: of this timed run" in out


def test_a_job_timed_as_lowered_says_so(run_cli, tmp_path):
    """A data-parallel job is timed as `schedc run` lowers it (comms level) where `check` counts it
    as written (compute level): the text says which, in a line of its own; a pipeline alone does not."""
    src = tmp_path / "dp.pp"
    src.write_text("schedule dp(P = 2, M = 4, D = 2) {\n  stages P\n  place loop\n  replicas D\n"
                   "  rank r, replica d { for m in 0 .. M { F(r, m) } for m in reversed(0 .. M) { B(r, m) } "
                   "REDUCE_GRAD(r) }\n}\n")
    code, out, _ = run_cli("sim", str(src))
    assert code == 0 and "comms level" in out.splitlines()[0]
    assert "timed as `schedc run` lowers it" in out and "as written it is at the compute level" in out
    code, out, _ = run_cli("sim", str(src), "--param", "D=1")
    assert code == 0 and "compute level" in out.splitlines()[0] and "timed as `schedc run` lowers it" not in out
