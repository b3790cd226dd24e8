"""The runtime on gloo, many schedules per spawn: gradients equal the unsplit model's (also with
receives posted early), torch runs our CSVs to the same gradients, a broken schedule is stopped by
the watchdog, and `schedc run` trains.

Spawning ranks is slow on two cores, so one launch of 4 ranks runs every built-in schedule that loads
with P = 4, and on ranks 0 and 1 (a process group of their own) every one that loads with P = 2 (V = 2
where declared), on an MLP and a transformer in float64, two training steps each; and every built-in
on torch's `_PipelineScheduleRuntime` with torch's defaults, from our compute CSV, our comms CSV and
`schedc.torch.schedule` (that launch is the slow tier's; the default tier launches the routed cases
alone: DualPipe on 2 ranks, copies of a stage on one rank). This file is also the worker: `python tests/test_runtime.py --worker
CASES.json OUTDIR` is what each rank runs.
"""
from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOL = 1e-10
WORKER_DEADLINE = 240.0


# ---- the worker (runs in each rank) ----
def _models():
    import functools

    from examples import mlp, transformer
    return {
        "mlp": (lambda ids, S: mlp.build_stages(ids, S, width=16, depth=max(4, 2 * S)), mlp.loss_fn,
                functools.partial(mlp.make_batch, width=16)),
        "transformer": (lambda ids, S: transformer.build_stages(ids, S, layers=S), transformer.loss_fn,
                        transformer.make_batch),
    }


def _reference(build, loss_fn, S, x, y):
    """The unsplit model's loss and per-stage gradients (schedc.testing's, without the names)."""
    from schedc.testing import reference_gradients
    loss, grads = reference_gradients(build, loss_fn, S, x, y)
    return loss, [[g for _, g in stage] for stage in grads]


def _batch(make_batch, step, size):
    from schedc.testing import as_double
    return tuple(as_double(t) for t in make_batch(step, size))


def _run_schedc(case, rank, group):
    """A lowered built-in on our runtime; with routes (DualPipe) the copies of a model stage are
    built from it and their summed gradient is the unsplit model's of that stage."""
    import importlib.util

    import torch

    from schedc.runtime.entry import make_copy_groups, split
    from schedc.runtime.interpreter import PipelineInterpreter
    from schedc.runtime.table import load_table
    from schedc.runtime.watchdog import Watchdog
    spec = importlib.util.spec_from_file_location(f"case_{abs(hash(case['program']))}", case["program"])
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    table = load_table(program.PROGRAM, program.RANKS)
    build, loss_fn, make_batch = _models()[case["model"]]
    L, M = table.model_stages, table.num_microbatches
    mine = table.stages_of(rank)
    modules = {s: m.double() for s, m in zip(mine, build([table.model_stage(s) for s in mine], L))}
    copies = {}
    if table.routes and group is None:
        copies = make_copy_groups(table, rank, 60)
    elif table.routes:  # a case on ranks 0 and 1: their own group holds the copies that span both
        copies = {c: group for c, stages in table.copies().items() if len({table.rank_of(s, rank) for s in stages}) > 1}
    interp = PipelineInterpreter(table, rank, modules, loss_fn, group=group, watchdog=Watchdog(30.0),
                                 copy_groups=copies)
    entry, ends = any(table.is_entry(s) for s in mine), any(table.is_exit(s) for s in mine)
    worst, loss_err = 0.0, 0.0
    for step in range(2):  # the second step runs with the shapes learned in the first
        x, y = _batch(make_batch, step, 2 * M)
        losses = interp.step(split(x, M) if entry else None, split(y, M) if ends else None)
        ref_loss, ref_grads = _reference(build, loss_fn, L, x, y)
        for s in mine:
            for p, g in zip(modules[s].parameters(), ref_grads[table.model_stage(s)]):
                if p.grad is None:
                    return {"error": f"stage {s}: a parameter got no gradient"}
                worst = max(worst, (p.grad - g).abs().max().item())
            modules[s].zero_grad(set_to_none=True)
        if ends and not table.routes:
            loss_err = max(loss_err, abs(torch.stack(losses).mean().item() - ref_loss))
        elif ends:  # each route's last rank: the unsplit model's loss on its routes' microbatches
            rows = [i for a, b, _, stop in table.routes if table.rank_of(stop - 1, rank) == rank
                    for i in range(a * 2, b * 2)]  # (2 samples a microbatch)
            sub_loss, _ = _reference(build, loss_fn, L, x[rows], y[rows])
            loss_err = max(loss_err, abs(torch.stack(losses).mean().item() - sub_loss))
    return {"grad_err": worst, "loss_err": loss_err}


