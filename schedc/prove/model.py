"""A parametric schedule as statements over loop domains: the form a proof for every P and M needs.

`model(tree)` reads the schedule's loop-level IR (schedc/loops.py, the one the compiler expands)
as `Stmt`s, one per action call site (and part of an overlap): the frames around it (lets, loops,
guards, outermost first; `rank N` lists get a guard `r == N`), its path (for the order of a rank's
list) and its stage and microbatch expressions, all still source expressions. The fragment is what
a proof can reason about: F/B/I/W actions with explicit microbatches, alone or as the two parts of
an `overlap(...)` step (one statement each, sharing one step), no `order` and no `next`; the
collectives REDUCE_GRAD/UNSHARD/RESHARD as steps of their own (`Model.collectives`); `replicas D`
when every replica runs the same lists (docs/prove.md, "Replicas and collectives"); routes, kept
as their expressions (`Model.routes`, docs/prove.md "Routes"); anything else raises `Unsupported`
with the reason and its place.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from .. import loops as ir_loops
from .. import syntax as ast
from ..ir import Action, Op
from ..span import Span
from ..rules.memory import op_delta, whole_deltas
from .evaluator import Names, Stop, evaluate

KINDS = ("F", "B", "I", "W")
COLLECTIVES = ("REDUCE_GRAD", "UNSHARD", "RESHARD")  # a stage's own: on its rank, with no microbatch
OUTSIDE = "the proof covers compute actions F, B, I, W and the collectives REDUCE_GRAD, UNSHARD, RESHARD"


class Unsupported(Exception):
    """The schedule uses something the symbolic proof does not cover."""

    def __init__(self, reason: str, span: Span | None = None):
        super().__init__(reason)
        self.reason, self.span = reason, span


@dataclass(frozen=True)
class LetFrame:
    name: str
    value: ast.Expr


@dataclass(frozen=True)
class LoopFrame:
    loop: int  # which loop (an id unique in the schedule)
    var: str
    start: ast.Expr
    stop: ast.Expr
    step: ast.Expr | None
    reversed: bool


@dataclass(frozen=True)
class GuardFrame:
    cond: ast.Expr
    holds: bool  # the branch needs cond true (or false, for the branches after it)


Frame = LetFrame | LoopFrame | GuardFrame


@dataclass(frozen=True)
class Stmt:
    """One action call site, `kind(stage, microbatch)`, with everything around it."""

    index: int
    kind: str
    stage: ast.Expr
    microbatch: ast.Expr
    frames: tuple[Frame, ...]
    path: tuple[tuple[str, int], ...]  # ("s", static position), ("l", loop id), ("c", part), outermost first
    span: Span
    step: int = -1  # the statement whose step this one shares (the first part of an overlap), else index
    site: int = -1  # the IR's call site (loops.Site.index) this statement is (a part of)
    part: int = 0  # which part of the site's step (an overlap's second action: 1)
    fixed: tuple[tuple[str, int], ...] = ()  # loop variables `unroll` fixed in this variant, with values

    @property
    def key(self) -> int:
        """What the certificate is keyed by: the parts of one overlap step run at one time."""
        return self.index if self.step < 0 else self.step

    @property
    def loops(self) -> tuple[LoopFrame, ...]:
        return tuple(f for f in self.frames if isinstance(f, LoopFrame))


@dataclass(frozen=True)
class Model:
    name: str
    params: tuple[str, ...]
    requires: tuple[ast.Expr, ...]
    globals: tuple[LetFrame, ...]  # schedule-level lets, in order
    functions: dict  # name -> (params, body): `let f(x) = ...`, inlined wherever called
    ranks: ast.Expr
    stages: ast.Expr
    microbatches: ast.Expr
    placement: str  # loop | vshape | expr
    place_var: str | None
    place_expr: ast.Expr | None
    rank_var: str
    stmts: tuple[Stmt, ...]
    nonlinear: bool = False  # products of quantities that vary allowed (Z3's nonlinear arithmetic)
    annotations: tuple[ast.Annotation, ...] = ()  # `cost ...` and `memory ...`, in file order
    loops: ir_loops.Loops | None = None  # the IR it was read from: what its concrete instances expand
    collectives: tuple[Stmt, ...] = ()  # REDUCE_GRAD/UNSHARD/RESHARD(stage), each a step of its own
    replicas: ast.Expr | None = None  # `replicas D`: identical replicas of the pipeline the statements are
    routes: tuple[ast.Route, ...] = ()  # `route microbatches A .. B: stages C .. D`, in file order


def domain(tree: ast.Schedule) -> Model:
    """The parameters, requirements, lets and functions alone: enough to enumerate the settings of
    a schedule whose statements the proof cannot cover."""
    loops = ir_loops.build(tree)
    params = tuple(p.name for p in tree.params)
    requires = tuple(c.cond for i in loops.header if isinstance(i, ast.Require) for c in i.constraints)
    lets = tuple(LetFrame(i.name, i.value) for i in loops.header if isinstance(i, ast.Let) and i.params is None)
    functions = {i.name: (i.params, i.value) for i in loops.header if isinstance(i, ast.Let) and i.params is not None}
    if functions:  # compiled once here, in order: one nested too deep to evaluate is an input error
        Names(functions).function(next(reversed(functions)))
    one = ast.Num(1, tree.span)
    return Model(tree.name, params, requires, lets, functions, one, one, one, "loop", None, None, "r", (),
                 loops=loops)


def model(tree: ast.Schedule) -> Model:  # noqa: C901
    loops = ir_loops.build(tree)
    base = domain(tree)
    params, decls, placement = base.params, dict(loops.decls), loops.placement
    if loops.order is not None:
        raise Unsupported("its order is computed by `order greedy(...)`, an algorithm; a proof for every "
                          "size needs the order written as loops", loops.order.span)
    _same_replicas(loops)
    if loops.forward_only is not None:
        raise Unsupported("a forward-only schedule: the proof covers training schedules (each forward "
                          "with its backward)", loops.forward_only.span)

    def decl(what, param):
        if what in decls:
            return decls[what].value
        if param in params:
            return ast.Var(param, tree.span)
        raise Unsupported(f"`{what}` is not declared and there is no parameter {param}", tree.span)

    if placement is None or placement.kind not in ("loop", "vshape", "expr"):
        raise Unsupported("the placement must be `place loop`, `place vshape` or `place s -> expr`",
                          placement.span if placement is not None else tree.span)
    generic, specific = loops.generic, loops.specific
    rank_var = _var_of(generic) if generic is not None else "r"
    builder = _Builder(dict(base.functions))
    for body in specific:  # rank N's own list: its statements hold where r == N only
        only = (GuardFrame(ast.BinOp("==", ast.Var(rank_var, body.span), ast.Num(_rank_of(body), body.span),
                                     body.span), True),)
        if body.literal:
            builder.literal(body.nodes, only, (("s", body.position),))
        else:
            builder.block(body.nodes, only, (("s", body.position),))
    if generic is not None:  # every other rank
        others = tuple(GuardFrame(ast.BinOp("==", ast.Var(rank_var, b.span), ast.Num(_rank_of(b), b.span), b.span),
                                  False) for b in specific)
        builder.block(generic.nodes, others, (("s", generic.position),))
    if "stages" not in decls:  # the compiler would count them from the actions
        raise Unsupported("declare `stages E`: the proof needs the number of stages as an expression", tree.span)
    counted: dict[str, ast.Expr] = {}
    if generic is None and specific:  # only `rank N` lists: count what they say, as the compiler does
        if "ranks" not in decls and "P" not in params:
            counted["ranks"] = ast.Num(max(_rank_of(b) for b in specific) + 1, tree.span)
        numbers = [x.microbatch.value for x in builder.stmts if isinstance(x.microbatch, ast.Num)]
        if "microbatches" not in decls and "M" not in params and len(numbers) == len(builder.stmts) and numbers:
            counted["microbatches"] = ast.Num(max(numbers) + 1, tree.span)
    if loops.routes and "replicas" in decls and any(x.kind == "REDUCE_GRAD" for x in builder.collectives):
        raise Unsupported("REDUCE_GRAD in a job of replicas with routes: whether each model stage's copies are "
                          "averaged all before their sum or all after it (rules/reductions.py) is not asked "
                          "symbolically", decls["replicas"].span)
    return replace(base, ranks=counted.get("ranks") or decl("ranks", "P"), stages=decls["stages"].value,
                   microbatches=counted.get("microbatches") or decl("microbatches", "M"),
                   placement=placement.kind, place_var=placement.var, place_expr=placement.expr,
                   rank_var=rank_var, stmts=tuple(builder.stmts), functions=builder.functions,
                   annotations=loops.annotations, collectives=tuple(builder.collectives),
                   replicas=decls["replicas"].value if "replicas" in decls else None, routes=loops.routes)


def _rank_of(body: ir_loops.Body) -> int:
    """A `rank N` body's N (the generic body, `rank r`, has a variable instead)."""
    assert body.rank is not None
    return body.rank


