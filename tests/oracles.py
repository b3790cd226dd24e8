"""Independent oracles the property, differential and metamorphic tests judge schedc by.

Written from DESIGN.md alone; they share no code with schedc/lint.py, schedc/verify/ or
schedc/simulate.py. `oracle_problems` says why a compute-level program is invalid (its happens-before
graph of program order and data edges has a cycle, or counts and placement are wrong);
`comms_oracle_problems` does the same for a program with explicit communication (FIFO pairing,
payloads, a rendezvous pair as one node); `plain_run` polls every rank in turn and completes its
current step when the semantics allows, computing channel positions itself.
"""
from __future__ import annotations

from collections import Counter, defaultdict, deque

import schedc

from schedc.ir import CompoundKind, Op, Program, format_step

COMPUTE = (Op.F, Op.B, Op.I, Op.W)


def ends(p: Program, s: int) -> tuple[int, int]:
    """The first and the last stage of stage s's run of stages: the program's, or with routes
    (DESIGN's copies of the model, DualPipe's two directions) the run of the route through s."""
    for r in getattr(p, "routes", ()):
        if r.stages[0] <= s < r.stages[1]:
            return r.stages[0], r.stages[1] - 1
    return 0, p.num_stages - 1


def on_route(p: Program, s: int, m: int) -> bool:
    """Does microbatch m run through stage s (every one does, without routes)?"""
    routes = getattr(p, "routes", ())
    return not routes or any(r.microbatches[0] <= m < r.microbatches[1] and r.stages[0] <= s < r.stages[1]
                             for r in routes)


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
                if not (0 <= a.stage < S and 0 <= a.microbatch < M) or not on_route(p, a.stage, a.microbatch):
                    problems.append(f"index: {format_step(a)}")
                    continue
                if p.placement[a.stage] != r:
                    problems.append(f"wrong rank: {format_step(a)} on {r}")
                where[(a.op, a.stage, a.microbatch)].append((r, i))
    if problems:
        return problems
    for s in range(S):
        for m in (m for m in range(M) if on_route(p, s, m)):
            n = {op: len(where[(op, s, m)]) for op in COMPUTE}
            if n[Op.F] != 1 or (n[Op.B], n[Op.I], n[Op.W]) not in ((1, 0, 0), (0, 1, 1)):
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
                first, last = ends(p, s)
                if a.op is Op.F:
                    need = [(Op.F, s - 1, m)] if s > first else []
                elif a.op in (Op.B, Op.I):
                    need = [(Op.F, s, m)]
                    if s < last:
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


def union_find():
    """`find(x)` and `union(x, y)` of a union-find over hashable items (path halving): the step
    graphs of the oracles make a rendezvous pair one node with it."""
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(x, y):
        parent[find(x)] = find(y)
    return find, union


def compute_only(steps) -> list:
    return [st_ for st_ in steps if all(a.op in COMPUTE for a in st_.parts)]


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
                if not (0 <= s < S and (m is None or 0 <= m < p.num_microbatches)):
                    problems.append(f"index: {format_step(a)}")
                    continue
                if p.placement[s] != r:
                    problems.append(f"wrong rank: {format_step(a)} on {r}")
                    continue
                need, value = [], None
                first, last = ends(p, s)
                if a.op is Op.F:
                    need, value = ([("act", s - 1, m)] if s > first else []), ("act", s, m)
                elif a.op in (Op.B, Op.I):
                    need = [("act", s, m)] + ([("grad", s + 1, m)] if s < last else [])
                    value = ("grad", s, m)
                elif a.op is Op.W:
                    need = [("grad", s, m)]
                elif a.op in (Op.SEND_F, Op.SEND_B):
                    kind, peer = ("act", s + 1) if a.op is Op.SEND_F else ("grad", s - 1)
                    if not first <= peer <= last or p.placement[peer] == r:
                        problems.append(f"bad peer: {format_step(a)}")
                        continue
                    need = [(kind, s, m)]
                    sends[(r, p.placement[peer])].append(((kind, s, m), (r, i)))
                elif a.op in (Op.RECV_F, Op.RECV_B):
                    kind, peer = ("act", s - 1) if a.op is Op.RECV_F else ("grad", s + 1)
                    if not first <= peer <= last or p.placement[peer] == r:
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
    find, union = union_find()

    edges = set()
    if semantics == "rendezvous":
        for x, y in pairs:
            union(x, y)
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
    nodes = {find((r, i)) for r, steps in enumerate(p.ranks) for i in range(len(steps))}
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


