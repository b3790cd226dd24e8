"""`schedc sim`: simulate one schedule under its costs; text, JSON or a trace."""
from __future__ import annotations

from ..errors import EXIT_FAIL, EXIT_OK, SchedcError
from ..outputs import ALIKE, alike_replicas, dumps_json, rounded
from ..rules.semantics import RENDEZVOUS, Semantics
from . import arguments, common, described



def add_arguments(q) -> None:
    from ..ir import RECEIVE_POSTINGS
    arguments.inputs(q)
    arguments.costs(q, "costs for every stage, e.g. F=1,I=1,W=1,B=2 (also act, weight, out, latency, "
                       "bandwidth, overhead, dispatch); applied after --costs")
    q.add_argument("--lower", nargs="?", const="needed", choices=RECEIVE_POSTINGS, metavar="RECEIVES",
                   help="time the program as `schedc run` lowers and runs it, its sends and receives as steps "
                        "(receives where needed, or `--lower early`: as `run --receives early`); with a profile "
                        "of that run, what predicts its step")
    q.add_argument("--samples", type=int, metavar="N",
                   help="also time N runs with each time drawn from the measured spread of a profile "
                        "(--costs run.json from `schedc run --profile`): the expected makespan and its spread")
    q.add_argument("--seed", type=int, help="the seed of the sampled runs (default 0)")
    q.add_argument("--no-overlap", action="store_true", help="communication holds the ranks it involves")
    q.add_argument("--semantics",
                   help=f"which runs exist: rendezvous (default; gloo with --lower early), {arguments.blocking()}, "
                        f"or a backend, {arguments.backends()}, whose sends and receives are timed as posted and "
                        "awaited")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.add_argument("--trace", metavar="FILE", help="write a Chrome trace / Perfetto JSON of the timeline")
    arguments.describing(q)


