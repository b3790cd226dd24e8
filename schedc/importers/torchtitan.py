"""torchtitan's job config read into a schedc job: its `--parallelism.*` and `--training.*` options
(and `--module/--config`'s defaults) parsed into torchtitan's own config classes, then its own
pipeline code (`torchtitan.distributed.pipeline_parallel`) says the stages per rank, their placement,
the layers of each stage and the microbatches; the job is the schedc schedule that torchtitan runs
(a built-in at P, V, M, or the CSV it loads) and a setup file's [parallelism] table.
"""
from __future__ import annotations

import dataclasses
import re
import types
from dataclasses import dataclass, field
from typing import Any

from ..errors import SchedcError
from .common import quiet, require, version

WHERE = "torchtitan"
# torch's schedule class (torchtitan's `pipeline_parallel_schedule` names it) -> schedc's built-in
BUILTINS = {"ScheduleGPipe": "gpipe", "Schedule1F1B": "1f1b", "ScheduleInterleaved1F1B": "interleaved_1f1b",
            "ScheduleLoopedBFS": "looped_bfs", "ScheduleInterleavedZeroBubble": "interleaved_zero_bubble",
            "ScheduleZBVZeroBubble": "zbv", "ScheduleDualPipeV": "dualpipev"}
_MULTI = ("interleaved_1f1b", "looped_bfs", "interleaved_zero_bubble")  # built-ins that take V
SECTIONS = ("parallelism", "training")  # the config tables read; other sections' options are listed as not read
# torchtitan's degree fields that a schedc setup's [parallelism] table takes under the same name
DEGREES = ("data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
           "context_parallel_degree", "expert_parallel_degree", "pipeline_parallel_degree")


@dataclass
class Job:
    """What torchtitan runs, as schedc reads it: the schedule (`name`, a built-in or the CSV's path, at
    `params`, `placement`), the [parallelism] table, and what it was read from."""

    schedule: str  # torchtitan's pipeline_parallel_schedule, as given
    torch_class: str  # the class torchtitan builds (`_PipelineScheduleRuntime` for a CSV)
    name: str
    params: dict[str, int]
    placement: str  # "loop" or "vshape"
    csv: str | None
    stages_per_rank: int
    local_batch_size: int
    microbatch_size: int
    layers: int | None
    layers_per_stage: list[int] | None
    parallelism: dict[str, Any]
    model: str | None = None
    hardware: str | None = None
    seq_len: int | None = None
    not_read: list[str] = field(default_factory=list)

    def arguments(self) -> str:
        """The schedule as schedc's command line names it: `zbv --param P=4,M=8`."""
        params = ",".join(f"{k}={v}" for k, v in self.params.items())
        placement = f" --placement {self.placement}" if self.csv else ""
        return f"{self.name} --param {params}{placement}"

    def setup_toml(self, origin: str) -> str:
        """The setup file of the job: its [parallelism] table, and [model] / [hardware] when named."""
        lines = [f"# {origin}",
                 f"# torchtitan {version('torchtitan')} runs {self.torch_class} on {self.params['P']} ranks, "
                 f"{self.stages_per_rank} stage(s) each ({self.placement}), {self.params['M']} microbatches",
                 f"# schedule: {self.arguments()}", ""]
        if self.model is not None:
            lines += ["[model]", f"preset = {_toml(self.model)}", f"micro_batch = {self.microbatch_size}",
                      *([f"seq_len = {self.seq_len}"] if self.seq_len is not None else []), ""]
        if self.hardware is not None:
            lines += ["[hardware]", f"preset = {_toml(self.hardware)}", ""]
        lines.append("[parallelism]")
        lines += [f"{k} = {_toml(v)}" for k, v in self.parallelism.items()]
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {"framework": "torchtitan", "version": version("torchtitan"), "schedule": self.schedule,
                "torch_class": self.torch_class, "name": self.name, "params": self.params,
                "placement": self.placement, "csv": self.csv, "stages_per_rank": self.stages_per_rank,
                "microbatches": self.params["M"], "local_batch_size": self.local_batch_size,
                "microbatch_size": self.microbatch_size, "layers": self.layers,
                "layers_per_stage": self.layers_per_stage, "parallelism": self.parallelism,
                "arguments": self.arguments(), "not_read": self.not_read}


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return str(v)


