"""The model description read in one place: today's architectures as a few optional columns, and the per-layer
quantities every cost kernel takes from them, computed once per call (:func:`layer_record`).

Optional model columns (0 = not set: the plain dense / GQA / uniform-MoE transformer of
:mod:`dse.cost.transformer`, exactly as before these columns existed):

* ``head_dim``       d, the width of one attention head (Qwen3, Llama 4, GPT-OSS: not hidden/heads); 0 = h/a
* ``attention_kind`` gqa (code 0, also MHA when kv_heads = heads), mha (kv_heads = heads), mla
* ``kv_lora_rank``, ``q_lora_rank``, ``qk_rope_dim``, ``qk_nope_dim``, ``v_head_dim``: multi-head latent
  attention (DeepSeek-V2 §2.1, arXiv 2405.04434; DeepSeek-V3 §2.1.1, arXiv 2412.19437); q_lora_rank 0 = queries
  projected directly from h (DeepSeek-V2-Lite)
* ``moe_ffn_hidden``  the FFN width of one routed expert (fine-grained experts); 0 = ffn_hidden
* ``shared_experts``  experts every token passes through in a MoE layer, each moe_ffn_hidden wide
  (DeepSeekMoE, arXiv 2401.06066 §3.2; Llama 4)
* ``dense_layers``    leading layers with a dense FFN of ffn_hidden (DeepSeek-V3: first_k_dense_replace = 3)
* ``moe_every``       after those, one MoE layer every N (Llama 4 Maverick: interleave_moe_layer_step = 2;
  the others dense); 0 = 1
* ``sliding_window``  keys a windowed layer attends over (Mistral 7B v0.1, GPT-OSS); 0 = none
* ``attention_chunk`` keys are those of the query's own chunk of this many tokens (Llama 4's chunked local
  attention, ``attention_chunk_size`` 8192); 0 = none
* ``global_every``    with a window or chunks, one full-attention layer every N (GPT-OSS: 2, alternating;
  Llama 4: 4); 0 = every layer local
* ``mtp``             multi-token-prediction modules (DeepSeek-V3 §2.2: one transformer block, a 2h×h projection,
  the shared embedding and output head each)
* ``moe_quant``       how the checkpoint stores the routed experts (tensor, code 0; fp8_block; mxfp4): inference and
  serving only (:func:`dse.cost.inference.routed_expert_format`)

The layers are not all alike (dense first layers, interleaved MoE, windowed and full attention), and the
kernels time one *mean* layer: a term linear in the layer's work is exact, the rooflines of dense and routed
FFN GEMMs are taken apart and weighted by the share of layers that run them.  A pipeline stage holds
layers/pp of them; which stage holds the dense layers is not modelled (their FFN costs are spread evenly).

Multi-head latent attention, as trained (Megatron-core ``MLASelfAttention``): the down projections h → q_lora
and h → kv_lora + rope are the same on every tensor-parallel rank; the up projections q_lora → a·(nope + rope),
kv_lora → a·(nope + v) and the output a·v → h split by heads.  The attention core runs with query/key head
dim nope + rope and value head dim v.  Decode absorbs W_UK into the query and W_UV into the output
(DeepSeek-V2 §2.1.3): the cache holds kv_lora + rope values per token and layer, read once for all heads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse import codes
from dse.cost.select import mask

Array = Any  # numpy arrays or scalars that broadcast (the stubs cannot express broadcasting)

#: Optional model columns, in the order of the kernels' inputs (all numbers; the categorical ones as codes).
ARCHITECTURE_COLUMNS: tuple[str, ...] = (
    "head_dim", "attention_kind", "kv_lora_rank", "q_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim",
    "moe_ffn_hidden", "shared_experts", "dense_layers", "moe_every", "sliding_window", "attention_chunk",
    "global_every", "mtp", "moe_quant",
)
#: Categorical architecture columns and their vocabularies (empty = the first name, code 0).
ARCHITECTURE_CATEGORIES: dict[str, tuple[str, ...]] = {"attention_kind": codes.ATTENTION_KIND,
                                                       "moe_quant": codes.MOE_QUANT}
#: Integer architecture columns.
ARCHITECTURE_INTEGERS: tuple[str, ...] = tuple(c for c in ARCHITECTURE_COLUMNS if c not in ARCHITECTURE_CATEGORIES)


def code_column(column: str) -> str:
    """The model catalog's column holding ``column`` as a number: ``<name>_code`` for the categorical ones."""
    return f"{column}_code" if column in ARCHITECTURE_CATEGORIES or column == "mlp" else column


