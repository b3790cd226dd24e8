"""Megatron-Core's pipeline schedules traced: each rank's schedule function runs alone, in this
process, with a fake process group whose isend, irecv, batch_isend_irecv and waits record instead of
communicating, and fake forward, backward and finalise steps that record the compute. A message is
named by its tensor (a receive's, by the compute that consumes it). One line per p2p call or compute.
"""
from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace
from typing import Any, Iterator, Mapping

from ..errors import SchedcError
from .common import Refused, quiet, require, version, write

_LOCK = threading.Lock()  # tracing swaps module globals of Megatron for fakes while it runs


class _Message:
    """One send or receive: its op (`SEND_F`, `RECV_B`, ...) and (stage, microbatch), the latter
    known for a receive once the compute that consumes its tensor runs."""

    def __init__(self, op: str, label: tuple[int, int] | None = None):
        self.op, self.label = op, label

    def text(self, prefix: str) -> str:
        if self.label is None:
            raise SchedcError("importer", f"Megatron posts a {self.op} whose tensor no compute consumes: "
                              "schedc cannot name it")
        return f"{self.label[0]}{prefix}{self.op}{self.label[1]}"


class _Trace:
    """What one rank did, in order: lines of parts, a part a text or a (prefix, message)."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size
        self.lines: list[list[Any]] = []
        self.made: dict[int, tuple[str, int, int]] = {}  # id(tensor made here) -> (F or B, stage, mb)
        self.recv_kind: dict[int, str] = {}  # id(tensor to receive into) -> F or B
        self.pending: dict[int, _Message] = {}  # id(received tensor) -> its receive
        self.keep: list[Any] = []  # every tensor seen, kept alive so that no id is reused
        self.call: list[Any] | None = None  # the line of the p2p call under way

    def add(self, part):
        """One part, on the line of the p2p call under way or a line of its own."""
        if self.call is not None:
            self.call.append(part)
        else:
            self.lines.append([part])

    def make(self, tensor, kind: str, stage: int, mb: int):
        self.made[id(tensor)] = (kind, stage, mb)
        self.keep.append(tensor)

    def consumed(self, tensor, stage: int, mb: int):
        for t in tensor if isinstance(tensor, list) else [tensor]:
            message = self.pending.pop(id(t), None)
            if message is not None:
                message.label = (stage, mb)

    def message(self, send: bool, tensor) -> _Message:
        self.keep.append(tensor)
        if send:
            kind, stage, mb = self.made[id(tensor)]
            return _Message(f"SEND_{kind}", (stage, mb))
        message = _Message(f"RECV_{self.recv_kind.pop(id(tensor))}")
        self.pending[id(tensor)] = message
        return message

    def render(self) -> list[list[str]]:
        if self.pending:
            next(iter(self.pending.values())).text("")  # (raises: a receive never consumed)
        return [[_part(p) for p in parts] for parts in self.lines]


def _part(part) -> str:
    if isinstance(part, str):
        return part
    prefix, messages = part
    if isinstance(messages, list):
        return "(" + ";".join(m.text("") for m in messages) + ")GROUP"
    return messages.text(prefix)


class _Request:
    def __init__(self, trace: _Trace, message: _Message):
        self.trace, self.message = trace, message

    def wait(self):
        self.trace.add(("WAIT_", self.message))


def _fake_dist(trace: _Trace, real_dist):
    """A stand-in for `torch.distributed` as `p2p_communication` calls it."""

    class P2POp:
        def __init__(self, fn, tensor, peer, group=None, tag=0):
            self.fn, self.tensor = fn, tensor

    def isend(tensor, dst=None, group=None, tag=0):
        message = trace.message(True, tensor)
        trace.add(("", message))
        return _Request(trace, message)

    def irecv(tensor, src=None, group=None, tag=0):
        message = trace.message(False, tensor)
        trace.add(("", message))
        return _Request(trace, message)

    def batch_isend_irecv(ops):
        messages = [trace.message(o.fn is isend, o.tensor) for o in ops]
        trace.add(("", messages))
        return [_Request(trace, m) for m in messages]

    return _delegating(real_dist, isend=isend, irecv=irecv, P2POp=P2POp, batch_isend_irecv=batch_isend_irecv,
                       get_backend=lambda group=None: "nccl", group=SimpleNamespace(WORLD=None),
                       get_global_rank=lambda group, rank: rank, is_initialized=lambda: True)


def _delegating(real, **names):
    """An object with `names`, and every other attribute `real`'s."""
    return type("Fake", (), {"__getattr__": lambda self, n: names[n] if n in names else getattr(real, n)})()


class _Group:
    """A process group of `size` ranks seen from `rank`."""

    def __init__(self, rank: int, size: int):
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


