"""The action table a lowered program carries, validated: one list of steps per rank.

Pure Python (no torch), so the code generator, the launcher and the runtime share one reading of
the table. A step is `(op, stage, microbatch)` for compute and waits, `(op, stage, microbatch, peer)` for a
send or receive (`peer` is the rank on the other end), `(op, stage)` for UNSHARD / RESHARD /
REDUCE_GRAD, or `(kind, (step, ...))` for a GROUP or OVERLAP_F_B compound. Reading it fills each
step's inputs and value from schedc/rules/deps.py (`by_rule`), so the interpreter holds no
dependency rule and the file repeats nothing the rule says.

A table with routes (docs/semantics.md, "Routes") lists them as `[first microbatch, stop, first
stage, stop]`; each stage's neighbours, inputs and loss are its route's.

A data-parallel job (`replicas` D > 1) holds D copies of a pipeline of P ranks: `num_ranks` is the
job's D * P, job rank d * P + p runs replica d's pipeline rank p, `placement` maps a stage to its
pipeline rank p, and a send or receive names its peer in the job (inside its own replica).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import NamedTuple

from ..ir import (COMPUTE, P2P_MODES, RECVS, SENDS, STAGE_OPS as IR_STAGE_OPS, WAITS, Action, CompoundKind, Op, Route,
                  model_stages)
from ..rules.deps import (PEER_OFFSET, Stages, Value, bounds, copies, model_stage, needs, neighbour_input, payload,
                          produces, reduces, route_problems, routed, value_name)

FORMAT = "schedc-program"
VERSION = 1

# The op names of schedc/ir.py, as the table spells them (strings: the table is data in a file)
COMPUTE_OPS = tuple(op.value for op in Op if op in COMPUTE)
SEND_OPS = tuple(op.value for op in Op if op in SENDS)
RECV_OPS = tuple(op.value for op in Op if op in RECVS)
COMM_OPS = SEND_OPS + RECV_OPS
WAIT_OPS = {wait.value: op.value for wait, op in WAITS.items()}  # a wait -> the operation it awaits
STAGE_OPS = tuple(op.value for op in Op if op in IR_STAGE_OPS)
COMPOUNDS = tuple(kind.value for kind in CompoundKind)
# The stage on the other end of a send or receive, from the one rule (schedc/rules/deps.py: a receive is
# named by the stage that receives; SEND_F(s) meets RECV_F(s+1), SEND_B(s) meets RECV_B(s-1)).
PEER_STAGE = {op: PEER_OFFSET[Op[op]] for op in COMM_OPS}  # (peer_stage's offset, which every one has)
__all__ = ["value_name"]  # (the runtime's words for a value, from the rule's module)


class TableError(ValueError):
    """The table of a lowered program is malformed (a hand-edited or damaged file)."""


class Instr(NamedTuple):
    """One action: `op` on `stage` (and `microbatch`); `peer` is the other rank of a send/receive;
    `inputs` the values a compute action consumes and `carries` the value it makes, a send or
    receive moves, or a wait awaits: table data, so the interpreter holds no dependency rule."""

    op: str
    stage: int
    microbatch: int | None = None
    peer: int | None = None
    inputs: tuple[Value, ...] = ()
    carries: Value | None = None

    @property
    def is_send(self) -> bool:
        return self.op in SEND_OPS

    @property
    def is_recv(self) -> bool:
        return self.op in RECV_OPS

    def value(self) -> Value | None:
        """What the action makes (compute) or carries (send / receive; a wait: the operation it awaits):
        `("act", s, m)` the output of F(s,m), `("grad", s, m)` the input gradient of I/B(s,m)."""
        return self.carries

    # typed accessors of the fields set per kind (load_table checks them): each raises if it is unset
    @property
    def mb(self) -> int:
        """The microbatch, of an action that has one (compute, send, receive, wait)."""
        if self.microbatch is None:
            raise TableError(f"{self} has no microbatch")
        return self.microbatch

    @property
    def peer_rank(self) -> int:
        """`peer`, of a send or receive."""
        if self.peer is None:
            raise TableError(f"{self} has no peer")
        return self.peer

    def carried(self) -> Value:
        """`value()`, of an action that moves or awaits one (a send, a receive, a wait)."""
        if self.carries is None:
            raise TableError(f"{self} carries no value")
        return self.carries

    def __str__(self) -> str:
        """`F(1,3)`, `SEND_F(0,2)`, `UNSHARD(1)`: the way the language writes it."""
        if self.microbatch is None:
            return f"{self.op}({self.stage})"
        return f"{self.op}({self.stage},{self.microbatch})"

    @property
    def compact(self) -> str:
        """PyTorch's compact notation: `1F3`, `0SEND_F2`, `1UNSHARD`."""
        return f"{self.stage}{self.op}{'' if self.microbatch is None else self.microbatch}"


