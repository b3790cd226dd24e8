"""The anchors schedc's memory is read against (docs/units.md, "Anchors"): Megatron-LM's theoretical
memory (megatron/training/theoretical_memory_usage.py, not in the megatron-core package: its formulas
re-derived here), Korthikanti et al. 2022's closed forms, and, called live where they import,
DeepSpeed's ZeRO estimators, llm-analysis and Calculon; a real torch layer measured
(tests/reference_layers.py). bench/anchors.py prints the tables; tests/test_anchors.py holds
docs/units.md to them. Each anchor returns bytes, or None where it has no answer for the case.
"""
from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, replace
from functools import lru_cache

GIB, MIB = 2 ** 30, 2 ** 20


@dataclass(frozen=True)
class Job:
    """One rank of a job: the model preset, tensor, pipeline and data-parallel degrees, ZeRO stage
    (0: plain data parallelism; 1: the optimizer sharded, Megatron-LM's distributed optimizer)."""

    model: str
    tp: int
    pp: int
    dp: int
    zero: int

    @property
    def label(self) -> str:
        return f"{self.model} tp {self.tp} pp {self.pp} dp {self.dp} ZeRO-{self.zero}"


@dataclass(frozen=True)
class LayerCase:
    """One transformer layer on one microbatch: the preset's widths, the checkpointing mode
    (`selective` is Megatron-LM's: the attention core recomputed), the tensor-parallel degree, with
    sequence parallelism when it is above 1."""

    model: str
    mode: str
    tp: int

    @property
    def label(self) -> str:
        sp = " + SP" if self.tp > 1 else ""
        return f"{self.model} layer, {self.mode}, tp {self.tp}{sp}"


JOBS = [Job("llama3-8b", 1, 1, 8, z) for z in range(4)] + [
    Job("llama3-70b", 8, 4, 4, 1), Job("llama3-70b", 8, 1, 16, 3)]
LAYERS = [LayerCase("llama3-8b", "none", 1), LayerCase("llama3-8b", "selective", 1), LayerCase("llama3-8b", "full", 1),
          LayerCase("llama3-8b", "none", 8), LayerCase("llama3-8b", "selective", 8)]


@lru_cache(maxsize=None)
def model(name: str):
    from schedc.hardware import describe
    return describe(model=name, hardware="h100-80gb").model


# ---- schedc ----
def schedc_states(job: Job, fp32_grads: bool = False) -> float:
    """The model states schedc counts on the job's first pipeline rank (embedding and L/pp layers);
    with `fp32_grads`, gradients accumulated and reduced in fp32 (`accumulate_allreduce_grads_in_fp32`)."""
    import schedc
    from schedc.hardware import describe
    from schedc.jobs import mesh
    setup = describe(model=job.model, hardware="h100-80gb")
    assert setup is not None
    parallel = mesh.Parallel(dp_replicate=job.dp, tp=job.tp, pp=job.pp, zero_stage=job.zero)
    setup = replace(setup, parallel=parallel,
                    model=replace(setup.model, accumulate_allreduce_grads_in_fp32=fp32_grads))
    program = schedc.load("1f1b", {"P": job.pp, "M": job.pp})
    return setup.model_states(program)[0] * GIB


def schedc_layer(case: LayerCase, device: str = "cuda") -> float:
    """schedc's activations of one layer, one microbatch (bf16, sdpa attention), on one rank; on
    `device`'s kernels (the CPU's RMSNorm saves differently from CUDA's)."""
    from schedc import estimate
    from schedc.jobs import activations as A
    m = model(case.model)
    mode, option = ("selective", "attention") if case.mode == "selective" else (case.mode, "op")
    kept = A.saved(estimate.shape(m, device), m.attention, mode, option)
    return A.bytes_per_token(kept, case.tp, True) * m.seq_len * m.micro_batch


