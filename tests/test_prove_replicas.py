"""`prove` on data-parallel jobs and collectives (issue #30, item 11).

A job of identical replicas (no body names its replica) is proved as one pipeline, for every D;
REDUCE_GRAD, UNSHARD and RESHARD are proved in range, on their stage's rank and after the backwards
they reduce; whatever the proof does not model is `unknown`, naming the construct and its line, with
the bounded check; and a job whose pipeline hangs is refuted at a setting `check` fails.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import schedc
from schedc.errors import SchedcError
from schedc.parse import parse
from schedc.prove import prove
from schedc.prove.model import Unsupported, model

DATA = Path(__file__).parent / "data" / "prove" / "replicas"
BOUNDS = {"1f1b_dp": "min(P - r, M)", "gpipe_dp": "M", "zb_h1_dp": "min(P, M)"}
# each rank's reductions of its stages' gradients, by placement (a V-chunk loop holds r, r + P, ...)
REDUCTIONS = {"vshape": "REDUCE_GRAD(r) REDUCE_GRAD(2 * P - 1 - r)",
              "loop": "REDUCE_GRAD(r)", "loop, V": "for k in 0 .. V { REDUCE_GRAD(r + k * P) }"}


def job_of(schedule: Path, folder: Path) -> Path:
    """The schedule in `schedule` (a built-in, or a file of tests/data/prove/) as a job of D identical
    replicas (NAME_dp, D = 2 by default), each rank reducing each of its stages' gradients after its
    last backward: written from the schedule itself, so the proof follows it as it changes."""
    name = schedule.stem
    text = schedule.read_text()
    head, _, rest = text.partition(f"schedule {name}(")
    params, _, body = rest.partition(")")
    lines = f"{head}schedule {name}_dp({params}, D = 2){body}".splitlines()
    at = next(k for k, line in enumerate(lines) if line.strip().startswith("stages "))
    lines[at + 1:at + 1] = ["  require D >= 1", "  replicas D"]
    place = next(line.split()[1] for line in lines if line.strip().startswith("place "))
    key = "loop, V" if place == "loop" and "V = " in params else place
    assert lines[-2:] == ["  }", "}"], lines[-2:]  # the rank body closes, then the schedule
    lines[-2:-2] = ["    " + REDUCTIONS[key]]
    path = folder / f"{name}_dp.pp"
    path.write_text("\n".join(lines) + "\n")
    return path


def source(name: str, folder: Path) -> Path:
    """A job's file: a built-in written with replicas, else one of tests/data/prove/replicas/ (gpipe_dp
    names its replica and gathers, on purpose)."""
    from schedc.resources import builtin_schedules
    built = builtin_schedules().get(name.removesuffix("_dp"))
    return job_of(built, folder) if built is not None and name != "gpipe_dp" else DATA / f"{name}.pp"


def passes(path, **params) -> bool:
    """Does `schedc check` pass at these parameters (a compile error fails)?"""
    try:
        return schedc.check(schedc.load(str(path), params)).ok is True
    except SchedcError:
        return False


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_builtins_written_with_replicas_and_reductions_are_proved_for_every_p_m_d(name, tmp_path):
    path = source(name, tmp_path)
    proof = prove(str(path))
    assert proof.verdict == "proved", proof.reason
    assert [p.name for p in proof.parts] == ["well-formed", "replicas", "deadlock-free", "memory"]
    assert "every collective names a stage in range" in proof.parts[0].detail
    assert proof.memory_bound == BOUNDS[name]
    assert "D" in proof.bounded["largest"]
    for P, M, D in ((13, 29, 3), (20, 7, 5), (9, 40, 2)):  # far beyond the sweep, as the claim says
        assert passes(path, P=P, M=M, D=D), (P, M, D)


@pytest.mark.slow  # 15-90 s each (the nonlinear ones, as their own proofs in tests/test_prove.py)
@pytest.mark.parametrize("name", ["interleaved_1f1b_dp", "zb_h2_dp", "zbv_dp", "dualpipev_dp", "looped_bfs_dp",
                                  "interleaved_zero_bubble_dp"])
def test_every_other_builtin_written_with_replicas_is_proved_for_every_setting(name, tmp_path):
    proof = prove(str(source(name, tmp_path)))
    assert proof.verdict == "proved", proof.reason
    assert "replicas" in [p.name for p in proof.parts]


def test_a_job_whose_pipeline_deadlocks_is_refuted_where_check_fails(tmp_path):
    path = job_of(DATA.parent / "late_warmup.pp", tmp_path)
    proof = prove(str(path))
    assert proof.verdict == "refuted"
    cex = proof.counterexample
    assert cex["params"] == {"P": 3, "M": 2, "D": 1} and "deadlock" in cex["report"]
    assert not passes(path, **cex["params"]) and not passes(path, P=3, M=2, D=4)
    assert passes(path, P=2, M=2, D=1) and passes(path, P=3, M=3, D=1)


def test_the_replicas_run_the_same_lists_when_the_body_names_no_replica(tmp_path):
    """`rank r, replica d` with d unused is one pipeline too (gpipe_dp is written so)."""
    proof = prove(str(DATA / "gpipe_dp.pp"))
    assert proof.verdict == "proved"
    (part,) = [p for p in proof.parts if p.name == "replicas"]
    assert "no body names its replica" in part.detail


def write(tmp_path, name, body, head="", ranks="rank r"):
    path = tmp_path / f"{name}.pp"
    path.write_text(f"""schedule {name}(P = 3, M = 4, D = 2) {{
  require P >= 1, M >= 1, D >= 1
  stages P
  replicas D
  place loop
{head}  {ranks} {{
    for m in 0 .. M {{ F(r, m) }}
    for m in 0 .. M {{ B(r, m) }}
{body}
  }}
}}
""")
    return path


LINE = 9  # the line of `body` in `write`'s file (with no `head`)


@pytest.mark.parametrize("name, body, head, ranks, why", [
    ("differ", "    if d == 0 { REDUCE_GRAD(r) } else { REDUCE_GRAD(r) }", "", "rank r, replica d",
     "replicas that differ (the body names its replica `d`)"),
    ("tied", "    if r == 0 or r == P - 1 { REDUCE_TIED(r) }", "", "rank r", "REDUCE_TIED: the proof covers"),
    ("sends", "    if r > 0 { SEND_B(r, 0) }", "", "rank r", "SEND_B: the proof covers"),
    ("waits", "    WAIT_SEND_F(r, 0)", "", "rank r", "WAIT_SEND_F: the proof covers"),
    ("groups", "    if r > 0 { group(SEND_B(r, 0)) }", "", "rank r", "group(...)"),
])
def test_each_construct_outside_the_proof_is_unknown_naming_it_and_its_line(tmp_path, name, body, head, ranks, why):
    path = write(tmp_path, name, body, head, ranks)
    with pytest.raises(Unsupported) as caught:
        model(parse(path.read_text(), str(path)))
    assert why in caught.value.reason and caught.value.span.line == LINE
    proof = prove(str(path))
    assert proof.verdict in ("unknown", "refuted"), proof.reason
    if proof.verdict == "refuted":  # the bounded check found the file wrong: check agrees
        assert not passes(path, **proof.counterexample["params"])
        return
    assert why in proof.reason and f"(line {LINE})" in proof.reason, proof.reason
    assert proof.bounded is not None and proof.bounded["settings"] > 0


@pytest.mark.parametrize("name, body", [("grouped", "    group(REDUCE_GRAD(r))"),
                                        ("overlapped", "    overlap(B(r, 0), REDUCE_GRAD(r))")])
def test_a_collective_where_the_language_takes_none_is_an_input_error(tmp_path, name, body):
    """A collective in a group or an overlap compiles at no setting: prove says the input error, as
    check does (exit 2), and proves or refutes nothing."""
    path = write(tmp_path, name, body, "", "rank r")
    with pytest.raises(SchedcError) as caught:
        prove(str(path))
    (diag,) = caught.value.diagnostics
    assert diag.code == "bad-action" and diag.span.line == LINE


def test_a_forward_only_job_is_unknown_naming_the_line(tmp_path):
    path = tmp_path / "fwd.pp"
    path.write_text("""schedule fwd(P = 3, M = 4, D = 2) {
  require P >= 1, M >= 1, D >= 1
  stages P
  replicas D
  forward only
  place loop
  rank r { for m in 0 .. M { F(r, m) } }
}
""")
    proof = prove(str(path))
    assert proof.verdict == "unknown" and "forward-only" in proof.reason and "(line 5)" in proof.reason
    assert proof.bounded["settings"] > 0


@pytest.mark.parametrize("mode", ["tagged", "split"])
def test_p2p_modes_are_in_the_fragment_at_the_compute_level(tmp_path, mode):
    """A compute-level schedule has no messages to pair: `check` decides it the same whatever its
    `p2p` line (schedc inserts each send next to its receive), so the proof holds for each mode."""
    path = write(tmp_path, f"p2p_{mode}", "    REDUCE_GRAD(r)", f"  p2p {mode}\n")
    proof = prove(str(path))
    assert proof.verdict == "proved", proof.reason
    assert passes(path, P=11, M=17, D=3)


def test_a_collective_on_the_wrong_rank_beyond_the_sweep_is_refuted_where_check_fails(tmp_path):
    """The placement of a collective is proved symbolically, not only swept: wrong from P = 10."""
    path = write(tmp_path, "late_wrong_rank", "    REDUCE_GRAD(P > 9 ? 0 : r)")
    proof = prove(str(path))
    assert proof.verdict == "refuted", proof.reason
    params = proof.counterexample["params"]
    assert params["P"] >= 10 and not passes(path, **params)
    assert "wrong-rank" in proof.counterexample["report"]


def test_a_reduction_before_its_stages_backwards_beyond_the_sweep_is_not_proved(tmp_path):
    """REDUCE_GRAD before a backward of its stage (from P = 10) fails the proof's ordering obligation:
    a refutation at a setting where `check` finds `reduce-early`."""
    path = tmp_path / "late_early.pp"
    path.write_text("""schedule late_early(P = 3, M = 4, D = 2) {
  require P >= 1, M >= 1, D >= 1
  stages P
  replicas D
  place loop
  rank r {
    for m in 0 .. M { F(r, m) }
    if P > 9 { REDUCE_GRAD(r) }
    for m in 0 .. M { B(r, m) }
    if P <= 9 { REDUCE_GRAD(r) }
  }
}
""")
    proof = prove(str(path))
    assert proof.verdict == "refuted", proof.reason
    assert proof.counterexample["params"]["P"] >= 10 and not passes(path, **proof.counterexample["params"])
    assert "reduce-early" in proof.counterexample["report"]


# ---- property: generated jobs of identical replicas, every verdict agrees with `check` beyond the sweep

WARMUPS = ["min(P - 1 - r, M)", "min(P - r, M)", "M", "min(r, M)", "(M >= {k} and r == 0) ? 0 : min(P - 1 - r, M)"]
REDUCE = ["REDUCE_GRAD(r)", "UNSHARD(r)\n    REDUCE_GRAD(r)\n    RESHARD(r)", ""]


def job(warm: str, reduce: str) -> str:
    return f"""schedule job(P = 4, M = 8, D = 2) {{
  require P >= 1, M >= 1, D >= 1
  stages P
  replicas D
  place loop
  rank r {{
    let warm = {warm}
    for m in 0 .. warm     {{ F(r, m) }}
    for m in 0 .. M - warm {{ F(r, m + warm); B(r, m) }}
    for m in M - warm .. M {{ B(r, m) }}
    {reduce}
  }}
}}
"""


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(warm=st.sampled_from(WARMUPS), reduce=st.sampled_from(REDUCE), k=st.integers(2, 30),
       far=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 60), st.integers(1, 6)), min_size=2, max_size=2))
def test_generated_jobs_verdicts_agree_with_check_beyond_the_sweep(tmp_path, warm, reduce, k, far):
    path = tmp_path / "job.pp"
    path.write_text(job(warm.format(k=k), reduce))
    proof = prove(str(path))
    assert proof.verdict in ("proved", "refuted"), proof.reason
    if proof.verdict == "proved":
        for P, M, D in far:
            assert passes(path, P=P, M=M, D=D), (warm, reduce, P, M, D)
    else:
        assert not passes(path, **proof.counterexample["params"])


def test_collectives_in_literal_lists_and_rank_bodies_are_read(tmp_path):
    """`rank N: ... 1REDUCE_GRAD` and `rank N { ... }` lists of a job: its collectives are read as
    steps of their own, and one written on the wrong rank is refuted where `check` fails."""
    text = """schedule lit_dp(D = 2) {
  require D >= 1
  stages 2
  replicas D
  place loop
  rank 0 { UNSHARD(0); F(0, 0); F(0, 1); B(0, 0); B(0, 1); REDUCE_GRAD(0); RESHARD(0) }
  rank 1: 1F0 1B0 1F1 1B1 1REDUCE_GRAD
}
"""
    path = tmp_path / "lit_dp.pp"
    path.write_text(text)
    proof = prove(str(path))
    assert proof.verdict == "proved", proof.reason
    assert [x.kind for x in model(parse(text, str(path))).collectives] == ["UNSHARD", "REDUCE_GRAD", "RESHARD",
                                                                           "REDUCE_GRAD"]
    path.write_text(text.replace("1REDUCE_GRAD", "0REDUCE_GRAD"))
    proof = prove(str(path))
    assert proof.verdict == "refuted" and "wrong-rank" in proof.counterexample["report"]