def _var_of(body: ir_loops.Body) -> str:
    """The generic body's rank variable (`rank r`: r)."""
    assert body.var is not None
    return body.var


def _microbatch_of(a: Action) -> int:
    """A compute action's microbatch (F, B, I, W always have one)."""
    assert a.microbatch is not None
    return a.microbatch


def _same_replicas(loops: ir_loops.Loops) -> None:
    """`replicas D` is in the fragment when every replica runs the same lists: no body names its
    replica (`rank r, replica d`), so the job is D copies of one pipeline (docs/prove.md)."""
    generic = loops.generic
    if generic is None or generic.replica is None:
        return
    use = next((n for n in ast.walk(*generic.nodes) if isinstance(n, ast.Var) and n.name == generic.replica), None)
    if use is not None:
        raise Unsupported(f"replicas that differ (the body names its replica `{generic.replica}`): the proof "
                          "covers a job of identical replicas, D copies of one pipeline", use.span)


class _Builder:
    def __init__(self, functions):
        self.functions = functions
        self.stmts: list[Stmt] = []
        self.collectives: list[Stmt] = []

    def block(self, nodes, frames, path):
        frames = list(frames)
        for k, s in enumerate(nodes):
            here = path + (("s", k),)
            if isinstance(s, ast.Let):
                if s.params is not None:  # inlined where called; names resolve the same there
                    self.functions[s.name] = (s.params, s.value)
                else:
                    frames.append(LetFrame(s.name, s.value))
            elif isinstance(s, ir_loops.Loop):
                loop = LoopFrame(s.id, s.var, s.start, s.stop, s.step, s.reversed)
                self.block(s.body, tuple(frames) + (loop,), here + (("l", loop.loop),))
            elif isinstance(s, ir_loops.Branch):
                before: list[GuardFrame] = []
                for b, (cond, nodes_b) in enumerate(s.arms):
                    self.block(nodes_b, tuple(frames) + tuple(before) + (GuardFrame(cond, True),),
                               here + (("s", b),))
                    before.append(GuardFrame(cond, False))
                self.block(s.orelse, tuple(frames) + tuple(before), here + (("s", len(s.arms)),))
            else:
                self.action(s, tuple(frames), here)

    def literal(self, sites, frames, path):
        from ..ir import ActionSyntaxError, Compound, parse_step
        for k, site in enumerate(sites):
            lit = site.action
            try:
                step = parse_step(lit.text, lit.span)
            except ActionSyntaxError as exc:
                raise Unsupported(f"a literal action that does not parse: {exc}", lit.span) from None
            if isinstance(step, Compound):
                if not all(a.op.value in KINDS for a in step.parts):
                    raise Unsupported(f"{lit.text}: {OUTSIDE} (a collective as a step of its own)", lit.span)
                first = len(self.stmts)
                for c, a in enumerate(step.parts):
                    self.stmts.append(Stmt(len(self.stmts), a.op.value, ast.Num(a.stage, lit.span),
                                           ast.Num(_microbatch_of(a), lit.span), frames,
                                           path + (("s", k), ("c", c)), lit.span, first, site.index, c))
                continue
            if step.op.value in COLLECTIVES:
                self.collective(step.op.value, ast.Num(step.stage, lit.span), frames, path + (("s", k),), lit.span,
                                site.index)
                continue
            if step.op.value not in KINDS:
                raise Unsupported(f"{lit.text}: {_outside(step.op.value)}", lit.span)
            self.stmts.append(Stmt(len(self.stmts), step.op.value, ast.Num(step.stage, lit.span),
                                   ast.Num(_microbatch_of(step), lit.span), frames, path + (("s", k),), lit.span,
                                   site=site.index))

    def action(self, site: ir_loops.Site, frames, path):
        call = site.action
        assert isinstance(call, ast.Call)  # (a literal list's actions are read by `literal`)
        if call.name == "overlap":  # one step, two statements: part 0 keys the pair
            first = len(self.stmts)
            for c, part in enumerate(call.args):
                if not isinstance(part, ast.Call) or part.name in ("overlap", "group") + COLLECTIVES:
                    raise Unsupported("overlap(...) of something other than two compute actions", call.span)
                self.call(part, frames, path + (("c", c),), first, site.index, c)
            return
        self.call(call, frames, path, -1, site.index, 0)

    def call(self, call: ast.Call, frames, path, step: int, site: int, part: int):
        if call.name == "group":
            raise Unsupported("group(...): communication is inserted by schedc, outside the proof", call.span)
        if call.name in COLLECTIVES and step < 0:
            if len(call.args) != 1:
                raise Unsupported(f"{call.name} with {len(call.args)} arguments: it takes a stage", call.span)
            self.collective(call.name, call.args[0], frames, path, call.span, site)
            return
        if call.name not in KINDS:
            raise Unsupported(f"{call.name}: {_outside(call.name)}", call.span)
        if len(call.args) != 2 or any(isinstance(a, ast.Var) and a.name == "next" for a in call.args):
            raise Unsupported(f"{call.name} with `next` numbering: the microbatch must be an expression",
                              call.span)
        self.stmts.append(Stmt(len(self.stmts), call.name, call.args[0], call.args[1], frames, path, call.span,
                               step, site, part))

    def collective(self, kind: str, stage: ast.Expr, frames, path, span, site: int):
        """A collective, a step of its own: no microbatch (0 stands in), outside the compute statements."""
        self.collectives.append(Stmt(len(self.collectives), kind, stage, ast.Num(0, span), frames, path, span,
                                     site=site))


