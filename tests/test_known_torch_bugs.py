"""Known PyTorch and Megatron-LM bugs, found by schedc from the runtimes' own output.

1. torch 2.13's `defer_pp_recv=True` (`_defer_recv_ops`) moves each receive of torch's lowering
   down to just before its consumer, while the sends stay where the producers are. Messages between
   two ranks pair in the order they were posted, so on a V-shape, where one rank pair carries both
   activations and gradients, a receive ends up paired with the wrong send (ZB-V, DualPipeV; also
   torch's interleaved zero bubble at P=2); and the rank-parity rule meant to keep it deadlock-free
   does not: 1F1B and interleaved 1F1B deadlock when a send waits for its receive (schedc's
   `rendezvous` and `nccl`), both ranks of a pair sending before they receive as in
   pytorch/pytorch#172668, while `eager` and `gloo` complete. Each schedule is built by torch
   (duck-typed stages), lowered by torch with and without the deferral, written by torch's own
   `_dump_csv` and read by `schedc.from_torch_csv`. Every verdict is held to a small executor of
   torch's action lists written here (`_oracle_crossed`, `_oracle_completes`), so no test merely
   restates schedc.
2. The wrong data, for real: torch's `_PipelineScheduleRuntime` runs deferred ZB-V at P=3, M=6 on
   gloo, one spawn of three ranks, against unsplit training; the schedule each run used is dumped
   by torch's runtime and checked by schedc. This file is also that worker:
   `python tests/test_known_torch_bugs.py --worker CASES.json OUTDIR`.
3. Megatron-LM's interleaved schedule at P=2 with batched p2p (tests/known/megatron_interleaved_p2.pp,
   its order derived from Megatron's source, see the file) crosses payloads; the same derivation at
   P=3, where Megatron allows it, checks clean, and both have the compute order of schedc's
   `interleaved_1f1b` (held to torch's ScheduleInterleaved1F1B elsewhere).
"""
from __future__ import annotations

import io
import json
import os
import re
import sys
import time
from collections import Counter, deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KNOWN = Path(__file__).parent / "known"
SEMANTICS = ("rendezvous", "eager", "nccl", "gloo")


# =====================================================================================
# torch's own lowering, with and without the deferral
# =====================================================================================
def _torch():
    return pytest.importorskip("torch.distributed.pipelining.schedules")


def torch_schedule(name: str, P: int, M: int, defer: bool, V: int = 2):
    """torch's schedule object (duck-typed stages) whose `pipeline_order_with_comms` is torch's
    lowering; `name` is the torch class name without `Schedule`, or `1F1B`: the order torch's
    `Schedule1F1B` step loop runs, lowered by `_PipelineScheduleRuntime` as `_load_csv` does."""
    S = _torch()
    from test_torch_oracle import driven_order, looped_stages, vshape_stages
    if name == "1F1B":
        compute = {r: [S._Action.from_str(t) for t in row] for r, row in enumerate(driven_order(S.Schedule1F1B, P, M))}
        runtime = S._PipelineScheduleRuntime(looped_stages(P, 1), M, defer_pp_recv=defer)
        runtime._prepare_schedule_with_comms(compute)
        return runtime
    cls = getattr(S, f"Schedule{name}")
    stages = vshape_stages(P) if name in ("ZBVZeroBubble", "DualPipeV") else looped_stages(P, V)
    return cls(stages, M, defer_pp_recv=defer)


def as_program(schedule, path: Path):
    """torch's lowering as torch writes it (`_dump_csv`, compute_comms), read by schedc."""
    import schedc
    schedule._dump_csv(str(path), format="compute_comms")
    return schedc.from_torch_csv(str(path))