def mla_mask(x: dict[str, Array]) -> Array:
    """1.0 where the model uses multi-head latent attention."""
    return mask(x["attention_kind"] == codes.ATTENTION_KIND_MLA, x["attention_kind"])


def moe_layer_count(layers: Array, experts: Array, dense_layers: Array, moe_every: Array) -> Array:
    """Layers with routed experts: floor((L − dense_layers) / moe_every) when E > 1, else 0.

    Layer i (0-based) is MoE when i ≥ dense_layers and (i − dense_layers + 1) % moe_every == 0
    (DeepSeek-V3 ``first_k_dense_replace``; Llama 4 ``interleave_moe_layer_step``: layers 1, 3, 5 … at step 2)."""
    every = np.maximum(moe_every, 1.0)
    return (experts > 1) * np.floor(np.maximum(layers - dense_layers, 0.0) / every)


def full_attention_fraction(layers: Array, local: Array, global_every: Array) -> Array:
    """Share of layers that attend over the whole context: 1 without local attention (``local`` = window or
    chunk, 0 = none); with it, floor(L/N)/L for one full layer every N (GPT-OSS alternates, N = 2), 0 when
    every layer is local (N = 0)."""
    every = np.maximum(global_every, 1.0)
    windowed = (local > 0).astype(np.asarray(layers).dtype)
    return 1.0 - windowed + windowed * (global_every > 0) * np.floor(layers / every) / layers


def chunk_keys(span: Array, chunk: Array) -> Array:
    """Mean keys a causal query attends over when attention stays inside chunks of c tokens (Llama 4): n = s // c
    whole chunks of c²/2 query-key pairs and a last one of r²/2, r = s − n·c, over s queries; s/2 for s <= c."""
    c = np.where(chunk > 0, chunk, span)
    n = np.floor(span / c)
    r = span - n * c
    return (n * c * c + r * r) / (2.0 * span)


def windowed_span(span: Array, window: Array, full_fraction: Array, chunk: Array = 0.0) -> Array:
    """Keys per query averaged over the layers, before the causal halving: span on full layers,
    min(window, span) on windowed ones, twice :func:`chunk_keys` on chunked ones (the MFU numerator's 4·s·h per
    layer with s → this)."""
    if not np.any(full_fraction < 1.0):
        return span + 0.0 * full_fraction
    w = np.where(window > 0, np.minimum(window, span), np.where(chunk > 0, 2.0 * chunk_keys(span, chunk), span))
    return full_fraction * span + (1.0 - full_fraction) * w


def causal_keys(span: Array, window: Array, full_fraction: Array, causal_fraction: float,
                chunk: Array = 0.0) -> Array:
    """Mean keys a causal query attends over, averaged over the layers (what a fused kernel computes).

    Full layers: causal_fraction·span (the upper triangle skipped).  A window w < span: query i sees
    min(i, w) keys, sum over i = s·w − w²/2, so w·(1 − w/(2s)) per query (Beltagy et al. 2020, Longformer §3:
    sliding-window attention is O(s·w)).  Chunked layers: :func:`chunk_keys`."""
    full = causal_fraction * span
    if not np.any(full_fraction < 1.0):
        return full + 0.0 * full_fraction
    w = np.where(window > 0, np.minimum(window, span), span)
    windowed = np.where(window > 0, w * (1.0 - w / (2.0 * span)),
                        np.where(chunk > 0, chunk_keys(span, chunk), full))
    return full_fraction * full + (1.0 - full_fraction) * windowed


