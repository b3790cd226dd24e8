"""The IR as JSON (`schedc compile` writes DIR/<name>.json), and back.

Actions are in compact text per rank, with the source line of each where known, so the file is
readable and diffable; `read_ir_json` rebuilds the same Program.
"""
from __future__ import annotations

import json
import math
import re
from typing import Callable

from ..columns import Columns
from ..compiler import MAX_JOB_RANKS, MAX_MICROBATCHES, MAX_RANKS, MAX_STAGES
from ..errors import SchedcError
from ..expr import MAX_INT
from ..inputs import loads_json
from ..ir import (P2P_MODES, ActionSyntaxError, Annotations, Program, Route, StageCost, StageMemory, format_step,
                  parse_step)
from ..outputs import dumps_json
from ..rules.deps import route_problems
from ..span import Source, Span
from .compact import step_texts

FORMAT = "schedc-ir"
VERSION = 1


def _head(program: Program) -> dict:
    """The document but its steps (`actions`, `replicas` and `lines`, which `dumps_ir` adds)."""
    ann = program.annotations
    return {
        "format": FORMAT,
        "version": VERSION,
        "schedule": program.name,
        "source": program.source,
        "params": dict(program.params),
        "ranks": program.num_ranks,
        "stages": program.num_stages,
        "microbatches": program.num_microbatches,
        "placement": list(program.placement),
        "level": program.level,
        "forward_only": program.forward_only,
        "p2p": program.p2p,
        **({"routes": [[*r.microbatches, *r.stages] for r in program.routes]} if program.routes else {}),
        "annotations": {
            "stage_costs": [c.to_dict() for c in ann.stage_costs],
            "stage_memory": [vars(m) for m in ann.stage_memory],
            "rank_speed": list(ann.rank_speed),
            "memory_limit": {str(r): v for r, v in ann.memory_limit},
            "latency": ann.latency,
            "bandwidth": ann.bandwidth,
            "rank_dispatch": list(ann.rank_dispatch),
        },
    }


def dumps_ir(program: Program) -> str:
    """The IR as JSON, one item a line (`json.dumps(..., indent=1)`): the head, then the steps in compact
    text per rank (`actions`; `replicas`, the other replicas' of a data-parallel job) and each step's
    source line (`lines`). The steps are written as text rank by rank, from the columns when the
    program holds them so (no action is made: a program can hold millions)."""
    head = dumps_json(_head(program), indent=1)  # ends with "\n}"
    lists = {"actions": _array((_strings(texts, 2) for texts in _step_texts(program.ranks)), 1)}
    if program.replicas:
        lists["replicas"] = _array(map(_replica, _same_as(program), program.replicas), 1)
    lists["lines"] = _array((_array(lines, 2) for lines in _step_lines(program.ranks)), 1)
    return head[:-2] + "".join(f',\n "{key}": {text}' for key, text in lists.items()) + "\n}\n"


def _same_as(program: Program) -> list[int | None]:
    """Per replica 1, 2, ...: the earlier replica (0: `actions`) whose very step lists it holds, as
    a job's replicas that run one program share them (written as that replica's number), or None."""
    seen = {id(program.ranks): 0}
    out = []
    for d, ranks in enumerate(program.replicas, 1):
        out.append(seen.get(id(ranks)))
        seen.setdefault(id(ranks), d)
    return out


def _replica(same: int | None, ranks) -> str:
    """One replica's entry: its steps rank by rank, or the number of the replica it runs alike."""
    return str(same) if same is not None else _array((_strings(texts, 3) for texts in _step_texts(ranks)), 2)


def _step_texts(ranks):
    """Each rank's steps in compact text."""
    if _plain_columns(ranks):
        return (step_texts(ranks, r) for r in range(len(ranks)))
    return (map(format_step, steps) for steps in ranks)


def _step_lines(ranks):
    """Each rank's steps' source lines, as JSON (`null`: not known)."""
    if _plain_columns(ranks):
        bounds = zip(ranks.starts, ranks.starts[1:])
        if ranks.spans is None:
            return (["null"] * (hi - lo) for lo, hi in bounds)
        return (map(_line, ranks.spans[lo:hi]) for lo, hi in bounds)
    return (map(_line, (st.span for st in steps)) for steps in ranks)


def _plain_columns(ranks) -> bool:
    """Steps held as columns: their texts are made from the columns."""
    return isinstance(ranks, Columns)