def _outside(name: str) -> str:
    """Why an action is outside the fragment, naming what it is."""
    if name == "REDUCE_TIED":
        what = "the tied all-reduce joins the ranks of the first and the last stage, which this proof does not model"
    elif name.startswith("WAIT_"):
        what = "an explicit wait (the proof reads compute-level schedules, whose waits schedc places)"
    elif "SEND" in name or "RECV" in name:
        what = "explicit communication (the proof reads compute-level schedules, whose messages schedc inserts)"
    else:
        return OUTSIDE
    return f"{OUTSIDE}; {what}"


def rank_lets(m: Model) -> tuple[LetFrame, ...]:
    """The lets every statement starts with (`let warm = ...` at the top of the rank body, before
    its loops): names a memory bound may use besides the parameters and the rank."""
    out = []
    for frames in zip(*(x.frames for x in m.stmts)) if m.stmts else ():
        if not all(isinstance(f, LetFrame) and f == frames[0] for f in frames):
            break
        out.append(frames[0])
    return tuple(out)


def shared_loops(a: Stmt, b: Stmt) -> tuple[tuple[int, ...], bool | None]:
    """The loops both statements sit in (outermost first), and the static order where their paths
    part: True if a comes first, False if b does, None if they are the same statement or the two
    parts of one overlap step (neither runs before the other)."""
    common = []
    for x, y in zip(a.path, b.path):
        if x == y:
            if x[0] == "l":
                common.append(x[1])
            continue
        if x[0] == y[0] == "c":
            return tuple(common), None
        return tuple(common), x[1] < y[1]
    return tuple(common), None if len(a.path) == len(b.path) else len(a.path) < len(b.path)


