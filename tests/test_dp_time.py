"""Data parallelism in time (docs/units.md, "What a step's time includes"; schedc/rules/time.py): a
stage's gradient reduction (REDUCE_GRAD), FSDP's all-gather (UNSHARD) and the tied all-reduce, each a
collective that starts once its members have reached it and runs beside compute; a stage the schedule
does not reduce is reduced at the end of the step. Every simulator times them alike; without a
description they cost nothing."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from schedc import estimate
from schedc.api import load, load_text
from schedc.costs import Costs
from schedc.hardware import describe
from schedc.jobs import comm, mesh
from schedc.passes import lower, lower_for_torch
from schedc.passes.stage_ops import add_reduce_grad, add_step_collectives
from schedc.rules.time import collective_span
from schedc.simulate import simulate

DDP = '[model]\npreset = "llama2-7b"\n[hardware]\npreset = "h100-80gb"\n[parallelism]\ndata_parallel_replicate_degree = {}\n'
FSDP = '[model]\npreset = "llama2-7b"\n[hardware]\npreset = "h100-80gb"\n[parallelism]\ndata_parallel_shard_degree = 8\n'
JOB = """schedule job(P = 4, M = 8) {{
  stages P
  place loop
  {replicas}
  rank r {{ for m in 0 .. M {{ F(r, m) }} for m in reversed(0 .. M) {{ B(r, m) }} }}
}}
"""


def _setup(tmp_path, text: str, name: str = "setup.toml"):
    path = tmp_path / name
    path.write_text(text)
    return describe(str(path))


def _timed(setup, program):
    return simulate(Costs("test", derived=setup).apply(program))


def test_a_collective_starts_when_its_group_may_and_takes_its_time():
    assert collective_span(2.0, 1.0, 0.5) == (2.0, 2.5)  # every member there: at once
    assert collective_span(2.0, 3.0, 0.5) == (3.0, 3.5)  # after the group's previous collective


def test_the_reduction_by_hand(tmp_path):
    """DDP over 16 ranks spans two H100 nodes: the all-reduce of a stage's bf16 gradients goes over the
    network (InfiniBand NDR, 50 GB/s a direction) as a ring, 2 x 15/16 of the bytes; FSDP over 8
    reduce-scatters them, and all-gathers the weights, over NVLink 4 within the node."""
    ddp, fsdp = _setup(tmp_path, DDP.format(16)), _setup(tmp_path, FSDP, "fsdp.toml")
    params = ddp.estimates(4)[1].params
    ib, nvlink = ddp._wire(16), ddp._wire(8)
    st = ddp.stage_settings(4)[1]
    assert st["R"] == pytest.approx(2 * (15 / 16 * 2 * params / ib.bandwidth + 15 * ib.latency)) and st["U"] == 0
    st = fsdp.stage_settings(4)[1]
    assert st["R"] == st["U"] == pytest.approx(7 / 8 * 2 * params / nvlink.bandwidth + 7 * nvlink.latency)
    assert comm.gradient_reduction(1e9, mesh.Parallel(zero_stage=3, dp_replicate=4), nvlink) == \
        comm.gather(1e9, mesh.Parallel(zero_stage=3, dp_replicate=4), nvlink)  # ZeRO-3 shards as FSDP does


def test_without_a_description_collectives_cost_nothing_and_nothing_is_added():
    for program in (load("1f1b", {"P": 4, "M": 8}), load_text(JOB.format(replicas="replicas 2"), "job.pp")):
        assert add_step_collectives(program) is program
        timeline = simulate(program)
        assert timeline.collectives == () and "collectives" not in timeline.to_dict()
    assert simulate(lower(load_text(JOB.format(replicas="replicas 2"), "job.pp"))).makespan == simulate(lower(
        load_text(JOB.format(replicas=""), "job.pp"))).makespan  # a job of replicas steps as one pipeline does


def test_a_one_pipeline_schedule_under_ddp_reduces_at_the_end_of_the_step(tmp_path):
    """1F1B's rank 0 computes last: its stage's reduction is the step's last R seconds; the other ranks
    reduce while it still computes."""
    program = load("1f1b", {"P": 4, "M": 8})
    plain = _timed(describe(model="llama2-7b", hardware="h100-80gb"), program)
    ddp = _setup(tmp_path, DDP.format(16))
    timeline = _timed(ddp, program)
    R = [c.R for c in timeline.program.annotations.stage_costs]
    assert timeline.makespan == pytest.approx(plain.makespan + R[0])
    assert timeline.collectives == pytest.approx(tuple(R))
    assert [str(steps[-1]) for steps in timeline.program.ranks] == [f"{r}REDUCE_GRAD" for r in range(4)]
    assert timeline.program.num_actions == program.num_actions + 4


def test_an_early_reduction_runs_beside_later_compute(tmp_path):
    """Interleaved 1F1B holds stages 0 and 4 on rank 0. Reduced right after each stage's last backward
    (torch's placement), stage 4's reduction runs under the backwards of stage 0 that follow; reduced at
    the end of the step, both add to it. The early one is faster by stage 4's reduction."""
    ddp = _setup(tmp_path, DDP.format(16))
    program = load("interleaved_1f1b", {"P": 4, "M": 8})
    plain = _timed(describe(model="llama2-7b", hardware="h100-80gb"), program)
    early, late = _timed(ddp, add_reduce_grad(program)), _timed(ddp, program)
    R = [c.R for c in late.program.annotations.stage_costs]
    assert [str(st) for st in late.program.ranks[0][-2:]] == ["0REDUCE_GRAD", "4REDUCE_GRAD"]  # at the step's end
    assert late.makespan == pytest.approx(plain.makespan + R[0] + R[4])
    assert early.makespan == pytest.approx(plain.makespan + R[0])
    assert late.makespan - early.makespan == pytest.approx(R[4]) and R[4] > 0.05
    assert early.collectives == late.collectives  # the same collectives, placed differently


def test_fsdp_gathers_a_stage_before_its_first_compute(tmp_path):
    fsdp = _setup(tmp_path, FSDP)
    timeline = _timed(fsdp, load("1f1b", {"P": 4, "M": 8}))
    first = timeline.program.ranks[0]
    U = timeline.program.annotations.stage_costs[0].U
    assert str(first[0]) == "0UNSHARD" and str(first[1]) == "0F0" and U > 0
    assert timeline.start[0][1] == pytest.approx(U)  # the forward waits for its weights


def test_a_replicas_job_and_a_description_of_its_degree_agree(tmp_path):
    """`replicas 2` (the schedule's replicas are DDP's) and one pipeline with data_parallel_replicate_degree
    2 are one job: the same step, the same collectives per pipeline rank; and the job's collectives
    wait for every replica."""
    plain = describe(model="llama2-7b", hardware="h100-80gb")
    job = _timed(plain, load_text(JOB.format(replicas="replicas 2"), "job.pp"))
    one = _timed(_setup(tmp_path, DDP.format(2)), lower(load_text(JOB.format(replicas=""), "job.pp")))
    assert job.makespan == pytest.approx(one.makespan) and job.collectives == pytest.approx(one.collectives * 2)
    assert job.makespan > _timed(plain, lower(load_text(JOB.format(replicas=""), "job.pp"))).makespan


def test_every_simulator_times_collectives_alike(tmp_path):
    """torch's lowering (UNSHARD and RESHARD around each stage's compute, REDUCE_GRAD after its last
    backward, then sends and receives) under FSDP: the step-by-step simulator (rendezvous) and the
    graph's (eager, gloo) give one makespan."""
    fsdp = _setup(tmp_path, FSDP)
    program = Costs("test", derived=fsdp).apply(lower_for_torch(load("interleaved_1f1b", {"P": 2, "M": 4})))
    runs = [simulate(program, semantics=s) for s in ("rendezvous", "eager", "gloo")]
    assert len({round(t.makespan, 12) for t in runs}) == 1 and runs[0].collectives
    plain = simulate(lower_for_torch(load("interleaved_1f1b", {"P": 2, "M": 4})))
    assert plain.collectives == ()


def test_sim_and_compare_print_the_collectives(tmp_path, run_cli):
    path = tmp_path / "ddp.toml"
    path.write_text(DDP.format(16))
    code, out, _ = run_cli("sim", "1f1b", "--param", "P=4,M=8", "--setup", str(path))
    assert code == 0 and "dp comm" in out and "gradient reduction" in out
    code, out, _ = run_cli("sim", "1f1b", "--param", "P=4,M=8", "--setup", str(path), "--json")
    assert code == 0 and len(json.loads(out)["collectives"]) == 4
    code, out, _ = run_cli("compare", "1f1b", "zbv", "--param", "P=4,M=8", "--setup", str(path))
    assert code == 0 and "dp comm (s)" in out.splitlines()[0]
    code, out, _ = run_cli("compare", "1f1b", "zbv", "--param", "P=4,M=8", "--model", "llama2-7b",
                           "--hardware", "h100-80gb")
    assert code == 0 and "dp comm" not in out  # no data parallelism: no column


def test_a_tied_embedding_is_all_reduced_between_the_ends(tmp_path):
    """GPT-3 XL's tied embedding: REDUCE_TIED on the first and the last stage all-reduces its gradient
    between their ranks, over the link between pipeline ranks, and the step waits for it."""
    setup = describe(model="gpt3-1.3b", hardware="h100-80gb")
    m = setup.model
    settings = setup.stage_settings(4)
    link = comm.Wire(setup.link.bandwidth, setup.link.latency)
    T = comm.tied_reduction(m.vocab * m.hidden * 2, link)
    assert settings[0]["T"] == settings[3]["T"] == pytest.approx(T) and "T" not in settings[1]
    text = """schedule tied(P = 2, M = 2) {
  stages P
  place loop
  rank 0 { F(0, 0) F(0, 1) B(0, 0) B(0, 1) REDUCE_TIED(0) }
  rank 1 { F(1, 0) B(1, 0) F(1, 1) B(1, 1) REDUCE_TIED(1) }
}
"""
    with_tied = _timed(setup, load_text(text, "tied.pp"))
    without = _timed(setup, load_text(text.replace(" REDUCE_TIED(0)", "").replace(" REDUCE_TIED(1)", ""), "t.pp"))
    assert with_tied.makespan == pytest.approx(without.makespan + T)
    assert with_tied.collectives == pytest.approx((T, T))


def test_every_command_sees_the_step_collectives_alike(tmp_path, run_cli):
    """Under a description the program carries the step's collectives (costs.py puts them on), so
    check, sim and the picture count, mark and draw the same steps."""
    path = tmp_path / "fsdp.toml"
    path.write_text(FSDP)
    outs = [run_cli(cmd, "1f1b", "--param", "P=4,M=8", "--setup", str(path), *extra)
            for cmd, extra in (("check", ()), ("sim", ()), ("viz", ("-o", str(tmp_path / "a.svg"))))]
    assert all(code == 0 and "72 actions" in out for code, out, _ in outs)  # 64, a gather and a reduction a rank


FP32 = '[model]\npreset = "llama2-7b"\naccumulate_allreduce_grads_in_fp32 = true\n[hardware]\npreset = "h100-80gb"\n'


def test_fp32_gradients_double_the_reduced_bytes_and_add_two_bytes_a_parameter(tmp_path):
    """`accumulate_allreduce_grads_in_fp32`: gradients held and reduced in fp32 (Megatron-LM's main_grad,
    torchtitan FSDP's mixed_precision_reduce). DDP all-reduces 4 bytes a gradient, not 2; FSDP
    reduce-scatters them in fp32 but gathers the 16-bit weights; ZeRO-1 (Megatron-LM's distributed
    optimizer) reduce-scatters fp32 gradients and all-gathers 16-bit weights. A rank holds 18 bytes a
    parameter (6 + 12/N under ZeRO-1); FSDP's fp32 shards are 16/N either way."""
    layouts = {"ddp": "data_parallel_replicate_degree = 8", "fsdp": "data_parallel_shard_degree = 8",
               "zero1": "data_parallel_replicate_degree = 8\nzero_stage = 1"}
    for name, table in layouts.items():
        bf16 = _setup(tmp_path, DDP.split("[parallelism]")[0] + f"[parallelism]\n{table}\n", f"{name}.toml")
        fp32 = _setup(tmp_path, FP32 + f"[parallelism]\n{table}\n", f"{name}32.toml")
        params = bf16.estimates(4)[1].params
        wire = bf16._wire(8)
        one = lambda nbytes: 7 / 8 * nbytes / wire.bandwidth + 7 * wire.latency  # noqa: E731 (a ring's pass)
        R16, R32 = bf16.stage_settings(4)[1]["R"], fp32.stage_settings(4)[1]["R"]
        expected = {"ddp": (2 * one(2 * params), 2 * one(4 * params)), "fsdp": (one(2 * params), one(4 * params)),
                    "zero1": (2 * one(2 * params), one(4 * params) + one(2 * params))}[name]
        assert (R16, R32) == pytest.approx(expected), name
        assert fp32.stage_settings(4)[1]["U"] == bf16.stage_settings(4)[1]["U"]  # 16-bit weights gathered
        per16, per32 = bf16.state_bytes_per_param(), fp32.state_bytes_per_param()
        assert (per16, per32) == {"ddp": (16, 18), "fsdp": (2, 2), "zero1": (4 + 12 / 8, 6 + 12 / 8)}[name], name
    assert "fp32 grads" in fp32.title and fp32.to_dict()["model"]["accumulate_allreduce_grads_in_fp32"] is True
    assert "accumulate_allreduce_grads_in_fp32" not in bf16.to_dict()["model"] and "fp32 grads" not in bf16.title
    full = replace(fp32, model=replace(fp32.model, dtype="fp32"))  # fp32 weights: their gradients were fp32 already
    assert full.state_bytes_per_param(mesh.Parallel()) == 16 and "fp32 grads" not in full.title


def test_fp32_gradients_in_a_step(tmp_path, run_cli):
    """The setup key reaches the commands: DDP's reduction at the end of 1F1B's step moves twice the
    bytes (its latency unchanged); a value that is not true or false is an error at its line."""
    path = tmp_path / "fp32.toml"
    path.write_text(FP32 + "[parallelism]\ndata_parallel_replicate_degree = 16\n")
    code, out, err = run_cli("sim", "1f1b", "--param", "P=4,M=8", "--setup", str(path), "--json")
    assert code == 0, err
    fp32 = json.loads(out)
    ddp = _setup(tmp_path, DDP.format(16), "ddp.toml")
    bf16 = max(_timed(ddp, load("1f1b", {"P": 4, "M": 8})).collectives)
    latency = 2 * 15 * ddp._wire(16).latency  # a ring all-reduce's 2 x 15 messages over two nodes
    assert max(fp32["collectives"]) == pytest.approx(2 * (bf16 - latency) + latency)
    assert fp32["setup"]["model"]["accumulate_allreduce_grads_in_fp32"] is True
    path.write_text(FP32.replace("true", '"yes"'))
    code, out, err = run_cli("sim", "1f1b", "--setup", str(path))
    assert code == 2 and "accumulate_allreduce_grads_in_fp32 must be true or false" in err and ":3:" in err


def test_a_tied_matrix_on_one_rank_is_reduced_once():
    """A model with tied embeddings whose first and last stage share a rank (ZB-V's rank 0; one rank
    holding the whole model) reduces and gathers the shared matrix once, with stage 0, whose
    backwards end last: the last stage's R and U count its weights without it, and there is no
    all-reduce between the ends (T = 0). On a loop placement each end reduces its own copy."""
    base = describe(model="gpt3-1.3b", hardware="h100-80gb")
    assert base is not None and base.model.tied_embeddings
    setup = replace(base, parallel=mesh.Parallel(dp_replicate=8))
    shared = estimate.embedding_params(setup.model)
    wire = setup._wire(8)
    for name, params in (("zbv", {"P": 4, "M": 8}), ("1f1b", {"P": 4, "M": 8}), ("1f1b", {"P": 1, "M": 4})):
        program = Costs("t", derived=setup).apply(load(name, params))
        S, est = program.num_stages, setup.estimates(program.num_stages)
        together = program.placement[0] == program.placement[-1]
        assert together == (name == "zbv" or params["P"] == 1)
        last = program.annotations.stage_costs[S - 1]
        held = est[S - 1].params - (shared if together else 0)
        assert last.R == pytest.approx(comm.gradient_reduction(2 * held, setup.parallel, wire)), (name, params)
        first = program.annotations.stage_costs[0]
        assert (first.T == 0 and last.T == 0) if together else first.T > 0
    # the rank's model states count the matrix once too, as they did
    zbv = load("zbv", {"P": 4, "M": 8})
    loop = load("interleaved_1f1b", {"P": 4, "V": 2, "M": 8})
    assert setup.rank_params(zbv)[0] == sum(e.params for e in setup.estimates(8)[::7]) - shared
    assert setup.rank_params(loop)[0] == setup.estimates(8)[0].params + setup.estimates(8)[4].params