def read(options: list[str], *, layers: int | None = None, gpus: int | None = None, model: str | None = None,
         hardware: str | None = None) -> Job:
    """The job torchtitan's `options` (as its command line takes them) describe. `layers`: the model's
    transformer layers (torchtitan reads them from its model); `gpus`: the job's world size, which
    resolves `data_parallel_shard_degree = -1`. A CSV's path is found as torchtitan finds it, from here."""
    _, pp = require("torchtitan", "torchtitan.config", "torchtitan.distributed.pipeline_parallel")
    given, module, not_read = _options(options)
    parallelism, training, layers_of_config = _configs(given, module)
    layers = layers if layers is not None else layers_of_config
    P = parallelism.pipeline_parallel_degree
    if P < 2:
        raise SchedcError("importer", f"pipeline_parallel_degree is {P}: torchtitan runs no pipeline "
                          "(--parallelism.pipeline_parallel_degree N, N >= 2)", where=WHERE)
    _within_limits(P, training.local_batch_size, parallelism.pipeline_parallel_microbatch_size, layers)
    csv = parallelism.pipeline_parallel_schedule_csv or None
    stages, split = _stages(pp, parallelism, P, layers)
    schedule = _build(pp, parallelism, training, P, stages)
    V = stages // P
    placement = _placement(pp, parallelism.pipeline_parallel_schedule, P, stages)
    M = schedule._n_microbatches
    torch_class = type(schedule).__name__
    if csv is None:
        name = BUILTINS.get(torch_class)
        if name is None:
            raise SchedcError("importer", f"torchtitan builds {torch_class}, which has no schedc built-in: give "
                              "its order as a CSV (--parallelism.pipeline_parallel_schedule_csv)", where=WHERE)
        params = {"P": P, "V": V, "M": M} if name in _MULTI else {"P": P, "M": M}
    else:
        name, params = csv, {"P": P, "M": M, "V": V}
    table = _parallelism_table(parallelism, gpus, split)
    seq_len = training.seq_len if "training.seq_len" in given or module else None
    return Job(parallelism.pipeline_parallel_schedule, torch_class, name, params, placement, csv, V,
               training.local_batch_size, parallelism.pipeline_parallel_microbatch_size, layers, split, table,
               model, hardware, seq_len, not_read)


def _within_limits(P: int, batch: int, micro: int, layers: int | None) -> None:
    """Sizes schedc compiles (docs/limits.md), refused before torchtitan's code builds anything of them."""
    from ..compiler import MAX_MICROBATCHES, MAX_RANKS, MAX_STAGES
    M = batch // micro if micro > 0 else 0
    for what, value, limit in (("pipeline_parallel_degree", P, MAX_RANKS), ("microbatches", M, MAX_MICROBATCHES),
                               ("layers", layers or 0, MAX_STAGES)):
        if value > limit:
            raise SchedcError("too-large", f"{what} {value} is more than schedc's limit, {limit:,}", where=WHERE)


# ---- torchtitan's options ----
_OPTION = re.compile(r"--([a-z_][a-z0-9_-]*)\.([a-z_][a-z0-9_-]*)$", re.I)


