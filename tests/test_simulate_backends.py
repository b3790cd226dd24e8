"""`schedc sim --semantics`: runs timed under the semantics that decides which runs exist.

A program only a backend completes is timed under it (issue 18's prefetch program under gloo);
under nccl a rank pair's operations complete in issue order, so a late partner delays the later
operations of that pair; the simulator refuses exactly what `check` calls a deadlock under the same
semantics; runs that rendezvous completes time the same under eager, bounded:K and gloo, and never
earlier under nccl.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import schedc
from conftest import compile_text
from schedc.errors import SchedcError
from schedc.simulate import Link, simulate
from schedc.strategies import lowered_programs
from test_backends import PREFETCH, TORCH_CSV, posted_early_or_late


def _step(program, rank: int, name: str) -> int:
    from schedc.ir import format_step
    return next(x for x, st in enumerate(program.ranks[rank]) if format_step(st) == name)


def test_a_program_only_gloo_completes_is_timed_under_gloo():
    program = compile_text(PREFETCH)
    with pytest.raises(SchedcError) as exc:
        simulate(program)
    assert exc.value.code == "deadlock"
    tl = simulate(program, semantics="gloo")
    # rank 0 posts its gradient receive first, runs F(0,0) and waits for the gradient, which rank 1
    # sends after F(1,0) [1, 2] and B(1,0) [2, 4]: B(0,0) runs [4, 6]
    assert tl.start[0][_step(program, 0, "0B0")] == 4 and tl.makespan == 6 and tl.semantics == "gloo"
    assert tl.busy == (3, 3) and len(tl.messages) == 2 and tl.to_dict()["semantics"] == "gloo"
    with pytest.raises(SchedcError) as exc:
        simulate(program, semantics="nccl")
    assert exc.value.code == "deadlock" and "under nccl" in exc.value.render()
    assert "rank 0 issues RECV_B(0,0) before SEND_F(0,0) on its stream to rank 1" in exc.value.render()


def test_under_nccl_a_late_partner_delays_the_later_operations_of_its_pair():
    # rank 1 posts RECV_F(1,1) late (at 5, after B(1,0)); under nccl the gradient SEND_B(1,0) it
    # issues next on the same pair leaves only once that message has arrived (5 + latency 1 = 6),
    # so B(0,0) starts at 6 + 1 = 7; under gloo the two progress independently and it starts at 6
    program = compile_text("""schedule late {
      rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0RECV_B1 0B0 0B1
      rank 1: 1RECV_F0 1F0 1B0 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1
    }""")
    links = {(0, 1): Link(latency=1.0), (1, 0): Link(latency=1.0)}
    b00, f11 = _step(program, 0, "0B0"), _step(program, 1, "1F1")
    gloo = simulate(program, semantics="gloo", links=links)
    nccl = simulate(program, semantics="nccl", links=links)
    assert (gloo.start[0][b00], nccl.start[0][b00]) == (6, 7)
    assert gloo.start[1][f11] == nccl.start[1][f11] == 6  # the message of F(0,1): posted at 5 on both
    assert gloo.makespan == nccl.makespan == 12  # B(0,1) waits for SEND_B(1,1), posted at 9, either way
    assert simulate(program, links=links).start == gloo.start  # rendezvous completes it: the same times


def test_the_torch_csv_is_timed_under_gloo(tmp_path):
    path = tmp_path / "torch.csv"
    path.write_text(TORCH_CSV)
    program = schedc.load(str(path))
    with pytest.raises(SchedcError):
        simulate(program)
    tl = simulate(program, semantics="gloo")
    assert tl.makespan == 3 * 4 + 3 and len(tl.messages) == 2 * 4  # 1F1B's 3M + 3(P-1) at P=2, M=4


def test_an_explicit_wait_waits_for_its_operation_under_a_backend():
    late = compile_text("""schedule late {
      rank 0: 0RECV_B0 0F0 0SEND_F0 0WAIT_SEND_F0 0WAIT_RECV_B0 0B0
      rank 1: 1RECV_F0 1WAIT_RECV_F0 1F0 1B0 1SEND_B0 1WAIT_SEND_B0
    }""")
    links = {(0, 1): Link(latency=0.5), (1, 0): Link(latency=0.5)}
    tl = simulate(late, semantics="gloo", links=links)
    wait = _step(late, 0, "0WAIT_RECV_B0")
    # the gradient leaves at 1 + 0.5 + 1 + 2 = 4.5 and arrives at 5: the wait ends there, and B(0,0) starts
    assert tl.end[0][wait] == 5 == tl.start[0][wait + 1]
    assert tl.end[1][_step(late, 1, "1WAIT_RECV_F0")] == 1.5  # F(0,0)'s activation: 1 + 0.5
    assert tl.makespan == 7
    with pytest.raises(SchedcError):  # each rank's early receive holds up its send on the one stream
        simulate(late, semantics="nccl", links=links)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lowered_programs(min_ranks=2, max_ranks=4, max_microbatches=4, costs=True).flatmap(posted_early_or_late),
       st.sampled_from([0.0, 0.25]), st.sampled_from([0.0, 0.5]))
def test_sim_refuses_what_check_calls_a_deadlock_and_times_the_rest_alike(variant, latency, overhead):
    program, label = variant
    links = {(a, b): Link(latency=latency, overhead=overhead)
             for a in range(program.num_ranks) for b in range(program.num_ranks) if a != b}
    times = {}
    for semantics in ("rendezvous", "eager", "bounded:1", "gloo", "nccl"):
        report = schedc.check(program, semantics=semantics)
        if any(d.code != "deadlock" for d in report.errors) or report.mismatches:
            return  # broken structure or crossed payloads: not a question of the semantics
        try:
            tl = simulate(program, semantics=semantics, links=links)
        except SchedcError as exc:
            assert exc.code == "deadlock" and report.deadlock is not None, (semantics, label, exc.render())
            continue
        assert report.deadlock is None, (semantics, label)
        times[semantics] = tl
    if "rendezvous" in times:  # rendezvous decides which runs exist, not when steps start
        for semantics in ("eager", "bounded:1", "gloo"):
            assert times[semantics].start == times["rendezvous"].start, (semantics, label)
            assert times[semantics].makespan == times["rendezvous"].makespan
    if "nccl" in times:  # the streams only ever add waits
        for a, b in zip(times["nccl"].start, times["gloo"].start):
            assert all(x >= y - 1e-9 for x, y in zip(a, b)), label
        assert times["nccl"].makespan >= times["gloo"].makespan - 1e-9


def test_sim_takes_the_semantics_on_the_command_line(tmp_path, run_cli):
    path = tmp_path / "prefetch.pp"
    path.write_text(PREFETCH)
    code, out, err = run_cli("sim", str(path), "--semantics", "gloo", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["semantics"] == "gloo" and doc["makespan"] == 6
    code, out, err = run_cli("sim", str(path), "--semantics", "gloo")
    assert code == 0 and "comms level, overlap on, under gloo" in out
    code, out, err = run_cli("sim", str(path), "--semantics", "nccl")
    assert code == 1 and "error[deadlock]: the program deadlocks under nccl" in err
    assert "`schedc check --semantics nccl` shows the wait-for cycle" in err
    code, out, err = run_cli("sim", str(path))
    assert code == 1 and "error[deadlock]" in err
    code, out, err = run_cli("sim", str(path), "--semantics", "gloo", "--no-overlap")
    assert code == 2 and "timed as posted" in err
    code, out, err = run_cli("sim", str(path), "--semantics", "mpi")
    assert code == 2 and "unknown semantics 'mpi'" in err
    code, out, err = run_cli("sim", "1f1b", "--param", "P=2,M=4", "--json")
    assert code == 0 and json.loads(out)["semantics"] == "rendezvous"


def test_a_gloo_trace_draws_every_message_forward():
    from schedc.interop.chrome_trace import chrome_trace
    from test_trace import check_flows, check_program_order
    program = compile_text(PREFETCH)
    tl = simulate(program, semantics="gloo", links={(0, 1): Link(latency=0.5), (1, 0): Link(latency=0.5)})
    doc = chrome_trace(tl)
    assert len(check_flows(doc, program.placement)) == 2
    check_program_order(doc, program)


def test_under_gloo_an_explicit_send_wait_lasts_until_its_receive_is_posted():
    """check's gloo model: a send completes once its receive is posted. Rank 1 posts RECV_F(1,1) at
    4 (after F(1,0), B(1,0)), so rank 0's WAIT_SEND_F(0,1) ends then, not where it stands (2)."""
    from schedc.simulate import simulate
    from schedc.rules.semantics import Semantics
    program = compile_text("""schedule waits {
  rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0WAIT_SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
}""")
    t = simulate(program, semantics=Semantics.parse("gloo"))
    assert t.start[1][4] == 4.0  # rank 1 posts RECV_F(1,1)
    assert (t.end[0][3], t.end[0][4]) == (2.0, 4.0)  # posted at 2, WAIT_SEND_F(0,1) waits for it
    assert schedc.check(program, semantics="gloo").ok