# ---- an executor of torch's action lists, independent of schedc ----
def _endpoint(a, stage_to_rank):
    """(src rank, dst rank, 'send' | 'recv', what the message carries) of a send or receive."""
    t, s, m = a.computation_type.value, a.stage_index, a.microbatch_index
    if t == "SEND_F":
        return stage_to_rank(s), stage_to_rank(s + 1), "send", ("act", s, m)
    if t == "SEND_B":
        return stage_to_rank(s), stage_to_rank(s - 1), "send", ("grad", s, m)
    if t == "RECV_F":  # the activation of stage s-1
        return stage_to_rank(s - 1), stage_to_rank(s), "recv", ("act", s - 1, m)
    if t == "RECV_B":  # the gradient of stage s+1
        return stage_to_rank(s + 1), stage_to_rank(s), "recv", ("grad", s + 1, m)
    return None


def _messages(order, stage_to_rank):
    """Every send and receive as (src, dst, kind, k) -> (rank, position, action, payload), the k-th
    of its kind on its channel (tagless point-to-point pairs in posting order)."""
    seen, out = Counter(), {}
    for r in sorted(order):
        for i, a in enumerate(x for x in order[r] if x is not None):
            e = _endpoint(a, stage_to_rank)
            if e:
                src, dst, kind, payload = e
                key = (src, dst, kind, seen[src, dst, kind])
                seen[src, dst, kind] += 1
                out[key] = (r, i, a, payload)
    return out


def _oracle_crossed(schedule) -> set[tuple[str, str]]:
    """(send, receive) pairs whose payloads differ, as compact text."""
    msgs = _messages(schedule.pipeline_order_with_comms, schedule.stage_index_to_group_rank.__getitem__)
    crossed = set()
    for (src, dst, kind, k), (_, _, send, carried) in msgs.items():
        if kind == "send" and (src, dst, "recv", k) in msgs:
            _, _, recv, expected = msgs[src, dst, "recv", k]
            if carried != expected:
                crossed.add((str(send), str(recv)))
    return crossed


def _oracle_completes(schedule, semantics: str) -> bool:
    """Does every rank reach the end of its list? Sends and receives block at their place
    (`rendezvous`: until the partner is there; `eager`: a receive until its send is posted), or are
    posted and awaited as torch's runtime awaits them (`gloo`: a receive completes once its send is
    posted; `nccl`: each rank's operations with one peer complete in the order it issued them, a
    send with its receive once both are at the head). A forward waits for the receive named
    RECV_F(its stage, its microbatch) on its rank, a backward for RECV_B, as torch's runtime does."""
    order = {r: [a for a in acts if a is not None] for r, acts in schedule.pipeline_order_with_comms.items()}
    stage_to_rank = schedule.stage_index_to_group_rank.__getitem__
    msgs = _messages(order, stage_to_rank)
    key_at = {(r, i): key for key, (r, i, _, _) in msgs.items()}
    partner = {key: (key[0], key[1], "recv" if key[2] == "send" else "send", key[3]) for key in msgs}
    recv_named = {(r, str(a)): key for key, (r, _, a, _) in msgs.items() if key[2] == "recv"}
    pc = {r: 0 for r in order}
    posted, done = set(), set()
    streams: dict[tuple[int, int], deque] = {}

    def awaited(r, a):
        parts = a.sub_actions if a.sub_actions is not None else (a,)
        names = []
        for p in parts:
            t = p.computation_type.value
            if t == "F":
                names.append(f"{p.stage_index}RECV_F{p.microbatch_index}")
            elif t in ("B", "I"):
                names.append(f"{p.stage_index}RECV_B{p.microbatch_index}")
        return [recv_named[r, n] for n in names if (r, n) in recv_named]

    progress = True
    while progress:
        progress = False
        for r in order:
            if pc[r] == len(order[r]):
                continue
            a, key = order[r][pc[r]], key_at.get((r, pc[r]))
            if key is None:  # compute or a stage action
                if all(k in done for k in awaited(r, a)):
                    pc[r] += 1
                    progress = True
                continue
            other = partner[key]
            if semantics == "rendezvous":
                if other in msgs and pc[msgs[other][0]] == msgs[other][1]:
                    pc[r] += 1
                    pc[msgs[other][0]] += 1
                    done |= {key, other}
                    progress = True
            elif semantics == "eager":
                if key[2] == "send" or other in posted:
                    pc[r] += 1
                    posted.add(key)
                    done.add(key)
                    progress = True
            else:  # posted at its place, completed later
                pc[r] += 1
                posted.add(key)
                progress = True
                if semantics == "nccl":
                    peer = key[1] if key[0] == r else key[0]
                    streams.setdefault((r, peer), deque()).append(key)
        if semantics == "gloo":
            for key in posted - done:
                if key[2] == "send" or partner[key] in posted:
                    done.add(key)
                    progress = True
        elif semantics == "nccl":
            for (r, peer), q in streams.items():
                back = streams.get((peer, r))
                if q and back and partner[q[0]] == back[0]:
                    done |= {q.popleft(), back.popleft()}
                    progress = True
    return all(pc[r] == len(order[r]) for r in order) and all(not q for q in streams.values())


