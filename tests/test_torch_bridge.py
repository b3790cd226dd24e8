"""`schedc.torch.schedule`, in one process on torch's duck-typed stages: it loads every built-in as
torch's own lowering of our compute order (stage actions included), refuses what `check` rejects or
what does not fit the stages, and stays out of `import schedc`. Training with it on gloo, against
unsplit gradients, is in tests/test_runtime.py (`_torch_cases`).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

S = pytest.importorskip("torch.distributed.pipelining.schedules")

import schedc  # noqa: E402
import schedc.torch  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.interop.torch_csv import TorchCsv  # noqa: E402
from schedc.passes import lower, lower_for_torch  # noqa: E402
from schedc.resources import builtin_schedules  # noqa: E402
from test_torch_oracle import MockStage  # noqa: E402


def stages_of(program: schedc.Program, rank: int) -> list[MockStage]:
    return [MockStage(s, program.num_stages, program.num_ranks, rank)
            for s, r in enumerate(program.placement) if r == rank]


def torchs_lowering(program: schedc.Program) -> dict:
    """What torch's `_load_csv(format="compute_only")` makes of our compute CSV."""
    runtime = S._PipelineScheduleRuntime(stages_of(program, 0), program.num_microbatches)
    compute = {r: [S._Action.from_str(c) for c in row.split(",")]
               for r, row in enumerate(schedc.to_torch_csv(program, "compute").splitlines())}
    runtime._prepare_schedule_with_comms(compute, format="compute_only")
    return runtime.pipeline_order_with_comms


@pytest.mark.parametrize("name", builtin_schedules())
@pytest.mark.parametrize("P, M", [(2, 4), (4, 8)])
def test_every_builtin_loads_as_torchs_own_lowering(name, P, M):
    program = schedc.load(name, {"P": P, "M": M, "V": 2}, strict_params=False)
    if program.routes:  # DualPipe's two directions: torch runs every microbatch through every stage
        with pytest.raises(schedc.SchedcError, match="routes"):
            schedc.torch.schedule(name, stages_of(program, 0), M)
        return
    expected = {r: [str(a) for a in actions] for r, actions in torchs_lowering(program).items()}
    for rank in range(P):
        runtime = schedc.torch.schedule(name, stages_of(program, rank), M)  # P, V, M from the stages
        assert isinstance(runtime, S._PipelineScheduleRuntime) and runtime.scale_grads
        assert {r: [str(a) for a in actions] for r, actions in runtime.pipeline_order_with_comms.items()} == expected
        assert runtime.stage_index_to_group_rank == dict(enumerate(program.placement))
    reduce_grads = [a for row in expected.values() for a in row if a.endswith("REDUCE_GRAD")]
    assert sorted(reduce_grads) == sorted(f"{s}REDUCE_GRAD" for s in range(program.num_stages))


def test_a_csv_and_a_program_load_too(tmp_path):
    program = schedc.load("interleaved_1f1b", {"P": 2, "V": 2, "M": 4})
    path = tmp_path / "i1f1b.csv"
    path.write_text(schedc.to_torch_csv(program, "comms"), newline="")
    expected = {r: [str(a) for a in actions] for r, actions in torchs_lowering(program).items()}
    for source in (str(path), program):
        runtime = schedc.torch.schedule(source, stages_of(program, 1), 4)
        assert {r: [str(a) for a in actions] for r, actions in runtime.pipeline_order_with_comms.items()} == expected
    # a comms CSV written without the stage actions (by schedc before, or by hand) gets them too
    bare = tmp_path / "bare.csv"
    bare.write_text(TorchCsv(lower(program).ranks).dumps(), newline="")
    assert "REDUCE_GRAD" not in bare.read_text()
    runtime = schedc.torch.schedule(str(bare), stages_of(program, 0), 4)
    assert any(a.computation_type == S.REDUCE_GRAD for a in runtime.pipeline_order_with_comms[0])


BROKEN = """\
schedule broken {
  rank 0: 0F0 0RECV_B0 0B0 0SEND_F0
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
}
"""


def test_a_schedule_that_fails_check_is_refused(tmp_path):
    path = tmp_path / "broken.pp"
    path.write_text(BROKEN)
    with pytest.raises(SchedcError) as info:
        schedc.torch.schedule(str(path), stages_of(schedc.load(str(path)), 0), 1)
    assert info.value.code == "deadlock"
    assert "broken fails schedc check (1 error(s)): not loading it into torch" in str(info.value)


