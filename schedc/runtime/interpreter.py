"""Run one rank's action table for a training step: one handler per action kind (torch.fx style).

`PipelineInterpreter.step(inputs, targets)` walks the rank's steps in order and runs them as the
backends `nccl` and `gloo` of docs/semantics.md say, as torch's `_PipelineScheduleRuntime` does: a
send or receive is posted where the table puts it (`isend`/`irecv`, one work handle per operation)
and never blocks there; a GROUP is posted as one `batch_isend_irecv` per communicator (`post_group`);
F waits for the receive of its input activation, B and I for that of their input gradient, and
every send is waited for as the step ends. Receive buffers are allocated from
shapes learned once, before the first step, stage by stage in model order (`_learn_shapes`, as
torch's stage initialisation does), so no receive waits at its place, in the first step either.
`B` is one backward; `I` computes input gradients only and `W` the weight gradients later
(`backward.py`); gradients accumulate over microbatches, each microbatch's loss scaled by 1/M. In
a data-parallel job (`table.replicas` > 1) `REDUCE_GRAD(s)` averages stage s's gradients over the
rank's data-parallel group (`dp_group`), where the table puts it, and a stage the step did not
reduce is reduced as the step ends (`_reduce_rest`). With routes (docs/semantics.md, "Routes") each
route's first stage reads the inputs and its last computes the loss, and the stages that run copies
of one stage of the model sum their gradients as the step ends (`_sum_copies`), so every copy holds
the gradient of the one stage the unsplit model has. The
watchdog times every action and every wait; with a `Recorder` (`trace`, runtime/trace.py) every
action, post, wait and completion is recorded.
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager, nullcontext
from typing import Callable, NamedTuple, Sequence

import torch

from .backward import backward_input as split_backward_input, backward_weight as split_backward_weight
from .table import Compound, Instr, Table, parts, partners, value_name
from .trace import Recorder, step_name
from .watchdog import Watchdog

# Shape header: [dtype code, ndim, dim0, ..., dim7], int64: a stage's output shape, sent to the rank
# of the next stage before the first step (`_learn_shapes`), on its own tag (messages use tag 0).
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
           torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)
_DTYPE_CODE = {d: i for i, d in enumerate(_DTYPES)}
_MAX_DIMS = 8
_HEADER = 2 + _MAX_DIMS
DATA_TAG, SHAPE_TAG = 0, 1


class StepTime(NamedTuple):
    """Where one training step's time went on this rank (perf_counter seconds): `compute` inside
    F/B/I/W, `waited` blocked in a send's or receive's wait, `posting` inside isend/irecv; the rest
    of `end - begin` is the interpreter's own work (Python, autograd bookkeeping, allocation)."""

    begin: float
    end: float
    compute: float
    waited: float
    posting: float


class ScheduleError(RuntimeError):
    """The table asks for something the run cannot do (only possible without verification)."""


class StepFailure(RuntimeError):
    """An action failed: the rank, the program step, the action, the training step, and why (index
    -1: before the first action, while learning the shapes of the messages)."""

    def __init__(self, rank: int, index: int, step, train_step: int, cause: BaseException, context: str):
        self.rank, self.index, self.step, self.train_step, self.cause = rank, index, step, train_step, cause
        where = f"at program step {index} ({step})" if index >= 0 else f"before its first action ({step})"
        super().__init__(
            f"rank {rank} failed {where} in training step {train_step}: "
            f"{type(cause).__name__}: {cause}\n  rank {rank}'s program: {context}")