def _torch_shim(torch, dist):
    """`torch` as Megatron's two modules see it while tracing: tensors on the CPU whatever device
    they ask for, no CUDA calls, and the fake `torch.distributed`."""

    def on_cpu(fn):
        return lambda *a, **k: fn(*a, **{**k, "device": "cpu"} if "device" in k else k)

    cuda = SimpleNamespace(current_device=lambda: "cpu", synchronize=lambda *a: None,
                           current_stream=lambda *a: None, is_available=lambda: False)
    return _delegating(torch, distributed=dist, cuda=cuda, empty=on_cpu(torch.empty), zeros=on_cpu(torch.zeros),
                       tensor=on_cpu(torch.tensor), ones=on_cpu(torch.ones))


@contextlib.contextmanager
def _patched(modules: list[tuple[Any, dict[str, Any]]]) -> Iterator[None]:
    """Set the attributes of each module for the duration, then put the old ones back."""
    saved = [(m, {k: getattr(m, k) for k in values}) for m, values in modules]
    try:
        for module, values in modules:
            for key, value in values.items():
                setattr(module, key, value)
        yield
    finally:
        for module, values in saved:
            for key, value in values.items():
                setattr(module, key, value)


def _model(nn, config, model_type, stage: int):
    """A model chunk that records its forward: stage `stage`, microbatches from its data iterator."""

    class Chunk(nn.Module):
        def __init__(self):
            super().__init__()
            self.config, self.model_type, self.stage, self.input = config, model_type, stage, None

        def set_input_tensor(self, tensor):
            self.input = tensor

    return Chunk()


def _forward_step(torch, trace: _Trace):
    def forward_step(data_iterator, model):
        mb = next(data_iterator)
        trace.lines.append([f"{model.stage}F{mb}"])
        trace.consumed(model.input, model.stage, mb)
        out = torch.zeros(1, 1, 1, requires_grad=True) * 1.0
        trace.make(out, "F", model.stage, mb)

        def loss_func(output):
            loss = output.sum()
            trace.make(loss, "L", model.stage, mb)
            return loss, {}

        return out, loss_func

    return forward_step


def _finalize(trace: _Trace, stages: int):
    """A `finalize_model_grads_func` that records what Megatron-Core's own does, on one line: each
    chunk's data-parallel gradient reduction (`finish_grad_sync`), then the all-reduce of the word
    embedding's gradients between the first and the last stage (a model that ties them)."""

    def finalize(model, *args, **kwargs):
        held = [chunk.stage for chunk in model]
        trace.lines.append([f"{s}REDUCE_GRAD" for s in held] +
                           [f"{s}REDUCE_TIED" for s in sorted({0, stages - 1} & set(held))])

    return finalize


def _backward_step(torch, trace: _Trace):
    def backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config):
        first = output_tensor[0] if isinstance(output_tensor, list) else output_tensor
        _, stage, mb = trace.made[id(first)]  # (the last stage's output: its loss)
        trace.lines.append([f"{stage}B{mb}"])
        trace.consumed(output_tensor_grad, stage, mb)
        grads = []
        for x in input_tensor if isinstance(input_tensor, list) else [input_tensor]:
            grad = None if x is None else torch.zeros(1, 1, 1)
            if grad is not None:
                trace.make(grad, "B", stage, mb)
            grads.append(grad)
        return grads if isinstance(input_tensor, list) else grads[0]

    return backward_step


def trace_rank(mc, rank: int, values: Mapping[str, int], forward_only: bool) -> _Trace:
    """Run rank `rank`'s schedule function of Megatron-Core (`mc`: its modules) and record it."""
    torch, schedules, p2p = mc.torch, mc.schedules, mc.p2p
    P, V, M = values["P"], values.get("V", 1), values["M"]
    trace = _Trace(rank, P)
    dist = _fake_dist(trace, torch.distributed)
    shim = _torch_shim(torch, dist)
    config = mc.TransformerConfig(
        num_layers=P * V, hidden_size=1, num_attention_heads=1, pipeline_model_parallel_size=P, virtual_pipeline_model_parallel_size=V if V > 1 else None,
        pipeline_dtype=torch.float32, batch_p2p_comm=bool(values.get("BATCHED", 0)),
        overlap_p2p_comm=bool(values.get("OVERLAP", 0)))
    chunks = [_model(torch.nn, config, mc.ModelType.encoder_or_decoder, c * P + rank) for c in range(V)]
    config.finalize_model_grads_func = _finalize(trace, P * V)
    group = _Group(rank, P)

    def one_line(communicate):
        def call(self, **kw):
            trace.call = []
            try:
                return communicate(self, **kw)
            finally:
                trace.lines.append(trace.call)
                trace.call = None
        return call

    def marking(fn):
        def marked(**kw):
            for key, kind in (("tensor_recv_prev", "F"), ("tensor_recv_next", "B")):
                if kw.get(key) is not None:
                    trace.recv_kind[id(kw[key])] = kind
            return fn(**kw)
        return marked

    patches = [(p2p.P2PCommunicator, {"_communicate": one_line(p2p.P2PCommunicator._communicate)}),
               (p2p, {"torch": shim, "dist": dist, "_batched_p2p_ops": marking(p2p._batched_p2p_ops),
                      "_p2p_ops": marking(p2p._p2p_ops)}),
               (schedules, {"torch": shim, "backward_step": _backward_step(torch, trace)}),
               (mc.core_utils, {"torch": shim})]
    with _patched(patches):
        communicator = p2p.P2PCommunicator(pp_group=group, config=config)
        pgs = mc.ProcessGroupCollection()
        for name in ("tp", "cp", "embd", "pos_embd", "dp_cp"):
            setattr(pgs, name, _Group(0, 1))
        pgs.pp = group
        run = (schedules.forward_backward_pipelining_with_interleaving if V > 1 else
               schedules.forward_backward_pipelining_without_interleaving)
        run(forward_step_func=_forward_step(torch, trace), data_iterator=[iter(range(M)) for _ in chunks],
            model=chunks, num_microbatches=M, seq_length=1, micro_batch_size=1, forward_only=forward_only,
            p2p_communicator=communicator, pg_collection=pgs)
    return trace


