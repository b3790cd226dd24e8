"""`schedc list`: the built-in schedules, their parameters and a line each."""
from __future__ import annotations

import json

from ..errors import EXIT_OK


def run(args, stdout, stderr) -> int:
    from ..parse import parse
    from ..resources import builtin_schedules
    from ..span import span_text
    rows = []
    for name, path in builtin_schedules().items():
        text = path.read_text(encoding="utf-8")
        tree = parse(text, str(path))
        params = {p.name: (span_text(p.default.span) if p.default is not None else None) for p in tree.params}
        about = next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.startswith("#")), "")
        rows.append({"name": name, "params": params, "about": about, "file": str(path)})
    if args.json:
        for row in rows:
            stdout.write(json.dumps(row) + "\n")
        return EXIT_OK
    width = max((len(r["name"]) for r in rows), default=4)
    for row in rows:
        params = " ".join(f"{k}={v}" if v is not None else k for k, v in row["params"].items())
        stdout.write(f"{row['name']:<{width}}  {params:<18} {row['about']}\n")
    return EXIT_OK

