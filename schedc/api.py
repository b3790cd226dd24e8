"""The public Python API: load a schedule from anywhere, check it, move it to and from PyTorch.

`load` takes a built-in name (`1f1b`), a `.pp` file, a PyTorch `.csv` or a schedc IR `.json`.
"""
from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from .report import ENGINES, Report, run_checks
from .columns import columns_of
from .errors import Diagnostic, SchedcError
from .inputs import decode, is_pipe, read_text
from .interop.formats import by_extension, named, readable
from . import importers
from .ir import NOTATIONS, Program
from .resources import builtin_schedules
from .rules.semantics import Semantics
from .rules.losses import out_of_order
from .rules.time import step_collectives

_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)  # (opening a pipe: no wait)


def detect_format(path: str) -> str:
    """The format a file's extension picks (schedc/interop/formats.py): `pp` for any it does not know."""
    return by_extension(path).name


def resolve(path_or_name: str) -> Path:
    """A file path, or the file of a built-in schedule."""
    return _resolve(path_or_name)[0]


def _resolve(path_or_name: str) -> tuple[Path, bool]:
    """(the file, True when it is the path given; False: a built-in's, by its name)."""
    if not path_or_name:  # (Path("") is the current directory)
        raise SchedcError("io", "the path is empty: name a file or a built-in schedule", where="input")
    path = Path(path_or_name)
    try:
        if path.is_file():
            return path, True
        exists = path.exists()
    except OSError as exc:  # a name the file system refuses (too long, ...)
        raise SchedcError("io", f"cannot read {path_or_name[:80]!r}{'...' if len(path_or_name) > 80 else ''}: "
                          f"{exc.strerror or exc}", where="input") from None
    builtins = builtin_schedules()
    if importers.is_imported(path_or_name) and not exists:
        raise SchedcError("usage", f"{path_or_name} is read from its framework, not from a schedule's text, "
                          "which this needs (check, sim, viz, export, compare and run take it)", where=path_or_name)
    if path_or_name in builtins:
        return builtins[path_or_name], False
    if exists and is_pipe(path_or_name):
        raise SchedcError("io", f"{path_or_name} is a pipe, not a file, and this reads files: save its text to one "
                          "(check, sim, viz, export, compile, compare and run read a pipe, and `-`, standard input)",
                          where=path_or_name)
    if exists:
        raise SchedcError("io", f"{path_or_name} is not a file", where=path_or_name)
    from .expr import did_you_mean
    names = ", ".join(builtins)
    raise SchedcError("io", f"no such file or built-in schedule: {path_or_name!r} (built-in: {names})"
                      f"{did_you_mean(path_or_name, builtins)}", where=path_or_name)


def check_notation(notation: object) -> None:
    """A `notation` the API is given must be one `--notation` takes (NOTATIONS): the same usage error,
    not a silent read in the current notation."""
    if notation not in NOTATIONS:
        from .expr import did_you_mean
        choices = ", ".join(map(repr, NOTATIONS))
        hint = did_you_mean(notation, NOTATIONS) if isinstance(notation, str) else ""
        raise SchedcError("usage", f"invalid notation: {notation!r} (choose from {choices}){hint}", where="notation")


def load_text(text: str, name: str, fmt: str = "pp", params: Mapping[str, int] | None = None,
              notation: str = "current", strict_params: bool = True, forward_only: bool = False,
              placement: str | None = None) -> Program:
    """The program in `text`, read from the file `name`: its `source` is `name` whatever the text
    says (an IR file names the schedule it was compiled from), so reports name the file given.
    `forward_only` declares it forward-only, as a schedule's `forward only` line does (for a CSV);
    a CSV's `params` (P, M, V) and `placement` state its shape (schedc/interop/torch_csv.py `stated`)."""
    check_notation(notation)
    program = _read(text, name, fmt, params, notation, strict_params, placement)
    if forward_only and not program.forward_only:
        program = replace(program, forward_only=True)
    return program if program.source == name else replace(program, source=name)


def _read(text: str, name: str, fmt: str, params, notation: str, strict_params: bool,
          placement: str | None = None) -> Program:
    form = named(fmt)
    if form.read is None:
        raise SchedcError("usage", f"{fmt} is written, not read; read one of {', '.join(readable())}",
                          where="--format")
    if not form.takes_params and params:
        raise SchedcError("usage", "--param applies to .pp schedules and PyTorch CSVs only", where="--param")
    if placement is not None and not form.takes_placement:
        raise SchedcError("usage", f"--placement applies to PyTorch CSVs only ({name} is {form.what}; a "
                          "schedule states its own with `place`)", where="--placement")
    if notation != "current" and not form.takes_notation:
        raise SchedcError("usage", f"--notation {notation} applies to PyTorch CSVs only ({name} is {form.what}; "
                          "its actions are named as the schedule language names them)", where="--notation")
    return form.read(form.given(text), name, params=params, notation=notation, strict=strict_params, placement=placement)