def crossed_pairs(report) -> set[tuple[str, str]]:
    return {(m.to_dict()["send"], m.to_dict()["recv"]) for m in report.mismatches}


def _verdicts(program):
    import schedc
    return {sem: schedc.check(program, semantics=sem) for sem in SEMANTICS}


def _assert_clean(program, what):
    for sem, report in _verdicts(program).items():
        assert report.ok, f"{what} under {sem}:\n" + "\n".join(d.message for d in report.errors)


# ---- 1. the claims of the issue ----
V_SCHEDULES = [pytest.param("ZBVZeroBubble", 3, 6, id="ZBV-P3-M6"),
               pytest.param("DualPipeV", 3, 6, id="DualPipeV-P3-M6")]


@pytest.mark.parametrize("name, P, M", V_SCHEDULES)
def test_deferred_receives_cross_payloads_on_v_schedules(tmp_path, run_cli, name, P, M):
    S = _torch()
    plain = torch_schedule(name, P, M, defer=False)
    _assert_clean(as_program(plain, tmp_path / "plain.csv"), f"torch's {name} lowering without defer_pp_recv")
    assert not _oracle_crossed(plain)

    deferred = torch_schedule(name, P, M, defer=True)
    expected = _oracle_crossed(deferred)
    assert expected, f"torch's deferred {name} (P={P}, M={M}) pairs every message with its own receive"
    program = as_program(deferred, tmp_path / "deferred.csv")
    for sem, report in _verdicts(program).items():
        # pairing is by order, whatever the timing: every semantics sees the same crossed pairs
        assert crossed_pairs(report) == expected, sem
        assert {d.code for d in report.errors} <= {"mismatch", "deadlock"}, sem
        assert (report.deadlock is None) == _oracle_completes(deferred, sem), sem
    # on gloo it does not hang: it computes on the wrong tensors
    assert _oracle_completes(deferred, "gloo") and _verdicts(program)["gloo"].deadlock is None

    code, out, _ = run_cli("check", str(tmp_path / "deferred.csv"), "--semantics", "gloo")
    assert code == 1
    for send, recv in expected:  # each crossed pair is named: 0SEND_F4 -> "SEND_F(0,4)"
        s_stage, s_op, s_mb = re.fullmatch(r"(\d+)(\w+?)(\d+)", send).groups()
        r_stage, r_op, r_mb = re.fullmatch(r"(\d+)(\w+?)(\d+)", recv).groups()
        assert f"{r_op}({r_stage},{r_mb}) is paired with {s_op}({s_stage},{s_mb})" in out, (send, recv, out)
    if name == "ZBVZeroBubble":
        # torch's own dry-run pairs messages by name, not by order: it runs the crossed schedule to the end
        order = {r: [a for a in acts if a.computation_type not in (S.UNSHARD, S.RESHARD, S.REDUCE_GRAD)]
                 for r, acts in deferred.pipeline_order_with_comms.items()}
        S._simulate_comms_compute(order, deferred.stage_index_to_group_rank.__getitem__, deferred._num_stages)


