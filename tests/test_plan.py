"""`schedc plan`: layouts and schedules for a model on N GPUs, ranked by step time among those that
fit (schedc/plan.py). Its answers are held to an exhaustive search of the same space."""
from __future__ import annotations

import json
import re

import pytest

from schedc.hardware import describe
from schedc.plan import plan

SCHEDULES = ["1f1b", "zbv", "interleaved_1f1b"]


@pytest.fixture(scope="module")
def setup():
    return describe(model="llama3-8b", hardware="h100-80gb")


def test_every_answer_is_a_layout_of_the_gpus_that_fits(setup):
    result = plan(setup, 16, 64, SCHEDULES, top=5)
    assert len(result.choices) == 5
    steps = [c.step for c in result.choices]
    assert steps == sorted(steps)
    for c in result.choices:
        lay = c.layout
        assert lay.pp * lay.tp * lay.cp * lay.dp == 16 and c.microbatches * lay.dp == 64
        assert max(c.row.total_memory) <= setup.memory and c.step == c.row.makespan
        assert (c.reduction > 0) == (lay.dp > 1)  # the data-parallel collectives, in the simulated step
    assert result.configurations == (result.refused + result.over_memory + result.bounded + result.simulated
                                     + result.shared) and result.simulated >= result.checked >= 5


ALL = ["1f1b", "zb_h1", "interleaved_1f1b", "zbv", "dualpipev"]


def _answers(result):
    return [(c.layout, c.row.name, c.microbatches, c.step, c.row.peak_memory, c.row.model_states, c.reduction)
            for c in result.choices]


@pytest.mark.parametrize("model, hardware, gpus, batch, schedules, top", [
    ("llama3-8b", "h100-80gb", 16, 32, SCHEDULES, 3),  # uneven splits at 4, 8 and 16 stages
    ("llama3-8b", "h100-80gb", 8, 64, ALL, 7),
    ("mixtral-8x7b", "h100-80gb", 16, 16, ALL, 5),  # MoE: expert parallelism, all-to-all DualPipeV's pairs hide
    ("olmoe-1b-7b", "a100-40gb", 8, 32, ALL, 1),
    ("gpt3-1.3b", "a100-40gb", 8, 32, ALL, 6),
    ("llama3-70b", "a100-40gb", 16, 16, ALL, 5),  # fits nowhere
    # DualPipe: two routes (pipelines of P stages, opposite ways); bounded as one of 2P stages, its
    # answers came out of order (4.8595 s before 4.8288 s; at 8 GPUs 9.640 s for 9.635 s)
    ("llama3-8b", "h100-80gb", 16, 64, ["dualpipe"], 3),
    ("llama3-8b", "h100-80gb", 8, 64, ["dualpipe", "1f1b"], 2),
    ("llama3-8b", "h100-80gb", 8, 32, ALL + ["dualpipe"], 6),
])
def test_the_bounds_lose_no_answer(model, hardware, gpus, batch, schedules, top):
    """Pruned by its bounds (time and memory, before and after a schedule is expanded), the search
    returns exactly the answers, in order, of one that simulates and checks every configuration."""
    setup = describe(model=model, hardware=hardware)
    pruned = plan(setup, gpus, batch, schedules, top=top)
    everything = plan(setup, gpus, batch, schedules, top=top, prune=False)
    assert everything.bounded == everything.over_memory == 0
    assert everything.simulated + everything.shared + everything.refused == everything.configurations
    assert _answers(pruned) == _answers(everything)
    assert pruned.simulated < everything.simulated / 4 and pruned.configurations == everything.configurations


def test_a_schedule_of_ones_own_is_bounded_by_its_program(run_cli, tmp_path):
    """A file is no built-in's family: it is bounded once expanded (its program's shape), and the
    answers are still those of trying everything (a copy of a built-in, under another name)."""
    from schedc.resources import builtin_schedules
    setup = describe(model="llama3-8b", hardware="h100-80gb")
    mine = tmp_path / "mine.pp"
    mine.write_text(builtin_schedules()["dualpipev"].read_text().replace("schedule dualpipev(", "schedule mine("))
    pruned = plan(setup, 16, 64, [str(mine), "1f1b"], top=4)
    everything = plan(setup, 16, 64, [str(mine), "1f1b"], top=4, prune=False)
    assert _answers(pruned) == _answers(everything) and pruned.simulated < everything.simulated / 4
    assert any(c.row.name == str(mine) for c in pruned.choices)


