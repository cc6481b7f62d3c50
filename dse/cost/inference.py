"""Inference: prefill and decode of a static batch, KV cache, weight / KV quantization, as numpy arrays.

A batch of ``batch`` requests with ``input_len`` prompt tokens each is prefilled in one pass (time to first
token), then decoded ``output_len − 1`` more steps, each producing one token per request (the first output
token comes from the prefill).  Every op of a layer is timed from its FLOPs F and HBM bytes B as
F / rate + B / bandwidth — a roofline without overlap between streaming the operands and the math, which is
what serving kernels show at these shapes (at 128 prompt tokens the measured TTFT sits at the sum, not the
max; far from the ridge point the two agree) — plus a fixed per-layer overhead (kernel launches,
synchronisation; ``layer_overhead_s``, per GPU generation) once per forward pass:

* prefill — GEMMs with M = batch·input_len tokens (compute-bound), causal FlashAttention, norms and
  activations, two TP all-reduces of the layer's output; the logits of the last token of each request;
* decode — GEMMs with M = batch (weight reads dominate: memory-bound at small batch), attention that reads
  the whole KV cache (batch · context · 2 · kv_heads/tp · head_dim · kv bytes), two TP all-reduces of
  batch·h (latency-bound), the logits GEMM (reads V·h/tp weights).

A mixture-of-experts layer reads only the experts its tokens visit: E·(1 − (1 − k/E)^tokens) of them when each
token picks k of E uniformly.  Pipeline stages run one after another for a static batch, so latency sums
them.  The decode step is evaluated at the mean context input_len + output_len/2 (its cost is linear in the
context, so the sum over steps is exact up to the roofline's max).

Quantization (``precision``): fp16/bf16 — 2-byte weights, 16-bit math; fp8, fp4 — 1 / 0.5-byte weights and
activations on fp8 / fp4 tensor cores (where the GPU has them); int8, int4 — weight-only, 1 / 0.5-byte weights
dequantized into 16-bit math.  ``kv_precision`` auto = 1 byte with fp8/fp4 math, else 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dse import codes
from dse.cost import constants as K
from dse.cost.architecture import (
    ARCHITECTURE_COLUMNS,
    cached_values,
    causal_keys,
    decode_head_dims,
    held_tokens,
    infer_layer_params,
    layer_record,
    mla_mask,
    model_input,
    routed_layer_params,
)
from dse.cost.compute import gemm_bytes, gemm_flops
from dse.cost.network import allreduce_time, engine_tp_links, p2p_time, spans_domains
from dse.cost.select import INT_DOMAIN_MAX, divides, mask, pick
from dse.hardware.catalog import HARDWARE_COLUMNS

Array = Any  # numpy arrays or scalars that broadcast
DTYPE = np.float32

INFER_INPUTS: tuple[str, ...] = (
    "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "experts", "top_k",
    "tied_embeddings", "gpus", "tp", "pp", "dp", "batch", "input_len", "output_len", "precision", "kv_precision",
    *ARCHITECTURE_COLUMNS, "moe_imbalance",
)
INFER_METRICS: tuple[str, ...] = (
    "ttft_s", "tpot_s", "e2e_latency_s", "output_tokens_per_s", "output_tokens_per_s_per_gpu",
    "prefill_layer_ms", "decode_layer_ms", "decode_attention_ms", "decode_gemm_ms", "decode_tp_comm_ms",
    "decode_logits_ms", "decode_overhead_ms", "kv_cache_bytes", "weights_bytes", "activations_bytes",
    "mem_total_bytes", "max_batch", "energy_per_output_token_j",
)


def weight_bytes_per_param(precision: Array) -> Array:
    """Bytes per stored weight: 2 (fp16, bf16), 1 (fp8, int8), 0.5 (fp4, int4)."""
    p = precision
    return 2.0 - mask((p == codes.PRECISION_FP8) | (p == codes.PRECISION_INT8), p) \
        - 1.5 * mask((p == codes.PRECISION_FP4) | (p == codes.PRECISION_INT4), p)


def kv_bytes_per_value(kv_precision: Array, precision: Array) -> Array:
    """Bytes per cached K or V value: 2 (fp16, bf16), 1 (fp8, int8), 0.5 (int4); auto = 1 with fp8/fp4
    matmuls, else 2."""
    low_math = (precision == codes.PRECISION_FP8) | (precision == codes.PRECISION_FP4)
    kv = kv_precision
    explicit = 2.0 - mask((kv == 3) | (kv == 4), kv) - 1.5 * mask(kv == 5, kv)
    return pick(mask(kv == codes.KV_AUTO, kv), 2.0 - mask(low_math, kv), explicit)


def fp8_context_fmha_rows(x: dict[str, Array], kv_b: Array) -> Array:
    """1 on the rows whose prompt (context) attention runs as FP8 fused multi-head attention, else 0.

    TensorRT-LLM's PyTorch flow sets it per layer as ``mFP8ContextFMHA = is_fp8_out || is_fp4_out ||
    (hasFp8KvCache() && use_paged_context_fmha)`` (NVIDIA/TensorRT-LLM cpp/tensorrt_llm/thop/attentionOp.cpp
    @38134b13): the attention's output quantized for an FP8 or NVFP4 output projection, or an FP8 KV cache read by
    the paged context kernels, which ``use_paged_context_fmha`` selects whenever KV-cache block reuse is on
    (``tensorrt_llm/_torch/attention_backend/trtllm.py``: chunked prefill, cache reuse or draft tokens;
    ``KvCacheConfig.enable_block_reuse`` defaults to True in ``tensorrt_llm/llmapi/llm_args.py``), and "when FP8 KV
    cache is being used, paged context FMHA cannot be used without FP8 attention".  MLA's context kernels follow
    the same rule on sm90/100/103/120 (``mFP8ContextMLA``, the same file).  Here: the stack's ``fp8_context_fmha``
    knob is on and the row caches its KV in 8 bits (``kv_b`` = 1; an explicit int8 cache is not FP8) or runs its
    GEMMs in FP8 or FP4."""
    kv = x["kv_precision"]
    fp8_kv = mask(kv_b == 1.0, kv) * (1.0 - mask(kv == codes.KV_PRECISION.index("int8"), kv))
    low_math = mask((x["precision"] == codes.PRECISION_FP8) | (x["precision"] == codes.PRECISION_FP4), kv)
    return mask(x["fp8_context_fmha"] > 0, kv) * np.maximum(fp8_kv, low_math)


def prompt_attention_rate(x: dict[str, Array], kv_b: Array) -> Array:
    """FLOP/s of an engine's prompt (context) attention on one GPU: the generation's measured FP8 context-FMHA rate
    (``infer_attention_fp8_rate``) on :func:`fp8_context_fmha_rows`, else its 16-bit one (``infer_attention_rate``),
    both fractions of the 16-bit peak from TensorRT-LLM 1.3.0rc20's measured context-attention tables
    (tests/kernels/trtllm_context_attention.csv: H100 0.572 against 0.491, B200 0.438 against 0.392, L40S 0.635
    against 0.358, RTX PRO 6000 0.734 against 0.397)."""
    return pick(fp8_context_fmha_rows(x, kv_b), x["infer_attention_fp8_rate"], x["infer_attention_rate"])


def stage_layers(layers: Array, pp: Array) -> Array:
    """Layers on the fullest pipeline stage of an inference engine, ⌈L / pp⌉: TensorRT-LLM splits L layers over pp
    ranks with torch.tensor_split ("If num_layers % pp_size = n != 0, first n ranks get one extra layer",
    tensorrt_llm/mapping.py Mapping.pp_layers), vLLM and SGLang spread the remainder one layer per rank
    (vllm/distributed/utils.py and sglang/srt/distributed/utils.py get_pp_indices).  The fullest stage paces the
    pipeline and holds the most weights and KV cache.  (L / pp of whole numbers that divide is exact in IEEE
    division, so ⌈·⌉ needs no slack, as for :func:`dse.cost.pipeline.stage_layers_split`.)"""
    return np.ceil(layers / pp)


def serial_roofline_time(flops: Array, bytes_moved: Array, flops_rate: Array, bytes_rate: Array) -> Array:
    """t = F / P_eff + B / W_eff: the roofline's two bounds added (no overlap), used for inference ops."""
    return flops / flops_rate + bytes_moved / bytes_rate


