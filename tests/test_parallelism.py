"""A setup file's [parallelism] table (torchtitan's names): what tensor, sequence and context
parallelism, FSDP and ZeRO do to what each rank holds, how the layers split over the stages, and the
schedule and the table agreeing on the job (docs/units.md, "The job")."""
from __future__ import annotations

import json

import pytest

from schedc import estimate
from schedc.api import load
from schedc.errors import SchedcError
from schedc.hardware import describe
from schedc.jobs import mesh
from schedc.units import GIB


def setup(tmp_path, parallelism: str = "", model: str = 'preset = "llama2-7b"\n'):
    path = tmp_path / "job.toml"
    path.write_text(f'[model]\n{model}\n[hardware]\npreset = "h100-80gb"\n\n[parallelism]\n{parallelism}')
    return describe(str(path))


def test_tensor_and_sequence_parallelism_divide_each_stage(tmp_path):
    alone = setup(tmp_path)
    tp = setup(tmp_path, "tensor_parallel_degree = 4\n")
    no_sp = setup(tmp_path, "tensor_parallel_degree = 4\nsequence_parallel = false\n")
    a, b, c = (s.estimates(4)[1] for s in (alone, tp, no_sp))
    assert b.activation_bytes == pytest.approx(a.activation_bytes / 4)  # with SP every tensor splits
    assert a.activation_bytes / 4 < c.activation_bytes < a.activation_bytes  # without, the norms' do not
    assert b.params == a.params // 4 and b.flops_F == pytest.approx(a.flops_F / 4)
    # the message between stages is the sequence-parallel shard
    assert tp.stage_settings(4)[0]["out"] == pytest.approx(alone.stage_settings(4)[0]["out"] / 4)
    assert no_sp.stage_settings(4)[0]["out"] == alone.stage_settings(4)[0]["out"]
    assert "tp 4 + sp" in tp.title


def test_context_parallelism_divides_the_tokens(tmp_path):
    alone, cp = setup(tmp_path), setup(tmp_path, "context_parallel_degree = 2\n")
    for x, y in zip(alone.estimates(4), cp.estimates(4)):
        assert y.activation_bytes == pytest.approx(x.activation_bytes / 2)
        assert y.flops_F == pytest.approx(x.flops_F / 2) and y.params == x.params


def test_zero_stages_are_the_zero_papers_figure_1():
    """Rajbhandari et al. 2020, Figure 1: a 7.5B model on 64 data-parallel GPUs holds 120 GB of model
    states per GPU, 31.4 with P_os, 16.6 with P_os+g, 1.88 with P_os+g+p."""
    psi, got = 7.5e9, []
    for stage in mesh.ZERO_STAGES:
        got.append(psi * mesh.state_bytes_per_param(mesh.Parallel(dp_replicate=64, zero_stage=stage), 2) / 1e9)
    assert got == pytest.approx([120, 31.40625, 16.640625, 1.875])


def test_fsdp_shards_the_states_and_gathers_a_layer_ahead(tmp_path):
    s = setup(tmp_path, "data_parallel_shard_degree = 8\n")
    program = load("1f1b", {"P": 4, "M": 8})
    plain = setup(tmp_path).model_states(program)
    sharded = s.model_states(program)
    gathered = 2 * 2 * estimate.layer_params(s.model) / GIB  # two layers' bf16 weights
    for a, b in zip(plain, sharded):
        assert b == pytest.approx(a / 8 + gathered)
    assert "dp 8 (fsdp 8)" in s.title


