"""Chrome / Perfetto traces, simulated and measured: each rank a process with a compute and a
communication track, slices that nest, the actions of each rank in program order, and every
message an arrow from its send's post to its receive's completion that never runs back in time and
joins the right send and receive. One `schedc run --trace` on gloo checks the measured trace.
"""
from __future__ import annotations

import errno
import json
import os
import re

import pytest

import schedc
from conftest import compile_text
from schedc.interop.chrome_trace import chrome_trace, measured_trace, pid_of, read_part, tid_of
from schedc.ir import Compound, CompoundKind, describe
from schedc.passes import lower
from schedc.resources import builtin_schedules
from schedc.simulate import simulate

TOL = 1e-6  # microseconds: timestamps are rounded to nanoseconds
ACTION = re.compile(r"(SEND_F|SEND_B|RECV_F|RECV_B)\((\d+),(\d+)\)")


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def check_layout(doc: dict) -> dict[int, int]:
    """Every rank a process `rank R` with threads `compute` and `communication`; slices of non-negative
    length that nest on each track (never overlap partly). Returns pid -> rank."""
    events = _strict(json.dumps(doc))["traceEvents"]
    assert {e["ph"] for e in events} <= {"M", "X", "b", "e", "C", "i"}
    ranks = {e["pid"]: int(e["args"]["name"].split()[1]) for e in events
             if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] != 0}
    assert all(pid == pid_of(r) for pid, r in ranks.items())
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {(pid_of(r), tid_of(r, t)): name for r in ranks.values()
                       for t, name in enumerate(("compute", "communication"))}
    tracks: dict = {}
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0 and (e["pid"], e["tid"]) in threads, e
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for slices in tracks.values():
        stack: list[float] = []
        for e in sorted(slices, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1] <= e["ts"] + TOL:
                stack.pop()
            assert not stack or e["ts"] + e["dur"] <= stack[-1] + TOL, f"{e['name']} overlaps a slice partly"
            stack.append(e["ts"] + e["dur"])
    return ranks