#: The shape TensorRT-LLM 0.10 ships Hopper XQA kernels for ("the new NVIDIA Hopper XQA kernels for LLaMA 2
#: 70B", v0.10.0 release notes): 8 query heads per KV head, head_dim 128.
XQA_GROUP = 8.0
XQA_HEAD_DIM = 128.0


def decode_attention_time(ctx: Array, x: dict[str, Array], kv_heads_gpu: Array, kv_b: Array,
                          rec: dict[str, Array] | None = None, mla_decode: Array | None = None
                          ) -> tuple[Array, Array]:
    """(seconds, HBM bytes) of one decode token's attention in one layer over a context of ``ctx`` tokens.

    ``decode_kv_reads`` = per_kv_head (0; FlashAttention/FlashInfer-style decode, XQA): the serial roofline of
    4·ctx·h/tp FLOPs at the attention rate and the KV read once per KV head, B = ctx·2·kv_heads·d·kv bytes.

    ``decode_kv_reads`` = per_query_head (1; TensorRT-LLM <= 0.10's kernels): the masked-MHA kernel runs one
    thread block per query head and does its dot products on the CUDA cores, element by element; the query
    heads of one KV head run side by side, so HBM still delivers the KV once (L2 serves the rest), and the
    kernel is bound by instruction issue:  t = max(B / HBM rate, 2·ctx·d·q_heads / mmha_rate), with
    mmha_rate = SMs·clock·(elements per SM-clock, fitted per generation; :mod:`dse.hardware.catalog`).  On
    Hopper that release's XQA kernel takes over for an FP8 KV cache at XQA_GROUP query heads per KV head and
    head_dim XQA_HEAD_DIM (its Hopper kernel reads only an E4M3 cache on SM 90: TensorRT-LLM
    decoderXQAImplJIT/kernelUtils.cpp, supportConfigQGMMA); it works per KV head on the tensor cores, so it
    is bound by how fast it streams the cache: 2·ctx·d·kv_heads one-byte elements at xqa_rate = HBM bandwidth
    × ``xqa_memory_eff`` (0 where the generation has no such kernel).

    The model record (:mod:`dse.cost.architecture`) sets the rest: a windowed layer reads at most its window
    (:func:`~dse.cost.architecture.held_tokens`), heads of their own width d, and MLA decodes against its latent
    cache with absorbed weights (2·ctx·a/t·(2·kv_lora + rope) FLOPs, the latent read once for all heads; the
    per-query-head kernels do not run MLA)."""
    rec = layer_record(x) if rec is None else rec
    h, a = x["hidden"], x["heads"]
    t = x["tp"]
    d = rec["head_dim"]
    mem = x["memory_rate"]
    span = held_tokens(ctx, rec)
    once = span * cached_values(x, rec) * kv_b
    flash = 2.0 * span * (a / t) * decode_head_dims(x, rec) / x["attention_rate"] + once / mem
    xqa = mask((x["xqa_rate"] > 0) & (kv_b == 1.0) & (a == XQA_GROUP * x["kv_heads"]) & (d == XQA_HEAD_DIM), h)
    elements = span * 2.0 * d * pick(xqa, kv_heads_gpu, np.maximum(a / t, 1.0))
    issue = np.maximum(once / mem, elements / pick(xqa, x["xqa_rate"], x["mmha_rate"]))
    per_query = mask((x["decode_kv_reads"] == 1) & ~(mla_mask(x) > 0), h)
    # the engine's measured MLA decode kernels where the serving row's stack says so (``mla_decode``; the
    # static-batch model passes none), computed only where a row asks for them
    if mla_decode is not None and np.any((mla_decode > 0) & (mla_mask(x) > 0)):
        measured = mla_decode_time(span, x, rec, kv_b, once, mla_decode)
        flash = flash + measured[1] * (measured[0] - flash)
    return pick(per_query, issue, flash), once


