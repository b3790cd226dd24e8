"""Real hung gloo jobs for `schedc diagnose`: the ranks of a schedule's lowered program, forked from
one parent that has imported torch (so several jobs cost one import), issue its communication as
torch's pipeline runtime does (sends and receives posted and awaited by their consumer, a gathering
UNSHARD posted and awaited where its stage next computes, REDUCE_GRAD an all-reduce at its place)
with torch's Flight Recorder on; compute is free. Once no rank has moved for a while, every rank
writes its Flight Recorder dump (`_dump_fr_trace_json` or `_dump_fr_trace`, torch's own writers)
and leaves. `nccl=True` also keeps an NCCL-format record of every operation (`NcclRecorder`).
"""
from __future__ import annotations

import datetime
import json
import os
import pickle
import socket
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUIET = 1.5  # seconds with no rank moving after which the job is taken to be over (finished or hung)
LIMIT = 60.0  # a job that keeps moving this long is a failure of the harness


def _port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_job(program, out: Path, *, fmt: str = "json", nccl: bool = False, size=None) -> None:
    """Run `program` (a lowered schedc Program, replicas allowed) on its job's ranks; write each
    rank's dump to out/rank<R>.json (fmt "json") or out/rank<R> (fmt "pickle", as torch names
    TORCH_FR_DUMP_TEMP_FILE's files), and with `nccl` the NCCL-format pickle to out/nccl/rank<R>.
    `size(op, stage)`: the elements of a collective's tensor (default 4 * (stage + 1))."""
    import multiprocessing as mp
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    import torch  # noqa: F401  (imported once, here, before the fork)
    world = program.num_ranks * program.dp
    out.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("fork")
    moves = ctx.Array("d", [time.monotonic()] * world)
    stop, dumped = ctx.Event(), ctx.Barrier(world)
    port = _port()
    procs = [ctx.Process(target=_rank, args=(program, r, world, port, out, fmt, nccl, size, moves, (stop, dumped)))
             for r in range(world)]
    for p in procs:
        p.start()
    start = time.monotonic()
    while time.monotonic() - max(moves) < QUIET and time.monotonic() - start < LIMIT:
        time.sleep(0.1)
    stop.set()
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    codes = [p.exitcode for p in procs]
    assert codes == [0] * world, f"ranks exited {codes}"


