"""Training step: time and memory of one configuration or millions, as numpy arrays.

Every input is an array (or scalar) of float64 or integer codes; all broadcast together; every branch is
taken under a boolean mask; a configuration that does not divide gets NaN metrics and a reason code
(:data:`dse.codes.REASONS`), never an exception.  One call serves ``dse explain`` and a 10⁹-point sweep.

Per micro-batch and layer on one GPU the time is

    t_layer = t_fwd + t_bwd + t_recompute
            + exposed TP (all-reduce, or all-gather + reduce-scatter with sp)
            + exposed CP (ring exchange of K,V under attention) + EP (all-to-all dispatch / combine)

with compute on a roofline per op (GEMMs at the precision's tensor rate, FlashAttention at its own rate,
norms / dropout / activations / softmax at HBM bandwidth).  A pipeline stage adds the embedding (first) or
logits and loss (last); the step is

    t_step = m · t_mb(slowest stage) + (p−1)/v · t_mb(mean stage) + exposed DP sync + optimizer step.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dse import codes
from dse.cost import constants as K
from dse.cost.compute import (
    gemm_bytes,
    gemm_flops,
    matmul_efficiency,
    matmul_peak_flops,
    operand_bytes,
    roofline_time,
)
from dse.cost.memory import (
    activation_bytes_no_recompute,
    activation_bytes_per_layer,
    gradient_bytes,
    logits_bytes,
    optimizer_bytes,
    weight_bytes,
)
from dse.cost.network import (
    allgather_time,
    allreduce_time,
    alltoall_time,
    p2p_time,
    reduce_scatter_time,
    spans_domains,
)
from dse.cost.parallel import (
    GRAD_COMM_BYTES,
    cp_kv_chunk_bytes,
    ep_dispatch_bytes,
    pp_activation_bytes,
    tp_activation_bytes,
)
from dse.cost.pipeline import inflight_layer_microbatches, pipeline_bubble_time, pipeline_time
from dse.cost.transformer import (
    attention_params,
    expert_params,
    kv_width,
    mlp_matrices,
    model_flops_per_token,
    recompute_flops_per_token,
)
from dse.hardware.catalog import HARDWARE_COLUMNS

Array = np.ndarray

#: Inputs of :func:`train_step` (numbers, or integer codes for categorical knobs).
TRAIN_INPUTS: tuple[str, ...] = (
    "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "experts", "top_k",
    "tied_embeddings", "gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "sp", "micro_batch", "global_batch",
    "seq_len", "recompute", "zero", "precision", "attention", "tp_overlap", "dp_overlap", "pp_overlap",
)

#: Metric outputs (NaN on configurations that do not divide).
TRAIN_METRICS: tuple[str, ...] = (
    "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "hfu",
    "layer_time_ms", "layer_fwd_ms", "layer_bwd_ms", "microbatches",
    "time_compute_s", "time_recompute_s", "time_tp_comm_s", "time_cp_comm_s", "time_ep_comm_s",
    "time_pp_comm_s", "time_bubble_s", "time_dp_comm_s", "time_optimizer_s",
    "params_total", "params_per_gpu",
    "mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes", "mem_activations_bytes",
    "mem_buffers_bytes", "mem_total_bytes",
)

#: Components whose sum is ``step_time_s`` exactly.
TIME_BREAKDOWN: tuple[str, ...] = (
    "time_compute_s", "time_recompute_s", "time_tp_comm_s", "time_cp_comm_s", "time_ep_comm_s",
    "time_pp_comm_s", "time_bubble_s", "time_dp_comm_s", "time_optimizer_s",
)

#: Components whose sum is ``mem_total_bytes`` exactly (for the peak stage).
MEMORY_BREAKDOWN: tuple[str, ...] = (
    "mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes", "mem_activations_bytes",
    "mem_buffers_bytes",
)


def train_step(inputs: Mapping[str, object], hw: Mapping[str, object]) -> dict[str, Array]:
    """Evaluate the training cost model.

    ``inputs`` holds :data:`TRAIN_INPUTS`, ``hw`` the :data:`dse.hardware.catalog.HARDWARE_COLUMNS`
    (SI units), each a scalar or an array; the result maps :data:`TRAIN_METRICS` plus ``fits`` (bool) and
    ``reason`` (int code into :data:`dse.codes.REASONS`) to float64 arrays of the broadcast shape.
    """
    names = TRAIN_INPUTS + HARDWARE_COLUMNS
    arrays = np.broadcast_arrays(
        *[np.asarray(inputs[k], dtype=np.float64) for k in TRAIN_INPUTS],
        *[np.asarray(hw[k], dtype=np.float64) for k in HARDWARE_COLUMNS],
    )
    cols = dict(zip(names, arrays, strict=True))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _train_step(cols)


def _train_step(x: dict[str, Array]) -> dict[str, Array]:  # noqa: PLR0915 - one formula, read top to bottom
    L, h, a, g, f, V = x["layers"], x["hidden"], x["heads"], x["kv_heads"], x["ffn_hidden"], x["vocab"]
    E, topk, mlp = x["experts"], x["top_k"], x["mlp"]
    gpus, t, p, d, c, e, v = x["gpus"], x["tp"], x["pp"], x["dp"], x["cp"], x["ep"], x["vpp"]
    b, B, s = x["micro_batch"], x["global_batch"], x["seq_len"]
    prec, zero = x["precision"], x["zero"]
    hw = x

    # ---- categorical knobs as masks -------------------------------------------------------------------
    full = x["recompute"] == codes.RECOMPUTE_FULL
    selective = x["recompute"] == codes.RECOMPUTE_SELECTIVE
    standard = x["attention"] == codes.ATTENTION_STANDARD
    sp = (x["sp"] > 0) & (t > 1)
    tp_mode = np.where((x["tp_overlap"] == codes.TP_OVERLAP_FULL) & ~sp, codes.TP_OVERLAP_BACKWARD,
                       x["tp_overlap"])
    dp_overlap = x["dp_overlap"] > 0
    pp_overlap = x["pp_overlap"] > 0
    moe = E > 1
    kk = np.where(moe, topk, 1.0)

    # ---- shapes -----------------------------------------------------------------------------------------
    kvw = kv_width(h, a, g)
    n_mlp = mlp_matrices(mlp)
    m = B / (d * b)  # micro-batches per step
    T = b * s / c  # tokens per GPU per micro-batch
    resid = T * h / np.where(sp, t, 1.0)  # residual-stream elements per GPU
    lps = L / p  # layers per stage
    D = hw["scaleup_gpus"]

    # ---- rates ------------------------------------------------------------------------------------------
    peak = matmul_peak_flops(prec, hw)
    mm_rate = peak * matmul_efficiency(prec, hw)
    rate16 = hw["tensor_fp16_flops"] * hw["matmul_eff_fp16"]
    attn_rate = hw["tensor_fp16_flops"] * hw["attention_eff"]
    mem_rate = hw["hbm_bw"] * hw["memory_eff"]
    ob = operand_bytes(prec)

    # ---- GEMMs of one layer, forward (backward = dgrad + wgrad, each the forward's shape) ---------------
    n_qkv = (h + 2.0 * kvw) / t
    n_fc1 = (n_mlp - 1.0) * f / t
    w_experts = np.where(moe, E / e, 1.0)  # grouped GEMM streams every local expert's weights
    gemm_fwd = (
        roofline_time(gemm_flops(T, n_qkv, h), gemm_bytes(T, n_qkv, h, ob, ob, 2.0), mm_rate, mem_rate)
        + roofline_time(gemm_flops(T, h, h / t), gemm_bytes(T, h, h / t, ob, ob, 2.0), mm_rate, mem_rate)
        + roofline_time(gemm_flops(T * kk, n_fc1, h), gemm_bytes(T * kk, n_fc1, h, ob, ob * w_experts, 2.0),
                        mm_rate, mem_rate)
        + roofline_time(gemm_flops(T * kk, h, f / t), gemm_bytes(T * kk, h, f / t, ob, ob * w_experts, 2.0),
                        mm_rate, mem_rate)
        + np.where(moe, gemm_flops(T, E, h) / rate16, 0.0)  # router
    )
    gemm_bwd = 2.0 * gemm_fwd
    wgrad = gemm_fwd

    # ---- attention core ---------------------------------------------------------------------------------
    flash_fwd = K.CAUSAL_FRACTION * 4.0 * b * (s / c) * s * h / t / attn_rate
    scores = b * (a / t) * s * s
    std_fwd = 4.0 * b * s * s * h / t / rate16 + K.STANDARD_ATTENTION_FWD_BYTES * scores / mem_rate
    std_bwd = 8.0 * b * s * s * h / t / rate16 + K.STANDARD_ATTENTION_BWD_BYTES * scores / mem_rate
    attn_fwd = np.where(standard, std_fwd, flash_fwd)
    attn_bwd = np.where(standard, std_bwd, K.FLASH_BACKWARD_FLOP_RATIO * flash_fwd)

    # ---- memory-bound element-wise kernels --------------------------------------------------------------
    swiglu = mlp == codes.MLP_SWIGLU
    act_elems = T * kk * f / t
    ew_fwd = (K.RESIDUAL_FWD_BYTES * resid + np.where(swiglu, K.ACTIVATION_FWD_BYTES_SWIGLU,
                                                      K.ACTIVATION_FWD_BYTES_2MAT) * act_elems) / mem_rate
    ew_bwd = (K.RESIDUAL_BWD_BYTES * resid + np.where(swiglu, K.ACTIVATION_BWD_BYTES_SWIGLU,
                                                      K.ACTIVATION_BWD_BYTES_2MAT) * act_elems) / mem_rate

    # fp8/fp4: cast-transpose of each GEMM's activation input (forward) and output gradient (backward)
    low_precision = prec >= codes.PRECISION_FP8
    cast_fwd = np.where(low_precision, K.LOW_PRECISION_CAST_BYTES * T * (2.0 * h + h / t + kk * f / t), 0.0)
    cast_bwd = np.where(low_precision, K.LOW_PRECISION_CAST_BYTES * T * (n_qkv + 2.0 * h + kk * n_fc1), 0.0)
    ew_fwd = ew_fwd + cast_fwd / mem_rate
    ew_bwd = ew_bwd + cast_bwd / mem_rate

    fwd_compute = gemm_fwd + attn_fwd + ew_fwd
    bwd_compute = gemm_bwd + attn_bwd + ew_bwd

    # ---- tensor parallel communication ------------------------------------------------------------------
    S = tp_activation_bytes(T, h)
    one = np.ones_like(t)
    ar = allreduce_time(S, one, t, hw)
    ag = allgather_time(S, one, t, hw)
    rs = reduce_scatter_time(S, one, t, hw)
    tp_fwd_comm = np.where(sp, 2.0 * (ag + rs), 2.0 * ar)
    dgrad_reduce = np.where(sp, 2.0 * rs, 2.0 * ar)  # input-gradient reduction of the column-parallel GEMMs
    bwd_gather = np.where(sp, 4.0 * ag, 0.0)  # sp: output-grad gathers + re-gather of inputs for wgrad
    tp_fwd = np.where(tp_mode == codes.TP_OVERLAP_FULL, np.maximum(tp_fwd_comm - gemm_fwd, 0.0), tp_fwd_comm)
    tp_bwd = np.where(
        tp_mode == codes.TP_OVERLAP_FULL,
        np.maximum(dgrad_reduce + bwd_gather - gemm_bwd, 0.0),
        np.where(tp_mode == codes.TP_OVERLAP_BACKWARD, np.maximum(dgrad_reduce - wgrad, 0.0), dgrad_reduce)
        + bwd_gather,
    )

    # ---- context parallel: ring exchange of K,V hidden under attention ----------------------------------
    cp_step = p2p_time(cp_kv_chunk_bytes(b, s, c, kvw, t), spans_domains(t, c, D), hw)
    cp_fwd = np.maximum((c - 1.0) * cp_step - attn_fwd, 0.0)
    cp_bwd = np.maximum(2.0 * (c - 1.0) * cp_step - attn_bwd, 0.0)

    # ---- expert parallel: dispatch + combine all-to-all, forward and backward ---------------------------
    a2a = alltoall_time(ep_dispatch_bytes(T, h, kk, t, sp), t * c, e, hw)
    ep_fwd = np.where(moe, 2.0 * a2a, 0.0)
    ep_bwd = ep_fwd

    # ---- recomputation ----------------------------------------------------------------------------------
    recompute = np.where(full, fwd_compute, np.where(selective, attn_fwd, 0.0))

    layer_tp = tp_fwd + tp_bwd + np.where(full, tp_fwd, 0.0)
    layer_cp = cp_fwd + cp_bwd + np.where(full, cp_fwd, 0.0)
    layer_ep = ep_fwd + ep_bwd + np.where(full, ep_fwd, 0.0)
    layer_compute = fwd_compute + bwd_compute
    layer_time = layer_compute + recompute + layer_tp + layer_cp + layer_ep

    # ---- stage extras: embedding (first), final norm + logits + loss (last) -----------------------------
    first_extra = K.EMBEDDING_BYTES * T * h / mem_rate
    logits_gemm = roofline_time(gemm_flops(T, V / t, h), gemm_bytes(T, V / t, h, 2.0, 2.0, 2.0), rate16,
                                mem_rate)
    last_extra = (3.0 * logits_gemm + K.CROSS_ENTROPY_BYTES * T * V / t / mem_rate
                  + (4.0 + 6.0) * resid / mem_rate)
    single = p <= 1
    t_first = lps * layer_time + first_extra + np.where(single, last_extra, 0.0)
    t_last = lps * layer_time + last_extra + np.where(single, first_extra, 0.0)
    last_slowest = t_last >= t_first
    extra_slowest = np.where(single, first_extra + last_extra, np.where(last_slowest, last_extra, first_extra))

    # ---- pipeline point-to-point ------------------------------------------------------------------------
    pp_cross = spans_domains(t * c * d, p, D)
    p2p_mb = np.where(p > 1, 2.0 * v * p2p_time(pp_activation_bytes(b, s, c, h, t), pp_cross, hw), 0.0)
    stage_compute = lps * (layer_compute + recompute)
    pp_exposed = np.where(pp_overlap, np.maximum(p2p_mb - stage_compute, 0.0), p2p_mb)

    t_mb_slowest = np.maximum(t_first, t_last) + pp_exposed
    t_mb_mean = (L * layer_time + first_extra + last_extra) / p + pp_exposed
    t_pipe = pipeline_time(m, p, v, t_mb_slowest, t_mb_mean)
    bubble = pipeline_bubble_time(p, v, t_mb_mean)

    # ---- parameters held per GPU ------------------------------------------------------------------------
    p_attn = attention_params(h, a, g) / t
    p_expert_layer = np.where(moe, E / e, 1.0) * expert_params(h, f, mlp) / t
    p_layer = p_attn + p_expert_layer + np.where(moe, h * E, 0.0)
    p_embed = V * h / t
    untied = x["tied_embeddings"] <= 0
    p_first = lps * p_layer + p_embed + np.where(single & untied, p_embed, 0.0)
    p_last = lps * p_layer + np.where(single, p_embed + np.where(untied, p_embed, 0.0), p_embed)
    p_stage = np.maximum(p_first, p_last)
    p_expert = np.where(moe, lps * p_expert_layer, 0.0)
    p_dense = p_stage - p_expert

    # ---- data parallel synchronisation and optimizer ----------------------------------------------------
    dpc = d * c
    edp = dpc / e
    e_stride = t * c * e
    grad_sync = np.where(
        zero >= 1,
        reduce_scatter_time(GRAD_COMM_BYTES * p_dense, t, dpc, hw)
        + reduce_scatter_time(GRAD_COMM_BYTES * p_expert, e_stride, edp, hw),
        allreduce_time(GRAD_COMM_BYTES * p_dense, t, dpc, hw)
        + allreduce_time(GRAD_COMM_BYTES * p_expert, e_stride, edp, hw),
    )
    param_gather = np.where(
        zero >= 1,
        allgather_time(2.0 * p_dense, t, dpc, hw) + allgather_time(2.0 * p_expert, e_stride, edp, hw),
        0.0,
    )
    bwd_window = lps * (bwd_compute + recompute)
    fwd_window = lps * fwd_compute
    grad_exposed = np.where(dp_overlap, np.maximum(grad_sync - bwd_window, 0.0), grad_sync)
    gather_once = np.where(dp_overlap, np.maximum(param_gather - fwd_window, 0.0), param_gather)
    gather_per_mb = m * np.where(dp_overlap, np.maximum(2.0 * param_gather - stage_compute, 0.0),
                                 2.0 * param_gather)
    dp_exposed = grad_exposed + np.where(zero >= 3, gather_per_mb, gather_once)
    opt_params = p_stage / np.where(zero >= 1, dpc, 1.0)
    t_opt = opt_params * K.ADAM_BYTES_PER_PARAM / mem_rate

    step = t_pipe + dp_exposed + t_opt

    # ---- outputs ----------------------------------------------------------------------------------------
    tokens = B * s
    params_total = L * (attention_params(h, a, g) + E * expert_params(h, f, mlp) + np.where(moe, h * E, 0.0)) \
        + V * h * np.where(untied, 2.0, 1.0)
    mflops = model_flops_per_token(L, h, a, g, f, V, mlp, E, kk, s) * tokens
    hflops = mflops + recompute_flops_per_token(L, h, a, g, f, mlp, E, kk, s, full, selective) * tokens

    out: dict[str, Array] = {
        "step_time_s": step,
        "tokens_per_s": tokens / step,
        "tokens_per_s_per_gpu": tokens / step / gpus,
        "model_tflops_per_gpu": mflops / step / gpus / 1e12,
        "mfu": mflops / (step * gpus * peak),
        "hfu": hflops / (step * gpus * peak),
        "layer_time_ms": layer_time * 1e3,
        "layer_fwd_ms": (fwd_compute + tp_fwd + cp_fwd + ep_fwd) * 1e3,
        "layer_bwd_ms": (layer_time - fwd_compute - tp_fwd - cp_fwd - ep_fwd) * 1e3,
        "microbatches": m,
        "time_compute_s": m * (lps * layer_compute + extra_slowest),
        "time_recompute_s": m * lps * recompute,
        "time_tp_comm_s": m * lps * layer_tp,
        "time_cp_comm_s": m * lps * layer_cp,
        "time_ep_comm_s": m * lps * layer_ep,
        "time_pp_comm_s": m * pp_exposed,
        "time_bubble_s": bubble,
        "time_dp_comm_s": dp_exposed,
        "time_optimizer_s": t_opt,
        "params_total": params_total,
        "params_per_gpu": p_stage,
    }

    # ---- memory of the first and the last stage; the larger one is reported ----------------------------
    act_layer = activation_bytes_per_layer(T, b, s, h, a, kvw, f, mlp, kk, t, sp, standard, selective, full,
                                           ob)
    act_transient = np.where(full, activation_bytes_no_recompute(T, b, s, h, a, kvw, f, mlp, kk, t, sp,
                                                                 standard, ob), 0.0)
    logits = logits_bytes(T, V, t)
    act_first = inflight_layer_microbatches(m, p, v, L) * act_layer + act_transient \
        + np.where(single, logits, 0.0)
    last_chunks = np.where(v > 1, np.minimum((v - 1.0) * p + 1.0, m * v) * L / (p * v), lps)
    act_last = last_chunks * act_layer + act_transient + logits
    states_first = weight_bytes(p_first, dpc, zero) + gradient_bytes(p_first, dpc, zero) \
        + optimizer_bytes(p_first, dpc, zero)
    states_last = weight_bytes(p_last, dpc, zero) + gradient_bytes(p_last, dpc, zero) \
        + optimizer_bytes(p_last, dpc, zero)
    first_peak = states_first + act_first >= states_last + act_last
    p_peak = np.where(first_peak, p_first, p_last)
    buffers = K.RUNTIME_RESERVED_BYTES + np.where(zero >= 3, 2.0 * 2.0 * p_layer, 0.0)
    out["mem_weights_bytes"] = weight_bytes(p_peak, dpc, zero)
    out["mem_grads_bytes"] = gradient_bytes(p_peak, dpc, zero)
    out["mem_optimizer_bytes"] = optimizer_bytes(p_peak, dpc, zero)
    out["mem_activations_bytes"] = np.where(first_peak, act_first, act_last)
    out["mem_buffers_bytes"] = buffers
    out["mem_total_bytes"] = (out["mem_weights_bytes"] + out["mem_grads_bytes"] + out["mem_optimizer_bytes"]
                              + out["mem_activations_bytes"] + buffers)

    reason = _infeasible_reason(x, m, peak)
    fits = out["mem_total_bytes"] <= hw["hbm_bytes"]
    bad = reason > 0
    reason = np.where(~bad & ~fits, codes.REASON_CODE["exceeds_hbm"], reason)
    for key in TRAIN_METRICS:
        out[key] = np.where(bad, np.nan, out[key])
    out["fits"] = fits & ~bad
    out["reason"] = reason
    return out


def _infeasible_reason(x: dict[str, Array], microbatches: Array, peak: Array) -> Array:
    """First failing check as a code into :data:`dse.codes.REASONS` (0 = feasible)."""
    L, h, a, g, V = x["layers"], x["hidden"], x["heads"], x["kv_heads"], x["vocab"]
    t, p, d, c, e, v = x["tp"], x["pp"], x["dp"], x["cp"], x["ep"], x["vpp"]
    b, B, s = x["micro_batch"], x["global_batch"], x["seq_len"]
    sizes = (L, h, a, g, x["ffn_hidden"], V, x["experts"], x["top_k"], x["gpus"], t, p, d, c, e, v, b, B, s)
    nonpositive = np.zeros(L.shape, dtype=bool)
    for arr in sizes:
        nonpositive |= ~(arr > 0)
    R = codes.REASON_CODE
    checks = (
        (R["nonpositive_size"], nonpositive),
        (R["unknown_system"], np.isnan(x["tensor_fp16_flops"])),
        (R["precision_unsupported_by_system"], np.isnan(peak)),
        (R["tp*pp*cp*dp != gpus"], t * p * c * d != x["gpus"]),
        (R["hidden % heads != 0"], np.fmod(h, a) != 0),
        (R["heads % kv_heads != 0"], np.fmod(a, g) != 0),
        (R["top_k > experts"], x["top_k"] > x["experts"]),
        (R["heads % tp != 0"], np.fmod(a, t) != 0),
        (R["kv_heads % tp != 0"], np.fmod(g, t) != 0),
        (R["layers % (pp*vpp) != 0"], np.fmod(L, p * v) != 0),
        (R["vpp > 1 needs pp > 1"], (v > 1) & (p <= 1)),
        (R["global_batch % (dp*micro_batch) != 0"], np.fmod(B, d * b) != 0),
        (R["microbatches % pp != 0 (interleaved schedule)"], (v > 1) & (np.fmod(microbatches, p) != 0)),
        (R["seq_len % (2*cp) != 0"], (c > 1) & (np.fmod(s, 2.0 * c) != 0)),
        (R["cp > 1 needs flash attention"], (c > 1) & (x["attention"] == codes.ATTENTION_STANDARD)),
        (R["experts % ep != 0"], np.fmod(x["experts"], e) != 0),
        (R["(dp*cp) % ep != 0"], np.fmod(d * c, e) != 0),
        (R["zero >= 2 with pp > 1 unsupported"], (x["zero"] >= 2) & (p > 1)),
        (R["crosses nodes without scale-out network"],
         np.isnan(x["scaleout_bw"]) & (x["gpus"] > x["scaleup_gpus"])),
    )
    reason = np.zeros(L.shape, dtype=np.float64)
    for code, failed in reversed(checks):
        reason = np.where(failed, float(code), reason)
    return reason