def mla_decode_time(span: Array, x: dict[str, Array], rec: dict[str, Array], kv_b: Array, once: Array,
                    mla_decode: Array) -> tuple[Array, Array]:
    """(seconds, 1 where it applies) of one MLA decode token's attention in one layer on the engine's measured MLA
    generation kernels: t = max(F / rate, B / memory_rate), F = 2·ctx·(a/t)·(2·kv_lora + rope) absorbed-MLA FLOPs,
    B the latent read once (``once``), rate = ``infer_mla_decode_fp8_rate`` with an 8-bit latent cache, else
    ``infer_mla_decode_rate``.  TensorRT-LLM's kernels (FlashMLA on Hopper, trtllm-gen on Blackwell) are
    compute-bound at DeepSeek-V3's 128 heads and reach 0.59-0.69 (H100) and 0.57 / 0.99 (B200, BF16 / FP8 cache)
    of the BF16 peak in TensorRT-LLM 1.3.0rc20's measured tables (tests/kernels/trtllm_generation_mla.csv), where
    the roofline of the training attention rate and the latent read gives them 0.35 and is 2-2.8x too slow at
    contexts past 4K; the max form reproduces the 128-head points to the median and is 10-35 % fast at 64 heads.
    Applies on MLA rows whose stack sets ``mla_decode`` measured and whose GPU has such a table (rate > 0)."""
    rate = pick(mask(kv_b == 1.0, kv_b), x["infer_mla_decode_fp8_rate"], x["infer_mla_decode_rate"])
    on = mla_mask(x) * mask((mla_decode > 0) & (rate > 0), kv_b)
    flops = 2.0 * span * (x["heads"] / x["tp"]) * decode_head_dims(x, rec)
    return np.maximum(flops / np.maximum(rate, 1.0), once / x["memory_rate"]), on


def experts_visited(experts: Array, top_k: Array, tokens: Array) -> Array:
    """Expected distinct experts a layer runs for ``tokens`` tokens each routed to top_k of E experts:
    E · (1 − (1 − k/E)^tokens) (uniform routing), the power taken as exp(tokens · ln(1 − k/E)) (numpy's
    float32 power with array exponents is ~12x slower than exp and log); ln(0) (k = E, every expert visited) is
    clipped to ln of the smallest normal float, so that 0 tokens still visit none."""
    return experts_visited_from_log(experts, experts_log_keep(experts, top_k), tokens)


def experts_log_keep(experts: Array, top_k: Array) -> Array:
    """ln(1 − k/E) of :func:`experts_visited`, clipped at ln of the smallest normal float (k = E): a property of the
    model, computed once where a solver visits many token counts."""
    return np.log(np.maximum(1.0 - top_k / experts, np.finfo(np.float32).tiny))


def experts_visited_from_log(experts: Array, log_keep: Array, tokens: Array) -> Array:
    """:func:`experts_visited` from ``log_keep`` = :func:`experts_log_keep`: E · (1 − exp(tokens · ln(1 − k/E)))."""
    return experts * (1.0 - np.exp(tokens * log_keep))


def infer_step(inputs: Mapping[str, object], hw: Mapping[str, object],
               out_dtype: type = np.float64) -> dict[str, Array]:
    """Evaluate the inference model; ``inputs`` holds :data:`INFER_INPUTS` (codes for categoricals), ``hw`` the
    hardware columns.  Returns :data:`INFER_METRICS` (NaN where the configuration does not divide;
    ``out_dtype``: float64 for tables, sweeps take the kernel's float32 as is) plus ``fits`` and ``reason``."""
    names = (*INFER_INPUTS, "decode_kv_reads", *HARDWARE_COLUMNS)
    reads = inputs["decode_kv_reads"] if "decode_kv_reads" in inputs else 0.0  # optional (default per KV head)
    arrays = np.broadcast_arrays(*[np.asarray(model_input(inputs, k), dtype=DTYPE) for k in INFER_INPUTS],
                                 np.asarray(reads, dtype=DTYPE),
                                 *[np.asarray(hw[k], dtype=DTYPE) for k in HARDWARE_COLUMNS])
    x = dict(zip(names, arrays, strict=True))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = _infer(x)
        reason = _infer_reason(x)
        ok = reason == 0
        fits = out.pop("fits") & ok
        nan_mask = np.where(ok, 0.0, np.nan).astype(DTYPE)  # one select; metrics get NaN by an addition
        result = {k: (out[k] + nan_mask).astype(out_dtype, copy=False) for k in INFER_METRICS}
        result["fits"] = fits
        result["reason"] = np.where(ok & ~fits, codes.REASON_CODE["exceeds_hbm"], reason).astype(np.int16)
    return result


