"""The `schedc` command line: argument parsing and wiring only.

`main(argv, stdout, stderr) -> int` so tests drive it with in-memory streams. Exit codes: 0 every
check holds, 1 a check fails, 2 bad input or usage, 3 unknown (a solver gave up), 4 an internal error
(a bug in schedc).
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import TextIO

from .errors import EXIT_INPUT, EXIT_OK, SchedcError

EXIT_INTERNAL = 4
# command -> its module in schedc/commands/ (imported when run, so `schedc list` never loads torch)
_COMMANDS = {"list": "listing", "compile": "compile", "check": "check", "export": "export", "sim": "sim",
             "compare": "compare", "viz": "viz", "run": "run"}


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as SchedcError instead of exiting."""

    def __init__(self, *args, stdout: TextIO | None = None, **kwargs):
        self._out = stdout
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise SchedcError("usage", f"{message} (see `{self.prog} --help`)")

    def _check_value(self, action, value):
        """argparse's check of a choice, with a suggestion for a near miss (`chek`: did you mean 'check'?)."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            from .expr import did_you_mean
            raise argparse.ArgumentError(action, e.message + did_you_mean(str(value), action.choices)) from None

    def exit(self, status=0, message=None):
        if message:
            self._print_message(message)
        raise _Exit(status)

    def _print_message(self, message, file=None):
        if message:
            (self._out or sys.stdout).write(message)


class _Exit(Exception):
    def __init__(self, status):
        self.status = status


def _parser(stdout: TextIO) -> _Parser:
    p = _Parser(prog="schedc", stdout=stdout,
                description="Compile and verify pipeline-parallel training schedules.")
    p.add_argument("--version", action="version", version=f"schedc {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    from .ir import P2P_MODES, RECEIVE_POSTINGS

    def common(q, many=False):
        q.add_argument("inputs" if many else "input", nargs="+" if many else None, metavar="FILE|NAME",
                       help="a .pp schedule, a PyTorch .csv, a schedc .json, or a built-in name")
        q.add_argument("--param", action="append", default=[], metavar="K=V",
                       help="set schedule parameters, e.g. --param P=4 or --param P=4,M=8 (repeatable; "
                            "each name once)")
        q.add_argument("--format", choices=["pp", "torch-csv", "ir-json"],
                       help="input format (default: by file extension)")
        q.add_argument("--notation", choices=["current", "legacy"], default="current",
                       help="PyTorch CSV notation: current (B = full backward) or legacy (B = backward-input, "
                            "BW = full backward)")
        q.add_argument("--forward-only", action="store_true",
                       help="the schedule runs forwards alone (inference): no backward is expected, as a "
                            "schedule's `forward only` line says")
        q.add_argument("--p2p", choices=P2P_MODES,
                       help="how messages travel, as a schedule's `p2p` line says: shared (one communicator and "
                            "tag, torch's runtime; the default for a CSV), tagged (each message tagged with its "
                            "payload) or split (activations and gradients on communicators of their own)")

    def checking(q):
        q.add_argument("--semantics", default="rendezvous", help="rendezvous (default), eager, bounded:K, or a backend: nccl, gloo "
                                                                "(+shapes: with Megatron's shape exchange, e.g. nccl+shapes; nccl+lazy: "
                                                                "communicators made at first use)")
        q.add_argument("--engine", choices=["native", "z3"], default="native",
                       help="deadlock check: the native executor (default) or the Z3 solver")
        q.add_argument("--timeout", type=float, default=None, metavar="S",
                       help="--engine z3: the solver's seconds on the wall clock for the whole command (inputs and "
                            "sweep instances share them; default: no clock, each query's budget of Z3 resource "
                            "units bounds it)")
        q.add_argument("--memory-limit", metavar="N|R=N,...",
                       help="memory limit per rank: one number, or rank=limit pairs, e.g. 0=4,1=3 (with a model "
                            "and hardware description: GiB, or sizes such as 80GiB)")

    def describing(q):
        from .hardware import preset_list
        q.add_argument("--model", metavar="NAME", help="count in seconds and GiB for this model preset: "
                       + preset_list("model") + " (docs/units.md)")
        q.add_argument("--hardware", metavar="NAME", help="the accelerator preset: " + preset_list("hardware"))
        q.add_argument("--link", metavar="NAME", help="the link between ranks (default: the accelerator's): "
                       + preset_list("link"))
        q.add_argument("--setup", metavar="FILE", help="a model and hardware description, TOML or JSON: tables "
                       "[model], [hardware], [link], each a preset and keys on top")

    q = sub.add_parser("list", help="built-in schedules and their parameters", stdout=stdout)
    q.add_argument("--json", action="store_true", help="one JSON object per schedule")

    q = sub.add_parser("compile", help="parse, compile and check; write the IR, the PyTorch CSV, the program and the timeline",
                       stdout=stdout)
    common(q)
    q.add_argument("-o", "--output", default="build", metavar="DIR", help="output folder (default: build)")
    q.add_argument("--force", action="store_true", help="write outputs even if checks fail")
    checking(q)

    q = sub.add_parser("check", help="check schedules; one report (or JSON line) per input", stdout=stdout)
    common(q, many=True)
    q.add_argument("--json", action="store_true", help="print one JSON object per input, one per line")
    q.add_argument("--sweep", action="append", default=[], metavar="K=A..B",
                   help="check every value of a parameter in A..B (inclusive; repeatable)")
    q.add_argument("--viz", metavar="OUT.svg|OUT.html|OUT.png",
                   help="also draw the schedule; a failing one with its counterexample (one input)")
    checking(q)
    describing(q)

    q = sub.add_parser("export", help="write a schedule in another format", stdout=stdout)
    common(q)
    q.add_argument("--to", required=True, choices=["torch-csv", "ir-json"], help="output format")
    q.add_argument("--level", choices=["compute", "comms"], default="comms",
                   help="torch-csv: compute_only or compute_comms (default)")
    q.add_argument("-o", "--output", metavar="FILE", help="output file (default: standard output)")

    q = sub.add_parser("sim", help="simulate a schedule in time: makespan, bubble, busy time, memory",
                       stdout=stdout)
    common(q)
    q.add_argument("--cost", action="append", default=[], metavar="K=V,...",
                   help="costs for every stage, e.g. F=1,I=1,W=1,B=2 (also act, weight, out, latency, "
                        "bandwidth, overhead, dispatch); applied after --costs")
    q.add_argument("--costs", metavar="FILE", help="a TOML cost file, or a measured profile (.json)")
    q.add_argument("--lower", nargs="?", const="needed", choices=RECEIVE_POSTINGS, metavar="RECEIVES",
                   help="time the program as `schedc run` lowers and runs it, its sends and receives as steps "
                        "(receives where needed, or `--lower early`: as `run --receives early`); with a profile "
                        "of that run, what predicts its step")
    q.add_argument("--samples", type=int, default=0, metavar="N",
                   help="also time N runs with each time drawn from the measured spread of a profile "
                        "(--costs run.json from `schedc run --profile`): the expected makespan and its spread")
    q.add_argument("--seed", type=int, default=0, help="the seed of the sampled runs (default 0)")
    q.add_argument("--no-overlap", action="store_true", help="communication holds the ranks it involves")
    q.add_argument("--semantics",
                   help="which runs exist: rendezvous (default; gloo with --lower early), eager, bounded:K, or a "
                        "backend, nccl or gloo, whose sends and receives are timed as posted and awaited")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.add_argument("--trace", metavar="FILE", help="write a Chrome trace / Perfetto JSON of the timeline")
    describing(q)
    q = sub.add_parser("compare", help="rank schedules for one setting by makespan, with bubble and peak memory",
                       stdout=stdout)
    q.add_argument("inputs", nargs="*", metavar="FILE|NAME",
                   help=".pp schedules or built-in names (default: every built-in schedule)")
    q.add_argument("--param", action="append", default=[], metavar="K=V",
                   help="the setting, e.g. --param P=4,M=8,V=2 (repeatable; each name once); each schedule "
                        "takes the parameters it declares")
    q.add_argument("--cost", action="append", default=[], metavar="K=V,...",
                   help="costs for every stage of every schedule, as written (not divided by V), e.g. "
                        "F=1,I=1,W=1; applied after --costs")
    q.add_argument("--costs", metavar="FILE", help="a TOML cost file, or a measured profile (.json)")
    q.add_argument("--memory-limit", metavar="N",
                   help="mark (and rank last) schedules whose peak memory on some rank exceeds N (with a "
                        "description: GiB, or a size such as 80GiB; default the accelerator's memory)")
    q.add_argument("--no-overlap", action="store_true", help="communication holds the ranks it involves")
    q.add_argument("--json", action="store_true", help="print one JSON object per schedule, best first")
    describing(q)

    from .prove.command import add_parser as add_prove
    add_prove(sub, stdout)

    q = sub.add_parser("run", help="verify, lower and run a schedule on local ranks (or print the torchrun line)",
                       stdout=stdout)
    common(q)
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
                   help="send semantics to verify under (default rendezvous): eager, bounded:K, or the backend's, "
                        "nccl or gloo; the runtime always posts and awaits as the backends do")
    q.add_argument("--receives", choices=RECEIVE_POSTINGS, default="needed",
                   help="where the runtime posts receives: needed (default: in the round their sender runs, "
                        "as lowering places them) or early (every receive at the start of its rank's step: on "
                        "gloo a message then goes as soon as it is sent; checked under gloo, gloo only)")
    q.add_argument("--batch-size", type=int, metavar="N", help="samples per step (default 8 x microbatches)")
    q.add_argument("--dtype", choices=["bfloat16", "float16", "float32", "float64"], help="model and input dtype")
    q.add_argument("--lr", type=float, metavar="LR", help="SGD learning rate unless the model defines make_optimizer")
    q.add_argument("--print-torchrun", action="store_true",
                   help="write DIR/<name>_program.py and print the torchrun command instead of running")
    q.add_argument("-o", "--output", default="build", metavar="DIR", help="with --print-torchrun: output folder")

    q = sub.add_parser("viz", help="draw a schedule: timeline SVG/HTML/PNG, or its dependency graph (--dag)",
                       stdout=stdout, description=(
                           "Draw a schedule. It is checked first and the check summary is printed; a failing "
                           "schedule is drawn with its counterexample. Exits 0 once the picture is written, "
                           "whatever the checks found (the picture is the product); use schedc check, or "
                           "schedc check --viz OUT, for an exit code that fails with the schedule."))
    common(q)
    q.add_argument("-o", "--output", required=True, metavar="OUT.svg|OUT.html|OUT.png",
                   help="the picture; the suffix picks the format (--dag: .svg, .png or .dot)")
    q.add_argument("--dag", action="store_true", help="draw the dependency graph through graphviz instead")
    q.add_argument("--arrows", action="store_true", help="draw every message as an arrow from sender to receiver")
    q.add_argument("--cost", action="append", default=[], metavar="K=V,...",
                   help="costs for every stage, e.g. F=1,I=1,W=1,B=2; applied after --costs")
    q.add_argument("--costs", metavar="FILE", help="a TOML cost file, or a measured profile (.json)")
    checking(q)
    describing(q)

    q = sub.add_parser("synth", help="find the fastest schedule for P, M, costs and a memory cap (Z3)",
                       stdout=stdout)
    from .synth.command import add_arguments as synth_arguments
    synth_arguments(q)
    return p


def _version() -> str:
    from . import __version__
    return __version__


def main(argv: list[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:  # noqa: C901
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    args = None
    try:
        args = _parser(stdout).parse_args(argv if argv is not None else sys.argv[1:])
        if args.command is None:
            _parser(stdout).print_help()
            return EXIT_INPUT
        if args.command == "synth":
            from .commands.common import write_all
            from .synth.command import run as synth
            return synth(args, stdout, stderr, write_all)
        if args.command == "prove":
            from .prove.command import run as prove
            return prove(args, stdout, stderr)
        import importlib
        return importlib.import_module(f".commands.{_COMMANDS[args.command]}", __package__).run(args, stdout, stderr)
    except _Exit as e:
        return e.status if isinstance(e.status, int) else EXIT_INPUT
    except SchedcError as e:
        stderr.write(e.render() + "\n")
        if getattr(args, "json", False):  # --json: the error as JSON on stdout too
            from .commands.common import input_error_json
            stdout.write(input_error_json(e, getattr(args, "input", None)) + "\n")
        return EXIT_INPUT
    except KeyboardInterrupt:
        stderr.write("schedc: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # a bug in schedc: say so briefly, no traceback unless asked
        if os.environ.get("SCHEDC_DEBUG"):
            raise
        stderr.write(f"schedc: internal error: {type(e).__name__}: {e}\n"
                     "  this is a bug in schedc; rerun with SCHEDC_DEBUG=1 for a traceback and report it\n")
        return EXIT_INTERNAL


def entry() -> None:
    status = main(sys.argv[1:], sys.stdout, sys.stderr)
    if any(t.name == "schedc-solver" and t.is_alive() for t in threading.enumerate()):
        # a solver left to end by its own time limit (HiGHS, after Ctrl-C) would still be running while
        # the interpreter tears down the modules it uses: it could abort the process ("realloc():
        # invalid next size") after the command has answered. Leave without that tear-down.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