def one_body(x: Stmt, y: Stmt) -> bool:
    """Both in one rank body: only then can they run on one rank (a `rank N` body runs on rank N
    only, the generic body on the ranks without one)."""
    return x.path[0] == y.path[0]


def order_pairs(stmts):
    """The (x, y) pairs whose order on a rank a certificate must respect: only pairs in one rank
    body (different bodies run on different ranks), not with x wholly after y, and not with a
    statement between them that runs exactly once (a top-level action of the body): x -> z and
    z -> y imply x -> y."""
    def top(x):  # (body, top-level position, runs exactly once there)
        return x.path[0], x.path[1][1], len(x.path) == 2 and x.step < 0
    tops = [top(x) for x in stmts]
    once: dict = {}
    for body, pos, single in tops:
        if single:
            once.setdefault(body, []).append(pos)
    for x, (bx, px, _) in zip(stmts, tops):
        for y, (_, py, _) in zip(stmts, tops):
            if not one_body(x, y) or px > py or any(px < q < py for q in once.get(bx, ())):
                continue
            yield x, y


def stages_apart(x: Stmt, y: Stmt, offset: int) -> bool:
    """Both stages are numbers and x's is not y's + offset (a data edge between them is impossible)."""
    return (isinstance(x.stage, ast.Num) and isinstance(y.stage, ast.Num)
            and x.stage.value != y.stage.value + offset)