def decode_hbm_bound(inputs: Mapping[str, object], hw: Mapping[str, object]) -> Array:
    """Output tokens per second per GPU that no engine can exceed on the stated configuration: the HBM bound
    of reading the KV cache (float64).

    Each decode step of a request reads, in every layer, the K and V its context holds
    (:func:`dse.cost.architecture.held_tokens`: windows and MLA's latent included), so one GPU of a tp × pp
    replica reads B = (layers/pp) · cached values per token and layer · KV bytes · held_tokens(c̄) per output
    token of the replica, at the mean decode context c̄ = input_len + output_len/2.  A step that verifies
    n speculated tokens (``spec_tokens``) reads it once for at most n + 1 tokens.  At the GPU's peak HBM
    bandwidth (no efficiency):  tokens/s per GPU ≤ hbm_bw · (n + 1) / (B · tp · pp).  Weight reads, prefill,
    scheduling and every other term only lower the true figure, so a measurement above this bound did not run
    the configuration its row states (:func:`dse.validation.validate.validate_table` reports it so)."""
    x = {k: np.asarray(model_input(inputs, k), dtype=np.float64) for k in INFER_INPUTS}
    spec = np.nan_to_num(np.asarray(inputs["spec_tokens"], dtype=np.float64)) if "spec_tokens" in inputs else 0.0
    rec = layer_record(x)
    kv_b = kv_bytes_per_value(x["kv_precision"], x["precision"])
    ctx = x["input_len"] + 0.5 * x["output_len"]
    per_token = stage_layers(x["layers"], x["pp"]) * cached_values(x, rec) * kv_b * held_tokens(ctx, rec)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(hw["hbm_bw"], dtype=np.float64) * (1.0 + spec) / (per_token * x["tp"] * x["pp"])


def _rates(x: dict[str, Array]) -> tuple[Array, Array, Array, Array]:
    """(peak, GEMM rate, activation bytes, weight bytes) at the inference precision (serving-engine GEMM
    efficiency ``infer_matmul_eff_*``)."""
    p = x["precision"]
    fp8 = mask(p == codes.PRECISION_FP8, p)
    fp4 = mask(p == codes.PRECISION_FP4, p)
    m16 = 1.0 - fp8 - fp4
    peak = x["tensor_fp16_flops"] * m16 + x["tensor_fp8_flops"] * fp8 + x["tensor_fp4_flops"] * fp4
    rate = (x["infer_matmul_fp16_rate"] * m16 + x["infer_matmul_fp8_rate"] * fp8
            + x["infer_matmul_fp4_rate"] * fp4)
    act = 2.0 - fp8 - 1.5 * fp4
    return peak, rate, act, weight_bytes_per_param(p)


def layer_gemm_terms(x: dict[str, Array], rec: dict[str, Array], rate: Array, act: Array, wb: Array
                     ) -> tuple[Array, Array, Array]:
    """One layer's GEMMs on one GPU (QKV, output projection, FFN or experts, router) on the serial roofline
    t = F / rate + B / mem, split by what they scale with: (seconds per token, seconds to stream the attention
    weights, seconds to stream the FFN weights of one expert set).  Per token: 2·(n_qkv·h + h·h/t) FLOPs plus
    2·k·(n_fc1·h + h·f/t) in the k experts it visits, each GEMM reading its input (``act`` bytes) and writing its
    output (2 bytes), and the router's 2·E·h at the fp16 rate; the weights (``wb`` bytes each) are read once per
    pass.  The routed experts' grouped GEMMs run at their own fraction of the rate and of ``memory_rate``
    (:func:`moe_grouped_gemm_fractions`), and a MoE layer adds a fixed GPU time per pass (MOE_LAYER_FIXED_S:
    routing, token permutation and finalize, which do not scale with the tokens), counted with the weights
    streamed once per pass.  :func:`_layer_gemms` puts them together for a number of tokens.

    The mean layer of the model record (:func:`dse.cost.architecture.layer_record`): attention GEMMs of their
    own widths (MLA's up projections too), the dense FFN (dense layers, shared experts) on every token, the
    routed experts on moe_frac of the layers.  The weights streamed once per pass (second value) are the
    attention's and the dense FFN's; the third is one routed expert's, times the experts visited."""
    h, t = x["hidden"], x["tp"]
    E, k = x["experts"], x["top_k"]
    moe = mask(E > 1, E)
    phi = rec["moe_frac"]
    n_mlp = rec["n_mlp"]
    n_qkv = rec["attn_in"] / t + rec["attn_rep"]
    o_k = rec["o_width"] / t
    f_d, f_m = rec["ffn_dense"] / t, rec["ffn_moe"] / t
    n_fc1, n_fc1_m = (n_mlp - 1.0) * f_d, (n_mlp - 1.0) * f_m
    dense = mask(f_d > 0, h)
    mem = x["memory_rate"]
    kk = 1.0 + moe * (k - 1.0)
    routed = phi * kk
    flops = (gemm_flops(1.0, n_qkv, h) + gemm_flops(1.0, h, o_k) + 2.0 * rec["up_params"] / t
             + gemm_flops(1.0, n_fc1, h) + gemm_flops(1.0, h, f_d)
             + routed * (gemm_flops(1.0, n_fc1_m, h) + gemm_flops(1.0, h, f_m)))
    rate_e, act_e, wb_e, stream_frac = routed_expert_format(x, rate, act, wb)
    moved = ((h * act + n_qkv * 2.0) + (o_k * act + h * 2.0) + (rec["up_in"] * act + rec["up_out"] / t * 2.0)
             + dense * ((h * act + n_fc1 * 2.0) + (f_d * act + h * 2.0))
             + routed * ((h * act_e + n_fc1_m * 2.0) + (f_m * act_e + h * 2.0)))
    routed_flops = routed * (gemm_flops(1.0, n_fc1_m, h) + gemm_flops(1.0, h, f_m))
    per_token = ((flops - routed_flops) / rate
                 + routing_skew(x) * routed_flops / (rate_e * expert_width_efficiency(f_m))
                 + moved / mem + phi * gemm_flops(1.0, E, h) / x["infer_matmul_fp16_rate"])
    fixed = ((h * n_qkv + rec["up_params"] / t + o_k * h + n_mlp * h * f_d) * wb / mem
             + phi * moe * K.MOE_LAYER_FIXED_S)  # the MoE block's routing, permutation and finalize kernels
    return per_token, fixed, phi * n_mlp * h * f_m * wb_e / (mem * stream_frac)


