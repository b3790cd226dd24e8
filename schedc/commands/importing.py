"""`schedc import torchtitan -- OPTIONS...`: torchtitan's job config (its command line's options)
read into a schedc job (schedc/importers/torchtitan.py): the schedule it runs, as schedc names it,
and a setup file with the job's [parallelism] table, to check, simulate and compare with."""
from __future__ import annotations

import argparse
import shlex

from ..errors import EXIT_OK, SchedcError
from ..outputs import dumps_json, write_data, write_file


def add_arguments(q) -> None:
    q.add_argument("framework", choices=["torchtitan"], help="the framework whose job config is read")
    q.add_argument("options", nargs=argparse.REMAINDER, metavar="[-- OPTIONS...]",
                   help="the framework's own options, as its command line takes them, after `--` "
                        "(torchtitan: --module M --config C, --parallelism.KEY VALUE, --training.KEY VALUE)")
    _own(q)


def _own(q) -> None:
    """schedc's options, before the framework's `--` (or anywhere, without one)."""
    q.add_argument("--layers", type=int, metavar="N",
                   help="the model's transformer layers (torchtitan reads them from its model), for the layers "
                        "of each stage")
    q.add_argument("--model", metavar="NAME", help="a model preset: its layers, and [model] in the setup written")
    q.add_argument("--hardware", metavar="NAME", help="a hardware preset, written as the setup's [hardware]")
    q.add_argument("--gpus", type=int, metavar="N",
                   help="the job's GPUs (torchrun's world size): resolves data_parallel_shard_degree = -1")
    q.add_argument("-o", "--output", metavar="FILE", help="write the setup file here (default, or `-`: standard output)")
    q.add_argument("--json", action="store_true", help="print the job as one JSON object")


def _split(args) -> list[str]:
    """The framework's options; schedc's own, given after the framework's name, read into `args`."""
    from ..cli import _Parser
    own = _Parser(prog="schedc import", allow_abbrev=False, add_help=False)
    _own(own)
    rest = list(args.options)
    if "--" in rest:
        cut = rest.index("--")
        own.parse_args(rest[:cut], namespace=args)
        return rest[cut + 1:]
    _, theirs = own.parse_known_args(rest, namespace=args)
    return theirs


def run(args, stdout, stderr) -> int:
    from ..importers import torchtitan
    options = _split(args)
    for name in ("layers", "gpus"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SchedcError("usage", f"--{name} must be at least 1, not {value}", where=f"--{name}")
    preset = _preset("model", args.model)
    if preset is not None and args.layers not in (None, preset):
        raise SchedcError("usage", f"--layers {args.layers}, but the model preset {args.model} has {preset} layers, "
                          "which the setup's [model] runs: give one of them", where="--layers")
    layers = args.layers if args.layers is not None else preset
    _preset("hardware", args.hardware)
    job = torchtitan.read(options, layers=layers, gpus=args.gpus, model=args.model, hardware=args.hardware)
    _schedc_reads(job)
    origin = ("schedc import torchtitan -- " + " ".join(shlex.quote(o) for o in options)).replace("\n", " ")
    text = job.setup_toml(origin)
    written = write_file(args.output, text) if args.output else None
    if args.json:
        stdout.write(dumps_json({**job.to_json(), "outputs": [str(written)] if written else [],
                                 **({} if written else {"setup": text})}) + "\n")
        return EXIT_OK
    out = stderr if written is None else stdout
    if written is None:
        write_data(stdout, text)
    out.write(_summary(job))
    if job.not_read:
        out.write(f"  not read (not about the pipeline): {' '.join(job.not_read)}\n")
    setup = f" --setup {shlex.quote(str(written))}" if written else " --setup JOB.toml"
    out.write(f"  check it: schedc check {job.arguments()}{setup}\n")
    if written is not None:
        out.write(f"wrote {written}\n")
    return EXIT_OK


def _summary(job) -> str:
    source = f"the CSV {job.csv}" if job.csv else job.schedule
    split = f"; layers per stage {job.layers_per_stage}" if job.layers_per_stage is not None else ""
    return (f"torchtitan runs {source} ({job.torch_class}) on {job.params['P']} ranks, {job.stages_per_rank} "
            f"stage(s) each ({job.placement}), {job.params['M']} microbatches (local_batch_size "
            f"{job.local_batch_size} / pipeline_parallel_microbatch_size {job.microbatch_size}){split}\n"
            f"  schedc: {job.arguments()}\n")


def _preset(kind: str, name: str | None) -> int | None:
    """A model preset's layers (None without one); an unknown preset of `kind` is an error."""
    if name is None:
        return None
    from ..hardware import _unknown, presets
    table = presets()[kind].get(name)
    if table is None:
        raise SchedcError("usage", _unknown(kind, name), where=f"--{kind}")
    return int(table["layers"]) if kind == "model" else None


def _schedc_reads(job) -> None:
    """The schedule loads in schedc at the job's settings (a built-in's requirements hold, the CSV fits,
    its actions on the ranks torchtitan places their stages on)."""
    from ..api import load
    program = load(job.name, job.params, placement=job.placement if job.csv else None)
    if job.csv:
        _placed_as_torchtitan_places(job, program)


# the schedule classes torchtitan places each way (`_get_pp_rank_to_stage_indices_mapping`)
_SHAPES = {"loop": "in a loop (stage s on rank s % P)", "vshape": "in a V (down the ranks and back up)"}
_PLACED = {"loop": "Interleaved1F1B, LoopedBFS or InterleavedZeroBubble", "vshape": "ZBVZeroBubble or DualPipeV"}


def _placed_as_torchtitan_places(job, program) -> None:
    """An `importer` error when the CSV runs actions on ranks that the placement of torchtitan's
    schedule class does not give their stages (a V-shaped CSV under Interleaved1F1B: every run of
    it stops at its first such action), naming the class that places them as the CSV does."""
    from ..api import load
    from ..lint import lint
    wrong = [d for d in lint(program) if d.code == "wrong-rank"]
    if not wrong:
        return
    other = "vshape" if job.placement == "loop" else "loop"
    fits = not any(d.code == "wrong-rank" for d in lint(load(job.name, job.params, placement=other)))
    hint = (f"; the CSV places them {_SHAPES[other]}, as torchtitan's {_PLACED[other]} do: name one of them "
            "(--parallelism.pipeline_parallel_schedule)") if fits else ""
    raise SchedcError("importer", f"torchtitan's {job.schedule} places the stages {_SHAPES[job.placement]}, as "
                      f"{_PLACED[job.placement]} do, but {len(wrong)} of the CSV's actions run on a rank that does not hold their stage "
                      f"(the first: {wrong[0].message}){hint}", where=job.csv)
