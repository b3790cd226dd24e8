"""Point-to-point communicators and tags (`p2p shared | tagged | split`, issue 18 deliverable 3).

`tagged`: each message's tag names its payload, so a receive meets the send of its own value
whatever their order; gloo honours tags and NCCL ignores them (the verdict under nccl pairs in
issue order and says so). `split`: activations and gradients on communicators of their own, FIFO
per rank pair and communicator, a stream each under nccl. The verdicts are held to an
independent oracle (tests/oracles.py) on generated programs, and to what the runtime really does
on gloo: one launch of two ranks runs every program, each on process groups of its own.
"""
from __future__ import annotations

import io
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

import schedc
from schedc.errors import SchedcError
from schedc.strategies import lowered_programs
from schedc.rules.semantics import RENDEZVOUS
from schedc.verify.channels import channels

import launched
from conftest import compile_text
from oracles import posted_run
from test_backends import posted_early_or_late

ROOT = Path(__file__).resolve().parent.parent

PREFETCH = """schedule prefetch {
  %s
  rank 0: 0RECV_B0 0F0 0SEND_F0 0B0
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
}"""
# rank 0 sends F1's output before F0's; rank 1 receives F0's first: crossed when paired in order
CROSSED = """schedule crossed {
  %s
  rank 0: 0F0 0F1 0SEND_F1 0SEND_F0 0RECV_B0 0RECV_B1 0B0 0B1
  rank 1: 1RECV_F0 1RECV_F1 1F0 1F1 1B0 1B1 1SEND_B0 1SEND_B1
}"""
# interleaved on two ranks (stages 0, 2 on rank 0; 1, 3 on rank 1), one microbatch: rank 0 sends
# activations (stages 0 and 2) and a gradient (stage 2 -> 1) to rank 1 on one channel; rank 1 posts
# the gradient's receive before the second activation's: crossed unless they are on communicators
# of their own
KINDS = """schedule kinds {
  %s
  rank 0: 0F0 0SEND_F0 2RECV_F0 2F0 2SEND_F0 2RECV_B0 2B0 2SEND_B0 0RECV_B0 0B0
  rank 1: 1RECV_F0 1F0 1SEND_F0 1RECV_B0 3RECV_F0 3F0 3B0 3SEND_B0 1B0 1SEND_B0
}"""

# 1F1B on two ranks whose middle exchange is a group on each rank (Megatron's batched p2p):
# as one batch_isend_irecv each it completes under nccl; posted one by one, sends first, on the
# pair's stream it would cross (rank 0 sends F1's output first, rank 1 the gradient of B0)
GROUPED = """schedule grouped {
  %s
  rank 0: 0F0 0SEND_F0 0F1 (0SEND_F1;0RECV_B0)GROUP 0B0 0RECV_B1 0B1
  rank 1: 1RECV_F0 1F0 1B0 (1SEND_B0;1RECV_F1)GROUP 1F1 1B1 1SEND_B1
}"""
SENDS_FIRST = GROUPED.replace("(0SEND_F1;0RECV_B0)GROUP", "0SEND_F1 0RECV_B0").replace(
    "(1SEND_B0;1RECV_F1)GROUP", "1SEND_B0 1RECV_F1")


def program(text: str, mode: str | None):
    return compile_text(text % (f"p2p {mode}" if mode else ""))


def verdict(p, semantics: str) -> str:
    r = schedc.check(p, semantics=semantics)
    codes = sorted({d.code for d in r.errors})
    return "ok" if r.ok else "+".join(codes)


# ---- the language and the files ----
def test_the_declaration_is_read_and_kept_in_every_format(tmp_path):
    from schedc.interop.ir_json import dumps_ir, read_ir_json
    from schedc.lower import lower_to_torch
    from schedc.runtime.table import load_table, to_program
    for mode in ("shared", "tagged", "split"):
        p = program(CROSSED, mode)
        assert p.p2p == mode
        assert read_ir_json(dumps_ir(p), "x.json").p2p == mode
        table = lower_to_torch(p).table
        assert load_table(*table.to_data()).p2p == mode == to_program(table).p2p
    assert program(CROSSED, None).p2p == "shared"


def test_a_wrong_or_repeated_declaration_is_a_located_error():
    with pytest.raises(SchedcError) as e:
        program(CROSSED, "taged")
    d = e.value.diagnostics[0]
    assert d.code == "unknown-name" and "did you mean 'tagged'" in d.message and d.span.line == 2
    with pytest.raises(SchedcError) as e:
        compile_text(CROSSED % "p2p split\n  p2p tagged")
    assert e.value.diagnostics[0].code == "duplicate-decl" and e.value.diagnostics[0].span.line == 3


