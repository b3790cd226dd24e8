"""Property-based tests of schedc's core: valid-by-construction programs and their mutations.

A test-local Hypothesis strategy builds random *valid* compute-level programs: R ranks, V chunks
per rank, S = R*V stages placed `s % R`, M microbatches, each stage with a fused or a split
backward; every rank's list comes from one random topological order of the dependency DAG of
DESIGN.md ("Data dependencies"), so the program is valid by construction (no filtering). Such
programs must check ok, survive every text/CSV/JSON round trip, and lower to a comms-level program
that checks ok. Mutations of them are judged against an oracle written here, independently of
schedc's own checker. Every built-in schedule is compiled at several (P, M, V).
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict, deque
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schedc
from schedc.api import load_text
from schedc.compiler import compile_schedule
from schedc.errors import SchedcError
from schedc.interop.ir_json import dumps_ir, read_ir_json
from schedc.interop.torch_csv import read_torch_csv, to_torch_csv
from schedc.ir import Action, Compound, CompoundKind, Op, Program, StageMemory, format_step, parse_step
from schedc.parse import parse
from schedc.passes import lower
from schedc.resources import builtin_schedules
from schedc.verify.execute import Semantics, execute

FAST = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
COMPUTE = (Op.F, Op.B, Op.I, Op.W)


# ---------------------------------------------------------------------------------------------
# The strategy: valid compute-level programs, by construction.
# ---------------------------------------------------------------------------------------------
def _deps(op: Op, s: int, m: int, S: int, split: tuple[bool, ...]) -> list[tuple[Op, int, int]]:
    """DESIGN.md's data dependencies, written out here (not taken from schedc.deps)."""
    if op is Op.F:
        return [(Op.F, s - 1, m)] if s > 0 else []
    if op in (Op.B, Op.I):
        out = [(Op.F, s, m)]
        if s < S - 1:
            out.append((Op.I if split[s + 1] else Op.B, s + 1, m))
        return out
    assert op is Op.W
    return [(Op.I, s, m)]


@st.composite
def valid_programs(draw, max_ranks: int = 4, max_chunks: int = 2, max_mb: int = 6,
                   overlap: bool = True) -> Program:
    R = draw(st.integers(1, max_ranks), label="ranks")
    V = draw(st.integers(1, max_chunks), label="chunks")
    M = draw(st.integers(1, max_mb), label="microbatches")
    S = R * V
    placement = tuple(s % R for s in range(S))
    split = tuple(draw(st.lists(st.booleans(), min_size=S, max_size=S), label="split backward"))
    use_overlap = overlap and draw(st.booleans(), label="overlap pairs")

    nodes = []
    for s in range(S):
        for m in range(M):
            nodes.append((Op.F, s, m))
            nodes.extend([(Op.I, s, m), (Op.W, s, m)] if split[s] else [(Op.B, s, m)])
    waiting = {n: set(_deps(*n, S, split)) for n in nodes}
    users = defaultdict(list)
    for n, ds in waiting.items():
        for d in ds:
            users[d].append(n)
    ready = sorted(n for n, ds in waiting.items() if not ds)
    ranks: list[list] = [[] for _ in range(R)]

    def finish(n):
        for u in users[n]:
            waiting[u].discard(n)
            if not waiting[u]:
                ready.append(u)
        ready.sort()

    while ready:
        n = ready.pop(draw(st.integers(0, len(ready) - 1)))
        op, s, m = n
        partner = None
        if use_overlap and op is Op.F:
            # an F and a B that are ready together on the same rank may run as one OVERLAP_F_B
            candidates = [x for x in ready if x[0] is Op.B and placement[x[1]] == placement[s]]
            if candidates and draw(st.integers(0, 3)) == 0:
                partner = candidates[draw(st.integers(0, len(candidates) - 1))]
                ready.remove(partner)
        if partner is None:
            ranks[placement[s]].append(Action(op, s, m))
            finish(n)
        else:
            ranks[placement[s]].append(Compound(CompoundKind.OVERLAP_F_B,
                                                (Action(op, s, m), Action(*partner))))
            finish(n)
            finish(partner)
    assert all(not ds for ds in waiting.values())
    return Program(name="prop", num_ranks=R, num_stages=S, num_microbatches=M, placement=placement,
                   ranks=tuple(tuple(r) for r in ranks))


