"""PyTorch schedule CSV interop, with torch 2.13 as the oracle.

(a) Our CSV exports (`compute` and `comms`) load in torch's `_PipelineScheduleRuntime._load_csv`
    (so torch's `_validate_schedule` runs on them) and torch loads the order we wrote; our comms
    lowering is the same as torch's own `_add_send_recv` of the same compute order, and torch's
    dry-run simulator runs it to the end.
(b) torch's own schedules, dumped by torch's `_dump_csv` in both formats, read back byte for byte
    (`read_torch_csv(text).dumps() == text`), give torch's order, and check clean.
(c) The reference artifacts from PyTorch's test suite (copied into tests/data/pytorch-artifacts/),
    including the older notation (`B` = backward-input, `BW` = full backward).
"""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

S = pytest.importorskip("torch.distributed.pipelining.schedules")

import schedc  # noqa: E402
from schedc.cli import main  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.interop.torch_csv import read_torch_csv  # noqa: E402
from schedc.ir import Compound, CompoundKind, format_step  # noqa: E402
from schedc.passes import lower, lower_for_torch  # noqa: E402

ARTIFACTS = Path(__file__).parent / "data" / "pytorch-artifacts"  # copied from shared/reference
FORMAT = {"compute": "compute_only", "comms": "compute_comms"}


# duck-typed stages: the ones the oracle tests use
from test_torch_oracle import MockStage, looped_stages, vshape_stages  # noqa: E402,F401


# ---- helpers ----
def cells(order: dict, num_ranks: int) -> list[list[str | None]]:
    """torch's order as compact text per cell, None kept (an idle step / empty CSV cell)."""
    assert sorted(order) == list(range(num_ranks))
    return [[None if a is None else str(a) for a in order[r]] for r in range(num_ranks)]


def without_idle(rows: list[list[str | None]]) -> list[list[str]]:
    return [[c for c in row if c is not None] for row in rows]


def program_rows(program: schedc.Program) -> list[list[str]]:
    """A program's steps as compact text; communication groups opened (torch's CSV has none)."""
    rows = []
    for steps in program.ranks:
        row = []
        for step in steps:
            if isinstance(step, Compound) and step.kind is CompoundKind.GROUP:
                row.extend(format_step(p) for p in step.parts)
            else:
                row.append(format_step(step))
        rows.append(row)
    return rows


def is_compute_text(text: str) -> bool:
    return S._Action.from_str(text).is_compute_op


def write_bytes(path: Path, text: str) -> Path:
    with open(path, "w", newline="") as fh:  # no newline translation: the bytes torch reads/writes
        fh.write(text)
    return path


def read_bytes(path: Path) -> str:
    with open(path, newline="") as fh:
        return fh.read()


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def errors_text(report) -> str:
    return "\n".join(f"[{d.code}] {d.message}" for d in report.errors)


# =====================================================================================
# (a) our exports, loaded by torch
# =====================================================================================
BUILTINS = [
    ("gpipe", {"P": 2, "M": 2}),
    ("gpipe", {"P": 4, "M": 3}),
    ("gpipe", {"P": 4, "M": 8}),
    ("1f1b", {"P": 2, "M": 5}),
    ("1f1b", {"P": 4, "M": 8}),
    ("1f1b", {"P": 8, "M": 8}),
    ("interleaved_1f1b", {"P": 2, "V": 4, "M": 6}),
    ("interleaved_1f1b", {"P": 4, "V": 2, "M": 5}),
    ("interleaved_1f1b", {"P": 4, "V": 2, "M": 8}),
    ("looped_bfs", {"P": 2, "V": 2, "M": 3}),
    ("looped_bfs", {"P": 2, "V": 4, "M": 4}),
    ("looped_bfs", {"P": 4, "V": 2, "M": 8}),
]


def _bid(name, params):
    return name + "-" + "-".join(f"{k}{v}" for k, v in params.items())


def _torch_runtime(program: schedc.Program) -> "S._PipelineScheduleRuntime":
    P = program.num_ranks
    V = program.num_stages // P
    return S._PipelineScheduleRuntime(looped_stages(P, V), program.num_microbatches)


