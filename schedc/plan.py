"""Which layout, schedule and microbatch count train a model fastest on N GPUs within their memory:
every (pipeline, tensor, context, expert, data-parallel degree, layer split, schedule, V, M) that
divides the GPUs and the model, ranked by simulated step time among those that fit with the
reserve. A step is the simulated run with each rank's data-parallel collectives (schedc/rules/time.py:
a stage's gradient reduction, at the step's end where the schedule places none, and FSDP's gathers).
Layouts are bounded before any is simulated (the model states and one microbatch's activations for
memory; the average rank's compute, no bubble, and the smallest reduction after it, for time) and
simulated best bound first, stopping when no bound left can beat the answers found:
`plan(setup, gpus, ...)`.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from .compare import Row
from .errors import SchedcError
from .ir import Program
from .jobs import mesh
from .outputs import rounded

POWERS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MAX_PLAN_LAYOUTS = 20_000  # layouts enumerated before any is bounded: a clear error beyond it
# The search's work, counted, not timed (docs/limits.md): a unit is about 1 us of CPU time. Bounding a
# layout costs 6 a layer of the model (counted for them all before any is bounded); a schedule
# simulated, 1,000 and 2 an action; checked, 20 an action. Past the limit, a `too-large` error
# naming the schedule that would cross it, before its work starts (llama3-70b on 1,024 GPUs at a
# global batch of 4,096 took 142 s on a loaded machine).
MAX_PLAN_WORK = 12_000_000
UNITS_LAYER, UNITS_PROGRAM, UNITS_SIMULATED, UNITS_CHECKED = 6, 1_000, 2, 20
# a framework's schedule (`megatron:1f1b`) is traced and its listing compiled at each (P, M) first:
# each rank x microbatch x chunk counts 2,500 (Megatron-Core's at P=4, M=2048 took 17.8 s of CPU,
# 2.2 ms each; a fuzz input tracing it at every layout took 43 s)
UNITS_TRACED = 2_500


@dataclass(frozen=True)
class Layout:
    """One way to lay the model over the GPUs: degrees, and the layers split (None: even)."""

    pp: int
    tp: int
    cp: int
    dp: int
    ep: int
    split: tuple[int, int] | None = None  # (first stage's layers, last stage's), Megatron-LM's

    def parallel(self, base: mesh.Parallel) -> mesh.Parallel:
        first, last = self.split if self.split else (None, None)
        return replace(base, dp_replicate=None, dp_shard=self.dp, tp=self.tp, cp=self.cp, ep=self.ep, pp=self.pp,
                       zero_stage=0, layers=None, first=first, last=last)


@dataclass(frozen=True)
class Choice:
    """A ranked answer: the layout, the schedule's row (its makespan, the step, with the data-parallel
    collectives; bubble; memory), M, and the seconds of data-parallel collectives (gradient reduction,
    FSDP's gathers) on the rank that spends the most in them, hidden under compute or not."""

    layout: Layout
    row: Row
    microbatches: int
    reduction: float = 0.0

    @property
    def step(self) -> float:
        """Seconds a training step takes: the simulated makespan, collectives included."""
        return self.row.makespan or 0.0

    def to_dict(self) -> dict[str, Any]:
        lay = self.layout
        return {"pp": lay.pp, "tp": lay.tp, "cp": lay.cp, "dp": lay.dp, "ep": lay.ep,
                "first_stage_layers": lay.split[0] if lay.split else None,
                "last_stage_layers": lay.split[1] if lay.split else None, "microbatches": self.microbatches,
                "step": rounded(self.step), "reduction": rounded(self.reduction), **self.row.to_dict()}


@dataclass
class Plan:
    """The ranked choices and what the search did: layouts enumerated, pruned by memory and by the
    time bound, schedules simulated, and of those checked (the ones fast enough to enter)."""

    choices: list[Choice] = field(default_factory=list)
    layouts: int = 0
    over_memory: int = 0
    bounded: int = 0
    simulated: int = 0
    checked: int = 0
    work: int = 0  # units spent (MAX_PLAN_WORK)
    traced: set[tuple] = field(default_factory=set)  # (framework schedule, P, M) traced and counted
    unsound: set[str] = field(default_factory=set)  # schedules passed over for failing lint or check


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in POWERS if d <= limit and n % d == 0]


