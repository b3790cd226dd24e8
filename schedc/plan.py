"""Which layout, schedule and microbatch count train a model fastest on N GPUs within their memory:
every (pipeline, tensor, context, expert, data-parallel degree, layer split, schedule, V, M) that
divides the GPUs and the model, ranked by simulated step time among those that fit with the
reserve. A step is the simulated run with each rank's data-parallel collectives (schedc/rules/time.py:
a stage's gradient reduction, at the step's end where the schedule places none, and FSDP's gathers).
Each configuration (layout and schedule) is bounded before it is simulated, by lower bounds on its
step and its memory (schedc/plan_bounds.py: the pipeline's fill and drain included), and taken best
bound first; the search stops at the last answer, every bound left behind it, so the answers are
those of simulating and checking everything: `plan(setup, gpus, ...)`.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, NamedTuple
import heapq

from . import importers, plan_bounds
from .compare import Row
from .costs import Costs
from .errors import SchedcError
from .ir import Program, StageCost, ends_on_one_rank, model_stages
from .jobs import mesh
from .outputs import rounded
from .simulate import simulate

POWERS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MAX_PLAN_LAYOUTS = 20_000  # layouts enumerated before any is bounded: a clear error beyond it
# The search's work, counted, not timed (docs/limits.md): a unit is about 1 us of CPU time. Bounding a
# layout's configurations before their schedules are expanded costs 25 a layer of the model (its
# stages' costs at P and 2P stages; counted for every layout first); a schedule's program expanded
# and bounded by its shape, 2 an action (once per schedule, P and M); simulated, 1,000 and 2 an
# action; checked, 20 an action. Past the limit, a `too-large` error naming the schedule that would
# cross it, before its work starts (llama3-70b on 1,024 GPUs at a global batch of 4,096 took 142 s
# on a loaded machine when the time bound left out the pipeline's fill and drain; now about 1 s).
MAX_PLAN_WORK = 12_000_000
UNITS_LAYER, UNITS_SHAPED, UNITS_PROGRAM, UNITS_SIMULATED, UNITS_CHECKED = 25, 2, 1_000, 2, 20
# a framework's schedule (`megatron:1f1b`) is traced and its listing compiled at each (P, M) first:
# each rank x microbatch x chunk counts 2,500 (Megatron-Core's at P=4, M=2048 took 17.8 s of CPU,
# 2.2 ms each; a fuzz input tracing it at every layout took 43 s)
UNITS_TRACED = 2_500


class Reading(NamedTuple):
    """How the schedules' files are read, as `check` reads them (`--notation`, `--placement`,
    `--forward-only`: a PyTorch CSV's)."""

    notation: str = "current"
    placement: str | None = None
    forward_only: bool = False


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
    """The ranked choices and what the search did: layouts enumerated; configurations (a layout and
    a schedule), of which refused by the schedule (its `require`, its lint, a split its stages
    cannot take, a fixed shape, a CSV's say, of other ranks or microbatches than the layout's), ruled out by the memory bound, left behind the answers by the time bound, and
    simulated (the rest; `shared`: runs reused from another layout of identical costs, besides);
    and of those checked (the ones fast enough to enter)."""

    choices: list[Choice] = field(default_factory=list)
    layouts: int = 0
    configurations: int = 0
    refused: int = 0
    over_memory: int = 0
    bounded: int = 0
    simulated: int = 0
    shared: int = 0
    checked: int = 0
    work: int = 0  # units spent (MAX_PLAN_WORK)
    traced: set[tuple] = field(default_factory=set)  # (framework schedule, P, M) traced and counted
    unsound: set[str] = field(default_factory=set)  # schedules passed over for failing lint or check
    fixed: dict[str, tuple[int, int]] = field(default_factory=dict)  # fixed shapes passed over: (ranks, M)
    # a framework's schedule passed over where the framework will not give it (importers.refusal, before it is
    # traced; importers.Refused, as it runs): (schedule, why) -> the layouts; each also counted refused
    passed_over: dict[tuple[str, str], int] = field(default_factory=dict)

    def passed_over_json(self) -> list[dict[str, Any]]:
        return [{"schedule": name, "layouts": n, "why": why} for (name, why), n in self.passed_over.items()]


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in POWERS if d <= limit and n % d == 0]


