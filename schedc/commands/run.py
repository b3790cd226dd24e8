"""`schedc run`: verify, lower and run a schedule on local ranks, or print the torchrun line."""
from __future__ import annotations

import argparse
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
    semantics = Semantics.parse(args.semantics)
    program = common.load(args.input, args, common.params(args.param))
    nproc = program.num_ranks if args.nproc is None else args.nproc
    if nproc != program.num_ranks:
        raise SchedcError("usage", f"--nproc {nproc}: {program.name} runs on {program.num_ranks} ranks",
                          where="--nproc")
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
        done = launch([sys.executable, str(path), *rank_args], nproc, stdout=stdout, stderr=stderr,
                      grace=min(args.timeout, 30.0) + 5.0)
    if done.ok:
        return EXIT_OK
    how = [f"rank {r} " + (_RANK_EXITS.get(code, f"exited with {code}") if code >= 0 else
                           f"was stopped (signal {-code})") for r, code in enumerate(done.returncodes) if code != 0]
    stderr.write("schedc: the run failed: " + "; ".join(how) + " (every rank exited)\n")
    # every failing rank rejected its arguments or model: bad input, not a failed run
    return EXIT_INPUT if all(code in (0, 2) for code in done.returncodes) else EXIT_FAIL

