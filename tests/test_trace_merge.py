"""`schedc trace merge`: rank event files and per-node traces merged into one trace, each message an
arrow from its post to its completion also when its two ends are in different inputs; a rank in two
inputs, a file that is neither, or inputs of different runs, is one line and exit 2. (tests/test_multinode.py
merges the traces of a real two-node run.)"""
from __future__ import annotations

import json

import pytest

from schedc.interop.chrome_trace import measured_trace, read_part


def part(rank: int, peer: int, sync: float = 100.0, **head_fields) -> list[dict]:
    """Rank `rank` of 2 (1F1B, one microbatch): rank 0 sends F(0,0) and receives B(1,0), rank 1 the reverse."""
    head = {"ev": "rank", "format": "schedc-run-trace", "version": 1, "rank": rank, "ranks": 2, "host": f"h{rank}",
            "pid": 1, "sync": sync, "schedule": "one", **head_fields}
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
    # every arrow joins two files, rank files too (each file is read on its own, then joined)
    assert stdout.endswith("from 2 file(s), 2 message arrows, 2 of them between files\n"), stdout
    assert doc["otherData"]["merged"] == [str(files / n) for n in inputs]  # each input, as given
    assert list(doc["otherData"]["stopped"]) == [str(files / n) for n in inputs]
    code, stdout, _ = run_cli("trace", "merge", *[str(files / n) for n in inputs], "-o", str(out), "--json")
    doc = json.loads(stdout)  # (docs/cli.md, "JSON": ok and errors)
    assert code == 0 and doc["messages"] == 2 and doc["ok"] is True and doc["errors"] == []
    gone = str(files / "gone.json")
    code, stdout, _ = run_cli("trace", "merge", str(files / inputs[0]), gone, "-o", str(out), "--json")
    doc = json.loads(stdout)  # an input error names the input it is about
    assert code == 2 and doc["ok"] is False and doc["file"] == gone and doc["errors"][0]["code"] == "io"


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


@pytest.mark.parametrize("field,other,said", [
    ("schedule", "two", "schedule one in {0}, two in {1}"),
    ("params", {"P": 2, "M": 3}, "parameters P=2,M=2 in {0}, P=2,M=3 in {1}"),
    ("ranks", 4, "rank count 2 in {0}, 4 in {1}"),
    ("run", "bbbb", "run id aaaa in {0}, bbbb in {1}"),
])
def test_parts_of_different_runs_are_refused(tmp_path, run_cli, field, other, said):
    """A rank or node of one run merged with one of another (a 1F1B node with a GPipe node, say) is
    refused, naming both files: what the two record of the run (schedule, parameters, rank count,
    run id) must agree. It used to merge them, arrows between unrelated messages."""
    base = {"params": {"P": 2, "M": 2}, "run": "aaaa"}
    (tmp_path / "a.jsonl").write_text(lines(part(0, 1, **base)))
    (tmp_path / "b.jsonl").write_text(lines(part(1, 0, **{**base, field: other})))
    node = measured_trace({1: read_part(lines(part(1, 0, **{**base, field: other})))})
    (tmp_path / "b.json").write_text(json.dumps(node))
    for second in ("b.jsonl", "b.json"):
        a, b = str(tmp_path / "a.jsonl"), str(tmp_path / second)
        code, _, stderr = run_cli("trace", "merge", a, b, "-o", str(tmp_path / "o.json"))
        assert code == 2 and f"{a} and {b} are not parts of one run: " + said.format(a, b) in stderr, stderr
        assert not (tmp_path / "o.json").exists()
    (tmp_path / "c.jsonl").write_text(lines(part(1, 0, **base)))
    code, _, stderr = run_cli("trace", "merge", str(tmp_path / "a.jsonl"), str(tmp_path / "c.jsonl"),
                              "-o", str(tmp_path / "o.json"))
    assert code == 0, stderr