def _run_torch(case, rank, group):
    """A built-in through torch's `_PipelineScheduleRuntime` with torch's defaults (scale_grads=True),
    on real PipelineStages: our compute CSV (torch lowers it), our comms CSV (run as written), or the
    schedule object `schedc.torch.schedule` builds."""
    import torch
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    import schedc.torch
    S, M = case["stages"], case["microbatches"]
    mine = [s for s, r in enumerate(case["placement"]) if r == rank]
    build, loss_fn, make_batch = _models()[case["model"]]
    modules = {s: m.double() for s, m in zip(mine, build(mine, S))}
    stages = [PipelineStage(modules[s], s, S, torch.device("cpu"), group=group) for s in mine]
    if case["kind"] == "torch-api":
        schedule = schedc.torch.schedule(case["source"], stages, M, loss_fn)  # P, V, M from the stages
    else:
        schedule = _PipelineScheduleRuntime(stages, M, loss_fn=loss_fn)
        schedule._load_csv(case["csv"], format=case["format"])
    x, y = _batch(make_batch, 0, 2 * M)
    losses: list = []
    schedule.step(*((x,) if 0 in mine else ()), target=y if S - 1 in mine else None, losses=losses)
    ref_loss, ref_grads = _reference(build, loss_fn, S, x, y)
    worst = 0.0
    for s in mine:
        for p, g in zip(modules[s].parameters(), ref_grads[s]):
            worst = max(worst, (p.grad - g).abs().max().item())
    loss_err = abs(torch.stack(losses).mean().item() - ref_loss) if S - 1 in mine else 0.0
    return {"grad_err": worst, "loss_err": loss_err}


def _worker(cases_path: str, out_dir: str) -> int:
    os.environ["OMP_NUM_THREADS"] = "1"
    sys.path.insert(0, str(ROOT))
    import datetime

    import torch
    import torch.distributed as dist

    from schedc.runtime.entry import end_rank
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    # a case on fewer ranks than the world runs on the first ones, on a process group of their own
    groups = {n: None if n == world else dist.new_group(list(range(n))) for n in (2, world)}
    results = {}
    for case in json.loads(Path(cases_path).read_text()):
        if rank < case["ranks"]:
            t0 = time.perf_counter()
            try:
                run = _run_torch if case["kind"].startswith("torch") else _run_schedc
                result = run(case, rank, groups[case["ranks"]])
            except Exception as exc:  # the peers would hang on this rank: report and stop the spawn
                sys.stderr.write(f"rank {rank}: case {case['id']} failed: {type(exc).__name__}: {exc}\n")
                sys.stderr.flush()
                os._exit(1)
            result["seconds"] = time.perf_counter() - t0
            results[case["id"]] = result
        dist.barrier()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    end_rank()


# ---- the tests (parent side) ----
def _builtins(R: int, M: int):
    """(name, program) for every built-in that loads on R ranks with M microbatches (V = 2 where declared)."""
    import schedc
    from schedc.errors import SchedcError
    from schedc.resources import builtin_schedules
    for name in builtin_schedules():
        try:
            program = schedc.load(name, {"P": R, "M": M, "V": 2}, strict_params=False)
        except SchedcError as exc:
            if exc.code in ("require", "missing-param"):
                continue
            raise
        if program.num_ranks == R:
            yield name, program


def _builtin_cases(R: int, Ms, tmp: Path, early: bool = False) -> list[dict]:
    """Every built-in's program on both models; `early`: also with its receives posted early
    (`schedc run --receives early`), checked under gloo, on the MLP."""
    import schedc
    from schedc.lower import lower_to_torch
    from schedc.passes import lower
    cases = []
    for M in Ms:
        for name, program in _builtins(R, M):
            report = schedc.check(program)
            assert report.ok, report.render()
            path = tmp / f"{name}_P{R}_M{M}_program.py"
            path.write_text(lower_to_torch(program, verified="rendezvous").source)
            for model in ("mlp", "transformer"):
                cases.append({"id": f"{name} P={R} M={M} S={program.num_stages} {model}", "kind": "schedc",
                              "ranks": R, "program": str(path), "model": model})
            if early:
                assert schedc.check(lower(program, receives="early"), semantics="gloo").ok
                path = tmp / f"{name}_P{R}_M{M}_early_program.py"
                path.write_text(lower_to_torch(program, verified="gloo", receives="early").source)
                cases.append({"id": f"{name} P={R} M={M} S={program.num_stages} mlp, receives posted early",
                              "kind": "schedc", "ranks": R, "program": str(path), "model": "mlp"})
    return cases


