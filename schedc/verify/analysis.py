"""One analysis of a program under a send semantics, made once by schedc/report.py and handed to every
check: its channels, its happens-before constraints (a job's too), and its lowering with the step
map from the lowered program back to the user's. The checks read it and never lower a program
themselves (nothing under schedc/verify/ imports schedc/passes): report.py adds the lowering.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from ..ir import COMM, SENDS, Action, Op, Program, Step
from ..rules.memory import stage_sizes
from ..rules.semantics import Semantics
from .channels import Channels, channels

if TYPE_CHECKING:  # (graph.py and mesh.py are imported when a part needs them: a program the fast checks clear does not)
    from .graph import Constraints


@dataclass(frozen=True)
class Run:
    """The program whose memory is counted and, when it is the lowering of the user's compute-level
    program, the user's step each of its steps belongs to (`user_step[r][x]`; None: the user's own
    program). A receive lowering inserts belongs to the step it comes before (its consumer comes
    later), a send to the step it follows (its producer)."""

    program: Program
    user_step: tuple[tuple[int, ...], ...] | None = None

    @classmethod
    def of(cls, program: Program, lowered: Program | None) -> "Run":
        """The run of `program`: its lowering `lowered` with the step map when its memory is counted
        lowered (`counted_lowered`; the caller made the lowering), else the program itself."""
        if not counted_lowered(program):
            return cls(program)
        if lowered is None:
            raise ValueError(f"{program.name}: its memory is counted on its lowering, and none was given "
                             "(schedc/report.py makes it)")
        return cls(lowered, tuple(map(user_steps, lowered.ranks)))


def user_steps(steps: Sequence[Step]) -> tuple[int, ...]:
    """For one rank of a lowering: the user's step each step belongs to (see `Run`)."""
    out, seen = [], 0
    for st in steps:
        op = inserted_op(st)
        out.append(max(seen - 1, 0) if op in SENDS else seen)
        if op is None:
            seen += 1
    return tuple(out)


def inserted_op(st: Step) -> Op | None:
    """The op of a send or receive lowering inserted, None for the user's own steps (a lowered
    compute-level program has no other communication)."""
    return st.op if st.__class__ is Action and st.op in COMM else None


def counted_lowered(program: Program) -> bool:
    """Is the program's memory counted on its lowering? A compute-level program whose messages have
    a size is (without sizes, lowering adds nothing to count and the program is its own run)."""
    return program.level != "comms" and any(stage_sizes(program)[2])


class Analysis:
    """What the checks of one program under one semantics share, each part made on first use and
    once: `channels`, `constraints`, a job's (`replica_channels`, `job`, `job_channels`), and (`lowered`, given by
    report.py when a check needs it) the program's lowering, read through `communication_level`,
    `run` (the program memory is counted on, with its step map) and `counted` (the analysis of it)."""

    def __init__(self, program: Program, semantics: Semantics, lowered: Program | None = None, *,
                 chans: Channels | None = None, cons: Constraints | None = None) -> None:
        self.program = program
        self.semantics = semantics
        self.lowered = lowered  # the program's lowering, once report.py has made it
        if chans is not None:  # (parts a caller has already made: a job's, schedc/verify/mesh.py)
            self.__dict__["channels"] = chans
        if cons is not None:
            self.__dict__["constraints"] = cons

    @cached_property
    def channels(self) -> Channels:
        return channels(self.program, self.semantics)

    @cached_property
    def constraints(self) -> Constraints:
        from .graph import constraints
        return constraints(self.program, self.semantics, self.channels)

    @cached_property
    def replica_channels(self) -> list[Channels]:
        """Each replica's channels, in its own pipeline's rank numbers (a job's; one pipeline's: one)."""
        if self.program.dp == 1:
            return [self.channels]
        return [channels(self.program.replica(d), self.semantics) for d in range(self.program.dp)]

    @cached_property
    def job(self) -> tuple[Program, Constraints]:
        """The whole job as one program and its constraints (schedc/verify/mesh.py's `job`)."""
        from .mesh import job
        return job(self.program, self.semantics, self.replica_channels)

    @cached_property
    def job_channels(self) -> Channels:
        from .mesh import job_channels
        return job_channels(self.program, self.semantics, self.replica_channels)

    def release(self) -> None:
        """Forget the parts made so far (made again if asked): a report kept after its checks holds no
        graph of the program, which would slow every later garbage collection while it lives."""
        for part in ("channels", "constraints", "replica_channels", "job", "job_channels", "run", "counted"):
            self.__dict__.pop(part, None)

    @property
    def needs_lowering(self) -> bool:
        """Is the program compute-level and its lowering not yet made?"""
        return self.program.level != "comms" and self.lowered is None

    @property
    def communication_level(self) -> Program:
        """The program at the communication level: itself, or its lowering."""
        if self.program.level == "comms":
            return self.program
        if self.lowered is None:
            raise ValueError(f"{self.program.name}: the analysis has no lowering (schedc/report.py adds it)")
        return self.lowered

    @cached_property
    def run(self) -> Run:
        """The program as schedc runs it, whose memory the checks count (`counted_lowered`)."""
        return Run.of(self.program, self.lowered)

    @cached_property
    def counted(self) -> "Analysis":
        """The analysis of `run.program`: this one, or its lowering's."""
        return self if self.run.program is self.program else Analysis(self.run.program, self.semantics)
