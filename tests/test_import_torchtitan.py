"""`schedc import torchtitan` against the installed torchtitan: on a grid of its options, the schedule
torchtitan's own `_build_pipeline_schedule` builds (on stand-in stages, placed by its own rank -> stage
map) runs the compute order of the schedc schedule the job names, the CSV it loads is the one schedc
reads, and the layers of each stage are its split. Skipped where torchtitan is not installed
(`pip install -e '.[importers]'`)."""
from __future__ import annotations

import importlib.util
import io
import json
import sys
import textwrap

import pytest

from schedc.api import load
from schedc.errors import SchedcError
from schedc.importers import torchtitan

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torchtitan") is None,
                                reason="torchtitan is not installed: pip install -e '.[importers]'")

MULTI = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
GRID = [(s, P, M) for s in MULTI + ("GPipe",) for P in (2, 3, 4) for M in (P, 2 * P, 2 * P + 2)
        if not (s == "DualPipeV" and M < 2 * P)]


def options(schedule: str, P: int, M: int, mbs: int = 1, **more) -> list[str]:
    out = ["--parallelism.pipeline_parallel_degree", str(P), "--parallelism.pipeline_parallel_schedule", schedule,
           "--training.local_batch_size", str(M * mbs), "--parallelism.pipeline_parallel_microbatch_size", str(mbs),
           "--parallelism.data_parallel_shard_degree", "1"]
    for key, value in more.items():
        out += [f"--parallelism.{key}", str(value)]
    return out


class Stage:
    """What torch's schedule constructors read of a stage (no model, no process group)."""

    def __init__(self, stage, stages, ranks, rank):
        self.stage_index, self.num_stages, self.group_size, self.group_rank = stage, stages, ranks, rank
        self.is_first, self.is_last = stage == 0, stage == stages - 1
        self.submod, self.stage_index_to_group_rank = None, {}


def torchtitans_order(opts: list[str], layers: int = 16) -> list[list[str]]:
    """Each rank's compute actions in the schedule torchtitan builds for `opts`, by its own functions."""
    from types import SimpleNamespace

    import torchtitan.distributed.pipeline_parallel as tpp
    from torchtitan.config import ParallelismConfig
    kv = dict(zip(opts[::2], opts[1::2]))
    par = ParallelismConfig(
        pipeline_parallel_degree=int(kv["--parallelism.pipeline_parallel_degree"]),
        pipeline_parallel_schedule=kv["--parallelism.pipeline_parallel_schedule"],
        pipeline_parallel_microbatch_size=int(kv["--parallelism.pipeline_parallel_microbatch_size"]),
        pipeline_parallel_schedule_csv=kv.get("--parallelism.pipeline_parallel_schedule_csv", ""))
    P = par.pipeline_parallel_degree
    stages, *_ = tpp._get_pipeline_metadata(SimpleNamespace(pp=P), par, SimpleNamespace(layers=[0] * layers))
    out = []
    for rank in range(P):
        held = tpp._get_pp_rank_to_stage_indices_mapping(rank, P, par.pipeline_parallel_schedule, stages)
        built = tpp._build_pipeline_schedule(parallelism=par, local_batch_size=int(kv["--training.local_batch_size"]),
                                             stages=[Stage(s, stages, P, rank) for s in held],
                                             loss_fn=lambda *a: (None, None))
        order = built.pipeline_order[rank] if hasattr(built, "pipeline_order") else built._get_pipeline_order()[rank]
        actions = [p for a in order if a is not None for p in _parts(str(a))]
        out.append([a for a in actions if _compute(a)])
    return out


def _parts(action: str) -> list[str]:
    """torch's `(0F3;3B1)OVERLAP_F_B` as its two actions, in order (schedc's overlapped pair)."""
    return action[1:action.index(")")].split(";") if action.startswith("(") else [action]


def _compute(action: str) -> bool:
    return any(action.rstrip("0123456789").endswith(k) for k in ("F", "B", "I", "W"))


def schedcs_order(program) -> list[list[str]]:
    return [[str(a) for step in steps for a in step.parts if _compute(str(a))] for steps in program.ranks]


@pytest.mark.parametrize("schedule,P,M", GRID)
def test_the_job_runs_torchtitans_order(schedule, P, M):
    job = torchtitan.read(options(schedule, P, M, mbs=2), layers=16)
    assert job.params["M"] == M and job.params["P"] == P
    assert schedcs_order(load(job.name, job.params)) == torchtitans_order(options(schedule, P, M, mbs=2))