def _array(items, depth: int) -> str:
    """A JSON array of the JSON texts `items`, as `json.dumps(..., indent=1)` writes it at nesting `depth`."""
    inner = "\n" + " " * (depth + 1)
    body = ("," + inner).join(items)
    return f"[{inner}{body}\n{' ' * depth}]" if body else "[]"


def _strings(texts, depth: int) -> str:
    """`_array` of strings that need no escaping (compact texts: digits, letters, `_();`)."""
    inner = "\n" + " " * (depth + 1)
    body = f'",{inner}"'.join(texts)
    return f'[{inner}"{body}"\n{" " * depth}]' if body else "[]"


def _line(span) -> str:
    return "null" if span is None else str(span.line)


def _replicas(entries: list, steps: tuple) -> tuple:
    """Replicas 1, 2, ...: each a list of rank lists, or the number of an earlier replica (0: the
    program's own `actions`) whose steps it runs, held as the same lists."""
    held = [steps]
    for d, entry in enumerate(entries, 1):
        if isinstance(entry, int) and not isinstance(entry, bool):
            if not 0 <= entry < d:
                raise ValueError(f"replica {d} names replica {entry}: a replica may name an earlier one only "
                                 f"(0 to {d - 1})")
            held.append(held[entry])
            continue
        at = ("replicas", d - 1)
        held.append(tuple(tuple(parse_step(_need(t, str, (*at, r, i))) for i, t in enumerate(_need(row, list, (*at, r))))
                          for r, row in enumerate(_need(entry, list, at))))
    return tuple(held[1:])


def read_ir_json(text: str, name: str = "<ir>") -> Program:
    """Rebuild a Program; anything that is not a well-formed schedc IR file is a SchedcError."""
    source = Source(name, text)
    data = loads_json(text, name, "ir-json")
    try:
        return _program(data)
    except (ValueError, KeyError, TypeError, AttributeError, ActionSyntaxError) as exc:
        found = locate(text, exc.path) if isinstance(exc, _Bad) else None
        span = Span.point(source, *found) if found else Span.point(source, 1, 1)
        raise SchedcError("ir-json", f"cannot read schedc IR JSON: {exc}", span) from None


class _Bad(ValueError):
    """A value of the document that is not what it must be, at the key path `path` (keys and list
    indices from the top), which the error names and points at."""

    def __init__(self, message: str, path: tuple):
        super().__init__(message)
        self.path = path


def key_path(path) -> str:
    """`params.P`, `annotations.stage_costs[0].F`: a key path as the messages name it (a key that is
    not a plain name quoted as JSON: `params["a b"]`)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            out += ("." if out else "") + part
        else:
            out += "[" + json.dumps(part) + "]"
    return out


_SPACE = re.compile(r"[ \t\n\r]*")
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]  # (json's
# own string scanner: in the module since Python 2.6, not in typeshed's stubs)


def _skip(text: str, at: int) -> int:
    """Past the white space JSON allows at `at` (the pattern matches the empty text too)."""
    found = _SPACE.match(text, at)
    assert found is not None  # (a starred pattern always matches)
    return found.end()


def locate(text: str, path) -> tuple[int, int] | None:
    """The line and column (from 1) where the value at `path` starts in the JSON `text`, found by
    walking the text as json reads it (strings by json's own scanner, values skipped by its
    decoder; of a key given twice, the last, which json keeps); None if it is not there."""
    decoder = json.JSONDecoder()
    at = _skip(text, 0)
    try:
        for part in path:
            inside = _member(text, at, part, decoder)
            if inside is None:
                return None
            at = inside
    except (ValueError, IndexError):
        return None
    line = text.count("\n", 0, at) + 1
    return line, at - (text.rfind("\n", 0, at) + 1) + 1


def _member(text: str, at: int, part, decoder) -> int | None:
    """Where the member `part` (a key of the object, or an index of the list, at `at`) starts."""
    opening = text[at]
    if opening not in "{[" or (opening == "{") != isinstance(part, str):
        return None
    found, index = None, 0
    at = _skip(text, at + 1)
    if text[at] in "}]":
        return None
    while True:
        if opening == "{":
            key, at = _scanstring(text, at + 1)
            at = _skip(text, at) + 1  # past the colon
            at = _skip(text, at)
            if key == part:
                found = at  # (the last of a key given twice)
        elif index == part:
            return at
        _, at = decoder.raw_decode(text, at)
        at = _skip(text, at)
        if text[at] != ",":
            return found
        at = _skip(text, at + 1)
        index += 1


_KINDS = {dict: "an object", list: "a list", str: "a string", int: "an integer", bool: "true or false"}


def _kind(kind) -> str:
    """What a JSON value of Python type `kind` is called (`(int, float)`: a number)."""
    return "a number" if kind == (int, float) else _KINDS.get(kind, getattr(kind, "__name__", str(kind)))


def _given(value) -> str:
    """The value given, as the message shows it: a number or a constant itself, else what it is."""
    if value is None or isinstance(value, (bool, int, float)):
        return "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)
    return _kind(type(value)) if type(value) in _KINDS else type(value).__name__


def _need(value, kind, what):
    """`value` if it is a `kind`; else an error naming `what`: a key path (a tuple, from the top of
    the document, which the error also points at) or words (`the document`)."""
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise _error(what, f"must be {_kind(kind)}, not {_given(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _error(what, "must be a finite number")
    return value


def _error(what, message: str) -> ValueError:
    """`'params.P' must be ...`: the error about the value at the key path `what` (a tuple: named
    and located), or about `what` in words."""
    if isinstance(what, tuple):
        return _Bad(f"'{key_path(what)}' {message}", what)
    return ValueError(f"'{what}' {message}")


def _number(value, what: str | tuple) -> float:
    """A time, size, speed or limit: a number in 0..2^62, as a schedule's `cost` and `memory` lines
    take (schedc/expr.py), so no sum or peak of them overflows."""
    value = _need(value, (int, float), what)
    if not 0 <= value <= MAX_INT:
        raise _error(what, f"must be a number in 0..2^62, not {value!r}")
    return float(value)


def _speed(value, i: int) -> float:
    """A rank's speed: a positive number (its times are the stage times divided by it)."""
    speed = _number(value, ("annotations", "rank_speed", i))
    if speed <= 0:
        raise _error(("annotations", "rank_speed", i), f"must be positive, not {value!r}")
    return speed