def by_rule(op: str, stage: int, microbatch: int | None, stages: Stages) -> tuple[tuple[Value, ...], Value | None]:
    """`(inputs, carries)` of an action by the rule (schedc/rules/deps.py), as `load_table` fills
    them in: what a compute action consumes and makes, what a send or receive moves, what a wait
    awaits (`stages`: the number of stages, or the routes). (The rule keeps an action's
    microbatch: it is asked once per op and stage.)"""
    if microbatch is None:
        return (), None
    inputs, carries = _rule_at(op, stage, stages)
    return (tuple((kind, s, microbatch) for kind, s in inputs),
            None if carries is None else (carries[0], carries[1], microbatch))


@lru_cache(maxsize=1 << 16)
def _rule_at(op: str, stage: int, stages: Stages) -> tuple[tuple[tuple[str, int], ...], tuple[str, int] | None]:
    """`by_rule` of `op` on `stage` at microbatch 0, as (kind, stage) pairs (a stage's needs do not
    depend on the microbatch: routes share the stages of a segment)."""
    a = Action(Op[WAIT_OPS.get(op, op)], stage, 0)
    if a.op.is_compute:
        inputs, carries = needs(a, stages), produces(a)
    else:
        inputs, carries = (), payload(a)
    return tuple((k, s) for k, s, _ in inputs), None if carries is None else (carries[0], carries[1])


class Compound(NamedTuple):
    kind: str  # GROUP (communication posted together) or OVERLAP_F_B (run as one action)
    parts: tuple[Instr, ...]

    def __str__(self) -> str:
        return f"{self.kind.lower()}({', '.join(str(p) for p in self.parts)})"

    @property
    def compact(self) -> str:
        return "(" + ";".join(p.compact for p in self.parts) + ")" + self.kind


Step = Instr | Compound


def parts(step: Step) -> tuple[Instr, ...]:
    return step.parts if isinstance(step, Compound) else (step,)