@pytest.mark.parametrize("level", ["compute", "comms"])
@pytest.mark.parametrize("name, params", [pytest.param(n, p, id=_bid(n, p)) for n, p in BUILTINS])
def test_our_csv_loads_in_torch(tmp_path, name, params, level):
    program = schedc.load(name, params)
    text = schedc.to_torch_csv(program, level)
    path = write_bytes(tmp_path / f"{name}.csv", text)

    runtime = _torch_runtime(program)
    runtime._load_csv(str(path), format=FORMAT[level])  # raises if torch's _validate_schedule fails

    P = program.num_ranks
    # torch infers the stage -> rank mapping from the file: it must be our placement
    assert runtime.stage_index_to_group_rank == dict(enumerate(program.placement))
    ours_compute = program_rows(program)
    if level == "compute":
        loaded = cells(runtime.pipeline_order, P)
        assert all(c is not None for row in loaded for c in row), "our compute CSV has no idle cells"
        assert loaded == ours_compute
    else:
        loaded = cells(runtime.pipeline_order_with_comms, P)
        assert loaded == program_rows(lower_for_torch(program))
        # the comms file carries the same compute order, plus the communication
        assert [[c for c in row if is_compute_text(c)] for row in loaded] == ours_compute
        assert any(not is_compute_text(c) for row in loaded for c in row)
        # torch's own dry-run of a comms schedule flags stalls (ValueError): ours runs to the end. It
        # knows no UNSHARD / RESHARD / REDUCE_GRAD (not even on torch's own lowering): run it without them
        stage_ops = (S.UNSHARD, S.RESHARD, S.REDUCE_GRAD)
        order = {r: [a for a in actions if a.computation_type not in stage_ops]
                 for r, actions in runtime.pipeline_order_with_comms.items()}
        simulated = without_idle(cells(S._simulate_comms_compute(
            order, lambda s: runtime.stage_index_to_group_rank[s], runtime._num_stages), P))
        for r in range(P):
            assert sorted(simulated[r]) == sorted(str(a) for a in order[r])
        assert {str(a) for row in runtime.pipeline_order_with_comms.values() for a in row
                if a.computation_type == S.REDUCE_GRAD} == {f"{s}REDUCE_GRAD" for s in range(program.num_stages)}


@pytest.mark.parametrize("name, params", [pytest.param(n, p, id=_bid(n, p)) for n, p in BUILTINS])
def test_our_comms_lowering_is_torchs(name, params):
    """Our comms CSV is exactly what torch's own lowering of our compute order gives
    (`_add_unshard_reshard`, `_add_reduce_grad`, `_add_send_recv`), and our `lower` (schedc's runtime,
    no stage actions) is exactly torch's `_add_send_recv`."""
    program = schedc.load(name, params)
    compute = {r: [S._Action.from_str(t) for t in row] for r, row in enumerate(program_rows(program))}
    theirs = S._add_send_recv(compute, stage_to_rank=lambda s: program.placement[s],
                              num_stages=program.num_stages)
    assert program_rows(lower(program)) == without_idle(cells(theirs, program.num_ranks))
    runtime = _torch_runtime(program)
    compute = {r: [S._Action.from_str(t) for t in row] for r, row in enumerate(program_rows(program))}
    runtime._prepare_schedule_with_comms(compute, format="compute_only")  # (_add_send_recv emptied it)
    assert program_rows(lower_for_torch(program)) == cells(runtime.pipeline_order_with_comms, program.num_ranks)
    assert schedc.check(lower_for_torch(program)).ok  # the stage actions are no-ops to our checks


def test_export_cli_writes_the_api_bytes(tmp_path):
    program = schedc.load("interleaved_1f1b", {"P": 4, "V": 2, "M": 8})
    for level in ("compute", "comms"):
        out = tmp_path / f"x_{level}.csv"
        code, _, err = cli("export", "interleaved_1f1b", "--param", "P=4", "--param", "V=2", "--param", "M=8",
                               "--to", "torch-csv", "--level", level, "-o", str(out))
        assert code == 0, err
        assert read_bytes(out) == schedc.to_torch_csv(program, level)
        runtime = _torch_runtime(program)
        runtime._load_csv(str(out), format=FORMAT[level])