def pins(assumptions) -> dict[str, int]:
    """Parameters the assumptions fix to one value (`V == 2`), which the proof substitutes."""
    out = {}
    for e in assumptions:
        if isinstance(e, ast.BinOp) and e.op == "==":
            for a, b in ((e.left, e.right), (e.right, e.left)):
                if isinstance(a, ast.Var) and isinstance(b, ast.Num) and isinstance(b.value, int):
                    out[a.name] = b.value
    return out


MAX_UNROLL = 16


def unroll(m: Model, consts: dict[str, int]) -> Model:
    """Loops whose bounds are known (from pinned parameters and literals) with at most MAX_UNROLL
    iterations become one statement per iteration, the loop variable a constant: `v * P` in
    `for v in 0 .. V` is linear once V is pinned. Guards that are then decided are applied."""
    def known(e, env):
        try:
            return evaluate(e, env, m.functions)
        except (KeyError, Stop, TypeError, ZeroDivisionError):
            return None
    env0 = dict(consts)
    for let in m.globals:
        v = known(let.value, env0)
        if v is None:
            env0.pop(let.name, None)
        else:
            env0[let.name] = v
    return replace(m, stmts=_unrolled(m.stmts, env0, known), collectives=_unrolled(m.collectives, env0, known))


def _unrolled(stmts, env0: dict, known) -> tuple[Stmt, ...]:  # noqa: C901
    """`unroll`'s statements: each one per iteration of the loops it can unroll (`known` evaluates
    an expression, or None)."""
    out: list[Stmt] = []
    parts: dict[int, list[int]] = {}  # statement -> the indices of its variants in `out`
    for stmt in stmts:
        # (frames, known values, loop id -> static position, fixed)
        variants: list[tuple[tuple, dict, dict, tuple]] = [((), dict(env0), {}, ())]
        for f in stmt.frames:
            nxt: list[tuple[tuple, dict, dict, tuple]] = []
            for frames, env, where, fixed in variants:
                if isinstance(f, LetFrame):
                    v = known(f.value, env)
                    env2 = {k: x for k, x in env.items() if k != f.name}
                    if v is not None:
                        env2[f.name] = v
                    nxt.append((frames + (f,), env2, where, fixed))
                elif isinstance(f, GuardFrame):
                    v = known(f.cond, env)
                    if v is None:
                        nxt.append((frames + (f,), env, where, fixed))
                    elif bool(v) == f.holds:
                        nxt.append((frames, env, where, fixed))
                else:
                    a, b = known(f.start, env), known(f.stop, env)
                    k = 1 if f.step is None else known(f.step, env)
                    rng = range(a, b, k) if None not in (a, b, k) and k != 0 else None
                    if rng is None or len(rng) > MAX_UNROLL:
                        nxt.append((frames + (f,), {x: y for x, y in env.items() if x != f.var}, where, fixed))
                        continue
                    for pos, v in enumerate(reversed(rng) if f.reversed else rng):
                        nxt.append((frames + (LetFrame(f.var, ast.Num(v, stmt.span)),), {**env, f.var: v},
                                    {**where, f.loop: pos}, fixed + ((f.var, v),)))
            variants = nxt
        made = []
        for j, (frames, _, where, fixed) in enumerate(variants):
            path = tuple(("s", where[t[1]]) if t[0] == "l" and t[1] in where else t for t in stmt.path)
            # an overlap's second part: its variants pair with its first part's, in the same order
            step = -1 if stmt.step < 0 else (len(out) if stmt.step == stmt.index else parts[stmt.step][j])
            made.append(len(out))
            out.append(Stmt(len(out), stmt.kind, stmt.stage, stmt.microbatch, frames, path, stmt.span, step,
                            stmt.site, stmt.part, fixed))
        parts[stmt.index] = made
    return tuple(out)