def load(path_or_name: str, params: Mapping[str, int] | None = None, *, fmt: str | None = None,
         notation: str = "current", strict_params: bool = True, forward_only: bool = False,
         placement: str | None = None) -> Program:
    """Load and compile a schedule: a built-in name, a .pp file, a PyTorch .csv, or an IR .json
    (`forward_only`: declare it forward-only, e.g. a CSV of an inference schedule; for a CSV,
    `params` P, M, V and `placement` state its ranks, microbatches and stages)."""
    check_notation(notation)
    name = str(path_or_name)
    text, path = _file_text(name), name
    if text is None and importers.is_imported(name):  # `deepspeed:train`: the framework's own order
        return importers.load(name, params, forward_only=forward_only, strict=strict_params)
    if text is None:  # not a readable file of UTF-8 text by that name: resolve it, or say why not
        resolved, given = _resolve(name)
        text, path = read_text(resolved, keep_bom=True), str(resolved)  # (the format judges a mark: `_read`)
        name = name if given else path
    return load_text(text, name, fmt or detect_format(path), params, notation, strict_params, forward_only,
                     placement)


def _file_text(path: str) -> str | None:
    """The text of the regular file at `path`, read with one open, one stat and one read; None
    for anything else (no such file, a directory or a pipe, a read that fails or comes short,
    text that is not UTF-8), which `load` resolves and reads as `resolve` and `read_text` do,
    with their errors."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        data = os.read(fd, info.st_size + 1) if stat.S_ISREG(info.st_mode) else None
    except OSError:
        data = None
    finally:
        os.close(fd)
    if data is None or len(data) != info.st_size:
        return None
    try:
        return decode(data, path, keep_bom=True)
    except SchedcError:
        return None


def check(program: Program, *, semantics: str | Semantics = "rendezvous", engine: str = "native",
          memory_limit: float | Mapping[int, float] | None = None, timeout: float | None = None,
          file: str | None = None) -> Report:
    """Every check on a program; `Report.ok` (None when a solver gave up), `Report.to_dict()`.

    `engine="z3"` re-proves deadlock freedom with the solver (a witness timing when safe), within
    a budget of Z3 resource units and, if `timeout` is given, that many seconds on the wall clock;
    `memory_limit` is one limit for every rank or a {rank: limit} mapping. `file` is what the
    report names the input (`Report.file`, JSON `file`): by default the program's `source`.
    """
    sem = semantics if isinstance(semantics, Semantics) else Semantics.parse(semantics)
    if engine not in ENGINES:
        raise SchedcError("usage", f"unknown engine {engine!r}; expected native or z3", where="--engine")
    if isinstance(memory_limit, (int, float)):
        memory_limit = {r: float(memory_limit) for r in range(program.num_ranks * program.dp)}  # every job rank
    if any(step_collectives(program.annotations.stage_costs)):
        from .passes.stage_ops import add_step_collectives  # (the passes take ~9 ms to import: only for work)
        # a step's reductions and gathers that take time (costs' R, U) where the schedule places none, as
        # `schedc run` does them and `simulate` times them: the program checked is the one that runs
        program = add_step_collectives(program)
    report = run_checks(program, semantics=sem, engine=engine, timeout_s=timeout,
                        memory_limit=dict(memory_limit) if memory_limit else None, file=file)
    if report.ok is not None and report.peak_activation:  # (its structure passed: the later checks ran)
        _torch_loss_order(report, program)  # (beside any other finding: a report says all that is wrong)
    return report


def _torch_loss_order(report: Report, program: Program) -> None:
    """A program whose last stage's forwards torch's runtime would file under other microbatches
    (schedc/rules/losses.py): an error for a PyTorch CSV, which is torch's runtime's input, else a
    note (schedc's runtime runs it; the exports to torch refuse it)."""
    if columns_of(program) is None:  # (asked of the actions: torch_csv is not imported for it)
        found = out_of_order(program)
    else:  # (a CSV read as columns: asked of the columns, no action made)
        from .interop.torch_csv import late_forward
        found = late_forward(program)
    if found is None:
        return
    from .interop.torch_csv import torch_has_no_form, torch_loss_order
    if torch_has_no_form(program) is not None:  # (torch's runtime cannot run it anyway)
        return
    rank, _, a, _ = found
    if a.span is not None and a.span.step is not None:  # a PyTorch CSV's cell (span.py: rank and step set)
        report.errors.append(Diagnostic("torch-loss-order", str(torch_loss_order(program, found, fix="")), a.span, (
            "torch 2.13's _PipelineScheduleRuntime: _maybe_compute_loss appends each loss, _maybe_get_loss(stage, "
            "mb_index) reads entry mb_index",), rank=rank, step=a.span.step))
    else:
        report.notes += (f"torch's runtime cannot run this schedule: {torch_loss_order(program, found)}",)


def to_torch_csv(program: Program, level: str = "comms") -> str:
    """The program as PyTorch's CSV text (`compute` = compute_only, `comms` = compute_comms)."""
    from .interop.torch_csv import to_torch_csv as rows, torch_cannot_run
    why = torch_cannot_run(program)
    if why is not None:
        raise SchedcError("usage", why, where="--to torch-csv")
    return rows(program.replica(0), level).dumps()  # (identical replicas: torch runs this on each)


def from_torch_csv(path: str, *, notation: str = "current", forward_only: bool = False) -> Program:
    """Read a PyTorch schedule CSV (either form) into a Program (`forward_only`: an inference schedule)."""
    return load(path, fmt="torch-csv", notation=notation, forward_only=forward_only)