def test_an_ir_file_with_an_unknown_mode_is_refused():
    from schedc.interop.ir_json import dumps_ir
    text = dumps_ir(program(CROSSED, "split")).replace('"p2p": "split"', '"p2p": "carrier pigeon"')
    with pytest.raises(SchedcError, match="'p2p' must be one of shared, tagged, split"):
        schedc.api.load_text(text, "x.json", "ir-json")


# ---- verdicts ----
def test_separate_communicators_let_nccl_run_the_early_receive():
    """Issue 18's prefetch hangs NCCL because the early RECV_B sits ahead of SEND_F on the pair's
    one stream; with gradients on their own communicator each has its own stream."""
    shared, split = program(PREFETCH, None), program(PREFETCH, "split")
    assert verdict(shared, "nccl") == "deadlock" and verdict(split, "nccl") == "ok"
    # ... but made lazily at first use, rank 0's gradient communicator (its first use, RECV_B) and
    # rank 1's activation one (RECV_F) would wait for each other (tests/test_hang_classes.py):
    # schedc's runtime makes them before the first step
    assert verdict(split, "nccl+lazy") == "comm-init-order"
    assert verdict(shared, "gloo") == verdict(split, "gloo") == "ok"
    # blocking semantics block at the receive's place, whatever the communicators
    assert verdict(split, "rendezvous") == "deadlock"
    # the nccl verdict of the shared program says what split would do
    notes = schedc.check(shared, semantics="nccl").errors[0].notes
    assert any("a `p2p split` line" in n and "it completes under nccl" in n for n in notes), notes


@pytest.mark.parametrize("mode", [None, "split"])
def test_under_nccl_a_group_is_one_batch_not_its_members_one_by_one(mode):
    """The runtime posts a group as one batch_isend_irecv per communicator; the nccl verdict is that
    call's: GROUPED completes, and the same members posted one by one, sends first, cross on the
    pair's stream (shared; split gives each kind its own stream, so nothing crosses there)."""
    grouped, one_by_one = program(GROUPED, mode), program(SENDS_FIRST, mode)
    assert verdict(grouped, "nccl") == "ok" and posted_run(grouped, "nccl")
    expected = "deadlock" if mode is None else "ok"
    assert verdict(one_by_one, "nccl") == expected and posted_run(one_by_one, "nccl") == (expected == "ok")
    assert verdict(grouped, "gloo") == verdict(one_by_one, "gloo") == "ok"


def test_under_nccl_groups_and_single_operations_have_streams_of_their_own():
    """ProcessGroupNCCL runs a batch on the process group's communicator and a single isend/irecv on
    the rank pair's: each has its stream, so issue 18's early receive no longer holds up a send
    posted in a group; posted singly, the send queues behind it."""
    late_send = PREFETCH.replace("0SEND_F0", "(0SEND_F0)GROUP").replace("1RECV_F0", "(1RECV_F0)GROUP")
    assert verdict(program(PREFETCH, None), "nccl") == "deadlock"
    p = program(late_send, None)
    assert verdict(p, "nccl") == "ok" and posted_run(p, "nccl")


def test_under_nccl_a_grouped_operation_never_meets_a_single_one():
    """A send posted singly and received in a group travel on different NCCL communicators: under
    nccl they never meet (gloo pairs them: one process group); the report says why."""
    mixed = GROUPED.replace("0F0 0SEND_F0", "0F0 (0SEND_F0)GROUP")
    p = program(mixed, None)
    assert verdict(p, "gloo") == "ok" and posted_run(p, "gloo")
    # under nccl each communicator pairs its own in order: rank 0's grouped SEND_F(0,0) meets rank 1's
    # grouped RECV_F(1,1), its grouped SEND_F(0,1) and rank 1's single RECV_F(1,0) meet nothing
    assert verdict(p, "nccl") == "deadlock+mismatch+unmatched" and not posted_run(p, "nccl")
    loose = [e for e in schedc.check(p, semantics="nccl").errors if e.code == "unmatched"]
    assert len(loose) == 2 and all("group both ends or neither" in e.notes[0] for e in loose), loose
    from schedc.rules.semantics import Semantics
    from schedc.verify.graph import constraints
    never = constraints(p, Semantics("nccl"), channels(p, Semantics("nccl"))).never
    assert any("one grouped and one single" in why for why, _ in never.values()), never
    # rendezvous clears it, and its report says what NCCL makes of the one-sided group
    clear = schedc.check(p)
    assert clear.ok and any("never meet (--semantics nccl)" in n for n in clear.notes), clear.notes
    assert not any("never meet" in n for n in schedc.check(program(GROUPED, None)).notes)