def test_the_search_of_the_issue_simulates_a_handful():
    """llama3-70b on 1,024 GPUs, global batch 1,024 (bench/plan.py; issue #34's 10 s): about a
    thousand configurations, a handful simulated (the bounds take the fill and drain in)."""
    from schedc.commands.plan import DEFAULT_SCHEDULES
    result = plan(describe(model="llama3-70b", hardware="h100-80gb"), 1024, 1024, list(DEFAULT_SCHEDULES), top=5)
    assert result.layouts == 206 and result.configurations > 900
    assert len(result.choices) == 5 and result.simulated <= 12 and result.checked <= 8


def test_a_model_too_big_for_the_gpus_fits_nowhere(run_cli):
    code, out, err = run_cli("plan", "--gpus", "2", "--global-batch", "8", "--model", "llama3-70b",
                             "--hardware", "h100-80gb")
    assert code == 1 and "no layout of 2 GPUs fits llama3-70b" in err and "searched" in out


def test_plan_json_and_usage(run_cli):
    code, out, err = run_cli("plan", "1f1b", "zbv", "--gpus", "8", "--global-batch", "16", "--model", "llama3-8b",
                             "--hardware", "h100-80gb", "--top", "2", "--json")
    lines = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and len(lines) == 3 and "search" in lines[-1]
    assert {"pp", "tp", "cp", "dp", "ep", "schedule", "step", "reduction", "fits"} <= set(lines[0])
    code, _, err = run_cli("plan", "--gpus", "8", "--global-batch", "16")
    assert code == 2 and "needs a model and hardware" in err


# ---- the fuzzer's findings (bench/README.md, "Fuzzing"), each its reproducer ----
def test_the_search_is_bounded_by_counted_work(run_cli, monkeypatch):
    """`plan --gpus 1024 --global-batch 4096 --model llama3-70b` took 142 s on a loaded machine (past
    the fuzzer's 30 s cap): the search's work is counted, and one that would pass the limit stops
    with a `too-large` error naming the schedule, before its work (here with the limit made small)."""
    import schedc.plan as plan_module
    setup = describe(model="llama2-7b", hardware="h100-80gb")
    whole = plan(setup, 8, 64, SCHEDULES, top=3)
    assert 0 < whole.work < plan_module.MAX_PLAN_WORK and whole.work == plan(setup, 8, 64, SCHEDULES, top=3).work
    monkeypatch.setattr(plan_module, "MAX_PLAN_WORK", whole.work - 1)
    code, out, err = run_cli("plan", *SCHEDULES, "--gpus", "8", "--global-batch", "64", "--top", "3",
                             "--model", "llama2-7b", "--hardware", "h100-80gb")
    assert code == 2 and re.search(r"^\S+: error\[too-large\]: the plan's search would pass its work limit of "
                                   r"[\d,]+ units \(docs/limits.md\) (bounding|simulating|checking) \S+ at P=\d+, M=\d+", err, re.M)


def test_a_model_of_many_layers_is_refused_before_its_layouts_are_bounded(run_cli, tmp_path):
    """Bounding each of 213 layouts walks 10,000 layers twice: counted first, refused at once."""
    path = tmp_path / "big.toml"
    path.write_text('[model]\npreset = "llama2-7b"\nlayers = 10000\n[hardware]\npreset = "h100-80gb"\n')
    code, out, err = run_cli("plan", "--gpus", "1024", "--global-batch", "1024", "--setup", str(path))
    assert code == 2 and "--gpus: error[too-large]" in err and "bounding 213 layouts of 10,000 layers" in err


