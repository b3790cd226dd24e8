"""Calibration from a run (docs/units.md, "Calibrating from a run"; schedc/calibration.py): `schedc run
--profile` records each stage's pass times and the bytes its forward saved for its backward, and
`--profile` on sim/check/compare/viz/plan scales the description's activation model to the bytes and
sets each pass's efficiency to what the model's FLOPs reached in the measured times."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from schedc.api import load
from schedc.calibration import calibrate
from schedc.costs import Costs
from schedc.errors import SchedcError
from schedc.hardware import describe
from schedc.rules.time import split_backward

SETUP = """[model]
name = "examples.transformer"
layers = 4
hidden = 32
heads = 4
ffn_hidden = 128
seq_len = 16
vocab = 64
dtype = "fp32"
micro_batch = 8
dropout = false

[hardware]
preset = "a100-80gb"
"""


# the same model described on the CPU it runs on here: a CPU "accelerator" whose peak is an assumed
# round figure (what is calibrated is the FLOP/s reached, peak x efficiency), with a loopback link
CPU = SETUP.replace('preset = "a100-80gb"', 'name = "cpu"\nflops = 1e11\nmemory = "8GiB"\nefficiency = 0.5\n\n'
                    '[link]\nname = "loopback"\nbandwidth = "5GB/s"\nlatency = 5e-5')
DATA = Path(__file__).resolve().parent / "data" / "calibration"
# Llama 2 7B on H100s with tensor parallelism, whose collectives sit inside F and I
TP = '[model]\npreset = "llama2-7b"\n[hardware]\npreset = "h100-80gb"\n[parallelism]\ntensor_parallel_degree = 2\n'
EFF = {"F": 0.41, "I": 0.33, "W": 0.33}


@pytest.fixture
def setup_file(tmp_path):
    path = tmp_path / "transformer.toml"
    path.write_text(SETUP)
    return path


def synthetic(setup, stages: int, eff: dict[str, float]) -> dict:
    """The profile a run at efficiencies `eff` would write: each pass its FLOPs over the peak times its
    efficiency, plus the communication the description puts inside it; the first stage's backward
    all in W, as the runtimes run it (rules/time.py `split_backward`)."""
    peak = setup.hardware.flops_at(setup.model.dtype)
    est = setup.estimates(stages)
    out = {}
    for s, (e, (Fc, Ic)) in enumerate(zip(est, setup.stage_comm(est))):
        F, I, W = e.flops_F / (peak * eff["F"]) + Fc, e.flops_I / (peak * eff["I"]) + Ic, e.flops_W / (peak * eff["W"])
        I, W, _, _ = split_backward(e.first, I, W, Ic)  # noqa: E741
        out[str(s)] = {"F": F, "B": I + W} if e.first else {"F": F, "I": I, "W": W, "B": I + W}  # (an I of 0: none)
    return {"stages": out}


def test_a_synthetic_profile_gives_the_efficiencies_back(tmp_path):
    """Times made from known efficiencies (with tensor-parallel communication inside F and I) give
    those efficiencies back, to rounding: the forward's, and the backward's (I and W at one
    efficiency, B = I + W, whatever split of B the profile gives); the calibrated description then
    times every stage as the profile did, and another cut of the model at the same efficiencies."""
    path = tmp_path / "tp.toml"
    path.write_text(TP)
    s = describe(str(path))
    assert s is not None and s.stage_comm(s.estimates(4))[1][0] > 0  # communication inside F
    profile = synthetic(s, 4, EFF)
    c = calibrate(s, profile, "p.json")
    assert dict(c.hardware.efficiency) == pytest.approx(EFF, rel=1e-12)
    assert c.model == s.model  # (no "activations": the activation model stays)
    for stage, st in c.stage_settings(4).items():
        times = profile["stages"][str(stage)]
        for op in ("F", "I", "W"):
            assert st[op] == pytest.approx(times.get(op, 0.0 if op == "I" else times["B"]), rel=1e-12)
    program = Costs("p.json", derived=c).apply(load("1f1b", {"P": 4, "M": 8}))  # what sim and compare time
    assert [st.B for st in program.annotations.stage_costs] == pytest.approx(
        [t["B"] for t in profile["stages"].values()], rel=1e-12)
    by_hand = replace(s, hardware=replace(s.hardware, efficiency=tuple(EFF.items())))
    assert c.stage_settings(8) == by_hand.stage_settings(8)
    # the calibration is a setup key: the JSON report's `setup` describes the calibrated job again
    assert c.to_dict()["hardware"]["efficiency"] == pytest.approx(EFF) and s.to_dict()["hardware"]["efficiency"] == 0.4
    assert "efficiency F 0.41, I 0.33, W 0.33" in c.title and "efficiency" not in s.title
    # the runtime's halves of a B (1F1B), its own split of a zero-bubble run, or B alone: one answer
    for split in (lambda t: (t["B"] / 2, t["B"] / 2), lambda t: (1e-6, t["B"] - 1e-6), None):
        other = {"stages": {k: ({"F": t["F"], "B": t["B"]} if split is None else
                                dict(zip("FIW", (t["F"], *split(t)))))
                            for k, t in profile["stages"].items()}}
        assert dict(calibrate(s, other, "p.json").hardware.efficiency) == pytest.approx(EFF, rel=1e-12)


def test_the_calibrated_efficiency_times_every_command(tmp_path, run_cli):
    """sim with --profile times the stages at the calibrated efficiencies and says so in its title;
    its JSON `setup`, as a setup file, describes the calibrated job again (the efficiency a table)."""
    path, prof = tmp_path / "tp.toml", tmp_path / "p.json"
    path.write_text(TP)
    s = describe(str(path))
    prof.write_text(json.dumps(synthetic(s, 4, EFF)))
    code, out, err = run_cli("sim", "1f1b", "--param", "P=4,M=8", "--setup", str(path), "--profile", str(prof),
                             "--json")
    assert code == 0, err
    report = json.loads(out)
    again = tmp_path / "again.json"
    again.write_text(json.dumps(report["setup"]))
    code, out2, err = run_cli("sim", "1f1b", "--param", "P=4,M=8", "--setup", str(again), "--json")
    assert code == 0, err
    assert json.loads(out2)["makespan"] == report["makespan"]
    code, text, err = run_cli("sim", "1f1b", "--param", "P=4,M=8", "--setup", str(path), "--profile", str(prof))
    assert code == 0 and "efficiency F 0.41, I 0.33, W 0.33)" in text, err
    code, out, err = run_cli("plan", "--gpus", "8", "--global-batch", "16", "--setup", str(path), "--profile", str(prof),
                             "--json")
    assert code == 0, err


@pytest.mark.parametrize("change, phrase", [
    (lambda p: p["stages"].pop("2"), "stage 2 is missing"),
    (lambda p: p["stages"]["1"].update(F=-1.0), "stage 1 F must be a positive number"),
    (lambda p: p["stages"]["1"].update(F="fast"), "stage 1 F must be a positive number"),
    (lambda p: p["stages"]["0"].pop("F"), "stage 0 needs F, and B or I and W"),
    (lambda p: p.update(stages={}), "must give each stage's measured seconds"),
    (lambda p: p.update(stages={"0": 1.0}), "stage 0 must be a table of seconds"),
    (lambda p: [t.update(F=t["F"] / 10) for t in p["stages"].values()], r"forward \(F\) passes ran at .* times the peak"),
    (lambda p: [t.update(F=1e-6) for t in p["stages"].values()], "no more than the communication"),
    (lambda p: p["stages"]["3"].update(W=10 ** 400), "stage 3 W must be a positive number of seconds below 1e\\+09"),
    (lambda p: p["stages"]["3"].update(W=float("inf")), "stage 3 W must be a positive number"),
])
def test_a_profile_without_good_times_is_an_error(tmp_path, change, phrase):
    path = tmp_path / "tp.toml"
    path.write_text(TP)
    s = describe(str(path))
    profile = synthetic(s, 4, {"F": 0.2, "I": 0.3, "W": 0.3})
    change(profile)
    with pytest.raises(SchedcError, match=phrase) as info:
        calibrate(s, profile, "p.json")
    assert info.value.code == "usage"


def test_efficiency_in_a_setup_file(tmp_path, run_cli):
    """[hardware] efficiency: one number, or a table with each pass's; each in (0, 1]."""
    for value, phrase in (("{F = 0.4, I = 0.3}", "gives each pass its own: F, I, W"),
                          ("{F = 0.4, I = 0.3, W = 0.3, B = 0.2}", "'B' is not one"),
                          ("{F = 0.4, I = 1.3, W = 0.3}", "efficiency.I is the fraction of the peak"),
                          ("{F = 0.4, I = 0, W = 0.3}", "efficiency.I must be a positive number")):
        path = tmp_path / "bad.toml"
        path.write_text(f'[model]\npreset = "llama2-7b"\n[hardware]\npreset = "h100-80gb"\nefficiency = {value}\n')
        code, out, err = run_cli("sim", "1f1b", "--setup", str(path))
        assert code == 2 and phrase in err and "bad.toml:5:" in err, (value, err)
    path.write_text('[model]\npreset = "llama2-7b"\n[hardware]\npreset = "h100-80gb"\nefficiency = {F = 0.4, I = 0.4, W = 0.4}\n')
    table, number = describe(str(path)), describe(model="llama2-7b", hardware="h100-80gb")
    assert table is not None and number is not None
    assert table.stage_settings(4) == number.stage_settings(4) and table.title == number.title