def run(args, stdout, stderr) -> int:  # noqa: C901
    """Simulate one schedule under its costs (overridden by --costs, then --cost)."""
    from ..costs import Costs
    from ..interop.chrome_trace import check_trace_size, dumps_trace
    from ..columns import held_as_columns
    from ..report import lint_findings
    from ..simulate import program_level, simulate
    # (receives posted early run on gloo only: under rendezvous a rank would stop at its first receive)
    semantics = Semantics.parse(args.semantics or ("gloo" if args.lower == "early" else "rendezvous"))
    if semantics.modifiers:
        raise SchedcError("usage", f"{semantics}: what +{' and +'.join(semantics.modifiers)} adds is checked "
                          f"(`schedc check`), not timed: simulate under {semantics.base}", where="--semantics")
    setup = common.description(args)  # seconds and GiB from a model and hardware description, or None
    costs = common.costs(args, setup) or Costs("the schedule")
    if args.samples is None and args.seed is not None:
        raise SchedcError("usage", "--seed is the seed of sampled runs: give --samples N too", where="--seed")
    if args.samples is not None and args.samples < 1:  # (0 as well: not a run without samples)
        from ..simulate_sampled import MAX_RUNS
        raise SchedcError("usage", f"--samples {args.samples}: give 1 to {MAX_RUNS:,} sampled runs", where="--samples")
    if args.samples and costs.spread is None:
        raise SchedcError("usage", "--samples draws each time from a measured spread: give --costs a profile "
                          "that has one (`schedc run --profile FILE` writes it)", where="--samples")
    program = common.load(args.input, args, common.params(args.param))
    if args.lower:
        from ..passes import lower
        if program_level(program) == "comms":
            raise SchedcError("usage", f"{program.name} is at the communication level already (its sends and "
                              "receives are written): simulate it without --lower", where="--lower")
        program = lower(program, receives=args.lower)
    program = costs.apply(program)
    if setup is not None:  # the description's job is the schedule's ([parallelism]), else an error before any output
        setup.model_states(program)
    overlap = False if args.no_overlap else costs.overlap is not False

    def fail(diagnostics) -> int:
        stderr.write("\n".join(d.render() for d in diagnostics) + "\n")
        if args.json:
            stdout.write(dumps_json({"file": common.shown(args.input), "ok": False,
                                     "errors": [d.to_dict() for d in diagnostics]}) + "\n")
        return EXIT_FAIL

    found = lint_findings(program)
    if found:  # times of a schedule that is not sound mean nothing
        return fail(found)
    if args.trace:
        check_trace_size(program)  # before the run: a trace holds every replica's steps
    program = held_as_columns(program)  # timed in one pass over integer columns where it can be (simulate_columns.py)
    try:
        timeline = simulate(program, overlap=overlap, links=costs.links(program), semantics=semantics)
    except SchedcError as e:
        if e.code != "deadlock":
            raise
        return fail(e.diagnostics)
    sampled = None
    if args.samples:
        from ..progress import progress
        from ..simulate_sampled import sample
        long = args.samples * program.num_actions >= 200_000  # about two seconds and more
        say = progress(stderr, quiet=args.json or not long, prefix="schedc sim: ")
        spread = costs.spread_of(program)
        assert spread is not None  # --samples without a spread was refused above (costs.spread is None)
        sampled = sample(program, spread, args.samples, seed=args.seed or 0, overlap=overlap,
                         links=costs.links(program), semantics=semantics, say=say)
    written = None
    if args.trace:
        written = common.write_file(args.trace, dumps_trace(timeline))
    if args.json:
        extra = described.sim_fields(timeline, setup) if setup is not None else _limit_fields(timeline)
        extra = {**extra, **({"sampled": sampled.to_dict()} if sampled is not None else {})}
        stdout.write(dumps_json({**_sim_dict(common.shown(args.input), timeline, costs, written), **extra}) + "\n")
    elif setup is not None:
        stdout.write(described.sim_text(timeline, setup, written) + "\n")
    else:
        stdout.write(_sim_text(timeline, written) + "\n")
    if timeline.level != program_level(program) and not args.json:  # (a job: timed on its graph, as run lowers it)
        stdout.write(f"  timed as `schedc run` lowers it, each send and receive a step (a job's messages and "
                     f"collectives are timed on its graph); as written it is at the {program_level(program)} level, "
                     "as `schedc check` counts it\n")
    if sampled is not None and not args.json:
        stdout.write(_sampled_text(sampled) + "\n")
    if timeline.mismatches:
        stderr.write(f"schedc: {timeline.mismatches} message(s) reach a receive that expects another value "
                     "(silent wrong data); `schedc check` names them\n")
        return EXIT_FAIL
    return EXIT_OK


def _sim_dict(file, timeline, costs, trace) -> dict:
    p = timeline.program
    ann = p.annotations
    stage_costs = [ann.cost_of(s) for s in range(p.num_stages)]
    return {"file": file, "schedule": p.name, "params": dict(p.params), "ranks": p.num_ranks,
            "stages": p.num_stages, "microbatches": p.num_microbatches, "actions": p.num_actions,
            "ok": timeline.mismatches == 0, "errors": [] if not timeline.mismatches else [
                {"code": "mismatch", "message": f"{timeline.mismatches} message(s) reach a receive that expects another "
                 "value (silent wrong data); `schedc check` names them"}], **timeline.to_dict(),
            "costs": {**{k: [getattr(c, k) for c in stage_costs] for k in ("F", "B", "I", "W")},
                      "speed": list(ann.speeds(p.num_ranks)),
                      "dispatch": [ann.dispatch_of(r) for r in range(p.num_ranks)],
                      "latency": ann.latency, "bandwidth": ann.bandwidth,
                      "channels": {f"{a}->{b}": {"latency": link.latency, "bandwidth": link.bandwidth,
                                                 **({"overhead": link.overhead} if link.overhead else {})}
                                   for (a, b), link in costs.links(p).items()}},
            "trace": str(trace) if trace else None}


