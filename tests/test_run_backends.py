"""`schedc check --semantics gloo` held to what the runtime really does on gloo (issue 18, item 2).

Small programs (2-3 ranks, 2-3 microbatches) are made from the built-ins, lowered, with receives
moved earlier and sends later (so their verdict depends on the semantics) and, some, crossed
payloads; each is classed by `schedc.check(..., semantics="gloo")` and run on gloo by the runtime
`schedc run` uses: a program the checker passes trains to the gradients of the unsplit model; one it
calls deadlocked is stopped by the watchdog, on every rank the checker says is stuck and at that
step; one whose payloads cross trains to wrong gradients. One launch of 3 ranks runs every program,
each on a process group of its own: those that complete in sequence, the deadlocked ones side by side
(each waits out its watchdog). This file is also the worker (`--worker`).
"""
from __future__ import annotations

import io
import json
import os
import random
import sys
import time
from pathlib import Path

import pytest

from launched import run_cases, watchdog_places

ROOT = Path(__file__).resolve().parent.parent
WORLD = 3
# per wait: short where the checker says the run deadlocks (a deadlock costs about this much), long
# where it completes, so that a busy machine's slow wait is never taken for a hang
WATCHDOG_S = {"deadlock": 3.0, "completes": 120.0}
TOL = 1e-10
WRONG = 1e-6  # a crossed program's gradients are off by more than this
LAUNCH_DEADLINE = 150.0
# generated programs of each class; "ok, not rendezvous": ok under gloo, deadlocked under rendezvous
WANT = {"ok": 6, "ok, not rendezvous": 4, "deadlock": 5, "crossed": 4}
SEED = 18

PREFETCH = """schedule prefetch {
  rank 0: 0RECV_B0 0F0 0SEND_F0 0B0
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
}"""
TORCH_CSV = (  # issue 18: torch's runtime completes it on gloo; rendezvous calls it a deadlock
    "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0F2,0SEND_F2,0RECV_B1,0RECV_B2,0B1,0F3,0SEND_F3,0B2,"
    "0RECV_B3,0B3,0REDUCE_GRAD,0RESHARD\n"
    "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1RECV_F2,1B1,1SEND_B1,1F2,1RECV_F3,1B2,1SEND_B2,1F3,1B3,"
    "1SEND_B3,1REDUCE_GRAD,1RESHARD\n")


# ---- the worker (runs in each rank) ----
def _build(ids, S):
    from examples import mlp
    return mlp.build_stages(ids, S, width=16, depth=max(4, 2 * S))


def _run_case(case: dict, rank: int, group) -> dict:
    """Run one program on this rank in a thread; report how it ended: finished (with the largest
    gradient error against the unsplit model), stopped by the watchdog (its report), or failed."""
    import threading

    from examples import mlp
    from schedc.runtime.entry import split
    from schedc.runtime.interpreter import PipelineInterpreter
    from schedc.runtime.table import load_table
    from schedc.runtime.watchdog import Watchdog
    from schedc.testing import as_double, reference_gradients
    table = load_table(case["meta"], case["ranks"])
    S, M = table.num_stages, table.num_microbatches
    mine = table.stages_of(rank)
    modules = {s: m.double() for s, m in zip(mine, _build(list(mine), S))}
    limit = WATCHDOG_S["deadlock" if case["verdict"] == "deadlock" else "completes"]
    dog = Watchdog(limit, stream=io.StringIO(), exit=lambda code: None, rank=rank)
    interp = PipelineInterpreter(table, rank, modules, mlp.loss_fn, group=group, watchdog=dog)
    out: dict = {"grad_err": 0.0}

    def train():
        try:
            for step in range(case["steps"]):
                x, y = (as_double(t) for t in mlp.make_batch(step, 2 * M, width=16))
                interp.step(split(x, M) if 0 in mine else None, split(y, M) if S - 1 in mine else None)
                _, ref = reference_gradients(_build, mlp.loss_fn, S, x, y)
                for s in mine:
                    for p, (_, g) in zip(modules[s].parameters(), ref[s]):
                        out["grad_err"] = max(out["grad_err"], (p.grad - g).abs().max().item())
                    modules[s].zero_grad(set_to_none=True)
            out["end"] = "finished"
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            out["end"], out["error"] = "failed", f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=train, daemon=True)  # a deadlocked one never returns: left behind
    thread.start()
    deadline = time.monotonic() + 10 * limit + 30
    while thread.is_alive() and dog.fired is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if dog.fired is not None:
        out = {"end": "watchdog", "report": dog.fired}
    elif thread.is_alive():
        out = {"end": "hung", "grad_err": None}
    else:
        dog.close()
    return out