SAME_RANK_COPIES = """# Two copies of a model of P stages, both placed in a loop: rank r holds both copies of model
# stage r (stages r and P + r), summed on the rank as the step ends.
schedule same_rank_copies(P = 4, M = 4) {
  stages 2 * P
  place loop
  route microbatches 0 .. M // 2: stages 0 .. P
  route microbatches M // 2 .. M: stages P .. 2 * P
  rank r {
    for m in 0 .. M // 2 { F(r, m); F(P + r, M // 2 + m) }
    for m in 0 .. M // 2 { B(r, m); I(P + r, M // 2 + m); W(P + r, M // 2 + m) }
  }
}
"""


def _routed_cases(tmp: Path) -> list[dict]:
    """Routes beyond the built-in at 4 ranks: `dualpipe` on 2 ranks (its copies' all-reduce on the
    case's own group) and copies on one rank (summed there), on the MLP."""
    import schedc
    from schedc.api import load_text
    from schedc.lower import lower_to_torch
    cases = []
    for name, program in (("dualpipe", schedc.load("dualpipe", {"P": 2, "M": 6})),
                          ("same_rank_copies", load_text(SAME_RANK_COPIES, "same_rank_copies.pp"))):
        assert program.routes and schedc.check(program).ok
        path = tmp / f"{name}_routes_program.py"
        path.write_text(lower_to_torch(program, verified="rendezvous").source)
        cases.append({"id": f"{name} P={program.num_ranks} M={program.num_microbatches} routes mlp", "kind": "schedc",
                      "ranks": program.num_ranks, "program": str(path), "model": "mlp"})
    return cases


def _spawn(cases: list[dict], R: int, tmp: Path) -> dict:
    """Run the cases in one launch of R ranks (a case on fewer ranks runs on the first ones); merge the
    ranks' results per case: the largest errors and time."""
    from schedc.runtime.launch import launch
    (tmp / "cases.json").write_text(json.dumps(cases))
    out, err = io.StringIO(), io.StringIO()
    done = launch([sys.executable, str(Path(__file__).resolve()), "--worker", str(tmp / "cases.json"), str(tmp)],
                  R, stdout=out, stderr=err, grace=5, deadline=WORKER_DEADLINE, cwd=str(ROOT))
    assert done.ok, f"ranks exited {done.returncodes}\n{out.getvalue()}\n{err.getvalue()}"
    merged: dict = {}
    for r in range(R):
        for case, result in json.loads((tmp / f"rank{r}.json").read_text()).items():
            entry = merged.setdefault(case, {"grad_err": 0.0, "loss_err": 0.0, "seconds": 0.0})
            if "error" in result:
                entry["error"] = f"rank {r}: {result['error']}"
                continue
            for key in ("grad_err", "loss_err", "seconds"):
                entry[key] = max(entry[key], result[key])
    return merged


def _assert_equal(results: dict, expected: list[dict]) -> None:
    results = {case: r for case, r in results.items() if case in {c["id"] for c in expected}}
    assert set(results) == {c["id"] for c in expected}
    bad = {case: r for case, r in results.items()
           if "error" in r or not (r["grad_err"] <= TOL and r["loss_err"] <= TOL)}
    assert not bad, json.dumps(bad, indent=1)