def test_a_profile_scales_the_activations_and_nothing_else(setup_file):
    s = describe(str(setup_file))
    modelled = [e.activation_bytes for e in s.estimates(2)]
    c = calibrate(s, {"activations": {"0": 3 * modelled[0], "1": 3 * modelled[1]}}, "p.json")
    assert c.model.activation_scale == pytest.approx(3)
    assert [e.activation_bytes for e in c.estimates(2)] == pytest.approx([3 * x for x in modelled])
    assert [e.params for e in c.estimates(2)] == [e.params for e in s.estimates(2)]
    assert [e.flops_F for e in c.estimates(4)] == [e.flops_F for e in s.estimates(4)]
    # measured on 2 stages, used on 4: the scale carries over
    assert [e.activation_bytes for e in c.estimates(4)] == pytest.approx([3 * e.activation_bytes for e in s.estimates(4)])
    # calibrating again starts from the model, not from the last scale
    assert calibrate(c, {"activations": {"0": modelled[0], "1": modelled[1]}}, "p").model.activation_scale == 1
    # the scale is a setup key: the JSON report's `setup` describes the calibrated job again
    assert c.to_dict()["model"]["activation_scale"] == pytest.approx(3) and "activation_scale" not in s.to_dict()["model"]


@pytest.mark.parametrize("profile, phrase", [({"meta": {}}, "no measured activations"),
                                             ({"activations": {"0": -1}}, "positive byte counts"),
                                             ({"activations": {"x": 5}}, "stage numbers"),
                                             # the fuzzer's (bench/README.md, "Fuzzing"): KeyError, inf
                                             ({"activations": {"01": 5}}, "'01' is not a stage number"),
                                             ({"activations": {" 1": 5, "0": 5}}, "' 1' is not a stage number"),
                                             ({"activations": {"0": True}}, "positive byte counts"),
                                             ({"activations": {"0": "5"}}, "positive byte counts"),
                                             ({"activations": {"0": 1e308, "1": 1e308}}, "below 2\\^63"),
                                             ({"activations": {"0": 5e-324}}, "out of range")])
