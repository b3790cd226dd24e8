"""What the fast paths of `schedc check` (verify/fast.py with arrays, verify/small.py in plain Python)
answer and share: `Clear`, every check passes with each rank's peak activation; `cleared`, unless a
peak is over a limit; and the message tables both read from deps.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from ..columns import columns_of
from ..ir import Op, Program
from ..rules import deps
from ..rules.memory import exceeds

if TYPE_CHECKING:  # (memory.py, the detailed memory walk, is imported when a peak is first asked for)
    from .memory import Peak

SEND_OF = {deps.NEEDS[o][0][0]: o for o in (Op.SEND_F, Op.SEND_B)}  # the send that carries a kind of value
RECEIVE_OF = {v: o for o, v in deps.DELIVERS.items()}  # (kind, offset) -> the receive that brings it


@dataclass(frozen=True)
class Clear:
    """Every check passes; the numbers the report needs: each rank's peak activation and the step
    of its rank where it is first reached. The peaks as `Peak`s (with their actions and spans) are
    made when asked for: a clear report shows only their sizes, unless something asks more."""

    peak_activation: tuple[float, ...]
    peak_steps: tuple[int, ...]
    program: Program = field(compare=False, repr=False)

    @cached_property
    def peak_memory(self) -> tuple[Peak, ...]:
        from .memory import Peak
        at = step_at(self.program)
        return tuple(Peak(r, peak, t, at(r, t).parts[0], ()) if peak > 0 else Peak(r, 0.0, 0, None, ())
                     for r, (peak, t) in enumerate(zip(self.peak_activation, self.peak_steps)))


def cleared(program: Program, peaks: list[float], steps: list[int], limits: dict[int, float] | None) -> Clear | None:
    """`Clear` with each rank's peak activation (reached first at its step `steps[r]`), unless a
    peak is over a limit (given, or the program's own): then None, the detailed checks report it."""
    if over_limit(program, peaks, limits):
        return None
    return Clear(tuple(peaks), tuple(t if peak > 0 else 0 for peak, t in zip(peaks, steps)), program)


def over_limit(program: Program, peaks, limits: dict[int, float] | None) -> bool:
    """Is some rank's peak over its limit (given, or the program's own)?"""
    R = program.num_ranks
    return (limits is not None and any(exceeds(peaks[r], limits[r]) for r in limits if r < R)
            or any(exceeds(peaks[r], limit) for r, limit in program.annotations.memory_limit))


def step_at(program: Program):
    """`step_at(rank, index)`: one step of a rank, made alone when the program holds columns."""
    held = columns_of(program)
    return held.step if held is not None else (lambda r, i: program.ranks[r][i])