# ---------------------------------------------------------------------------------------------
# An oracle for compute-level programs, independent of schedc.lint / schedc.verify.
# ---------------------------------------------------------------------------------------------
def oracle_problems(p: Program) -> list[str]:
    """Why a compute-level program is invalid (empty list: valid). DESIGN.md, in a few lines."""
    S, M = p.num_stages, p.num_microbatches
    problems = []
    where: dict[tuple[Op, int, int], list[tuple[int, int]]] = defaultdict(list)
    for r, steps in enumerate(p.ranks):
        for i, step in enumerate(steps):
            for a in step.parts:
                if a.op not in COMPUTE:
                    problems.append(f"not compute: {format_step(a)}")
                    continue
                if not (0 <= a.stage < S and 0 <= a.microbatch < M):
                    problems.append(f"index: {format_step(a)}")
                    continue
                if p.placement[a.stage] != r:
                    problems.append(f"wrong rank: {format_step(a)} on {r}")
                where[(a.op, a.stage, a.microbatch)].append((r, i))
    if problems:
        return problems
    for s in range(S):
        for m in range(M):
            n = {op: len(where[(op, s, m)]) for op in COMPUTE}
            if n[Op.F] != 1 or not ((n[Op.B], n[Op.I], n[Op.W]) in ((1, 0, 0), (0, 1, 1))):
                problems.append(f"counts of ({s},{m}): {n}")
    if problems:
        return problems
    # happens-before graph over steps: program order + data edges; valid iff acyclic
    def producer(op, s, m):
        (loc,) = where[(op, s, m)]
        return loc

    edges: dict[tuple[int, int], set] = defaultdict(set)
    indeg: Counter = Counter()
    all_nodes = [(r, i) for r, steps in enumerate(p.ranks) for i in range(len(steps))]
    for r, steps in enumerate(p.ranks):
        for i in range(len(steps) - 1):
            edges[(r, i)].add((r, i + 1))
    for r, steps in enumerate(p.ranks):
        for i, step in enumerate(steps):
            for a in step.parts:
                s, m = a.stage, a.microbatch
                if a.op is Op.F:
                    need = [(Op.F, s - 1, m)] if s > 0 else []
                elif a.op in (Op.B, Op.I):
                    need = [(Op.F, s, m)]
                    if s < S - 1:
                        need.append((Op.I if where[(Op.I, s + 1, m)] else Op.B, s + 1, m))
                else:
                    need = [(Op.I, s, m)]
                for d in need:
                    edges[producer(*d)].add((r, i))  # a self-edge is a cycle: the step needs itself
    for u, vs in edges.items():
        for v in vs:
            indeg[v] += 1
    queue = deque(n for n in all_nodes if indeg[n] == 0)
    seen = 0
    while queue:
        u = queue.popleft()
        seen += 1
        for v in edges.get(u, ()):
            indeg[v] -= 1
            if indeg[v] == 0:
                queue.append(v)
    if seen != len(all_nodes):
        problems.append("cycle: no order of the steps respects program order and data")
    return problems


def compute_only(steps) -> list:
    return [st_ for st_ in steps if all(a.op in COMPUTE for a in st_.parts)]


def codes(report) -> list[str]:
    return [d.code for d in report.errors]


# ---------------------------------------------------------------------------------------------
# Valid programs
# ---------------------------------------------------------------------------------------------
@FAST
@given(valid_programs())
def test_valid_programs_check_ok(p):
    assert oracle_problems(p) == []  # the strategy and the oracle agree
    report = schedc.check(p)
    assert report.ok, report.render()
    assert report.deadlock is None and report.mismatches == []
    json.dumps(report.to_dict())  # the --json report is serialisable
    assert len(report.peak_activation) == p.num_ranks


@FAST
@given(valid_programs())
def test_compact_text_round_trips(p):
    rebuilt = []
    for steps in p.ranks:
        row = []
        for step in steps:
            text = format_step(step)
            again = parse_step(text)
            assert again == step, text
            assert format_step(again) == text
            row.append(again)
        rebuilt.append(tuple(row))
    assert p.with_ranks(rebuilt) == p


@FAST
@given(valid_programs())
def test_torch_csv_compute_round_trips(p):
    text = to_torch_csv(p, "compute").dumps()
    csv = read_torch_csv(text, "prop.csv")
    back = csv.to_program()
    assert back.ranks == p.ranks
    # every stage appears, so the inferred shape is the real one
    assert (back.num_ranks, back.num_stages, back.num_microbatches, back.placement) == \
        (p.num_ranks, p.num_stages, p.num_microbatches, p.placement)
    assert csv.dumps() == text
    assert read_torch_csv(csv.dumps(), "again.csv").dumps() == text
    assert schedc.check(back).ok