def _rank(program, rank, world, port, out, fmt, nccl, size, moves, events) -> None:
    import threading
    import torch
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=LIMIT)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timeout)
    P, D = program.num_ranks, program.dp
    dp = {p: dist.new_group([d * P + p for d in range(D)], timeout=timeout) for p in range(P)}
    ends = sorted({program.placement[0], program.placement[-1]})
    tied = {d: dist.new_group([d * P + p for p in ends], timeout=timeout) for d in range(D)}
    recorder = NcclRecorder(rank, world, P, D, ends) if nccl else None
    dist.barrier()  # the runtime's own collective, on the default group: not the schedule's

    stop, dumped = events

    def dump() -> None:
        stop.wait()
        if fmt == "json":
            (out / f"rank{rank}.json").write_bytes(c10d._dump_fr_trace_json())
        else:
            (out / f"rank{rank}").write_bytes(c10d._dump_fr_trace())
        if recorder is not None:
            (out / "nccl").mkdir(exist_ok=True)
            (out / "nccl" / f"rank{rank}").write_bytes(recorder.dump(c10d._dump_fr_trace_json()))
        sys.stdout.flush()
        dumped.wait(30)  # no rank leaves (closing its connections) before every rank has written its dump
        os._exit(0)

    threading.Thread(target=dump, daemon=True).start()
    job = _Job(program, rank, dp[rank % P], tied[rank // P], recorder, size or (lambda op, s: 4 * (s + 1)))
    try:
        job.run(lambda: moves.__setitem__(rank, time.monotonic()))
    except RuntimeError:  # a peer left: the dump thread ends the process
        pass
    moves[rank] = time.monotonic()
    time.sleep(LIMIT * 2)  # (the dump thread ends the process)


class _Job:
    """One rank's lowered steps run as torch's runtime posts and awaits them (compute is free)."""

    def __init__(self, program, rank, dp_group, tied_group, recorder, size):
        self.P, self.rank = program.num_ranks, rank
        self.steps = program.replica(rank // self.P).ranks[rank % self.P]
        self.placement = program.placement
        self.dp_group, self.tied_group, self.recorder, self.size = dp_group, tied_group, recorder, size
        self.recvs: dict = {}
        self.sends: list = []
        self.gathers: dict = {}

    def peer(self, op: str, stage: int) -> int:
        other = stage + 1 if op in ("SEND_F", "RECV_B") else stage - 1
        return self.rank // self.P * self.P + self.placement[other]

    def run(self, moved) -> None:
        for step in self.steps:
            if getattr(step, "kind", None) is not None and step.kind.value == "GROUP":
                self.group(step.parts)
            else:
                for a in step.parts:
                    self.action(a)
            moved()
        for w, rec in self.sends:
            self.wait(w, rec)

    def wait(self, work, rec) -> None:
        work.wait()
        if rec is not None:
            rec.done()

    def action(self, a) -> None:
        import torch
        import torch.distributed as dist
        op = a.op.value
        if op in ("SEND_F", "SEND_B"):
            t = torch.ones(4)
            self.sends.append(self.watch(dist.isend(t, self.peer(op, a.stage)), self.note("send", a, t)))
        elif op in ("RECV_F", "RECV_B"):
            t = torch.zeros(4)
            self.recvs[(op, a.stage, a.microbatch)] = self.watch(dist.irecv(t, self.peer(op, a.stage)),
                                                                 self.note("recv", a, t))
        elif op in ("F", "B", "I"):
            need = "RECV_F" if op == "F" else "RECV_B"
            if (need, a.stage, a.microbatch) in self.recvs:
                self.wait(*self.recvs.pop((need, a.stage, a.microbatch)))
            if a.stage in self.gathers:
                self.wait(*self.gathers.pop(a.stage))
        elif op == "UNSHARD":
            n = self.size(op, a.stage)
            t, whole = torch.ones(n), torch.zeros(n * dist.get_world_size(self.dp_group))
            rec = self.note("all_gather", a, t, whole)
            self.gathers[a.stage] = self.watch(dist.all_gather_single(whole, t, group=self.dp_group,
                                                                           async_op=True), rec)
        elif op in ("REDUCE_GRAD", "REDUCE_TIED"):
            t = torch.ones(self.size(op, a.stage))
            rec = self.note("all_reduce", a, t)
            group = self.dp_group if op == "REDUCE_GRAD" else self.tied_group
            self.wait(dist.all_reduce(t, group=group, async_op=True), rec)
        elif op.startswith("WAIT_"):
            key = (op[5:], a.stage, a.microbatch)
            if key in self.recvs:
                self.wait(*self.recvs.pop(key))

    def group(self, parts) -> None:
        """GROUP: posted together, one batch_isend_irecv (one work per operation on gloo)."""
        import torch
        import torch.distributed as dist
        ops, keys = [], []
        for a in parts:
            send = a.op.value.startswith("SEND")
            t = torch.ones(4) if send else torch.zeros(4)
            ops.append(dist.P2POp(dist.isend if send else dist.irecv, t, self.peer(a.op.value, a.stage)))
            keys.append((a, send, t))
        recs = [self.note("send" if send else "recv", a, t, coalesced=True) for a, send, t in keys]
        if self.recorder is not None and recs:
            self.recorder.coalesced()
        for w, (a, send, _), rec in zip(dist.batch_isend_irecv(ops), keys, recs):
            self.watch(w, rec)
            if send:
                self.sends.append((w, rec))
            else:
                self.recvs[(a.op.value, a.stage, a.microbatch)] = (w, rec)

    def watch(self, work, rec):
        """The work and its NCCL-format entry, which reads the work's state when dumped."""
        if rec is not None:
            rec.work = work
        return work, rec

    def note(self, kind, a, t, out=None, coalesced=False):
        if self.recorder is None:
            return None
        op = a.op.value
        peer = self.peer(op, a.stage) if kind in ("send", "recv") else None
        return self.recorder.record(kind, peer, t, t if out is None else out, op, coalesced)


class NcclRecorder:
    """What ProcessGroupNCCL's Flight Recorder would hold for the same operations: one entry per
    operation, `nccl:send 0->1` / `nccl:recv 1<-0` (ranks in the group) with the group's p2p
    sequence number (shared by a coalesced batch, which ends with an `nccl:coalesced` entry), and
    collectives with the group's collective sequence number; `scheduled` when issued, `completed`
    once its work has been waited for. Entries take their fields, in order, from the entries
    torch's own writer makes (`_dump_fr_trace_json` of this process), and the dump is the pickle
    torch's NCCL watchdog writes: version, pg_config, pg_status, entries, nccl_version."""

    def __init__(self, rank, world, P, D, ends):
        self.rank, self.entries = rank, []
        self.groups = {"0": ("default_pg", list(range(world)))}
        for p in range(P):
            self.groups[str(1 + p)] = ("dp", [d * P + p for d in range(D)])
        for d in range(D):
            self.groups[str(1 + P + d)] = ("tied", [d * P + p for p in ends])
        self.pg_of = {"p2p": "0", "all_gather": str(1 + rank % P), "REDUCE_GRAD": str(1 + rank % P),
                      "REDUCE_TIED": str(1 + P + rank // P)}
        self.seq = {g: [0, 0, 0] for g in self.groups}  # collective seq, p2p seq, op id
        self.in_batch = False

    def record(self, kind, peer, t_in, t_out, op, coalesced):
        pg = self.pg_of["p2p"] if kind in ("send", "recv") else self.pg_of.get(op, self.pg_of["all_gather"])
        seq = self.seq[pg]
        members = self.groups[pg][1]
        if kind in ("send", "recv"):
            if not (coalesced and self.in_batch):
                seq[1] += 1
            self.in_batch = coalesced
            me, other = members.index(self.rank), members.index(peer)
            name = f"nccl:send {me}->{other}" if kind == "send" else f"nccl:recv {me}<-{other}"
        else:
            seq[0] += 1
            name = f"nccl:{kind}"
        seq[2] += 1
        entry = _Entry(self, pg, name, kind in ("send", "recv"), seq, t_in, t_out)
        self.entries.append(entry)
        return entry

    def coalesced(self):
        """The end of a coalesced batch: its marker entry, with the batch's sequence number."""
        seq = self.seq["0"]
        seq[2] += 1
        self.entries.append(_Entry(self, "0", "nccl:coalesced", True, seq, None, None))
        self.in_batch = False

    def dump(self, torch_json: bytes) -> bytes:
        template = [e for e in json.loads(torch_json)["entries"]]
        keys = list(template[0]) if template else None
        for e in self.entries:
            e.poll()
        entries = [e.as_dict(i, keys) for i, e in enumerate(self.entries)]
        status = {}
        for pg, (col, _p2p, _op) in self.seq.items():
            done = [e.seq[0] for e in self.entries if e.pg == pg and not e.p2p and e.state == "completed"]
            status[pg] = {"last_enqueued_collective": col, "last_started_collective": max(done, default=-1),
                          "last_completed_collective": max(done, default=-1)}
        return pickle.dumps({
            "version": "2.10",
            "pg_config": {pg: {"name": pg, "desc": desc, "ranks": str(ranks)}
                          for pg, (desc, ranks) in self.groups.items()},
            "pg_status": status,
            "entries": entries,
            "nccl_version": "2.27.5",
        })


class _Entry:
    def __init__(self, recorder, pg, name, p2p, seq, t_in, t_out):
        self.pg, self.name, self.p2p, self.seq = pg, name, p2p, tuple(seq)
        self.desc = recorder.groups[pg][0]
        self.sizes = ([list(t_in.shape)] if t_in is not None else [], [list(t_out.shape)] if t_out is not None else [])
        self.state = "scheduled"
        self.created = time.time_ns()
        self.work = None

    def done(self):
        self.state = "completed"

    def poll(self):
        """As NCCL's watchdog does: a work that has finished is `completed`, and retired."""
        if self.work is not None and self.work.is_completed():
            self.state = "completed"

    def as_dict(self, record_id, keys):
        values = {
            "record_id": record_id, "pg_id": int(self.pg), "process_group": (self.pg, self.desc),
            "collective_seq_id": self.seq[0], "p2p_seq_id": self.seq[1], "op_id": self.seq[2],
            "profiling_name": self.name, "time_created_ns": self.created,
            "input_sizes": self.sizes[0], "input_dtypes": ["Float"] * len(self.sizes[0]),
            "output_sizes": self.sizes[1], "output_dtypes": ["Float"] * len(self.sizes[1]),
            "state": self.state, "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None, "retired": self.state == "completed",
            "timeout_ms": 600000, "is_p2p": self.p2p, "frames": [],
            "thread_name": "python", "thread_id": "1",
        }
        if keys is None:
            return values
        return {k: values[k] for k in [*keys, *(k for k in values if k not in keys)]}