@pytest.mark.parametrize("call, code, words", [
    (lambda: schedc.torch.schedule("1f1b", stages_of(schedc.load("1f1b", {"P": 2, "M": 4}), 0), 4, M=6),
     "usage", "has 6 microbatches; the pipeline has 4"),
    (lambda: schedc.torch.schedule("1f1b", [MockStage(1, 2, 2, 0)], 4), "placement",
     "runs stage 1 on rank 1, but it was built on rank 0"),
    (lambda: schedc.torch.schedule("interleaved_1f1b", [MockStage(0, 4, 2, 0)], 4), "placement",
     "runs stage(s) 2 on rank 0, which was not given them"),
    (lambda: schedc.torch.schedule("1f1b", [MockStage(0, 2, 2, 0)], 4, V=2), "unknown-param", "does not declare V"),
    (lambda: schedc.torch.schedule("1f1b", [], 4), "usage", "needs this rank's pipeline stages"),
    (lambda: schedc.torch.schedule(str(Path(__file__).parent / "data" / "forward" / "ds_inference.pp"),
                                   [MockStage(0, 2, 2, 0)], 3, P=2), "usage", "is forward only; torch's"),
    (lambda: schedc.torch.schedule(schedc.load("gpipe", {"P": 2, "M": 2}), [MockStage(0, 2, 2, 0)], 2, M=2),
     "usage", "given with a compiled Program"),
])
def test_a_schedule_that_does_not_fit_the_stages_is_refused(call, code, words):
    with pytest.raises(SchedcError) as info:
        call()
    assert info.value.code == code and words in str(info.value), str(info.value)


def test_the_comms_csv_is_lower_for_torch():
    program = schedc.load("zbv", {"P": 2, "M": 4})
    assert schedc.to_torch_csv(program, "comms") == schedc.to_torch_csv(lower_for_torch(program), "comms")


def test_importing_the_bridge_does_not_import_torch():
    res = subprocess.run([sys.executable, "-c", "import sys, schedc, schedc.torch\nprint('torch' in sys.modules)"],
                         capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent)
    assert res.returncode == 0 and res.stdout.strip() == "False", res.stderr


def fsdp_stage(program: schedc.Program, stage: int, rank: int) -> MockStage:
    """A stage whose module is under FSDP as `fully_shard` marks it (its class made an FSDPModule)."""
    import torch
    from torch.distributed.fsdp import FSDPModule
    mock = MockStage(stage, program.num_stages, program.num_ranks, rank)
    module = torch.nn.Linear(2, 2)
    module.__class__ = type("FSDPLinear", (FSDPModule, torch.nn.Linear), {})
    mock.submod = module
    return mock


GATHERED_LATE = """schedule late {
  rank 0: 0F0 0UNSHARD 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0RESHARD 0REDUCE_GRAD
  rank 1: 1UNSHARD 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1 1RESHARD 1REDUCE_GRAD
}
"""


def test_a_stage_under_fsdp_computed_before_its_gather_is_refused(tmp_path):
    path = tmp_path / "late.pp"
    path.write_text(GATHERED_LATE)
    program = schedc.load(path)
    assert schedc.check(program, semantics="gloo").ok  # (UNSHARD is a collective anywhere to the checks)
    with pytest.raises(SchedcError) as refused:
        schedc.torch.schedule(str(path), [fsdp_stage(program, 0, 0)], 2, semantics="gloo")
    (told,) = refused.value.diagnostics
    assert told.code == "shard-order" and (told.rank, told.step) == (0, 0)
    assert "Attempted to compute on sharded" in told.message and "under FSDP" in told.notes[0]
    # rank 1 gathers first: its stage loads under FSDP; without FSDP, rank 0's does too
    schedc.torch.schedule(str(path), [fsdp_stage(program, 1, 1)], 2, semantics="gloo")
    schedc.torch.schedule(str(path), stages_of(program, 0), 2, semantics="gloo")


@pytest.mark.parametrize("name", ["1f1b", "interleaved_1f1b", "zbv"])
def test_torchs_lowering_gathers_every_stage_under_fsdp_in_order(name):
    program = schedc.load(name, {"P": 2, "M": 4, "V": 2}, strict_params=False)
    for rank in range(2):
        stages = [fsdp_stage(program, s, rank) for s, r in enumerate(program.placement) if r == rank]
        assert isinstance(schedc.torch.schedule(name, stages, 4), S._PipelineScheduleRuntime)


def test_the_ranks_agreement_passes_stand_ins_by_and_carries_each_ranks_reason():
    """The exchange of schedc/torch.py's `_agree` in one process (a 1-rank gloo group; 2 ranks that
    agree are tests/test_torch_bridge_ranks.py): stand-in stages carry no group and load as before,
    and a reason comes back from its row cut to its bytes, a character cut in half dropped."""
    import datetime

    import torch.distributed as dist

    from schedc.runtime.launch import free_port
    from schedc.torch import _exchange, _pipeline, _reason
    program = schedc.load("1f1b", {"P": 2, "M": 4})
    assert _pipeline(stages_of(program, 0)) is None  # (torch.distributed not initialized)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        assert _pipeline(stages_of(program, 0)) is None  # a stand-in: no group, nothing to agree on
        assert isinstance(schedc.torch.schedule("1f1b", stages_of(program, 0), 4), S._PipelineScheduleRuntime)
        assert _exchange(None, "cpu", 3, 1, "é" * 400 + "\0") == {1: "é" * 238 + "..."}  # (480 bytes, 2 a character)
        assert _exchange(None, "cpu", 3, 2, "why\0 not") == {2: "why  not"} and _exchange(None, "cpu", 2, 0, None) == {}
    finally:
        dist.destroy_process_group()
    assert _reason(FileNotFoundError("no\nfile")) == "FileNotFoundError: no file"
    many = SchedcError.many([d for e in (SchedcError("io", "a", where="f.pp"), SchedcError("usage", "b"))
                             for d in e.diagnostics])
    assert _reason(many) == "f.pp: error[io]: a (and 1 more)"