class PipelineInterpreter:
    """Executes `table.ranks[rank]` over `modules` (stage index -> nn.Module) on this rank.

    `loss_fn(output, target)` is applied on the last stage; `group` is the process group (default:
    the world); `dp_group` the process group of the rank's data-parallel group (`table.dp_group`),
    needed when the table has replicas; `grad_group` the communicator of gradient messages, over
    the same ranks as `group`, needed when the table's `p2p` is `split`; `tied` (stage -> its
    parameters tied to the other end of the model, first and last stage alike, in one order) and
    `tied_group` (the ranks of this replica's first and last stage; None when one rank holds both),
    needed for REDUCE_TIED; `copy_groups` (a stage of the model -> the process group of the ranks
    that hold its copies, for each this rank holds and shares with another rank: `copy_groups` in
    runtime/entry.py), needed when the table's routes run copies on several ranks; `watchdog` stops the run when a wait exceeds its timeout. Under `p2p
    tagged` each message's tag names its payload.
    """

    def __init__(self, table: Table, rank: int, modules: dict[int, torch.nn.Module], loss_fn: Callable,
                 *, group=None, device: torch.device | str | None = None, watchdog: Watchdog | None = None,
                 trace: Recorder | None = None, dp_group=None, grad_group=None, tied=None, tied_group=None,
                 copy_groups=None):
        import torch.distributed as dist
        if table.replicas > 1 and dp_group is None:
            raise ValueError(f"the table runs {table.replicas} replicas: rank {rank} needs its data-parallel group")
        if table.p2p == "split" and grad_group is None:
            raise ValueError(f"the table sends gradients on a communicator of their own (p2p split): rank {rank} "
                             "needs it (grad_group)")
        self.table, self.rank = table, rank
        self.dp_group = dp_group if table.replicas > 1 else None
        self.copies = {c: stages for c, stages in table.copies().items() if any(s in table.stages_of(rank) for s in stages)}
        self.copy_groups = dict(copy_groups or {})
        shared = [c for c, stages in self.copies.items()
                  if len({table.rank_of(s, rank) for s in stages}) > 1 and c not in self.copy_groups]
        if shared:
            raise ValueError(f"rank {rank} holds copies of model stage(s) {shared} that other ranks hold too: it "
                             "needs their process groups (copy_groups) to sum their gradients")
        self.steps = table.ranks[rank]
        self.S, self.M = table.num_stages, table.num_microbatches
        missing = [s for s in table.stages_of(rank) if s not in modules]
        if missing:
            raise ValueError(f"rank {rank} holds stages {list(table.stages_of(rank))} but has no module for {missing}")
        self.modules = modules
        self.params: dict[int, list[torch.Tensor]] = {s: [p for p in modules[s].parameters() if p.requires_grad]
                                                      for s in modules}
        self.loss_fn = loss_fn
        self.pg = group if group is not None else dist.distributed_c10d._get_default_group()
        # group ranks of the table's global ranks (identity for the world group)
        self._peer = (lambda r: r) if group is None else (lambda r: dist.get_group_rank(group, r))
        # gradients: on their own communicator under `p2p split` (its group ranks for the table's ranks)
        self.tied, self.tied_group = tied or {}, tied_group
        self.pg_grad, self._peer_grad = self.pg, self._peer
        if table.p2p == "split":
            self.pg_grad, self._peer_grad = grad_group, (lambda r: dist.get_group_rank(grad_group, r))
        self.device = torch.device(device) if device is not None else None
        self.watchdog = watchdog or Watchdog(None)
        self.trace = trace
        self._span: list[float] | None = None  # [first start, last end] of the compute of an OVERLAP_F_B being run
        self.partners = {(x, i): p for (r, x, i), p in partners(table).items() if r == rank}
        # (kind, stage) -> (shape, dtype) of the messages this rank receives, learned before the first step
        self._shapes: dict[tuple[str, int], tuple[torch.Size, torch.dtype]] | None = None
        # one handler per action kind, called as `handler(self, action)` (functions, not bound methods:
        # the interpreter holds no reference to itself, so it is freed, its process groups with it,
        # as soon as it is dropped)
        cls = PipelineInterpreter
        self.handlers = {"F": cls.forward, "B": cls.backward, "I": cls.backward_input, "W": cls.backward_weight,
                         "SEND_F": cls.send, "SEND_B": cls.send, "RECV_F": cls.recv, "RECV_B": cls.recv,
                         "WAIT_RECV_F": cls.wait_recv, "WAIT_RECV_B": cls.wait_recv,
                         "WAIT_SEND_F": cls.wait_send, "WAIT_SEND_B": cls.wait_send,
                         "UNSHARD": cls.nothing, "RESHARD": cls.nothing,
                         "REDUCE_GRAD": cls.reduce_grad if self.dp_group is not None else cls.nothing,
                         "REDUCE_TIED": cls.reduce_tied}
        # measured per (op, stage): compute seconds per action; bytes of each stage's output message
        self.times: dict[tuple[str, int], list[float]] = {}
        self.message_bytes: dict[int, int] = {}
        # with `measure_saved` (schedc run --profile): the most bytes one microbatch's forward of each
        # stage saved for its backward (torch's saved-tensor hooks; each storage once, parameters not)
        self.measure_saved = False
        # with `synchronize` (schedc run --profile on a GPU): compute is timed from and to an idle device
        self.synchronize = False
        self.saved_bytes: dict[int, int] = {}
        self.train_step = 0
        # measured communication, one record per message and side (the shape headers not included):
        # [training step, "S" | "R", value, peer rank, posted, post returned, wait began, wait ended]
        # (perf_counter seconds), and per training step where its time went (`StepTime`)
        self.comm_log: list[list] = []
        self.step_log: list[StepTime] = []

    # ---- the step ----
    def step(self, inputs: Sequence[torch.Tensor] | None = None, targets: Sequence | None = None) -> list[torch.Tensor]:
        """Run the rank's program once: forward and backward of every microbatch of its stages.

        `inputs` (M microbatches) is needed on the rank of stage 0, `targets` on the rank of the last
        stage. Gradients accumulate into the parameters' `.grad`; returns the last stage's losses
        (detached, one per microbatch in the order they ran) or [] elsewhere.
        """
        self.train_step += 1
        self._inputs, self._targets = inputs, targets
        self._values: dict = {}  # value -> tensor present on this rank
        self._arriving: dict = {}  # value -> (work, buffer, step index, instr) posted, not yet waited
        self._sends: list = []  # (work, tensor, step index, instr)
        self._leaf: dict = {}  # (s, m) -> the stage input that gradients flow back to
        self._out: dict = {}  # (s, m) -> stage output (or scaled-by-nothing loss) awaiting backward
        self._pending_w: dict = {}  # (s, m) -> what I left for W (schedc/runtime/backward.py)
        self._losses: list = []
        self._backwards: dict = {}  # stage -> microbatches whose weight gradients are in (B or W done)
        self._reduced: set = set()  # stages whose gradients this step averaged over the data-parallel group
        self._reduced_ops: set = set()  # "tied": the tied weights' gradients were summed this step
        self._compute = self._waited = self._posting = 0.0
        handlers = self.handlers
        dog = self.watchdog
        index = 0
        began = time.perf_counter()
        if self._shapes is None:
            try:
                self._shapes = self._learn_shapes()
                self._open_communicators()
            except Exception as exc:
                raise StepFailure(self.rank, -1, "learning the message shapes", self.train_step, exc,
                                  self.context(0)) from exc
            finally:
                dog.end()
        try:
            for index, st in enumerate(self.steps):
                self._index = index
                dog.running(self, index)
                if isinstance(st, Compound):
                    if st.kind == "GROUP":
                        self.post_group(st)
                    else:
                        self._span = [math.inf, -math.inf]
                        for a in st.parts:
                            handlers[a.op](self, a)
                        span, self._span = self._span, None
                        if self.trace is not None:
                            self.trace.compute(self.train_step, index, step_name(st), *span)
                else:
                    handlers[st.op](self, st)
            index = len(self.steps)
            dog.end()
            self._finish()
        except Exception as exc:
            raise StepFailure(self.rank, index, self.steps[index] if index < len(self.steps) else "end of step",
                              self.train_step, exc, self.context(index)) from exc
        finally:
            dog.end()
            self._span = None
        self.step_log.append(StepTime(began, time.perf_counter(), self._compute, self._waited, self._posting))
        return self._losses

    def close(self) -> None:
        """Let go of the process groups and any work handle, before `destroy_process_group`: the
        groups are then freed there, while Python runs, even if the interpreter is still referenced.
        (A gloo group freed as the process shuts down, by the garbage collector, can be aborted by
        gloo's threads: "terminate called without an active exception".)"""
        self.pg = self.pg_grad = self.dp_group = self.tied_group = None
        self.copy_groups = {}
        self._peer = self._peer_grad = None  # type: ignore[assignment]  # (closed: never stepped again)
        self._sends, self._arriving = [], {}

    def _learn_shapes(self) -> dict:
        """The shape and dtype of every message this rank will receive, learned before the first
        step as torch's stage initialisation learns them (stage.py, `_forward_metadata_inference`):
        stage by stage in model order, a stage of this rank takes its input's shape (stage 0:
        microbatch 0; a stage whose predecessor is on another rank: a header from that rank, on
        SHAPE_TAG), runs its forward once on zeros of that shape (no autograd; the RNG and the
        module's buffers are restored, so training is unchanged) and sends its output's shape to
        the rank of the next stage. The chain follows model order, so it cannot deadlock whatever
        the schedule; the gradient coming back has the activation's shape. The shapes are keyed by
        (kind, stage) of the values received (an `Instr`'s `carries`): ("act", s) stage s's output,
        ("grad", s) the gradient of stage s's input. No receive then waits at its place for a
        shape: every step runs as posted."""
        table, rank, dog = self.table, self.rank, self.watchdog
        place = tuple(table.rank_of(s, rank) for s in range(self.S))  # job ranks of this rank's replica
        shapes: dict = {}
        sent = []
        local: tuple[torch.Size, torch.dtype] | None = None  # the output shape of this rank's previous stage
        local_stage = -1
        for s in table.stages_of(rank):
            if table.is_entry(s):
                if self._inputs is None:
                    raise ScheduleError(f"stage {s} needs the inputs, but rank {rank} was given none")
                x = self._inputs[0]
            else:
                if place[s - 1] == rank:
                    if local_stage != s - 1 or local is None:  # (local is set with local_stage)
                        raise ScheduleError(f"stage {s - 1} on rank {rank} made no output for stage {s}")
                    shape, dtype = local
                else:
                    shape, dtype = shapes[table.output_of(s - 1)] = self._shape_from(place[s - 1], s - 1)
                x = torch.zeros(shape, dtype=dtype, device=self.device)
            if table.is_exit(s):
                continue
            y = self._dry_forward(s, x)
            local, local_stage = (y.shape, y.dtype), s
            if place[s + 1] != rank:
                shapes[table.gradient_into(s)] = local  # the gradient for stage s's output has its shape
                header = _header(y).to(y.device)
                sent.append((self.pg.send([header], self._peer(place[s + 1]), SHAPE_TAG), header, s))
        for work, _, s in sent:
            dog.phase(f"learning the message shapes before the first step, sending stage {s}'s output shape to "
                      f"rank {place[s + 1]}")
            t0 = time.perf_counter()
            work.wait()
            if self.trace is not None:
                self.trace.wait(self.train_step, None, f"shape of stage {s}'s output to rank {place[s + 1]}",
                                t0, time.perf_counter())
        dog.end()
        return shapes

    def _shape_from(self, peer: int, stage: int) -> tuple[torch.Size, torch.dtype]:
        """Receive the shape of `stage`'s output from `peer` (the pass before the first step)."""
        self.watchdog.phase(f"learning the message shapes before the first step, waiting for stage {stage}'s "
                            f"output shape from rank {peer}")
        header = torch.empty(_HEADER, dtype=torch.int64, device=self.device)
        t0 = time.perf_counter()
        self.pg.recv([header], self._peer(peer), SHAPE_TAG).wait()
        if self.trace is not None:
            self.trace.wait(self.train_step, None, f"shape of stage {stage}'s output from rank {peer}", t0,
                            time.perf_counter())
        self.watchdog.end()
        return _read_header(header)

    def _open_communicators(self) -> None:
        """Before the first step, every communicator the step uses, made in one order on every rank, so
        that NCCL, which makes a communicator at its first use with all its members, never has ranks
        waiting in the making of different ones (docs/semantics.md, "Communicator creation"): the rank
        pairs of activations were made by the pass that learns the message shapes (in model order);
        then under `p2p split` the gradients' pairs (in sorted order, one small message each), the
        data-parallel group, the tied-weights group, and, for a table with groups, each communicator
        a group posts on: ProcessGroupNCCL runs a batch on the process group's own NCCL communicator,
        not the pair's, and every rank of the group must join its making (torch's
        `batch_isend_irecv` documentation). On gloo, which connects a group when it is made, this
        costs a few small messages."""
        import torch.distributed as dist
        self.watchdog.phase("making the communicators before the first step")
        one = torch.zeros(1, device=self.device)
        if self.pg_grad is not self.pg:
            for a, b in self._pairs():
                if self.rank == a:
                    self.pg_grad.send([one], self._peer_grad(b), SHAPE_TAG).wait()
                elif self.rank == b:
                    self.pg_grad.recv([torch.zeros(1, device=self.device)], self._peer_grad(a), SHAPE_TAG).wait()
        for group in (self.dp_group, self.tied_group, *self.copy_groups.values()):
            if group is not None:
                dist.all_reduce(torch.zeros(1, device=self.device), group=group)
        if any(isinstance(st, Compound) and st.kind == "GROUP" for steps in self.table.ranks for st in steps):
            for pg in {id(pg): pg for pg in (self.pg, self.pg_grad)}.values():
                dist.all_reduce(torch.zeros(1, device=self.device), group=pg)
        self.watchdog.end()

    def _pairs(self) -> list[tuple[int, int]]:
        """The job ranks of this rank's replica that hold adjacent stages (of one route), as sorted
        pairs, in order."""
        place = [self.table.rank_of(s, self.rank) for s in range(self.S)]
        return sorted({(min(a, b), max(a, b)) for s, (a, b) in enumerate(zip(place, place[1:]))
                       if a != b and not self.table.is_exit(s)})

    def _dry_forward(self, s: int, x: torch.Tensor) -> torch.Tensor:
        """Stage s's output on `x`, for its shape only: no autograd, and the random state and the
        module's buffers (a BatchNorm's running statistics) as they were."""
        module = self.modules[s]
        self.watchdog.phase(f"learning the message shapes before the first step, running stage {s} once "
                            "without gradients")
        saved = [(b, b.detach().clone()) for b in module.buffers()]
        devices = [self.device.index or 0] if self.device is not None and self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            y = module(x)
            for b, value in saved:
                b.copy_(value)
        self.watchdog.end()
        if not isinstance(y, torch.Tensor):
            raise ScheduleError(f"stage {s} returned {type(y).__name__}; a stage must return one tensor")
        return y

    def _finish(self) -> None:
        """Wait for every send; anything left over means the table is not a complete schedule."""
        self._index = len(self.steps)
        for work, _tensor, x, a, rec in self._sends:
            self._wait(work, x, a, "send", None, rec)
        self._sends.clear()
        left = [f"{a} (step {x}) received {value_name(v)} but no action used it"
                for v, (_, _, x, a, _) in self._arriving.items()]
        left += [f"F({s},{m}) ran but its backward did not" for (s, m) in self._out]
        left += [f"I({s},{m}) ran but W({s},{m}) did not" for (s, m) in self._pending_w]
        if left:
            raise ScheduleError("; ".join(left[:5]) + (f"; and {len(left) - 5} more" if len(left) > 5 else ""))
        self._values.clear()
        if self.copies and not self.table.forward_only:
            self._sum_copies()
        if self.dp_group is not None and not self.table.forward_only:
            self._reduce_rest()

    def _sum_copies(self) -> None:
        """Routes that run copies of a stage of the model (DualPipe's two directions): each copy's
        gradient becomes the sum over the copies, the gradient of the one stage of the unsplit model,
        so an optimizer step keeps the copies equal. Model stage by model stage, in order (each rank
        the ones it holds): the copies on this rank summed here, then over the ranks that hold the
        others (`copy_groups`)."""
        import torch.distributed as dist
        for c, stages in sorted(self.copies.items()):
            mine = [s for s in stages if s in self.modules]
            group = self.copy_groups.get(c)
            self.watchdog.phase(f"summing the gradients of the copies of model stage {c} (stages "
                                f"{', '.join(map(str, stages))}) as the step ends")
            t0 = time.perf_counter()
            try:
                for ps in zip(*(self.params[s] for s in mine)):
                    total = _grad(ps[0])
                    for p in ps[1:]:
                        total = total + _grad(p)
                    if group is not None:
                        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
                    for p in ps:
                        p.grad = total.clone()
            finally:
                self.watchdog.end()
            self._waited += time.perf_counter() - t0

    def _reduce_rest(self) -> None:
        """A data-parallel job whose schedule leaves a stage's gradients unreduced: average them as
        the step ends, stage by stage in model order (every member of the group holds the same
        stages and, verified, reduced the same ones already, so the group's collectives match)."""
        group = ", ".join(str(r) for r in self.table.dp_group(self.rank))
        for s in self.table.stages_of(self.rank):
            if s not in self._reduced:
                self.watchdog.phase(f"averaging stage {s}'s gradients over the data-parallel group of ranks "
                                    f"{group} as the step ends (REDUCE_GRAD({s}), added by the runtime)")
                try:
                    self.reduce_grad(Instr("REDUCE_GRAD", s))
                finally:
                    self.watchdog.end()

    # ---- handlers, one per action kind ----
    def nothing(self, a: Instr) -> None:
        """UNSHARD, RESHARD, REDUCE_GRAD: no FSDP here, and gradients are already scaled by 1/M."""
        if self.trace is not None:
            t = time.perf_counter()
            self.trace.collective(self.train_step, self._index, str(a), t, t)

    def reduce_grad(self, a: Instr) -> None:
        """REDUCE_GRAD(s) in a data-parallel job: the all-reduce (average) of stage s's gradients over
        this rank's data-parallel group, issued here and waited for here (a collective completes
        once every member has reached it). Every backward of the stage must have run before it."""
        import torch.distributed as dist
        s = a.stage
        self._after_backwards(a, "averages its stage's gradients over the data-parallel group")
        if s in self._reduced:
            raise ScheduleError(f"{a}: stage {s}'s gradients were already averaged in this step")
        self._reduced.add(s)
        params = self.params.get(s, [])
        t0 = time.perf_counter()
        if params:
            for p in params:
                if p.grad is None:  # a parameter this step did not reach still takes part (zeros)
                    p.grad = torch.zeros_like(p)
            grads = [_grad(p) for p in params]  # (each set just above)
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.dp_group)
            flat.div_(self.table.replicas)
            offset = 0
            for g in grads:
                n = g.numel()
                g.copy_(flat[offset:offset + n].view_as(g))
                offset += n
        t1 = time.perf_counter()
        self._waited += t1 - t0
        if self.trace is not None:
            self.trace.collective(self.train_step, self._index, str(a), t0, t1)

    def _after_backwards(self, a: Instr, what: str) -> None:
        """Every backward that adds to the gradients `a` reduces has run: the rule `schedc check`
        holds a schedule to (schedc/rules/deps.py's `reduces`; its finding `reduce-early`)."""
        for s in self.table.reduced_stages(a):
            done, every = self._backwards.get(s, 0), self._visitors(s)
            if done < every:
                raise ScheduleError(f"{a} {what} after only {done} of stage {s}'s {every} backwards: "
                                    "the rest would be left out (reduce-early: schedc check refuses the schedule)")

    def _visitors(self, s: int) -> int:
        """How many microbatches run through stage s (every one, without routes)."""
        stages = self.table.stages
        return self.M if isinstance(stages, int) else len(stages.visitors(s))

    def reduce_tied(self, a: Instr) -> None:
        """REDUCE_TIED(s), s the first or the last stage: the sum of the tied parameters' gradients of
        the two ends (an all-reduce between their ranks, or a sum on the rank that holds both), so
        each copy of the weight gets the gradient of the one weight the model shares. Every backward
        of the stage (of both, on one rank) must have run before it."""
        import torch.distributed as dist
        ends = (0, self.S - 1)
        if ends[0] == ends[1]:  # one stage: its weight is one tensor already
            return
        mine = [s for s in ends if s in self.modules]
        if a.stage not in self.tied or any(s not in self.tied for s in mine):
            raise ScheduleError(f"{a}: the model names no tied parameters for stage {a.stage} (its "
                                "`tied_parameters(module, stage, num_stages)`)")
        self._after_backwards(a, "sums the tied weights' gradients")
        if len(mine) == 2:  # one rank holds both ends: sum here, once
            if "tied" in self._reduced_ops:
                return
            self._reduced_ops.add("tied")
            for p, q in zip(self.tied[ends[0]], self.tied[ends[1]]):
                total = _grad(p) + _grad(q)
                p.grad, q.grad = total, total.clone()
            return
        t0 = time.perf_counter()
        if self.tied_group is None:
            raise ScheduleError(f"{a}: rank {self.rank} has no group with the rank of the other end of the model")
        grads = [_grad(p) for p in self.tied[a.stage]]
        for g in grads:
            dist.all_reduce(g, op=dist.ReduceOp.SUM, group=self.tied_group)
        for p, g in zip(self.tied[a.stage], grads):
            p.grad = g
        t1 = time.perf_counter()
        self._waited += t1 - t0
        if self.trace is not None:
            self.trace.collective(self.train_step, self._index, str(a), t0, t1)

    def forward(self, a: Instr) -> None:
        s, m = a.stage, a.mb
        source = self._from_neighbour(a)
        if source is None:
            if self._inputs is None:
                raise ScheduleError(f"{a} needs the inputs, but rank {self.rank} was given none")
            x = self._inputs[m]
        elif self.table.forward_only:  # inference: no autograd graph is kept
            x = self._take(source, a)
        else:
            x = self._take(source, a).detach().requires_grad_()
            self._leaf[(s, m)] = x
        t0 = self._clock()
        # the saved bytes are counted in the first training step only, which a profile's times leave out
        measuring = self.measure_saved and self.train_step <= 1 and not self.table.forward_only
        counting = self._counting_saved(s) if measuring else nullcontext()
        with counting:
            if self.table.forward_only:
                with torch.no_grad():
                    y = self.modules[s](x)
            else:
                y = self.modules[s](x)
            if self.table.is_exit(s):
                if self._targets is None:
                    raise ScheduleError(f"{a} computes the loss, but rank {self.rank} was given no targets")
                y = self.loss_fn(y, self._targets[m])
                self._losses.append(y.detach())
            else:
                if not isinstance(y, torch.Tensor):
                    raise ScheduleError(f"stage {s} returned {type(y).__name__}; a stage must return one tensor")
                self._values[a.value()] = y
                self.message_bytes[s] = y.numel() * y.element_size()
        self._record(a, t0)
        if not self.table.forward_only:
            self._out[(s, m)] = y

    @contextmanager
    def _counting_saved(self, s: int):
        """Count the bytes autograd saves for stage s's backward inside the block: every tensor its
        ops (the loss's too) save, each storage once, the stage's parameters and buffers left out.
        The largest count over microbatches is kept (`saved_bytes`)."""
        fixed = {t.untyped_storage().data_ptr() for t in [*self.modules[s].parameters(), *self.modules[s].buffers()]}
        seen: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            st = t.untyped_storage()
            ptr = st.data_ptr()
            if ptr not in fixed and ptr not in seen:
                seen[ptr] = st.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield
        self.saved_bytes[s] = max(self.saved_bytes.get(s, 0), sum(seen.values()))

    @staticmethod
    def _from_neighbour(a: Instr) -> tuple[str, int, int] | None:
        """The input a compute action takes from another stage (the table's `inputs`, written by the
        lowering from schedc/rules/deps.py; its own stage's activation a backward holds itself), None
        at the model's ends (the inputs, the loss)."""
        return next((v for v in a.inputs if v[1] != a.stage), None)

    def _output_grad(self, a: Instr):
        s, m = a.stage, a.microbatch
        out = self._out.pop((s, m), None)
        if out is None:
            raise ScheduleError(f"{a} before F({s},{m})")
        source = self._from_neighbour(a)
        if source is None:  # the loss of one microbatch: d(mean over M microbatches)/d(loss_m) = 1/M
            return out, torch.full_like(out, 1.0 / self.M)
        return out, self._take(source, a)

    def backward(self, a: Instr) -> None:
        s, m = a.stage, a.microbatch
        out, grad = self._output_grad(a)
        t0 = self._clock()
        leaf = self._leaf.pop((s, m), None)
        torch.autograd.backward(out, grad)
        if leaf is not None:
            self._values[a.value()] = leaf.grad
        self._backwards[s] = self._backwards.get(s, 0) + 1
        self._record(a, t0)

    def backward_input(self, a: Instr) -> None:
        s, m = a.stage, a.microbatch
        out, grad = self._output_grad(a)
        t0 = self._clock()
        g, work = split_backward_input(out, grad, self._leaf.pop((s, m), None), self.params[s])
        if g is not None:
            self._values[a.value()] = g
        self._pending_w[(s, m)] = work
        self._record(a, t0)

    def backward_weight(self, a: Instr) -> None:
        s, m = a.stage, a.microbatch
        work = self._pending_w.pop((s, m), None)
        if work is None:
            raise ScheduleError(f"{a} before I({s},{m})")
        t0 = self._clock()
        split_backward_weight(work)
        self._backwards[s] = self._backwards.get(s, 0) + 1
        self._record(a, t0)

    def send(self, a: Instr) -> None:
        pg, peer, tag = self._route(a)
        t = self._outgoing(a)
        t1 = time.perf_counter()
        work = pg.send([t], peer, tag)
        self._posted(a, t, work, t1, time.perf_counter())

    def recv(self, a: Instr) -> None:
        pg, peer, tag = self._route(a)
        t1 = time.perf_counter()
        buf = self._buffer(a)
        work = pg.recv([buf], peer, tag)
        self._posted(a, buf, work, t1, time.perf_counter())

    def post_group(self, group: Compound) -> None:
        """GROUP: its members posted together, as one `batch_isend_irecv` per communicator (torch takes
        one process group per call: under `p2p split` a group holding activations and gradients is
        two calls, one on each), its members in the order listed. NCCL runs a call as one fused launch
        on the process group's communicator and returns one work for it, which every member's wait
        then waits for; gloo returns one work per member, each waited for on its own. Under nccl the
        checks model exactly this (docs/semantics.md, "Groups")."""
        import torch.distributed as dist
        calls: list = []  # [process group, [(member, peer, tag), ...]] in order of first use
        for a in group.parts:
            pg, peer, tag = self._route(a)
            call = next((c for c in calls if c[0] is pg), None)
            if call is None:
                calls.append(call := [pg, []])
            call[1].append((a, peer, tag))
        for pg, members in calls:
            t1 = time.perf_counter()
            tensors = [self._outgoing(a) if a.is_send else self._buffer(a) for a, _, _ in members]
            ops = [dist.P2POp(dist.isend if a.is_send else dist.irecv, t, group=pg, tag=tag, group_peer=peer)
                   for (a, peer, tag), t in zip(members, tensors)]
            works = dist.batch_isend_irecv(ops)
            t2 = time.perf_counter()
            handles = works if len(works) == len(ops) else [_Batch(works)] * len(ops)
            for (a, _, _), t, work in zip(members, tensors, handles):
                self._posted(a, t, work, t1, t2, share=1 / len(ops))

    def _outgoing(self, a: Instr) -> torch.Tensor:
        """The tensor a send carries, contiguous and out of autograd; it leaves this rank's values."""
        value = a.carried()
        t = self._values.pop(value, None)
        if t is None:
            raise ScheduleError(f"{a} sends {value_name(value)}, which is not on rank {self.rank} yet")
        t = t.detach()
        return t if t.is_contiguous() else t.contiguous()

    def _buffer(self, a: Instr) -> torch.Tensor:
        """A receive's buffer, of the shape learned before the first step."""
        value, shapes = a.carried(), self._shapes
        if shapes is None:
            raise ScheduleError(f"{a}: no message shapes were learned before the step")
        known = shapes.get((value[0], value[1]))
        if known is None:  # the table's peer is always the rank of the stage on the other end
            raise ScheduleError(f"{a}: no shape was learned for {value_name(value)}")
        shape, dtype = known
        return torch.empty(shape, dtype=dtype, device=self.device)

    def _posted(self, a: Instr, tensor: torch.Tensor, work, t1: float, t2: float, share: float = 1.0) -> None:
        """Record a send or receive posted between t1 and t2 (`share`: its part of a batch's posting
        time): a send is waited for as the step ends, a receive by the action that needs its value."""
        value = a.value()
        self._posting += (t2 - t1) * share
        if self.trace is not None:
            self.trace.post(self.train_step, self._index, str(a), t1, t2, value, a.peer_rank,
                            **({"at": t1} if a.is_send else {}))
        rec = [self.train_step, "S" if a.is_send else "R", value, a.peer, t1, t2, 0.0, 0.0]
        self.comm_log.append(rec)
        if a.is_send:
            self._sends.append((work, tensor, self._index, a, rec))
        else:
            self._arriving[value] = (work, tensor, self._index, a, rec)

    def wait_recv(self, a: Instr) -> None:
        """WAIT_RECV_F, WAIT_RECV_B: wait here for that receive, posted earlier on this rank; its
        value is then present for the action that needs it."""
        value = a.carried()
        posted = self._arriving.pop(value, None)
        if posted is None:
            raise ScheduleError(f"{a} waits for the receive of {value_name(value)}, which rank {self.rank} has "
                                "not posted (or has already used)")
        work, buf, x, recv, rec = posted
        self._wait(work, x, recv, "recv", a, rec)
        self._values[value] = buf

    def wait_send(self, a: Instr) -> None:
        """WAIT_SEND_F, WAIT_SEND_B: wait here for that send, posted earlier on this rank (not again
        as the step ends)."""
        value = a.carried()
        k = next((k for k, sent in enumerate(self._sends) if sent[3].value() == value), None)
        if k is None:
            raise ScheduleError(f"{a} waits for the send of {value_name(value)}, which rank {self.rank} has not "
                                "posted (or has already waited for)")
        work, _tensor, x, send, rec = self._sends.pop(k)
        self._wait(work, x, send, "send", a, rec)

    # ---- helpers ----
    def _route(self, a: Instr):
        """(process group, peer's rank in it, tag) of a send or receive, by the table's `p2p`: one group
        and DATA_TAG (`shared`), the payload as the tag (`tagged`), or gradients on their own group
        (`split`)."""
        if a.op in ("SEND_B", "RECV_B"):
            pg, peer = self.pg_grad, self._peer_grad(a.peer)
        else:
            pg, peer = self.pg, self._peer(a.peer)
        return pg, peer, (payload_tag(a.carried(), self.S) if self.table.p2p == "tagged" else DATA_TAG)

    def _take(self, value, consumer: Instr) -> torch.Tensor:
        t = self._values.pop(value, None)
        if t is not None:
            return t
        posted = self._arriving.pop(value, None)
        if posted is None:
            raise ScheduleError(f"{consumer} needs {value_name(value)}, which was neither made on rank "
                                f"{self.rank} nor received before it")
        work, buf, x, recv, rec = posted
        self._wait(work, x, recv, "recv", consumer, rec)
        return buf

    def _wait(self, work, index: int, a: Instr, why: str, consumer: Instr | None = None, rec: list | None = None) -> None:
        """Wait for the send or receive `a`, posted at step `index` (`why`: "send" at the end of the
        step, "recv" for its `consumer`), watched by the watchdog."""
        dog = self.watchdog
        t0 = time.perf_counter()
        if dog.timeout is None:
            work.wait()
        else:
            dog.begin(self, self._index, index, a, why, consumer)
            try:
                work.wait()
            finally:
                dog.resume()
        t1 = time.perf_counter()
        self._waited += t1 - t0
        if rec is not None:
            rec[6], rec[7] = t0, t1
        if self.trace is not None:
            self.trace.wait(self.train_step, index, str(a), t0, t1)
            if why == "recv":
                self.trace.done(self.train_step, index, str(a), t1, a.value())

    def _clock(self) -> float:
        """perf_counter seconds; with `synchronize` (a profile on a GPU), once the device has run the
        work queued, so that a pass's time is its kernels' and not their launch's."""
        if self.synchronize:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _record(self, a: Instr, t0: float) -> None:
        t1 = self._clock()
        dt = t1 - t0
        self._compute += dt
        key = (a.op, a.stage)
        times = self.times.get(key)
        if times is None:
            self.times[key] = [dt]
        else:
            times.append(dt)
        if self._span is not None:  # a part of an OVERLAP_F_B: one slice for the step
            self._span[0], self._span[1] = min(self._span[0], t0), max(self._span[1], t1)
        elif self.trace is not None:
            self.trace.compute(self.train_step, self._index, str(a), t0, t1)

    def context(self, index: int, width: int = 5) -> str:
        """The rank's steps around `index`, compact, with that step in brackets."""
        lo, hi = max(0, index - width), min(len(self.steps), index + width + 1)
        cells = [f"[{st.compact}]" if x == index else st.compact for x, st in enumerate(self.steps[lo:hi], lo)]
        if index >= len(self.steps):
            cells.append("[end]")
        return ("... " if lo else "") + " ".join(cells) + (" ..." if hi < len(self.steps) else "")

    def waits_for(self, index: int, a: Instr, why: str, consumer: Instr | None) -> str:
        """What a wait is for, in words, with the partner on the other rank where the table has one."""
        partner = self.partners.get((index, next(i for i, p in enumerate(parts(self.steps[index])) if p == a)))
        other = (f"rank {partner.rank}'s {partner.instr} (its step {partner.step})" if partner is not None
                 else f"a matching {'receive' if a.is_send else 'send'} on rank {a.peer}, which has none")
        if why == "send":
            return (f"waits for its {a} (posted at step {index}), carrying {value_name(a.carried())}, "
                    f"to be received by {other}")
        return (f"{consumer} waits for {a} (posted at step {index}): {value_name(a.carried())} from rank "
                f"{a.peer}, sent by {other}")