def _torch_cases(R: int, M: int, tmp: Path) -> list[dict]:
    """Every built-in that loads on R ranks, three ways into torch's runtime: our compute CSV, our
    comms CSV, and `schedc.torch.schedule`."""
    import schedc
    from schedc.interop.torch_csv import torch_cannot_run
    cases = []
    for name, program in _builtins(R, M):
        if torch_cannot_run(program):  # (dualpipe's routes: torch runs every microbatch through every stage)
            continue
        common = {"ranks": R, "stages": program.num_stages, "microbatches": M,
                  "placement": list(program.placement), "model": "mlp"}
        for level, fmt in (("compute", "compute_only"), ("comms", "compute_comms")):
            path = tmp / f"{name}_P{R}_{level}.csv"
            path.write_text(schedc.to_torch_csv(program, level), newline="")
            cases.append({"id": f"torch runs our {level} CSV of {name} (P={R}, M={M})", "kind": "torch-csv",
                          "csv": str(path), "format": fmt, **common})
        cases.append({"id": f"schedc.torch.schedule({name!r}) (P={R}, M={M})", "kind": "torch-api",
                      "source": name, **common})
    return cases


@pytest.fixture(scope="module")
def builtin_runs(tmp_path_factory):
    """Every case of the two tests below, run in one launch of 4 ranks: {ranks: cases}, results. More
    microbatches than ranks (M=3 on 2, M=8 on 4); as many as ranks, in the slow test after them."""
    tmp = tmp_path_factory.mktemp("builtins")
    cases = {2: _builtin_cases(2, (3,), tmp) + _torch_cases(2, 4, tmp),
             4: _builtin_cases(4, (8,), tmp, early=True) + _torch_cases(4, 8, tmp)}
    return cases, _spawn(cases[2] + cases[4], 4, tmp)


@pytest.fixture(scope="module")
def routed_runs(tmp_path_factory):
    """The routed cases alone, in a launch of their own (4 ranks, a few seconds: the default tier's
    run of the runtime; the built-ins' launch above, 15-20 s, is the slow tier's)."""
    tmp = tmp_path_factory.mktemp("routed")
    routed = _routed_cases(tmp)
    return routed, _spawn(routed, 4, tmp)


@pytest.mark.slow
def test_every_builtin_on_2_ranks_matches_unsplit_training_on_ours_and_torchs_runtime(builtin_runs):
    by_ranks, results = builtin_runs
    cases = by_ranks[2]
    assert {"gpipe", "1f1b", "interleaved_1f1b", "looped_bfs"} <= {Path(c["program"]).name.split("_P")[0]
                                                                   for c in cases if c["kind"] == "schedc"}
    assert len([c for c in cases if c["kind"] == "torch-api"]) == 9  # every built-in torch can run
    _assert_equal(results, cases)


@pytest.mark.slow
def test_every_builtin_on_4_ranks_matches_unsplit_training_on_ours_and_torchs_runtime(builtin_runs):
    by_ranks, results = builtin_runs
    cases = by_ranks[4]
    assert {"gpipe", "1f1b", "interleaved_1f1b", "looped_bfs"} <= {Path(c["program"]).name.split("_P")[0]
                                                                   for c in cases if c["kind"] == "schedc"}
    assert len([c for c in cases if c["kind"] == "torch-api"]) == 9  # every built-in but dualpipe
    assert any(c["id"].startswith("dualpipe P=4 M=8") for c in cases)  # routes, copies summed
    assert len([c for c in cases if c["id"].endswith("receives posted early")]) >= 7
    _assert_equal(results, cases)


def test_routes_on_2_ranks_and_copies_on_one_rank_match_unsplit_training(routed_runs):
    """DualPipe's copies summed over a group of two ranks, and copies of each model stage on one
    rank summed there: each copy ends the step with the unsplit model's gradient of its stage."""
    routed, results = routed_runs
    assert {c["id"].split()[0] for c in routed} == {"dualpipe", "same_rank_copies"}
    _assert_equal(results, routed)


@pytest.mark.slow  # 10-20 s: one more launch, beside the two tests above
def test_every_builtin_with_as_many_microbatches_as_ranks_or_one_more_matches_unsplit_training(tmp_path):
    cases = _builtin_cases(2, (2, 4), tmp_path) + _builtin_cases(4, (4,), tmp_path)
    assert {Path(c["program"]).name.split("_P")[0] for c in cases} >= {"gpipe", "1f1b", "zb_h1", "looped_bfs"}
    _assert_equal(_spawn(cases, 4, tmp_path), cases)


def _tied():
    """Shapes of graph the split backward must handle: a weight used twice, a parameter added to the
    output, one that gets no gradient, and a frozen one."""
    import torch
    from torch import nn

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)
            self.shift = nn.Parameter(torch.randn(6))
            self.unused = nn.Parameter(torch.randn(3))
            self.frozen = nn.Parameter(torch.randn(6), requires_grad=False)

        def forward(self, x):
            return self.lin(torch.tanh(self.lin(x))) * self.frozen + self.shift

    return Tied()


