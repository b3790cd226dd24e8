"""Parse schedule source text into the AST of schedc/syntax.py, with friendly syntax errors.

The grammar is grammar/schedc.lark (LALR, positions kept; its tables from schedc/parser_table.py).
The AST is built while parsing, with no parse tree of the whole text: a rule's node becomes an AST
node as soon as its parent is reduced. Syntax errors become `SchedcError("syntax", ...)`, and a
reserved word where a name is bound (`let for = 2`, `for min in ...`) `SchedcError("reserved", ...)`.
"""
from __future__ import annotations

import re
import threading
from functools import lru_cache

from . import parser_table  # (first: it imports the parser's runtime, see there)
from . import syntax as ast
from .collection import PAUSED
from .errors import SchedcError
from .expr import ACTION_NAMES, COMPOUND_NAMES, FUNCTIONS, did_you_mean
from .inputs import Underflow, read_float
from .parser_standalone import Lark, Token, Tree, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from .span import Source, Span

MAX_SOURCE_BYTES = 1_000_000  # characters: what parsing does in a few seconds and 0.16 GB (docs/limits.md)
MAX_DIGITS = 4000  # longer integer literals cannot even be converted (Python's digit limit)
MAX_DEPTH = 200  # nesting of the syntax tree: every pass after parsing follows it by recursion
_OPEN, _CLOSE = ("LPAR", "LBRACE", "LSQB"), ("RPAR", "RBRACE", "RSQB")


@lru_cache(maxsize=1)
def parser():
    """The grammar's parser, built by lark from the grammar, giving lark's parse tree: for tools and
    tests (schedc.strategies derives texts from its grammar); `parse` builds no tree."""
    return parser_table.build()


@lru_cache(maxsize=1)
def _ast_parser() -> Lark:
    brackets = {name: _bracket(+1) for name in _OPEN} | {name: _bracket(-1) for name in _CLOSE}
    return parser_table.load(transformer=_Callbacks(), lexer_callbacks=brackets)


MAX_CACHED_BYTES = 50_000  # texts up to this size are parsed once: the same text gives the same tree
MAX_CACHED = 64  # trees kept (the built-ins, and a few files): then the cache starts again
_PARSED: dict[tuple[str, str], ast.Schedule] = {}


def parse(text: str, name: str = "<input>") -> ast.Schedule:
    """Parse one schedule file's text; raise SchedcError on a syntax error.

    The tree is immutable, so a text parsed before (a built-in loaded again, a property test's
    thousands of calls) gives the same tree back, and the loop-level IR built from it (loops.py)
    is reused too."""
    key = (text, name)
    hit = _PARSED.get(key)
    if hit is not None:
        return hit
    tree = _parse(text, name)
    if len(text) <= MAX_CACHED_BYTES:
        if len(_PARSED) >= MAX_CACHED:
            _PARSED.clear()
        _PARSED[key] = tree
    return tree


_NOW = threading.local()  # the text being parsed in this thread: its source, and how deep in brackets
_LONE_CR = re.compile(r"\r(?!\n)")


def _parse(text: str, name: str) -> ast.Schedule:
    # Lines end at "\n", "\r\n" or a lone "\r", as Python reads text (universal newlines): a lone
    # "\r" becomes "\n" (one character for one, so offsets stay), ending a `#` comment and a line.
    if "\r" in text:
        text = _LONE_CR.sub("\n", text)
    source = Source(name, text)
    if len(text) > MAX_SOURCE_BYTES:
        raise SchedcError("too-large", f"source is {len(text):,} characters; the limit is {MAX_SOURCE_BYTES:,}",
                          Span.point(source, 1, 1))
    # the nodes made while parsing hold no cycles: the collector would only walk them again and again
    _NOW.builder, _NOW.depth = _ToAst(source), 0
    try:
        with PAUSED:
            return _NOW.builder.node(_ast_parser().parse(text))
    except UnexpectedInput as exc:
        raise _syntax_error(exc, source) from None
    finally:
        _NOW.builder = None


def _too_deep(source: Source, line: int, column: int) -> SchedcError:
    return SchedcError("too-large", f"this is nested more than {MAX_DEPTH} levels deep (each `if`, `for`, "
                       "block, bracket, operator and call is a level); name parts with `let` or nest less",
                       Span.point(source, line, column))


def _bracket(step: int):
    """A lexer callback counting open brackets: deeper than MAX_DEPTH is refused at once, before
    the parser holds them all."""
    def count(tok: Token) -> Token:
        _NOW.depth += step
        if _NOW.depth > MAX_DEPTH:
            raise _too_deep(_NOW.builder.source, tok.line, tok.column)
        return tok
    return count