def layer_record(x: dict[str, Array]) -> dict[str, Array]:
    """Per-layer widths and parameter counts of the mean layer, tensor-parallel-independent (elements).

    ``x`` holds the model columns (:data:`ARCHITECTURE_COLUMNS` and layers, hidden, heads, kv_heads,
    ffn_hidden, experts, top_k, mlp).  Returned keys:

    * ``q_width`` a·d_qk, ``o_width`` a·d_v (the output projection's input), ``core`` a·(d_qk + d_v)/2: the
      attention core costs 4·keys·core FLOPs per token forward (4·s·h for MHA, Korthikanti 2022 Eq. 7);
    * ``attn_in`` columns of the h-input attention GEMM split over tp (Q, K, V: a·d + 2·g·d; MLA: the query
      projection when q_lora_rank = 0), ``attn_rep`` the columns every tp rank computes in full (MLA's down
      projections q_lora + kv_lora + rope);
    * ``up_params`` MLA's up projections q_lora·a·(nope + rope) + kv_lora·a·(nope + v), ``up_in`` their input
      width q_lora + kv_lora, ``up_out`` their output width;
    * ``kv_train`` K and V values per token a training step or prefill stores and exchanges (2·g·d;
      MLA a·(nope + rope) + a·v), ``kv_cache`` the values per token a decode cache keeps (2·g·d; MLA
      kv_lora + rope; read once for all heads, absorbed: :func:`cached_values`, :func:`decode_head_dims`);
    * ``attn_params`` h·(attn_in + attn_rep) + up_params + o_width·h;
    * ``moe_frac`` share of MoE layers, ``ffn_dense`` the dense FFN width of the mean layer
      ((1 − moe_frac)·ffn_hidden + moe_frac·shared·moe_ffn), ``ffn_moe`` one routed expert's width,
      ``expert_params`` n_mlp·h·ffn_moe, ``ffn_shared`` shared·ffn_moe, ``ffn_first`` ffn_hidden (a dense
      layer's width);
    * ``full_frac`` share of full-attention layers, ``window``, ``chunk``.
    """
    h, a, g = x["hidden"], x["heads"], x["kv_heads"]
    L, E, f = x["layers"], x["experts"], x["ffn_hidden"]
    d = np.where(x["head_dim"] > 0, x["head_dim"], h / a)
    gqa_kv = 2.0 * g * d
    n_mlp = 2.0 + mask(x["mlp"] == codes.MLP_SWIGLU, x["mlp"])
    f_moe = np.where(x["moe_ffn_hidden"] > 0, x["moe_ffn_hidden"], f)
    moe_frac = moe_layer_count(L, E, x["dense_layers"], x["moe_every"]) / L
    ffn_shared = x["shared_experts"] * f_moe
    zero = 0.0 * d
    rec = {
        "head_dim": d, "q_width": a * d, "o_width": a * d, "core": a * d,
        "attn_in": a * d + gqa_kv, "attn_rep": zero, "up_params": zero, "up_in": zero, "up_out": zero,
        "kv_train": gqa_kv, "kv_cache": gqa_kv,
        "n_mlp": n_mlp, "moe_frac": moe_frac, "ffn_dense": (1.0 - moe_frac) * f + moe_frac * ffn_shared,
        "ffn_moe": f_moe, "ffn_shared": ffn_shared, "ffn_first": f + zero, "expert_params": n_mlp * h * f_moe,
        "full_frac": full_attention_fraction(L, np.maximum(x["sliding_window"], x["attention_chunk"]),
                                             x["global_every"]),
        "window": x["sliding_window"], "chunk": x["attention_chunk"],
    }
    mla = x["attention_kind"] == codes.ATTENTION_KIND_MLA
    if np.any(mla):  # MLA's widths on its rows only (a sweep mixes models)
        if np.ndim(mla) == 0:
            rec.update(_mla_widths(x))
        else:
            idx = np.flatnonzero(mla)
            sub = {k: (v[idx] if np.ndim(v) else v) for k, v in x.items() if k in _MLA_INPUTS}
            for k, v in _mla_widths(sub).items():
                full = np.array(np.broadcast_to(rec[k], np.shape(mla)), dtype=np.result_type(rec[k], v))
                full[idx] = v
                rec[k] = full
    rec["attn_params"] = h * (rec["attn_in"] + rec["attn_rep"]) + rec["up_params"] + rec["o_width"] * h
    return rec


