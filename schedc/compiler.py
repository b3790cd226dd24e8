"""Expand a schedule's loop-level IR (schedc/loops.py) into a `Program` (schedc/ir.py).

Binds parameters (defaults, `--param` overrides), checks `require` constraints, resolves names
statically (an unknown name is an error even on a path never taken), evaluates placement and the
per-rank bodies with integer arithmetic, resolves cost/memory annotations, and checks the routes
(schedc/rules/deps.py's `route_problems`). The rank bodies are
translated once into Python code (`_BodyWriter`, expressions by schedc/expr.py's emitter) that
Python compiles; that code and every compiled expression are kept per loop-level IR (`_Code`), so
expanding a schedule again at other parameters runs the code alone. Resource limits (actions, loop
iterations, and evaluation steps: loop iterations weighted by the operations of their bodies, and
`let` function evaluations, schedc/expr.py's `Meter`) are counted per expansion and make huge
inputs an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, cast

from . import loops as ir_loops
from . import syntax as ast
from .collection import PAUSED
from .errors import SchedcError
from .ir import (DEFAULT_SPEED, MAX_ACTIONS, ActionSyntaxError, Action, Annotations, Compound, CompoundKind, Op,
                 Program, Route, placed, StageCost, StageMemory, Step, parse_step, same_lines, unchecked_action,
                 model_stages as ir_model_stages)
from .expr import (COMPOUND_NAMES, FUNCTIONS, INT, MAX_INT, RUNTIME, Block, Emitter, Env, Eval, Function,
                   Functions, Module, CHECK_STEPS, as_truth, calls_memoized, charge, compile_expr as _compile_expr,
                   compile_function, did_you_mean as _did_you_mean, metered)
from .span import Span, span_text

MAX_ITERATIONS = 20_000_000
MAX_RANKS = 65_536
MAX_STAGES = 1_000_000
MAX_MICROBATCHES = 1_000_000
MAX_REPLICAS = 1_048_576
MAX_JOB_RANKS = 1_048_576  # ranks of a data-parallel job, D x P: each costs a few objects in a report (~2 us)

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
    with PAUSED, metered():  # (an expansion makes up to millions of objects, none in a cycle)
        return _Compiler(loops, _Code.of(loops), seen).run(dict(params))


@dataclass
class _Budget:
    """What an expansion may still make: actions and loop iterations (the limits are read when an
    expansion starts, never kept in the compiled code)."""

    actions: int = field(default_factory=lambda: MAX_ACTIONS)
    iterations: int = field(default_factory=lambda: MAX_ITERATIONS)


def too_many_iterations(span: Span):
    raise SchedcError("too-large", f"the schedule runs more than {MAX_ITERATIONS:,} loop iterations; use "
                      "smaller parameters", span)


def too_many_actions(span: Span):
    raise SchedcError("too-large", f"the schedule expands to more than {MAX_ACTIONS:,} actions; use smaller "
                      "parameters", span)


def zero_step(span: Span):
    raise SchedcError("range", "a loop step cannot be 0", span)


def negative(value: int, span: Span, what: str):
    raise SchedcError("range", f"{what} index is negative ({value})", span)


@dataclass
class _Scope:
    """Names visible at a point of the source, with where each was defined (static resolution) and
    the type of its value (schedc/expr.py's INT, NUM, ...)."""

    names: dict[str, Span | None] = field(default_factory=dict)
    parent: "_Scope | None" = None
    functions: dict[str, tuple[tuple[str, ...], Function, Span]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    def function(self, name: str):
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.functions:
                return scope.functions[name]
            scope = scope.parent
        return None

    def _holder(self, name: str) -> "_Scope | None":
        """The scope, this one or one it is inside, that defines `name`."""
        scope: _Scope | None = self
        while scope is not None and name not in scope.names:
            scope = scope.parent
        return scope

    def lookup(self, name: str) -> bool:
        return self._holder(name) is not None

    def defined_at(self, name: str) -> Span | None:
        scope = self._holder(name)
        return None if scope is None else scope.names[name]

    def type_of(self, name: str) -> str | None:
        scope = self._holder(name)
        return None if scope is None else scope.types.get(name)

    def all_names(self) -> list[str]:
        out: list[str] = []
        scope: _Scope | None = self
        while scope is not None:
            out.extend(scope.names)
            scope = scope.parent
        return out

    def define(self, name: str, span: Span, kind: str | None = None) -> None:
        if self.lookup(name) or self.function(name) is not None:
            where = self.defined_at(name)
            note = [f"first defined at {where}"] if where is not None else []
            raise SchedcError("redefined", f"'{name}' is already defined; pick another name",
                              span, note)
        self.names[name] = span
        if kind is not None:
            self.types[name] = kind

    def child(self) -> "_Scope":
        return _Scope({}, self)


class _Code:
    """What a loop-level IR compiles to, kept for the next expansion (a built-in loaded again, a
    property test's thousands of settings): the names of the schedule (`scope`) and each compiled
    piece, made the first time an expansion needs it, in the order the source gives, so an error
    that needs no values is raised where it always was. A piece that fails drops the whole (the
    next expansion starts again)."""

    _KEPT: dict[int, tuple[ir_loops.Loops, "_Code"]] = {}
    MAX_KEPT = 256

    def __init__(self, loops: ir_loops.Loops):
        self.loops = loops
        self.scope = _Scope()
        self.pieces: dict = {}

    @classmethod
    def of(cls, loops: ir_loops.Loops) -> "_Code":
        hit = cls._KEPT.get(id(loops))
        if hit is not None and hit[0] is loops:
            return hit[1]
        if len(cls._KEPT) >= cls.MAX_KEPT:
            cls._KEPT.clear()
        code = cls._KEPT[id(loops)] = (loops, cls(loops))
        return code[1]

    def get(self, key, make: Callable):
        """The piece `key`, made by `make()` the first time."""
        if key in self.pieces:
            return self.pieces[key]
        try:
            piece = make()
        except BaseException:
            self._KEPT.pop(id(self.loops), None)
            raise
        self.pieces[key] = piece
        return piece


class _RankState:
    """What `next` needs on one rank: actions emitted per (stage, kind), and the I's still waiting
    for their W, oldest first (`W(next)` takes the oldest). With routes (`routes`: each route's
    microbatch and stage ranges), the k-th microbatch of a stage is the k-th that runs through it."""

    def __init__(self, routes: tuple[tuple[tuple[int, int], tuple[int, int]], ...] | None = None):
        self.count: dict[tuple[int, str], int] = {}
        self.pending: dict[tuple[int, int | None], None] = {}  # (an I's microbatch: an int, as its arity says)
        self.routes = routes

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
        k = self.count.get((stage, kind), 0)
        if not self.routes:
            return k
        end = 0
        for (a, b), (c, d) in sorted(r for r in self.routes if r[1][0] <= stage < r[1][1]):
            if k < b - a:
                return a + k
            k, end = k - (b - a), b
        return end + k  # (past its microbatches: an index the checks report)

    def oldest(self) -> tuple[int, int | None]:
        """(stage, microbatch) of the oldest I still waiting for its W."""
        return next(iter(self.pending))


class _Compiler:
    def __init__(self, loops: ir_loops.Loops, code: _Code, seen: Seen | None = None):
        self.loops = loops
        self.tree = loops.tree
        self.code = code
        self.scope = code.scope
        self.budget = _Budget()
        self.seen = seen

    def expr(self, e: ast.Expr, scope: _Scope) -> Eval:
        """`e` compiled (once per IR) as a function of an environment."""
        return self.code.get(("expr", id(e)), lambda: _compile_expr(e, scope))

    # ---- the whole schedule ----
    def run(self, overrides: dict[str, int]) -> Program:  # noqa: C901
        tree, loops = self.tree, self.loops
        env: Env = {}
        known = {p.name for p in tree.params}
        for name in overrides:
            if name not in known:
                hint = _did_you_mean(name, known)
                listed = ", ".join(sorted(known)) or "none"
                raise SchedcError("unknown-param", f"schedule '{tree.name}' has no parameter "
                                  f"'{name}' (its parameters: {listed}){hint}", where="--param")
        for i, p in enumerate(tree.params):
            value: object  # (a default's value is any the expression gives, checked below)
            if p.name in overrides:
                value = overrides[p.name]
            elif p.default is not None:  # (in the scope of the parameters before it)
                before = _Scope({q.name: q.span for q in tree.params[:i]}, types={q.name: INT for q in tree.params[:i]})
                value = self.expr(p.default, before)(env)
            else:
                raise SchedcError("missing-param", f"parameter '{p.name}' has no default; "
                                  f"pass --param {p.name}=N", p.span)
            if type(value) is not int:
                raise SchedcError("type", f"parameter '{p.name}' must be an integer", p.span)
            if abs(value) > MAX_INT:
                raise SchedcError("too-large", f"parameter '{p.name}' = {value} is too large", p.span)
            self.code.get(("param", i), lambda: self.scope.define(p.name, p.span, INT))
            env[p.name] = value

        decls: dict[str, tuple[int, Span]] = {}
        routes: list[Route] = []
        for item in loops.header:
            if isinstance(item, ast.Let):
                self.header_let(item, env)
            elif isinstance(item, ast.Require):
                self.require(item, env)
            elif isinstance(item, ast.Route):
                a, b, c, d = (self.int_value(e, self.scope, env, "route")
                              for e in (item.mb_start, item.mb_stop, item.stage_start, item.stage_stop))
                routes.append(Route((a, b), (c, d), item.span))
            else:
                decls[item.what] = (self.int_value(item.value, self.scope, env, item.what), item.span)
        if routes:  # (what `next` counts by; `_State` reads it from the environment)
            env[_ROUTES] = tuple((r.microbatches, r.stages) for r in routes)

        num_ranks = self.num_ranks(decls, env, loops.bodies)
        replicas = self.replicas(decls)
        if replicas * num_ranks > MAX_JOB_RANKS:
            raise SchedcError("too-large", f"{replicas:,} replicas of {num_ranks:,} ranks make {replicas * num_ranks:,} "
                              f"ranks; a job takes at most {MAX_JOB_RANKS:,}", decls["replicas"][1])
        by_replica = self.rank_bodies(loops, num_ranks, env, replicas)
        rank_lists, shared = by_replica[0], _shared(by_replica)
        num_stages = self.count("stages", decls, MAX_STAGES, rank_lists, loops.placement,
                                lambda a: a.stage)
        num_mb = self.count("microbatches", decls, MAX_MICROBATCHES, rank_lists, None,
                            lambda a: a.microbatch, param="M", env=env)
        stage_to_rank = self.placement(loops.placement, num_stages, num_ranks, env, rank_lists)
        checked = self.routes(tuple(routes), num_stages, num_mb)
        model_stages = ir_model_stages(num_stages, checked)
        notes = self.annotations(loops.annotations, num_stages, num_ranks, env, model_stages)
        program = Program(
            name=tree.name,
            num_ranks=num_ranks,
            num_stages=num_stages,
            num_microbatches=num_mb,
            placement=stage_to_rank,
            ranks=shared[0],
            params=tuple((p.name, env[p.name]) for p in tree.params),
            annotations=notes,
            source=tree.span.file,
            forward_only=loops.forward_only is not None,
            p2p=loops.p2p.mode if loops.p2p is not None else "shared",
            replicas=shared[1:],
            routes=checked,
        )
        if loops.order is None:
            return program
        # (a replica that runs an earlier one's lists is ordered once and shares the result)
        ordered: dict[int, tuple] = {}
        for ranks in (program.ranks, *program.replicas):
            if id(ranks) not in ordered:
                ordered[id(ranks)] = self.reorder(replace(program, ranks=ranks, replicas=()), loops.order, env).ranks
        return replace(program, ranks=ordered[id(program.ranks)],
                       replicas=tuple(ordered[id(r)] for r in program.replicas))

    def header_let(self, item: ast.Let, env: Env) -> None:
        """A `let` of the header: a value, bound in `env`, or a function."""
        if item.params is not None:
            self.code.get(("let", id(item)), lambda: define_function(item, self.scope))
            return
        value = self.code.get(("let", id(item)), lambda: self.let_value(item))
        env[item.name] = value(env)

    def let_value(self, item: ast.Let) -> Eval:
        value = _compile_expr(item.value, self.scope)
        self.scope.define(item.name, item.span, _inferred_type(value))
        return value

    @staticmethod
    def routes(routes: tuple[Route, ...], num_stages: int, num_mb: int) -> tuple[Route, ...]:
        """The routes, if they describe a program (deps.py's `route_problems`; a `route` error at the
        first that does not); none where one run of stages takes every microbatch (the default)."""
        from .rules.deps import route_problems
        problems = route_problems(num_stages, num_mb, routes)
        if problems:
            k, why = problems[0]
            raise SchedcError("route", f"{why} (the schedule has {num_stages} stages and {num_mb} microbatches)",
                              routes[k].span)
        return () if all(r.stages == (0, num_stages) for r in routes) else routes

    def replicas(self, decls) -> int:
        """`replicas D`: how many data-parallel replicas of the pipeline run (1 by default)."""
        if "replicas" not in decls:
            return 1
        value, span = decls["replicas"]
        if not 1 <= value <= MAX_REPLICAS:
            raise SchedcError("range", f"the number of replicas must be in 1..{MAX_REPLICAS}, got {value}", span)
        return value

    def reorder(self, program: Program, order: ast.Order, env: Env) -> Program:
        from .order import KINDS, greedy_order
        prefer: tuple[Op, ...] = (Op.I, Op.F, Op.W, Op.B)
        cap: float | None = None
        given: set[str] = set()
        for opt in order.options:
            if opt.name in given:  # (one would silently win)
                raise SchedcError("duplicate-decl", f"order greedy's '{opt.name}' is given twice", opt.span)
            given.add(opt.name)
            if opt.name == "prefer" and opt.names:
                unknown = [n for n in opt.names if n not in KINDS]
                if unknown or len(set(opt.names)) != len(opt.names):
                    raise SchedcError("order", f"prefer lists compute kinds F, B, I, W once each; got "
                                      f"{', '.join(opt.names)}", opt.span)
                prefer = tuple(KINDS[n] for n in opt.names)
            elif opt.name == "memory" and opt.value is not None:
                limit = self.expr(opt.value, self.scope)(env)
                if not (type(limit) is int or type(limit) is float):
                    raise SchedcError("type", "order greedy's memory must be a number, not a condition",
                                      opt.value.span)
                if limit < 0:  # (a bad option of order greedy: `order`, with the value it came to)
                    raise SchedcError("order", f"order greedy's memory {_came_to(opt.value, limit, env)}; "
                                      "the cap is non-negative", opt.value.span)
                cap = limit
            elif opt.name in ("prefer", "memory"):  # (the option is known: its value has the wrong form)
                wanted = "a list of compute kinds, as [I, F, W]" if opt.name == "prefer" else "a number, the cap"
                raise SchedcError("order", f"order greedy's {opt.name} takes {wanted}", opt.span)
            else:
                raise SchedcError("order", f"order greedy takes prefer = [kinds] and memory = limit; "
                                  f"'{opt.name}' is not an option", opt.span)
        return greedy_order(program, prefer, cap, order.span)

    def require(self, item: ast.Require, env: Env) -> None:
        for c in item.constraints:
            if not as_truth(self.expr(c.cond, self.scope)(env), c.cond.span):  # (a number is a `type` error)
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

    def rank_bodies(self, loops: ir_loops.Loops, num_ranks: int, env: Env, replicas: int = 1) -> list[list[list]]:
        """Per replica, per rank, the steps (the generic body may name its replica: `rank r, replica d`).
        Ranks run in order; a stretch of ranks without a body of their own runs in one call of the
        generic body's code."""
        specific: dict[int, ir_loops.Body] = {}
        for b in loops.specific:
            assert b.rank is not None  # (a `rank N` body: the bodies without a rank's name have a number)
            if b.rank >= num_ranks:
                raise SchedcError("range", f"rank {b.rank} is out of range: the schedule has "
                                  f"{num_ranks} rank(s)", b.span)
            specific[b.rank] = b
        reporting = self.seen is not None
        generic: Callable | None = None
        generic_body = loops.generic
        if generic_body is not None:
            generic = self.code.get(("body", generic_body.position, reporting),
                                    lambda: _BodyWriter(self.scope, reporting, loops.uses_next).code(generic_body))
        compiled = {rank: self.code.get(("body", b.position, reporting),
                                        lambda: _BodyWriter(self.scope, reporting, loops.uses_next).code(b))
                    for rank, b in specific.items() if not b.literal}
        starts = sorted(specific) + [num_ranks]
        out: list[list[list]] = []
        # a body that does not name its replica runs the same lists in every replica: expanded once
        # (and counted once against the limits), every replica sharing them (schedc/verify/symmetry.py)
        same = loops.generic is None or loops.generic.replica is None
        for d in range(1 if same else replicas):
            seen = self.seen if d == 0 else None
            lists: list[list] = []
            rank = 0
            while rank < num_ranks:
                body = specific.get(rank)
                if body is None:  # up to the next rank with a body of its own
                    if generic is None:
                        raise SchedcError("missing-rank", f"rank {rank} has no body: add `rank {rank} {{ ... }}` "
                                          "or a `rank r { ... }` for all ranks", self.tree.name_span)
                    stop = next(s for s in starts if s > rank)
                    generic(env, range(rank, stop), d, lists, seen, self.budget)
                    rank = stop
                    continue
                if body.literal:
                    lists.append(self.literal_rank(body, rank, env, seen))
                else:
                    compiled[rank](env, (rank,), d, lists, seen, self.budget)
                rank += 1
            out.append(lists)
        return out * replicas if same else out

    def literal_rank(self, body: ir_loops.Body, rank: int, env: Env, seen) -> list:
        """The steps of `rank N: 0F0 0B0 ...` (parsed once), each counted against the budget."""
        steps = self.code.get(("literal", body.position), lambda: [_parsed(_literal(site)) for site in body.nodes])
        out = []
        sites = cast("tuple[ir_loops.Site, ...]", body.nodes)  # (a literal action's each, as _literal checked)
        for site, step in zip(sites, steps):
            if isinstance(step, SchedcError):
                raise step
            self.budget.actions -= len(step.parts)
            if self.budget.actions < 0:
                too_many_actions(site.action.span)
            out.append(step)
            if seen is not None:
                seen(rank, site.index, step, env)
        return out

    def placement(self, p: ast.Placement | None, num_stages, num_ranks, env, rank_lists):  # noqa: C901
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
            assert p.var is not None and p.expr is not None  # (`place s -> E`: parse gives both)
            fn = self.code.get(("place", id(p)), lambda: self.placement_expr(p))
            charge(num_stages * (1 + fn.steps), p.expr.span)
            values = []
            for s in range(num_stages):
                local = dict(env)
                local[p.var] = s
                values.append((fn(local), p.expr.span))
        else:
            if len(p.table) != num_stages:
                raise SchedcError("placement", f"the placement table has {len(p.table)} entries but "
                                  f"there are {num_stages} stages", p.span)
            values = [(self.expr(e, self.scope)(env), e.span) for e in p.table]
        out = []
        for s, (rank, span) in enumerate(values):
            if type(rank) is not int or not 0 <= rank < num_ranks:
                raise SchedcError("placement", f"stage {s} is placed on rank {rank!r}, which is not "
                                  f"a rank in 0..{num_ranks - 1}", span)
            out.append(rank)
        return tuple(out)

    def placement_expr(self, p: ast.Placement) -> Eval:
        """`place s -> E`: E compiled with the stage named."""
        assert p.var is not None and p.expr is not None  # (`place s -> E`: parse gives both)
        inner = self.scope.child()
        inner.define(p.var, p.span, INT)
        return _compile_expr(p.expr, inner)

    def annotations(self, items, num_stages, num_ranks, env, model_stages=None) -> Annotations:  # noqa: C901
        base_cost: dict[str, float] = {}
        stage_cost: dict[int, dict[str, float]] = {}
        base_mem: dict[str, float] = {}
        stage_mem: dict[int, dict[str, float]] = {}
        speed = [DEFAULT_SPEED] * num_ranks
        dispatch = [0.0] * num_ranks
        limits: dict[int, float] = {}
        extras = {"latency": 0.0, "bandwidth": 0.0}
        for item in items:
            index = None
            if item.scope is not None:
                index = self.int_value(item.scope_expr, self.scope, env, item.scope)
                bound = num_stages if item.scope == "stage" else num_ranks
                if not 0 <= index < bound:
                    raise SchedcError("range", f"{item.scope} {index} is out of range 0..{bound - 1}",
                                      item.scope_expr.span)
            for s in item.settings:
                given = self.expr(s.value, self.scope)(env)
                what = f"{item.what} {item.scope} {index}: {s.name}" if item.scope is not None else \
                    f"{item.what} {s.name}"
                if not (type(given) is int or type(given) is float):  # (a condition: the one `type` here)
                    raise SchedcError("type", f"{what} must be a number, not a condition", s.value.span)
                if given < 0:  # a bad value, as from --cost or a cost file: `costs`, with the value
                    kind = "memory limits" if s.name == "limit" else "memory sizes" if item.what == "memory" \
                        else "costs"
                    raise SchedcError("costs", f"{what} {_came_to(s.value, given, env)}; {kind} are non-negative",
                                      s.value.span)
                value = float(given)
                if item.what == "cost":
                    if s.name in extras:
                        extras[s.name] = value
                    elif s.name == "dispatch":
                        for r in ([index] if index is not None else range(num_ranks)):
                            dispatch[r] = value
                    elif item.scope == "rank":
                        if value <= 0:  # (a rank's times are the stage times divided by its speed)
                            raise SchedcError("costs", f"{what} {_came_to(s.value, given, env)}; a rank's speed "
                                              "is positive", s.value.span)
                        assert index is not None  # (a `rank N` annotation: its index read above)
                        speed[index] = value
                    else:
                        (stage_cost.setdefault(index, {}) if index is not None else base_cost)[s.name] = value
                elif s.name == "limit":
                    for r in ([index] if index is not None else range(num_ranks)):
                        limits[r] = value
                else:
                    (stage_mem.setdefault(index, {}) if index is not None else base_mem)[s.name] = value
        # given values are absolute; the rest is each stage's share of a rank-sized chunk (ir.default_share)
        L = num_stages if model_stages is None else model_stages  # (routes: copies of a model of L stages)
        costs = _per_stage(StageCost.default(L, num_ranks), num_stages, base_cost, stage_cost)
        memory = _per_stage(StageMemory.default(L, num_ranks), num_stages, base_mem, stage_mem)
        return Annotations(costs, memory, tuple(speed), tuple(sorted(limits.items())),
                           extras["latency"], extras["bandwidth"], tuple(dispatch) if any(dispatch) else ())


def _came_to(expr, value: int | float, env: Env) -> str:
    """How a message gives the value `expr` came to: `is -1` for a literal, `evaluates to -1 at
    M=101` for an expression of the parameters (and loop variables) it names."""
    names = ", ".join(f"{n}={env[n]}" for n in dict.fromkeys(ast.names_in(expr)) if n in env)
    shown = repr(value)
    if names:
        return f"evaluates to {shown} at {names}"
    return f"is {shown}" if span_text(expr.span).replace(" ", "") == shown else f"evaluates to {shown}"


def _per_stage(default, num_stages: int, given: dict, by_stage: dict[int, dict]) -> tuple:
    """`default.with_settings` for every stage: `given` for all, and `by_stage[s]` on top for stage s
    (the stages without settings of their own share one object: no work per stage)."""
    shared = default.with_settings(given)
    out = [shared] * num_stages
    for s, own in by_stage.items():
        out[s] = default.with_settings({**given, **own})
    return tuple(out)


def define_function(s: ast.Let, scope: _Scope) -> Function:
    """`let f(a, b) = E`: a pure function; its parameters may shadow outer names inside E."""
    assert s.params is not None  # (called for a `let` with parameters only: a value's has none)
    if len(set(s.params)) != len(s.params):
        raise SchedcError("redefined", f"function '{s.name}' names a parameter twice", s.span)
    inner = _Scope({p: s.span for p in s.params}, scope)
    fn = compile_function(s.params, s.value, inner)
    if scope.lookup(s.name) or scope.function(s.name) is not None or s.name in FUNCTIONS:
        raise SchedcError("redefined", f"'{s.name}' is already defined; pick another name", s.span)
    scope.functions[s.name] = (s.params, fn, s.span)
    return fn


def _literal(site: ir_loops.Node) -> ast.LiteralAction:
    """The action of a node of a literal body (`rank N: 0F0 ...`): a site, of a literal action
    (schedc/loops.py makes a literal body of nothing else)."""
    assert isinstance(site, ir_loops.Site) and isinstance(site.action, ast.LiteralAction)
    return site.action


def _inferred_type(value: Eval) -> str:
    """The type `compile_expr` inferred for the value of the function it made (which it keeps on
    the function, as `type`; schedc/expr.py's INT, NUM, ...)."""
    kind: str = getattr(value, "type")
    return kind


def _parsed(a: ast.LiteralAction):
    """A literal action's step, or the error that it is not one."""
    try:
        return parse_step(a.text, a.span)
    except ActionSyntaxError as exc:
        return SchedcError("bad-action", str(exc), a.span)


# the slots' own setters (`vars`: the member descriptors, which mypy reads as the fields' types; as ir.py's)
_SET_KIND, _SET_PARTS, _SET_SPAN = (vars(Compound)[name].__set__ for name in ("kind", "parts", "span"))


def _compound(kind: CompoundKind, parts: tuple[Action, ...], span: Span) -> Compound:
    """`Compound(kind, parts, span)` without the dataclass's frozen setters (as ir.unchecked_action
    makes an action): a schedule of overlapped pairs makes millions."""
    step = object.__new__(Compound)
    _SET_KIND(step, kind)
    _SET_PARTS(step, parts)
    _SET_SPAN(step, span)
    return step


# ---- the rank bodies as Python code ----
MAX_NESTED_LOOPS = 12  # `for` loops one generated function nests (Python allows 20 blocks)
MAX_INDENT = 24  # ... and levels of indentation (the tokenizer allows 100 in a file)
_ROUTES = "$routes"  # the environment's entry of the routes `next` counts by (not a name the language can write)
_RUN = {**RUNTIME, "_mk": unchecked_action, "_Compound": _compound, "_State": _RankState,
        "too_many_iterations": too_many_iterations, "too_many_actions": too_many_actions,
        "zero_step": zero_step, "negative": negative}


class _BodyWriter:
    """Python source of one rank body, compiled into

        body(env, ranks, replica, lists, seen, budget)

    which appends to `lists` the steps of each rank in `ranks` (the header's names read from
    `env`), counting actions and loop iterations against `budget`. Names are Python variables
    (`v_NAME`); each statement is written where it was, and a statement nested too deep for
    Python is written as a function of its own. `reporting`: call `seen` for every step (the
    prover); `counting`: keep the per-rank state that `next` reads."""

    def __init__(self, root: _Scope, reporting: bool, counting: bool):
        self.root, self.reporting, self.counting = root, reporting, counting
        self.module = Module()
        self.module.globals.update(_RUN)
        self.functions = Functions(self.module, local=True)
        self.rank = "_rank"
        self.counters: set[str] = set()
        self.before: list[str] = []  # lines before the loop over the ranks (`hoisted`)
        self.top: Block | None = None  # the rank body's own block (a statement at its first level runs once a rank)
        self.frames: list[list] = []  # per loop open (innermost last): the steps of its statements, as written

    def code(self, body: ir_loops.Body) -> Callable:
        """The compiled function of a rank body (its header: every name of the schedule's header
        read from `env`, the header's `let` functions nested; then a loop over the ranks)."""
        top = self.top = Block()
        scope = self.root.child()
        for _, fn, _ in _all_functions(self.root):
            self.functions.define(fn, top)
        for name in self.root.all_names():
            top.line(f"v_{name} = _env[{name!r}]")
        top.line("_ia, _ii = _budget.actions, _budget.iterations")
        self.rank = "_rank" if body.var is None else f"v_{body.var}"  # the rank being expanded
        self.counters = {n for n in (body.var, body.replica) if n is not None}  # a rank's and a replica's: never negative
        if body.var is not None:
            scope.define(body.var, body.span, INT)
        loop = len(top.lines)  # (where the ranges made before the ranks go)
        top.line("")  # (the charge for the ranks' statements, once they are written)
        top.line(f"if _M.left < 0: too_much_work({self.span(body.span)})")
        top.line(f"for {self.rank} in _ranks:")
        top.indent, top.loops = 1, 1
        if body.replica is not None:
            scope.define(body.replica, body.span, INT)
            top.line(f"v_{body.replica} = _replica")
        top.line("_out = []")
        if self.counting:
            top.line(f"_st = _State(_env.get({_ROUTES!r}))")
        self.frames.append([1])
        self.block(body.nodes, scope, top)
        top.lines[loop] = f"_M.left -= len(_ranks) * {self.steps(self.frames.pop())}"
        top.line("_lists.append(_out)")
        top.indent -= 1
        top.line("_budget.actions, _budget.iterations = _ia, _ii")
        top.lines[loop:loop] = self.before
        self.functions.finish()
        return self.module.function(top, "body", "_env", "_ranks", "_replica", "_lists", "_seen", "_budget")

    def emitter(self, block: Block) -> Emitter:
        """An emitter for an expression evaluated where this body is now (its steps counted there)."""
        emitter = Emitter(self.module, block, local=True, functions=self.functions)
        self.frames[-1].append(emitter)
        return emitter

    @staticmethod
    def steps(frame: list) -> int:
        """The steps of one run of the statements of a frame (every arm of an `if` counted)."""
        return sum(x.steps if isinstance(x, Emitter) else x for x in frame)

    def span(self, span: Span) -> str:
        return self.module.const(span, "_s")

    # ---- statements ----
    def block(self, nodes, scope: _Scope, block: Block) -> None:
        start = len(block.lines)
        for node in nodes:
            self.stmt(node, scope, block)
        if len(block.lines) == start:
            block.line("pass")

    def stmt(self, s: ir_loops.Node, scope: _Scope, block: Block) -> None:
        if isinstance(s, (ir_loops.Loop, ir_loops.Branch)) and (block.loops >= MAX_NESTED_LOOPS
                                                                 or block.indent >= MAX_INDENT):
            block = self.nested(block)
        self.frames[-1].append(1)
        if any(calls_memoized(e, scope) for e in _evaluated(s)):  # (where a budget run out in a function is reported)
            block.line(f"_M.at = {self.span(s.span)}")
        if isinstance(s, ast.Let):
            self.let(s, scope, block)
        elif isinstance(s, ir_loops.Loop):
            self.for_(s, scope, block)
        elif isinstance(s, ir_loops.Branch):
            self.if_(s, scope, block)
        else:
            self.do(s, scope, block)

    def nested(self, block: Block) -> Block:
        """A function nested in `block`, called here: the statements written into it run here,
        reading the same variables (Python limits how deep one function nests)."""
        name = self.module.fresh("_nested")
        inner = block.nest(f"{name}()")
        inner.line("nonlocal _ia, _ii")
        block.line(f"{name}()")
        return inner

    def let(self, s: ast.Let, scope: _Scope, block: Block) -> None:
        if s.params is not None:
            self.functions.define(define_function(s, scope), block)
            return
        src, kind = self.emitter(block).expr(s.value, scope)
        scope.define(s.name, s.span, kind)
        block.line(f"v_{s.name} = {src}")

    def for_(self, s: ir_loops.Loop, scope: _Scope, block: Block) -> None:
        hoisted = self.hoisted(s, scope)
        loop, length = hoisted or self.loop_range(s, scope, block)
        # a loop of the same range on every rank, at the rank body's first level (run once a rank): its
        # iterations and work charged once for all the ranks, before them, as the body's own steps are
        # (65,536 ranks of gpipe at M=2 paid four budget lines a loop a rank)
        once = hoisted is not None and block is self.top and block.indent == 1 and block.loops == 1
        lines, times = (self.before, f"len(_ranks) * {length}") if once else (block.lines, length)
        pad = "" if once else "    " * block.indent
        lines.append(f"{pad}_ii -= {times}")
        lines.append(f"{pad}if _ii < 0: too_many_iterations({self.span(s.span)})")
        charged = len(lines)
        lines.append("")  # (the charge for the iterations, once the body is written)
        lines.append(f"{pad}if _M.left < 0: too_much_work({self.span(s.span)})")
        inner = scope.child()
        inner.define(s.var, s.span, INT)
        block.line(f"for v_{s.var} in {f'reversed({loop})' if s.reversed else loop}:")
        block.indent += 1
        block.loops += 1
        self.frames.append([1])
        self.block(s.body, inner, block)
        lines[charged] = ("" if once else "    " * (block.indent - 1)) + f"_M.left -= {times} * {self.steps(self.frames.pop())}"
        block.loops -= 1
        block.indent -= 1

    def loop_range(self, s: ir_loops.Loop, scope: _Scope, block: Block) -> tuple[str, str]:
        """Statements that make a loop's range `_r`, checking its bounds; (`_r`, its length)."""
        em = self.emitter(block)
        start, stop = (em.integer(*em.expr(x, scope), x.span) for x in (s.start, s.stop))
        if s.step is None:
            block.line(f"_r = range({start}, {stop})")
        else:
            step, kind = em.expr(s.step, scope)
            if isinstance(s.step, ast.Num) and s.step.value and kind == INT:
                block.line(f"_r = range({start}, {stop}, {step})")
            else:
                block.line(f"_lo, _hi, _k = {start}, {stop}, {em.integer(step, kind, s.step.span)}")
                block.line(f"if _k == 0: zero_step({self.span(s.step.span)})")
                block.line("_r = range(_lo, _hi, _k)")
        return "_r", "len(_r)"

    def hoisted(self, s: ir_loops.Loop, scope: _Scope) -> tuple[str, str] | None:
        """A loop whose bounds are integers of the header (or numbers) has the same range on every
        rank: made once, before the ranks (nothing to check, nothing that can fail); (its name, the
        name of its length). None for any other loop."""
        bounds = (s.start, s.stop) + (() if s.step is None else (s.step,))
        if not all(self.invariant(x, scope) for x in bounds) or (s.step is not None and not _positive(s.step)):
            return None
        em = self.emitter(Block())
        name = self.module.fresh("_range")
        self.before.append(f"{name} = range({', '.join(em.expr(x, scope)[0] for x in bounds)})")
        self.before.append(f"{name}_length = len({name})")
        return name, f"{name}_length"

    def invariant(self, x: ast.Expr, scope: _Scope) -> bool:
        """An integer literal, or an integer of the header: the same on every rank."""
        if isinstance(x, ast.Num):
            return type(x.value) is int
        return isinstance(x, ast.Var) and scope._holder(x.name) is self.root and self.root.type_of(x.name) == INT

    def if_(self, s: ir_loops.Branch, scope: _Scope, block: Block) -> None:
        em = self.emitter(block)
        for k, (cond, body) in enumerate(s.arms):
            block.line(f"{'if' if k == 0 else 'elif'} {em.condition(cond, scope)}:")
            block.indent += 1
            self.block(body, scope.child(), block)
            block.indent -= 1
        if s.orelse:
            block.line("else:")
            block.indent += 1
            self.block(s.orelse, scope.child(), block)
            block.indent -= 1

    # ---- actions ----
    def do(self, site: ir_loops.Site, scope: _Scope, block: Block) -> None:
        call = site.action
        assert isinstance(call, ast.Call)  # (a body of statements: its sites are `Do`s; literal actions are a literal body's)
        if call.name in COMPOUND_NAMES:
            self.compound(site, scope, block)
            return
        if call.name not in ACTION_OPS:
            kinds = " ".join(ACTION_OPS) + " group overlap"
            if call.name in FUNCTIONS:
                msg = f"{call.name}(...) is a value, not an action; actions are: {kinds}"
            else:
                msg = f"unknown action '{call.name}'{_did_you_mean(call.name, list(ACTION_OPS))}; " \
                      f"actions are: {kinds}"
            raise SchedcError("unknown-action", msg, call.name_span)
        if _is_next_w(call):  # the oldest I without its W, if any
            block.line("if _st.pending:")
            block.indent += 1
            block.line(f"_a = _mk({self.op(Op.W)}, *_st.oldest(), {self.span(call.span)})")
            self.emit(site, "_a", scope, block)
            block.indent -= 1
            return
        action = self.action(call, scope, block)
        self.emit(site, action, scope, block)

    def compound(self, site: ir_loops.Site, scope: _Scope, block: Block) -> None:
        """`group(...)` or `overlap(...)`: one step of several actions."""
        call = site.action
        assert isinstance(call, ast.Call)  # (as in `do`, which calls this)
        kind = CompoundKind.GROUP if call.name == "group" else CompoundKind.OVERLAP_F_B
        if not call.args or (kind is CompoundKind.OVERLAP_F_B and len(call.args) != 2):
            need = "two actions, e.g. overlap(F(0, 1), B(7, 0))" if kind is CompoundKind.OVERLAP_F_B \
                else "at least one send or receive"
            raise SchedcError("arity", f"{call.name}(...) takes {need}", call.span)
        self.count(call.span, block, len(call.args))  # (its actions are counted before they are made)
        parts = []
        for k, arg in enumerate(call.args):
            if not isinstance(arg, ast.Call) or arg.name not in ACTION_OPS:
                raise SchedcError("bad-action", f"the parts of {call.name}(...) must be actions", arg.span)
            op = ACTION_OPS[arg.name]
            if kind is CompoundKind.GROUP and not op.is_comm:
                raise SchedcError("bad-action", "a group holds only SEND_F/RECV_F/SEND_B/RECV_B; "
                                  f"{arg.name} is not communication", arg.span)
            if kind is CompoundKind.OVERLAP_F_B and not op.is_compute:
                raise SchedcError("bad-action", f"overlap(...) pairs compute actions; {arg.name} "
                                  "is not one", arg.span)
            if _is_next_w(arg):
                raise SchedcError("bad-action", f"W(next) cannot be part of {call.name}(...): it may "
                                  "emit nothing", arg.span)
            block.line(f"_p{k} = {self.action(arg, scope, block)}")
            parts.append(f"_p{k}")
        kind_name = self.module.const(kind, "_kind")
        block.line(f"_a = _Compound({kind_name}, ({', '.join(parts)},), {self.span(call.span)})")
        self.emit(site, "_a", scope, block, counted=True)

    def action(self, call: ast.Call, scope: _Scope, block: Block) -> str:
        """Statements that evaluate and check an action's stage and microbatch; the expression
        that makes it."""
        op = ACTION_OPS[call.name]
        want = 2 if op.has_microbatch else 1
        if len(call.args) != want:
            form = f"{op.value}(stage, microbatch)" if want == 2 else f"{op.value}(stage)"
            raise SchedcError("arity", f"{op.value} takes {want} argument(s): {form}", call.span)
        auto = want == 2 and _is_next(call.args[1])
        if auto and op.is_comm:
            raise SchedcError("bad-action", f"{op.value}(stage, next): `next` numbers compute actions only",
                              call.args[1].span)
        args = call.args[:1] if auto else call.args
        values = self.indices(args, ("stage", "microbatch"), scope, block)
        if auto:
            values.append(f"_st.next_microbatch({self.op(op)}, {values[0]})")
        elif want == 1:
            values.append("None")
        return f"_mk({self.op(op)}, {', '.join(values)}, {self.span(call.span)})"

    def indices(self, args, what, scope: _Scope, block: Block) -> list[str]:
        """Evaluate a stage (and microbatch), then check each is a non-negative integer: the sources
        that read them."""
        em = self.emitter(block)
        values = []
        for k, arg in enumerate(args):
            src, kind = em.expr(arg, scope)
            if not (kind == INT and isinstance(arg, (ast.Var, ast.Num))):  # evaluated once, in order
                block.line(f"_i{k} = {src}")
                src = f"_i{k}"
            values.append((src, kind, arg))
        for (src, kind, arg), name in zip(values, what):
            if kind != INT:
                self.frames[-1].append(CHECK_STEPS)
                block.line(f"{src} = as_nonneg({src}, {self.span(arg.span)}, {name!r})")
            elif not (isinstance(arg, ast.Num) or isinstance(arg, ast.Var) and arg.name in self.counters):
                block.line(f"if {src} < 0: negative({src}, {self.span(arg.span)}, {name!r})")
        return [src for src, _, _ in values]

    def emit(self, site: ir_loops.Site, step: str, scope: _Scope, block: Block, counted: bool = False) -> None:
        """Count the step (unless `counted`), append it to the rank's list, and tell `seen` of it
        and `next`'s state."""
        if not counted:
            self.count(site.action.span, block)
        if self.reporting or self.counting:
            if step != "_a":
                block.line(f"_a = {step}")
                step = "_a"
        block.line(f"_out.append({step})")
        if self.reporting:
            names = ", ".join(f"{n!r}: v_{n}" for n in scope.all_names())
            block.line(f"if _seen is not None: _seen({self.rank}, {site.index}, _a, {{{names}}})")
        if self.counting:
            assert isinstance(site.action, ast.Call)  # (as in `do`, which calls this)
            if site.action.name in COMPOUND_NAMES:
                block.line("for _part in _a.parts: _st.note(_part)")
            else:
                block.line("_st.note(_a)")

    def count(self, span: Span, block: Block, actions: int = 1) -> None:
        block.line(f"_ia -= {actions}")
        block.line(f"if _ia < 0: too_many_actions({self.span(span)})")

    def op(self, op: Op) -> str:
        return self.module.const(op, "_op")


def _evaluated(s: ir_loops.Node) -> tuple[ast.Expr, ...]:
    """The expressions a statement evaluates itself (not those of the statements in its body)."""
    if isinstance(s, ast.Let):
        return () if s.params is not None else (s.value,)
    if isinstance(s, ir_loops.Loop):
        return (s.start, s.stop) + (() if s.step is None else (s.step,))
    if isinstance(s, ir_loops.Branch):
        return tuple(cond for cond, _ in s.arms)
    return (s.action,) if isinstance(s.action, ast.Call) else ()


def _positive(x: ast.Expr) -> bool:
    return isinstance(x, ast.Num) and type(x.value) is int and x.value > 0


def _all_functions(scope: _Scope):
    """The `let` functions defined in a scope and those it is inside."""
    inside: _Scope | None = scope
    while inside is not None:
        yield from inside.functions.values()
        inside = inside.parent


def _is_next(arg) -> bool:
    """`next` in a microbatch position: the next microbatch of that kind and stage on this rank
    (`next` is reserved: no binding shadows it, schedc/parse.py)."""
    return isinstance(arg, ast.Var) and arg.name == "next"


def _is_next_w(call) -> bool:
    """`W(next)`: the weight gradient of the oldest I on this rank that has no W yet."""
    return isinstance(call, ast.Call) and call.name == "W" and len(call.args) == 1 and _is_next(call.args[0])


def _shared(by_replica: list[list[list]]) -> tuple[tuple[tuple[Step, ...], ...], ...]:
    """Each replica's rank lists as tuples, a replica that runs the same lists as an earlier one
    (the same actions from the same source lines) sharing that one's tuples: D identical replicas
    cost one in memory, and compare at once (schedc/verify/symmetry.py)."""
    if len({id(lists) for lists in by_replica}) == 1:  # one replica, or D of one body: nothing to compare
        return (tuple(map(tuple, by_replica[0])),) * len(by_replica)
    made: dict[int, tuple] = {}  # (the same list object: the lists of a body that does not name its replica)
    firsts: dict[tuple, list[tuple]] = {}
    out = []
    for lists in by_replica:
        if id(lists) not in made:
            ranks = tuple(map(tuple, lists))
            alike = firsts.setdefault(ranks, [])
            made[id(lists)] = next((f for f in alike if same_lines(f, ranks)), ranks)
            if made[id(lists)] is ranks:
                alike.append(ranks)
        out.append(made[id(lists)])
    return tuple(out)
