"""The IR: action kinds, `Action`, `Compound`, `Program`, and the compact text form both ways.

The op set is closed and documented here once. An `Action` is one op on one stage (and microbatch);
a `Compound` is an `OVERLAP_F_B` pair or a `GROUP` of communication posted together. A `Program`
holds per-rank tuples of steps, the placement, and the cost and memory annotations. Every action
keeps the source span it came from (not compared). Text form: `2F0`, `1SEND_F3`, `0UNSHARD`,
`(0F3;3B1)OVERLAP_F_B`, `(1SEND_F3;1RECV_B2)GROUP`.
"""
from __future__ import annotations

import enum
import operator
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from .span import Span

T = TypeVar("T")  # (what `Program.each_replica` gives back per replica)


class Op(str, enum.Enum):
    """Every action kind schedc knows (PyTorch's `_ComputationType` names, minus compounds).

    F  forward of a stage on a microbatch          SEND_F / RECV_F  activation of F(s,m) to s+1
    B  full backward (I then W, fused)             SEND_B / RECV_B  input gradient of s to s-1
    I  backward for inputs (gradient for s-1)      UNSHARD / RESHARD  FSDP gather / free (no mb)
    W  backward for weights (needs I)              REDUCE_GRAD        gradient reduction (no mb)
                                                   REDUCE_TIED        all-reduce of the weights tied
                                                                      between the first and last stage
    WAIT_SEND_F / WAIT_RECV_F / WAIT_SEND_B / WAIT_RECV_B: wait here for that send or receive, posted
    earlier on this rank, to complete (under a backend, where operations are posted and awaited).
    A receive is named by the stage that receives (PyTorch's convention).
    """

    F = "F"
    B = "B"
    I = "I"  # noqa: E741 - the op's name in the literature
    W = "W"
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"
    UNSHARD = "UNSHARD"
    RESHARD = "RESHARD"
    REDUCE_GRAD = "REDUCE_GRAD"
    REDUCE_TIED = "REDUCE_TIED"  # schedc's own: torch's runtime has no such action
    WAIT_SEND_F = "WAIT_SEND_F"  # the waits are schedc's own too (torch awaits by its convention)
    WAIT_RECV_F = "WAIT_RECV_F"
    WAIT_SEND_B = "WAIT_SEND_B"
    WAIT_RECV_B = "WAIT_RECV_B"

    # Enum's own __hash__ is a Python-level call; hashing as the str value is C-fast and agrees
    # with equality (Op.F == "F"). Every dict and set keyed by ops or actions depends on this.
    __hash__ = str.__hash__

    @property
    def is_compute(self) -> bool:
        return self in COMPUTE

    @property
    def is_comm(self) -> bool:
        return self in COMM

    @property
    def has_microbatch(self) -> bool:
        return self not in STAGE_OPS


COMPUTE = frozenset({Op.F, Op.B, Op.I, Op.W})
SENDS = frozenset({Op.SEND_F, Op.SEND_B})
RECVS = frozenset({Op.RECV_F, Op.RECV_B})
COMM = SENDS | RECVS
STAGE_OPS = frozenset({Op.UNSHARD, Op.RESHARD, Op.REDUCE_GRAD, Op.REDUCE_TIED})
WAITS = {Op.WAIT_SEND_F: Op.SEND_F, Op.WAIT_RECV_F: Op.RECV_F, Op.WAIT_SEND_B: Op.SEND_B,
         Op.WAIT_RECV_B: Op.RECV_B}  # a wait -> the operation it waits for (same stage and microbatch)
