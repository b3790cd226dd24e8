"""Hangs that come from how a runtime sets up communication, not from the order of the schedule.

Megatron's blocking shape exchange (`nccl+shapes`, schedc/verify/shapes.py), NCCL's lazily made
communicators (`nccl+lazy`: `comm-init-order`, schedc/verify/comm_init.py), and torch's `eval()` on V-shaped
schedules (a note). `add_runtime_findings` adds them to a report once its checks are done.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..errors import Diagnostic
from ..ir import Program
from ..lint import display_step
from ..rules.semantics import Semantics

if TYPE_CHECKING:  # (comm_init.py and shapes.py are imported when a semantics asks for them: most do not)
    from .analysis import Analysis
    from .symmetry import Classes

READ_FURTHER = frozenset({"mismatch", "unmatched", "deadlock", "memory"})  # findings after which the program is still read
TORCH_EVAL_V = ("torch 2.13's own runtime cannot run this inference: its eval() fails on V-shaped schedules, where a "
                "stage hands its value to the next stage on its own rank (ScheduleZBVZeroBubble.eval: \"can't "
                "steal_bwd_input if this stage doesn't have backward\"), and it refuses an action list without "
                "backwards; schedc run runs it")


def reads_communication_level(report, semantics: Semantics) -> bool:
    """Does `add_runtime_findings` read the program at the communication level (a compute-level
    program's lowering, which the caller adds to the analysis first)?"""
    return semantics.lazy and _read_further(report)


def _read_further(report) -> bool:
    """Is the structure sound (the findings so far are all READ_FURTHER's)?"""
    return all(d.code in READ_FURTHER for d in report.errors)


def runtime_view(analysis: Analysis) -> tuple[Analysis, Classes | None]:
    """What `add_runtime_findings` reads: for a job whose replicas repeat (fewer classes of identical
    replicas than replicas, schedc/verify/symmetry.py), its reduced job's analysis (one replica per
    class) and the classes; else the analysis itself. The caller lowers the one it gets."""
    program = analysis.program
    if program.dp > 1:
        from .analysis import Analysis
        from .symmetry import classes
        cls = classes(program)
        if cls.k < cls.D:
            return Analysis(cls.reduced(program), analysis.semantics), cls
    return analysis, None


def add_runtime_findings(report, analysis: Analysis, cls: Classes | None = None) -> None:
    """The runtime hangs of the analysed program under its semantics, added to `report` (a
    `schedc.report.Report`). With `cls`, the analysis is of a job reduced to one replica per class
    (`runtime_view`), and the findings are told of the real job's ranks: exact, as for the check
    (each replica runs its class's first replica's run; docs/checks.md)."""
    program, semantics = analysis.program, analysis.semantics
    if not semantics.modifiers and not program.forward_only:
        return  # (asked of every check: nothing here applies)
    if not _read_further(report):
        return  # the structure is wrong: those findings come first
    if semantics.lazy:  # (nccl alone: its communicators are made before the step, in one order)
        from .comm_init import comm_init_findings
        report.errors.extend(comm_init_findings(analysis, cls))
    if report.deadlock is None:
        _shape_exchange(report, program, semantics, cls)
    if program.forward_only and v_shaped(program):
        report.notes = (*report.notes, TORCH_EVAL_V)


def _shape_exchange(report, program: Program, semantics: Semantics, cls: Classes | None) -> None:
    """A `deadlock` finding when the blocking shape exchange of `semantics` deadlocks the program."""
    from .shapes import MEGATRON, shape_cause, shape_exchange_deadlock
    found = shape_exchange_deadlock(program, semantics, cls)
    if found is None:
        return
    report.deadlock = replace(found, semantics=semantics)
    first = found.cycle[0] if found.cycle else None
    report.errors.append(Diagnostic(
        "deadlock", shape_cause(found, semantics), first.action.span if first else None, (MEGATRON,),
        rank=first.rank if first else None, step=display_step(first.action, first.step) if first else None))


def v_shaped(program: Program) -> bool:
    """Does some stage hand its output to the next stage on its own rank (ZB-V, DualPipeV)?"""
    placement = program.placement
    return any(placement[s] == placement[s + 1] for s in range(len(placement) - 1))