# ---- Megatron-LM's theoretical memory, re-derived ----
def megatron_states(job: Job) -> float | None:
    """compute_weight_and_optimizer_memory: the most loaded shard holds (its L/pp layers + the input
    embedding) / tp, and the output layer too when pp = 1 (untied); 18 bytes a parameter (fp32
    gradients), or 6 + 12/dp with the distributed optimizer (ZeRO-1). It has no ZeRO-2 or -3."""
    if job.zero > 1:
        return None
    m = model(job.model)
    h, f, kv = m.hidden, m.ffn_hidden, m.kv_heads / m.heads
    norm = 1 if m.norm == "rmsnorm" else 2
    mlp = f * (1.5 if m.gated_mlp else 1.0)
    layer = 2 * h * (mlp + norm) + 2 * h * h * (1 + kv)
    block = layer * m.layers + norm * h
    embedding = h * m.vocab
    shard = (block / job.pp + embedding) / job.tp
    if job.pp == 1 and not m.tied_embeddings:
        shard += embedding / job.tp
    per = 18 if job.zero == 0 else 6 + 12 / job.dp
    return shard * per


def megatron_layer(case: LayerCase) -> float:
    """The per-layer term report_theoretical_memory uses: with sequence parallelism and selective
    recomputation, sbh (18 + 4f/h) / t (compute_activation_memory); in every other case
    sbh (10 + 24/t) (compute_activation_memory_without_sp), whatever the checkpointing mode."""
    m = model(case.model)
    sbh = m.seq_len * m.micro_batch * m.hidden
    if case.tp > 1 and case.mode == "selective":
        return sbh * (18 + 4 * m.ffn_hidden / m.hidden) / case.tp
    return sbh * (10 + 24 / case.tp)


def korthikanti_layer(case: LayerCase) -> float:
    """Korthikanti et al. 2022, Table 2 (a GPT layer: f = 4h, eager attention, dropout), at the
    model's h, a and s; sequence parallelism with t > 1; full recomputation keeps the layer's input."""
    m = model(case.model)
    t, s, h, a = case.tp, m.seq_len, m.hidden, m.heads
    sbh = s * m.micro_batch * h
    core = 5 * a * s / (h * t)
    sp = t > 1
    if case.mode == "full":
        return 2 * sbh / t
    rest = 34 / t if sp else 10 + 24 / t
    return sbh * (rest + (core if case.mode == "none" else 0))


# ---- DeepSpeed's ZeRO estimators, live ----
def deepspeed_states(job: Job) -> float | None:
    """estimate_zero2_model_states_mem_needs / estimate_zero3_... (no offload) for the rank's
    parameters over the data-parallel GPUs; ZeRO-3's largest layer is the largest module, the
    embedding's V x h / tp. None for stages 0 and 1 (DeepSpeed has no estimator for them) or when
    deepspeed does not import."""
    if job.zero < 2:
        return None
    try:
        with _quiet():
            from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
            from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    except Exception:  # noqa: BLE001 (not installed, or it fails to import on this machine)
        return None
    params = _rank_params(job)
    if job.zero == 2:
        return float(estimate_zero2_model_states_mem_needs(params, job.dp, 1, cpu_offload=False)[1])
    largest = model(job.model).vocab * model(job.model).hidden // job.tp
    return float(estimate_zero3_model_states_mem_needs(params, largest, job.dp, 1, cpu_offload=False,
                                                       cpu_offload_params=False)[1])


def _rank_params(job: Job) -> int:
    """The parameters of the job's first pipeline rank, as schedc counts them (matrices only)."""
    from schedc import estimate
    from schedc.jobs import mesh
    return estimate.stages(model(job.model), job.pp, mesh.Parallel(tp=job.tp))[0].params


# ---- llm-analysis 0.2.2, live ----
def _llm_analysis(job_or_case):
    try:
        with _quiet():
            from llm_analysis import analysis, config
    except Exception:  # noqa: BLE001
        return None
    m = model(job_or_case.model)
    cfg = config.ModelConfig(name=m.name, num_layers=m.layers, n_head=m.heads, hidden_dim=m.hidden, vocab_size=m.vocab,
                             max_seq_len=m.seq_len, num_key_value_heads=m.kv_heads, ffn_embed_dim=m.ffn_hidden,
                             expansion_ratio=m.ffn_hidden / m.hidden)
    gpu = config.GPUConfig("h100-sxm-80gb", 80, 3352, 450, 8e-06, 989)
    tp, pp, dp = job_or_case.tp, getattr(job_or_case, "pp", 1), getattr(job_or_case, "dp", 1)
    par = config.ParallelismConfig(tp_size=tp, pp_size=pp, dp_size=dp, sp_size=tp)
    with _quiet():
        return analysis, analysis.LLMAnalysis(cfg, gpu, parallelism_config=par)