def _worker(cases_path: str, out_dir: str) -> int:
    os.environ["OMP_NUM_THREADS"] = "1"
    sys.path.insert(0, str(ROOT))
    import datetime
    import threading

    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    import schedc.runtime.interpreter  # noqa: F401 - warm up (imports, autograd), so no wait below counts it
    from examples import mlp
    model = _build([0], 1)[0].double()
    mlp.loss_fn(model(torch.zeros(2, 16, dtype=torch.float64)), torch.zeros(2, 16, dtype=torch.float64)).backward()
    dist.barrier()
    cases = json.loads(Path(cases_path).read_text())
    # a process group of its own for each program (a stuck one is left behind), made on every rank in
    # the same order before any program runs
    groups = [dist.new_group(list(range(case["meta"]["ranks"])), timeout=datetime.timedelta(seconds=120))
              for case in cases]
    results = {}

    def run(case, group):
        t0 = time.perf_counter()
        results[case["id"]] = {**_run_case(case, rank, group), "seconds": time.perf_counter() - t0}

    # programs that complete run one at a time; the deadlocked ones, which each wait for their watchdog,
    # run side by side (each on its own group, with its own watchdog), so their waits overlap
    # (a deadlocked program's ranks compare no gradients, so building its stages side by side, each
    # seeding torch's one generator, changes nothing the test reads)
    for case, group in zip(cases, groups):
        if case["verdict"] != "deadlock":
            if rank < case["meta"]["ranks"]:
                run(case, group)
            dist.barrier()
    stuck = [threading.Thread(target=run, args=(case, group)) for case, group in zip(cases, groups)
             if case["verdict"] == "deadlock" and rank < case["meta"]["ranks"]]
    for thread in stuck:
        thread.start()
    for thread in stuck:
        thread.join()
    dist.barrier()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # threads of deadlocked programs still wait on their groups


# ---- the cases (parent side) ----
def _bases():
    import schedc
    from schedc.errors import SchedcError
    from schedc.passes import lower
    from schedc.resources import builtin_schedules
    for name in builtin_schedules():
        for P in (2, 3):
            for M in (2, 3):
                try:
                    program = schedc.load(name, {"P": P, "M": M, "V": 2}, strict_params=False)
                except SchedcError:
                    continue
                if program.num_ranks == P:
                    yield f"{name} P={P} M={M}", lower(program)


def _perturbed(rng: random.Random, program, cross: bool):
    """Receives moved earlier and sends later, each on the legal side of the step that needs or makes
    its value (tests/test_backends.py's `posted_early_or_late`); with `cross`, also a later receive of
    one kind moved before an earlier one on its rank, so two payloads may cross."""
    from schedc.ir import Op, format_step
    ranks = [list(steps) for steps in program.ranks]
    said = []
    for _ in range(rng.randint(1, 6)):
        r = rng.randrange(len(ranks))
        comm = [i for i, st in enumerate(ranks[r]) if st.parts[0].op.is_comm]
        if not comm:
            continue
        i = rng.choice(comm)
        st = ranks[r].pop(i)
        j = rng.randint(0, i) if st.parts[0].op in (Op.RECV_F, Op.RECV_B) else rng.randint(i, len(ranks[r]))
        ranks[r].insert(j, st)
        said.append(f"{format_step(st)} on rank {r}: {i} -> {j}")
    if cross:
        r = rng.randrange(len(ranks))
        kinds: dict = {}
        for i, st in enumerate(ranks[r]):
            if len(st.parts) == 1 and st.parts[0].op in (Op.RECV_F, Op.RECV_B):
                kinds.setdefault(st.parts[0].op, []).append(i)
        pairs = [v for v in kinds.values() if len(v) >= 2]
        if pairs:
            a, b = sorted(rng.sample(rng.choice(pairs), 2))
            st = ranks[r].pop(b)
            ranks[r].insert(a, st)
            said.append(f"{format_step(st)} on rank {r}: {b} -> {a} (crossing)")
    return program.with_ranks(ranks), "; ".join(said)


