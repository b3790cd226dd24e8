"""The torch bridge: a verified schedc schedule as torch's own `_PipelineScheduleRuntime`.

`schedule(source, stages, n_microbatches, loss_fn)` loads a built-in, a .pp or a PyTorch .csv,
refuses it unless `schedc check` passes, lowers it as torch's own lowering does (UNSHARD / RESHARD,
REDUCE_GRAD, then SEND / RECV) and returns torch's schedule object with those actions loaded, so
`schedule.step(...)` trains with torch's defaults. torch is imported only when it is called.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from .errors import Diagnostic, SchedcError
from .ir import Program, describe, format_step


def schedule(source: str | Program, stages: Sequence[Any], n_microbatches: int,
             loss_fn: Callable | None = None, *, scale_grads: bool = True, fmt: str | None = None,
             notation: str = "current", semantics: str = "rendezvous", **params: int):
    """torch's `_PipelineScheduleRuntime` for `stages` (this rank's `PipelineStage`s) running `source`.

    `source` is a built-in name, a .pp, .csv or .json path, or a `Program`; `params` are the
    schedule's parameters (`P`, `V`, `M` default to the pipeline group's size, the stages per rank
    and `n_microbatches` when the schedule declares them). `scale_grads`, as in torch: gradients
    are divided by `n_microbatches` (a loss that averages over the batch trains as unsplit).
    Raises `SchedcError` if the schedule fails `schedc check` or does not fit the stages.
    """
    from .api import check_notation
    check_notation(notation)  # (before torch is imported: a bad argument is told at once)
    from torch.distributed.pipelining.schedules import _Action, _PipelineScheduleRuntime

    from .interop.torch_csv import to_torch_csv, torch_cannot_run
    if not stages:
        raise SchedcError("usage", "schedc.torch.schedule needs this rank's pipeline stages; got none")
    _no_ddp(stages)  # (a property of the stages alone: before the schedule is read and checked)
    if isinstance(source, Program) and params:
        raise SchedcError("usage", f"parameters {', '.join(params)} given with a compiled Program; "
                          "they apply to a schedule's source")
    program = source if isinstance(source, Program) else _load(source, stages, n_microbatches, fmt, notation, params)
    _fits(program, stages, n_microbatches)
    why = torch_cannot_run(program)
    if why is not None:
        raise SchedcError("usage", why)
    if program.forward_only:  # (torch's runtime asserts "Invalid backward microbatches" on one)
        raise SchedcError("usage", f"{program.name} is forward only; torch's _PipelineScheduleRuntime runs "
                          "training schedules (it refuses an action list without backwards): run inference with "
                          "`schedc run`, or with torch's own schedule's eval()")
    _verified(program, semantics)
    rows = to_torch_csv(program.replica(0), "comms", verified=semantics).rows  # (identical replicas: each runs this)
    _gathers_in_order(program, rows, stages)
    runtime = _PipelineScheduleRuntime(list(stages), n_microbatches, loss_fn=loss_fn, scale_grads=scale_grads)
    actions = {rank: [_Action.from_str(format_step(cell)) for cell in row] for rank, row in enumerate(rows)}
    runtime._prepare_schedule_with_comms(actions, format="compute_comms")
    return runtime


def _gathers_in_order(program: Program, rows, stages) -> None:
    """Refuse what torch's runtime would assert on for this rank's stages under FSDP: each one's
    UNSHARD, computations and RESHARD in order, step after step; and what it would train wrong: an
    I after a forward with no UNSHARD between, on a stage whose FSDP modules nest
    (schedc/rules/sharding.py)."""
    from torch.distributed.fsdp import FSDPModule

    from .rules.sharding import breaks, regathered
    fsdp = [stage.stage_index for stage in stages if isinstance(stage.submod, FSDPModule)]
    nested = [stage.stage_index for stage in stages if _reshards_inside(stage.submod, FSDPModule)]
    stops = ("torch's runtime would stop at this action (a schedule written at the compute level gets UNSHARD "
             "and RESHARD where torch's own lowering puts them)")
    wrong = "torch's runtime would run on and train to wrong gradients"
    found = [(*f, stops) for f in (breaks(rows, fsdp) if fsdp else ())]
    found += [(*f, wrong) for f in (regathered(rows, nested, fsdp) if nested else ())]
    if found:
        raise SchedcError.many([_shard_finding(*f) for f in found])


def _shard_finding(rank: int, step: int, a, why: str, then: str) -> Diagnostic:
    from .lint import display_step
    shown = display_step(a, step)
    return Diagnostic("shard-order", f"rank {rank}, step {shown}: {describe(a)} {why}", a.span,
                      (f"stage {a.stage} runs under FSDP on this rank; {then}",), rank=rank, step=shown)


def _no_ddp(stages) -> None:
    """Refuse a stage wrapped with DistributedDataParallel: torch's pipelining runtime runs backwards
    outside DDP's reducer, which asserts at the second step ("rebuilt parameter indices") on most
    schedules and leaves split backwards unreduced; FSDP2's `fully_shard` and `replicate` it drives."""
    from torch.nn.parallel import DistributedDataParallel
    for stage in stages:
        if isinstance(getattr(stage, "submod", None), DistributedDataParallel):
            raise SchedcError("usage", f"stage {stage.stage_index} is wrapped with DistributedDataParallel, "
                              "which torch's pipelining runtime does not drive (DDP's reducer asserts at the second "
                              "step, or split backwards train unreduced): wrap the stage with `fully_shard` or "
                              "`replicate` (torch.distributed.fsdp) for data parallelism")


