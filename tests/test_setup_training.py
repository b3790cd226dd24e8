"""The training choices a setup file describes beyond the model's shape: the attention kernel,
torchtitan's [activation_checkpoint] table, and the memory reserve (docs/units.md)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from schedc import estimate
from schedc.errors import SchedcError
from schedc.hardware import describe
from schedc.jobs import activations
from schedc.units import GIB


def setup_file(tmp_path, text: str, name: str = "setup.toml") -> str:
    path = tmp_path / name
    path.write_text('[hardware]\npreset = "h100-80gb"\n\n' + text)
    return str(path)


def llama(tmp_path, text: str = ""):
    return describe(setup_file(tmp_path, '[model]\npreset = "llama2-7b"\n' + text))


def test_the_default_kernel_is_torchs_fused_attention(tmp_path):
    m = llama(tmp_path).model
    assert (m.attention, m.norm, m.rope) == ("sdpa", "rmsnorm", True)
    eager = llama(tmp_path, 'attention = "eager"\n').model
    # the fused kernel keeps no s x s softmax: a 4k-sequence layer holds 2as of 16-bit scores a token less
    diff = estimate.layer_activation_bytes(eager) - estimate.layer_activation_bytes(m)
    assert diff == (2 * m.heads * m.seq_len - activations.STAT_BYTES * m.heads) * m.seq_len


@pytest.mark.parametrize("option, selective", [(None, "op"), ('"op"', "op"), ('"attention"', "attention"),
                                               ('"2"', "2"), ("3", "3")])
def test_torchtitans_activation_checkpoint_table(tmp_path, option, selective):
    text = '[activation_checkpoint]\nmode = "selective"\n' + (f"selective_ac_option = {option}\n" if option else "")
    s = llama(tmp_path, text)
    assert (s.model.recompute, s.model.selective) == ("selective", selective)
    path = tmp_path / "again.json"
    path.write_text(json.dumps(s.to_dict()))
    assert describe(str(path)).model == s.model  # the JSON report's setup is a setup file


def test_op_selective_keeps_what_torchtitans_policy_keeps(tmp_path):
    m = llama(tmp_path, '[activation_checkpoint]\nmode = "selective"\n').model
    names = {t.name for t in activations.saved(estimate.shape(m), "sdpa", "selective", "op")}
    # the layer input, the attention kernel's outputs, and the 1st, 3rd, 5th, 7th matmuls' (wq, wv, w1, w2)
    assert names == {"layer input", "attention output", "attention log-sum-exp", "queries", "values",
                     "gate projection", "MLP output"}
    # it recomputes the 2nd, 4th and 6th matmuls (wk, wo, w3) before the backward
    h, kv, f = m.hidden, m.hidden * m.kv_heads // m.heads, m.ffn_hidden
    base = estimate.layer_flops(replace(m, recompute="none"))[1]
    assert estimate.layer_flops(m)[1] - base == 2.0 * m.seq_len * m.micro_batch * (h * kv + h * h + h * f)


def test_selective_every_n_layers_checkpoints_layers_0_n_2n(tmp_path):
    m = llama(tmp_path, '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "4"\n').model
    whole = estimate.layer_activation_bytes(replace(m, recompute="full"))
    kept = estimate.layer_activation_bytes(replace(m, recompute="none"))
    assert [estimate.checkpoint_of(m, i) for i in range(5)] == ["full", "none", "none", "none", "full"]
    stages = estimate.stages(m, 4)  # 8 layers a stage: two of them checkpointed whole
    assert stages[1].activation_bytes == pytest.approx(2 * whole + 6 * kept)


@pytest.mark.parametrize("text, phrase", [
    ('[activation_checkpoint]\nmode = "selectiv"\n', "did you mean 'selective'"),
    ('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "ops"\n', "selective_ac_option must be"),
    ('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = 0\n', "selective_ac_option must be"),
    ('[activation_checkpoint]\nmodes = "full"\n', "has no key 'modes'"),
])
def test_a_bad_checkpoint_table_is_an_error_at_its_key(tmp_path, text, phrase):
    with pytest.raises(SchedcError, match=phrase) as e:
        llama(tmp_path, text)
    assert e.value.diagnostics[0].span is not None


def test_recompute_and_the_table_do_not_both_say(tmp_path):
    with pytest.raises(SchedcError, match="keep one"):
        llama(tmp_path, 'recompute = "full"\n\n[activation_checkpoint]\nmode = "selective"\n')


def test_the_reserve_comes_off_the_memory(tmp_path):
    s = llama(tmp_path)
    memory = 81559 * 2 ** 20
    assert s.hardware.reserve == 2 * GIB + 0.05 * memory
    assert s.memory == pytest.approx((memory - s.hardware.reserve) / GIB)
    assert "(79.65 GiB, 5.982 GiB reserved)" in s.title
    path = tmp_path / "reserve.toml"
    path.write_text('[model]\npreset = "llama2-7b"\n[hardware]\npreset = "h100-80gb"\nreserve = "8GiB"\n')
    assert describe(str(path)).memory == pytest.approx(memory / GIB - 8)
    path.write_text('[model]\npreset = "llama2-7b"\n[hardware]\npreset = "h100-80gb"\nreserve = 0\n')
    assert describe(str(path)).memory == pytest.approx(memory / GIB)
    path.write_text('[model]\npreset = "llama2-7b"\n[hardware]\npreset = "h100-80gb"\nreserve = "90GiB"\n')
    with pytest.raises(SchedcError, match="leaves nothing"):
        describe(str(path))


def test_compare_keeps_the_reserve(run_cli, tmp_path):
    """A schedule that fits the whole memory but not what the reserve leaves is over the limit."""
    path = tmp_path / "tight.toml"
    path.write_text('[model]\npreset = "llama2-7b"\n[hardware]\npreset = "h100-80gb"\nmemory = "48GiB"\n'
                    'reserve = 0\n')
    code, out, _ = run_cli("compare", "1f1b", "--param", "P=4,M=8", "--setup", str(path), "--json")
    row = json.loads(out)
    assert code == 0 and row["fits"] and 48 - 2 - 0.05 * 48 < row["total"] <= 48
    path.write_text(path.read_text().replace("reserve = 0\n", ""))
    code, out, _ = run_cli("compare", "1f1b", "--param", "P=4,M=8", "--setup", str(path), "--json")
    assert code == 1 and not json.loads(out)["fits"]
