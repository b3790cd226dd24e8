"""What several commands share: --param, loading, running the checks, exit codes, atomic writes, pictures."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ..errors import EXIT_FAIL, EXIT_INPUT, EXIT_OK, EXIT_UNKNOWN, SchedcError
from ..inputs import STDIN, STDIN_NAME, is_pipe, read_stdin, read_text
from .. import options
from ..options import clock_limit, memory_limit
from ..outputs import dumps_json, write_file, write_files  # every output is written by schedc/outputs.py

params = options.params  # the commands' --param reader
write_all = write_files  # the writer cli.py hands to `schedc synth`


def costs(args, setup=None):
    """The costs of a description (`setup`), then --costs, then --cost, or None (schedc/options.py)."""
    return options.costs(args.costs, args.cost, setup=setup)


def description(args):
    """The model and hardware description of --setup, --model, --hardware and --link, or None
    (schedc/hardware.py)."""
    profile = getattr(args, "profile", None)
    if args.setup is None and args.model is None and args.hardware is None and args.link is None:
        setup = None  # (as `describe` says, without importing it)
    else:
        from ..hardware import describe
        setup = describe(args.setup, model=args.model, hardware=args.hardware, link=args.link)
    if profile is None:
        return setup
    if setup is None:
        raise SchedcError("usage", "--profile calibrates a model and hardware description: give --model and "
                          "--hardware, or --setup, too", where="--profile")
    from ..calibration import calibrate
    from ..inputs import loads_json, read_text
    return calibrate(setup, loads_json(read_text(profile, "the profile"), profile, "usage"), profile)


def load(name: str, args, values=None, strict=True):
    """A schedule by name or path (`-`: standard input, read as --format says, .pp by default) with
    the parameter values (`strict`: the one input, which must take each; else each takes those it
    declares, an IR JSON none). A pipe (`<(cmd)`, a FIFO) is read as standard input is: whole, once
    (a sweep loads it at every instance), in --format or the format its name's extension says."""
    from ..api import load as load_program, load_text
    from ..interop.formats import FORMATS
    fmt = _format(name, args)
    options = dict(params=values if FORMATS[fmt].takes_params or strict else None, notation=args.notation,
                   strict_params=strict, forward_only=getattr(args, "forward_only", False),
                   placement=getattr(args, "placement", None))
    if name == STDIN or is_pipe(name):  # read once (a sweep loads it at every instance)
        program = load_text(_text(name, args), shown(name), fmt, **options)
    else:
        program = load_program(name, fmt=fmt, **options)
    p2p = getattr(args, "p2p", None)
    return program if p2p is None or p2p == program.p2p else replace(program, p2p=p2p)


def _format(name: str, args) -> str:
    """The format input `name` is read in: --format's, else its extension's (a built-in is .pp)."""
    from ..api import detect_format
    return args.format if args.format and not _builtin(name) else detect_format(name)


def known_params(names, args, values) -> None:
    """One --param list serves several inputs, each taking the names it declares; a name that no
    input takes (a schedule's parameters, a CSV's P, M and V) is an `unknown-param` error naming it
    and the inputs, before any work. An input that cannot be read is left to its own error."""
    if not values:
        return
    read = {name: takes(name, args) for name in names}
    taken = {name: t for name, t in read.items() if t is not None}
    if len(taken) < len(read):
        return
    unknown = [k for k in values if not any(k in t for t in taken.values())]
    if unknown:
        raise SchedcError("unknown-param", _unknown_params(unknown, taken), where="--param")


def _unknown_params(unknown: list[str], taken: dict) -> str:
    """`no input takes --param p (1f1b takes M, P; x.csv takes M, P, V); did you mean 'P'?`"""
    from ..errors import closest
    listed = "; ".join(f"{shown(n)} takes {', '.join(sorted(t)) or 'none'}" for n, t in taken.items())
    every = set().union(*taken.values())
    close = [c for c in (closest(k, every) for k in unknown) if c is not None]
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"no input takes --param {', '.join(unknown)} ({listed}){hint}"


def takes(name: str, args) -> frozenset[str] | None:
    """The --param names input `name` takes: its parameters (a schedule's, a framework's), a CSV's
    P, M and V, none for an IR JSON; None when it cannot be read (its load says why)."""
    from .. import importers
    from ..interop.formats import FORMATS
    try:
        if importers.is_imported(name) and not Path(name).exists():
            return frozenset(importers.takes(name))
        form = FORMATS[_format(name, args)]
        return frozenset(form.declares(form.given(_text(name, args)), shown(name)) if form.declares else ())
    except SchedcError:
        return None