def _peer_rank(program, a):
    delta = {Op.SEND_F: 1, Op.RECV_F: -1, Op.SEND_B: -1, Op.RECV_B: 1}[a.op]
    return program.placement[a.stage + delta]


def plain_run(program, semantics: str):
    """Returns the final program counters; finished iff each equals its rank's length."""
    buffer = {"rendezvous": 0, "eager": None}.get(semantics)
    if buffer is None and semantics != "eager":
        buffer = int(semantics.split(":")[1])
    R = program.num_ranks
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
        first, last = ends(program, s)
        if a.op is Op.F:
            return [("F", s - 1, m)] if s > first else []
        if a.op in (Op.B, Op.I):
            return [("F", s, m)] + ([("G", s + 1, m)] if s < last else [])
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


def same_rank_inversion(program: Program) -> bool:
    """A comms-level program in which some step needs a value that a later step of its own rank
    computes (F(s+1,m) before F(s,m) with both stages on one rank, say). Such a program can never
    finish. schedc.verify.fast's comms-level path does not look for it and clears the program (see
    test_differential.py::test_fast_path_rejects_a_same_rank_inversion_at_the_comms_level); the
    tests that compare `schedc.check` with the oracles ask the detailed checks for these programs
    until that is fixed."""
    if program.level != "comms":
        return False
    for steps in program.ranks:
        made = {}
        for i, step in enumerate(steps):
            for a in step.parts:
                if a.op is Op.F:
                    made.setdefault(("act", a.stage, a.microbatch), i)
                elif a.op in (Op.B, Op.I):
                    made.setdefault(("grad", a.stage, a.microbatch), i)
        for i, step in enumerate(steps):
            for a in step.parts:
                s, m = a.stage, a.microbatch
                first, last = ends(program, s)
                if a.op is Op.F and s > first:
                    need = [("act", s - 1, m)]
                elif a.op in (Op.B, Op.I):
                    need = [("act", s, m)] + ([("grad", s + 1, m)] if s < last else [])
                else:
                    continue
                if any(made.get(v, -1) >= i for v in need):
                    return True
    return False


def check(program: Program, semantics: str = "rendezvous"):
    """`schedc.check` (the fast path included: same-rank inversions once slipped through it)."""
    return schedc.check(program, semantics=semantics)


def frames_instances(m, params) -> list[list[tuple[int, int, int]]]:
    """Per rank, (statement index, stage, microbatch) of a prover model's statements enumerated by
    their frames alone (guards, lets, loops, the path's static order), independently of the
    compiler: an oracle for what the symbolic proof reads (expressions by schedc's evaluator)."""
    from schedc.prove.model import GuardFrame, LetFrame
    from schedc.prove.sample import evaluate
    env0 = dict(params)
    for let in m.globals:
        env0[let.name] = evaluate(let.value, env0, m.functions)
    out = []
    for r in range(evaluate(m.ranks, env0, m.functions)):
        found = []

        def walk(x, k, env, iters):
            if k == len(x.frames):
                it = iter(iters)
                key = tuple(next(it) if t[0] == "l" else t[1] for t in x.path)
                found.append((key, x.index, evaluate(x.stage, env, m.functions),
                              evaluate(x.microbatch, env, m.functions)))
                return
            f = x.frames[k]
            if isinstance(f, LetFrame):
                walk(x, k + 1, {**env, f.name: evaluate(f.value, env, m.functions)}, iters)
            elif isinstance(f, GuardFrame):
                if bool(evaluate(f.cond, env, m.functions)) == f.holds:
                    walk(x, k + 1, env, iters)
            else:
                step = 1 if f.step is None else evaluate(f.step, env, m.functions)
                for v in range(evaluate(f.start, env, m.functions), evaluate(f.stop, env, m.functions), step):
                    walk(x, k + 1, {**env, f.var: v}, iters + [-v if f.reversed else v])
        for x in m.stmts:
            walk(x, 0, {**env0, m.rank_var: r}, [])
        out.append([(i, s, mb) for _, i, s, mb in sorted(found)])
    return out