_MLA_INPUTS = ("hidden", "heads", "kv_lora_rank", "q_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim")


def _mla_widths(x: dict[str, Array]) -> dict[str, Array]:
    """The widths of :func:`layer_record` that multi-head latent attention sets (DeepSeek-V2 §2.1; Megatron-core
    MLASelfAttention): queries of head dim nope + rope, from the q_lora latent (or from h when q_lora_rank is
    empty), keys and values up-projected from the kv_lora latent, the latent and the shared rope key cached."""
    a = x["heads"]
    nope, rope, v = x["qk_nope_dim"], x["qk_rope_dim"], x["v_head_dim"]
    q_lora, kv_lora = x["q_lora_rank"], x["kv_lora_rank"]
    d_qk = nope + rope
    latent_q = (q_lora > 0).astype(np.asarray(d_qk).dtype)
    return {
        "q_width": a * d_qk, "o_width": a * v, "core": a * (d_qk + v) / 2.0,
        "attn_in": (1.0 - latent_q) * a * d_qk, "attn_rep": q_lora + kv_lora + rope,
        "up_params": latent_q * q_lora * a * d_qk + kv_lora * a * (nope + v), "up_in": q_lora + kv_lora,
        "up_out": latent_q * a * d_qk + a * (nope + v), "kv_train": a * d_qk + a * v, "kv_cache": kv_lora + rope,
    }


def layer_params(r: dict[str, Array], hidden: Array, experts: Array) -> Array:
    """Parameters of the mean layer: attention + dense FFN + moe_frac·(E routed experts + the h·E router)."""
    return (r["attn_params"] + r["n_mlp"] * hidden * r["ffn_dense"]
            + r["moe_frac"] * (experts * r["expert_params"] + hidden * experts))


def active_layer_params(r: dict[str, Array], hidden: Array, experts: Array, top_k: Array) -> Array:
    """Weights one token multiplies in the mean layer: attention + dense FFN (shared experts included) +
    moe_frac·(k routed experts + router)."""
    return (r["attn_params"] + r["n_mlp"] * hidden * r["ffn_dense"]
            + r["moe_frac"] * (top_k * r["expert_params"] + hidden * experts))


def mtp_params(r: dict[str, Array], hidden: Array, experts: Array, mtp: Array) -> Array:
    """Parameters of the multi-token-prediction modules (DeepSeek-V3 §2.2): per module one transformer block
    (a MoE layer when the model has experts: shared + routed experts and router; else the dense FFN), the 2h → h
    projection (RMSNorms neglected); the embedding and output head are shared with the main model."""
    moe = (experts > 1).astype(np.asarray(hidden).dtype)
    ffn = moe * (r["n_mlp"] * hidden * r["ffn_shared"] + experts * r["expert_params"] + hidden * experts) \
        + (1.0 - moe) * r["n_mlp"] * hidden * r["ffn_first"]
    return mtp * (r["attn_params"] + ffn + 2.0 * hidden * hidden)


def layer_gemms(tokens: Array, hidden: Array, r: dict[str, Array], tp: Array, etp: Array, top_k: Array,
                weight_bytes: Array, local_experts: Array) -> tuple[tuple[Array, Array, Array, Array, Array], ...]:
    """(m, n, k, weight bytes per element, share of layers) of the mean layer's forward GEMMs on one GPU:
    attention in, attention out, dense FFN in and out (dense layers and shared experts), routed experts in and
    out.  Megatron tensor parallelism (Narayanan et al. 2021 §3.2) splits the attention and dense FFN by tp.
    Routed experts (Megatron-core MoE parallel folding, arXiv 2504.14960): each GPU holds E/ep experts, 1/etp of
    each; the T·k·etp/tp token-expert pairs it receives (the stage's T·d·c·k pairs over its t·c·d/etp expert
    groups) stream those weights once (a grouped GEMM).  The dense FFN's share is 0 where its width is 0 (every
    layer routed, no shared expert), the routed ones' the share of MoE layers.  MLA's up projections are timed
    apart (:func:`mla_up_projection`)."""
    n_fc1 = r["n_mlp"] - 1.0
    dense = (r["ffn_dense"] > 0).astype(np.asarray(r["ffn_dense"]).dtype)
    pairs = tokens * top_k * etp / tp
    w_routed = weight_bytes * local_experts
    return (
        (tokens, r["attn_in"] / tp + r["attn_rep"], hidden, weight_bytes, 1.0),
        (tokens, hidden, r["o_width"] / tp, weight_bytes, 1.0),
        (tokens, n_fc1 * r["ffn_dense"] / tp, hidden, weight_bytes, dense),
        (tokens, hidden, r["ffn_dense"] / tp, weight_bytes, dense),
        (pairs, n_fc1 * r["ffn_moe"] / etp, hidden, w_routed, r["moe_frac"]),
        (pairs, hidden, r["ffn_moe"] / etp, w_routed, r["moe_frac"]),
    )


