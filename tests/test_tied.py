"""Tied weights in schedc's runtime: REDUCE_TIED sums the gradients of the weight the first and the
last stage share (examples/tied.py: a transformer whose vocabulary head is its token embedding).

One launch of two gloo ranks runs each program: 1F1B with the ends on two ranks (an all-reduce
between them), ZB-V with both ends on rank 0 (a sum on that rank), and 1F1B without REDUCE_TIED.
With it every gradient is the unsplit tied model's (the two copies' gradients summed); without it
the copies keep their own halves, so the verdict is about the schedule, not luck.
"""
from __future__ import annotations

import sys
from pathlib import Path

import schedc
from schedc.ir import Action, Op

import launched
from conftest import compile_text

ROOT = Path(__file__).resolve().parent.parent
TOL = 1e-10

ONE_F_ONE_B_TIED = """schedule tied(P = 2, M = 2) {
  rank 0: 0F0 0F1 0B0 0B1 0REDUCE_TIED
  rank 1: 1F0 1B0 1F1 1B1 1REDUCE_TIED
}"""


def _worker(cases_path: str, out_dir: str) -> int:
    rank, world, cases = launched.join(cases_path)
    import torch.distributed as dist

    from examples import tied
    from schedc.runtime.entry import split
    from schedc.runtime.interpreter import PipelineInterpreter
    from schedc.runtime.table import load_table
    from schedc.testing import as_double, reference_gradients
    results = {}
    for case in cases:
        table = load_table(case["meta"], case["ranks"])
        S, M = table.num_stages, table.num_microbatches
        ends = sorted({table.placement[0], table.placement[S - 1]})
        group = dist.new_group(ends, timeout=launched.TIMEOUT) if len(ends) == 2 else None
        mine = table.stages_of(rank)
        modules = {s: m.double() for s, m in zip(mine, tied.build_stages(list(mine), S))}
        ties = {s: tied.tied_parameters(modules[s], s, S) for s in (0, S - 1) if s in modules}
        interp = PipelineInterpreter(table, rank, modules, tied.loss_fn, tied=ties, tied_group=group)
        x, y = (as_double(t) for t in tied.make_batch(0, 2 * M))
        interp.step(split(x, M) if 0 in mine else None, split(y, M) if S - 1 in mine else None)
        _, ref = reference_gradients(tied.build_stages, tied.loss_fn, S, x, y)
        # the tied model's gradient of its one shared weight: the two copies' gradients summed
        shared = dict(ref[0])["0.tok.weight"] + next(g for n, g in ref[S - 1] if n.endswith(".out.weight"))
        errors = {}
        for s in mine:
            for (name, g), p in zip(ref[s], modules[s].parameters()):
                is_tied = (s == 0 and name == "0.tok.weight") or (s == S - 1 and name.endswith(".out.weight"))
                errors[f"{s}:{name}"] = [(p.grad - (shared if is_tied else g)).abs().max().item(), is_tied]
        results[case["id"]] = errors
        dist.barrier()
    launched.finish(out_dir, rank, results)


def test_reduce_tied_gives_every_copy_the_tied_models_gradient(tmp_path):
    from schedc.lower import lower_to_torch
    from schedc.passes import lower
    zbv = lower(schedc.load("zbv", {"P": 2, "M": 2}))
    zbv = zbv.with_ranks([list(zbv.ranks[0]) + [Action(Op.REDUCE_TIED, 0)], zbv.ranks[1]])
    programs = {"1f1b, ends on two ranks": compile_text(ONE_F_ONE_B_TIED),
                "zbv, both ends on rank 0": zbv,
                "1f1b without REDUCE_TIED": compile_text(ONE_F_ONE_B_TIED.replace(" 0REDUCE_TIED", "")
                                                         .replace(" 1REDUCE_TIED", ""))}
    cases = []
    for name, p in programs.items():
        assert schedc.check(p).ok, schedc.check(p).render()
        meta, ranks = lower_to_torch(p).table.to_data()
        cases.append({"id": name, "meta": meta, "ranks": ranks})
    results = launched.run_cases(__file__, cases, tmp_path, 2)
    for name in programs:
        errors = {k: v for r in range(2) for k, v in results[r][name].items()}
        untied = [e for e, is_tied in errors.values() if not is_tied]
        tied_errors = [e for e, is_tied in errors.values() if is_tied]
        assert untied and max(untied) <= TOL and len(tied_errors) == 2, (name, errors)
        if "without" in name:  # each copy kept its own half of the gradient
            assert min(tied_errors) > 1e-6, (name, errors)
        else:
            assert max(tied_errors) <= TOL, (name, errors)

if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3]))
    sys.exit("usage: test_tied.py --worker CASES.json OUTDIR")