def _reshards_inside(module, fsdp_module) -> bool:
    """Does an FSDP module nested inside the stage's module (not the stage's own) reshard its
    parameters after each forward (FSDP2's default)? When torch's state cannot be read, yes."""
    for inner in module.modules() if hasattr(module, "modules") else ():  # (a test's stand-in stage has none)
        if inner is module or not isinstance(inner, fsdp_module):
            continue
        try:
            groups = inner._get_fsdp_state()._fsdp_param_groups
        except (AttributeError, AssertionError):  # (no state torch can read: take the default)
            return True
        if any(getattr(g, "post_forward_mesh_info", True) is not None for g in groups):
            return True
    return False


def _load(source: str, stages, n_microbatches: int, fmt, notation: str, params: dict) -> Program:
    """Compile or read `source`; P, V and M come from the stages where the schedule declares them."""
    from .api import detect_format, load, resolve
    from .importers import is_imported
    fmt = fmt or ("pp" if is_imported(str(source)) else detect_format(str(resolve(source))))
    if fmt != "pp":
        return load(source, fmt=fmt, notation=notation, params=params or None)
    ranks = stages[0].group_size
    implied = {"P": ranks, "V": max(stages[0].num_stages // ranks, 1), "M": n_microbatches}
    program = load(source, {**implied, **params}, notation=notation, strict_params=False)
    declared = dict(program.params)
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise SchedcError("unknown-param", f"{program.name} does not declare {', '.join(unknown)} "
                          f"(its parameters: {', '.join(declared) or 'none'})", where=str(source))
    return program


def _fits(program: Program, stages, n_microbatches: int) -> None:
    """The schedule's ranks, stages, microbatches and placement are the ones torch is given."""
    first = stages[0]
    found = {"ranks": (program.num_ranks, first.group_size), "stages": (program.num_stages, first.num_stages),
             "microbatches": (program.num_microbatches, n_microbatches)}
    for what, (ours, theirs) in found.items():
        if ours != theirs:
            raise SchedcError("usage", f"{program.name} has {ours} {what}; the pipeline has {theirs}",
                              where=program.source)
    for stage in stages:
        rank = program.placement[stage.stage_index]
        if rank != stage.group_rank:
            raise SchedcError("placement", f"{program.name} runs stage {stage.stage_index} on rank {rank}, "
                              f"but it was built on rank {stage.group_rank}", where=program.source)
    rank = first.group_rank
    missing = sorted(set(s for s, r in enumerate(program.placement) if r == rank) - {s.stage_index for s in stages})
    if missing:
        raise SchedcError("placement", f"{program.name} runs stage(s) {', '.join(map(str, missing))} on rank "
                          f"{rank}, which was not given them", where=program.source)


def _verified(program: Program, semantics: str) -> None:
    """Refuse a schedule that `schedc check` does not pass: torch would hang or compute wrong."""
    from .api import check
    report = check(program, semantics=semantics)
    if report.ok is not True:
        if not report.errors:
            raise SchedcError("usage", f"{program.name}: the checks could not decide ({report.unknown}); "
                              "not loading it into torch", where=program.source)
        first, *rest = report.errors
        note = f"{program.name} fails schedc check ({report.error_count} error(s)): not loading it into torch"
        raise SchedcError.many([replace(first, notes=first.notes + (note,)), *rest])