BLOCKING = [pytest.param("1F1B", 4, 8, 1, id="1F1B-P4-M8"), pytest.param("1F1B", 2, 4, 1, id="1F1B-P2-M4"),
            pytest.param("Interleaved1F1B", 4, 8, 2, id="Interleaved1F1B-P4-V2-M8"),
            pytest.param("Interleaved1F1B", 2, 4, 2, id="Interleaved1F1B-P2-V2-M4")]


@pytest.mark.parametrize("name, P, M, V", BLOCKING)
def test_deferred_receives_deadlock_1f1b_and_interleaved_when_sends_wait(tmp_path, run_cli, name, P, M, V):
    plain = torch_schedule(name, P, M, defer=False, V=V)
    _assert_clean(as_program(plain, tmp_path / "plain.csv"), f"torch's {name} lowering without defer_pp_recv")

    deferred = torch_schedule(name, P, M, defer=True, V=V)
    assert not _oracle_crossed(deferred)
    program = as_program(deferred, tmp_path / "deferred.csv")
    verdicts = _verdicts(program)
    for sem, report in verdicts.items():
        assert not report.mismatches, sem
        assert (report.deadlock is None) == _oracle_completes(deferred, sem), sem
    # measured: a send that waits for its receive (rendezvous, and nccl's in-order streams) hangs;
    # buffered sends (eager, gloo) complete
    hangs = {sem for sem, report in verdicts.items() if report.deadlock is not None}
    assert hangs == {"rendezvous", "nccl"}, hangs
    code, out, _ = run_cli("check", str(tmp_path / "deferred.csv"), "--semantics", "nccl")
    assert code == 1 and "error[deadlock]: deadlock under nccl" in out and "on its stream to rank" in out, out
    code, out, _ = run_cli("check", str(tmp_path / "deferred.csv"))
    # pytorch/pytorch#172668's hang, which the deferral's rank-parity rule was meant to rule out
    assert code == 1 and "deadlock under rendezvous sends" in out and "send before they receive" in out, out
    assert "safe only if at least 1 message is buffered" in out, out
    assert run_cli("check", str(tmp_path / "deferred.csv"), "--semantics", "gloo")[0] == 0


SWEEP = [(name, P, M, V) for name, V in (("ZBVZeroBubble", 2), ("DualPipeV", 2), ("1F1B", 1), ("Interleaved1F1B", 2),
                                         ("InterleavedZeroBubble", 2), ("LoopedBFS", 2))
         for P in (2, 3, 4) for M in (P, 2 * P, 3 * P)]


def test_schedc_agrees_with_the_executor_on_every_deferred_lowering(tmp_path):
    """Small settings of every torch schedule that takes defer_pp_recv: schedc's crossed pairs and
    deadlock verdicts, under each semantics, are the executor's; without the deferral all are clean."""
    seen = Counter()
    for name, P, M, V in SWEEP:
        for defer in (False, True):
            try:
                schedule = torch_schedule(name, P, M, defer, V=V)
            except ValueError:  # torch refuses this M for this schedule
                continue
            program = as_program(schedule, tmp_path / f"{name}_{P}_{M}_{defer}.csv")
            crossed = _oracle_crossed(schedule)
            hangs = set()
            for sem, report in _verdicts(program).items():
                what = (name, P, M, defer, sem)
                assert crossed_pairs(report) == crossed, what
                completes = _oracle_completes(schedule, sem)
                assert (report.deadlock is None) == completes, what
                assert report.ok == (completes and not crossed), what
                seen[defer, "crossed" if crossed else "ok" if completes else "hangs"] += 1
                if not completes:
                    hangs.add(sem)
            if defer:  # what docs/interop.md says: every deferred lowering tried hangs when sends wait
                nccl_too = not (name == "LoopedBFS" and P >= 3)
                assert hangs == ({"rendezvous", "nccl"} if nccl_too else {"rendezvous"}), (name, P, M, hangs)
    assert seen[True, "crossed"] and seen[True, "hangs"] and seen[True, "ok"]  # every outcome occurs
    assert set(k for k in seen if not k[0]) == {(False, "ok")}