def _limits(given, ranks: int) -> tuple[tuple[int, float], ...]:
    """`memory_limit`: rank (a key, as text) -> limit, for ranks that exist."""
    out = {}
    for key, value in _need(given, dict, ("annotations", "memory_limit")).items():
        if not (isinstance(key, str) and key.isdigit() and key.isascii() and len(key) <= 9 and int(key) < ranks):
            raise _Bad(f"'annotations.memory_limit' names rank {key!r}; the ranks are 0..{ranks - 1}",
                       ("annotations", "memory_limit"))
        out[int(key)] = _number(value, ("annotations", "memory_limit", key))
    return tuple(sorted(out.items()))


def _p2p(data) -> str:
    mode = _need(data.get("p2p", "shared"), str, ("p2p",))
    if mode not in P2P_MODES:
        raise _Bad(f"'p2p' must be one of {', '.join(P2P_MODES)}", ("p2p",))
    return mode


def _routes(data, stages: int, mbs: int) -> tuple[Route, ...]:
    """`routes`: [first microbatch, stop, first stage, stop] each, describing a program (deps.py)."""
    rows = _need(data.get("routes", []), list, ("routes",))
    out = []
    for k, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 4):
            raise _Bad("each of 'routes' must be [first microbatch, stop, first stage, stop]", ("routes", k))
        a, b, c, d = (_need(x, int, ("routes", k, j)) for j, x in enumerate(row))
        out.append(Route((a, b), (c, d)))
    problems = route_problems(stages, mbs, tuple(out))
    if problems:
        k, why = problems[0]
        raise ValueError(f"route {k + 1}: {why}")
    return tuple(out)


def _version(data) -> None:
    """`version` (1 when left out, as in the first files): one this schedc reads."""
    version = _need(data.get("version", VERSION), int, ("version",))
    if version != VERSION:
        raise ValueError(f"'version' is {version}: this schedc reads schedc IR version {VERSION} only (write "
                         "the file again with this schedc's `export --to ir-json`, or read it with the one that "
                         "wrote it)")


def _level(data, program: Program) -> None:
    """`level`, when given: compute or comms, and the level the actions are at."""
    if "level" not in data:
        return
    level = _need(data["level"], str, ("level",))
    if level not in ("compute", "comms"):
        raise ValueError(f"'level' must be compute or comms, not {level!r}")
    if level != program.level:
        raise ValueError(f"'level' is {level}, but the actions are at the {program.level} level")