def test_run_on_nccl_refuses_what_only_rendezvous_clears(tmp_path, run_cli, monkeypatch):
    """rendezvous vouches for a run on NCCL only where each message is grouped on both ends or on
    neither: `schedc run --backend nccl` checks under nccl too, before any rank starts."""
    import schedc.runtime.backends
    import schedc.runtime.launch

    def refuse(*args, **kwargs):
        raise AssertionError("a rank was started")
    monkeypatch.setattr(schedc.runtime.launch, "launch", refuse)
    monkeypatch.setattr(schedc.runtime.backends, "problem", lambda backend, nproc: None)  # as if GPUs were here
    path = tmp_path / "mixed.pp"
    path.write_text(GROUPED.replace("0F0 0SEND_F0", "0F0 (0SEND_F0)GROUP") % "")
    assert schedc.check(schedc.load(path)).ok is True  # under rendezvous
    code, out, err = run_cli("run", str(path), "--model", "examples.mlp:build_stages", "--backend", "nccl",
                             "--semantics", "rendezvous", "--steps", "1")
    assert code == 1, (out, err)
    assert "on --backend nccl: the program under nccl too: FAILED" in out
    assert "error[deadlock]" in err and "checks under rendezvous but not under nccl" in err, err


def test_the_interpreter_posts_one_batch_per_group_and_communicator(monkeypatch):
    """No launch: torch.distributed faked. Rank 0 of GROUPED posts its group as one batch_isend_irecv
    (two under `p2p split`: torch takes one process group per call), its singles with send/recv; a
    member's wait is its batch's one work (NCCL's) or its own (gloo's, one per op)."""
    import torch
    import torch.distributed as dist

    from examples import mlp
    from schedc.lower import lower_to_torch
    from schedc.runtime.interpreter import PipelineInterpreter

    class Work:
        def __init__(self, log, name):
            self.log, self.name = log, name

        def wait(self):
            self.log.append(("wait", self.name))
            return True

    class PG:
        def __init__(self, name, log):
            self.name, self.log = name, log

        def send(self, tensors, peer, tag):
            self.log.append(("send", self.name))
            return Work(self.log, "send")

        def recv(self, tensors, peer, tag):
            self.log.append(("recv", self.name))
            return Work(self.log, "recv")

    for mode, works_per_call in ((None, "one"), ("split", "one"), (None, "each")):
        log: list = []
        calls: list = []

        def batch(ops):
            calls.append([(op.op.__name__, op.group.name, op.group_peer) for op in ops])
            return [Work(log, "batch")] if works_per_call == "one" else [Work(log, op.op.__name__) for op in ops]
        monkeypatch.setattr(dist, "P2POp", lambda op, tensor, group, tag, group_peer: SimpleOp(op, tensor, group, group_peer))
        monkeypatch.setattr(dist, "batch_isend_irecv", batch)
        monkeypatch.setattr(dist, "get_group_rank", lambda group, r: r)
        table = lower_to_torch(program(GROUPED, mode)).table
        act, grad = PG("act", log), PG("grad", log)
        torch.manual_seed(0)
        interp = PipelineInterpreter(table, 0, {0: mlp.build_stages([0], 2, width=4)[0]}, mlp.loss_fn,
                                     group=act, grad_group=grad if mode == "split" else None)
        interp._shapes = {("grad", 1): (torch.Size([2, 4]), torch.float32)}  # as learned before the first step
        x, _ = mlp.make_batch(0, 4, width=4)
        interp.step(list(x.split(2)), None)
        both = "grad" if mode == "split" else "act"
        expected = [[("isend", "act", 1), ("irecv", "act", 1)]] if mode is None else \
            [[("isend", "act", 1)], [("irecv", "grad", 1)]]
        assert calls == expected, (mode, calls)
        assert [e for e in log if e[0] != "wait"] == [("send", "act"), ("recv", both)], log
        waits = [e[1] for e in log if e[0] == "wait"]
        # B0 waits for the batch that brings its gradient; the sends wait as the step ends
        assert waits.count("batch") == (len(expected) if works_per_call == "one" else 0), waits


