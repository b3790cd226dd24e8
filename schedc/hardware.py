"""A model and hardware description: the model, the accelerator it trains on, the link between ranks.

`describe(file, model=, hardware=, link=)` reads a setup file and the presets (schedc/presets.toml);
`Setup` gives a program's per-stage seconds and GiB (schedc/estimate.py; put on it by schedc/costs.py
like a cost file) and each rank's model states. docs/units.md is the user's guide.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from . import estimate
from .errors import SchedcError
from .ir import Program
from .span import Source
from .units import GIB, Units, rate, size

KINDS = ("model", "hardware", "link")
MAX_COUNT = 2 ** 31  # no count of a model's shape is larger
MODEL_REQUIRED = ("layers", "hidden", "heads", "seq_len", "vocab")
MODEL_OPTIONAL = ("kv_heads", "ffn_hidden", "gated_mlp", "dropout", "tied_embeddings", "dtype", "micro_batch",
                  "recompute")
# the keys of a setup file's tables, besides `preset` (`name` too, so `Setup.to_dict()` is a setup file)
KEYS = {"model": MODEL_REQUIRED + MODEL_OPTIONAL + ("name",),
        "hardware": ("flops", "memory", "efficiency", "link", "name"), "link": ("bandwidth", "latency", "name")}
FLAGS = {"model": "--model", "hardware": "--hardware", "link": "--link"}


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
    dtype: str = "bf16"
    micro_batch: int = 1
    recompute: str = "none"


@dataclass(frozen=True)
class Hardware:
    """One accelerator: peak FLOP/s at each dtype, usable memory in bytes, the fraction of the peak
    training reaches, and the link its ranks talk over unless another is named."""

    name: str
    flops: tuple[tuple[str, float], ...]
    memory: float
    efficiency: float
    link: str | None = None

    def flops_at(self, dtype: str) -> float:
        return dict(self.flops)[dtype]


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

    @property
    def title(self) -> str:
        m = self.model
        return (f"{m.name} ({m.dtype}, micro-batch {m.micro_batch}, seq {m.seq_len}, recompute {m.recompute}) "
                f"on {self.hardware.name} over {self.link.name}")

    @property
    def memory(self) -> float:
        """The accelerator's usable memory, in GiB (the unit of the program's sizes)."""
        return self.hardware.memory / GIB

    def units(self, note: str = "") -> Units:
        return Units("s", "GiB", note)

    def estimates(self, num_stages: int) -> list[estimate.StageEstimate]:
        if num_stages > self.model.layers:
            raise SchedcError("costs", f"{self.model.name} has {self.model.layers} layers, too few for a schedule "
                              f"with {num_stages} stages (each stage holds at least one layer)", where=self.source)
        return estimate.stages(self.model, num_stages)

    def stage_settings(self, num_stages: int) -> dict[int, dict[str, float]]:
        """Per stage, its times in seconds (F, I, W; B becomes I + W) and sizes in GiB (act, so
        weight = act; out, the activation it sends on: the last stage sends none)."""
        speed = self.hardware.flops_at(self.model.dtype) * self.hardware.efficiency
        out = estimate.message_bytes(self.model) / GIB
        settings = {}
        for s, st in enumerate(self.estimates(num_stages)):
            F, I, W = st.flops_F / speed, st.flops_I / speed, st.flops_W / speed  # noqa: E741
            settings[s] = {"F": F, "I": I, "W": W, "act": st.activation_bytes / GIB, "out": 0.0 if st.last else out}
        return settings

    @property
    def latency(self) -> float:
        return self.link.latency

    @property
    def bandwidth(self) -> float:
        """GiB per second, the unit of sizes per the unit of time."""
        return self.link.bandwidth / GIB

    def model_states(self, program: Program) -> tuple[float, ...]:
        """GiB each rank holds for the whole run: weights, gradients and optimizer state of its stages
        (estimate.state_bytes_per_param per parameter). A rank that holds both the first and the last
        stage of a model with tied embeddings keeps the shared matrix once."""
        params = [0] * program.num_ranks
        for s, st in enumerate(self.estimates(program.num_stages)):
            if 0 <= program.placement[s] < program.num_ranks:  # (lint reports a stage placed elsewhere)
                params[program.placement[s]] += st.params
        if (self.model.tied_embeddings and program.num_stages and program.placement[0] == program.placement[-1]
                and 0 <= program.placement[0] < program.num_ranks):
            params[program.placement[0]] -= estimate.embedding_params(self.model)
        per = estimate.state_bytes_per_param(self.model)
        return tuple(p * per / GIB for p in params)

    def to_dict(self) -> dict[str, Any]:
        hw = asdict(self.hardware)
        hw["flops"] = dict(self.hardware.flops)
        return {"model": asdict(self.model), "hardware": hw, "link": asdict(self.link)}


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
    m = _model(merged["model"], place)
    if m.dtype not in dict(hw.flops):
        raise place.error(f"{hw.name} gives no FLOP/s for {m.dtype} (it gives {', '.join(dict(hw.flops))}): "
                          "set [hardware] flops for it", "hardware", "flops")
    return Setup(m, hw, _link(merged["link"], place), source)


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
            return cls(path, data=loads_json(text, path, "costs"))
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
        for kind, table in self.data.items():
            if kind not in KINDS:
                raise self.error(f"unknown table '{kind}'; a setup file holds [model], [hardware] and [link]"
                                 f"{did_you_mean(kind, KINDS)}")
            if not isinstance(table, dict):
                raise self.error(f"'{kind}' must be a table ([{kind}])")
            for key in table:
                if key not in KEYS[kind] + ("preset",):
                    raise self.error(f"[{kind}] has no key '{key}'; expected preset, {', '.join(KEYS[kind])}"
                                     f"{did_you_mean(key, KEYS[kind] + ('preset',))}", kind, key)
        return self.data


def _model(t: dict[str, Any], place: _Place) -> Model:  # noqa: C901
    missing = [k for k in MODEL_REQUIRED if k not in t]
    if missing:
        raise place.error(f"[model] needs {', '.join(missing)} (or preset = one of {preset_list('model')})")
    n: dict[str, Any] = {}
    for k in MODEL_REQUIRED + ("kv_heads", "ffn_hidden", "micro_batch"):
        if k in t:
            v = t[k]
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < MAX_COUNT:
                raise place.error(f"[model] {k} must be a positive whole number below 2^31, not {v!r}", "model", k)
            n[k] = v
    n.setdefault("kv_heads", n["heads"])
    n.setdefault("ffn_hidden", 4 * n["hidden"])
    if n["hidden"] % n["heads"] or n["heads"] % n["kv_heads"]:
        raise place.error(f"[model] heads ({n['heads']}) must divide hidden ({n['hidden']}), and kv_heads "
                          f"({n['kv_heads']}) must divide heads", "model", "heads")
    flags: dict[str, Any] = {}
    for k in ("gated_mlp", "dropout", "tied_embeddings"):
        if k in t:
            if not isinstance(t[k], bool):
                raise place.error(f"[model] {k} must be true or false, not {t[k]!r}", "model", k)
            flags[k] = t[k]
    for k, choices in (("dtype", tuple(estimate.DTYPE_BYTES)), ("recompute", estimate.RECOMPUTE)):
        if k in t:
            if t[k] not in choices:
                from .expr import did_you_mean
                raise place.error(f"[model] {k} must be one of {', '.join(choices)}, not {t[k]!r}"
                                  f"{did_you_mean(str(t[k]), choices)}", "model", k)
            flags[k] = t[k]
    return Model(t.get("name", "model"), **n, **flags)


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
    efficiency = _positive(t["efficiency"], place, "hardware", "efficiency")
    if efficiency > 1:
        raise place.error(f"[hardware] efficiency is the fraction of the peak that training reaches, in (0, 1], "
                          f"not {efficiency:g}", "hardware", "efficiency")
    link = t.get("link")
    if link is not None and link not in presets()["link"]:
        raise place.error(_unknown("link", link), "hardware", "link")
    return Hardware(t.get("name", "hardware"), peaks, _positive(t["memory"], place, "hardware", "memory", _size),
                    efficiency, link)


def _link(t: dict[str, Any], place: _Place) -> Link:
    missing = [k for k in ("bandwidth", "latency") if k not in t]
    if missing:
        raise place.error(f"[link] needs {', '.join(missing)} (or preset = one of {preset_list('link')})")
    latency = t["latency"]
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not (math.isfinite(latency)
                                                                                  and latency >= 0):
        raise place.error(f"[link] latency must be a non-negative number of seconds, not {latency!r}", "link", "latency")
    return Link(t.get("name", "link"), _positive(t["bandwidth"], place, "link", "bandwidth", rate), float(latency))