def test_interleaved_zero_bubble_crosses_too_at_two_ranks(tmp_path):
    """Not in the issue: on 2 ranks a looped placement also puts activations and gradients on one
    rank pair, and torch's interleaved zero bubble crosses them when deferred."""
    deferred = torch_schedule("InterleavedZeroBubble", 2, 4, defer=True)
    expected = _oracle_crossed(deferred)
    assert expected
    assert crossed_pairs(_verdicts(as_program(deferred, tmp_path / "izb.csv"))["gloo"]) == expected
    _assert_clean(as_program(torch_schedule("InterleavedZeroBubble", 2, 4, defer=False), tmp_path / "plain.csv"),
                  "torch's InterleavedZeroBubble without defer_pp_recv")


# =====================================================================================
# 2. the wrong data, for real: torch's runtime on gloo
# =====================================================================================
WIDTH = 16
WORKER_DEADLINE = 120.0


def _train(case: dict, rank: int, out_dir: str) -> dict:
    import torch
    import torch.distributed.pipelining.schedules as S
    from torch.distributed.pipelining import PipelineStage

    from examples import mlp
    from schedc.testing import as_double, reference_gradients
    P, M = int(os.environ["WORLD_SIZE"]), case["microbatches"]
    num_stages = 2 * P
    mine = [rank, num_stages - 1 - rank]  # the V: torch's ZBVZeroBubble and DualPipeV placement

    def build(ids, n):
        return mlp.build_stages(ids, n, width=WIDTH, depth=num_stages)

    modules = {s: m.double() for s, m in zip(mine, build(mine, num_stages))}
    stages = [PipelineStage(modules[s], s, num_stages, torch.device("cpu")) for s in mine]
    cls = getattr(S, f"Schedule{case['schedule']}")
    schedule = cls(stages, M, loss_fn=mlp.loss_fn, defer_pp_recv=case["defer"])
    if rank == 0:  # the lowering this run executes, as torch writes it
        schedule._dump_csv(str(Path(out_dir, f"{case['id']}.csv")), format="compute_comms")
    x, y = (as_double(t) for t in mlp.make_batch(0, 2 * M, width=WIDTH))
    losses: list = []
    schedule.step(*((x,) if 0 in mine else ()), target=y if num_stages - 1 in mine else None, losses=losses)
    ref_loss, ref = reference_gradients(build, mlp.loss_fn, num_stages, x, y)
    errors, scale = {}, 0.0
    for s in mine:
        truth = [g for _, g in ref[s]]
        errors[s] = max((p.grad - g).abs().max().item() for p, g in zip(modules[s].parameters(), truth))
        scale = max([scale] + [g.abs().max().item() for _, g in ref[s]])
    loss_err = abs(torch.stack(losses).mean().item() - ref_loss) if num_stages - 1 in mine else 0.0
    return {"grad_err": errors, "grad_scale": scale, "loss_err": loss_err}


def _worker(cases_path: str, out_dir: str) -> int:
    os.environ["OMP_NUM_THREADS"] = "1"
    sys.path.insert(0, str(ROOT))
    import datetime

    import torch
    import torch.distributed as dist

    from schedc.runtime.entry import end_rank
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30))
    results = {}
    for case in json.loads(Path(cases_path).read_text()):
        t0 = time.perf_counter()
        try:
            results[case["id"]] = _train(case, rank, out_dir)
        except Exception as exc:  # the peers would wait on this rank: report it and stop the spawn
            sys.stderr.write(f"rank {rank}: case {case['id']} failed: {type(exc).__name__}: {exc}\n")
            sys.stderr.flush()
            os._exit(1)
        results[case["id"]]["seconds"] = time.perf_counter() - t0
        dist.barrier()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    end_rank()  # (torch's stages and schedules hold the group in reference cycles)