class SimpleOp:
    def __init__(self, op, tensor, group, group_peer):
        self.op, self.tensor, self.group, self.group_peer = op, tensor, group, group_peer


def test_tags_pair_by_payload_under_gloo_and_nccl_ignores_them():
    shared, tagged = program(CROSSED, None), program(CROSSED, "tagged")
    for semantics in ("rendezvous", "eager", "gloo", "nccl"):
        assert verdict(shared, semantics) == "mismatch", semantics
    assert verdict(tagged, "gloo") == verdict(tagged, "eager") == "ok"
    # rendezvous: rank 0 blocks sending F1's output, which rank 1 receives only after F0's
    assert verdict(tagged, "rendezvous") == "deadlock"
    nccl = schedc.check(tagged, semantics="nccl")
    assert [d.code for d in nccl.errors] == ["mismatch", "mismatch"]
    assert nccl.to_dict()["p2p"] == "tagged" and "NCCL ignores tags" in nccl.to_dict()["notes"][0]
    assert "p2p tagged" in nccl.summary() and "note: NCCL ignores tags" in nccl.summary()


def test_split_communicators_keep_activations_and_gradients_apart():
    shared, split = program(KINDS, None), program(KINDS, "split")
    for semantics in ("gloo", "nccl", "eager"):
        assert "mismatch" in verdict(shared, semantics), semantics
    assert verdict(split, "gloo") == "ok"
    # the early gradient receive blocks where it stands (eager), or heads its stream (nccl)
    assert verdict(split, "eager") == verdict(split, "nccl") == "deadlock"


def test_bounded_buffers_with_tags_are_refused_and_split_ones_count_per_communicator():
    with pytest.raises(SchedcError, match="bounded:K buffers are modelled for messages that pair in order"):
        schedc.check(program(CROSSED, "tagged"), semantics="bounded:2")
    assert verdict(program(KINDS, "split"), "bounded:1") in ("ok", "deadlock")


def test_a_crossed_pair_names_its_communicator():
    text = """schedule back {
      p2p split
      rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0RECV_B1 0B0 0B1
      rank 1: 1RECV_F0 1RECV_F1 1F0 1F1 1B1 1SEND_B1 1B0 1SEND_B0
    }"""
    r = schedc.check(compile_text(text), semantics="gloo")
    messages = [d.message for d in r.errors if d.code == "mismatch"]
    assert messages and all("messages pair in order on 1->0 (gradient communicator)" in m for m in messages), messages


def test_the_deadlock_note_on_other_backends_reads_the_declaration():
    """A tagged program's rendezvous deadlock: gloo honours the tags (it completes), NCCL does not."""
    r = schedc.check(program(CROSSED, "tagged"))
    (note,) = r.errors[0].notes
    assert "under gloo it completes" in note and "under nccl its messages pair otherwise and cross" in note


@st.composite
def crossed_or_posted(draw, p):
    """A lowered program with receives moved earlier and sends later (tests/test_backends.py's
    `posted_early_or_late`: a receive moved ahead of another may cross payloads), under a drawn p2p mode."""
    moved, _ = draw(posted_early_or_late(p))
    return replace(moved, p2p=draw(st.sampled_from(["shared", "tagged", "split"])))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lowered_programs(min_ranks=2, max_ranks=3, max_microbatches=4, max_chunks=2).flatmap(crossed_or_posted))
def test_backend_verdicts_agree_with_the_oracle_under_every_mode(p):
    for semantics in ("nccl", "gloo"):
        report = schedc.check(p, semantics=semantics)
        if any(d.code != "deadlock" for d in report.errors):
            event(f"{p.p2p} {semantics}: not a question of deadlock")
            continue
        event(f"{p.p2p} {semantics}: {'ok' if report.ok else 'deadlock'}")
        assert (report.deadlock is None) == posted_run(p, semantics), (p.p2p, semantics, [list(map(str, r)) for r in p.ranks])