@pytest.mark.parametrize("make", ["tied", "mlp", "transformer"])
def test_split_backward_equals_one_backward(make):
    import torch

    from examples import mlp, transformer
    from schedc.runtime.backward import backward_input, backward_weight
    torch.manual_seed(0)
    build = {"tied": _tied, "mlp": lambda: mlp.build_stages([1], 3, width=8)[0],
             "transformer": lambda: transformer.build_stages([1], 3)[0]}[make]
    x = torch.randn(4, 8) if make == "mlp" else torch.randn(4, 6) if make == "tied" else torch.randn(2, 16, 32)
    split, whole = build().double(), build().double()
    whole.load_state_dict(split.state_dict())
    leaf, leaf2 = x.double().requires_grad_(), x.double().requires_grad_()
    out = split(leaf)
    g = torch.randn_like(out)
    params = [p for p in split.parameters() if p.requires_grad]
    gi, work = backward_input(out, g, leaf, params)
    assert all(p.grad is None for p in params)  # I leaves the weights alone
    backward_weight(work)
    whole(leaf2).backward(g)
    assert torch.allclose(gi, leaf2.grad, rtol=0, atol=1e-12)
    for p, q in zip(split.parameters(), whole.parameters()):
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            assert torch.allclose(p.grad, q.grad, rtol=0, atol=1e-12)


def test_the_watchdog_report_names_the_rank_the_action_and_its_partner():
    import torch

    import schedc
    from schedc.lower import lower_to_torch
    from schedc.runtime.interpreter import PipelineInterpreter
    from schedc.runtime.table import Instr
    from schedc.runtime.watchdog import Watchdog
    table = lower_to_torch(schedc.load("1f1b", {"P": 2, "M": 4})).table
    rank1 = PipelineInterpreter(table, 1, {1: torch.nn.Identity()}, None, group=object())
    rank1.train_step = 2
    x = next(x for x, st in enumerate(table.ranks[1]) if st[:4] == ("RECV_F", 1, 3, 0))
    report = Watchdog(5.0).report((0.0, rank1, x + 3, x, table.ranks[1][x], "recv", Instr("F", 1, 3)))
    lines = report.splitlines()
    assert lines[0].startswith("schedc watchdog: rank 1 waited ") and "(timeout 5 s) and stops the run" in lines[0]
    assert lines[1] == f"  rank 1, training step 2, at program step {x + 3} (F(1,3)):"
    assert lines[2] == (f"    F(1,3) waits for RECV_F(1,3) (posted at step {x}): the activation of F(0,3) from rank 0, "
                        "sent by rank 0's SEND_F(0,3) (its step 11)")
    assert lines[3].endswith("1F2 1RECV_F3 1B2 1SEND_B2 [1F3] 1B3 1SEND_B3")
    rank0 = PipelineInterpreter(table, 0, {0: torch.nn.Identity()}, None, group=object())
    y = next(y for y, st in enumerate(table.ranks[0]) if st[:4] == ("SEND_F", 0, 3, 1))
    assert rank0.waits_for(y, table.ranks[0][y], "send", None) == (
        f"waits for its SEND_F(0,3) (posted at step {y}), carrying the activation of F(0,3), to be received "
        f"by rank 1's RECV_F(1,3) (its step {x})")


BROKEN = """\
# 1F1B on two ranks with rank 0's gradient receive moved before the send of the activation it
# depends on: rank 0 waits for the gradient of microbatch 0, which rank 1 can only make from the
# activation rank 0 has not sent yet.
schedule broken {
  rank 0: 0F0 0RECV_B0 0B0 0SEND_F0
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
}
"""