def test_a_profile_without_good_activations_is_an_error(setup_file, profile, phrase):
    with pytest.raises(SchedcError, match=phrase):
        calibrate(describe(str(setup_file)), profile, "p.json")


@pytest.mark.parametrize("activations", [{"01": 5}, {"0": 1e308, "1": 1e308}])
def test_a_bad_profile_on_the_command_line_is_a_usage_error(run_cli, tmp_path, activations):
    """A stage key `01` was a KeyError (exit 4); bytes near 1e308 gave activations of `inf`."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"activations": activations}))
    for command in (["sim", "1f1b", "--param", "P=2,M=4"], ["plan", "--gpus", "2", "--global-batch", "4"]):
        code, out, err = run_cli(*command, "--model", "llama2-7b", "--hardware", "h100-80gb", "--profile", str(path))
        assert code == 2 and "error[usage]: the profile's \"activations\"" in err and "inf" not in out, (command, err)


def test_the_command_line_needs_a_description_for_it(run_cli, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"stages": {"0": {"F": 1, "B": 2}}, "activations": {"0": 100}}))
    code, out, err = run_cli("sim", "1f1b", "--param", "P=2,M=4", "--profile", str(path))
    assert code == 2 and "--profile calibrates a model and hardware description" in err


def test_a_recorded_cpu_run_is_predicted_stage_by_stage(tmp_path):
    """A profile `schedc run --profile` wrote (examples/transformer.py, 1F1B on 2 ranks over gloo, on
    an idle 2-core machine; tests/data/calibration) calibrates a CPU description, which then gives
    back the sum of the stages' forwards and of their backwards exactly, and each stage's forward
    within 3% and backward within 16% (the per-op overhead and the embedding that FLOPs do not count:
    docs/units.md). Recorded, so that a busy machine cannot move it: a fresh run is the slow test's."""
    data = json.loads((DATA / "transformer_1f1b_cpu.json").read_text())
    path = tmp_path / "cpu.toml"
    path.write_text(CPU)
    calibrated = calibrate(describe(str(path)), data, "run.json")
    eff = dict(calibrated.hardware.efficiency)
    assert eff == pytest.approx({"F": 0.0636, "I": 0.0753, "W": 0.0753}, abs=1e-4)
    model = calibrated.stage_settings(2)
    for op, tolerance in (("F", 0.03), ("B", 0.16)):
        measured = [data["stages"][str(s)][op] for s in range(2)]
        predicted = [model[s]["F"] if op == "F" else model[s]["I"] + model[s]["W"] for s in range(2)]
        assert sum(predicted) == pytest.approx(sum(measured), rel=1e-12), op
        assert predicted == pytest.approx(measured, rel=tolerance), op
        assert predicted != pytest.approx(measured, rel=tolerance / 2), op  # (the bound is not loose)


