"""`schedc diagnose`: Flight Recorder dumps of real hung gloo jobs (tests/data/diagnose/, written by
its make_dumps.py through tests/fr_jobs.py) and NCCL-format dumps of the same jobs, read against
their schedules: where each rank stopped, the wait cycle or the missing operation, the line; dumps
that differ from the schedule say where; malformed dumps are errors naming the file, never a
traceback. The slow test runs the jobs again and must read the same.
"""
from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data" / "diagnose"


def diag(run_cli, dumps, schedule, *extra):
    code, out, err = run_cli("diagnose", *map(str, dumps), "--schedule", str(DATA / schedule), "--json", *extra)
    return code, (json.loads(out) if out.strip() else None), err


def test_a_cycle_through_a_gather_and_messages(run_cli):
    code, d, _ = diag(run_cli, [DATA / "unshard_late"], "unshard_late.pp")
    assert code == 1 and d["hang"] and d["agrees_with_schedule"] and d["backend"] == "gloo"
    assert [w["rank"] for w in d["cycle"]] == [0, 2, 3, 1]
    assert {w["waits_for"]["action"] for w in d["cycle"]} == {"UNSHARD(0)", "SEND_B(1,0)", "UNSHARD(1)", "SEND_F(0,0)"}
    stops = {s["rank"]: s for s in d["stops"]}
    assert stops[0]["first_open"]["record"] == "gloo:all_gather #1" and stops[0]["first_open"]["action"] == "UNSHARD(0)"
    assert stops[0]["action"] == "F(0,0)" and stops[0]["line"] == 9
    assert stops[2]["first_open"] is None and stops[2]["action"] == "B(0,0)"  # a message: the schedule says
    assert d["errors"][0]["code"] == "hang" and d["errors"][0]["line"] == 9


def test_the_same_job_in_nccl_format_shows_its_messages(run_cli):
    code, d, _ = diag(run_cli, [DATA / "unshard_late" / "nccl"], "unshard_late.pp")
    assert code == 1 and d["backend"] == "nccl" and d["agrees_with_schedule"]
    stops = {s["rank"]: s for s in d["stops"]}
    assert stops[1]["first_open"]["action"] == "RECV_F(1,0)" and stops[1]["first_open"]["record"] == "nccl:recv from 0 #1"
    assert stops[3]["last_completed"]["action"] == "RECV_F(1,0)"


def test_a_missing_reduction_is_named(run_cli):
    code, d, _ = diag(run_cli, [DATA / "skipped_reduce"], "skipped_reduce.pp")  # pickles, as torch writes them
    assert code == 1 and d["missing"] and not d["cycle"]
    assert [w["rank"] for w in d["chain"]] == [0, 1]
    assert "rank 2's operation #1 on the data-parallel group of ranks 0, 2, which its program never issues" in \
        d["chain"][0]["text"]
    stops = {s["rank"]: s for s in d["stops"]}
    assert stops[0]["action"] == "REDUCE_GRAD(0)" and stops[2]["finished"] and stops[3]["finished"]
    assert d["errors"][0]["line"] == 11


def test_replicas_reducing_in_different_orders(run_cli):
    code, d, _ = diag(run_cli, [DATA / "reduce_order"], "reduce_order.pp")
    assert code == 1 and not d["hang"]  # the all-reduces met and combined different stages' gradients
    assert "met REDUCE_GRAD(0) on rank 0" in d["collective_order"][0]["message"]
    assert "REDUCE_GRAD(2) on rank 2" in d["collective_order"][0]["message"]


def test_a_run_that_ended_has_no_hang(run_cli):
    code, d, _ = diag(run_cli, [DATA / "gpipe_dp"], "gpipe_dp.pp")
    assert code == 0 and d["ok"] and not d["hang"] and not d["disagreements"]


def test_a_message_cycle_in_both_formats(run_cli):
    code, d, _ = diag(run_cli, [DATA / "crossed"], "crossed.pp")
    assert code == 1 and [s["action"] for s in d["stops"]] == ["B(0,0)", "F(1,1)"]
    code, d, _ = diag(run_cli, [DATA / "crossed" / "nccl"], "crossed.pp")
    assert code == 1 and {w["waits_for"]["action"] for w in d["cycle"]} == {"SEND_B(1,0)", "SEND_F(0,1)"}
    assert d["stops"][1]["first_open"]["action"] == "RECV_F(1,1)"


def test_dumps_that_differ_from_the_schedule_say_where(run_cli):
    code, d, _ = diag(run_cli, [DATA / "unshard_late"], "gpipe_dp.pp")
    assert code == 1 and d["disagreements"]
    assert "rank 2's dump does not show UNSHARD(0)" in d["disagreements"][0]["message"]


