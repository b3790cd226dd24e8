"""`schedc run`: verify, lower and run a schedule on local ranks, or print the torchrun line.

Arguments, the backend (and that the semantics verified under holds on it: runtime/backends.py)
and the output paths are checked before any rank starts; `--trace` merges the events every rank
wrote as it ran (schedc/runtime/trace.py) into one Perfetto trace, also when the run failed, was
stopped by the watchdog or interrupted.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

from ..errors import EXIT_FAIL, EXIT_INPUT, EXIT_OK, SchedcError
from ..options import seconds
from ..progress import progress
from . import common


_RANK_EXITS = {1: "failed", 2: "could not start (bad usage or model)", 124: "was stopped by the watchdog"}


def run(args, stdout, stderr) -> int:
    """Verify (unless --no-verify), lower, and run on local ranks, or print the torchrun line."""
    import shlex
    from ..lower import lower_to_torch
    from ..verify.execute import Semantics
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
    semantics = Semantics.parse(args.semantics)
    from ..runtime.backends import not_vouched, vouches
    if not args.no_verify and not vouches(str(semantics), args.backend):
        raise SchedcError("usage", f"--semantics {semantics} with --backend {args.backend}: "
                          f"{not_vouched(str(semantics), args.backend)} (--semantics nccl)", where="--semantics")
    program = common.load(args.input, args, common.params(args.param))
    nproc = program.num_ranks if args.nproc is None else args.nproc
    if nproc != program.num_ranks:
        raise SchedcError("usage", f"--nproc {nproc}: {program.name} runs on {program.num_ranks} ranks",
                          where="--nproc")
    M = program.num_microbatches
    if args.batch_size is not None and (args.batch_size < 1 or args.batch_size % M):
        raise SchedcError("usage", f"--batch-size {args.batch_size}: expected a positive multiple of the "
                          f"{M} microbatches", where="--batch-size")
    if not args.print_torchrun:  # before any rank starts: one line, not a traceback from each
        from ..runtime.backends import problem
        why = problem(args.backend, nproc)
        if why:
            raise SchedcError("usage", why, where="--backend")
    verified = None
    if not args.no_verify:
        checks = argparse.Namespace(semantics=str(semantics), engine="native", timeout=30.0, memory_limit=None)
        report = common.run_checks(program, checks)
        stdout.write(report.summary() + "\n")
        if report.ok is not True:
            stderr.write(report.render() + "\n")
            stderr.write("schedc: checks did not pass; not running (--no-verify runs it anyway)\n")
            return common.exit_of(report)
        verified = str(semantics)
    lowered = lower_to_torch(program, verified=verified)
    rank_args = ["--model", args.model, "--steps", str(args.steps), "--timeout", str(args.timeout),
                 "--backend", args.backend]
    for flag, value in (("--batch-size", args.batch_size), ("--dtype", args.dtype), ("--lr", args.lr),
                        ("--profile", os.path.abspath(args.profile) if args.profile else None)):
        if value is not None:
            rank_args += [flag, str(value)]
    name = f"{common.safe_stem(program.name)}_program.py"
    if args.print_torchrun:
        (path,) = common.write_files(Path(args.output), {name: lowered.source})
        stdout.write(shlex.join(lowered.torchrun_command(str(path), args.model, rank_args[2:])) + "\n")
        return EXIT_OK
    from ..runtime.launch import launch
    progress(stderr, prefix="schedc run: ")(f"starting {nproc} rank(s) ({args.backend}, {args.steps} step(s)); "
                                            "each rank loads torch and the model first")
    with tempfile.TemporaryDirectory(prefix="schedc-run-") as folder:
        (path,) = common.write_files(Path(folder), {name: lowered.source})
        parts = Path(folder, "trace")
        if trace:
            rank_args += ["--trace-dir", str(parts)]
        try:
            done = launch([sys.executable, str(path), *rank_args], nproc, stdout=stdout, stderr=stderr,
                          grace=min(args.timeout, 30.0) + 5.0)
        except KeyboardInterrupt:  # the ranks are stopped; keep what they recorded
            if trace:
                _write_trace(trace, parts, nproc, None, stderr)
            raise
        if trace:
            _write_trace(trace, parts, nproc, done, stderr)
    if done.ok:
        return EXIT_OK
    how = [f"rank {r} " + (_RANK_EXITS.get(code, f"exited with {code}") if code >= 0 else
                           f"was stopped (signal {-code})") for r, code in enumerate(done.returncodes) if code != 0]
    stderr.write("schedc: the run failed: " + "; ".join(how) + " (every rank exited)\n")
    # every failing rank rejected its arguments or model: bad input, not a failed run
    return EXIT_INPUT if all(code in (0, 2) for code in done.returncodes) else EXIT_FAIL


def _writable(path: str, flag: str) -> None:
    """Refuse, before the run, an output that cannot be written after it: a folder, or a path under
    something that is not a writable folder."""
    target = Path(path)
    if target.is_dir():
        raise SchedcError("usage", f"{flag} {path}: is a folder; give a file name", where=flag)
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise SchedcError("usage", f"{flag} {path}: cannot write there ({folder} is not a writable folder)",
                          where=flag)


def _write_trace(path: str, parts: Path, nproc: int, done, stderr) -> None:
    """Merge the ranks' event files into the trace at `path`, and say how complete it is."""
    from ..interop.chrome_trace import measured_trace, read_part
    from ..outputs import dumps_json
    events = {}
    for r in range(nproc):
        try:
            events[r] = read_part(Path(parts, f"rank{r}.jsonl").read_text(encoding="utf-8", errors="replace"))
        except OSError:
            events[r] = []
    if done is None:
        stopped = {"how": "interrupted"}
    else:
        stopped = {"how": "finished" if done.ok else "failed",
                   "exit_codes": list(done.returncodes), "stopped_by_launcher": list(done.killed)}
    doc = measured_trace(events, stopped=stopped)
    try:
        written = common.write_file(path, dumps_json(doc, separators=(",", ":")) + "\n")
    except SchedcError as exc:  # the run's own outcome still decides the exit code
        stderr.write(exc.render() + "\n")
        return
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