@pytest.mark.slow
def test_a_real_run_measures_what_the_model_counts(tmp_path, run_cli, setup_file):
    """examples/transformer.py on 2 ranks over gloo (about 10 s): the profile's activations per stage
    are within 1% of schedc's count for that transformer described (the rest: the token ids the
    embedding keeps, the loss's inputs), and sim with --profile says the scale. Its times calibrate
    a CPU description, which gives back the sum of the stages' measured forwards and of their
    backwards exactly (derived quantities: they hold whatever the machine's load). Each stage's own
    time is held on a recorded run (above): on a machine loaded 3.5 times over its cores, one
    stage's forwards took 1.7 to 4.6 times the other's in three runs of ZB-V on one rank (both
    stages in one process), which no FLOP count predicts."""
    profile = tmp_path / "run.json"
    code, out, err = run_cli("run", "1f1b", "--param", "P=2", "--param", "M=4", "--model",
                             "examples.transformer:build_stages", "--nproc", "2", "--steps", "2", "--timeout", "60",
                             "--profile", str(profile))
    assert code == 0, (out, err)
    data = json.loads(profile.read_text())
    measured = data["activations"]
    assert set(measured) == {"0", "1"} and "memory" not in data  # no GPU here
    s = describe(str(setup_file))
    for stage, est in zip(("0", "1"), s.estimates(2)):
        assert measured[stage] == pytest.approx(est.activation_bytes, rel=0.01)
        assert measured[stage] >= est.activation_bytes  # what the model leaves out is only ever more
    scale = calibrate(s, data, str(profile)).model.activation_scale
    code, out, err = run_cli("sim", "1f1b", "--param", "P=2,M=4", "--setup", str(setup_file), "--profile", str(profile))
    assert code == 0, err
    assert f"activations x {scale:.4g} as measured" in out
    cpu = tmp_path / "cpu.toml"
    cpu.write_text(CPU)
    calibrated = calibrate(describe(str(cpu)), data, str(profile))
    eff = dict(calibrated.hardware.efficiency)
    assert 0 < eff["F"] < 1 and eff["I"] == eff["W"]
    predicted = calibrated.stage_settings(2)
    for op, of in (("F", lambda t: t["F"]), ("B", lambda t: t["I"] + t["W"])):
        measured = [data["stages"][str(s)][op] for s in range(2)]
        model = [of(predicted[s]) for s in range(2)]
        assert sum(model) == pytest.approx(sum(measured), rel=1e-9), op