# =====================================================================================
# (b) torch's schedules, dumped by torch
# =====================================================================================
TORCH_SCHEDULES = [
    ("Interleaved1F1B", S.ScheduleInterleaved1F1B, "loop", 2, 2, 4),
    ("Interleaved1F1B", S.ScheduleInterleaved1F1B, "loop", 4, 2, 6),
    ("LoopedBFS", S.ScheduleLoopedBFS, "loop", 2, 2, 3),
    ("LoopedBFS", S.ScheduleLoopedBFS, "loop", 4, 2, 8),
    ("InterleavedZeroBubble", S.ScheduleInterleavedZeroBubble, "loop", 2, 2, 8),
    ("InterleavedZeroBubble", S.ScheduleInterleavedZeroBubble, "loop", 4, 2, 6),
    ("ZBVZeroBubble", S.ScheduleZBVZeroBubble, "v", 2, 2, 4),
    ("ZBVZeroBubble", S.ScheduleZBVZeroBubble, "v", 4, 2, 5),  # M < 2P-1: torch leaves idle cells
    ("DualPipeV", S.ScheduleDualPipeV, "v", 2, 2, 4),
    ("DualPipeV", S.ScheduleDualPipeV, "v", 4, 2, 10),
]


def _build(cls, style, P, V, M):
    return cls(looped_stages(P, V) if style == "loop" else vshape_stages(P), M)


@pytest.mark.parametrize("fmt", ["compute_only", "compute_comms"])
@pytest.mark.parametrize("label, cls, style, P, V, M", [
    pytest.param(*case, id=f"{case[0]}-P{case[3]}-V{case[4]}-M{case[5]}") for case in TORCH_SCHEDULES])
def test_torch_dump_reads_back_exactly_and_checks_clean(tmp_path, label, cls, style, P, V, M, fmt):
    schedule = _build(cls, style, P, V, M)
    path = tmp_path / f"{label}_{fmt}.csv"
    schedule._dump_csv(str(path), format=fmt)
    text = read_bytes(path)
    order = schedule.pipeline_order if fmt == "compute_only" else schedule.pipeline_order_with_comms
    expected = cells(order, P)

    table = read_torch_csv(text, str(path))
    assert table.dumps() == text  # byte for byte, CRLF rows and empty idle cells included
    assert [[None if c is None else format_step(c) for c in row] for row in table.rows] == expected

    program = schedc.from_torch_csv(str(path))
    assert program.num_ranks == P and program.num_stages == V * P and program.num_microbatches == M
    assert program.placement == tuple(schedule.stage_index_to_group_rank[s] for s in range(V * P))
    assert program_rows(program) == without_idle(expected)
    assert program.level == ("compute" if fmt == "compute_only" else "comms")
    report = schedc.check(program)
    assert report.ok, f"torch's {label} (P={P}, M={M}, {fmt}) fails schedc check:\n{errors_text(report)}"


def test_torch_dump_with_an_action_removed_fails_check(tmp_path):
    """Negative control for the clean verdicts above: the check is not vacuous on torch's files."""
    schedule = _build(S.ScheduleZBVZeroBubble, "v", 4, 2, 8)
    for fmt, drop in (("compute_only", "W"), ("compute_comms", "RECV_F")):
        path = tmp_path / f"zbv_{fmt}.csv"
        schedule._dump_csv(str(path), format=fmt)
        text = read_bytes(path)
        rows = [line.split(",") for line in text.split("\r\n")[:-1]]
        victim = next(i for i, c in enumerate(rows[1]) if re.fullmatch(rf"\d+{drop}\d+", c))
        del rows[1][victim]
        broken = write_bytes(tmp_path / f"zbv_{fmt}_broken.csv", "".join(",".join(r) + "\r\n" for r in rows))
        report = schedc.check(schedc.from_torch_csv(str(broken)))
        assert not report.ok, f"{fmt}: removing {drop} from rank 1 went unnoticed"


