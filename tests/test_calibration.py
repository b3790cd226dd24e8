"""Calibration from a run (docs/units.md, "Calibrating from a run"): `schedc run --profile` records
the bytes each stage's forward saved for its backward, and `--profile` on sim/check/compare scales
the description's activation model to them."""
from __future__ import annotations

import json

import pytest

from schedc.errors import SchedcError
from schedc.hardware import describe

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


@pytest.fixture
def setup_file(tmp_path):
    path = tmp_path / "transformer.toml"
    path.write_text(SETUP)
    return path


def test_a_profile_scales_the_activations_and_nothing_else(setup_file):
    s = describe(str(setup_file))
    modelled = [e.activation_bytes for e in s.estimates(2)]
    c = s.calibrated({"activations": {"0": 3 * modelled[0], "1": 3 * modelled[1]}}, "p.json")
    assert c.model.activation_scale == pytest.approx(3)
    assert [e.activation_bytes for e in c.estimates(2)] == pytest.approx([3 * x for x in modelled])
    assert [e.params for e in c.estimates(2)] == [e.params for e in s.estimates(2)]
    assert [e.flops_F for e in c.estimates(4)] == [e.flops_F for e in s.estimates(4)]
    # measured on 2 stages, used on 4: the scale carries over
    assert [e.activation_bytes for e in c.estimates(4)] == pytest.approx([3 * e.activation_bytes for e in s.estimates(4)])
    # calibrating again starts from the model, not from the last scale
    assert c.calibrated({"activations": {"0": modelled[0], "1": modelled[1]}}, "p").model.activation_scale == 1
    # the scale is a setup key: the JSON report's `setup` describes the calibrated job again
    assert c.to_dict()["model"]["activation_scale"] == pytest.approx(3) and "activation_scale" not in s.to_dict()["model"]


@pytest.mark.parametrize("profile, phrase", [({"stages": {}}, "no measured activations"),
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
        describe(str(setup_file)).calibrated(profile, "p.json")


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


@pytest.mark.slow
def test_a_real_run_measures_what_the_model_counts(tmp_path, run_cli, setup_file):
    """examples/transformer.py on 2 ranks over gloo (about 6 s): the profile's activations per stage
    are within 1% of schedc's count for that transformer described (the rest: the token ids the
    embedding keeps, the loss's inputs), and sim with --profile says the scale."""
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
    scale = s.calibrated(data, str(profile)).model.activation_scale
    code, out, err = run_cli("sim", "1f1b", "--param", "P=2,M=4", "--setup", str(setup_file), "--profile", str(profile))
    assert code == 0, err
    assert f"activations x {scale:.4g} as measured" in out