def llm_analysis_states(job: Job) -> float | None:
    """What llm-analysis's training() counts before activations: the weights, optimizer state and
    gradients of L/pp layers, the embedding and the last norm, per its DeepSpeed ZeRO stage."""
    got = _llm_analysis(job)
    if got is None:
        return None
    analysis, a = got
    zero = analysis.DSZeRO(job.zero)
    layers = model(job.model).layers // job.pp
    with _quiet():
        per_layer = a.get_weight_memory_per_layer(zero) + sum(a.get_memory_optimizer_state_and_gradient_per_layer(
            ds_zero=zero))
        ends = (a.get_memory_embedding(zero) + a.get_weight_memory_last_layernorm(zero)
                + sum(a.get_memory_optimizer_state_and_gradient_embedding(ds_zero=zero))
                + sum(a.get_memory_optimizer_state_and_gradient_last_layernorm(ds_zero=zero)))
    return float(per_layer * layers + ends)


def llm_analysis_layer(case: LayerCase) -> float | None:
    """get_activation_memory_per_layer in training, flash attention, a gated MLP, fp32 norms (its
    defaults otherwise); its `selective` is Megatron-LM's."""
    got = _llm_analysis(case)
    if got is None:
        return None
    analysis, a = got
    mode = {"none": "NONE", "selective": "SELECTIVE", "full": "FULL"}[case.mode]
    m = model(case.model)
    with _quiet():
        return float(a.get_activation_memory_per_layer(
            m.micro_batch, m.seq_len, is_inference=False, activation_recomputation=analysis.ActivationRecomputation[mode],
            flash_attn=True, mlp_gated_linear_units=True))


# ---- Calculon, live from a checkout (CALCULON_PATH; the PyPI package of that name is another project) ----
def _calculon():
    path = os.environ.get("CALCULON_PATH")
    if path and path not in sys.path:
        sys.path.insert(0, path)
    try:
        import calculon
        from calculon.llm import Llm
    except Exception:  # noqa: BLE001
        return None
    return calculon, Llm


