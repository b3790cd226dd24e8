"""Assertions for tests of schedules and runtimes: each fails with schedc's counterexample report.

`assert_deadlock_free`, `assert_within_memory` and `assert_same_gradients` raise AssertionError whose
message is the rendered report (the wait cycle and the rank-by-step grid, the memory witness, the
first gradient that differs), so a failing Hypothesis test shows the shrunk counterexample in schedc's
words. Plain Python: hypothesis is not imported here (see schedc.strategies).
"""
from __future__ import annotations

from typing import Any, Mapping

from .ir import Program, format_step

__all__ = ["assert_deadlock_free", "assert_same_gradients", "assert_within_memory", "listing", "reference_gradients"]


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "es" if what.endswith("h") else "s")


def _title(program: Program) -> str:
    params = ", ".join(f"{k}={v}" for k, v in program.params)
    return (f"{program.name}{f' ({params})' if params else ''}: {_count(program.num_ranks, 'rank')}, "
            f"{_count(program.num_stages, 'stage')}, {_count(program.num_microbatches, 'microbatch')}, "
            f"{program.level} level")


def listing(program: Program) -> str:
    """The program in the literal form (`rank 0: 0F0 0B0`), one line per rank, to paste into a .pp."""
    return "\n".join(f"  rank {r}: " + " ".join(format_step(s) for s in steps)
                     for r, steps in enumerate(program.ranks))


def _fail(headline: str, program: Program, report) -> None:
    body = report.render()
    raise AssertionError(f"{headline}\n{_title(program)}\n{listing(program)}\n{body}".rstrip())


def _semantics(semantics):
    from .rules.semantics import Semantics
    return semantics if isinstance(semantics, Semantics) else Semantics.parse(semantics)


def assert_deadlock_free(program: Program, *, semantics="rendezvous", engine: str = "native",
                         timeout: float | None = None) -> None:
    """Assert that every run of `program` reaches the end of every rank's list under `semantics`
    (`"rendezvous"`, `"eager"`, `"bounded:K"`) and that its messages carry the right tensors.

    Fails on anything `schedc check` finds except memory over a limit (see `assert_within_memory`):
    a structural error (a missing or misplaced action) is not a schedule that runs, and a mismatch
    finishes with the wrong data. The message is the report: the wait cycle with the cause in one
    sentence, and the rank-by-step grid with the blocked steps in brackets. With `engine="z3"`, a
    solver that gives up fails too ("could not prove"): its budget of Z3 resource units ran out, or
    `timeout` seconds on the wall clock, when given.

    >>> import schedc
    >>> from schedc.api import load_text
    >>> from schedc.testing import assert_deadlock_free
    >>> assert_deadlock_free(schedc.load("1f1b", {"P": 2, "M": 2}))
    >>> both_send = load_text('''schedule both_send {
    ...   rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
    ...   rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
    ... }''', "both_send.pp")
    >>> assert_deadlock_free(both_send, semantics="eager")
    >>> assert_deadlock_free(both_send)
    Traceback (most recent call last):
    ...
    AssertionError: the schedule deadlocks under rendezvous sends
    both_send: 2 ranks, 2 stages, 2 microbatches, comms level
      rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
      rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
    both_send.pp:2:...: error[deadlock]: deadlock under rendezvous sends: rank 0 and rank 1 both send before they receive; ...
    ...
    """
    from .api import check
    sem = _semantics(semantics)
    report = check(program, semantics=sem, engine=engine, timeout=timeout)
    blocking = [d for d in report.errors if d.code != "memory"]
    if report.ok is None:
        _fail(f"could not prove deadlock freedom under {sem} sends: {report.unknown}", program, report)
    if blocking:
        what = "deadlocks" if report.deadlock is not None else "is not a sound schedule"
        _fail(f"the schedule {what} under {sem} sends", program, report)