@settings(max_examples=80, deadline=None)
@given(lowered_programs(min_ranks=2, max_ranks=3, max_microbatches=4, max_chunks=2).flatmap(crossed_or_posted))
def test_where_messages_pair_in_order_every_mode_pairs_them_alike(p):
    """A tag or a communicator only matters where in-order pairing crosses payloads: otherwise every
    mode makes the same pairs (so the same verdict under rendezvous and eager)."""
    from schedc.rules.deps import payload

    def pairs(mode):
        return sorted((s.rank, s.step, s.part, r.rank, r.step, r.part)
                      for s, r in channels(replace(p, p2p=mode), RENDEZVOUS).pairs())
    shared = channels(replace(p, p2p="shared"), RENDEZVOUS)
    tagged = channels(replace(p, p2p="tagged"), RENDEZVOUS)
    assert all(payload(s.action) == payload(r.action) for s, r in tagged.pairs())
    if all(payload(s.action) == payload(r.action) for s, r in shared.pairs()):
        assert pairs("shared") == pairs("tagged") == pairs("split")
        for semantics in ("rendezvous", "eager"):
            assert {m: schedc.check(replace(p, p2p=m), semantics=semantics).ok for m in ("shared", "tagged", "split")} \
                == dict.fromkeys(("shared", "tagged", "split"), schedc.check(replace(p, p2p="shared"), semantics=semantics).ok)


# ---- simulation, export and compile ----
def test_the_simulator_pairs_as_the_declaration_says():
    from schedc.simulate import simulate
    tagged = program(CROSSED, "tagged")
    t = simulate(tagged, semantics="gloo")
    assert t.mismatches == 0 and len(t.messages) == 4
    assert simulate(program(KINDS, "split"), semantics="gloo").mismatches == 0
    with pytest.raises(SchedcError, match="deadlock"):
        simulate(tagged)  # rendezvous: the tagged crossing blocks rank 0's first send


def test_torch_cannot_run_a_declaration_it_has_no_name_for(tmp_path, run_cli):
    path = tmp_path / "kinds.pp"
    path.write_text(KINDS % "p2p split")
    code, out, err = run_cli("export", str(path), "--to", "torch-csv", "-o", str(tmp_path / "k.csv"))
    assert code == 2 and "declares `p2p split`" in err and not (tmp_path / "k.csv").exists()
    code, out, err = run_cli("compile", str(path), "--semantics", "gloo", "-o", str(tmp_path / "out"))
    assert code == 0, err
    written = sorted(f.name for f in (tmp_path / "out").iterdir())
    assert written == ["kinds.json", "kinds.svg", "kinds_program.py"], written
    assert "no PyTorch CSV" in err
    with pytest.raises(SchedcError, match="declares `p2p split`"):
        schedc.to_torch_csv(program(KINDS, "split"))


# ---- the runtime on gloo ----
# per wait: short where the checker says the run deadlocks (a deadlock costs about this much), long
# where it completes, so that a busy machine's slow wait is never taken for a hang
WATCHDOG_S = {"deadlock": 2.0, "completes": 120.0}
# explicit waits (tests/test_backends.py): `late` completes under gloo; `early` waits for its
# gradient before it has sent the activation that gradient needs
LATE = """schedule late {
  rank 0: 0RECV_B0 0F0 0SEND_F0 0WAIT_SEND_F0 0WAIT_RECV_B0 0B0
  rank 1: 1RECV_F0 1WAIT_RECV_F0 1F0 1B0 1SEND_B0 1WAIT_SEND_B0
}"""
EARLY = """schedule early {
  rank 0: 0RECV_B0 0WAIT_RECV_B0 0F0 0SEND_F0 0B0
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0
}"""


def _run_case(case: dict, rank: int, group, grad) -> dict:
    """Train one step of a program on this rank in a thread under a watchdog: finished (with the
    largest gradient error against the unsplit model), failed, or stopped by the watchdog (its report)."""
    import threading

    from examples import mlp
    from schedc.runtime.entry import split
    from schedc.runtime.interpreter import PipelineInterpreter
    from schedc.runtime.table import load_table
    from schedc.runtime.watchdog import Watchdog
    from schedc.testing import as_double, reference_gradients

    def build(ids, S):
        return mlp.build_stages(ids, S, width=16, depth=max(4, 2 * S))
    table = load_table(case["meta"], case["ranks"])
    S, M = table.num_stages, table.num_microbatches
    mine = table.stages_of(rank)
    modules = {s: m.double() for s, m in zip(mine, build(list(mine), S))}
    limit = WATCHDOG_S["deadlock" if case["verdict"] == "deadlock" else "completes"]
    dog = Watchdog(limit, stream=io.StringIO(), exit=lambda code: None, rank=rank)
    interp = PipelineInterpreter(table, rank, modules, mlp.loss_fn, group=group, grad_group=grad, watchdog=dog)
    x, y = (as_double(t) for t in mlp.make_batch(0, 2 * M, width=16))
    out: dict = {}

    def train():
        try:
            losses = interp.step(split(x, M) if 0 in mine else None, split(y, M) if S - 1 in mine else None)
        except Exception as exc:  # noqa: BLE001 - crossed tensors of another shape: reported to the parent
            out.update(end="failed", error=f"{type(exc).__name__}: {exc}")
            return
        ref_loss, ref = reference_gradients(build, mlp.loss_fn, S, x, y)
        if table.forward_only:  # inference: the loss of the whole batch, and no gradient anywhere
            loss = sum(t.item() for t in losses) / M if losses else ref_loss
            grads = [p.grad for s in mine for p in modules[s].parameters() if p.grad is not None]
            out.update(end="finished", grad_err=abs(loss - ref_loss) + (1.0 if grads else 0.0))
            return
        out.update(end="finished", grad_err=max((p.grad - g).abs().max().item() for s in mine
                                                for p, (_, g) in zip(modules[s].parameters(), ref[s])))

    thread = threading.Thread(target=train, daemon=True)  # a stuck one never returns: left behind
    thread.start()
    deadline = time.monotonic() + 10 * limit + 20
    while thread.is_alive() and dog.fired is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if dog.fired is not None:
        return {"end": "watchdog", "report": dog.fired}
    dog.close()
    return out if out else {"end": "hung"}