def _tensor_fits(m: Any, tp: int) -> bool:
    """Does tensor parallelism of degree `tp` divide the model's heads, key/value heads and MLP?"""
    return not (m.heads % tp or m.kv_heads % tp or m.ffn_hidden % tp)


def _context_fits(m: Any, tp: int, cp: int) -> bool:
    """Does context parallelism of degree `cp` (beside `tp`) divide the sequence?"""
    return m.seq_len % (cp * tp) == 0


def layouts(setup: Any, gpus: int, global_batch: int, micro_batch: int) -> Iterator[tuple[Layout, int]]:
    """Each layout of `gpus` the model allows, with its microbatches per step (M = global batch /
    (dp x micro-batch)): TP within a node dividing heads, key/value heads and the MLP; CP dividing
    the sequence; PP up to the layers; EP dividing the experts and dp x cp; the rest data-parallel,
    sharded (FSDP). Each pipeline of two or more stages is tried with an even split and with the
    first and last stages lightened by the embedding and the output layer's share."""
    m, node = setup.model, setup.hardware.gpus_per_node
    for tp in _divisors(gpus, node):
        if not _tensor_fits(m, tp):
            continue
        for cp in _divisors(gpus // tp, 16):
            if not _context_fits(m, tp, cp):
                continue
            for pp in [p for p in range(1, min(m.layers, gpus // (tp * cp)) + 1) if gpus // (tp * cp) % p == 0]:
                dp = gpus // (tp * cp * pp)
                if global_batch % (dp * micro_batch):
                    continue
                M = global_batch // (dp * micro_batch)
                for ep in (_divisors(m.experts, dp * cp) if m.experts else [1]):
                    for split in _splits(setup, pp):
                        yield Layout(pp, tp, cp, dp, ep, split), M


def _why_no_layout(setup: Any, gpus: int, global_batch: int, micro_batch: int) -> str:
    """Why `layouts` finds none: the batch cannot be split into microbatches, the GPUs are more
    than the model can use at this batch, or they factor into no degrees the model allows."""
    m, node = setup.model, setup.hardware.gpus_per_node
    if global_batch % micro_batch:
        return (f"no layout to search: the global batch {global_batch} is not a multiple of the micro-batch "
                f"{micro_batch}, so no data-parallel degree splits it into microbatches")
    tp = max((d for d in _divisors(m.heads, node) if _tensor_fits(m, d)), default=1)
    cp = max((d for d in _divisors(m.seq_len, 16) if _context_fits(m, tp, d)), default=1)
    most = tp * cp * m.layers * (global_batch // micro_batch)
    if gpus > most:
        return (f"no layout to search: {m.name} can use at most {most:,} GPUs at this batch ({tp} tensor x {cp} "
                f"context x {m.layers} pipeline (its layers) x {global_batch // micro_batch} data-parallel (global "
                f"batch / micro-batch)), not {gpus:,}")
    return (f"no layout to search: {gpus:,} GPUs split into no tensor (a power of two up to {node}, dividing the "
            f"heads), context (a power of two up to 16), pipeline (up to {m.layers} stages) and data-parallel "
            f"degree (dividing {global_batch // micro_batch} microbatches of the global batch) {m.name} allows: "
            "choose a number of GPUs and a global batch with common factors")


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
         top: int = 10, params: dict[str, int] | None = None, prune: bool = True,
         reading: Reading | None = None) -> Plan:
    """The `top` fastest (layout, schedule) choices that fit. `setup` is a model and hardware
    description (its own [parallelism] table is replaced by each layout). `prune=False` simulates and
    checks every configuration (what the bounds are held to: the same answers). `reading`: how a
    PyTorch CSV among the schedules is read (its notation, placement, forward-only)."""
    for option, value in (("--gpus", gpus), ("--global-batch", global_batch), ("--micro-batch", micro_batch)):
        if value < 1:
            raise SchedcError("usage", f"--gpus, --global-batch and --micro-batch must be positive, not {option} "
                              f"{value}", where=option)
    model = replace(setup.model, micro_batch=micro_batch)
    base = replace(setup, model=model)
    found = list(layouts(base, gpus, global_batch, micro_batch))
    if not found:
        raise SchedcError("usage", _why_no_layout(base, gpus, global_batch, micro_batch),
                          where="--global-batch" if global_batch % micro_batch else "--gpus")
    if len(found) > MAX_PLAN_LAYOUTS:
        raise SchedcError("too-large", f"{len(found):,} layouts of {gpus:,} GPUs: more than {MAX_PLAN_LAYOUTS:,}",
                          where="--gpus")
    result = Plan(layouts=len(found))
    _spend(result, len(found) * model.layers * UNITS_LAYER, f"bounding {len(found):,} layouts of {model.layers:,} "
           "layers", "--gpus")
    alone = ["1f1b"] if "1f1b" in schedules else list(schedules[:1])  # one rank: gradient accumulation
    configs = [_Config(lay, M, name, replace(base, parallel=lay.parallel(setup.parallel)))
               for lay, M in found for name in (alone if lay.pp == 1 else schedules)]
    result.configurations = len(configs)
    search = _Search(result, tuple(sorted((params or {}).items())), top, reading or Reading())
    if prune:
        search.pruned(configs)
    else:
        search.everything(configs)
    if result.passed_over and sum(result.passed_over.values()) == result.configurations:
        raise _none_read(result, gpus)
    return result


LISTING = "its listing would pass"  # (importers.refusal's words for its listing limit)


def _none_read(result: Plan, gpus: int) -> SchedcError:
    """The error of a search whose every configuration is a framework's schedule the framework will
    not give at its layout (P x M x V over its listing limit, say): nothing to rank."""
    listing = [LISTING in why for _, why in result.passed_over]
    whys = "; ".join(f"{name} at {n:,} layout{'s' if n > 1 else ''}: {why}" for (name, why), n in result.passed_over.items())
    hint = (": fewer microbatches (a smaller --global-batch or a larger --micro-batch) or fewer GPUs shorten the "
            "listings" if any(listing) else "")
    return SchedcError("too-large" if all(listing) else "usage", f"no layout of {gpus:,} GPU{'s' if gpus > 1 else ''} "
                       f"can be read from the framework, so none is ranked ({whys}){hint}",
                       where=next(iter(result.passed_over))[0])


@dataclass
class _Config:
    """One configuration of the search: a layout, its microbatches, a schedule, the layout's
    description; once loaded, the schedule's program (its costs applied) and, once timed, its run."""

    layout: Layout
    M: int
    name: str
    setup: Any
    program: Program | None = None
    timeline: Any = None

    @property
    def order(self) -> tuple:
        """How answers of equal step time are ordered: fewer stages first, then by name and layout."""
        lay = self.layout
        return (lay.pp, self.name, lay.tp, lay.cp, lay.dp, lay.ep, lay.split or (0, 0))


class _Search:
    """The search's steps on one configuration, each counted on the plan (`result`): bound it before
    its schedule is expanded (`first_bound`, a built-in's family) and after (`second_bound`, the
    program's shape), time it (`time`: simulated, or a run of identical costs reused) and check it
    (`judge`); and the two orders of taking them (`pruned`, `everything`)."""

    def __init__(self, result: Plan, params: tuple[tuple[str, int], ...], top: int, reading: Reading = Reading()):
        self.result, self.params, self.top, self.reading = result, params, top, reading
        self.sims: dict[tuple, tuple[Any, Any]] = {}  # (schedule, P, M, params, annotations) -> (run, report)
        self.costs: dict[tuple, Any] = {}  # (layout, stages, ends on one rank) -> `_stage_costs`
        self.held: dict[tuple, tuple[float, ...]] = {}  # (layout, ranks, stages, placement, ...) -> model states
        self.shaped: set[tuple] = set()  # (schedule, P, M, params) whose shape this search has counted
        self.refusals: dict[tuple, str] = {}  # (schedule, P, M, params) -> why its framework's code refused them

    def pruned(self, configs: list[_Config]) -> None:
        """Best bound first: each configuration enters a queue at its first bound and moves on
        (second bound, simulated step, checked) only when it is at the head, so every answer leaves
        the queue in order and the search stops at the `top`-th, with every bound left behind it."""
        result, heap = self.result, []
        for i, c in enumerate(configs):
            low = self.first_bound(c)
            if low is not None:
                heap.append((low, c.order, i, 0, c))
        for low, _, _, _, c in heap:
            if not low:  # no family's bound: it is expanded (a framework's traced) before any answer is sure
                self.trace(c)
        heapq.heapify(heap)
        while heap and len(result.choices) < self.top:
            value, order, i, level, c = heapq.heappop(heap)
            if level == 0:
                low = self.second_bound(c)
                nxt = None if low is None else max(value, low)
            elif level == 1:
                nxt = self.time(c)
            else:
                choice = self.judge(c)
                if choice is not None:
                    result.choices.append(choice)
                continue
            if nxt is not None:
                heapq.heappush(heap, (nxt, order, i, level + 1, c))
        result.bounded = sum(1 for entry in heap if entry[3] < 2)

    def everything(self, configs: list[_Config]) -> None:
        """Every configuration loaded, simulated and checked; the answers sorted."""
        found = []
        for c in configs:
            if self.load(c) and self.time(c) is not None and (choice := self.judge(c)) is not None:
                found.append((choice.step, c.order, choice))
        self.result.choices = [choice for _, _, choice in sorted(found, key=lambda x: x[:2])][:self.top]

    # ---- bounds ----
    def first_bound(self, c: _Config) -> float | None:
        """The step a built-in's family cannot beat at this layout (0 for another schedule), or None
        when it needs more stages than the model's layers."""
        if self.framework_refuses(c):
            return None
        family = self.family(c)
        if family is None:
            return 0.0
        try:
            costs, out, _ = self.stage_costs(c, family.placement, family.segments)
        except SchedcError as exc:
            if exc.code != "costs":
                raise
            self.result.refused += 1  # a split the layers cannot take
            return None
        return plan_bounds.step_bound(family, costs, out, c.setup.latency, c.setup.bandwidth)

    def family_fits(self, c: _Config) -> bool:
        """False when a built-in's family says the configuration holds more than the memory: each
        rank its model states and, as it runs a forward, that stage's activations."""
        family = self.family(c)
        if family is None:
            return True
        act = self.stage_costs(c, family.placement, family.segments)[2]
        states = self.states(c, _Frame(family.ranks, family.stages, family.placement,
                                       routes=plan_bounds.family_routes(family, c.M), num_microbatches=c.M))
        held = [max((act[s] for s in range(family.stages) if family.placement[s] == r), default=0.0)
                for r in range(family.ranks)]
        return max(a + b for a, b in zip(states, held)) * (1 - plan_bounds.SLACK) <= c.setup.memory + 1e-9

    def family(self, c: _Config) -> plan_bounds.Shape | None:
        """The shape every program of the configuration's built-in schedule has (None: not a built-in's)."""
        return plan_bounds.family_shape(c.name, c.layout.pp, c.M) if _builtin(c.name) and not self.params else None

    def stage_costs(self, c: _Config, placement: tuple[int, ...], segments: tuple[tuple[int, int], ...] = ()
                    ) -> tuple[list[StageCost], list[float], list[float]]:
        """`_stage_costs` of the layout's stages so placed, on these routes (once per layout, stages,
        ends together and routes)."""
        key = (c.layout, len(placement), ends_on_one_rank(placement), segments)
        if key not in self.costs:
            self.costs[key] = _stage_costs(c.setup, placement, segments)
        return self.costs[key]

    def second_bound(self, c: _Config) -> float | None:
        """The step the program's shape cannot beat, or None when its memory bound (its family's,
        then its shape's) is over the limit or it is refused (its `require`, its lint, more stages
        than layers)."""
        if not self.family_fits(c):
            self.result.over_memory += 1
            return None
        if not self.load(c):
            return None
        assert c.program is not None
        shape = self.shape(c.name, c.layout.pp, c.M)
        ann = c.program.annotations
        costs = ann.stage_costs
        act = [m.act for m in ann.stage_memory]
        weight = [m.weight for m in ann.stage_memory]
        states = self.states(c, c.program)
        if plan_bounds.memory_bound(shape, act, weight, states) > c.setup.memory + 1e-9:
            self.result.over_memory += 1
            return None
        return plan_bounds.step_bound(shape, costs, [m.out for m in ann.stage_memory], ann.latency, ann.bandwidth)

    def shape(self, name: str, P: int, M: int) -> plan_bounds.Shape:
        """The program's shape (counted once per schedule, P and M in a search), held to its family's."""
        key = (name, P, M, self.params)
        program = _program(*key, self.reading)
        assert program is not None
        if key not in self.shaped:
            _spend(self.result, UNITS_SHAPED * program.num_actions, f"bounding {name} at P={P}, M={M}", name)
            self.shaped.add(key)
        shape = _shape(*key, self.reading)
        family = plan_bounds.family_shape(name, P, M) if _builtin(name) and not self.params else None
        if family is not None and not plan_bounds.covers(family, shape):
            raise AssertionError(f"plan_bounds.FAMILIES: {name} at P={P}, M={M} is not what its family says")
        return shape

    def states(self, c: _Config, program: Any) -> tuple[float, ...]:
        """GiB of model states each rank of the program holds at the layout (counted once per layout
        and placement)."""
        key = (c.layout, program.num_ranks, program.num_stages, tuple(program.placement), program.dp,
               bool(program.replicas), program.routes)  # (routes: each copy holds its weights)
        if key not in self.held:
            self.held[key] = c.setup.model_states(program)
        return self.held[key]

    # ---- the steps that decide ----
    def load(self, c: _Config) -> bool:
        """The configuration's program with the layout's costs, or False (counted refused, or
        unsound) when the schedule's `require`, the layers or its lint refuse it."""
        if c.program is not None:
            return True
        if self.framework_refuses(c):
            return False
        lay, name = c.layout, c.name
        self.trace(c)
        program = self.program(c)
        if isinstance(program, str):  # the framework refused P and M as it ran
            self.pass_over(c, program)
            return False
        if program is None or program.model_stages > c.setup.model.layers:  # (routes: one copy's stages)
            self.result.refused += 1
            return False
        if (shape := _fixed(name, program, lay.pp, c.M)) is not None:  # its pipeline or microbatches are not the layout's
            self.result.fixed[name] = shape
            self.result.refused += 1
            return False
        if not _sound(name, lay.pp, c.M, self.params, self.reading):
            self.result.unsound.add(name)
            self.result.refused += 1
            return False
        try:
            c.program = Costs("plan", derived=c.setup).apply(program)
        except SchedcError as exc:
            if exc.code != "costs":
                raise
            self.result.refused += 1  # a split these stages cannot take
            return False
        return True

    def framework_refuses(self, c: _Config) -> bool:
        """Whether the configuration is a framework's schedule the framework will not give at its P
        and M, known before it is traced (importers.refusal: over its listing limit, or by a rule of
        its own): passed over, counted refused, and told with why (`passed_over`). What its code
        refuses as it runs is passed over likewise (`load`)."""
        if not importers.is_imported(c.name):
            return False
        why = importers.refusal(c.name, {"P": c.layout.pp, "M": c.M, "V": 2, **dict(self.params)})
        if why is None:
            return False
        self.pass_over(c, why)
        return True

    def pass_over(self, c: _Config, why: str) -> None:
        """Count the configuration refused, as a framework's schedule passed over with `why`."""
        key = (c.name, why)
        self.result.passed_over[key] = self.result.passed_over.get(key, 0) + 1
        self.result.refused += 1

    def program(self, c: _Config) -> Program | None | str:
        """`_program` at the configuration's P and M, or why the framework's own code refused them
        (`importers.Refused`, kept: it is traced once)."""
        key = (c.name, c.layout.pp, c.M, self.params)
        if key in self.refusals:
            return self.refusals[key]
        try:
            return _program(*key, self.reading)
        except importers.Refused as exc:
            self.refusals[key] = exc.diagnostics[0].message
            return self.refusals[key]

    def trace(self, c: _Config) -> None:
        """Count tracing a framework's schedule (`megatron:1f1b`) at the configuration's P and M, once."""
        P, name = c.layout.pp, c.name
        if importers.is_imported(name) and (name, P, c.M, self.params) not in self.result.traced:
            chunks = 2 if name.endswith(("interleaved", "dualpipev")) else 1
            _spend(self.result, UNITS_TRACED * P * c.M * chunks, f"tracing {name} at P={P}, M={c.M}", name)
            self.result.traced.add((name, P, c.M, self.params))

    def time(self, c: _Config) -> float | None:
        """The simulated step (with the data-parallel collectives: rules/time.py); a run of the same
        schedule with identical costs (another layout's) is reused."""
        program = c.program
        assert program is not None
        key = (c.name, c.layout.pp, c.M, self.params, program.annotations)
        if key in self.sims:
            self.result.shared += 1
        else:
            at = f"{c.name} at P={c.layout.pp}, M={c.M}"
            _spend(self.result, UNITS_PROGRAM + UNITS_SIMULATED * program.num_actions, "simulating " + at, c.name)
            self.sims[key] = (simulate(program), None)
            self.result.simulated += 1
        c.timeline = self.sims[key][0]
        return c.timeline.makespan

    def judge(self, c: _Config) -> Choice | None:
        """The configuration checked (the verdict, and the worst-case memory that decides whether
        it fits): its answer, or None."""
        from .api import check
        program, timeline = c.program, c.timeline
        assert program is not None and timeline is not None
        key = (c.name, c.layout.pp, c.M, self.params, program.annotations)
        report = self.sims[key][1]
        if report is None:
            _spend(self.result, UNITS_CHECKED * program.num_actions, f"checking {c.name} at P={c.layout.pp}, "
                   f"M={c.M}", c.name)
            report = check(program)
            self.sims[key] = (timeline, report)
            self.result.checked += 1
        if report.ok is not True:
            self.result.unsound.add(c.name)
            return None
        row = Row(c.name, program.params, timeline.makespan, timeline.bubble_ratio, report.peak_sizes,
                  model_states=self.states(c, program))
        if max(row.total_memory) > c.setup.memory + 1e-9:
            return None
        return Choice(c.layout, row, c.M, max(timeline.collectives, default=0.0))


class _Frame(NamedTuple):
    """What a description reads of a program to count its ranks' model states (a family's, before
    the program is expanded)."""

    num_ranks: int
    num_stages: int
    placement: tuple[int, ...]
    replicas: tuple = ()
    dp: int = 1
    routes: tuple = ()  # (a family's routes: DualPipe's copies of the model)
    num_microbatches: int = 1

    @property
    def model_stages(self) -> int:
        return model_stages(self.num_stages, self.routes)


@lru_cache(maxsize=512)
def _shape(name: str, P: int, M: int, params: tuple[tuple[str, int], ...], reading: Reading) -> plan_bounds.Shape:
    """The shape of the schedule at P, M (`_program`, which must not be None)."""
    program = _program(name, P, M, params, reading)
    assert program is not None
    return plan_bounds.shape_of(program)


@lru_cache(maxsize=64)
def _builtin(name: str) -> bool:
    """Whether `name` loads a built-in schedule (not a file of that name, nor a framework's)."""
    from pathlib import Path
    from .resources import builtin_schedules
    return name in builtin_schedules() and not importers.is_imported(name) and not Path(name).exists()


def _stage_costs(setup: Any, placement: tuple[int, ...], segments: tuple[tuple[int, int], ...] = ()
                 ) -> tuple[list[StageCost], list[float], list[float]]:
    """Each stage's times, output size and activation size under the layout's description, as
    `Costs(derived=setup).apply` gives any program of these stages so placed, without replicas (every
    time and collective it sets overrides the schedule's own; the first and the last stage on one
    rank share a tied embedding's reduction); with routes (`segments`, all of one length), the model
    is cut into a route's stages and each stage takes its copy's (costs.py's `_described`)."""
    S = len(placement)
    if segments:
        first, stop = segments[0]
        model = setup.stage_settings(stop - first, 1, False)
        settings = {s: model[s - lo] for lo, hi in segments for s in range(lo, hi)}
    else:
        settings = setup.stage_settings(S, 1, ends_on_one_rank(placement))
    return ([StageCost().with_settings(settings[s]) for s in range(S)], [settings[s]["out"] for s in range(S)],
            [settings[s]["act"] for s in range(S)])


def _spend(result: Plan, units: int, what: str, where: str) -> None:
    """Count `units` of work on the plan, or a `too-large` error before it if that crosses MAX_PLAN_WORK."""
    if result.work + units > MAX_PLAN_WORK:
        raise SchedcError("too-large", f"the plan's search would pass its work limit of {MAX_PLAN_WORK:,} units "
                          f"(docs/limits.md) {what}, having simulated {result.simulated} and checked "
                          f"{result.checked} schedules: narrow it (fewer schedules or GPUs, a smaller --global-batch "
                          "or a larger --micro-batch: fewer microbatches)", where=where)
    result.work += units


@lru_cache(maxsize=512)
def _program(name: str, P: int, M: int, params: tuple[tuple[str, int], ...], reading: Reading) -> Program | None:
    """The schedule at P, M (V = 2 where it takes V), or None when its `require` refuses them. A
    PyTorch CSV or an IR file is read as written (its shape is fixed: `_fixed` tells it apart)."""
    from .api import load
    expanded = _takes_params(name)
    values = {"P": P, "M": M, "V": 2, **dict(params)} if expanded else {}
    read = {"forward_only": reading.forward_only} if expanded else reading._asdict()  # (a CSV's notation, placement)
    try:
        return load(name, values, strict_params=False, **read)
    except SchedcError as exc:
        if exc.code != "require":
            raise
        return None


@lru_cache(maxsize=64)
def _takes_params(name: str) -> bool:
    """Whether the schedule is expanded at the layout's P and M: a built-in, a framework's or a .pp
    file, not a PyTorch CSV or an IR file (read as written)."""
    from .api import detect_format
    return _builtin(name) or importers.is_imported(name) or detect_format(name) == "pp"


def _fixed(name: str, program: Program, P: int, M: int) -> tuple[int, int] | None:
    """(ranks, microbatches) of a schedule whose shape is not the layout's P ranks, or whose
    microbatches do not follow its M (a CSV, a .pp without an M parameter) and are not M; None when
    it fits the layout."""
    declared = dict(program.params) if _takes_params(name) else {}
    ranks = program.num_ranks != P  # (the layout's pipeline degree must be the schedule's ranks)
    microbatches = "M" not in declared and program.num_microbatches != M
    return (program.num_ranks, program.num_microbatches) if ranks or microbatches else None


@lru_cache(maxsize=512)
def _sound(name: str, P: int, M: int, params: tuple[tuple[str, int], ...], reading: Reading) -> bool:
    """Whether the schedule at P, M passes lint (a send to no stage, say, has no time to simulate:
    such a schedule is passed over, as one that fails its checks is)."""
    from .report import lint_findings
    program = _program(name, P, M, params, reading)
    return program is not None and not lint_findings(program)