class _Batch:
    """The one work NCCL returns for a batch (`batch_isend_irecv` coalesced into one launch), shared by
    its members: waiting for any member waits for the whole batch, once."""

    def __init__(self, works):
        self.works, self.done = list(works), False

    def wait(self) -> bool:
        if not self.done:
            for work in self.works:
                work.wait()
            self.done = True
        return True


def _grad(p: torch.Tensor) -> torch.Tensor:
    """A parameter's gradient, zeros if this step did not reach it."""
    return p.grad if p.grad is not None else torch.zeros_like(p)


def payload_tag(value: tuple[str, int, int], num_stages: int) -> int:
    """The tag of a message under `p2p tagged`: its payload (kind, stage, microbatch) as one integer,
    above DATA_TAG and SHAPE_TAG (lowering keeps it within 2**31: at most 10,000,000 stage x microbatch pairs)."""
    kind, s, m = value
    return 2 + 2 * (m * num_stages + s) + (kind == "grad")


def _header(t: torch.Tensor) -> torch.Tensor:
    if t.dim() > _MAX_DIMS or t.dtype not in _DTYPE_CODE:
        raise ScheduleError(f"cannot send a {t.dim()}-dimensional {t.dtype} tensor between stages "
                            f"(at most {_MAX_DIMS} dimensions, dtypes {', '.join(str(d) for d in _DTYPES)})")
    head = [_DTYPE_CODE[t.dtype], t.dim(), *t.shape] + [0] * (_MAX_DIMS - t.dim())
    return torch.tensor(head, dtype=torch.int64)


def _read_header(h: torch.Tensor) -> tuple[torch.Size, torch.dtype]:
    code, ndim, *dims = h.tolist()
    if not (0 <= code < len(_DTYPES) and 0 <= ndim <= _MAX_DIMS):
        raise ScheduleError(f"received a malformed shape header {h.tolist()} before the first step: is every "
                            "rank running the same program?")
    return torch.Size(dims[:ndim]), _DTYPES[code]