def test_layers_per_stage_as_a_list_or_megatrons_first_and_last(tmp_path):
    listed = setup(tmp_path, "pipeline_parallel_layers_per_stage = [7, 9, 9, 7]\n")
    assert [st.layers for st in listed.estimates(4)] == [7, 9, 9, 7]
    ends = setup(tmp_path, "decoder_first_pipeline_num_layers = 6\ndecoder_last_pipeline_num_layers = 5\n")
    assert [st.layers for st in ends.estimates(5)] == [6, 7, 7, 7, 5]
    with pytest.raises(SchedcError, match="must give each of the 3 stages"):
        listed.estimates(3)
    ends_alone = setup(tmp_path, "pipeline_parallel_layers_per_stage = [0, 16, 16, 0]\n")  # torchtitan's split
    first, *_, last = ends_alone.estimates(4)
    assert (first.layers, last.layers) == (0, 0) and first.params > 0 and last.params > 0  # embedding, output


def test_the_table_and_the_schedule_describe_one_job(tmp_path, run_cli):
    s = setup(tmp_path, "pipeline_parallel_degree = 8\n")
    with pytest.raises(SchedcError, match="pipeline_parallel_degree is 8, but the schedule runs 4"):
        s.model_states(load("1f1b", {"P": 4, "M": 8}))
    job = tmp_path / "dp.pp"
    job.write_text("schedule dp(P = 2, M = 4) {\n  stages P\n  place loop\n  replicas 2\n"
                   "  rank r { for m in 0 .. M { F(r, m); B(r, m) } REDUCE_GRAD(r) }\n}\n")
    (tmp_path / "dp4.toml").write_text('[model]\npreset = "llama2-7b"\n[hardware]\npreset = "h100-80gb"\n'
                                       "[parallelism]\ndata_parallel_replicate_degree = 4\n")
    code, _, err = run_cli("check", str(job), "--setup", str(tmp_path / "dp4.toml"))
    assert code == 2 and "runs 2 data-parallel replicas" in err and "degree of 4" in err
    (tmp_path / "dp2.toml").write_text('[model]\npreset = "llama2-7b"\n[hardware]\npreset = "h100-80gb"\n'
                                       "[parallelism]\ndata_parallel_replicate_degree = 2\nzero_stage = 1\n")
    code, out, err = run_cli("check", str(job), "--setup", str(tmp_path / "dp2.toml"), "--json")
    states = json.loads(out)["model_states"]
    plain = json.loads(run_cli("check", str(job), "--model", "llama2-7b", "--hardware", "h100-80gb",
                               "--json")[1])["model_states"]
    assert states == pytest.approx([x * (4 + 12 / 2) / 16 for x in plain], rel=1e-4)


@pytest.mark.parametrize("text, phrase", [
    ("tensor_parallel_degree = 3\n", "must divide the model's heads"),
    ("tensor_parallel_degree = -1\n", "positive whole number"),
    ("data_parallel_shard_degree = -1\n", "torchtitan's -1"),
    ("expert_parallel_degree = 2\n", "must divide the model.s experts"),
    ("zero_stage = 2\ndata_parallel_shard_degree = 2\n", "keep one"),
    ("zero_stage = 4\n", "0, 1, 2 or 3"),
    ("context_parallel_degree = 3\n", "split evenly"),
    ("sequence_parallel = 1\n", "true or false"),
    ("pipeline_parallel_layers_per_stage = [8, -1]\n", "list of whole numbers"),
    ("tensor_parallel = 2\n", "has no key 'tensor_parallel'"),
])
def test_a_bad_parallelism_table_is_an_error_at_its_key(tmp_path, text, phrase):
    with pytest.raises(SchedcError, match=phrase) as e:
        setup(tmp_path, text)
    assert e.value.diagnostics[0].span is not None


def test_a_job_round_trips_through_its_json(tmp_path):
    s = setup(tmp_path, "data_parallel_shard_degree = 8\ntensor_parallel_degree = 2\ncontext_parallel_degree = 2\n"
                        "pipeline_parallel_degree = 4\ndecoder_first_pipeline_num_layers = 6\n")
    path = tmp_path / "again.json"
    path.write_text(json.dumps(s.to_dict()))
    assert describe(str(path)).parallel == s.parallel


