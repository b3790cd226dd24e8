"""Frozen AST nodes mirroring grammar/schedc.lark; every node keeps its source span.

The parser (schedc/parse.py) builds these and nothing else; meaning (evaluation, names, actions)
is given by schedc/compiler.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from .span import Span


# ---- expressions ----
@dataclass(frozen=True, slots=True)
class Num:
    value: int | float
    span: Span


@dataclass(frozen=True, slots=True)
class Var:
    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    args: tuple["Expr", ...]
    span: Span
    name_span: Span


@dataclass(frozen=True, slots=True)
class BinOp:
    op: str  # + - * // % == != < <= > >= and or
    left: "Expr"
    right: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class UnaryOp:
    op: str  # - not
    operand: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class Ternary:
    cond: "Expr"
    then: "Expr"
    orelse: "Expr"
    span: Span


Expr = Num | Var | Call | BinOp | UnaryOp | Ternary


# ---- statements ----
@dataclass(frozen=True, slots=True)
class Let:
    """`let x = E`, or a function `let f(a, b) = E` (pure, not recursive)."""

    name: str
    value: Expr
    span: Span
    params: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class For:
    var: str
    start: Expr
    stop: Expr
    step: Expr | None
    reversed: bool
    body: tuple["Stmt", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class If:
    branches: tuple[tuple[Expr, tuple["Stmt", ...]], ...]
    orelse: tuple["Stmt", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Do:
    """An action statement: `F(r, m)`, `group(...)`, `overlap(...)`."""

    call: Call
    span: Span


Stmt = Let | For | If | Do


# ---- schedule items ----
@dataclass(frozen=True, slots=True)
class Param:
    name: str
    default: Expr | None
    span: Span


@dataclass(frozen=True, slots=True)
class Constraint:
    cond: Expr
    message: str | None
    span: Span


@dataclass(frozen=True, slots=True)
class Require:
    constraints: tuple[Constraint, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Decl:
    """`stages E`, `ranks E`, `microbatches E`, `replicas E`."""

    what: str
    value: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Route:
    """`route microbatches A .. B: stages C .. D`: microbatches A..B-1 run through stages C..D-1."""

    mb_start: Expr
    mb_stop: Expr
    stage_start: Expr
    stage_stop: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Placement:
    kind: str  # loop | vshape | expr | table
    var: str | None
    expr: Expr | None
    table: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    value: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Annotation:
    """`cost [stage E:|rank E:] k = v, ...` or `memory [...] k = v, ...`."""

    what: str  # cost | memory
    scope: str | None  # stage | rank | None (all)
    scope_expr: Expr | None
    settings: tuple[Setting, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class RankBody:
    """`rank r { ... }` (var set, for every rank), `rank r, replica d { ... }` (and the data-parallel
    replica's index named) or `rank 2 { ... }` (index set)."""

    var: str | None
    index: int | None
    body: tuple[Stmt, ...]
    span: Span
    replica: str | None = None


@dataclass(frozen=True, slots=True)
class LiteralAction:
    text: str
    span: Span


@dataclass(frozen=True, slots=True)
class RankLiteral:
    index: int
    actions: tuple[LiteralAction, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class OrderOption:
    name: str
    value: Expr | None  # `memory = E`
    names: tuple[str, ...]  # `prefer = [I, F, W]`
    span: Span


@dataclass(frozen=True, slots=True)
class Order:
    """`order greedy(prefer = [I, F, W], memory = E)`: reorder every rank's actions by time-stepped
    list scheduling: the ready action of the most preferred kind, under the memory cap."""

    options: tuple[OrderOption, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class ForwardOnly:
    """`forward only`: the schedule runs forwards alone (inference, evaluation); no backward."""

    span: Span


@dataclass(frozen=True, slots=True)
class P2P:
    """`p2p MODE`: how point-to-point messages travel (`shared`, `tagged` or `split`)."""

    mode: str
    span: Span


Item = Require | Decl | Route | Placement | Annotation | Let | Order | ForwardOnly | P2P | RankBody | RankLiteral


@dataclass(frozen=True, slots=True)
class Schedule:
    name: str
    params: tuple[Param, ...]
    items: tuple[Item, ...]
    span: Span
    name_span: Span


# ---- walking ----
def walk(*nodes: object) -> Iterator[object]:
    """Every node under `nodes` (tuples of nodes included), each before its children, in source
    order; iterative, so however deep the nesting, for passes that need not follow it."""
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        if isinstance(node, tuple):
            stack.extend(reversed(node))
        elif hasattr(node, "__dataclass_fields__") and not isinstance(node, Span):
            yield node
            stack.extend(getattr(node, f) for f in reversed(node.__dataclass_fields__))


def names_in(*nodes: object) -> list[str]:
    """The names (`Var`s) used under `nodes`, each once, in source order."""
    return list(dict.fromkeys(n.name for n in walk(*nodes) if isinstance(n, Var)))
