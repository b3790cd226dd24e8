"""`schedc list`: the built-in schedules, their parameters and a line each."""
from __future__ import annotations

import re

from ..errors import EXIT_OK
from ..outputs import dumps_json

# the first sentence: up to a full stop (or ! ?) before a space or the end, not one of "et al." or "e.g."
_SENTENCE = re.compile(r"(.+?(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\bcf)[.!?])(?=\s|$)", re.S)


def add_arguments(q) -> None:
    q.add_argument("--json", action="store_true", help="one JSON object per schedule")


def run(args, stdout, stderr) -> int:
    from ..resources import builtin_schedules
    rows = [_row(name, path) for name, path in builtin_schedules().items()]
    if args.json:
        for row in rows:
            stdout.write(dumps_json(row) + "\n")
        return EXIT_OK
    width = max((len(r["name"]) for r in rows), default=4)
    for row in rows:  # one line per schedule, the description whole (a terminal wraps it)
        params = " ".join(f"{k}={v}" for k, v in row["params"].items())
        stdout.write(f"{row['name']:<{width}}  {params:<18} {row['about']}\n")
    return EXIT_OK


def _row(name: str, path) -> dict:
    """A built-in's name, its parameters with their default values (integers), its description and file."""
    from ..compiler import compile_schedule
    from ..parse import parse
    text = path.read_text(encoding="utf-8")
    program = compile_schedule(parse(text, str(path)))  # at its defaults: the values `schedc check NAME` uses
    return {"name": name, "params": dict(program.params), "about": _about(text), "file": str(path)}


def _about(text: str) -> str:
    """The first sentence of the leading comment of a schedule's source, whole (it may run over
    several comment lines), on one line."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    comment = " ".join(lines)
    m = _SENTENCE.match(comment)
    return m.group(1) if m else comment
