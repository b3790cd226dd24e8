"""The formats a program is read from and written to, one registered `Format` each (its name, the
file extensions that pick it, its reader and writer): `--format`, `export --to`, inference from a
file's extension, `schedc compile`'s outputs and the lists in docs/cli.md all read `FORMATS`.
The readers and writers import their modules when called, so listing the formats stays cheap.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

from ..errors import SchedcError

if TYPE_CHECKING:
    from ..ir import Program
    from ..report import Report


class Refused(Exception):
    """A writer that will not write a program its checks fail: the failing report and one line why."""

    def __init__(self, report: "Report", why: str):
        super().__init__(why)
        self.report, self.why = report, why


@dataclass(frozen=True)
class Format:
    """One format: `name` (`--format`, `--to`), `extensions` (lower case, with the dot; the first is
    the one written), `what` it is in a sentence; `read(text, name, params=, notation=, strict=)`
    gives a `Program` (`takes_params`: `--param` applies, to the text's parameters or to what it
    states, and `declares(text, name)` gives the names it takes; `takes_placement`: so does
    `--placement`; `takes_notation`: so does `--notation legacy`; `keeps_bom`: `read` is given a byte order mark
the text starts with, to judge, where others read the text without it, `given`); `write(program, level=)` gives
    the text at the level asked (compute, or comms: communication inserted, `Refused` for a program
    that fails its checks), `level` the one written when `--level` is not given (None: the
    program's own)."""

    name: str
    extensions: tuple[str, ...]
    what: str
    read: Callable[..., "Program"] | None = None
    write: Callable[..., str] | None = None
    takes_params: bool = False
    takes_placement: bool = False
    takes_notation: bool = False
    level: str | None = None
    declares: Callable[[str, str], tuple[str, ...]] | None = None
    keeps_bom: bool = False

    def given(self, text: str) -> str:
        """The text `read` and `declares` are given: without a leading byte order mark, unless `keeps_bom`."""
        from ..inputs import skip_bom
        return text if self.keeps_bom else skip_bom(text)


def _read_pp(text: str, name: str, *, params: Mapping[str, int] | None, strict: bool, **_: object) -> "Program":
    from ..compiler import compile_schedule
    from ..parse import parse
    return compile_schedule(parse(text, name), params, strict=strict)


def _declared_pp(text: str, name: str) -> tuple[str, ...]:
    from ..parse import parse
    return tuple(p.name for p in parse(text, name).params)


def _stated_csv(text: str, name: str) -> tuple[str, ...]:
    from .torch_csv import STATED
    return tuple(STATED)


def _read_csv(text: str, name: str, *, notation: str, params: Mapping[str, int] | None = None,
              placement: str | None = None, strict: bool = True, **_: object) -> "Program":
    from .torch_csv import program_from_csv, stated
    return stated(program_from_csv(text, name, notation=notation), params, placement, strict=strict)


def _read_ir(text: str, name: str, **_: object) -> "Program":
    from .ir_json import read_ir_json
    return read_ir_json(text, name)


def _write_ir(program: "Program", *, level: str | None = None, **_: object) -> str:
    """The IR as it is, or at the comms level lowered as `schedc run` lowers it (schedc.passes.lower),
    once it checks."""
    from .ir_json import dumps_ir
    if level is None or level == program.level:
        return dumps_ir(program)
    if level != "comms":
        raise SchedcError("usage", f"{program.name} is at the comms level: IR JSON writes it as it is, its "
                          "communication included (--level comms, or no --level)", where="--level")
    return dumps_ir(_checked_lowering(program))


def _checked_lowering(program: "Program") -> "Program":
    """A compute-level program with its communication inserted (schedc's lowering, for its runtime),
    refused if it fails its checks: communication can only be inserted into a sound compute order."""
    from ..passes import lower
    from ..report import run_checks
    report = run_checks(program)
    if not report.ok:
        raise Refused(report, "the schedule fails its checks; nothing exported")
    return lower(program)


def _write_csv(program: "Program", *, level: str = "comms", **_: object) -> str:
    """torch's CSV of replica 0 (torch runs it on each); at the comms level only of a program that
    checks, as compute_comms and again as the CSV has it (no groups); the lowering of one checked
    here is checked again under the same semantics (`to_torch_csv`'s `verified`)."""
    from ..columns import held_as_columns
    from ..report import run_checks
    from .torch_csv import to_torch_csv, torch_cannot_run
    why = torch_cannot_run(program)
    if why is not None:
        raise SchedcError("usage", why + ": export it as IR JSON (--to ir-json)", where="--to torch-csv")
    program, verified = program.replica(0), None
    if level == "comms" and program.level == "compute":
        report = run_checks(program)
        if not report.ok:  # communication can only be inserted into a sound compute order
            raise Refused(report, "the schedule fails its checks; nothing exported")
        verified = str(report.semantics)
    table = to_torch_csv(held_as_columns(program), level, verified=verified)  # (lowered and written from columns)
    if level == "comms" and table.flattened:
        flat = run_checks(table.to_program(program.name))
        if flat.ok is False:  # groups do not survive the CSV: what torch would run must check too
            raise Refused(flat, "as a PyTorch CSV (which has no groups) the schedule fails its checks; "
                                "nothing exported")
    return table.dumps()


FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    """Add a format (docs/design.md, "How to add an export format")."""
    if fmt.name in FORMATS:
        raise ValueError(f"a format named {fmt.name!r} is registered already")
    FORMATS[fmt.name] = fmt
    return fmt


def unregister(name: str) -> None:
    """Remove a format `register` added (a test's throwaway one)."""
    del FORMATS[name]


for _fmt in (  # the first is the default: a file whose extension picks no other format
    Format("pp", (".pp",), "a schedc schedule", read=_read_pp, takes_params=True, declares=_declared_pp),
    Format("torch-csv", (".csv",), "PyTorch's schedule CSV (compute_only or compute_comms)", read=_read_csv,
           write=_write_csv, takes_params=True, takes_placement=True, takes_notation=True, level="comms",
           declares=_stated_csv, keeps_bom=True),  # (torch's reader takes a mark as part of the first cell)
    Format("ir-json", (".json",), "schedc's IR as JSON", read=_read_ir, write=_write_ir),
):
    register(_fmt)


def readable() -> tuple[str, ...]:
    """The names `--format` takes."""
    return tuple(f.name for f in FORMATS.values() if f.read is not None)


def writable() -> tuple[str, ...]:
    """The names `export --to` takes."""
    return tuple(f.name for f in FORMATS.values() if f.write is not None)


def by_extension(path: str) -> Format:
    """The format a file's extension picks; the first registered (`pp`) for any other."""
    low = path.lower()
    found = (f for f in FORMATS.values() if any(low.endswith(ext) for ext in f.extensions))
    return next(found, next(iter(FORMATS.values())))


def writer(name: str) -> Callable[..., str]:
    """The writer of the format called `name`, or a usage error listing those with one."""
    write = named(name, "--to").write
    if write is None:
        raise SchedcError("usage", f"{name} is read, not written; write one of {', '.join(writable())}", where="--to")
    return write


def named(name: str, where: str = "--format") -> Format:
    """The format called `name`, or a usage error listing them."""
    if name not in FORMATS:
        raise SchedcError("usage", f"unknown format {name!r}; expected one of {', '.join(FORMATS)}", where=where)
    return FORMATS[name]
