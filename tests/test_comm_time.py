"""Communication in time (docs/units.md, "Time"): tensor-, context- and expert-parallel collectives
inside each stage's F and I, on the link their group spans, and an overlapped forward/backward pair
(DualPipe's) hiding one part's communication under the other's computation (schedc/rules/time.py)."""
from __future__ import annotations

import pytest

from schedc.compare import compare
from schedc.costs import Costs
from schedc.hardware import describe
from schedc.jobs import comm, mesh
from schedc.rules.time import step_time


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