def _verdict(program) -> str | None:
    """The checker's class under gloo: ok, deadlock, crossed (payloads cross, no deadlock), or None."""
    import schedc
    report = schedc.check(program, semantics="gloo")
    codes = {d.code for d in report.errors}
    if report.ok:
        return "ok"
    if codes == {"deadlock"} and not report.mismatches:
        return "deadlock"
    if report.mismatches and report.deadlock is None and codes <= {"mismatch"}:
        return "crossed"
    return None


def _cases(tmp: Path) -> list[dict]:
    import schedc
    from conftest import compile_text
    from schedc.lower import lower_to_torch
    from test_differential import gloo_sample
    from test_stuck_ranks import ENDS_GLOO
    fixed = [("prefetch (issue 18)", compile_text(PREFETCH))]
    (tmp / "torch.csv").write_text(TORCH_CSV)
    fixed.append(("torch's CSV (issue 18)", schedc.load(str(tmp / "torch.csv"))))
    fixed += [(f"tests/test_differential.py's gloo sample: {what}", program)  # its runs, in this launch
              for what, program in gloo_sample().items()]
    fixed.append(("ends (issue 30)", compile_text(ENDS_GLOO)))  # rank 0 hangs at the end of the step
    picked = [(name, program, "fixed") for name, program in fixed]
    bases = list(_bases())
    rng = random.Random(SEED)
    counts = dict.fromkeys(WANT, 0)
    for _ in range(2000):
        if counts == WANT:
            break
        name, base = rng.choice(bases)
        program, label = _perturbed(rng, base, cross=rng.random() < 0.3)
        verdict = _verdict(program)
        if verdict == "ok" and schedc.check(program).deadlock is not None:
            verdict = "ok, not rendezvous"
        if verdict is not None and counts[verdict] < WANT[verdict]:
            counts[verdict] += 1
            picked.append((f"{name}: {label}", program, verdict))
    assert counts == WANT, counts
    cases = []
    for name, program, origin in picked:
        verdict = _verdict(program)
        meta, ranks = lower_to_torch(program).table.to_data()
        stuck = {}
        if verdict == "deadlock":
            stuck = watchdog_places(schedc.check(program, semantics="gloo").deadlock)
        cases.append({"id": name, "verdict": verdict, "origin": origin, "meta": meta, "ranks": ranks, "stuck": stuck,
                      "steps": 2 if verdict == "ok" else 1,
                      "rendezvous_deadlock": schedc.check(program).deadlock is not None})
    return cases