@pytest.mark.slow  # 6-9 s of spawned ranks
def test_torch_runtime_trains_deferred_zbv_to_wrong_gradients_on_gloo(tmp_path):
    """One spawn of 3 ranks: ZB-V (P=3, M=6) with torch's lowering trains to the unsplit model's
    gradients; with defer_pp_recv it completes on gloo and silently gives other gradients, and the
    schedule torch's runtime ran is the one schedc reports as crossed."""
    _torch()
    import schedc
    from schedc.runtime.launch import launch
    P, M = 3, 6
    cases = [{"id": f"zbv-{'deferred' if defer else 'plain'}", "schedule": "ZBVZeroBubble", "microbatches": M,
              "defer": defer} for defer in (False, True)]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    out, err = io.StringIO(), io.StringIO()
    done = launch([sys.executable, str(Path(__file__).resolve()), "--worker", str(tmp_path / "cases.json"),
                   str(tmp_path)], P, stdout=out, stderr=err, grace=5, deadline=WORKER_DEADLINE, cwd=str(ROOT))
    assert done.ok, f"ranks exited {done.returncodes}\n{out.getvalue()}\n{err.getvalue()}"
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(P)]

    def worst(case):
        return max(max(res[case]["grad_err"].values()) for res in results)

    scale = max(res["zbv-plain"]["grad_scale"] for res in results)
    assert worst("zbv-plain") <= 1e-10 and results[0]["zbv-plain"]["loss_err"] <= 1e-10, results
    assert worst("zbv-deferred") > 1e-3 * scale, results  # wrong, not rounding

    plain = schedc.from_torch_csv(str(tmp_path / "zbv-plain.csv"))
    deferred = schedc.from_torch_csv(str(tmp_path / "zbv-deferred.csv"))
    assert schedc.check(plain, semantics="gloo").ok
    report = schedc.check(deferred, semantics="gloo")
    assert report.mismatches and report.deadlock is None
    assert crossed_pairs(report) == _oracle_crossed(torch_schedule("ZBVZeroBubble", P, M, defer=True))
    # a forward's input is among the crossed (RECV_F(1,4) gets SEND_B(5,1), a gradient): that
    # microbatch's loss is wrong, and so is every stage's gradient, as the backward starts from it
    assert any("RECV_F" in recv for _, recv in crossed_pairs(report))
    assert results[0]["zbv-deferred"]["loss_err"] > 1e-3  # rank 0 holds the last stage
    wrong = {int(s) for res in results for s, e in res["zbv-deferred"]["grad_err"].items() if e > 1e-3 * scale}
    assert wrong == set(range(2 * P)), results
    # the figures docs/interop.md gives (the model and the batch are seeded; float64 on CPU)
    assert (round(results[0]["zbv-deferred"]["loss_err"], 2), round(worst("zbv-deferred"), 1), round(scale, 1)) \
        == (0.15, 1.6, 0.8), results


# ---- docs/interop.md shows torch's and Megatron's orders: they must be the ones tested here ----
def _doc_files() -> dict[str, str]:
    from test_docs import blocks
    return {b.markers["file"]: b.text for b in blocks(ROOT / "docs" / "interop.md") if "file" in b.markers}


@pytest.mark.parametrize("name, torch_name, P, M, V", [("zbv_deferred.csv", "ZBVZeroBubble", 2, 3, 2),
                                                        ("1f1b_deferred.csv", "1F1B", 2, 2, 1)])
def test_the_csvs_in_the_docs_are_what_torch_writes(tmp_path, name, torch_name, P, M, V):
    torch_schedule(torch_name, P, M, defer=True, V=V)._dump_csv(str(tmp_path / name), format="compute_comms")
    with open(tmp_path / name, newline="") as fh:
        assert fh.read().replace("\r\n", "\n") == _doc_files()[name]


