"""Real units (issue 20, deliverable 2): a model and hardware description gives seconds and GiB.

The formulas against numbers worked by hand from the papers (schedc/estimate.py), the presets and
setup files (schedc/hardware.py) read and written back, memory limits with units at the boundary,
`compare` naming the fastest schedule that fits, and the units in every JSON report.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

import schedc
from schedc import estimate
from schedc.compare import compare, render
from schedc.costs import Costs
from schedc.errors import SchedcError
from schedc.hardware import Model, describe, presets
from schedc.options import memory_limit
from schedc.resources import builtin_schedules
from schedc.units import GIB

GPT3_A100 = ("--model", "gpt3-1.3b", "--hardware", "a100-80gb")
P4M8 = ("--param", "P=4,M=8")
UNITS = {"time": "s", "memory": "GiB"}
# GPT-3 175B as Korthikanti et al. 2022 train it (their Table 3): a = 96, h = 12288, L = 96, s = 2048,
# b = 1, the vocabulary padded to 51200; Megatron-LM's unfused (eager) attention core.
GPT3_175B = Model("gpt3-175b", layers=96, hidden=12288, heads=96, seq_len=2048, vocab=51200, kv_heads=96,
                  ffn_hidden=4 * 12288, dropout=True, attention="eager")


def cli_json(run_cli, *argv) -> dict:
    code, out, err = run_cli(*argv, "--json")
    assert code in (0, 1), err
    return json.loads(out)


# ---- the formulas, by hand ----
def test_activations_per_layer_are_the_papers_for_gpt3_175b():
    # Korthikanti et al. 2022, 4.1: sbh(34 + 5as/h) bytes per layer without recomputation; for this model
    # 5as/h = 5 * 96 * 2048 / 12288 = 80, so sbh * 114; selective recomputation keeps 34 sbh; full 2 sbh.
    # schedc adds what the paper leaves out: the two LayerNorms' fp32 mean and deviation, 16 bytes a token.
    sbh, stats = 2048 * 1 * 12288, 16 * 2048
    assert 5 * 96 * 2048 / 12288 == 80
    assert estimate.layer_activation_bytes(GPT3_175B) == sbh * 114 + stats == 2_868_936_704
    assert estimate.layer_activation_bytes(replace(GPT3_175B, recompute="selective")) == 34 * sbh + stats
    assert estimate.layer_activation_bytes(replace(GPT3_175B, recompute="full")) == 2 * sbh == 50_331_648
    # 4.3: the output layer and the loss keep 4sbh(1 + v/h); the embedding's dropout mask sbh
    assert estimate.last_stage_bytes(GPT3_175B) == 4 * sbh * (1 + 51200 / 12288) == 520_093_696
    assert estimate.first_stage_bytes(GPT3_175B) == sbh


def test_flops_are_narayanans_and_the_backward_splits_into_i_and_w():
    # Narayanan et al. 2021, 5.1: per layer the forward is 24bsh^2 + 4bs^2h; an iteration with full
    # recomputation is 96 Bslh^2 (1 + s/6h + V/16lh) (the forward four times, the output layer three)
    m, b, s, h, L, V = GPT3_175B, 1, 2048, 12288, 96, 51200
    F, I, W = estimate.layer_flops(m)
    assert F == 24 * b * s * h * h + 4 * b * s * s * h
    assert W == 24 * b * s * h * h  # the weight gradients: as many matmul FLOPs as the forward's
    assert I + W == 2 * F  # B = I + W, twice the forward
    full = replace(m, recompute="full")
    total = sum(st.flops_F + st.flops_I + st.flops_W for st in estimate.stages(full, 8))
    assert total == pytest.approx(96 * b * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)), rel=1e-12)


def test_parameters_match_the_published_sizes():
    # 16 bytes per parameter (ZeRO's mixed-precision Adam) and the published totals: Llama 2 7B has
    # 6.74B parameters, Llama 3 70B 70.6B (norms, O(h), are not counted)
    def total(name):
        return sum(st.params for st in estimate.stages(describe(model=name, hardware="h100-80gb").model, 1))
    assert total("llama2-7b") == pytest.approx(6.74e9, rel=1e-3)
    assert total("llama3-70b") == pytest.approx(70.6e9, rel=1e-3)
    assert estimate.state_bytes_per_param(describe(model="llama2-7b", hardware="h100-80gb").model) == 16


def test_seconds_per_stage_are_flops_over_the_reachable_rate(run_cli):
    # gpt3-1.3b on 4 stages: 6 layers of 24bsh^2 + 4bs^2h each, at 312 TFLOP/s x 0.5
    b, s, h = 1, 2048, 2048
    F = 6 * (24 * b * s * h * h + 4 * b * s * s * h) / (312e12 * 0.5)
    sim = cli_json(run_cli, "sim", "1f1b", *P4M8, *GPT3_A100)
    assert sim["costs"]["F"][1] == pytest.approx(F, rel=1e-12)
    assert sim["costs"]["B"][1] == pytest.approx(2 * F, rel=1e-12)
    assert sim["costs"]["latency"] == 5e-6 and sim["costs"]["bandwidth"] == pytest.approx(300e9 / GIB)


def test_tied_embeddings_are_held_once_by_a_rank_with_both_ends():
    setup = describe(model="gpt3-1.3b", hardware="a100-80gb")  # ties its input and output embeddings
    zbv = schedc.load("zbv", {"P": 4, "M": 8})  # rank 0 holds stage 0 and stage 7
    h, V = 2048, 50257
    rank0 = (6 * 12 * h * h + V * h) * 16 / GIB  # six layers, the embedding once
    assert setup.model_states(zbv)[0] == pytest.approx(rank0, rel=1e-12)
    untied = replace(setup, model=replace(setup.model, tied_embeddings=False))
    assert untied.model_states(zbv)[0] == pytest.approx(rank0 + V * h * 16 / GIB, rel=1e-12)


# ---- presets and setup files ----
def test_every_preset_describes_a_model_that_runs():
    for model in presets()["model"]:
        for hardware in presets()["hardware"]:
            setup = describe(model=model, hardware=hardware)
            settings = setup.stage_settings(4)
            assert all(v > 0 for s, st in settings.items() for k, v in st.items()
                       if k not in ("out", "R", "U", "T") and "_comm" not in k and (s, k) != (0, "I"))
            assert settings[0]["I"] == 0 < settings[0]["W"]  # (the first stage's backward is all W)
            assert all(st["R"] == st["U"] == 0 for st in settings.values())  # no data parallelism
            assert all(st[k] == 0 for st in settings.values() for k in ("F_comm", "I_comm", "W_comm"))  # no TP/CP/EP
            assert settings[3]["out"] == 0 and settings[0]["out"] > 0


def test_the_presets_ship_in_the_wheel():
    import tomllib
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "presets.toml" in data["schedc"] and (root / "schedc" / "presets.toml").is_file()


def test_a_setup_round_trips_through_its_json(tmp_path):
    for model, hardware, link in (("llama2-7b", "h100-80gb", None), ("gpt3-1.3b", "a100-80gb", "ib-200g")):
        setup = describe(model=model, hardware=hardware, link=link)
        path = tmp_path / f"{model}.json"
        path.write_text(json.dumps(setup.to_dict()))
        again = describe(str(path))
        assert (again.model, again.hardware, again.link) == (setup.model, setup.hardware, setup.link)


def test_a_setup_file_changes_a_preset(tmp_path):
    path = tmp_path / "setup.toml"
    path.write_text('[model]\npreset = "llama2-7b"\nmicro_batch = 2\nrecompute = "selective"\n\n'
                    '[hardware]\npreset = "h100-80gb"\nmemory = "40GiB"\n\n[link]\nlatency = 2e-5\n')
    setup = describe(str(path))
    assert (setup.model.micro_batch, setup.model.recompute, setup.model.layers) == (2, "selective", 32)
    # the default reserve: 2 GiB and 5% of the memory
    assert setup.memory == 40 - 2 - 2 and setup.link.name == "nvlink4" and setup.link.latency == 2e-5
    assert describe(str(path), model="gpt3-1.3b").model.micro_batch == 2  # the flag picks the preset


@pytest.mark.parametrize("text, where, phrase", [
    ('[model]\npreset = "llama2-7b"\nrecompute = "selectiv"\n', ":3:1:", "did you mean 'selective'"),
    ('[hardware]\npreset = "h100-80gb"\nefficency = 0.5\n', ":3:1:", "did you mean 'efficiency'"),
    ('[hardware]\npreset = "h100-80gb"\nmemory = "80GiBs"\n', ":3:1:", "unknown unit 'GiBs'"),
    ('[hardware]\npreset = "h100-80gb"\nefficiency = 1.5\n', ":3:1:", "in (0, 1]"),
    ('[model]\npreset = "gpt3"\n', ":2:1:", "did you mean 'gpt3-1.3b'"),
    ('[modle]\n', "setup.toml: error", "did you mean 'model'"),
    # the fuzzer's (bench/README.md, "Fuzzing"): a TypeError (exit 4) for a list where a preset's name
    # goes; a MemoryError for 2^31 - 1 layers (walked one by one) or experts (a tuple of each)
    ('[hardware]\npreset = "h100-80gb"\nlink = ["nvlink"]\n', ":3:1:", "no link preset ['nvlink']"),
    ('[hardware]\npreset = "h100-80gb"\nnetwork = {x = 1}\n', ":3:1:", "no link preset {'x': 1}"),
    ('[model]\npreset = "llama2-7b"\nlayers = 2147483647\n', ":3:1:", "layers must be at most 10,000"),
])
def test_a_bad_setup_file_is_an_error_at_its_key(run_cli, tmp_path, text, where, phrase):
    (tmp_path / "setup.toml").write_text(text)
    flags = [] if "[model]" in text else ["--model", "llama2-7b"]
    flags += [] if "[hardware]" in text else ["--hardware", "h100-80gb"]
    code, out, err = run_cli("sim", "1f1b", "--setup", str(tmp_path / "setup.toml"), *flags)
    assert code == 2 and where in err and phrase in err and "Traceback" not in err, err


def test_a_preset_that_does_not_exist_names_the_ones_that_do(run_cli):
    code, _, err = run_cli("sim", "1f1b", "--model", "lama2-7b", "--hardware", "h100-80gb")
    assert code == 2 and "did you mean 'llama2-7b'" in err and "gpt3-1.3b, llama2-7b, llama3-70b" in err
    code, _, err = run_cli("compare", "--model", "llama2-7b")
    assert code == 2 and "--hardware (a100-80gb, h100-80gb, a100-40gb, h200, mi300x, b200)" in err
    code, _, err = run_cli("check", "1f1b", "--param", "P=64", "--model", "llama2-7b", "--hardware", "h100-80gb")
    assert code == 2 and "32 layers, too few for a schedule with 64 stages" in err


# ---- memory limits with units ----
def test_limit_units_are_read_in_gib():
    assert memory_limit("80GiB", sized=True) == 80
    assert memory_limit("512MiB", sized=True) == 0.5
    assert memory_limit("80GB", sized=True) == 80e9 / GIB
    assert memory_limit("0=80GiB,1=40", sized=True) == {0: 80, 1: 40}
    assert memory_limit("8") == 8 and memory_limit("0=4,1=3") == {0: 4, 1: 3}
    with pytest.raises(SchedcError, match="unknown unit 'GIGS'"):
        memory_limit("80GIGS", sized=True)
    with pytest.raises(SchedcError, match="needs sizes in bytes"):
        memory_limit("80GiB")


def test_check_accepts_a_limit_in_units_up_to_the_byte(run_cli, tmp_path):
    # gpt3-1.3b with the eager attention core, 1F1B at P=4, M=8, rank 0, by hand (s = 2048, b = 1,
    # h = 2048, a = 16, V = 50257): 4 microbatches of stage 0's activations (6 layers of 34sbh + 5as^2b
    # and 16 bytes a token of LayerNorm statistics, and the embedding's mask sbh), the 2sbh receive
    # buffer of a gradient, and 16 bytes for each of its 6 x 12h^2 + Vh parameters
    sbh = 2048 * 2048
    activations = 4 * (6 * (34 * sbh + 5 * 16 * 2048 * 2048 + 16 * 2048) + sbh)
    states = 16 * (6 * 12 * 2048 * 2048 + 50257 * 2048)
    total = activations + 2 * sbh + states
    assert total == 17_980_227_584 and total % 1024 == 0
    (tmp_path / "eager.toml").write_text('[model]\npreset = "gpt3-1.3b"\nattention = "eager"\n')
    base = ("check", "1f1b", *P4M8, "--setup", str(tmp_path / "eager.toml"), "--hardware", "a100-80gb",
            "--memory-limit")
    assert run_cli(*base, f"{total // 1024}KiB")[0] == 0
    code, out, _ = run_cli(*base, f"{total // 1024 - 1}KiB")
    assert code == 1 and "error[memory]: rank 0" in out and "of model states" in out
    assert run_cli(*base, f"{total / GIB!r}")[0] == 0  # a plain number is GiB
    assert run_cli(*base, f"0={total // 1024 - 1}KiB,1=80GiB")[0] == 1
    code, _, err = run_cli(*base, "17GIGS")
    assert code == 2 and "unknown unit 'GIGS'" in err
    code, _, err = run_cli("check", "1f1b", "--memory-limit", "80GiB")
    assert code == 2 and "--model and --hardware" in err


def test_the_accelerators_memory_is_the_default_limit(run_cli):
    # llama2-7b without recomputation at M = 16: GPipe holds all 16 microbatches and does not fit an
    # H100; 1F1B holds P and does
    at = ("--param", "P=4,M=16", "--model", "llama2-7b", "--hardware", "h100-80gb")
    assert run_cli("check", "gpipe", *at)[0] == 1
    assert run_cli("check", "1f1b", *at)[0] == 0


# ---- compare: the fastest that fits ----
@pytest.mark.parametrize("limit", [None, 17.5, 10.0])
def test_compare_names_the_fastest_schedule_that_fits(limit):
    setup = describe(model="gpt3-1.3b", hardware="a100-80gb")
    rows = compare(list(builtin_schedules()), {"P": 4, "M": 8, "V": 2}, costs=Costs("t", derived=setup),
                   memory_limit=limit)
    cap = setup.memory if limit is None else limit
    timed = [r for r in rows if r.skipped is None]
    fits = [r for r in timed if all(a + b <= cap for a, b in zip(r.model_states, r.peak_memory))]
    best = min(fits, key=lambda r: r.makespan)
    assert [r.name for r in rows if r.fastest] == [best.name]
    assert [r.name for r in timed if not r.over_limit] == [r.name for r in fits]
    assert f"fastest that fits within {cap:.4g} GiB per rank: {best.name} " in render(rows, cap)
    if limit == 10.0:  # the limit leaves out the faster schedules: the answer is not the fastest overall
        assert best.makespan > min(r.makespan for r in timed)


def test_compare_cli_in_seconds_and_gib(run_cli):
    code, out, _ = run_cli("compare", "zbv", "1f1b", *P4M8, *GPT3_A100, "--memory-limit", "9.5GiB")
    assert code == 0 and "time (s)" in out and "fastest that fits within 9.5 GiB per rank: 1f1b (P=4 M=8)" in out
    code, out, err = run_cli("compare", "zbv", *P4M8, *GPT3_A100, "--memory-limit", "9GiB")
    assert code == 1 and "no schedule fits within 9 GiB" in out and "within memory 9 GiB" in err
    code, _, err = run_cli("compare", "zbv", *P4M8, "--memory-limit", "0=3")
    assert code == 2 and "one limit for every rank" in err


# ---- every report says its units; unit counts stay the default ----
def test_json_reports_carry_the_units(run_cli):
    sim = cli_json(run_cli, "sim", "zbv", *P4M8, *GPT3_A100)
    check = cli_json(run_cli, "check", "zbv", *P4M8, *GPT3_A100)
    code, out, _ = run_cli("compare", "zbv", *P4M8, *GPT3_A100, "--json")
    (row,) = [json.loads(line) for line in out.splitlines()]
    for report in (sim, check, row):
        assert report["units"] == UNITS
        assert report["total_memory"] == pytest.approx([a + b for a, b in zip(report["model_states"],
                                                                                report["peak_memory"])])
    assert sim["setup"]["model"]["name"] == "gpt3-1.3b" and check["setup"]["hardware"]["name"] == "a100-80gb"
    assert check["total_memory_limit"] == [80 - 2 - 4] * 4  # 80 GiB less the reserve, 2 GiB and 5%
    assert row["fits"] and row["fastest"] and row["makespan"] == pytest.approx(sim["makespan"])
    # without a description every report counts units, as before
    for report in (cli_json(run_cli, "sim", "zbv", *P4M8), cli_json(run_cli, "check", "zbv", *P4M8),
                   json.loads(run_cli("compare", "zbv", *P4M8, "--json")[1])):
        assert "units" not in report and "model_states" not in report
    assert cli_json(run_cli, "sim", "zbv", *P4M8)["makespan"] == 25.5


def test_text_and_pictures_say_seconds_and_gib(run_cli, tmp_path):
    code, out, _ = run_cli("sim", "1f1b", *P4M8, *GPT3_A100)
    assert code == 0 and "times in seconds, sizes in GiB" in out and " s, bubble ratio" in out
    code, out, _ = run_cli("check", "1f1b", *P4M8, *GPT3_A100)
    assert code == 0 and "model states" in out and "sizes in GiB" in out
    svg = tmp_path / "p.svg"
    code, _, err = run_cli("viz", "1f1b", *P4M8, *GPT3_A100, "-o", str(svg))
    text = svg.read_text()
    assert code == 0 and "time (s)" in text and " GiB / " in text  # a row's peak and its limit
    assert "GiB (rank 0)" in text and "model states" in text


def test_a_mixture_of_two_billion_experts_is_counted_not_listed(tmp_path):
    """Each expert was a tuple item (2^31 - 1 of them: a MemoryError); now one size times the count."""
    path = tmp_path / "moe.toml"
    path.write_text('[model]\npreset = "mixtral-8x7b"\nexperts = 2147483647\n[hardware]\npreset = "h100-80gb"\n')
    s = describe(str(path))
    mixtral = describe(model="mixtral-8x7b", hardware="h100-80gb")
    per = estimate.expert_size(mixtral.model, 0)
    assert estimate.expert_params(s.model, 0) == per * (2 ** 31 - 1) and estimate.expert_params(mixtral.model, 0) == per * 8
    assert s.estimates(2)[0].params > 2 ** 31 * per


def test_sim_writes_no_trace_for_a_job_the_schedule_does_not_run(run_cli, tmp_path):
    """The fuzzer's (bench/README.md, "Fuzzing"): sim wrote --trace, then refused a [parallelism]
    pipeline degree that is not the schedule's (exit 2 with an output written)."""
    path = tmp_path / "setup.toml"
    path.write_text('[model]\npreset = "llama3-70b"\n[hardware]\npreset = "h100-80gb"\n[parallelism]\n'
                    'pipeline_parallel_degree = 4\n')
    trace = tmp_path / "out" / "x.json"
    code, out, err = run_cli("sim", "zb_h2", "--param", "P=3,M=3", "--setup", str(path), "--lower", "early",
                             "--json", "--trace", str(trace))
    assert code == 2 and "pipeline_parallel_degree is 4, but the schedule runs 3" in err
    assert not (tmp_path / "out").exists()