@pytest.mark.parametrize("schedule,name,V,placement", [("1F1B", "1f1b", 1, "loop"), ("GPipe", "gpipe", 1, "loop"),
                                                        ("Interleaved1F1B", "interleaved_1f1b", 2, "loop"),
                                                        ("ZBVZeroBubble", "zbv", 2, "vshape"),
                                                        ("DualPipeV", "dualpipev", 2, "vshape")])
def test_each_schedule_name_is_a_builtin_with_torchtitans_placement(schedule, name, V, placement):
    """1F1B included: torch 2.13's Schedule1F1B IR is not a valid schedule (tests/test_torch_oracle.py
    compares schedc's 1f1b with the loop torch really runs), so here its name and placement only."""
    job = torchtitan.read(options(schedule, 4, 8), layers=16)
    assert (job.name, job.stages_per_rank, job.placement) == (name, V, placement)


@pytest.mark.parametrize("per_stage,first,last", [(None, 1, 1), (None, 0, 0), (None, 2, 1), (2, 1, 1), (3, 1, 1)])
def test_the_layers_of_each_stage_are_torchtitans_split(tmp_path, per_stage, first, last):
    import torchtitan.distributed.pipeline_parallel as tpp
    more = {"pipeline_parallel_first_stage_less_layers": first, "pipeline_parallel_last_stage_less_layers": last}
    if per_stage is not None:
        more["pipeline_parallel_layers_per_stage"] = per_stage
    job = torchtitan.read(options("Interleaved1F1B", 2, 4, **more), layers=14, model="llama2-7b",
                          hardware="h100-80gb")
    stages = job.params["V"] * 2  # 2 a rank, or 3 (per_stage 3: 16 effective layers, 6 stages)
    assert stages == len(job.layers_per_stage) and sum(job.layers_per_stage) == 14
    want = tpp._generate_llm_fqn_per_model_part(stages, 14, first, last)
    assert job.layers_per_stage == [sum(m.startswith("layers.") for m in part) for part in want]
    from schedc.hardware import describe
    setup = tmp_path / "job.toml"
    setup.write_text(job.setup_toml("test").replace('preset = "llama2-7b"', 'preset = "llama2-7b"\nlayers = 14'))
    assert [st.layers for st in describe(str(setup)).estimates(stages)] == job.layers_per_stage


@pytest.mark.parametrize("schedule,P,M,placement", [("ZBVZeroBubble", 2, 4, "vshape"), ("Interleaved1F1B", 3, 6, "loop"),
                                                    ("PipelineScheduleMulti", 2, 4, "loop")])
def test_a_csv_is_the_file_torchtitan_loads(tmp_path, monkeypatch, schedule, P, M, placement):
    name = {"vshape": "zbv", "loop": "interleaved_1f1b"}[placement]
    params = {"P": P, "M": M} if name == "zbv" else {"P": P, "V": 2, "M": M}
    from schedc.interop.formats import writer
    csv = tmp_path / "mine.csv"
    csv.write_text(writer("torch-csv")(load(name, params), level="compute"))
    monkeypatch.chdir(tmp_path)  # torchtitan finds the file from where it runs
    opts = options(schedule, P, M, pipeline_parallel_schedule_csv="mine.csv")
    job = torchtitan.read(opts, layers=16)
    assert (job.name, job.params, job.placement) == ("mine.csv", {"P": P, "M": M, "V": 2}, placement)
    assert job.torch_class == "_PipelineScheduleRuntime"
    program = load(job.name, job.params, placement=job.placement)
    assert schedcs_order(program) == torchtitans_order(opts)


def test_the_command_writes_a_setup_that_simulates(tmp_path, run_cli):
    out = tmp_path / "job.toml"
    code, stdout, stderr = run_cli("import", "torchtitan", "--model", "llama3-8b", "--hardware", "h100-80gb",
                                    "--gpus", "32", "-o", str(out), "--",
                                    *options("Interleaved1F1B", 4, 8)[:-2], "--parallelism.tensor_parallel_degree",
                                    "2", "--optimizer.lr", "3e-4")
    assert code == 0, stderr
    assert "schedc: interleaved_1f1b --param P=4,V=2,M=8" in stdout
    assert "not read (not about the pipeline): --optimizer.lr" in stdout
    text = out.read_text()
    assert "data_parallel_shard_degree = 4" in text and "pipeline_parallel_layers_per_stage = [" in text
    code, stdout, stderr = run_cli("sim", "interleaved_1f1b", "--param", "P=4,V=2,M=8", "--setup", str(out))
    assert code == 0, stderr
    assert "dp 4 (fsdp 4), tp 2 + sp, uneven layers" in stdout
    code, stdout, _ = run_cli("import", "torchtitan", "--json", *options("ZBVZeroBubble", 2, 4))
    row = json.loads(stdout)
    assert code == 0 and row["name"] == "zbv" and row["params"] == {"P": 2, "M": 4} and row["placement"] == "vshape"


