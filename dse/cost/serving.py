"""Serving: a steady-state model of an in-flight (continuous) batching engine, as numpy arrays.

An engine replica (tp·pp GPUs; ``dp`` replicas) keeps up to C requests running.  Every iteration it runs one
forward pass over the decode token of each running request plus a chunk of prompt tokens of requests being
admitted, under a token budget N (``max_num_tokens``).  A request spends n_pre = ⌈input_len / N⌉ iterations
in prefill and output_len − 1 in decode (its first output token comes from the prefill).

Steady state, per pipeline micro-batch (pp micro-batches are in flight, each holding C/pp requests):

* X = requests finishing per micro-batch iteration = min(C/pp / (output_len − 1 + n_pre),
  N / (input_len + output_len − 1)): bounded by the concurrency (Little's law over iterations) or by the
  token budget;
* tokens of one iteration M = X·(input_len + output_len − 1): X·input_len prompt tokens, D = X·(output_len − 1)
  decode tokens;
* one stage's iteration time t_stage = L/pp · t_layer(M, X, D) + logits + p2p, each op on the same serial
  roofline as :mod:`dse.cost.inference` (GEMMs over M tokens, causal prompt attention, decode attention
  reading each running request's KV at the mean context input_len + output_len/2, TP all-reduces, the
  per-layer overhead once per pass);
* throughput = X·output_len / t_stage per replica (one micro-batch leaves the last stage every t_stage);
  a request's token crosses all pp stages: TPOT = pp·t_stage.

Concurrency C: at maximum load (``request_rate`` empty: every request queued at once) the smallest of the
engine's ``batch`` and the KV capacity — the HBM left after weights, the activations of N tokens and the
runtime reserve, times the engine's KV memory fraction, over each request's KV at its mean context (paged in
blocks of ``kv_block_tokens``); an engine whose fraction bounds the whole HBM (``kv_memory_basis`` = total: vLLM,
SGLang, TGI 3) keeps fraction × HBM − weights − activations − reserve instead.  Under a given ``request_rate`` λ
it is the fixed point of Little's law, C = λ/dp · (TTFT + (output_len − 1)·TPOT), iterated a fixed number of
times from the light-load value; a rate above what the maximum concurrency serves is the reason ``overloaded``.
TTFT = half an iteration of waiting to be admitted + the prefill iterations, each a full pass through the
pipeline + under a Poisson rate the wait of a G/G/c queue (:func:`poisson_admission_wait`; at maximum load the
queue's length is not an input, so none).

Closed loop (``concurrency`` = N clients, each sending its next request when its last one ends, no think time:
AIPerf / genai-perf ``--concurrency``, ``vllm bench serve --max-concurrency``): every client is always in the
system, N/dp per replica.  The engine runs C = min(batch, KV capacity, N/dp) of them at its maximum-load
steady state (limit ``clients`` when N binds) and the other N/dp − C wait; by Little's law over the closed
network (Reiser & Lavenberg 1980, with no think time: N = throughput × time in system) each request waits
W = (N/dp − C) / R before it is admitted, R = the replica's requests/s, and TTFT includes W
(``queue_wait_s``).

Think time (``think_time_s`` = Z, closed loops only; 0 or empty = none, the loop above exactly): each client
waits Z after its response before sending again, so the clients form a closed network of a delay station (Z) and
the engine, a load-dependent station whose rate at n running requests is the iteration model's
(:func:`closed_loop_throughput`).  Bursts (``arrival = burst``: all ``concurrency`` requests sent at t = 0, as
offline runs do) run in waves of the engine's concurrency (:func:`burst_waves`).  Latency percentiles
(``ttft_p50_s`` … ``tpot_p99_s``): :func:`poisson_admission_wait`, :func:`admission_boundary_quantile` and
:func:`tpot_spread`; ``ttft_s`` and ``tpot_s`` stay the means.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import NormalDist
from typing import Any

import numpy as np

from dse import codes
from dse.cost import constants as K
from dse.cost.architecture import (
    cached_values,
    causal_keys,
    held_tokens,
    infer_layer_params,
    layer_record,
    model_input,
    mtp_params,
    routed_layer_params,
)
from dse.cost.compute import gemm_flops
from dse.cost.inference import (
    DTYPE,
    INFER_INPUTS,
    _infer_reason,
    _rates,
    decode_attention_time,
    experts_log_keep,
    experts_visited_from_log,
    kv_bytes_per_value,
    layer_gemm_terms,
    prompt_attention_rate,
    routed_weight_bytes,
    stage_layers,
)
from dse.cost.network import (
    allreduce_terms,
    alltoall_time,
    engine_ep_links,
    engine_tp_links,
    p2p_link,
    spans_domains,
)
from dse.cost.select import columns_on_rows, mask, pick
from dse.hardware.catalog import HARDWARE_COLUMNS

Array = Any

SERVE_INPUTS: tuple[str, ...] = (*INFER_INPUTS, "max_num_tokens", "request_rate", "kv_memory_fraction",
                                 "kv_block_tokens", "decode_kv_reads", "prefill_gpus", "prefill_tp", "concurrency",
                                 "cuda_graphs", "kv_reservation", "kv_memory_basis", "ep", "spec_tokens",
                                 "spec_acceptance", "spec_method", "think_time_s", "arrival", "request_overhead_s",
                                 "request_setup_s", "host_overlap", "window_kv", "fp8_context_fmha", "ep_comm",
                                 "mla_decode")
#: Latency percentiles reported (per cent); ``ttft_s`` and ``tpot_s`` are the means.
PERCENTILES: tuple[int, ...] = (50, 90, 99)
TTFT_PERCENTILES: tuple[str, ...] = tuple(f"ttft_p{q}_s" for q in PERCENTILES)
TPOT_PERCENTILES: tuple[str, ...] = tuple(f"tpot_p{q}_s" for q in PERCENTILES)
SERVE_METRICS: tuple[str, ...] = (
    "output_tokens_per_s", "output_tokens_per_s_per_gpu", "requests_per_s", "ttft_s", "tpot_s",
    *TTFT_PERCENTILES, *TPOT_PERCENTILES,
    "tokens_per_s_per_user", "running_requests", "queue_wait_s", "kv_cache_utilization", "iteration_ms",
    "iteration_tokens",
    "kv_capacity_requests", "weights_bytes", "kv_cache_bytes", "mem_total_bytes", "energy_per_output_token_j",
    "iter_gemm_ms", "iter_prefill_attention_ms", "iter_decode_attention_ms", "iter_elementwise_ms", "iter_tp_comm_ms",
    "iter_ep_comm_ms", "iter_overhead_ms", "iter_logits_ms", "iter_pp_comm_ms", "iter_draft_ms", "kv_transfer_s",
    "decode_tokens_per_s_per_gpu",
)
#: The parts of ``iteration_ms`` (one stage's iteration; they sum to it).
ITERATION_PARTS: tuple[str, ...] = ("iter_gemm_ms", "iter_prefill_attention_ms", "iter_decode_attention_ms",
                                    "iter_elementwise_ms", "iter_tp_comm_ms", "iter_ep_comm_ms", "iter_overhead_ms",
                                    "iter_logits_ms",
                                    "iter_pp_comm_ms", "iter_draft_ms")
#: What binds the steady state (column ``limit``).
LIMITS: tuple[str, ...] = ("batch", "kv_memory", "tokens", "compute", "bandwidth", "prefill_pool", "kv_transfer",
                            "clients")
#: Engine defaults when neither the row nor its stack says: TensorRT-LLM's KV fraction (0.9 of free memory)
#: and block size (64 tokens; TensorRT-LLM 0.10 release notes), as in the shared serve cases.
DEFAULT_KV_MEMORY_FRACTION = 0.9
DEFAULT_KV_BLOCK_TOKENS = 64.0
#: Refinement steps of Little's law under a given request rate after the affine solution (see _fixed_point).
FIXED_POINT_ITERATIONS = 3
#: Squared coefficients of variation of the inter-arrival and the service times in the Allen-Cunneen / Whitt
#: factor (c_a² + c_s²) / 2 of :func:`poisson_admission_wait`: Poisson arrivals (1, exact) and a request's time
#: in the engine at fixed input and output lengths, as benchmarks send them (0: ASSUMPTION, deterministic; a
#: length distribution such as ShareGPT's would raise it).
ARRIVAL_SCV = 1.0
SERVICE_SCV = 0.0
#: Relative rounding slack when a ratio of float32 sizes is rounded up to whole waves or passes (n / C = 1 must
#: stay 1 wave).
WHOLE_SLACK = 1e-5


def serve_step(inputs: Mapping[str, object], hw: Mapping[str, object],
               out_dtype: type = np.float64) -> dict[str, Array]:
    """Evaluate the serving model; ``inputs`` holds :data:`SERVE_INPUTS` (NaN = empty: ``batch`` and
    ``max_num_tokens`` unlimited, ``request_rate`` maximum load), ``hw`` the hardware columns.  Returns
    :data:`SERVE_METRICS` (NaN where the configuration has no answer; ``out_dtype``: float64 for tables, sweeps
    take the kernel's float32 as is), ``limit`` (code into :data:`LIMITS`), ``fits`` and ``reason``."""
    names = SERVE_INPUTS + HARDWARE_COLUMNS
    arrays = np.broadcast_arrays(*[np.asarray(model_input(inputs, k), dtype=DTYPE) for k in SERVE_INPUTS],
                                 *[np.asarray(hw[k], dtype=DTYPE) for k in HARDWARE_COLUMNS])
    x = dict(zip(names, arrays, strict=True))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # the static-batch checks, with batch standing in where it is unlimited
        disagg = ~np.isnan(x["prefill_gpus"])
        probe = {**x, "batch": np.where(np.isnan(x["batch"]), 1.0, x["batch"]),
                 "gpus": x["tp"] * x["pp"] * x["dp"]}  # the decode (or only) pool's layout
        reason = _infer_reason(probe).astype(np.int64)
        tp_p = prefill_tp_of(x)
        bad_pool = disagg & ((x["prefill_gpus"] < 1) | (np.fmod(x["prefill_gpus"], tp_p) != 0)
                             | (np.fmod(x["heads"], tp_p) != 0))
        reason = np.where((reason == 0) & bad_pool, codes.REASON_CODE["prefill pool does not divide"], reason)
        if disagg.any():  # the KV cache must reach the decode pool: no link, no answer (not 0 requests/s)
            reason = np.where((reason == 0) & disagg & ~(kv_link(x)[1] > 0),
                              codes.REASON_CODE["crosses nodes without scale-out network"], reason)
        # wide expert parallelism: whole experts on each of ep GPUs that tile the replicas' tp·dp GPUs (an ep that
        # does not divide the experts holds redundant slots: expert_slots_per_rank)
        ep = x["ep"]
        reason = np.where((reason == 0) & (ep > 1) & (np.fmod(x["tp"] * x["dp"], ep) != 0),
                          codes.REASON_CODE["(tp*dp) % ep != 0"], reason)
        reason = np.where((reason == 0) & (np.nan_to_num(x["spec_tokens"]) > 0) & ~(x["mtp"] > 0)
                          & ~(x["spec_method"] == codes.SPEC_METHOD_EAGLE),
                          codes.REASON_CODE["spec_tokens needs mtp modules"], reason)
        ok = reason == 0
        # only the rows that divide are served: aggregated and disaggregated ones gathered apart, scattered back
        n = ok.shape[0]
        block = np.full((len(SERVE_METRICS), n), np.nan, dtype=DTYPE)  # one allocation for every metric
        out: dict[str, Array] = dict(zip(SERVE_METRICS, block, strict=True))
        out.update(fits=np.zeros(n, dtype=bool), overloaded=np.zeros(n, dtype=bool),
                   limit=np.full(n, -1, dtype=np.int64))
        served = bool(ok.all())  # every row divides: the aggregated model takes them all, without a gather (a
        # row's values do not depend on the other rows), and the disaggregated rows' values are then replaced
        for rows, model in ((np.arange(n) if served else np.flatnonzero(ok & ~disagg), _serve),
                            (np.flatnonzero(ok & disagg), _serve_disaggregated)):
            if rows.size == n and not (served and model is _serve and disagg.any()):  # no gather, no scatter
                part = model(x)
                out = {k: np.broadcast_to(part[k], (n,)) for k in out}
            elif rows.size == n:  # the aggregated model on every row, writable: the disaggregated rows come next
                part = model(x)
                out = {k: np.array(np.broadcast_to(part[k], (n,)), dtype=out[k].dtype) for k in out}
            elif rows.size:
                part = model({k: np.take(v, rows) for k, v in x.items()})  # (take: faster than v[rows])
                for k in out:
                    out[k][rows] = np.broadcast_to(part[k], rows.shape)
        fits = out.pop("fits")
        overloaded = out.pop("overloaded")
        limit = out.pop("limit")
        reason = np.where(ok & ~fits, codes.REASON_CODE["exceeds_hbm"], reason)
        reason = np.where(ok & fits & overloaded, codes.REASON_CODE["overloaded"], reason)
        good = reason == 0
        # no steady state without memory for one request, or above capacity: only the memory columns stay
        memory = ("weights_bytes", "kv_capacity_requests", "mem_total_bytes")
        if good.all():  # every row answered: nothing to blank (the selects below would copy every metric)
            result: dict[str, Array] = {k: np.require(out[k], out_dtype, ("C", "W")) for k in SERVE_METRICS}
        elif not served and out_dtype == DTYPE:  # the metrics are the rows of `block` (NaN where not ok): blank
            # only the rows that divide but have no steady state, in place
            result = out
            bad = np.flatnonzero(ok & ~good)
            if bad.size:
                for k in SERVE_METRICS:
                    if k not in memory:
                        out[k][bad] = np.nan
        else:
            result = {k: np.where(ok if k in memory else good, out[k], np.nan).astype(out_dtype, copy=False)
                      for k in SERVE_METRICS}
    result["limit"] = np.where(good, limit, -1).astype(np.int16)
    result["fits"] = good
    result["reason"] = reason.astype(np.int16)
    return result


def _iteration_terms(x: dict[str, Array], rate: Array, act: Array, wb: Array,
                     rec: dict[str, Array] | None = None) -> dict[str, Array]:
    """What one micro-batch iteration costs per unit of what it holds, computed once per configuration and
    used by every :func:`_iteration` of it (the fixed point calls it many times).  Every op is on the serial
    roofline (F / rate + B / mem, as :mod:`dse.cost.inference`), so each is affine in the tokens it processes:

    * per token of the iteration (M): the layer's GEMMs (:func:`layer_gemm_terms`), the element-wise kernels
      (residual, activation, writing the new K and V), the two TP all-reduces of 2·h bytes each and the
      pipeline hand-off of 2·h bytes;
    * per request whose prompt it holds (X): causal prompt attention, CAUSAL_FRACTION·4·s_in²·h/t FLOPs;
    * per decode token (D): attention over the mean context ctx = s_in + s_out/2
      (:func:`dse.cost.inference.decode_attention_time`: 4·ctx·h/t FLOPs and the KV read once per KV head,
      ctx·2·kv_heads·d·kv bytes, or TensorRT-LLM <= 0.10's issue-bound kernels, decode_kv_reads = 1);
    * per logits row (D + X): the vocabulary projection;
    * per request the iteration carries (D + X): the engine's host time (:func:`request_overhead_time`);
    * per pass: the weights streamed once, the collectives' α and the per-layer overhead."""
    h, V = x["hidden"], x["vocab"]
    t, p = x["tp"], x["pp"]
    s_in, s_out = x["input_len"], x["output_len"]
    moe = mask(x["experts"] > 1, h)
    rec = layer_record(x) if rec is None else rec  # the mean layer (dse.cost.architecture)
    kvh = np.maximum(x["kv_heads"] / t, 1.0)
    kv_b = kv_bytes_per_value(x["kv_precision"], x["precision"])
    mem = x["memory_rate"]
    per_token, attn_weights, ffn_weights = layer_gemm_terms(x, rec, rate, act, wb)
    ep_on, ep_scale, ep_share, ep_group, ep_token, ep_pass = expert_parallel_terms(x, rec, act)
    ctx = s_in + 0.5 * s_out
    # decode attention: FlashAttention-style, or TensorRT-LLM <= 0.10's issue-bound kernels (decode_kv_reads)
    # per decode token; the KV it reads
    decode_attention, kv_read = decode_attention_time(ctx, x, kvh, kv_b, rec, mla_decode=x["mla_decode"])
    act_bytes = pick(mask(x["mlp"] == codes.MLP_SWIGLU, h), K.ACTIVATION_FWD_BYTES_SWIGLU,
                     K.ACTIVATION_FWD_BYTES_2MAT)
    ar_per_byte, ar_latency = allreduce_terms(t, engine_tp_links(t, x))
    tp_on = mask(t > 1, t)
    p2p_bw, p2p_latency = p2p_link(spans_domains(t, p, x["scaleup_gpus"]), x)
    pp_on = mask(p > 1, p)
    ffn_tok = rec["ffn_dense"] + rec["moe_frac"] * (1.0 + moe * (x["top_k"] - 1.0)) * rec["ffn_moe"]
    # what dominates the GEMMs (`limit`)
    n_all = (rec["attn_in"] + rec["o_width"] + rec["n_mlp"] * ffn_tok) / t + rec["attn_rep"]
    n_spec, gain = speculative_terms(x)
    any_spec = bool(np.any(n_spec > 0))
    c = {
        "layers_per_stage": stage_layers(x["layers"], p), "input_len": s_in, "decode_len": (s_out - 1.0) / (1.0 + gain),
        "spec_n": n_spec, "any_spec": any_spec, "spec_1": 1.0 + n_spec,
        "gemm_token": per_token, "gemm_weights": attn_weights + ffn_weights, "ffn_weights": ffn_weights,
        "moe": moe, "any_moe": bool(moe.any()), "experts": x["experts"], "top_k": x["top_k"],
        "log_keep": experts_log_keep(x["experts"], x["top_k"]), "moe_ffn": moe * ffn_weights,
        "ep_scale": ep_scale, "ep_share": ep_share, "ep_group": ep_group, "ep_token": ep_token, "ep_pass": ep_pass,
        "prefill_attention": 4.0 * s_in * causal_keys(s_in, rec["window"], rec["full_frac"], K.CAUSAL_FRACTION,
                                                      rec["chunk"]) * rec["core"] / t
        / prompt_attention_rate(x, kv_b),
        "decode_attention": decode_attention,
        "elementwise": (K.RESIDUAL_FWD_BYTES * h + act_bytes * ffn_tok / t + cached_values(x, rec) * kv_b) / mem,
        # two all-reduces of 2·h bytes per token (network.allreduce_terms): bytes per token, α per pass
        "tp_token": tp_on * 2.0 * 2.0 * h * ar_per_byte,
        "tp_pass": tp_on * 2.0 * ar_latency,
        # per pass: the engine's fixed cost per layer, launched kernel by kernel or replayed from a CUDA graph
        "overhead": pick(mask(x["cuda_graphs"] > 0, h), x["layer_overhead_graphs_s"], x["layer_overhead_s"]),
        "logits_row": gemm_flops(1.0, V / t, h) / x["infer_matmul_fp16_rate"] + (h * 2.0 + V / t * 2.0) / mem,
        "logits_pass": h * (V / t) * 2.0 / mem,
        "p2p_token": pp_on * 2.0 * h / p2p_bw, "p2p_pass": pp_on * p2p_latency,
        "compute_token": gemm_flops(1.0, n_all, h) / rate, "traffic_pass": n_all * h * wb / mem,
        "kv_read_token": kv_read / mem,
        "request_overhead": request_overhead_time(x), "request_setup": request_setup_time(x),
        "host_overlap": mask(host_overlaps(x), h),
    }
    # per configuration, not per solver step (:func:`_iteration` runs many times on the same terms): a decode
    # token's attention with n drafts verified, and the drafter's time per decode token and per pass
    c["attn_dec_token"] = c["decode_attention"] + n_spec * (c["decode_attention"] - c["kv_read_token"])
    if any_spec:
        c["draft_token"] = c["gemm_token"] + c["elementwise"] + c["tp_token"] + c["ep_token"] + c["decode_attention"] \
            + c["logits_row"]
        c["draft_pass"] = c["gemm_weights"] + c["overhead"] + c["tp_pass"] + c["ep_pass"]
    return c


def _iteration(c: dict[str, Array], X: Array, parts: dict[str, Array] | None = None,
               X_dec: Array | None = None) -> tuple[Array, Array, Array]:
    """(t_stage, compute part, memory part) of one micro-batch iteration with the prompt tokens of X requests
    and the decode tokens of X_dec·(output_len − 1) requests (X_dec = X in steady state), from the terms ``c``
    of :func:`_iteration_terms`; ``parts``, when given, receives the split of t_stage (ms,
    :data:`ITERATION_PARTS`)."""
    D = (X if X_dec is None else X_dec) * c["decode_len"]  # decode steps (one token each, 1 + n drafts verified)
    M = X * c["input_len"] + D * c["spec_1"]  # prompt + decode tokens through the layers
    gemm = c["gemm_token"] * M + c["gemm_weights"]
    ep_comm = 0.0 * gemm
    if c["any_moe"]:  # the experts the tokens visit: E·(1 − (1 − k/E)^M) of them (inference.experts_visited);
        # with expert parallelism the GPU's E/ep whole experts, visited by the tokens of its ep/tp replicas
        visited = c["ep_share"] * experts_visited_from_log(c["experts"], c["log_keep"], M * c["ep_group"])
        gemm = gemm + c["moe_ffn"] * (c["ep_scale"] * visited - 1.0)
        ep_comm = c["ep_token"] * M + c["ep_pass"]  # dispatch and combine all-to-alls
        gemm = gemm + ep_comm
    attn_pre = c["prefill_attention"] * X
    # a decode step's attention reads the KV once; with n drafts verified its FLOPs grow (1 + n)-fold
    attn_dec = D * c["attn_dec_token"]
    ew = c["elementwise"] * M
    tp = c["tp_token"] * M + c["tp_pass"]
    layer = gemm + attn_pre + attn_dec + ew + tp + c["overhead"]
    logits = c["logits_row"] * (D * c["spec_1"] + X) + c["logits_pass"]  # decode tokens, prompts' last
    p2p = c["p2p_token"] * M + c["p2p_pass"]
    # the engine's host work for each request the iteration carries, and for each request it admits
    host = c["request_overhead"] * (D + X) + c["request_setup"] * X
    t_stage = c["layers_per_stage"] * layer + logits + p2p
    draft = 0.0 * t_stage
    if c["any_spec"]:  # the drafter (MTP module or EAGLE head) drafts n tokens per decode step: a layer, its
        # projection and the shared head each (drafter_size)
        draft = c["spec_n"] * (D * c["draft_token"] + c["draft_pass"])
        t_stage = t_stage + draft
    host = exposed_host_time(host, t_stage, c["host_overlap"])
    t_stage = t_stage + host
    if parts is not None:
        n = c["layers_per_stage"] * 1e3
        parts.update({"iter_gemm_ms": n * (gemm - ep_comm), "iter_prefill_attention_ms": n * attn_pre,
                      "iter_decode_attention_ms": n * attn_dec, "iter_elementwise_ms": n * ew,
                      "iter_tp_comm_ms": n * tp, "iter_ep_comm_ms": n * ep_comm,
                      "iter_overhead_ms": n * c["overhead"] + host * 1e3,
                      "iter_logits_ms": logits * 1e3, "iter_pp_comm_ms": p2p * 1e3, "iter_draft_ms": draft * 1e3})
    return t_stage, c["compute_token"] * M, c["traffic_pass"] + c["kv_read_token"] * D


def prefill_tp_of(x: dict[str, Array]) -> Array:
    """The tensor-parallel size of the prefill pool's replicas: ``prefill_tp``, or the decode pool's ``tp`` where it
    is empty (README, column prefill_tp)."""
    return np.where(np.isnan(x["prefill_tp"]), x["tp"], x["prefill_tp"])


def decode_pool_rate(terms: dict[str, Array], running: Array, pp: Array) -> Array:
    """Requests/s one replica finishes when it only decodes, its prompts prefilled elsewhere at no cost to it:
    ``running`` requests (its batch or KV limit) in decode passes of running/pp decode tokens each
    (:func:`_iteration` with no prompt), R = running / (pp · steps · t_pass).

    The decode pool's capacity of a disaggregated deployment; per GPU and times output_len it is the output
    ``decode_tokens_per_s_per_gpu`` of every serving row, what benchmarks of disaggregated decode report when they
    test the decode pool alone with the prefill side "unlimited" (SGLang's large-scale expert-parallel posts,
    ``tests/cases/sglang_large_ep_decode.csv``)."""
    x_dec = running / pp / np.maximum(terms["decode_len"], 1.0)
    t_pass, _, _ = _iteration(terms, 0.0 * x_dec, X_dec=x_dec)
    return x_dec / t_pass


def exposed_host_time(host: Array, gpu: Array, overlap: Array) -> Array:
    """Seconds the engine's host work adds to an iteration whose GPU work takes ``gpu``: all of it when the
    host loop runs between iterations (``host_overlap`` = 0), and only what exceeds the GPU's time when the host
    prepares iteration n + 1 while the GPU runs iteration n (1: TensorRT-LLM's PyTorch-backend overlap scheduler,
    PyExecutor._executor_loop_overlap, one step of lookahead), so the iteration takes max(gpu, host)."""
    return host - overlap * np.minimum(host, gpu)


def curved_host(x: dict[str, Array]) -> Array:
    """Rows whose iteration time is max(GPU, host) (:func:`exposed_host_time`): not affine in the requests."""
    return host_overlaps(x) & ((np.nan_to_num(x["request_overhead_s"]) > 0) | (np.nan_to_num(x["request_setup_s"]) > 0))


def host_overlaps(x: dict[str, Array]) -> Array:
    """True where the engine's host loop runs beside the GPU (:func:`exposed_host_time`): ``host_overlap`` always
    (code 1), or single_stage (code 2) on a replica of one pipeline stage.  TensorRT-LLM's PyTorch backend picks its
    loop by the layout: ``_executor_loop_overlap`` (one step of lookahead) only when pp_size is 1, and
    ``_executor_loop_pp`` otherwise, whichever disable_overlap_scheduler says (tensorrt_llm/_torch/pyexecutor/
    py_executor.py, PyExecutor.__init__: "if self.dist.pp_size > 1: self.event_loop = self._executor_loop_pp")."""
    o = x["host_overlap"]
    return (o == 1) | ((o == 2) & (x["pp"] <= 1))


def request_overhead_time(x: dict[str, Array]) -> Array:
    """Seconds of the engine's host work per request per iteration, on the iteration's critical path:
    t_host = ``request_overhead_s`` · (D + X), D decode requests and X prompts (or chunks) in the iteration.

    An in-flight batching runtime adds a time per running request that no GPU term has: scheduling, per-request
    decoder state and the response of every request, each iteration.  TensorRT-LLM's PyTorch executor logs an
    upper bound of it (tensorrt-llm-1.0 and 1.1: pull request 10273, a 45.11 ms ``host_step_time`` at 1 536 running
    requests, which is the loop's wall time per iteration, the wait for the GPU included; the profiles take the
    host work equal to that bound, an ASSUMPTION; dse/stacks.csv), and hides it behind the GPU where it overlaps
    its loop (:func:`exposed_host_time`).  TensorRT-LLM 0.10's
    perf-overview rows do not show it: fitted beside the time per admitted request (:func:`request_setup_time`) it
    goes to 0, so that profile leaves it empty.  Per stack (dse/stacks.csv); empty = 0."""
    return np.nan_to_num(x["request_overhead_s"])


def request_setup_time(x: dict[str, Array]) -> Array:
    """Seconds of the engine's host work per request admitted, on the iteration's critical path:
    t_setup = ``request_setup_s`` · X, X the requests whose prompt (or its first chunk) the iteration starts; in
    steady state as many finish, so the term also carries a request's completion (its response).

    Besides its time per running request (:func:`request_overhead_time`), a batch manager does work once per
    request: it creates the request, allocates its first KV blocks, sets up its decoder and sampling state, and
    returns its response when it ends.  In TensorRT-LLM 0.10's perf-overview rows
    (``tests/reference/trtllm_0.10.0_serve_a100_h100.csv``) the 128/128-token rows, which admit ~8 requests per
    iteration, sit above dse's iteration by +8 % on A100 and H100 alike, while the 128/2048 rows, with as many
    running requests but ~1 admission per iteration, do not.  Per stack (dse/stacks.csv, FITTED there, the
    mechanism an ASSUMPTION); empty = 0."""
    return np.nan_to_num(x["request_setup_s"])


def speculative_terms(x: dict[str, Array]) -> tuple[Array, Array]:
    """(draft tokens per decode step, tokens a step adds beyond the first) of speculative decoding, with the
    model's multi-token-prediction module as the drafter (``spec_method`` mtp, DeepSeek-V3 §5.4.3; TensorRT-LLM
    and SGLang's MTP) or an EAGLE head (eagle, Li et al. 2024; chain drafting, no tree): n = ``spec_tokens``
    drafts per step, the drafter run n times; the target model verifies 1 + n tokens in one pass and keeps the
    i-th draft when it and every earlier one are accepted, so a step yields 1 + Σ_i α^i tokens on average
    (α = ``spec_acceptance``; empty, MTP only: constants.MTP_ACCEPTANCE, DeepSeek-V3's 85-90 % for the second
    token; an EAGLE row must give it, dse.frame).  n = 0: no speculation (gain 0)."""
    n = np.nan_to_num(x["spec_tokens"], nan=0.0)
    alpha = np.where(np.isnan(x["spec_acceptance"]), K.MTP_ACCEPTANCE, x["spec_acceptance"])
    # Σ_{i=1..n} α^i = α(1 − α^n)/(1 − α) for α < 1, and n at α = 1 (every draft accepted)
    geometric = alpha * (1.0 - alpha**n) / np.maximum(1.0 - alpha, 1e-9)
    gain = np.where(n > 0, np.where(alpha < 1.0, geometric, n), 0.0)
    return n, gain


def expert_parallel_terms(x: dict[str, Array], rec: dict[str, Array], act: Array
                          ) -> tuple[Array, Array, Array, Array, Array, Array]:
    """Wide expert parallelism in serving (TensorRT-LLM's attention-DP + EP "DEP", SGLang's large-scale EP,
    DeepSeek-V3 §3.4): ``ep`` GPUs share the routed experts, each holding E/ep whole experts, while attention
    runs per replica (tp GPUs each), so an EP group spans ep/tp replicas.  Per MoE layer and token, a dispatch
    and a combine all-to-all move k·h values (``act`` bytes; network.alltoall_time over the group), or, on the
    rows :func:`allgather_exchange_rows` picks, an all-gather and a reduce-scatter (:func:`allgather_exchange_time`).
    The GPU's experts are visited by the tokens of its ep/tp replicas: E/ep·(1 − (1 − k/E)^(M·ep/tp)) of them
    stream their weights.  ep = 1: the experts split by tp as before (every term 0 or 1).

    Returns (on, scale of one expert's weights against the tp split, share of the experts on the GPU, replicas
    per group, seconds per token, seconds per pass)."""
    t, ep = x["tp"], x["ep"]
    if not np.any(ep > 1):  # no row shares its experts: every term is the tp split's
        zero = 0.0 * t
        return zero, 1.0 + zero, 1.0 + zero, 1.0 + zero, zero, zero
    on = mask(ep > 1, t)
    k = x["top_k"]

    def alltoall(c: dict[str, Array]) -> tuple[Array, Array]:  # (seconds per byte, α) on the rows with ep > 1
        one = 0.0 * c["tp"] + 1.0
        alpha = alltoall_time(0.0, one, c["ep"], c)
        return alltoall_time(1.0, one, c["ep"], c) - alpha, alpha

    per_byte, latency = columns_on_rows(ep > 1, alltoall, x, t, 2)
    moe = rec["moe_frac"] * on
    token = moe * 2.0 * k * x["hidden"] * act * per_byte / t  # a replica's tokens split over its tp ranks
    gather = allgather_exchange_rows(x) * on
    if np.any(gather > 0):
        ag_token, ag_latency = columns_on_rows(gather > 0, lambda c: allgather_exchange_time(c, act_of(c)), x, t, 2)
        token = token + gather * (moe * ag_token / t - token)
        latency = latency + gather * (ag_latency - latency)
    share = expert_slots_per_rank(x["experts"], ep) / np.maximum(x["experts"], 1.0)
    return (on, pick(on, t, 1.0), pick(on, share, 1.0), pick(on, ep / t, 1.0), token, moe * 2.0 * latency)


def allgather_exchange_rows(x: dict[str, Array]) -> Array:
    """1 on the expert-parallel rows whose engine exchanges the MoE tokens by all-gather and reduce-scatter: the
    stack's ``ep_comm`` allgather (TensorRT-LLM 1.x) unless an all-to-all is chosen, which TensorRT-LLM does only
    over a multi-node NVLink domain and with more expert ranks than a token's experts
    (``CutlassFusedMoE.select_alltoall_method_type``: "if mapping.moe_ep_size <= top_k: NotEnabled", then
    MNNVL where ``MnnvlMemory.supports_mnnvl()``; DeepEP only under TRTLLM_CAN_USE_DEEP_EP, which the perf-overview
    runs do not set), else 0."""
    ep_comm = x["ep_comm"]
    alltoall = mask((x["scaleup_multinode"] > 0) & (x["ep"] > x["top_k"]), ep_comm)
    return mask((ep_comm > 0) & (x["ep"] > 1), ep_comm) * (1.0 - alltoall)


def act_of(x: dict[str, Array]) -> Array:
    """Bytes per activation element at the row's precision (:func:`dse.cost.inference._rates`)."""
    return _rates(x)[2]


def allgather_exchange_time(x: dict[str, Array], act: Array) -> tuple[Array, Array]:
    """(seconds per token, seconds per pass) of one MoE layer's token exchange by all-gather and reduce-scatter over
    the ``ep`` ranks of an attention-DP group (TensorRT-LLM ``CutlassFusedMoE``: the rank's tokens are quantized,
    then ``allgather([x, x_sf, token_selected_experts, token_final_scales])``, the experts run on every rank's
    tokens, and ``reducescatter`` returns each rank its tokens' BF16 outputs; NVIDIA/TensorRT-LLM
    tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py @000a01de).  Per token the all-gather moves
    h·a bytes of activation (a = ``act``; NVFP4 adds its FP8 scale per 16 elements; block-scaled FP8 experts
    quantize inside the fused kernel, so their input travels in BF16) and k int32 expert ids and fp32 weights, the
    reduce-scatter h·2 bytes; each ring collective costs (n−1)·bytes / busbw (network.allgather_time, over the
    engine's measured NCCL rate, network.engine_ep_links), with n = ep ranks.  Against an all-to-all of the k
    routed copies (2·k·h·a·(n−1)/n) it moves n/k times the bytes at a of 2: 12x for Llama 4 Maverick (k = 1) at
    ep 8, about the same for top-8 models at ep 8."""
    n = x["ep"]
    fp4 = mask(x["precision"] == codes.PRECISION_FP4, n)
    block = mask((x["moe_quant"] == codes.MOE_QUANT_FP8_BLOCK) & (x["precision"] == codes.PRECISION_FP8), n)
    a = act + fp4 / 16.0
    a = a + block * (2.0 - a)
    per_token = x["hidden"] * (a + 2.0) + 8.0 * x["top_k"]
    links = engine_ep_links(n, x)
    return (n - 1.0) * per_token / links.ring_bw, 2.0 * links.latency


def expert_slots_per_rank(experts: Array, ep: Array) -> Array:
    """Routed-expert slots on each of ``ep`` GPUs: ⌈E / ep⌉.  When ep does not divide E the engine fills the
    remainder with replicas of the busiest experts (redundant experts: DeepSeek-V3 technical report, arXiv
    2412.19437 §3.4, 32 redundant experts in prefill; SGLang's EPLB, lmsys.org 2025-05-05, "32 redundant experts",
    288 slots for 256 experts on EP72), which balances the tokens over the GPUs: each GPU computes E·k/ep of the
    routed work, as without them, and holds (and streams) ⌈E / ep⌉ experts' weights.  ASSUMPTION where a row does
    not say: the fewest redundant experts that make the slots divide, ⌈E / ep⌉·ep − E."""
    return np.ceil(experts / np.maximum(ep, 1.0))


def _fixed_point(t_of: Any, lam: Array, cap: Array, affine: bool = False) -> Array:
    """X with X = min(λ·t(X), cap): the requests one stage iteration finishes at arrival rate λ (Little's law
    over iterations).  t is affine in X wherever the roofline terms are (a + b·X: every term is linear in the
    tokens), so X = λa / (1 − λb) exactly; FIXED_POINT_ITERATIONS plain steps from there absorb what is not
    affine (the experts a mixture-of-experts batch visits).  Vectorized, a fixed number of steps."""
    a = t_of(0.0 * lam)
    b = t_of(0.0 * lam + 1.0) - a
    X = np.where(lam * b < 1.0, lam * a / np.maximum(1.0 - lam * b, 1e-12), cap)
    X = np.minimum(np.maximum(X, 0.0), cap)
    if affine:  # no mixture-of-experts row: t is exactly affine, the closed form is the fixed point
        return X
    for _ in range(FIXED_POINT_ITERATIONS):
        X = np.minimum(lam * t_of(X), cap)
    return X


def closed_loop_throughput(t_of: Any, clients: Array, think_s: Array, passes: Array, cap: Array,
                           affine: bool = False) -> Array:
    """X, the requests one stage iteration finishes, of N clients (per replica) that each think Z seconds between
    a response and their next request.

    The clients and the engine form a closed network: a delay station (Z) and the engine, a load-dependent
    station whose time in system at X requests per iteration is R = passes · t(X) (``passes`` = pp · the
    iterations a request stays in the batch; t from the iteration model).  Little's law on the whole network
    (the response-time law of closed networks, Lazowska et al. 1984, *Quantitative System Performance* §3.3.3,
    the identity exact mean value analysis iterates, Reiser & Lavenberg 1980) gives the throughput
    X / t = N / (R + Z); evaluated at the mean population instead of MVA's recursion over n = 1 … N (the
    approximation of Schweitzer 1979 and Bard 1979: no recursion, fluctuations of the number in the engine
    ignored), it is the fixed point X = N · t(X) / (Z + passes · t(X)).  t is affine (a + b·X) where the
    roofline terms are, so X is the positive root of passes·b·X² + (Z + passes·a − N·b)·X − N·a = 0; a mixture
    of experts refines it with FIXED_POINT_ITERATIONS plain steps of the map, a contraction (its slope is
    N·Z·t'/(Z + passes·t)², far below 1).  Above ``cap`` (the maximum-load X) the engine saturates: the
    asymptotic bound X / t ≤ 1 / D_max of the same chapter.  Z = 0 gives N / passes, the loop without think
    time.  Vectorized, a fixed number of steps."""
    a = t_of(0.0 * clients)
    b = t_of(0.0 * clients + 1.0) - a
    quad = passes * b
    lin = think_s + passes * a - clients * b
    root = np.sqrt(lin * lin + 4.0 * quad * clients * a)
    # the positive root without cancellation: 2Na / (lin + root) when lin >= 0, (root − lin) / 2quad otherwise
    X = np.where(lin >= 0.0, 2.0 * clients * a / np.maximum(lin + root, 1e-30),
                 (root - lin) / np.maximum(2.0 * quad, 1e-30))
    X = np.minimum(X, cap)
    if affine:
        return X
    for _ in range(FIXED_POINT_ITERATIONS):
        t = t_of(X)
        X = np.minimum(clients * t / (think_s + passes * t), cap)
    return X


def poisson_admission_wait(utilization: Array, servers: Array, capacity_rps: Array) -> tuple[Array, Array]:
    """(P(W > 0), E[W | W > 0]) of the wait W before admission of Poisson arrivals at an engine that serves at
    most ``capacity_rps`` requests/s with ``servers`` requests running at that rate (a G/G/c queue, c = servers,
    c·μ = capacity, ρ = ``utilization`` = λ / capacity).

    * Probability of waiting: Sakasegawa's approximation (Sakasegawa 1977, Ann. Inst. Statist. Math. 29:67-75;
      Hopp & Spearman, *Factory Physics*, eq. 8.10) of the M/M/c mean queue, L_q ≈ ρ^√(2(c+1)) / (1 − ρ),
      written as Erlang C: P(W > 0) ≈ ρ^(√(2(c+1)) − 1).  Exact for c = 1 (P = ρ).
    * The wait of those who wait: exponential (Whitt 1993, "Approximations for the GI/G/m queue", Prod. Oper.
      Manag. 2(2):114-161, §3; exact for M/M/c), with the Allen-Cunneen mean
      E[W | W > 0] = (c_a² + c_s²) / 2 / (c·μ·(1 − ρ)) (ARRIVAL_SCV, SERVICE_SCV).  For c = 1 and fixed lengths
      the mean wait P·E[W | W > 0] = ρ / (2μ(1 − ρ)) is Pollaczek-Khinchine's M/D/1 (exact).

    So P(W > t) = P(W > 0) · exp(−t / E[W | W > 0]) (:func:`exponential_tail_quantile`)."""
    rho = np.clip(utilization, 0.0, 1.0 - 1e-9)
    p_wait = rho ** (np.sqrt(2.0 * (np.maximum(servers, 1.0) + 1.0)) - 1.0)
    mean_waiting = 0.5 * (ARRIVAL_SCV + SERVICE_SCV) / (capacity_rps * (1.0 - rho))
    return p_wait, mean_waiting


def exponential_tail_quantile(p_positive: Array, mean_positive: Array, q: float) -> Array:
    """The q-quantile of W with P(W > t) = p_positive · exp(−t / mean_positive): 0 while q ≤ 1 − p_positive,
    else mean_positive · ln(p_positive / (1 − q))."""
    return mean_positive * np.log(np.maximum(p_positive / (1.0 - q), 1.0))


def admission_boundary_quantile(span: Array, utilization: Array, q: float) -> Array:
    """The q-quantile of the wait for the next iteration boundary: a request arriving while the engine is busy
    (probability ``utilization``, PASTA for Poisson arrivals) waits a uniform part of ``span``, otherwise nothing.
    With busy probability u: P(A ≤ a) = 1 − u + u·a/span, so a_q = span · max(0, q − (1 − u)) / u.  The serving
    kernel passes twice the mean residual of :func:`iteration_residual` (a uniform wait with that mean: equal
    iterations give span = t_stage; the length-biased mixture of short and long iterations is not resolved)."""
    u = np.maximum(utilization, 1e-12)
    return span * np.maximum(q - (1.0 - u), 0.0) / u


def burst_waves(n: Array, concurrency: Array) -> tuple[Array, Array, Array]:
    """(waves k, requests in the last wave r, mean admission wait in units of a wave) of n requests sent at once
    to an engine that runs C = ``concurrency`` of them.  Identical requests admitted together finish together,
    so the engine runs them in waves: k = ⌈n / C⌉, the first k − 1 of C, the last of r = n − (k − 1)·C; wave j
    (from 0) starts after j waves, so the mean wait is Σ_j size_j · j / n = (C·(k − 1)(k − 2)/2 + r·(k − 1)) / n
    waves.  n ≤ C: one wave, no wait."""
    k = np.maximum(_whole(n / concurrency), 1.0)
    r = n - (k - 1.0) * concurrency
    return k, r, (concurrency * (k - 1.0) * (k - 2.0) / 2.0 + r * (k - 1.0)) / n


def _whole(ratio: Array) -> Array:
    """⌈ratio⌉, a ratio of float32 sizes within WHOLE_SLACK of an integer counted as that integer."""
    return np.ceil(ratio * (1.0 - WHOLE_SLACK))


def _burst_waves_served(c: dict[str, Array], n: Array, C: Array, X_max: Array, passes: Array, budget: Array,
                        t_full: Array, tpot_full: Array, p: Array, steps: Array, decode_tokens: Array
                        ) -> dict[str, Array]:
    """A burst of n requests per replica at t = 0 (:func:`burst_waves`), C = the engine's concurrency at maximum
    load.  A full wave lasts T_w = passes · t_stage(C), a request's time in the engine at that steady state
    (ASSUMPTION: the wave's work is the steady state's; its fill and drain transients are not modelled
    separately); the last wave of r requests runs at X_r = r / passes, T_r = passes · t_stage(X_r).  Makespan =
    (k − 1)·T_w + T_r; throughput = n / makespan requests/s (n · output_len tokens).

    A wave's first tokens: its w prompts (w·input_len tokens) arrive together and are prefilled in passes of
    min(token budget, w·input_len/pp) tokens (each micro-batch's share when unlimited), M = ⌈w·input_len / that⌉
    passes of t_fill each (no decode tokens yet), pipelined over pp stages: the prompt finished in pass j has its
    first token at (j + pp − 1)·t_fill, so the wave's mean is ((M + 1)/2 + pp − 1)·t_fill and its q-quantile
    (⌈q·M⌉ + pp − 1)·t_fill.  Mean TTFT = mean wait (waves ahead) + the waves' mean fill; the q-quantile request
    is the ⌈q·n⌉-th admitted: its wave j and its place in that wave give its TTFT.  TPOT: the full waves' and
    the last wave's, each request's mean (the quantiles pick between the two)."""
    k, r, waves_waited = burst_waves(n, C)
    T_w = passes * t_full
    X_r = np.minimum(r / passes, X_max)
    t_r, _, _ = _iteration(c, X_r, X_dec=np.maximum(X_r, 1.0 / np.maximum(steps, 1.0)))
    T_r = passes * t_r
    makespan = (k - 1.0) * T_w + T_r
    s_in = c["input_len"]
    fills = []
    for w in (C, r):
        per_pass = np.minimum(budget, w * s_in / p)
        fills.append((np.maximum(_whole(w * s_in / per_pass), 1.0), _iteration(c, per_pass / s_in, X_dec=0.0 * w)[0]))
    (m_full, fill_full), (m_last, fill_last) = fills
    full = n - r
    tpot_last = p * t_r * steps / decode_tokens
    wait = T_w * waves_waited
    out = {"requests_per_replica_s": n / makespan, "wait": wait, "running": (full * T_w + r * T_r) / makespan,
           "ttft": wait + (full * ((m_full + 1.0) / 2.0 + p - 1.0) * fill_full
                           + r * ((m_last + 1.0) / 2.0 + p - 1.0) * fill_last) / n,
           "tpot": (full * tpot_full + r * tpot_last) / n}
    low, high = np.minimum(tpot_last, tpot_full), np.maximum(tpot_last, tpot_full)
    n_low = np.where(tpot_last <= tpot_full, r, full)
    for q, t_name, p_name in zip(PERCENTILES, TTFT_PERCENTILES, TPOT_PERCENTILES, strict=True):
        rank = np.maximum(_whole(q / 100.0 * n), 1.0)  # the quantile request, 1 = the first admitted
        wave = np.minimum(np.floor((rank - 1.0) / C * (1.0 + WHOLE_SLACK)), k - 1.0)
        last = wave >= k - 1.0
        place = (rank - wave * C) / np.where(last, r, C)  # in (0, 1] of its wave
        m, fill = np.where(last, m_last, m_full), np.where(last, fill_last, fill_full)
        out[t_name] = wave * T_w + (np.maximum(_whole(place * m), 1.0) + p - 1.0) * fill
        out[p_name] = np.where(rank <= n_low, low, high)
    return out


def prompt_time(c: dict[str, Array]) -> Array:
    """Seconds one request's whole prompt adds to a stage iteration (the slope of :func:`_iteration` in its
    prompt count X: the GEMMs, element-wise kernels, TP and pipeline bytes of input_len tokens, its causal
    attention, its logits row and the host's time for it; the experts it visits counted as at the mean
    iteration)."""
    per_token = c["gemm_token"] + c["elementwise"] + c["tp_token"] + c["ep_token"]
    return (c["layers_per_stage"] * (per_token * c["input_len"] + c["prefill_attention"]) + c["logits_row"]
            + c["p2p_token"] * c["input_len"] + (1.0 - c["host_overlap"]) * c["request_overhead"])


def chunks_variance(chunks_mean: Array) -> Array:
    """Var K of the prompt chunks K one iteration holds, mean ``chunks_mean`` = X·n_pre (prompts per iteration ×
    chunks per prompt): K is Poisson, Var K = X·n_pre.  Under Poisson arrivals the occupancy of an M/G/∞ station
    (prompts in prefill) is Poisson with mean λ·E[S].  A closed loop and maximum load admit a request at each
    completion, and the completions of many requests whose iterations jitter superpose into a near-Poisson stream
    (the Palm-Khintchine theorem), so they are taken alike (a burst has its own waves, :func:`burst_waves`)."""
    return chunks_mean


def iteration_residual(t_stage: Array, chunk_s: Array, var_chunks: Array) -> Array:
    """Mean time from an arrival to the end of the iteration in progress.  Iterations differ in length: one that
    holds K prompt chunks lasts T = d + K·c (c = ``chunk_s``), so an arrival falls more often into the long ones
    (length-biased sampling) and waits on average E[T²] / (2·E[T]) (renewal theory's mean residual life,
    Kleinrock 1975, *Queueing Systems* vol. 1 §5.2), not E[T] / 2.  With E[T] = ``t_stage`` and
    Var T = c²·Var K: E[T²] / (2·E[T]) = t / 2 + c²·Var K / (2·t)."""
    return 0.5 * t_stage + 0.5 * chunk_s * chunk_s * var_chunks / np.maximum(t_stage, 1e-30)


def prompts_in_prefill_iteration(rate: Array, window_s: Array, n_pre: Array, fit: Array) -> Array:
    """Prompts (whole-prompt units) of the iteration that carries a request's prompt.  In-flight batching admits
    at an iteration boundary every request that arrived during the iteration before, as far as the token budget
    goes; at random arrivals (:func:`chunks_variance`) of ``rate`` requests/s the iteration a request arrives in
    lasts E[T²]/E[T] on average (length-biased, ``window_s`` = twice :func:`iteration_residual`), so
    rate · E[T²]/E[T] others arrive with it and share its prefill iteration: 1 + that many prompts, at most
    ``fit`` = budget / input_len of them.  A prompt longer than the budget (n_pre > 1 chunks) fills its
    iterations alone: 1/n_pre (ASSUMPTION: prompts that do not fit, and those ahead of a chunked prompt, are not
    charged as a queue)."""
    shared = np.clip(1.0 + rate * window_s, 1.0, np.maximum(fit, 1.0))
    return np.where(n_pre > 1.0, 1.0 / n_pre, shared)


def tpot_spread(chunk_s: Array, var_chunks: Array, p: Array, steps: Array, decode_tokens: Array) -> Array:
    """Standard deviation of a request's TPOT over requests: its decode steps share iterations with prompt chunks
    of other requests (chunked prefill), each chunk adding ``chunk_s`` to the stage iteration, K of them per
    iteration with variance ``var_chunks`` (:func:`chunks_variance`).  A step crosses pp stage iterations of the
    same micro-batch (the same tokens: fully correlated), and the request's TPOT averages its ``steps`` steps over
    ``decode_tokens`` = output_len − 1 tokens; ASSUMPTION: successive iterations independent (the correlation of
    one prompt's n_pre consecutive chunks is ignored), so sd(TPOT) = pp · chunk_s · √(Var K · steps) /
    decode_tokens."""
    return p * chunk_s * np.sqrt(var_chunks * steps) / np.maximum(decode_tokens, 1e-9)


#: Standard normal quantiles of :data:`PERCENTILES` (TPOT is a mean over many steps: central limit theorem).
Z_SCORES: tuple[float, ...] = tuple(NormalDist().inv_cdf(q / 100.0) for q in PERCENTILES)


def kv_transfer(x: dict[str, Array]) -> tuple[Array, Array, Array]:
    """(bytes, link bytes/s, seconds) to move one request's KV cache from a prefill replica to a decode
    replica: input_len · L · 2 · kv_heads · head_dim · kv bytes (every layer, every KV head), over the scale-up
    link when both pools sit in one scale-up domain (prefill + decode GPUs <= its size), else over the NICs;
    min(prefill tp, decode tp·pp) GPU pairs send their shards at once.  t = bytes / (pairs · link) + latency."""
    L = x["layers"]
    kv_b = kv_bytes_per_value(x["kv_precision"], x["precision"])
    rec = layer_record(x)
    nbytes = held_tokens(x["input_len"], rec) * L * rec["kv_cache"] * kv_b
    same, per_gpu = kv_link(x)
    pairs = np.minimum(prefill_tp_of(x), x["tp"] * x["pp"])
    bw = pairs * per_gpu
    latency = pick(same, x["scaleup_latency_s"], x["scaleout_latency_s"])
    return nbytes, bw, nbytes / bw + latency


def kv_link(x: dict[str, Array]) -> tuple[Array, Array]:
    """(both pools in one scale-up domain: 1/0, bytes/s of one GPU's link) that carries the KV cache from the
    prefill pool to the decode pool: the scale-up ring when prefill + decode GPUs fit in the domain, else the
    scale-out NIC (0 on a system without a scale-out network: such a row gets the reason ``crosses nodes
    without scale-out network``)."""
    decode_gpus = x["tp"] * x["pp"] * x["dp"]
    same = mask(np.nan_to_num(x["prefill_gpus"]) + decode_gpus <= x["scaleup_gpus"], x["hidden"])
    return same, pick(same, x["scaleup_ring_bw"], x["scaleout_bw"])


def drafter_size(x: dict[str, Array], rec: dict[str, Array]) -> tuple[Array, Array, Array]:
    """(parameters, KV-caching layers, routed-expert parameters among them) of the speculative drafter, held on
    the last pipeline stage beside the output head it shares with the model (0 without ``spec_tokens``): the
    model's MTP modules (:func:`dse.cost.architecture.mtp_params`, one block and a 2h → h projection each,
    DeepSeek-V3 §2.2; a MoE model's block has its routed experts, which the engine splits over the expert-parallel
    ranks like the main layers'), or an EAGLE head, one dense decoder layer of the model's width and its fusion
    projection (EAGLE, Li et al. 2024, §3; ASSUMPTION: the 2h → h projection of EAGLE-1 and the model's first dense
    FFN width; EAGLE-3 fuses three layers' features, 3h → h).  Each caches K and V for its attention."""
    spec = np.nan_to_num(x["spec_tokens"]) > 0
    if not spec.any():  # no row drafts: all 0 (a whole-batch switch, exact)
        zero = 0.0 * x["hidden"]
        return zero, zero, zero
    on = mask(spec, x["hidden"])
    eagle = mask(x["spec_method"] == codes.SPEC_METHOD_EAGLE, x["hidden"])
    mtp = mtp_params(rec, x["hidden"], x["experts"], x["mtp"])
    routed = x["mtp"] * mask(x["experts"] > 1, x["hidden"]) * x["experts"] * rec["expert_params"]
    head = mtp_params(rec, x["hidden"], 0.0 * x["experts"] + 1.0, 1.0 + 0.0 * x["mtp"])
    return on * pick(eagle, head, mtp), on * pick(eagle, 1.0, x["mtp"]), on * (1.0 - eagle) * routed


def _kv_capacity(x: dict[str, Array], budget: Array, rec: dict[str, Array] | None = None,
                 wb: Array | None = None) -> dict[str, Array]:
    """Per GPU of a replica: weights, activations of one iteration, the KV budget and how many requests' KV
    (at the mean context, paged) fit; ``wb``: the weight bytes of :func:`_rates` when the caller has them."""
    L, h, V = x["layers"], x["hidden"], x["vocab"]
    t, p = x["tp"], x["pp"]
    s_in, s_out = x["input_len"], x["output_len"]
    E = x["experts"]
    moe = mask(E > 1, E)
    wb = _rates(x)[3] if wb is None else wb
    rec = layer_record(x) if rec is None else rec
    kv_b = kv_bytes_per_value(x["kv_precision"], x["precision"])
    frac = np.where(np.isnan(x["kv_memory_fraction"]), DEFAULT_KV_MEMORY_FRACTION, x["kv_memory_fraction"])
    block = np.where(np.isnan(x["kv_block_tokens"]), DEFAULT_KV_BLOCK_TOKENS, x["kv_block_tokens"])
    # ep > 1: ⌈E/ep⌉ expert slots per GPU (expert_slots_per_rank), i.e. E split E/⌈E/ep⌉ ways
    expert_split = np.where(x["ep"] > 1, np.maximum(E, 1.0) / np.maximum(expert_slots_per_rank(E, x["ep"]), 1.0), t)
    p_layer = infer_layer_params(rec, h, E, t, expert_split=expert_split)
    untied = mask(x["tied_embeddings"] <= 0, p)
    single = mask(p <= 1, p)
    draft_params, draft_layers, draft_routed = drafter_size(x, rec)
    routed = routed_layer_params(rec, E, expert_split)
    weights = (stage_layers(L, p) * (p_layer * wb + routed * (routed_weight_bytes(x, wb) - wb))
               + V * h / t * 2.0 * (1.0 + single * untied) + (draft_params - draft_routed) / t * wb
               + draft_routed / expert_split * routed_weight_bytes(x, wb))
    n_fc1 = (rec["n_mlp"] - 1.0) * (rec["ffn_dense"] + rec["moe_frac"] * (1.0 + moe * (x["top_k"] - 1.0))
                                    * rec["ffn_moe"]) / t
    act_tokens = np.minimum(budget, s_in + s_out)
    activations = act_tokens * (4.0 * h + 2.0 * n_fc1) * 2.0 + act_tokens * V / t * 4.0 / np.maximum(s_in, 1.0)
    used = weights + activations + K.RUNTIME_RESERVED_BYTES
    # TensorRT-LLM and TGI 2 give the KV cache a fraction of the memory the weights and activations leave free
    # (kv_memory_basis = free); vLLM's gpu_memory_utilization, SGLang's mem_fraction_static and TGI 3 bound
    # weights + activations + KV by a fraction of the whole HBM (kv_memory_basis = total): dse/stacks.csv cites
    # each engine's code
    whole = mask(x["kv_memory_basis"] > 0, s_in)
    kv_budget = pick(whole, frac * x["hbm_bytes"] - used, frac * (x["hbm_bytes"] - used))
    # the KV a request holds: on demand, its mean context; an engine that reserves to completion at admission
    # (TensorRT-LLM's GUARANTEED_NO_EVICT: KV blocks for the prompt and every output token, never paused) its
    # whole length (kv_reservation = 1)
    held = s_in + s_out * pick(mask(x["kv_reservation"] > 0, s_in), 1.0, 0.5)
    pages = np.ceil(held / block) * block
    kv_token = (stage_layers(L, p) + draft_layers) * cached_values(x, rec) * kv_b * held_share(x, rec, pages)
    capacity = np.floor(np.maximum(kv_budget, 0.0) / (kv_token * pages))
    return {"weights": weights, "activations": activations, "kv_budget": kv_budget, "pages": pages,
            "kv_token": kv_token, "capacity": capacity}


def held_share(x: dict[str, Array], rec: dict[str, Array], pages: Array) -> Array:
    """The share of a request's ``pages`` tokens whose K and V the engine's KV cache holds, averaged over the layers:
    a windowed (or chunked) layer holds at most its window (``window_kv`` window: a rolling buffer, vLLM's hybrid KV
    cache manager; :func:`dse.cost.architecture.held_tokens`), or every token as a full-attention layer does
    (``window_kv`` full: TensorRT-LLM's KV cache manager writes sliding-window blocks linearly and gives each sequence
    "as many blocks as full attention, where full attention has windowSize = maxSequenceLength",
    cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp BlockManager::BlockManager, maxTokenNum = max(windowSize,
    maxSequenceLength); its per-window memory split "is not used for calculateMaxNumBlocks because we want to first
    achieve identical performance as assuming all layers as full attention").  The attention still reads only the
    window either way."""
    return pick(mask(x["window_kv"] > 0, pages), 1.0, held_tokens(pages, rec) / pages)


def _serve_disaggregated(x: dict[str, Array]) -> dict[str, Array]:
    """Prefill and decode on separate pools (DistServe, Splitwise, NVIDIA Dynamo).

    The decode pool is the row's layout (dp replicas of tp·pp GPUs); the prefill pool is prefill_gpus GPUs in
    replicas of prefill_tp (pp 1).  Each pool runs its own iterations: prefill passes of the token budget (or one
    prompt), decode passes of the running requests' tokens only.  The deployment serves
    R = min(prefill capacity, KV-link capacity, decode capacity) requests/s at maximum load (or the offered rate
    below it); TTFT = admission wait + the prefill passes + the KV transfer (:func:`kv_transfer`); TPOT = a decode
    pass through the pipeline.  GPUs = prefill_gpus + tp·pp·dp.

    Closed loops with think time Z: the asymptotic bound of closed networks (Lazowska et al. 1984, §5.2),
    R = min(capacity, N / (D + Z)), D = a request's time in the deployment at light load, offered as an open
    rate.  Bursts: the prefill pool admits requests one after another, so the i-th of n waits
    max(i − C, 0) / R (C = the requests the deployment runs, R its maximum rate): mean (n − C)(n − C + 1) / (2nR),
    makespan (n − C) / R + the time in system.  Percentiles as in the aggregated model, the Poisson wait at the
    prefill pool (its replicas' prompts in flight as the servers); TPOT percentiles = the mean (decode passes carry
    no prompt chunks)."""
    _, rate, act, wb = _rates(x)
    s_in, s_out = x["input_len"], x["output_len"]
    p, dp = x["pp"], x["dp"]
    budget = np.where(np.isnan(x["max_num_tokens"]), np.inf, x["max_num_tokens"])
    engine_cap = np.where(np.isnan(x["batch"]), np.inf, x["batch"])
    clients = np.where(np.isnan(x["concurrency"]), np.inf, x["concurrency"])  # the deployment's (closed loop)
    batch_cap = np.minimum(engine_cap, clients / dp)
    zero = 0.0 * s_in
    # ---- decode pool ----
    rec = layer_record(x)  # the mean layer, tensor-parallel-independent: one record for both pools
    dec = _kv_capacity(x, np.minimum(budget, batch_cap), rec, wb)
    c_max = np.maximum(np.minimum(batch_cap, dec["capacity"]), 1.0)
    dec_terms = _iteration_terms(x, rate, act, wb, rec)
    life = np.maximum(dec_terms["decode_len"], 1.0)  # decode steps (fewer with speculative decoding)
    xd_max = c_max / p / life
    cap_d = dp * decode_pool_rate(dec_terms, c_max, p)
    decode_pool = cap_d * s_out / (x["tp"] * p * dp)  # per decode GPU
    # ---- prefill pool ----
    tp_p = prefill_tp_of(x)
    n_p = x["prefill_gpus"] / tp_p
    xp_in = {**x, "tp": tp_p, "pp": np.ones_like(tp_p)}
    _, rate_p, act_p, wb_p = _rates(xp_in)
    chunk = np.where(np.isinf(budget), s_in, budget)
    n_pre = np.maximum(np.ceil(s_in / chunk), 1.0)
    xp_max = chunk / s_in
    pre_terms = _iteration_terms(xp_in, rate_p, act_p, wb_p, rec)
    t_p_max, _, _ = _iteration(pre_terms, xp_max, X_dec=zero)
    cap_p = n_p * xp_max / t_p_max
    pre_mem = _kv_capacity(xp_in, chunk, rec, wb_p)
    # ---- the link between them ----
    nbytes, bw, t_kv = kv_transfer(x)
    cap_link = n_p * bw / nbytes
    capacity = np.minimum(np.minimum(cap_p, cap_link), cap_d)
    lam = x["request_rate"]
    closed = ~np.isinf(clients)
    burst = closed & (x["arrival"] == codes.ARRIVAL_BURST)
    think = np.where(burst, 0.0, np.nan_to_num(x["think_time_s"]))
    thinking = closed & (think > 0)
    if thinking.any():  # the asymptotic bound N / (D + Z) at light-load D, offered as a rate below capacity
        t_d_light, _, _ = _iteration(dec_terms, zero, X_dec=1.0 / life)
        t_p_light, _, _ = _iteration(pre_terms, 1.0 / n_pre, X_dec=zero)
        light = n_pre * t_p_light + t_kv + p * t_d_light * dec_terms["decode_len"]
        bound = clients / (light + think)
        lam = np.where(thinking & (bound < capacity), bound, lam)
    offline = np.isnan(lam)
    overloaded = ~offline & ~thinking & (lam >= capacity)
    R = np.where(offline | overloaded, capacity, lam)
    dense = not bool(((x["experts"] > 1) | curved_host(x)).any())  # t affine in X: no experts, no max(gpu, host)
    xd = _fixed_point(lambda v: _iteration(dec_terms, zero, X_dec=v)[0], R / dp, xd_max, affine=dense)
    xp = _fixed_point(lambda v: _iteration(pre_terms, v, X_dec=zero)[0], R / n_p, xp_max,
                      affine=dense)
    split: dict[str, Array] = {}
    t_d, comp, traffic = _iteration(dec_terms, zero, split, X_dec=np.maximum(xd, 1.0 / life))
    t_p, _, _ = _iteration(pre_terms, xp, X_dec=zero)
    t_pass, _, _ = _iteration(pre_terms, np.maximum(xp, 1.0 / n_pre), X_dec=zero)
    utilization = np.minimum(R / cap_p, 1.0)
    running = dp * xd * p * life + n_p * xp * n_pre
    idle_clients = thinking & ~offline
    wait = np.where(np.isinf(clients) | idle_clients, 0.0,  # closed loop: see _serve
                    np.maximum(clients - think * R - running, 0.0) / R)
    poisson = ~(offline | overloaded) & ~thinking
    slots = n_p * xp_max * n_pre  # prompts in the prefill pool at its capacity
    p_wait, mean_waiting = poisson_admission_wait(R / capacity, slots, capacity)
    wait = np.where(poisson, p_wait * mean_waiting, wait)
    first = n_pre * t_pass + t_kv
    ttft = 0.5 * utilization * t_p + n_pre * t_pass + t_kv + wait
    tpot = p * t_d * dec_terms["decode_len"] / np.maximum(s_out - 1.0, 1e-9)
    requests_per_s = R
    pct: dict[str, Array] = {}
    for q, t_name, p_name in zip(PERCENTILES, TTFT_PERCENTILES, TPOT_PERCENTILES, strict=True):
        queue = np.where(poisson, exponential_tail_quantile(p_wait, mean_waiting, q / 100.0), wait)
        pct[t_name] = first + admission_boundary_quantile(t_p, utilization, q / 100.0) + queue
        pct[p_name] = tpot
    if burst.any():  # continuous admission at rate R after the first C
        ahead = np.maximum(clients - running, 0.0)
        in_system = first + (s_out - 1.0) * tpot
        burst_wait = ahead * (ahead + 1.0) / (2.0 * clients * R)
        wait = np.where(burst, burst_wait, wait)
        ttft = np.where(burst, first + burst_wait, ttft)
        requests_per_s = np.where(burst, clients / (ahead / R + in_system), R)
        for q, t_name in zip(PERCENTILES, TTFT_PERCENTILES, strict=True):
            pct[t_name] = np.where(burst, first + np.maximum(q / 100.0 * clients - running, 0.0) / R, pct[t_name])
    out_tps = requests_per_s * s_out
    gpus = x["prefill_gpus"] + x["tp"] * p * dp
    kv_used = xd * p * life * dec["pages"] * dec["kv_token"]
    decode_bound = np.where(batch_cap <= dec["capacity"], np.where(clients / dp < engine_cap, 7, 0), 1)
    limit = np.where(cap_p <= np.minimum(cap_link, cap_d), 5, np.where(cap_link <= cap_d, 6, decode_bound))
    limit = np.where(offline, limit, np.where(idle_clients, 7, np.where(comp >= traffic, 3, 4)))
    return {
        "output_tokens_per_s": out_tps, "output_tokens_per_s_per_gpu": out_tps / gpus,
        "requests_per_s": requests_per_s, "ttft_s": ttft, "tpot_s": tpot, **pct, "tokens_per_s_per_user": 1.0 / tpot,
        "running_requests": running, "queue_wait_s": wait,
        "kv_cache_utilization": kv_used / np.maximum(dec["kv_budget"], 1.0),
        "iteration_ms": t_d * 1e3, "iteration_tokens": xd * dec_terms["decode_len"] * (1.0 + dec_terms["spec_n"]),
        "kv_capacity_requests": dec["capacity"], "weights_bytes": dec["weights"], "kv_cache_bytes": kv_used,
        "mem_total_bytes": dec["weights"] + dec["activations"] + kv_used + K.RUNTIME_RESERVED_BYTES,
        "energy_per_output_token_j": gpus * x["tdp_w"] / np.maximum(out_tps, 1e-30),
        "kv_transfer_s": t_kv, "decode_tokens_per_s_per_gpu": decode_pool, **split,
        "fits": (dec["capacity"] >= 1.0) & (pre_mem["capacity"] >= 1.0), "overloaded": overloaded, "limit": limit,
    }


def _serve(x: dict[str, Array]) -> dict[str, Array]:
    p, dp = x["pp"], x["dp"]
    s_in, s_out = x["input_len"], x["output_len"]
    E = x["experts"]
    _, rate, act, wb = _rates(x)
    budget = np.where(np.isnan(x["max_num_tokens"]), np.inf, x["max_num_tokens"])
    engine_cap = np.where(np.isnan(x["batch"]), np.inf, x["batch"])
    clients = np.where(np.isnan(x["concurrency"]), np.inf, x["concurrency"] / dp)  # per replica (closed loop)
    batch_cap = np.minimum(engine_cap, clients)

    # ---- memory: weights, activations of one iteration's tokens, KV capacity ----------------------------
    rec = layer_record(x)  # the mean layer (dse.cost.architecture), shared by the memory and the iteration
    mem = _kv_capacity(x, budget, rec, wb)
    weights, activations, kv_budget = mem["weights"], mem["activations"], mem["kv_budget"]
    pages, kv_token, kv_capacity = mem["pages"], mem["kv_token"], mem["capacity"]
    fits = kv_capacity >= 1.0

    # ---- steady state at maximum concurrency -------------------------------------------------------------
    c_max = np.maximum(np.minimum(batch_cap, kv_capacity), 1.0)
    n_pre = np.maximum(np.ceil(s_in / budget), 1.0)
    terms = _iteration_terms(x, rate, act, wb, rec)
    steps = terms["decode_len"]  # decode steps a request needs (fewer with speculative decoding)
    life = steps + n_pre  # iterations a request stays in the batch
    by_concurrency = c_max / p / life
    step_tokens = steps * (1.0 + terms["spec_n"])
    by_budget = budget / (s_in + step_tokens)
    X_max = np.minimum(by_concurrency, by_budget)
    t_max, _, _ = _iteration(terms, X_max)
    req_capacity = dp * X_max / t_max  # requests/s the deployment serves at most
    decode_pool = decode_pool_rate(terms, c_max, p) * s_out / (x["tp"] * p)  # per GPU, prompts elsewhere

    # ---- under a given request rate: Little's law, fixed point --------------------------------------------
    lam = x["request_rate"]
    offline = np.isnan(lam)
    lam_r = np.where(offline, 0.0, lam) / dp  # per replica
    overloaded = ~offline & (lam_r * dp >= req_capacity)
    closed = ~np.isinf(clients)
    burst = closed & (x["arrival"] == codes.ARRIVAL_BURST)
    think = np.where(burst, 0.0, np.nan_to_num(x["think_time_s"]))  # 0: every client always in the system
    thinking = closed & (think > 0)
    passes = p * life  # stage iterations a request spends in the engine
    X = X_max.copy()
    # rows under a rate and closed loops with think time: solve only those; dense rows in closed form,
    # mixture-of-experts rows refined
    curved = (E > 1) | curved_host(x)  # t not affine in X: the experts visited, max(gpu, host)
    for is_curved in (False, True):
        kind = curved == is_curved
        for rows, solve in ((np.flatnonzero(~(offline | overloaded) & kind), "rate"),
                            (np.flatnonzero(thinking & kind), "think")):
            if not rows.size:
                continue
            sub = {k: v[rows] if isinstance(v, np.ndarray) and v.ndim else v for k, v in terms.items()}
            sub["any_moe"] = bool((E[rows] > 1).any())
            def t_of(v: Array, sub: dict[str, Array] = sub) -> Array:
                return _iteration(sub, v)[0]

            if solve == "rate":
                X[rows] = _fixed_point(t_of, lam_r[rows], X_max[rows], affine=not is_curved)
            else:
                X[rows] = closed_loop_throughput(t_of, clients[rows], think[rows], passes[rows], X_max[rows],
                                                 affine=not is_curved)
    # a request's own tokens are in the passes that serve it: its decode token in every decode pass, its whole
    # prompt chunk in its prefill pass (at light load X < 1 the average pass holds a fraction of them)
    split: dict[str, Array] = {}
    one_decode = np.maximum(X, 1.0 / np.maximum(steps, 1.0))
    t_stage, comp, traffic = _iteration(terms, X, split, X_dec=one_decode)
    slope = prompt_time(terms)  # what one whole prompt adds to an iteration; a chunk adds slope / n_pre
    var_chunks = chunks_variance(X * n_pre)
    # a busy engine: an arrival first waits for the iteration in progress to end (length-biased), then shares its
    # prefill iteration with the prompts that arrived during the same one
    residual = iteration_residual(t_stage, slope / n_pre, var_chunks)
    mine = prompts_in_prefill_iteration(X / t_stage, 2.0 * residual, n_pre, budget / np.maximum(s_in, 1.0))
    t_prefill, _, _ = _iteration(terms, mine, X_dec=X)
    idle_clients = thinking & (X < X_max)  # think time leaves the engine below its maximum load
    utilization = np.where(offline | overloaded, 1.0, np.minimum(lam_r * dp / req_capacity, 1.0))
    utilization = np.where(idle_clients, np.minimum(X / t_stage * dp / req_capacity, 1.0), utilization)
    tpot = p * t_stage * steps / np.maximum(s_out - 1.0, 1e-9)  # a step's time over the tokens it yields
    prefill = n_pre * p * t_prefill
    poisson = ~(offline | overloaded)
    concurrency = X * p * life  # per replica
    out_tps = dp * X * s_out / t_stage
    kv_used = concurrency * pages * kv_token
    # closed loop: the clients the engine does not run and that are not thinking wait to be admitted (Little's
    # law, N = R · (time in system + Z)); under a Poisson rate, the G/G/c wait (poisson_admission_wait)
    wait = np.where(np.isinf(clients) | idle_clients, 0.0,
                    np.maximum(clients - think * X / t_stage - concurrency, 0.0) * t_stage / X)
    ttft = utilization * residual + prefill
    p_wait, mean_waiting = poisson_admission_wait(utilization, X_max * passes, req_capacity / dp)
    wait = np.where(poisson, p_wait * mean_waiting, wait)
    ttft = ttft + wait
    held = np.where(batch_cap <= kv_capacity, np.where(clients < engine_cap, 7, 0), 1)
    bound = np.where(by_concurrency <= by_budget, held, 2)
    limit = np.where(offline, np.where(idle_clients, 7, bound), np.where(comp >= traffic, 3, 4))

    # ---- percentiles: prefill + the iteration boundary + the queue; TPOT from the chunks sharing iterations
    decode_only = t_stage - X * slope  # the iteration without prompt chunks
    decode_tokens = np.maximum(s_out - 1.0, 1e-9)
    spread = tpot_spread(slope / n_pre, var_chunks, p, steps, decode_tokens)
    tpot_floor = p * decode_only * steps / decode_tokens
    pct: dict[str, Array] = {}
    for q, z, t_name, p_name in zip(PERCENTILES, Z_SCORES, TTFT_PERCENTILES, TPOT_PERCENTILES, strict=True):
        queue = np.where(poisson, exponential_tail_quantile(p_wait, mean_waiting, q / 100.0), wait)
        pct[t_name] = prefill + admission_boundary_quantile(2.0 * residual, utilization, q / 100.0) + queue
        pct[p_name] = np.maximum(tpot + z * spread, tpot_floor)
    requests_per_s = dp * X / t_stage
    running = dp * concurrency

    # ---- bursts: n requests at t = 0, in waves of the engine's concurrency ---------------------------------
    rows = np.flatnonzero(burst)
    if rows.size:
        b = _burst_waves_served({k: v[rows] if isinstance(v, np.ndarray) and v.ndim else v for k, v in terms.items()},
                                clients[rows], concurrency[rows], X_max[rows], passes[rows], budget[rows],
                                t_stage[rows], tpot[rows], p[rows], steps[rows], decode_tokens[rows])
        requests_per_s, out_tps, ttft, tpot, wait, running = (v.copy() for v in (
            requests_per_s, out_tps, ttft, tpot, wait, running))
        requests_per_s[rows] = dp[rows] * b["requests_per_replica_s"]
        out_tps[rows] = requests_per_s[rows] * s_out[rows]
        ttft[rows], tpot[rows], wait[rows] = b["ttft"], b["tpot"], b["wait"]
        running[rows] = dp[rows] * b["running"]
        for name in (*TTFT_PERCENTILES, *TPOT_PERCENTILES):
            pct[name] = pct[name].copy()
            pct[name][rows] = b[name]
    return {
        "output_tokens_per_s": out_tps, "output_tokens_per_s_per_gpu": out_tps / x["gpus"],
        "requests_per_s": requests_per_s, "ttft_s": ttft, "tpot_s": tpot, **pct, "tokens_per_s_per_user": 1.0 / tpot,
        "running_requests": running, "queue_wait_s": wait,
        "kv_cache_utilization": kv_used / np.maximum(kv_budget, 1.0),
        "iteration_ms": t_stage * 1e3, "iteration_tokens": X * (s_in + step_tokens),
        "kv_capacity_requests": kv_capacity, "weights_bytes": weights, "kv_cache_bytes": kv_used,
        "mem_total_bytes": weights + activations + kv_used + K.RUNTIME_RESERVED_BYTES,
        "energy_per_output_token_j": x["gpus"] * x["tdp_w"] / np.maximum(out_tps, 1e-30),
        "kv_transfer_s": 0.0 * tpot, "decode_tokens_per_s_per_gpu": decode_pool, **split, "fits": fits,
        "overloaded": overloaded, "limit": limit,
    }