@pytest.mark.slow
def test_a_deadlocking_schedule_run_without_verification_is_stopped_by_the_watchdog(tmp_path, run_cli,
                                                                                     monkeypatch):
    path = tmp_path / "broken.pp"
    path.write_text(BROKEN)
    code, out, err = run_cli("check", str(path))
    assert code == 1 and "deadlock" in out
    t0 = time.monotonic()
    ranks = _recording_launches(monkeypatch)
    code, out, err = run_cli("run", str(path), "--model", "examples.mlp:build_stages", "--nproc", "2",
                             "--steps", "1", "--timeout", "3", "--no-verify", "--batch-size", "4")
    elapsed = time.monotonic() - t0
    assert code == 1, (out, err)
    assert "schedc watchdog: rank 0" in err and "schedc watchdog: rank 1" in err, err
    assert "RECV_B(0,0)" in err and "RECV_F(1,0)" in err, err
    assert "training step 1" in err and "rank 1's SEND_B(1,0)" in err, err
    assert "exited" in err
    assert elapsed < 3 + 40, elapsed  # the timeout, plus starting two ranks on a busy machine
    assert len(ranks) == 2 and not _groups_left(ranks)  # no orphans


def _recording_launches(monkeypatch) -> list[int]:
    """The pids of the ranks schedc's launcher starts from now on (each leads its process group)."""
    import subprocess

    import schedc.runtime.launch
    pids: list[int] = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            pids.append(self.pid)
    monkeypatch.setattr(schedc.runtime.launch.subprocess, "Popen", Recorded)
    return pids


def _groups_left(pgids: list[int], settle: float = 30.0) -> list[int]:
    """The process groups of `pgids` that still hold a process (a rank, or anything it started),
    after at most `settle` seconds for the last ones to be reaped (it returns once none is left)."""
    def left(pgid: int) -> bool:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    end = time.monotonic() + settle
    while any(left(g) for g in pgids) and time.monotonic() < end:
        time.sleep(0.05)
    return [g for g in pgids if left(g)]


def test_a_model_that_cannot_be_imported_is_bad_input(run_cli):
    code, out, err = run_cli("run", "1f1b", "--param", "P=2", "--param", "M=2", "--model", "no_such_pkg.mod:fn",
                             "--steps", "1", "--timeout", "30")
    assert code == 2, (out, err)
    # found in the launching process, before any rank starts (schedc/runtime/model_spec.py)
    assert "cannot find no_such_pkg.mod: No module named 'no_such_pkg'" in err and err.count("\n") == 1, err