def routing_skew(x: dict[str, Array]) -> Array:
    """Time of the routed experts' grouped GEMMs under the row's routing over their time with the tokens spread
    evenly: ``moe_imbalance`` where the row gives it (1: an expert-parallel load balancer such as SGLang's EPLB, or a
    benchmark that forces balance), else the GPU generation's measured ``moe_routing_skew``.

    A router sends more tokens to some experts (and expert ranks) than to others, so the busiest paces the layer.
    NVIDIA's model of its inference engines (ai-dynamo/aiconfigurator @095f58a sdk/config.py) times MoE layers with a
    power-law token distribution by default, and its measured TensorRT-LLM tables time every layer both ways:
    their median ratio at compute-bound sizes grows with the expert-parallel ranks ep (the busiest rank paces the
    layer), r = ``moe_routing_skew`` + ``moe_routing_skew_per_doubling`` · log2(ep), per GPU generation
    (dse.validation.fit.moe_routing_skew, tests/kernels/trtllm_moe_routing_skew.csv; Hopper 1.10 + 0.28 per
    doubling, 1.94 at ep 8; Blackwell 1.10 + 0.25, 1.84 at ep 8).  It scales the GEMMs' compute term only: at small
    batches the experts' weights are streamed whatever the routing, and the dispatch all-to-all is not scaled (the
    tables do not measure it).  Static-batch inference (task infer) has no ep: r at one rank."""
    given = x["moe_imbalance"]
    # static-batch inference (task infer) has no expert parallelism: one rank
    doublings = np.log2(np.maximum(x["ep"], 1.0)) if "ep" in x else 0.0
    measured = x["moe_routing_skew"] + x["moe_routing_skew_per_doubling"] * doublings
    return np.where(np.isnan(given), measured, given)


def expert_width_efficiency(width: Array, full_width: float | None = None) -> Array:
    """Fraction of its fitted rate a routed expert's grouped GEMMs reach at expert width f (the FFN width one GPU
    runs, its gate/up GEMMs' output and its down GEMM's reduction): w = min(1, f / f_full), 1 where there are no
    routed experts (f = 0).  TensorRT-LLM's measured MoE layer tables (tests/kernels/trtllm_moe_layer_points.csv,
    ai-dynamo/aiconfigurator @095f58a) run Qwen3-30B's 768-wide experts at about half the fraction of peak of
    Qwen3-235B's 1536-wide and DeepSeek-V3's 2048-wide ones at large token counts (marginal efficiency 0.38-0.63 of
    theirs over H100, H200 and B200, BF16, FP8, block FP8 and NVFP4), while gpt-oss's 2880-wide experts run at the
    dense rate.  The linear form and the width f_full = MOE_GEMM_FULL_WIDTH are FITTED on those tables
    (:func:`dse.validation.fit.moe_expert_width_fit`; ``full_width`` empty: that constant; which GEMM dimension is
    short is not identified by them: the hidden size and the width of the narrow experts are both the smallest
    tabled); experts split by tensor parallelism (f/tp per GPU) are taken to follow the same law, an ASSUMPTION
    (the tables are moe_tp 1)."""
    full = K.MOE_GEMM_FULL_WIDTH if full_width is None else full_width
    w = np.asarray(width)
    return np.where(w > 0, np.minimum(1.0, w / full), 1.0)


def routed_expert_format(x: dict[str, Array], rate: Array, act: Array, wb: Array
                         ) -> tuple[Array, Array, Array, Array]:
    """(GEMM rate, activation bytes, weight bytes, weight-streaming fraction of ``memory_rate``) of the routed
    experts, from how the checkpoint stores them (``moe_quant``, :data:`dse.codes.MOE_QUANT`) and the row's dense
    GEMM ``rate``, ``act`` and ``wb`` (:func:`_rates`):

    * tensor — the row's precision at :func:`moe_grouped_gemm_fractions` of the dense rate;
    * fp8_block, where the row's precision is fp8 — block-scaled FP8 grouped GEMMs at MOE_FP8_BLOCK_GEMM_FRACTION of
      the dense FP8 rate (elsewhere the row's own format: an NVFP4 or BF16 conversion of the same model);
    * mxfp4, at any precision — MXFP4_BYTES_PER_WEIGHT bytes per weight; on GPUs with microscaling tensor cores
      (``tensor_fp4_flops`` > 0: Blackwell) MXFP8 activations at the dense FP8 rate, elsewhere dequantized into
      16-bit math at MOE_MXFP4_BF16_GEMM_FRACTION of the dense 16-bit rate (TensorRT-LLM's gpt-oss support matrix).

    Measured kernels behind each value: tests/kernels/trtllm_moe_grouped_gemm.csv (dse.cost.constants).  The dense
    GEMMs (attention, shared experts) keep the row's per-tensor rate."""
    q, p = x["moe_quant"], x["precision"]
    block = mask((q == codes.MOE_QUANT_FP8_BLOCK) & (p == codes.PRECISION_FP8), q)
    mx = mask(q == codes.MOE_QUANT_MXFP4, q)
    mx8 = mx * mask(x["tensor_fp4_flops"] > 0, q)  # MXFP8 activations on microscaling tensor cores
    mx16 = mx - mx8
    tensor = 1.0 - block - mx
    gemm_frac, stream_frac = moe_grouped_gemm_fractions(p, x["moe_fp4_gemm_fraction"], x["moe_fp4_stream_fraction"])
    rate_e = (tensor * rate * gemm_frac + block * rate * K.MOE_FP8_BLOCK_GEMM_FRACTION
              + mx8 * x["infer_matmul_fp8_rate"] + mx16 * x["infer_matmul_fp16_rate"] * K.MOE_MXFP4_BF16_GEMM_FRACTION)
    act_e = (1.0 - mx) * act + mx8 * 1.0 + mx16 * 2.0
    return rate_e, act_e, routed_weight_bytes(x, wb), tensor * stream_frac + block + mx