def _received_input(a, program) -> list:
    """The value a compute action needs from another stage, which a receive may bring: F's the
    activation of s-1, B's and I's the input gradient of s+1 (none at the ends of the model, or of
    its route)."""
    s, m = a.stage, a.microbatch
    first, last = ends(program, s)
    if a.op is Op.F:
        return [("F", s - 1, m)] if s > first else []
    if a.op in (Op.B, Op.I):
        return [("G", s + 1, m)] if s < last else []
    return []


def posted_run(program, backend: str) -> bool:
    """Does a comms-level program finish under a backend (`nccl` or `gloo`): no rank hangs
    (`posted_hangs`)."""
    return not posted_hangs(program, backend)


def posted_hangs(program, backend: str) -> dict[int, int]:
    """Where each rank that never finishes hangs (rank -> step; its list's length: the end of the
    step) when a comms-level program runs under a backend (`nccl` or `gloo`), as torch's runtime
    runs it: sends and receives are posted at their place without blocking; F waits for the
    receive of its input activation, B and I for that of their input gradient; a rank that has run
    through its list waits at the end of the step until every operation it posted has completed;
    under nccl each rank's operations with one peer run on one stream in issue order, a pair
    completing once both have been reached on their streams; a group is one batch on a stream of the
    rank's batches (every peer), and a grouped operation pairs only with a grouped one (another NCCL
    communicator); under gloo a receive completes once its send is posted, and a send once its
    receive is. Under `p2p split` gradients travel on a
    communicator of their own (a stream of their own under nccl); under `p2p tagged` a message's tag
    is its payload, which gloo pairs by and NCCL ignores. Written from the rule alone, as a fixpoint."""
    R = program.num_ranks
    ops = []  # (rank, step, action, channel, k): every send and receive, k-th on its channel
    count: dict = {}
    split = getattr(program, "p2p", "shared") == "split"
    tags = getattr(program, "p2p", "shared") == "tagged" and backend == "gloo"
    for r, steps in enumerate(program.ranks):
        for i, st_ in enumerate(steps):
            batched = backend == "nccl" and getattr(st_, "kind", None) is CompoundKind.GROUP
            for a in st_.parts:
                comm = (int(split and a.op in (Op.SEND_B, Op.RECV_B)), batched)
                if a.op in (Op.SEND_F, Op.SEND_B):
                    value = ("F", a.stage, a.microbatch) if a.op is Op.SEND_F else ("G", a.stage, a.microbatch)
                    ch = ("s", r, _peer_rank(program, a), comm, value if tags else None)
                elif a.op in (Op.RECV_F, Op.RECV_B):
                    value = ("F", a.stage - 1, a.microbatch) if a.op is Op.RECV_F else ("G", a.stage + 1, a.microbatch)
                    ch = ("r", _peer_rank(program, a), r, comm, value if tags else None)
                else:
                    continue
                k = count.get(ch, 0)
                count[ch] = k + 1
                ops.append((r, i, a, ch, k))
    by_key = {(ch, k): (r, i) for r, i, a, ch, k in ops}

    def partner(ch, k):
        return by_key.get((("r" if ch[0] == "s" else "s",) + ch[1:], k))

    streams: dict = {}  # (rank, peer, communicator) -> list of lane steps, each a list of (step, channel, k)
    for r, i, a, ch, k in ops:
        peer = "batches" if ch[3][1] else ch[2] if ch[0] == "s" else ch[1]
        lane = streams.setdefault((r, peer, ch[3]), [])
        if lane and lane[-1][0][0] == i:
            lane[-1].append((i, ch, k))
        else:
            lane.append([(i, ch, k)])
    lane_step = {}  # (channel, k) -> (lane, index)
    for key, lane in streams.items():
        for j, group in enumerate(lane):
            for i, ch, k in group:
                lane_step[(ch, k)] = (key, j)
    head = {key: 0 for key in streams}  # lane steps completed
    pc = [0] * R
    # the receive on each rank that brings each value it needs: value -> (channel, k)
    brings = {}
    for r, i, a, ch, k in ops:
        if ch[0] == "r":
            v = ("F", a.stage - 1, a.microbatch) if a.op is Op.RECV_F else ("G", a.stage + 1, a.microbatch)
            brings[(r, v)] = (ch, k)

    def reached(ch, k):  # the operation is posted and, under nccl, has been at the head of its stream
        where = by_key.get((ch, k))
        if where is None or pc[where[0]] <= where[1]:
            return False
        if backend == "gloo":
            return True
        lane, j = lane_step[(ch, k)]
        return head[lane] >= j

    def done(ch, k):  # the operation has completed
        if backend == "gloo":
            return reached(ch, k) and partner(ch, k) is not None and reached(*_other(ch, k))
        lane, j = lane_step[(ch, k)]
        return head[lane] > j

    def _other(ch, k):
        return ((("r" if ch[0] == "s" else "s"),) + ch[1:], k)

    progress = True
    while progress:
        progress = False
        for r in range(R):
            while pc[r] < len(program.ranks[r]):
                ok = True
                for a in program.ranks[r][pc[r]].parts:
                    for v in _received_input(a, program):
                        got = brings.get((r, v))
                        if got is not None and not done(*got):
                            ok = False
                if not ok:
                    break
                pc[r] += 1
                progress = True
        if backend == "nccl":
            for key, lane in streams.items():
                while head[key] < len(lane):
                    group = lane[head[key]]
                    if not all(pc[key[0]] > i and partner(ch, k) is not None and reached(*_other(ch, k))
                               for i, ch, k in group):
                        break
                    head[key] += 1
                    progress = True
    hangs = {r: pc[r] for r in range(R) if pc[r] < len(program.ranks[r])}
    for r, i, a, ch, k in ops:
        if r not in hangs and not done(ch, k):  # past its list, it waits for what it posted
            hangs[r] = len(program.ranks[r])
    return hangs


