"""Parameters and model FLOPs of a decoder-only transformer (dense or mixture-of-experts).

Notation (Narayanan et al. 2021; Korthikanti et al. 2022): h hidden, a heads, g kv heads (GQA),
d = h/a head size, f FFN hidden, V vocabulary, L layers, E experts, k experts per token (top_k),
n_mlp = 2 matrices (gelu, relu2) or 3 (swiglu).
"""

from __future__ import annotations

from typing import Any

import numpy as np  # noqa: F401  (Array alias)

from dse.codes import MLP_SWIGLU
from dse.cost.select import mask

Array = Any  # numpy arrays or scalars that broadcast (the stubs cannot express broadcasting)


def mlp_matrices(mlp: Array) -> Array:
    """Weight matrices in one FFN: 3 for swiglu (gate, up, down), 2 for gelu and relu2."""
    return 2.0 + mask(mlp == MLP_SWIGLU, mlp)


def kv_width(hidden: Array, heads: Array, kv_heads: Array) -> Array:
    """Width of the K (or V) projection: g · h / a."""
    return kv_heads * hidden / heads


def layer_gemm_shapes(tokens: Array, hidden: Array, kv_w: Array, ffn_hidden: Array, n_mlp: Array, tp: Array,
                      expert_visits: Array, weight_bytes: Array, local_experts: Array
                      ) -> tuple[tuple[Array, Array, Array, Array], ...]:
    """(m, n, k, weight bytes per element) of the four GEMMs of one layer's forward on one GPU, in the order
    QKV, attention output, FFN in, FFN out.

    Megatron tensor parallelism (Narayanan et al. 2021 §3.2): QKV and FFN-in column-parallel (n split by tp;
    QKV width h + 2·g·d with GQA), attention-output and FFN-out row-parallel (k split by tp).  FFN in holds
    n_mlp − 1 matrices (gate + up for swiglu).  Mixture of experts: every token visits ``expert_visits`` experts
    (top_k), and a grouped GEMM streams the weights of all ``local_experts`` (E / ep) of the GPU once.
    """
    tk = tokens * expert_visits
    w_experts = weight_bytes * local_experts
    return (
        (tokens, (hidden + 2.0 * kv_w) / tp, hidden, weight_bytes),
        (tokens, hidden, hidden / tp, weight_bytes),
        (tk, (n_mlp - 1.0) * ffn_hidden / tp, hidden, w_experts),
        (tk, hidden, ffn_hidden / tp, w_experts),
    )


def attention_params(hidden: Array, heads: Array, kv_heads: Array) -> Array:
    """Q, K, V and output projections: h·(h + 2·g·d) + h·h (biases and norms neglected, < 0.1 %)."""
    return hidden * (hidden + 2.0 * kv_width(hidden, heads, kv_heads)) + hidden * hidden


def expert_params(hidden: Array, ffn_hidden: Array, mlp: Array) -> Array:
    """One FFN (one expert): n_mlp · h · f."""
    return mlp_matrices(mlp) * hidden * ffn_hidden


def layer_params(hidden: Array, heads: Array, kv_heads: Array, ffn_hidden: Array, mlp: Array,
                 experts: Array) -> Array:
    """All parameters of one layer: attention + E experts + router (h·E when E > 1)."""
    router = (experts > 1) * hidden * experts
    return attention_params(hidden, heads, kv_heads) + experts * expert_params(hidden, ffn_hidden, mlp) + router


def total_params(layers: Array, hidden: Array, heads: Array, kv_heads: Array, ffn_hidden: Array,
                 vocab: Array, mlp: Array, experts: Array, tied_embeddings: Array) -> Array:
    """L · layer + V·h embedding (+ V·h output layer when untied).

    For GPT-3 175B this gives 12·L·h² + V·h = 174.6e9, Narayanan 2021 Eq. (2) without biases.
    """
    embed = vocab * hidden * (2.0 - (tied_embeddings > 0))
    return layers * layer_params(hidden, heads, kv_heads, ffn_hidden, mlp, experts) + embed


def active_matmul_params_per_layer(hidden: Array, heads: Array, kv_heads: Array, ffn_hidden: Array,
                                   mlp: Array, experts: Array, top_k: Array) -> Array:
    """Weights one token multiplies in one layer: attention + k experts (+ router)."""
    router = (experts > 1) * hidden * experts
    return attention_params(hidden, heads, kv_heads) + top_k * expert_params(hidden, ffn_hidden, mlp) + router


def model_flops_per_token(layers: Array, active_params_per_layer: Array, seq_len: Array, hidden: Array,
                          vocab: Array, core: Array | None = None) -> Array:
    """Model FLOPs per token for forward + backward (no recomputation), the MFU numerator.

    Korthikanti et al. 2022 Eq. (7): 72·B·L·s·h²·(1 + s/(6h) + V/(12hL)) per iteration, i.e. per token
    3 · [L·(2·P_active + 4·s·h) + 2·h·V], with P_active = :func:`active_matmul_params_per_layer`
    (GQA, gated FFNs and MoE generalise the 12h² of GPT).  The attention score/context term counts the
    full s×s matrix (no causal halving), as Narayanan and Korthikanti do.  ``core`` = a·(d_qk + d_v)/2 replaces h
    in it where the heads are not h/a wide or MLA sets its own head dims (dse.cost.architecture.layer_record);
    ``seq_len`` is then the keys per query averaged over the layers (sliding windows).
    """
    c = hidden if core is None else core
    return 3.0 * (layers * (2.0 * active_params_per_layer + 4.0 * seq_len * c) + 2.0 * hidden * vocab)


def recompute_flops_per_token(layers: Array, active_params_per_layer: Array, seq_len: Array, hidden: Array,
                              full: Array, selective: Array, core: Array | None = None,
                              op_share: Array = 0.0) -> Array:
    """Extra forward FLOPs per token executed by activation recomputation (for HFU).

    Full: one more forward of every layer, L·(2·P_active + 4·s·h) (Narayanan 2021 Eq. 3 counts it).
    Selective: the attention core only, L·4·s·h (Korthikanti 2022 Eq. 8).  Op-level (torchtitan): the share
    ``op_share`` of the layer's matmuls, L·op_share·2·P_active (:func:`dse.cost.training.op_recompute_share`;
    0 for the other modes).  ``full`` and ``selective`` are float 0/1 masks; ``core`` as in
    :func:`model_flops_per_token`.
    """
    attn_core = 4.0 * seq_len * (hidden if core is None else core)
    return layers * (full * (2.0 * active_params_per_layer + attn_core) + selective * attn_core
                     + op_share * 2.0 * active_params_per_layer)
