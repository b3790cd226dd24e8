"""A memory limit holds on every rank of a data-parallel job (`replicas D`), not only replica 0's:
replica 1 of this job runs GPipe's order and holds M microbatches where replica 0 holds one. Before
the fix `check --memory-limit 2` said ok (the limit was spread over P ranks, not D x P), and under a
model description the later replicas' ranks held no model states."""
from __future__ import annotations

import json

from schedc.api import check, load_text

JOB = """schedule dp_differ(P = 2, M = 4) {
  stages P
  place loop
  replicas 2
  rank r, replica d {
    if d == 0 {
      for m in 0 .. M { F(r, m); B(r, m) }
    } else {
      for m in 0 .. M { F(r, m) }
      for m in reversed(0 .. M) { B(r, m) }
    }
    REDUCE_GRAD(r)
  }
}
"""


def test_a_limit_for_every_rank_holds_on_every_replica(run_cli, tmp_path):
    path = tmp_path / "job.pp"
    path.write_text(JOB)
    code, out, _ = run_cli("check", str(path), "--memory-limit", "2")
    assert code == 1 and "rank 2, step 3: memory reaches 4" in out and "rank 3, step 3" in out
    assert "rank 0," not in out and "rank 1," not in out
    report = check(load_text(JOB, "job.pp"), memory_limit=2)
    assert not report.ok and {d.rank for d in report.errors if d.code == "memory"} == {2, 3}
    code, out, _ = run_cli("check", str(path), "--memory-limit", "3=4")  # a job rank may be named
    assert code == 0, out
    code, _, err = run_cli("check", str(path), "--memory-limit", "4=4")
    assert code == 2 and "has ranks 0..3" in err


def test_every_replica_holds_its_model_states(run_cli, tmp_path):
    path = tmp_path / "job.pp"
    path.write_text(JOB)
    code, out, _ = run_cli("check", str(path), "--model", "llama2-7b", "--hardware", "h100-80gb", "--json")
    report = json.loads(out)
    states = report["model_states"]
    assert len(states) == 4 and states[:2] == states[2:] and min(states) > 40
    assert report["total_memory_limit"] == [report["total_memory_limit"][0]] * 4
    # replica 0 keeps one microbatch a rank and fits what its model states leave; replica 1 keeps four
    assert {e["rank"] for e in report["errors"] if e["code"] == "memory"} == {2, 3}
