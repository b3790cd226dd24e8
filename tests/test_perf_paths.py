"""The two fast paths of `schedc check` (issue 21) against the detailed checks.

`quick_check` decides a small program in plain Python (schedc/verify/small.py) and a larger one
with arrays (`fast.array_check`); each is asked here on its own, on the same random programs, at
both levels: sound programs (with DualPipe's overlapped pairs), and moved, dropped or repeated
steps of lowered built-ins. Neither may clear what the detailed checks reject, and what they
clear carries the detailed checks' peaks (memory, step and action).
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

import schedc
from schedc.passes import lower
from schedc.report import run_checks
from schedc.resources import builtin_schedules
from schedc.rules.semantics import RENDEZVOUS, Semantics
from schedc.strategies import lowered_programs, mutations, programs, reorderings
from schedc.verify import fast, small

from profiles import budget

SMALL = [("1f1b", {"P": 3, "M": 4}), ("gpipe", {"P": 2, "M": 3}), ("interleaved_1f1b", {"P": 2, "V": 2, "M": 4}),
         ("dualpipev", {"P": 2, "M": 4}), ("zbv", {"P": 2, "M": 3})]
COMPUTE = [schedc.load(n, p) for n, p in SMALL]
LOWERED = [lower(p) for p in COMPUTE]
GENERATED = dict(max_ranks=4, max_microbatches=4, placements=("loop", "vshape", "table"))
PATHS = {"small": small.quick_check, "arrays": fast.array_check}


def _cases():
    """Generated programs (sizes drawn, messages without one) and built-ins, as they are and moved,
    dropped or repeated, at both levels."""
    variants = st.sampled_from(COMPUTE + LOWERED).flatmap(
        lambda p: st.one_of(reorderings(p), mutations(p, kinds=("drop", "duplicate")))).map(lambda m: m.program)
    compute = programs(overlap=True, memory=True, **GENERATED).map(_no_message_sizes)
    overlapped = programs(overlap=True, min_ranks=2, min_microbatches=3, max_microbatches=5)  # more pairs
    return st.one_of(compute, overlapped, lowered_programs(**GENERATED),
                     compute.flatmap(reorderings).map(lambda m: m.program), variants)


def _no_message_sizes(program):
    """The program with its stages' `out` sizes 0 (messages with a size go to the detailed checks)."""
    sizes = tuple(replace(m, out=0.0) for m in program.annotations.stage_memory)
    return replace(program, annotations=replace(program.annotations, stage_memory=sizes))


def _agrees(clear, program, semantics) -> None:
    """What a fast path cleared, the detailed checks clear too, with the same peaks."""
    if clear is None:
        return
    detailed = run_checks(program, semantics=semantics, fast=False)
    assert detailed.ok is True, detailed.render()
    assert clear.peak_activation == detailed.peak_activation
    ours = [(p.rank, p.memory, p.step, p.action) for p in clear.peak_memory]
    assert ours == [(p.rank, p.memory, p.step, p.action) for p in detailed.peak_memory]


@budget(300)
@given(_cases(), st.sampled_from(["rendezvous", "eager"]), st.sampled_from(sorted(PATHS)))
def test_a_fast_path_never_clears_what_the_detailed_checks_reject(program, semantics, path):
    sem = Semantics.parse(semantics)
    if any(program.annotations.memory_of(s).out for s in range(program.num_stages)):
        return  # (message sizes: quick_check sends these to the detailed checks before either path)
    _agrees(PATHS[path](program, sem, None), program, sem)


@budget(150)
@given(_cases(), st.sampled_from(["bounded:2", "gloo", "nccl"]))
def test_under_buffers_and_backends_only_a_compute_level_program_is_cleared(program, semantics):
    """Without messages written or sized, every semantics waits for data alone: a compute-level
    program is decided as under rendezvous, with the detailed checks' peaks under its own semantics."""
    sem = Semantics.parse(semantics)
    clear = fast.quick_check(program, sem, None)
    if program.level != "compute" or any(program.annotations.memory_of(s).out for s in range(program.num_stages)):
        assert clear is None
    _agrees(clear, program, sem)


