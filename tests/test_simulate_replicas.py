"""A data-parallel job is timed as one replica per class (schedc/simulate_replicas.py), and that run is
held to the run of the whole job, every replica spelled out.

Generated jobs draw their replicas from one to three pipelines (built-ins at either level, with
reductions, FSDP gathers, tied all-reduces drawn in, some reordered) under drawn costs: stage times
and collectives' seconds, message sizes, each pipeline rank's speed and dispatch time, a latency and
a bandwidth, and channels of some replicas with costs of their own (replicas that run the same lists
then time apart: classes > 1). Under every semantics, the reduced run gives every real rank the
whole job's times, memory, messages and metrics, and a job that deadlocks is refused with the whole
job's account; `sim`, `compare` and `viz` print and draw the same.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import replace

import pytest
from hypothesis import event, given, strategies as st

import schedc
import schedc.simulate as simulate_module
import schedc.simulate_replicas as replicas_module
from schedc.api import load_text
from schedc.cli import main
from schedc.errors import SchedcError
from schedc.interop.chrome_trace import chrome_trace
from schedc.ir import Action, Op, Program, StageCost, StageMemory
from schedc.passes import lower
from schedc.simulate import simulate
from schedc.simulate_replicas import timing_classes
from schedc.strategies import reorderings
from schedc.timeline import Link

from profiles import budget
from test_symmetry import BIG, CROSSED, SEMANTICS, pipelines

# pipelines of one shape in different orders (at either level)
FAMILIES = [[schedc.load(n, {"P": 2, "M": 3}) for n in ("1f1b", "gpipe", "zb_h1")],
            [schedc.load(n, {"P": 3, "M": 3}) for n in ("1f1b", "gpipe")],
            [lower(schedc.load(n, {"P": 2, "M": 2})) for n in ("1f1b", "gpipe")],
            [lower(schedc.load("interleaved_1f1b", {"P": 2, "V": 2, "M": 2}))]]


@contextlib.contextmanager
def flat():
    """The job timed whole, every replica spelled out (as before the reduction)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replicas_module, "by_classes", lambda program, semantics, links, time:
                   time(program, semantics, links, None))
        yield


@contextlib.contextmanager
def too_large_whole():
    """A deadlocked job told by the reduced run, as for a job too large to time whole."""
    real = simulate_module._time_job

    def time(program, semantics, links, told=None):
        if told is None:
            raise SchedcError("too-large", "too large to time whole")
        return real(program, semantics, links, told)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simulate_module, "_time_job", time)
        yield


JOB = BIG.replace("D = 6250", "D = 3").replace("P = 16, M = 64", "P = 3, M = 4")
TIMES = (0.0, 0.5, 1.0, 2.0, 3.5)


@st.composite
def costed(draw, job: Program) -> Program:
    """The job with drawn stage times, collectives' seconds, message sizes, speeds and dispatch times."""
    S, P = job.num_stages, job.num_ranks
    ann = job.annotations
    t = st.sampled_from(TIMES)
    costs = tuple(StageCost(F=draw(t), B=draw(t), I=draw(t), W=draw(t), R=draw(st.sampled_from((0.0, 0.0, 1.5))),
                            U=draw(st.sampled_from((0.0, 0.0, 0.5))), T=draw(st.sampled_from((0.0, 1.0))))
                  for _ in range(S)) if draw(st.integers(0, 3)) else ann.stage_costs
    memory = tuple(StageMemory(act=1.0, weight=1.0, out=draw(st.sampled_from((0.0, 1.0, 4.0)))) for _ in range(S))
    speeds = tuple(draw(st.sampled_from((1.0, 1.0, 2.0, 0.5))) for _ in range(P))
    dispatch = tuple(draw(st.sampled_from((0.0, 0.0, 0.25, 1.0))) for _ in range(P))
    return replace(job, annotations=replace(
        ann, stage_costs=costs, stage_memory=memory, rank_speed=speeds,
        rank_dispatch=dispatch if any(dispatch) else (), latency=draw(st.sampled_from((0.0, 0.0, 0.5))),
        bandwidth=draw(st.sampled_from((0.0, 0.0, 2.0)))))


