"""Pipeline x data parallel on schedc's runtime: 2 replicas of a 2-rank pipeline on four gloo processes.

Job rank d * P + p runs replica d's pipeline rank p on replica d's half of the global batch;
with routes (DualPipe) each replica sums its copies of a model stage on its own groups;
REDUCE_GRAD(s) averages stage s's gradients over its data-parallel group ({p, P + p}) where the
schedule puts it, and a stage the schedule never reduces is reduced by the runtime as the step ends.
Either way every replica ends the step with the gradients of the unsplit model trained on the global
batch (float64, within 1e-10). All cases run in one spawn of four ranks (spawning costs ~10 s here).
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from schedc.api import check, load, load_text  # noqa: E402
from schedc.lower import lower_to_torch  # noqa: E402
from schedc.passes.stage_ops import add_reduce_grad  # noqa: E402
from schedc.runtime.table import load_table, parts  # noqa: E402

WIDTH, STEPS, TIMEOUT = 8, 2, 30.0

EXPLICIT = """schedule dp_explicit(P = 2, M = 4) {
  stages P
  place loop
  replicas 2
  rank r, replica d { for m in 0 .. M { F(r, m) } for m in reversed(0 .. M) { B(r, m) } REDUCE_GRAD(r) }
}"""


def build_stages(stage_ids, num_stages):
    """Stage s: Linear(8, 8) + tanh, seeded by s (the same parameters on whichever rank builds it)."""
    out = []
    for s in stage_ids:
        torch.manual_seed(100 + s)
        out.append(torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()))
    return out


def loss_fn(output, target):
    return torch.nn.functional.mse_loss(output, target)


def make_batch(step, batch_size):
    gen = torch.Generator().manual_seed(1000 + step)
    return (torch.randn(batch_size, WIDTH, generator=gen, dtype=torch.float64),
            torch.randn(batch_size, WIDTH, generator=gen, dtype=torch.float64))


def _replicated(program, D=2):
    """One pipeline run as D identical replicas."""
    return replace(program, replicas=(program.ranks,) * (D - 1))


def _cases():
    one_f_one_b = _replicated(load("1f1b", {"P": 2, "M": 4}))  # no REDUCE_GRAD: the runtime adds it
    explicit = load_text(EXPLICIT, "dp_explicit.pp", "pp")
    # REDUCE_GRAD right after each stage's last backward, torch's placement: in mid-step on rank 0,
    # whose other stage still computes and messages are in flight
    interleaved = _replicated(add_reduce_grad(load("interleaved_1f1b", {"P": 2, "M": 4})))
    # DualPipe's two directions in each replica: each model stage's two copies summed in the replica,
    # then averaged over the replicas (the runtime adds the reductions as the step ends)
    dualpipe = _replicated(load("dualpipe", {"P": 2, "M": 4}))
    return {"1f1b": one_f_one_b, "explicit": explicit, "interleaved": interleaved, "dualpipe": dualpipe}


def _worker(job_path: str) -> int:
    """One rank: every case in one process group, gradients of each training step saved."""
    import datetime

    import torch.distributed as dist

    from schedc.runtime.entry import end_rank, make_copy_groups, make_dp_group, replica_share, split
    from schedc.runtime.interpreter import PipelineInterpreter
    from schedc.runtime.watchdog import Watchdog
    torch.set_num_threads(1)
    job = json.loads(Path(job_path).read_text())
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=TIMEOUT))
    out = {}
    for name, (meta, ranks) in job["cases"].items():
        table = load_table(meta, ranks)
        M, size = table.num_microbatches, job["batch_size"]
        mine = table.stages_of(rank)  # (with routes, each a copy of model stage `model_stage(s)`, built from it)
        modules = {s: m.double() for s, m in zip(mine, build_stages([table.model_stage(s) for s in mine],
                                                                    table.model_stages))}
        group = make_dp_group(table, rank, TIMEOUT)
        copies = make_copy_groups(table, rank, TIMEOUT)
        interp = PipelineInterpreter(table, rank, modules, loss_fn, watchdog=Watchdog(TIMEOUT), dp_group=group,
                                     copy_groups=copies)
        entry, exit = any(table.is_entry(s) for s in mine), any(table.is_exit(s) for s in mine)
        steps = []
        for step in range(STEPS):
            x, y = (replica_share(t, table, rank, size) for t in make_batch(step, size))
            losses = interp.step(split(x, M) if entry else None, split(y, M) if exit else None)
            steps.append({"grads": {s: [p.grad.clone() for p in modules[s].parameters()] for s in mine},
                          "losses": [loss.item() for loss in losses]})
            for m in modules.values():
                m.zero_grad(set_to_none=True)
        out[name] = steps
    torch.save(out, Path(job["out"], f"rank{rank}.pt"))
    dist.barrier()
    end_rank()


def _reference(S, x, y):
    modules = [m.double() for m in build_stages(list(range(S)), S)]
    h = x
    for m in modules:
        h = m(h)
    loss = loss_fn(h, y)
    loss.backward()
    return loss.item(), [[p.grad for p in m.parameters()] for m in modules]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Lower every case, run them all in one spawn of four ranks, and read back each rank's results."""
    from schedc.runtime.launch import launch
    tmp = tmp_path_factory.mktemp("dp")
    programs = _cases()
    cases, tables = {}, {}
    for name, program in programs.items():
        report = check(program)
        assert report.ok, report.render()
        lowered = lower_to_torch(program, verified="rendezvous")
        tables[name] = lowered.table
        cases[name] = lowered.table.to_data()
    batch_size = 2 * 4 * 2  # 2 replicas x 4 microbatches x 2 samples
    job = Path(tmp, "job.json")
    job.write_text(json.dumps({"cases": cases, "batch_size": batch_size, "out": str(tmp)}))
    here = str(Path(__file__).parent)
    code = f"import sys; sys.path.insert(0, {here!r}); import test_run_dp; sys.exit(test_run_dp._worker({str(job)!r}))"
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([here, *(p for p in sys.path if p)]))
    err = _Text()
    done = launch([sys.executable, "-c", code], 4, stdout=err, stderr=err, grace=5.0, env=env,
                  deadline=TIMEOUT * 2 + 60)
    assert done.ok, f"exit codes {list(done.returncodes)}\n{err.text}"
    results = [torch.load(Path(tmp, f"rank{r}.pt"), weights_only=True) for r in range(4)]
    return programs, tables, results, batch_size