def _tokens(options: list[str]) -> list[tuple[str, str | None]]:
    """(option, value) pairs: `--a.b value`, `--a.b=value`, or a flag alone (None)."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(options):
        arg, value = options[i], None
        if "=" in arg and arg.startswith("--"):
            arg, value = arg.split("=", 1)
        elif i + 1 < len(options) and not options[i + 1].startswith("--"):
            value, i = options[i + 1], i + 1
        out.append((arg, value))
        i += 1
    return out


def _options(options: list[str]) -> tuple[dict[str, str | None], tuple[str, str] | None, list[str]]:
    """`--section.key value` of the sections read, `--module`/`--config`, and the other options
    (listed as not read)."""
    given: dict[str, str | None] = {}
    chosen: dict[str, str] = {}
    not_read = []
    for arg, value in _tokens(options):
        if arg in ("--module", "--config"):
            if value is None:
                raise SchedcError("usage", f"torchtitan's {arg} needs a value", where=WHERE)
            chosen[arg] = value
            continue
        match = _OPTION.match(arg)
        if match is None and not arg.startswith("--"):
            raise SchedcError("usage", f"{arg!r} is not a torchtitan option (--section.key VALUE)", where=WHERE)
        section = match.group(1).replace("-", "_") if match else None
        if match is None or section not in SECTIONS:
            not_read.append(arg)
            continue
        key = match.group(2).replace("-", "_")
        if key.startswith("no_") and value is None:  # a boolean flag's negation, as tyro writes it
            key, value = key[3:], "false"
        given[f"{section}.{key}"] = value
    if len(chosen) == 1:
        raise SchedcError("usage", "torchtitan takes --module and --config together (--module llama3 --config "
                          "llama3_8b)", where=WHERE)
    return given, (chosen["--module"], chosen["--config"]) if chosen else None, not_read


def _configs(given: dict[str, str | None], module: tuple[str, str] | None) -> tuple[Any, Any, int | None]:
    """torchtitan's ParallelismConfig and TrainingConfig: the config function's (`--module/--config`)
    or the defaults, with the options given on top; and the model's layers where the config says."""
    from torchtitan.config import ParallelismConfig, TrainingConfig
    base: dict[str, Any] = {"parallelism": ParallelismConfig(), "training": TrainingConfig()}
    layers = None
    if module is not None:
        loaded = _config_function(*module)
        base = {s: getattr(loaded, s, base[s]) for s in SECTIONS}
        model = getattr(getattr(loaded, "model_spec", None), "model", None)
        layers = len(model.layers) if model is not None and hasattr(model, "layers") else None
    out = []
    for section in SECTIONS:
        cls = type(base[section])
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for option, value in given.items():
            s, _, key = option.partition(".")
            if s != section:
                continue
            if key not in fields:
                from ..expr import did_you_mean
                raise SchedcError("usage", f"torchtitan {version('torchtitan')} has no --{option}"
                                  f"{did_you_mean(key, list(fields))}", where=WHERE)
            values[key] = _value(option, value, fields[key].type)
        try:
            out.append(dataclasses.replace(base[section], **values))
        except (ValueError, TypeError) as exc:
            raise SchedcError("importer", f"torchtitan refuses --{section}.*: {exc}", where=WHERE) from None
    return out[0], out[1], layers


def _config_function(module: str, config: str) -> Any:
    """torchtitan's own loader of `--module M --config C` (ConfigManager._load_config)."""
    from torchtitan.config import ConfigManager
    try:
        with quiet():
            loaded, _ = ConfigManager()._load_config(["--module", module, "--config", config])
    except Exception as exc:  # noqa: BLE001 - a model that does not import here says why, not with a traceback
        raise SchedcError("importer", f"torchtitan's --module {module} --config {config} does not load here "
                          f"({type(exc).__name__}: {exc}); give the model's layers (--layers N or --model NAME) "
                          "and the options the config sets (--parallelism.*, --training.*) instead",
                          where=WHERE) from None
    return loaded


def _value(option: str, text: str | None, kind: Any) -> Any:
    """`text` as the field's type: int, bool, str, float, or any of them or None."""
    names = kind.__name__ if isinstance(kind, type) else str(kind).replace("typing.", "")
    if text is None and "bool" not in names:
        raise SchedcError("usage", f"torchtitan's --{option} needs a value", where=WHERE)
    if text is None or (text == "None" and "None" in names):
        return text is None or None  # a flag alone is true; None where the field takes it
    value = _convert(text, names)
    if value is _NOT:
        raise SchedcError("usage", f"torchtitan's --{option} takes {names}, not {text!r}", where=WHERE)
    return value


_NOT = object()


def _convert(text: str, names: str) -> Any:
    """`text` as the type `names` says, or _NOT."""
    if "bool" in names:
        return text.lower() == "true" if text.lower() in ("true", "false") else _NOT
    if re.fullmatch(r"int( \| None)?|None \| int", names):
        return int(text) if re.fullmatch(r"-?\d+", text) else _NOT
    if "float" in names:
        try:
            return float(text) if "." in text or "e" in text.lower() else int(text)
        except ValueError:
            return _NOT
    if "str" in names and "list" not in names:
        return text
    raise SchedcError("usage", f"schedc reads no {names} from torchtitan's command line", where=WHERE)


