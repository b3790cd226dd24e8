"""Oracle tests: schedc's built-in schedules against torch.distributed.pipelining's own generators.

torch is the oracle here: every expected order below is computed by torch (2.13) at test time, never
copied from schedc's output. For each setting we build torch's schedule object with duck-typed mock
stages (no process group, no model) and compare, rank by rank, the compute actions torch runs with the
compute actions of our built-in schedule (torch's idle `None` steps and its UNSHARD / RESHARD /
REDUCE_GRAD bookkeeping are dropped; schedc's built-ins are compute-only).

- interleaved_1f1b / looped_bfs: `ScheduleInterleaved1F1B` / `ScheduleLoopedBFS`.pipeline_order.
- gpipe: `ScheduleGPipe._get_pipeline_order()`, and the order its `_step_microbatches` loop really runs.
- 1f1b: torch 2.13's `Schedule1F1B._get_pipeline_order()` is not a valid schedule (the last rank starts
  its steady state at F1, so it runs B0 without F0, and runs a forward on microbatch M), so our 1f1b
  is compared with the order torch's `Schedule1F1B._step_microbatches` loop really executes, driven
  per rank with a recording mock stage. A separate test feeds torch's invalid IR to `schedc check`.
"""
from __future__ import annotations

import csv
import io
import json
import re

import pytest

S = pytest.importorskip("torch.distributed.pipelining.schedules")

import schedc  # noqa: E402
from schedc.cli import main  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.ir import format_step  # noqa: E402

# torch bookkeeping actions that are not part of a compute order
_BOOKKEEPING = {S._ComputationType.UNSHARD, S._ComputationType.RESHARD, S._ComputationType.REDUCE_GRAD}

RANKS = (2, 4, 8)
CHUNKS = (1, 2, 4)