def test_the_text_names_the_line(run_cli):
    code, out, _ = run_cli("diagnose", str(DATA / "unshard_late"), "--schedule", str(DATA / "unshard_late.pp"))
    assert code == 1 and "unshard_late.pp:9:23: error[hang]: a wait cycle" in out and "where each rank stopped:" in out


def test_torchs_own_analyzer_reads_the_nccl_format_dumps():
    """The NCCL-format dumps are what torch's FR tools read: its analyzer parses every entry (`Op`),
    matches the groups and finds the collectives that not every member joined."""
    pytest.importorskip("torch")
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig
    from torch.distributed.flight_recorder.components.loader import read_dir
    args = JobConfig().parse_args([str(DATA / "unshard_late" / "nccl"), "-p", "rank"])
    details, version = read_dir(args)
    db = build_db(details, args, version)
    assert {g.size for g in db.groups} >= {2, 4}
    gathers = [c for c in db.collectives if c.collective_name == "nccl:all_gather"]
    assert sorted(tuple(sorted(c.missing_ranks or ())) for c in gathers) == [(1,), (2,)]  # as diagnose says


def bad(run_cli, tmp_path, name, data: bytes, *schedule):
    path = tmp_path / name
    path.write_bytes(data)
    code, out, err = run_cli("diagnose", str(path), "--schedule", str(DATA / (schedule or ("crossed.pp",))[0]))
    assert code == 2 and "Traceback" not in err, err
    return err


def test_malformed_dumps_are_errors_that_name_the_file(run_cli, tmp_path):
    assert "rank0.json:1:14: error[dump]: not JSON" in bad(run_cli, tmp_path, "rank0.json", b'{"entries": [}')
    assert "cannot tell which rank" in bad(run_cli, tmp_path, "trace.json", b'{"entries": []}')
    assert "not a Flight Recorder dump" in bad(run_cli, tmp_path, "rank0.json", b"[1, 2]")
    entry = json.loads((DATA / "crossed" / "rank0.json").read_text())
    e = entry["entries"][0]
    for key, value, said in (("state", "stuck", "state 'stuck' is not one of"), ("profiling_name", "all_reduce",
                             "is not BACKEND:OPERATION"), ("profiling_name", "nccl:send 0", "expected 'send A->B'"),
                             ("record_id", "x", '"record_id" is a string'),
                             ("input_sizes", True, "is not a list of shapes"), ("retired", "yes", "true or false")):
        broken = {**entry, "entries": [{**e, key: value}]}
        err = bad(run_cli, tmp_path, "rank0.json", json.dumps(broken).encode())
        assert "rank0.json: error[dump]: entry 0" in err and said in err, err


def test_a_pickle_never_runs_code(run_cli, tmp_path):
    class Boom:
        def __reduce__(self):
            return (print, ("ran",))
    err = bad(run_cli, tmp_path, "rank0", pickle.dumps({"entries": [Boom()]}))
    assert "the pickle names builtins.print" in err
    assert "not a Flight Recorder pickle" in bad(run_cli, tmp_path, "rank0", pickle.dumps({"entries": []})[:-3])


def test_a_schedule_with_a_stage_out_of_range_is_refused_at_its_line(run_cli, tmp_path):
    """The fuzzer's (bench/README.md, "Fuzzing"): a send to stage 10 of 2 was an IndexError in the
    matching (exit 4); it is the check's `bad-index` at the schedule's line, exit 2."""
    bad = tmp_path / "crossed.pp"
    bad.write_text((DATA / "crossed.pp").read_text().replace("0F0 0SEND_F0", "0F0 10SEND_F0"))
    code, out, err = run_cli("diagnose", str(DATA / "crossed"), "--schedule", str(bad))
    assert code == 2 and f"{bad}:6:15: error[bad-index]: rank 0, step 1: SEND_F(10,0)" in err and "Traceback" not in err
    # seed 79: a CSV whose last stage sends on (`bad-comm`: no stage 3 to talk to) was the same IndexError
    csv = tmp_path / "input4.csv"
    csv.write_text("0SEND_F1,1RECV_B0,2SEND_F1,2RECV_F0\n2RECV_B0,1SEND_B1,2SEND_F1,1UNSHARD\n1SEND_B1\n")
    code, out, err = run_cli("diagnose", str(DATA / "crossed"), "--schedule", str(csv), "--json")
    assert code == 2 and "stage 2 has no stage 3 to talk to" in err and json.loads(out)["input_error"], err
    # seed 89: lint stopped at an earlier finding (wrong-rank), so the matching itself says it
    pp = tmp_path / "input4.pp"
    pp.write_text("schedule c {\r  stages 3\r  microbatches 2\r  rank 0: 2SEND_B1 0REDUCE_TIED\r  rank 1: 2RECV_B1\r"
                  "  rank 2: 1UNSHARD\r}\r")
    code, out, err = run_cli("diagnose", str(DATA / "crossed"), "--schedule", str(pp), "--semantics", "eager")
    assert code == 2 and f"{pp}:5:11: error[bad-comm]: RECV_B(2,1): stage 2 has no stage 3 to talk to" in err, err


