"""Hang classes users report that come from the runtimes' set-up of communication (issue #30).

1. Megatron's shape exchange (variable_seq_lengths, NVIDIA/Megatron-LM#5100): each communication
   step first exchanges its shapes and waits for them, so a program whose early-posted receive lets
   it complete under a backend deadlocks with the exchange (`nccl+shapes`, `gloo+shapes`).
2. NCCL communicators made lazily at first use (NVIDIA/Megatron-LM#5240): ranks that first use
   their pair communicators in a cyclic order hang as they make them (`comm-init-order`, under
   `nccl+lazy`; under `nccl` the communicators are made before the step, in one order, as torch's
   runtime and schedc's warm them up).
3. torch 2.13's eval() on a V-shaped schedule fails ("can't steal_bwd_input"): a forward-only
   V-shaped program checks clean and its report says so in a note; a real gloo run of torch's
   ScheduleZBVZeroBubble.eval shows the failure (this file is also that run's worker:
   `python tests/test_hang_classes.py --worker OUTDIR`).
"""
from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

import schedc
from schedc.errors import SchedcError
from schedc.rules.semantics import Semantics
from schedc.verify.comm_init import FirstUse, creation_cycle, first_uses

from conftest import compile_text

ROOT = Path(__file__).resolve().parent.parent

# rank 0 posts the receive of microbatch 0's gradient before it sends microbatch 1's activation;
# rank 1 receives microbatch 1's activation before it sends microbatch 0's gradient
EARLY_RECEIVE = """schedule early_receive {{
  {p2p}
  rank 0: 0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0B0 0RECV_B1 0B1
  rank 1: 1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1
}}"""


def test_shapes_parse_and_print():
    assert Semantics.parse("nccl+shapes") == Semantics("nccl", 0, shapes=True)
    assert str(Semantics.parse("gloo+shapes")) == "gloo+shapes"
    assert Semantics.parse("nccl+lazy+shapes") == Semantics("nccl", 0, shapes=True, lazy=True)
    assert str(Semantics.parse("nccl+lazy+shapes")) == "nccl+shapes+lazy"
    for bad in ("rendezvous+shapes", "eager+shapes", "bounded:2+shapes", "gloo+lazy", "nccl+lazy+lazy",
                "nccl+fast", "nccl+"):
        with pytest.raises(SchedcError):
            Semantics.parse(bad)


@pytest.mark.parametrize("p2p, backend", [("", "gloo"), ("p2p split", "nccl")])
def test_a_program_that_completes_deadlocks_with_the_shape_exchange(p2p, backend):
    program = compile_text(EARLY_RECEIVE.format(p2p=p2p))
    assert schedc.check(program, semantics=backend).ok
    report = schedc.check(program, semantics=f"{backend}+shapes")
    assert not report.ok and [d.code for d in report.errors] == ["deadlock"]
    finding = report.errors[0]
    assert "shape exchange" in finding.message and "Megatron" in finding.notes[0]
    assert report.deadlock.stuck == {0: 2, 1: 2}  # rank 0 at RECV_B(0,0), rank 1 at RECV_F(1,1)
    assert report.to_dict()["semantics"] == f"{backend}+shapes"
    assert report.to_dict()["deadlock"]["semantics"] == f"{backend}+shapes"


def test_receiving_where_the_value_is_needed_passes_the_shape_exchange():
    program = compile_text(EARLY_RECEIVE.format(p2p="").replace(
        "0RECV_B0 0F1 0SEND_F1 0B0", "0F1 0SEND_F1 0RECV_B0 0B0"))
    assert schedc.check(program, semantics="nccl+shapes").ok


@pytest.mark.parametrize("name, params", [("1f1b", {"P": 4, "M": 8}), ("interleaved_1f1b", {"P": 2, "M": 4, "V": 2}),
                                          ("zbv", {"P": 3, "M": 6}), ("dualpipev", {"P": 4, "M": 8})])
