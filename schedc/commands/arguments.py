"""The option groups several commands share (inputs, checking, a model and hardware description),
added to a command's parser by its `add_arguments`. Lists of choices come from their registries:
formats (schedc/interop/formats.py), send semantics (schedc/rules/semantics.py), presets."""
from __future__ import annotations


def inputs(q, many: bool = False) -> None:
    """The schedule to read: a file or a built-in name, its parameters, its format and notation."""
    from ..interop.formats import readable
    from ..ir import P2P_MODES
    q.add_argument("inputs" if many else "input", nargs="+" if many else None, metavar="FILE|NAME",
                   help="a .pp schedule, a PyTorch .csv, a schedc .json, a built-in name, or - (standard input)")
    q.add_argument("--param", action="append", default=[], metavar="K=V",
                   help="set schedule parameters, e.g. --param P=4 or --param P=4,M=8 (repeatable; "
                        "each name once)")
    q.add_argument("--format", choices=readable(),
                   help="input format (default: by file extension; .pp for -)")
    reading(q)
    q.add_argument("--p2p", choices=P2P_MODES,
                   help="how messages travel, as a schedule's `p2p` line says: shared (one communicator and "
                        "tag, torch's runtime; the default for a CSV), tagged (each message tagged with its "
                        "payload) or split (activations and gradients on communicators of their own)")


def reading(q) -> None:
    """How a PyTorch CSV is read: its placement, its notation, whether it runs forwards alone."""
    from ..ir import NOTATIONS, PLACEMENTS
    q.add_argument("--placement", choices=PLACEMENTS,
                   help="a PyTorch CSV's placement of stages on ranks: loop (stage s on rank s %% P) or vshape "
                        "(down the ranks and back up); with --param P=,M=,V= it states the CSV's shape "
                        "(default: inferred from the cells)")
    q.add_argument("--notation", choices=NOTATIONS, default="current",
                   help="PyTorch CSV notation: current (B = full backward) or legacy (B = backward-input, "
                        "BW = full backward)")
    q.add_argument("--forward-only", action="store_true",
                   help="the schedule runs forwards alone (inference): no backward is expected, as a "
                        "schedule's `forward only` line says")


def blocking() -> str:
    """The blocking semantics besides the default, as `--semantics` lists them: `eager, bounded:K`."""
    from ..rules.semantics import names
    return ", ".join(n for n in names(posted=False) if n != "rendezvous")


def timeout_needs_z3(args) -> None:
    """`--timeout` is the Z3 solver's wall clock: without `--engine z3` it would do nothing (the
    native engine has no clock), so it is a usage error, as `sim --seed` without `--samples` is."""
    if args.timeout is not None and args.engine != "z3":
        from ..errors import SchedcError
        raise SchedcError("usage", "--timeout is the Z3 solver's seconds: give --engine z3 too (the native "
                          "engine has no clock; its work is bounded by schedc's limits)", where="--timeout")


def backends() -> str:
    """The backends, as `--semantics` lists them: `nccl or gloo`."""
    from ..rules.semantics import listed, names
    return listed(names(posted=True))


def checking(q) -> None:
    """How to check: the send semantics, the deadlock engine and its time, a memory limit."""
    from ..rules.semantics import modifiers_help, names
    q.add_argument("--semantics", default="rendezvous", help=f"rendezvous (default), {blocking()}, or a backend: "
                                                            f"{', '.join(names(posted=True))} ({modifiers_help()})")
    q.add_argument("--engine", choices=["native", "z3"], default="native",
                   help="deadlock check: the native executor (default) or the Z3 solver")
    from ..options import seconds_option
    q.add_argument("--timeout", type=seconds_option, default=None, metavar="S",
                   help="--engine z3: the solver's seconds on the wall clock for the whole command (inputs and "
                        "sweep instances share them; default: no clock, each query's budget of Z3 resource "
                        "units bounds it)")
    q.add_argument("--memory-limit", metavar="N|R=N,...",
                   help="memory limit per rank: one number, or rank=limit pairs, e.g. 0=4,1=3 (with a model "
                        "and hardware description: GiB, or sizes such as 80GiB)")


class Later:
    """A help text made when argparse shows it (`str`, `strip`, `%`: what argparse does with one), so
    a command that shows no help does not make it (the presets' names: schedc/hardware.py reads them
    from presets.toml, some 10 ms with its imports)."""

    def __init__(self, make):
        self._make = make

    def __str__(self) -> str:
        return self._make()

    def __bool__(self) -> bool:
        return True

    def strip(self) -> str:
        return str(self).strip()

    def __mod__(self, params) -> str:
        return str(self) % params


def _presets(head: str, kind: str, tail: str = "") -> Later:
    """`head`, the names of the presets of `kind`, then `tail`: made when the help is shown."""
    def make() -> str:
        from ..hardware import preset_list
        return head + preset_list(kind) + tail
    return Later(make)


def describing(q) -> None:
    """A model and hardware description: presets or a setup file (docs/units.md)."""
    q.add_argument("--model", metavar="NAME", help=_presets("count in seconds and GiB for this model preset: ", "model",
                                                            " (docs/units.md)"))
    q.add_argument("--hardware", metavar="NAME", help=_presets("the accelerator preset: ", "hardware"))
    q.add_argument("--link", metavar="NAME", help=_presets("the link between ranks (default: the accelerator's): ",
                                                           "link"))
    q.add_argument("--setup", metavar="FILE", help="a model and hardware description, TOML or JSON: tables "
                   "[model], [hardware], [link], each a preset and keys on top")
    q.add_argument("--profile", metavar="FILE", help="with a description: calibrate it to what a run measured "
                   "(`schedc run --profile FILE` on the same model): its activations to the bytes each stage saved "
                   "for its backward, each pass's efficiency to the seconds it took")


COST_ZERO = ("bandwidth=0 is infinite, as by default without a description: a message takes only its latency "
             "and overhead; every value is at least 0")


def costs(q, help: str) -> None:
    """--cost and --costs, as sim, compare and viz take them (`help`: --cost's, to which what
    `bandwidth=0` means is added)."""
    q.add_argument("--cost", action="append", default=[], metavar="K=V,...", help=f"{help}; {COST_ZERO}")
    q.add_argument("--costs", metavar="FILE", help="a TOML cost file, or a measured profile (JSON: a "
                   "name ending in .json, or a file that opens with {)")
