"""The importers against the installed frameworks: `deepspeed:NAME` and `megatron:NAME` check clean,
keep the framework's own compute order and step count, and the docs' DeepSpeed listing is the
importer's. Skipped, with the reason, where a framework is not installed (`pip install -e '.[importers]'`)."""
from __future__ import annotations

import importlib.util
import re
from importlib import metadata
from pathlib import Path

import pytest

from schedc import importers
from schedc.api import check, load
from schedc.errors import SchedcError
from schedc.ir import COMM, Compound, Op

ROOT = Path(__file__).resolve().parent.parent
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                     reason="deepspeed is not installed: pip install -e '.[importers]'")
needs_megatron = pytest.mark.skipif(importlib.util.find_spec("megatron") is None,
                                    reason="megatron-core is not installed: pip install -e '.[importers]'")
GRID = [(P, M) for P in (2, 3, 4) for M in range(P, 2 * P + 1)]


def compute(program) -> list[list[str]]:
    return [[str(a) for step in steps for a in step.parts if a.op in (Op.F, Op.B)] for steps in program.ranks]


@needs_deepspeed
@pytest.mark.parametrize("P,M", GRID)
def test_deepspeed_train_checks_and_keeps_deepspeeds_order(P, M):
    from deepspeed.runtime.pipe import schedule as ds
    program = load("deepspeed:train", {"P": P, "M": M})
    assert check(program).ok is True
    for s in range(P):  # DeepSpeed's own step -> (microbatch, forward?) map, step by step
        sched = ds.TrainSchedule(micro_batches=M, stages=P, stage_id=s)
        want = [f"{s}{'F' if fwd else 'B'}{mb}" for mb, fwd in map(sched._step_to_micro_batch, range(2 * (M + P - 1)))
                if 0 <= mb < M]
        assert compute(program)[s] == want
        steps = importers.deepspeed.stage_steps(ds.TrainSchedule(micro_batches=M, stages=P, stage_id=s), s, P)
        assert len(steps) == len(list(sched.steps())) == 2 * (M + P - 1)  # one per DeepSpeed step


@needs_deepspeed
@pytest.mark.parametrize("P,M", GRID)
def test_deepspeed_inference_checks_and_keeps_deepspeeds_order(P, M):
    program = load("deepspeed:inference", {"P": P, "M": M})
    assert program.forward_only and check(program).ok is True
    assert compute(program) == [[f"{s}F{m}" for m in range(M)] for s in range(P)]


@needs_deepspeed
@pytest.mark.parametrize("P,M", [(P, M) for P in (2, 3, 4) for M in (2 * P, 2 * P + 1)])
@pytest.mark.parametrize("forward_only", [False, True])
def test_deepspeed_dualpipev_checks_and_keeps_deepspeeds_order(P, M, forward_only):
    """DualPipeVSchedule's buffer is phase * M + microbatch: the compute order it says, on the V."""
    from deepspeed.runtime.pipe import schedule as ds
    program = load("deepspeed:dualpipev", {"P": P, "M": M}, forward_only=forward_only)
    assert check(program, semantics="nccl").ok is True
    for r in range(P):
        sched = ds.DualPipeVSchedule(micro_batches=M, stages=P, stage_id=r, forward_only=forward_only)
        want = [f"{2 * P - 1 - r if c.phase else r}{'F' if type(c).__name__ == 'ForwardPass' else 'B'}"
                f"{c.buffer_id - c.phase * M}" for step in sched.steps() for c in step
                if type(c).__name__ in ("ForwardPass", "BackwardPass")]
        assert compute(program)[r] == want


@needs_deepspeed
def test_the_docs_deepspeed_listing_is_the_importers():
    text = (ROOT / "docs" / "interop.md").read_text()
    block = re.search(r"<!-- file: deepspeed_train.pp -->\n```pp\n(.*?)```", text, re.S)
    assert block is not None
    assert block.group(1) == importers.listing("deepspeed:train", {"P": 4, "M": 4})


@needs_megatron
@pytest.mark.parametrize("P,M", GRID)
@pytest.mark.parametrize("batched", [0, 1])
def test_megatron_1f1b_checks_and_is_1f1b(P, M, batched):
    program = load("megatron:1f1b", {"P": P, "M": M, "BATCHED": batched})
    assert check(program, semantics="nccl").ok is True
    assert compute(program) == compute(load("1f1b", {"P": P, "M": M}))


@needs_megatron
@pytest.mark.parametrize("P,M", [(P, M) for P in (3, 4) for M in (P, 2 * P)])
@pytest.mark.parametrize("batched,overlap", [(0, 0), (1, 0), (0, 1)])
def test_megatron_interleaved_checks_and_is_interleaved_1f1b(P, M, batched, overlap):
    program = load("megatron:interleaved", {"P": P, "M": M, "V": 2, "BATCHED": batched, "OVERLAP": overlap})
    assert check(program, semantics="nccl").ok is True
    assert compute(program) == compute(load("interleaved_1f1b", {"P": P, "M": M, "V": 2}))


