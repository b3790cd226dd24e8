"""Fuzz schedc: the parser, the compiler and checks, the CSV and IR JSON readers, and every command.

Inputs are generated and mutated: schedule text from the grammar (schedc.strategies.sources), the
built-ins and variants of them that use `forward only` and `replicas D` (`rank r, replica d`),
literal-form schedules, PyTorch CSVs and IR JSON of random valid programs, collective programs
with sends to no stage (`REDUCE_TIED`, `replicas D`), CR-only line ends, CSV cells past the csv
module's field limit, IR JSON out of range (limits of ranks that do not exist, numbers near 1e308,
short action lists, names with half a surrogate pair), TOML cost files and
measured profiles, model and hardware setup files (TOML and JSON; edited at their keys too:
[model] with experts, top_k, attention..., [hardware] reserve, gpus_per_node, network,
[activation_checkpoint], [parallelism]), `--profile` files (a run's measured `activations` and
`stages`, with odd stage keys, byte counts and times), schedules read from DeepSpeed and
Megatron-Core (`deepspeed:train`, `megatron:interleaved`, ... with their parameters;
`--importers`), torch Flight Recorder dumps
(tests/data/diagnose's, JSON and pickle, edited, dropped or renamed, and pickles that would run
code), proof certificates; and the command lines of check, compile, sim, viz, export, compare,
plan, prove, synth, run (up to `--print-torchrun`, or the point where ranks would start: the
fuzzer never starts a rank) and diagnose, with their options, odd values and shuffled arguments.
Each input runs in a worker process under a wall-clock cap and a memory cap, and counts in
exactly one class:

  ok        it finished, or stopped with a clean error (a SchedcError; located, for .pp and CSV text)
  internal  a traceback, exit code 4, an exception that is not a SchedcError, or a worker that died
  hang      past the wall-clock cap (or the memory cap); prove and synth get their own limit + slack
  partial   a `.tmp` file left behind, or output written by a command that failed (exit 2; exit 1 or
            3 from compile without --force, export, prove, synth or run)
  invalid   an output that is not what it says: JSON that is cut short or holds NaN/Infinity, SVG
            that is not well-formed XML, HTML whose inline script can be ended early, DOT that
            graphviz's parser rejects or that carries an attribute schedc never writes, a
            `_program.py` Python cannot parse, a CSV, IR JSON or synthesised .pp that does not read
            back (or, for synth, does not check), a `--json` line that is not JSON, a .pp or CSV
            error without its line and column, a `too-large` error that names no file, a .pp whose
            verdict changes when its lines end in \r or \r\n instead of \n, a report whose
            `to_dict()` is not strict JSON, two schedule names that would write the same output
            files, a RuntimeWarning (numpy's), text no UTF-8 stream can print, a pickled dump that
            ran code (it wrote a file), or anything printed to the process's standard output other
            than through the command's stream

Each distinct failure is saved under --out DIR: its input files, the command (`repro.sh`, run from
that folder), what it printed and why it failed. The report gives inputs tried per target and per
class, the rate, how many inputs used each newer kind of input (importer, profile, setup keys,
dumps), and the slowest inputs. The frameworks are imported before the clock starts.

    python bench/fuzz.py --minutes 10                # the campaign (bench/README.md, "Fuzzing")
    python bench/fuzz.py --examples 2000 --seed 3    # a fixed number of inputs
    python bench/fuzz.py --engine atheris            # libFuzzer's coverage-guided mutations (API targets)

Exit code 0 when every input was ok, 1 otherwise.
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import multiprocessing
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
API_TARGETS = ("parse", "pp", "csv", "ir")
COMMANDS = ("check", "compile", "sim", "viz", "export", "compare", "plan", "prove", "synth", "run", "diagnose")
TARGETS = API_TARGETS + COMMANDS
# relative weights: cheap API inputs most, every command its share; prove (Z3, up to its --timeout),
# plan (a search of layouts) and the pictures through graphviz or a browser cost the most per
# input, so they come less often
WEIGHTS = {"parse": 13, "pp": 13, "csv": 11, "ir": 7, "check": 13, "compile": 7, "sim": 8, "viz": 7,
           "export": 7, "compare": 2, "plan": 3, "prove": 2, "synth": 4, "run": 6, "diagnose": 5}
# schedules read from a framework's installed code (schedc/importers/): name -> the parameters it takes
IMPORTED = {"deepspeed:train": "PM", "deepspeed:inference": "PM", "deepspeed:dualpipev": "PM",
            "megatron:1f1b": "PMB", "megatron:interleaved": "PMVBO"}
FRAMEWORKS = ("deepspeed", "megatron")
IMPORTED_ODD = ["deepspeed:", "megatron:nope", "deepspeed:train:x", "DeepSpeed:train", "megatron:1F1B", ":train",
                "deepspeed:Train", "megatron:interleaved ", "torchtitan:1f1b", "megatron:"]
IMPORTED_PARAMS_ODD = ["BATCHED=2", "OVERLAP=-1", "P=4,M=2", "V=1", "V=0", "P=1,M=1", "P=8,M=64", "BATCHED=1,OVERLAP=1",
                       "P=2,M=4,X=1", "P=3,M=5,V=3", "OVERLAP=1", "M=1", "P=16,M=16"]
CLASSES = ("ok", "internal", "hang", "partial", "invalid")
MAX_CELLS = 100_000  # the API targets check programs of at most this many actions and pairs
CAP_S = 30.0  # wall-clock cap per input
SLACK_S = 10.0  # prove and synth: their own limit plus this, at most CAP_S
MEMORY_CAP_MB = 3072  # resident memory of the worker
TOKEN = re.compile(r"[A-Za-z_0-9]+|\.\.|//|[<>=!]=|->|\S")
CELL = re.compile(r"[^,\r\n]+|,|\r?\n")
EXTRA_TOKENS = ["0", "-1", "999999", "4611686018427387904", "1.5", "overlap", "group", "SEND_F", '"', "#",
                "{", "}", "(", ")", ";", "rank", "0:", "0F0", "(0F0;0B0)OVERLAP_F_B", "next", "order", "greedy",
                "forward", "only", "forward only", "replicas", "replica", "replicas 2", "rank r, replica d",
                "d", ",", "REDUCE_GRAD", "UNSHARD", "RESHARD", "0REDUCE_GRAD", "1REDUCE_TIED", "0REDUCE_TIED",
                "1SEND_F0", "9SEND_B3", "\r"]
EXTRA_CELLS = ["", '"', ",", "\n", "0BW0", "0F", "F0", "-1F0", "0X0", "(0F0;)GROUP", "((0F0))GROUP", "0F0 ",
               " 1B0", "00F00", "0UNSHARD0", "(0SEND_F0;1RECV_F0)GROUP", "9F9", "0REDUCE_GRAD", "0UNSHARD",
               "0REDUCE_TIED", "9SEND_F6", "1SEND_F0", "0SEND_B0"]
TOML_TOKENS = ["=", "[", "]", "[[", "]]", '"', "'", ".", "#", "{", "}", ",", "stage", "rank", "channel", '"0->1"',
               '"1->0"', "0", "1", "-1", "1e308", "1e-320", "nan", "inf", "-inf", "true", "false", "speed", "F", "B",
               "I", "W", "act", "weight", "out", "latency", "bandwidth", "overhead", "overlap", "preset", "model",
               "hardware", "link", '"80GiB"', '"300GB/s"', "layers", "hidden", "heads", "seq_len", "vocab",
               "micro_batch", "recompute", '"full"', "dtype", '"fp8"', "flops", "efficiency", "memory",
               "9" * 30, '"x"', "\n", "parallelism", "activation_checkpoint", "mode", "selective_ac_option", '"op"',
               '"attention"', '"2"', "attention", '"eager"', '"flash"', "norm", '"rmsnorm"', "rope", "experts", "top_k",
               "expert_ffn_hidden", "shared_expert_ffn_hidden", "first_dense_layers", "reserve", "gpus_per_node",
               "network", '"ib-400g"', '"4GiB"', "tensor_parallel_degree", "pipeline_parallel_degree",
               "data_parallel_shard_degree", "data_parallel_replicate_degree", "context_parallel_degree",
               "expert_parallel_degree", "zero_stage", "sequence_parallel", "pipeline_parallel_layers_per_stage",
               "decoder_first_pipeline_num_layers", "[1, 3]", "2147483648", "activation_scale"]
CHARS = list("{}()[],;:=+-*/%<>!?.#\"\\ \n\t\r0123456789FBIWrmPMV_") + ["\x00", "\u00e9", "\u2028", "\ufeff"]
# odd strings for a schedule's name, a file's name or an option: quotes, a final backslash, markup
NASTY = ["a\\", 'a"b', "<!--<script>", "</script><b>", "]]>", "a\x01\x07b", "a\nb", "", "x" * 300, "\u2028",
         "--", '\\"', 'r0s0 [URL="javascript:x"]', "a'b", "$(touch x)", "\udcff", "é", "a}b{", "-x",
         "a b", "a_b", "a/b", ".."]
# ... and in JSON only (a command line holds no half surrogate pair but \udc80-\udcff, undecodable bytes)
JSON_NASTY = ["a\ud800b", "\udc00", "\ud83d"]


class Hang(Exception):
    """An input ran past the wall-clock cap (in-process runs only: the atheris engine)."""


class Invalid(Exception):
    """An output that is not what it claims to be (see the module docstring)."""


class WouldLaunch(BaseException):
    """`schedc run` got to the point of starting ranks: the fuzzer stops it there. A BaseException,
    so schedc's own `except Exception` does not turn it into an internal error."""