def _modules():
    torch, schedules, core_utils, p2p, config, enums, groups = require(
        "megatron", "torch", "megatron.core.pipeline_parallel.schedules", "megatron.core.utils",
        "megatron.core.pipeline_parallel.p2p_communication", "megatron.core.transformer.transformer_config",
        "megatron.core.enums", "megatron.core.process_groups_config")
    return SimpleNamespace(torch=torch, schedules=schedules, core_utils=core_utils, p2p=p2p,
                           TransformerConfig=config.TransformerConfig, ModelType=enums.ModelType,
                           ProcessGroupCollection=groups.ProcessGroupCollection)


def refuses(kind: str, values: Mapping[str, int]) -> str | None:
    """Why Megatron-Core's schedule `kind` does not run at `values` by a rule of its own, known
    without importing it (megatron:interleaved on one rank), or None."""
    if kind == "interleaved" and values.get("V", 1) < 2:
        return "megatron:interleaved runs V >= 2 model chunks per rank (V=1 is megatron:1f1b)"
    if kind == "interleaved" and values["P"] < 2:  # (parallel_state.initialize_model_parallel's own check)
        return ("megatron:interleaved runs on P >= 2 ranks: Megatron-Core refuses an interleaved schedule on one "
                "pipeline rank")
    return None


def _listing(kind: str, values: Mapping[str, int], forward_only: bool = False) -> str:
    P, V, M = values["P"], values.get("V", 1), values["M"]
    if values.get("BATCHED") and values.get("OVERLAP"):
        raise SchedcError("importer", "Megatron-Core refuses BATCHED=1 with OVERLAP=1 (batch_p2p_comm and "
                          "overlap_p2p_comm)", where="--param")
    why = refuses(kind, values)
    if why is not None:
        raise SchedcError("range", why, where="--param")
    mc = _modules()
    with _LOCK, quiet():
        try:
            ranks = [trace_rank(mc, r, values, forward_only).render() for r in range(P)]
        except (AssertionError, ValueError, RuntimeError) as exc:  # Megatron refuses the settings
            raise Refused(f"Megatron-Core refuses P={P}, V={V}, M={M}: {exc}", f"megatron:{kind}") from None
        except Exception as exc:
            where = _inside_megatron(exc)
            if where is None:
                raise  # (schedc's own fakes: a bug of schedc's)
            raise SchedcError("importer", f"Megatron-Core fails at P={P}, V={V}, M={M}: {type(exc).__name__}: "
                              f"{exc} (in {where})", where=f"megatron:{kind}") from None
    fn = "forward_backward_pipelining_" + ("with_interleaving" if V > 1 else "without_interleaving")
    opts = ", ".join(f"{k.lower()}={values[k]}" for k in ("BATCHED", "OVERLAP") if k in values)
    comment = (f"Megatron-Core {version('megatron')} {fn}(num_microbatches={M}"
               f"{', forward_only=True' if forward_only else ''}) at P={P}{f', V={V}' if V > 1 else ''}"
               f"{', ' + opts if opts else ''}: one line per p2p call or compute, on each rank")
    title = f"megatron_{kind}"
    return write(title, comment, values, ranks,
                 forward_only=forward_only, placement="loop" if V > 1 else None, stages=P * V)


def _inside_megatron(exc: BaseException) -> str | None:
    """`file:line` of Megatron-Core's code where `exc` was raised, or None if it was raised elsewhere."""
    import traceback
    frames = traceback.extract_tb(exc.__traceback__)
    if frames and "/megatron/" in frames[-1].filename.replace("\\", "/"):
        return f"{frames[-1].filename.rpartition('/megatron/')[2]}:{frames[-1].lineno}"
    return None


def one_f_one_b(values: Mapping[str, int], *, forward_only: bool = False) -> str:
    return _listing("1f1b", values, forward_only)


def interleaved(values: Mapping[str, int], *, forward_only: bool = False) -> str:
    return _listing("interleaved", values, forward_only)


SCHEDULES = {"1f1b": one_f_one_b, "interleaved": interleaved}
PARAMS: dict[str, dict[str, int | None]] = {"1f1b": {"P": None, "M": None, "BATCHED": 0},
                                            "interleaved": {"P": None, "M": None, "V": 2, "BATCHED": 0, "OVERLAP": 0}}