def _worker(cases_path: str, out_dir: str) -> int:
    import torch.distributed as dist
    rank, world, cases = launched.join(cases_path)
    results = {}
    for case in cases:  # fresh groups for each: a stuck one is left
        group = dist.new_group(list(range(world)), timeout=launched.TIMEOUT)
        grad = dist.new_group(list(range(world)), timeout=launched.TIMEOUT)
        results[case["id"]] = _run_case(case, rank, group, grad)
        dist.barrier()
    launched.finish(out_dir, rank, results)


@pytest.mark.slow
def test_the_runtime_on_gloo_does_what_the_checker_says(tmp_path):
    """Each program's gloo verdict against a real run: `ok` trains to the unsplit model's gradients,
    `mismatch` completes with wrong ones, `deadlock` is stopped by the watchdog where the checker
    says the rank is stuck. Tags, split communicators, explicit waits and groups (one
    batch_isend_irecv per communicator) run as written, and a forward-only schedule runs its
    forwards alone (the unsplit model's loss, no gradient)."""
    from schedc.lower import lower_to_torch
    cases = []
    for name, text, mode in (("crossed, tagged", CROSSED, "tagged"), ("crossed, shared", CROSSED, None),
                             ("kinds, split", KINDS, "split"), ("prefetch, split", PREFETCH, "split"),
                             ("late waits", LATE, None), ("early wait", EARLY, None),
                             ("grouped, shared", GROUPED, None), ("grouped, split", GROUPED, "split"),
                             ("inference (DeepSpeed)", "ds_inference", None)):
        if text == "ds_inference":
            p = schedc.load(str(ROOT / "tests" / "data" / "forward" / "ds_inference.pp"), {"P": 2, "M": 3})
        else:
            p = compile_text(text if "%s" not in text else text % (f"p2p {mode}" if mode else ""))
        report = schedc.check(p, semantics="gloo")
        meta, ranks = lower_to_torch(p).table.to_data()
        stuck = launched.watchdog_places(report.deadlock)
        cases.append({"id": name, "verdict": verdict(p, "gloo"), "meta": meta, "ranks": ranks, "stuck": stuck})
    assert [c["verdict"] for c in cases] == ["ok", "mismatch", "ok", "ok", "ok", "deadlock", "ok", "ok", "ok"]
    results = launched.run_cases(__file__, cases, tmp_path, 2)
    for case in cases:
        ends = [results[r][case["id"]] for r in range(2)]
        if case["verdict"] == "ok":
            assert all(e["end"] == "finished" and e["grad_err"] <= 1e-10 for e in ends), (case["id"], ends)
        elif case["verdict"] == "mismatch":  # crossed tensors: wrong gradients (or a shape error) somewhere
            assert all(e["end"] in ("finished", "failed") for e in ends), (case["id"], ends)
            assert any(e["end"] == "failed" or e["grad_err"] > 1e-6 for e in ends), (case["id"], ends)
        else:  # every rank the checker calls stuck is stopped there
            for r, e in enumerate(ends):
                place = case["stuck"].get(str(r))
                if place is not None:
                    assert e["end"] == "watchdog" and place in e["report"], (case["id"], r, e)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3]))
    sys.exit("usage: test_p2p.py --worker CASES.json OUTDIR")
