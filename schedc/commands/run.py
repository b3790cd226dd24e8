"""`schedc run`: verify, lower and run a schedule on local ranks, or print the torchrun line.

On several nodes (`--nnodes N --node-rank K --rdzv-endpoint HOST:PORT`, with `--nproc R` ranks per
node), each node's `schedc run` starts global ranks K*R..K*R+R-1, which meet at the endpoint (node 0
hosts the store there), as torchrun's static rendezvous does; `--print-torchrun` prints each node's
torchrun line.

Arguments, the backend (and that the semantics verified under holds on it: runtime/backends.py;
and that the program as it runs keeps its memory limit under the backend's own semantics, since
completion nests and memory does not) and the output paths (each its own file) are checked before
any rank starts; `--trace` merges the events every rank
wrote as it ran (schedc/runtime/trace.py) into one Perfetto trace, also when the run failed, was
stopped by the watchdog or interrupted. The trace, and the profile rank 0 measured into the run's
own folder, are written here once every rank has ended: one that cannot be is `error[io]`, exit 2
after a finished run (a failed run keeps its own code), and never ends a rank mid-run.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import sys
import tempfile
from pathlib import Path
from typing import TypedDict

from ..errors import EXIT_FAIL, EXIT_INPUT, EXIT_OK, SchedcError
from ..options import seconds
from ..progress import progress
from . import arguments, common


_RANK_EXITS = {1: "failed", 2: "could not start (bad usage or model) or write its output",
               124: "was stopped by the watchdog"}



def add_arguments(q) -> None:
    from ..ir import RECEIVE_POSTINGS
    arguments.inputs(q)
    q.add_argument("--model", required=True, metavar="PKG.MOD:FN",
                   help="the model: build_stages(stage_ids, num_stages) in an importable module that also "
                        "defines loss_fn and make_batch, e.g. examples.mlp:build_stages")
    q.add_argument("--nproc", type=int, metavar="R", help="ranks to start on this node (default: the schedule's "
                   "ranks, divided by --nnodes)")
    q.add_argument("--nnodes", type=int, default=1, metavar="N",
                   help="nodes the run spans, each starting --nproc ranks (default 1); as torchrun's --nnodes")
    q.add_argument("--node-rank", type=int, metavar="K",
                   help="this node's rank, 0..N-1: it runs global ranks K*R..K*R+R-1 (with --print-torchrun: "
                        "print node K's line only)")
    q.add_argument("--rdzv-endpoint", metavar="HOST:PORT",
                   help="rendezvous: node 0's address and a free port there (needed with --nnodes > 1)")
    q.add_argument("--backend", choices=["gloo", "nccl"], default="gloo", help="torch.distributed backend")
    q.add_argument("--steps", type=int, default=5, metavar="K", help="training steps (default 5)")
    q.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="watchdog: an action, a send or receive, or a phase of training (make_batch, the "
                        "optimizer step) taking longer stops the run (default 300)")
    q.add_argument("--profile", metavar="OUT.json", help="write measured per-stage F/I/W/B times and message sizes")
    q.add_argument("--trace", metavar="FILE", help="write the measured timeline of every rank as a Chrome trace / "
                   "Perfetto JSON (the layout of `schedc sim --trace`), also when the run is stopped")
    q.add_argument("--no-verify", action="store_true", help="run without checking the schedule first")
    q.add_argument("--semantics", default="rendezvous",
                   help=f"send semantics to verify under (default rendezvous): {arguments.blocking()}, or the "
                        f"backend's, {arguments.backends()}; the runtime always posts and awaits as the backends do")
    q.add_argument("--receives", choices=RECEIVE_POSTINGS, default=None,
                   help="where the runtime posts receives: needed (in the round their sender runs, as lowering "
                        "places them) or early (every receive at the start of its rank's step: on gloo a message "
                        "then goes as soon as it is sent; checked under gloo, gloo only). Default: early on gloo "
                        "when the program so lowered checks under gloo, else needed")
    q.add_argument("--batch-size", type=int, metavar="N", help="samples per step (default 8 x microbatches)")
    q.add_argument("--dtype", choices=["bfloat16", "float16", "float32", "float64"], help="model and input dtype")
    q.add_argument("--lr", type=float, metavar="LR", help="SGD learning rate unless the model defines make_optimizer")
    q.add_argument("--print-torchrun", action="store_true",
                   help="write DIR/<name>_program.py and print the torchrun command instead of running")
    q.add_argument("-o", "--output", default="build", metavar="DIR", help="with --print-torchrun: output folder")
    q.add_argument("--json", action="store_true",
                   help="print one JSON object: the run's steps (time and loss), its median step time, the files "
                        "written, or what stopped it (the ranks' other output goes to standard error)")


def run(args, stdout, stderr) -> int:  # noqa: C901
    """Verify (unless --no-verify), lower, and run on local ranks, or print the torchrun line."""
    from ..lower import lower_to_torch
    from ..lower.codegen import refuse_unrunnable, runnable
    from ..rules.semantics import Semantics
    if args.steps < 1:
        raise SchedcError("usage", f"--steps {args.steps}: expected at least 1", where="--steps")
    seconds(args.timeout, "--timeout")
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr >= 0):
        raise SchedcError("usage", f"--lr {args.lr}: expected a finite learning rate >= 0", where="--lr")
    trace = getattr(args, "trace", None)
    if trace and args.print_torchrun:
        raise SchedcError("usage", "--trace needs a local run; under torchrun, give the program --trace-dir DIR "
                          "and each rank writes its events there", where="--trace")
    for flag, path in (("--profile", args.profile), ("--trace", trace)):
        if path and not args.print_torchrun:
            _writable(path, flag)
    _distinct([("--profile", args.profile), ("--trace", trace)])
    nnodes, node_rank, endpoint = _nodes(args)
    semantics = Semantics.parse(args.semantics)
    if args.receives == "early" and args.backend != "gloo":
        raise SchedcError("usage", f"--receives early with --backend {args.backend}: receives posted early complete "
                          "on gloo only (on nccl an early receive holds up the later operations of its rank pair, "
                          "and the run deadlocks)", where="--receives")
    from ..runtime.backends import not_vouched, vouches
    if not args.no_verify and not vouches(str(semantics), args.backend):
        raise SchedcError("usage", f"--semantics {semantics} with --backend {args.backend}: "
                          f"{not_vouched(str(semantics), args.backend)} (--semantics nccl)", where="--semantics")
    program = common.load(args.input, args, common.params(args.param))
    name = f"{common.safe_stem(program.name)}_program.py"
    if args.print_torchrun:
        _distinct([("--profile", args.profile), ("the program (-o)", str(Path(args.output, name)))])
    nproc = _nproc(args.nproc, nnodes, program)
    M = program.num_microbatches
    if args.batch_size is not None and (args.batch_size < 1 or args.batch_size % M):
        raise SchedcError("usage", f"--batch-size {args.batch_size}: expected a positive multiple of the "
                          f"{M} microbatches", where="--batch-size")
    if not args.print_torchrun:  # before any rank starts: one line, not a traceback from each
        from ..runtime.backends import problem, torch_missing
        why = torch_missing()
        if why:
            raise SchedcError("usage", why, where="torch")
        why = problem(args.backend, nproc)
        if why:
            raise SchedcError("usage", why, where="--backend")
        from ..runtime import model_spec
        model_spec.check(args.model)
    else:  # (the module is looked for on the machines that run the line; its form is known here)
        from ..runtime import model_spec
        model_spec.check_form(args.model)
    refuse_unrunnable(program, common.shown(args.input))  # before the checks: one too large to run is not checked
    verified, receives = None, args.receives
    early = None  # the program lowered with every receive posted first, once it has checked under gloo
    said = stderr if args.json else stdout  # with --json standard output holds the JSON alone
    if not args.no_verify:
        checks = argparse.Namespace(semantics=str(semantics), engine="native", timeout=30.0, memory_limit=None)
        report = common.run_checks(program, checks, file=args.input)
        said.write(report.summary() + "\n")
        if report.ok is not True:
            stderr.write(report.render() + "\n")
            stderr.write("schedc: checks did not pass; not running (--no-verify runs it anyway)\n")
            return _not_run(args, report, stdout)
        verified = str(semantics)
        on_backend = None  # the program as it will run, under the backend's own semantics
        if args.receives == "early":
            early, on_backend = _early_receives_checked(program, said, stderr)
            if on_backend.ok is not True:
                return _not_run(args, on_backend, stdout)
            verified = "gloo"
        elif receives is None and args.backend == "gloo":
            early, tried = _early_receives_fit(program, said)
            if early is not None:
                receives, verified, on_backend = "early", "gloo", tried
        if on_backend is None and semantics.base == Semantics.parse(args.backend):
            on_backend = report  # (verified under the backend's semantics itself)
        elif on_backend is None:  # completion nests (docs/run.md), memory does not: check it as it runs
            on_backend = _backend_checked(program, args.backend, verified, said, stderr)
            if on_backend.ok is not True:
                return _not_run(args, on_backend, stdout)
        if on_backend is not report:
            _backend_peaks(report, on_backend, args.backend, said)
    receives = receives or "needed"  # (unverified, or on nccl: where lowering places them)
    # (the early lowering has just passed its checks under gloo: run as it is, not lowered and checked again)
    lowered = runnable(early, verified) if early is not None else lower_to_torch(program, verified=verified,
                                                                                 receives=receives)
    rank_args = ["--model", args.model, "--steps", str(args.steps), "--timeout", str(args.timeout),
                 "--backend", args.backend]
    for flag, value in (("--batch-size", args.batch_size), ("--dtype", args.dtype), ("--lr", args.lr)):
        if value is not None:
            rank_args += [flag, str(value)]
    if args.print_torchrun:
        (path,) = common.write_files(Path(args.output), {name: lowered.source})
        profile_args = ["--profile", os.path.abspath(args.profile)] if args.profile else []
        command = lowered.torchrun_command(str(path), args.model, [*rank_args[2:], *profile_args])
        nodes = range(nnodes) if node_rank is None else [node_rank]
        lines = [shlex.join(_torchrun_nodes(command, nproc, nnodes, k, args.rdzv_endpoint)) for k in nodes]
        if args.json:
            stdout.write(common.dumps_json({"file": common.shown(args.input), "schedule": program.name, "ok": True, "errors": [],
                                            "torchrun": lines, "outputs": [str(path)]}) + "\n")
        else:
            stdout.write("".join(line + "\n" for line in lines))
        return EXIT_OK
    from ..runtime.launch import launch
    node_rank = node_rank or 0
    first = node_rank * nproc  # this node's global ranks: first .. first + nproc - 1
    where = (f" on node {node_rank} of {nnodes}, global ranks {first}..{first + nproc - 1} of {nnodes * nproc}, "
             f"rendezvous at {args.rdzv_endpoint}" if nnodes > 1 else "")
    progress(stderr, quiet=args.json, prefix="schedc run: ")(f"starting {nproc} rank(s){where} ({args.backend}, {args.steps} "
                                            "step(s)); each rank loads torch and the model first")
    placed: _Placed = {"nnodes": nnodes, "node_rank": node_rank}
    if endpoint is not None:
        placed["master_addr"], placed["master_port"] = endpoint
    local_ranks = range(first, first + nproc)
    with tempfile.TemporaryDirectory(prefix="schedc-run-") as folder:
        (path,) = common.write_files(Path(folder), {name: lowered.source})
        parts, measured = Path(folder, "trace"), Path(folder, "profile.json")
        if trace:
            rank_args += ["--trace-dir", str(parts)]
        if args.profile:  # rank 0 writes it here; schedc copies it to --profile once every rank is done
            rank_args += ["--profile", str(measured)]
        ranks_out = _Results(stderr) if args.json else stdout
        try:
            done = launch([sys.executable, str(path), *rank_args], nproc,
                          stdout=ranks_out,  # type: ignore[arg-type]  # (_Results has the write and flush launch uses)
                          stderr=stderr, grace=min(args.timeout, 30.0) + 5.0, **placed)
        except KeyboardInterrupt:  # the ranks are stopped; keep what they recorded
            traced = _write_trace(trace, parts, local_ranks, None, stderr) if trace else None
            if args.json:  # what was done: the steps that finished, the trace written
                from ..signals import terminated
                stop = "stopped by SIGTERM" if terminated() else "interrupted (Ctrl-C)"
                stdout.write(_run_json(args, program, nproc * nnodes, verified, ranks_out, ok=False, errors=[
                    {"code": "interrupted", "message": f"the run was {stop}; schedc stopped every rank"}],
                    exit_codes=None, outputs=[str(traced)] if traced else [], interrupted=True) + "\n")
            raise
        lost: list[SchedcError] = []  # the outputs that could not be written, each said once on stderr
        traced = _write_trace(trace, parts, local_ranks, done, stderr, lost) if trace else None
        profiled = (_write_profile(args.profile, measured, _sim_line(args, program, receives), stderr, lost)
                    if done.ok and args.profile and node_rank == 0 else None)  # (rank 0 measured it)
    failed = [(first + r, code) for r, code in enumerate(done.returncodes) if code != 0]
    how = [f"rank {rank} " + (_RANK_EXITS.get(code, f"exited with {code}") if code >= 0 else
                              f"was stopped (signal {-code})") for rank, code in failed]
    if not done.ok:
        every = f"every rank of node {node_rank} exited" if nnodes > 1 else "every rank exited"
        stderr.write("schedc: the run failed: " + "; ".join(how) + f" ({every})\n")
    if args.json:
        written = [str(p) for p in (profiled, traced) if p]
        errors = [{"message": m, "rank": rank, "exit_code": code} for m, (rank, code) in zip(how, failed)]
        errors += [{**d.to_dict(), "file": d.where} for e in lost for d in e.diagnostics]
        stdout.write(_run_json(args, program, nproc * nnodes, verified, ranks_out, ok=done.ok and not lost,
                               errors=errors, exit_codes=list(done.returncodes), outputs=written) + "\n")
    if not done.ok:  # the run's own failure decides the code, ahead of an output it could not write
        # every failing rank rejected its arguments or model: bad input, not a failed run
        return EXIT_INPUT if all(code in (0, 2) for code in done.returncodes) else EXIT_FAIL
    return EXIT_INPUT if lost else EXIT_OK


_STEP = re.compile(r"step (\d+)/\d+\s+([\d.]+) ms\s+loss (\S+)$")  # the lines schedc/runtime/entry.py prints
_MEDIAN = re.compile(r"median step time ([\d.]+) ms over (\d+) step")


class _Placed(TypedDict, total=False):
    """Where this node's ranks run: `launch`'s keywords for it (the endpoint's, on several nodes)."""
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int


class _Results:
    """The ranks' standard output under --json: the step lines (`step K/N  T ms  loss L`) and the
    median step time kept for the JSON; any other line passed on to `other` (standard error)."""

    def __init__(self, other):
        self.other, self.steps, self.median = other, [], None

    def write(self, line: str) -> None:
        step, median = _STEP.match(line.strip()), _MEDIAN.match(line.strip())
        if step:
            self.steps.append({"step": int(step[1]), "time_ms": float(step[2]), "loss": float(step[3])})
        elif median:
            self.median = {"median_step_ms": float(median[1]), "steps_timed": int(median[2])}
        else:
            self.other.write(line)

    def flush(self) -> None:
        self.other.flush()

    def to_dict(self) -> dict:
        return {"steps": self.steps, **(self.median or {"median_step_ms": None, "steps_timed": 0})}


def _run_json(args, program, ranks: int, verified, results, *, ok: bool, errors: list, exit_codes, outputs: list,
              interrupted: bool = False) -> str:
    """The --json object of a run that started: its steps (`results`, the ranks' lines read), its
    verdict and errors, each rank's exit code (None when interrupted: schedc stopped them) and the
    files written; `interrupted` only when so."""
    return common.dumps_json({"file": common.shown(args.input), "schedule": program.name,
                              "params": dict(program.params), "ranks": ranks, "backend": args.backend,
                              "verified": verified, **results.to_dict(), "ok": ok,
                              **({"interrupted": True} if interrupted else {}), "errors": errors,
                              "exit_codes": exit_codes, "outputs": outputs})


def _not_run(args, report, stdout) -> int:
    """The exit code of a check that stops the run; with --json, first the report as its JSON."""
    if args.json:
        stdout.write(common.dumps_json({**report.to_dict(), "file": common.shown(args.input), "steps": [], "outputs": []})
                     + "\n")
    return common.exit_of(report)


def _early_report(program):
    """The program lowered with every receive posted first, and its report under gloo (the one
    semantics it is meant for: it completes there, and its memory holds the receive buffers from
    the start)."""
    from ..api import check
    from ..passes import lower
    lowered = lower(program, receives="early")
    return lowered, check(lowered, semantics="gloo")


def _early_receives_checked(program, stdout, stderr):
    """`--receives early`: the early-lowered program and its report (`_early_report`), its findings
    written when it fails."""
    lowered, report = _early_report(program)
    stdout.write(f"  receives posted early (--receives early): the lowered program under gloo: "
                 f"{'ok' if report.ok else 'FAILED'}\n")
    if report.ok is not True:
        stderr.write(report.render() + "\n")
        over = _over_limit(report)
        why = f": on gloo the run {_held('gloo', early=True)}, and {over}" if over else ""
        stderr.write(f"schedc: the program with its receives posted early does not check{why}; not running\n")
    return lowered, report


def _early_receives_fit(program, stdout):
    """The default on gloo: the program lowered with its receives posted early, when it checks under
    gloo (it may not, when the buffers held from the start pass a memory limit), else None; and its
    report under gloo. One line says which."""
    lowered, report = _early_report(program)
    ok = report.ok is True
    over = "" if ok else _over_limit(report)
    stdout.write("  receives: posted early (the lowered program checks under gloo)\n" if ok else
                 "  receives: where lowering places them (posted early, the program does not check under gloo"
                 f"{': ' + over if over else ''})\n")
    return (lowered if ok else None), report


def _backend_checked(program, backend: str, verified: str, stdout, stderr):
    """The report on the program as `run` lowers it (receives where lowering places them) under the
    backend's own semantics, for a run verified under another. Completion nests (a program that
    completes under rendezvous completes on either backend; on nccl only for messages grouped on
    both ends or on neither, docs/semantics.md "Groups under nccl", which only the nccl verdict
    checks), but memory does not: on a backend a sent message is held until its send is waited
    for, at the step's end, so a memory limit that holds under rendezvous, eager or bounded sends
    can fail there (docs/semantics.md, "Memory")."""
    from ..api import check
    report = check(program, semantics=backend)
    stdout.write(f"  on --backend {backend}: the program under {backend} too: {'ok' if report.ok else 'FAILED'}\n")
    if report.ok is not True:
        stderr.write(report.render() + "\n")
        over = _over_limit(report)
        if over and all(d.code == "memory" for d in report.errors):
            stderr.write(f"schedc: the program's memory is verified under {verified}, but on {backend} the run "
                         f"{_held(backend)}, and {over}; not running (--no-verify runs it anyway)\n")
        else:
            stderr.write(f"schedc: the program checks under {verified} but not under {backend}, which --backend "
                         f"{backend} runs; not running (--no-verify runs it anyway)\n")
    return report


def _held(backend: str, early: bool = False) -> str:
    """What a run on `backend` holds that a blocking semantics' verdict does not count."""
    buffers = ("each receive buffer from the start of the step (receives posted early)" if early else
               "each receive buffer from where its receive is posted")
    return f"holds every sent message until its send is waited for (at the step's end) and {buffers}"


def _over_limit(report) -> str:
    """`rank 0 reaches 4.5, over its limit of 2.5; rank 1 reaches 3, ...`: the report's memory
    violations, or "" if it has none."""
    from ..outputs import rounded
    return "; ".join(f"rank {pk.rank} reaches {rounded(pk.memory)}, over its limit of "
                     f"{rounded(report.memory_limit[pk.rank])}" for pk in report.memory_violations)


def _backend_peaks(verified, on_backend, backend: str, stdout) -> None:
    """The peaks of the program as it runs on `backend`, when they differ from those verified: the
    summary's are the worst over the runs of the semantics verified under."""
    if on_backend.peak_sizes and tuple(on_backend.peak_sizes) != tuple(verified.peak_sizes):
        stdout.write(f"  peak memory per rank on {backend}, as this run posts and waits (worst over every run "
                     f"{on_backend.semantics} allows, receive buffers and sent messages included): "
                     f"{on_backend.peaks_text()}\n")


def _nodes(args) -> tuple[int, int | None, tuple[str, int] | None]:
    """--nnodes, --node-rank and --rdzv-endpoint, checked: (nodes, this node's rank or None, (host, port))."""
    nnodes, node_rank = args.nnodes, args.node_rank
    if nnodes < 1:
        raise SchedcError("usage", f"--nnodes {nnodes}: expected at least 1 node", where="--nnodes")
    if node_rank is not None and not 0 <= node_rank < nnodes:
        raise SchedcError("usage", f"--node-rank {node_rank}: expected 0..{nnodes - 1} for --nnodes {nnodes}",
                          where="--node-rank")
    endpoint = None if args.rdzv_endpoint is None else _endpoint(args.rdzv_endpoint)
    if nnodes > 1 and endpoint is None:
        raise SchedcError("usage", f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT (node 0's address and a "
                          "free port there, the same on every node)", where="--rdzv-endpoint")
    if nnodes > 1 and node_rank is None and not args.print_torchrun:
        raise SchedcError("usage", f"--nnodes {nnodes} needs this node's --node-rank (0..{nnodes - 1})",
                          where="--node-rank")
    return nnodes, node_rank, endpoint


_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")  # a host name or an IPv4 address
_IPV6 = re.compile(r"[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?")  # inside brackets (a zone after %)


def _endpoint(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if sep and ":" in host and not bracketed:
        raise SchedcError("usage", f"--rdzv-endpoint {text}: an IPv6 host goes in brackets, as "
                          f"[{host}]:{port}", where="--rdzv-endpoint")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or \
            not (_IPV6 if bracketed else _HOST).fullmatch(host):
        raise SchedcError("usage", f"--rdzv-endpoint {text}: expected HOST:PORT, e.g. 10.0.0.1:29500 (node 0's "
                          "address, a host name or [an IPv6 address], and a free port, 1..65535)",
                          where="--rdzv-endpoint")
    return host, int(port)


def _nproc(nproc: int | None, nnodes: int, program) -> int:
    """The ranks per node: --nproc, or the schedule's ranks split evenly over the nodes; all the nodes'
    ranks together must be the schedule's."""
    total = program.num_ranks * program.dp  # a data-parallel job: every replica's pipeline
    if nproc is None:
        if total % nnodes:
            raise SchedcError("usage", f"--nnodes {nnodes}: {program.name} runs on {total} ranks, which do not "
                              f"split evenly over {nnodes} nodes (give --nproc for each node)", where="--nnodes")
        return total // nnodes
    if nproc < 1:
        raise SchedcError("usage", f"--nproc {nproc}: expected at least 1 rank", where="--nproc")
    if nproc * nnodes != total:
        if nnodes == 1:
            raise SchedcError("usage", f"--nproc {nproc}: {program.name} runs on {total} ranks", where="--nproc")
        raise SchedcError("usage", f"--nproc {nproc} on each of --nnodes {nnodes} is {nproc * nnodes} ranks, but "
                          f"{program.name} runs on {total} ranks", where="--nproc")
    return nproc


def _torchrun_nodes(command: list[str], nproc: int, nnodes: int, node_rank: int, endpoint: str | None) -> list[str]:
    """The one-node torchrun command (`torchrun --nproc-per-node=R PROGRAM ARGS...`) for node
    `node_rank` of `nnodes`, meeting at `endpoint` (torchrun's default static rendezvous: node 0 hosts
    it, and node K runs global ranks K*R..K*R+R-1)."""
    head, rest = command[0], command[2 if command[1].startswith("--nproc-per-node=") else 1:]
    options = [f"--nproc-per-node={nproc}"]
    if nnodes > 1:
        options = [f"--nnodes={nnodes}", f"--node-rank={node_rank}", *options]
    if endpoint is not None:
        options.append(f"--rdzv-endpoint={endpoint}")
    return [head, *options, *rest]


def _write_profile(path: str, measured: Path, sim: list[str], stderr, lost: list) -> Path | None:
    """Copy the profile rank 0 measured (in the run's folder) to `path`, as every output is written,
    and say where it is and what reads it (`sim`: the `schedc sim` line that times this run, to
    which `--costs FILE` is added; or that rank 0 did not write it); the file written, None if it
    could not be (its error said and added to `lost`)."""
    try:
        data = measured.read_bytes()
    except OSError:
        stderr.write(f"schedc run: rank 0 wrote no profile at {path}\n")
        return None
    try:
        written = common.write_file(path, data)
    except SchedcError as exc:
        _said_lost("--profile", exc, stderr, lost)
        return None
    stderr.write(f"schedc run: wrote the profile {written} (each stage's measured F/I/W/B seconds and message sizes; "
                 f"`{shlex.join([*sim, '--costs', str(written)])}` times the run from it)\n")
    return written


def _sim_line(args, program, receives: str) -> list[str]:
    """The `schedc sim` command that times this run from its profile (`--costs FILE` to be added):
    the input as given with the options that read it (its parameters, format, notation, placement,
    p2p), and `--lower` with the receives' placement this run used (a communication-level program
    runs as it is, and is simulated so)."""
    from ..simulate import program_level
    words = ["schedc", "sim", args.input]
    for value in args.param:
        words += ["--param", value]
    for flag, value in (("--format", args.format), ("--placement", args.placement), ("--p2p", args.p2p)):
        if value is not None:
            words += [flag, value]
    if args.notation != "current":
        words += ["--notation", args.notation]
    if args.forward_only:
        words.append("--forward-only")
    if program_level(program) != "comms":
        words += ["--lower", "early"] if receives == "early" else ["--lower"]
    return words


def _distinct(outputs: list[tuple[str, str | None]]) -> None:
    """Refuse, before anything runs, two outputs naming one file (the second would overwrite the
    first, and both be reported written): a usage error. A path that is there and is no regular
    file (`/dev/null`, a FIFO) takes each write. (An output over an input is every command's rule:
    cli.py's `_not_over_inputs`.)"""
    seen: dict[str, str] = {}
    for flag, path in outputs:
        key = os.path.realpath(path) if path else ""
        if not path or os.path.exists(key) and not os.path.isfile(key):  # (a device, /dev/null: each write stays)
            continue
        other = seen.get(key) or next((what for known, what in seen.items() if _same_file(known, key)), None)
        if other is not None:
            raise SchedcError("usage", f"{flag} {path}: {other} is that file too; give each output a file of "
                              "its own (the one written last would replace the other)", where=flag)
        seen[key] = f"{flag} {path}"


def _same_file(a: str, b: str) -> bool:
    """Whether two existing paths are one file (a hard link)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _said_lost(flag: str, exc: SchedcError, stderr, lost: list | None) -> None:
    """An output the run could not write, said once on stderr (naming its option) and kept in `lost`."""
    (d,) = exc.diagnostics
    error = SchedcError("io", f"{flag}: {d.message}", where=d.where)
    stderr.write(error.render() + "\n")
    if lost is not None:
        lost.append(error)


def _writable(path: str, flag: str) -> None:
    """Refuse, before the run, an output that cannot be written after it (`outputs.probe_writable`:
    compile's and viz's rule for an output's place, a file in the way of its folder, a folder not
    writable, a read-only file; then a folder the kernel will not let this process create a file
    in), a folder as a usage error."""
    shown = f"{path[:80]}{'...' if len(path) > 80 else ''}"
    try:
        if Path(path).is_dir():
            raise SchedcError("usage", f"{flag} {path}: is a folder; give a file name", where=flag)
    except OSError as exc:  # a name the file system refuses (too long, ...)
        raise SchedcError("usage", f"{flag} {shown}: {exc.strerror or exc}", where=flag) from None
    from ..outputs import probe_writable
    try:
        probe_writable(path)
    except SchedcError as exc:
        raise SchedcError("io", f"{flag} {shown}: {exc.diagnostics[0].message}", where=flag) from None


def _write_trace(path: str, parts: Path, ranks, done, stderr, lost: list | None = None) -> Path | None:
    """Merge the (global) ranks' event files into the trace at `path`, and say how complete it is;
    the file written (None if it could not be: its error said, and added to `lost`)."""
    from ..interop.chrome_trace import measured_trace, read_part
    from ..outputs import dumps_json
    events = {}
    for r in ranks:
        try:
            events[r] = read_part(Path(parts, f"rank{r}.jsonl").read_text(encoding="utf-8", errors="replace"))
        except OSError:
            events[r] = []
    stopped: dict[str, object]
    if done is None:
        stopped = {"how": "interrupted"}
    else:
        stopped = {"how": "finished" if done.ok else "failed",
                   "exit_codes": list(done.returncodes), "stopped_by_launcher": list(done.killed)}
    doc = measured_trace(events, stopped=stopped)
    try:
        written = common.write_file(path, dumps_json(doc, separators=(",", ":")) + "\n")
    except SchedcError as exc:
        _said_lost("--trace", exc, stderr, lost)
        return None
    other = doc["otherData"]
    if other["watchdog"]:
        note = " (up to the watchdog stop: " + "; ".join(f"rank {stop['rank']} at {stop['name']}"
                                                       for stop in other["watchdog"]) + ")"
    elif done is None:
        note = " (up to the interruption)"
    elif not done.ok:
        note = " (up to where each rank stopped: the run failed)"
    else:
        note = ""
    if other["missing_ranks"]:
        note += f"; no events from rank(s) {', '.join(map(str, other['missing_ranks']))}"
    stderr.write(f"schedc run: wrote the trace {written}{note}\n")
    return written