def check_flows(doc: dict, placement) -> list[tuple[str, str]]:
    """Every arrow: one slice leaves it, one receives it; it runs forward in time, from the post of
    SEND_F(s,m) (SEND_B(s,m)) on the rank of s to the completion of RECV_F(s+1,m) (RECV_B(s-1,m)) on
    the rank of that stage, both instants on the communication track. Returns (send, receive) names."""
    ranks = check_layout(doc)
    outs, ins = {}, {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and "bind_id" in e:
            side = outs if e.get("flow_out") else ins
            assert e.get("flow_out") != e.get("flow_in") and e["bind_id"] not in side
            side[e["bind_id"]] = e
    assert set(outs) == set(ins)
    pairs = []
    for fid, out in outs.items():
        into = ins[fid]
        assert into["ts"] >= out["ts"] + out["dur"] - TOL, (out, into)  # arrow end >= arrow start
        send = ACTION.fullmatch(out["name"].removesuffix(" posted"))
        recv = ACTION.fullmatch(into["name"].removesuffix(" done"))
        assert send and recv and out["name"].endswith(" posted") and into["name"].endswith(" done"), (out, into)
        assert out["dur"] == into["dur"] == 0
        op, s, m = send.group(1), int(send.group(2)), int(send.group(3))
        peer = s + 1 if op == "SEND_F" else s - 1
        assert op in ("SEND_F", "SEND_B") and recv.groups() == (op.replace("SEND", "RECV"), str(peer), str(m))
        assert ranks[out["pid"]] == placement[s] and ranks[into["pid"]] == placement[peer]
        assert out["tid"] == tid_of(placement[s], 1) and into["tid"] == tid_of(placement[peer], 1)
        pairs.append((out["name"], into["name"]))
    return pairs


def messages_of(program) -> int:
    """Values that cross ranks: each activation and each input gradient over a stage boundary whose
    two stages live on different ranks."""
    p = program.placement
    if program.routes:  # (each route's boundaries, for its microbatches)
        return sum(2 * (r.microbatches[1] - r.microbatches[0]) * sum(p[s] != p[s + 1] for s in range(*r.stages)
                                                                     if s + 1 < r.stages[1]) for r in program.routes)
    return 2 * program.num_microbatches * sum(p[s] != p[s + 1] for s in range(program.num_stages - 1))


def check_program_order(doc: dict, program) -> None:
    """The action slices of each rank (compute, and at the comms level each send, receive and
    collective) are the rank's steps, in program order and in time order."""
    comms = any(a.op.value.startswith(("SEND", "RECV")) for steps in program.ranks for st in steps for a in st.parts)
    for r, steps in enumerate(program.ranks):
        got: dict[int, list] = {}
        for e in doc["traceEvents"]:
            if (e["ph"] == "X" and e["pid"] == pid_of(r) and e["cat"] not in ("wait", "done", "posted")
                    and (comms or e["tid"] == tid_of(r, 0) or e["cat"] == "collective")):
                got.setdefault(e["args"]["step"], []).append(e)
        assert sorted(got) == list(range(len(steps)))
        last = 0.0
        for x, st in enumerate(steps):
            names = [e["name"] for e in got[x]]
            if isinstance(st, Compound) and st.kind is CompoundKind.OVERLAP_F_B:
                assert names == [f"OVERLAP_F_B({', '.join(describe(a) for a in st.parts)})"]
            else:
                assert sorted(names) == sorted(describe(a) for a in st.parts)
            assert min(e["ts"] for e in got[x]) >= last - TOL
            last = max(e["ts"] for e in got[x])


def _builtins():
    for name in builtin_schedules():
        for P in ((2, 4) if name == "dualpipe" else (2, 3)):  # (DualPipe: P even)
            yield name, schedc.load(name, {"P": P, "M": 2 * P, "V": 2}, strict_params=False)


@pytest.mark.parametrize("costs", ["", "F=1,B=2,latency=0.25", "F=1,I=1,W=1,latency=0.5,bandwidth=4,overhead=0.1"])
def test_every_arrow_runs_forward_from_its_send_to_its_receive(costs):
    from schedc.costs import parse_cost_option
    checked = 0
    for name, program in _builtins():
        for level in ("compute", "comms"):
            p = program if level == "compute" else lower(program)
            option = parse_cost_option(costs) if costs else None
            links = option.links(option.apply(p)) if option else None
            p = option.apply(p) if option else p
            for overlap in (True, False):
                tl = simulate(p, overlap=overlap, links=links)
                doc = chrome_trace(tl)
                pairs = check_flows(doc, p.placement)
                assert len(pairs) == len(tl.messages) == messages_of(program), (name, level)
                check_program_order(doc, p)
                checked += 1
    assert checked == 2 * 2 * 2 * len(builtin_schedules())


def test_the_arrows_of_a_communication_level_program_used_to_run_backwards():
    """1F1B lowered, P=2, M=4: receives are posted before their sends; each arrow still starts at
    the send's post and ends at the receive's completion, which is the message's arrival."""
    tl = simulate(lower(schedc.load("1f1b", {"P": 2, "M": 4})))
    doc = chrome_trace(tl)
    check_flows(doc, tl.program.placement)
    by_id = {}
    for e in doc["traceEvents"]:
        if "bind_id" in e:
            by_id.setdefault(e["bind_id"], {})["out" if e.get("flow_out") else "in"] = e
    early = 0
    for i, m in enumerate(tl.messages):
        pair = by_id[i + 1]
        assert pair["in"]["ts"] == round(m.arrival * 1e6, 3)
        assert pair["out"]["ts"] == round(tl.posted[m.src_rank][m.src_step] * 1e6, 3)
        early += tl.start[m.dst_rank][m.dst_step] < tl.start[m.src_rank][m.src_step]
    assert early >= 4  # the receives posted before their sends: the arrows that ran backwards


def test_a_group_and_an_overlap_pair():
    grouped = compile_text("schedule grouped {\n"
                           "  rank 0: 0F0 0SEND_F0 0F1 (0SEND_F1;0RECV_B0)GROUP 0B0 0RECV_B1 0B1\n"
                           "  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n}")
    for overlap in (True, False):
        doc = chrome_trace(simulate(grouped, overlap=overlap))
        assert len(check_flows(doc, grouped.placement)) == 4
        check_program_order(doc, grouped)
        members = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["args"].get("group")]
        assert sorted(e["name"] for e in members) == ["RECV_B(0,0)", "SEND_F(0,1)"]
    pair = compile_text("schedule o {\n rank 0: 0F0 (0F1;0B0)OVERLAP_F_B 0B1\n rank 1: 1F0 1B0 1F1 1B1\n}")
    tl = simulate(pair)
    doc = chrome_trace(tl)
    check_flows(doc, pair.placement)
    check_program_order(doc, pair)
    step = next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["args"].get("kind") == "OVERLAP_F_B")
    assert step["name"] == "OVERLAP_F_B(F(0,1), B(0,0))" and step["args"]["parts"] == ["F(0,1)", "B(0,0)"]
    counters = [e["args"]["live"] for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "memory rank 0"]
    assert max(counters) == tl.peak_memory[0] == 2 and counters[-1] == 0


