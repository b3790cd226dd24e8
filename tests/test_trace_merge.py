"""`schedc trace merge`: rank event files and per-node traces merged into one trace, each message an
arrow from its post to its completion also when its two ends are in different inputs; a rank in two
inputs, or a file that is neither, is one line and exit 2. (tests/test_multinode.py merges the traces
of a real two-node run.)"""
from __future__ import annotations

import json

import pytest

from schedc.interop.chrome_trace import measured_trace, read_part


def part(rank: int, peer: int, sync: float = 100.0) -> list[dict]:
    """Rank `rank` of 2 (1F1B, one microbatch): rank 0 sends F(0,0) and receives B(1,0), rank 1 the reverse."""
    head = {"ev": "rank", "format": "schedc-run-trace", "version": 1, "rank": rank, "ranks": 2, "host": f"h{rank}",
            "pid": 1, "sync": sync, "schedule": "one"}
    base = sync + 0.001
    if rank == 0:
        return [head, {"ev": "compute", "k": 0, "x": 0, "name": "F(0,0)", "t0": base, "t1": base + 0.001},
                {"ev": "post", "k": 0, "x": 1, "name": "SEND_F(0,0)", "t0": base + 0.001, "t1": base + 0.0011,
                 "value": ["act", 0, 0], "peer": peer, "at": base + 0.001},
                {"ev": "done", "k": 0, "x": 2, "name": "RECV_B(0,0) done", "t": base + 0.006, "value": ["grad", 1, 0]},
                {"ev": "compute", "k": 0, "x": 3, "name": "B(0,0)", "t0": base + 0.006, "t1": base + 0.008}]
    return [head, {"ev": "done", "k": 0, "x": 0, "name": "RECV_F(1,0) done", "t": base + 0.002, "value": ["act", 0, 0]},
            {"ev": "compute", "k": 0, "x": 1, "name": "F(1,0)", "t0": base + 0.002, "t1": base + 0.003},
            {"ev": "compute", "k": 0, "x": 2, "name": "B(1,0)", "t0": base + 0.003, "t1": base + 0.005},
            {"ev": "post", "k": 0, "x": 3, "name": "SEND_B(1,0)", "t0": base + 0.005, "t1": base + 0.0051,
             "value": ["grad", 1, 0], "peer": peer, "at": base + 0.005}]


def lines(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def arrows(doc: dict) -> list[tuple[str, str]]:
    ends: dict = {}
    for e in doc["traceEvents"]:
        if "bind_id" in e:
            ends.setdefault(e["bind_id"], {})["out" if e.get("flow_out") else "in"] = e["name"]
    return sorted((p["out"], p["in"]) for p in ends.values())


WANT = [("SEND_B(1,0) posted", "RECV_B(0,0) done"), ("SEND_F(0,0) posted", "RECV_F(1,0) done")]


@pytest.fixture
def files(tmp_path):
    out = {}
    for r in (0, 1):
        (tmp_path / f"rank{r}.jsonl").write_text(lines(part(r, 1 - r)))
        node = measured_trace({r: read_part(lines(part(r, 1 - r)))})
        assert arrows(node) == []  # a node alone: each message has one end only
        (tmp_path / f"node{r}.json").write_text(json.dumps(node))
        out[r] = tmp_path
    return tmp_path


@pytest.mark.parametrize("inputs", [["node0.json", "node1.json"], ["rank0.jsonl", "rank1.jsonl"],
                                    ["node0.json", "rank1.jsonl"]])
def test_the_merged_trace_has_every_rank_and_an_arrow_per_message(files, run_cli, inputs):
    out = files / "job.json"
    code, stdout, stderr = run_cli("trace", "merge", *[str(files / n) for n in inputs], "-o", str(out))
    assert code == 0, stderr
    doc = json.loads(out.read_text())
    assert arrows(doc) == WANT
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name" and e["pid"]}
    assert names == {"rank 0", "rank 1"} and doc["otherData"]["ranks"] == [0, 1]
    between = 0 if inputs[0].endswith(".jsonl") else 2  # rank files are read as one run: arrows made there
    assert stdout.endswith(f"from 2 file(s), 2 message arrows, {between} of them between files\n"), stdout
    code, stdout, _ = run_cli("trace", "merge", *[str(files / n) for n in inputs], "-o", str(out), "--json")
    assert code == 0 and json.loads(stdout)["messages"] == 2


@pytest.mark.parametrize("inputs,message", [
    (["node0.json", "rank0.jsonl"], "rank 0 is in both"),
    (["node0.json", "node0.json"], "a trace is given twice"),
    (["node0.json", "junk.txt"], "neither a trace"),
    (["node0.json", "bad.json"], "not a trace schedc wrote"),
])
def test_what_cannot_be_merged_is_one_line(files, run_cli, inputs, message):
    (files / "junk.txt").write_text("hello\n")
    (files / "bad.json").write_text('{"traceEvents": [], "otherData": {}}')
    code, stdout, stderr = run_cli("trace", "merge", *[str(files / n) for n in inputs], "-o", str(files / "o.json"))
    assert code == 2 and message in stderr and stderr.count("\n") == 1, stderr
    assert not (files / "o.json").exists()


def test_lines_this_reader_does_not_know_are_left_out(files, run_cli):
    """A rank file with lines no rank writes (an `ev` that is a list or an object, no `ev` at all,
    a known `ev` missing its fields) merges as if they were not there: each used to stop the
    reader (unhashable list, or a KeyError on the record without `ev`) instead."""
    stray = ['{"ev": ["compute"]}', '{"ev": {"k": 0}}', '{"?": 1}', '{"ev": "compute", "k": 0}', "[1, 2]", "7"]
    for r in (0, 1):
        text = lines(part(r, 1 - r))
        assert read_part(text + "\n".join(stray) + "\n") == part(r, 1 - r)
        (files / f"rank{r}.jsonl").write_text(text + "\n".join(stray) + "\n")
    out = files / "job.json"
    code, _, stderr = run_cli("trace", "merge", str(files / "rank0.jsonl"), str(files / "rank1.jsonl"), "-o", str(out))
    assert code == 0, stderr
    assert arrows(json.loads(out.read_text())) == WANT


def test_dash_writes_the_merged_trace_to_standard_output(files, run_cli, monkeypatch):
    """`-o -` is standard output (trial 2, item 15: it wrote a file named `-`); the line about it
    goes to standard error; with --json, whose object standard output holds, it is a usage error."""
    monkeypatch.chdir(files)
    code, stdout, stderr = run_cli("trace", "merge", "rank0.jsonl", "rank1.jsonl", "-o", "-")
    assert code == 0 and arrows(json.loads(stdout)) == WANT
    assert stderr.startswith("wrote standard output: ranks 0, 1 from 2 file(s)") and not (files / "-").exists()
    code, stdout, stderr = run_cli("trace", "merge", "rank0.jsonl", "rank1.jsonl", "-o", "-", "--json")
    assert code == 2 and "--json" in stderr and not (files / "-").exists()