SCHEDC_ONLY = frozenset({Op.REDUCE_TIED, *WAITS})  # actions torch's runtime has no name for
# Collectives over a process group (docs/semantics.md, "Collectives"): UNSHARD is FSDP's all-gather,
# REDUCE_GRAD the gradients' reduction, REDUCE_TIED the tied weights' all-reduce. RESHARD is not one:
# it frees the gathered parameters, "releasing memory (but doing no communication)" (torch's lowering).
COLLECTIVES = frozenset({Op.UNSHARD, Op.REDUCE_GRAD, Op.REDUCE_TIED})
# How point-to-point messages travel (docs/semantics.md, "Communicators and tags"): `shared`, one
# communicator and one tag, as torch's runtime, Megatron and DeepSpeed send; `tagged`, each message
# tagged with its payload; `split`, activations and gradients on communicators of their own.
P2P_MODES = ("shared", "tagged", "split")
# Where lowering posts receives: `needed`, in the round their sender runs (every semantics accepts
# it); `early`, every receive at the start of its rank's step (gloo only: passes/receives.py).
RECEIVE_POSTINGS = ("needed", "early")


class CompoundKind(str, enum.Enum):
    OVERLAP_F_B = "OVERLAP_F_B"  # DualPipe's overlapped forward/backward pair, one action
    GROUP = "GROUP"  # communication posted together (batch_isend_irecv); no order inside

    __hash__ = str.__hash__  # (as Op's: C-fast, and it agrees with equality)