def _microbatch_counts(P: int) -> list[int]:
    """M in {P, 2P, 4P}, plus counts that are not multiples of P (fewer than P, and in between)."""
    return sorted({P, 2 * P, 4 * P, 1, P - 1, P + 1, 3 * P // 2, 2 * P + 1, 5 * P // 2} - {0})


# ---- duck-typed stages ----
class MockStage:
    """What torch's multi-stage schedule constructors touch on a `_PipelineStageBase`."""

    def __init__(self, stage_index: int, num_stages: int, group_size: int, group_rank: int):
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = group_rank
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.submod = None  # not an nn.Module: the torch.compile compatibility check skips it
        self.stage_index_to_group_rank: dict[int, int] = {}


def looped_stages(P: int, V: int, rank: int = 0) -> list[MockStage]:
    """The stages `rank` holds under loop placement (stage s on rank s % P)."""
    return [MockStage(v * P + rank, V * P, P, rank) for v in range(V)]


def vshape_stages(P: int, rank: int = 0) -> list[MockStage]:
    """The two stages `rank` holds under V-shape placement (r and 2P-1-r)."""
    return [MockStage(rank, 2 * P, P, rank), MockStage(2 * P - 1 - rank, 2 * P, P, rank)]


class RecordingStage(MockStage):
    """A single stage that records the compute a single-stage schedule's `_step_microbatches` runs.

    Communication is a no-op (every get_*_ops returns no ops, so torch's batch helpers post nothing),
    and the one-time metadata initialisation has nothing to infer.
    """

    def __init__(self, stage_index: int, num_stages: int):
        super().__init__(stage_index, num_stages, num_stages, stage_index)
        self.device = "cpu"
        self.calls: list[str] = []

    # initialisation (torch's _initialize_pp_stages)
    def _get_init_p2p_neighbors_ops(self):
        return []

    def _prepare_forward_infra(self, *args, **kwargs):
        return None

    def _prepare_backward_infra(self, *args, **kwargs):
        return None

    # communication
    def get_fwd_recv_ops(self, mb):
        return []

    def get_fwd_send_ops(self, mb):
        return []

    def get_bwd_recv_ops(self, mb):
        return []

    def get_bwd_send_ops(self, mb):
        return []

    # compute
    def forward_one_chunk(self, mb, *args, **kwargs):
        self.calls.append(f"{self.stage_index}F{mb}")
        return None

    def backward_one_chunk(self, mb, *args, **kwargs):
        self.calls.append(f"{self.stage_index}B{mb}")

    def perform_reduce_grad(self, *args, **kwargs):
        self.calls.append(f"{self.stage_index}REDUCE_GRAD")


# ---- helpers ----
def torch_compute_order(order: dict, num_ranks: int) -> list[list[str]]:
    """torch's per-rank order as compact text, without idle steps and FSDP/grad bookkeeping."""
    assert sorted(order) == list(range(num_ranks)), f"torch's order has ranks {sorted(order)}"
    return [[str(a) for a in order[r] if a is not None and a.computation_type not in _BOOKKEEPING]
            for r in range(num_ranks)]


def driven_order(cls, P: int, M: int) -> list[list[str]]:
    """Run torch's real `_step_microbatches` loop of a single-stage schedule once per rank."""
    out = []
    for rank in range(P):
        stage = RecordingStage(rank, P)
        schedule = cls(stage, M)
        schedule._step_microbatches()
        assert stage.calls and stage.calls[-1] == f"{rank}REDUCE_GRAD", stage.calls
        out.append([c for c in stage.calls if not c.endswith("REDUCE_GRAD")])
    return out


def our_order(name: str, params: dict) -> tuple[schedc.Program, list[list[str]]]:
    program = schedc.load(name, params)
    return program, [[format_step(step) for step in steps] for steps in program.ranks]


def assert_same_order(ours: list[list[str]], theirs: list[list[str]], what: str):
    assert len(ours) == len(theirs), f"{what}: {len(ours)} ranks here, {len(theirs)} in torch"
    for rank, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            pytest.fail(f"{what}: rank {rank} differs from torch at compute step {first}:\n"
                        f"  schedc: {a[max(0, first - 3):first + 5]}\n"
                        f"  torch : {b[max(0, first - 3):first + 5]}\n"
                        f"  (lengths {len(a)} vs {len(b)})")


# ---- multi-stage schedules: interleaved 1F1B and looped BFS ----
MULTI = [
    pytest.param(name, cls, P, V, M, id=f"{name}-P{P}-V{V}-M{M}")
    for name, cls in (("interleaved_1f1b", S.ScheduleInterleaved1F1B), ("looped_bfs", S.ScheduleLoopedBFS))
    for P in RANKS for V in CHUNKS for M in _microbatch_counts(P)
]


@pytest.mark.parametrize("name, cls, P, V, M", MULTI)
def test_multi_stage_order_matches_torch(name, cls, P, V, M):
    params = {"P": P, "V": V, "M": M}
    try:
        schedule = cls(looped_stages(P, V), M)
    except ValueError as exc:  # torch does not accept this M: neither should we
        with pytest.raises(SchedcError) as info:
            schedc.load(name, params)
        assert info.value.code == "require", info.value.render()
        assert "multiple" in str(exc)
        return
    program, ours = our_order(name, params)
    assert program.num_ranks == P and program.num_stages == V * P and program.num_microbatches == M
    assert program.placement == tuple(schedule.stage_index_to_group_rank[s] for s in range(V * P))
    assert_same_order(ours, torch_compute_order(schedule.pipeline_order, P), f"{name} {params}")


def test_some_microbatch_counts_are_rejected_by_torch_and_by_us():
    """The grid above must exercise torch's interleaved M restriction, not only accepted settings."""
    rejected = []
    for P in RANKS:
        for M in _microbatch_counts(P):
            try:
                S.ScheduleInterleaved1F1B(looped_stages(P, 2), M)
            except ValueError:
                rejected.append((P, M))
    assert rejected, "no rejected setting in the grid"
    for P, M in rejected:
        with pytest.raises(SchedcError):
            schedc.load("interleaved_1f1b", {"P": P, "V": 2, "M": M})


# ---- single-stage schedules ----
SINGLE = [pytest.param(P, M, id=f"P{P}-M{M}") for P in RANKS for M in _microbatch_counts(P)]


@pytest.mark.parametrize("P, M", SINGLE)
def test_gpipe_matches_torch_pipeline_order(P, M):
    schedule = S.ScheduleGPipe(MockStage(0, P, P, 0), M)
    program, ours = our_order("gpipe", {"P": P, "M": M})
    assert program.placement == tuple(range(P))
    assert_same_order(ours, torch_compute_order(schedule.pipeline_order, P), f"gpipe P={P} M={M}")


@pytest.mark.parametrize("P, M", [pytest.param(P, M, id=f"P{P}-M{M}") for P in RANKS for M in (1, P + 1, 2 * P)])
def test_gpipe_matches_torch_step_loop(P, M):
    _, ours = our_order("gpipe", {"P": P, "M": M})
    assert_same_order(ours, driven_order(S.ScheduleGPipe, P, M), f"gpipe P={P} M={M} (step loop)")


@pytest.mark.parametrize("P, M", SINGLE)
def test_1f1b_matches_torch_step_loop(P, M):
    if M < P:  # torch's Schedule1F1B refuses fewer microbatches than stages
        with pytest.raises(ValueError):
            S.Schedule1F1B(MockStage(0, P, P, 0), M)
        return
    program, ours = our_order("1f1b", {"P": P, "M": M})
    assert program.placement == tuple(range(P))
    assert_same_order(ours, driven_order(S.Schedule1F1B, P, M), f"1f1b P={P} M={M} (step loop)")


def test_recording_stage_sees_every_microbatch_once():
    """Guard for the driver: the loop it records is a complete 1F1B run, not a truncated one."""
    P, M = 4, 6
    for rank, calls in enumerate(driven_order(S.Schedule1F1B, P, M)):
        assert sorted(calls) == sorted([f"{rank}F{m}" for m in range(M)] + [f"{rank}B{m}" for m in range(M)])
        assert calls.index(f"{rank}B0") == P - rank  # torch warms up with P - rank forwards


# ---- torch's invalid 1F1B IR through `schedc check` ----
_TORCH_ERROR = re.compile(r"Rank (\d+), step (\d+): Running Full Backward for stage (\d+), microbatch (\d+) "
                          r"without first running Forward")


@pytest.mark.parametrize("idle", [False, True], ids=["as-torch-returns-it", "with-warmup-idle-steps"])
@pytest.mark.parametrize("P", RANKS)
def test_torch_1f1b_ir_is_rejected_by_schedc_check(tmp_path, P, idle):
    """torch's 1F1B IR as a CSV fails `schedc check` with an "order" error at torch's rank and step.

    `_get_pipeline_order` pads rank r with r idle steps and then drops every None (its
    `_add_reduce_grad` skips them); the second variant keeps that padding as empty cells, so the step
    torch's validator names counts idle cells, as a CSV's columns do.
    """
    M = 2 * P
    order = S.Schedule1F1B(MockStage(0, P, P, 0), M).pipeline_order
    if idle:
        order = {r: [None] * r + list(order[r]) for r in order}
    # torch's own validator is the oracle for where the schedule first goes wrong
    try:
        S._validate_schedule(order, P, P, M)
    except AssertionError as exc:
        found = _TORCH_ERROR.search(str(exc))
        assert found, str(exc)
        rank, step, stage, mb = map(int, found.groups())
    else:  # pragma: no cover - a later torch may fix its 1F1B IR
        pytest.skip("torch's Schedule1F1B._get_pipeline_order() is valid in this torch version")
    assert rank == P - 1  # the defect described in the module docstring

    path = tmp_path / f"torch_1f1b_P{P}.csv"
    with open(path, "w", newline="") as fh:  # as torch's _dump_csv writes: None -> empty cell
        writer = csv.writer(fh)
        for r in range(P):
            writer.writerow(["" if a is None else str(a) for a in order[r]])
    text = path.read_text()

    out, err = io.StringIO(), io.StringIO()
    assert main(["check", "--json", str(path)], out, err) == 1, err.getvalue()
    report = json.loads(out.getvalue())
    assert report["ok"] is False
    orders = [d for d in report["errors"] if d["code"] == "order" and d.get("rank") == rank]
    assert orders, f"no 'order' error on rank {rank}: {[d['message'] for d in report['errors']]}"
    diag = orders[0]
    assert re.search(rf"B\({stage},{mb}\) needs the activation of F\({stage},{mb}\)", diag["message"]), diag["message"]
    # it points at the cell in the file: line rank + 1, column of the cell
    line = text.splitlines()[rank]
    cell_column = sum(len(c) + 1 for c in line.split(",")[:step]) + 1
    assert (diag.get("line"), diag.get("column")) == (rank + 1, cell_column), diag
    # and names the step torch's validator names (the cell index, idle cells counted)
    assert diag.get("step") == step and f"rank {rank}, step {step}:" in diag["message"], \
        f"torch says rank {rank}, step {step}; schedc says: {diag['message']!r} (step={diag.get('step')})"

    out, err = io.StringIO(), io.StringIO()
    assert main(["check", str(path)], out, err) == 1
    assert f"{path}:{rank + 1}:{cell_column}: error[order]: rank {rank}, step {step}:" in out.getvalue()
