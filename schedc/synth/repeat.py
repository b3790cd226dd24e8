"""The steady state of a synthesised schedule as a loop: one `.pp` file for every M, not one M.

`fold_rank(row, M)` finds in a rank's order a repeating block (the same actions, microbatches one
to four further on each time round) and splits the order into a head (the warm-up, microbatches as
found), the loop, and a tail (the cool-down, microbatches counted back from M). `generalise`
writes that as a schedule with parameter M, then keeps it only if it compiles to the very same
order at the M it was found for and checks clean at every M from the smallest that works to a few
beyond. `schedc prove` can then prove it for every M (docs/synth.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import lcm

MAX_STEP = 4    # microbatches one repetition moves on, at most
ABOVE = 4       # repetitions beyond the M it was found for that must also check clean


@dataclass(frozen=True)
class RankFold:
    head: tuple  # (op, stage, microbatch) before the loop
    block: tuple  # the loop body at its first iteration
    step: int  # microbatches each iteration moves on
    count: int  # iterations at the M it was found for
    tail: tuple  # after the loop


@dataclass(frozen=True)
class Generalised:
    text: str  # the .pp source, parameter M
    every: str  # which M it is for, in words: "every M >= 8 with M % 2 == 0"
    low: int  # the smallest M it is for
    modulus: int  # M = found M (mod modulus)
    checked: tuple[int, ...]  # the values of M it was compiled and checked at
    folds: tuple[RankFold, ...]


def fold_rank(row, microbatches: int, *, max_step: int = MAX_STEP) -> RankFold | None:
    """The repetition covering the most actions (at least two rounds), or None. One round moves
    every (kind, stage) of the rank `step` microbatches on, so it holds step x (actions per
    microbatch) actions."""
    n, best, key = len(row), None, None
    if microbatches < 1 or n % microbatches:
        return None
    for step in range(1, max_step + 1):
        length = step * n // microbatches
        for start in range(0, n - 2 * length + 1):
            block = row[start:start + length]
            count = 1
            while start + (count + 1) * length <= n and all(
                    row[start + count * length + j] == (op, s, mb + count * step)
                    for j, (op, s, mb) in enumerate(block)):
                count += 1
            if count >= 2 and (key is None or (count * length, -step, -start) > key):
                key = (count * length, -step, -start)
                best = RankFold(tuple(row[:start]), tuple(block), step, count, tuple(row[start + count * length:]))
    return best


def _mb(step: int, first: int) -> str:
    """The microbatch at iteration i of a block whose first iteration has `first`."""
    moving = "i" if step == 1 else f"{step} * i"
    return f"{moving} + {first}" if first else moving


def body(f: RankFold, M: int) -> str:
    """One rank's list as statements: head literals, the loop, the tail counted back from M."""
    out = [f"{op}({s}, {mb})" for op, s, mb in f.head]
    low = M - f.count * f.step  # the loop runs (M - low) / step times
    times = f"M - {low}" if f.step == 1 else f"(M - {low}) // {f.step}"
    inner = "; ".join(f"{op}({s}, {_mb(f.step, mb)})" for op, s, mb in f.block)
    out.append(f"for i in 0 .. {times} {{ {inner} }}")
    out += [f"{op}({s}, M - {M - mb})" for op, s, mb in f.tail]
    return "; ".join(out)


def for_every_m(outcome, command: str | None = None) -> Generalised | str:
    """The outcome's schedule written for every M, or why it cannot be."""
    from .emit import header, settings
    p = outcome.problem
    rows = _rows(outcome.best.program(p))
    head = header(outcome, command)
    return generalise(p, rows, head, settings(p, head))


def generalise(problem, rows, header: list[str], settings: list[str]) -> Generalised | str:
    """The schedule for every M (from the smallest that checks clean), or why there is none.
    `rows`: per rank, (op, stage, microbatch) in order; `settings`: the declaration lines."""
    from .. import api
    from ..errors import SchedcError
    M = problem.M
    folds = []
    for r, row in enumerate(rows):
        f = fold_rank(row, M)
        if f is None:
            return f"rank {r} has no repeating block (its order is too short or irregular)"
        folds.append(f)
    modulus = lcm(*(f.step for f in folds))
    name = problem.program.name.replace(f"_m{M}", "") + "_every_m"

    def every(low: int) -> str:
        return f"every M >= {low}" + (f" with M % {modulus} == {M % modulus}" if modulus > 1 else "")

    def source(low: int, checked=()) -> str:
        need = [f"M >= {low}"] + ([f"M % {modulus} == {M % modulus}"] if modulus > 1 else [])
        ranks = [f"  rank {r} {{ {body(f, M)} }}" for r, f in enumerate(folds)]
        note = [f"# Written for {every(low)}: each rank's steady state found at M={M} becomes a loop (the",
                f"# makespan above is M={M}'s; other M repeat the same block, not re-optimised). Checked clean",
                f"# at M = {', '.join(map(str, checked))}; for every M, ask `schedc prove` about this file."] if checked else []
        return "\n".join(header + note + [f"schedule {name}(M = {M}) {{", f"  require {', '.join(need)}",
                                          f"  ranks {problem.P}", *settings, *ranks, "}"]) + "\n"

    def clean(m: int, text: str) -> bool:
        try:
            program = api.load_text(text, f"{name}.pp", params={"M": m})
        except SchedcError:
            return False
        return api.check(program).ok is True

    text = source(1)
    found = api.load_text(text, f"{name}.pp", params={"M": M})
    if _rows(found) != [list(r) for r in rows]:
        return "the loop form does not give back the order it was found from"
    above = [M + k * modulus for k in range(1, ABOVE + 1)]
    if api.check(found).ok is not True or not all(clean(m, text) for m in above):
        return ("the loop form does not check clean beyond the M it was found for (its steady state may "
                "need more rounds to show: try a larger M)")
    low = M
    while low - modulus >= 1 and clean(low - modulus, text):
        low -= modulus
    checked = tuple(range(low, M + 1, modulus)) + tuple(above)
    return Generalised(source(low, _ranges(checked, modulus)), every(low), low, modulus, checked, tuple(folds))


def _rows(program) -> list[list[tuple]]:
    """Per rank, (op, stage, microbatch) of each action in order (synthesised steps are single actions)."""
    return [[(a.op.value, a.stage, a.microbatch) for a in rank] for rank in program.ranks]


def _ranges(values, step: int) -> list[str]:
    """[3, 4, 5, 9] -> ['3..5', '9'] (runs of `step`)."""
    out, run = [], [values[0]]
    for v in values[1:]:
        if v == run[-1] + step:
            run.append(v)
        else:
            out.append(run)
            run = [v]
    out.append(run)
    return [f"{r[0]}..{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in out]