def test_built_ins_lowered_by_schedc_pass_the_shape_exchange_and_comm_init(name, params):
    program = schedc.load(name, params, strict_params=False)
    for semantics in ("nccl+shapes", "gloo+shapes", "nccl+lazy"):
        report = schedc.check(program, semantics=semantics)
        assert report.ok, report.render()


# ---- communicators made at first use (NCCL) -------------------------------------------------
# three ranks, six stages in a loop: stage 2 on rank 2 feeds stage 3 on rank 0, so rank 0 talks to
# both other ranks. Receiving stage 3's input first, rank 0 first uses its pair with rank 2, then
# with rank 1; rank 1 uses 0-1 then 1-2, rank 2 uses 1-2 then 0-2: a cycle.
RING = """schedule ring {{
  forward only
  stages 6
  place loop
  rank 0: {rank0}
  rank 1: 1RECV_F0 1F0 1SEND_F0 4RECV_F0 4F0 4SEND_F0
  rank 2: 2RECV_F0 2F0 2SEND_F0 5RECV_F0 5F0
}}"""
EARLY = "3RECV_F0 0F0 0SEND_F0 3F0 3SEND_F0"
IN_ORDER = "0F0 0SEND_F0 3RECV_F0 3F0 3SEND_F0"


def test_ranks_that_make_their_pair_communicators_in_a_cycle_hang_under_nccl_lazy():
    program = compile_text(RING.format(rank0=EARLY))
    assert schedc.check(program, semantics="gloo").ok  # the messages alone complete
    assert schedc.check(program, semantics="nccl").ok  # communicators made before the step, in one order
    report = schedc.check(program, semantics="nccl+lazy")
    assert report.deadlock is None and [d.code for d in report.errors] == ["comm-init-order"]
    finding = report.errors[0]
    assert (finding.rank, finding.step) == (0, 0)
    for told in ("rank 0 first uses the communicator of ranks 0 and 2", "rank 1 first uses the communicator of "
                 "ranks 0 and 1", "rank 2 first uses the communicator of ranks 1 and 2"):
        assert told in finding.message
    assert "Megatron-LM#5240" in finding.notes[0]


def test_the_same_ring_in_one_order_of_creation_is_clean():
    program = compile_text(RING.format(rank0=IN_ORDER))
    assert schedc.check(program, semantics="nccl+lazy").ok
    assert creation_cycle(first_uses(program)) is None


def test_first_uses_are_in_posting_order_per_rank():
    uses = first_uses(compile_text(RING.format(rank0=EARLY)))
    assert [u.comm for u in uses[0]] == [("pair", 0, 2, 0), ("pair", 0, 1, 0)]
    assert [(u.step, str(u.action)) for u in uses[0]] == [(0, "3RECV_F0"), (2, "0SEND_F0")]


# Ranks 0 and 1 exchange their message in groups (batch_isend_irecv), rank 2 receives singly: NCCL
# runs a group on the pipeline process group's own communicator, made at its first use with every
# rank of the group, and rank 2 never comes to it.
PARTIAL_GROUPS = """schedule partial {{
  forward only
  stages 3
  {replicas}
  rank 0: 0F0 (0SEND_F0)GROUP
  rank 1: (1RECV_F0)GROUP 1F0 {send}
  rank 2: {recv} 2F0
}}"""


@pytest.mark.parametrize("replicas", ["", "replicas 2"])
def test_a_group_posted_by_some_ranks_of_the_pipeline_only_hangs_under_nccl_lazy(replicas):
    program = compile_text(PARTIAL_GROUPS.format(replicas=replicas, send="1SEND_F0", recv="2RECV_F0"))
    assert schedc.check(program, semantics="nccl").ok  # made before the step on every rank (schedc's runtime)
    report = schedc.check(program, semantics="nccl+lazy")
    assert report.deadlock is None and [d.code for d in report.errors] == ["comm-init-order"], report.render()
    finding = report.errors[0]
    assert (finding.rank, finding.step) == (0, 1)
    assert "pipeline process group's communicator" in finding.message and "rank 2 never posts a group" in finding.message
    assert "all ranks of the group must participate" in finding.notes[0]
    assert [u.comm for u in first_uses(program)[1]][:2] == [("batches", 0, 0), ("pair", 1, 2, 0)]
    # every rank of the pipeline posting a group first makes it in one step: clean
    grouped = compile_text(PARTIAL_GROUPS.format(replicas=replicas, send="(1SEND_F0)GROUP", recv="(2RECV_F0)GROUP"))
    assert schedc.check(grouped, semantics="nccl+lazy").ok