def test_a_rank_waiting_for_a_message_shows_the_wait():
    # GPipe on 2 ranks, lowered: rank 1 posts its receive at once and waits for the activation;
    # the wait ends as the receive completes
    tl = simulate(lower(compile_text("schedule g {\n rank 0: 0F0 0F1 0B0 0B1\n rank 1: 1F0 1F1 1B0 1B1\n}")))
    doc = chrome_trace(tl)
    waits = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "wait" and e["pid"] == pid_of(1)]
    done = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "done"}
    assert [w["name"] for w in waits][:1] == ["wait RECV_F(1,0)"]
    assert waits[0]["ts"] + waits[0]["dur"] == done["RECV_F(1,0) done"]["ts"]


def _part(rank, host, sync, events, *, pid=100):
    lines = [json.dumps({"ev": "rank", "format": "schedc-run-trace", "version": 1, "rank": rank, "ranks": 2,
                         "host": host, "pid": pid + rank, "sync": sync, "schedule": "two"})]
    lines += [json.dumps(e) for e in events]
    return "\n".join(lines) + "\n"


def test_measured_events_become_the_same_layout_with_clocks_aligned():
    """Two hosts whose clocks differ by 1000 s: each host's time 0 is its barrier; the arrow joins
    the send's post to the receive's completion; a line cut short by a stop is left out; the
    watchdog's stop is an unfinished slice and a note."""
    a = [{"ev": "compute", "k": 1, "x": 0, "name": "F(0,0)", "t0": 10.0, "t1": 10.5},
         {"ev": "post", "k": 1, "x": 1, "name": "SEND_F(0,0)", "t0": 10.5, "t1": 10.6, "value": ["act", 0, 0],
          "peer": 1, "at": 10.55},
         {"ev": "wait", "k": 1, "x": 1, "name": "wait SEND_F(0,0)", "t0": 10.6, "t1": 11.0}]
    b = [{"ev": "post", "k": 1, "x": 0, "name": "RECV_F(1,0)", "t0": 1010.1, "t1": 1010.2, "value": ["act", 0, 0],
          "peer": 0},
         {"ev": "wait", "k": 1, "x": 0, "name": "wait RECV_F(1,0)", "t0": 1010.2, "t1": 1010.8},
         {"ev": "done", "k": 1, "x": 0, "name": "RECV_F(1,0) done", "t": 1010.8, "value": ["act", 0, 0]},
         {"ev": "stop", "t": 1013.0, "report": "schedc watchdog: rank 1 ran F(1,0) ...", "name": "F(1,0)",
          "since": 1010.9, "kind": "compute"}]
    parts = {0: read_part(_part(0, "a", 10.0, a)), 1: read_part(_part(1, "b", 1010.0, b) + '{"ev": "comp')}
    doc = measured_trace(parts, stopped={"how": "failed"})
    assert check_flows(doc, (0, 1)) == [("SEND_F(0,0) posted", "RECV_F(1,0) done")]
    x = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X"}
    assert x["SEND_F(0,0)"]["ts"] == 500000 and x["SEND_F(0,0)"]["dur"] == pytest.approx(100000)
    assert x["SEND_F(0,0) posted"]["ts"] == pytest.approx(550000)  # the data was issued inside the call
    assert x["RECV_F(1,0) done"]["ts"] == pytest.approx(800000)
    assert x["F(1,0)"]["args"]["unfinished"] and x["F(1,0)"]["tid"] == tid_of(1, 0)
    assert x["F(1,0)"]["ts"] == pytest.approx(900000) and x["F(1,0)"]["dur"] == pytest.approx(2100000)
    other = doc["otherData"]
    assert other["hosts"] == 2 and other["messages"] == 1 and other["source"] == "measured"
    assert [(s["rank"], s["name"]) for s in other["watchdog"]] == [(1, "F(1,0)")]
    assert measured_trace({0: [], 1: parts[1]})["otherData"]["missing_ranks"] == [0]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_rank_whose_event_file_fails_keeps_running_and_keeps_why():
    """A rank's event file on a full disk: the write fails, the rank is not stopped mid-run (its
    peers would wait for it), and the recorder keeps why, for the rank to say once it is done."""
    from schedc.runtime.trace import Recorder
    recorder = Recorder("/dev/full", rank=0, ranks=2, schedule="1f1b")
    recorder.start(0.0)
    recorder.compute(1, 0, "F(0,0)", 0.0, 1.0)
    recorder.close()
    assert recorder.error is not None and recorder.error.errno == errno.ENOSPC