@needs_megatron
def test_megatron_interleaved_on_two_ranks_is_the_known_swap():
    """docs/interop.md's hand derivation of P=2, V=2, M=4 (batched) is what the trace gives."""
    traced = load("megatron:interleaved", {"P": 2, "M": 4, "V": 2, "BATCHED": 1})
    report = check(traced, semantics="nccl")
    assert not report.ok and {e.code for e in report.errors} == {"mismatch"}
    derived = load(str(ROOT / "tests" / "known" / "megatron_interleaved_p2.pp"))
    unwaited = [[s for s in steps if isinstance(s, Compound) or s.op in (Op.F, Op.B, *COMM)] for steps in traced.ranks]
    assert [[str(s) for s in r] for r in unwaited] == [[str(s) for s in r] for r in derived.ranks]


@needs_megatron
@pytest.mark.parametrize("name,V", [("megatron:1f1b", 1), ("megatron:interleaved", 2)])
def test_megatron_finalises_gradients_after_the_last_backward(name, V):
    """finalize_model_grads_func: each chunk's REDUCE_GRAD, and REDUCE_TIED on the ends, last on each rank."""
    program = load(name, {"P": 3, "M": 6, "V": V} if V > 1 else {"P": 3, "M": 6})
    for rank, steps in enumerate(program.ranks):
        tail = [str(s) for s in steps[-(V + (rank in (0, 2))):]]
        held = [c * 3 + rank for c in range(V)]
        assert tail == [f"{s}REDUCE_GRAD" for s in held] + [f"{s}REDUCE_TIED" for s in held if s in (0, 3 * V - 1)]


@needs_megatron
def test_megatron_forward_only():
    program = load("megatron:1f1b", {"P": 3, "M": 4}, forward_only=True)
    assert program.forward_only and check(program).ok is True