@st.composite
def planned(draw, family: list[Program]) -> list[tuple]:
    """The family's pipelines with the same collectives: each rank gathers some of its stages first,
    reduces some at the end, and the ends of the model maybe all-reduce their tied weights."""
    base = family[0]
    S, at = base.num_stages, base.placement
    gather, reduce = draw(st.sets(st.integers(0, S - 1))), draw(st.sets(st.integers(0, S - 1)))
    tied = at[0] != at[S - 1] and draw(st.booleans())
    out = []
    for p in family:
        ranks = []
        for r, steps in enumerate(p.ranks):
            mine = [s for s in range(S) if at[s] == r]
            tail = [Action(Op.REDUCE_GRAD, s) for s in mine if s in reduce]
            if tied and r in (at[0], at[S - 1]):
                tail.append(Action(Op.REDUCE_TIED, 0 if r == at[0] else S - 1))
            ranks.append(tuple(Action(Op.UNSHARD, s) for s in mine if s in gather) + tuple(steps) + tuple(tail))
        out.append(tuple(ranks))
    return out


@st.composite
def jobs(draw) -> Program:
    """Two to seven replicas, each one of one to three pipelines (the same object, or an equal copy):
    orders of one shape with the same collectives, now and then one reordered or with collectives of
    its own (test_symmetry.py's, which often hang)."""
    family = draw(st.sampled_from(FAMILIES))
    pool = draw(planned(family))
    base = replace(family[0], ranks=pool[0])
    if draw(st.integers(0, 3)) == 0:
        pool.append(draw(reorderings(base, max_moves=1)).program.ranks)
    if draw(st.integers(0, 3)) == 0:
        pool.append(draw(pipelines(family[0])))
    pool = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
    D = draw(st.integers(2, 7))
    picks = [0] + [draw(st.integers(0, len(pool) - 1)) for _ in range(D - 1)]
    replicas = [pool[i] if draw(st.booleans()) else tuple(tuple(steps) for steps in pool[i]) for i in picks]
    return draw(costed(replace(base, name="job", ranks=replicas[0], replicas=tuple(replicas[1:]))))


@st.composite
def links(draw, job: Program) -> dict:
    """Costs of their own on some channels of some replicas (job ranks)."""
    P, D = job.num_ranks, job.dp
    out = {}
    for d in draw(st.sets(st.integers(0, D - 1), max_size=3)):
        for a, b in draw(st.sets(st.tuples(st.integers(0, P - 1), st.integers(0, P - 1)), min_size=1, max_size=3)):
            out[(d * P + a, d * P + b)] = Link(draw(st.sampled_from((0.0, 1.0))), draw(st.sampled_from((0.0, 1.0))),
                                               draw(st.sampled_from((0.0, 0.25))))
    return out


def _events(timeline) -> list[str]:
    """The Chrome trace's events, each as text, without the numbers of flows and messages (these are
    told in another order: replica after replica)."""
    out = []
    for e in chrome_trace(timeline)["traceEvents"]:
        e = {k: v for k, v in e.items() if k not in ("bind_id", "id")}
        out.append(json.dumps(e, sort_keys=True))
    return sorted(out)


def assert_same_run(mine, whole) -> None:
    """The two runs give every real rank the same times, memory and messages."""
    assert mine.program.num_ranks == whole.program.num_ranks and mine.program.ranks == whole.program.ranks
    assert mine.makespan == whole.makespan
    assert mine.start == whole.start and mine.end == whole.end and mine.busy == whole.busy
    assert [tuple(x) for x in mine.posted] == [tuple(x) for x in whole.posted]
    assert mine.collectives == whole.collectives
    assert mine.mismatches == whole.mismatches and mine.replicas == whole.replicas
    assert sorted(mine.messages) == sorted(whole.messages) and len(mine.messages) == len(whole.messages)
    assert mine.memory_during == whole.memory_during and mine.memory_after == whole.memory_after
    assert mine.to_dict() == whole.to_dict()


def _run(job, semantics, given_links):
    try:
        return simulate(job, semantics=semantics, links=given_links), None
    except SchedcError as e:
        return None, e


@budget(100)
@given(st.data(), jobs(), st.sampled_from(SEMANTICS))
def test_the_reduced_run_is_the_whole_jobs_run(data, job, semantics):
    given_links = data.draw(links(job))
    with flat():
        whole, whole_error = _run(job, semantics, given_links)
    mine, error = _run(job, semantics, given_links)
    k = timing_classes(job, given_links).k
    event(f"{k} of {job.dp} replicas time apart: " + ("ok" if whole is not None else whole_error.code))
    if whole is None:
        assert mine is None and error.code == whole_error.code, error
        assert [d.render() for d in error.diagnostics] == [d.render() for d in whole_error.diagnostics]
        return
    assert mine is not None, error
    assert_same_run(mine, whole)
    if data.draw(st.integers(0, 9)) == 0:
        assert _events(mine) == _events(whole)