_JOB_SENDS = {Op.SEND_F: "F", Op.SEND_B: "G"}


def _job_value(a):
    """The value a send carries or a receive brings, by its own name."""
    if a.op in _JOB_SENDS:
        return (_JOB_SENDS[a.op], a.stage, a.microbatch)
    return ("F", a.stage - 1, a.microbatch) if a.op is Op.RECV_F else ("G", a.stage + 1, a.microbatch)


def _job_channel(program: Program, semantics: str, r: int, a, batched: bool) -> tuple:
    """The channel of job rank r's send or receive `a` (`batched`: a member of a group): sending and
    receiving job rank, communicator (gradients' own under `p2p split`; under nccl a group is a
    batch on the process group's communicator, a single operation goes on the pair's, and a grouped
    operation meets only a grouped one) and tag (the payload under `p2p tagged`, except on nccl)."""
    P = program.num_ranks
    p2p = getattr(program, "p2p", "shared")
    comm = (int(p2p == "split" and a.op in (Op.SEND_B, Op.RECV_B)), batched and semantics == "nccl")
    tag = _job_value(a) if p2p == "tagged" and semantics != "nccl" else None
    peer = r // P * P + _peer_rank(program, a)
    return (r, peer, comm, tag) if a.op in _JOB_SENDS else (peer, r, comm, tag)