def assert_within_memory(program: Program, limit, *, semantics="rendezvous") -> None:
    """Assert that no rank's worst-case memory exceeds `limit` (one number for every rank, or a
    `{rank: limit}` mapping) under `semantics`, in the program's memory units (docs/semantics.md: F allocates
    `act`, B frees it, I frees `act - weight`, W frees `weight`; receive buffers and, when sends are
    buffered, unmatched sent messages count too). The message names the rank, the step and what is
    live then. A program that deadlocks or is unsound fails too: its peak is not defined.

    >>> import schedc
    >>> from schedc.testing import assert_within_memory
    >>> assert_within_memory(schedc.load("1f1b", {"P": 4, "M": 8}), 4)
    >>> assert_within_memory(schedc.load("gpipe", {"P": 4, "M": 8}), 4)
    Traceback (most recent call last):
    ...
    AssertionError: memory over the limit under rendezvous sends
    ...
    """
    import math
    from .api import check
    if isinstance(limit, Mapping):
        limits = dict(limit)
    elif isinstance(limit, (int, float)) and not isinstance(limit, bool):
        limits = {r: float(limit) for r in range(program.num_ranks)}
    else:
        raise TypeError(f"limit={limit!r}: expected a number or a {{rank: limit}} mapping")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) for v in limits.values()):
        raise ValueError(f"limit={limit!r}: every limit must be a number")
    sem = _semantics(semantics)
    report = check(program, semantics=sem, memory_limit=limits)
    if report.memory_violations:
        _fail(f"memory over the limit under {sem} sends", program, report)
    if not report.ok:
        _fail(f"the schedule has no defined peak memory under {sem} sends: it is not sound or deadlocks",
              program, report)


# ---------------------------------------------------------------------------------------------
# Gradients: the runtime on real gloo ranks against the unsplit model
# ---------------------------------------------------------------------------------------------
def _spec(fn, what: str) -> dict:
    """Where a worker process finds a function: its module (by name, or by file) and name."""
    import sys
    if isinstance(fn, str):
        path, _, name = fn.partition(":")
        if not path or not name:
            raise ValueError(f"{what}={fn!r}: expected 'package.module:function'")
        return {"module": path, "file": None, "name": name}
    if not callable(fn):
        raise TypeError(f"{what}={fn!r} must be a function or 'package.module:function'")
    name, module = getattr(fn, "__qualname__", ""), getattr(fn, "__module__", None)
    if not module or "<" in name:
        raise TypeError(f"{what}: {fn!r} is not a module-level function; the ranks run in other processes "
                        "and must import it (define it at the top of a module)")
    file = getattr(sys.modules.get(module), "__file__", None) or getattr(fn, "__globals__", {}).get("__file__")
    if module == "__main__":  # the script being run: the ranks load its file under another name (its
        if not file:          # `if __name__ == "__main__":` part then stays out), or cannot find it at all
            raise TypeError(f"{what}: {fn!r} is defined in an interactive session; the ranks run in other "
                            "processes and must import it (define it in a module or a script file)")
        module = "_schedc_main_script"
    return {"module": module, "file": file, "name": name}


def _resolve(spec: dict):
    import importlib
    import importlib.machinery
    import importlib.util
    import sys
    try:
        module = importlib.import_module(spec["module"])
    except ImportError:
        if not spec["file"]:
            raise
        name, file = spec["module"], spec["file"]
        loaded = importlib.util.spec_from_file_location(name, file)
        if loaded is None:  # a file name Python does not know (a script run as `python train`): source all the same
            loaded = importlib.util.spec_from_file_location(name, file,
                                                            loader=importlib.machinery.SourceFileLoader(name, file))
        if loaded is None or loaded.loader is None:
            raise ImportError(f"cannot load {file} as a module") from None
        module = importlib.util.module_from_spec(loaded)
        sys.modules[name] = module
        loaded.loader.exec_module(module)
    value = module
    for part in spec["name"].split("."):
        value = getattr(value, part)
    return value


def _function(fn, what: str):
    """(the function here, where the ranks find it)."""
    spec = _spec(fn, what)
    return (_resolve(spec) if isinstance(fn, str) else fn), spec


def _companion(build, name: str):
    """`loss_fn` / `make_batch` beside `build_stages` in its module, as `schedc run --model` finds them."""
    import importlib
    found = getattr(build, "__globals__", {}).get(name)
    if found is None and isinstance(build, str):
        found = getattr(importlib.import_module(build.partition(":")[0]), name, None)
    if not callable(found):
        module = build.partition(":")[0] if isinstance(build, str) else build.__module__
        raise TypeError(f"pass {name}=..., or define {name} beside build_stages in {module}")
    return _function(found, name)