def test_a_big_compute_level_program_under_a_backend_takes_the_fast_path():
    program = schedc.load("1f1b", {"P": 8, "M": 64})
    for semantics in ("bounded:2", "gloo", "nccl"):
        assert fast.quick_check(program, Semantics.parse(semantics), None) is not None, semantics
        assert fast.quick_check(lower(program), Semantics.parse(semantics), None) is None, semantics


@pytest.mark.parametrize("name", sorted(builtin_schedules()))
def test_the_small_path_clears_every_builtin_at_both_levels(name):
    for P, M in ((2, 4), (4, 8)):
        program = schedc.load(name, {"P": P, "M": M, "V": 2}, strict_params=False)
        for level in (program, lower(program)):
            clear = small.quick_check(level, RENDEZVOUS, None)
            assert clear is not None, (name, P, M, level.level)
            _agrees(clear, level, RENDEZVOUS)


def test_memory_limits_send_the_program_to_the_detailed_checks():
    program = schedc.load("1f1b", {"P": 4, "M": 8})  # peaks [4, 3, 2, 1]
    assert small.quick_check(program, RENDEZVOUS, {0: 4.0}) is not None
    assert small.quick_check(program, RENDEZVOUS, {0: 3.0}) is None
    assert not schedc.check(program, memory_limit=3).ok


# ---- reading a PyTorch CSV: a small file cell by cell, a large one with arrays ----
PLAIN = st.from_regex(r"[0-9]{1,3}(F|B|I|W|SEND_F|RECV_B)[0-9]{1,3}|[0-9](UNSHARD|REDUCE_GRAD)|", fullmatch=True)
ODD = st.one_of(st.sampled_from(["0F", "F0", "0BW1", "00F01", "0f0", "1234567890F0", "0F1234567890", "0 F0", '"0F0"',
                                 "0UNSHARD1"]), st.text("0123456789FBIWSEND_RCV", max_size=8))
TEXTS = st.sampled_from([PLAIN, st.one_of(PLAIN, ODD)]).flatmap(
    lambda cells: st.lists(st.lists(cells, max_size=6).map(",".join), max_size=5)).flatmap(
    lambda rows: st.sampled_from(["\n", "\r\n"]).flatmap(
        lambda end: st.sampled_from(["", end, "\r"]).map(lambda last: end.join(rows) + last)))


@pytest.mark.slow
@budget(300)
@given(TEXTS)
def test_the_small_reader_reads_what_the_array_reader_reads(text):
    from schedc.interop.csv_columns import _read_arrays, _read_small
    limits = (65_536, 1_000_000, 1_000_000)
    small, arrays = _read_small(text, "t.csv", "t", limits), _read_arrays(text, "t.csv", "t", limits)
    assert (small is None) == (arrays is None), text
    if small is None:
        return
    assert small == arrays and (small.num_ranks, small.num_stages, small.num_microbatches, small.placement) == \
        (arrays.num_ranks, arrays.num_stages, arrays.num_microbatches, arrays.placement)
    for a, b in zip((small.ranks.op, small.ranks.stage, small.ranks.microbatch),
                    (arrays.ranks.op, arrays.ranks.stage, arrays.ranks.microbatch)):
        assert a.dtype == b.dtype and a.tolist() == b.tolist()
    assert small.ranks.spans[:] == arrays.ranks.spans[:]
    assert [(s.rank, s.step) for s in small.ranks.spans[:]] == [(s.rank, s.step) for s in arrays.ranks.spans[:]]


@pytest.mark.parametrize("swap", [False, True])
def test_the_array_path_clears_overlapped_pairs_with_the_detailed_peaks(swap):
    """DualPipeV's overlapped pairs take the array path (it sent them to the detailed checks: 8M
    actions took 100 s and 3.9 GB, fuzz seed 43), also with a pair written backward first: inside a
    step allocations come before frees whatever the order of its parts."""
    from schedc.ir import Compound
    for P, M in ((2, 6), (4, 16)):
        program = schedc.load("dualpipev", {"P": P, "M": M})
        if swap:
            program = replace(program, ranks=tuple(
                tuple(replace(s, parts=s.parts[::-1]) if isinstance(s, Compound) else s for s in steps)
                for steps in program.ranks))
        for level in (program, lower(program)):
            clear = fast.array_check(level, RENDEZVOUS, None)
            assert clear is not None, (P, M, level.level)
            _agrees(clear, level, RENDEZVOUS)
