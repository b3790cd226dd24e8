"""Data-parallel jobs on schedc's own runtime (gloo), against the unsplit model's gradients: how a
step's reductions combine (rules/reductions.py) held to what really trains.

One launch of four gloo ranks (two replicas of a two-rank pipeline) runs every case for one step:
- the orders `check` refuses as `reduce-order` or `duplicate` (the tied weight's ends averaged on
  different sides of REDUCE_TIED, one copy of a routed stage averaged before the copies' sum, a
  second REDUCE_TIED) train to wrong gradients, and their consistent variants, which `check`
  clears, train exactly: the rule is neither vacuous nor too wide;
- generated jobs (tests/test_differential_jobs.py's `jobs`: lowered built-ins with reductions,
  FSDP gathers, the tied all-reduce, explicit waits and groups drawn in, replicas that may differ)
  that `check` clears under gloo train exactly.
This file is also the worker: `python tests/test_runtime_jobs.py --worker CASES.json OUTDIR`.
"""
from __future__ import annotations

import sys
from pathlib import Path

from dataclasses import replace

import pytest
from hypothesis import strategies as st

from schedc.ir import Action, Op, Program

import launched

ROOT = Path(__file__).resolve().parent.parent
WIDTH, TOL = 6, 1e-10
WORLD = 4  # two replicas of a two-rank pipeline

# the tied weight's two ends (stages 0 and 1, one a rank) with the data-parallel average of each
# before (RG first) or after (RT first) the tied all-reduce; `-` leaves it to the step's end
TIED = """schedule tied(P = 2, M = 2) {{
  stages P
  place loop
  replicas 2
  rank 0: 0F0 0F1 0B1 0B0 {rank0}
  rank 1: 1F0 1B0 1F1 1B1 {rank1}
}}
"""
ORDERS = {"0REDUCE_GRAD 0REDUCE_TIED": "before", "0REDUCE_TIED 0REDUCE_GRAD": "after", "0REDUCE_TIED": "after",
          "1REDUCE_GRAD 1REDUCE_TIED": "before", "1REDUCE_TIED 1REDUCE_GRAD": "after", "1REDUCE_TIED": "after"}
# both ends on rank 0 (V placement): stage 3 averaged before the tied sum, stage 0 as the step ends
V_TIED = """schedule v_tied(P = 2, M = 2) {{
  stages 2 * P
  place vshape
  replicas 2
  rank r {{
    for m in 0 .. M {{ F(r, m) }}
    for m in 0 .. M {{ F(2 * P - 1 - r, m) }}
    for m in 0 .. M {{ B(2 * P - 1 - r, m) }}
    if r == 0 {{ {early} }}
    for m in 0 .. M {{ B(r, m) }}
    if r == 0 {{ REDUCE_TIED(0) }}
  }}
}}
"""
# DualPipe's P=2, M=4 lists: stages 0 and 2 run copies of the model's stage 0 (on ranks 0 and 1)
ROUTED = """schedule routed {{
  stages 4
  place vshape
  replicas 2
  route microbatches 0 .. 2: stages 0 .. 2
  route microbatches 2 .. 4: stages 2 .. 4
  rank 0: 0F0 3F2 0F1 3B2 (3F3;0B0)OVERLAP_F_B 3B3 0I1 0W1 {rank0}
  rank 1: 2F2 1F0 2F3 1B0 (1F1;2B2)OVERLAP_F_B 1B1 2I3 2W3 {rank1}
}}
"""


@st.composite
def tied_jobs(draw) -> Program:
    """Two replicas of a lowered two-rank built-in whose ranks end with the tied all-reduce and
    some of their stages' REDUCE_GRADs in a drawn order (consistent or not), waits and groups drawn
    in; the second replica the same or drawn afresh."""
    from test_differential_jobs import BASES, _with_waits_and_groups
    base = draw(st.sampled_from([b for b in BASES if b.num_ranks == 2]))
    S = base.num_stages

    def pipeline() -> tuple:
        ranks = [list(steps) for steps in base.ranks]
        for p, steps in enumerate(ranks):
            here = [s for s in range(S) if base.placement[s] == p]
            tail = [Action(Op.REDUCE_TIED, s) for s in (0, S - 1) if s in here]
            tail += [Action(Op.REDUCE_GRAD, s) for s in here if draw(st.booleans())]
            steps += draw(st.permutations(tail))
            _with_waits_and_groups(draw, steps)
        return tuple(tuple(steps) for steps in ranks)

    first = pipeline()
    return replace(base, name="tied_job", ranks=first, replicas=(first if draw(st.booleans()) else pipeline(),))


