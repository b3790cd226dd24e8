"""Schedules read from the frameworks that run them: `deepspeed:NAME` and `megatron:NAME` name the
order DeepSpeed's or Megatron-Core's own code issues at the given P, M (and V), read from the
installed package (lazily: nothing is imported until such a name is loaded) into a schedc program;
torchtitan's job config is read into a job by `schedc import torchtitan` (`torchtitan.py`).
"""
from __future__ import annotations

from typing import Callable, Mapping

from ..errors import SchedcError
from ..ir import Program
from . import deepspeed, megatron
from .common import Refused as Refused  # (the framework's own refusal of P and M: `plan` passes over the layout)

FRAMEWORKS = {"deepspeed": deepspeed, "megatron": megatron}  # the frameworks whose schedules are names

SWITCHES = ("BATCHED", "OVERLAP")  # parameters that are 0 or 1 (a framework's boolean setting)
# the most characters a schedule's listing takes per rank, microbatch and model chunk (measured up to
# P=64 near each limit, with some room: more with more digits and with BATCHED, OVERLAP); P x M x V is
# refused past the source limit over these (`max_work`) before the framework's code runs (tracing
# Megatron-Core at P=2, M=1,000,000 took minutes and GBs; at P=4, M=10,000, 10 s, and then its
# listing, 4.6 M characters, was over the source limit), and a listing still over it after tracing is
# refused naming P x M x V, not at a line of a text the user never saw
CHARACTERS = {"megatron:1f1b": 160, "megatron:interleaved": 170, "deepspeed:train": 80, "deepspeed:inference": 40,
              "deepspeed:dualpipev": 290}


def max_work(name: str) -> int:
    """The largest P x M x V of `name` whose listing fits the source limit."""
    from ..parse import MAX_SOURCE_BYTES
    return MAX_SOURCE_BYTES // CHARACTERS[name]


def is_imported(name: str) -> bool:
    """Whether `name` names a framework's schedule (`deepspeed:train`, `megatron:1f1b`)."""
    return name.partition(":")[0] in FRAMEWORKS and ":" in name


def schedule_names() -> tuple[str, ...]:
    """Every `framework:schedule` name an importer reads."""
    return tuple(f"{fw}:{n}" for fw, mod in FRAMEWORKS.items() for n in mod.SCHEDULES)


def load(name: str, params: Mapping[str, int] | None = None, *, forward_only: bool = False,
         strict: bool = True) -> Program:
    """The program the framework's own code issues for `name` at `params`, compiled from its listing
    (`strict=False`: parameters the schedule does not take are left out, as `compare` gives them)."""
    from ..compiler import compile_schedule  # (here: loading schedc.api stays free of the compiler)
    from ..parse import parse
    text = listing(name, params, forward_only=forward_only, strict=strict)
    _within_source_limit(name, params, text)
    return compile_schedule(parse(text, name), None)


def listing(name: str, params: Mapping[str, int] | None = None, *, forward_only: bool = False,
            strict: bool = True) -> str:
    """The schedc text (literal per-rank lists, one line per framework step) of `name` at `params`."""
    module, schedule = _schedule(name)
    build: Callable[..., str] = module.SCHEDULES[schedule]
    known = module.PARAMS[schedule]
    given = {k: v for k, v in (params or {}).items() if strict or k in known}
    return build(settings(name, given, known), forward_only=forward_only)


def takes(name: str) -> tuple[str, ...]:
    """The parameters the framework's schedule `name` takes (`P`, `M`, ...)."""
    module, schedule = _schedule(name)
    return tuple(module.PARAMS[schedule])


def _schedule(name: str):
    """The framework's module and the schedule's name in it, or a usage error listing those it has."""
    framework, _, schedule = name.partition(":")
    module = FRAMEWORKS[framework]
    if schedule not in module.SCHEDULES:
        raise SchedcError("usage", f"{framework} has no schedule {schedule!r}; schedc imports "
                          f"{', '.join(framework + ':' + s for s in module.SCHEDULES)}", where=name)
    return module, schedule


def settings(name: str, params: Mapping[str, int] | None, known: Mapping[str, int | None]) -> dict[str, int]:
    """`params` checked against the ones the schedule takes (`known`: name -> default, None when
    required): an unknown or missing one, a count below 1 or a switch neither 0 nor 1 is an error."""
    given = dict(params or {})
    for key in given:
        if key not in known:
            raise SchedcError("unknown-param", f"{name} takes {', '.join(known)}, not {key}", where="--param")
    values = {k: given.get(k, default) for k, default in known.items()}
    for key, value in values.items():
        if value is None:
            raise SchedcError("missing-param", f"{name} needs --param {key}=...", where="--param")
        if key in SWITCHES and value not in (0, 1):
            raise SchedcError("range", f"{name}: {key} is 0 or 1, not {value}", where="--param")
        if key not in SWITCHES and value < 1:
            raise SchedcError("range", f"{name}: {key}={value} must be at least 1", where="--param")
    work = _work(values)  # type: ignore[arg-type]
    if work > max_work(name):
        raise SchedcError("too-large", f"{_at(name, values)}: P x M x V is {work:,}, at most {max_work(name):,} (its "
                          f"listing takes up to {CHARACTERS[name]} characters a rank, microbatch and chunk, and "
                          "would be over the 1,000,000-character source limit; docs/limits.md)", where="--param")
    return values  # type: ignore[return-value]


def refusal(name: str, params: Mapping[str, int] | None) -> str | None:
    """Why the framework's schedule `name` cannot be read at `params` (those it does not take left
    out, as `plan` gives them), known before its code is imported or traced: P x M x V past its
    listing limit, or settings the framework refuses by a rule of its own (megatron:interleaved on
    one rank); None when it may be read (`load` still checks what this does not: a missing
    parameter, a count below 1, and what the framework says once it runs)."""
    module, schedule = _schedule(name)
    known = module.PARAMS[schedule]
    values = {k: (params or {}).get(k, default) for k, default in known.items()}
    if any(v is None for v in values.values()):
        return None
    if _work(values) > max_work(name):  # type: ignore[arg-type]
        from ..parse import MAX_SOURCE_BYTES
        return (f"P x M x V is over {max_work(name):,} there, and its listing would pass the "
                f"{MAX_SOURCE_BYTES:,}-character source limit (docs/limits.md)")
    refuses = getattr(module, "refuses", None)
    return refuses(schedule, values) if refuses is not None else None


def _work(values: Mapping[str, int]) -> int:
    """P x M x V: the ranks, microbatches and chunks a listing holds."""
    return values["P"] * values["M"] * values.get("V", 1)


def _at(name: str, values: Mapping[str, int | None]) -> str:
    return f"{name} at {', '.join(f'{k}={v}' for k, v in values.items())}"


def _within_source_limit(name: str, params: Mapping[str, int] | None, text: str) -> None:
    """A `too-large` error at --param, naming P x M x V, for a listing over the source limit (which
    the parser would report at line 1 of a text the user never saw)."""
    from ..parse import MAX_SOURCE_BYTES
    if len(text) > MAX_SOURCE_BYTES:
        given = dict(params or {})
        work = given.get("P", 1) * given.get("M", 1) * given.get("V", 1)
        raise SchedcError("too-large", f"{_at(name, given)}: its listing is {len(text):,} characters, over the "
                          f"{MAX_SOURCE_BYTES:,}-character source limit (P x M x V is {work:,}; docs/limits.md): "
                          "fewer ranks, microbatches or chunks", where="--param")
