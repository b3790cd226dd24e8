"""The torch bridge: a verified schedc schedule as torch's own `_PipelineScheduleRuntime`.

`schedule(source, stages, n_microbatches, loss_fn)` loads a built-in, a .pp or a PyTorch .csv,
refuses it unless `schedc check` passes, lowers it as torch's own lowering does (UNSHARD / RESHARD,
REDUCE_GRAD, then SEND / RECV) and returns torch's schedule object with those actions loaded, so
`schedule.step(...)` trains with torch's defaults; on a job, a refusal on one rank is raised on every
rank (`_agree`), none left waiting in `step()`. torch is imported only when it is called.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from .errors import Diagnostic, SchedcError
from .ir import Program, Step, describe, format_step


def schedule(source: str | Program, stages: Sequence[Any], n_microbatches: int,
             loss_fn: Callable | None = None, *, scale_grads: bool = True, fmt: str | None = None,
             notation: str = "current", semantics: str = "rendezvous", **params: int):
    """torch's `_PipelineScheduleRuntime` for `stages` (this rank's `PipelineStage`s) running `source`.

    `source` is a built-in name, a .pp, .csv or .json path, or a `Program`; `params` are the
    schedule's parameters (`P`, `V`, `M` default to the pipeline group's size, the stages per rank
    and `n_microbatches` when the schedule declares them). `scale_grads`, as in torch: gradients
    are divided by `n_microbatches` (a loss that averages over the batch trains as unsplit).
    Raises `SchedcError` if the schedule fails `schedc check` or does not fit the stages.

    On a job of more than one rank (torch.distributed initialized), the ranks of the pipeline's
    process group agree before any returns: each tells the others, in one all-reduce on the stages'
    group, whether it refused and why, and if any did, every rank raises (`rank-refused` on the
    others, naming the ranks and their reasons; a refusing rank its own error), so no rank waits in
    `step()` for a peer that never runs. Every rank of the pipeline must call `schedule()`: a rank
    that never does leaves the others in that all-reduce until the process group's timeout.
    """
    try:
        runtime = _runtime(source, stages, n_microbatches, loss_fn, scale_grads=scale_grads, fmt=fmt,
                           notation=notation, semantics=semantics, params=params)
    except Exception as refused:  # (any failure, a SchedcError or not: the peers must hear of it)
        _agree(stages, refused)
        raise
    _agree(stages, None)
    return runtime


def _runtime(source: str | Program, stages: Sequence[Any], n_microbatches: int, loss_fn: Callable | None, *,
             scale_grads: bool, fmt: str | None, notation: str, semantics: str, params: dict[str, int]):
    """This rank's runtime, or this rank's refusal (the body of `schedule`, before the ranks agree)."""
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
    actions = {rank: [_Action.from_str(format_step(_written(cell))) for cell in row] for rank, row in enumerate(rows)}
    runtime._prepare_schedule_with_comms(actions, format="compute_comms")
    return runtime


def _written(cell: Step | None) -> Step:
    """A cell of a CSV `to_torch_csv` wrote: a step, always. Its rows are the program's steps, which
    have no empty cell (a CSV read from a file may: `None` there), and torch's runtime asserts on a
    None action at compute_comms."""
    assert cell is not None, "to_torch_csv wrote an empty cell"
    return cell


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


# ---- the ranks agree: one refuses, all raise ----
_REASON_BYTES = 480  # of a refusal's first line, sent to the other ranks (the rest stays in its own error)


def _agree(stages, refused: Exception | None) -> None:
    """Tell the pipeline's other ranks whether this rank refused (`refused`) and hear whether they did;
    raise `rank-refused` naming them if they did and this rank did not. A refusing rank returns (its
    caller re-raises its own error), also when the exchange fails: its error says more than that.
    Nothing to agree on outside a job of more than one rank, or on stand-in stages with no group."""
    pipeline = _pipeline(stages)
    if pipeline is None:
        return
    try:
        refusals = _exchange(*pipeline, None if refused is None else _reason(refused))
    except Exception:
        if refused is not None:
            return
        raise
    if refused is None and refusals:  # (this rank's own row is empty: refusals are the others')
        raise SchedcError.many([
            Diagnostic("rank-refused", f"pipeline rank {rank} refused the schedule: {why}", notes=(
                "not loading it on this rank either: every rank of the pipeline raises, none waits in step() "
                f"for a peer that will not run (rank {rank}'s own error has its full diagnostics)",))
            for rank, why in sorted(refusals.items())])


def _pipeline(stages) -> tuple[Any, Any, int, int] | None:
    """(group, device, size, rank) of the pipeline this rank's stages run on, if torch.distributed is
    initialized and the pipeline has more than one rank; else None (torch is not imported here)."""
    import sys
    dist = sys.modules.get("torch.distributed")  # (not imported: not initialized either)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    try:
        first = stages[0]
        group, size, rank = first.group, int(first.group_size), int(first.group_rank)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):  # (none, or a stand-in with no group)
        return None
    return (group, getattr(first, "device", "cpu"), size, rank) if size > 1 else None


def _exchange(group, device, size: int, rank: int, reason: str | None) -> dict[int, str]:
    """One all-reduce (sum) of a `size` x (1 + _REASON_BYTES) byte table on the pipeline's group, on
    the stages' device (as torch's stages exchange their shapes: NCCL takes only GPU tensors): each
    rank fills its own row, a flag and its reason in UTF-8, and every rank reads every row. The
    refusals, by pipeline rank."""
    import torch
    import torch.distributed as dist
    table = torch.zeros(size, 1 + _REASON_BYTES, dtype=torch.uint8)
    if reason is not None:
        told = reason.encode("utf-8", "replace").replace(b"\0", b" ")
        if len(told) > _REASON_BYTES:
            told = told[:_REASON_BYTES - 3] + b"..."
        table[rank, 0] = 1
        table[rank, 1:1 + len(told)] = torch.tensor(list(told), dtype=torch.uint8)
    table = table.to(device)
    dist.all_reduce(table, group=group)
    rows = table.cpu().tolist()
    return {r: bytes(row[1:]).rstrip(b"\0").decode("utf-8", "ignore") or "(no reason given)"
            for r, row in enumerate(rows) if row[0]}


def _reason(refused: Exception) -> str:
    """A refusal in a line: a SchedcError's first diagnostic as it renders (location, code, message),
    with how many more; any other error's type and message."""
    if isinstance(refused, SchedcError) and refused.diagnostics:
        first, *rest = refused.diagnostics
        head = first.render().splitlines()[0]
        return head + (f" (and {len(rest)} more)" if rest else "")
    line = " ".join(str(refused).split())
    return f"{type(refused).__name__}: {line}" if line else type(refused).__name__
