"""Cost settings from the command line, a TOML cost file or a measured profile, put on a program.

`--cost F=1,I=1,W=1,B=2` sets every stage; a TOML file sets defaults, stages, ranks and channels; a
profile JSON (what the runtime measures) sets per-stage times, message costs, each rank's dispatch
time and how the times spread. `Costs.apply` returns a new Program whose annotations carry the
times, sizes, speeds and dispatch times (they override the schedule's own `cost` and `memory`
lines); per-channel links, the spread and the overlap setting go to the simulator. Every value is
taken as written (docs/semantics.md, "Units"), except that a profile measured on n stages is split
over a schedule with V x n stages: each chunk gets 1/V of its stage's times and sizes. A model and
hardware description (schedc/hardware.py, `derived`) gives every stage seconds and GiB beneath them.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .errors import SchedcError
from .inputs import Underflow, integer, loads_json, read_float, read_text, too_long_number
from .ir import Program, ends_on_one_rank
from .span import Source, Span

if TYPE_CHECKING:
    from .timeline import Link
    from .simulate_sampled import Spread

TIME_KEYS = ("F", "B", "I", "W")
MEMORY_KEYS = ("act", "weight", "out")
LINK_KEYS = ("latency", "bandwidth", "overhead")
RANK_KEYS = ("speed", "dispatch")
STAGE_KEYS = TIME_KEYS + MEMORY_KEYS
TOP_KEYS = STAGE_KEYS + LINK_KEYS + ("dispatch",)
MAX_SPREAD = 1000  # factors in one measured spread
PROFILE_FORMAT = "schedc-profile"
_CHANNEL = re.compile(r"\s*(\d+)\s*->\s*(\d+)\s*")

Pairs = tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Costs:
    """Settings that override a program's annotations; every field is optional (empty = keep)."""

    source: str = "--cost"
    every: Pairs = ()  # F, B, I, W, act, weight, out for every stage
    stages: tuple[tuple[int, Pairs], ...] = ()
    speeds: tuple[tuple[int, float], ...] = ()  # rank -> speed
    latency: float | None = None
    bandwidth: float | None = None  # 0 = infinite
    channels: tuple[tuple[tuple[int, int], Pairs], ...] = ()  # (src, dst) -> latency/bandwidth/overhead
    overlap: bool | None = None
    overhead: float | None = None  # every channel: rank time to post one send or receive
    measured: int = 0  # a profile's number of stages (its `stages` are split over V x measured); 0: as written
    # a hardware.Setup (typed Any: hardware imports this module, which may not import it back): every
    # stage's seconds and GiB, beneath the settings above
    derived: Any = None
    dispatch: float | None = None  # every rank: time to start each step (the runtime's own work)
    rank_dispatch: tuple[tuple[int, float], ...] = ()  # rank -> dispatch
    spread: Spread | None = field(default=None, compare=False)  # a profile's: how the measured times vary

    def then(self, other: "Costs") -> "Costs":
        """These settings with `other` applied on top (a cost file, then --cost). The result's
        `source` names where its settings come from, each once: `costs.toml, --cost`; not a base
        that holds none (`Costs("the defaults")`), which no message should point at."""
        stages = dict(self.stages)
        for s, pairs in other.stages:
            stages[s] = tuple({**dict(stages.get(s, ())), **dict(pairs)}.items())
        channels = dict(self.channels)
        for ch, pairs in other.channels:
            channels[ch] = tuple({**dict(channels.get(ch, ())), **dict(pairs)}.items())

        def last(name: str):
            mine, theirs = getattr(self, name), getattr(other, name)
            return theirs if theirs is not None else mine
        sources = [] if self == Costs(self.source) else self.source.split(", ")
        source = ", ".join(sources + [other.source] if other.source not in sources else sources)
        return Costs(source, tuple({**dict(self.every), **dict(other.every)}.items()),
                     tuple(sorted(stages.items())), tuple(sorted({**dict(self.speeds), **dict(other.speeds)}.items())),
                     last("latency"), last("bandwidth"), tuple(sorted(channels.items())), last("overlap"),
                     last("overhead"), other.measured or self.measured, other.derived or self.derived,
                     last("dispatch"), tuple(sorted({**dict(self.rank_dispatch), **dict(other.rank_dispatch)}.items())),
                     last("spread"))

    def apply(self, program: Program) -> Program:
        """A new Program whose annotations carry these settings. For each stage the settings of
        `[stage.N]` win over the top-level ones, which win over a description's, which win over the
        schedule's; for each rank, likewise, `[rank.N]`'s dispatch time. When I or W is set and B is
        not, B becomes I + W; when act is set and weight is not, weight becomes act. Under a
        description the schedule's own memory limits, in its units, are dropped (limits then come in
        GiB, from the command line or the accelerator). When a stage's collectives take time (a
        description with data parallelism), the step's reductions the schedule does not place are
        added (passes/stage_ops.py `add_step_collectives`)."""
        S, R = program.num_stages, program.num_ranks
        per_stage = self.stage_settings(program)
        together = ends_on_one_rank(program.placement, S)
        base = _described(self.derived, program, together) if self.derived is not None else {}
        for r, _ in self.speeds + self.rank_dispatch:
            if not 0 <= r < R:
                raise SchedcError("costs", f"rank {r} is not a rank of {program.name} (0..{R - 1})",
                                  where=self.source)
        for (a, b), _ in self.channels:
            if not (0 <= a < R and 0 <= b < R):
                raise SchedcError("costs", f"channel {a}->{b} names a rank outside 0..{R - 1}", where=self.source)
        ann = program.annotations
        times, memory = [], []
        for s in range(S):
            given = {**base.get(s, {}), **dict(self.every), **per_stage.get(s, {})}
            times.append(ann.cost_of(s).with_settings(given))
            memory.append(ann.memory_of(s).with_settings(given))
        speed = list(ann.speeds(R))
        for r, v in self.speeds:
            speed[r] = v
        latency, bandwidth = ann.latency, ann.bandwidth
        dispatch = [self.dispatch if self.dispatch is not None else ann.dispatch_of(r) for r in range(R)]
        for r, v in self.rank_dispatch:
            dispatch[r] = v
        if self.derived is not None:
            latency, bandwidth = self.derived.latency, self.derived.bandwidth
            ann = replace(ann, memory_limit=())
        from .passes.stage_ops import add_step_collectives
        # a data-parallel job's reductions where the schedule places none, as `schedc run` does them (and
        # FSDP's gathers): the program every command checks, draws and times under a description
        return add_step_collectives(replace(program, annotations=replace(
            ann, stage_costs=tuple(times), stage_memory=tuple(memory), rank_speed=tuple(speed),
            rank_dispatch=tuple(dispatch) if any(dispatch) else (),
            latency=latency if self.latency is None else self.latency,
            bandwidth=bandwidth if self.bandwidth is None else self.bandwidth)))

    def stage_settings(self, program: Program) -> dict[int, dict[str, float]]:
        """The settings of each of the program's stages that has some: a cost file's as written; a
        profile's, split over V chunks when it measured n stages and the program has V x n (a
        SchedcError when the program's stages are not a multiple of the profile's)."""
        S, n = program.num_stages, self.measured
        given = {s: dict(pairs) for s, pairs in self.stages}
        for s in given:
            if not 0 <= s < S:
                raise SchedcError("costs", f"stage {s} is not a stage of {program.name} (0..{S - 1})",
                                  where=self.source)
        if not n or n == S:
            return given
        if S % n:
            raise SchedcError("costs", f"the profile measured {n} stages, but {program.name} has {S}, not a "
                              f"multiple of {n}, so its stages cannot be cut from the measured ones; profile a "
                              f"run with {S} stages, or with a number of stages that divides {S}", where=self.source)
        V = S // n
        return {s: _chunk_of(given, s // V, V) for s in range(S) if s // V in given}

    def spread_of(self, program: Program) -> Spread | None:
        """The measured spread for the program's stages (a profile measured on n stages and a
        program of V x n: each chunk varies as its stage did), or None without one."""
        if self.spread is None:
            return None
        S, n = program.num_stages, self.measured
        V = S // n if n and n != S and not S % n else 1
        return self.spread.for_stages(S, V)

    def links(self, program: Program) -> dict[tuple[int, int], Link]:
        """Per-channel links for the simulator (unset fields from the program's latency/bandwidth and
        from the top-level overhead); with a top-level overhead, every channel a message can take:
        between the ranks of adjacent stages, both ways (not every pair of ranks: at P=5,000 that
        was 25M links and past 7 GB). A job's replicas get each channel in each replica (job ranks
        d * P + p), as a cost file names pipeline ranks."""
        from .timeline import Link
        ann = program.annotations
        every = self.overhead or 0.0
        chans = dict(self.channels)
        if every:
            at = program.placement
            used = {pair for s in range(len(at) - 1) for pair in ((at[s], at[s + 1]), (at[s + 1], at[s]))}
            chans = {**{(a, b): () for a, b in used if a != b}, **chans}
        made = {ch: Link(dict(pairs).get("latency", ann.latency), dict(pairs).get("bandwidth", ann.bandwidth),
                         dict(pairs).get("overhead", every))
                for ch, pairs in sorted(chans.items())}
        P = program.num_ranks  # a job's replicas: each pipeline's channels alike (named by pipeline ranks)
        return made if program.dp == 1 else \
            {(d * P + a, d * P + b): link for d in range(program.dp) for (a, b), link in made.items()}


def _described(setup, program: Program, together: bool) -> dict[int, dict[str, float]]:
    """A model description's settings of each of the program's stages: the model cut into the
    program's stages (`together`: its first and last on one rank), or with routes into the model's
    stages, each copy taking its stage's (schedc/rules/deps.py's `model_stage`; each copy holds its
    own weights, a tied embedding's too)."""
    if not program.routes:
        return setup.stage_settings(program.num_stages, program.dp, together)
    from .rules.deps import model_stage, stages_of
    model, stages = setup.stage_settings(program.model_stages, program.dp, False), stages_of(program)
    return {s: model[c] for s in range(program.num_stages) if (c := model_stage(stages, s)) in model}


def _chunk_of(measured: dict[int, dict[str, float]], stage: int, V: int) -> dict[str, float]:
    """The settings of one of the V chunks of measured stage `stage`: 1/V of its times, `act` and
    `weight`; its output size whole, since a boundary tensor does not shrink when the model is cut
    finer (a stage without one, as the last, which sends nothing, takes its input's: stage - 1's)."""
    own = measured[stage]
    chunk = {k: v / V for k, v in own.items() if k != "out"}
    boundary = own if "out" in own else measured.get(stage - 1, {})
    if "out" in boundary:
        chunk["out"] = boundary["out"]
    return chunk


# ---- --cost K=V,... ----
def parse_cost_option(text: str) -> Costs:
    """`F=1,I=1,W=1,B=2` (also act, weight, out, latency, bandwidth, overhead, dispatch): the same
    for every stage (and rank). Whatever is wrong in it is a `costs` error, as in a cost file."""
    every: dict[str, float] = {}
    links: dict[str, float] = {}
    for part in (p for p in text.split(",") if p.strip()):
        key, eq, value = (x.strip() for x in part.partition("="))
        if eq and key and key not in TOP_KEYS:
            from .expr import did_you_mean
            raise SchedcError("costs", f"--cost {text!r}: unknown key '{key}'; expected one of {', '.join(TOP_KEYS)}"
                              f"{did_you_mean(key, TOP_KEYS)}", where="--cost")
        try:
            if not eq or not key:
                raise ValueError
            number = read_float(value)
        except ValueError:
            raise SchedcError("costs", f"--cost {text!r}: expected KEY=NUMBER pairs separated by commas, "
                              f"KEY one of {', '.join(TOP_KEYS)} (e.g. --cost F=1,B=2)", where="--cost") from None
        if key in every or key in links:  # (one would silently win)
            raise SchedcError("costs", f"--cost {text!r}: {key} is given twice", where="--cost")
        (every if key in STAGE_KEYS else links)[key] = _number(number, key, key, "--cost", None, value)
    return Costs("--cost", tuple(every.items()), latency=links.get("latency"), bandwidth=links.get("bandwidth"),
                 overhead=links.get("overhead"), dispatch=links.get("dispatch"))


# ---- files ----
def load_costs(path: str) -> Costs:
    """A TOML cost file, or a measured profile (JSON): a name ending in .json, or a text opening with
    `{`, which no TOML file does (`schedc run --profile` writes to any name)."""
    text = read_text(path, "the cost file")
    json = path.lower().endswith(".json") or text.lstrip("\ufeff \t\r\n").startswith("{")
    return profile_costs(text, path) if json else toml_costs(text, path)


def toml_costs(text: str, name: str = "costs.toml") -> Costs:
    """Parse a TOML cost file (format in the README, "Simulating a schedule")."""
    source = Source(name, text)
    data = _read_toml(text, source)
    where = _Where(source)
    for key in data:
        if key not in TOP_KEYS + ("overlap", "stage", "rank", "channel"):
            raise where.error(f"unknown key '{key}'; expected {', '.join(TOP_KEYS)}, overlap, or the tables "
                              "[stage.N], [rank.N], [channel.\"A->B\"]", (), key)
    every = {k: where.number(data[k], k, (), k) for k in STAGE_KEYS if k in data}
    stages = tuple(sorted((where.index(s, "stage"), where.settings(t, ("stage", s), STAGE_KEYS))
                          for s, t in where.table(data, "stage").items()))
    speeds, dispatch = where.ranks(data, "rank")
    channels = []
    for ch, t in where.table(data, "channel").items():
        channels.append((where.channel(ch, ("channel", ch), ', e.g. [channel."0->1"]'),
                         where.settings(t, ("channel", ch), LINK_KEYS)))
    overlap = data.get("overlap")
    if overlap is not None and not isinstance(overlap, bool):
        raise where.error("overlap must be true or false", (), "overlap")
    top = {k: where.number(data[k], k, (), k) for k in LINK_KEYS + ("dispatch",) if k in data}
    return Costs(name, tuple(every.items()), stages, speeds, top.get("latency"), top.get("bandwidth"),
                 tuple(sorted(channels)), overlap, top.get("overhead"), dispatch=top.get("dispatch"),
                 rank_dispatch=dispatch)


def profile_costs(text: str, name: str = "profile.json") -> Costs:  # noqa: C901
    """Parse a measured profile (format in the README, "Simulating a schedule"), including exactly
    what `schedc run --profile` writes (`runtime/profile.py`): `messages[s]` is stage s's output bytes."""
    source = Source(name, text)
    data = loads_json(text, name, "costs", costs=True)
    where = _Where(source, json_paths=True)
    if not isinstance(data, dict):
        raise SchedcError("costs", "a profile is a JSON object with \"stages\" (and optionally \"ranks\", "
                          "\"messages\")", where=name)
    for key in data:
        if key not in ("format", "version", "unit", "meta", "stages", "ranks", "messages", "spread", "overlap",
                       "activations", "memory"):
            raise where.error(f"unknown key '{key}'; expected format, version, unit, meta, stages, ranks, "
                              "messages, spread, overlap, activations, memory", (), key)
    if data.get("format", PROFILE_FORMAT) != PROFILE_FORMAT:
        raise where.error(f"{data['format']!r} is not a schedc profile (expected \"{PROFILE_FORMAT}\")", (), "format")
    if data.get("version", 1) != 1:
        raise where.error(f"version {data['version']!r} is not supported (this schedc reads version 1)", (), "version")
    if "stages" not in data:
        raise SchedcError("costs", "a profile needs \"stages\": {\"0\": {\"F\": ..., \"B\": ...}, ...}", where=name)
    stages = dict((where.index(s, "stages"), where.settings(t, ("stages", s), STAGE_KEYS))
                  for s, t in where.table(data, "stages").items())
    speeds, dispatch = where.ranks(data, "ranks")
    messages = where.table(data, "messages")
    for key, value in messages.items():
        if key.isdigit():  # what the runtime writes: the bytes of stage `key`'s output
            stage = int(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise where.error(f"expected the bytes of stage {stage}'s output (a number, as schedc run "
                                  f"--profile writes), not {value!r}", ("messages",), key)
            size = where.number(value, key, ("messages",), key)
            if "out" in dict(stages.get(stage, ())) and dict(stages[stage])["out"] != size:
                raise where.error(f"stage {stage}'s output size is given twice, here and in stages.{stage}.out",
                                  ("messages",), key)
            stages[stage] = tuple({**dict(stages.get(stage, ())), "out": size}.items())
        elif key not in LINK_KEYS + ("channels",):
            raise where.error(f"unknown key '{key}'; expected a stage number (the bytes of that stage's "
                              "output, as schedc run --profile writes), latency, bandwidth, overhead or channels",
                              ("messages",), key)
    channels = []
    for ch, t in where.table(messages, "channels", ("messages",)).items():
        channels.append((where.channel(ch, ("messages", "channels", ch)),
                         where.settings(t, ("messages", "channels", ch), LINK_KEYS)))
    overlap = data.get("overlap")
    if overlap is not None and not isinstance(overlap, bool):
        raise where.error("overlap must be true or false", (), "overlap")
    link = {k: where.number(messages[k], k, ("messages",), k) for k in LINK_KEYS if k in messages}
    return Costs(name, (), tuple(sorted(stages.items())), speeds, link.get("latency"),
                 link.get("bandwidth"),
                 tuple(sorted(channels)), overlap, link.get("overhead"), max(stages, default=-1) + 1,
                 rank_dispatch=dispatch, spread=_spread(data, where) if "spread" in data else None)


def _spread(data: dict, where: "_Where") -> Spread:
    """A profile's `spread`: {"stages": {"N": {"F": [...], ...}}, "overhead": {"A->B": [...]}}, each
    list the means of equally likely parts of the measured times (any unit: normalized here to
    factors of mean 1)."""
    from .simulate_sampled import Spread
    spread = where.table(data, "spread")
    for key in spread:
        if key not in ("stages", "overhead"):
            raise where.error(f"unknown key '{key}'; expected stages, overhead", ("spread",), key)
    times = []
    for s, table in where.table(spread, "stages", ("spread",)).items():
        stage = where.index(s, "spread.stages")
        if not isinstance(table, dict):
            raise where.error("must be a table of lists, e.g. {\"F\": [0.9, 1.1]}", ("spread", "stages"), s)
        for op, values in table.items():
            if op not in TIME_KEYS:
                raise where.error(f"unknown time '{op}'; expected one of {', '.join(TIME_KEYS)}",
                                  ("spread", "stages", s), op)
            times.append(((op, stage), where.factors(values, ("spread", "stages", s), op)))
    posts = []
    for ch, values in where.table(spread, "overhead", ("spread",)).items():
        posts.append((where.channel(ch, ("spread", "overhead", ch)), where.factors(values, ("spread", "overhead"), ch)))
    return Spread(tuple(sorted(times)), tuple(sorted(posts)))


def _read_toml(text: str, source: Source) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise SchedcError("costs", "reading TOML cost files needs Python 3.11 or the tomli package "
                              "(pip install tomli)", where=source.name) from None
    try:
        return tomllib.loads(text, parse_float=read_float)  # (an Underflow for `_number` to refuse at its key)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        if m is None:
            raise SchedcError("costs", f"not valid TOML: {msg}", where=source.name) from None
        span = Span.point(source, int(m.group(1)), int(m.group(2)))
        raise SchedcError("costs", f"not valid TOML: {msg[:m.start()].strip()}", span) from None
    except ValueError:  # a number past Python's limit on converting digits to an int
        raise too_long_number(text, source.name, "costs") from None
    except RecursionError:  # arrays or inline tables inside each other, thousands deep
        raise SchedcError("costs", "the TOML is nested too deeply to read", where=source.name) from None


def _number(value, key: str, what: str, file: str, span, written: str | None = None) -> float:
    """A cost or size setting's value (`written`: its text as given, for the message); a `costs`
    error for one that is not a non-negative number, not finite (but bandwidth, where inf is
    infinite), or written nonzero and too small for a float (an `Underflow`: it would read as 0)."""
    if isinstance(value, Underflow):
        zero = " (an infinite bandwidth)" if key == "bandwidth" else ""
        raise SchedcError("costs", f"{what} must be 0 or a number a float can hold, not {value.text}, which would "
                          f"be read as 0{zero}", span, where=file)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        infinite = " (0 or inf: an infinite bandwidth, messages taking only their latency)" if key == "bandwidth" else ""
        shown = written if written is not None else repr(value)
        raise SchedcError("costs", f"{what} must be a non-negative number{infinite}, not {shown}", span, where=file)
    if math.isinf(value):
        if key != "bandwidth":
            raise SchedcError("costs", f"{what} must be finite, not {written or repr(value)}", span, where=file)
        return 0.0  # infinite bandwidth
    return float(value)


class _Where:
    """Validates the parsed document and points errors at the file, line and column of the key
    (TOML: found by scanning the text for the table header and the key; JSON: the key's path)."""

    def __init__(self, source: Source, json_paths: bool = False):
        self.source = source
        self.json_paths = json_paths

    def error(self, message: str, table: tuple, key: str | None) -> SchedcError:
        if self.json_paths:
            path = ".".join(str(p) for p in (*table, *([key] if key else [])))
            if key and message.startswith(f"{key} "):
                message = message[len(key) + 1:]
            return SchedcError("costs", f"{path}: {message}" if path else message, where=self.source.name)
        span = _locate(self.source, table, key)
        if span is None:
            return SchedcError("costs", message, where=self.source.name)
        return SchedcError("costs", message, span)

    def table(self, data: dict, key: str, parent: tuple = ()) -> dict:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.error(f"'{key}' must be a table", parent, key)
        return value

    def index(self, text: str, what: str) -> int:
        if not str(text).isdigit():
            raise self.error(f"{what} '{text}': expected a number, e.g. [{what}.0]", (what, text), None)
        return integer(text, what, where=self.source.name)

    def ranks(self, data: dict, key: str) -> tuple[tuple[tuple[int, float], ...], tuple[tuple[int, float], ...]]:
        """(speeds, dispatch times) of the rank tables `[rank.N]` (TOML) or `ranks.N` (a profile)."""
        speeds, dispatch = [], []
        for r, t in self.table(data, key).items():
            settings = dict(self.settings(t, (key, r), RANK_KEYS))
            if "speed" in settings:
                if not settings["speed"] > 0 or math.isinf(settings["speed"]):
                    raise self.error(f"rank {r}: speed must be a positive number, not {settings['speed']:g}",
                                     (key, r), "speed")
                speeds.append((self.index(r, key), settings["speed"]))
            if "dispatch" in settings:
                dispatch.append((self.index(r, key), settings["dispatch"]))
        return tuple(sorted(speeds)), tuple(sorted(dispatch))

    def factors(self, values, table: tuple, key: str) -> tuple[float, ...]:
        """A measured spread: 1..MAX_SPREAD non-negative numbers, not all 0, as factors of mean 1."""
        if not isinstance(values, list) or not 0 < len(values) <= MAX_SPREAD:
            raise self.error(f"expected a list of 1 to {MAX_SPREAD} numbers", table, key)
        numbers = [self.number(v, key, table, key) for v in values]
        mean = math.fsum(numbers) / len(numbers)
        if not mean > 0:
            raise self.error("expected numbers that are not all 0", table, key)
        return tuple(v / mean for v in numbers)

    def channel(self, name: str, path: tuple, example: str = "") -> tuple[int, int]:
        """The (sending, receiving) ranks of a channel named "A->B" (an error at `path` otherwise)."""
        m = _CHANNEL.fullmatch(name)
        if not m:
            raise self.error(f"channel {name!r}: expected \"A->B\" (sending rank -> receiving rank){example}",
                             path, None)
        sender, receiver = (integer(m.group(i), "a channel's rank", where=self.source.name) for i in (1, 2))
        return sender, receiver

    def number(self, value, key: str, table: tuple, at: str) -> float:
        try:
            return _number(value, key, key, self.source.name, None)
        except SchedcError as exc:
            raise self.error(exc.diagnostics[0].message, table, at) from None

    def settings(self, table, path: tuple, allowed: tuple) -> tuple[tuple[str, float], ...]:
        if not isinstance(table, dict):
            raise self.error(f"[{'.'.join(map(str, path))}] must be a table of settings", path[:-1], str(path[-1]))
        out = []
        for key, value in table.items():
            if key not in allowed:
                raise self.error(f"unknown setting '{key}'; expected one of {', '.join(allowed)}", path, key)
            out.append((key, self.number(value, key, path, key)))
        return tuple(out)


_HEADER = re.compile(r"\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")


def _locate(source: Source, table: tuple, key: str | None) -> Span | None:
    """The span of `key` inside TOML table `table` (or of the table's header when key is None)."""
    want = tuple(str(p) for p in table)
    current: tuple = ()
    for number, line in enumerate(source.text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            current = tuple(p.strip().strip('"').strip("'") for p in re.split(r"\.(?=(?:[^\"]*\"[^\"]*\")*[^\"]*$)",
                                                                              header.group(1)))
            if key is None and current == want:
                return Span.point(source, number, line.index("[") + 1, len(line.strip()))
            continue
        if key is not None and current == want:
            m = re.match(r"\s*([\"']?)" + re.escape(key) + r"\1\s*=", line)
            if m:
                col = len(line) - len(line.lstrip()) + 1
                return Span.point(source, number, col, len(key))
    return None