def test_schedc_run_trains_and_writes_the_profile(tmp_path, run_cli):
    profile = tmp_path / "profile.json"
    code, out, err = run_cli("run", "1f1b", "--param", "P=2", "--param", "M=4", "--model",
                             "examples.mlp:build_stages", "--nproc", "2", "--steps", "3", "--timeout", "60",
                             "--profile", str(profile))
    assert code == 0, (out, err)
    lines = [ln for ln in out.splitlines() if ln.startswith("step ")]
    assert [ln.split()[1] for ln in lines] == ["1/3", "2/3", "3/3"] and all(" ms " in ln and "loss" in ln for ln in lines)
    assert "median step time" in out
    assert f"schedc run: wrote the profile {profile} (" in err and f"--costs {profile}` times the run" in err
    data = json.loads(profile.read_text())
    assert set(data) == {"format", "version", "unit", "meta", "stages", "ranks", "messages", "spread", "activations"}
    assert set(data["activations"]) == {"0", "1"} and all(v > 0 for v in data["activations"].values())
    assert set(data["stages"]) == {"0", "1"} and all(set(v) == {"F", "I", "W", "B"} for v in data["stages"].values())
    assert all(v > 0 for st in data["stages"].values() for v in st.values())
    messages = data["messages"]
    assert messages["0"] == 8 * 512 * 4  # a microbatch (batch 8 x M, M = 4) of 512 float32
    # what communication cost in the run: posting overhead on both channels, and latency wherever a
    # receive had to wait for its data (no thresholds on the values: the machine may be loaded)
    assert set(messages) <= {"0", "latency", "overhead", "channels"} and messages["overhead"] > 0
    assert set(messages["channels"]) == {"0->1", "1->0"}
    assert all(ch["overhead"] > 0 and ch.get("latency", 0) >= 0 for ch in messages["channels"].values())
    meta = data["meta"]
    assert meta["ranks"] == 2 and meta["hosts"] == 1 and meta["cores"] >= 1
    assert meta["oversubscribed"] == (2 > meta["cores"]) and meta["messages_timed"] == 2 * 2 * 4  # 2 steps
    assert set(meta["time_per_step"]) == {"0", "1"}
    assert all(v["step"] >= v["compute"] > 0 for v in meta["time_per_step"].values())
    # each rank's own time per step of its program (neither compute, posting nor waiting)
    assert set(data["ranks"]) == {"0", "1"} and all(set(v) == {"dispatch"} for v in data["ranks"].values())
    assert all(0 <= v["dispatch"] < meta["time_per_step"][r]["step"] for r, v in data["ranks"].items())
    # how the times spread: per stage and time, per channel's posting overhead, factors of mean 1
    spread = data["spread"]
    assert set(spread["stages"]) == {"0", "1"} and all(set(v) == {"F", "I", "W", "B"} for v in spread["stages"].values())
    assert set(spread["overhead"]) == {"0->1", "1->0"}
    lists = [*spread["overhead"].values(), *(f for st in spread["stages"].values() for f in st.values())]
    assert all(1 <= len(f) <= 16 and sum(f) / len(f) == pytest.approx(1, abs=1e-3) for f in lists)
    # the simulator and the pictures read it as it is: the makespan is the one of the measured times
    # and message costs, and larger than under the measured times alone
    from dataclasses import replace

    import schedc
    from schedc.costs import load_costs
    from schedc.ir import StageCost
    from schedc.simulate import simulate
    program = schedc.load("1f1b", {"P": 2, "M": 4})
    measured = tuple(StageCost(**data["stages"][str(s)]) for s in range(2))
    free = simulate(replace(program, annotations=replace(program.annotations, stage_costs=measured))).makespan
    assert free != simulate(program).makespan
    costs = load_costs(str(profile))
    timed = costs.apply(program)
    links = costs.links(timed)
    assert set(links) == {(0, 1), (1, 0)} and all(link.overhead > 0 for link in links.values())
    expected = simulate(timed, links=links).makespan
    assert expected > free
    assert timed.annotations.rank_dispatch == tuple(data["ranks"][str(r)]["dispatch"] for r in range(2))
    undispatched = replace(timed, annotations=replace(timed.annotations, rank_dispatch=()))
    assert simulate(undispatched, links=links).makespan < expected  # the dispatch times are charged
    code, out, err = run_cli("sim", "1f1b", "--param", "P=2", "--param", "M=4", "--costs", str(profile), "--json")
    assert code == 0, err
    assert json.loads(out)["makespan"] == pytest.approx(expected, rel=1e-12)
    # sampled runs: seeded (the same figures twice), each drawn time between its spread's extremes
    sampled = []
    for _ in range(2):
        code, out, err = run_cli("sim", "1f1b", "--param", "P=2", "--param", "M=4", "--costs", str(profile),
                                 "--json", "--samples", "40", "--seed", "3")
        assert code == 0, err
        sampled.append(json.loads(out)["sampled"])
    assert sampled[0] == sampled[1] and sampled[0]["runs"] == 40 and sampled[0]["seed"] == 3
    assert sampled[0]["p10"] <= sampled[0]["p50"] <= sampled[0]["p90"]
    lo, hi = (min(min(f) for f in lists), max(max(f) for f in lists))
    assert lo * expected - 1e-9 <= sampled[0]["p10"] and sampled[0]["p90"] <= hi * expected + 1e-9
    old = tmp_path / "old.json"  # a profile as schedc wrote it before: stage times and sizes only
    old.write_text(json.dumps({"stages": data["stages"], "messages": {"0": messages["0"]}}))
    code, out, err = run_cli("sim", "1f1b", "--param", "P=2", "--param", "M=4", "--costs", str(old), "--json")
    assert code == 0 and json.loads(out)["makespan"] == pytest.approx(free, rel=1e-12), err
    svg = tmp_path / "measured.svg"
    code, out, err = run_cli("viz", "1f1b", "--param", "P=2", "--param", "M=4", "--costs", str(profile),
                             "-o", str(svg))
    assert code == 0, err
    assert f"makespan {expected:.4g} " in svg.read_text()


def test_the_compiled_program_runs_under_torchrun(tmp_path, run_cli):
    import subprocess
    code, _, _ = run_cli("compile", "gpipe", "--param", "P=2", "--param", "M=2", "-o", str(tmp_path))
    assert code == 0
    env = dict(os.environ, OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          str(tmp_path / "gpipe_program.py"), "--model", "examples.mlp:build_stages", "--steps", "1",
                          "--timeout", "60"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "step 1/1" in res.stdout and "loss" in res.stdout


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3]))
    sys.exit("usage: test_runtime.py --worker CASES.json OUTDIR")
