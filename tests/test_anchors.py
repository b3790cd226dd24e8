"""docs/units.md's anchor tables are bench/anchors.py's output: each column recomputed here where
its anchor imports (DeepSpeed comes with the importers extra; llm-analysis and Calculon only where
installed by hand, see bench/anchors.py), and the disagreements the page explains held as facts."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import anchor_models as A

ROOT = Path(__file__).resolve().parents[1]


def doc_table(first_header: str) -> dict[str, dict[str, str]]:
    """The page's table whose first header cell is `first_header`: row label -> column -> cell."""
    text = (ROOT / "docs" / "units.md").read_text(encoding="utf-8")
    start = text.index(f"| {first_header} |")
    lines = text[start:].split("\n\n", 1)[0].splitlines()
    split = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]  # noqa: E731
    header = split(lines[0])
    return {row[0]: dict(zip(header[1:], row[1:])) for row in map(split, lines[2:])}


def _available(column: str) -> None:
    if column in A.AVAILABILITY and not A.AVAILABILITY[column]():
        pytest.skip(f"{column} does not import here (bench/anchors.py says how to install it)")


@pytest.mark.parametrize("column", list(A.STATE_COLUMNS))
def test_the_model_states_table_is_the_anchors_output(column):
    _available(column)
    table = doc_table("job (bf16, Adam)")
    assert list(table) == [job.label for job in A.JOBS]
    for job in A.JOBS:
        assert table[job.label][column] == A.state_cells(job, {column: A.STATE_COLUMNS[column]})[column], job.label


@pytest.mark.parametrize("column", [c for c in A.LAYER_COLUMNS if c != "measured"])
def test_the_layer_table_is_the_anchors_output(column):
    _available(column)
    table = doc_table("layer (s 8192, b 1)")
    assert list(table) == [case.label for case in A.LAYERS]
    for case in A.LAYERS:
        assert table[case.label][column] == A.layer_cells(case, {column: A.LAYER_COLUMNS[column]})[column], case.label


@pytest.mark.slow
def test_the_measured_column_is_a_real_layer_and_schedc_matches_it():
    """A real Llama 3 8B-wide layer on the CPU (about 20 s): the page's column, and schedc's model on
    the CPU's kernels equal to it within 1%."""
    pytest.importorskip("torch")
    table = doc_table("layer (s 8192, b 1)")
    for case in A.LAYERS:
        measured = A.measured_layer(case)
        assert table[case.label]["measured"] == A._cell(measured, A.MIB, 0, "measured")
        if measured is not None:
            assert A.schedc_layer(case, "cpu") == pytest.approx(measured, rel=0.01)


def test_megatrons_formula_re_derived():
    """The re-derived formulas give Megatron-LM's own figures: 18 bytes a parameter, 6 + 12/N with the
    distributed optimizer, sbh (18 + 4f/h)/t with sequence parallelism and selective recomputation,
    and sbh (10 + 24/t) otherwise, whatever the checkpointing mode."""
    job = A.Job("llama3-8b", 1, 1, 8, 0)
    m = A.model("llama3-8b")
    params = A.megatron_states(job) / 18
    assert params == pytest.approx(8.03e9, rel=0.001)  # Llama 3 8B, with its norms
    assert A.megatron_states(A.Job("llama3-8b", 1, 1, 8, 1)) == pytest.approx(params * (6 + 12 / 8))
    assert A.megatron_states(A.Job("llama3-8b", 1, 1, 8, 2)) is None
    sbh = m.seq_len * m.hidden
    assert A.megatron_layer(A.LayerCase("llama3-8b", "selective", 8)) == sbh * (18 + 4 * 14336 / 4096) / 8
    assert A.megatron_layer(A.LayerCase("llama3-8b", "full", 1)) == A.megatron_layer(A.LayerCase("llama3-8b", "none", 1))


def test_the_gradient_bytes_the_runtimes_hold_beyond_schedcs():
    """schedc counts 16-bit gradients (the ZeRO paper's 16 bytes); Megatron-LM holds fp32 ones (2
    bytes a parameter more); DeepSpeed's ZeRO-2 estimator an fp32 copy of the gradient partition
    (4/N more)."""
    job = A.Job("llama3-8b", 1, 1, 8, 0)
    params = A._rank_params(job)
    assert A.schedc_states(job) == pytest.approx(16 * params)
    ds = A.deepspeed_states(A.Job("llama3-8b", 1, 1, 8, 2))
    if ds is not None:
        assert ds - A.schedc_states(A.Job("llama3-8b", 1, 1, 8, 2)) == pytest.approx(4 * params / 8, rel=1e-6)


def test_fp32_gradients_are_megatrons_count():
    """With `accumulate_allreduce_grads_in_fp32` schedc counts Megatron-LM's 18 bytes a parameter (6 +
    12/N with its distributed optimizer, ZeRO-1): on every job its formula covers the two agree to
    0.01% (Megatron-LM also counts the norms' weights, O(h) a layer, which schedc leaves out); without
    it schedc is 2 bytes a parameter below. DeepSpeed's ZeRO-2 estimator holds a 16-bit copy of the
    gradient partition beside the fp32 one: 2/N above schedc's fp32 count."""
    covered = [job for job in A.JOBS if A.megatron_states(job) is not None]
    assert [job.zero for job in covered] == [0, 1, 1]
    for job in covered:
        assert A.schedc_states(job, True) == pytest.approx(A.megatron_states(job), rel=1e-4), job.label
        assert A.megatron_states(job) - A.schedc_states(job) == pytest.approx(2 * A._rank_params(job), rel=1e-3)
    zero2 = A.Job("llama3-8b", 1, 1, 8, 2)
    ds = A.deepspeed_states(zero2)
    if ds is not None:
        assert ds - A.schedc_states(zero2, True) == pytest.approx(2 * A._rank_params(zero2) / 8, rel=1e-6)


def test_zero_3_holds_the_gathered_layers():
    """ZeRO-3, like FSDP, gathers the 16-bit weights of the layer computed and the next."""
    from schedc import estimate
    job = A.Job("llama3-8b", 1, 1, 8, 3)
    params = A._rank_params(job)
    layer = estimate.rank_params(A.model("llama3-8b"), 0)
    assert A.schedc_states(job) == pytest.approx(16 * params / 8 + 2 * 2 * layer)


def test_the_page_names_every_anchor():
    text = (ROOT / "docs" / "units.md").read_text(encoding="utf-8")
    for name in ("theoretical_memory_usage.py", "estimate_zero2_model_states_mem_needs", "llm-analysis",
                 "Calculon", "FSDPMemTracker", "Korthikanti"):
        assert re.search(re.escape(name), text), name