def test_the_megatron_order_in_the_docs_is_the_known_file():
    import schedc
    from schedc.api import load_text
    shown = load_text(_doc_files()["megatron_p2.pp"], "megatron_p2.pp")
    assert shown.ranks == schedc.load(str(KNOWN / "megatron_interleaved_p2.pp")).ranks


# =====================================================================================
# 3. Megatron-LM's interleaved schedule at P=2 with batched p2p
# =====================================================================================
def _compute_order(program) -> list[list[str]]:
    from schedc.ir import Action, format_step
    return [[format_step(st) for st in row if isinstance(st, Action) and st.op.name in ("F", "B")]
            for row in program.ranks]


@pytest.mark.parametrize("name, P, M", [("megatron_interleaved_p2", 2, 4), ("megatron_interleaved_p3", 3, 6)])
def test_megatron_compute_order_is_the_interleaved_1f1b_builtin(name, P, M):
    """A cross-check of the derivation: without its messages, it is schedc's interleaved_1f1b (which
    tests/test_torch_oracle.py holds to torch's ScheduleInterleaved1F1B) at the same P, V=2, M."""
    import schedc
    derived = _compute_order(schedc.load(str(KNOWN / f"{name}.pp")))
    assert sum(map(len, derived)) == 2 * P * 2 * M  # every F and B of 2P stages, M microbatches
    assert derived == _compute_order(schedc.load("interleaved_1f1b", {"P": P, "V": 2, "M": M}))


def test_megatron_interleaved_at_two_ranks_crosses_payloads(run_cli):
    import schedc
    program = schedc.load(str(KNOWN / "megatron_interleaved_p2.pp"))
    assert (program.num_ranks, program.num_stages, program.num_microbatches) == (2, 4, 4)
    # the forward order of Megatron's own example for PP=2, VP=2, group size 2, M=4
    # (ModelParallelConfig.microbatch_group_size_per_vp_stage): rank 0 | 0 1 0 1 2 3 2 3
    forwards = [int(t.split("F")[1]) for t in _compute_order(program)[0] if "F" in t]
    assert forwards == [0, 1, 0, 1, 2, 3, 2, 3]
    for sem in SEMANTICS:
        report = schedc.check(program, semantics=sem)
        crossed = crossed_pairs(report)
        assert report.deadlock is None and len(crossed) == 8, (sem, crossed)  # four swaps, no hang
        assert {(s[0], r[0]) for s, r in crossed} == {("0", "1"), ("2", "1"), ("1", "0"), ("1", "2")}
        # one batch per step posts a gradient send and an activation send to the same peer, in
        # Megatron's order (send_prev, recv_prev, send_next, recv_next); the peer's batch lists
        # the receives the other way round, so they swap
        assert ("0SEND_F2", "1RECV_B0") in crossed and ("2SEND_B0", "1RECV_F2") in crossed, (sem, crossed)
        assert ("1SEND_F2", "0RECV_B0") in crossed and ("1SEND_B0", "2RECV_F2") in crossed, (sem, crossed)
        for send, recv in crossed:  # always a gradient for an activation, or the reverse
            assert ("SEND_F" in send) == ("RECV_B" in recv), (send, recv)
    code, out, _ = run_cli("check", str(KNOWN / "megatron_interleaved_p2.pp"), "--semantics", "nccl")
    assert code == 1
    assert "RECV_F(1,2) is paired with SEND_B(2,0) from rank 0" in out, out


def test_megatron_interleaved_at_three_ranks_checks_clean():
    """The same derivation at P=3, which Megatron's argument check allows: no crossed pair."""
    import schedc
    program = schedc.load(str(KNOWN / "megatron_interleaved_p3.pp"))
    assert (program.num_ranks, program.num_stages, program.num_microbatches) == (3, 6, 6)
    for sem in SEMANTICS:
        report = schedc.check(program, semantics=sem)
        assert report.ok, (sem, [d.message for d in report.errors])


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3]))
    sys.exit("usage: test_known_torch_bugs.py --worker CASES.json OUTDIR")
