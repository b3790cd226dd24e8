"""schedc's runtime against torch.distributed.pipelining: same model, same schedules, same run.

    python bench/runtime_vs_torch.py [--steps 20] [--warmup 2] [--schedules gpipe,1f1b,...] [--ranks 4]

8 x (Linear(512, 512) + GELU), batch 64, M = 8 microbatches, 4 gloo ranks (`--ranks`), OMP_NUM_THREADS=1,
float32.
Each schedule runs on both runtimes in the same process group: torch's schedule class
(ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, ScheduleLoopedBFS,
ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV) and schedc's lowering of
the matching built-in (whose compute order equals torch's, tested), twice: with receives where
lowering places them (`schedc run --receives needed`) and posted early (every receive at the start
of its rank's step, checked under gloo: what `schedc run` does on gloo by default). A step is timed
from an instant every rank starts at (agreed after a barrier, `_timed`) to the slowest rank's end
(forward and backward of all microbatches, no optimizer); the three runs alternate step
by step, so all see the same machine load. Prints the median step time of each, their ratios
schedc / torch (target <= 0.7 posted early) and the median of the per-step ratios ("paired"), and the
simulator's prediction of schedc's default step (receives posted early) from the profile its runtime
measured in the same run (`schedc sim --lower early --semantics gloo --costs
profile.json`; of the --receives needed run too, on one line): the makespan with mean costs, and the mean of
SAMPLES runs with each time drawn from its measured spread (`--samples`), against the mean
measured step (target, issue 34:
within 5% when each rank has a core, for every schedule in 9 runs of 10: `--ranks 2` here; 4 ranks share the 2 cores, which the
simulator, one device per rank, does not model).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH, DEPTH, BATCH, M = 512, 8, 64, 8
SAMPLES = 200  # sampled runs of the simulator per schedule
PREDICTION = 0.05  # issue 34, target 5: the sampled mean within this of the mean measured step, a core per rank

from perf import TORCH_CLASSES as SCHEDULES  # noqa: E402  built-in -> (torch class, V), shared with perf_table


def _stages(stage_ids, S):
    import torch
    from torch import nn
    per = DEPTH // S
    out = []
    for s in stage_ids:
        layers = []
        for i in range(s * per, (s + 1) * per):
            torch.manual_seed(i)
            layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
        out.append(nn.Sequential(*layers))
    return out


def _loss(out, target):
    import torch
    return torch.nn.functional.mse_loss(out, target)


START_MARGIN = 0.010  # s after the last rank left the barrier at which every rank starts a timed call


def _timed(fns, steps, warmup):
    """For each of `fns`, the slowest rank's time from a common start to the end of one call, over
    `warmup + steps` rounds that call every fn once in turn (so all see the same machine load);
    the warm-up rounds are dropped. The ranks leave a barrier up to milliseconds apart (each learns
    of it when its gloo thread wakes: 0.2 to 0.8 ms on average here), so they agree on an instant
    START_MARGIN after the last one left (one clock: every rank runs on this host) and each spins
    until it, as the simulator starts every rank at 0 (a rank that sleeps until just before it
    starts measurably slower: its core has gone idle). Also returns each call's start instant, per
    fn (the warm-up rounds' dropped too), and how many calls started late."""
    import torch
    import torch.distributed as dist
    times: list[list[float]] = [[] for _ in fns]
    starts: list[list[float]] = [[] for _ in fns]
    late = 0
    for i in range(warmup + steps):
        for fn, out, began in zip(fns, times, starts):
            dist.barrier()
            left = torch.tensor([time.perf_counter()], dtype=torch.float64)
            dist.all_reduce(left, op=dist.ReduceOp.MAX)
            t0 = left.item() + START_MARGIN
            late += time.perf_counter() > t0
            while time.perf_counter() < t0:
                pass
            fn()
            dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            if i >= warmup:
                out.append(dt.item())
                began.append(t0)
    return times, starts, late


def _worker(spec_path: str, out_path: str) -> int:
    os.environ["OMP_NUM_THREADS"] = "1"
    import datetime

    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as torch_schedules

    from schedc.runtime.entry import end_rank, split
    from schedc.runtime.interpreter import PipelineInterpreter
    from schedc.runtime.table import load_table
    from schedc.runtime.watchdog import Watchdog
    torch.set_num_threads(1)
    spec = json.loads(Path(spec_path).read_text())
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, WIDTH, generator=gen)
    y = torch.randn(BATCH, WIDTH, generator=gen)
    results = {}
    for case in spec["cases"]:
        meta, ranks = case["program"], case["ranks"]
        table = load_table(meta, ranks)
        S = table.num_stages
        mine = list(table.stages_of(rank))
        ours_mods = dict(zip(mine, _stages(mine, S)))
        interp = PipelineInterpreter(table, rank, ours_mods, _loss, watchdog=Watchdog(60.0))
        early_mods = dict(zip(mine, _stages(mine, S)))
        early = PipelineInterpreter(load_table(case["early"][0], case["early"][1]), rank, early_mods, _loss,
                                    watchdog=Watchdog(60.0))
        first, last = 0 in mine, S - 1 in mine

        def step(interp, mods, first=first, last=last):
            interp.step(split(x, M) if first else None, split(y, M) if last else None)
            for m in mods.values():
                m.zero_grad(set_to_none=True)

        def ours(interp=interp, mods=ours_mods):
            step(interp, mods)

        def ours_early(interp=early, mods=early_mods):
            step(interp, mods)

        torch_mods = _stages(mine, S)
        stages = [PipelineStage(m, s, S, torch.device("cpu")) for s, m in zip(mine, torch_mods)]
        cls = getattr(torch_schedules, case["torch"])
        sched = cls(stages[0] if len(stages) == 1 and case["torch"] in ("ScheduleGPipe", "Schedule1F1B") else stages,
                    n_microbatches=M, loss_fn=_loss)

        def theirs(sched=sched, mods=torch_mods, first=first, last=last):
            sched.step(*((x,) if first else ()), target=y if last else None)
            for m in mods:
                m.zero_grad(set_to_none=True)

        ours()  # (each interpreter learns its shapes in its first step)
        ours_early()
        (t_theirs, t_ours, t_early), (_, s_ours, s_early), late = _timed([theirs, ours, ours_early], spec["steps"],
                                                                          spec["warmup"])
        # each timed call's step as the runtime ran it, from the common start to the slowest rank's end of
        # `step` (its zeroing of the gradients after it, the benchmark's, left out): what the simulator times
        first = 1 + spec["warmup"]  # (the step that learnt the shapes, and the warm-up rounds)
        own = torch.tensor([[st.end - t0 for st, t0 in zip(i.step_log[first:], began)]
                            for i, began in ((interp, s_ours), (early, s_early))], dtype=torch.float64)
        dist.all_reduce(own, op=dist.ReduceOp.MAX)
        from schedc.runtime.entry import interp_profile
        # what `schedc run --profile` writes, over the timed steps only (means per action and message),
        # of both of schedc's runs
        gathered, gathered_early = [None] * world, [None] * world
        dist.all_gather_object(gathered, interp_profile(interp, 1 + spec["warmup"]))
        dist.all_gather_object(gathered_early, interp_profile(early, 1 + spec["warmup"]))
        lates = [None] * world
        dist.all_gather_object(lates, late)
        results[case["name"]] = {"ours": t_ours, "early": t_early, "torch": t_theirs, "profile": gathered,
                                 "profile_early": gathered_early, "late": max(lates),
                                 "ours_step": own[0].tolist(), "early_step": own[1].tolist()}
        dist.barrier()
    if rank == 0:
        Path(out_path).write_text(json.dumps(results))
    dist.barrier()
    end_rank()  # (torch's stages and schedules hold the group in reference cycles)