@dataclass(frozen=True)
class Table:
    """A validated lowered program: its metadata and one tuple of steps per rank."""

    schedule: str
    params: dict
    num_ranks: int
    num_stages: int
    num_microbatches: int
    placement: tuple[int, ...]
    ranks: tuple[tuple[Step, ...], ...]
    verified: str | None = None
    replicas: int = 1  # data-parallel replicas of the pipeline; num_ranks = replicas * pipeline_ranks
    p2p: str = "shared"  # how messages travel: schedc/ir.py P2P_MODES (docs/semantics.md, "Communicators and tags")
    forward_only: bool = False  # forwards alone (inference): no backward, no gradients
    routes: tuple[tuple[int, int, int, int], ...] = ()  # (first microbatch, stop, first stage, stop) each

    @cached_property
    def stages(self) -> Stages:
        """deps.py's `stages` of the table: its number of stages, or its routes."""
        return routed(self.num_stages, self.num_microbatches, _routes(self.routes))

    def is_entry(self, s: int) -> bool:
        """Does stage s read the inputs (the first stage of its route)?"""
        return bounds(self.stages, s)[0] == s

    def is_exit(self, s: int) -> bool:
        """Does stage s compute the loss (the last stage of its route)?"""
        return bounds(self.stages, s)[1] == s + 1

    @property
    def model_stages(self) -> int:
        """How many stages the model is cut into (a route's length; every stage without routes)."""
        return model_stages(self.num_stages, _routes(self.routes))

    def model_stage(self, s: int) -> int:
        """The stage of the model that stage s runs (a copy of it, where routes run copies)."""
        return model_stage(self.stages, s)

    def copies(self) -> dict[int, tuple[int, ...]]:
        """Each stage of the model -> the stages that run a copy of it, where some run more than one
        (routes: their gradients are summed as the step ends); empty without copies."""
        return copies(self.stages, self.num_stages)

    @property
    def pipeline_ranks(self) -> int:
        """P, the ranks of one pipeline (num_ranks without replicas)."""
        return self.num_ranks // self.replicas

    def replica_of(self, rank: int) -> int:
        return rank // self.pipeline_ranks

    def rank_of(self, stage: int, rank: int) -> int:
        """The job rank holding `stage` in the replica of job rank `rank`."""
        return self.replica_of(rank) * self.pipeline_ranks + self.placement[stage]

    def channel_of(self, a: Instr):
        """What besides the rank pair a message travels on: under `split`, its communicator ("act"
        for activations, "grad" for gradients); under `tagged`, its payload (the tag); else None."""
        if self.p2p == "split":
            return "grad" if a.op in ("SEND_B", "RECV_B") else "act"
        return a.value() if self.p2p == "tagged" else None

    def output_of(self, s: int) -> tuple[str, int]:
        """(kind, stage) of the value stage s's forward makes, as the next stage receives it (the
        rule's `produces`), for the shape pass before the first step."""
        value = produces(Action(Op.F, s, 0))
        assert value is not None  # (every forward makes its activation)
        return value[0], value[1]

    def gradient_into(self, s: int) -> tuple[str, int] | None:
        """(kind, stage) of the gradient stage s's backward receives for its output (the rule's
        `neighbour_input` of B(s)); None for the last stage, whose backward starts at the loss."""
        value = neighbour_input(Action(Op.B, s, 0), self.stages)
        return None if value is None else (value[0], value[1])

    def reduced_stages(self, a: Instr) -> tuple[int, ...]:
        """The stages whose weight gradients a reduction reads on its rank (schedc/rules/deps.py's
        `reduces`: every backward of them comes before it)."""
        return reduces(Action(Op[a.op], a.stage), self.placement)

    def dp_group(self, rank: int) -> tuple[int, ...]:
        """The data-parallel group of job rank `rank`: the ranks holding its pipeline rank in every replica."""
        P = self.pipeline_ranks
        return tuple(d * P + rank % P for d in range(self.replicas))

    def stages_of(self, rank: int) -> tuple[int, ...]:
        """The stages job rank `rank` holds (none for a rank outside the job)."""
        if not 0 <= rank < self.num_ranks:
            return ()
        return self._stages_by_rank.get(rank % self.pipeline_ranks, ())

    @cached_property
    def _stages_by_rank(self) -> dict[int, tuple[int, ...]]:
        """Each rank's stages, in order, found in one pass (not one pass over stages per rank)."""
        out: dict[int, list[int]] = {}
        for s, r in enumerate(self.placement):
            out.setdefault(r, []).append(s)
        return {r: tuple(stages) for r, stages in out.items()}

    def to_data(self) -> tuple[dict, list]:
        """`(PROGRAM, RANKS)`: the plain literals a generated program embeds (see `load_table`)."""
        meta = {"format": FORMAT, "version": VERSION, "schedule": self.schedule, "params": dict(self.params),
                "ranks": self.num_ranks, "stages": self.num_stages, "microbatches": self.num_microbatches,
                "placement": list(self.placement), "verified": self.verified}
        if self.replicas != 1:  # (a one-pipeline program's literal is as it always was)
            meta["replicas"] = self.replicas
        if self.p2p != "shared":
            meta["p2p"] = self.p2p
        if self.forward_only:
            meta["forward_only"] = True
        if self.routes:
            meta["routes"] = [list(r) for r in self.routes]
        return meta, [[_step_data(st) for st in steps] for steps in self.ranks]


def _routes(rows) -> tuple:
    """Route rows (first microbatch, stop, first stage, stop) as the IR's `Route`s."""
    return tuple(Route((a, b), (c, d)) for a, b, c, d in rows)


def _step_data(step: Step) -> tuple:
    if isinstance(step, Compound):
        return (step.kind, tuple(_step_data(p) for p in step.parts))
    if step.op in COMM_OPS:
        return (step.op, step.stage, step.microbatch, step.peer)
    if step.op in STAGE_OPS:
        return (step.op, step.stage)
    return (step.op, step.stage, step.microbatch)


