"""Communication in time (docs/units.md, "Time"): tensor-, context- and expert-parallel collectives
inside each stage's F and I, on the link their group spans, and an overlapped forward/backward pair
(DualPipe's) hiding one part's communication under the other's computation (schedc/rules/time.py)."""
from __future__ import annotations

import pytest

import schedc

from schedc.compare import compare
from schedc.costs import Costs
from schedc.hardware import describe
from schedc.jobs import comm, mesh
from schedc.rules.time import split_backward, step_time


def test_a_step_takes_its_action_or_its_pairs_larger_part():
    assert step_time([(3.0, 1.0)]) == 3.0  # one action: its time, communication included
    assert step_time([(2.0, 0.0), (3.0, 0.0)]) == 5.0  # a pair without communication: the sum, as before
    # a pair hides each part's communication under the other's computation: max(1 + 2, 1 + 1) = 3
    assert step_time([(2.0, 1.0), (3.0, 1.0)]) == 3.0
    assert step_time([(2.0, 1.5), (3.0, 2.5)]) == 4.0  # communication-bound: its sum


def test_tensor_parallel_collectives_by_hand(tmp_path):
    """llama3-8b, TP 2 within an H100 node (NVLink 4, 450 GB/s, 5 us): each layer's forward does two
    all-gathers and two reduce-scatters of s b h d = 8192 x 4096 x 2 bytes, each sending half of it."""
    nbytes = 8192 * 4096 * 2
    one = nbytes / 2 / 450e9 + 5e-6
    assert comm.ring(nbytes, 2, comm.Wire(450e9, 5e-6)) == pytest.approx(one)
    path = tmp_path / "tp.toml"
    path.write_text('[model]\npreset = "llama3-8b"\n[hardware]\npreset = "h100-80gb"\n'
                    '[parallelism]\ntensor_parallel_degree = 2\n')
    st = describe(str(path)).stage_settings(4)[1]  # 8 layers
    assert st["F_comm"] == pytest.approx(8 * 4 * one) and st["I_comm"] == pytest.approx(8 * 4 * one)
    assert st["W_comm"] == 0 and st["F"] > st["F_comm"]


def test_the_first_stage_backward_is_all_weight_gradient(tmp_path):
    """The first stage's input needs no gradient: torch's runtime skips its input backward and
    schedc's does its whole backward in W (a ZB-V run of examples/transformer.py: stage 0's I 4 us,
    its W 1.7 ms), so a described model's stage 0 takes I + W in W, with the collectives inside
    it, and no time in I; every other stage as before, and each stage's B is I + W."""
    assert split_backward(True, 3.0, 2.0, 0.5) == (0.0, 5.0, 0.0, 0.5)
    assert split_backward(False, 3.0, 2.0, 0.5) == (3.0, 2.0, 0.5, 0.0)
    path = tmp_path / "tp.toml"
    path.write_text('[model]\npreset = "llama3-8b"\n[hardware]\npreset = "h100-80gb"\n'
                    '[parallelism]\ntensor_parallel_degree = 2\n')
    settings = describe(str(path)).stage_settings(4)
    first, second = settings[0], settings[1]
    assert first["I"] == first["I_comm"] == 0 and first["W_comm"] > 0  # (its TP collectives, now in W)
    assert first["W"] >= second["I"] + second["W"] - 1e-9  # (the whole backward of its 8 layers)
    assert second["I"] > second["I_comm"] > 0 == second["W_comm"]
    program = Costs(str(path), derived=describe(str(path))).apply(schedc.load("zbv", {"P": 2, "M": 4}))
    for st, table in zip(program.annotations.stage_costs, settings.values()):
        assert (st.I, st.W) == pytest.approx((table["I"], table["W"])) and st.B == pytest.approx(st.I + st.W)


def test_a_group_wider_than_a_node_goes_over_the_network(tmp_path):
    x = comm.LayerShape(4096, 4096, 1024, 2, top_k=2)
    nvlink, ib = comm.Wire(450e9, 5e-6), comm.Wire(50e9, 1e-5)
    p = mesh.Parallel(ep=16)
    assert comm.expert_parallel(x, p, ib)[0] > 5 * comm.expert_parallel(x, p, nvlink)[0]
    path = tmp_path / "ep.toml"
    seconds = []
    for nodes in (8, 4):  # 8-way EP inside an 8-GPU node, then across two 4-GPU nodes
        path.write_text('[model]\npreset = "mixtral-8x7b"\n[hardware]\npreset = "h100-80gb"\n'
                        f'gpus_per_node = {nodes}\n[parallelism]\nexpert_parallel_degree = 8\n')
        seconds.append(describe(str(path)).stage_settings(4)[1]["F_comm"])
    assert seconds[1] > 5 * seconds[0]


def job(tmp_path, model: str, parallelism: str):
    path = tmp_path / f"{model}.toml"
    path.write_text(f'[model]\npreset = "{model}"\n[activation_checkpoint]\nmode = "full"\n'
                    f'[hardware]\npreset = "h100-80gb"\n[parallelism]\n{parallelism}')
    setup = describe(str(path))
    rows = compare(["dualpipev", "zbv"], {"P": 4, "M": 16}, costs=Costs("job", derived=setup))
    return {r.name: r.makespan for r in rows}


def test_dualpipev_pays_off_where_there_is_communication_to_hide(tmp_path):
    """As DeepSeek-V3's report argues: with expert parallelism's all-to-all across nodes (Mixtral, 8-way
    EP beside 2-way TP: 16 GPUs), the overlapped pairs of DualPipeV hide it and it beats ZB-V; a dense
    model with nothing to hide gains nothing from them (and keeps ZB-V's smaller bubble)."""
    moe = job(tmp_path, "mixtral-8x7b", "data_parallel_shard_degree = 8\nexpert_parallel_degree = 8\n"
                                        "tensor_parallel_degree = 2\n")
    assert moe["dualpipev"] < 0.95 * moe["zbv"]
    dense = job(tmp_path, "llama3-8b", "data_parallel_shard_degree = 8\n")
    assert dense["dualpipev"] >= dense["zbv"]


def test_costs_files_keep_their_word(tmp_path, run_cli):
    """A cost file that sets F shorter than the description's communication wins (the communication
    hidden is at most the time)."""
    path = tmp_path / "tp.toml"
    path.write_text('[model]\npreset = "llama3-8b"\n[hardware]\npreset = "h100-80gb"\n'
                    '[parallelism]\ntensor_parallel_degree = 2\n')
    code, out, err = run_cli("sim", "dualpipev", "--param", "P=4,M=8", "--setup", str(path), "--cost", "F=1e-9")
    assert code == 0, err