class _Pending(Tree):
    """A rule's node whose parent is not reduced yet. lark gives a node its positions (`meta`)
    after making it, so it becomes an AST node when its parent is made: only the nodes on the
    parser's stack are trees. `height`: the levels of the tree it heads (MAX_DEPTH bounds it);
    `deep`: the node at the bottom of its longest chain of levels (None: itself)."""

    def __init__(self, data: str, children: list, height: int, deep: _Pending | None):
        super().__init__(data, children)
        self.height, self.deep = height, deep


def _deepest(node: _Pending) -> _Pending:
    return node.deep or node


class _Mark:
    """The first item of a list lark splices into a parent (an inlined `_rule`, or lark's helper rule
    for `x*`): the height of what it holds, and how much of it is made into AST nodes already."""

    __slots__ = ("height", "deep", "done")

    def __init__(self):
        self.height, self.deep, self.done = 0, None, 1

    def take(self, height: int, deep: _Pending | None) -> None:
        if height > self.height:
            self.height, self.deep = height, deep


class _Callbacks:
    """lark's callback per rule (given as `transformer=`): each rule's node, its children made AST.
    `__default__` takes the rules lark splices into their parents: the items of a long `stmt*` or
    of a literal rank become AST nodes as they come, not when the whole list ends."""

    def __init__(self):
        for name in _RULES:
            setattr(self, name, self._callback(name))

    @staticmethod
    def _callback(name: str):
        def made(children: list) -> _Pending:
            # a new list: lark reads the positions of the children it gave after this returns
            builder, height, deep, nodes = _NOW.builder, 0, None, []
            for child in children:
                kind = type(child)
                if kind is _Mark:
                    if child.height > height:
                        height, deep = child.height, child.deep
                    continue
                if kind is _Pending:
                    if child.height > height:
                        height, deep = child.height, _deepest(child)
                    child = builder.node(child)
                nodes.append(child)
            return _Pending(name, nodes, height + 1, deep)
        return made

    @staticmethod
    def __default__(data: str, children: list, meta) -> Tree:
        if not children or type(children[0]) is not _Mark:
            if all(type(child) is Token for child in children):
                return Tree(data, children)  # tokens only (a literal rank's action)
            mark, items = _Mark(), children
            children = [mark]
            for child in items:  # (a list lark made for this call: short, or once per list)
                if type(child) is _Mark:
                    mark.take(child.height, child.deep)
                else:
                    children.append(child)
        # lark appended to the list this returned last time (a list of ours, so ours to change)
        mark, builder = children[0], _NOW.builder
        for i in range(mark.done, len(children)):
            child = children[i]
            if type(child) is _Pending:
                mark.take(child.height, _deepest(child))
                children[i] = builder.node(child)
            elif type(child) is _Mark:  # not at the front: an inlined rule's list spliced in (skipped)
                mark.take(child.height, child.deep)
        mark.done = len(children)
        return Tree(data, children)


# ---- syntax errors ----
_PRETTY = {
    "LBRACE": "'{'", "RBRACE": "'}'", "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'",
    "COMMA": "','", "COLON": "':'", "SEMICOLON": "';'", "EQUAL": "'='", "NAME": "a name", "NEW_NAME": "a name",
    "INT": "an integer", "DECIMAL": "a number", "STRING": "a string", "SCHED_NAME": "a schedule name",
    "COMPACT": "an action like 2F0", "COMPOUND_TEXT": "a compound like (0F3;3B1)OVERLAP_F_B",
    "$END": "end of file",
}


def _describe(terminal: str) -> str:
    if terminal in _PRETTY:
        return _PRETTY[terminal]
    try:
        pattern = _ast_parser().get_terminal(terminal).pattern
        if pattern.type == "str":
            return f"'{pattern.value}'"
    except KeyError:
        pass
    return terminal.lower()


def _expected(names) -> str:
    items = sorted({_describe(n) for n in names if not n.startswith("__")} or {"something else"})
    if len(items) > 8:
        items = items[:8] + ["..."]
    return ", ".join(items)