def _int(value, what: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value < high:
        raise TableError(f"{what}: expected an integer in {low}..{high - 1}, got {value!r}")
    return value


def load_table(program: dict, ranks) -> Table:  # noqa: C901
    """Validate the literals of a lowered program (`PROGRAM`, `RANKS`) and build a `Table`.

    Every op is from the closed set above, every index in range, every action on the rank its stage
    is placed on, and every peer the rank of the stage on the other end.
    """
    if not isinstance(program, dict) or program.get("format") != FORMAT:
        raise TableError(f"not a schedc program table (expected format {FORMAT!r})")
    if program.get("version") != VERSION:
        raise TableError(f"program table version {program.get('version')!r}; this runtime reads {VERSION}")
    R = _int(program.get("ranks"), "ranks", 1, 1 << 20)
    S = _int(program.get("stages"), "stages", 1, 1 << 24)
    M = _int(program.get("microbatches"), "microbatches", 1, 1 << 24)
    D = _int(program.get("replicas", 1), "replicas", 1, R + 1)
    if R % D:
        raise TableError(f"{R} ranks do not hold {D} replicas of one pipeline")
    P = R // D
    placement = program.get("placement")
    if not isinstance(placement, (list, tuple)) or len(placement) != S:
        raise TableError(f"placement: expected a list of {S} ranks")
    placement = tuple(_int(r, f"placement of stage {s}", 0, P) for s, r in enumerate(placement))
    if not isinstance(ranks, (list, tuple)) or len(ranks) != R:
        raise TableError(f"expected one list of steps per rank ({R})")
    routes = _load_routes(program.get("routes", []), S, M)
    stages = routed(S, M, _routes(routes))
    out = []
    for r, steps in enumerate(ranks):
        if not isinstance(steps, (list, tuple)):
            raise TableError(f"rank {r}: expected a list of steps")
        here = placement if r < P else tuple(r // P * P + p for p in placement)  # job ranks in r's replica
        out.append(tuple(_step(st, r, x, stages, M, here) for x, st in enumerate(steps)))
    schedule = program.get("schedule")
    params = program.get("params") or {}
    verified = program.get("verified")
    if not isinstance(schedule, str) or not (verified is None or isinstance(verified, str)):
        raise TableError("schedule and verified must be strings")
    if not isinstance(params, dict) or not all(isinstance(k, str) and type(v) is int for k, v in params.items()):
        raise TableError("params must map names to integers")
    p2p = program.get("p2p", "shared")
    if p2p not in P2P_MODES:
        raise TableError(f"p2p: expected one of {', '.join(P2P_MODES)}, got {p2p!r}")
    forward_only = program.get("forward_only", False)
    if type(forward_only) is not bool:
        raise TableError(f"forward_only: expected true or false, got {forward_only!r}")
    return Table(schedule, dict(params), R, S, M, placement, tuple(out), verified, D, p2p, forward_only, routes)


def _load_routes(data, S: int, M: int) -> tuple[tuple[int, int, int, int], ...]:
    """The table's routes, each four integers, that describe a program (deps.py's `route_problems`)."""
    if not isinstance(data, (list, tuple)) or not all(isinstance(r, (list, tuple)) and len(r) == 4 for r in data):
        raise TableError(f"routes: expected a list of [first microbatch, stop, first stage, stop], got {data!r}")
    rows = tuple(tuple(_int(x, "routes", 0, 1 << 24) for x in r) for r in data)
    problems = route_problems(S, M, _routes(rows))
    if problems:
        k, why = problems[0]
        raise TableError(f"route {k + 1}: {why}")
    return rows  # type: ignore[return-value]


def _step(data, rank: int, index: int, stages: Stages, M: int, placement) -> Step:
    where = f"rank {rank}, step {index}"
    if not isinstance(data, (list, tuple)) or not data or not isinstance(data[0], str):
        raise TableError(f"{where}: expected a tuple starting with an op name, got {data!r}")
    head = data[0]
    if head in COMPOUNDS:
        if len(data) != 2 or not isinstance(data[1], (list, tuple)) or not data[1]:
            raise TableError(f"{where}: {head} expects a non-empty tuple of steps")
        members = tuple(_instr(p, rank, where, stages, M, placement) for p in data[1])
        wanted = COMM_OPS if head == "GROUP" else COMPUTE_OPS
        if any(p.op not in wanted for p in members):
            raise TableError(f"{where}: a {head} holds only {', '.join(wanted)}")
        return Compound(head, members)
    return _instr(data, rank, where, stages, M, placement)


def _size(data, where: str) -> int:
    """The number of fields a step of its op has (the op checked against the closed set)."""
    if not isinstance(data, (list, tuple)) or not data or not isinstance(data[0], str):
        raise TableError(f"{where}: expected a tuple starting with an op name, got {data!r}")
    op = data[0]
    size = 3 if op in COMPUTE_OPS or op in WAIT_OPS else 4 if op in COMM_OPS else 2 if op in STAGE_OPS else 0
    if not size:
        raise TableError(f"{where}: unknown op {op!r}")
    if len(data) != size:
        raise TableError(f"{where}: {op} expects {size} fields, got {len(data)}")
    return size


def _instr(data, rank: int, where: str, stages: Stages, M: int, placement) -> Instr:
    size = _size(data, where)
    op = data[0]
    stage = _int(data[1], f"{where}: stage", 0, len(placement))
    if placement[stage] != rank:
        raise TableError(f"{where}: {op} of stage {stage} on rank {rank}, but stage {stage} is on rank "
                         f"{placement[stage]}")
    mb = _int(data[2], f"{where}: microbatch", 0, M) if size > 2 else None
    peer = _peer(data[3], op, stage, mb, rank, where, placement, stages) if size == 4 else None
    return Instr(op, stage, mb, peer, *by_rule(op, stage, mb, stages))


def _peer(data, op: str, stage: int, mb: int | None, rank: int, where: str, placement, stages: Stages) -> int:
    """The peer of a send or receive: the rank of the stage on the other end (of its route), not its own."""
    other = stage + PEER_STAGE[op]
    lo, hi = bounds(stages, stage)
    if not lo <= other < hi:
        raise TableError(f"{where}: {op}({stage},{mb}) has no stage {other} on the other end")
    peer = _int(data, f"{where}: peer", 0, 1 << 20)
    if peer != placement[other]:
        raise TableError(f"{where}: {op}({stage},{mb}) talks to stage {other} on rank "
                         f"{placement[other]}, not rank {peer}")
    if peer == rank:
        raise TableError(f"{where}: {op}({stage},{mb}) would talk to its own rank")
    return peer


class Partner(NamedTuple):
    rank: int
    step: int
    instr: Instr


def partners(table: Table) -> dict[tuple[int, int, int], Partner]:
    """(rank, step, part) of each send or receive -> its partner: the k-th send on a channel (an
    ordered rank pair, and under the table's `p2p` its communicator or tag) meets the k-th receive,
    as gloo and NCCL pair point-to-point messages."""
    sends: dict = {}
    recvs: dict = {}
    for r, steps in enumerate(table.ranks):
        for x, st in enumerate(steps):
            for i, a in enumerate(parts(st)):
                if a.is_send:
                    sends.setdefault((r, a.peer, table.channel_of(a)), []).append((r, x, i, a))
                elif a.is_recv:
                    recvs.setdefault((a.peer, r, table.channel_of(a)), []).append((r, x, i, a))
    out = {}
    for ch, ss in sends.items():
        for (sr, sx, si, sa), (rr, rx, ri, ra) in zip(ss, recvs.get(ch, [])):
            out[(sr, sx, si)] = Partner(rr, rx, ra)
            out[(rr, rx, ri)] = Partner(sr, sx, sa)
    return out


def to_program(table: Table):
    """The table as a schedc IR Program, to verify what will run (imports schedc's core, not torch);
    a data-parallel table gives a program with `replicas`."""
    from ..ir import Action, Compound as IrCompound, CompoundKind, Op, Program

    def ir(a: Instr):
        return Action(Op(a.op), a.stage, a.microbatch)

    ranks = tuple(tuple(IrCompound(CompoundKind(st.kind), tuple(ir(p) for p in st.parts))
                        if isinstance(st, Compound) else ir(st) for st in steps) for steps in table.ranks)
    P = table.pipeline_ranks
    return Program(table.schedule, P, table.num_stages, table.num_microbatches,
                   table.placement, ranks[:P], tuple(sorted(table.params.items())),
                   replicas=tuple(ranks[d * P:(d + 1) * P] for d in range(1, table.replicas)), p2p=table.p2p,
                   forward_only=table.forward_only, routes=_routes(table.routes))