def test_schedc_run_writes_the_measured_trace(tmp_path, run_cli):
    """A run of ZB-V on 2 ranks (4 stages, split backward) on gloo: the trace holds, for every rank
    and training step, the rank's actions in program order, and one forward arrow per message."""
    from schedc.lower import lower_to_torch
    trace = tmp_path / "run.json"
    code, out, err = run_cli("run", "zbv", "--param", "P=2,M=4", "--model", "examples.mlp:build_stages",
                             "--steps", "2", "--timeout", "60", "--batch-size", "8", "--trace", str(trace))
    assert code == 0, (out, err)
    assert f"schedc run: wrote the trace {trace}\n" in err
    doc = _strict(trace.read_text())
    # what the run ran: receives posted early (the default on gloo, where the program so lowered checks)
    table = lower_to_torch(schedc.load("zbv", {"P": 2, "M": 4}), receives="early").table
    pairs = check_flows(doc, table.placement)
    assert len(pairs) == 2 * messages_of(schedc.load("zbv", {"P": 2, "M": 4}))  # two training steps
    other = doc["otherData"]
    assert other["source"] == "measured" and other["ranks"] == [0, 1] and other["watchdog"] == []
    assert other["stopped"] == {"how": "finished", "exit_codes": [0, 0], "stopped_by_launcher": []}
    for r, steps in enumerate(table.ranks):
        expected = [n for st in steps for n in _action_names(st)]
        for k in (1, 2):
            got = sorted((e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == pid_of(r)
                          and e["args"].get("train_step") == k and e["cat"] not in ("wait", "done", "posted", "phase")),
                         key=lambda e: (e["ts"], e["args"]["step"]))
            assert [e["name"] for e in got] == expected, (r, k)
            assert [e["args"]["step"] for e in got] == sorted(e["args"]["step"] for e in got)
        phases = [e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == pid_of(r)
                  and e["cat"] == "phase"]
        assert phases == ["make_batch", "the optimizer step"] * 2


def _action_names(st):
    from schedc.runtime.trace import step_name
    if getattr(st, "kind", None) == "GROUP":
        return [str(p) for p in st.parts]
    return [step_name(st)]


def test_a_trace_past_its_step_limit_is_refused_before_anything_is_timed(tmp_path, run_cli, monkeypatch):
    """`sim --trace` of 1F1B at P=64, M=1024 took 0.87 GB to make a 124 MB file, and a job's
    replicas each add theirs (4,096 ranks: 3.7 GB and 595 MB): past MAX_TRACE_STEPS the command
    stops with `too-large` at once, writes nothing, and counts every replica of a job."""
    from schedc.interop import chrome_trace as trace_module
    import schedc.simulate as simulate_module
    monkeypatch.setattr(trace_module, "MAX_TRACE_STEPS", 100)
    monkeypatch.setattr(simulate_module, "simulate", lambda *a, **k: pytest.fail("timed before refusing"))
    out = tmp_path / "t.json"
    code, _, err = run_cli("sim", "1f1b", "--param", "P=4,M=16", "--trace", str(out))  # 128 steps
    assert code == 2 and "error[too-large]" in err and "would draw 128 steps, more than the 100" in err
    assert not out.exists()
    job = tmp_path / "job.pp"
    job.write_text("schedule j(P = 2, M = 2, D = 20) {\n  stages P\n  place loop\n  replicas D\n"
                   "  rank r { for m in 0 .. M { F(r, m) } for m in 0 .. M { B(r, m) } }\n}\n")
    code, _, err = run_cli("sim", str(job), "--trace", str(out))  # 8 steps a replica, 20 replicas
    assert code == 2 and "would draw 160 steps" in err and not out.exists()
    monkeypatch.undo()
    code, _, _ = run_cli("sim", str(job), "--trace", str(out))
    assert code == 0 and len(json.loads(out.read_text())["traceEvents"]) > 160