def routed_weight_bytes(x: dict[str, Array], wb: Array) -> Array:
    """Bytes per routed-expert weight: MXFP4_BYTES_PER_WEIGHT with ``moe_quant`` mxfp4, else the row's ``wb``
    (block-scaled FP8 adds 4 bytes of scale per 128x128 block: 0.02 %, neglected)."""
    mx = mask(x["moe_quant"] == codes.MOE_QUANT_MXFP4, wb)
    return wb + mx * (K.MXFP4_BYTES_PER_WEIGHT - wb)


def moe_grouped_gemm_fractions(precision: Array, fp4_gemm: Array | float = K.MOE_NVFP4_GEMM_FRACTION,
                               fp4_stream: Array | float = K.MOE_NVFP4_STREAM_FRACTION) -> tuple[Array, Array]:
    """(GEMM rate, weight-streaming rate) of a mixture of experts' routed experts, as fractions of the engine's
    dense serving GEMM rate (``infer_matmul_*_rate``) and of ``memory_rate``:
    t_experts = F_routed / (rate · g) + W_visited / (memory_rate · s).

    NVFP4 (``fp4``): g = ``fp4_gemm``, s = ``fp4_stream``, the GPU's hardware columns ``moe_fp4_gemm_fraction`` and
    ``moe_fp4_stream_fraction`` (efficiency.csv ``moe_fp4_gemm_eff`` / ``moe_fp4_stream_eff``; empty:
    MOE_NVFP4_GEMM_FRACTION and MOE_NVFP4_STREAM_FRACTION, dse.cost.constants), from TensorRT-LLM's measured MoE
    layer tables (ai-dynamo/aiconfigurator, CUTLASS grouped GEMMs, tests/kernels/trtllm_moe_grouped_gemm.csv): on
    B200 its grouped GEMMs reach about half the fraction of peak of its dense NVFP4 GEMMs and stream the visited
    experts' weights at about half the HBM rate; on the RTX PRO 6000 (compute capability 12.0) they reach 1.10 of
    its dense fraction and 0.81 of ``memory_rate``.  Other precisions: 1 and 1:
    per-tensor FP8 grouped GEMMs reach 0.96 (H100) and 0.82 (B200) of the dense FP8 fraction of peak in the same
    tables, BF16 at least the dense one.  Experts stored otherwise (block-scaled FP8, MXFP4): the model's
    ``moe_quant``, :func:`routed_expert_format`."""
    fp4 = mask(precision == codes.PRECISION_FP4, precision)
    return (1.0 + fp4 * (fp4_gemm - 1.0), 1.0 + fp4 * (fp4_stream - 1.0))


def _layer_gemms(tokens: Array, x: dict[str, Array], terms: tuple[Array, Array, Array]) -> Array:
    """Time of one layer's GEMMs for ``tokens`` tokens on one GPU from its :func:`layer_gemm_terms` (computed once
    for the prefill and the decode); a mixture of experts streams the weights of the experts its tokens visit
    (:func:`experts_visited`)."""
    per_token, attn_weights, ffn_weights = terms
    E, k = x["experts"], x["top_k"]
    visited = 1.0 + mask(E > 1, E) * (experts_visited(E, k, tokens) - 1.0)  # weights of the experts actually run
    return per_token * tokens + attn_weights + ffn_weights * visited