def layouts(setup: Any, gpus: int, global_batch: int, micro_batch: int) -> Iterator[tuple[Layout, int]]:
    """Each layout of `gpus` the model allows, with its microbatches per step (M = global batch /
    (dp x micro-batch)): TP within a node dividing heads, key/value heads and the MLP; CP dividing
    the sequence; PP up to the layers; EP dividing the experts and dp x cp; the rest data-parallel,
    sharded (FSDP). Each pipeline of two or more stages is tried with an even split and with the
    first and last stages lightened by the embedding and the output layer's share."""
    m, node = setup.model, setup.hardware.gpus_per_node
    for tp in _divisors(gpus, node):
        if m.heads % tp or m.kv_heads % tp or m.ffn_hidden % tp:
            continue
        for cp in _divisors(gpus // tp, 16):
            if m.seq_len % (cp * tp):
                continue
            for pp in [p for p in range(1, min(m.layers, gpus // (tp * cp)) + 1) if gpus // (tp * cp) % p == 0]:
                dp = gpus // (tp * cp * pp)
                if global_batch % (dp * micro_batch):
                    continue
                M = global_batch // (dp * micro_batch)
                for ep in (_divisors(m.experts, dp * cp) if m.experts else [1]):
                    for split in _splits(setup, pp):
                        yield Layout(pp, tp, cp, dp, ep, split), M


def _splits(setup: Any, pp: int) -> list[tuple[int, int] | None]:
    """The even split, and one whose first and last stages hold fewer layers, by the embedding's and
    the output layer's time in layers (when that differs from the even one)."""
    from . import estimate
    m = setup.model
    if pp < 3:
        return [None]
    per_layer = estimate.layer_flops(m, 0)[0]
    head = estimate.output_flops(m)[0]
    even = m.layers / pp
    last = max(1, round(even - head / per_layer))
    first = max(1, round(even))
    rest = m.layers - first - last
    if rest < pp - 2 or (first, last) == (round(even), round(even)):
        return [None]
    return [None, (first, last)]


def plan(setup: Any, gpus: int, global_batch: int, schedules: Sequence[str], *, micro_batch: int = 1,
         top: int = 10, params: dict[str, int] | None = None) -> Plan:
    """The `top` fastest (layout, schedule) choices that fit. `setup` is a model and hardware
    description (its own [parallelism] table is replaced by each layout)."""
    if gpus < 1 or global_batch < 1 or micro_batch < 1:
        raise SchedcError("usage", "--gpus, --global-batch and --micro-batch must be positive")
    model = replace(setup.model, micro_batch=micro_batch)
    base = replace(setup, model=model)
    found = list(layouts(base, gpus, global_batch, micro_batch))
    if len(found) > MAX_PLAN_LAYOUTS:
        raise SchedcError("too-large", f"{len(found):,} layouts of {gpus:,} GPUs: more than {MAX_PLAN_LAYOUTS:,}",
                          where="--gpus")
    result = Plan(layouts=len(found))
    _spend(result, len(found) * model.layers * UNITS_LAYER, f"bounding {len(found):,} layouts of {model.layers:,} "
           "layers", "--gpus")
    bounded = []
    for lay, M in found:
        s = replace(base, parallel=lay.parallel(setup.parallel))
        try:
            low_time, low_memory = _bounds(s, lay.pp, M)
        except SchedcError:
            continue  # a split the layers cannot take
        if low_memory > s.memory:
            result.over_memory += 1
            continue
        bounded.append((low_time, lay, M, s))
    bounded.sort(key=lambda x: (x[0], x[1].pp, x[1].tp))
    for i, (low, lay, M, s) in enumerate(bounded):
        if len(result.choices) >= top and low >= result.choices[top - 1].step:
            result.bounded = len(bounded) - i  # no layout left can beat the top answers
            break
        beat = result.choices[top - 1].step if len(result.choices) >= top else float("inf")
        result.choices = sorted(result.choices + _simulate(s, lay, M, schedules, params or {}, result, beat),
                                key=lambda c: (c.step, c.layout.pp, c.row.name))[:top]
    return result


def _spend(result: Plan, units: int, what: str, where: str) -> None:
    """Count `units` of work on the plan, or a `too-large` error before it if that crosses MAX_PLAN_WORK."""
    if result.work + units > MAX_PLAN_WORK:
        raise SchedcError("too-large", f"the plan's search would pass its work limit of {MAX_PLAN_WORK:,} units "
                          f"(docs/limits.md) {what}, having simulated {result.simulated} and checked "
                          f"{result.checked} schedules: narrow it (fewer schedules or GPUs, a smaller --global-batch "
                          "or a larger --micro-batch: fewer microbatches)", where=where)
    result.work += units


def _bounds(setup: Any, pp: int, M: int) -> tuple[float, float]:
    """(seconds, GiB) no schedule of this layout can beat, whatever its placement and wherever it
    reduces: the average rank's compute for M microbatches (no bubble) and the smallest stage's
    gradient reduction (each rank's last compute is a backward, and its stage's reduction comes
    after it), and its share of the model states."""
    from .units import GIB
    settings = setup.stage_settings(pp)
    busy = sum(st["F"] + st["I"] + st["W"] for st in settings.values()) * M / pp
    params = sum(st.params for st in setup.estimates(pp)) / pp
    per = setup.state_bytes_per_param()
    return busy + min(st["R"] for st in settings.values()), params * per / GIB


@lru_cache(maxsize=512)
def _program(name: str, P: int, M: int, params: tuple[tuple[str, int], ...]) -> Program | None:
    """The schedule at P, M (V = 2 where it takes V), or None when its `require` refuses them."""
    from .api import load
    try:
        return load(name, {"P": P, "M": M, "V": 2, **dict(params)}, strict_params=False)
    except SchedcError as exc:
        if exc.code != "require":
            raise
        return None


@lru_cache(maxsize=512)
def _sound(name: str, P: int, M: int, params: tuple[tuple[str, int], ...]) -> bool:
    """Whether the schedule at P, M passes lint (a send to no stage, say, has no time to simulate:
    such a schedule is passed over, as one that fails its checks is)."""
    from .report import lint_findings
    program = _program(name, P, M, params)
    return program is not None and not lint_findings(program)


def _simulate(setup: Any, lay: Layout, M: int, schedules: Sequence[str], params: dict[str, int],
              result: Plan, beat: float) -> list[Choice]:
    """Each schedule at this layout that can enter the answers: timed first (the simulator), and
    only if its step beats `beat`, checked (the verdict and the worst-case memory, which decide
    whether it fits). A schedule the layout's split cannot take is passed."""
    out = []
    alone = ["1f1b"] if "1f1b" in schedules else list(schedules[:1])  # one rank: gradient accumulation
    for name in (alone if lay.pp == 1 else schedules):
        choice = _evaluate(setup, lay, M, name, tuple(sorted(params.items())), result, beat)
        if choice is not None:
            out.append(choice)
    return out


def _evaluate(setup: Any, lay: Layout, M: int, name: str, params: tuple[tuple[str, int], ...], result: Plan,
              beat: float) -> Choice | None:
    from .api import check
    from .costs import Costs
    from .simulate import simulate
    from . import importers
    if importers.is_imported(name) and (name, lay.pp, M, params) not in result.traced:
        chunks = 2 if name.endswith(("interleaved", "dualpipev")) else 1
        _spend(result, UNITS_TRACED * lay.pp * M * chunks, f"tracing {name} at P={lay.pp}, M={M}", name)
        result.traced.add((name, lay.pp, M, params))
    program = _program(name, lay.pp, M, params)
    if program is None or program.num_stages > setup.model.layers:
        return None
    if not _sound(name, lay.pp, M, params):
        result.unsound.add(name)
        return None
    try:
        program = Costs("plan", derived=setup).apply(program)
    except SchedcError as exc:
        if exc.code != "costs":
            raise
        return None  # a split these stages cannot take
    at = f"{name} at P={lay.pp}, M={M}"
    _spend(result, UNITS_PROGRAM + UNITS_SIMULATED * program.num_actions, "simulating " + at, name)
    timeline = simulate(program)  # (with the step's data-parallel collectives: rules/time.py)
    result.simulated += 1
    states = setup.model_states(program)
    if timeline.makespan >= beat:
        return None
    _spend(result, UNITS_CHECKED * program.num_actions, "checking " + at, name)
    report = check(program)
    result.checked += 1
    if report.ok is not True:
        result.unsound.add(name)
        return None
    row = Row(name, program.params, timeline.makespan, timeline.bubble_ratio, report.peak_sizes, model_states=states)
    if max(row.total_memory) > setup.memory + 1e-9:
        return None
    return Choice(lay, row, M, max(timeline.collectives, default=0.0))