@dataclass(frozen=True, slots=True)
class Action:
    op: Op
    stage: int
    microbatch: int | None = None
    span: Span | None = field(default=None, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        if (self.microbatch is None) is not (self.op in STAGE_OPS):  # `has_microbatch`, without the call
            need = "needs" if self.op.has_microbatch else "takes no"
            raise ValueError(f"{self.op.value} {need} microbatch")

    @property
    def parts(self) -> tuple["Action", ...]:
        return (self,)

    def __str__(self) -> str:
        return format_step(self)


@dataclass(frozen=True, slots=True)
class Compound:
    kind: CompoundKind
    parts: tuple[Action, ...]
    span: Span | None = field(default=None, compare=False, hash=False, repr=False)

    def __str__(self) -> str:
        return format_step(self)


Step = Action | Compound
_OP_OF = operator.attrgetter("op")


def is_group(step: Step) -> bool:
    """Whether the step is a GROUP compound: operations posted together (torch's batch_isend_irecv)."""
    return step.__class__ is Compound and step.kind is CompoundKind.GROUP


# the slots' own setters (`vars`: the member descriptors, which mypy reads as the fields' types)
_SET_OP, _SET_STAGE, _SET_MICROBATCH, _SET_SPAN = (vars(Action)[name].__set__ for name in
                                                  ("op", "stage", "microbatch", "span"))


def unchecked_action(op: Op, stage: int, microbatch: int | None, span: Span | None = None) -> Action:
    """`Action(op, stage, microbatch, span)` for parts known to be valid (read from checked columns),
    made without the dataclass's checks: twice as fast, for programs of millions of actions."""
    a = object.__new__(Action)
    _SET_OP(a, op)
    _SET_STAGE(a, stage)
    _SET_MICROBATCH(a, microbatch)
    _SET_SPAN(a, span)
    return a


MAX_ACTIONS = 3_000_000  # the most actions a program may have as written (objects, one per action: 1F1B at
# P=64, M=20000 is 2.56M): expanding makes one in ~1 us, and the passes that visit each take 1-10 us
MAX_LOWERED_ACTIONS = 10_000_000  # ... and as lowered, with its sends and receives (held as columns)

DEFAULT_SPEED = 1.0  # a rank's speed when none is given (its times are the stage times)


def default_share(num_stages: int, num_ranks: int) -> float:
    """The share of a rank-sized chunk of the model that one stage is, when nothing says otherwise:
    R / S (1/V for V chunks per rank). docs/semantics.md, "Units": the default times and sizes are a
    rank-sized chunk's (`StageCost()`, `StageMemory()`), and every stage takes this share of them, so
    every schedule splits the same model. The one place the rule is written."""
    return num_ranks / num_stages if num_stages > 0 else 1.0


COLLECTIVE_TIMES = ("R", "U", "T")  # StageCost's seconds of REDUCE_GRAD, UNSHARD and REDUCE_TIED


@dataclass(frozen=True)
class StageCost:
    """Times of one stage's actions; a rank-sized chunk's by default (docs/semantics.md: F=I=W=1,
    B=I+W). The one place that says what a stage costs when nothing, or only part, is given: the
    compiler and the cost files start from `default` and call `with_settings`."""

    F: float = 1.0
    B: float = 2.0
    I: float = 1.0  # noqa: E741
    W: float = 1.0
    # the communication inside each time (tensor-parallel collectives, expert all-to-all): what an
    # overlapped pair can hide (schedc/rules/time.py); 0 unless a model description says
    F_comm: float = 0.0
    B_comm: float = 0.0
    I_comm: float = 0.0
    W_comm: float = 0.0
    # the data-parallel collectives of the stage's weights (schedc/rules/time.py `collective_time`):
    # R its gradient reduction (REDUCE_GRAD), U FSDP's all-gather (UNSHARD), T the tied embedding's
    # all-reduce (REDUCE_TIED); 0, as in unit time, unless a model description says
    R: float = 0.0
    U: float = 0.0
    T: float = 0.0

    @classmethod
    def default(cls, num_stages: int, num_ranks: int) -> "StageCost":
        """What a stage of a schedule with `num_stages` stages on `num_ranks` ranks costs when nothing
        is given: its `default_share` of a rank-sized chunk's times."""
        k, chunk = default_share(num_stages, num_ranks), cls()
        return cls(F=chunk.F * k, B=chunk.B * k, I=chunk.I * k, W=chunk.W * k)

    def with_settings(self, given: Mapping[str, float]) -> "StageCost":
        """These times with `given` (any of F, B, I, W, their `_comm` parts, R, U, T) on top; when I or
        W is given and B is not, B becomes I + W."""
        F = given.get("F", self.F)
        I, W = given.get("I", self.I), given.get("W", self.W)  # noqa: E741
        B = given.get("B", I + W if ("I" in given or "W" in given) else self.B)
        Ic, Wc = given.get("I_comm", self.I_comm), given.get("W_comm", self.W_comm)
        Bc = given.get("B_comm", Ic + Wc if ("I_comm" in given or "W_comm" in given) else self.B_comm)
        return StageCost(F=F, B=B, I=I, W=W, F_comm=given.get("F_comm", self.F_comm), B_comm=Bc, I_comm=Ic, W_comm=Wc,
                         R=given.get("R", self.R), U=given.get("U", self.U), T=given.get("T", self.T))

    def comm_of(self, op: str) -> float:
        """The communication inside `op`'s time (F, B, I or W)."""
        return float(getattr(self, f"{op}_comm"))

    def to_dict(self) -> dict[str, float]:
        """Its times; the communication parts and collectives only where there are some."""
        return {k: v for k, v in vars(self).items() if not ((k.endswith("_comm") or k in COLLECTIVE_TIMES) and v == 0)}


@dataclass(frozen=True)
class StageMemory:
    """Activation size `act` (allocated by F), the part `weight` that W frees (default all), and
    `out`, the size of the stage's output: the activation it sends on and the gradient it gets back
    (default 0: boundary tensors are small next to a stage's activations)."""

    act: float = 1.0
    weight: float = 1.0
    out: float = 0.0

    @classmethod
    def default(cls, num_stages: int, num_ranks: int) -> "StageMemory":
        """A stage's sizes when nothing is given: its `default_share` of a rank-sized chunk's `act`
        and `weight`; `out` stays the chunk's (0)."""
        k, chunk = default_share(num_stages, num_ranks), cls()
        return cls(act=chunk.act * k, weight=chunk.weight * k, out=chunk.out)

    def with_settings(self, given: Mapping[str, float]) -> "StageMemory":
        """These sizes with `given` (any of act, weight, out) on top; when act is given and weight
        is not, weight becomes act."""
        act = given.get("act", self.act)
        weight = given.get("weight", act if "act" in given else self.weight)
        return StageMemory(act=act, weight=weight, out=given.get("out", self.out))


@dataclass(frozen=True)
class Annotations:
    """Cost and memory annotations, resolved per stage and rank (used by the simulator/verifier)."""

    stage_costs: tuple[StageCost, ...] = ()
    stage_memory: tuple[StageMemory, ...] = ()
    rank_speed: tuple[float, ...] = ()
    memory_limit: tuple[tuple[int, float], ...] = ()  # (rank, limit) for ranks that have one
    latency: float = 0.0
    bandwidth: float = 0.0  # 0 = infinite
    rank_dispatch: tuple[float, ...] = ()  # rank -> time to start each step (a runtime's own work); 0 if not given

    def complete(self, num_stages: int, num_ranks: int, model_stages: int | None = None) -> "Annotations":
        """These annotations with times and sizes for each of `num_stages` stages: the ones given, and
        `StageCost.default` / `StageMemory.default` for the rest, each stage the share of a model of
        `model_stages` stages (default `num_stages`; fewer where routes run copies of the model)."""
        from dataclasses import replace
        L = num_stages if model_stages is None else model_stages
        costs = (StageCost.default(L, num_ranks),) * (num_stages - len(self.stage_costs))
        sizes = (StageMemory.default(L, num_ranks),) * (num_stages - len(self.stage_memory))
        return replace(self, stage_costs=self.stage_costs + costs, stage_memory=self.stage_memory + sizes)

    def memory_of(self, stage: int) -> StageMemory:
        """The stage's sizes (a Program's annotations have every stage's; outside them, a rank-sized
        chunk's)."""
        return self.stage_memory[stage] if stage < len(self.stage_memory) else StageMemory()

    def cost_of(self, stage: int) -> StageCost:
        """The stage's times (a Program's annotations have every stage's; outside them, a rank-sized
        chunk's)."""
        return self.stage_costs[stage] if stage < len(self.stage_costs) else StageCost()

    def speed_of(self, rank: int) -> float:
        """The rank's speed (its times are the stage times divided by it); DEFAULT_SPEED if not given."""
        return self.rank_speed[rank] if rank < len(self.rank_speed) else DEFAULT_SPEED

    def speeds(self, num_ranks: int) -> tuple[float, ...]:
        """`speed_of` every rank in 0..num_ranks-1."""
        return tuple(self.speed_of(r) for r in range(num_ranks))

    def dispatch_of(self, rank: int) -> float:
        """The rank's time to start each step (the simulator adds it before every step); 0 if not given."""
        return self.rank_dispatch[rank] if rank < len(self.rank_dispatch) else 0.0


@dataclass(frozen=True)
class Route:
    """Microbatches `microbatches[0]` to `microbatches[1] - 1` run through stages `stages[0]` to
    `stages[1] - 1`, in order (half-open ranges; docs/semantics.md, "Routes"): the first of those
    stages reads their inputs and the last computes their loss. A program without routes runs every
    microbatch through every stage; schedc/rules/deps.py reads routes and says what they allow."""

    microbatches: tuple[int, int]
    stages: tuple[int, int]
    span: Span | None = field(default=None, compare=False, hash=False, repr=False)

    def __str__(self) -> str:
        """The declaration, as the language writes it."""
        (a, b), (c, d) = self.microbatches, self.stages
        return f"route microbatches {a} .. {b}: stages {c} .. {d}"


def model_stages(num_stages: int, routes: tuple[Route, ...]) -> int:
    """How many stages the model is cut into: a route's length where routes run copies of it
    (DualPipe's two directions: half the stages), else every stage (the one place this is said)."""
    if routes:
        first, stop = routes[0].stages
        return max(stop - first, 1)
    return num_stages


PLACEMENTS = ("loop", "vshape")  # the named placements (`placed`): a PyTorch CSV's `--placement`
NOTATIONS = ("current", "legacy")  # a PyTorch CSV's `--notation` (`parse_step`): legacy's B is today's I


def placed(kind: str, num_stages: int, num_ranks: int) -> tuple[int, ...]:
    """The rank of every stage under a named placement: `loop`, stage s on rank s % R; `vshape`,
    down the ranks and back up (`s < R ? s : 2R-1-s` for S = 2R, repeating for more chunks)."""
    if kind == "loop":
        return tuple(s % num_ranks for s in range(num_stages))
    if kind == "vshape":
        return tuple(s % num_ranks if (s // num_ranks) % 2 == 0 else num_ranks - 1 - s % num_ranks
                     for s in range(num_stages))
    raise ValueError(f"unknown placement {kind!r}")


def ends_on_one_rank(placement: Sequence[int], num_stages: int | None = None) -> bool:
    """Whether the first and the last of `num_stages` (default: every placed) stages sit on one rank,
    as a V placement puts them: that rank holds a tied embedding's both ends, so its reduction and
    its memory are the rank's own (the one place this is said)."""
    S = len(placement) if num_stages is None else num_stages
    return 0 < S <= len(placement) and placement[0] == placement[S - 1]


@dataclass(frozen=True)
class Program:
    """A schedule: for each rank, the steps it runs in order."""

    name: str
    num_ranks: int
    num_stages: int
    num_microbatches: int
    placement: tuple[int, ...]  # stage -> rank
    ranks: tuple[tuple[Step, ...], ...]
    params: tuple[tuple[str, int], ...] = ()
    annotations: Annotations = Annotations()
    source: str | None = None
    forward_only: bool = False  # no backward: inference or evaluation (docs/semantics.md, "Forward-only")
    # data parallelism: the steps of the other replicas of the pipeline (replica 1, 2, ...), each like
    # `ranks`; replica d's pipeline rank p is rank d * num_ranks + p of the job (docs/semantics.md, "Collectives")
    replicas: tuple[tuple[tuple[Step, ...], ...], ...] = ()
    p2p: str = "shared"  # one of P2P_MODES: how messages pair (docs/semantics.md, "Communicators and tags")
    # which stages each microbatch visits (docs/semantics.md, "Routes"); none: every stage, in order
    routes: tuple[Route, ...] = ()

    def __post_init__(self) -> None:
        # Every stage has its times and sizes, whoever built the program (the compiler, a CSV, JSON,
        # synth, a test): the ones given, the defaults of docs/semantics.md "Units" for the rest.
        ann = self.annotations
        if len(ann.stage_costs) < self.num_stages or len(ann.stage_memory) < self.num_stages:
            object.__setattr__(self, "annotations", ann.complete(self.num_stages, self.num_ranks, self.model_stages))

    @property
    def model_stages(self) -> int:
        """How many stages the model is cut into (`model_stages`)."""
        return model_stages(self.num_stages, self.routes)

    def rank_of(self, stage: int) -> int:
        return self.placement[stage]

    @property
    def dp(self) -> int:
        """How many data-parallel replicas of the pipeline run (1: none besides this one)."""
        return 1 + len(self.replicas)

    def replica(self, d: int) -> "Program":
        """Replica d's pipeline alone, as a program of its own (replica 0 is `ranks`)."""
        return replace(self, ranks=self.replicas[d - 1] if d else self.ranks, replicas=())

    def each_replica(self, fn: Callable[["Program"], T]) -> list[T]:
        """`fn` of each replica's pipeline alone (`replica`), replica 0 first; replicas that share
        their lists, as the compiler makes a job's, are given to `fn` once (a 100,000-rank job of one
        pipeline: one call)."""
        done: dict[int, T] = {}
        for ranks in (self.ranks, *self.replicas):
            if id(ranks) not in done:
                done[id(ranks)] = fn(replace(self, ranks=ranks, replicas=()))
        return [done[id(ranks)] for ranks in (self.ranks, *self.replicas)]

    def one_pipeline(self, what: str) -> "Program":
        """This program, if it is one pipeline; a data-parallel job (`replicas`) is an error for
        `what` (a command that does not model replicas yet), said before any work."""
        if self.replicas:
            from .errors import SchedcError
            raise SchedcError("usage", f"{self.name} runs {self.dp} data-parallel replicas; {what} handles one "
                              "pipeline so far (schedc check verifies the whole job)")
        return self

    @cached_property  # (each pass asks; the steps are immutable: counted once per program)
    def level(self) -> str:
        """`comms` if any communication is explicit, else `compute`."""
        if hasattr(self.ranks, "level"):  # steps held as columns (schedc/columns.py) know, without making actions
            level: str = self.ranks.level
            return level
        return _level_of(self.ranks)

    def steps(self) -> Iterator[tuple[int, int, Step]]:
        for rank, steps in enumerate(self.ranks):
            for index, step in enumerate(steps):
                yield rank, index, step

    def actions(self) -> Iterator[tuple[int, int, Action]]:
        """Every single action, compounds opened, with its rank and step index."""
        for rank, index, step in self.steps():
            for part in step.parts:
                yield rank, index, part

    @cached_property
    def num_actions(self) -> int:
        if hasattr(self.ranks, "num_actions"):  # columns count without making actions
            count: int = self.ranks.num_actions
            return count
        return _count(self.ranks)

    def with_ranks(self, ranks: Iterable[Iterable[Step]]) -> "Program":
        from dataclasses import replace
        return replace(self, ranks=tuple(tuple(r) for r in ranks))


def _level_of(ranks: Iterable[Sequence[Step]]) -> str:
    """`Program.level` of these rank lists."""
    ops: set[Op] = set()  # (the ops that occur, a rank at a time: few, and no call per action)
    for steps in ranks:
        if Compound in set(map(type, steps)):
            ops.update(part.op for step in steps for part in step.parts)
        else:
            ops.update(map(_OP_OF, steps))
    return "comms" if any(op.is_comm for op in ops) else "compute"


def _count(ranks: Iterable[Sequence[Step]]) -> int:
    """The actions of these rank lists (each part of a compound one)."""
    return sum(len(steps) if Compound not in set(map(type, steps)) else sum(len(st.parts) for st in steps)
               for steps in ranks)


class SharedRanks(tuple):  # type: ignore[type-arg]  # (a tuple of rank lists, as Program.ranks)
    """Rank lists of which many are one object (the ranks of a job whose replicas run the same
    lists, schedc/verify/mesh.py's `flat_job`): counted and read once per distinct list, so a
    job of D identical replicas costs what one does."""

    __slots__ = ()

    def _distinct(self) -> list[Sequence[Step]]:
        return list({id(steps): steps for steps in self}.values())

    @property
    def num_actions(self) -> int:
        counts = {id(steps): _count((steps,)) for steps in self._distinct()}
        return sum(counts[id(steps)] for steps in self)

    @property
    def level(self) -> str:
        return _level_of(self._distinct())


def same_lines(a: tuple[tuple[Step, ...], ...], b: tuple[tuple[Step, ...], ...]) -> bool:
    """Do two equal pipelines' steps (`a == b`, which ignores spans) come from the same source lines
    too? Then a finding about one reads word for word as about the other (replicas, `symmetry`)."""
    if a is b:
        return True
    return all(x is y or (x.span == y.span and all(p.span == q.span for p, q in zip(x.parts, y.parts)))
               for xs, ys in zip(a, b) for x, y in zip(xs, ys))


# ---- compact text form ----
_ACTION_RE = re.compile(r"(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|WAIT_SEND_F|WAIT_RECV_F|WAIT_SEND_B|WAIT_RECV_B|UNSHARD|RESHARD|REDUCE_GRAD|REDUCE_TIED|BW|F|B|I|W)(\d*)")
_COMPOUND_RE = re.compile(r"\((.*)\)([A-Z_]+)")


MAX_INDEX_DIGITS = 9


class ActionSyntaxError(ValueError):
    """A compact action text that does not parse; the caller attaches the location."""


def parse_step(text: str, span: Span | None = None, *, notation: str = "current") -> Step:  # noqa: C901
    """Parse `2F0`, `1SEND_F3`, `0UNSHARD` or `(0F3;3B1)OVERLAP_F_B`.

    `notation="legacy"` reads PyTorch's older spelling, where `B` meant backward-input (today's
    `I`) and `BW` meant the full backward (today's `B`).
    """
    text = text.strip()
    compound = _COMPOUND_RE.fullmatch(text)
    if compound:
        inner, kind_text = compound.groups()
        try:
            compound_kind = CompoundKind(kind_text)
        except ValueError:
            raise ActionSyntaxError(
                f"unknown compound kind {kind_text!r}; expected OVERLAP_F_B or GROUP") from None
        if not inner.strip():
            raise ActionSyntaxError(f"empty compound {text!r}")
        parts = []
        for piece in inner.split(";"):
            part = parse_step(piece, span, notation=notation)
            if isinstance(part, Compound):
                raise ActionSyntaxError(f"compounds do not nest: {text!r}")
            parts.append(part)
        return Compound(compound_kind, tuple(parts), span)
    match = _ACTION_RE.fullmatch(text)
    if not match:
        raise ActionSyntaxError(
            f"invalid action {text!r}; expected [stage][kind][microbatch], e.g. 2F0, 1SEND_F3, 0UNSHARD")
    stage_text, kind, mb_text = match.groups()
    if len(stage_text) > MAX_INDEX_DIGITS or len(mb_text) > MAX_INDEX_DIGITS:
        raise ActionSyntaxError(f"{text[:30]!r}: a stage or microbatch index beyond 10^{MAX_INDEX_DIGITS} is too large")
    if notation == "legacy":
        kind = {"B": "I", "BW": "B"}.get(kind, kind)
    elif kind == "BW":
        raise ActionSyntaxError(
            f"{text!r}: BW is PyTorch's older spelling of the full backward (today's B); "
            "read the file with --notation legacy")
    op = Op(kind)
    if op.has_microbatch and not mb_text:
        raise ActionSyntaxError(f"{text!r}: {op.value} needs a microbatch, e.g. {stage_text}{op.value}0")
    if not op.has_microbatch and mb_text:
        raise ActionSyntaxError(f"{text!r}: {op.value} takes no microbatch")
    return Action(op, int(stage_text), int(mb_text) if mb_text else None, span)


def count_of(n: int, word: str, many: str | None = None) -> str:
    """`1 rank`, `2 ranks`: a count with its noun in the number it takes (`many`: an irregular plural)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def sizes_text(p: Program, routes: bool = True) -> str:
    """`2 ranks, 4 stages on 2 routes, 8 microbatches, 40 actions`: a program's sizes as every
    summary line states them."""
    routed = f" on {count_of(len(p.routes), 'route')}" if routes and p.routes else ""
    return (f"{count_of(p.num_ranks, 'rank')}, {count_of(p.num_stages, 'stage')}{routed}, "
            f"{count_of(p.num_microbatches, 'microbatch', 'microbatches')}, {count_of(p.num_actions, 'action')}")


def format_step(step: Step) -> str:
    if isinstance(step, Compound):
        return "(" + ";".join(format_step(p) for p in step.parts) + ")" + step.kind.value
    mb = "" if step.microbatch is None else str(step.microbatch)
    return f"{step.stage}{step.op.value}{mb}"


def describe(action: Action) -> str:
    """`F(2,3)` style, as the language writes it."""
    if action.microbatch is None:
        return f"{action.op.value}({action.stage})"
    return f"{action.op.value}({action.stage},{action.microbatch})"