def _hand_written() -> list[tuple[str, str, str | None]]:
    """(name, text, the finding `check` must make or None): each order and its consistent variants."""
    out = []
    for rank0, side0 in ORDERS.items():
        if not rank0.startswith("0"):
            continue
        for rank1, side1 in ORDERS.items():
            if rank1.startswith("1"):
                out.append((f"tied [{rank0}] [{rank1}]", TIED.format(rank0=rank0, rank1=rank1),
                            None if side0 == side1 else "reduce-order"))
    out.append(("tied, REDUCE_TIED twice", TIED.format(rank0="0REDUCE_TIED 0REDUCE_TIED",
                                                       rank1="1REDUCE_TIED 1REDUCE_TIED"), "duplicate"))
    out.append(("V: stage 3 averaged before the tied sum", V_TIED.format(early="REDUCE_GRAD(2 * P - 1)"),
                "reduce-order"))
    out.append(("V: both ends averaged after it", V_TIED.format(early=""), None))
    out.append(("routes: one copy averaged", ROUTED.format(rank0="0REDUCE_GRAD", rank1=""), "reduce-order"))
    out.append(("routes: every copy averaged", ROUTED.format(rank0="0REDUCE_GRAD 3REDUCE_GRAD",
                                                             rank1="2REDUCE_GRAD 1REDUCE_GRAD"), None))
    out.append(("routes: none averaged", ROUTED.format(rank0="", rank1=""), None))
    return out


# ---- the model: a Linear + Tanh per stage, the last stage's weight tied to the first's ----
def build_stages(stage_ids, num_stages):
    import torch
    out = []
    for s in stage_ids:
        torch.manual_seed(100 + s)
        module = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh())
        if s == num_stages - 1 and num_stages > 1:  # the tied weight starts as stage 0's
            torch.manual_seed(100)
            module[0].weight.data.copy_(torch.nn.Linear(WIDTH, WIDTH).weight.data)
        out.append(module.double())
    return out


def loss_fn(output, target):
    import torch
    return torch.nn.functional.mse_loss(output, target)


def make_batch(step: int, size: int):
    import torch
    g = torch.Generator().manual_seed(1000 + step)
    return (torch.randn(size, WIDTH, generator=g, dtype=torch.float64),
            torch.randn(size, WIDTH, generator=g, dtype=torch.float64))


def _run(case: dict, rank: int) -> dict:
    """One training step of the case's table on this rank: the largest gradient error against the
    unsplit model (a tied weight's gradient: both ends' summed, when the schedule sums them)."""
    from schedc.runtime.entry import make_copy_groups, make_dp_group, make_tied_group, replica_share, same_copies, split
    from schedc.runtime.interpreter import PipelineInterpreter
    from schedc.runtime.table import load_table
    from schedc.runtime.watchdog import Watchdog
    from schedc.testing import reference_gradients
    table = load_table(case["meta"], case["ranks"])
    L, M, S = table.model_stages, table.num_microbatches, table.num_stages
    mine = table.stages_of(rank)
    modules = {s: m for s, m in zip(mine, build_stages([table.model_stage(s) for s in mine], L))}
    copies = make_copy_groups(table, rank, 30)
    same_copies(modules, table, rank, copies)
    tied = {s: [modules[s][0].weight] for s in (0, S - 1) if s in modules} if case["tied"] else {}
    interp = PipelineInterpreter(table, rank, modules, loss_fn, watchdog=Watchdog(20.0),
                                 dp_group=make_dp_group(table, rank, 30), tied=tied,
                                 tied_group=make_tied_group(table, rank, 30) if case["tied"] else None,
                                 copy_groups=copies)
    size = 2 * M * table.replicas
    x, y = make_batch(0, size)
    entry, ends = any(table.is_entry(s) for s in mine), any(table.is_exit(s) for s in mine)
    try:
        interp.step(split(replica_share(x, table, rank, size), M) if entry else None,
                    split(replica_share(y, table, rank, size), M) if ends else None)
    except Exception as exc:  # (the runtime's own refusal: a wrong case may stop so)
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    _, ref = reference_gradients(build_stages, loss_fn, L, x, y)
    want = [[g for _, g in grads] for grads in ref]
    if case["tied"] and L > 1:
        want[0][0] = want[L - 1][0] = want[0][0] + want[L - 1][0]
    worst = 0.0
    for s in mine:
        for p, g in zip(modules[s].parameters(), want[table.model_stage(s)]):
            worst = max(worst, float("inf") if p.grad is None else (p.grad - g).abs().max().item())
    return {"grad_err": worst}