def assert_same_gradients(program: Program, build_stages, *, loss_fn=None, make_batch=None, steps: int = 2,
                          batch_size: int | None = None, atol: float = 1e-9, rtol: float = 1e-7,
                          timeout: float = 30.0) -> None:
    """Assert that schedc's runtime, running `program` on one gloo process per rank, gives the
    parameter gradients (and loss) of training the unsplit model on the whole batch, in float64.

    `build_stages(stage_ids, num_stages) -> [nn.Module]` builds the stages (as `schedc run --model`
    takes it); `loss_fn(output, target)` must average over the batch and `make_batch(step, size)
    -> (inputs, targets)` make one training step's data; both default to the functions of those
    names in the module of `build_stages`. Each must be a module-level function (or a
    `'package.module:function'` string): the ranks are other processes and import them. A
    compute-level program gets its communication inserted first. Runs `steps` training steps
    (the second one with receive shapes learned in the first), each compared separately.

    With routes (DualPipe), `build_stages` is asked for the model's stages each copy runs, and each
    copy's gradient is the sum over the copies (schedc's runtime sums them as the step ends): the
    unsplit model's gradient of its model stage.

    Fails with the first parameter whose gradient differs (rank, stage, name, the largest
    difference), or with the runtime's own report when a rank fails: the watchdog's when a send or
    receive waits past `timeout` seconds (a deadlock), or the action that failed. Needs torch;
    spawning ranks takes a few seconds, so keep `max_examples` small in a Hypothesis test.
    """
    import io
    import json
    import os
    import sys
    import tempfile
    from pathlib import Path

    from .lower import table_of
    from .passes import lower
    from .runtime.launch import launch
    if not isinstance(program, Program):
        raise TypeError(f"program must be a schedc.ir.Program, not {type(program).__name__}")
    if not (isinstance(steps, int) and steps >= 1 and timeout > 0):
        raise ValueError("steps must be a positive integer and timeout positive")
    lowered = lower(program)
    meta, ranks = table_of(lowered, None).to_data()
    M = program.num_microbatches
    size = batch_size or 2 * M
    build_fn, build = _function(build_stages, "build_stages")
    loss_f, loss = _function(loss_fn, "loss_fn") if loss_fn is not None else _companion(build_stages, "loss_fn")
    batch_f, batch = (_function(make_batch, "make_batch") if make_batch is not None
                      else _companion(build_stages, "make_batch"))
    with tempfile.TemporaryDirectory(prefix="schedc-grad-") as tmp:
        job = Path(tmp, "job.json")
        job.write_text(json.dumps({"meta": meta, "ranks": ranks, "build": build, "loss": loss, "batch": batch,
                                   "steps": steps, "batch_size": size, "timeout": timeout, "out": tmp,
                                   "path": sys.path}))
        out, err = io.StringIO(), io.StringIO()
        code = f"import sys; from schedc.testing import _gradient_worker; sys.exit(_gradient_worker({str(job)!r}))"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        done = launch([sys.executable, "-c", code], program.num_ranks, stdout=out, stderr=err, grace=5.0,
                      env=env, deadline=timeout * 2 + 60)
        if not done.ok:
            codes = list(done.returncodes)
            why = ("the watchdog stopped a send or receive that waited past the timeout" if 124 in codes
                   else "an action failed" if 1 in codes else "a rank did not finish")
            killed = f"; ranks {list(done.killed)} were stopped" if done.killed else ""
            raise AssertionError(f"the run failed: {why} (exit codes {codes}{killed})\n"
                                 f"{_title(program)}\n{listing(lowered)}\n{err.getvalue().rstrip()}")
        results = [_load_result(Path(tmp, f"rank{r}.pt")) for r in range(program.num_ranks)]
    _compare_gradients(program, lowered, results, build_fn, loss_f, batch_f, steps, size, atol, rtol)


def _load_result(path):
    import torch
    return torch.load(path, weights_only=True)


def reference_gradients(build, loss_fn, S: int, x, y):
    """Loss and per-stage (name, gradient) lists of the unsplit model on the whole batch (float64):
    what a pipelined step must reproduce. `build(stages, S)` gives the stage modules, as for
    assert_same_gradients."""
    modules = [m.double() for m in build(list(range(S)), S)]
    out = x
    for m in modules:
        out = m(out)
    loss = loss_fn(out, y)
    loss.backward()
    return loss.item(), [[(n, p.grad) for n, p in m.named_parameters()] for m in modules]


def as_double(t):
    """A floating tensor in float64 (the reference's precision); others as they are."""
    return t.double() if t.is_floating_point() else t