def test_a_dump_of_a_rank_the_job_does_not_run_is_refused(run_cli, tmp_path):
    """A stray rank7.json beside a 4-rank job's dumps changed the analysis silently: it is an error
    naming the file and the job's ranks (so are dumps of 4 ranks read against a 2-rank schedule)."""
    folder = tmp_path / "job"
    folder.mkdir()
    for f in (DATA / "gpipe_dp").iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    (folder / "rank7.json").write_bytes((DATA / "gpipe_dp" / "rank3.json").read_bytes())
    code, _, err = run_cli("diagnose", str(folder), "--schedule", str(DATA / "gpipe_dp.pp"))
    assert code == 2 and f"{folder / 'rank7.json'}: error[dump]: this is rank 7's dump, but the job runs ranks 0..3" in err
    code, _, err = run_cli("diagnose", str(DATA / "skipped_reduce"), "--schedule", str(DATA / "crossed.pp"))
    assert code == 2 and "error[dump]" in err and "the job runs ranks 0..1" in err, err


def test_a_path_that_does_not_exist_and_a_pickle_naming_code_name_the_file(run_cli, tmp_path):
    code, _, err = run_cli("diagnose", str(tmp_path / "nowhere"), "--schedule", str(DATA / "crossed.pp"))
    assert code == 2 and f"{tmp_path / 'nowhere'}: error[io]: no such file or directory" in err, err
    dump = tmp_path / "rank0"
    dump.write_bytes(b"\x80\x04cposix\nsystem\n.")
    code, _, err = run_cli("diagnose", str(dump), "--schedule", str(DATA / "crossed.pp"))
    assert code == 2 and f"{dump}: error[dump]: the pickle names posix.system" in err, err


def test_a_csv_schedule_is_read_with_the_options_check_takes(run_cli, tmp_path):
    """diagnose advised `--notation legacy` and did not take it: it takes what check takes to read a CSV."""
    csv = tmp_path / "crossed.csv"
    code, _, err = run_cli("export", str(DATA / "crossed.pp"), "--to", "torch-csv", "-o", str(csv))
    assert code == 0, err
    legacy = tmp_path / "legacy.csv"
    legacy.write_text(re.sub(r"(^|,)(\d+)B(\d+)", r"\1\2BW\3", csv.read_text(), flags=re.M))
    code, _, err = run_cli("diagnose", str(DATA / "crossed"), "--schedule", str(legacy))
    assert code == 2 and "read the file with --notation legacy" in err, err
    as_read = [run_cli("diagnose", str(DATA / "crossed"), "--schedule", str(f), "--json", *extra)
               for f, extra in ((csv, ()), (legacy, ("--notation", "legacy")))]
    assert as_read[0][0] == 1 and as_read[0][1] == as_read[1][1].replace("legacy", "crossed")


def test_dumps_of_one_rank_twice_or_of_two_backends_are_refused(run_cli, tmp_path):
    code, _, err = run_cli("diagnose", str(DATA / "crossed" / "rank0.json"), str(DATA / "crossed" / "nccl" / "rank0"),
                           "--schedule", str(DATA / "crossed.pp"))
    assert code == 2 and "two dumps for rank 0" in err
    code, _, err = run_cli("diagnose", str(DATA / "crossed" / "rank0.json"), str(DATA / "crossed" / "nccl" / "rank1"),
                           "--schedule", str(DATA / "crossed.pp"))
    assert code == 2 and "mix backends" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli("diagnose", str(tmp_path / "empty"), "--schedule", str(DATA / "crossed.pp"))
    assert code == 2 and "holds no dump files" in err


def _shape(d: dict) -> dict:
    """A diagnosis without what differs between two runs of a job (file names, record texts stay)."""
    return {k: d[k] for k in ("hang", "agrees_with_schedule", "cycle", "chain", "missing", "stops", "ok")}


@pytest.mark.slow
def test_the_jobs_run_again_read_the_same(run_cli, tmp_path):
    """Five real gloo jobs (one torch import, their ranks forked), dumped by torch, read as the saved ones are."""
    import sys
    sys.path.insert(0, str(DATA))
    from make_dumps import SCENARIOS, make
    make(tmp_path)
    for name in SCENARIOS:
        for folder in ([""] + (["nccl"] if (DATA / name / "nccl").exists() else [])):
            _, saved, _ = diag(run_cli, [DATA / name / folder], f"{name}.pp")
            _, fresh, _ = diag(run_cli, [tmp_path / name / folder], f"{name}.pp")
            assert _shape(fresh) == _shape(saved), (name, folder)
