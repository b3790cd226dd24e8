"""`schedc plan`: the fastest layouts and schedules for a model on N GPUs (schedc/plan.py)."""
from __future__ import annotations

import time
from dataclasses import replace

from ..errors import EXIT_FAIL, EXIT_OK, SchedcError
from ..outputs import dumps_json
from . import arguments, common

DEFAULT_SCHEDULES = ("zbv", "dualpipev", "interleaved_1f1b", "1f1b", "zb_h1")


def add_arguments(q) -> None:
    q.add_argument("schedules", nargs="*", metavar="NAME",
                   help=f"the schedules to try (default: {', '.join(DEFAULT_SCHEDULES)})")
    q.add_argument("--gpus", type=int, required=True, metavar="N", help="the GPUs of the job")
    q.add_argument("--global-batch", type=int, required=True, metavar="B",
                   help="sequences per training step, over every data-parallel replica")
    q.add_argument("--micro-batch", type=int, default=None, metavar="b",
                   help="sequences per microbatch (default: the model's micro_batch, 1)")
    q.add_argument("--top", type=int, default=5, metavar="K", help="how many answers (default 5)")
    q.add_argument("--json", action="store_true", help="one JSON object per answer, then one for the search")
    arguments.reading(q)
    arguments.describing(q)


def run(args, stdout, stderr) -> int:
    """Rank (layout, schedule) choices by step time among those that fit; exit 1 if none fits."""
    from ..plan import Reading, plan
    setup = common.description(args)
    if setup is None:
        raise SchedcError("usage", "plan needs a model and hardware: --model and --hardware, or --setup FILE "
                          "(docs/units.md)")
    if args.top < 1:
        raise SchedcError("usage", f"--top must be at least 1, not {args.top}", where="--top")
    micro_batch = setup.model.micro_batch if args.micro_batch is None else args.micro_batch
    started = time.process_time()
    result = plan(setup, args.gpus, args.global_batch, args.schedules or list(DEFAULT_SCHEDULES),
                  micro_batch=micro_batch, top=args.top,
                  reading=Reading(args.notation, args.placement, args.forward_only))
    setup = replace(setup, model=replace(setup.model, micro_batch=micro_batch))  # (its title names it)
    seconds = time.process_time() - started
    search = {"layouts": result.layouts, "configurations": result.configurations, "refused": result.refused,
              "over_memory": result.over_memory, "not_better": result.bounded, "simulated": result.simulated,
              "shared": result.shared, "checked": result.checked, "passed_over": result.passed_over_json()}
    if args.json:
        for choice in result.choices:
            stdout.write(dumps_json(choice.to_dict()) + "\n")
        stdout.write(dumps_json({"search": search}) + "\n")
    else:
        stdout.write(_text(setup, args, result, seconds) + "\n")
    if not result.choices:
        if result.refused == result.configurations:
            stderr.write(f"schedc: no layout of {args.gpus} GPUs runs {setup.model.name} with these schedules: each "
                         "refused it\n")
        else:
            stderr.write(f"schedc: no layout of {args.gpus} GPUs fits {setup.model.name} within "
                         f"{setup.memory:.4g} GiB a GPU\n")
        if result.fixed:
            shapes = ", ".join(f"{name} ({ranks} ranks, {M} microbatches)" for name, (ranks, M) in sorted(result.fixed.items()))
            stderr.write(f"schedc: passed over where the layout's pipeline (P) or microbatches (M) are not those of a "
                         f"schedule of fixed shape: {shapes}\n")
        if result.unsound:
            stderr.write(f"schedc: passed over where they fail their checks (`schedc check NAME --param P=...,M=...` "
                         f"says why): {', '.join(sorted(result.unsound))}\n")
        return EXIT_FAIL
    return EXIT_OK


def _text(setup, args, result, seconds: float) -> str:
    head = ["pp", "tp", "cp", "dp", "ep", "layers", "schedule", "M", "step (s)", "dp comm", "bubble", "peak GiB"]
    rows = [head]
    for c in result.choices:
        lay, r = c.layout, c.row
        split = f"{lay.split[0]}..{lay.split[1]}" if lay.split else "even"
        rows.append([str(lay.pp), str(lay.tp), str(lay.cp), str(lay.dp), str(lay.ep), split, r.name,
                     str(c.microbatches), f"{c.step:.4g}", f"{c.reduction:.3g}",
                     f"{r.bubble_ratio:.3f}", f"{max(r.total_memory):.4g}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [f"{setup.title}", f"  {args.gpus} GPUs, global batch {args.global_batch}; a step: the pipeline with "
             "the data-parallel collectives (dp comm: the busiest rank's seconds of FSDP's gathers and gradient "
             "reduction, hidden under compute or not); peak: model states + activations"]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    shared = f" (and {result.shared} runs of identical costs reused)" if result.shared else ""
    lines.append(f"searched {result.layouts} layouts, {result.configurations} configurations (layout and schedule): "
                 f"{result.refused} refused by the schedule, {result.over_memory} over memory, {result.bounded} could "
                 f"not beat these by their bounds, {result.simulated} simulated{shared}, {result.checked} checked")
    for (name, why), n in result.passed_over.items():
        lines.append(f"passed over {name} at {n} layout{'s' if n > 1 else ''} (of the refused): {why}")
    return "\n".join(lines)