def memory_limits(timeline) -> tuple[float | None, ...]:
    """Each rank's memory limit as the schedule states it (`memory limit = N`, `memory rank R:
    limit = N`), None for a rank without one; a job's replicas each take their pipeline rank's,
    as `check` holds them."""
    from ..rules.memory import job_limits
    p = timeline.program
    return job_limits(p.annotations.memory_limit, p.num_ranks // timeline.replicas, len(timeline.peak_memory))


def over_limits(peaks, limits) -> list[int]:
    """The ranks whose peak is over their limit (as `check` counts it: rules/memory.py's `exceeds`)."""
    from ..rules.memory import exceeds
    return [r for r, (peak, limit) in enumerate(zip(peaks, limits)) if exceeds(peak, limit)]


def _limit_fields(timeline) -> dict:
    """sim --json's `memory_limit` (per rank, null for none; as check's) and `memory_fits`: whether
    this timed run's peaks are within them (null when no rank has one)."""
    limits = memory_limits(timeline)
    fits = None if all(x is None for x in limits) else not over_limits(timeline.peak_memory, limits)
    return {"memory_limit": [None if x is None else rounded(x) for x in limits], "memory_fits": fits}


def _limit_text(timeline, limits, shown: int) -> str:
    """The line that holds this run's peaks to the schedule's memory limit."""
    over = [r for r in over_limits(timeline.peak_memory, limits) if r < shown]
    if not over:
        return ("  memory limit (the schedule's): every rank's peak of this run is within it; `schedc check` holds "
                "the worst run to it")
    said = "; ".join(f"rank {r} peaks at {timeline.peak_memory[r]:.6g}, over its limit of {limits[r]:.6g}"
                     for r in over)
    return f"  memory limit (the schedule's): {said}; `schedc check` says where and what is live"


def _sampled_text(sampled) -> str:
    n = len(sampled.makespans)
    return (f"  sampled: mean makespan {sampled.mean:.6g} over {n} run{'s' if n != 1 else ''} (p10 "
            f"{sampled.quantile(0.1):.6g}, p50 {sampled.quantile(0.5):.6g}, p90 {sampled.quantile(0.9):.6g}; "
            f"seed {sampled.seed}), each time drawn from the profile's measured spread")


def _sim_text(timeline, trace) -> str:
    from ..ir import sizes_text

    def num(x: float) -> str:
        return f"{x:.6g}"
    p = timeline.program
    params = ", ".join(f"{k}={v}" for k, v in p.params)
    lines = [f"{p.name}{f' ({params})' if params else ''}: {sizes_text(p, routes=False)}, {timeline.level} level, "
             f"overlap {'on' if timeline.overlap else 'off'}"
             + (f", under {timeline.semantics}" if timeline.semantics != str(RENDEZVOUS) else ""),
             f"  makespan {num(timeline.makespan)}, bubble ratio {timeline.bubble_ratio:.4f}",
             "  rank        busy        idle  peak memory"]
    limits = memory_limits(timeline)
    limited = any(x is not None for x in limits)
    if limited:
        lines[-1] += "        limit"
    rows = list(zip(timeline.busy, timeline.idle, timeline.peak_memory, limits))
    P = alike_replicas(rows, timeline.replicas)  # (the timeline's program is the whole job)
    for r, (busy, idle, peak, limit) in enumerate(rows[:P] if P else rows):
        lines.append(f"  {r:>4}  {num(busy):>10}  {num(idle):>10}  {num(peak):>11}"
                     + (f"  {'-' if limit is None else num(limit):>11}" if limited else ""))
    if P:
        lines.append("  " + ALIKE.format(D=timeline.replicas, P=P))
    lines.append("  peak memory: of this timed run (activations and receive buffers); `schedc check` "
                 "reports the worst over every run the semantics allows")
    if limited:
        lines.append(_limit_text(timeline, limits, P or len(rows)))
    if trace:
        lines.append(f"  wrote {trace}")
    return "\n".join(lines)

