"""`main(PROGRAM, RANKS, argv)`: what a generated program runs on each rank.

Reads the rank from the launcher's environment (torchrun or `schedc run`), imports the user's model
(`--model pkg.mod:build_stages`), joins the process group, trains `--steps` steps through the
interpreter, prints step time and loss per step (on the rank of the last stage), and with
`--profile` writes measured per-stage times and message sizes (`profile.py`), with `--trace-dir`
every event of the rank (`trace.py`). A data-parallel table (`replicas` D > 1): job rank d * P + p
runs replica d's pipeline rank p on the d-th of D equal slices of the batch, and each pipeline
rank's D ranks get a process group of their own for REDUCE_GRAD. With routes (DualPipe), `build_stages`
is asked for the model's stages each copy runs, the copies start from the first copy's weights, and
the ranks that hold copies of one model stage get a process group to sum their gradients. Exit
codes: 0 done, 1 an action failed, 2 bad usage or model, or an output that could not be written
(`--profile`, checked before the run and written after its final barrier, or `--trace-dir`'s events,
which stop where a write fails: neither failure ends a rank early), 124 the watchdog stopped the run.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

import torch

from ..errors import SchedcError
from ..outputs import probe_writable
from .backends import not_vouched, problem as backend_problem, vouches
from .interpreter import PipelineInterpreter, StepFailure
from .profile import build_profile, parts_of, write_profile
from .table import Table, TableError, load_table, parts
from .trace import Recorder, step_name
from .watchdog import EXIT_TIMEOUT, Watchdog

EXIT_FAILED = 1
BUILD_LIMIT = 600.0  # seconds the watchdog allows for building the model, when --timeout is shorter
EXIT_USAGE = 2
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


class UsageError(Exception):
    """Bad arguments, environment or model: reported in one line, exit code 2."""


@dataclass(frozen=True)
class Model:
    """The user's model: `build_stages(stage_ids, num_stages) -> [nn.Module]`, `loss_fn(output,
    target)`, `make_batch(step, batch_size) -> (inputs, targets)`, optional `make_optimizer(params)`
    and `tied_parameters(module, stage, num_stages)` (the parameters of the first or the last stage
    tied to the other end, in one order: what REDUCE_TIED sums)."""

    build_stages: Callable
    loss_fn: Callable
    make_batch: Callable
    make_optimizer: Callable | None = None
    tied_parameters: Callable | None = None


def load_model(spec: str) -> Model:
    """`pkg.mod:fn` -> the model; the companions are looked up in the same module. The current
    folder is importable, as with `python -m`."""
    module_name, _, fn_name = spec.partition(":")
    if not module_name or not fn_name:
        raise UsageError(f"--model {spec!r}: expected pkg.module:function, e.g. examples.mlp:build_stages")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--model {spec!r}: cannot import {module_name}: {exc}") from None
    except Exception as exc:  # the module itself fails (a syntax error, an exception at import)
        raise UsageError(f"--model {spec!r}: importing {module_name} failed: {_one_line(exc)}") from None
    build = getattr(module, fn_name, None)
    if not callable(build):
        raise UsageError(f"--model {spec!r}: {module_name} has no function {fn_name}")
    missing = [n for n in ("loss_fn", "make_batch") if not callable(getattr(module, n, None))]
    if missing:
        raise UsageError(f"--model {spec!r}: {module_name} must also define {' and '.join(missing)} "
                         "(loss_fn(output, target); make_batch(step, batch_size) -> (inputs, targets))")
    return Model(build, module.loss_fn, module.make_batch, getattr(module, "make_optimizer", None),
                 getattr(module, "tied_parameters", None))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:500]}" if text else type(exc).__name__


def build_modules(model: Model, stage_ids, num_stages: int, dtype=None, device=None) -> dict[int, torch.nn.Module]:
    try:
        built = model.build_stages(list(stage_ids), num_stages)
    except Exception as exc:
        raise UsageError(f"build_stages({list(stage_ids)}, {num_stages}) failed: {_one_line(exc)}") from None
    if not isinstance(built, (list, tuple, dict)):
        raise UsageError(f"build_stages({list(stage_ids)}, {num_stages}) returned a {type(built).__name__}; "
                         "expected a list of nn.Module, one per stage id")
    if isinstance(built, dict) and not all(s in built for s in stage_ids):
        raise UsageError(f"build_stages({list(stage_ids)}, {num_stages}) returned a dict without stage(s) "
                         f"{[s for s in stage_ids if s not in built]}")
    built = [built[s] for s in stage_ids] if isinstance(built, dict) else list(built)
    if len(built) != len(stage_ids):
        raise UsageError(f"build_stages({list(stage_ids)}, {num_stages}) returned {len(built)} modules")
    out = {}
    for s, m in zip(stage_ids, built):
        if not isinstance(m, torch.nn.Module):
            raise UsageError(f"build_stages returned a {type(m).__name__} for stage {s}, not an nn.Module")
        out[s] = m.to(device=device, dtype=dtype) if (dtype is not None or device is not None) else m
    return out


def split(batch, M: int, dtype=None, device=None) -> list:
    """A whole-batch tensor as M equal microbatches along dim 0 (floats cast to `dtype`)."""
    if not isinstance(batch, torch.Tensor):
        raise UsageError(f"make_batch must return tensors, got {type(batch).__name__}")
    if batch.shape[0] % M:
        raise UsageError(f"a batch of {batch.shape[0]} does not split into {M} equal microbatches")
    if dtype is not None and batch.is_floating_point():
        batch = batch.to(dtype)
    if device is not None:
        batch = batch.to(device)
    return list(batch.split(batch.shape[0] // M))


def make_dp_group(table: Table, rank: int, timeout: float):
    """This rank's data-parallel process group: every rank makes one group per pipeline rank p (its
    ranks d * P + p), in the same order, as `dist.new_group` requires, and keeps its own."""
    return _own_group([table.dp_group(p) for p in range(table.pipeline_ranks)], rank, timeout)


def model_modules(model: Model, table: Table, rank: int, dtype=None, device=None) -> dict[int, torch.nn.Module]:
    """This rank's stage modules: `build_stages` of its stages, or with routes of the model's stages
    its copies run (`table.model_stage`; `num_stages` the model's), one call per copy."""
    stage_ids = table.stages_of(rank)
    if not table.routes:
        return build_modules(model, stage_ids, table.num_stages, dtype, device)
    L = table.model_stages
    return {s: build_modules(model, [table.model_stage(s)], L, dtype, device)[table.model_stage(s)] for s in stage_ids}


def make_copy_groups(table: Table, rank: int, timeout: float) -> dict:
    """Model stage -> the process group of the ranks that hold its copies, for those this rank
    holds and shares with other ranks (routes; `PipelineInterpreter`'s `copy_groups`), each replica's
    copies their own group: every rank makes every such group, replica by replica and model stage by
    model stage, as `dist.new_group` requires (one group per set of ranks)."""
    import torch.distributed as dist
    made: dict[tuple[int, ...], Any] = {}
    out = {}
    for d in range(table.replicas):  # (each replica sums its own copies: every rank makes every replica's)
        for c, stages in sorted(table.copies().items()):
            ranks = tuple(sorted({table.rank_of(s, d * table.pipeline_ranks) for s in stages}))
            if len(ranks) < 2:
                continue
            if ranks not in made:
                made[ranks] = dist.new_group(list(ranks), timeout=datetime.timedelta(seconds=timeout))
            if rank in ranks:
                out[c] = made[ranks]
    return out


def same_copies(modules: dict, table: Table, rank: int, groups: dict) -> None:
    """Start every copy of a model stage from its first copy's weights (routes): copied on the rank,
    broadcast from the first copy's rank over the copies' group (`make_copy_groups`), model stage by
    model stage, so a model whose `build_stages` draws its weights at random trains one model."""
    import torch.distributed as dist
    for c, stages in sorted(table.copies().items()):
        mine = [s for s in stages if s in modules]
        if not mine:
            continue
        source = table.rank_of(stages[0], rank)
        with torch.no_grad():
            for tensors in zip(*(list(modules[s].parameters()) + list(modules[s].buffers()) for s in mine)):
                first = tensors[0]
                if c in groups:
                    dist.broadcast(first, src=source, group=groups[c])
                for t in tensors[1:]:
                    t.copy_(first)


def make_tied_group(table: Table, rank: int, timeout: float):
    """This rank's tied group, for REDUCE_TIED: the ranks of its replica's first and last stage, when
    they are two (every rank makes every replica's, in order); None elsewhere."""
    S, P = table.num_stages, table.pipeline_ranks
    ends = [tuple(sorted({table.rank_of(0, d * P), table.rank_of(S - 1, d * P)})) for d in range(table.replicas)]
    return _own_group([e for e in ends if len(e) == 2], rank, timeout)


def _sums_tied(table: Table) -> bool:
    """Does the schedule sum tied weights' gradients (REDUCE_TIED) anywhere?"""
    return any(a.op == "REDUCE_TIED" for steps in table.ranks for st in steps for a in parts(st))


def _own_group(member_lists, rank: int, timeout: float):
    """Make a process group of each list, every rank all of them in the same order (as
    `dist.new_group` requires), and keep the one this rank is in (None if none)."""
    import torch.distributed as dist
    mine = None
    for members in member_lists:
        group = dist.new_group(list(members), timeout=datetime.timedelta(seconds=timeout))
        if rank in members:
            mine = group
    return mine


def tied_parameters(model: Model, modules: dict, table: Table) -> dict:
    """Stage -> its parameters tied to the other end of the model, for this rank's first and last
    stage, when the schedule sums them (REDUCE_TIED); the model must name them."""
    if not _sums_tied(table):
        return {}
    if model.tied_parameters is None:
        raise UsageError("the schedule sums tied weights' gradients (REDUCE_TIED), but the model names no tied "
                         "parameters: define tied_parameters(module, stage, num_stages) beside build_stages")
    S = table.num_stages
    return {s: list(model.tied_parameters(modules[s], s, S)) for s in {0, S - 1} if s in modules}


def replica_share(batch, table: Table, rank: int, size: int):
    """Rank `rank`'s replica's slice of a whole-batch tensor of `size` samples: replica d of D gets
    samples d * size / D .. (d + 1) * size / D - 1 (the whole batch without replicas)."""
    D = table.replicas
    return batch if D == 1 else _share(batch, table.replica_of(rank), size // D, size)


def _share(batch, d: int, share: int, size: int):
    """Replica d's slice of a whole-batch tensor: samples d * share .. (d + 1) * share - 1."""
    if not isinstance(batch, torch.Tensor):
        raise UsageError(f"make_batch must return tensors, got {type(batch).__name__}")
    if batch.shape[0] != size:
        raise UsageError(f"make_batch returned {batch.shape[0]} samples for a batch of {size}")
    return batch[d * share:(d + 1) * share]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Run one rank of a schedc-lowered pipeline program.")
    p.add_argument("--model", required=True, metavar="PKG.MOD:FN", help="build_stages(stage_ids, num_stages)")
    p.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="samples per step, over all replicas (default 8 x microbatches x replicas)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="cast the model and float inputs")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate, unless the model defines make_optimizer")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="watchdog: stop the run when an action, a send or receive or a training phase "
                        "takes longer (default 300 s)")
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    p.add_argument("--profile", metavar="OUT.json", help="write per-stage F/I/W/B times and message sizes")
    p.add_argument("--trace-dir", metavar="DIR",
                   help="write this rank's events to DIR/rank<R>.jsonl as they happen (schedc run --trace "
                        "merges them into one Perfetto trace)")
    p.add_argument("--quiet", action="store_true", help="no per-step lines")
    return p


def main(program: dict, ranks, argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        table = load_table(program, ranks)
    except TableError as exc:
        print(f"schedc runtime: the program's table is malformed: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _main(table, args)
    except UsageError as exc:
        print(f"schedc runtime: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C under torchrun reaches every rank: one line each, no traceback
        sys.stderr.write(f"schedc runtime: rank {os.environ.get('RANK', '?')} interrupted\n")
        sys.stderr.flush()
        os._exit(130)


def _exit_ranks(table: Table, rank: int) -> list[int]:
    """The ranks (of `rank`'s replica) that compute a loss, the first route's first: the last
    stage's, or each route's last stage's."""
    exits = [r[3] - 1 for r in table.routes] if table.routes else [table.num_stages - 1]
    return list(dict.fromkeys(table.rank_of(s, rank) for s in exits))


def _env_int(name: str, default: int | None = None) -> int:
    text = os.environ.get(name)
    if text is None:
        if default is None:
            raise UsageError(f"{name} is not set: launch with torchrun or `schedc run`")
        return default
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{name}={text!r} is not an integer") from None


def _main(table: Table, args) -> int:  # noqa: C901
    import torch.distributed as dist
    if args.steps < 1 or not args.timeout > 0:
        raise UsageError("--steps must be at least 1 and --timeout positive")
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    if world != table.num_ranks:
        raise UsageError(f"the schedule has {table.num_ranks} ranks but WORLD_SIZE is {world} (nodes x "
                         f"--nproc-per-node must be {table.num_ranks})")
    local_rank = _env_int("LOCAL_RANK", 0)
    why = backend_problem(args.backend, local_rank + 1)
    if why:
        raise UsageError(why)
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(max(1, _env_int("OMP_NUM_THREADS")))
    device = None
    if args.backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if rank == 0 and table.verified and not vouches(table.verified, args.backend):
        sys.stderr.write(f"schedc runtime: warning: this program was verified under {table.verified}, and "
                         f"{not_vouched(table.verified, args.backend)}\n")
    recorder = _recorder(args.trace_dir, rank, table) if args.trace_dir else None
    if args.profile and rank == 0:
        _profile_writable(args.profile)
    watchdog = Watchdog(args.timeout, rank=rank)
    if recorder is not None:
        watchdog.on_stop.append(lambda report, cur: _stop_line(recorder, report, cur))
    # building may take long (a checkpoint to load): at least BUILD_LIMIT seconds, not stuck for ever
    watchdog.phase("building the model (load_model and build_stages)", limit=BUILD_LIMIT)
    model = load_model(args.model)
    dtype = DTYPES.get(args.dtype) if args.dtype else None
    stage_ids = table.stages_of(rank)
    modules = model_modules(model, table, rank, dtype, device)
    tied = tied_parameters(model, modules, table)
    params = [p for m in modules.values() for p in m.parameters() if p.requires_grad] if not table.forward_only else []
    try:
        optimizer = (model.make_optimizer(params) if model.make_optimizer is not None
                     else torch.optim.SGD(params, lr=args.lr)) if params else None
    except Exception as exc:
        raise UsageError(f"the optimizer could not be made: {_one_line(exc)}") from None
    watchdog.end()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    # The group's own timeout is a backstop behind the watchdog, which reports first.
    try:
        dist.init_process_group(args.backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=args.timeout + 30))
        if recorder is not None:  # every rank leaves the barrier together: the trace's common time 0
            run_id = _run_id(dist, rank)
            dist.barrier()
            recorder.start(time.perf_counter(), run_id)
    except Exception as exc:
        sys.stderr.write(f"schedc runtime: rank {rank} could not join the process group ({args.backend}, "
                         f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}): {_one_line(exc)}\n")
        return EXIT_FAILED
    D, M = table.replicas, table.num_microbatches
    dp_group = None
    if D > 1:  # one group per pipeline rank, made by every rank in the same order (as new_group requires)
        try:
            watchdog.phase("making the data-parallel process groups")
            dp_group = make_dp_group(table, rank, args.timeout + 30)
            watchdog.end()
        except Exception as exc:
            sys.stderr.write(f"schedc runtime: rank {rank} could not make its data-parallel group: {_one_line(exc)}\n")
            return EXIT_FAILED
    try:
        watchdog.phase("making the process groups of split messages (p2p split) and tied weights (REDUCE_TIED)")
        grad_group = _own_group([range(table.num_ranks)], rank, args.timeout + 30) if table.p2p == "split" else None
        tied_group = make_tied_group(table, rank, args.timeout + 30) if _sums_tied(table) else None
        copy_groups = make_copy_groups(table, rank, args.timeout + 30)
        watchdog.end()
        watchdog.phase("starting the copies of each model stage from the same weights (routes)")
        same_copies(modules, table, rank, copy_groups)
        watchdog.end()
    except Exception as exc:
        sys.stderr.write(f"schedc runtime: rank {rank} could not make its process groups: {_one_line(exc)}\n")
        return EXIT_FAILED
    interp = PipelineInterpreter(table, rank, modules, model.loss_fn, device=device, watchdog=watchdog,
                                 trace=recorder, dp_group=dp_group, grad_group=grad_group, tied=tied,
                                 tied_group=tied_group, copy_groups=copy_groups)
    interp.measure_saved = bool(args.profile)  # the bytes each stage's forward saves, for the profile
    interp.synchronize = bool(args.profile) and device is not None  # a pass's GPU time, not its launch's
    ends = _exit_ranks(table, rank)
    losing = rank in ends  # (with routes, each route's last stage computes the loss of its microbatches)
    last = rank == ends[0]  # the rank that reports the loss
    first_in = any(table.is_entry(s) for s in stage_ids)
    replica = table.replica_of(rank)
    batch_size = args.batch_size or 8 * M * D
    if batch_size % (M * D):
        raise UsageError(f"--batch-size {batch_size}: expected a multiple of {M} microbatches x {D} replicas")
    times = []
    profile = None  # rank 0's, written once every rank has passed the final barrier

    def phase(name: str, k: int, fn, *a):
        """Run one phase of training step k outside the program, watched and (with a trace) recorded."""
        watchdog.phase(f"in {name} (training step {k})")
        t0 = time.perf_counter()
        out = fn(*a)
        if recorder is not None:
            recorder.phase(k, name, t0, time.perf_counter())
        watchdog.end()
        return out

    def optimize():
        assert optimizer is not None  # (called only when there are parameters to step)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    try:
        for step in range(args.steps):
            inputs, targets = phase("make_batch", step + 1, model.make_batch, step, batch_size)
            if D > 1:
                inputs, targets = (replica_share(t, table, rank, batch_size) for t in (inputs, targets))
            xs = split(inputs, M, dtype, device) if first_in else None
            ys = split(targets, M, dtype, device) if losing else None
            t0 = time.perf_counter()
            losses = interp.step(xs, ys)
            if optimizer is not None:  # the optimizer-step hook: gradients of the whole batch are ready
                phase("the optimizer step", step + 1, optimize)
            dt = time.perf_counter() - t0
            times.append(dt)
            if len(ends) > 1 and not args.quiet:  # routes: every route's losses (of every replica: the
                # whole job's M x D microbatches), on the first route's last rank of each replica
                total = (torch.stack(losses).sum() if losses else torch.zeros(())).detach().double().to(device)
                phase("summing the loss over the routes", step + 1, dist.all_reduce, total, dist.ReduceOp.SUM)
                losses = [total / (M * D)] if last else []
            elif last and D > 1 and not args.quiet:  # the mean loss over the whole batch, on replica 0
                mean = torch.stack(losses).mean().detach()
                phase("averaging the loss over the replicas", step + 1, dist.all_reduce, mean, dist.ReduceOp.SUM,
                      dp_group)
                losses = [mean / D]
            if last and replica == 0 and not args.quiet:
                loss = torch.stack(losses).mean().item()
                print(f"step {step + 1}/{args.steps}  {dt * 1e3:8.2f} ms  loss {loss:.6f}", flush=True)
        if args.profile:
            skip = 1 if args.steps > 1 else 0  # the first step learns shapes and warms up
            mine = interp_profile(interp, skip)
            gathered: list[Any] | None = [None] * world if rank == 0 else None
            phase("gathering the profile on rank 0", args.steps, dist.gather_object, mine, gathered, 0)
            if rank == 0:
                assert gathered is not None
                profile = build_profile(gathered)
        if last and replica == 0 and not args.quiet:
            steady = times[1:] or times
            dp = f" ({D} replicas of {table.pipeline_ranks})" if D > 1 else ""
            print(f"median step time {statistics.median(steady) * 1e3:.2f} ms over {len(steady)} step(s) "
                  f"({table.schedule!r}, {table.num_ranks} ranks{dp}, {table.num_microbatches} microbatches)", flush=True)
        watchdog.phase("at the final barrier (waiting for the other ranks to finish)")
        dist.barrier()
        watchdog.close()
    except StepFailure as exc:
        sys.stdout.flush()
        sys.stderr.write(f"schedc runtime: {exc}\n")
        sys.stderr.flush()
        os._exit(EXIT_FAILED)  # peers see the connection close; do not wait in teardown
    except Exception as exc:  # a failure outside the actions (data, optimizer, profile)
        sys.stdout.flush()
        sys.stderr.write(f"schedc runtime: rank {rank} failed: {_one_line(exc)}\n")
        sys.stderr.flush()
        os._exit(EXIT_FAILED)
    unwritten = _write_profile(args.profile, profile) if profile is not None else None
    if recorder is not None:
        recorder.close()
    interp.close()  # (the groups are freed by destroy_process_group, not at shutdown)
    dp_group = grad_group = tied_group = None  # noqa: F841
    copy_groups = {}  # noqa: F841
    dist.destroy_process_group()
    if recorder is not None and recorder.error is not None:
        sys.stderr.write(f"schedc runtime: rank {rank}: {recorder.path}: error[io]: cannot write: "
                         f"{recorder.error.strerror or recorder.error} (its events stop there)\n")
    if unwritten:
        sys.stderr.write(f"schedc runtime: rank {rank}: {unwritten}\n")
    return EXIT_USAGE if unwritten or (recorder is not None and recorder.error is not None) else 0


def _profile_writable(path: str) -> None:
    """Refuse `--profile` before the run when it cannot be written (schedc/outputs.py's
    `probe_writable`): a UsageError, on rank 0, which writes it."""
    try:
        probe_writable(path)
    except SchedcError as exc:
        raise UsageError(f"--profile {path}: {exc.diagnostics[0].message}") from None


def _write_profile(path: str, profile: dict) -> str | None:
    """Write rank 0's profile after the final barrier, so a failure (a full disk) cannot end the rank
    while its peers still wait for it; the error's one line, or None once written."""
    try:
        write_profile(path, profile)
    except SchedcError as exc:
        return exc.render()
    return None


def end_rank(status: int = 0) -> NoReturn:
    """End a worker rank whose results are written: destroy every process group and leave the
    process at once. Torch's pipeline stages and schedules hold their group and pending work in
    reference cycles; freeing those, whether by a collection or as Python shuts down, can be
    aborted by gloo's threads ("terminate called without an active exception", signal 6: ranks of
    finished test launches died so), so nothing is freed after the groups are destroyed."""
    import torch.distributed as dist
    dist.destroy_process_group()
    leave(status)


def leave(status: int = 0) -> NoReturn:
    """Leave a rank's process at once with `status`, its output flushed: a generated program's
    ranks end so once `main` has destroyed their groups (`end_rank`'s reason: gloo's threads can
    abort a finished rank, signal 6, while Python frees what torch held as it shuts down)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _recorder(folder: str, rank: int, table: Table) -> Recorder:
    try:
        os.makedirs(folder, exist_ok=True)
        return Recorder(os.path.join(folder, f"rank{rank}.jsonl"), rank=rank, ranks=table.num_ranks,
                        schedule=table.schedule, params=table.params)
    except OSError as exc:
        raise UsageError(f"--trace-dir {folder!r}: {exc.strerror or exc}") from None


def _run_id(dist, rank: int) -> str | None:
    """An id all ranks of this run share, for their trace files: rank 0's random one, passed through
    the group's store (None if the store cannot be reached: the trace then names no run)."""
    import uuid
    try:
        store = dist.distributed_c10d._get_default_store()
        if rank == 0:
            store.set("schedc/trace-run", uuid.uuid4().hex)
        return store.get("schedc/trace-run").decode()
    except Exception:  # noqa: BLE001 (a private torch API: the id is a nicety, never a reason to stop)
        return None


def _stop_line(recorder: Recorder, report: str, cur) -> None:
    """The trace's last line when the watchdog stops the run: what ran or waited, since when."""
    since, interp, at, index, action, why, _ = cur
    now = time.perf_counter()
    began = now - (time.monotonic() - since)  # the watchdog's clock is time.monotonic
    if why == "phase":
        name, kind = str(action).removeprefix("in "), "phase"
    elif why == "run":
        st = interp.steps[at]
        name = step_name(st)
        kind = "compute" if all(p.op in ("F", "B", "I", "W") for p in parts(st)) else "communication"
    else:
        name, kind = f"wait {action}", "wait"
    recorder.stop(now, report, name, began, kind)


def interp_profile(interp: PipelineInterpreter, skip_steps: int) -> dict:
    """This rank's measurements: per (op, stage) the mean seconds per action after `skip_steps`
    training steps (each step runs every action of a stage M times) and how they spread
    (`profile.parts_of`), message bytes per stage, and
    for `profile.build_profile` to turn into communication costs: every message's timestamps (the
    interpreter's `comm_log`), where each step's time went (`step_log`), the host and its cores."""
    import socket
    M = interp.M
    times: dict[str, dict] = {}
    spread: dict[str, dict] = {}
    for (op, stage), values in interp.times.items():
        kept = values[skip_steps * M:] or values
        times.setdefault(str(stage), {})[op] = sum(kept) / len(kept)
        spread.setdefault(str(stage), {})[op] = parts_of(kept)
    if not any(rec[0] > skip_steps for rec in interp.comm_log):
        skip_steps = 0  # one step only: measure it, shapes and all
    # (training step, "S" | "R", kind, stage, microbatch, peer rank, posted, post returned, wait began, wait ended)
    comm = [(rec[0], rec[1], *rec[2], *rec[3:]) for rec in interp.comm_log if rec[0] > skip_steps]
    steps = [list(t) for t in interp.step_log[skip_steps:] or interp.step_log]
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    peak = None
    if interp.device is not None and interp.device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(interp.device)
    return {"times": times, "spread": spread, "messages": {str(s): b for s, b in interp.message_bytes.items()},
            "saved": {str(s): b for s, b in interp.saved_bytes.items()}, "peak_allocated": peak,
            "comm": comm, "steps": steps, "program_steps": len(interp.steps), "host": socket.gethostname(),
            "cores": cores}


__all__ = ["EXIT_FAILED", "EXIT_TIMEOUT", "EXIT_USAGE", "Model", "build_modules", "end_rank", "leave", "load_model", "main",
           "make_dp_group", "replica_share", "split"]
