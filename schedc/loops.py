"""The loop-level IR: a schedule's meaning before its parameters have values, built once per tree.

`build(tree)` sorts the items (parameters, the header of lets, requirements, declarations and routes
in file order, placement, order, annotations, `forward only`), checks what needs no values (duplicates, setting
names), and turns the rank bodies into nodes over loop domains with every action call site and
every loop numbered once. The compiler expands this IR into a Program at given parameters
(schedc/compiler.py); the prover reads the same IR as statements with their frames
(schedc/prove/model.py), so both number, nest and guard the actions one way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from . import syntax as ast
from .errors import SchedcError
from .expr import did_you_mean
from .ir import P2P_MODES
from .span import Span

COST_KEYS = {"F", "B", "I", "W"}
GLOBAL_COST_KEYS = COST_KEYS | {"latency", "bandwidth", "dispatch"}
RANK_COST_KEYS = {"speed", "dispatch"}
MEMORY_KEYS = {"act", "weight", "out"}


@dataclass(frozen=True)
class Site:
    """One action call site: `F(r, m)`, `group(...)`, `overlap(...)` or a literal action such as
    `0F0` / `0F0;1B0`. `index` numbers the sites of the schedule in body order (the `rank N`
    bodies in file order, then the generic body), depth first."""

    index: int
    action: ast.Call | ast.LiteralAction
    span: Span


@dataclass(frozen=True)
class Loop:
    """`for var in start .. stop [step k]` (or `reversed(...)`); `id` numbers the loops from 1 in
    the order of the sites."""

    id: int
    var: str
    start: ast.Expr
    stop: ast.Expr
    step: ast.Expr | None
    reversed: bool
    body: tuple["Node", ...]
    span: Span


@dataclass(frozen=True)
class Branch:
    """`if c1 { .. } elif c2 { .. } else { .. }`: the first arm whose condition holds runs."""

    arms: tuple[tuple[ast.Expr, tuple["Node", ...]], ...]
    orelse: tuple["Node", ...]
    span: Span


Node = ast.Let | Loop | Branch | Site


@dataclass(frozen=True)
class Body:
    """A rank body: `rank N { .. }` / `rank N: 0F0 ..` (`rank` set) or the generic `rank r { .. }`
    (`var` set) for every rank without its own, `replica` naming the data-parallel replica it runs
    in (`rank r, replica d { .. }`). `position` is its place among the bodies."""

    rank: int | None
    var: str | None
    nodes: tuple[Node, ...]
    literal: bool
    position: int
    span: Span
    replica: str | None = None


@dataclass(frozen=True)
class Loops:
    tree: ast.Schedule
    header: tuple[ast.Let | ast.Require | ast.Decl | ast.Route, ...]  # evaluated in file order
    decls: dict  # what ("ranks", "stages", "microbatches") -> ast.Decl
    placement: ast.Placement | None
    order: ast.Order | None
    annotations: tuple[ast.Annotation, ...]
    bodies: tuple[Body, ...]  # the `rank N` bodies in file order, then the generic one
    num_sites: int
    forward_only: ast.ForwardOnly | None = None
    uses_next: bool = False  # does the schedule say `next` anywhere (so expansion counts the actions it emits)?
    p2p: ast.P2P | None = None  # `p2p MODE` (None: shared)
    routes: tuple[ast.Route, ...] = ()  # `route microbatches A .. B: stages C .. D`, in file order (also in `header`)

    @property
    def name(self) -> str:
        return self.tree.name

    @property
    def params(self) -> tuple[ast.Param, ...]:
        return self.tree.params

    @property
    def generic(self) -> Body | None:
        return next((b for b in self.bodies if b.var is not None), None)

    @property
    def specific(self) -> tuple[Body, ...]:
        return tuple(b for b in self.bodies if b.var is None)


_ONCE = {ast.Placement: "place", ast.Order: "order", ast.ForwardOnly: "forward only",
         ast.P2P: "p2p"}  # declared at most once
_BUILT: dict[int, tuple[ast.Schedule, Loops]] = {}  # id(tree) -> (tree, its IR): one build per tree


def build(tree: ast.Schedule) -> Loops:
    """The IR of `tree` (built on first use, then the same object for the same tree)."""
    hit = _BUILT.get(id(tree))
    if hit is not None and hit[0] is tree:
        return hit[1]
    loops = _build(tree)
    if len(_BUILT) > 256:
        _BUILT.clear()
    _BUILT[id(tree)] = (tree, loops)
    return loops


def _build(tree: ast.Schedule) -> Loops:  # noqa: C901
    header: list[ast.Let | ast.Require | ast.Decl | ast.Route] = []
    decls: dict[str, ast.Decl] = {}
    annotations: list[ast.Annotation] = []
    once: dict[type, ast.Placement | ast.Order | ast.ForwardOnly | ast.P2P] = {}
    generic = None
    specific: dict[int, ast.RankBody | ast.RankLiteral] = {}
    for item in tree.items:
        if isinstance(item, (ast.Let, ast.Require, ast.Route)):
            header.append(item)
        elif isinstance(item, ast.Decl):
            if item.what in decls:
                raise SchedcError("duplicate-decl", f"'{item.what}' is declared twice", item.span)
            decls[item.what] = item
            header.append(item)
        elif isinstance(item, (ast.Placement, ast.Order, ast.ForwardOnly, ast.P2P)):  # _ONCE's kinds
            if type(item) in once:
                raise SchedcError("duplicate-decl", f"'{_ONCE[type(item)]}' is declared twice", item.span)
            once[type(item)] = item
        elif isinstance(item, ast.Annotation):
            check_setting_names(item)
            annotations.append(item)
        elif isinstance(item, ast.RankBody) and item.var is not None:
            if generic is not None:
                raise SchedcError("duplicate-decl", "only one `rank NAME { ... }` body is allowed; "
                                  "write `rank 0 { ... }` for one rank", item.span)
            generic = item
        else:
            index = item.index
            assert index is not None  # (`rank N`: a body without a name has a number)
            if index in specific:
                raise SchedcError("duplicate-decl", f"rank {index} is defined twice", item.span,
                                  [f"first defined at {specific[index].span}"])
            specific[index] = item
    placement, order = _one(once, ast.Placement), _one(once, ast.Order)
    forward, p2p = _one(once, ast.ForwardOnly), _one(once, ast.P2P)
    if p2p is not None and p2p.mode not in P2P_MODES:
        raise SchedcError("unknown-name", f"unknown p2p mode {p2p.mode!r}; expected {', '.join(P2P_MODES)}"
                          f"{did_you_mean(p2p.mode, P2P_MODES)}", p2p.span)
    if order is not None and forward is not None:
        raise SchedcError("order", "`order greedy(...)` orders a training schedule's forwards and backwards; "
                          "a forward-only schedule lists its forwards as they run", order.span)
    numbering = _Numbering()
    bodies = []
    for k, item in enumerate(specific.values()):
        if isinstance(item, ast.RankLiteral):
            nodes = tuple(numbering.site(a, a.span) for a in item.actions)
            bodies.append(Body(item.index, None, nodes, True, k, item.span))
        else:
            bodies.append(Body(item.index, None, numbering.block(item.body), False, k, item.span))
    if generic is not None:
        bodies.append(Body(None, generic.var, numbering.block(generic.body), False, len(specific), generic.span,
                           generic.replica))
    return Loops(tree, tuple(header), decls, placement, order, tuple(annotations), tuple(bodies),
                 numbering.sites, forward, "next" in ast.names_in(tree.items), p2p,
                 tuple(item for item in header if isinstance(item, ast.Route)))


_T = TypeVar("_T")


def _one(once: dict, kind: type[_T]) -> _T | None:
    """The item of `kind` declared once, if any."""
    item = once.get(kind)
    assert item is None or isinstance(item, kind)
    return item


class _Numbering:
    def __init__(self):
        self.sites = 0
        self.loops = 0

    def site(self, action, span) -> Site:
        self.sites += 1
        return Site(self.sites - 1, action, span)

    def block(self, stmts) -> tuple[Node, ...]:
        out: list[Node] = []
        for s in stmts:
            if isinstance(s, ast.Let):
                out.append(s)
            elif isinstance(s, ast.For):
                self.loops += 1
                loop = self.loops
                out.append(Loop(loop, s.var, s.start, s.stop, s.step, s.reversed, self.block(s.body), s.span))
            elif isinstance(s, ast.If):
                arms = tuple((cond, self.block(body)) for cond, body in s.branches)
                out.append(Branch(arms, self.block(s.orelse), s.span))
            else:
                out.append(self.site(s.call, s.span))
        return tuple(out)


def check_setting_names(item: ast.Annotation) -> None:
    allowed = allowed_keys(item.what, item.scope)
    seen: set[str] = set()
    for s in item.settings:
        if s.name not in allowed:
            raise SchedcError("unknown-setting", f"'{s.name}' is not a {item.what} setting"
                              f"{' for a ' + item.scope if item.scope else ''}; expected one of "
                              f"{', '.join(sorted(allowed))}{did_you_mean(s.name, allowed)}", s.span)
        if s.name in seen:  # (one would silently win: say which is meant)
            raise SchedcError("duplicate-decl", f"'{s.name}' is set twice in this `{item.what}` line", s.span)
        seen.add(s.name)


def allowed_keys(what: str, scope: str | None) -> set[str]:
    if what == "cost":
        return {None: GLOBAL_COST_KEYS, "stage": COST_KEYS, "rank": RANK_COST_KEYS}[scope]
    return {None: MEMORY_KEYS | {"limit"}, "stage": MEMORY_KEYS, "rank": {"limit"}}[scope]