def test_a_schedule_that_fails_its_checks_is_passed_over_and_named(run_cli, tmp_path):
    """A send to no stage made the simulator raise IndexError (exit 4): plan timed before it checked."""
    path = tmp_path / "t.pp"
    path.write_text("schedule t {\n  stages 2\n  microbatches 1\n  rank 0: 1SEND_F0\n  rank 1: 0REDUCE_TIED\n}\n")
    code, out, err = run_cli("plan", str(path), "--gpus", "16", "--global-batch", "8", "--model", "llama2-7b",
                             "--hardware", "a100-80gb", "--json")
    assert code == 1 and json.loads(out.splitlines()[-1])["search"]["simulated"] == 0
    assert f"passed over where they fail their checks (`schedc check NAME --param P=...,M=...` says why): {path}" in err


def test_tracing_a_frameworks_schedule_counts_against_the_search(run_cli, monkeypatch):
    """The fuzzer's (seed 83): `plan megatron:1f1b --gpus 8 --global-batch 4096 --model mixtral-8x7b`
    traced Megatron-Core at every layout's P and M (17.8 s of CPU at P=4, M=2048) uncounted: 43 s.
    The tracing is counted first, and refused before it starts (the framework is never asked)."""
    from schedc.importers import deepspeed, megatron

    def no_import(*args, **kwargs):
        raise AssertionError("the framework was asked for")
    for module in (deepspeed, megatron):
        monkeypatch.setattr(module, "require", no_import)
    code, out, err = run_cli("plan", "megatron:1f1b", "--gpus", "8", "--global-batch", "4096", "--model",
                             "mixtral-8x7b", "--hardware", "a100-80gb")
    assert code == 2 and re.search(r"^megatron:1f1b: error\[too-large\]: .* tracing megatron:1f1b at P=\d+, M=\d+", err,
                                   re.M), err


class _Asked(list):
    """The (P, M) a fake framework was asked for, and those it refuses as it runs (`refused`)."""

    def __init__(self):
        super().__init__()
        self.refused: set[tuple[int, int]] = set()