@pytest.mark.parametrize("name, total, active", [("mixtral-8x7b", 46.7, 12.9), ("olmoe-1b-7b", 6.9, 1.3),
                                                 ("llama3-8b", 8.03, 8.03)])
def test_the_presets_have_their_published_sizes(name, total, active):
    """Mixtral's paper (46.7B, 12.9B active), OLMoE's (6.9B, 1.3B active), Llama 3's 8B."""
    m = describe(model=name, hardware="h100-80gb").model
    ends = 2 * estimate.embedding_params(m)
    assert (sum(estimate.layer_params(m, i) for i in range(m.layers)) + ends) / 1e9 == pytest.approx(total, abs=0.05)
    assert (sum(estimate.active_params(m, i) for i in range(m.layers)) + ends) / 1e9 == pytest.approx(active, abs=0.05)


@pytest.mark.parametrize("name, total, active, rel", [("deepseek-v3", 671, 37, 0.05), ("deepseek-v2-lite", 15.7, 2.4, 0.15)])
def test_the_deepseek_presets_are_near_their_published_sizes(name, total, active, rel):
    """DeepSeek-V3 (671B, 37B active) and V2-Lite (15.7B, 2.4B): MLA is approximated as full heads of
    h/a (docs/units.md, "Presets"), 18M weights a V3 layer too many, and both embedding matrices are
    counted active here (the reports count the output head only, or neither)."""
    m = describe(model=name, hardware="h100-80gb").model
    ends = 2 * estimate.embedding_params(m)
    assert [estimate.is_moe(m, i) for i in range(m.layers)].count(False) == m.first_dense_layers
    assert (sum(estimate.layer_params(m, i) for i in range(m.layers)) + ends) / 1e9 == pytest.approx(total, rel=0.01)
    assert (sum(estimate.active_params(m, i) for i in range(m.layers)) + ends) / 1e9 == pytest.approx(active, rel=rel)


def test_expert_parallelism_splits_the_experts(tmp_path):
    moe = 'preset = "mixtral-8x7b"\n'
    alone, ep = setup(tmp_path, "", moe), setup(tmp_path, "expert_parallel_degree = 8\n", moe)
    m = alone.model
    experts = estimate.expert_params(m, 0)
    for a, b in zip(alone.estimates(4), ep.estimates(4)):
        assert a.params - b.params == b.layers * (experts - experts // 8)
        assert a.activation_bytes == b.activation_bytes  # each rank still holds its tokens' k copies
    with pytest.raises(SchedcError, match="must divide the model's experts"):
        setup(tmp_path, "expert_parallel_degree = 3\n", moe)


def test_dense_layers_first_and_a_shared_expert(tmp_path):
    text = ('layers = 8\nhidden = 1024\nheads = 8\nseq_len = 2048\nvocab = 32000\ngated_mlp = true\nexperts = 16\n'
            'top_k = 4\nexpert_ffn_hidden = 512\nshared_expert_ffn_hidden = 1024\nfirst_dense_layers = 2\n')
    m = setup(tmp_path, "", text).model
    assert [estimate.is_moe(m, i) for i in range(4)] == [False, False, True, True]
    assert estimate.layer_params(m, 0) == estimate.attention_params(m) + 3 * 1024 * 4096
    assert estimate.layer_params(m, 2) == estimate.attention_params(m) + 1024 * 16 + 3 * 1024 * 1024 + 16 * 3 * 1024 * 512
    assert estimate.layer_activation_bytes(m, 2) != estimate.layer_activation_bytes(m, 0)
    with pytest.raises(SchedcError, match="give experts too"):
        setup(tmp_path, "", 'preset = "llama3-8b"\ntop_k = 2\n')
    with pytest.raises(SchedcError, match="must not exceed experts"):
        setup(tmp_path, "", 'preset = "mixtral-8x7b"\ntop_k = 9\n')