# ---------------------------------------------------------------------------------------------
# Seed inputs
# ---------------------------------------------------------------------------------------------
def _draw(strategy, n: int, seed: int) -> list:
    """n examples of a strategy, drawn by Hypothesis (generation only, no database)."""
    from hypothesis import HealthCheck, Phase, given, seed as hseed, settings
    out: list = []
    if n < 1:
        return out

    @hseed(seed)
    @settings(max_examples=n, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        out.append(x)
    collect()
    return out


def literal_text(p) -> str:
    """A program in the literal form (`rank 0: 0F0 ...`), as a .pp file."""
    from schedc.ir import format_step
    lines = [f"schedule {p.name} {{", f"  stages {p.num_stages}", f"  microbatches {p.num_microbatches}",
             "  place [" + ", ".join(map(str, p.placement)) + "]"]
    if p.forward_only:
        lines.append("  forward only")
    lines += [f"  rank {r}: " + " ".join(format_step(s) for s in steps) for r, steps in enumerate(p.ranks)]
    return "\n".join(lines + ["}"]) + "\n"


FORWARD_ONLY = """schedule fwd(P = {P}, M = {M}) {{
  forward only
  stages {stages}
  place {place}
  rank r {{ for m in 0 .. M {{ {body} }} }}
}}
"""
REPLICAS = """schedule dp(P = {P}, M = {M}) {{
  stages {stages}
  place loop
  replicas {D}
  rank r, replica d {{ {body} }}
}}
"""
DP_BODIES = ["for m in 0 .. M { F(r, m) } for m in reversed(0 .. M) { B(r, m) } REDUCE_GRAD(r)",
             "UNSHARD(r) for m in 0 .. M { F(r, m) } for m in 0 .. M { B(r, m) } RESHARD(r) REDUCE_GRAD(r)",
             "for m in 0 .. M { F(r, m) } for m in 0 .. M { B(r, m) } if d == 0 { REDUCE_GRAD(r) }",
             "if r == d { REDUCE_GRAD(r) } for m in 0 .. M { F(r, m) } for m in 0 .. M { B(r, m) } "
             "if r != d { REDUCE_GRAD(r) }",
             "for m in 0 .. M { F(r, m) F(r + P, m) } for m in 0 .. M { B(r + P, m) B(r, m) } "
             "if d == 0 { REDUCE_GRAD(r) REDUCE_GRAD(r + P) } else { REDUCE_GRAD(r + P) REDUCE_GRAD(r) }"]


def feature_texts(builtins: dict[str, str]) -> list[str]:
    """Schedules that use `forward only` and `replicas D`: hand-written ones, and the built-ins with
    a `replicas` line and a replica-naming body, or with `forward only` added (mostly errors)."""
    out = [(ROOT / "tests/data/forward/ds_inference.pp").read_text(encoding="utf-8")]
    for P, M, place in ((2, 3, "loop"), (3, 2, "loop"), (2, 2, "vshape")):
        out.append(FORWARD_ONLY.format(P=P, M=M, stages="2 * P" if place == "vshape" else "P", place=place,
                                       body="F(r, m)" if place == "loop" else "F(r, m) F(2 * P - 1 - r, m)"))
    for D, body in zip((1, 2, 3, 2, 2), DP_BODIES):
        out.append(REPLICAS.format(P=2, M=2, D=D, body=body, stages="2 * P" if "r + P" in body else "P"))
    for name, text in builtins.items():
        if "rank r {" in text:
            dp = text.replace("rank r {", "rank r, replica d {", 1)
            out.append(dp.replace("  rank r, replica d", "  replicas 2\n  rank r, replica d", 1))
        out.append(text.replace("{\n", "{\n  forward only\n", 1))
    return out


SEND_TO_NO_STAGE = ["schedule t {\n  stages 2\n  microbatches 1\n  rank 0: 1SEND_F0\n  rank 1: 0REDUCE_TIED\n}\n",
                    "schedule t {\n  stages 2\n  microbatches 1\n  replicas 2\n  rank 0: 1SEND_F0\n  rank 1: 0F0\n}\n"]
COLLECTIVE_KINDS = ["F", "B", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "REDUCE_TIED", "REDUCE_GRAD", "UNSHARD"]


def collective_texts(rng: random.Random, n: int) -> tuple[list[str], list[str]]:
    """(.pp texts, CSVs): literal programs that mix messages and collectives (`REDUCE_TIED`,
    `REDUCE_GRAD`, `replicas D`), some with a send or receive past either end of the pipeline. The
    job's channels were paired before its structure was checked: IndexError (issue 35)."""
    pp, csv = list(SEND_TO_NO_STAGE), ["9SEND_F6\r\n0REDUCE_TIED\r\n"]
    for _ in range(n):
        P = rng.randint(1, 3)
        S, M = P * rng.choice([1, 1, 2]), rng.randint(1, 2)
        rows = []
        for _ in range(P):
            row = []
            for _ in range(rng.randint(1, 6)):
                kind = rng.choice(COLLECTIVE_KINDS)
                stage = rng.randrange(S) if rng.random() < 0.8 else rng.choice([S - 1, S, 0, 9])
                mb = "" if kind in ("REDUCE_TIED", "REDUCE_GRAD", "UNSHARD") else str(rng.randrange(M))
                row.append(f"{stage}{kind}{mb}")
            rows.append(row)
        csv.append("".join(",".join(row) + "\r\n" for row in rows))
        lines = ["schedule c {", f"  stages {S}", f"  microbatches {M}"]
        if rng.random() < 0.4:
            lines.append(f"  replicas {rng.randint(2, 3)}")
        pp.append("\n".join(lines + [f"  rank {r}: " + " ".join(row) for r, row in enumerate(rows)] + ["}"]) + "\n")
    return pp, csv


def _cost_files() -> tuple[list[str], list[str]]:
    """TOML cost files and measured profiles (JSON) to start from."""
    toml = ["F = 1\nB = 2\n", "F = 1\nI = 1\nW = 1\nlatency = 0.1\noverlap = false\n",
            "act = 2\nweight = 1\nout = 0.5\nbandwidth = 10\noverhead = 0.01\n\n[stage.0]\nF = 2\n\n[rank.1]\n"
            "speed = 0.5\n\n[channel.\"0->1\"]\nlatency = 0.2\nbandwidth = 4\n",
            "[stage.1]\nF = 3\nB = 6\n[stage.0]\nI = 1\nW = 0.5\n[rank.0]\nspeed = 2\ndispatch = 0.1\n",
            "bandwidth = inf\nlatency = 1e-9\n[channel.\"1->0\"]\noverhead = 0.5\n"]
    profile = [json.dumps({"format": "schedc-profile", "version": 1, "unit": "s",
                           "stages": {"0": {"F": 0.01, "B": 0.02}, "1": {"F": 0.012, "B": 0.03, "act": 1}},
                           "messages": {"0": 1048576, "latency": 1e-5, "bandwidth": 1e10}}),
               json.dumps({"stages": {"0": {"F": 1, "I": 1, "W": 1}, "1": {"F": 2}, "2": {"F": 1}, "3": {"F": 1}},
                           "ranks": {"1": {"speed": 0.5}},
                           "messages": {"channels": {"0->1": {"latency": 0.1}}, "overhead": 0.01},
                           "overlap": False}),
               json.dumps({"stages": {"0": {"F": 0.001, "B": 0.002}, "1": {"F": 0.001, "I": 0.001, "W": 0.001}},
                           "ranks": {"0": {"dispatch": 2e-5}, "1": {"dispatch": 1e-5}},
                           "messages": {"0": 16384, "latency": 2e-4, "overhead": 1e-4},
                           "spread": {"stages": {"0": {"F": [0.8, 1.2], "B": [0.5, 1, 1.5]}, "1": {"W": [1]}},
                                      "overhead": {"0->1": [0.2, 0.3, 3.5], "1->0": [1]}}})]
    return toml, profile


def _setup_files() -> tuple[list[str], list[str]]:
    """Model and hardware descriptions, TOML and JSON (docs/units.md, "The description")."""
    toml = ['[model]\npreset = "llama2-7b"\nmicro_batch = 2\nrecompute = "selective"\n\n[hardware]\n'
            'preset = "h100-80gb"\nefficiency = 0.45\n',
            '[model]\nname = "my-1b"\nlayers = 16\nhidden = 2048\nheads = 16\nseq_len = 4096\nvocab = 50304\n'
            'recompute = "selective"\n\n[hardware]\npreset = "a100-80gb"\nmemory = "76GiB"\n\n[link]\n'
            'preset = "ib-200g"\n',
            '[model]\npreset = "gpt3-1.3b"\n[hardware]\npreset = "a100-80gb"\n',
            '[model]\nlayers = 4\nhidden = 64\nheads = 4\nkv_heads = 2\nffn_hidden = 128\ngated_mlp = true\n'
            'dropout = false\ntied_embeddings = true\nseq_len = 128\nvocab = 1000\ndtype = "fp32"\n'
            'micro_batch = 3\nrecompute = "full"\n[hardware]\nflops = 1e12\nmemory = 8589934592\n'
            'efficiency = 0.5\n[link]\nbandwidth = "10GB/s"\nlatency = 1e-5\n']
    # the job's tables and the newer keys: [parallelism], [activation_checkpoint], a mixture of
    # experts, the attention core, [hardware] reserve, gpus_per_node and network
    toml += ['[model]\npreset = "llama3-70b"\n\n[activation_checkpoint]\nmode = "selective"\n\n[hardware]\n'
             'preset = "h100-80gb"\nreserve = "4GiB"\ngpus_per_node = 4\nnetwork = "ib-200g"\n\n[parallelism]\n'
             'data_parallel_shard_degree = 4\ntensor_parallel_degree = 8\npipeline_parallel_degree = 4\n',
             '[model]\nname = "moe"\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 128\nvocab = 1000\nexperts = 8\n'
             'top_k = 2\nexpert_ffn_hidden = 64\nshared_expert_ffn_hidden = 128\nfirst_dense_layers = 1\n'
             'attention = "eager"\nnorm = "rmsnorm"\nrope = true\n[hardware]\nflops = 1e12\nmemory = "8GiB"\n'
             'efficiency = 0.5\nreserve = 0\ngpus_per_node = 2\nnetwork = "ib-200g"\n[parallelism]\n'
             'expert_parallel_degree = 2\ntensor_parallel_degree = 2\nsequence_parallel = false\n'
             'decoder_first_pipeline_num_layers = 1\n',
             '[model]\npreset = "gpt3-1.3b"\nattention = "flash"\n[activation_checkpoint]\nmode = "selective"\n'
             'selective_ac_option = "2"\n[hardware]\npreset = "a100-80gb"\n[parallelism]\nzero_stage = 2\n'
             'data_parallel_replicate_degree = 2\nenable_sequence_parallel = true\ncontext_parallel_degree = 2\n',
             '[model]\npreset = "mixtral-8x7b"\nmicro_batch = 2\n[activation_checkpoint]\nmode = "full"\n'
             '[hardware]\npreset = "h100-80gb"\n[parallelism]\nexpert_parallel_degree = 8\n'
             'pipeline_parallel_layers_per_stage = [8, 8, 8, 8]\n']
    js = [json.dumps({"model": {"preset": "llama2-7b"}, "hardware": {"preset": "h100-80gb"}}),
          json.dumps({"model": {"name": "tiny", "layers": 8, "hidden": 256, "heads": 8, "seq_len": 512,
                                "vocab": 32000, "dtype": "bf16"},
                      "hardware": {"name": "acc", "flops": {"bf16": 3e14, "fp32": 2e13}, "memory": "40GiB",
                                   "efficiency": 0.4},
                      "link": {"name": "net", "bandwidth": "25GB/s", "latency": 5e-6}}),
          json.dumps({"model": {"preset": "olmoe-1b-7b", "attention": "sdpa"},
                      "activation_checkpoint": {"mode": "selective", "selective_ac_option": "attention"},
                      "hardware": {"preset": "a100-40gb", "reserve": "3GiB", "network": "roce-400g"},
                      "parallelism": {"expert_parallel_degree": 4, "data_parallel_shard_degree": 4,
                                      "decoder_last_pipeline_num_layers": 3}}),
          json.dumps({"model": {"name": "examples.transformer", "layers": 4, "hidden": 32, "heads": 4,
                                "ffn_hidden": 128, "seq_len": 16, "vocab": 64, "dtype": "fp32", "micro_batch": 8,
                                "dropout": False},
                      "hardware": {"preset": "a100-80gb"}})]
    return toml, js


# measured profiles for --profile (`schedc run --profile`'s, with the bytes each stage saved)
MEASURED = [{"stages": {"0": {"F": 0.001, "B": 0.002}, "1": {"F": 0.001, "B": 0.002}},
             "activations": {"0": 536960, "1": 600068}},
            {"format": "schedc-profile", "version": 1, "unit": "s",
             "stages": {"0": {"F": 0.00122, "I": 0.00165, "W": 0.00165, "B": 0.0033}},
             "messages": {"0": 16384, "latency": 0.00054},
             "activations": {"0": 2.5e9, "1": 2.4e9, "2": 2.4e9, "3": 2.6e9},
             "memory": {"0": {"peak_allocated": 1073741824}}},
            {"activations": {"0": 1e9}},
            {"activations": {"1": 3e9, "0": 4e9}, "memory": {}},
            {"stages": {"0": {"F": 0.001045, "I": 0.001038, "W": 0.001038, "B": 0.002076},
                        "1": {"F": 0.00118, "I": 0.000842, "W": 0.000842, "B": 0.001684}}},
            {"stages": {"0": {"F": 0.3, "I": 0.3, "W": 0.2}, "1": {"F": 0.3, "I": 0.35, "W": 0.2}}}]
PROFILE_KEYS = ["01", " 1", "-1", "1e3", "x", "99999999", "0.5", "", "\u0661", "1_0", "+1", "9" * 25]
PROFILE_VALUES = [0, -1, 1e308, 1.7e308, 5e-324, True, False, "5", None, "nan", [], {}, 1e-300, 2 ** 64, 10 ** 400,
                  "1e309"]


def _json_object(text: str) -> dict | None:
    """The JSON object `text` holds, or None (not JSON, or JSON of another kind): a mutator that
    edits an object's keys leaves any other text as it is."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def mutate_profile(text: str, rng: random.Random) -> str:
    """One edit of a measured profile's `activations` or `stages`, the parts --profile reads: a
    stage key that is not plainly a number (`01`, ` 1`, `-1`), a byte count or a time out of range
    or of the wrong type, a pass left out, or the table itself replaced."""
    data = _json_object(text)
    if data is None:
        return text
    if "stages" in data and rng.random() < 0.5:
        return json.dumps(_mutate_stages(data, rng))
    acts = data.get("activations")
    how = rng.choice(["key", "key", "value", "value", "table", "many"])
    if how == "table" or not isinstance(acts, dict) or not acts:
        data["activations"] = rng.choice([[], {}, "x", None, [536960], {"0": {"F": 1}}, 5])
    elif how == "key":
        old = rng.choice(sorted(acts))
        acts[rng.choice(PROFILE_KEYS)] = acts.pop(old)
    elif how == "value":
        acts[rng.choice(sorted(acts))] = rng.choice(PROFILE_VALUES)
    else:
        data["activations"] = {str(s): rng.choice([1e9, 1e308, 1]) for s in range(rng.choice([2, 8, 300, 5000]))}
    return json.dumps(data)


def _mutate_stages(data: dict, rng: random.Random) -> dict:
    """One edit of a profile's measured `stages`, which calibrate the efficiency."""
    stages = data.get("stages")
    how = rng.choice(["key", "value", "value", "drop", "table", "many"])
    if how == "table" or not isinstance(stages, dict) or not stages:
        data["stages"] = rng.choice([[], {}, "x", None, {"0": 1}, {"0": {}}, {"1": {"F": 1, "B": 2}}, 5])
    elif how == "key":
        old = rng.choice(sorted(stages))
        stages[rng.choice(PROFILE_KEYS)] = stages.pop(old)
    elif how in ("value", "drop") and isinstance(stage := stages[rng.choice(sorted(stages))], dict) and stage:
        op = rng.choice(sorted(stage))
        if how == "drop":
            del stage[op]
        else:
            stage[op] = rng.choice(PROFILE_VALUES + [1e-300, 1e300])
    else:
        data["stages"] = {str(s): {"F": rng.choice([1e-9, 1.0, 1e300]), "B": 2.0}
                          for s in range(rng.choice([2, 8, 300, 5000]))}
    return data


def _toml_value(v) -> str:
    """A value as TOML writes it (None, which TOML lacks, as an empty string)."""
    import math
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")) if not math.isfinite(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps("" if v is None else str(v), ensure_ascii=False)


def _toml_key(k) -> str:
    k = str(k)
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k, ensure_ascii=False)


def dumps_toml(data: dict) -> str:
    """A setup file's tables as TOML: the values that are not tables first, then each table."""
    head = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    tables = [f"[{_toml_key(k)}]\n" + "".join(f"{_toml_key(kk)} = {_toml_value(vv)}\n" for kk, vv in v.items())
              for k, v in data.items() if isinstance(v, dict)]
    return "\n".join(head + [""] if head else []) + "\n".join(tables)


SETUP_VALUES = [0, -1, 1, 2, 3, 7, 64, 2 ** 31, 2 ** 31 - 1, 2 ** 63, 1e308, 1e-320, 0.5, 1.5, float("inf"), float("nan"),
                True, False, None, "x", "", "0", "80GiB", "-1GiB", "0GiB", "1e400GiB", "300GB/s", "ib-200g", "nvlink",
                "selective", "full", "none", "op", "attention", "eager", "flash", "sdpa", "rmsnorm", "fp8", "bf16",
                [], [1], [1, 3], [0, 4], [2, 2], [2 ** 31], [True], [1.5], {}, {"bf16": 1e12}, {"x": 1}, "llama2-7b",
                "mixtral-8x7b", "deepseek-v3", "h100-80gb", "-1", "2", "\u00e9"]


def mutate_setup(text: str, rng: random.Random, keys: dict[str, tuple]) -> str:
    """1..3 edits of a setup file aimed at its keys (schedc.hardware.KEYS: [model], [hardware],
    [link], [activation_checkpoint], [parallelism]): a known key set to an odd value or removed, a
    table added or dropped; written back as it came (TOML or JSON)."""
    import tomllib
    as_json = text.lstrip().startswith("{")
    try:
        data = json.loads(text) if as_json else tomllib.loads(text)
    except ValueError:
        return text
    if not isinstance(data, dict):
        return text
    for _ in range(rng.randint(1, 3)):
        table = rng.choice(sorted(keys))
        t = data.setdefault(table, {}) if rng.random() < 0.9 else data
        if not isinstance(t, dict):
            data[table] = t = {}
        how = rng.random()
        if how < 0.75:
            key = rng.choice(list(keys[table]) + ["preset"])
            t[key] = rng.choice(SETUP_VALUES)
        elif how < 0.9 and t:
            del t[rng.choice(sorted(t, key=str))]
        else:
            data.pop(table, None)
    if as_json:
        return json.dumps(data, allow_nan=True)
    return dumps_toml(data)


DUMP_FIELDS = {
    "profiling_name": ["gloo:all_reduce", "gloo:all_gather", "nccl:send 0->1", "nccl:recv 1<-0", "nccl:send 0->99",
                       "nccl:send x->y", "gloo:", ":x", "gloo", "nccl:recv 1<-99999999999999999999", "nccl:barrier",
                       "nccl:coalesced", "nccl:send 0->1 ", "gloo:reduce_scatter", 7],
    "state": ["completed", "started", "scheduled", "x", None, ""],
    "process_group": [["0", "default_pg"], ["1", "x"], ["99", ""], [], ["a"], "x", ["0", 1], ["\ud800", "x"]],
    "collective_seq_id": [0, -1, 1, 2, 2 ** 63, 10 ** 30, 1.5, "1", None, True],
    "p2p_seq_id": [0, -1, 1, 3, 2 ** 63, 1.5, "1", None],
    "record_id": [0, -1, 5, 2 ** 63, None, "0"],
    "input_sizes": [[[1]], [[2, 3]], [[-1]], "x", [[10 ** 30]], [[]], [], [[1.5]], [["x"]], None],
    "output_sizes": [[[1]], [[4]], [[-1]], [[2 ** 63]], [], "x"],
    "retired": [True, False, "x", None],
    "is_p2p": [True, False, 1, None],
}
PG_RANKS = ["[0, 2]", "[99]", "[-1]", "x", [0, 1], "[0, 0]", "[" + "1, " * 2000 + "1]", "[]", "[0,1,2,3]", None, 5,
            "[99999999999999999999]"]


