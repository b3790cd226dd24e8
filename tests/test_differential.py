"""The verifier against an independent, deliberately plain executor, on built-ins and mutants.

`plain_run` polls every rank in turn and completes its current step when the semantics allows,
computing channel positions itself; it shares no code with schedc/verify/. On every random mutant
of a lowered built-in schedule (moved communication, swapped steps, dropped or duplicated actions)
that passes the structural checks, both engines' deadlock verdicts equal the plain run's, and each
action on a reported cycle is a step where the plain run really stays blocked.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

import schedc
from schedc.ir import Action, Op
from schedc.passes import lower

BUILTINS = [("1f1b", {"P": 3, "M": 4}), ("gpipe", {"P": 2, "M": 3}), ("interleaved_1f1b", {"P": 2, "V": 2, "M": 4}),
            ("looped_bfs", {"P": 2, "V": 2, "M": 2}), ("1f1b", {"P": 4, "M": 2})]
LOWERED = [lower(schedc.load(n, p)) for n, p in BUILTINS]
SEMANTICS = ["rendezvous", "eager", "bounded:1", "bounded:2"]


def _peer_rank(program, a):
    delta = {Op.SEND_F: 1, Op.RECV_F: -1, Op.SEND_B: -1, Op.RECV_B: 1}[a.op]
    return program.placement[a.stage + delta]


def plain_run(program, semantics: str):
    """Returns the final program counters; finished iff each equals its rank's length."""
    buffer = {"rendezvous": 0, "eager": None}.get(semantics)
    if buffer is None and semantics != "eager":
        buffer = int(semantics.split(":")[1])
    R, S = program.num_ranks, program.num_stages
    # position of the k-th send / receive on each (src, dst) channel, counted here from scratch
    send_pos, recv_pos, index = {}, {}, {}
    for r, steps in enumerate(program.ranks):
        for i, st_ in enumerate(steps):
            for a in st_.parts:
                if a.op in (Op.SEND_F, Op.SEND_B):
                    ch = (r, _peer_rank(program, a))
                    index[(r, i, a)] = len(send_pos.setdefault(ch, []))
                    send_pos[ch].append(i)
                elif a.op in (Op.RECV_F, Op.RECV_B):
                    ch = (_peer_rank(program, a), r)
                    index[(r, i, a)] = len(recv_pos.setdefault(ch, []))
                    recv_pos[ch].append(i)
    pc = [0] * R
    have = [set() for _ in range(R)]
    made = set()
    explicit = program.level == "comms"

    def inputs(a):
        s, m = a.stage, a.microbatch
        if a.op is Op.F:
            return [("F", s - 1, m)] if s > 0 else []
        if a.op in (Op.B, Op.I):
            return [("F", s, m)] + ([("G", s + 1, m)] if s < S - 1 else [])
        if a.op is Op.W:
            return [("G", s, m)]
        if a.op is Op.SEND_F:
            return [("F", s, m)]
        if a.op is Op.SEND_B:
            return [("G", s, m)]
        return []

    def can(r, i):
        for a in program.ranks[r][i].parts:
            pool = have[r] if explicit else made
            if any(v not in pool and v not in have[r] for v in inputs(a)):
                return False
            if a.op in (Op.SEND_F, Op.SEND_B):
                ch = (r, _peer_rank(program, a))
                k = index[(r, i, a)] - (buffer or 0)
                if semantics != "eager" and k >= 0:
                    posts = recv_pos.get(ch, [])
                    if k >= len(posts) or pc[ch[1]] < posts[k]:
                        return False
            if a.op in (Op.RECV_F, Op.RECV_B):
                ch = (_peer_rank(program, a), r)
                posts = send_pos.get(ch, [])
                k = index[(r, i, a)]
                if k >= len(posts) or pc[ch[0]] < posts[k]:
                    return False
        return True

    progress = True
    while progress:
        progress = False
        for r in range(R):
            if pc[r] < len(program.ranks[r]) and can(r, pc[r]):
                for a in program.ranks[r][pc[r]].parts:
                    if a.op is Op.F:
                        v = ("F", a.stage, a.microbatch)
                    elif a.op in (Op.B, Op.I):
                        v = ("G", a.stage, a.microbatch)
                    elif a.op is Op.RECV_F:
                        v = ("F", a.stage - 1, a.microbatch)
                    elif a.op is Op.RECV_B:
                        v = ("G", a.stage + 1, a.microbatch)
                    else:
                        continue
                    have[r].add(v)
                    made.add(v)
                pc[r] += 1
                progress = True
    return pc


@st.composite
def mutants(draw):
    program = draw(st.sampled_from(LOWERED))
    ranks = [list(steps) for steps in program.ranks]
    for _ in range(draw(st.integers(1, 3))):
        r = draw(st.integers(0, len(ranks) - 1))
        steps = ranks[r]
        if len(steps) < 2:
            continue
        i = draw(st.integers(0, len(steps) - 1))
        kind = draw(st.sampled_from(["move-comm", "swap", "drop", "duplicate"]))
        if kind == "move-comm":
            comm = [k for k, s in enumerate(steps) if isinstance(s, Action) and s.op.is_comm]
            if comm:
                k = draw(st.sampled_from(comm))
                item = steps.pop(k)
                steps.insert(draw(st.integers(0, len(steps))), item)
        elif kind == "swap" and i + 1 < len(steps):
            steps[i], steps[i + 1] = steps[i + 1], steps[i]
        elif kind == "drop":
            steps.pop(i)
        elif kind == "duplicate":
            steps.insert(i, steps[i])
    return program.with_ranks(ranks)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutants(), st.sampled_from(SEMANTICS))
def test_verifier_agrees_with_the_plain_executor(program, semantics):
    report = schedc.check(program, semantics=semantics)
    structural = [e for e in report.errors if e.code not in ("deadlock", "mismatch", "unmatched", "memory")]
    if structural:
        return
    pc = plain_run(program, semantics)
    finished = all(pc[r] == len(s) for r, s in enumerate(program.ranks))
    assert (report.deadlock is None) == finished
    if report.deadlock is not None:
        for w in report.deadlock.cycle:
            assert pc[w.rank] == w.step, (w, pc)
    z3 = schedc.check(program, semantics=semantics, engine="z3")
    assert (z3.deadlock is None) == finished


def test_every_lowered_builtin_finishes_in_the_plain_run():
    for program in LOWERED:
        for sem in SEMANTICS:
            pc = plain_run(program, sem)
            assert all(pc[r] == len(s) for r, s in enumerate(program.ranks)), (program.name, sem)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutants(), st.sampled_from(["rendezvous", "eager"]))
def test_fast_path_never_clears_what_the_detailed_checks_reject(program, semantics):
    from schedc.report import run_checks
    from schedc.verify.channels import Semantics
    from schedc.verify.fast import quick_check
    sem = Semantics.parse(semantics)
    detailed = run_checks(program, semantics=sem, fast=False)
    clear = quick_check(program, sem, None)
    if clear is not None:
        assert detailed.ok is True, detailed.render()
        assert clear.peak_activation == detailed.peak_activation
        assert [p.memory for p in clear.peak_memory] == [p.memory for p in detailed.peak_memory]


def test_fast_path_clears_every_lowered_builtin():
    from schedc.verify.channels import RENDEZVOUS
    from schedc.verify.fast import quick_check
    for program in LOWERED + [schedc.load(n, p) for n, p in BUILTINS]:
        clear = quick_check(program, RENDEZVOUS, None)
        assert clear is not None, program.name
        assert clear.peak_activation == schedc.report.run_checks(program, fast=False).peak_activation