@pytest.mark.parametrize("semantics", ["rendezvous", "nccl", "gloo"])
def test_a_deadlock_too_large_to_time_whole_is_told_of_real_ranks(semantics):
    job = load_text(CROSSED, "crossed.pp")
    with pytest.raises(SchedcError) as whole:
        simulate(job, semantics=semantics)
    with too_large_whole(), pytest.raises(SchedcError) as mine:
        simulate(job, semantics=semantics)
    ours, theirs = mine.value.diagnostics[0], whole.value.diagnostics[0]
    assert ours.code == theirs.code == "deadlock"
    assert ours.notes == theirs.notes  # every stuck rank, named as the job numbers it, where it stops
    assert any(note.startswith("rank 5 ") for note in ours.notes)  # (replica 2's rank 1: a real rank)


def test_replicas_whose_channels_cost_apart_are_timed_apart(monkeypatch):
    job = load_text(CROSSED.replace("rank r, replica d", "rank r").replace("d % 2", "0"), "same.pp")
    given_links = {(4, 5): Link(latency=2.0), (6, 7): Link(latency=2.0), (5, 1): Link(latency=5.0)}
    cls = timing_classes(job, given_links)
    assert cls.members == ((0, 1), (2, 3))  # (a channel between two replicas carries no message)
    timed: list[int] = []
    real = replicas_module.by_classes

    def spy(program, semantics, links, time):
        return real(program, semantics, links, lambda p, *a: timed.append(p.num_ranks * p.dp) or time(p, *a))
    monkeypatch.setattr(replicas_module, "by_classes", spy)
    mine = simulate(job, links=given_links)
    assert timed == [4]  # the classes' first replicas: 0 and 2
    monkeypatch.setattr(replicas_module, "by_classes", real)
    with flat():
        whole = simulate(job, links=given_links)
    assert_same_run(mine, whole)
    assert mine.start[5] == mine.start[7] != mine.start[1]  # replicas 2 and 3's channels 0->1 are slower


def test_a_collective_waits_for_every_member_to_dispatch_its_step():
    """A member reaches a collective once it has dispatched the step: the same moment for every
    member, whichever the run times first (the whole job's run does not depend on the order)."""
    job = load_text(JOB.replace("D = 3", "D = 2"), "job.pp")
    job = replace(job, annotations=replace(job.annotations, rank_dispatch=(1.0, 1.0, 1.0),
                                           stage_costs=tuple(replace(c, R=1.0) for c in job.annotations.stage_costs)))
    given_links = {(3, 4): Link(latency=5.0)}  # replica 1's channel 0->1: its ranks finish later
    for how in (contextlib.nullcontext, flat):
        with how():
            run = simulate(job, links=given_links)
        for p in range(3):  # REDUCE_GRAD(p), the last step of each rank, over ranks p and 3 + p
            reached = max(run.end[q][-2] + 1.0 for q in (p, 3 + p))
            assert run.start[p][-1] == run.start[3 + p][-1] == reached, (how, p)
        assert run.end[3][-2] > run.end[0][-2] + 1.0


@pytest.fixture(scope="module")
def big_job():
    return load_text(BIG, "big.pp")


