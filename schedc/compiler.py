"""Expand a schedule's loop-level IR (schedc/loops.py) into a `Program` (schedc/ir.py).

Binds parameters (defaults, `--param` overrides), checks `require` constraints, resolves names
statically (an unknown name is an error even on a path never taken), evaluates placement and the
per-rank bodies with integer arithmetic, and resolves cost/memory annotations. Expressions are
compiled once into closures and then run per rank. Resource limits make huge inputs an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from . import loops as ir_loops
from . import syntax as ast
from .errors import SchedcError
from .ir import (DEFAULT_SPEED, MAX_ACTIONS, ActionSyntaxError, Action, Annotations, Compound, CompoundKind, Op,
                 Program, placed, StageCost, StageMemory, parse_step)
from .expr import FUNCTIONS, MAX_INT, Eval, Env, compile_expr as _compile_expr, did_you_mean as _did_you_mean
from .expr import compile_function
from .expr import as_int as _int, as_nonneg as _nonneg, as_truth as _truth
from .span import Span, span_text

MAX_ITERATIONS = 20_000_000
MAX_RANKS = 65_536
MAX_STAGES = 1_000_000
MAX_MICROBATCHES = 1_000_000
MAX_REPLICAS = 4096

ACTION_OPS = {op.value: op for op in Op}


def compile_schedule(tree: ast.Schedule, params: Mapping[str, int] | None = None, *,
                     strict: bool = True) -> Program:
    """Evaluate a schedule's AST with the given parameter values into a Program.

    With `strict=False`, values for parameters the schedule does not declare are ignored
    (used when one `--param` list is given to several schedules).
    """
    overrides = dict(params or {})
    if not strict:
        declared = {p.name for p in tree.params}
        overrides = {k: v for k, v in overrides.items() if k in declared}
    return expand(ir_loops.build(tree), overrides)


Seen = Callable[[int, int, "Action | Compound", dict], None]


def expand(loops: ir_loops.Loops, params: Mapping[str, int], seen: Seen | None = None) -> Program:
    """The Program of the loop-level IR at these parameter values. `seen(rank, site, step, env)`,
    if given, hears of every step as it is made, before `order greedy` (if any) reorders a rank:
    the call site (loops.Site.index) and the names in scope there with their values (the prover's
    concrete instances are these)."""
    return _Compiler(loops, seen).run(dict(params))


@dataclass
class _Budget:
    actions: int = 0
    iterations: int = 0

    def add_iterations(self, n: int, span: Span) -> None:
        self.iterations += n
        if self.iterations > MAX_ITERATIONS:
            raise SchedcError("too-large", f"the schedule runs more than {MAX_ITERATIONS:,} loop "
                              "iterations; use smaller parameters", span)

    def add_action(self, span: Span) -> None:
        self.actions += 1
        if self.actions > MAX_ACTIONS:
            raise SchedcError("too-large", f"the schedule expands to more than {MAX_ACTIONS:,} "
                              "actions; use smaller parameters", span)


Run = Callable[[Env, list], None]


@dataclass
class _Scope:
    """Names visible at a point of the source, with where each was defined (static resolution)."""

    names: dict[str, Span | None] = field(default_factory=dict)
    parent: "_Scope | None" = None
    functions: dict[str, tuple[tuple[str, ...], Eval, Span]] = field(default_factory=dict)

    def function(self, name: str):
        scope = self
        while scope is not None:
            if name in scope.functions:
                return scope.functions[name]
            scope = scope.parent
        return None

    def lookup(self, name: str) -> bool:
        scope = self
        while scope is not None:
            if name in scope.names:
                return True
            scope = scope.parent
        return False

    def defined_at(self, name: str) -> Span | None:
        scope = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None

    def all_names(self) -> list[str]:
        out, scope = [], self
        while scope is not None:
            out.extend(scope.names)
            scope = scope.parent
        return out

    def define(self, name: str, span: Span) -> None:
        if self.lookup(name) or self.function(name) is not None:
            where = self.defined_at(name)
            note = [f"first defined at {where}"] if where is not None else []
            raise SchedcError("redefined", f"'{name}' is already defined; pick another name",
                              span, note)
        self.names[name] = span

    def child(self) -> "_Scope":
        return _Scope({}, self)


STATE = "\x00rank-state"  # env key of the per-rank counters; no source name can collide
RANK = "\x00rank"  # env key of the rank being expanded (for `seen`)
SEEN = "\x00seen"  # env key of `seen` while the first replica is expanded (None for the others)


class _RankState:
    """What `next` needs on one rank: actions emitted per (stage, kind), and the I's still waiting
    for their W, oldest first (`W(next)` takes the oldest)."""

    def __init__(self):
        self.count: dict[tuple[int, str], int] = {}
        self.pending: dict[tuple[int, int], None] = {}

    def note(self, a: Action) -> None:
        count, key = self.count, a.stage
        if a.op is Op.F:
            count[(key, "F")] = count.get((key, "F"), 0) + 1
        elif a.op is Op.I:
            count[(key, "BI")] = count.get((key, "BI"), 0) + 1
            self.pending[(key, a.microbatch)] = None
        elif a.op is Op.B:
            count[(key, "BI")] = count.get((key, "BI"), 0) + 1
            count[(key, "W")] = count.get((key, "W"), 0) + 1
        elif a.op is Op.W:
            count[(key, "W")] = count.get((key, "W"), 0) + 1
            self.pending.pop((key, a.microbatch), None)

    def next_microbatch(self, op: Op, stage: int) -> int:
        kind = "F" if op is Op.F else ("W" if op is Op.W else "BI")
        return self.count.get((stage, kind), 0)


class _Compiler:
    def __init__(self, loops: ir_loops.Loops, seen: Seen | None = None):
        self.loops = loops
        self.tree = loops.tree
        self.budget = _Budget()
        self.counting = loops.uses_next
        self.seen = seen

    # ---- the whole schedule ----
    def run(self, overrides: dict[str, int]) -> Program:
        tree, loops = self.tree, self.loops
        env: Env = {}
        scope = _Scope()
        known = {p.name for p in tree.params}
        for name in overrides:
            if name not in known:
                hint = _did_you_mean(name, known)
                listed = ", ".join(sorted(known)) or "none"
                raise SchedcError("unknown-param", f"schedule '{tree.name}' has no parameter "
                                  f"'{name}' (its parameters: {listed}){hint}", where="--param")
        for p in tree.params:
            if p.name in overrides:
                value = overrides[p.name]
            elif p.default is not None:
                value = self.expr(p.default, scope)(env)
            else:
                raise SchedcError("missing-param", f"parameter '{p.name}' has no default; "
                                  f"pass --param {p.name}=N", p.span)
            if type(value) is not int:
                raise SchedcError("type", f"parameter '{p.name}' must be an integer", p.span)
            if abs(value) > MAX_INT:
                raise SchedcError("too-large", f"parameter '{p.name}' = {value} is too large", p.span)
            scope.define(p.name, p.span)
            env[p.name] = value

        decls: dict[str, tuple[int, Span]] = {}
        for item in loops.header:
            if isinstance(item, ast.Let):
                self.let(item, scope)(env, [])
            elif isinstance(item, ast.Require):
                self.require(item, scope, env)
            else:
                decls[item.what] = (self.int_value(item.value, scope, env, item.what), item.span)

        num_ranks = self.num_ranks(decls, env, loops.bodies)
        replicas = self.replicas(decls)
        by_replica = self.rank_bodies(loops, num_ranks, scope, env, replicas)
        rank_lists = by_replica[0]
        num_stages = self.count("stages", decls, MAX_STAGES, rank_lists, loops.placement,
                                lambda a: a.stage)
        num_mb = self.count("microbatches", decls, MAX_MICROBATCHES, rank_lists, None,
                            lambda a: a.microbatch, param="M", env=env)
        stage_to_rank = self.placement(loops.placement, num_stages, num_ranks, scope, env, rank_lists)
        notes = self.annotations(loops.annotations, num_stages, num_ranks, scope, env)
        program = Program(
            name=tree.name,
            num_ranks=num_ranks,
            num_stages=num_stages,
            num_microbatches=num_mb,
            placement=stage_to_rank,
            ranks=tuple(tuple(steps) for steps in rank_lists),
            params=tuple((p.name, env[p.name]) for p in tree.params),
            annotations=notes,
            source=tree.span.file,
            forward_only=loops.forward_only is not None,
            p2p=loops.p2p.mode if loops.p2p is not None else "shared",
            replicas=tuple(tuple(tuple(steps) for steps in lists) for lists in by_replica[1:]),
        )
        if loops.order is None:
            return program
        ordered = [self.reorder(program.replica(d), loops.order, scope, env) for d in range(program.dp)]
        return replace(ordered[0], replicas=tuple(p.ranks for p in ordered[1:]))

    def replicas(self, decls) -> int:
        """`replicas D`: how many data-parallel replicas of the pipeline run (1 by default)."""
        if "replicas" not in decls:
            return 1
        value, span = decls["replicas"]
        if not 1 <= value <= MAX_REPLICAS:
            raise SchedcError("range", f"the number of replicas must be in 1..{MAX_REPLICAS}, got {value}", span)
        return value

    def reorder(self, program: Program, order: ast.Order, scope: _Scope, env: Env) -> Program:
        from .order import KINDS, greedy_order
        prefer, cap = (Op.I, Op.F, Op.W, Op.B), None
        for opt in order.options:
            if opt.name == "prefer" and opt.names:
                unknown = [n for n in opt.names if n not in KINDS]
                if unknown or len(set(opt.names)) != len(opt.names):
                    raise SchedcError("order", f"prefer lists compute kinds F, B, I, W once each; got "
                                      f"{', '.join(opt.names)}", opt.span)
                prefer = tuple(KINDS[n] for n in opt.names)
            elif opt.name == "memory" and opt.value is not None:
                cap = self.expr(opt.value, scope)(env)
                if type(cap) not in (int, float) or cap < 0:
                    raise SchedcError("type", "memory must be a non-negative number", opt.value.span)
            else:
                raise SchedcError("order", f"order greedy takes prefer = [kinds] and memory = limit; "
                                  f"'{opt.name}' is not an option", opt.span)
        return greedy_order(program, prefer, cap, order.span)

    def require(self, item: ast.Require, scope: _Scope, env: Env) -> None:
        for c in item.constraints:
            ok = self.expr(c.cond, scope)(env)
            if type(ok) is not bool:
                raise SchedcError("type", "a requirement must be a comparison, e.g. M >= P", c.cond.span)
            if not ok:
                values = ", ".join(f"{n}={env[n]}" for n in ast.names_in(c.cond) if n in env)
                shown = f" ({values})" if values else ""
                text = c.message or f"requirement '{span_text(c.cond.span)}' does not hold"
                raise SchedcError("require", f"{text}{shown}", c.span)

    def int_value(self, e: ast.Expr, scope: _Scope, env: Env, what: str) -> int:
        value = self.expr(e, scope)(env)
        if type(value) is not int:
            raise SchedcError("type", f"'{what}' must be an integer", e.span)
        return value

    def num_ranks(self, decls, env: Env, bodies) -> int:
        if "ranks" in decls:
            value, span = decls["ranks"]
        elif "P" in env:
            value, span = env["P"], self.tree.params[[p.name for p in self.tree.params].index("P")].span
        else:
            indices = [b.rank for b in bodies if b.rank is not None]
            if not indices or any(b.rank is None for b in bodies):
                raise SchedcError("missing-decl", "say how many ranks there are: add `ranks N` "
                                  "(or a parameter P)", self.tree.name_span)
            value, span = max(indices) + 1, self.tree.name_span
        if not 1 <= value <= MAX_RANKS:
            raise SchedcError("range", f"the number of ranks must be in 1..{MAX_RANKS}, got {value}", span)
        return value

    def count(self, what: str, decls, limit: int, rank_lists, placement, key, param=None, env=None) -> int:
        if what in decls:
            value, span = decls[what]
        elif param is not None and env is not None and param in env:
            value = env[param]
            span = self.tree.params[[p.name for p in self.tree.params].index(param)].span
        elif placement is not None and placement.kind == "table":
            value, span = len(placement.table), placement.span
        else:
            seen = [key(a) for steps in rank_lists for step in steps for a in step.parts
                    if key(a) is not None]
            if not seen:
                raise SchedcError("missing-decl", f"say how many {what} there are: add `{what} N`",
                                  self.tree.name_span)
            value, span = max(seen) + 1, self.tree.name_span
        if not 1 <= value <= limit:
            raise SchedcError("range", f"the number of {what} must be in 1..{limit:,}, got {value}", span)
        return value

    def rank_bodies(self, loops: ir_loops.Loops, num_ranks: int, scope: _Scope, env: Env,
                    replicas: int = 1) -> list[list[list]]:
        """Per replica, per rank, the steps (the generic body may name its replica: `rank r, replica d`)."""
        specific = {b.rank: b for b in loops.specific}
        for b in loops.specific:
            if b.rank >= num_ranks:
                raise SchedcError("range", f"rank {b.rank} is out of range: the schedule has "
                                  f"{num_ranks} rank(s)", b.span)
        generic, generic_run = loops.generic, None
        if generic is not None:
            inner = scope.child()
            inner.define(generic.var, generic.span)
            if generic.replica is not None:
                inner.define(generic.replica, generic.span)
            generic_run = self.block(generic.nodes, inner)
        compiled = {b.rank: self.block(b.nodes, scope.child()) for b in loops.specific if not b.literal}
        out: list[list[list]] = []
        for d in range(replicas):
            seen = self.seen if d == 0 else None
            lists: list[list] = []
            for rank in range(num_ranks):
                steps: list = []
                body = specific.get(rank)
                if body is not None and body.literal:
                    steps = [self.literal(site.action) for site in body.nodes]
                    if seen is not None:
                        for site, step in zip(body.nodes, steps):
                            seen(rank, site.index, step, env)
                elif body is not None:
                    local = dict(env)
                    local[STATE] = _RankState()
                    local[RANK] = rank
                    local[SEEN] = seen
                    compiled[rank](local, steps)
                elif generic_run is not None:
                    local = dict(env)
                    local[generic.var] = rank
                    if generic.replica is not None:
                        local[generic.replica] = d
                    local[STATE] = _RankState()
                    local[RANK] = rank
                    local[SEEN] = seen
                    generic_run(local, steps)
                else:
                    raise SchedcError("missing-rank", f"rank {rank} has no body: add `rank {rank} {{ ... }}` "
                                      "or a `rank r { ... }` for all ranks", self.tree.name_span)
                lists.append(steps)
            out.append(lists)
        return out

    def literal(self, a: ast.LiteralAction):
        try:
            step = parse_step(a.text, a.span)
        except ActionSyntaxError as exc:
            raise SchedcError("bad-action", str(exc), a.span) from None
        self.budget.add_action(a.span)
        return step

    def placement(self, p: ast.Placement | None, num_stages, num_ranks, scope, env, rank_lists):
        if p is None:  # inferred: the rank where a stage's first action appears
            table = [0] * num_stages
            seen = set()
            for rank, steps in enumerate(rank_lists):
                for step in steps:
                    for a in step.parts:
                        if 0 <= a.stage < num_stages and a.stage not in seen:
                            seen.add(a.stage)
                            table[a.stage] = rank
            return tuple(table)
        if p.kind == "loop":
            return placed("loop", num_stages, num_ranks)
        if p.kind == "vshape":
            if num_stages % num_ranks:
                raise SchedcError("placement", f"place vshape needs a multiple of the {num_ranks} "
                                  f"ranks as stages, got {num_stages}", p.span)
            return placed("vshape", num_stages, num_ranks)
        if p.kind == "expr":
            inner = scope.child()
            inner.define(p.var, p.span)
            fn = self.expr(p.expr, inner)
            values = []
            for s in range(num_stages):
                local = dict(env)
                local[p.var] = s
                values.append((fn(local), p.expr.span))
        else:
            if len(p.table) != num_stages:
                raise SchedcError("placement", f"the placement table has {len(p.table)} entries but "
                                  f"there are {num_stages} stages", p.span)
            values = [(self.expr(e, scope)(env), e.span) for e in p.table]
        out = []
        for s, (rank, span) in enumerate(values):
            if type(rank) is not int or not 0 <= rank < num_ranks:
                raise SchedcError("placement", f"stage {s} is placed on rank {rank!r}, which is not "
                                  f"a rank in 0..{num_ranks - 1}", span)
            out.append(rank)
        return tuple(out)

    def annotations(self, items, num_stages, num_ranks, scope, env) -> Annotations:
        base_cost: dict[str, float] = {}
        stage_cost: dict[int, dict[str, float]] = {}
        base_mem: dict[str, float] = {}
        stage_mem: dict[int, dict[str, float]] = {}
        speed = [DEFAULT_SPEED] * num_ranks
        limits: dict[int, float] = {}
        extras = {"latency": 0.0, "bandwidth": 0.0}
        for item in items:
            index = None
            if item.scope is not None:
                index = self.int_value(item.scope_expr, scope, env, item.scope)
                bound = num_stages if item.scope == "stage" else num_ranks
                if not 0 <= index < bound:
                    raise SchedcError("range", f"{item.scope} {index} is out of range 0..{bound - 1}",
                                      item.scope_expr.span)
            for s in item.settings:
                value = self.expr(s.value, scope)(env)
                if type(value) not in (int, float) or value < 0:
                    raise SchedcError("type", f"'{s.name}' must be a non-negative number", s.value.span)
                value = float(value)
                if item.what == "cost":
                    if s.name in extras:
                        extras[s.name] = value
                    elif item.scope == "rank":
                        speed[index] = value
                    else:
                        (stage_cost.setdefault(index, {}) if index is not None else base_cost)[s.name] = value
                elif s.name == "limit":
                    for r in ([index] if index is not None else range(num_ranks)):
                        limits[r] = value
                else:
                    (stage_mem.setdefault(index, {}) if index is not None else base_mem)[s.name] = value
        # given values are absolute; the rest is each stage's share of a rank-sized chunk (ir.default_share)
        cost, size = StageCost.default(num_stages, num_ranks), StageMemory.default(num_stages, num_ranks)
        costs = tuple(cost.with_settings({**base_cost, **stage_cost.get(s, {})}) for s in range(num_stages))
        memory = tuple(size.with_settings({**base_mem, **stage_mem.get(s, {})}) for s in range(num_stages))
        return Annotations(costs, memory, tuple(speed), tuple(sorted(limits.items())),
                           extras["latency"], extras["bandwidth"])

    # ---- statements ----
    def block(self, stmts, scope: _Scope) -> Run:
        runs = [self.stmt(s, scope) for s in stmts]

        def run(env, out):
            for r in runs:
                r(env, out)
        return run

    def stmt(self, s: ir_loops.Node, scope: _Scope) -> Run:
        if isinstance(s, ast.Let):
            return self.let(s, scope)
        if isinstance(s, ir_loops.Loop):
            return self.for_(s, scope)
        if isinstance(s, ir_loops.Branch):
            return self.if_(s, scope)
        return self.do(s, scope)

    def let(self, s: ast.Let, scope: _Scope) -> Run:
        if s.params is not None:
            return self.function(s, scope)
        value = self.expr(s.value, scope)
        scope.define(s.name, s.span)
        name = s.name

        def run(env, out):
            env[name] = value(env)
        return run

    def function(self, s: ast.Let, scope: _Scope) -> Run:
        """`let f(a, b) = E`: a pure function; its parameters may shadow outer names inside E."""
        if len(set(s.params)) != len(s.params):
            raise SchedcError("redefined", f"function '{s.name}' names a parameter twice", s.span)
        inner = _Scope({p: s.span for p in s.params}, scope)
        body = compile_function(s.params, s.value, inner)
        if scope.lookup(s.name) or scope.function(s.name) is not None or s.name in FUNCTIONS:
            raise SchedcError("redefined", f"'{s.name}' is already defined; pick another name", s.span)
        scope.functions[s.name] = (s.params, body, s.span)
        return lambda env, out: None

    def for_(self, s: ir_loops.Loop, scope: _Scope) -> Run:
        start, stop = self.expr(s.start, scope), self.expr(s.stop, scope)
        step = self.expr(s.step, scope) if s.step is not None else None
        inner = scope.child()
        inner.define(s.var, s.span)
        body = self.block(s.body, inner)
        var, budget, rev = s.var, self.budget, s.reversed

        def run(env, out):
            a, b = _int(start(env), s.start.span), _int(stop(env), s.stop.span)
            k = 1 if step is None else _int(step(env), s.step.span)
            if k == 0:
                raise SchedcError("range", "a loop step cannot be 0", s.step.span)
            rng = range(a, b, k)
            budget.add_iterations(len(rng), s.span)
            for v in (reversed(rng) if rev else rng):
                env[var] = v
                body(env, out)
        return run

    def if_(self, s: ir_loops.Branch, scope: _Scope) -> Run:
        branches = [(self.expr(c, scope), c.span, self.block(b, scope.child())) for c, b in s.arms]
        orelse = self.block(s.orelse, scope.child())

        def run(env, out):
            for cond, span, body in branches:
                if _truth(cond(env), span):
                    body(env, out)
                    return
            orelse(env, out)
        return run

    def do(self, site: ir_loops.Site, scope: _Scope) -> Run:
        call, index, reporting = site.action, site.index, self.seen is not None
        if call.name in ("group", "overlap"):
            kind = CompoundKind.GROUP if call.name == "group" else CompoundKind.OVERLAP_F_B
            if not call.args or (kind is CompoundKind.OVERLAP_F_B and len(call.args) != 2):
                need = "two actions, e.g. overlap(F(0, 1), B(7, 0))" if kind is CompoundKind.OVERLAP_F_B \
                    else "at least one send or receive"
                raise SchedcError("arity", f"{call.name}(...) takes {need}", call.span)
            parts = []
            for arg in call.args:
                if not isinstance(arg, ast.Call) or arg.name not in ACTION_OPS:
                    raise SchedcError("bad-action", f"the parts of {call.name}(...) must be actions",
                                      arg.span)
                op = ACTION_OPS[arg.name]
                if kind is CompoundKind.GROUP and not op.is_comm:
                    raise SchedcError("bad-action", "a group holds only SEND_F/RECV_F/SEND_B/RECV_B; "
                                      f"{arg.name} is not communication", arg.span)
                if kind is CompoundKind.OVERLAP_F_B and not op.is_compute:
                    raise SchedcError("bad-action", f"overlap(...) pairs compute actions; {arg.name} "
                                      "is not one", arg.span)
                if _is_next_w(arg, scope):
                    raise SchedcError("bad-action", f"W(next) cannot be part of {call.name}(...): it may "
                                      "emit nothing", arg.span)
                parts.append(self.action(arg, scope))
            budget, span, counting = self.budget, call.span, self.counting

            def run(env, out):
                budget.add_action(span)
                step = Compound(kind, tuple(p(env) for p in parts), span)
                out.append(step)
                if reporting and env[SEEN] is not None:
                    env[SEEN](env[RANK], index, step, env)
                if counting:
                    for a in step.parts:
                        env[STATE].note(a)
            return run
        if call.name not in ACTION_OPS:
            kinds = " ".join(ACTION_OPS) + " group overlap"
            if call.name in FUNCTIONS:
                msg = f"{call.name}(...) is a value, not an action; actions are: {kinds}"
            else:
                msg = f"unknown action '{call.name}'{_did_you_mean(call.name, list(ACTION_OPS))}; " \
                      f"actions are: {kinds}"
            raise SchedcError("unknown-action", msg, call.name_span)
        make = self.action(call, scope)
        budget, span, counting = self.budget, call.span, self.counting

        def run(env, out):
            a = make(env)
            if a is None:  # W(next) with no I waiting
                return
            budget.add_action(span)
            out.append(a)
            if reporting and env[SEEN] is not None:
                env[SEEN](env[RANK], index, a, env)
            if counting:
                env[STATE].note(a)
        return run

    def action(self, call: ast.Call, scope: _Scope) -> Callable[[Env], Action | None]:
        op = ACTION_OPS[call.name]
        span = call.span
        if _is_next_w(call, scope):
            def oldest(env):
                pending = env[STATE].pending
                if not pending:
                    return None
                stage, mb = next(iter(pending))
                return Action(Op.W, stage, mb, span)
            return oldest
        want = 2 if op.has_microbatch else 1
        if len(call.args) != want:
            form = f"{op.value}(stage, microbatch)" if want == 2 else f"{op.value}(stage)"
            raise SchedcError("arity", f"{op.value} takes {want} argument(s): {form}", call.span)
        auto = want == 2 and _is_next(call.args[1], scope)
        if auto and op.is_comm:
            raise SchedcError("bad-action", f"{op.value}(stage, next): `next` numbers compute actions only",
                              call.args[1].span)
        args = [self.expr(a, scope) for a in (call.args[:1] if auto else call.args)]
        spans = [a.span for a in call.args]
        if auto:
            (fs,) = args

            def make(env):
                stage = _nonneg(fs(env), spans[0], "stage")
                return Action(op, stage, env[STATE].next_microbatch(op, stage), span)
            return make
        if want == 2:
            fs, fm = args

            def make(env):
                stage, mb = fs(env), fm(env)
                return Action(op, _nonneg(stage, spans[0], "stage"), _nonneg(mb, spans[1], "microbatch"),
                              span)
        else:
            (fs,) = args

            def make(env):
                return Action(op, _nonneg(fs(env), spans[0], "stage"), None, span)
        return make

    def expr(self, e: ast.Expr, scope: _Scope) -> Eval:
        return _compile_expr(e, scope)


def _is_next(arg, scope: _Scope) -> bool:
    """`next` in a microbatch position: the next microbatch of that kind and stage on this rank."""
    return isinstance(arg, ast.Var) and arg.name == "next" and not scope.lookup("next")


def _is_next_w(call, scope: _Scope) -> bool:
    """`W(next)`: the weight gradient of the oldest I on this rank that has no W yet."""
    return isinstance(call, ast.Call) and call.name == "W" and len(call.args) == 1 and _is_next(call.args[0], scope)