def mla_up_projection(tokens: Array, r: dict[str, Array], tp: Array, in_bytes: Array) -> tuple[Array, Array]:
    """(FLOPs, HBM bytes) of MLA's up projections on one GPU (0 without MLA): 2·T·up_params/t, reading the
    latents (T·up_in) and the weights once and writing T·up_out/t 16-bit values."""
    return (2.0 * tokens * r["up_params"] / tp,
            in_bytes * tokens * r["up_in"] + in_bytes * r["up_params"] / tp + 2.0 * tokens * r["up_out"] / tp)


#: Smallest value of each integer architecture column (and ``etp``) where given (empty = not set).
ARCHITECTURE_MIN: dict[str, int] = {
    "head_dim": 1, "kv_lora_rank": 1, "q_lora_rank": 1, "qk_rope_dim": 1, "qk_nope_dim": 1, "v_head_dim": 1,
    "moe_ffn_hidden": 1, "shared_experts": 0, "dense_layers": 0, "moe_every": 1, "sliding_window": 1,
    "attention_chunk": 1, "global_every": 1, "mtp": 0, "etp": 1,
}
MLA_COLUMNS: tuple[str, ...] = ("kv_lora_rank", "q_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim")
MLA_REQUIRED: tuple[str, ...] = ("kv_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim")
MOE_COLUMNS: tuple[str, ...] = ("moe_ffn_hidden", "shared_experts", "dense_layers", "moe_every")


def architecture_errors(m: dict[str, np.ndarray]) -> list[tuple[np.ndarray, str, str]]:
    """Rows whose architecture columns contradict each other: (bad rows, column, what is allowed), in the order
    they are checked.  ``m`` holds float arrays, NaN where empty: the model columns and ``attention_kind`` as a
    code.  Range checks (:data:`ARCHITECTURE_MIN`) are the reader's; these are the combinations."""
    def given(k: str) -> np.ndarray:
        return ~np.isnan(m[k])

    kind = np.nan_to_num(m["attention_kind"], nan=0.0)
    mla = kind == codes.ATTENTION_KIND_MLA
    experts = np.nan_to_num(m["experts"], nan=1.0)
    heads, kv = m["heads"], np.where(np.isnan(m["kv_heads"]), m["heads"], m["kv_heads"])
    out: list[tuple[np.ndarray, str, str]] = []
    for k in MLA_COLUMNS:
        out.append((given(k) & ~mla, k, "empty unless attention_kind is mla (multi-head latent attention)"))
    for k in MLA_REQUIRED:
        out.append((mla & ~given(k), k, "a positive integer: attention_kind mla needs kv_lora_rank, qk_rope_dim, "
                                        "qk_nope_dim and v_head_dim"))
    out.append((mla & given("head_dim"), "head_dim", "empty with attention_kind mla (its head dims are "
                                                     "qk_nope_dim + qk_rope_dim and v_head_dim)"))
    out.append(((mla | (kind == 1)) & (kv != heads), "kv_heads", "equal to heads (or empty) with attention_kind "
                                                                 "mha or mla"))
    for k in MOE_COLUMNS:
        out.append((given(k) & (np.nan_to_num(m[k]) > 0) & ~(experts > 1), k,
                    "empty or 0 unless the model has experts (experts > 1)"))
    out.append((given("dense_layers") & (np.nan_to_num(m["dense_layers"]) >= m["layers"]), "dense_layers",
                "fewer than layers"))
    out.append((given("global_every") & ~given("sliding_window") & ~given("attention_chunk"), "global_every",
                "empty unless sliding_window or attention_chunk is given"))
    out.append((given("attention_chunk") & given("sliding_window"), "attention_chunk",
                "empty when sliding_window is given (a layer is windowed or chunked, not both)"))
    out.append(((np.nan_to_num(m["moe_quant"]) > 0) & ~(experts > 1), "moe_quant",
                "empty or tensor unless the model has experts (experts > 1)"))
    return out