@pytest.fixture
def small_framework(monkeypatch):
    """deepspeed:train as 1F1B's text at the P and M asked (DeepSpeed is never imported), with a
    listing limit of P x M <= 16; plan's caches of programs emptied before and after."""
    from pathlib import Path

    import schedc
    import schedc.plan as plan_module
    from schedc import importers
    from schedc.importers import deepspeed
    from schedc.parse import MAX_SOURCE_BYTES
    from schedc.importers.common import Refused
    text = (Path(schedc.__file__).resolve().parent.parent / "schedules" / "1f1b.pp").read_text()
    asked = _Asked()

    def train(values, *, forward_only=False):
        asked.append((values["P"], values["M"]))
        if (values["P"], values["M"]) in asked.refused:
            raise Refused(f"DeepSpeed refuses P={values['P']}, M={values['M']}: no", "deepspeed:train")
        return text.replace("schedule 1f1b(P = 4, M = 8)", f"schedule deepspeed_train(P = {values['P']}, "
                                                            f"M = {values['M']})")
    monkeypatch.setitem(deepspeed.SCHEDULES, "train", train)
    monkeypatch.setitem(importers.CHARACTERS, "deepspeed:train", MAX_SOURCE_BYTES // 16)
    caches = (plan_module._program, plan_module._shape, plan_module._sound)
    for cache in caches:
        cache.cache_clear()
    yield asked
    for cache in caches:
        cache.cache_clear()


def test_a_layout_over_a_frameworks_listing_limit_is_passed_over(run_cli, small_framework):
    """From a user trial: a framework's schedule at a layout whose P x M x V is over its listing
    limit stopped the whole search (first as the work limit for tracing it, which it would have
    failed anyway). That layout is passed over, before it is traced, counted and said with why; the
    others are ranked."""
    args = ("deepspeed:train", "--gpus", "2", "--global-batch", "16", "--model", "gpt3-1.3b", "--hardware",
            "h100-80gb")
    code, out, err = run_cli("plan", *args)
    assert code == 0, err
    lines = out.splitlines()
    rows = [line.split() for line in lines[3:] if line.split()[6:7] == ["deepspeed:train"]]
    assert rows and all(int(r[0]) * int(r[7]) <= 16 for r in rows)  # (pp x M)
    said = [line for line in lines if line.startswith("passed over")]
    assert said == ["passed over deepspeed:train at 1 layout (of the refused): P x M x V is over 16 there, and its "
                    "listing would pass the 1,000,000-character source limit (docs/limits.md)"]
    assert all(P * M <= 16 for P, M in small_framework)  # never traced over the limit
    code, out, _ = run_cli("plan", *args, "--json")
    search = json.loads(out.splitlines()[-1])["search"]
    assert code == 0 and search["refused"] >= 1 and search["passed_over"] == [
        {"schedule": "deepspeed:train", "layouts": 1, "why": said[0].split(": ", 1)[1]}]
    setup = describe(model="gpt3-1.3b", hardware="h100-80gb")
    pruned, every = (plan(setup, 2, 16, ["deepspeed:train"], prune=p) for p in (True, False))
    assert pruned.passed_over == every.passed_over and _answers(pruned) == _answers(every)


def test_a_search_with_every_layout_over_the_listing_limit_is_a_clear_error(run_cli, small_framework):
    code, out, err = run_cli("plan", "deepspeed:train", "--gpus", "2", "--global-batch", "64", "--model",
                             "gpt3-1.3b", "--hardware", "h100-80gb")
    assert code == 2 and out == "" and not small_framework, err
    assert err.startswith("deepspeed:train: error[too-large]: no layout of 2 GPUs can be read from the framework, so "
                          "none is ranked (deepspeed:train at ") and "P x M x V is over 16 there" in err
    assert "a smaller --global-batch or a larger --micro-batch" in err


def test_a_layout_the_frameworks_code_refuses_is_passed_over_but_a_missing_framework_stops(
        run_cli, small_framework, monkeypatch):
    """Megatron-Core refuses some P and M only as it runs (interleaved at P=2, M=3: "The remainder
    of M ..."), an `importer` error that stopped the search: such a layout is passed over, traced
    once, with the framework's words; a framework that is missing still stops it."""
    small_framework.refused.add((1, 16))
    args = ("deepspeed:train", "--gpus", "2", "--global-batch", "16", "--model", "gpt3-1.3b", "--hardware",
            "h100-80gb", "--json")
    code, out, err = run_cli("plan", *args)
    search = json.loads(out.splitlines()[-1])["search"]
    assert code == 0 and {"schedule": "deepspeed:train", "layouts": 2, "why": "DeepSpeed refuses P=1, M=16: no"} in \
        search["passed_over"] and all((lay["pp"], lay["microbatches"]) != (1, 16) for lay in map(
            json.loads, out.splitlines()[:-1])), err
    assert small_framework.count((1, 16)) == 1  # (asked once for its two layouts)
    from schedc.importers import deepspeed
    from schedc.errors import SchedcError

    def missing(*a, **k):
        raise SchedcError("importer", "schedc's deepspeed importer needs deepspeed 0.19.x, which is not installed",
                          where="deepspeed")
    monkeypatch.setitem(deepspeed.SCHEDULES, "train", missing)
    import schedc.plan as plan_module
    plan_module._program.cache_clear()
    code, out, err = run_cli("plan", *args)
    assert code == 2 and "error[importer]: schedc's deepspeed importer needs deepspeed" in err, err


def test_a_layout_a_framework_refuses_by_its_own_rule_is_passed_over(run_cli, monkeypatch):
    """megatron:interleaved on one pipeline rank (the layouts of pp 1, where plan runs the first
    schedule alone) stopped the search with `error[range]`; Megatron-Core is not imported for it."""
    from schedc.importers import megatron

    def no_import(*args, **kwargs):
        raise AssertionError("Megatron-Core was imported")
    monkeypatch.setattr(megatron, "_modules", no_import)
    code, out, err = run_cli("plan", "megatron:interleaved", "--gpus", "1", "--global-batch", "8", "--model",
                             "gpt3-1.3b", "--hardware", "h100-80gb")
    assert code == 2 and "megatron:interleaved: error[usage]: no layout of 1 GPU can be read from the framework" in err
    assert "runs on P >= 2 ranks" in err, err
    code, out, err = run_cli("check", "megatron:interleaved", "--param", "P=1,M=4")
    assert code == 2 and "error[range]: megatron:interleaved runs on P >= 2 ranks" in err, err


def test_the_micro_batch_is_taken_as_given_and_named(run_cli):
    """`--micro-batch 0` was taken as 1 (`args.micro_batch or default`), and the header said
    micro-batch 1 whatever was given."""
    args = ("--gpus", "8", "--global-batch", "32", "--model", "llama3-8b", "--hardware", "h100-80gb", "--top", "1")
    code, _, err = run_cli("plan", "1f1b", *args, "--micro-batch", "0")
    assert code == 2 and "--micro-batch: error[usage]: --gpus, --global-batch and --micro-batch must be positive" in err
    code, out, _ = run_cli("plan", "1f1b", *args, "--micro-batch", "2")
    assert code == 0 and "micro-batch 2," in out.splitlines()[0]


@pytest.mark.parametrize("gpus, batch, micro, said", [
    (8, 32, 64, "--global-batch: error[usage]: no layout to search: the global batch 32 is not a multiple of the "
                "micro-batch 64"),
    (1_000_000, 32, 1, "--gpus: error[usage]: no layout to search: llama3-8b can use at most 131,072 GPUs at this "
                       "batch"),
    (37, 32, 1, "--gpus: error[usage]: no layout to search: 37 GPUs split into no tensor"),
])
def test_no_layout_to_search_says_why_not_memory(run_cli, gpus, batch, micro, said):
    """These searched 0 layouts and then blamed the memory ("no layout ... fits ... within 73.67 GiB")."""
    code, out, err = run_cli("plan", "--gpus", str(gpus), "--global-batch", str(batch), "--micro-batch", str(micro),
                             "--model", "llama3-8b", "--hardware", "h100-80gb")
    assert code == 2 and said in err and "GiB" not in err, err


def test_a_schedule_of_fixed_shape_is_passed_over_at_other_layouts(run_cli, tmp_path):
    """A CSV (P=1 was stated to it: `error[csv]`) or a .pp without a P parameter (pipeline degree
    1 against its 2 ranks: `error[costs]`) stopped the search; it runs where the layout is its shape."""
    csv = tmp_path / "mine.csv"
    assert run_cli("export", "1f1b", "--param", "P=2,M=8", "--to", "torch-csv", "-o", str(csv))[0] == 0
    args = ("--model", "llama3-8b", "--hardware", "h100-80gb", "--json")
    code, out, err = run_cli("plan", str(csv), "--gpus", "4", "--global-batch", "8", *args)
    lines = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and lines[0]["pp"] == 2 and lines[0]["microbatches"] == 8 and lines[-1]["search"]["refused"] >= 1
    code, out, err = run_cli("plan", str(csv), "--gpus", "2", "--global-batch", "16", *args)
    assert code == 1 and "no layout of 2 GPUs runs llama3-8b with these schedules: each refused it" in err, err
    assert f"not those of a schedule of fixed shape: {csv} (2 ranks, 8 microbatches)" in err
    stuck = tmp_path / "stuck.pp"
    stuck.write_text("schedule stuck {\n  rank 0: 0F0 0RECV_B0 0B0 0SEND_F0\n  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n}\n")
    code, out, err = run_cli("plan", str(stuck), "--gpus", "2", "--global-batch", "1", *args)
    assert code == 1 and "error[" not in err and f"fixed shape: {stuck} (2 ranks, 1 microbatches)" in err, err


def test_a_csv_is_read_with_the_options_check_takes(run_cli, tmp_path):
    """plan had no --notation: an older PyTorch CSV failed its checks everywhere."""
    csv = tmp_path / "old.csv"
    assert run_cli("export", "1f1b", "--param", "P=2,M=8", "--to", "torch-csv", "-o", str(csv))[0] == 0
    csv.write_text(re.sub(r"(^|,)(\d+)B(\d+)", r"\1\2BW\3", csv.read_text(), flags=re.M))
    args = (str(csv), "--gpus", "4", "--global-batch", "8", "--model", "llama3-8b", "--hardware", "h100-80gb")
    code, _, err = run_cli("plan", *args)
    assert code == 2 and "read the file with --notation legacy" in err
    code, out, err = run_cli("plan", *args, "--notation", "legacy")
    assert code == 0 and re.search(rf"^2 .* {re.escape(str(csv))} +8 ", out, re.M), (out, err)