@pytest.mark.slow
def test_the_gloo_verdict_is_what_the_runtime_does_on_gloo(tmp_path):
    cases = _cases(tmp_path)
    # issue 18's two programs, and test_differential's sample (moved, every receive first, every send last)
    assert [(c["verdict"], c["rendezvous_deadlock"]) for c in cases[:5]] == [
        ("ok", True), ("ok", True), ("ok", False), ("ok", True), ("deadlock", True)]
    # programs only a posted runtime completes (rendezvous calls them deadlocked) are among them
    assert sum(c["verdict"] == "ok" and c["rendezvous_deadlock"] for c in cases) == 3 + WANT["ok, not rendezvous"]
    assert cases[5]["stuck"]["0"] == "the end of its program"  # issue 30: named where the runtime hangs it
    assert {c["meta"]["ranks"] for c in cases} == {2, 3}
    results = run_cases(__file__, cases, tmp_path, WORLD, deadline=LAUNCH_DEADLINE)
    wrong = []
    for case in cases:
        ends = {r: results[r][case["id"]] for r in range(case["meta"]["ranks"])}
        verdict = case["verdict"]
        if verdict == "ok":
            bad = {r: e for r, e in ends.items() if e["end"] != "finished" or not e["grad_err"] <= TOL}
        elif verdict == "crossed":  # completes, and some gradient is wrong (or a shape error is raised)
            bad = {} if (all(e["end"] in ("finished", "failed") for e in ends.values())
                         and any(e["end"] == "failed" or e["grad_err"] > WRONG for e in ends.values())) else ends
        else:  # every rank the checker calls stuck is stopped by the watchdog there; the others finish
            bad = {}
            for r, e in ends.items():
                place = case["stuck"].get(str(r))
                ok = e["end"] == "finished" if place is None else e["end"] == "watchdog" and place in e["report"]
                if not ok:
                    bad[r] = e
        if bad:
            wrong.append(f"{case['id']} (checker: {verdict}): {json.dumps(bad)}")
    assert not wrong, "\n".join(wrong)


def test_learning_a_shape_leaves_the_model_and_the_random_state_as_they_were():
    """Before the first step each stage runs once on zeros to learn its output's shape: no gradient,
    and a BatchNorm's statistics and the random stream a Dropout draws from are restored."""
    import torch

    import schedc
    from schedc.lower import lower_to_torch
    from schedc.runtime.interpreter import PipelineInterpreter
    table = lower_to_torch(schedc.load("1f1b", {"P": 2, "M": 2})).table
    torch.manual_seed(0)
    stage = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.Dropout(0.5))
    before = {k: v.clone() for k, v in stage.state_dict().items()}
    x = torch.randn(3, 4)
    rng = torch.get_rng_state()
    interp = PipelineInterpreter(table, 0, {0: stage}, None, group=object())
    y = interp._dry_forward(0, x)
    assert y.shape == (3, 6) and not y.requires_grad and all(p.grad is None for p in stage.parameters())
    assert all(torch.equal(v, stage.state_dict()[k]) for k, v in before.items())
    assert torch.equal(torch.get_rng_state(), rng)
    pair = PipelineInterpreter(table, 0, {0: _Pair()}, None, group=object())
    with pytest.raises(Exception, match="stage 0 returned tuple; a stage must return one tensor"):
        pair._dry_forward(0, torch.zeros(2))


def _Pair():
    """A stage that returns two tensors."""
    import torch

    class Pair(torch.nn.Module):
        def forward(self, x):
            return x, x
    return Pair()


def test_run_refuses_a_verdict_that_does_not_hold_on_its_backend(tmp_path, run_cli):
    """Before any rank starts: a verdict under gloo, eager or bounded:K says nothing of NCCL."""
    path = tmp_path / "prefetch.pp"
    path.write_text(PREFETCH)
    for semantics in ("gloo", "eager", "bounded:2"):
        code, out, err = run_cli("run", str(path), "--model", "examples.mlp:build_stages", "--backend", "nccl",
                                 "--semantics", semantics)
        assert code == 2, (out, err)
        assert f"--semantics {semantics} with --backend nccl: a program that completes under {semantics} can " \
               "hang on nccl" in err, err
    code, out, err = run_cli("run", str(path), "--model", "examples.mlp:build_stages", "--print-torchrun",
                             "-o", str(tmp_path))  # rendezvous refuses it, and says what gloo makes of it
    assert code == 1 and "under gloo it completes" in err


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3]))
    sys.exit("usage: test_run_backends.py --worker CASES.json OUTDIR")
