"""`schedc run` and `--print-torchrun` on several nodes, tested as two "nodes" on 127.0.0.1.

Node K of N runs global ranks K*R..K*R+R-1 (R = --nproc, the ranks per node) and meets the others at
--rdzv-endpoint, as torchrun's static rendezvous does. Both forms (two `schedc run` processes, and
the two torchrun lines `--print-torchrun` prints, run as `python -m torch.distributed.run`) must
train exactly as one node does: the same losses, in float64.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCHEDULE = ["1f1b", "--param", "P=2,M=4", "--model", "examples.mlp:build_stages"]
TRAIN = ["--steps", "2", "--timeout", "60", "--dtype", "float64"]
LOSS = re.compile(r"^step (\d+)/\d+ .* loss (\S+)$", re.M)
LIMIT = 90  # seconds any pair of processes may take, far above the few seconds they need


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))


def _port() -> int:
    from schedc.runtime.launch import free_port
    return free_port()


def _losses(text: str) -> list[tuple[int, float]]:
    return [(int(k), float(v)) for k, v in LOSS.findall(text)]


def _together(commands: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Run the commands at once (each leading its own process group) and wait for all; on a failure
    or a timeout, every process group still alive is killed."""
    procs = [subprocess.Popen(c, cwd=ROOT, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, process_group=0) for c in commands]
    try:
        outs = [p.communicate(timeout=LIMIT) for p in procs]
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # anything left in the node's group (its ranks, torchrun's workers)
            except (ProcessLookupError, PermissionError):
                pass
            if p.poll() is None:
                p.kill()
            p.wait()
    return [subprocess.CompletedProcess(c, p.returncode, o, e) for c, p, (o, e) in zip(commands, procs, outs)]


def _report(results) -> str:
    return "\n".join(f"$ {shlex.join(r.args)}  # exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-3000:]}"
                     for r in results)


@pytest.fixture(scope="module")
def one_node() -> list[tuple[int, float]]:
    """The losses of the same training on one node, two local ranks."""
    (res,) = _together([[sys.executable, "-m", "schedc", "run", *SCHEDULE, "--nproc", "2", *TRAIN]])
    assert res.returncode == 0, _report([res])
    losses = _losses(res.stdout)
    assert [k for k, _ in losses] == [1, 2], res.stdout
    return losses


@pytest.mark.slow
def test_two_schedc_run_nodes_train_as_one_node_does(one_node, tmp_path):
    import json
    port = _port()
    results = _together([[sys.executable, "-m", "schedc", "run", *SCHEDULE, "--nnodes", "2", "--node-rank", str(k),
                          "--rdzv-endpoint", f"127.0.0.1:{port}", "--nproc", "1", *TRAIN,
                          "--trace", str(tmp_path / f"node{k}.json")] for k in (0, 1)])
    assert all(r.returncode == 0 for r in results), _report(results)
    # stage 1, which prints the losses, is rank 1: node 1's only rank
    assert _losses(results[0].stdout) == [], _report(results)
    assert _losses(results[1].stdout) == one_node, _report(results)
    for k in (0, 1):  # each node's trace holds its own (global) rank
        trace = json.loads((tmp_path / f"node{k}.json").read_text())
        names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
        assert {n for n in names if n.startswith("rank ")} == {f"rank {k}"}, names
        assert trace["otherData"]["missing_ranks"] == [], trace["otherData"]
    # one trace of the job: both ranks, and every message an arrow from one node's post to the other's receive
    merged = tmp_path / "job.json"
    res = subprocess.run([sys.executable, "-m", "schedc", "trace", "merge", str(tmp_path / "node0.json"),
                          str(tmp_path / "node1.json"), "-o", str(merged)], capture_output=True, text=True,
                         timeout=LIMIT, cwd=ROOT, env=_env())
    assert res.returncode == 0, res.stderr
    assert "ranks 0, 1 from 2 file(s), 16 message arrows, 16 of them between files" in res.stdout  # 2 steps x 2M
    events = json.loads(merged.read_text())["traceEvents"]
    ends = {}
    for e in events:
        if "bind_id" in e:
            ends.setdefault(e["bind_id"], {})["out" if e.get("flow_out") else "in"] = e
    assert len(ends) == 16 and all({p["out"]["pid"], p["in"]["pid"]} == {1, 2} for p in ends.values())
    assert all((p["out"]["cat"], p["in"]["cat"]) == ("posted", "done") for p in ends.values())
    # both nodes run on this machine: one clock, so no arrow runs back in time (each node's own time 0
    # used to be kept, and arrows ran back by the spread of the starting barrier, about 2 ms)
    assert all(p["in"]["ts"] >= p["out"]["ts"] for p in ends.values()), ends
    assert json.loads(merged.read_text())["otherData"]["hosts"] == 1