def _infer(x: dict[str, Array]) -> dict[str, Array]:  # noqa: PLR0915 - one formula, read top to bottom
    L, h, g, V = x["layers"], x["hidden"], x["kv_heads"], x["vocab"]
    t, p, dp = x["tp"], x["pp"], x["dp"]
    b, s_in, s_out = x["batch"], x["input_len"], x["output_len"]
    E = x["experts"]
    moe = mask(E > 1, E)
    rec = layer_record(x)  # the mean layer (dse.cost.architecture)
    kv_heads_gpu = np.maximum(g / t, 1.0)  # TP beyond the KV heads replicates them (GQA/MQA)
    kv_b = kv_bytes_per_value(x["kv_precision"], x["precision"])
    kvv = cached_values(x, rec)  # K and V values per token and layer on one GPU
    peak, rate, act, wb = _rates(x)
    routed_wb = routed_weight_bytes(x, wb)
    mem = x["memory_rate"]
    swiglu = mask(x["mlp"] == codes.MLP_SWIGLU, x["mlp"])
    ffn_tok = (rec["ffn_dense"] + rec["moe_frac"] * (1.0 + moe * (x["top_k"] - 1.0)) * rec["ffn_moe"]) / t
    n_fc1 = (rec["n_mlp"] - 1.0) * ffn_tok
    tp_links = engine_tp_links(t, x)

    # ---- prefill: batch · input_len tokens ---------------------------------------------------------------
    T = b * s_in
    gemm_terms = layer_gemm_terms(x, rec, rate, act, wb)
    pre_gemm = _layer_gemms(T, x, gemm_terms)
    keys = causal_keys(s_in, rec["window"], rec["full_frac"], K.CAUSAL_FRACTION, rec["chunk"])
    pre_attn = 4.0 * b * s_in * keys * rec["core"] / t / x["infer_attention_rate"]
    act_bytes = pick(swiglu, K.ACTIVATION_FWD_BYTES_SWIGLU, K.ACTIVATION_FWD_BYTES_2MAT)
    pre_ew = (K.RESIDUAL_FWD_BYTES * T * h + act_bytes * T * ffn_tok) / mem
    pre_tp = 2.0 * allreduce_time(2.0 * T * h, t, tp_links)
    overhead = x["layer_overhead_s"]
    pre_layer = pre_gemm + pre_attn + pre_ew + pre_tp + overhead
    logits = serial_roofline_time(gemm_flops(b, V / t, h), gemm_bytes(b, V / t, h, 2.0, 2.0, 2.0),
                                  x["infer_matmul_fp16_rate"], mem)
    pp_cross = spans_domains(t, p, x["scaleup_gpus"])
    pre_p2p = (p - 1.0) * p2p_time(2.0 * T * h, pp_cross, x)
    ttft = L * pre_layer + logits + pre_p2p + K.EMBEDDING_BYTES * T * h / mem

    # ---- decode: one token per request, at the mean context ----------------------------------------------
    ctx = s_in + 0.5 * s_out
    dec_gemm = _layer_gemms(b, x, gemm_terms)
    # FlashAttention-style (KV once per KV head) or TensorRT-LLM <= 0.10's issue-bound kernels
    attn_token, _ = decode_attention_time(ctx, x, kv_heads_gpu, kv_b, rec)
    dec_attn = b * attn_token + 4.0 * b * h / t * 2.0 / mem  # + the query and output vectors
    dec_ew = (K.RESIDUAL_FWD_BYTES * b * h + act_bytes * b * ffn_tok + b * kvv * kv_b) / mem
    dec_tp = 2.0 * allreduce_time(2.0 * b * h, t, tp_links)
    dec_layer = dec_gemm + dec_attn + dec_ew + dec_tp + overhead
    dec_p2p = (p - 1.0) * p2p_time(2.0 * b * h, pp_cross, x)
    tpot = L * dec_layer + logits + dec_p2p
    e2e = ttft + (s_out - 1.0) * tpot
    tokens_per_s = dp * b * s_out / e2e

    # ---- memory per GPU ------------------------------------------------------------------------------------
    p_layer = infer_layer_params(rec, h, E, t)
    untied = mask(x["tied_embeddings"] <= 0, p)
    single = mask(p <= 1, p)
    weights = (stage_layers(L, p) * (p_layer * wb + routed_layer_params(rec, E, t) * (routed_wb - wb))
               + V * h / t * 2.0 * (1.0 + single * untied))
    kv_per_seq = held_tokens(s_in + s_out, rec) * stage_layers(L, p) * kvv * kv_b
    kv = b * kv_per_seq
    act_per_token = (4.0 * h + 2.0 * n_fc1) * 2.0  # one layer's live tensors during prefill
    activations = T * act_per_token + b * V / t * 4.0
    total = weights + kv + activations + K.RUNTIME_RESERVED_BYTES
    max_batch = np.floor((x["hbm_bytes"] - weights - K.RUNTIME_RESERVED_BYTES)
                         / (kv_per_seq + s_in * act_per_token + V / t * 4.0))
    return {
        "ttft_s": ttft, "tpot_s": tpot, "e2e_latency_s": e2e, "output_tokens_per_s": tokens_per_s,
        "output_tokens_per_s_per_gpu": tokens_per_s / x["gpus"],
        "prefill_layer_ms": pre_layer * 1e3, "decode_layer_ms": dec_layer * 1e3,
        "decode_attention_ms": L * dec_attn * 1e3, "decode_gemm_ms": L * dec_gemm * 1e3,
        "decode_tp_comm_ms": L * dec_tp * 1e3, "decode_logits_ms": logits * 1e3,
        "decode_overhead_ms": L * overhead * 1e3,
        "kv_cache_bytes": kv, "weights_bytes": weights, "activations_bytes": activations,
        "mem_total_bytes": total, "max_batch": np.maximum(max_batch, 0.0),
        # every GPU at its rated power during the batch (ASSUMPTION: an upper bound)
        "energy_per_output_token_j": x["gpus"] * x["tdp_w"] * e2e / (dp * b * s_out),
        "fits": total <= x["hbm_bytes"],
    }


#: The ops of one transformer layer (plus the logits) reported by :func:`inference_ops`.
OPS: tuple[str, ...] = ("qkv_proj", "attention", "out_proj", "ffn_up", "ffn_down", "logits")