def _syntax_error(exc: UnexpectedInput, source: Source) -> SchedcError:
    line, column = max(exc.line, 1), max(exc.column, 1)
    if isinstance(exc, UnexpectedToken) and exc.token.type == "$END":
        lines = source.lines() or [""]
        line, column = len(lines), len(lines[-1]) + 1
        msg = f"unexpected end of file; expected {_expected(exc.expected)}"
        notes = []
        if "RBRACE" in exc.expected:
            msg = "unexpected end of file: a '{' is not closed (expected '}')"
            opened = _unclosed_brace(source)
            if opened is not None:
                notes.append(f"the '{{' opened at {opened} has no '}}'")
        return SchedcError("syntax", msg, Span.point(source, line, column), notes)
    if isinstance(exc, UnexpectedToken) and (bound := _keyword_bound(exc, source)) is not None:
        return bound
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        msg = f"unexpected {_token_text(tok)}; expected {_expected(exc.expected)}{_keyword_hint(exc)}"
        return SchedcError("syntax", msg, Span.point(source, line, column, len(str(tok))), _name_notes(exc))
    if isinstance(exc, UnexpectedCharacters):
        char = source.text[exc.pos_in_stream] if exc.pos_in_stream < len(source.text) else "?"
        allowed = getattr(exc, "allowed", None) or ()
        hint = f"; expected {_expected(allowed)}" if allowed else ""
        return SchedcError("syntax", f"unexpected character {char!r}{hint}", Span.point(source, line, column))
    if isinstance(exc, UnexpectedEOF):
        lines = source.lines() or [""]
        return SchedcError("syntax", f"unexpected end of file; expected {_expected(exc.expected)}",
                           Span.point(source, len(lines), len(lines[-1]) + 1))
    return SchedcError("syntax", str(exc).splitlines()[0], Span.point(source, line, column))


def _keywords(terminals) -> dict[str, str]:
    """The words among `terminals` (names of the grammar's terminals): keyword -> its terminal."""
    out = {}
    for name in terminals:
        try:
            pattern = _ast_parser().get_terminal(name).pattern
        except KeyError:
            continue
        if pattern.type == "str" and pattern.value.isidentifier():
            out[pattern.value] = name
    return out


def _keyword_hint(exc: UnexpectedToken) -> str:
    """'; did you mean ...?' when the unexpected word is close to a keyword expected there (`stage P`
    where `stages` was expected), unless that keyword is all the message expects already."""
    word = str(exc.token)
    expected = _keywords(exc.expected)
    if not word.isidentifier() or (len(exc.expected) == 1 and expected):
        return ""  # the message names the one keyword expected already
    return did_you_mean(word, expected)


def _name_notes(exc: UnexpectedToken) -> list[str]:
    """A note when the word before the error was read as a name but is close to a keyword
    (`fro m in ...`: 'fro' is read as a name; did you mean 'for'?)."""
    history = exc.token_history or []
    before = history[-1] if history else None
    if before is None or before.type not in ("NAME", "NEW_NAME") or len(before) < 3 or _keyword_hint(exc):
        return []
    hint = did_you_mean(str(before), _keywords(t.name for t in _ast_parser().terminals))
    return [f"'{before}' is read as a name{hint}"] if hint else []


def _unclosed_brace(source: Source) -> Span | None:
    """The innermost '{' left open at the end of the text (comments and strings skipped)."""
    stack = []
    for number, line in enumerate(source.lines(), 1):
        in_string = False
        for col, ch in enumerate(line, 1):
            if in_string:
                in_string = ch != '"'
            elif ch == '"':
                in_string = True
            elif ch == "#":
                break
            elif ch == "{":
                stack.append((number, col))
            elif ch == "}" and stack:
                stack.pop()
    return Span.point(source, *stack[-1]) if stack else None


def _token_text(tok: Token) -> str:
    text = str(tok)
    return f"'{text}'" if len(text) <= 30 else f"'{text[:27]}...'"


# ---- reserved words ----
@lru_cache(maxsize=1)
def reserved_words() -> dict[str, str]:
    """The words no binding may take (a parameter, a `let` and its function's parameters, a loop's,
    the rank's, the replica's or the placement's variable), each with what it is: the grammar's
    keywords, the actions' names, the built-in functions and `next` (docs/language.md, "Reserved
    words"). A keyword is read as a name where no keyword can stand (`let rank = 1`); the others
    would be shadowed (`let min = 3`), or change what an action means (`let next = 0`)."""
    words = dict.fromkeys(_keywords(t.name for t in _ast_parser().terminals), "a keyword of the language")
    words.update(dict.fromkeys(sorted(ACTION_NAMES) + list(COMPOUND_NAMES), "the name of an action"))
    words.update(dict.fromkeys(FUNCTIONS, "a built-in function"))
    words["next"] = "an action's counted microbatch, as in F(s, next)"
    return words