def _compare_gradients(program, lowered, results, build, loss_fn, make_batch, steps, size, atol, rtol) -> None:
    import torch

    from .rules.deps import model_stage, stages_of
    stages = stages_of(program)
    for step in range(steps):
        x, y = (as_double(t) for t in make_batch(step, size))
        ref_loss, ref = reference_gradients(build, loss_fn, program.model_stages, x, y)
        for r, result in enumerate(results):
            got = result["steps"][step]
            for s_text, grads in got["grads"].items():
                s = int(s_text)
                for (name, want), g in zip(ref[model_stage(stages, s)], grads):
                    if want is None and g is None:
                        continue
                    if g is None or want is None or g.shape != want.shape or \
                            not torch.allclose(g, want, atol=atol, rtol=rtol):
                        diff = "missing" if g is None or want is None else (
                            "shape " + str(tuple(g.shape)) if g.shape != want.shape else
                            f"largest difference {(g - want).abs().max().item():.3g}")
                        raise AssertionError(
                            f"gradients differ from the unsplit model: rank {r}, stage {s}, parameter {name!r}, "
                            f"training step {step + 1}: {diff} (atol {atol}, rtol {rtol})\n"
                            f"{_title(program)}\n{listing(lowered)}")
        # each rank that computes a loss: the mean over its microbatches (with routes, several ranks)
        means = [(got["loss"], got.get("microbatches", 1), r) for r, res in enumerate(results)
                 if (got := res["steps"][step])["loss"] is not None]
        loss = sum(x * n for x, n, _ in means) / sum(n for _, n, _ in means) if means else ref_loss
        if abs(loss - ref_loss) > atol + rtol * abs(ref_loss):
            raise AssertionError(f"the loss differs from the unsplit model's at training step {step + 1}: "
                                 f"{loss!r} on rank(s) {[r for _, _, r in means]}, {ref_loss!r} unsplit\n"
                                 f"{_title(program)}\n{listing(lowered)}")


def _gradient_worker(job_path: str) -> int:
    """One rank of `assert_same_gradients`: run the table, save this rank's gradients and losses."""
    import datetime
    import json
    import os
    import sys
    from pathlib import Path
    job = json.loads(Path(job_path).read_text())
    for p in reversed(job["path"]):
        if p not in sys.path:
            sys.path.insert(0, p)
    import torch
    import torch.distributed as dist

    from .runtime.entry import end_rank, make_copy_groups, same_copies, split
    from .runtime.interpreter import PipelineInterpreter, StepFailure
    from .runtime.table import load_table
    from .runtime.watchdog import Watchdog
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    table = load_table(job["meta"], job["ranks"])
    build, loss_fn, make_batch = (_resolve(job[k]) for k in ("build", "loss", "batch"))
    M = table.num_microbatches
    mine = table.stages_of(rank)
    built = build([table.model_stage(s) for s in mine], table.model_stages) if mine else []  # (routes: copies)
    modules = {s: m.double() for s, m in zip(mine, built)}
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=job["timeout"] + 30))
    copies = make_copy_groups(table, rank, job["timeout"] + 30)
    same_copies(modules, table, rank, copies)
    interp = PipelineInterpreter(table, rank, modules, loss_fn, watchdog=Watchdog(job["timeout"]), copy_groups=copies)
    entry, loss = any(table.is_entry(s) for s in mine), any(table.is_exit(s) for s in mine)
    out: dict[str, Any] = {"steps": []}
    try:
        for step in range(job["steps"]):
            x, y = (as_double(t) for t in make_batch(step, job["batch_size"]))
            losses = interp.step(split(x, M) if entry else None, split(y, M) if loss else None)
            grads = {str(s): [None if p.grad is None else p.grad.detach().clone() for p in modules[s].parameters()]
                     for s in mine}
            for s in mine:
                modules[s].zero_grad(set_to_none=True)
            out["steps"].append({"grads": grads, "loss": torch.stack(losses).mean().item() if loss else None,
                                 "microbatches": len(losses)})
    except StepFailure as exc:
        sys.stderr.write(f"schedc runtime: {exc}\n")
        sys.stderr.flush()
        os._exit(1)
    torch.save(out, Path(job["out"], f"rank{rank}.pt"))
    dist.barrier()
    interp.close()
    end_rank()