def _simulated(program, profile_parts, receives: str) -> tuple[float, float, float, dict]:
    """The simulator on the lowered `program` (what the runtime ran: `receives` early, every receive
    posted at the start of its rank's step, timed under gloo as it ran; or where lowering puts
    them) under the profile the run measured, as `schedc sim NAME --lower [early --semantics
    gloo] --costs profile.json --samples 200` times it: (the makespan with the
    per-stage times only, free messages; with the measured communication and dispatch costs too;
    the mean of SAMPLES runs with every time drawn from its measured spread; the profile)."""
    from schedc.costs import profile_costs
    from schedc.passes import lower
    from schedc.runtime.profile import build_profile
    from schedc.simulate import simulate
    from schedc.simulate_sampled import sample
    prof = build_profile(profile_parts)
    semantics = "gloo" if receives == "early" else None  # (early receives complete under a backend's semantics)
    lowered = lower(program, receives=receives)
    plain = profile_costs(json.dumps({"stages": prof["stages"]}), "measured.json").apply(lowered)
    full = profile_costs(json.dumps(prof), "measured.json")
    timed = full.apply(lowered)
    links = full.links(timed)  # (unset channel latencies from the profile's, on the timed program)
    sampled = sample(timed, full.spread_of(timed), SAMPLES, links=links, semantics=semantics)
    return (simulate(plain, semantics=semantics).makespan, simulate(timed, links=links, semantics=semantics).makespan,
            sampled.mean, prof)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--schedules", default=",".join(SCHEDULES))
    p.add_argument("--ranks", type=int, default=4, help="pipeline ranks (default 4; 2 gives each rank a core here)")
    args = p.parse_args(argv)
    R = args.ranks
    sys.path.insert(0, str(ROOT))
    import schedc
    from schedc.lower import lower_to_torch
    from schedc.passes import lower
    from schedc.runtime.launch import launch
    names = [n for n in args.schedules.split(",") if n]
    cases, programs = [], {}
    for name in names:
        cls, V = SCHEDULES[name]
        params = {"P": R, "M": M, "V": V} if V > 1 else {"P": R, "M": M}
        program = schedc.load(name, params, strict_params=False)
        report = schedc.check(program)
        if not report.ok:
            print(f"{name}: does not check; skipped\n{report.render()}")
            continue
        lowered = lower_to_torch(program, verified="rendezvous")
        meta, ranks = lowered.table.to_data()
        if not schedc.check(lower(program, receives="early"), semantics="gloo").ok:
            print(f"{name}: with its receives posted early, does not check under gloo; skipped")
            continue
        early = lower_to_torch(program, verified="gloo", receives="early").table.to_data()
        cases.append({"name": name, "torch": cls, "program": meta, "ranks": ranks, "early": early})
        programs[name] = program
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp, "spec.json"), Path(tmp, "out.json")
        spec.write_text(json.dumps({"cases": cases, "steps": args.steps, "warmup": args.warmup}))
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]))
        done = launch([sys.executable, __file__, "--worker", str(spec), str(out)], R, env=env, grace=10)
        if not done.ok:
            print(f"benchmark ranks failed: {done.returncodes}")
            return 1
        results = json.loads(out.read_text())
    print(f"{DEPTH} x Linear({WIDTH},{WIDTH})+GELU, batch {BATCH}, M={M}, {R} gloo ranks, "
          f"OMP_NUM_THREADS=1; median of {args.steps} steps after {args.warmup} warm-up, the two runtimes "
          "alternating step by step")
    print(f"{'schedule':<24} {'torch ms':>9} {'schedc ms':>10} {'ratio':>7} {'paired':>7} {'early ms':>9} "
          f"{'ratio':>7} {'paired':>7} {'mean ms':>8} {'sim free':>9} {'sim comm':>9} {'sim exp':>8} "
          f"{'exp/meas':>9} {'within 5%':>10}")
    ratios, early_ratios, notes, predicted, needed_predicted = [], [], [], [], []
    for name, r in results.items():
        theirs, ours, early = (statistics.median(r[k]) for k in ("torch", "ours", "early"))
        mean = statistics.fmean(r["early_step"])  # (the default's: receives posted early on gloo)
        free, comm, expected, prof = _simulated(programs[name], r["profile_early"], "early")
        predicted.append(expected / mean)
        needed_predicted.append(_simulated(programs[name], r["profile"], "needed")[2]
                                / statistics.fmean(r["ours_step"]))
        ratios.append(ours / theirs)
        early_ratios.append(early / theirs)
        paired, early_paired = (statistics.median(o / t for o, t in zip(r[k], r["torch"])) for k in ("ours", "early"))
        ok = abs(expected / mean - 1) <= PREDICTION
        print(f"{name:<24} {theirs * 1e3:9.2f} {ours * 1e3:10.2f} {ours / theirs:7.3f} {paired:7.3f} "
              f"{early * 1e3:9.2f} {early / theirs:7.3f} {early_paired:7.3f} "
              f"{mean * 1e3:8.2f} {free * 1e3:9.2f} {comm * 1e3:9.2f} {expected * 1e3:8.2f} {expected / mean:9.3f} "
              f"{'yes' if ok else 'no':>10}")
        msg, meta = prof["messages"], prof.get("meta", {})
        where = meta.get("time_per_step", {})
        split_ = " ".join(f"r{k} {v['compute'] * 1e3:.0f}/{v['waited'] * 1e3:.0f}/{v['posting'] * 1e3:.0f}/"
                          f"{v['other'] * 1e3:.0f}" for k, v in sorted(where.items(), key=lambda kv: int(kv[0])))
        notes.append(f"  {name}: latency {msg.get('latency', 0) * 1e3:.2f} ms ({meta.get('latency_samples', 0)} of "
                     f"{meta.get('messages_timed', 0)} receives waited), overhead {msg.get('overhead', 0) * 1e3:.3f} ms "
                     f"per post; ms per step compute/waited/posting/other: {split_}")
    print(f"geometric mean ratio schedc/torch: {statistics.geometric_mean(ratios):.3f} (receives where needed, "
          "--receives needed)")
    print(f"geometric mean ratio schedc/torch, receives posted early: {statistics.geometric_mean(early_ratios):.3f} "
          "(the default on gloo; target <= 0.7)")
    meta = next(iter(results.values()))["profile"] if results else None
    cores = min(p["cores"] for p in meta) if meta else 0
    if predicted:
        within = sum(abs(x - 1) <= PREDICTION for x in predicted)
        worst = max(abs(x - 1) for x in predicted)
        print(f"simulator, sampled: within {PREDICTION:.0%} of the mean measured step for {within} of {len(predicted)} "
              f"(within 10%: {sum(abs(x - 1) <= 0.10 for x in predicted)}; exp/meas {min(predicted):.3f} to {max(predicted):.3f}, worst off by {worst:.3f}; "
              f"{R} ranks on {cores} cores)")
        print(f"simulator, sampled, of the --receives needed run: within {PREDICTION:.0%} for "
              f"{sum(abs(x - 1) <= PREDICTION for x in needed_predicted)} of {len(needed_predicted)} (exp/meas "
              f"{min(needed_predicted):.3f} to {max(needed_predicted):.3f})")
    late = sum(r["late"] for r in results.values())
    if late:
        print(f"{late} timed call(s) of {3 * (args.steps + args.warmup) * len(results)} started after the common "
              f"start instant (a rank learnt it more than {START_MARGIN * 1e3:.0f} ms after the last left the barrier)")
    print(f"early: the same schedule lowered with every receive posted at the start of its rank's step (what `schedc "
          f"run` does on gloo by default); mean ms and the sim columns are its run's (the default's), mean ms the mean "
          f"of its steps as the runtime ran them (from the common start to the slowest rank's end of the step, the "
          f"benchmark's zeroing of the gradients after it left out). "
          f"sim free: the lowered program under the measured per-action means, messages free; sim comm: also with "
          f"the measured per-channel latency and posting overhead (profile `messages`) and each rank's dispatch "
          f"time per step (profile `ranks`); sim exp: the mean of {SAMPLES} runs with each compute time and "
          f"posting overhead drawn from its measured spread (`schedc sim --samples`); exp/meas = sim exp / "
          f"the mean measured step (target: within {PREDICTION:.0%} with a core per rank). Every call starts at one instant on every rank. {R} ranks on {cores} cores"
          f"{' (oversubscribed: the measured times include the contention)' if cores < R else ''}.")
    print("\n".join(notes))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3]))
    sys.exit(main())