class _Text:
    def __init__(self):
        self.text = ""

    def write(self, s):
        self.text += s

    def flush(self):
        pass


def test_the_lowered_table_carries_every_replica():
    program = load_text(EXPLICIT, "dp_explicit.pp", "pp")
    table = lower_to_torch(program).table
    assert (table.num_ranks, table.replicas, table.pipeline_ranks) == (4, 2, 2)
    assert table.dp_group(1) == table.dp_group(3) == (1, 3) and table.stages_of(3) == (1,)
    # messages stay inside a replica: replica 1's peers are its own ranks, 2 and 3
    assert {a.peer for r in (2, 3) for a in table.ranks[r] if a.peer is not None} == {2, 3}
    assert table.ranks[2][-1].op == "REDUCE_GRAD" and table.ranks[3][-1][:4] == ("REDUCE_GRAD", 1, None, None)
    meta, data = table.to_data()
    assert meta["replicas"] == 2 and load_table(meta, data) == table
    bad = [list(r) for r in data]
    bad[2] = [("SEND_F", 0, 0, 1) if st[0] == "SEND_F" else st for st in bad[2]]  # across replicas
    with pytest.raises(ValueError, match="talks to stage 1 on rank 3, not rank 1"):
        load_table(meta, bad)
    one = lower_to_torch(load("1f1b", {"P": 2, "M": 2})).table
    assert "replicas" not in one.to_data()[0] and one.replicas == 1  # one pipeline: the literal as before


@pytest.mark.parametrize("name", ["1f1b", "explicit", "interleaved", "dualpipe"])
def test_gradients_equal_unsplit_training_on_the_global_batch(runs, name):
    programs, tables, results, size = runs
    table = tables[name]
    L, P = table.model_stages, table.pipeline_ranks
    for step in range(STEPS):
        x, y = make_batch(step, size)
        ref_loss, ref = _reference(L, x, y)
        losses = {}  # replica -> its microbatches' losses
        for r in range(table.num_ranks):
            got = results[r][name][step]
            assert sorted(got["grads"]) == list(table.stages_of(r))
            for s, grads in got["grads"].items():  # (a copy of a model stage: that stage's whole gradient)
                for g, want in zip(grads, ref[table.model_stage(s)], strict=True):
                    assert (g - want).abs().max().item() < 1e-10, (name, step, r, s)
            losses.setdefault(table.replica_of(r), []).extend(got["losses"])
        assert sorted(losses) == list(range(table.replicas)) and all(len(v) == table.num_microbatches
                                                                    for v in losses.values())
        means = [sum(v) / len(v) for v in losses.values()]
        assert len(set(means)) == 2  # each replica its own half
        assert abs(sum(means) / len(means) - ref_loss) < 1e-10
    # 1f1b has no REDUCE_GRAD: the runtime averaged each stage's gradients as the step ended
    has_reduce = any(a.op == "REDUCE_GRAD" for steps in table.ranks for st in steps for a in parts(st))
    assert programs[name].dp == 2 and P == 2 and has_reduce == (name not in ("1f1b", "dualpipe"))
    assert bool(table.copies()) == (name == "dualpipe")