@FAST
@given(valid_programs())
def test_torch_csv_comms_round_trips(p):
    lowered = lower(p)
    text = to_torch_csv(p, "comms").dumps()
    back = read_torch_csv(text, "prop.csv").to_program()
    assert back.ranks == lowered.ranks  # lower() makes no groups, so nothing is flattened
    assert back.placement == p.placement
    assert read_torch_csv(text).dumps() == text
    report = schedc.check(back)
    assert report.ok, report.render()


@FAST
@given(valid_programs())
def test_ir_json_round_trips(p):
    text = dumps_ir(p)
    back = read_ir_json(text, "prop.json")
    assert back == p
    assert dumps_ir(back) == text
    lowered = lower(p)
    assert read_ir_json(dumps_ir(lowered)) == lowered


@FAST
@given(valid_programs())
def test_lowering_checks_ok_and_keeps_compute_order(p):
    lowered = lower(p)
    if p.num_ranks > 1:  # stages 0 and 1 sit on ranks 0 and 1: something crosses
        assert lowered.level == "comms"
    else:
        assert lowered == p  # one rank: nothing to send
    for before, after in zip(p.ranks, lowered.ranks, strict=True):
        assert compute_only(after) == list(before)
    report = schedc.check(lowered)
    assert report.ok, report.render()
    # each value that crosses ranks is sent exactly once and received exactly once
    sends = Counter((a.op, a.stage, a.microbatch) for _, _, a in lowered.actions() if a.op.is_comm)
    assert all(n == 1 for n in sends.values())
    crossing = 0
    for _, _, a in p.actions():
        if a.op is Op.F and a.stage < p.num_stages - 1 and p.placement[a.stage + 1] != p.placement[a.stage]:
            crossing += 1
        if a.op in (Op.B, Op.I) and a.stage > 0 and p.placement[a.stage - 1] != p.placement[a.stage]:
            crossing += 1
    assert sum(1 for _, _, a in lowered.actions() if a.op.is_comm) == 2 * crossing
    assert lower(lowered) == lowered  # lowering is idempotent


@FAST
@given(valid_programs())
def test_execute_finishes(p):
    lowered = lower(p)
    for sem in ("rendezvous", "eager", "bounded:1", "bounded:3"):
        s = Semantics.parse(sem)
        out = execute(p, s)
        assert out.finished, (sem, out.waits)
        assert out.pcs == tuple(len(r) for r in p.ranks)
        out = execute(lowered, s)
        assert out.finished, (sem, out.waits)
        assert out.pcs == tuple(len(r) for r in lowered.ranks)


@FAST
@given(valid_programs(max_ranks=3, max_mb=4))
def test_literal_form_compiles_to_same_program(p):
    """A program pasted in the literal form (`rank 0: 0F0 ...`) compiles back to itself."""
    lines = [f"schedule pasted {{", f"  stages {p.num_stages}", f"  microbatches {p.num_microbatches}",
             "  place [" + ", ".join(map(str, p.placement)) + "]"]
    for r, steps in enumerate(p.ranks):
        lines.append(f"  rank {r}: " + " ".join(format_step(s) for s in steps))
    lines.append("}")
    back = load_text("\n".join(lines) + "\n", "pasted.pp")
    assert back.ranks == p.ranks
    assert (back.num_ranks, back.num_stages, back.num_microbatches, back.placement) == \
        (p.num_ranks, p.num_stages, p.num_microbatches, p.placement)
    assert schedc.check(back).ok


# ---------------------------------------------------------------------------------------------
# Mutations of valid programs
# ---------------------------------------------------------------------------------------------
def _ranks_list(p):
    return [list(r) for r in p.ranks]


