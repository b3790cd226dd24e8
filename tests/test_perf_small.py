"""The plain-Python paths for small inputs (issue 21) against the general ones, on generated inputs.

`small.quick_check` asks its rules of whole slices of a position table and runs the ranks over
per-rank wait lists; it must decide exactly as the array path (`fast.array_check`), with the same
peaks (DualPipe's overlapped pairs too). A small CSV is read cell by cell with its spans
found only when asked for (one action's alone, or all of them): each must be the array reader's,
and `schedc.check` must report the same on either reading.
"""
from __future__ import annotations

from dataclasses import replace

from hypothesis import given, strategies as st

import schedc
from schedc.interop.csv_columns import _read_arrays, _read_small
from schedc.interop.torch_csv import TorchCsv
from schedc.passes import lower
from schedc.report import run_checks
from schedc.rules.semantics import Semantics
from schedc.strategies import lowered_programs, mutations, programs, reorderings
from schedc.verify import fast, small

from profiles import budget

BUILTINS = [schedc.load(n, p, strict_params=False) for n, p in (
    ("1f1b", {"P": 3, "M": 4}), ("gpipe", {"P": 2, "M": 3}), ("interleaved_1f1b", {"P": 2, "V": 2, "M": 4}),
    ("zb_h1", {"P": 3, "M": 4}), ("zbv", {"P": 2, "M": 3}), ("looped_bfs", {"P": 2, "V": 2, "M": 3}))]
SOUND = st.one_of(st.sampled_from(BUILTINS + [lower(p) for p in BUILTINS]),
                  programs(max_ranks=4, max_microbatches=4, placements=("loop", "vshape", "table")),
                  lowered_programs(max_ranks=4, max_microbatches=4, placements=("loop", "vshape", "table")))


@st.composite
def _swapped(draw, program):
    """The program with two neighbouring steps of a rank swapped: in a lowered program, often a
    send and a receive that now wait on each other across ranks (a deadlock) or cross on a channel."""
    ranks = [list(steps) for steps in program.ranks]
    r = draw(st.sampled_from([r for r, steps in enumerate(ranks) if len(steps) > 1]))
    i = draw(st.integers(0, len(ranks[r]) - 2))
    ranks[r][i], ranks[r][i + 1] = ranks[r][i + 1], ranks[r][i]
    return replace(program, ranks=tuple(map(tuple, ranks)))


# sound, moved (deadlocks, crossed messages, late receives), and broken in every way the strategies know;
# the lowered built-ins with neighbours swapped most often: they reach the run and the message pairing
SWAPPED = st.sampled_from([lower(p) for p in BUILTINS]).flatmap(_swapped)
CASES = st.one_of(SWAPPED, SOUND.flatmap(
    lambda p: st.one_of(st.just(p), reorderings(p, max_moves=4).map(lambda m: m.program),
                        mutations(p).map(lambda m: m.program))))
LIMITS = (65_536, 1_000_000, 1_000_000)


@budget(300)
@given(CASES, st.sampled_from(["rendezvous", "eager"]))
def test_the_small_path_decides_as_the_array_path(program, semantics):
    sem = Semantics.parse(semantics)  # (overlapped pairs too: both read their parts from the columns)
    assert small.quick_check(program, sem, None) == fast.array_check(program, sem, None)


def _csv(program) -> str | None:
    """The program as a PyTorch CSV, if it can be written as one (no groups)."""
    rows = tuple(tuple(steps) for steps in program.ranks)
    if any(len(st.parts) > 1 for row in rows for st in row):
        return None
    return TorchCsv(rows).dumps()


@budget(150)
@given(CASES, st.sampled_from(["", "\n", ",,\n"]))
def test_a_small_csv_reads_and_checks_as_the_array_reader_has_it(program, tail):
    text = _csv(program)
    if text is None:
        return
    text += tail  # (an empty rank; empty cells)
    ours, arrays = _read_small(text, "t.csv", "t", LIMITS), _read_arrays(text, "t.csv", "t", LIMITS)
    assert (ours is None) == (arrays is None)
    if ours is None:
        return
    n = len(ours.ranks.op)
    fresh = _read_small(text, "t.csv", "t", LIMITS)  # one action's span, before any other is asked for
    alone = [(s.line, s.column, s.end_column, s.rank, s.step) for s in (fresh.ranks.spans[i] for i in range(-n, n))]
    every = [(s.line, s.column, s.end_column, s.rank, s.step) for s in arrays.ranks.spans[:]]
    assert alone == every + every
    assert run_checks(ours).to_dict() == run_checks(arrays).to_dict()
    assert run_checks(ours).render() == run_checks(arrays).render()


SENDS_FIRST = ("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"  # each rank sends before it receives:
               "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n")  # a deadlock under rendezvous only
RECEIVES_FIRST = ("0F0,0RECV_B0,0SEND_F0,0B0\n"  # rank 0 waits for a gradient before sending what makes it
                  "1RECV_F0,1F0,1B0,1SEND_B0\n")