# =====================================================================================
# (c) PyTorch's reference artifacts
# =====================================================================================
DUALPIPEV = ARTIFACTS / "dualpipev_4rank_10mb.csv"
ZB_COMPUTE = ARTIFACTS / "zb1p_2rank_2stagep_compute.csv"
ZB_COMMS = ARTIFACTS / "zb1p_2rank_2stagep_comms.csv"




def test_dualpipev_artifact_checks_clean_and_is_torchs_dualpipev():
    program = schedc.from_torch_csv(str(DUALPIPEV))
    report = schedc.check(program)
    assert report.ok, errors_text(report)
    assert (program.num_ranks, program.num_stages, program.num_microbatches) == (4, 8, 10)
    assert any(isinstance(st, Compound) and st.kind is CompoundKind.OVERLAP_F_B for row in program.ranks for st in row)
    # it is what today's torch generates for DualPipeV with 4 ranks and 10 microbatches
    torch_order = _build(S.ScheduleDualPipeV, "v", 4, 2, 10).pipeline_order
    assert program_rows(program) == without_idle(cells(torch_order, 4))
    code, out, err = cli("check", str(DUALPIPEV))
    assert code == 0, out + err



def test_zb_compute_artifact_is_flagged_as_legacy_notation():
    report = schedc.check(schedc.from_torch_csv(str(ZB_COMPUTE)))
    assert not report.ok
    legacy = [d for d in report.errors if d.code == "legacy-notation"]
    assert legacy, errors_text(report)
    assert "legacy" in legacy[0].message.lower() or "older" in legacy[0].message.lower()
    code, out, err = cli("check", "--json", str(ZB_COMPUTE))
    assert code == 1
    assert any(d["code"] == "legacy-notation" for d in json.loads(out)["errors"])



def test_zb_compute_artifact_in_legacy_notation_checks_clean_and_is_torchs_zb1p():
    program = schedc.from_torch_csv(str(ZB_COMPUTE), notation="legacy")
    report = schedc.check(program)
    assert report.ok, errors_text(report)
    # read as legacy, it is exactly today's torch ZB1P (ScheduleInterleavedZeroBubble) for 2 ranks,
    # 2 stages per rank, 8 microbatches: legacy B is today's I
    torch_order = _build(S.ScheduleInterleavedZeroBubble, "loop", 2, 2, 8).pipeline_order
    assert program_rows(program) == without_idle(cells(torch_order, 2))
    code, out, err = cli("check", "--notation", "legacy", str(ZB_COMPUTE))
    assert code == 0, out + err



def test_zb_comms_artifact_needs_legacy_notation():
    text = ZB_COMMS.read_text()
    # where the first BW cell is, found from the file itself (line, 1-based column)
    line_no, line = next((i + 1, ln) for i, ln in enumerate(text.splitlines()) if re.search(r"(^|,)\d+BW\d+", ln))
    col = next(m.start() + 1 for m in re.finditer(r"[^,]+", line) if re.fullmatch(r"\d+BW\d+", m.group()))

    with pytest.raises(SchedcError) as info:
        schedc.from_torch_csv(str(ZB_COMMS))
    assert "--notation legacy" in info.value.render()

    code, out, err = cli("check", str(ZB_COMMS))
    assert code == 2, out + err
    assert f"{ZB_COMMS}:{line_no}:{col}:" in err
    assert "--notation legacy" in err
    assert "Traceback" not in err



def test_zb_comms_artifact_in_legacy_notation_checks_clean():
    program = schedc.from_torch_csv(str(ZB_COMMS), notation="legacy")
    assert program.level == "comms"
    report = schedc.check(program)
    assert report.ok, errors_text(report)
    # legacy BW (full backward) is today's B, legacy B is today's I: every (stage, microbatch) has
    # F and either B or I+W -- so torch's own dry-run simulator must run it to the end too
    order = {r: [S._Action.from_str(t) for t in row] for r, row in enumerate(program_rows(program))}
    S._simulate_comms_compute(order, lambda s: program.placement[s], program.num_stages)
    code, out, err = cli("check", "--notation", "legacy", str(ZB_COMMS))
    assert code == 0, out + err