def _reserved(word: str, span: Span, binding: str) -> SchedcError | None:
    """The `reserved` error of `word` bound as `binding` at `span`; None if the word is free."""
    what = reserved_words().get(word)
    if what is None:
        return None
    return SchedcError("reserved", f"'{word}' is a reserved word ({what}): it cannot name {binding}; "
                       "pick another name", span)


def _keyword_bound(exc: UnexpectedToken, source: Source) -> SchedcError | None:
    """`place loop -> ...`: the one binding where a keyword may stand too (`place loop`), so the word
    was read as that keyword and the `->` after it is unexpected; said as the reserved word it is."""
    history = exc.token_history or []
    before = history[-1] if history else None
    if before is None or str(exc.token) != "->" or str(before) not in ("loop", "vshape"):
        return None
    span = Span(source, before.line, before.column, before.end_line, before.end_column)
    return _reserved(str(before), span, "the placement's stage variable")


# ---- tree -> AST ----
class _ToAst:
    """One method per rule (or alias) of the grammar: its node's positions and children -> an AST node."""

    def __init__(self, source: Source):
        self.source = source

    def node(self, pending: _Pending):
        """The AST node of a rule's node (whose children are AST nodes already)."""
        meta = pending.meta
        if pending.height > MAX_DEPTH:  # said where the nesting bottoms out
            at = _deepest(pending).meta
            raise _too_deep(self.source, *((1, 1) if at.empty else (at.line, at.column)))
        return getattr(self, pending.data)(meta, pending.children)

    def _span(self, meta) -> Span:
        if getattr(meta, "empty", True):
            return Span.point(self.source, 1, 1)
        return Span(self.source, meta.line, meta.column, meta.end_line, meta.end_column)

    def _tok(self, tok: Token) -> Span:
        return Span(self.source, tok.line, tok.column, tok.end_line, tok.end_column)

    def _bound(self, tok: Token, binding: str) -> str:
        """The name a binding introduces (a NEW_NAME token); a reserved word is refused there."""
        refused = _reserved(str(tok), self._tok(tok), binding)
        if refused is not None:
            raise refused
        return str(tok)

    # schedule
    def start(self, meta, children):
        return children[0]

    def schedule(self, meta, children):
        name, params, *items = children
        return ast.Schedule(str(name), params or (), tuple(items), self._span(meta), self._tok(name))

    def params(self, meta, children):
        return tuple(c for c in children if c is not None)

    def param(self, meta, children):
        name, default = children
        return ast.Param(self._bound(name, "a parameter"), default, self._span(meta))

    # items
    def require(self, meta, children):
        return ast.Require(tuple(children), self._span(meta))

    def constraint(self, meta, children):
        cond, message = children
        text = None if message is None else _unquote(message)
        return ast.Constraint(cond, text, self._span(meta))

    def stages_decl(self, meta, children):
        return ast.Decl("stages", children[0], self._span(meta))

    def ranks_decl(self, meta, children):
        return ast.Decl("ranks", children[0], self._span(meta))

    def microbatches_decl(self, meta, children):
        return ast.Decl("microbatches", children[0], self._span(meta))

    def replicas_decl(self, meta, children):
        return ast.Decl("replicas", children[0], self._span(meta))

    def route_decl(self, meta, children):
        mb_start, mb_stop, stage_start, stage_stop = children  # the grammar's four exprs
        return ast.Route(mb_start, mb_stop, stage_start, stage_stop, self._span(meta))

    def place_loop(self, meta, children):
        return ast.Placement("loop", None, None, (), self._span(meta))

    def place_vshape(self, meta, children):
        return ast.Placement("vshape", None, None, (), self._span(meta))

    def place_expr(self, meta, children):
        var, expr = children
        name = self._bound(var, "the placement's stage variable")
        return ast.Placement("expr", name, expr, (), self._span(meta))

    def place_table(self, meta, children):
        return ast.Placement("table", None, None, tuple(c for c in children if c is not None),
                             self._span(meta))

    def order_decl(self, meta, children):
        return ast.Order(tuple(children), self._span(meta))

    def forward_only_decl(self, meta, children):
        return ast.ForwardOnly(self._span(meta))

    def p2p_decl(self, meta, children):
        return ast.P2P(str(children[0]), self._span(meta))

    def order_value(self, meta, children):
        name, value = children
        return ast.OrderOption(str(name), value, (), self._span(meta))

    def order_list(self, meta, children):
        name, *names = children
        return ast.OrderOption(str(name), None, tuple(str(n) for n in names), self._span(meta))

    def stage_scope(self, meta, children):
        return ("stage", children[0])

    def rank_scope(self, meta, children):
        return ("rank", children[0])

    def setting(self, meta, children):
        name, value = children
        return ast.Setting(str(name), value, self._span(meta))

    def _annotation(self, what, meta, children):
        scope, *settings = children
        kind, expr = scope if scope is not None else (None, None)
        return ast.Annotation(what, kind, expr, tuple(settings), self._span(meta))

    def cost_decl(self, meta, children):
        return self._annotation("cost", meta, children)

    def memory_decl(self, meta, children):
        return self._annotation("memory", meta, children)

    def rank_generic(self, meta, children):
        var, body = children
        return ast.RankBody(self._bound(var, "the rank variable"), None, body, self._span(meta))

    def rank_generic_replica(self, meta, children):
        var, replica, body = children
        return ast.RankBody(self._bound(var, "the rank variable"), None, body, self._span(meta),
                            self._bound(replica, "the replica variable"))

    def _int(self, tok: Token) -> int:
        if len(tok) > MAX_DIGITS:
            raise SchedcError("too-large", f"the number {str(tok)[:12]}... has {len(tok)} digits; the limit is "
                              f"{MAX_DIGITS}", self._tok(tok))
        return int(tok)

    def rank_specific(self, meta, children):
        index, body = children
        return ast.RankBody(None, self._int(index), body, self._span(meta))

    def rank_literal(self, meta, children):
        index, *tokens = children  # the action tokens themselves (`_literal_action` is inlined)
        actions = tuple(ast.LiteralAction(str(tok), self._tok(tok)) for tok in tokens)
        return ast.RankLiteral(self._int(index), actions, self._span(meta))

    # statements
    def block(self, meta, children):
        return tuple(c for c in children if c is not None)

    def empty(self, meta, children):
        return None

    def let_stmt(self, meta, children):
        name, params, value = children
        binding = "a `let`" if params is None else "a `let` function"
        return ast.Let(self._bound(name, binding), value, self._span(meta), params)

    def fn_params(self, meta, children):
        return tuple(self._bound(c, "a parameter of a `let` function") for c in children)

    def for_stmt(self, meta, children):
        var, (start, stop, step, rev), body = children
        return ast.For(self._bound(var, "a loop variable"), start, stop, step, rev, body, self._span(meta))

    def forward_range(self, meta, children):
        start, stop, step = children
        return (start, stop, step, False)

    def reversed_range(self, meta, children):
        start, stop = children
        return (start, stop, None, True)

    def if_stmt(self, meta, children):
        cond, body, *elifs, orelse = children
        branches = [(cond, body)] + [tuple(e) for e in elifs]
        return ast.If(tuple(branches), orelse or (), self._span(meta))

    def elif_clause(self, meta, children):
        return [children[0], children[1]]

    def action_stmt(self, meta, children):
        return ast.Do(children[0], self._span(meta))

    # expressions
    def call(self, meta, children):
        name, *args = children
        args = tuple(a for a in args if a is not None)
        return ast.Call(str(name), args, self._span(meta), self._tok(name))

    def int_lit(self, meta, children):
        return ast.Num(self._int(children[0]), self._span(meta))

    def float_lit(self, meta, children):
        if len(children[0]) > MAX_DIGITS:
            self._int(children[0])
        value = read_float(children[0])
        if isinstance(value, Underflow):  # (0.000...1, past a float's smallest: it would read as 0)
            raise SchedcError("too-large", f"the number {str(children[0])[:12]}... is too small for a float, and "
                              "would be read as 0 (write 0 if that is meant)", self._tok(children[0]))
        return ast.Num(value, self._span(meta))

    def var(self, meta, children):
        return ast.Var(str(children[0]), self._span(meta))

    def ternary(self, meta, children):
        cond, then, orelse = children  # the grammar's three exprs
        return ast.Ternary(cond, then, orelse, self._span(meta))

    def neg(self, meta, children):
        return ast.UnaryOp("-", children[0], self._span(meta))

    def not_(self, meta, children):
        return ast.UnaryOp("not", children[0], self._span(meta))


def _binary(op):
    def method(self, meta, children):
        return ast.BinOp(op, children[0], children[1], self._span(meta))
    return method


for _name, _op in {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%",
                   "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
                   "and_": "and", "or_": "or"}.items():
    setattr(_ToAst, _name, _binary(_op))


def _unquote(tok: Token) -> str:
    """A string literal's text: `\\"` is a quote, `\\\\` a backslash, anything else as written."""
    import re
    return re.sub(r'\\(["\\])', r"\1", str(tok)[1:-1])


_RULES = tuple(n for n in vars(_ToAst) if not n.startswith("_") and n != "node")