def mutate_dump(text: str, rng: random.Random) -> str:
    """1..3 edits of a Flight Recorder dump aimed at what diagnose reads: an entry's operation,
    state, group, sequence numbers or sizes set to an odd value, entries dropped, doubled, swapped,
    cut short or repeated thousands of times, a group's members (pg_config), the version."""
    data = _json_object(text)
    if data is None:
        return text
    for _ in range(rng.randint(1, 3)):
        entries = data.get("entries")
        how = rng.choice(["field", "field", "field", "drop", "dup", "swap", "cut", "many", "pg", "version"])
        if how in ("field", "drop", "dup", "swap", "cut", "many") and not (isinstance(entries, list) and entries):
            how = "pg"
        if how == "field":
            e = rng.choice(entries)
            if isinstance(e, dict):
                key = rng.choice(sorted(DUMP_FIELDS))
                if rng.random() < 0.1:
                    e.pop(key, None)
                else:
                    value = rng.choice(DUMP_FIELDS[key])
                    e[key] = json.loads(json.dumps(value)) if isinstance(value, (list, dict)) else value
        elif how == "drop":
            del entries[rng.randrange(len(entries))]
        elif how == "dup":
            i = rng.randrange(len(entries))
            entries.insert(i, json.loads(json.dumps(entries[i])))
        elif how == "swap":
            i, j = rng.randrange(len(entries)), rng.randrange(len(entries))
            entries[i], entries[j] = entries[j], entries[i]
        elif how == "cut":
            del entries[rng.randrange(len(entries)):]
        elif how == "many":
            entries.extend(json.loads(json.dumps(rng.choice(entries))) for _ in range(rng.choice([100, 5000])))
        elif how == "pg":
            config = data.setdefault("pg_config", {})
            if isinstance(config, dict):
                config[rng.choice(["0", "1", "2", "x", ""])] = {"name": "x", "desc": rng.choice(["default_pg", "x", ""]),
                                                                "ranks": rng.choice(PG_RANKS)}
        else:
            data["version"] = rng.choice(["1.0", "99", 3, None, "2.10"])
    return json.dumps(data)


class _RunsCode:
    """Pickled, a call of `func(*args)` on unpickling, as pickle.load would make (never here)."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _code_pickles() -> list[bytes]:
    """Dumps that would write a file `PWNED` in the working folder if unpickled by pickle.load
    (os.system, builtins.open, and one hidden in an entry), and protocol 0's text form."""
    import pickle
    return [pickle.dumps({"entries": [], "x": _RunsCode(os.system, "touch PWNED")}, protocol=2),
            pickle.dumps(_RunsCode(open, "PWNED", "w"), protocol=4),
            pickle.dumps({"version": "2.10", "entries": [{"profiling_name": _RunsCode(open, "PWNED", "w")}]}, protocol=5),
            b"cos\nsystem\n(S'touch PWNED'\ntR."]


CODE_PICKLES = _code_pickles()


def _dump_sets() -> list[dict]:
    """Flight Recorder dumps of tests/data/diagnose: per scenario and folder (gloo's, and the NCCL
    form in nccl/), the files by name (bytes) and the schedule the job ran."""
    out = []
    base = ROOT / "tests/data/diagnose"
    for pp in sorted(base.glob("*.pp")):
        for folder in (base / pp.stem, base / pp.stem / "nccl"):
            if folder.is_dir():
                files = {f.name: f.read_bytes() for f in sorted(folder.iterdir()) if f.is_file()}
                out.append({"scenario": pp.stem, "schedule": pp.read_text(encoding="utf-8"), "files": files})
    return out


def _certificates() -> list[tuple[str, str]]:
    """(schedule, the JSON of `prove --json`) for two cheap built-ins, and the stored zbv certificate."""
    from schedc.cli import main
    out = []
    for name in ("gpipe", "1f1b"):
        buf = io.StringIO()
        if main(["prove", name, "--json", "--timeout", "30"], buf, io.StringIO()) == 0:
            out.append((name, buf.getvalue()))
    stored = (ROOT / "tests/data/prove/zbv.cert.json").read_text(encoding="utf-8")
    return out + [("zbv", stored)]


