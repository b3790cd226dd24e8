"""A model and hardware description: the model, the accelerator it trains on, the link between ranks.

`describe(file, model=, hardware=, link=)` reads a setup file and the presets (schedc/presets.toml);
`Setup` gives a program's per-stage seconds and GiB (schedc/estimate.py; put on it by schedc/costs.py
like a cost file) and each rank's model states. docs/units.md is the user's guide.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Callable

from . import estimate
from .jobs import activations, comm, mesh
from .rules import time as time_rules
from .errors import SchedcError
from .ir import Program, ends_on_one_rank
from .rules.memory import weights_of_stages
from .span import Source
from .units import GIB, Units, rate, size

KINDS = ("model", "hardware", "link")
# The default reserve: 2 GiB for the CUDA context with its library workspaces and the communicators'
# buffers, and 5% of the memory for the caching allocator's fragmentation (docs/units.md, "Reserve")
RESERVE_FIXED = 2 * GIB
RESERVE_FRACTION = 0.05
MAX_COUNT = 2 ** 31  # no count of a model's shape is larger
# a model's layers: each stage's estimate walks its layers one by one (checkpointing every N, dense
# layers first), so their count bounds the work; the largest models have about a hundred
MAX_LAYERS = 10_000
MODEL_REQUIRED = ("layers", "hidden", "heads", "seq_len", "vocab")
# Megatron-LM's name for gradients accumulated and reduced in fp32 (its main_grad; torchtitan's FSDP:
# [training] mixed_precision_reduce = "float32"): 4 bytes a gradient element whatever the dtype
FP32_GRADS = "accumulate_allreduce_grads_in_fp32"
MOE_KEYS = ("experts", "top_k", "expert_ffn_hidden", "shared_expert_ffn_hidden", "first_dense_layers")
MODEL_OPTIONAL = ("kv_heads", "ffn_hidden", "gated_mlp", "dropout", "tied_embeddings", "norm", "rope", "attention",
                  "dtype", "micro_batch", "recompute", "activation_scale", FP32_GRADS) + MOE_KEYS
NORMS = ("layernorm", "rmsnorm")
# torchtitan's [activation_checkpoint] table: mode, and for selective its option ("op", or every N
# layers whole); "attention" is Megatron-LM's selective recomputation (the attention core)
CHECKPOINT_KEYS = ("mode", "selective_ac_option")
# the keys of a setup file's tables, besides `preset` (`name` too, so `Setup.to_dict()` is a setup file)
KEYS = {"model": MODEL_REQUIRED + MODEL_OPTIONAL + ("name",),
        "hardware": ("flops", "memory", "efficiency", "link", "reserve", "gpus_per_node", "network", "name"), "link": ("bandwidth", "latency", "name"),
        "activation_checkpoint": CHECKPOINT_KEYS, "parallelism": mesh.KEYS}
FLAGS = {"model": "--model", "hardware": "--hardware", "link": "--link"}
TABLES = ("activation_checkpoint", "parallelism")  # a setup file's tables besides the described kinds


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer and how it is trained (docs/units.md, "The description")."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    kv_heads: int
    ffn_hidden: int
    gated_mlp: bool = False
    dropout: bool = True
    tied_embeddings: bool = False
    norm: str = "layernorm"
    rope: bool = False
    attention: str = "sdpa"
    dtype: str = "bf16"
    micro_batch: int = 1
    recompute: str = "none"
    selective: str = "attention"  # what `recompute = "selective"` recomputes: see CHECKPOINT_KEYS
    experts: int = 0  # a mixture of experts: routed experts per MoE layer (0: a dense model)
    top_k: int = 0  # experts each token goes to
    expert_ffn_hidden: int = 0  # each routed expert's MLP width
    shared_expert_ffn_hidden: int = 0  # the shared expert's MLP width (0: none)
    first_dense_layers: int = 0  # layers before the first MoE layer (DeepSeek-V3: 3)
    activation_scale: float = 1.0  # measured / modelled activations (schedc/calibration.py, a run's profile)
    accumulate_allreduce_grads_in_fp32: bool = False  # gradients held and reduced in fp32 (FP32_GRADS)


@dataclass(frozen=True)
class Hardware:
    """One accelerator: peak FLOP/s at each dtype, its memory in bytes, the fraction of the peak
    training reaches in each pass (forward, input gradient, weight gradient: one number for all, or
    each its own, as a run's profile calibrates them), the link its ranks talk over unless another
    is named, and the bytes of its memory kept back from schedules (the CUDA context, communicator
    buffers, fragmentation)."""

    name: str
    flops: tuple[tuple[str, float], ...]
    memory: float
    efficiency: tuple[tuple[str, float], ...]  # (pass, fraction of the peak) for each of time.PASSES
    link: str | None = None
    reserve: float = 0.0  # bytes no schedule may use: `default_reserve(memory)` unless a setup says
    gpus_per_node: int = 8  # the GPUs `link` joins; collectives of larger groups go over `network`
    network: str = "ib-400g"  # the link preset between nodes

    def flops_at(self, dtype: str) -> float:
        return dict(self.flops)[dtype]

    def efficiency_of(self, op: str) -> float:
        """The fraction of the peak the pass `op` (F, I or W) reaches."""
        return dict(self.efficiency)[op]

    @property
    def uniform_efficiency(self) -> float | None:
        """The one efficiency of every pass, or None when the passes differ (a profile's)."""
        values = {v for _, v in self.efficiency}
        return values.pop() if len(values) == 1 else None


@dataclass(frozen=True)
class Link:
    """The link between two ranks: bytes per second one way, and seconds of latency per message."""

    name: str
    bandwidth: float
    latency: float


@dataclass(frozen=True)
class Setup:
    """A model on an accelerator over a link: what `--model/--hardware/--link/--setup` describe."""

    model: Model
    hardware: Hardware
    link: Link
    source: str = "the description"
    parallel: mesh.Parallel = mesh.Parallel()

    @property
    def title(self) -> str:
        m = self.model
        ac = m.recompute if m.recompute != "selective" else f"selective {m.selective}"
        if m.activation_scale != 1.0:
            ac += f", activations x {m.activation_scale:.4g} as measured"
        hw, p = self.hardware, self.parallel
        layout = "" if p.is_default() else f", {_layout(p)}"
        grads = ", fp32 grads" if m.accumulate_allreduce_grads_in_fp32 and m.dtype != "fp32" else ""
        efficiency = "" if hw.uniform_efficiency is not None else ", efficiency " + ", ".join(
            f"{op} {e:.4g}" for op, e in hw.efficiency)
        return (f"{m.name} ({m.dtype}{grads}, {m.attention} attention, micro-batch {m.micro_batch}, seq {m.seq_len}, "
                f"recompute {ac}{layout}) on {hw.name} ({hw.memory / GIB:.4g} GiB, {hw.reserve / GIB:.4g} GiB "
                f"reserved{efficiency}) over {self.link.name}")

    @property
    def memory(self) -> float:
        """What a rank may hold, in GiB (the unit of the program's sizes): the accelerator's memory
        less its reserve."""
        return (self.hardware.memory - self.hardware.reserve) / GIB

    def units(self, note: str = "") -> Units:
        return Units("s", "GiB", note)

    def estimates(self, num_stages: int) -> list[estimate.StageEstimate]:
        if num_stages > self.model.layers:
            raise SchedcError("costs", f"{self.model.name} has {self.model.layers} layers, too few for a schedule "
                              f"with {num_stages} stages (each stage holds at least one layer)", where=self.source)
        try:
            return estimate.stages(self.model, num_stages, self.parallel)
        except ValueError as exc:
            raise SchedcError("costs", f"[parallelism] {exc}", where=self.source) from None

    def stage_settings(self, num_stages: int, replicas: int = 1,
                       ends_together: bool | None = None) -> dict[int, dict[str, float]]:
        """Per stage, its times in seconds (F, I, W, each pass at its efficiency: rules/time.py
        `pass_seconds`, the first stage's backward all in W: `split_backward`; B becomes I + W), its
        data-parallel collectives' (R, U, T: `_collectives`; a schedule's `replicas` are DDP's when
        the description gives no data-parallel degree), and
        sizes in GiB (act, so weight = act; out, the activation it sends on: the last stage sends
        none). `ends_together`: the first and the last stage sit on one rank (a V placement; always
        with one stage), so a tied embedding's matrix is reduced and gathered once, with stage 0."""
        peak = self.hardware.flops_at(self.model.dtype)
        eff = {op: self.hardware.efficiency_of(op) for op in time_rules.PASSES}
        out = estimate.message_bytes(self.model) / self.parallel.sequence_shards / GIB
        layout = self.job_layout(replicas)
        together = num_stages == 1 if ends_together is None else ends_together
        settings = {}
        estimates = self.estimates(num_stages)
        for s, (st, (Fc, Ic)) in enumerate(zip(estimates, self.stage_comm(estimates))):
            F, I, W = (time_rules.pass_seconds(flops, peak, eff[op])  # noqa: E741
                       for op, flops in zip(time_rules.PASSES, (st.flops_F, st.flops_I, st.flops_W)))
            shared = self.model.tied_embeddings and together and st.last  # the matrix stage 0 also holds
            params = st.params - (estimate.embedding_params(self.model) // self.parallel.tp if shared else 0)
            I, W, Ic, Wc = time_rules.split_backward(st.first, I + Ic, W, Ic)  # noqa: E741
            settings[s] = {"F": F + Fc, "I": I, "W": W, "F_comm": Fc, "I_comm": Ic, "W_comm": Wc,
                           **self._collectives(params, layout, st.first or st.last, together),
                           "act": st.activation_bytes / GIB, "out": 0.0 if st.last else out}
        return settings

    def stage_comm(self, estimates: list[estimate.StageEstimate]) -> list[tuple[float, float]]:
        """(F, I) seconds of communication inside each stage's forward and backward (`_comm`)."""
        out, start = [], 0
        for st in estimates:
            out.append(self._comm(range(start, start + st.layers)))
            start += st.layers
        return out

    def job_layout(self, replicas: int = 1) -> mesh.Parallel:
        """The layout, with a schedule's `replicas` as DDP's degree when the description states no
        data-parallel degree (as `model_states` counts them)."""
        p = self.parallel
        if p.dp_replicate is None and replicas > 1 and p.dp_shard == 1:
            return replace(p, dp_replicate=replicas)
        return p

    def _collectives(self, params: int, p: mesh.Parallel, end: bool, together: bool) -> dict[str, float]:
        """Seconds of a stage's collectives (schedc/jobs/comm.py) over its data-parallel group, which
        spans dp x tp x cp GPUs: R its gradients' reduction (of gradients as held: `grad_bytes`), U
        FSDP's all-gather of its weights; T, at an `end` of a model with tied embeddings, the
        shared gradients' all-reduce between the two ends' ranks (0 when they sit `together`)."""
        d, g = estimate.DTYPE_BYTES[self.model.dtype], estimate.grad_bytes(self.model)
        wire = self._wire(p.dp * p.tp * p.cp)
        out = {"R": comm.gradient_reduction(params * g, p, wire, params * d), "U": comm.gather(params * d, p, wire)}
        if end and self.model.tied_embeddings:
            link = comm.Wire(self.link.bandwidth, self.link.latency)
            shared = estimate.embedding_params(self.model) // self.parallel.tp * g
            out["T"] = 0.0 if together else comm.tied_reduction(shared, link)
        return out

    def _comm(self, layers: range) -> tuple[float, float]:
        """Seconds of tensor-, context- and expert-parallel communication in the forward and the
        backward of `layers` on one microbatch (schedc/jobs/comm.py); a layer recomputed whole
        repeats its forward's before the backward."""
        m, p = self.model, self.parallel
        d = estimate.DTYPE_BYTES[m.dtype]
        x = comm.LayerShape(m.seq_len * m.micro_batch, m.hidden, m.hidden * m.kv_heads // m.heads, d)
        moe = replace(x, top_k=m.top_k)
        tp = comm.tensor_parallel(x, p, self._wire(p.tp))
        cp = comm.context_parallel(x, p, self._wire(p.tp * p.cp))
        routed = comm.expert_parallel(moe, p, self._wire(p.tp * p.ep))  # an MoE layer's all-to-all
        F = I = 0.0  # noqa: E741
        for i in layers:
            ep = routed if estimate.is_moe(m, i) else (0.0, 0.0)
            f, b = tp[0] + cp[0] + ep[0], tp[1] + cp[1] + ep[1]
            F, I = F + f, I + b + (f if estimate.checkpoint_of(m, i) == "full" else 0.0)  # noqa: E741
        return F, I

    def _wire(self, span: int) -> comm.Wire:
        """The link a group of collectives uses: the accelerator's own within a node (its `link`
        preset, else the description's), the network across nodes."""
        return self._wires[0 if span <= self.hardware.gpus_per_node else 1]

    @cached_property
    def _wires(self) -> tuple[comm.Wire, comm.Wire]:
        """(within a node, across nodes), read from the presets once (a search asks per layout)."""
        hw = self.hardware

        def wire(name: str | None) -> comm.Wire:
            link = presets()["link"][name] if name is not None else asdict(self.link)
            rate_ = link["bandwidth"]
            bandwidth = rate(rate_, "a link's bandwidth") if isinstance(rate_, str) else float(rate_)
            return comm.Wire(bandwidth, float(link["latency"]))
        return wire(hw.link), wire(hw.network)

    @property
    def latency(self) -> float:
        return self.link.latency

    @property
    def bandwidth(self) -> float:
        """GiB per second, the unit of sizes per the unit of time."""
        return self.link.bandwidth / GIB

    def model_states(self, program: Program, replicas: int | None = None) -> tuple[float, ...]:
        """GiB each rank holds for the whole run: weights, gradients and optimizer state of its stages
        (estimate.state_bytes_per_param per parameter). A rank that holds both the first and the last
        stage of a model with tied embeddings keeps the shared matrix once. A data-parallel job holds
        the same on every replica: `program` with `replicas D`, or its flat form (rank d * P + p) with
        `replicas` saying D."""
        D = replicas or program.dp
        P = program.num_ranks if program.replicas or D == 1 else program.num_ranks // D
        self.check_job(P, D)
        params = self.rank_params(program, P)
        per = self.state_bytes_per_param(self.job_layout(D))
        gathered = self._gathered_bytes()
        return tuple((p * per + (gathered if p else 0.0)) / GIB for p in params) * D

    def state_bytes_per_param(self, layout: mesh.Parallel | None = None) -> float:
        """Bytes of model states a rank holds per parameter of its shard under `layout` (the
        description's by default): mesh.state_bytes_per_param at the model's dtype and gradients."""
        return mesh.state_bytes_per_param(self.parallel if layout is None else layout,
                                          estimate.DTYPE_BYTES[self.model.dtype], estimate.grad_bytes(self.model))

    def rank_params(self, program: Program, ranks: int | None = None) -> list[int]:
        """The weights each of the pipeline's `ranks` ranks (default: the program's) holds: its
        stages' (after tensor and expert parallelism), each copy of a model stage its own where routes
        run copies (schedc/rules/memory.py's `weights_of_stages`); a rank that holds both the first
        and the last stage of a model with tied embeddings keeps the shared matrix once (without routes)."""
        P = program.num_ranks if ranks is None else ranks
        params = [0] * P
        for s, n in enumerate(weights_of_stages(program, [st.params for st in self.estimates(program.model_stages)])):
            if 0 <= program.placement[s] < P:  # (lint reports a stage placed elsewhere)
                params[program.placement[s]] += n
        if (self.model.tied_embeddings and not program.routes and ends_on_one_rank(program.placement, program.num_stages)
                and 0 <= program.placement[0] < P):
            params[program.placement[0]] -= estimate.embedding_params(self.model) // self.parallel.tp
        return params

    def _gathered_bytes(self) -> float:
        """FSDP's (and ZeRO stage 3's) working copy: the unsharded 16-bit weights of the layer being
        computed and of the next, all-gathered ahead of it (torchtitan's FSDP2 prefetches one layer,
        DeepSpeed's stage 3 the next module)."""
        if self.parallel.dp_shard == 1 and self.parallel.zero_stage != 3:
            return 0.0
        m = self.model
        largest = max(estimate.rank_params(m, i, self.parallel) for i in (0, m.layers - 1))
        return 2.0 * estimate.DTYPE_BYTES[m.dtype] * largest

    def check_job(self, ranks_per_pipeline: int, replicas: int) -> None:
        """The schedule and the [parallelism] table describe the same job: its pipeline degree is the
        schedule's ranks, and a schedule with `replicas D` runs D data-parallel replicas."""
        p = self.parallel
        if p.pp is not None and p.pp != ranks_per_pipeline:
            raise SchedcError("costs", f"[parallelism] pipeline_parallel_degree is {p.pp}, but the schedule runs "
                              f"{ranks_per_pipeline} pipeline ranks", where=self.source)
        if replicas > 1 and p.dp != replicas and (p.dp_replicate is not None or p.dp_shard > 1):
            raise SchedcError("costs", f"the schedule runs {replicas} data-parallel replicas (replicas {replicas}), "
                              f"but [parallelism] gives a data-parallel degree of {p.dp} "
                              "(data_parallel_replicate_degree x data_parallel_shard_degree)", where=self.source)

    def to_dict(self) -> dict[str, Any]:
        hw = asdict(self.hardware)
        hw["flops"] = dict(self.hardware.flops)
        one = self.hardware.uniform_efficiency
        hw["efficiency"] = one if one is not None else dict(self.hardware.efficiency)
        model = asdict(self.model)
        selective = model.pop("selective")
        for k in MOE_KEYS:  # 0: none (a dense model, no shared expert, no dense layers first)
            if model[k] == 0:
                del model[k]
        for k, default in (("activation_scale", 1.0), (FP32_GRADS, False)):
            if model[k] == default:
                del model[k]
        out = {"model": model, "hardware": hw, "link": asdict(self.link)}
        if model["recompute"] == "selective" and selective != "attention":  # torchtitan's table says it
            out["activation_checkpoint"] = {"mode": model.pop("recompute"), "selective_ac_option": selective}
        if not self.parallel.is_default():
            out["parallelism"] = _parallelism_table(self.parallel)
        return out


# ---- presets ----
@lru_cache(maxsize=1)
def presets() -> dict[str, dict[str, dict[str, Any]]]:
    """The shipped presets: {"model": {name: table}, "hardware": ..., "link": ...}."""
    from .costs import _read_toml
    path = Path(__file__).resolve().parent / "presets.toml"
    text = path.read_text(encoding="utf-8")
    return _read_toml(text, Source(str(path), text))


def preset_names(kind: str) -> list[str]:
    return list(presets()[kind])


def preset_list(kind: str) -> str:
    """The preset names of `kind` for a help text ("see docs/units.md" if they cannot be read, as on
    Python 3.10 without tomli: the command line still works)."""
    try:
        return ", ".join(preset_names(kind))
    except SchedcError:
        return "see docs/units.md"


# ---- reading a description ----
def describe(file: str | None = None, *, model: str | None = None, hardware: str | None = None,  # noqa: C901
             link: str | None = None) -> Setup | None:
    """The description a setup file and the preset flags give (a flag names the preset of its table,
    the file's own keys apply on top); None when none is given. The link defaults to the
    hardware's."""
    named = {"model": model, "hardware": hardware, "link": link}
    if file is None and not any(named.values()):
        return None
    place = _Place.of_file(file) if file is not None else None
    tables = place.tables() if place is not None else {}
    source = file or " ".join(f"{FLAGS[k]} {v}" for k, v in named.items() if v)
    merged, chosen = {}, {}
    for kind in KINDS:
        table = dict(tables.get(kind, {}))
        preset = table.pop("preset", None)
        if named[kind] is not None:
            preset = named[kind]
            if preset not in presets()[kind]:
                raise _Place(FLAGS[kind], code="usage").error(_unknown(kind, preset))
        elif preset is not None and (not isinstance(preset, str) or preset not in presets()[kind]):
            assert place is not None  # (a table's own preset key comes from a file)
            raise place.error(_unknown(kind, preset), kind, "preset")
        if preset is not None:
            table = {**presets()[kind][preset], "name": preset, **table}
        merged[kind], chosen[kind] = table, preset
    default_link = merged["hardware"].get("link")
    if chosen["link"] is None and isinstance(default_link, str) and default_link in presets()["link"]:
        merged["link"] = {**presets()["link"][default_link], "name": default_link, **merged["link"]}
    for kind, table in merged.items():
        if table:
            if "name" not in table:  # a table of the file's own, without a preset
                assert file is not None  # (every preset has a name)
                table["name"] = f"{kind} of {Path(file).name}"
            if not (isinstance(table["name"], str) and table["name"].strip()):
                assert place is not None  # (every preset's name is a string)
                raise place.error(f"[{kind}] name must be a non-empty string, not {table['name']!r}", kind, "name")
    missing = [k for k in ("model", "hardware") if not merged[k]]
    if missing:
        need = " and ".join(f"{FLAGS[k]} ({preset_list(k)})" for k in missing)
        raise SchedcError("usage", f"a model and hardware description needs a model and an accelerator: add {need}, "
                          f"or a [{'] and ['.join(missing)}] table in a --setup file", where=source)
    place = place or _Place(source)
    hw = _hardware(merged["hardware"], place)
    if not merged["link"]:
        raise place.error(f"{hw.name} names no link: add --link ({preset_list('link')}) or a [link] table")
    m = _checkpointing(_model(merged["model"], place), merged["model"], tables.get("activation_checkpoint"), place)
    parallel = _parallelism(tables.get("parallelism") or {}, m, place)
    if m.dtype not in dict(hw.flops):
        raise place.error(f"{hw.name} gives no FLOP/s for {m.dtype} (it gives {', '.join(dict(hw.flops))}): "
                          "set [hardware] flops for it", "hardware", "flops")
    return Setup(m, hw, _link(merged["link"], place), source, parallel)


def _unknown(kind: str, name: object) -> str:
    from .expr import did_you_mean
    names = preset_names(kind)
    return f"no {kind} preset {name!r} (presets: {', '.join(names)}){did_you_mean(str(name), names)}"


class _Place:
    """Where a description's values come from, for its errors: a setup file (TOML: at the key's line
    and column) or a flag."""

    def __init__(self, name: str, source: Source | None = None, code: str = "costs", data: Any = None):
        self.name, self.source, self.code, self.data = name, source, code, data

    @classmethod
    def of_file(cls, path: str) -> "_Place":
        from .costs import _read_toml
        from .inputs import loads_json, read_text
        text = read_text(path, "the setup file")
        if path.lower().endswith(".json"):
            return cls(path, data=loads_json(text, path, "costs", costs=True))
        source = Source(path, text)
        return cls(path, source, data=_read_toml(text, source))

    def error(self, message: str, kind: str | None = None, key: str | None = None) -> SchedcError:
        from .costs import _locate
        span = _locate(self.source, (kind,), key) if self.source is not None and kind is not None else None
        return SchedcError(self.code, message, span) if span is not None else SchedcError(self.code, message,
                                                                                           where=self.name)

    def tables(self) -> dict[str, Any]:
        """The file's tables, every key known."""
        from .expr import did_you_mean
        if not isinstance(self.data, dict):
            raise self.error("a setup file holds the tables model, hardware and link")
        tables = KINDS + TABLES
        for kind, table in self.data.items():
            if kind not in tables:
                raise self.error(f"unknown table '{kind}'; a setup file holds [model], [hardware], [link] and "
                                 f"[activation_checkpoint]{did_you_mean(kind, tables)}")
            if not isinstance(table, dict):
                raise self.error(f"'{kind}' must be a table ([{kind}])")
            known = KEYS[kind] + (("preset",) if kind in KINDS else ())
            for key in table:
                if key not in known:
                    raise self.error(f"[{kind}] has no key '{key}'; expected {', '.join(known)}"
                                     f"{did_you_mean(key, known)}", kind, key)
        return self.data


def _model(t: dict[str, Any], place: _Place) -> Model:  # noqa: C901
    missing = [k for k in MODEL_REQUIRED if k not in t]
    if missing:
        raise place.error(f"[model] needs {', '.join(missing)} (or preset = one of {preset_list('model')})")
    n: dict[str, Any] = {}
    for k in MODEL_REQUIRED + ("kv_heads", "ffn_hidden", "micro_batch", "experts", "top_k", "expert_ffn_hidden",
                               "shared_expert_ffn_hidden", "first_dense_layers"):
        if k in t:
            v = t[k]
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < MAX_COUNT:
                raise place.error(f"[model] {k} must be a positive whole number below 2^31, not {v!r}", "model", k)
            n[k] = v
    if n["layers"] > MAX_LAYERS:
        raise place.error(f"[model] layers must be at most {MAX_LAYERS:,} (docs/limits.md), not {n['layers']:,}",
                          "model", "layers")
    n.setdefault("kv_heads", n["heads"])
    n.setdefault("ffn_hidden", 4 * n["hidden"])
    _experts(n, place)
    if n["hidden"] % n["heads"] or n["heads"] % n["kv_heads"]:
        raise place.error(f"[model] heads ({n['heads']}) must divide hidden ({n['hidden']}), and kv_heads "
                          f"({n['kv_heads']}) must divide heads", "model", "heads")
    flags: dict[str, Any] = {}
    if "activation_scale" in t:
        flags["activation_scale"] = _positive(t["activation_scale"], place, "model", "activation_scale")
    for k in ("gated_mlp", "dropout", "tied_embeddings", "rope", FP32_GRADS):
        if k in t:
            if not isinstance(t[k], bool):
                raise place.error(f"[model] {k} must be true or false, not {t[k]!r}", "model", k)
            flags[k] = t[k]
    for k, choices in (("dtype", tuple(estimate.DTYPE_BYTES)), ("recompute", estimate.RECOMPUTE),
                       ("norm", NORMS), ("attention", activations.ATTENTION)):
        if k in t:
            if t[k] not in choices:
                from .expr import did_you_mean
                raise place.error(f"[model] {k} must be one of {', '.join(choices)}, not {t[k]!r}"
                                  f"{did_you_mean(str(t[k]), choices)}", "model", k)
            flags[k] = t[k]
    return Model(t.get("name", "model"), **n, **flags)


def _experts(n: dict[str, Any], place: _Place) -> None:
    """A mixture of experts' keys, completed: `experts` routed experts, `top_k` of them a token (2 by
    default), each `expert_ffn_hidden` wide (the MLP's width by default)."""
    moe = [k for k in MOE_KEYS if k in n]
    if not moe:
        return
    if "experts" not in n:
        raise place.error(f"[model] {moe[0]} describes a mixture of experts: give experts too", "model", moe[0])
    n.setdefault("top_k", 2)
    n.setdefault("expert_ffn_hidden", n["ffn_hidden"])
    if n["top_k"] > n["experts"]:
        raise place.error(f"[model] top_k ({n['top_k']}) must not exceed experts ({n['experts']})", "model", "top_k")
    if n.get("first_dense_layers", 0) >= n["layers"]:
        raise place.error(f"[model] first_dense_layers ({n['first_dense_layers']}) leaves no MoE layer of the "
                          f"{n['layers']}", "model", "first_dense_layers")


def _checkpointing(m: Model, model_table: dict[str, Any], table: dict[str, Any] | None, place: _Place) -> Model:
    """torchtitan's [activation_checkpoint] table on the model: `mode` none, selective or full; for
    selective, `selective_ac_option` "op" (torchtitan's per-op policy, the default), "attention"
    (Megatron-LM's: the attention core) or a whole number N (every N-th layer checkpointed whole)."""
    if not table:
        return m
    if "recompute" in model_table:
        raise place.error("[model] recompute and [activation_checkpoint] both say what is recomputed: keep one",
                          "activation_checkpoint", next(iter(table)))
    mode = table.get("mode", "none")
    if mode not in estimate.RECOMPUTE:
        from .expr import did_you_mean
        raise place.error(f"[activation_checkpoint] mode must be one of {', '.join(estimate.RECOMPUTE)}, not {mode!r}"
                          f"{did_you_mean(str(mode), estimate.RECOMPUTE)}", "activation_checkpoint", "mode")
    option = table.get("selective_ac_option", "op")
    if isinstance(option, int) and not isinstance(option, bool):
        option = str(option)
    if not (option in activations.SELECTIVE or (isinstance(option, str) and option.isdigit() and 0 < int(option) < MAX_COUNT)):
        raise place.error(f"[activation_checkpoint] selective_ac_option must be \"op\", \"attention\" or a positive "
                          f"whole number of layers, not {option!r}", "activation_checkpoint", "selective_ac_option")
    return replace(m, recompute=mode, selective=option)


def _positive(value: object, place: _Place, kind: str, key: str, parse: Callable[[str, str, str], float] | None = None,
              what: str | None = None) -> float:
    """A positive finite number (or, with `parse`, text such as 80GiB or 300GB/s)."""
    what = what or f"[{kind}] {key}"
    if isinstance(value, str) and parse is not None:
        try:
            value = parse(value, f"{what} {value!r}", "costs")
        except SchedcError as exc:
            raise place.error(exc.diagnostics[0].message, kind, key) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise place.error(f"{what} must be a positive number, not {value!r}", kind, key)
    return float(value)


def _size(text: str, what: str, code: str) -> float:
    return size(text, what, code).value


def _hardware(t: dict[str, Any], place: _Place) -> Hardware:
    missing = [k for k in ("flops", "memory", "efficiency") if k not in t]
    if missing:
        raise place.error(f"[hardware] needs {', '.join(missing)} (or preset = one of {preset_list('hardware')})")
    flops = t["flops"]
    table = flops if isinstance(flops, dict) else {d: flops for d in estimate.DTYPE_BYTES}
    for d in table:
        if d not in estimate.DTYPE_BYTES:
            raise place.error(f"[hardware] flops: unknown dtype '{d}'; expected {', '.join(estimate.DTYPE_BYTES)}",
                              "hardware", "flops")
    peaks = tuple((d, _positive(v, place, "hardware", "flops", what=f"[hardware] flops.{d}")) for d, v in table.items())
    efficiency = _efficiency(t["efficiency"], place)
    link = t.get("link")
    if link is not None and (not isinstance(link, str) or link not in presets()["link"]):
        raise place.error(_unknown("link", link), "hardware", "link")
    memory = _positive(t["memory"], place, "hardware", "memory", _size)
    reserve = default_reserve(memory)
    if "reserve" in t:
        reserve = 0.0 if t["reserve"] == 0 else _positive(t["reserve"], place, "hardware", "reserve", _size)
        if reserve >= memory:
            raise place.error(f"[hardware] reserve ({reserve / GIB:.4g} GiB) leaves nothing of the memory "
                              f"({memory / GIB:.4g} GiB)", "hardware", "reserve")
    nodes = t.get("gpus_per_node", 8)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 0 < nodes < MAX_COUNT:
        raise place.error(f"[hardware] gpus_per_node must be a positive whole number, not {nodes!r}", "hardware",
                          "gpus_per_node")
    network = t.get("network", "ib-400g")
    if not isinstance(network, str) or network not in presets()["link"]:
        raise place.error(_unknown("link", network), "hardware", "network")
    return Hardware(t.get("name", "hardware"), peaks, memory, efficiency, link, reserve, nodes, network)


def _efficiency(value: object, place: _Place) -> tuple[tuple[str, float], ...]:
    """[hardware] efficiency: one fraction of the peak for every pass, or a table of one per pass
    (F, I, W), as a profile calibrates them; each in (0, 1]."""
    passes = time_rules.PASSES
    if isinstance(value, dict):
        odd = next((k for k in value if k not in passes), None)
        if odd is not None or set(value) != set(passes):
            raise place.error(f"[hardware] efficiency as a table gives each pass its own: {', '.join(passes)} (the "
                              "forward, input-gradient and weight-gradient passes)"
                              + (f"; '{odd}' is not one" if odd is not None else ""), "hardware", "efficiency")
        table = value
    else:
        table = {op: value for op in passes}
    out = []
    for op in passes:
        what = "[hardware] efficiency" + (f".{op}" if isinstance(value, dict) else "")
        e = _positive(table[op], place, "hardware", "efficiency", what=what)
        if e > 1:
            raise place.error(f"{what} is the fraction of the peak that training reaches, in (0, 1], not {e:g}",
                              "hardware", "efficiency")
        out.append((op, e))
    return tuple(out)


def default_reserve(memory: float) -> float:
    """The bytes kept back on an accelerator of `memory` bytes unless a setup file says otherwise."""
    return min(RESERVE_FIXED + RESERVE_FRACTION * memory, memory / 2)


def _link(t: dict[str, Any], place: _Place) -> Link:
    missing = [k for k in ("bandwidth", "latency") if k not in t]
    if missing:
        raise place.error(f"[link] needs {', '.join(missing)} (or preset = one of {preset_list('link')})")
    latency = t["latency"]
    from .inputs import Underflow  # (1e-400: a positive latency a float reads as 0; shown as written)
    if isinstance(latency, (bool, Underflow)) or not isinstance(latency, (int, float)) or \
            not (math.isfinite(latency) and latency >= 0):
        raise place.error(f"[link] latency must be a non-negative number of seconds, not {latency!r}", "link", "latency")
    return Link(t.get("name", "link"), _positive(t["bandwidth"], place, "link", "bandwidth", rate), float(latency))


# ---- the job's parallel layout ----
def _parallelism(t: dict[str, Any], m: Model, place: _Place) -> mesh.Parallel:
    """The [parallelism] table (torchtitan's names; Megatron-LM's for the first and last stage's
    layers), each value checked against the model it splits."""
    deg = {}
    for key in mesh.DEGREES:
        if key in t:
            v = t[key]
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < MAX_COUNT:
                hint = " (torchtitan's -1, the GPUs the others leave, needs the GPU count: give the degree)" \
                    if v == -1 else ""
                raise place.error(f"[parallelism] {key} must be a positive whole number, not {v!r}{hint}",
                                  "parallelism", key)
            deg[key] = v
    if "sequence_parallel" in t and "enable_sequence_parallel" in t:
        raise place.error("[parallelism] sequence_parallel and enable_sequence_parallel say the same: keep one",
                          "parallelism", "enable_sequence_parallel")
    sp_key = "sequence_parallel" if "sequence_parallel" in t else "enable_sequence_parallel"
    sp = t.get(sp_key, True)
    if not isinstance(sp, bool):
        raise place.error(f"[parallelism] {sp_key} must be true or false, not {sp!r}", "parallelism", sp_key)
    zero = t.get("zero_stage", 0)
    if zero not in mesh.ZERO_STAGES or isinstance(zero, bool):
        raise place.error(f"[parallelism] zero_stage must be 0, 1, 2 or 3, not {zero!r}", "parallelism", "zero_stage")
    p = mesh.Parallel(deg.get("data_parallel_replicate_degree"), deg.get("data_parallel_shard_degree", 1),
                      deg.get("tensor_parallel_degree", 1), deg.get("context_parallel_degree", 1),
                      deg.get("expert_parallel_degree", 1), deg.get("pipeline_parallel_degree"), sp, zero,
                      *_split(t, place))
    _fits_model(p, m, place)
    return p


def _split(t: dict[str, Any], place: _Place) -> tuple[tuple[int, ...] | None, int | None, int | None]:
    """(layers per stage, first stage's, last stage's) from the table."""
    per = t.get("pipeline_parallel_layers_per_stage")
    if per is not None and not (isinstance(per, list) and per and all(
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n < MAX_COUNT for n in per) and sum(per)):
        raise place.error("[parallelism] pipeline_parallel_layers_per_stage must be a list of whole numbers, one per "
                          "stage (0 for a stage of the embedding or the output alone, as torchtitan's split makes), "
                          f"not {per!r}", "parallelism", "pipeline_parallel_layers_per_stage")
    ends: list[int | None] = []
    for key in mesh.SPLIT_KEYS[1:]:
        v = t.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 < v < MAX_COUNT):
            raise place.error(f"[parallelism] {key} must be a positive whole number, not {v!r}", "parallelism", key)
        if v is not None and per is not None:
            raise place.error(f"[parallelism] {key} and pipeline_parallel_layers_per_stage both split the layers: "
                              "keep one", "parallelism", key)
        ends.append(v)
    return (tuple(per) if per is not None else None, ends[0], ends[1])


def _fits_model(p: mesh.Parallel, m: Model, place: _Place) -> None:
    """Tensor parallelism splits heads, key/value heads and the MLP; context parallelism the sequence."""
    if p.ep > 1 and (not m.experts or m.experts % p.ep):
        raise place.error(f"[parallelism] expert_parallel_degree {p.ep} must divide the model's experts "
                          f"({m.experts or 'none: a dense model'})", "parallelism", "expert_parallel_degree")
    if p.zero_stage and p.dp_shard > 1:
        raise place.error("[parallelism] zero_stage and data_parallel_shard_degree (FSDP) both shard the model "
                          "states: keep one", "parallelism", "zero_stage")
    for what, n in (("heads", m.heads), ("kv_heads", m.kv_heads), ("ffn_hidden", m.ffn_hidden)):
        if n % p.tp:
            raise place.error(f"[parallelism] tensor_parallel_degree {p.tp} must divide the model's {what} ({n})",
                              "parallelism", "tensor_parallel_degree")
    if m.seq_len % (p.cp * (p.tp if p.sp else 1)):
        raise place.error(f"[parallelism] the sequence ({m.seq_len}) must split evenly over context parallelism "
                          f"({p.cp}) and sequence parallelism ({p.tp if p.sp else 1})", "parallelism",
                          "context_parallel_degree" if p.cp > 1 else "tensor_parallel_degree")


def _parallelism_table(p: mesh.Parallel) -> dict[str, Any]:
    """The [parallelism] table that describes `p` (the inverse of `_parallelism`)."""
    out: dict[str, Any] = {"data_parallel_shard_degree": p.dp_shard, "tensor_parallel_degree": p.tp, "context_parallel_degree": p.cp, "expert_parallel_degree": p.ep,
                 "sequence_parallel": p.sequence_parallel, "zero_stage": p.zero_stage}
    if p.pp is not None:
        out["pipeline_parallel_degree"] = p.pp
    if p.dp_replicate is not None:
        out["data_parallel_replicate_degree"] = p.dp_replicate
    if p.layers is not None:
        out["pipeline_parallel_layers_per_stage"] = list(p.layers)
    for key, v in zip(mesh.SPLIT_KEYS[1:], (p.first, p.last)):
        if v is not None:
            out[key] = v
    return out


def _layout(p: mesh.Parallel) -> str:
    """The degrees that are not 1, for a title: `dp 8 (fsdp 8), tp 4 + sp, cp 2`."""
    parts = []
    if p.dp > 1:
        parts.append(f"dp {p.dp}" + (f" (fsdp {p.dp_shard})" if p.dp_shard > 1 else "")
                     + (f" zero-{p.zero_stage}" if p.zero_stage else ""))
    if p.tp > 1:
        parts.append(f"tp {p.tp}" + (" + sp" if p.sp else ""))
    if p.cp > 1:
        parts.append(f"cp {p.cp}")
    if p.layers is not None or p.first is not None or p.last is not None:
        parts.append("uneven layers")
    return ", ".join(parts) or "pp only"