def inference_ops(inputs: Mapping[str, object], hw: Mapping[str, object]) -> dict[str, dict[str, Array]]:
    """FLOPs, HBM bytes, arithmetic intensity and the bound of every op, per GPU, for the prefill and for one
    decode step (at the mean context), keyed ``"prefill/qkv_proj"`` etc.

    An op is memory-bound when its arithmetic intensity F/B (FLOP/byte) is below the GPU's ridge point,
    peak FLOP/s / peak bytes/s at the op's precision (Williams et al. 2009).  Attention runs in 16 bits.
    """
    names = INFER_INPUTS + HARDWARE_COLUMNS
    arrays = np.broadcast_arrays(*[np.asarray(model_input(inputs, k), dtype=np.float64) for k in INFER_INPUTS],
                                 *[np.asarray(hw[k], dtype=np.float64) for k in HARDWARE_COLUMNS])
    x = dict(zip(names, arrays, strict=True))
    h, t, V = x["hidden"], x["tp"], x["vocab"]
    E, k = x["experts"], x["top_k"]
    moe = mask(E > 1, E)
    kk = 1.0 + moe * (k - 1.0)
    rec = layer_record(x)  # the mean layer: its FFN width per token (dense + routed), its attention widths
    n_qkv = rec["attn_in"] / t + rec["attn_rep"]
    f = rec["ffn_dense"] + rec["moe_frac"] * kk * rec["ffn_moe"]  # per token, over kk below
    f = f / kk
    n_fc1 = (rec["n_mlp"] - 1.0) * f / t
    o_k = rec["o_width"] / t
    peak, _, act, wb = _rates(x)
    wb_ffn = wb + moe * (routed_weight_bytes(x, wb) - wb)  # a MoE model's FFN weights: its experts' format
    hbm = x["hbm_bw"]
    ridge = peak / np.where(hbm > 0, hbm, np.nan)
    ridge16 = x["tensor_fp16_flops"] / np.where(hbm > 0, hbm, np.nan)
    kvv = cached_values(x, rec)
    kv_b = kv_bytes_per_value(x["kv_precision"], x["precision"])
    b, s_in, s_out = x["batch"], x["input_len"], x["output_len"]
    out: dict[str, dict[str, Array]] = {}
    for phase, tokens in (("prefill", b * s_in), ("decode", b)):
        visited = 1.0 + moe * (experts_visited(E, k, tokens) - 1.0)
        tk = tokens * kk
        ops = {
            "qkv_proj": (gemm_flops(tokens, n_qkv, h), gemm_bytes(tokens, n_qkv, h, act, wb, 2.0), ridge),
            "out_proj": (gemm_flops(tokens, h, o_k), gemm_bytes(tokens, h, o_k, act, wb, 2.0), ridge),
            "ffn_up": (gemm_flops(tk, n_fc1, h), gemm_bytes(tk, n_fc1, h, act, wb_ffn * visited, 2.0), ridge),
            "ffn_down": (gemm_flops(tk, h, f / t), gemm_bytes(tk, h, f / t, act, wb_ffn * visited, 2.0), ridge),
            "logits": (gemm_flops(b, V / t, h), gemm_bytes(b, V / t, h, 2.0, 2.0, 2.0), ridge16),
        }
        if phase == "prefill":
            keys = causal_keys(s_in, rec["window"], rec["full_frac"], K.CAUSAL_FRACTION, rec["chunk"])
            ops["attention"] = (4.0 * b * s_in * keys * rec["core"] / t,
                                2.0 * b * s_in * (rec["q_width"] / t + rec["kv_train"] / t) * 2.0, ridge16)
        else:
            span = held_tokens(s_in + 0.5 * s_out, rec)
            ops["attention"] = (2.0 * b * span * x["heads"] / t * decode_head_dims(x, rec),
                                b * span * kvv * kv_b + 4.0 * b * h / t * 2.0, ridge16)
        for name in OPS:
            flops, nbytes, rp = ops[name]
            intensity = flops / nbytes
            out[f"{phase}/{name}"] = {"flops": flops, "bytes": nbytes, "intensity": intensity, "ridge": rp,
                                      "memory_bound": intensity < rp}
    return out


def _infer_reason(x: dict[str, Array]) -> Array:
    """First failing check (0 = feasible), codes into :data:`dse.codes.REASONS`."""
    L, h, a, g = x["layers"], x["hidden"], x["heads"], x["kv_heads"]
    t, p = x["tp"], x["pp"]
    sizes = (L, h, a, g, x["ffn_hidden"], x["vocab"], x["experts"], x["top_k"], x["gpus"], t, p, x["dp"],
             x["batch"], x["input_len"], x["output_len"])
    smallest, largest = sizes[0], sizes[0]
    for arr in sizes[1:]:
        smallest, largest = np.minimum(smallest, arr), np.maximum(largest, arr)
    peak, _, _, _ = _rates(x)
    R = codes.REASON_CODE
    checks = (
        (R["nonpositive_size"], ~(smallest > 0)),
        (R["size above 16777215 (exact-integer domain)"], largest > INT_DOMAIN_MAX),
        (R["unknown_system"], ~(x["tensor_fp16_flops"] > 0)),
        (R["precision_unsupported_by_system"], ~(peak > 0)),
        (R["tp*pp*cp*dp != gpus"], t * p * x["dp"] != x["gpus"]),
        (R["hidden % heads != 0"], ~divides(a, h)),
        (R["heads % kv_heads != 0"], ~divides(g, a)),
        (R["top_k > experts"], x["top_k"] > x["experts"]),
        (R["heads % tp != 0"], ~divides(t, a)),
        (R["kv_heads and tp: neither divides the other"], ~divides(t, g) & ~divides(g, t)),
        (R["crosses nodes without scale-out network"], ~(x["scaleout_bw"] > 0) & (t * p > x["scaleup_gpus"])),
    )
    reason = np.zeros(L.shape, dtype=L.dtype)
    for code, failed in reversed(checks):
        reason += failed * (code - reason)
    return reason