def seeds(seed: int, n: int = 150) -> dict[str, list]:
    """Valid and grammar-derived inputs to start from, by kind: pp, csv, ir, costs_toml,
    profile_json, setup_toml, setup_json (and setup_keys, the keys of each table), measured (profiles
    with activations), dumps (Flight Recorder dump sets), certificate ([(schedule, text)], proved
    when first needed), prove_pp."""
    from schedc.api import load
    from schedc.interop.ir_json import dumps_ir
    from schedc.interop.torch_csv import to_torch_csv
    from schedc.passes import lower
    from schedc.resources import builtin_schedules
    from schedc.strategies import lowered_programs, programs, sources
    builtins = {name: path.read_text(encoding="utf-8") for name, path in builtin_schedules().items()}
    pp = list(builtins.values()) + feature_texts(builtins)
    csv, ir = [], []
    for name, params in [("1f1b", {"P": 2, "M": 3}), ("gpipe", {"P": 3, "M": 2}), ("zbv", {"P": 2, "M": 4}),
                         ("interleaved_1f1b", {"P": 2, "V": 2, "M": 2}), ("dualpipev", {"P": 2, "M": 4})]:
        p = load(name, params)
        csv += [to_torch_csv(p, "compute").dumps(), to_torch_csv(p, "comms").dumps()]
        ir += [dumps_ir(p), dumps_ir(lower(p))]
    csv += ["0F0,,0B0\r\n,1F0,1B0\r\n", '"(0F0;1B1)OVERLAP_F_B",0UNSHARD,0F1,0B0,0B1,0RESHARD\r\n',
            "0F0,0F1\r\n1F0,1F1\r\n"]
    csv += [p.read_text(encoding="utf-8") for p in sorted((ROOT / "tests/data/pytorch-artifacts").glob("*.csv"))]
    from schedc.api import load_text
    for text in feature_texts(builtins)[:9]:  # IR JSON of forward-only and data-parallel programs
        try:
            ir.append(dumps_ir(load_text(text, "f.pp")))
        except Exception:  # noqa: BLE001 - a seed that does not compile is simply not a seed
            pass
    generated = _draw(programs(overlap=True, placements=("loop", "vshape", "table")), n, seed)
    lowered = _draw(lowered_programs(placements=("loop", "vshape", "table")), n // 2, seed + 1)
    pp += [literal_text(p) for p in generated + lowered]
    csv += [to_torch_csv(p, "compute").dumps() for p in generated[: n // 2]]
    csv += [to_torch_csv(p, "comms").dumps() for p in lowered]
    ir += [dumps_ir(p) for p in generated[: n // 4] + lowered[: n // 4]]
    more_pp, more_csv = collective_texts(random.Random(seed), max(4, n // 4))
    pp += more_pp
    csv += more_csv
    # from_lark takes ~0.1 s a text: a few dozen are enough to start from (mutations do the rest)
    pp += _draw(sources(), n // 4, seed + 2) + _draw(sources(literals="any"), n // 10, seed + 3)
    costs_toml, profile_json = _cost_files()
    setup_toml, setup_json = _setup_files()
    from schedc.hardware import KEYS
    prove_pp = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "tests/data/prove").glob("*.pp"))]
    return {"pp": pp, "csv": csv, "ir": ir, "costs_toml": costs_toml, "profile_json": profile_json,
            "setup_toml": setup_toml, "setup_json": setup_json, "setup_keys": dict(KEYS),
            "measured": [json.dumps(m) for m in MEASURED], "dumps": _dump_sets(),
            "certificate": None,  # proved when a case first needs one (2 s: most short runs never do)
            "prove_pp": prove_pp + list(feature_texts(builtins)[:4]), "builtins": sorted(builtins)}


# ---------------------------------------------------------------------------------------------
# Mutations
# ---------------------------------------------------------------------------------------------
def mutate(text: str, rng: random.Random, tokens: re.Pattern, vocab: list[str], max_edits: int = 4) -> str:
    """1..max_edits random edits of characters and tokens."""
    for _ in range(rng.randint(1, max_edits)):
        if not text:
            text = rng.choice(CHARS)
            continue
        kind = rng.choice(("del_char", "ins_char", "rep_char", "del_range", "del_token", "dup_token",
                           "swap_tokens", "rep_token", "ins_token"))
        i = rng.randrange(len(text))
        if kind == "del_char":
            text = text[:i] + text[i + 1:]
        elif kind == "ins_char":
            text = text[:i] + rng.choice(CHARS) + text[i:]
        elif kind == "rep_char":
            text = text[:i] + rng.choice(CHARS) + text[i + 1:]
        elif kind == "del_range":
            text = text[:i] + text[min(len(text), i + rng.randint(1, 40)):]
        else:
            spans = [m.span() for m in tokens.finditer(text)]
            if not spans:
                continue
            a, b = rng.choice(spans)
            if kind == "del_token":
                text = text[:a] + text[b:]
            elif kind == "dup_token":
                text = text[:b] + " " + text[a:b] + text[b:]
            elif kind == "rep_token":
                text = text[:a] + rng.choice(vocab) + text[b:]
            elif kind == "ins_token":
                text = text[:a] + rng.choice(vocab) + " " + text[a:]
            else:
                (a, b), (c, d) = sorted([(a, b), rng.choice(spans)])
                if b <= c:
                    text = text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
    return text


JSON_VALUES = [None, True, False, 0, 1, 2, 3, -1, 1.5, 1e308, 10 ** 30, 2 ** 63, "x", "0F0", "", [], {}, [0], [[]],
               [["0F0"]], [-1, 0], {"a": 1}, "nan", 2.0 ** 62, 2.0 ** 63, 1e-308, 5e-324] + NASTY + JSON_NASTY


def line_ends(text: str, rng: random.Random) -> str:
    """The text with its lines ending in \\r (as old Mac files do) or \\r\\n, all or some of them."""
    end = rng.choice(["\r", "\r", "\r\n"])
    lines = text.split("\n")
    if rng.random() < 0.6:
        return end.join(lines)
    return "".join(ln + (end if rng.random() < 0.5 else "\n") for ln in lines[:-1]) + lines[-1]


def long_cell(text: str, rng: random.Random) -> str:
    """A CSV with one cell just past the csv module's field limit (131,072), plain or quoted."""
    import csv
    cell = "x" * (csv.field_size_limit() + rng.randint(1, 10))
    if rng.random() < 0.5:
        cell = f'"{cell}"'
    rows = text.split("\n")
    r = rng.randrange(len(rows))
    rows[r] = cell + ("," + rows[r] if rows[r] else "")
    return "\n".join(rows)


def mutate_ir(text: str, rng: random.Random) -> str:
    """One edit of an IR document aimed at what its reader must refuse: a memory limit of a rank that
    does not exist, a number near 1e308 (or a speed near 0), a rank's action list cut short, a name
    with half a surrogate pair or that files cannot hold."""
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if not (isinstance(data, dict) and isinstance(data.get("annotations"), dict) and isinstance(data.get("actions"), list)
            and data["actions"]):
        return text  # (an earlier edit broke it: the reader says so)
    ann, ranks = data["annotations"], len(data["actions"])
    how = rng.choice(["limit", "huge", "huge", "speed", "short", "name"])
    if how == "limit":
        ann["memory_limit"] = {str(rng.choice([ranks, ranks + 3, -1, 65536])): rng.choice([1, 100])}
    elif how == "huge":
        big = rng.choice([1e308, 1.7976931348623157e308, 2.0 ** 63, 2.0 ** 62 + 1e5])
        tables = [t for key in ("stage_memory", "stage_costs") if isinstance(ann.get(key), list)
                  for t in ann[key] if isinstance(t, dict) and t]
        if tables and rng.random() < 0.7:
            table = rng.choice(tables)
            table[rng.choice(sorted(table))] = big
        else:
            ann[rng.choice(["latency", "bandwidth"])] = big
    elif how == "speed":
        ann["rank_speed"] = [rng.choice([1e-308, 5e-324, 1e-300])] * ranks
    elif how == "short":
        r = rng.randrange(ranks)
        if isinstance(data["actions"][r], list):
            data["actions"][r] = data["actions"][r][:rng.randrange(len(data["actions"][r]) + 1)]
    else:
        data["schedule"] = rng.choice(JSON_NASTY + NASTY)
    return json.dumps(data, ensure_ascii=rng.random() < 0.7)


def mutate_json(text: str, rng: random.Random, max_edits: int = 3) -> str:
    """Edits of a JSON document's structure: a value set, a key deleted or added, a list item
    replaced, dropped or duplicated, anywhere in the tree (or the text edited, when it is not JSON)."""
    try:
        data = json.loads(text)
    except ValueError:
        return mutate(text, rng, TOKEN, TOML_TOKENS, 2)
    for _ in range(rng.randint(1, max_edits)):
        path, node = [], data
        while isinstance(node, (dict, list)) and node and rng.random() < 0.6:  # walk down a random branch
            key = rng.choice(sorted(node)) if isinstance(node, dict) else rng.randrange(len(node))
            path.append(key)
            node = node[key]
        if not path:
            if not isinstance(data, (dict, list)) or rng.random() < 0.05:
                data = rng.choice(JSON_VALUES)
                continue
            parent, key = data, rng.choice(sorted(data) if isinstance(data, dict) else range(len(data))) \
                if data else None
        else:
            parent = data
            for k in path[:-1]:
                parent = parent[k]
            key = path[-1]
        how = rng.choice(("set", "set", "delete", "add", "dup"))
        value = rng.choice(JSON_VALUES)
        if isinstance(value, (list, dict)):
            value = json.loads(json.dumps(value))
        if isinstance(parent, dict):
            if how == "delete" and key in parent:
                del parent[key]
            elif how == "add":
                parent[rng.choice(["extra", "x", "format", "version", "schedule", "0", "-1", "P", "1", "5",
                                   "65536"])] = value
            elif key is not None:
                parent[key] = value
        elif isinstance(parent, list):
            if key is None or how == "add":
                parent.append(value)
            elif how == "delete":
                del parent[key]
            elif how == "dup":
                parent.insert(key, json.loads(json.dumps(parent[key])))
            else:
                parent[key] = value
    return json.dumps(data, ensure_ascii=rng.random() < 0.5)


# ---------------------------------------------------------------------------------------------
# What a written output must be
# ---------------------------------------------------------------------------------------------
def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def strict_json(text: str, what: str):
    """The value of `text`, or Invalid: JSON every parser reads (no NaN or Infinity)."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise Invalid(f"{what} is not valid JSON: {exc}: {text[:200]!r}") from None


def check_xml(text: str, what: str) -> None:
    import xml.etree.ElementTree as ET
    try:
        ET.fromstring(text)
    except ET.ParseError as exc:
        raise Invalid(f"{what} is not well-formed XML: {exc}") from None


def check_html(text: str, what: str) -> None:
    """The page's inline scripts end where they should: as many `<script` as `</script`, and no
    `<!--` inside one (which can make the browser run past the `</script>`)."""
    low = text.lower()
    opens, closes = low.count("<script"), low.count("</script")
    if opens != closes:
        raise Invalid(f"{what}: {opens} <script> but {closes} </script>")
    for m in re.finditer(r"<script[^>]*>(.*?)</script", text, re.S | re.I):
        if "<!--" in m.group(1):
            raise Invalid(f"{what}: an inline script holds `<!--`")
    if "<svg" in low and "</svg>" in low:
        check_xml(text[low.index("<svg"):low.rindex("</svg>") + 6], what + "'s inline SVG")


# attributes that make a viewer fetch, open or link something: schedc writes none of them, so one
# in a DOT file came from a name that escaped its quotes
DOT_FORBIDDEN = {"url", "href", "target", "image", "imagepath", "shapefile", "fontpath", "stylesheet", "labelurl",
                 "headurl", "tailurl", "edgeurl", "labelhref", "headhref", "tailhref", "edgehref", "labeltarget",
                 "headtarget", "tailtarget", "edgetarget", "id", "class"}
_DOT_TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|^#[^\n]*|"(?:[^"\\]|\\.)*"|->|--|[{}\[\];,=:]|'
                        r'-?(?:\.\d+|\d+(?:\.\d*)?)|[A-Za-z_\u0080-\uffff][A-Za-z_0-9\u0080-\uffff]*', re.S | re.M)


def check_dot(text: str, what: str, run_dot: bool = True) -> None:
    """A DOT file: its tokens and braces are balanced, no attribute links or loads anything (a name
    that escapes its quotes could add a `URL`), and graphviz's own parser accepts it."""
    tokens, i = [], 0
    while i < len(text):
        m = _DOT_TOKEN.match(text, i)
        if not m:
            raise Invalid(f"{what}: not DOT at offset {i}: {text[i:i + 40]!r}")
        tok = m.group()
        if not (tok.isspace() or tok.startswith(("//", "/*", "#"))):
            tokens.append(tok)
        i = m.end()
    if tokens[:1] not in (["digraph"], ["graph"]) or tokens[-1:] != ["}"]:
        raise Invalid(f"{what}: not one graph: {' '.join(tokens[:3])} ... {' '.join(tokens[-2:])}")
    depth, square = 0, 0
    for k, tok in enumerate(tokens):
        depth += (tok == "{") - (tok == "}")
        square += (tok == "[") - (tok == "]")
        if depth < 0 or square not in (0, 1) or (depth == 0 and k < len(tokens) - 1 and k > 2):
            raise Invalid(f"{what}: braces do not nest at token {k}: {tok!r}")
        if tok == "=" and tokens[k - 1].strip('"').lower() in DOT_FORBIDDEN:
            raise Invalid(f"{what}: an attribute schedc never writes: {tokens[k - 1]}={tokens[k + 1]}")
    if depth or square:
        raise Invalid(f"{what}: unbalanced braces")
    if run_dot and shutil.which("dot"):
        done = subprocess.run(["dot", "-Tcanon"], input=text.encode("utf-8"), capture_output=True, timeout=60,
                              check=False)
        if done.returncode != 0:
            raise Invalid(f"{what}: graphviz rejects it: {done.stderr.decode('utf-8', 'replace')[:300]}")


def check_output(kind: str, data: bytes, what: str, name_hint: str = "") -> None:
    """`data`, written as `kind` (json, ir-json, trace, svg, html, dot, png, py, csv, pp), is one."""
    if kind == "png":
        if not (data.startswith(b"\x89PNG\r\n\x1a\n") and b"IEND" in data[-16:]):
            raise Invalid(f"{what}: not a whole PNG")
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(f"{what}: not UTF-8: {exc}") from None
    if kind in ("json", "trace"):
        strict_json(text, what)
    elif kind == "ir-json":
        strict_json(text, what)
        from schedc.errors import SchedcError
        from schedc.interop.ir_json import read_ir_json
        try:
            read_ir_json(text, "written.json")
        except SchedcError as exc:
            raise Invalid(f"{what}: the IR JSON schedc wrote does not read back: {exc.render()[:300]}") from None
    elif kind == "svg":
        check_xml(text, what)
    elif kind == "html":
        check_html(text, what)
    elif kind == "dot":
        check_dot(text, what)
    elif kind == "py":
        try:
            ast.parse(text)
        except SyntaxError as exc:
            raise Invalid(f"{what}: Python cannot parse it: {exc}") from None
    elif kind == "csv":
        from schedc.errors import SchedcError
        from schedc.interop.torch_csv import read_torch_csv
        try:
            read_torch_csv(text, "written.csv").to_program()
        except SchedcError as exc:
            raise Invalid(f"{what}: the CSV schedc wrote does not read back: {exc.render()[:300]}") from None
    elif kind == "pp":
        import schedc
        from schedc.api import load_text
        from schedc.errors import SchedcError
        try:
            report = schedc.check(load_text(text, "synth.pp"))
        except SchedcError as exc:
            raise Invalid(f"{what}: the schedule schedc wrote does not compile: {exc.render()[:300]}") from None
        if report.ok is not True:
            raise Invalid(f"{what}: the schedule synth wrote does not check: {report.render()[:300]}")


KIND_OF_SUFFIX = {".json": "json", ".svg": "svg", ".html": "html", ".htm": "html", ".dot": "dot", ".png": "png",
                  ".py": "py", ".csv": "csv", ".pp": "pp"}


# ---------------------------------------------------------------------------------------------
# API targets: each returns an outcome name, or raises (Invalid, or anything else: internal)
# ---------------------------------------------------------------------------------------------
def _located(err, name: str) -> None:
    for d in err.diagnostics:
        if d.span is None:
            raise Invalid(f"a SchedcError without a location: {d.render()}")
        if d.span.file != name:
            raise Invalid(f"a diagnostic names {d.span.file!r}, not {name!r}")
    err.render()
    json.dumps([d.to_dict() for d in err.diagnostics])


def _exercise(p) -> str:
    """Check a loaded program (when small): check must not raise, its report must render and its
    `to_dict()` be strict JSON; its name must give output files of its own (`_own_stem`)."""
    import schedc
    if p.num_actions > MAX_CELLS or p.num_stages * p.num_microbatches > MAX_CELLS:
        _own_stem(p.name)
        return "loaded (too big to check)"
    report = schedc.check(p)
    _printable(report.render() + report.summary(), "the report")
    try:
        json.dumps(report.to_dict(), allow_nan=False)
    except ValueError as exc:
        raise Invalid(f"Report.to_dict() is not strict JSON: {exc}") from None
    _own_stem(p.name)
    return "checks ok" if report.ok else "checks fail"


def _own_stem(name: str) -> None:
    """The stem of `name`'s output files (compile's DIR/<stem>.json) is one file name, and names
    near it (a character changed to `_` or a space, cut, or lengthened) get other stems."""
    from schedc.commands.common import safe_stem
    near = {name, name.replace("_", " "), name.replace(" ", "_"), name + "/", "_" + name[1:], name[:100],
            name + "x" * 200, name.rstrip(".") + ".", "." + name}
    stems: dict[str, str] = {}
    for n in near:
        stem = safe_stem(n)
        if not stem or stem in (".", "..") or "/" in stem or "\0" in stem or len(stem.encode("utf-8", "replace")) > 255:
            raise Invalid(f"the schedule name {n!r} gives the output stem {stem!r}, not a file name")
        if stems.setdefault(stem, n) != n:
            raise Invalid(f"the schedule names {stems[stem]!r} and {n!r} would write the same files ({stem!r})")


def _printable(text: str, what: str) -> None:
    """Text a UTF-8 stream can write (a POSIX locale writes undecodable bytes back as they came)."""
    try:
        text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise Invalid(f"{what} holds {exc.object[exc.start:exc.end]!r}, which no UTF-8 stream can print") from None


def run_parse(text: str) -> str:
    """Parse; the same text with \\r or \\r\\n line ends must give the same verdict at the same place."""
    outcome = _parsed(text)
    if "\n" in text and "\r" not in text:
        for end in ("\r", "\r\n"):
            other = _parsed(text.replace("\n", end))
            if other != outcome:
                raise Invalid(f"with lines ending in {end!r} the parse gives {other}, with \\n {outcome}")
    return outcome[0]


def _parsed(text: str) -> tuple:
    """("parsed",) or ("error CODE", line, column) of the text's parse."""
    from schedc.errors import SchedcError
    from schedc.parse import parse
    try:
        parse(text, "fuzz.pp")
    except SchedcError as err:
        _located(err, "fuzz.pp")
        span = err.diagnostics[0].span
        return f"error {err.code}", span.line, span.column
    return ("parsed",)


def run_pp(text: str) -> str:
    from schedc.api import load_text
    from schedc.errors import SchedcError
    try:
        p = load_text(text, "fuzz.pp")
    except SchedcError as err:
        _located(err, "fuzz.pp")
        return f"error {err.code}"
    return _exercise(p)


def run_csv(text: str) -> str:
    from schedc.errors import SchedcError
    from schedc.interop.torch_csv import read_torch_csv
    try:
        table = read_torch_csv(text, "fuzz.csv")
        again = read_torch_csv(table.dumps(), "fuzz.csv")
        if again.rows != table.rows:
            raise Invalid("a CSV written back does not read as the same cells")
        p = table.to_program()
    except SchedcError as err:
        _located(err, "fuzz.csv")
        return f"error {err.code}"
    return _exercise(p)


def run_ir(text: str) -> str:
    """IR JSON: read, written back (strict JSON that reads as the same program), checked."""
    from schedc.errors import SchedcError
    from schedc.interop.ir_json import dumps_ir, read_ir_json
    try:
        p = read_ir_json(text, "fuzz.json")
    except SchedcError as err:
        err.render()
        json.dumps([d.to_dict() for d in err.diagnostics])
        return f"error {err.code}"
    again = dumps_ir(p)
    strict_json(again, "the IR written back")
    if read_ir_json(again, "again.json") != p:
        raise Invalid("IR JSON written back does not read as the same program")
    return _exercise(p)


API = {"parse": run_parse, "pp": run_pp, "csv": run_csv, "ir": run_ir}


# ---------------------------------------------------------------------------------------------
# Commands: a case is {"target", "argv", "files", "limit"}; paths in argv are relative to a fresh
# folder holding `files`, and outputs go under it
# ---------------------------------------------------------------------------------------------
# which failing exits may still leave outputs: viz draws whatever the checks say; check --viz
# draws a failing schedule; sim writes its trace before saying that messages cross; compile --force
OUTPUT_ON_FAIL = {"check", "viz", "sim"}


def _files_under(folder: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = Path(dirpath, name)
            try:
                out[str(path.relative_to(folder))] = path.read_bytes() if path.is_file() else b""
            except OSError:
                out[str(path.relative_to(folder))] = b""
    return out


def _option(argv: list[str], flag: str) -> str | None:
    """The last value given to `flag` (`--flag V` or `--flag=V`), as argparse would take it."""
    value = None
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(flag + "="):
            value = a[len(flag) + 1:]
    return value


def _kind_of(command: str, argv: list[str], name: str) -> str | None:
    """What an output file of this command should be."""
    if command == "export" and (_option(argv, "-o") == name or _option(argv, "--output") == name):
        return "ir-json" if (_option(argv, "--to") or "") == "ir-json" else "csv"
    if name in (_option(argv, "--trace"), _option(argv, "--profile")):
        return "trace"
    suffix = Path(name).suffix.lower()
    if command == "compile" and suffix == ".json":
        return "ir-json"
    if command == "synth" and name in (_option(argv, "-o"), _option(argv, "--output")):
        return "pp"
    return KIND_OF_SUFFIX.get(suffix)


def check_command(case: dict, code: int, out: str, err: str, before: dict[str, bytes], after: dict[str, bytes],
                  stopped: bool = False) -> tuple[str, str]:
    """(class, detail) of a command's run that returned `code` (see the module docstring); `stopped`:
    `run` stopped where its ranks would start (so its --json object, written after the run, is not due)."""
    command = case["argv"][0] if case["argv"] else "?"
    argv = case["argv"][:case["argv"].index("--")] if "--" in case["argv"] else case["argv"]  # after it: names
    if code not in (0, 1, 2, 3) or "Traceback" in err or "internal error" in err:
        return "internal", f"exit {code}: {err[-2000:]}"
    try:
        _printable(out, "standard output")
        _printable(err, "standard error")
    except Invalid as exc:
        return "invalid", f"exit {code}: {exc}"
    if command != "compare" and re.search(r"^error\[too-large\]", err, re.M):  # (compare's names its schedule)
        return "invalid", f"exit {code}: a too-large error that names no file: {err[:300]}"
    if any(Path(name).name == "PWNED" for name in after):
        return "invalid", f"exit {code}: a pickled dump ran code (it wrote PWNED)"
    leftovers = [name for name in after if Path(name).name.startswith(".") and name.endswith(".tmp")]
    if leftovers:
        return "partial", f"exit {code}; temporary files left: {leftovers}"
    written = sorted(name for name, data in after.items() if name not in before or before[name] != data)
    if any(a in ("-h", "--help", "--version") for a in argv):  # argparse's help: nothing else happens
        return ("partial", f"exit {code} for help, yet it wrote {written}") if written else ("ok", f"{command} help")
    may_write = code == 0 or (code in (1, 3) and (command in OUTPUT_ON_FAIL or
                                                  (command == "compile" and "--force" in argv)))
    if written and not may_write:
        return "partial", f"exit {code}, yet it wrote {written}"
    try:
        if "--json" in argv or (command == "export" and (_option(argv, "--to") == "ir-json")
                                and code == 0 and not (_option(argv, "-o") or _option(argv, "--output"))):
            lines = [ln for ln in out.splitlines() if ln.strip()]
            if "--json" in argv:
                for ln in lines:
                    strict_json(ln, "a --json line")
                if code in (0, 1, 3) and not lines and not stopped:
                    raise Invalid(f"exit {code} with --json, and no JSON on standard output")
            else:
                check_output("ir-json", out.encode("utf-8", "surrogatepass"), "the IR JSON on standard output")
        if command == "export" and code == 0 and (_option(argv, "--to") == "torch-csv") \
                and not (_option(argv, "-o") or _option(argv, "--output")):
            check_output("csv", out.encode("utf-8", "surrogatepass"), "the CSV on standard output")
        out_dir = _option(argv, "-o") or _option(argv, "--output") or ""
        outside = out_dir == ".." or out_dir.startswith(("../", "/"))  # (written where the fuzzer does not look)
        if command == "compile" and code == 0 and not outside:
            made = {Path(n).suffix for n in written}
            if not {".json", ".svg"} <= made:
                raise Invalid(f"compile exited 0 but wrote only {written}")
        for name in written:
            kind = _kind_of(command, argv, name)
            if kind is not None:
                check_output(kind, after[name], f"{name} (written by {command})")
    except Invalid as exc:
        return "invalid", f"exit {code}: {exc}"
    return "ok", f"{command} exit {code}"


class Runner:
    """Runs cases in this process (the worker's side): API targets, and commands in a scratch folder."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.native = None  # the file fd 1 points to, in a worker (what C code or print() wrote)

    def redirect_native_stdout(self) -> None:
        self.native = open(self.scratch / "native-stdout.txt", "w+b")  # noqa: SIM115 - lives as long as the worker
        sys.stdout.flush()
        os.dup2(self.native.fileno(), 1)

    def __call__(self, case: dict) -> dict:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            result = self.one(case)
        said = next((w for w in caught if issubclass(w.category, RuntimeWarning)), None)
        if said is not None and result["cls"] == "ok":
            result["cls"], result["detail"] = "invalid", f"a RuntimeWarning: {said.filename}:{said.lineno}: {said.message}"
        return result

    def one(self, case: dict) -> dict:
        t0 = time.perf_counter()
        if case["target"] in API:
            try:
                cls, detail = "ok", f"{case['target']}: {API[case['target']](case['text'])}"
            except Invalid as exc:
                cls, detail = "invalid", str(exc)
            except Exception:  # noqa: BLE001 - anything but a SchedcError is a bug
                cls, detail = "internal", traceback.format_exc()
            result = {"cls": cls, "detail": detail, "out": "", "err": ""}
        else:
            result = self.command(case)
        result["seconds"] = time.perf_counter() - t0
        return result

    def command(self, case: dict) -> dict:
        from schedc.cli import main
        work = self.scratch / "case"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        for name, data in case["files"].items():
            path = work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
        before = _files_under(work)
        mark = self._native_size()
        out, err = io.StringIO(), io.StringIO()
        here = os.getcwd()
        os.chdir(work)
        launched = False
        try:
            code = main(list(case["argv"]), out, err)
        except WouldLaunch:
            code, launched = 0, True
        except BaseException:  # noqa: BLE001 - with SCHEDC_DEBUG=1 an internal error comes out as itself
            os.chdir(here)
            return {"cls": "internal", "detail": traceback.format_exc(), "out": out.getvalue(), "err": err.getvalue()}
        finally:
            if os.getcwd() != here:
                os.chdir(here)
        cls, detail = check_command(case, code, out.getvalue(), err.getvalue(), before, _files_under(work), launched)
        native = self._native_since(mark)
        if cls == "ok" and launched:
            detail = "run stopped where the ranks would start"
        if cls == "ok" and native:
            cls, detail = "invalid", f"printed to the process's standard output, not the command's: {native[:300]!r}"
        return {"cls": cls, "detail": detail, "out": out.getvalue()[-4000:], "err": err.getvalue()[-4000:]}

    def _native_size(self) -> int:
        if self.native is None:
            return 0
        _flush_native()
        return os.fstat(self.native.fileno()).st_size

    def _native_since(self, mark: int) -> bytes:
        if self.native is None:
            return b""
        _flush_native()
        size = os.fstat(self.native.fileno()).st_size
        if size <= mark:
            return b""
        self.native.seek(mark)
        return self.native.read(size - mark)


def _flush_native() -> None:
    sys.stdout.flush()
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):
        pass


def _stop_launch() -> None:
    """`schedc run`'s launcher raises WouldLaunch instead of starting ranks (in this process only)."""
    import schedc.runtime.launch as launch

    def refuse(*args, **kwargs):
        raise WouldLaunch()
    launch.launch = refuse


def _serve(conn, scratch: str) -> None:
    """The worker: its own process group (so a hang's kill takes graphviz or a browser with it),
    SCHEDC_DEBUG=1 (an internal error comes out with its traceback), standard input empty, standard
    output to a file (anything printed there other than through the command's stream is caught),
    ranks never started."""
    try:
        os.setpgrp()
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    stdin = os.open(os.devnull, os.O_RDONLY)  # an input of `-` must not wait on the terminal
    os.dup2(stdin, 0)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the worker's for its life
    os.environ["SCHEDC_DEBUG"] = "1"
    runner = Runner(Path(scratch))
    runner.redirect_native_stdout()
    _stop_launch()
    while True:
        try:
            case = conn.recv()
        except (EOFError, OSError):
            break
        conn.send(runner(case))


class Worker:
    """A forked worker process that runs one case at a time under a wall-clock and memory cap; after
    a hang, a memory blow-up or a death, the next case gets a fresh one."""

    def __init__(self, scratch: Path, memory_cap_mb: int):
        self.scratch = scratch
        self.memory_cap = memory_cap_mb * 2 ** 20
        self.proc = None
        self.conn = None

    def start(self) -> None:
        ctx = multiprocessing.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, str(self.scratch)), daemon=True)
        self.proc.start()
        child.close()

    def run(self, case: dict, cap: float) -> dict:
        if self.proc is None or not self.proc.is_alive():
            self.start()
        t0 = time.perf_counter()
        self.conn.send(case)
        deadline = t0 + cap
        while True:
            try:
                ready = self.conn.poll(max(0.0, min(0.2, deadline - time.perf_counter())))
            except (EOFError, OSError):
                ready = True
            if ready:
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    self.proc.join(5)
                    code = self.proc.exitcode
                    self.stop()
                    how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                    return {"cls": "internal", "detail": f"the worker died ({how})", "out": "", "err": "",
                            "seconds": time.perf_counter() - t0}
            rss = self._rss()
            if rss > self.memory_cap:
                self.stop()
                return {"cls": "hang", "detail": f"past the memory cap: {rss / 2 ** 20:,.0f} MiB resident",
                        "out": "", "err": "", "seconds": time.perf_counter() - t0}
            if time.perf_counter() >= deadline:
                self.stop()
                return {"cls": "hang", "detail": f"past the wall-clock cap of {cap:g} s", "out": "", "err": "",
                        "seconds": time.perf_counter() - t0}

    def _rss(self) -> int:
        try:
            with open(f"/proc/{self.proc.pid}/statm") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        try:
            self.proc.kill()
        except (OSError, AttributeError):
            pass
        self.proc.join(10)
        try:
            self.conn.close()
        except OSError:
            pass
        self.proc, self.conn = None, None


# ---------------------------------------------------------------------------------------------
# Generating cases
# ---------------------------------------------------------------------------------------------
def _pick(rng: random.Random, good: list, odd: list, p_odd: float = 0.15):
    return rng.choice(odd if odd and rng.random() < p_odd else good)


SEMANTICS = (["rendezvous", "eager", "bounded:1", "bounded:2", "nccl", "gloo"],
             ["bounded:0", "bounded:-1", "bounded:x", "bounded:", "lazy", "", "NCCL", "bounded:" + "9" * 25,
              "gloo:1", "bounded:1.5", "nccl,gloo"])
MEMORY_LIMITS = (["3", "8", "1", "0.5", "0=4,1=3", "1e308", "100"],
                 ["0", "-1", "nan", "inf", "x", "1=", "=1", "0=1,0=2", "99=1", "80GiB", "1e400", "0=nan", "",
                  "80 GiB", "GiB", "-80GiB", "0=80GiB,1=70GiB", "1_000", "0x10", "9" * 40, "0=1,", ",", "1e-320"])
# synth's cap: a cap far above any schedule's needs is rare (reported: synth/start.py sizes a set by it)
SYNTH_MEMORY_LIMITS = (["2", "3", "4", "6", "8", "0=2,1=3", "2.5"], MEMORY_LIMITS[1] + ["1e308"])
SIZED_LIMITS = (["80GiB", "512MiB", "80GB", "64", "0=80GiB,1=70GiB", "1TiB"],
                ["80XB", "GiB", "-1GiB", "nanGiB", "infGiB", "1e400GiB", "80 gib", "0GiB", "0=0GiB"])
COSTS = (["F=1,B=2", "F=1,I=1,W=1", "latency=0.1", "bandwidth=10", "act=2,weight=1,out=0.1", "overhead=0.01",
          "F=2,I=1,W=1,latency=0.5,bandwidth=4", "B=3", "dispatch=0.05", "F=1,dispatch=0.2,overhead=0.1"],
         ["latency=1e308", "F=1e308", "F=-1", "F=nan", "F=inf", "bandwidth=inf", "x=1", "F", "F=", "F=1,,B=2",
          "F=" + "9" * 400, "F=1e-320", "speed=2", "F=0,I=0,W=0,B=0", "F=1e308,B=1e308,latency=1e308", "out=1e308",
          "overhead=1e308", "=1", "F==1", "F=0x10", "F=1_0", "dispatch=1e308", "dispatch=-1", "dispatch=inf"])
SAMPLES = (["3", "20", "100"], ["0", "-1", "x", "10001", "1e3", "", "99999999999999999999"])
MODELS = (["gpt3-1.3b", "llama2-7b", "llama3-70b", "mixtral-8x7b", "olmoe-1b-7b", "deepseek-v2-lite"], ["x", "", "LLAMA2-7B", "llama2", "gpt3-1.3b "] + NASTY[:4])
HARDWARE = (["a100-80gb", "h100-80gb"], ["x", "", "a100", "H100-80GB"])
LINKS = (["nvlink", "nvlink4", "ib-200g", "ib-400g"], ["x", "", "ib"])
TIMEOUTS = (["5", "2"], ["0", "-1", "nan", "inf", "x", "1e9", "-inf", "0.0", ""])
PROVE_TIMEOUTS = (["0.5", "1", "2"], ["0", "-1", "nan", "inf", "x", "1e9", "0.001", "", "86401"])
SYNTH_LIMITS = (["0.5", "1", "2"], ["0", "-1", "nan", "inf", "x", "1e9", "0.001", ""])
ASSUMES = (["P >= 2", "M >= P", "P >= 1 and M >= 1", "M >= 2 * P", "P <= 4", "not (P < 2)", "M % 2 == 0"],
           ["P // 0 >= 1", "P >= 10**18", "P >= 1000000000000000000", "x", "", "P >", "r >= 0", "P", "P ? 1 : 0",
            "max(P) >= 1", "P >= " + "9" * 30, "Q >= 1", "P >= 2 else \"x\"", "(" * 300 + "P" + ")" * 300,
            "P % 0 == 0", "P >= -1"])
MEMORIES = (["min(P - r, M)", "M", "2 * P", "P", "min(P, M)", "V * M"],
            ["x", "min(P)", "P // 0", "P ** 2", "r", "", "-1", "0", "max(M)", "P >= 1", "9" * 30, "min(P - r, M) +",
             "abs(P - r)", "P % 0", "(" * 300 + "M" + ")" * 300, "w"])
SWEEPS = (["P=1..2", "M=1..3", "M=2..4", "P=2..3"],
          ["M=2..1", "M=0..1", "X=1..2", "P=a..b", "P=1..2..3", "P=1", "M=1..200", "M=-1..1", "", "P=1.." + "9" * 25,
           "M=1..100001", "P=1..2,M=1..99999"])  # over MAX_SWEEP: refused (M=1..100000, allowed, runs for hours)
PARAMS_ODD = ["P=0", "M=-1", "X=1", "P=1.5", "P=", "=3", "P=2=3", "M=99999999999999999999", "P=" + "9" * 30, "p=2",
              "P=2,P=3", "P=2,,M=2", " P=2", "P=-0", "M=0", "V=0", "V=-2", "P=2,M=2,V=3", "P=1", "M=1", "P=1,M=1",
              "P=64,M=2", "P=2,M=200"]
PARAMS_MEDIUM = ["P=100,M=100", "V=50", "P=2,M=5000", "P=512,M=4", "P=8,M=2048"]  # seconds each: one in ~150
# near the documented limits: each is refused or done, but in 10 to 60 s on a loaded 2-core machine
# (bench/README.md, "Fuzzing"), so they come once in a few thousand inputs
PARAMS_HUGE = ["P=65536,M=2", "P=64,M=20000", "P=2,M=999999", "P=1000,M=1000", "M=1000000", "P=5000"]
PLAN_GPUS = (["1", "2", "4", "8", "8", "16"], ["0", "-1", "x", "3", "7", "32", "64", "256", "1024", "2147483648", "1" + "0" * 30, "1.5"])
PLAN_BATCHES = (["8", "16", "32", "64"], ["0", "-1", "1", "3", "x", "1000000000", "4096", "2147483648", "1e3"])
PLAN_MODELS = (["gpt3-1.3b", "llama2-7b", "llama3-8b", "mixtral-8x7b", "olmoe-1b-7b", "deepseek-v2-lite"],
               ["x", "", "LLAMA2-7B", "llama3-70b", "deepseek-v3"])
RUN_MODELS = (["examples.mlp:build_stages", "examples.transformer:build_stages"],
              ["x", "", "os:system", "nope.mod:fn", "examples.mlp", ":", "examples.mlp:", "a:b:c"])
OUTPUT_NAMES = ["a b", 'x"y', "back\\", "<!--<script>", "é", "a'b", "{}", "$(x)", "\udcff", "\x7f", "-x"]


class Generator:
    """Seeded generation of cases, API and command alike (the parent's side)."""

    def __init__(self, corpus: dict, seed: int, weights: dict[str, float] | None = None,
                 frameworks: tuple[str, ...] = FRAMEWORKS):
        self.corpus = corpus
        self.rng = random.Random(seed)
        self.imported = sorted(n for n in IMPORTED if n.partition(":")[0] in frameworks)
        self.tags: set[str] = set()  # what a case exercises (importer, profile, setup keys, dumps)
        w = weights or WEIGHTS
        self.targets = [t for t in TARGETS if w.get(t, 0) > 0]
        self.weights = [w[t] for t in self.targets]
        self.builtins = corpus["builtins"]
        pp_sample = corpus["pp"][:60]
        self.vocab = {"pp": sorted({m.group() for t in pp_sample for m in TOKEN.finditer(t)} | set(EXTRA_TOKENS)),
                      "csv": sorted({m.group() for t in corpus["csv"] for m in CELL.finditer(t)} | set(EXTRA_CELLS)),
                      "toml": sorted(set(TOML_TOKENS))}

    def case(self) -> dict:
        target = self.rng.choices(self.targets, self.weights)[0]
        if target in API:
            return {"target": target, "text": self.text(target)}
        self.tags = set()
        argv, files = getattr(self, f"gen_{target}")()
        argv, limit = self.finish(target, argv)
        return {"target": target, "argv": argv, "files": files, "limit": limit, "tags": sorted(self.tags)}

    # ---- texts ----
    def text(self, kind: str, p_mutate: float = 0.85) -> str:
        rng = self.rng
        key = {"parse": "pp", "pp": "pp", "csv": "csv", "ir": "ir"}.get(kind, kind)
        text = rng.choice(self.corpus[key])
        if rng.random() < p_mutate:
            if key == "ir":
                text = mutate_json(text, rng) if rng.random() < 0.7 else mutate(text, rng, TOKEN, self.vocab["pp"], 2)
            else:
                text = mutate(text, rng, CELL if key == "csv" else TOKEN, self.vocab[key])
        # edits aimed at issue 35's findings: line ends, the csv field limit, IR values out of range
        if key == "pp" and rng.random() < 0.05:
            text = line_ends(text, rng)
        elif key == "csv" and rng.random() < 0.02:
            text = long_cell(text, rng)
        elif key == "ir" and rng.random() < 0.2:
            text = mutate_ir(text, rng)
        return text

    def schedule(self, files: dict, p_builtin: float = 0.45) -> tuple[str, str]:
        """(the argument naming a schedule, its format: builtin, pp, csv, json, odd); files added."""
        rng = self.rng
        r = rng.random()
        if r < p_builtin:
            return rng.choice(self.builtins), "builtin"
        if self.imported and rng.random() < 0.1:  # a framework's schedule, read from its code
            self.tags.add("importer")
            return (rng.choice(self.imported) if rng.random() < 0.9 else rng.choice(IMPORTED_ODD)), "importer"
        r = rng.random()
        stem = f"input{len(files) or ''}" if rng.random() < 0.9 else rng.choice(OUTPUT_NAMES)
        if r < 0.55:
            fmt, text = "pp", self.text("pp", 0.45)
        elif r < 0.78:
            fmt, text = "csv", self.text("csv", 0.45)
        elif r < 0.96:
            fmt, text = "json", self.text("ir", 0.45)
        else:
            odd = rng.choice(["missing.pp", ".", "out", "input.txt", "input.bin", "-", "", "input.PP", "in/put.pp",
                              "x" * 300, "x" * 300 + ".csv"])
            if odd in ("input.txt", "input.bin", "input.PP", "in/put.pp"):
                files[odd] = rng.choice([b"\xff\xfe\x00junk", b"\xef\xbb\xbf" + self.text("pp", 0.2).encode(),
                                         self.text("pp", 0.3).encode("utf-8", "surrogatepass")])
            return odd, "odd"
        name = f"{stem}.{fmt}"
        if rng.random() < 0.05:
            files[name] = b"\xef\xbb\xbf" + text.encode("utf-8", "surrogatepass")  # a UTF-8 BOM
        elif rng.random() < 0.03:
            files[name] = text.encode("utf-8", "surrogatepass")[: rng.randrange(1, 200)] + b"\xc3\x28"
        else:
            files[name] = text
        return name, fmt

    def params(self, name: str, fmt: str) -> list[str]:
        rng = self.rng
        if fmt == "importer":
            return self.imported_params(name)
        if fmt not in ("builtin", "pp") or rng.random() < 0.15:
            return [] if rng.random() < 0.8 else ["--param", rng.choice(PARAMS_ODD)]
        if rng.random() < 0.0005:
            return ["--param", rng.choice(PARAMS_HUGE)]
        if rng.random() < 0.007:
            return ["--param", rng.choice(PARAMS_MEDIUM)]
        if rng.random() < 0.08:
            return ["--param", rng.choice(PARAMS_ODD)]
        values = {"P": rng.randint(1, 4), "M": rng.randint(1, 8)}
        if name in ("interleaved_1f1b", "interleaved_zero_bubble", "looped_bfs") or (fmt == "pp" and rng.random() < 0.2):
            values["V"] = rng.randint(1, 3)
        pairs = [f"{k}={v}" for k, v in values.items() if rng.random() < 0.9]
        if not pairs:
            return []
        if rng.random() < 0.5:
            return ["--param", ",".join(pairs)]
        return [x for pair in pairs for x in ("--param", pair)]

    def imported_params(self, name: str) -> list[str]:
        """An importer's parameters: P and M, V for Megatron's interleaved, the switches BATCHED and
        OVERLAP (0 or 1); now and then one missing, out of range or not the schedule's."""
        rng = self.rng
        if rng.random() < 0.12:
            return ["--param", rng.choice(IMPORTED_PARAMS_ODD + PARAMS_ODD)]
        values = {"P": rng.randint(1, 4), "M": rng.randint(1, 8)}
        keys = IMPORTED.get(name, "PM")
        if name == "deepspeed:dualpipev":
            values["M"] = max(values["M"], 2 * values["P"])
        if "V" in keys:
            values["V"] = rng.randint(1, 3)
        for k, flag in (("B", "BATCHED"), ("O", "OVERLAP")):
            if k in keys and rng.random() < 0.5:
                values[flag] = rng.randint(0, 1)
        pairs = [f"{k}={v}" for k, v in values.items() if rng.random() < 0.93]
        return ["--param", ",".join(pairs)] if pairs else []

    def cost_file(self, files: dict) -> list[str]:
        rng = self.rng
        if rng.random() < 0.7:
            name, text = "costs.toml", rng.choice(self.corpus["costs_toml"])
            if rng.random() < 0.6:
                text = mutate(text, rng, TOKEN, self.vocab["toml"], 3)
        else:
            name, text = "profile.json", rng.choice(self.corpus["profile_json"])
            if rng.random() < 0.6:
                text = mutate_json(text, rng)
        if rng.random() < 0.03:
            return ["--costs", rng.choice(["missing.toml", ".", "", "costs.json", "x" * 300])]
        files[name] = text
        return ["--costs", name]

    def setup_file(self, files: dict) -> list[str]:
        rng = self.rng
        self.tags.add("setup")
        if rng.random() < 0.6:
            name, text = "setup.toml", rng.choice(self.corpus["setup_toml"])
            r = rng.random()
            if r < 0.25:
                text = mutate(text, rng, TOKEN, self.vocab["toml"], 3)
            elif r < 0.75:
                text = mutate_setup(text, rng, self.corpus["setup_keys"])
                self.tags.add("setup keys")
        else:
            name, text = "setup.json", rng.choice(self.corpus["setup_json"])
            r = rng.random()
            if r < 0.25:
                text = mutate_json(text, rng)
            elif r < 0.75:
                text = mutate_setup(text, rng, self.corpus["setup_keys"])
                self.tags.add("setup keys")
        if rng.random() < 0.03:
            return ["--setup", rng.choice(["missing.toml", ".", "", "setup.yaml", "x" * 300])]
        files[name] = text
        return ["--setup", name]

    def describing(self, files: dict, p: float = 0.15, p_setup: float = 0.08) -> tuple[list[str], bool]:
        """--model/--hardware/--link/--setup (sometimes), --profile with them (now and then without),
        and whether sizes are then GiB."""
        rng = self.rng
        args = []
        if rng.random() < p:
            if rng.random() < 0.7:
                args += ["--model", _pick(rng, *MODELS, 0.1)]
            if rng.random() < 0.7:
                args += ["--hardware", _pick(rng, *HARDWARE, 0.1)]
            if rng.random() < 0.2:
                args += ["--link", _pick(rng, *LINKS, 0.15)]
        if rng.random() < p_setup:
            args += self.setup_file(files)
        if rng.random() < (0.3 if args else 0.01):
            args += self.profile_file(files)
        return args, bool(args)

    def profile_file(self, files: dict) -> list[str]:
        """--profile FILE: a run's measured profile (its `activations` and `stages` calibrate the
        description)."""
        rng = self.rng
        self.tags.add("profile")
        text = rng.choice(self.corpus["measured"])
        r = rng.random()
        if r < 0.35:
            text = mutate_profile(text, rng)
        elif r < 0.55:
            text = mutate_json(text, rng)
        elif r < 0.6:
            text = mutate(text, rng, TOKEN, self.vocab["toml"], 2)
        if rng.random() < 0.04:
            return ["--profile", rng.choice(["missing.json", ".", "", "setup.toml", "x" * 300])]
        files["measured.json"] = text
        return ["--profile", "measured.json"]

    def checking(self, sized: bool) -> list[str]:
        rng = self.rng
        args = []
        if rng.random() < 0.35:
            args += ["--semantics", _pick(rng, *SEMANTICS)]
        if rng.random() < 0.2:
            args += ["--memory-limit", _pick(rng, *(SIZED_LIMITS if sized and rng.random() < 0.8 else MEMORY_LIMITS))]
        if rng.random() < 0.04:
            args += ["--engine", "z3", "--timeout", _pick(rng, *TIMEOUTS)]
        elif rng.random() < 0.05:
            args += ["--timeout", _pick(rng, *TIMEOUTS, 0.5)]
        return args

    def common(self, fmt: str) -> list[str]:
        rng = self.rng
        args = []
        if rng.random() < 0.1:
            args.append("--forward-only")
        if rng.random() < 0.05:
            args += ["--notation", rng.choice(["legacy", "current", "x"])]
        if rng.random() < 0.04:
            args += ["--format", rng.choice(["pp", "torch-csv", "ir-json", "csv"])]
        return args

    def costs(self, files: dict) -> list[str]:
        rng = self.rng
        args = []
        if rng.random() < 0.25:
            args += ["--cost", _pick(rng, *COSTS, 0.35)]
        if rng.random() < 0.15:
            args += self.cost_file(files)
        if rng.random() < 0.08:
            args.append("--no-overlap")
        return args

    def out_name(self, suffix: str) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.85:
            return f"out/x{suffix}"
        if r < 0.92:
            return f"out/{rng.choice(OUTPUT_NAMES)}{suffix}"
        return rng.choice(["out", ".", "out/", f"deep/er/x{suffix}", f"input{suffix}", f"x{suffix.upper()}",
                           "out/x", f"out/.x{suffix}", "out/x.tmp"])

    # ---- one generator per command: (argv, files) ----
    def gen_check(self):
        files: dict = {}
        argv = ["check"]
        names = [self.schedule(files) for _ in range(1 if self.rng.random() < 0.85 else self.rng.randint(2, 3))]
        argv += [n for n, _ in names]
        argv += self.params(*names[0]) + self.common(names[0][1])
        desc, sized = self.describing(files)
        argv += desc + self.checking(sized)
        if self.rng.random() < 0.4:
            argv.append("--json")
        if self.rng.random() < 0.08:
            argv += ["--sweep", _pick(self.rng, *SWEEPS, 0.3)]
        if self.rng.random() < 0.08:
            argv += ["--viz", self.out_name(self.rng.choice([".svg", ".svg", ".html", ".txt"]))]
        return argv, files

    def gen_compile(self):
        files: dict = {}
        name, fmt = self.schedule(files)
        argv = ["compile", name] + self.params(name, fmt) + self.common(fmt) + self.checking(False)
        argv += ["-o", self.out_name("") if self.rng.random() < 0.1 else "out/build"]
        if self.rng.random() < 0.25:
            argv.append("--force")
        return argv, files

    def gen_sim(self):
        files: dict = {}
        name, fmt = self.schedule(files)
        argv = ["sim", name] + self.params(name, fmt) + self.common(fmt) + self.costs(files)
        argv += self.describing(files)[0]
        if self.rng.random() < 0.1:  # as `schedc run` lowers it
            argv += ["--lower"] + ([_pick(self.rng, ["early", "needed"], ["late", "", "EARLY"], 0.2)]
                                   if self.rng.random() < 0.5 else [])
        if self.rng.random() < 0.12:  # sampled runs (a profile with a spread, sometimes)
            if self.rng.random() < 0.6:
                files["profile.json"] = self.corpus["profile_json"][-1]
                argv += ["--costs", "profile.json"]
            argv += ["--samples", _pick(self.rng, *SAMPLES, 0.25)]
            if self.rng.random() < 0.3:
                argv += ["--seed", self.rng.choice(["0", "7", "-3", "x"])]
        if self.rng.random() < 0.4:
            argv.append("--json")
        if self.rng.random() < 0.2:
            argv += ["--trace", self.out_name(".json")]
        return argv, files

    def gen_viz(self):
        files: dict = {}
        rng = self.rng
        name, fmt = self.schedule(files)
        dag = rng.random() < 0.25
        suffix = rng.choices([".svg", ".html", ".png", ".dot", ".txt", ""], [60, 25, 0.6, 12 if dag else 1, 2, 1])[0]
        argv = ["viz", name] + self.params(name, fmt) + self.common(fmt) + ["-o", self.out_name(suffix)]
        if dag:
            argv.append("--dag")
        if rng.random() < 0.2:
            argv.append("--arrows")
        argv += self.costs(files)
        desc, sized = self.describing(files)
        argv += desc + self.checking(sized)
        return argv, files

    def gen_export(self):
        files: dict = {}
        rng = self.rng
        name, fmt = self.schedule(files)
        to = rng.choice(["torch-csv", "ir-json"]) if rng.random() < 0.97 else rng.choice(["csv", "pp", ""])
        argv = ["export", name] + self.params(name, fmt) + self.common(fmt) + ["--to", to]
        if rng.random() < 0.4:
            argv += ["--level", rng.choice(["compute", "comms", "comms", "x"])]
        if rng.random() < 0.4:
            argv += ["-o", self.out_name(".json" if to == "ir-json" else ".csv")]
        return argv, files

    def gen_compare(self):
        files: dict = {}
        rng = self.rng
        argv = ["compare"]
        for _ in range(rng.choice([0, 1, 2, 2, 3])):
            name, fmt = self.schedule(files, p_builtin=0.6)
            argv.append(name)
        if rng.random() < 0.85:
            argv += ["--param", rng.choice(["P=2,M=4", "P=4,M=8,V=2", "P=2,M=2", "P=3,M=6,V=2"]) if rng.random() < 0.85
                     else rng.choice(PARAMS_ODD)]
        argv += self.costs(files)
        desc, sized = self.describing(files)
        argv += desc
        if rng.random() < 0.2:
            argv += ["--memory-limit", _pick(rng, *(SIZED_LIMITS if sized else MEMORY_LIMITS))]
        if rng.random() < 0.4:
            argv.append("--json")
        return argv, files

    def gen_plan(self):
        """plan [NAME]... --gpus N --global-batch B with a description (--model/--hardware, --setup,
        --profile), --micro-batch, --top, --json; the schedules built-ins, importers or files."""
        files: dict = {}
        rng = self.rng
        argv = ["plan"]
        for _ in range(rng.choice([0, 0, 0, 1, 1, 2, 3])):
            r = rng.random()
            if r < 0.65:
                argv.append(rng.choice(self.builtins))
            elif r < 0.8 and self.imported:
                self.tags.add("importer")
                argv.append(rng.choice(self.imported))
            else:
                argv.append(self.schedule(files, p_builtin=0.0)[0])
        argv += ["--gpus", _pick(rng, *PLAN_GPUS, 0.12)]
        argv += ["--global-batch", _pick(rng, *PLAN_BATCHES, 0.12)]
        if rng.random() < 0.3:
            argv += ["--micro-batch", _pick(rng, ["1", "2", "4"], ["0", "-1", "x", "3", "99999", "2147483648"], 0.3)]
        if rng.random() < 0.3:
            argv += ["--top", _pick(rng, ["1", "3", "10"], ["0", "-1", "x", "1000000", ""], 0.3)]
        r = rng.random()
        if r < 0.55:
            argv += ["--model", _pick(rng, *PLAN_MODELS, 0.1), "--hardware", _pick(rng, *HARDWARE, 0.08)]
            if rng.random() < 0.2:
                argv += ["--link", _pick(rng, *LINKS, 0.15)]
            if rng.random() < 0.25:
                argv += self.profile_file(files)
        elif r < 0.93:
            argv += self.setup_file(files)
            if rng.random() < 0.25:
                argv += self.profile_file(files)
        elif r < 0.97:
            argv += ["--model", _pick(rng, *PLAN_MODELS, 0.1)]  # no hardware: a usage error
        if rng.random() < 0.4:
            argv.append("--json")
        return argv, files

    def dump_file(self, name: str, data: bytes) -> bytes:
        """One rank's dump, edited: a JSON dump's structure, entries or text; a pickle's data
        (unpickled from the repository's own file, edited, pickled again), bytes cut short or
        flipped, or a pickle that would run code were it unpickled as torch does."""
        import pickle
        rng = self.rng
        is_pickle = data[:1] == b"\x80"
        self.tags.add("dump pickle" if is_pickle else "dump json")
        r = rng.random()
        if is_pickle and r < 0.15:
            self.tags.add("dump code")
            return rng.choice(CODE_PICKLES)
        if is_pickle and r < 0.3:
            i = rng.randrange(len(data))
            return data[:i] if rng.random() < 0.5 else data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
        try:
            value = pickle.loads(data) if is_pickle else json.loads(data)  # (the repository's own files)
        except Exception:  # noqa: BLE001 - a fixture that does not read is used as it is
            return data
        text = json.dumps(value)
        text = mutate_dump(text, rng) if rng.random() < 0.6 else mutate_json(text, rng)
        if is_pickle:
            try:
                return pickle.dumps(json.loads(text), protocol=rng.choice([2, 3, 4, 5]))
            except ValueError:
                return data
        if rng.random() < 0.15:
            text = mutate(text, rng, TOKEN, self.vocab["toml"], 2)
        return text.encode("utf-8", "surrogatepass")

    def gen_diagnose(self):
        """diagnose DUMP... --schedule FILE: a scenario's dumps (gloo's JSON or pickle, NCCL's), some
        edited, dropped, renamed or doubled, against its schedule (sometimes edited) or another."""
        files: dict = {}
        rng = self.rng
        dumps = rng.choice(self.corpus["dumps"])
        names = sorted(dumps["files"])
        chosen = {}
        for name in names:
            data = dumps["files"][name]
            chosen[name] = self.dump_file(name, data) if rng.random() < 0.35 else data
        r = rng.random()
        if r < 0.08 and len(chosen) > 1:
            del chosen[rng.choice(sorted(chosen))]  # a rank's dump missing
        elif r < 0.14:
            name = rng.choice(sorted(chosen))  # a name that does not end with a rank, or names one twice
            chosen[rng.choice(["dump.json", "rank0.json.bak", "rank00", "rank0.pkl", f"{name}.1", "nccl_trace_rank_x",
                               "rank99999999999999999999", "rank-1.json"])] = chosen.pop(name)
        elif r < 0.18:
            chosen[rng.choice(["rank9.json", "notes.pp", ".hidden0"])] = rng.choice(
                [b"", b"{}", b"\xff\xfe", b'{"entries": []}', dumps["schedule"].encode()])
        for name, data in chosen.items():
            files[f"dumps/{name}"] = data
        argv = ["diagnose"]
        r = rng.random()
        if r < 0.6:
            argv.append("dumps")
        elif r < 0.92:
            argv += [f"dumps/{n}" for n in sorted(chosen)]
        else:
            argv += rng.choice([["missing"], ["dumps", "dumps"], [""], ["."], ["empty"], ["dumps/" + sorted(chosen)[0]] * 2])
            files["empty/.keep"] = b""
        r = rng.random()
        if r < 0.7:
            text = dumps["schedule"]
            if rng.random() < 0.3:
                text = mutate(text, rng, TOKEN, self.vocab["pp"], 3)
            files[f"{dumps['scenario']}.pp"] = text
            argv += ["--schedule", f"{dumps['scenario']}.pp"]
        elif r < 0.97:
            argv += ["--schedule", self.schedule(files, p_builtin=0.5)[0]]
        if rng.random() < 0.12:
            argv += ["--param", rng.choice(["P=2,M=2", "P=2", "M=3", "P=4,M=8"] + PARAMS_ODD)]
        if rng.random() < 0.25:
            argv += ["--semantics", _pick(rng, ["gloo", "nccl", "rendezvous", "eager"], SEMANTICS[1], 0.3)]
        if rng.random() < 0.04:
            argv += ["--format", rng.choice(["pp", "torch-csv", "ir-json"])]
        if rng.random() < 0.4:
            argv.append("--json")
        return argv, files

    def gen_prove(self):
        files: dict = {}
        rng = self.rng
        r = rng.random()
        if r < 0.35:
            name = rng.choice(["gpipe", "1f1b", "zb_h1"]) if rng.random() < 0.85 else rng.choice(self.builtins)
        elif r < 0.9:
            text = rng.choice(self.corpus["prove_pp"] + self.corpus["pp"][:20])
            if rng.random() < 0.7:
                text = mutate(text, rng, TOKEN, self.vocab["pp"])
            name = "input.pp"
            files[name] = text
        else:
            name, _ = self.schedule(files, p_builtin=0.0)
        argv = ["prove", name]
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            argv += ["--assume", _pick(rng, *ASSUMES, 0.35)]
        if rng.random() < 0.25:
            argv += ["--memory", _pick(rng, *MEMORIES, 0.4)]
        if rng.random() < 0.2:
            if self.corpus["certificate"] is None:
                self.corpus["certificate"] = _certificates()
            schedule, text = rng.choice(self.corpus["certificate"])
            if rng.random() < 0.3:  # just the certificate, not the whole proof
                try:
                    text = json.dumps(json.loads(text).get("certificate", {}))
                except (ValueError, AttributeError):
                    pass
            if rng.random() < 0.6:
                text = mutate_json(text, rng)
            files["cert.json"] = text
            argv += ["--certificate", "cert.json" if rng.random() < 0.95 else rng.choice(["missing.json", ".", "", "x" * 300])]
            if rng.random() < 0.7 and schedule != "zbv":  # re-checking zbv's takes seconds
                argv[1] = schedule
        if rng.random() < 0.5:
            argv.append("--json")
        if rng.random() < 0.3:
            argv.append("-q")
        return argv, files

    def gen_synth(self):
        files: dict = {}
        rng = self.rng
        argv = ["synth"]
        if rng.random() < 0.9:
            P, M = rng.randint(1, 5), rng.randint(1, 12)
            argv += ["--param", f"P={P},M={M}"] if rng.random() < 0.5 else ["--param", f"P={P}", "--param", f"M={M}"]
            if rng.random() < 0.03:
                argv[-1] = rng.choice(["P=8,M=64", "P=64,M=1024", "P=65,M=2", "P=2,M=1025", "P=32,M=512"])
        if rng.random() < 0.1:
            argv += ["--param", rng.choice(PARAMS_ODD)]
        argv += self.costs(files)
        if rng.random() < 0.3:
            argv += ["--memory-limit", _pick(rng, *SYNTH_MEMORY_LIMITS, 0.1)]
        if rng.random() < 0.3:
            argv += ["--placement", rng.choice(["loop", "vshape", "vshape", "x"])]
        if rng.random() < 0.2:
            argv.append("--repeat")
        if rng.random() < 0.4:
            argv += ["-o", self.out_name(".pp")]
        if rng.random() < 0.4:
            argv.append("--json")
        return argv, files

    def gen_run(self):
        files: dict = {}
        rng = self.rng
        name, fmt = self.schedule(files)
        argv = ["run", name] + self.params(name, fmt) + self.common(fmt)
        if rng.random() < 0.97:
            argv += ["--model", _pick(rng, *RUN_MODELS, 0.15)]
        if rng.random() < 0.6:
            argv += ["--print-torchrun", "-o", self.out_name("") if rng.random() < 0.1 else "out/run"]
        for flag, good, odd, p in [("--nproc", ["2", "4"], ["0", "-1", "x", "99999", "1"], 0.15),
                                   ("--nnodes", ["2", "1"], ["0", "-1", "3", "99999", "x"], 0.1),
                                   ("--node-rank", ["0", "1"], ["-1", "2", "x", "99999"], 0.08),
                                   ("--rdzv-endpoint", ["127.0.0.1:29500", "[::1]:29500", "node0:1234"],
                                    ["127.0.0.1", ":29500", "h:0", "h:65536", "h:x", "a b:1", "", "[::1]"], 0.1),
                                   ("--backend", ["gloo"], ["nccl", "mpi"], 0.1),
                                   ("--steps", ["1", "3"], ["0", "-1", "x"], 0.1),
                                   ("--timeout", ["10", "60"], ["0", "nan", "inf", "-1", "1e9"], 0.1),
                                   ("--semantics", SEMANTICS[0], SEMANTICS[1], 0.15),
                                   ("--receives", ["early", "needed"], ["late", "", "EARLY"], 0.12),
                                   ("--batch-size", ["8", "16"], ["0", "7", "-8", "x"], 0.1),
                                   ("--dtype", ["float32", "bfloat16"], ["float8", ""], 0.05),
                                   ("--lr", ["0.1", "0"], ["-1", "nan", "inf", "x"], 0.1)]:
            if rng.random() < p:
                argv += [flag, _pick(rng, good, odd, 0.5)]
        if rng.random() < 0.08:
            argv += ["--profile", self.out_name(".json")]
        if rng.random() < 0.08:
            argv += ["--trace", self.out_name(".json")]
        if rng.random() < 0.08:
            argv.append("--no-verify")
        return argv, files

    # ---- the whole command line ----
    def finish(self, target: str, argv: list[str]) -> tuple[list[str], float | None]:
        """Shuffle the arguments now and then (drop, repeat, swap, an odd value), then give prove and
        synth their own time limit last, so that no case waits on a default of minutes."""
        rng = self.rng
        if rng.random() < 0.08 and len(argv) > 1:
            i = rng.randrange(1, len(argv))
            how = rng.choice(["drop", "dup", "swap", "odd", "odd"])
            if how == "drop":
                del argv[i]
            elif how == "dup":
                argv.insert(i, argv[i])
            elif how == "swap":
                j = rng.randrange(1, len(argv))
                argv[i], argv[j] = argv[j], argv[i]
            else:
                argv[i] = rng.choice(["", "-", "--", "--help", "-h", "--json", "--param", "nan", "-1", "1e999", "x" * 500,
                                      "--no-such-option", "\udcff", "é", "--version"] + NASTY)
        limit = None
        if target == "prove":
            value = _pick(rng, *PROVE_TIMEOUTS, 0.08)
            argv += ["--timeout", value]
        elif target == "synth":
            value = _pick(rng, *SYNTH_LIMITS, 0.08)
            argv += ["--time-limit", value]
        else:
            return argv, None
        try:
            limit = float(value)
        except ValueError:
            limit = None
        return argv, limit if limit is not None and 0 < limit < 1e6 else None


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------
def cap_for(case: dict, cap: float) -> float:
    """The wall-clock cap of one case: prove and synth get their own limit plus slack (at most the cap)."""
    if case.get("limit"):
        return min(cap, case["limit"] + SLACK_S)
    return cap


class Fuzzer:
    """Counts every input by target and class, keeps the slowest, and saves each distinct failure."""

    def __init__(self, out_dir: Path, cap: float = CAP_S, memory_cap_mb: int = MEMORY_CAP_MB,
                 in_process: bool = False):
        self.out_dir = Path(out_dir)
        self.cap = cap
        self.scratch = Path(tempfile.mkdtemp(prefix="schedc-fuzz-work-"))
        self.worker = None if in_process else Worker(self.scratch, memory_cap_mb)
        self.local = Runner(self.scratch) if in_process else None
        self.count = 0
        self.per_target: Counter = Counter()
        self.time_per_target: Counter = Counter()
        self.per_class: Counter = Counter()
        self.by_target_class: Counter = Counter()
        self.outcomes: Counter = Counter()
        self.features: Counter = Counter()  # inputs per tag (importer, profile, setup keys, dumps, ...)
        self.failures: dict[str, dict] = {}  # signature -> {"cls", "target", "count", "dir", "detail"}
        self.slowest: list[tuple[float, str, str]] = []
        self.overruns: list[tuple[float, float, str]] = []  # prove/synth past their limit + 2 s (not a failure)

    def one(self, case: dict) -> str:
        """Run one case; its class."""
        if self.worker is not None:
            result = self.worker.run(case, cap_for(case, self.cap))
        else:
            result = self._in_process(case)
        cls, target = result["cls"], case["target"]
        self.count += 1
        self.per_target[target] += 1
        self.per_class[cls] += 1
        self.by_target_class[(target, cls)] += 1
        self.features.update(case.get("tags", ()))
        if cls == "ok":
            self.outcomes[result["detail"]] += 1
        else:
            self.record(case, result)
        took = result.get("seconds", 0.0)
        self.time_per_target[target] += took
        label = describe(case)
        if len(self.slowest) < 5 or took > self.slowest[-1][0]:
            self.slowest = sorted(self.slowest + [(took, target, label)], key=lambda x: -x[0])[:5]
        if case.get("limit") and took > case["limit"] + 2 and cls == "ok":
            self.overruns.append((took, case["limit"], label))
        return cls

    def _in_process(self, case: dict) -> dict:
        """The atheris engine's way: in this process, a SIGALRM for a hang (Python code only)."""
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, cap_for(case, self.cap))
        t0 = time.perf_counter()
        try:
            return self.local(case)
        except Hang:
            return {"cls": "hang", "detail": f"past the wall-clock cap of {self.cap:g} s", "out": "", "err": "",
                    "seconds": time.perf_counter() - t0}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def signature(self, case: dict, result: dict) -> str:
        """What makes two failures the same: the exception and the innermost schedc frame of a
        traceback, else the first line of why it failed, with numbers and quoted text blanked."""
        detail = result["detail"]
        frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', detail)
        ours = [f"{Path(f).name}:{line}" for f, line, _ in frames if "schedc" in f and "fuzz" not in Path(f).name]
        lines = detail.strip().splitlines() or [""]
        if ours:
            where = f"{lines[-1].split(':')[0]} at {ours[-1]}"
        elif lines[0].startswith("Traceback"):
            where = re.sub(r"'[^']*'|\"[^\"]*\"", "S", lines[-1])[:100]
        else:
            where = re.sub(r"\d+(\.\d+)?", "N", re.sub(r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]", "S", lines[0]))[:100]
        command = case["argv"][0] if case.get("argv") else case["target"]
        return f"{result['cls']} {command} {where}"

    def record(self, case: dict, result: dict) -> None:
        sig = self.signature(case, result)
        seen = self.failures.get(sig)
        if seen is not None:
            seen["count"] += 1
            return
        n = len(self.failures) + 1
        folder = self.out_dir / f"{n:03d}-{result['cls']}-{case['target']}"
        self.failures[sig] = {"cls": result["cls"], "target": case["target"], "count": 1, "dir": str(folder),
                              "detail": result["detail"][-600:], "input": describe(case)}
        try:
            save_reproducer(folder, case, result, sig)
        except (OSError, UnicodeError) as exc:  # the count stands; say why its files are missing
            self.failures[sig]["dir"] = f"{folder} (not saved: {exc})"

    def report(self, seconds: float, engine: str) -> dict:
        return {"engine": engine, "inputs": self.count, "seconds": round(seconds, 1),
                "inputs_per_second": round(self.count / seconds, 1) if seconds else None,
                "classes": {c: self.per_class.get(c, 0) for c in CLASSES},
                "failures": self.count - self.per_class.get("ok", 0),
                "per_target": {t: self.per_target[t] for t in TARGETS if self.per_target[t]},
                "seconds_per_target": {t: round(self.time_per_target[t], 1) for t in TARGETS if self.per_target[t]},
                "per_target_class": {t: {c: self.by_target_class[(t, c)] for c in CLASSES if self.by_target_class[(t, c)]}
                                     for t in TARGETS if self.per_target[t]},
                "outcomes": dict(sorted(self.outcomes.items())),
                "features": dict(sorted(self.features.items())),
                "distinct_failures": [{"signature": s, **{k: v for k, v in f.items() if k != "detail"}}
                                      for s, f in self.failures.items()],
                "slowest": [{"seconds": round(t, 2), "target": tg, "input": x[:160]} for t, tg, x in self.slowest],
                "overruns": [{"seconds": round(t, 1), "limit": lim, "input": x[:160]} for t, lim, x in self.overruns[:20]],
                "reproducers": str(self.out_dir)}

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        shutil.rmtree(self.scratch, ignore_errors=True)


def describe(case: dict) -> str:
    """One line: the command line, or the target and the start of its text."""
    if case.get("argv") is not None and case["target"] not in API:
        return "schedc " + shlex.join(case["argv"])
    return f"{case['target']}: {case['text'][:100]!r}"


def save_reproducer(folder: Path, case: dict, result: dict, signature: str) -> None:
    """The input's files, `repro.sh` (runs it from the folder, with a traceback), what it printed, why."""
    folder.mkdir(parents=True, exist_ok=True)
    if case["target"] in API:
        ext, call = API_REPRO.get(case["target"], ("txt", "print(repr(text))"))
        (folder / f"input.{ext}").write_bytes(case["text"].encode("utf-8", "surrogatepass"))
        script = (f"#!/bin/sh\ncd \"$(dirname \"$0\")\" && python -c \"text = open('input.{ext}', encoding='utf-8', "
                  f"errors='surrogatepass').read(); {call}\"\n")
    else:
        for name, data in case["files"].items():
            path = folder / "files" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
        (folder / "files").mkdir(exist_ok=True)
        argv = case["argv"]
        (folder / "argv.json").write_text(json.dumps(argv), encoding="utf-8")
        script = ("#!/bin/sh\n# run from a copy: outputs go beside the inputs\ncd \"$(dirname \"$0\")/files\" && "
                  "SCHEDC_DEBUG=1 exec python -m schedc " + shlex.join(argv) + "\n")
    (folder / "repro.sh").write_bytes(script.encode("utf-8", "surrogateescape"))
    os.chmod(folder / "repro.sh", 0o755)
    (folder / "why.txt").write_text(f"{signature}\n\n{describe(case)}\n\n{result['detail']}\n", encoding="utf-8",
                                    errors="backslashreplace")
    (folder / "stdout.txt").write_text(result.get("out", ""), encoding="utf-8", errors="backslashreplace")
    (folder / "stderr.txt").write_text(result.get("err", ""), encoding="utf-8", errors="backslashreplace")


API_REPRO = {  # an API input's file suffix, and the Python that runs it on `text`
    "parse": ("pp", "from schedc.parse import parse; parse(text, 'fuzz.pp')"),
    "pp": ("pp", "import schedc; from schedc.api import load_text; schedc.check(load_text(text, 'fuzz.pp'))"),
    "csv": ("csv", "import schedc; from schedc.interop.torch_csv import read_torch_csv; "
                   "schedc.check(read_torch_csv(text, 'fuzz.csv').to_program())"),
    "ir": ("json", "import schedc; from schedc.interop.ir_json import read_ir_json; "
                   "schedc.check(read_ir_json(text, 'fuzz.json'))")}


def _alarm(signum, frame):
    raise Hang()


def print_report(rep: dict, stream=sys.stdout) -> None:
    w = stream.write
    classes = rep["classes"]
    w(f"schedc fuzz ({rep['engine']}): {rep['inputs']:,} inputs in {rep['seconds']:.1f} s "
      f"({rep['inputs_per_second']:,.1f} inputs/s); {rep['failures']} failure(s): "
      + ", ".join(f"{c} {classes[c]:,}" for c in CLASSES) + "\n")
    w(f"  {'target':10}" + "".join(f"{c:>10}" for c in ("inputs",) + CLASSES) + f"{'seconds':>10}\n")
    for t, n in rep["per_target"].items():
        row = rep["per_target_class"][t]
        w(f"  {t:10}{n:>10,}" + "".join(f"{row.get(c, 0):>10,}" for c in CLASSES)
          + f"{rep['seconds_per_target'][t]:>10,.1f}\n")
    if rep.get("features"):
        w("  inputs that use: " + ", ".join(f"{k} {v:,}" for k, v in rep["features"].items()) + "\n")
    w("  outcomes:\n")
    for k, v in rep["outcomes"].items():
        w(f"    {k[:60]:60} {v:>8,}\n")
    for f in rep["distinct_failures"]:
        w(f"  FAILURE x{f['count']} {f['signature']}\n      {f['input'][:200]}\n      reproducer: {f['dir']}\n")
    w("  slowest: " + "; ".join(f"{s['target']} {s['seconds']} s" for s in rep["slowest"]) + "\n")
    for o in rep["overruns"]:
        w(f"  note: {o['seconds']} s with a limit of {o['limit']} s: {o['input']}\n")
    w(f"  reproducers: {rep['reproducers']}\n")


def preload(frameworks: tuple[str, ...]) -> tuple[str, ...]:
    """Import the frameworks whose schedules are inputs here, before any worker forks, so that a
    fresh worker (after a hang) does not spend the seconds again inside an input's cap (Megatron-Core
    takes 5 s); those not installed are left out of the inputs."""
    from schedc.errors import SchedcError
    from schedc.importers.common import require
    modules = {"deepspeed": "deepspeed.runtime.pipe.schedule", "megatron": "megatron.core.pipeline_parallel.schedules"}
    have = []
    for fw in frameworks:
        try:
            require(fw, modules[fw])  # (as the importer does: quietly, and only a tested version)
        except SchedcError:
            continue
        have.append(fw)
    return tuple(have)


def run_random(args, corpus, stream=sys.stdout) -> tuple[Fuzzer, float]:
    frameworks = preload(tuple(f for f in args.importers.split(",") if f)) if args.importers else ()
    gen = Generator(corpus, args.seed, _weights(args.targets), frameworks)
    fz = Fuzzer(Path(args.out), cap=args.cap, memory_cap_mb=args.memory_cap)
    start = time.perf_counter()
    stop_at = start + args.minutes * 60 if args.minutes else None
    last = start
    try:
        while True:
            if args.examples and fz.count >= args.examples:
                break
            if stop_at is not None and time.perf_counter() >= stop_at:
                break
            fz.one(gen.case())
            if args.progress and time.perf_counter() - last >= 30:
                last = time.perf_counter()
                bad = ", ".join(f"{c} {fz.per_class[c]}" for c in CLASSES[1:] if fz.per_class[c]) or "no failures"
                stream.write(f"  ... {fz.count:,} inputs, {last - start:.0f} s, {bad}\n")
                stream.flush()
    except KeyboardInterrupt:
        stream.write("  interrupted: the report covers the inputs run so far\n")
    finally:
        fz.close()
    return fz, time.perf_counter() - start


def _weights(targets: str | None) -> dict[str, float]:
    if not targets:
        return dict(WEIGHTS)
    chosen = {t.strip() for t in targets.split(",") if t.strip()}
    return {t: w for t, w in WEIGHTS.items() if t in chosen}


def instrumented_imports() -> None:
    """Import schedc's modules under atheris's coverage instrumentation (before anything else
    imports them): everything but the runtime and lowering (torch) and the strategies."""
    import importlib
    import pkgutil

    import atheris
    with atheris.instrument_imports(include=["schedc"]):
        import schedc
        for info in pkgutil.walk_packages(schedc.__path__, "schedc."):
            if not info.name.startswith(("schedc.runtime", "schedc.lower", "schedc.strategies", "schedc.viz")):
                importlib.import_module(info.name)


def run_atheris(args, corpus) -> None:
    """libFuzzer drives the API targets: the first byte picks one (parse, pp, csv, ir), the rest is
    the text (UTF-8, errors replaced), run in this process. After --examples inputs (seeds
    included) the report is printed and the process ends (libFuzzer itself would exit without
    returning)."""
    import atheris
    fz = Fuzzer(Path(args.out), cap=args.cap, in_process=True)
    seed_dir = Path(tempfile.mkdtemp(prefix="schedc-fuzz-seeds-"))
    lanes = [("parse", "pp"), ("pp", "pp"), ("csv", "csv"), ("ir", "ir")]
    k = 0
    for t, (target, kind) in enumerate(lanes):
        for text in corpus[kind]:
            (seed_dir / f"{k:05d}").write_bytes(bytes([t]) + text.encode("utf-8", "surrogatepass"))
            k += 1
    start = time.perf_counter()
    limit = args.examples or 100_000

    def one(data: bytes) -> None:
        if data:
            target, _ = lanes[data[0] % len(lanes)]
            fz.one({"target": target, "text": data[1:].decode("utf-8", "replace")})
        if fz.count >= limit:
            rep = fz.report(time.perf_counter() - start, "atheris")
            sys.stdout.flush()
            print_report(rep)
            if args.json:
                print(json.dumps(rep))
            sys.stdout.flush()
            os._exit(1 if rep["failures"] else 0)

    atheris.Setup([sys.argv[0], f"-runs={limit + k + 10}", "-max_len=16384", f"-seed={args.seed + 1}",
                   "-print_final_stats=0", "-close_fd_mask=0", str(seed_dir)], one)
    atheris.Fuzz()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Classes, targets and the saved reproducers: see the top of bench/fuzz.py.")
    p.add_argument("--minutes", type=float, metavar="T", help="run for T minutes (the campaign: --minutes 10)")
    p.add_argument("--examples", type=int, metavar="N",
                   help="run N inputs (default 100,000 when --minutes is not given; with both, whichever comes first)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=150, metavar="K",
                   help="generated programs to start from (and K/4 grammar texts; default 150)")
    p.add_argument("--targets", metavar="T,...", help="only these targets: " + ", ".join(TARGETS))
    p.add_argument("--importers", default=",".join(FRAMEWORKS), metavar="F,...",
                   help="the frameworks whose schedules (deepspeed:train, megatron:interleaved, ...) are inputs, "
                        "imported before the clock starts (default: deepspeed,megatron, those installed; '' for none)")
    p.add_argument("--cap", type=float, default=CAP_S, metavar="S",
                   help=f"wall-clock cap per input, past which it is a hang (default {CAP_S:g}; prove and synth: "
                        f"their own limit + {SLACK_S:g} s, at most this)")
    p.add_argument("--memory-cap", type=int, default=MEMORY_CAP_MB, metavar="MIB",
                   help=f"resident memory of the worker past which an input is a hang (default {MEMORY_CAP_MB})")
    p.add_argument("--engine", choices=["random", "atheris"], default="random",
                   help="seeded random generation and mutation in a worker (default), or atheris/libFuzzer on the "
                        "API targets in this process (pip install atheris)")
    p.add_argument("--out", "--crashes", dest="out", metavar="DIR",
                   help="where each distinct failure's reproducer goes (default: a new folder under the temp dir)")
    p.add_argument("--progress", action="store_true", help="a line every 30 s")
    p.add_argument("--json", action="store_true", help="also print the report as one JSON line")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.examples is None and args.minutes is None:
        args.examples = 100_000
    if (args.examples is not None and args.examples < 1) or (args.minutes is not None and args.minutes <= 0) \
            or args.seeds < 4 or args.cap <= 0:
        p.error("--examples, --minutes and --cap must be positive and --seeds at least 4")
    unknown = sorted(set(_weights(args.targets)) ^ {t.strip() for t in (args.targets or "").split(",") if t.strip()}) \
        if args.targets else []
    if unknown:
        p.error(f"unknown target(s) {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    if set(f for f in args.importers.split(",") if f) - set(FRAMEWORKS):
        p.error(f"--importers: choose from {', '.join(FRAMEWORKS)}")
    args.out = args.out or tempfile.mkdtemp(prefix="schedc-fuzz-")
    if args.engine == "atheris":
        try:
            instrumented_imports()
        except ImportError:
            p.error("atheris is not installed (pip install atheris); use --engine random")
        run_atheris(args, seeds(args.seed, args.seeds))
        return 0  # not reached: libFuzzer exits
    corpus = seeds(args.seed, args.seeds)
    fz, seconds = run_random(args, corpus)
    rep = fz.report(seconds, "random")
    print_report(rep)
    if args.json:
        print(json.dumps(rep))
    return 1 if rep["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