def _lines(data, steps: tuple) -> None:
    """`lines`, when given: per rank, each step's source line (a number from 1) or null."""
    if "lines" not in data:
        return
    rows = _need(data["lines"], list, ("lines",))
    if len(rows) != len(steps):
        raise ValueError(f"'lines' needs one list per rank ({len(steps)}), not {len(rows)}")
    for rank, (row, listed) in enumerate(zip(rows, steps)):
        if len(_need(row, list, ("lines", rank))) != len(listed):
            raise ValueError(f"'lines' of rank {rank} needs one entry per step ({len(listed)}), not {len(row)}")
        for i, line in enumerate(row):
            if line is not None and _need(line, int, ("lines", rank, i)) < 1:
                raise ValueError(f"'lines' holds source line numbers from 1 or null, not {line!r}")


def _program(data) -> Program:
    _need(data, dict, "the document")
    if data.get("format") != FORMAT:
        raise ValueError(f"not a schedc IR file (format is {data.get('format')!r})")
    _version(data)
    ranks = _need(data["ranks"], int, ("ranks",))
    stages = _need(data["stages"], int, ("stages",))
    mbs = _need(data["microbatches"], int, ("microbatches",))
    placement = tuple(_need(x, int, ("placement", i)) for i, x in enumerate(_need(data["placement"], list, ("placement",))))
    rows = _need(data["actions"], list, ("actions",))
    if not (1 <= ranks <= MAX_RANKS and 1 <= stages <= MAX_STAGES and 1 <= mbs <= MAX_MICROBATCHES):
        raise ValueError(f"ranks, stages and microbatches must be in 1..{MAX_RANKS:,}, 1..{MAX_STAGES:,} "
                         f"and 1..{MAX_MICROBATCHES:,}")
    if len(rows) != ranks or len(placement) != stages or any(not 0 <= r < ranks for r in placement):
        raise ValueError("'actions' needs one list per rank and 'placement' one rank per stage")
    steps = tuple(tuple(parse_step(_need(t, str, ("actions", r, i))) for i, t in enumerate(_need(row, list, ("actions", r))))
                  for r, row in enumerate(rows))
    entries = _need(data.get("replicas", []), list, ("replicas",))
    if (1 + len(entries)) * ranks > MAX_JOB_RANKS:  # (a replica named by its number costs a few bytes)
        raise ValueError(f"{1 + len(entries):,} replicas of {ranks:,} ranks make {(1 + len(entries)) * ranks:,} "
                         f"ranks; a job takes at most {MAX_JOB_RANKS:,}")
    replicas = _replicas(entries, steps)
    if any(len(r) != ranks for r in replicas):
        raise ValueError("each of 'replicas' needs one list per rank")
    ann = _need(data.get("annotations") or {}, dict, ("annotations",))
    notes = Annotations(
        tuple(StageCost(**{k: _number(v, ("annotations", "stage_costs", i, k))
                           for k, v in _need(c, dict, ("annotations", "stage_costs", i)).items()})
              for i, c in enumerate(_need(ann.get("stage_costs", []), list, ("annotations", "stage_costs")))),
        tuple(StageMemory(**{k: _number(v, ("annotations", "stage_memory", i, k))
                             for k, v in _need(m, dict, ("annotations", "stage_memory", i)).items()})
              for i, m in enumerate(_need(ann.get("stage_memory", []), list, ("annotations", "stage_memory")))),
        tuple(_speed(x, i) for i, x in enumerate(_need(ann.get("rank_speed", []), list, ("annotations", "rank_speed")))),
        _limits(ann.get("memory_limit", {}), ranks),
        _number(ann.get("latency", 0.0), ("annotations", "latency")),
        _number(ann.get("bandwidth", 0.0), ("annotations", "bandwidth")),
        tuple(_number(x, ("annotations", "rank_dispatch", i))
              for i, x in enumerate(_need(ann.get("rank_dispatch", []), list, ("annotations", "rank_dispatch")))))
    params = _need(data.get("params") or {}, dict, ("params",))
    _lines(data, steps)
    program = Program(str(_need(data["schedule"], str, ("schedule",))), ranks, stages, mbs, placement, steps,
                      tuple((str(k), _need(v, int, ("params", k))) for k, v in params.items()), notes,
                      data.get("source") if isinstance(data.get("source"), str) else None,
                      _need(data.get("forward_only", False), bool, ("forward_only",)), replicas, _p2p(data),
                      _routes(data, stages, mbs))
    _level(data, program)
    return program
