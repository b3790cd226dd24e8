"""What several commands share: --param, loading, running the checks, exit codes, atomic writes, pictures."""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from ..errors import EXIT_FAIL, EXIT_INPUT, EXIT_OK, EXIT_UNKNOWN, SchedcError
from .. import options
from ..options import memory_limit, seconds

params = options.params  # the commands' --param reader


def costs(args):
    """The costs of --costs then --cost, or None (schedc/options.py)."""
    return options.costs(args.costs, args.cost)


def load(name: str, args, values=None, strict=True):
    """A schedule by name or path with the parameter values (ignored for CSV and JSON inputs)."""
    from ..api import detect_format, load as load_program
    fmt = args.format or detect_format(name)
    return load_program(name, values if fmt == "pp" else None, fmt=fmt, notation=args.notation, strict_params=strict)


def run_checks(program, args):
    from ..api import check
    seconds(args.timeout, "--timeout")
    limit = memory_limit(args.memory_limit)
    if isinstance(limit, dict) and any(not 0 <= r < program.num_ranks for r in limit):
        bad = next(r for r in limit if not 0 <= r < program.num_ranks)
        raise SchedcError("usage", f"--memory-limit names rank {bad}, but {program.name} has ranks "
                          f"0..{program.num_ranks - 1}", where="--memory-limit")
    return check(program, semantics=args.semantics, engine=args.engine, timeout=args.timeout, memory_limit=limit)


def exit_of(report) -> int:
    return {True: EXIT_OK, None: EXIT_UNKNOWN}.get(report.ok, EXIT_FAIL)


def worse(a: int, b: int) -> int:
    rank = {EXIT_OK: 0, EXIT_UNKNOWN: 1, EXIT_FAIL: 2, EXIT_INPUT: 3}
    return a if rank[a] >= rank[b] else b


def safe_stem(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.\-]", "_", name).strip(".") or "schedule"
    return stem[:100]


def write_all(folder: Path, files: dict[str, str]) -> list[Path]:
    """Write every file or none: each goes to a temporary file first, then all are renamed."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SchedcError("io", f"cannot create the output folder: {exc.strerror}", where=str(folder)) from None
    temps: list[tuple[str, Path]] = []
    try:
        for name, text in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            temps.append((tmp, folder / name))
        for tmp, final in temps:
            os.replace(tmp, final)
    except OSError as exc:
        for tmp, _ in temps:
            Path(tmp).unlink(missing_ok=True)
        raise SchedcError("io", f"cannot write the outputs: {exc.strerror}", where=str(folder)) from None
    return [final for _, final in temps]


def picture_suffix(out: Path, dag: bool) -> None:
    from ..viz import check_suffix
    check_suffix(out.suffix, dag)


def render_picture(program, report, suffix: str, **options):
    """The picture of `program` drawn from the command's `report` (and `timeline=`, if it simulated):
    schedc/viz draws what it is given and computes only what is missing."""
    from ..viz import render
    return render(program, report, suffix, **options)


def write_picture(program, report, out: Path, stderr, **options) -> Path:
    """Draw to `out` (its suffix picks the format), atomically; a note if it had to be another format."""
    from ..viz.png import write_bytes
    picture = render_picture(program, report, out.suffix, **options)
    target = out.with_suffix(picture.suffix) if picture.suffix != out.suffix.lower() else out
    if isinstance(picture.data, bytes):
        written = write_bytes(target, picture.data)
    else:
        (written,) = write_all(target.parent, {target.name: picture.data})
    if picture.note:
        stderr.write(f"schedc: {picture.note_for(written, out)}\n")
    stderr.write(f"wrote {written}\n")
    return written