@FAST
@given(valid_programs(), st.data())
def test_swapping_adjacent_steps_is_judged_like_the_oracle(p, data):
    candidates = [r for r, steps in enumerate(p.ranks) if len(steps) >= 2]
    r = data.draw(st.sampled_from(candidates), label="rank")
    i = data.draw(st.integers(0, len(p.ranks[r]) - 2), label="index")
    ranks = _ranks_list(p)
    ranks[r][i], ranks[r][i + 1] = ranks[r][i + 1], ranks[r][i]
    q = p.with_ranks(ranks)
    report = schedc.check(q)  # never raises
    problems = oracle_problems(q)
    if report.ok:
        assert problems == [], problems
        assert execute(q).finished
        low = lower(q)
        assert schedc.check(low).ok
    else:
        # a valid program must not be reported invalid
        assert problems, report.render()
        assert report.errors and all(d.code for d in report.errors)
        report.render()
        json.dumps(report.to_dict())
        with pytest.raises(SchedcError):  # a swap only breaks the order: no comms can be inserted
            lower(q)


@FAST
@given(valid_programs(), st.data())
def test_dropping_a_step_is_never_ok(p, data):
    r = data.draw(st.sampled_from([r for r, steps in enumerate(p.ranks) if steps]), label="rank")
    i = data.draw(st.integers(0, len(p.ranks[r]) - 1), label="index")
    ranks = _ranks_list(p)
    dropped = ranks[r].pop(i)
    q = p.with_ranks(ranks)
    report = schedc.check(q)
    assert not report.ok, f"dropped {format_step(dropped)} but check says ok"
    assert "missing" in codes(report), codes(report)
    assert oracle_problems(q)
    report.render()
    json.dumps(report.to_dict())


@FAST
@given(valid_programs(), st.data())
def test_duplicating_a_step_is_never_ok(p, data):
    r = data.draw(st.sampled_from([r for r, steps in enumerate(p.ranks) if steps]), label="rank")
    i = data.draw(st.integers(0, len(p.ranks[r]) - 1), label="index")
    j = data.draw(st.integers(0, len(p.ranks[r])), label="insert at")
    ranks = _ranks_list(p)
    ranks[r].insert(j, ranks[r][i])
    q = p.with_ranks(ranks)
    report = schedc.check(q)
    assert not report.ok, f"duplicated {format_step(ranks[r][j])} but check says ok"
    assert "duplicate" in codes(report), codes(report)
    assert oracle_problems(q)
    report.render()
    json.dumps(report.to_dict())


@FAST
@given(valid_programs(), st.data())
def test_moving_a_step_to_another_rank_is_never_ok(p, data):
    r = data.draw(st.sampled_from([r for r, steps in enumerate(p.ranks) if steps]), label="rank")
    others = [x for x in range(p.num_ranks) if x != r]
    if not others:
        others = [r]
    dest = data.draw(st.sampled_from(others), label="dest")
    i = data.draw(st.integers(0, len(p.ranks[r]) - 1), label="index")
    ranks = _ranks_list(p)
    step = ranks[r].pop(i)
    j = data.draw(st.integers(0, len(ranks[dest])), label="insert at")
    ranks[dest].insert(j, step)
    q = p.with_ranks(ranks)
    report = schedc.check(q)
    if dest != r:
        assert not report.ok
        assert "wrong-rank" in codes(report), codes(report)
    assert report.ok == (oracle_problems(q) == []), (report.render(), oracle_problems(q))


@FAST
@given(valid_programs(), st.data())
def test_reordering_a_rank_is_judged_like_the_oracle(p, data):
    """Any permutation of one rank's list: ok exactly when the oracle finds an order."""
    r = data.draw(st.sampled_from(range(p.num_ranks)), label="rank")
    perm = data.draw(st.permutations(p.ranks[r]), label="order")
    ranks = _ranks_list(p)
    ranks[r] = list(perm)
    q = p.with_ranks(ranks)
    report = schedc.check(q)
    problems = oracle_problems(q)
    assert report.ok == (problems == []), (report.render(), problems)
    if not report.ok:
        assert report.deadlock is not None or "order" in codes(report), report.render()