def test_a_data_parallel_group_made_before_a_pair_on_one_rank_and_after_on_another_is_a_cycle():
    a, b = ("dp", 0), ("pair", 0, 1, 0)
    uses = {0: [FirstUse(a, 0, 0, 0, None), FirstUse(b, 0, 1, 0, None)],
            1: [FirstUse(b, 1, 0, 0, None), FirstUse(a, 1, 1, 0, None)]}
    cycle = creation_cycle(uses)
    assert cycle is not None and {x.comm for x, _ in cycle} == {a, b}
    assert creation_cycle({0: uses[0], 1: uses[0]}) is None


# ---- torch's eval() on V-shaped schedules ---------------------------------------------------
FORWARD_V = """schedule fwd_v(P = 2, M = 2) {{
  forward only
  stages 2 * P
  place {place}
  rank r {{ for m in 0 .. M {{ F(r, m) }} for m in 0 .. M {{ F(2 * P - 1 - r, m) }} }}
}}"""


def test_a_forward_only_v_shape_checks_clean_with_a_note_on_torchs_eval():
    report = schedc.check(compile_text(FORWARD_V.format(place="vshape")))
    assert report.ok
    assert any("can't steal_bwd_input" in note for note in report.notes)
    assert "can't steal_bwd_input" in report.summary()


def test_a_forward_only_loop_placement_has_no_note():
    program = compile_text(FORWARD_V.format(place="loop").replace("F(2 * P - 1 - r, m)", "F(r + P, m)"))
    report = schedc.check(program)
    assert report.ok and not report.notes


def _worker(out_dir: str) -> int:
    """One rank: torch's ScheduleZBVZeroBubble and ScheduleInterleaved1F1B, each `eval()` once."""
    import datetime

    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B, ScheduleZBVZeroBubble
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30))
    results = {}
    for name, cls, mine in (("interleaved", ScheduleInterleaved1F1B, (rank, rank + world)),
                            ("zbv", ScheduleZBVZeroBubble, (rank, 2 * world - 1 - rank))):
        torch.manual_seed(0)
        layers = [torch.nn.Linear(4, 4) for _ in range(2 * world)]
        stages = [PipelineStage(layers[s], s, 2 * world, torch.device("cpu")) for s in mine]
        schedule = cls(stages, 2, loss_fn=lambda y, t: y.sum())
        first = 0 in mine
        try:
            schedule.eval(*((torch.randn(2, 4),) if first else ()), target=torch.zeros(2, 4))
            results[name] = "ok"
        except Exception as exc:  # torch's own failure is the result
            results[name] = f"{type(exc).__name__}: {exc}"
            break  # the peers' sends of this schedule are left unmatched: do not start another
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    sys.stdout.flush()
    os._exit(0)  # (torch's stages hold the group in reference cycles; a failed schedule leaves work behind)


@pytest.mark.slow  # 5-7 s of spawned ranks
def test_torchs_zbv_eval_fails_where_interleaved_eval_runs(tmp_path):
    pytest.importorskip("torch.distributed.pipelining")
    from schedc.runtime.launch import launch
    out, err = io.StringIO(), io.StringIO()
    done = launch([sys.executable, str(Path(__file__).resolve()), "--worker", str(tmp_path)], 2,
                  stdout=out, stderr=err, grace=5, deadline=120, cwd=str(ROOT))
    assert done.ok, f"ranks exited {done.returncodes}\n{out.getvalue()}\n{err.getvalue()}"
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert all(res["interleaved"] == "ok" for res in results), results
    assert any("can't steal_bwd_input" in res["zbv"] for res in results), results


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2]))
    sys.exit("usage: test_hang_classes.py --worker OUTDIR")