CROSSED = ("0F0,0F1,0SEND_F1,0SEND_F0,0RECV_B0,0RECV_B1,0B0,0B1\n"  # the second send meets the first receive
           "1RECV_F0,1RECV_F1,1F0,1F1,1B0,1B1,1SEND_B0,1SEND_B1\n")


def test_deadlocks_and_crossed_messages_of_a_small_csv_go_to_the_detailed_checks():
    for text, cleared in ((SENDS_FIRST, {"rendezvous": False, "eager": True}),
                          (RECEIVES_FIRST, {"rendezvous": False, "eager": False}),
                          (CROSSED, {"rendezvous": False, "eager": False})):
        program = _read_small(text, "t.csv", "t", LIMITS)
        for semantics, clear in cleared.items():
            sem = Semantics.parse(semantics)
            assert (small.quick_check(program, sem, None) is not None) == clear, (text, semantics)
            assert small.quick_check(program, sem, None) == fast.array_check(program, sem, None)
            assert run_checks(program, semantics=sem).ok is clear


def _with_stage_ops(text: str, where: int, rank_shift: int) -> str:
    """The CSV with torch's per-stage operations put in as torch's runtime CSVs hold them: each
    rank's first stage gets UNSHARD at its row's start, RESHARD and REDUCE_GRAD at its end; `where`
    moves the UNSHARD further in, `rank_shift` names a stage of another rank (off its rank)."""
    rows = [row.split(",") if row else [] for row in text.splitlines()]
    out = []
    for r, cells in enumerate(rows):
        stages = [int(c[:len(c) - len(c.lstrip("0123456789"))]) for c in cells if c]
        if not stages:
            out.append(",".join(cells))
            continue
        s = abs(stages[0] + rank_shift)  # (a shift from stage 0 names stage 1)
        cells = cells[:where] + [f"{s}UNSHARD"] + cells[where:] + [f"{stages[0]}REDUCE_GRAD", f"{stages[0]}RESHARD"]
        out.append(",".join(cells))
    return "\n".join(out) + "\n"


@budget(150)
@given(CASES, st.integers(0, 3), st.sampled_from([0, 0, 0, 1, -1]), st.sampled_from(["rendezvous", "eager"]))
def test_a_small_csv_with_torchs_per_stage_operations_is_decided_as_the_array_path_decides(
        program, where, rank_shift, semantics):
    # torch's CSVs hold UNSHARD, RESHARD and REDUCE_GRAD: the small path counts their steps and
    # asks only that each be on its stage's rank, as the array path does (without replicas they
    # wait for nothing); what it clears, the detailed checks clear with the same numbers
    text = _csv(program)
    if text is None:
        return
    read = _read_small(_with_stage_ops(text, where, rank_shift), "t.csv", "t", LIMITS)
    if read is None:
        return
    sem = Semantics.parse(semantics)
    clear = small.quick_check(read, sem, None)
    assert clear == fast.array_check(read, sem, None)
    if clear is not None:
        detailed = run_checks(read, semantics=sem, fast=False)
        assert detailed.ok and detailed.peak_activation == clear.peak_activation
    assert run_checks(read, semantics=sem).to_dict() == run_checks(read, semantics=sem, fast=False).to_dict()


def test_a_small_csv_reads_the_same_when_its_cells_are_new_or_the_cell_cache_fills(monkeypatch):
    from schedc.interop import csv_columns
    text = _csv(lower(BUILTINS[0]))
    expected = _read_arrays(text, "t.csv", "t", LIMITS)
    for most in (1 << 16, 5):  # (a cache of 5 cells is cleared several times while the file is read)
        monkeypatch.setattr(csv_columns, "MAX_PARSED", most)
        monkeypatch.setattr(csv_columns, "_PARSED", {})
        assert _read_small(text, "t.csv", "t", LIMITS) == expected
        assert _read_small(text, "t.csv", "t", LIMITS) == expected  # (now from the cache)


def test_a_small_csv_has_every_stages_default_times_and_sizes():
    from schedc.interop.csv_columns import _defaults
    from schedc.ir import Annotations
    for S, R in ((1, 1), (4, 4), (8, 3), (3, 8)):
        assert _defaults(S, R) == Annotations().complete(S, R)


@budget(60)
@given(SOUND, st.booleans())
def test_a_clear_reports_peaks_are_made_when_asked_and_are_the_detailed_paths(program, lowered):
    """The fast paths' report shows its peak sizes without making the peak actions (their spans are
    found in the file); asked for, each rank's peak is the detailed walk's: size, step and action."""
    program = lower(program) if lowered else program
    quick = run_checks(program)
    if not isinstance(quick._peaks, fast.Clear):
        return  # (not cleared by a fast path)
    shown = quick.to_dict()
    assert isinstance(quick._peaks, fast.Clear) and "peak memory" in quick.summary()
    detailed = run_checks(program, fast=False)
    assert shown["peak_memory"] == detailed.to_dict()["peak_memory"]
    assert ([(pk.rank, pk.memory, pk.step, pk.action) for pk in quick.peak_memory]
            == [(pk.rank, pk.memory, pk.step, pk.action) for pk in detailed.peak_memory])