def _text(name: str, args) -> str:
    """The text of input `name`: a file's or a built-in's, or standard input's or a pipe's, read
    once and kept for `load` (a byte order mark kept: its format judges it, `Format.given`)."""
    from ..api import resolve
    if name == STDIN:
        if getattr(args, "stdin_text", None) is None:
            args.stdin_text = read_stdin(keep_bom=True)
        return args.stdin_text
    if is_pipe(name):
        texts = vars(args).setdefault("pipe_texts", {})
        if name not in texts:
            texts[name] = read_text(name, "the pipe", keep_bom=True)
        return texts[name]
    return read_text(resolve(name), keep_bom=True)


def shown(name: str) -> str:
    """An input's name as output names it (every command's JSON `file`): as given, a built-in's
    name (not its file's path), `<stdin>` for `-`."""
    return STDIN_NAME if name == STDIN else name


def _builtin(name: str) -> bool:
    """Whether `name` is a built-in schedule's (and no file of that name is there)."""
    from ..resources import builtin_schedules
    return name in builtin_schedules() and not Path(name).exists()


def one_stdin(names) -> None:
    """Standard input is read once: `-` among a command's inputs at most once (a usage error else)."""
    if list(names).count(STDIN) > 1:
        raise SchedcError("usage", "standard input (-) is given more than once; it can be read once", where="input")


def run_checks(program, args, setup=None, timeout: float | None = None, file: str | None = None):
    """Check `program` under the command's options; under a description (`setup`) the memory limit
    is in GiB (the accelerator's memory by default) and each rank's model states come off it.
    `timeout`: the solver's seconds for this check (`--timeout` by default; None there too: no clock).
    `file`: the input as the command was given it, which the report names (`shown`)."""
    from ..api import check
    clock_limit(args.timeout, "--timeout")
    limit = memory_limit(args.memory_limit, sized=setup is not None)
    ranks = program.num_ranks * program.dp  # a data-parallel job's ranks d * P + p
    if isinstance(limit, dict) and any(not 0 <= r < ranks for r in limit):
        bad = next(r for r in limit if not 0 <= r < ranks)
        raise SchedcError("usage", f"--memory-limit names rank {bad}, but {program.name} has ranks "
                          f"0..{ranks - 1}", where="--memory-limit")
    if setup is not None:
        from .described import room
        limit = room(setup, program, limit)
    return check(program, semantics=args.semantics, engine=args.engine,
                 timeout=args.timeout if timeout is None else timeout, memory_limit=limit,
                 file=None if file is None else shown(file))


def input_error_json(error: SchedcError, file: str | None = None) -> str:
    """The one JSON line of an input error (a bad file, option or name) for `--json`: `ok` false,
    `input_error` true, the diagnostics under `errors`, and the input's name when there is one."""
    head = {"file": shown(file)} if file is not None else {}
    return dumps_json({**head, "ok": False, "input_error": True, "errors": [d.to_dict() for d in error.diagnostics]})


def exit_of(report) -> int:
    return {True: EXIT_OK, None: EXIT_UNKNOWN}.get(report.ok, EXIT_FAIL)


def worse(a: int, b: int) -> int:
    rank = {EXIT_OK: 0, EXIT_UNKNOWN: 1, EXIT_FAIL: 2, EXIT_INPUT: 3}
    return a if rank[a] >= rank[b] else b


MAX_STEM = 100
_HASHED = re.compile(r"--[0-9a-f]{8}$")


def safe_stem(name: str) -> str:
    """The stem of a schedule's output files (compile's DIR/<stem>.json, ...): the name itself when
    it is a plain file name (letters, digits, `_`, `.`, `-`; no dot at either end; at most MAX_STEM)
    that does not end like a hashed one nor start with `-`; otherwise its plain part, `--` and 8 hex
    digits of a hash of the whole name. So two names never share a stem (`a/b` is `a_b--...`, never
    `a_b`), and no file name made from one starts with `-`, which a command it is given to
    (`torchrun -h_program.py`) would read as an option (`-h` is `h--...`)."""
    stem = re.sub(r"[^A-Za-z0-9_.\-]", "_", name).strip(".")
    if stem == name and 0 < len(stem) <= MAX_STEM and not _HASHED.search(stem) and not stem.startswith("-"):
        return stem
    import hashlib
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{stem.lstrip('-.')[:MAX_STEM - 10].rstrip('.') or 'schedule'}--{digest}"


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
    picture = render_picture(program, report, out.suffix, **options)
    target = out.with_suffix(picture.suffix) if picture.suffix != out.suffix.lower() else out
    written = write_file(target, picture.data)
    if picture.note:
        stderr.write(f"schedc: {picture.note_for(written, out)}\n")
    stderr.write(f"wrote {written}\n")
    return written