@pytest.mark.slow  # 6-9 s: two torchrun nodes (the two-node run itself stays in the default tier)
@pytest.mark.slow
def test_the_printed_torchrun_lines_run_as_two_nodes(tmp_path, run_cli, one_node):
    port = _port()
    code, out, err = run_cli("run", *SCHEDULE, *TRAIN, "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}",
                             "--print-torchrun", "-o", str(tmp_path))
    assert code == 0, err
    lines = [shlex.split(line) for line in out.splitlines() if line.startswith("torchrun ")]
    program = str(tmp_path / "1f1b_program.py")
    assert lines == [["torchrun", "--nnodes=2", f"--node-rank={k}", "--nproc-per-node=1",
                      f"--rdzv-endpoint=127.0.0.1:{port}", program, "--model", "examples.mlp:build_stages",
                      "--steps", "2", "--timeout", "60.0", "--backend", "gloo", "--dtype", "float64"] for k in (0, 1)]
    results = _together([[sys.executable, "-m", "torch.distributed.run", *line[1:]] for line in lines])
    assert all(r.returncode == 0 for r in results), _report(results)
    assert _losses(results[0].stdout) == [] and _losses(results[1].stdout) == one_node, _report(results)


def test_print_torchrun_for_one_node_of_several(tmp_path, run_cli):
    code, out, err = run_cli("run", "1f1b", "--param", "P=4,M=4", "--model", "examples.mlp:build_stages",
                             "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "node0.example:29500",
                             "--print-torchrun", "-o", str(tmp_path))
    assert code == 0, err
    (line,) = [line for line in out.splitlines() if line.startswith("torchrun ")]
    assert line.startswith("torchrun --nnodes=2 --node-rank=1 --nproc-per-node=2 "
                           f"--rdzv-endpoint=node0.example:29500 {tmp_path / '1f1b_program.py'} --model "), line
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                             "--print-torchrun", "-o", str(tmp_path))  # one node: as before
    assert code == 0 and f"\ntorchrun --nproc-per-node=2 {tmp_path / '1f1b_program.py'} --model " in out, err


@pytest.mark.parametrize("extra, message", [
    (["--nnodes", "2"], "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:29500"], "--nnodes 2 needs this node's --node-rank (0..1)"),
    (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:29500"], "--node-rank 2: expected 0..1"),
    (["--node-rank", "1"], "--node-rank 1: expected 0..0 for --nnodes 1"),
    (["--nnodes", "0"], "--nnodes 0: expected at least 1 node"),
    (["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h"], "--rdzv-endpoint h: expected HOST:PORT"),
    (["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h:0"], "expected HOST:PORT"),
    (["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h:x"], "expected HOST:PORT"),
    (["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "$(id);x:29500"], "expected HOST:PORT"),
    (["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "fd00::1:29500"],
     "an IPv6 host goes in brackets, as [fd00::1]:29500"),
    (["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h:1", "--nproc", "2"],
     "--nproc 2 on each of --nnodes 2 is 4 ranks, but 1f1b runs on 2 ranks"),
    (["--nnodes", "3", "--node-rank", "0", "--rdzv-endpoint", "h:1"],
     "--nnodes 3: 1f1b runs on 2 ranks, which do not split evenly over 3 nodes"),
    (["--nproc", "0"], "--nproc 0: expected at least 1 rank"),
    (["--nproc", "3"], "--nproc 3: 1f1b runs on 2 ranks"),
])
def test_contradicting_node_options_are_one_line_before_any_rank_starts(run_cli, monkeypatch, extra, message):
    import schedc.runtime.launch

    def refuse(*args, **kwargs):
        raise AssertionError("a rank was started")
    monkeypatch.setattr(schedc.runtime.launch, "launch", refuse)
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                             "--steps", "1", *extra)
    assert code == 2 and message in err and err.count("\n") == 1, (out, err)


def test_launch_numbers_a_nodes_ranks_globally(tmp_path):
    from schedc.runtime.launch import launch
    import io
    out = io.StringIO()
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
             "OMP_NUM_THREADS")
    code = f"import os; print(' '.join(os.environ[n] for n in {names!r}))"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = launch([sys.executable, "-c", code], 2, stdout=out, nnodes=3, node_rank=2, master_addr="10.1.2.3",
                  master_port=29511, env=env, deadline=60)
    assert done.ok, out.getvalue()
    assert sorted(out.getvalue().splitlines()) == ["4 0 6 2 2 10.1.2.3 29511 1", "5 1 6 2 2 10.1.2.3 29511 1"]
    with pytest.raises(ValueError):
        launch([sys.executable, "-c", ""], 1, nnodes=2, node_rank=0)  # several nodes need the endpoint's port


@pytest.mark.parametrize("extra, message", [
    (["--model", "examples.mlp:build_stages;id"], "--model examples.mlp:build_stages;id: expected pkg.module:function"),
    (["--model", "examples.mlp:build_stages", "--nnodes", "2", "--rdzv-endpoint", "fd00::1:29500"],
     "an IPv6 host goes in brackets"),
])
def test_a_printed_torchrun_line_is_checked_as_far_as_this_machine_can(run_cli, tmp_path, extra, message):
    """--print-torchrun leaves finding the model's module to the machines that run the line, but its
    form, and the endpoint's, are checked here: a line that cannot run is not printed."""
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", *extra, "--print-torchrun", "-o", str(tmp_path))
    assert code == 2 and out == "" and message in err, (out, err)
    assert not list(tmp_path.iterdir())


def test_a_bracketed_ipv6_endpoint_is_printed_in_brackets(run_cli, tmp_path):
    code, out, err = run_cli("run", "1f1b", "--param", "P=2,M=2", "--model", "examples.mlp:build_stages",
                             "--nnodes", "2", "--rdzv-endpoint", "[fd00::1]:29500", "--print-torchrun", "-o",
                             str(tmp_path))
    assert code == 0 and "--rdzv-endpoint=[fd00::1]:29500" in out, (out, err)