def _worker(cases_path: str, out_dir: str) -> int:
    import torch.distributed as dist
    rank, _, cases = launched.join(cases_path)
    results = {}
    for case in cases:
        results[case["id"]] = _run(case, rank)
        dist.barrier()
    launched.finish(out_dir, rank, results)
    return 0


def _case(name: str, program, tmp: Path) -> dict:
    from schedc.ir import Op
    from schedc.lower import lower_to_torch
    meta, ranks = lower_to_torch(program, receives="needed").table.to_data()
    tied = any(a.op is Op.REDUCE_TIED for ranks in (program.ranks, *program.replicas) for steps in ranks
               for st in steps for a in st.parts)
    return {"id": name, "meta": meta, "ranks": ranks, "tied": tied}


def _errors(results: dict[int, dict], name: str) -> float:
    """The case's largest gradient error over the ranks (inf where a rank stopped)."""
    return max(float("inf") if "error" in r[name] else r[name]["grad_err"] for r in results.values())


@pytest.mark.slow  # (one 4-rank launch over every case: about 10 s beside a CPU burner)
def test_reductions_combined_as_check_says_train_exactly_and_the_rest_do_not(tmp_path):
    pytest.importorskip("torch")
    import schedc
    from conftest import compile_text
    from test_differential_jobs import BASES, jobs
    from test_torch_losses import _generated
    cases, expect = [], {}
    for name, text, finding in _hand_written():
        program = compile_text(text)
        report = schedc.check(program, semantics="gloo")
        assert [e.code for e in report.errors][:1] == ([finding] if finding else []), (name, report.render())
        cases.append(_case(name, program, tmp_path))
        expect[name] = finding is None
    sample = _generated(jobs([b for b in BASES if b.num_ranks == 2], (1, 1)),
                        lambda p: schedc.check(p, semantics="gloo").ok is True, 400, 20261207)
    assert len(sample) >= 25
    for k, program in enumerate(sample):
        cases.append(_case(f"generated job {k}", program, tmp_path))
        expect[f"generated job {k}"] = True
    def codes(program: Program) -> set[str]:
        return {e.code for e in schedc.check(program, semantics="gloo").errors}

    # tied jobs: cleared, or refused for the order of their reductions alone
    tied = [(p, codes(p)) for p in _generated(tied_jobs(), lambda p: codes(p) <= {"reduce-order"}, 250, 61207)]
    assert sum(not found for _, found in tied) >= 10 and sum(bool(found) for _, found in tied) >= 8
    for k, (program, found) in enumerate(tied):
        cases.append(_case(f"tied job {k}", program, tmp_path))
        expect[f"tied job {k}"] = not found
    results = launched.run_cases(__file__, cases, tmp_path, WORLD, deadline=240)
    disagree = {name: _errors(results, name) for name, exact in expect.items()
                if exact != (_errors(results, name) <= TOL)}
    assert not disagree, disagree  # clears: the unsplit gradients; refused: wrong (or the runtime stops)


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    sys.exit(_worker(sys.argv[2], sys.argv[3]))