# ---- torchtitan's pipeline code ----
def _stages(pp: Any, parallelism: Any, P: int, layers: int | None) -> tuple[int, list[int] | None]:
    """(the stages, the layers of each) as torchtitan's `_get_pipeline_metadata` and
    `_generate_llm_fqn_per_model_part` (or `module_fqns_per_model_part`) make them."""
    if layers is None and parallelism.pipeline_parallel_layers_per_stage is not None:
        raise SchedcError("usage", "torchtitan counts stages from pipeline_parallel_layers_per_stage and the model's "
                          "layers: give them (--layers N or --model NAME)", where=WHERE)
    try:
        with quiet():
            stages, n, first, last = pp._get_pipeline_metadata(
                types.SimpleNamespace(pp=P), parallelism, types.SimpleNamespace(layers=[None] * (layers or 0)))
            parts = parallelism.module_fqns_per_model_part
            if parts is None and layers is not None:
                parts = pp._generate_llm_fqn_per_model_part(stages, n, first, last)
    except Exception as exc:  # noqa: BLE001 - whatever torchtitan's own code raises, it refuses the settings
        raise SchedcError("importer", f"torchtitan refuses the pipeline: {_said(exc)}", where=WHERE) from None
    if parts is not None:
        stages = len(parts)
    split = [sum(1 for m in part if m.startswith("layers.")) for part in parts] if parts is not None else None
    return stages, split


class _Stage:
    """What torch's schedule constructors read of a `PipelineStage` (no model, no process group)."""

    def __init__(self, stage: int, stages: int, ranks: int, rank: int):
        self.stage_index, self.num_stages, self.group_size, self.group_rank = stage, stages, ranks, rank
        self.is_first, self.is_last = stage == 0, stage == stages - 1
        self.submod = None
        self.stage_index_to_group_rank: dict[int, int] = {}


def _build(pp: Any, parallelism: Any, training: Any, P: int, stages: int) -> Any:
    """Rank 0's schedule as torchtitan's `_build_pipeline_schedule` builds it (its microbatches, its
    checks, the CSV loaded), on stages that stand in for the model's."""
    held = _stage_indices(pp, parallelism.pipeline_parallel_schedule, 0, P, stages)
    try:
        with quiet():
            return pp._build_pipeline_schedule(parallelism=parallelism, local_batch_size=training.local_batch_size,
                                               stages=[_Stage(s, stages, P, 0) for s in held],
                                               loss_fn=lambda *a, **k: (None, None))
    except Exception as exc:  # noqa: BLE001 - whatever torchtitan's own code raises, it refuses the settings
        raise SchedcError("importer", f"torchtitan refuses the schedule: {_said(exc)}", where=WHERE) from None


def _said(exc: Exception) -> str:
    """An exception from torchtitan's code as a line: its message, or its type where it has none."""
    text = str(exc).strip()
    return text if text and not isinstance(exc, (ZeroDivisionError, KeyError, TypeError)) else \
        f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _stage_indices(pp: Any, schedule: str, rank: int, P: int, stages: int) -> tuple[int, ...]:
    try:
        return tuple(pp._get_pp_rank_to_stage_indices_mapping(rank, P, schedule, stages))
    except (ValueError, AssertionError) as exc:
        raise SchedcError("importer", f"torchtitan refuses the placement: {exc}", where=WHERE) from None


def _placement(pp: Any, schedule: str, P: int, stages: int) -> str:
    """`loop` or `vshape`: torchtitan's rank -> stages map (`_get_pp_rank_to_stage_indices_mapping`)."""
    held = [_stage_indices(pp, schedule, r, P, stages) for r in range(P)]
    if all(h == tuple(range(r, stages, P)) for r, h in enumerate(held)):
        return "loop"
    if all(h == (r, stages - 1 - r) for r, h in enumerate(held)):
        return "vshape"
    raise SchedcError("importer", f"torchtitan places the stages as {held}, neither looped nor in a V", where=WHERE)


def _parallelism_table(parallelism: Any, gpus: int | None, split: list[int] | None) -> dict[str, Any]:
    """The setup's [parallelism] table: the degrees (torchtitan's -1 resolved over `gpus` by its
    ParallelDims), sequence parallelism, the layers of each stage."""
    degrees = {k: getattr(parallelism, k) for k in DEGREES}
    if degrees["data_parallel_shard_degree"] == -1:
        if gpus is None:
            raise SchedcError("usage", "data_parallel_shard_degree is -1 (torchtitan's default: the GPUs the other "
                              "degrees leave): give the job's GPUs (--gpus N) or the degree", where=WHERE)
        from torchtitan.distributed import ParallelDims
        try:
            degrees["data_parallel_shard_degree"] = ParallelDims.from_config(parallelism, gpus).dp_shard
        except AssertionError as exc:
            raise SchedcError("importer", f"torchtitan refuses {gpus} GPUs: {exc}", where=WHERE) from None
    table: dict[str, Any] = dict(degrees)
    table["enable_sequence_parallel"] = parallelism.enable_sequence_parallel
    if split is not None:
        table["pipeline_parallel_layers_per_stage"] = split
    return table