def job_run(program: Program, semantics: str) -> bool:
    """Does a communication-level job finish: its replicas (rank d * P + p is replica d's pipeline
    rank p; messages stay inside a replica), their collectives, explicit waits and groups, under an
    abstract semantics (`rendezvous`, `eager`, `bounded:K`) or a backend (`nccl`, `gloo`). Written
    from DESIGN.md and docs/semantics.md alone, as a fixpoint over program counters:
    - the k-th collective a member issues on its group (the data-parallel group of its pipeline
      rank for UNSHARD and REDUCE_GRAD, replica d's first- and last-stage ranks for REDUCE_TIED)
      meets the k-th of every other member and passes once every member has reached its own;
      RESHARD is no collective; under a backend UNSHARD is posted and the stage's next compute waits
      until every member has posted its own;
    - under an abstract semantics a send or receive blocks at its place (a group's members are
      posted together and the group passes when each can), and an explicit WAIT_SEND waits until
      its send's receive is reached (the send is matched); under a backend they are posted, an F
      (B, I) waits for the receive that brings its input, an explicit WAIT_* for its operation,
      and under nccl each rank's single operations with one peer run on one stream in issue order,
      its groups on one stream of batches (every peer; a group one step of it, complete as a whole),
      and a grouped operation meets only a grouped one (another NCCL communicator)."""
    P, D, S = program.num_ranks, program.dp, program.num_stages
    place = program.placement
    steps = [program.replica(d).ranks[p] for d in range(D) for p in range(P)]
    R = P * D
    backend = semantics in ("nccl", "gloo")
    buffer = None if semantics == "eager" else 0 if semantics == "rendezvous" else (
        int(semantics.split(":")[1]) if semantics.startswith("bounded") else None)
    sends, recvs = _JOB_SENDS, {Op.RECV_F: "F", Op.RECV_B: "G"}
    waits = {Op.WAIT_SEND_F: Op.SEND_F, Op.WAIT_RECV_F: Op.RECV_F, Op.WAIT_SEND_B: Op.SEND_B,
             Op.WAIT_RECV_B: Op.RECV_B}
    value = _job_value

    def channel(r, a, batched):
        return _job_channel(program, semantics, r, a, batched)

    def group_of(r, a):
        if a.op is Op.REDUCE_TIED:
            return ("tied", r // P)
        return ("dp", r % P)

    def members(key):
        if key[0] == "tied":
            return sorted({key[1] * P + place[0], key[1] * P + place[S - 1]})
        return [d * P + key[1] for d in range(D)]

    where: dict = {}  # ("s"|"r", channel, k) -> (rank, step)
    op_key: dict = {}  # (rank, step, part) -> ("s"|"r", channel, k)
    colls: dict = {}  # group -> member -> [step of its k-th collective]
    coll_at: dict = {}  # (rank, step, part) -> (group, k)
    count: dict = {}
    for r in range(R):
        for i, st_ in enumerate(steps[r]):
            batched = getattr(st_, "kind", None) is CompoundKind.GROUP
            for j, a in enumerate(st_.parts):
                if a.op in sends or a.op in recvs:
                    key = ("s" if a.op in sends else "r", channel(r, a, batched))
                    k = count.get(key, 0)
                    count[key] = k + 1
                    where[key + (k,)] = (r, i)
                    op_key[(r, i, j)] = key + (k,)
                elif a.op in (Op.UNSHARD, Op.REDUCE_GRAD, Op.REDUCE_TIED):
                    g = group_of(r, a)
                    mine = colls.setdefault(g, {}).setdefault(r, [])
                    coll_at[(r, i, j)] = (g, len(mine))
                    mine.append(i)

    def partner(key):
        return ("r" if key[0] == "s" else "s",) + key[1:]

    # under nccl: each (rank, peer, communicator) stream's steps, in issue order; a rank's batches
    # on one communicator are one stream, whatever their peers
    lanes: dict = {}
    lane_of: dict = {}
    for key, (r, i) in sorted(where.items(), key=lambda kv: kv[1]):
        ch = key[1]
        peer = "batches" if ch[2][1] else ch[1] if key[0] == "s" else ch[0]
        lane = lanes.setdefault((r, peer, ch[2]), [])
        if not lane or lane[-1][0] != i:
            lane.append((i, []))
        lane[-1][1].append(key)
        lane_of[key] = ((r, peer, ch[2]), len(lane) - 1)
    head = {name: 0 for name in lanes}
    pc = [0] * R

    def posted(key):  # under a backend: its rank has passed its step
        at = where.get(key)
        return at is not None and pc[at[0]] > at[1]

    def at_or_past(key):  # under an abstract semantics: its rank has reached its step
        at = where.get(key)
        return at is not None and pc[at[0]] >= at[1]

    def reached(key):  # nccl: posted and at the head of its stream
        if not posted(key):
            return False
        lane, n = lane_of[key]
        return head[lane] >= n

    def done(key):
        if semantics == "gloo":
            return posted(key) and posted(partner(key))
        lane, n = lane_of[key]
        return head[lane] > n

    def collective_ready(r, i, j, strict):
        g, k = coll_at[(r, i, j)]
        for m in members(g):
            if m == r:
                continue
            theirs = colls.get(g, {}).get(m, [])
            if k >= len(theirs) or pc[m] < theirs[k] + (1 if strict else 0):
                return False
        return True

    def unshards_before(r, i, stage):  # the UNSHARDs of `stage` this compute is the next compute of
        out = []
        for i2 in range(i - 1, -1, -1):
            for j2, a2 in enumerate(steps[r][i2].parts):
                if a2.op.is_compute and a2.stage == stage:
                    return out
                if a2.op is Op.UNSHARD and a2.stage == stage:
                    out.append((i2, j2))
        return out

    def brings(r, i, need):  # the key of the receive on rank r, before step i, that brings `need`
        for i2 in range(i - 1, -1, -1):
            for j2, a2 in enumerate(steps[r][i2].parts):
                if a2.op in recvs and value(a2) == need:
                    return op_key[(r, i2, j2)]
        return None

    def ready_posted(r, i):
        for j, a in enumerate(steps[r][i].parts):
            if (r, i, j) in coll_at and a.op is not Op.UNSHARD and not collective_ready(r, i, j, False):
                return False
            if a.op.is_compute:
                for need in _received_input(a, program):
                    key = brings(r, i, need)
                    if key is not None and not done(key):
                        return False
                if any(not collective_ready(r, i2, j2, True) for i2, j2 in unshards_before(r, i, a.stage)):
                    return False
            if a.op in waits:
                target = waits[a.op]
                for i2 in range(i - 1, -1, -1):
                    hit = [j2 for j2, a2 in enumerate(steps[r][i2].parts)
                           if a2.op is target and (a2.stage, a2.microbatch) == (a.stage, a.microbatch)]
                    if hit:
                        if not done(op_key[(r, i2, hit[0])]):
                            return False
                        break
        return True

    def ready_blocking(r, i):
        for j, a in enumerate(steps[r][i].parts):
            if (r, i, j) in coll_at and not collective_ready(r, i, j, False):
                return False
            if a.op in waits and waits[a.op] in sends:  # an explicit wait for a send: until it is matched
                for i2 in range(i - 1, -1, -1):
                    hit = [j2 for j2, a2 in enumerate(steps[r][i2].parts)
                           if a2.op is waits[a.op] and (a2.stage, a2.microbatch) == (a.stage, a.microbatch)]
                    if hit:
                        if not at_or_past(partner(op_key[(r, i2, hit[0])])):
                            return False
                        break
            key = op_key.get((r, i, j))
            if key is None:
                continue
            if key[0] == "r":
                if not at_or_past(partner(key)):
                    return False
            elif buffer is not None and key[2] - buffer >= 0:
                if not at_or_past(("r", key[1], key[2] - buffer)):
                    return False
        return True

    ready = ready_posted if backend else ready_blocking
    progress = True
    while progress:
        progress = False
        for r in range(R):
            while pc[r] < len(steps[r]) and ready(r, pc[r]):
                pc[r] += 1
                progress = True
        if semantics == "nccl":
            for name, lane in lanes.items():
                while head[name] < len(lane):
                    i, keys = lane[head[name]]
                    if pc[name[0]] <= i or not all(reached(partner(key)) for key in keys):
                        break
                    head[name] += 1
                    progress = True
    finished = all(pc[r] == len(steps[r]) for r in range(R))
    if semantics == "nccl":
        finished = finished and all(head[name] == len(lane) for name, lane in lanes.items())
    return finished


def job_crossed(program: Program, semantics: str) -> int:
    """How many messages of a communication-level job reach a receive that expects another value,
    written from docs/semantics.md alone: on each channel (sending and receiving job rank; under
    `p2p split` gradients on their own communicator; under `p2p tagged` the payload as the tag,
    except on nccl, which has none; under nccl a group's operations on the process group's
    communicator, apart from single ones) the k-th send meets the k-th receive."""
    P = program.num_ranks
    queues: dict = {}  # channel (job_run's) -> ([values sent], [values expected]) in issue order
    for d in range(program.dp):
        for p, steps in enumerate(program.replica(d).ranks):
            r = d * P + p
            for st_ in steps:
                batched = getattr(st_, "kind", None) is CompoundKind.GROUP
                for a in st_.parts:
                    if a.op in (Op.SEND_F, Op.SEND_B, Op.RECV_F, Op.RECV_B):
                        ch = _job_channel(program, semantics, r, a, batched)
                        queues.setdefault(ch, ([], []))[0 if a.op in _JOB_SENDS else 1].append(_job_value(a))
    return sum(s != v for sent, expected in queues.values() for s, v in zip(sent, expected))