@dataclass(frozen=True)
class MemoryUnits:
    """How a proof counts memory: by `check`'s rule (schedc/rules/memory.py's `whole_deltas`), in
    whole units, each `unit` x a stage's activation size (`act`: the file's, or None for the
    default, each stage's share R / S of a rank-sized chunk's one unit, docs/semantics.md "Units").
    `deltas`: what each kind the schedule runs adds (F) or frees (< 0), in units. By default
    (`weight = act`) a unit is one activation: F adds one, B and W free one, I nothing."""

    act: Fraction | None
    unit: Fraction
    deltas: dict[str, int]

    @property
    def sizes(self) -> tuple[int, int]:
        """(act, weight) in units: the sizes to count a stage with (rules/memory.py's rule)."""
        return self.deltas["F"], -self.deltas.get("W", -self.deltas["F"])

    @property
    def one_per_forward(self) -> bool:
        return self.deltas["F"] == 1


def memory_units(m: Model) -> MemoryUnits:
    """The units the proof counts memory in, so that its count x the unit is what `check` counts
    as a rank's activations: every stage has the same sizes (literals, or the defaults) and an I
    frees (never allocates). Unsupported otherwise, with the reason: the count would not be check's."""
    sizes: dict = {}
    for item in m.annotations:
        for s in item.settings if item.what == "memory" else ():
            if s.name in ("limit", "out"):
                continue
            if item.scope == "stage":
                raise Unsupported(f"a per-stage memory size (`memory stage ...: {s.name} = ...`)", s.span)
            if (sizes.setdefault(s.name, literal(s.value))) is None:
                raise Unsupported(f"a memory size that is not a number (`{s.name} = ...`)", s.span)
    kinds = {x.kind for x in m.stmts} | {"F"}
    split = bool(kinds & {"I", "W"})
    if split:
        kinds |= {"I", "W"}
    act, weight = sizes.get("act"), sizes.get("weight")
    if split and weight is not None and act is None:
        raise Unsupported("a `memory weight` without an `act`: its ratio to the default activation size "
                          "varies, so an I's free is not a whole count")
    a = act if act is not None else Fraction(1)  # the default: each stage's share, counted as one
    w = weight if split and weight is not None else a
    if "I" in kinds and op_delta(Op.I, a, w) > 0:
        raise Unsupported("a `memory weight` larger than `act`: an I then adds memory, and the count "
                          "follows forwards only")
    unit, deltas = whole_deltas([Op[k] for k in sorted(kinds)], a, w)
    return MemoryUnits(act, unit / a if a else Fraction(1), {op.value: d for op, d in deltas.items()})


@dataclass(frozen=True)
class MemorySpec:
    """The file's memory annotations as a proof reads them: every stage's activation `act` (None:
    the default, each stage's share R / S of a rank-sized chunk's one unit, docs/semantics.md
    "Units"), the counted unit relative to it (MemoryUnits.unit), and the limits in file order,
    each `(rank or None for every rank, limit)` (a later one overrides an earlier one for the ranks
    it names, as the compiler does)."""

    act: Fraction | None
    limits: tuple[tuple[ast.Expr | None, ast.Expr], ...]
    unit: Fraction = Fraction(1)


def memory_spec(m: Model) -> MemorySpec:
    """What `check`'s memory figure is in the proof's count: the unit's size x the count, which
    holds exactly when the count is check's (memory_units) and the messages are free (`out` 0, so
    receive and send buffers weigh nothing). Unsupported otherwise, with the reason."""
    units = memory_units(m)
    limits = []
    for item in m.annotations:
        if item.what != "memory":
            continue
        for s in item.settings:
            if item.scope == "stage":
                raise Unsupported(f"a per-stage memory size (`memory stage ...: {s.name} = ...`)", s.span)
            if s.name == "limit":
                limits.append((item.scope_expr if item.scope == "rank" else None, s.value))
            elif s.name == "out" and literal(s.value) != 0:
                raise Unsupported("messages with a size (`memory out = ...`): receive and send buffers count "
                                  "towards the limit", s.span)
    return MemorySpec(units.act, tuple(limits), units.unit)


def literal(e: ast.Expr) -> Fraction | None:
    """A number written as such (`3`, `0.5`, `-2`), exactly; None for anything else."""
    if isinstance(e, ast.UnaryOp) and e.op == "-":
        inner = literal(e.operand)
        return None if inner is None else -inner
    if isinstance(e, ast.Num) and type(e.value) in (int, float):
        return Fraction(str(e.value))
    return None