def test_a_100000_rank_job_is_timed_as_one_replica(monkeypatch, big_job):
    import schedc.simulate_graph as graph_module
    timed: list[int] = []
    real = graph_module.simulate_graph

    def spy(program, *args, **kwargs):
        timed.append(program.num_ranks * program.dp)
        return real(program, *args, **kwargs)
    monkeypatch.setattr(graph_module, "simulate_graph", spy)
    run = simulate(big_job, semantics="nccl")
    assert timed == [16]  # one pipeline, not the job's 100,000 ranks (25.6M actions lowered)
    one = simulate(replace(big_job, replicas=()), semantics="nccl")  # (a pipeline: the same times)
    assert run.program.num_ranks == 100_000 and run.replicas == 6250
    assert run.makespan == one.makespan == 237
    assert run.busy[99_999] == one.busy[15] and run.end[99_984] == run.end[0] != run.end[1]
    assert run.peak_memory[-16:] == one.peak_memory == tuple(float(16 - p) for p in range(16))
    assert len(run.messages) == 6250 * len(one.messages)
    last = run.messages[-1]
    assert (last.src_rank // 16, last.dst_rank // 16) == (6249, 6249)


def _cli(*argv) -> tuple[int, str]:
    import io
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue() + err.getvalue()



@pytest.mark.parametrize("params", ["D=3", "D=50"])  # drawn block by block; aggregated (150 ranks)
def test_sim_compare_and_viz_say_what_the_whole_job_says(tmp_path, params):
    path = tmp_path / "job.pp"
    path.write_text(JOB)
    costs = tmp_path / "costs.toml"
    costs.write_text('F = 1.5\nlatency = 0.25\n[channel."0->1"]\nlatency = 1\n[rank.2]\ndispatch = 0.5\n')
    runs = {}
    for how in ("mine", "whole"):
        with flat() if how == "whole" else contextlib.nullcontext():
            runs[how] = [
                _cli("sim", str(path), "--param", params, "--costs", str(costs), "--semantics", "nccl", "--json"),
                _cli("sim", str(path), "--param", params, "--costs", str(costs)),
                _cli("compare", str(path), "1f1b", "--param", params + ",P=3,M=4", "--costs", str(costs))]
            for suffix in ("svg", "html"):
                out = tmp_path / f"job.{suffix}"
                runs[how] += [_cli("viz", str(path), "--param", params, "--costs", str(costs), "-o", str(out)),
                              (0, out.read_text())]
    assert all(code == 0 for code, _ in runs["mine"]), runs["mine"]
    assert runs["mine"] == runs["whole"]


def test_the_limits_count_distinct_work(monkeypatch, tmp_path):
    import schedc.compare as compare_module
    from schedc.compare import compare
    from schedc.simulate_sampled import Spread, sample
    path = tmp_path / "job.pp"
    path.write_text(JOB.replace("D = 3", "D = 50"))
    job = schedc.load(str(path))
    monkeypatch.setattr(simulate_module, "MAX_SIMULATED_ACTIONS", 200)  # a replica lowered: 59; the job: 2,950
    assert simulate(job).program.num_actions == 50 * 59
    with pytest.raises(SchedcError) as refused:  # a sampled run draws each replica's times apart: timed whole
        sample(job, Spread(), 1)
    assert refused.value.code == "too-large" and "2,950 actions" in str(refused.value)
    assert "every replica: a sampled run" in str(refused.value)
    monkeypatch.setattr(compare_module, "MAX_COMPARED_ACTIONS", 100)  # the job's 27 distinct and 1F1B's 24
    rows = compare([str(path), "1f1b"], {"P": 3, "M": 4, "D": 50})
    assert [r.skipped for r in rows] == [None, None] and rows[0].makespan == rows[1].makespan


def test_a_top_level_overhead_costs_every_replicas_messages_alike():
    """A cost file names pipeline ranks: its top-level overhead (and a channel it names) applies to
    each replica's messages, not replica 0's alone, so identical replicas stay one timing class."""
    from schedc.costs import parse_cost_option, toml_costs
    job = load_text(CROSSED.replace("rank r, replica d", "rank r").replace("d % 2", "0"), "same.pp")
    for costs in (parse_cost_option("F=1,B=2,overhead=0.25"),
                  toml_costs('overhead = 0.25\n[channel."0->1"]\nlatency = 3\n')):
        links = costs.links(job)
        P = job.num_ranks
        assert {(a % P, b % P) for a, b in links} == {(a, b) for a, b in links if a < P and b < P}
        assert len(links) == job.dp * len([1 for a, b in links if a < P])
        assert timing_classes(job, links).k == 1
        times = simulate(job, links=links)
        assert all(times.start[d * P + p] == times.start[p] and times.end[d * P + p] == times.end[p]
                   for d in range(job.dp) for p in range(P))
        assert times.posted[1] != times.posted[0]  # (the overhead was paid)


@budget(100)
@given(jobs())
def test_ir_json_keeps_a_jobs_replicas_and_writes_shared_lists_once(job):
    """IR JSON of a job: read back equal, replica by replica; a replica that holds an earlier one's
    very lists (the compiler's sharing) is written as that replica's number and read back shared; an
    equal copy is written whole (its lines may differ)."""
    from schedc.interop.ir_json import dumps_ir, read_ir_json
    text = dumps_ir(job)
    back = read_ir_json(text, "job.json")
    assert back == job and back.replicas == job.replicas
    entries = json.loads(text)["replicas"]
    held = [job.ranks, *job.replicas]
    for d, entry in enumerate(entries, 1):
        first = next(k for k in range(d + 1) if held[k] is held[d])  # (d itself when none before holds them)
        assert isinstance(entry, int) == (first < d) and (first == d or entry == first)
        if first < d:
            assert back.replicas[d - 1] is ([back.ranks, *back.replicas][first])
    assert json.loads(dumps_ir(back))["replicas"] == entries  # (read back shared: written the same)