def held_tokens(tokens: Array, r: dict[str, Array]) -> Array:
    """Tokens whose K and V a layer keeps, averaged over the layers: all of them on full-attention layers,
    at most ``sliding_window`` on windowed ones (a rolling cache: TensorRT-LLM's cyclic KV cache, vLLM's hybrid
    KV-cache manager), at most one chunk on chunked ones (its current chunk; an upper bound)."""
    local = np.maximum(r["window"], r["chunk"])
    w = np.where(local > 0, np.minimum(local, tokens), tokens)
    return r["full_frac"] * tokens + (1.0 - r["full_frac"]) * w


def cached_values(x: dict[str, Array], r: dict[str, Array]) -> Array:
    """K and V values one GPU caches per token and layer: 2·max(g/t, 1)·d (tensor parallelism past the KV heads
    replicates them), or MLA's latent kv_lora + rope, which every tensor-parallel rank keeps whole."""
    gqa = 2.0 * np.maximum(x["kv_heads"] / x["tp"], 1.0) * r["head_dim"]
    return gqa + mla_mask(x) * (r["kv_cache"] - gqa)


def decode_head_dims(x: dict[str, Array], r: dict[str, Array]) -> Array:
    """d_qk + d_v of one decode query head against the cache: 2·d, or with MLA's absorbed weights
    (DeepSeek-V2 §2.1.3) (kv_lora + rope) + kv_lora: the scores and the context are taken in the latent space."""
    gqa = 2.0 * r["head_dim"]
    return gqa + mla_mask(x) * (2.0 * x["kv_lora_rank"] + x["qk_rope_dim"] - gqa)


def infer_layer_params(r: dict[str, Array], hidden: Array, experts: Array, tp: Array,
                       expert_split: Array | None = None) -> Array:
    """Parameters of the mean layer on one GPU of an inference replica (every weight split by tp; the routed
    experts by ``expert_split``: tp, or the ep GPUs of wide expert parallelism; MLA's down projections whole on
    every rank)."""
    h = hidden
    return ((h * r["attn_in"] + r["up_params"] + r["o_width"] * h + r["n_mlp"] * h * r["ffn_dense"]) / tp
            + h * r["attn_rep"] + routed_layer_params(r, experts, tp if expert_split is None else expert_split)
            + r["moe_frac"] * h * experts)


def routed_layer_params(r: dict[str, Array], experts: Array, split: Array) -> Array:
    """Routed-expert weights of the mean layer on one GPU: moe_frac·E·n_mlp·h·f_moe / split (0 for a dense model)."""
    return r["moe_frac"] * experts * r["expert_params"] / split


def model_input(inputs: Any, key: str) -> Any:
    """``inputs[key]``; an architecture column (or ``etp``) a caller leaves out is 0: not set (``moe_imbalance``:
    1, balanced)."""
    if key in inputs:
        return inputs[key]
    if key in ARCHITECTURE_COLUMNS or key == "etp":
        return 0.0
    if key == "moe_imbalance":
        return 1.0
    if key in ("zero_with_pp", "cp_exchange", "moe_gemm", "ep_dispatch", "ep_overlap", "cross_entropy",
               "request_overhead_s",
               "request_setup_s", "host_overlap", "window_kv", "fp8_context_fmha", "ep_comm", "mla_decode"):
        return 0.0  # added after the kernel's first callers: absent = today's
    raise KeyError(key)