def test_an_unknown_preset_or_layers_against_the_presets_are_refused(tmp_path, run_cli):
    """`--model nosuch --layers 16` wrote `preset = "nosuch"` (exit 0) that `check --setup` then
    refused; `--model llama3-8b --layers 16` split 16 layers against a 32-layer [model]."""
    out = tmp_path / "bad.toml"
    code, _, err = run_cli("import", "torchtitan", "--model", "nosuch", "--layers", "16", "--gpus", "4", "-o", str(out),
                           "--", "--parallelism.pipeline_parallel_degree", "4")
    assert code == 2 and "--model: error[usage]: no model preset 'nosuch' (presets: " in err and "llama3-8b" in err
    code, _, err = run_cli("import", "torchtitan", "--model", "llama3-8b", "--layers", "16", "--gpus", "4", "-o",
                           str(out), "--", "--parallelism.pipeline_parallel_degree", "4")
    assert code == 2 and "--layers: error[usage]: --layers 16, but the model preset llama3-8b has 32 layers" in err
    assert not out.exists()
    code, _, err = run_cli("import", "torchtitan", "--model", "llama3-8b", "--layers", "32", "--gpus", "4", "-o",
                           str(out), "--", "--parallelism.pipeline_parallel_degree", "4")
    assert code == 0 and "pipeline_parallel_layers_per_stage = [8, 9, 8, 7]" in out.read_text(), err


@pytest.mark.parametrize("csv_of,schedule,other", [("zbv", "Interleaved1F1B", "ZBVZeroBubble or DualPipeV"),
                                                   ("interleaved_1f1b", "ZBVZeroBubble", "Interleaved1F1B")])
def test_a_csv_placed_otherwise_than_torchtitan_places_it_is_refused(tmp_path, monkeypatch, run_cli, csv_of, schedule,
                                                                     other):
    """A V-shaped CSV under Interleaved1F1B (torchtitan places its stages in a loop) was written with
    a "check it" line that then reported 21 wrong-rank errors: it is refused at import, naming the
    classes that place the stages as the CSV does."""
    from schedc.interop.formats import writer
    params = {"P": 2, "M": 4} if csv_of == "zbv" else {"P": 2, "V": 2, "M": 4}
    (tmp_path / "mine.csv").write_text(writer("torch-csv")(load(csv_of, params), level="compute"))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("import", "torchtitan", "--layers", "16", "--", *options(schedule, 2, 4),
                             "--parallelism.pipeline_parallel_schedule_csv", "mine.csv")
    assert code == 2 and "check it" not in out + err
    assert f"mine.csv: error[importer]: torchtitan's {schedule} places the stages in a " in err
    assert "of the CSV's actions run on a rank that does not hold their stage" in err and other in err, err


