"""The `schedc` commands, one registered `Command` each (`COMMANDS`, in `schedc --help`'s order):
its name, its one-line help and the module holding `add_arguments(parser)` and `run(args, stdout,
stderr) -> exit code`, imported only when that command runs (so `schedc list` never loads torch).
common.py and arguments.py hold what several commands share (loading, checks, writes; options).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Command:
    """One command: `name`, its `help` line, and `module`, with `add_arguments` and `run`."""

    name: str
    help: str
    module: str

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


COMMANDS: tuple[Command, ...] = (
    Command("list", "built-in schedules and their parameters", "schedc.commands.listing"),
    Command("compile", "parse, compile and check; write the IR, the PyTorch CSV, the program and the timeline",
            "schedc.commands.compile"),
    Command("check", "check schedules; one report (or JSON line) per input", "schedc.commands.check"),
    Command("export", "write a schedule in another format", "schedc.commands.export"),
    Command("sim", "simulate a schedule in time: makespan, bubble, busy time, memory", "schedc.commands.sim"),
    Command("compare", "rank schedules for one setting by makespan, with bubble and peak memory",
            "schedc.commands.compare"),
    Command("plan", "the fastest layouts and schedules for a model on N GPUs, within their memory",
            "schedc.commands.plan"),
    Command("prove", "prove a parametric schedule sound for every size: proved, refuted or unknown",
            "schedc.prove.command"),
    Command("run", "verify, lower and run a schedule on local ranks (or print the torchrun line)",
            "schedc.commands.run"),
    Command("viz", "draw a schedule: timeline SVG/HTML/PNG, or its dependency graph (--dag)", "schedc.commands.viz"),
    Command("diagnose", "explain a hung job from its Flight Recorder dumps, in the schedule's terms",
            "schedc.commands.diagnose"),
    Command("trace", "merge the traces of a run's nodes or ranks into one Perfetto trace, arrows between nodes",
            "schedc.commands.trace"),
    Command("import", "read a framework's job config (torchtitan's options) into a schedule and a setup file",
            "schedc.commands.importing"),
    Command("synth", "find the fastest schedule for P, M, costs and a memory cap (Z3)", "schedc.commands.synth"),
)