def comms_oracle_problems(p: Program, semantics: str = "rendezvous") -> list[str]:
    """Why a comms-level program is unsound, by DESIGN.md's happens-before graph (independent of
    schedc): values are local (computed or received earlier on the rank); messages pair FIFO per
    ordered rank pair with equal payloads; program order + pairs (a rendezvous pair one node, an
    eager pair an edge send -> receive) must be acyclic."""
    S = p.num_stages
    problems = oracle_problems(p.with_ranks([compute_only(x) for x in p.ranks]))
    problems = [x for x in problems if not x.startswith("cycle")]  # the full graph decides order
    sends, recvs = defaultdict(list), defaultdict(list)
    for r, steps in enumerate(p.ranks):
        have = set()
        for i, step in enumerate(steps):
            made = []
            for a in step.parts:
                s, m = a.stage, a.microbatch
                if p.placement[s] != r:
                    problems.append(f"wrong rank: {format_step(a)} on {r}")
                    continue
                need, value = [], None
                if a.op is Op.F:
                    need, value = ([("act", s - 1, m)] if s > 0 else []), ("act", s, m)
                elif a.op in (Op.B, Op.I):
                    need = [("act", s, m)] + ([("grad", s + 1, m)] if s < S - 1 else [])
                    value = ("grad", s, m)
                elif a.op is Op.W:
                    need = [("grad", s, m)]
                elif a.op in (Op.SEND_F, Op.SEND_B):
                    kind, peer = ("act", s + 1) if a.op is Op.SEND_F else ("grad", s - 1)
                    if not 0 <= peer < S or p.placement[peer] == r:
                        problems.append(f"bad peer: {format_step(a)}")
                        continue
                    need = [(kind, s, m)]
                    sends[(r, p.placement[peer])].append(((kind, s, m), (r, i)))
                elif a.op in (Op.RECV_F, Op.RECV_B):
                    kind, peer = ("act", s - 1) if a.op is Op.RECV_F else ("grad", s + 1)
                    if not 0 <= peer < S or p.placement[peer] == r:
                        problems.append(f"bad peer: {format_step(a)}")
                        continue
                    value = (kind, peer, m)
                    recvs[(p.placement[peer], r)].append(((kind, peer, m), (r, i)))
                else:
                    problems.append(f"unexpected op: {format_step(a)}")
                for v in need:
                    if v not in have:
                        problems.append(f"{format_step(a)} on rank {r} lacks {v}")
                if value is not None:
                    made.append(value)
            have.update(made)
    pairs = []
    for ch in set(sends) | set(recvs):
        a, b = sends.get(ch, []), recvs.get(ch, [])
        if len(a) != len(b):
            problems.append(f"channel {ch}: {len(a)} sends, {len(b)} receives")
        for (va, at_a), (vb, at_b) in zip(a, b):
            if va != vb:
                problems.append(f"channel {ch}: {va} meets {vb}")
            pairs.append((at_a, at_b))
    if problems:
        return problems
    # happens-before graph over steps; a rendezvous pair is one node
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    edges = set()
    for r, steps in enumerate(p.ranks):
        for i in range(len(steps)):
            find((r, i))
    if semantics == "rendezvous":
        for x, y in pairs:
            parent[find(x)] = find(y)
    else:
        edges.update(pairs)
    for r, steps in enumerate(p.ranks):
        edges.update(((r, i), (r, i + 1)) for i in range(len(steps) - 1))
    graph, indeg = defaultdict(set), Counter()
    for x, y in edges:
        x, y = find(x), find(y)
        if y not in graph[x]:
            graph[x].add(y)
            indeg[y] += 1
    nodes = {find(x) for x in list(parent)}
    queue = deque(n for n in nodes if indeg[n] == 0)
    seen = 0
    while queue:
        u = queue.popleft()
        seen += 1
        for v in graph[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                queue.append(v)
    return [] if seen == len(nodes) else [f"cycle in the happens-before graph under {semantics}"]


@FAST
@given(valid_programs())
def test_lowered_programs_satisfy_the_comms_oracle(p):
    low = lower(p)
    assert comms_oracle_problems(low, "rendezvous") == []
    assert comms_oracle_problems(low, "eager") == []


@FAST
@given(valid_programs(), st.data())
def test_mutated_lowered_programs_are_judged_like_the_oracle(p, data):
    """Move/drop/duplicate a step of a comms-level program: check never raises; it says ok exactly
    when the happens-before oracle does (both under rendezvous and eager sends)."""
    low = lower(p)
    ranks = _ranks_list(low)
    r = data.draw(st.sampled_from([r for r, steps in enumerate(ranks) if steps]), label="rank")
    i = data.draw(st.integers(0, len(ranks[r]) - 1), label="index")
    kind = data.draw(st.sampled_from(["move", "swap", "drop", "dup"]), label="mutation")
    if kind == "swap" and len(ranks[r]) >= 2:
        i = min(i, len(ranks[r]) - 2)
        ranks[r][i], ranks[r][i + 1] = ranks[r][i + 1], ranks[r][i]
    elif kind == "move":
        step = ranks[r].pop(i)
        ranks[r].insert(data.draw(st.integers(0, len(ranks[r])), label="to"), step)
    elif kind == "drop":
        ranks[r].pop(i)
    elif kind == "dup":
        ranks[r].insert(data.draw(st.integers(0, len(ranks[r])), label="at"), ranks[r][i])
    q = low.with_ranks(ranks)
    for sem in ("rendezvous", "eager"):
        report = schedc.check(q, semantics=sem)
        report.render()
        json.dumps(report.to_dict())
        problems = comms_oracle_problems(q, sem)
        if kind in ("drop", "dup"):
            assert not report.ok, f"{kind} at rank {r}, step {i} of a lowered program: still ok"
        if report.ok:
            assert problems == [], (sem, problems)
            assert execute(q, Semantics.parse(sem)).finished
        else:
            assert problems, (sem, report.render())


# ---------------------------------------------------------------------------------------------
# The Z3 engine against the native executor, and memory against its own definition
# ---------------------------------------------------------------------------------------------
def _mutate(p: Program, data) -> Program:
    ranks = _ranks_list(p)
    r = data.draw(st.sampled_from([r for r, steps in enumerate(ranks) if steps]), label="rank")
    if data.draw(st.booleans(), label="mutate"):
        step = ranks[r].pop(data.draw(st.integers(0, len(ranks[r]) - 1), label="from"))
        ranks[r].insert(data.draw(st.integers(0, len(ranks[r])), label="to"), step)
    return p.with_ranks(ranks)


Z3 = settings(FAST, max_examples=25)


@Z3
@given(valid_programs(max_ranks=3, max_mb=4), st.booleans(), st.sampled_from(["rendezvous", "eager", "bounded:1"]),
       st.data())
def test_z3_engine_agrees_with_the_native_executor(p, lowered, sem, data):
    q = _mutate(lower(p) if lowered else p, data)
    native = schedc.check(q, semantics=sem)
    solved = schedc.check(q, semantics=sem, engine="z3", timeout=20)
    assert solved.ok is not None, solved.unknown  # tiny programs: the solver must decide
    assert solved.ok == native.ok, (native.render(), solved.render())
    assert (solved.deadlock is None) == (native.deadlock is None)
    if solved.ok:
        # the witness is a completion time per step, increasing along every rank
        assert solved.witness is not None
        assert [len(row) for row in solved.witness] == [len(steps) for steps in q.ranks]
        for row in solved.witness:
            assert all(a < b for a, b in zip(row, row[1:])), row
    json.dumps(solved.to_dict())


@pytest.mark.parametrize("engine", ["native", "z3"])
def test_engines_see_a_forward_before_its_input_on_the_same_rank(engine):
    """Stages 0 and 1 on one rank, F(1,0) listed before F(0,0): F(1,0) waits for ever."""
    p = Program("same-rank", 1, 2, 1, (0, 0), ((Action(Op.F, 1, 0), Action(Op.F, 0, 0),
                                               Action(Op.B, 1, 0), Action(Op.B, 0, 0)),))
    assert oracle_problems(p)  # a cycle: data puts F(0,0) before F(1,0), program order after it
    report = schedc.check(p, engine=engine)
    assert report.ok is False, f"{engine}: {report.render() or 'ok'}"
    assert report.deadlock is not None or "order" in codes(report)


@st.composite
def with_memory(draw, p: Program) -> Program:
    sizes = []
    for _ in range(p.num_stages):
        act = draw(st.integers(1, 3))
        sizes.append(StageMemory(act=float(act), weight=float(draw(st.integers(0, act))),
                                 out=float(draw(st.integers(0, 2)))))
    return replace(p, annotations=replace(p.annotations, stage_memory=tuple(sizes)))


@FAST
@given(valid_programs(max_ranks=3, max_mb=4).flatmap(with_memory))
def test_memory_grows_with_buffering_and_limits_bite_at_the_peak(p):
    low = lower(p)
    peaks = {}
    for sem in ("rendezvous", "bounded:1", "bounded:2", "eager"):
        report = schedc.check(low, semantics=sem)
        assert report.ok, (sem, report.render())
        peaks[sem] = [pk.memory for pk in report.peak_memory]
        assert len(peaks[sem]) == p.num_ranks
        # never below the activations alone (DESIGN.md: F allocates a, B frees a, I frees a - w, W frees w)
        assert all(m >= a - 1e-9 for m, a in zip(peaks[sem], report.peak_activation)), sem
    # more buffering admits more runs, so the worst case can only grow
    for weaker, stronger in (("rendezvous", "bounded:1"), ("bounded:1", "bounded:2"), ("bounded:2", "eager")):
        assert all(a <= b + 1e-9 for a, b in zip(peaks[weaker], peaks[stronger])), (weaker, stronger, peaks)
    top = max(peaks["rendezvous"])
    assert schedc.check(low, memory_limit=top).ok
    assert schedc.check(low, memory_limit={r: m for r, m in enumerate(peaks["rendezvous"])}).ok
    if top >= 1:
        tight = schedc.check(low, memory_limit=top - 0.5)
        assert not tight.ok and "memory" in codes(tight)


# ---------------------------------------------------------------------------------------------
# Built-in schedules
# ---------------------------------------------------------------------------------------------
BUILTINS = builtin_schedules()
GRID = [(P, M, V) for P in (1, 2, 3, 4) for M in (1, 2, 3, 4, 5, 8) for V in (1, 2, 3)]


def test_builtins_exist():
    assert {"1f1b", "gpipe", "interleaved_1f1b", "looped_bfs"} <= set(BUILTINS)


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_builtin_schedules_compile_check_and_lower(name):
    text = BUILTINS[name].read_text(encoding="utf-8")
    tree = parse(text, str(BUILTINS[name]))
    declared = {p.name for p in tree.params}
    seen = set()
    for P, M, V in GRID:
        params = {k: v for k, v in {"P": P, "M": M, "V": V}.items() if k in declared}
        key = tuple(sorted(params.items()))
        if key in seen:
            continue
        seen.add(key)
        if name == "interleaved_1f1b" and M % max(1, M // P) != 0:
            with pytest.raises(SchedcError) as info:
                compile_schedule(tree, params)
            assert info.value.code == "require"
            continue
        try:
            p = compile_schedule(tree, params)
        except SchedcError as e:  # outside the schedule's declared range
            assert e.code == "require", e.render()
            continue
        assert (p.num_ranks, p.num_microbatches) == (P, M), key
        if "place loop" in text:
            v = params.get("V", 1)
            assert p.num_stages == P * v and p.placement == tuple(s % P for s in range(P * v)), key
        else:  # V-shaped: stage s and 2P-1-s on rank s
            assert p.num_stages == 2 * P and all(p.placement[s] == p.placement[2 * P - 1 - s] == s
                                                 for s in range(P)), key
        assert p.level == "compute"
        assert oracle_problems(p) == [], (key, oracle_problems(p))
        report = schedc.check(p)
        assert report.ok, (key, report.render())
        if name == "1f1b":  # DESIGN.md: 1F1B peak activations of rank r = min(P - r, M)
            assert list(report.peak_activation) == [min(P - r, M) for r in range(P)], key
        if name == "gpipe":
            assert list(report.peak_activation) == [M] * P, key
        low = lower(p)
        assert (P == 1) or low.level == "comms"
        low_report = schedc.check(low)
        assert low_report.ok, (key, low_report.render())
        for sem in ("eager", "bounded:1"):
            assert schedc.check(low, semantics=sem).ok, (key, sem)
        for before, after in zip(p.ranks, low.ranks, strict=True):
            assert compute_only(after) == list(before)
        # and its exports read back
        back = read_torch_csv(to_torch_csv(p, "comms").dumps()).to_program()
        assert back.ranks == low.ranks
        assert read_ir_json(dumps_ir(p)) == p


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_builtin_defaults_load_by_name(name):
    p = schedc.load(name)
    assert schedc.check(p).ok
    assert p.name == name or p.name.replace("-", "_") == name


# ---------------------------------------------------------------------------------------------
# The public API as documented (schedc/__init__.py): `schedc.check(program) -> Report`.
# ---------------------------------------------------------------------------------------------
def test_public_check_is_the_function_whatever_was_imported_first():
    # By now every submodule (schedc.api, schedc.report, the CLI, interop) has been imported, as in
    # any program that uses them too; `schedc.check` must still be the function, not a module.
    import schedc.cli  # noqa: F401
    import schedc.report  # noqa: F401
    assert callable(schedc.check)
    report = schedc.check(schedc.load("1f1b"))
    assert isinstance(report, schedc.Report) and report.ok