def test_a_config_function_gives_the_defaults_and_the_layers(tmp_path, monkeypatch):
    """`--module M --config C` goes through torchtitan's own loader; a user's config module here (torchtitan's
    models need triton, which a CPU machine lacks)."""
    (tmp_path / "my_titan_configs.py").write_text(textwrap.dedent("""
        from types import SimpleNamespace
        from torchtitan.config import ParallelismConfig, TrainingConfig

        def tiny():
            return SimpleNamespace(
                parallelism=ParallelismConfig(pipeline_parallel_degree=2, pipeline_parallel_schedule="ZBVZeroBubble",
                                              data_parallel_shard_degree=1),
                training=TrainingConfig(local_batch_size=6, seq_len=1024),
                model_spec=SimpleNamespace(model=SimpleNamespace(layers=[None] * 6)))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    job = torchtitan.read(["--module", "my_titan_configs", "--config", "tiny", "--training.local_batch_size", "8"],
                          model="llama2-7b")
    assert (job.name, job.params, job.layers, job.seq_len) == ("zbv", {"P": 2, "M": 8}, 6, 1024)
    assert job.layers_per_stage == [1, 2, 2, 1]
    sys.modules.pop("my_titan_configs", None)


@pytest.mark.parametrize("opts,code,match", [
    (["--parallelism.pipeline_parallel_degree", "1"], "importer", "runs no pipeline"),
    (["--parallelism.pipeline_parallel_degree", "2"], "usage", r"give the job's GPUs \(--gpus N\)"),
    (["--parallelism.pipeline_parallel_degre", "2"], "usage", "did you mean 'pipeline_parallel_degree'"),
    (["--parallelism.pipeline_parallel_degree", "two"], "usage", "takes int, not 'two'"),
    (options("1F1B", 2, 4)[:4] + ["--training.local_batch_size", "5", "--parallelism.pipeline_parallel_microbatch_size",
                                  "2"], "importer", "must be divisible by microbatch_size"),
    (options("Nope", 2, 4), "importer", "Unknown schedule name"),
    (options("1F1B", 2, 4, pipeline_parallel_schedule_csv="absent.csv"), "importer", "does not exist"),
    (options("1F1B", 2, 4, pipeline_parallel_layers_per_stage=3), "usage", "give them"),
    (["--module", "no_such_titan_models", "--config", "x"], "importer", "does not load here"),
    (["--module", "llama3"], "usage", "--module and --config together"),
    (["positional"], "usage", "not a torchtitan option"),
    (options("1F1B", 2, 4, mbs=0), "importer", "ZeroDivisionError"),  # torchtitan's own code divides by it
    (["--parallelism.pipeline_parallel_degree", str(10 ** 9)], "too-large", "more than schedc's limit"),
])
def test_what_torchtitan_or_schedc_refuses_is_an_error(opts, code, match):
    with pytest.raises(SchedcError, match=match) as exc:
        torchtitan.read(opts)
    assert exc.value.code == code


def test_another_torchtitan_version_is_an_importer_error(monkeypatch):
    from importlib import metadata
    monkeypatch.setattr(metadata, "version", lambda name: "0.4.0")
    with pytest.raises(SchedcError, match=r"torchtitan 0.4.0 is installed; .* tested with 0.3.x only") as exc:
        torchtitan.read(options("1F1B", 2, 4))
    assert exc.value.code == "importer"


@pytest.mark.parametrize("flag,want", [([], True), (["--parallelism.no-enable-sequence-parallel"], False),
                                       (["--parallelism.enable_sequence_parallel", "False"], False),
                                       (["--parallelism.enable_sequence_parallel=true"], True)])
def test_options_are_read_as_torchtitans_command_line_writes_them(flag, want):
    job = torchtitan.read([*options("1F1B", 2, 4)[:-2], "--parallelism.data-parallel-shard-degree=2", *flag])
    assert job.parallelism["enable_sequence_parallel"] is want and job.parallelism["data_parallel_shard_degree"] == 2


def test_the_docs_torchtitan_command_is_torchtitan_0_3s(tmp_path, monkeypatch):
    """docs/interop.md's torchrun line: its config function is in torchtitan's registry, and its options read
    as the CSV at P=4, M=8 in a V (llama3_debugmodel has 6 layers: the first and last stage hold none)."""
    import re
    import shlex
    from pathlib import Path

    from schedc.cli import main
    text = (Path(__file__).resolve().parent.parent / "docs" / "interop.md").read_text()
    argv = shlex.split(re.search(r"-m torchtitan\.train (.*?)\n```", text, re.S).group(1).replace("\\\n", " "))
    module, config = argv[argv.index("--module") + 1], argv[argv.index("--config") + 1]
    registry = Path(importlib.util.find_spec("torchtitan.models").submodule_search_locations[0])
    assert f"\ndef {config}() -> Trainer.Config:" in (registry / module / "config_registry.py").read_text()
    monkeypatch.chdir(tmp_path)
    assert main(["export", "zbv", "--param", "P=4,M=8", "--to", "torch-csv", "--level", "compute", "-o", "zbv.csv"],
                io.StringIO(), io.StringIO()) == 0
    rest = [a for i, a in enumerate(argv) if a not in ("--module", "--config") and argv[i - 1] not in ("--module",
                                                                                                       "--config")]
    job = torchtitan.read(rest + ["--parallelism.data_parallel_shard_degree", "1"], layers=6)
    assert (job.name, job.params, job.placement) == ("zbv.csv", {"P": 4, "M": 8, "V": 2}, "vshape")
    assert job.layers_per_stage == [0, 1, 1, 1, 1, 1, 1, 0]