def test_ranks_of_one_host_share_its_clock_across_files(tmp_path, run_cli):
    """Two nodes of one run on one host (one name, one boot): each node's trace has its own time 0
    (its ranks left the starting barrier 3 ms apart), but the merge puts both on the host's clock,
    so no arrow runs back in time, and counts one host. It used to keep each node's own time 0:
    arrows ran back by the barrier's spread (about 2.5 ms), and it counted 2 hosts."""
    same = {"host": "box", "boot": "b-1"}
    for r, sync in ((0, 100.0), (1, 100.003)):
        records = part(r, 1 - r, sync=100.0, **same)
        records[0]["sync"] = sync  # rank 1 left the barrier 3 ms after rank 0, on the same clock
        (tmp_path / f"node{r}.json").write_text(json.dumps(measured_trace({r: read_part(lines(records))})))
    out = tmp_path / "job.json"
    code, _, stderr = run_cli("trace", "merge", str(tmp_path / "node0.json"), str(tmp_path / "node1.json"),
                              "-o", str(out))
    assert code == 0, stderr
    doc = json.loads(out.read_text())
    ends: dict = {}
    for e in doc["traceEvents"]:
        if "bind_id" in e:
            ends.setdefault(e["bind_id"], {})["out" if e.get("flow_out") else "in"] = e["ts"]
    assert len(ends) == 2 and all(p["in"] >= p["out"] for p in ends.values()), ends
    assert doc["otherData"]["hosts"] == 1
    rank1 = min(e["ts"] for e in doc["traceEvents"] if e.get("pid") == 2 and "ts" in e)
    assert rank1 == pytest.approx(1000.0 + 2000.0)  # its first event, 1 ms after its sync, 3 ms after rank 0's
    # hosts apart (or of another boot) keep each its own time 0: nothing relates their clocks
    for r in (0, 1):
        records = part(r, 1 - r, sync=100.0 + 0.003 * r, host="box", boot=f"b-{r}")
        (tmp_path / f"node{r}.json").write_text(json.dumps(measured_trace({r: read_part(lines(records))})))
    code, _, stderr = run_cli("trace", "merge", str(tmp_path / "node0.json"), str(tmp_path / "node1.json"),
                              "-o", str(out))
    assert code == 0 and json.loads(out.read_text())["otherData"]["hosts"] == 2, stderr


def test_lines_left_out_are_counted_by_file(files, run_cli):
    """A rank file cut mid-line, or with lines that are not events, merges, and the merge says how
    many lines of which file it left out (it used to say nothing)."""
    text0 = lines(part(0, 1))
    (files / "rank0.jsonl").write_text(text0 + '{"ev": "compute", "k": 0, "x": 4, "na')
    (files / "rank1.jsonl").write_text('{"x": NaN}\n' + lines(part(1, 0)) + "[1,2\n")
    code, stdout, stderr = run_cli("trace", "merge", str(files / "rank0.jsonl"), str(files / "rank1.jsonl"),
                                   "-o", str(files / "job.json"), "--json")
    assert code == 0, stderr
    assert f"{files / 'rank0.jsonl'}: 1 line could not be read and was left out, the last cut short" in stderr
    assert f"{files / 'rank1.jsonl'}: 2 lines could not be read and were left out\n" in stderr
    assert json.loads(stdout)["unread_lines"] == {str(files / "rank0.jsonl"): {"lines": 1, "last_cut_short": True},
                                                  str(files / "rank1.jsonl"): {"lines": 2, "last_cut_short": False}}


def test_dash_writes_the_merged_trace_to_standard_output(files, run_cli, monkeypatch):
    """`-o -` is standard output (trial 2, item 15: it wrote a file named `-`); the line about it
    goes to standard error; with --json, whose object standard output holds, it is a usage error."""
    monkeypatch.chdir(files)
    code, stdout, stderr = run_cli("trace", "merge", "rank0.jsonl", "rank1.jsonl", "-o", "-")
    assert code == 0 and arrows(json.loads(stdout)) == WANT
    assert stderr.startswith("wrote standard output: ranks 0, 1 from 2 file(s)") and not (files / "-").exists()
    code, stdout, stderr = run_cli("trace", "merge", "rank0.jsonl", "rank1.jsonl", "-o", "-", "--json")
    assert code == 2 and "--json" in stderr and not (files / "-").exists()
