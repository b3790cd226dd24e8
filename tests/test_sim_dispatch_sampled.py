"""A rank's dispatch time per step, and sampled runs drawing each time from a measured spread:
hand-derived cases, where each setting comes from (language, --cost, TOML, profile), properties of
the timed runs (monotone, bounded by the spread's extremes, seeded), and the profile that measures both.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

import schedc
from conftest import compile_text
from profiles import budget
from schedc.costs import parse_cost_option, profile_costs, toml_costs
from schedc.interop.ir_json import dumps_ir, read_ir_json
from schedc.passes import lower
from schedc.runtime.profile import build_profile, parts_of
from schedc.simulate import simulate
from schedc.simulate_sampled import Spread, sample
from schedc.strategies import lowered_programs, programs

GPIPE = """
schedule d(P = 2, M = 1) {
  stages P
  place loop
  cost F = 1, B = 2
  DISPATCH
  rank r {
    for m in 0 .. M { F(r, m) }
    for m in 0 .. M { B(r, m) }
  }
}
"""


def with_dispatch(program, *times):
    return replace(program, annotations=replace(program.annotations, rank_dispatch=tuple(times)))


# ---- dispatch ----
def test_dispatch_by_hand_at_both_levels_and_on_the_graph():
    # GPipe P=2 M=1, F=1, B=2, dispatch 0.5 on both ranks. Compute level: F(0,0) 0.5-1.5; F(1,0)
    # from max(0.5, its input at 1.5) to 2.5; B(1,0) 3-5; B(0,0) from max(1.5 + 0.5, 5) to 7.
    program = compile_text(GPIPE.replace("DISPATCH", "cost dispatch = 0.5"))
    assert program.annotations.rank_dispatch == (0.5, 0.5)
    assert simulate(program).makespan == 7.0
    assert simulate(with_dispatch(program)).makespan == 6.0  # (F + B) x (M + P - 1)
    # Lowered: rank 0 runs F(0,0) 0.5-1.5, posts SEND_F at 2, RECV_B at 2.5; rank 1 posts RECV_F at
    # 0.5, F(1,0) from max(0.5 + 0.5, 2) = 2 to 3, B(1,0) 3.5-5.5, posts SEND_B at 6; B(0,0) 6-8.
    lowered = lower(program)
    assert lowered.annotations.rank_dispatch == (0.5, 0.5)
    assert simulate(lowered).makespan == 8.0
    for semantics in ("gloo", "eager", "nccl"):  # timed on the semantics' graph by the same rule
        assert simulate(lowered, semantics=semantics).makespan == 8.0, semantics


def test_a_rank_on_its_own_pays_its_dispatch_once_per_step():
    for name, params in (("gpipe", {"P": 1, "M": 4}), ("1f1b", {"P": 1, "M": 3})):
        program = schedc.load(name, params)
        steps = len(program.ranks[0])
        plain = simulate(program).makespan
        assert simulate(with_dispatch(program, 0.25)).makespan == pytest.approx(plain + 0.25 * steps)


def test_dispatch_from_every_source():
    # rank 1 only, 0.25: F(1,0) starts at max(0.25, 1) = 1, so only B(1,0) (2 + 0.25) and B(0,0) (its
    # input at 4.25) move: 6.25
    program = compile_text(GPIPE.replace("DISPATCH", ""))
    assert program.annotations.rank_dispatch == ()
    sources = [compile_text(GPIPE.replace("DISPATCH", "cost rank 1: dispatch = 0.25")),
               toml_costs("[rank.1]\ndispatch = 0.25\n", "c.toml").apply(program),
               profile_costs(json.dumps({"stages": {}, "ranks": {"1": {"dispatch": 0.25}}}), "p.json").apply(program),
               toml_costs("dispatch = 0.25\n[rank.0]\ndispatch = 0\n", "c.toml").apply(program)]
    for timed in sources:
        assert timed.annotations.dispatch_of(1) == 0.25 and timed.annotations.dispatch_of(0) == 0
        assert simulate(timed).makespan == 6.25
    every = parse_cost_option("dispatch=0.5").apply(program)  # --cost: every rank
    assert every.annotations.rank_dispatch == (0.5, 0.5) and simulate(every).makespan == 7.0
    # the later source wins; the rank's own value wins over the every-rank one
    both = toml_costs("[rank.1]\ndispatch = 0.25\n", "c.toml").then(parse_cost_option("dispatch=0.5"))
    assert both.apply(program).annotations.rank_dispatch == (0.5, 0.25)
    assert read_ir_json(dumps_ir(sources[0])).annotations.rank_dispatch == (0.0, 0.25)  # the IR keeps it


@pytest.mark.parametrize("make, message", [
    (lambda: toml_costs("dispatch = -1\n", "c.toml"), "dispatch must be a non-negative number"),
    (lambda: toml_costs("[rank.0]\ndispatch = inf\n", "c.toml"), "dispatch must be finite"),
    (lambda: parse_cost_option("dispatch=x"), "expected KEY=NUMBER pairs"),
    (lambda: profile_costs(json.dumps({"stages": {}, "ranks": {"0": {"dispatch": "1"}}})), "must be a non-negative"),
    (lambda: toml_costs("[rank.5]\ndispatch = 1\n", "c.toml").apply(schedc.load("1f1b", {"P": 2, "M": 2})),
     "rank 5 is not a rank of 1f1b"),
])
def test_bad_dispatch_times(make, message):
    with pytest.raises(schedc.SchedcError) as info:
        make()
    assert message in info.value.render()


def test_the_language_checks_dispatch_like_any_cost():
    with pytest.raises(schedc.SchedcError) as info:
        compile_text(GPIPE.replace("DISPATCH", "cost stage 0: dispatch = 1"))
    assert info.value.code == "unknown-setting" and "not a cost setting for a stage" in info.value.render()


@budget(40)
@given(st.one_of(programs(max_ranks=3, max_microbatches=4, overlap=True, costs=True),
                 lowered_programs(max_ranks=3, max_microbatches=4, costs=True)),
       st.floats(0, 4, allow_nan=False), st.integers(0, 2))
def test_dispatch_delays_a_run_by_at_most_its_time_per_step(program, d, rank):
    # every start is a max of sums along chains of steps: with each step `d` later to start, the run
    # ends no earlier, and at most d x (all steps) later (a chain visits each step at most once)
    rank = min(rank, program.num_ranks - 1)
    times = [0.0] * program.num_ranks
    times[rank] = d
    plain = simulate(program).makespan
    slowed = simulate(with_dispatch(program, *times)).makespan
    assert plain - 1e-9 <= slowed <= plain + d * sum(len(r) for r in program.ranks) + 1e-9
    if program.num_ranks == 1:
        assert slowed == pytest.approx(plain + d * len(program.ranks[0]))


# ---- sampled runs ----
def test_factors_of_one_give_the_mean_cost_run_every_time():
    program = lower(parse_cost_option("overhead=0.1,latency=0.05").apply(schedc.load("1f1b", {"P": 3, "M": 4})))
    costs = parse_cost_option("overhead=0.1")
    links = costs.links(program)
    flat = Spread(tuple(((op, s), (1.0, 1.0)) for op in "FB" for s in range(3)),
                  tuple((ch, (1.0,)) for ch in links))
    said = []
    runs = sample(program, flat, 25, links=links, say=said.append)
    assert set(runs.makespans) == {simulate(program, links=links).makespan}
    assert len(said) == 9 and said[-1] == "sampled run 23 of 25"  # every tenth, not the last
    assert runs.to_dict()["runs"] == 25 and runs.quantile(0.5) == runs.mean


@budget(40)
@given(st.one_of(programs(max_ranks=3, max_microbatches=4, overlap=True, costs=True),
                 lowered_programs(max_ranks=3, max_microbatches=4, costs=True)),
       st.lists(st.floats(0.01, 5), min_size=1, max_size=5), st.integers(0, 2 ** 32 - 1), st.booleans(),
       st.sampled_from([None, "gloo", "nccl", "eager", "tagged"]))
def test_each_sampled_run_lies_between_the_spreads_extremes(program, values, seed, overlap, semantics):
    # factors of mean 1, so lo <= 1 <= hi; the makespan is monotone in every time and scales with
    # them: a run with every compute time and overhead drawn from [lo, hi] x its mean lies within
    # [lo, hi] x the mean-cost run (latencies are not drawn: they stay, which lo <= 1 <= hi allows)
    mean = sum(values) / len(values)
    factors = tuple(v / mean for v in values)
    lo, hi = min(factors), max(factors)
    if semantics is not None:  # timed on the semantics' graph (comms level, overlap on), or paired by tag
        program, overlap = lower(program) if program.level == "compute" else program, True
        program, semantics = (replace(program, p2p="tagged"), None) if semantics == "tagged" else (program, semantics)
    links = parse_cost_option("overhead=0.25").links(program) if program.num_ranks > 1 else {}
    spread = Spread(tuple(((op, s), factors) for op in "FBIW" for s in range(program.num_stages)),
                    tuple((ch, factors) for ch in links))
    plain = simulate(program, overlap=overlap, links=links, semantics=semantics).makespan
    runs = sample(program, spread, 5, seed=seed, overlap=overlap, links=links, semantics=semantics)
    assert all(lo * plain - 1e-9 <= m <= hi * plain + 1e-9 for m in runs.makespans), (runs.makespans, plain)
    assert sample(program, spread, 5, seed=seed, overlap=overlap, links=links, semantics=semantics) == runs


def test_the_sampled_mean_is_later_than_the_mean_cost_run():
    # Jensen: the makespan is a max of sums, convex in the times, so its mean over varying times is
    # at least its value at their means; with times varying 2 to 1 here, well above it
    program = schedc.load("1f1b", {"P": 4, "M": 8})
    spread = Spread(tuple(((op, s), (0.5, 1.5)) for op in "FB" for s in range(4)))
    runs = sample(program, spread, 400)
    plain = simulate(program).makespan
    assert runs.mean > 1.05 * plain and runs.quantile(0.1) <= runs.quantile(0.5) <= runs.quantile(0.9)
    assert statistics.fmean(sample(program, spread, 400, seed=1).makespans) > 1.05 * plain


def test_a_profile_measured_on_n_stages_spreads_each_chunk_as_its_stage():
    doc = {"stages": {"0": {"F": 1}, "1": {"F": 2}},
           "spread": {"stages": {"0": {"F": [1, 3]}, "1": {"F": [2, 2, 2, 6]}}, "overhead": {"0->1": [0, 2]}}}
    costs = profile_costs(json.dumps(doc), "p.json")
    program = schedc.load("interleaved_1f1b", {"P": 2, "V": 2, "M": 4})  # 4 stages: 2 chunks of each measured one
    spread = dict(costs.spread_of(program).times)
    assert spread[("F", 0)] == spread[("F", 1)] == (0.5, 1.5)  # normalized to mean 1 on reading
    assert spread[("F", 2)] == spread[("F", 3)] == (2 / 3, 2 / 3, 2 / 3, 2.0)
    assert dict(costs.spread.posts) == {(0, 1): (0.0, 2.0)}
    assert costs.then(parse_cost_option("F=1")).spread == costs.spread  # a later source keeps it


@pytest.mark.parametrize("spread, message", [
    ({"stages": {"0": {"F": []}}}, "spread.stages.0.F: expected a list of 1 to 1000 numbers"),
    ({"stages": {"0": {"F": [0, 0]}}}, "spread.stages.0.F: expected numbers that are not all 0"),
    ({"stages": {"0": {"X": [1]}}}, "spread.stages.0.X: unknown time 'X'"),
    ({"stages": {"0": {"F": [1, -2]}}}, "must be a non-negative number"),
    ({"stages": {"a": {"F": [1]}}}, "expected a number"),
    ({"overhead": {"0-1": [1]}}, "expected \"A->B\""),
    ({"latency": {}}, "spread.latency: unknown key 'latency'; expected stages, overhead"),
])
def test_bad_spreads(spread, message):
    with pytest.raises(schedc.SchedcError) as info:
        profile_costs(json.dumps({"stages": {}, "spread": spread}), "p.json")
    assert info.value.code == "costs" and message in info.value.render()


def test_what_sampled_runs_refuse():  # (too many; anything `simulate` times, sampled runs time too)
    program = schedc.load("1f1b", {"P": 2, "M": 2})
    spread = Spread(((("F", 0), (1.0,)),))
    big = schedc.load("1f1b", {"P": 4, "M": 100})  # 800 actions
    for prog, runs, code in ((program, 0, "usage"), (program, 10_001, "usage"), (big, 10_000, "too-large")):
        with pytest.raises(schedc.SchedcError) as info:
            sample(prog, spread, runs)
        assert info.value.code == code
    # a data-parallel job: every replica draws its times apart, so every replica's actions count
    job = schedc.load("1f1b", {"P": 4, "M": 100})
    job = replace(job, replicas=(job.ranks,) * 3)  # 4 x 800 actions
    with pytest.raises(schedc.SchedcError, match=r"1,000 sampled runs of 3,200 actions \(a data-parallel job's every"):
        sample(job, spread, 1_000)
    sample(replace(job, replicas=()), spread, 1)  # (one replica, one run: times)


def test_sim_samples_on_the_command_line(run_cli, tmp_path):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"stages": {"0": {"F": 1, "B": 2}, "1": {"F": 1, "B": 2}},
                                "spread": {"stages": {"0": {"B": [0.5, 1.5]}, "1": {"B": [0.5, 1.5]}}}}))
    code, out, err = run_cli("sim", "gpipe", "--param", "P=2,M=4", "--costs", str(prof), "--samples", "50", "--json")
    assert code == 0, err
    got = json.loads(out)["sampled"]
    again = sample(profile_costs(prof.read_text()).apply(schedc.load("gpipe", {"P": 2, "M": 4})),
                   profile_costs(prof.read_text()).spread_of(schedc.load("gpipe", {"P": 2, "M": 4})), 50)
    assert got == again.to_dict() and got["seed"] == 0
    code, out, err = run_cli("sim", "gpipe", "--param", "P=2,M=4", "--costs", str(prof), "--samples", "5")
    assert code == 0 and "sampled: mean makespan" in out and "over 5 runs" in out, err
    code, out, err = run_cli("sim", "gpipe", "--param", "P=2,M=4", "--costs", str(prof), "--samples", "5",
                             "--samples", "-1")
    assert code == 2 and "--samples: error[usage]" in err and "give 1 to 10,000 sampled runs" in err
    # as `schedc run` lowers it: sends and receives as steps; receives posted early are timed under gloo
    for lower_args, semantics in ((["--lower"], "rendezvous"), (["--lower", "early"], "gloo")):
        code, out, err = run_cli("sim", "gpipe", "--param", "P=2,M=4", "--costs", str(prof), "--samples", "5",
                                 "--json", *lower_args)
        assert code == 0, err
        got = json.loads(out)
        assert got["level"] == "comms" and got["semantics"] == semantics and got["sampled"]["runs"] == 5
    code, out, err = run_cli("sim", "gpipe", "--param", "P=2,M=4", "--lower", "--semantics", "nccl")
    assert code == 0 and "comms level" in out and "under nccl" in out, err


# ---- the profile that measures both ----
def test_parts_keep_the_tail_and_the_mean():
    assert parts_of([8, 1, 7, 2, 6, 3, 5, 4], 4) == [1.5, 3.5, 5.5, 7.5]
    assert parts_of([3.0, 1.0], 16) == [1.0, 3.0]  # fewer values than parts: each its own
    values = [0.05] * 95 + [2.0] * 5  # a post: fast most times, slow now and then
    parts = parts_of(values, 16)
    assert len(parts) == 16 and parts[-1] == pytest.approx(2.0 * 0.8 + 0.05 * 0.2)  # 6.25 values: 5 slow
    assert sum(parts) / 16 == pytest.approx(statistics.fmean(values))
    assert parts_of([1.0, 2.0, 3.0], 2) == pytest.approx([4 / 3, 8 / 3])  # 1.5 values each: the 2 shared


def test_the_profile_writes_dispatch_and_spread():
    # two ranks' measurements as entry.interp_profile returns them
    comm0 = [(2, "S", "act", 0, m, 1, 1.0, 1.0 + o, 3.0, 3.0) for m, o in enumerate((0.1, 0.1, 0.1, 0.9))]
    comm1 = [(2, "R", "act", 0, m, 0, 0.5, 0.5 + o, 1.0, 2.0) for m, o in enumerate((0.2, 0.2, 0.2, 0.2))]
    parts = [{"times": {"0": {"F": 1.0, "I": 0.5, "W": 1.5}}, "messages": {"0": 64}, "host": "h", "cores": 2,
              "spread": {"0": {"F": [0.5, 1.5], "I": [0.25, 0.75], "W": [1.0, 2.0]}},
              "steps": [[0.0, 10.0, 4.0, 2.0, 1.0]], "program_steps": 12, "comm": comm0},
             {"times": {"1": {"F": 2.0, "B": 4.0}}, "messages": {}, "host": "h", "cores": 2,
              "spread": {"1": {"F": [2.0, 2.0], "B": [1.0, 7.0]}},
              "steps": [[0.0, 9.0, 6.0, 1.0, 1.0]], "program_steps": 10, "comm": comm1}]
    prof = build_profile(parts)
    assert prof["ranks"] == {"0": {"dispatch": 3.0 / 12}, "1": {"dispatch": 1.0 / 10}}  # the rest per step
    stages = prof["spread"]["stages"]
    assert stages["0"] == {"F": [0.5, 1.5], "I": [0.5, 1.5], "W": [0.6667, 1.3333], "B": [0.625, 1.375]}  # B = I + W
    assert stages["1"] == {"F": [1.0, 1.0], "I": [0.25, 1.75], "W": [0.25, 1.75], "B": [0.25, 1.75]}  # I, W as B
    # channel 0->1: both sides' posts, 8 of them (fewer than 16 parts: each its own), mean 0.25
    assert prof["spread"]["overhead"] == {"0->1": [0.4, 0.4, 0.4, 0.8, 0.8, 0.8, 0.8, 3.6]}
    costs = profile_costs(json.dumps(prof), "p.json")  # read back as written
    program = costs.apply(schedc.load("1f1b", {"P": 2, "M": 2}))
    assert program.annotations.rank_dispatch == (0.25, 0.1) and costs.spread_of(program).times


def test_receives_that_did_not_wait_bound_the_latency():
    # channel 0->1, four messages: two receives waited (latency 0.4 and 0.2: mean 0.3); two found
    # their data there, so their latency was at most the time from both posts to the wait: 0.1, and
    # 5 (the value was used much later), which counts as the waited mean, 0.3: (0.4+0.2+0.1+0.3)/4
    sends = [(2, "S", "act", 0, m, 1, t - 0.1, t, 9.5, 9.5) for m, t in enumerate((1.0, 2.0, 3.0, 4.0))]
    recvs = [(2, "R", "act", 0, 0, 0, 0.4, 0.5, 0.6, 1.4), (2, "R", "act", 0, 1, 0, 1.8, 1.9, 2.0, 2.2),
             (2, "R", "act", 0, 2, 0, 3.0, 3.05, 3.15, 3.15), (2, "R", "act", 0, 3, 0, 3.9, 4.0, 9.0, 9.0)]
    parts = [{"times": {"0": {"F": 1.0, "B": 2.0}}, "messages": {"0": 8}, "host": "h", "cores": 2, "comm": sends},
             {"times": {"1": {"F": 1.0, "B": 2.0}}, "messages": {}, "host": "h", "cores": 2, "comm": recvs}]
    prof = build_profile(parts)
    assert prof["messages"]["latency"] == pytest.approx(0.25)
    assert prof["messages"]["channels"]["0->1"]["latency"] == pytest.approx(0.25)
    assert prof["meta"]["latency_samples"] == 2 and prof["meta"]["messages_timed"] == 4