def test_a_missing_or_unsupported_framework_is_an_importer_error(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    with pytest.raises(SchedcError, match=r"pip install 'schedc\[importers\]'") as exc:
        load("deepspeed:train", {"P": 2, "M": 2})
    assert exc.value.code == "importer"
    monkeypatch.setattr(metadata, "version", lambda name: "0.20.0")
    with pytest.raises(SchedcError, match="tested with 0.16.x only") as exc:
        load("megatron:1f1b", {"P": 2, "M": 2})
    assert exc.value.code == "importer"


def test_unknown_names_and_params_are_usage_errors():
    with pytest.raises(SchedcError, match="deepspeed:train, deepspeed:inference, deepspeed:dualpipev"):
        load("deepspeed:nope", {"P": 2, "M": 2})
    with pytest.raises(SchedcError) as exc:
        load("megatron:1f1b", {"P": 2, "M": 2, "X": 1})
    assert exc.value.code == "unknown-param"
    with pytest.raises(SchedcError) as exc:
        load("deepspeed:train", {"P": 2})
    assert exc.value.code == "missing-param"
    with pytest.raises(SchedcError) as exc:
        load("megatron:1f1b", {"P": 2, "M": 2, "BATCHED": 2})
    assert exc.value.code == "range"
    with pytest.raises(SchedcError, match="deepspeed:inference"):
        load("deepspeed:train", {"P": 2, "M": 2}, forward_only=True)


@pytest.mark.parametrize("name,params", [("megatron:1f1b", {"P": 2, "M": 1_000_000}),
                                         ("deepspeed:train", {"P": 2, "M": 25_001}),
                                         ("megatron:interleaved", {"P": 100, "M": 100, "V": 6}),
                                         # docs/limits.md's figures, which traced for 10 s and then failed
                                         # at 1:1 of a 4.6 M-character listing the user never saw
                                         ("megatron:1f1b", {"P": 4, "M": 10_000}),
                                         ("deepspeed:train", {"P": 64, "M": 780})])
def test_a_schedule_whose_listing_would_be_past_the_source_limit_is_refused_before_tracing(name, params, monkeypatch):
    """The fuzzer's (bench/README.md, "Fuzzing"): tracing Megatron-Core at P=2, M=1,000,000 ran for
    minutes and 6.9 GB before the listing's size was refused. P x M x V is counted first; the
    framework's code is never reached (nor imported)."""
    from schedc.importers import deepspeed, megatron

    def no_import(*args, **kwargs):
        raise AssertionError("the framework was asked for")
    for module in (deepspeed, megatron):
        monkeypatch.setattr(module, "require", no_import)
    with pytest.raises(SchedcError, match=r"P x M x V is [\d,]+, at most [\d,]+ \(its listing takes up to \d+ "
                       "characters a rank, microbatch and chunk") as exc:
        load(name, params)
    assert exc.value.code == "too-large" and exc.value.diagnostics[0].where == "--param"


@needs_deepspeed
@needs_megatron
def test_each_schedule_at_its_limit_is_under_the_source_limit():
    """The documented limits hold: at P x M x V just under each, at many ranks (more digits), the
    listing is within the source limit (it was not: P=4, M=10,000 was accepted and then refused)."""
    from schedc import importers
    from schedc.parse import MAX_SOURCE_BYTES
    sizes = {"megatron:1f1b": {"P": 64, "BATCHED": 1}, "megatron:interleaved": {"P": 32, "V": 2, "OVERLAP": 1},
             "deepspeed:train": {"P": 64}, "deepspeed:inference": {"P": 64}, "deepspeed:dualpipev": {"P": 32}}
    for name, params in sizes.items():
        P, V = params["P"], params.get("V", 1)
        M = importers.max_work(name) // (P * V) // P * P  # (Megatron's interleaved wants M a multiple of P)
        text = importers.listing(name, {**params, "M": M})
        assert 0.5 * MAX_SOURCE_BYTES < len(text) <= MAX_SOURCE_BYTES, (name, M, len(text))


@needs_deepspeed
def test_a_listing_over_the_source_limit_is_refused_at_param_naming_p_m_v(monkeypatch):
    """Were a listing still longer than its counted characters say, the parser's error pointed at
    1:1 of it: it is refused at --param, naming P x M x V."""
    from schedc import importers
    monkeypatch.setitem(importers.CHARACTERS, "deepspeed:inference", 1)
    with pytest.raises(SchedcError, match=r"deepspeed:inference at P=64, M=1000: its listing is [\d,]+ characters, "
                       r"over the 1,000,000-character source limit \(P x M x V is 64,000") as exc:
        load("deepspeed:inference", {"P": 64, "M": 1000})
    assert exc.value.code == "too-large" and exc.value.diagnostics[0].where == "--param"
    assert exc.value.diagnostics[0].span is None


@needs_megatron
def test_megatron_settings_it_refuses_are_importer_errors():
    with pytest.raises(SchedcError, match="V >= 2"):
        load("megatron:interleaved", {"P": 2, "M": 2, "V": 1})
    with pytest.raises(SchedcError, match="Megatron-Core refuses P=4, V=2, M=6") as exc:
        load("megatron:interleaved", {"P": 4, "M": 6, "V": 2})
    assert exc.value.code == "importer"
    with pytest.raises(SchedcError, match="refuses BATCHED=1 with OVERLAP=1") as exc:  # (was `usage`)
        load("megatron:interleaved", {"P": 2, "M": 4, "V": 2, "BATCHED": 1, "OVERLAP": 1})
    assert exc.value.code == "importer"
    # the fuzzer's (bench/README.md, "Fuzzing"): an IndexError inside Megatron's interleaved schedule
    # on one rank, exit 4; Megatron-Core's own initialize_model_parallel refuses it
    with pytest.raises(SchedcError, match="P >= 2 ranks") as exc:
        load("megatron:interleaved", {"P": 1, "M": 7, "V": 3})
    assert exc.value.code == "range"


@needs_megatron
def test_a_failure_inside_megatrons_code_is_an_importer_error_that_says_where(monkeypatch):
    """Any exception raised in Megatron-Core's own code (not only its argument checks) is an
    `importer` error naming the file and line; one raised by schedc's fakes stays a bug of schedc's."""
    import megatron.core.pipeline_parallel.schedules as schedules
    code = compile("def run(**kw):\n    return [][0]\n", "/x/megatron/core/pipeline_parallel/fake.py", "exec")
    scope: dict = {}
    exec(code, scope)
    monkeypatch.setattr(schedules, "forward_backward_pipelining_without_interleaving", scope["run"])
    with pytest.raises(SchedcError, match=r"fails at P=2, V=1, M=2: IndexError: .* \(in core/pipeline_parallel/fake.py:2\)"):
        load("megatron:1f1b", {"P": 2, "M": 2})

    def ours(**kw):
        raise KeyError("schedc's")
    monkeypatch.setattr(schedules, "forward_backward_pipelining_without_interleaving", ours)
    with pytest.raises(KeyError):
        load("megatron:1f1b", {"P": 2, "M": 2})


@needs_deepspeed
def test_compare_gives_each_schedule_the_parameters_it_takes():
    """`compare` hands every schedule all the --param values; an imported one takes its own."""
    assert load("deepspeed:train", {"P": 2, "M": 4, "V": 2}, strict_params=False).params == (("P", 2), ("M", 4))


def test_prove_says_it_needs_a_schedules_text():
    from schedc.api import resolve
    with pytest.raises(SchedcError, match="read from its framework") as exc:
        resolve("megatron:1f1b")
    assert exc.value.code == "usage"