def _calculon_run(name: str, tp: int, pp: int, dp: int, recompute: str, sharded: bool) -> dict | None:
    got = _calculon()
    if got is None:
        return None
    calculon, Llm = got
    m = model(name)
    app = Llm.Application({"hidden": m.hidden, "feedforward": m.ffn_hidden, "seq_size": m.seq_len,
                           "attn_heads": m.heads, "attn_size": m.hidden // m.heads, "num_blocks": m.layers})
    exe = Llm.Execution.from_json({
        "num_procs": tp * pp * dp, "tensor_par": tp, "pipeline_par": pp, "data_par": dp, "tensor_par_net": 0,
        "pipeline_par_net": 0, "data_par_net": 0, "batch_size": dp * pp, "microbatch_size": m.micro_batch,
        "datatype": "float16", "fused_activation": True, "attention_type": "multihead",
        "activation_recompute": recompute, "pipeline_interleaving": 1, "optimizer_sharding": sharded,
        "tensor_par_comm_type": "rs_ag" if tp > 1 else "ar", "tensor_par_overlap": "none", "seq_par_ag_redo": False,
        "data_par_overlap": False, "weight_offload": False, "activations_offload": False, "optimizer_offload": False,
        "training": True})
    root = os.environ["CALCULON_PATH"]
    system = calculon.io.read_json_file(os.path.join(root, "systems", "h100_80g_nvl8.json"))
    system["mem1"]["GiB"] = 1e9  # the totals are wanted, not its verdict on fitting
    llm = Llm(app, logging.getLogger("calculon"))
    llm.compile(calculon.System(system), exe)
    llm.run(calculon.System(system))
    return llm.get_stats_json(False)


def calculon_states(job: Job) -> float | None:
    """Calculon's weight, weight-gradient and optimizer space (its blocks only: no embedding or output
    layer); its `optimizer_sharding` shards the optimizer and the 16-bit gradients, so it answers
    ZeRO-0 and ZeRO-2."""
    if job.zero not in (0, 2):
        return None
    stats = _calculon_run(job.model, job.tp, job.pp, job.dp, "none", job.zero == 2)
    if stats is None:
        return None
    return float(stats["weight_space"] + stats["weight_grad_space"] + stats["optimizer_space"])


def calculon_layer(case: LayerCase) -> float | None:
    """Calculon's activations stored for one block (a GPT block: eager attention, two-matrix MLP);
    full recomputation keeps the block's checkpoint."""
    recompute = {"none": "none", "selective": "attn_only", "full": "full"}[case.mode]
    stats = _calculon_run(case.model, case.tp, 1, 1, recompute, False)
    if stats is None:
        return None
    return float(stats["block_act_checkpoint_size"] if case.mode == "full" else stats["block_act_storage_space"])


# ---- measured: a real layer of the preset's widths, in torch on the CPU ----
def measured_layer(case: LayerCase) -> float | None:
    """A real Llama-style layer of the preset's widths (tests/reference_layers.py: torchtitan's block,
    sdpa attention, bf16) measured on the CPU at 16 tokens, per token times the preset's sequence;
    a fused kernel keeps nothing of s x s, so its bytes a token do not depend on s. One rank only:
    None with tensor parallelism."""
    if case.tp > 1:
        return None
    import reference_layers as ref
    m = model(case.model)
    c = ref.Config(hidden=m.hidden, heads=m.heads, kv_heads=m.kv_heads, ffn_hidden=m.ffn_hidden, seq_len=16,
                   micro_batch=1, recompute_core=case.mode == "selective")
    mode = "none" if case.mode == "selective" else case.mode
    return ref.layer_bytes_per_token(c, mode) * m.seq_len * m.micro_batch


class _quiet:
    """Keep an anchor's own logging and prints off the table."""

    def __enter__(self):
        self.level = logging.root.manager.disable
        logging.disable(logging.CRITICAL)
        self.stdout, sys.stdout = sys.stdout, open(os.devnull, "w")

    def __exit__(self, *exc):
        sys.stdout.close()
        sys.stdout = self.stdout
        logging.disable(self.level)


# ---- the tables ----
STATE_COLUMNS = {"schedc": schedc_states, "schedc, fp32 grads": lambda job: schedc_states(job, True),
                 "Megatron-LM": megatron_states, "DeepSpeed": deepspeed_states,
                 "llm-analysis": llm_analysis_states, "Calculon": calculon_states}
LAYER_COLUMNS = {"measured": measured_layer, "schedc (CPU kernels)": lambda c: schedc_layer(c, "cpu"),
                 "schedc": schedc_layer, "Megatron-LM": megatron_layer, "Korthikanti": korthikanti_layer,
                 "llm-analysis": llm_analysis_layer, "Calculon": calculon_layer}


def state_cells(job: Job, columns=STATE_COLUMNS) -> dict[str, str | None]:
    """GiB per rank, to two decimals; "-" where the anchor has no answer; None where it could not run."""
    return {name: _cell(f(job), GIB, 2, name) for name, f in columns.items()}


def layer_cells(case: LayerCase, columns=LAYER_COLUMNS) -> dict[str, str | None]:
    """MiB per layer and microbatch, whole."""
    return {name: _cell(f(case), MIB, 0, name) for name, f in columns.items()}


def _cell(value: float | None, unit: int, digits: int, column: str) -> str | None:
    if value is None:
        return None if column in AVAILABILITY and not AVAILABILITY[column]() else "-"
    return f"{value / unit:,.{digits}f}"


def _imports(module: str):
    def check() -> bool:
        try:
            with _quiet():
                __import__(module)
        except Exception:  # noqa: BLE001
            return False
        return True
    return check


AVAILABILITY = {"DeepSpeed": _imports("deepspeed.runtime.zero.stage3"), "llm-analysis": _imports("llm_analysis.analysis"),
                "Calculon": lambda: _calculon() is not None}


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"
