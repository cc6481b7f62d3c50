"""Parameters and model FLOPs of a decoder-only transformer (dense or mixture-of-experts).

Notation (Narayanan et al. 2021; Korthikanti et al. 2022): h hidden, a heads, g kv heads (GQA),
d = h/a head size, f FFN hidden, V vocabulary, L layers, E experts, k experts per token (top_k),
n_mlp = 2 matrices (gelu, relu2) or 3 (swiglu).
"""

from __future__ import annotations

import numpy as np

from dse.codes import MLP_SWIGLU

Array = np.ndarray


def mlp_matrices(mlp: Array) -> Array:
    """Weight matrices in one FFN: 3 for swiglu (gate, up, down), 2 for gelu and relu2."""
    return np.where(mlp == MLP_SWIGLU, 3.0, 2.0)


def kv_width(hidden: Array, heads: Array, kv_heads: Array) -> Array:
    """Width of the K (or V) projection: g · h / a."""
    return kv_heads * hidden / heads


def attention_params(hidden: Array, heads: Array, kv_heads: Array) -> Array:
    """Q, K, V and output projections: h·(h + 2·g·d) + h·h (biases and norms neglected, < 0.1 %)."""
    return hidden * (hidden + 2.0 * kv_width(hidden, heads, kv_heads)) + hidden * hidden


def expert_params(hidden: Array, ffn_hidden: Array, mlp: Array) -> Array:
    """One FFN (one expert): n_mlp · h · f."""
    return mlp_matrices(mlp) * hidden * ffn_hidden


def layer_params(hidden: Array, heads: Array, kv_heads: Array, ffn_hidden: Array, mlp: Array,
                 experts: Array) -> Array:
    """All parameters of one layer: attention + E experts + router (h·E when E > 1)."""
    router = np.where(experts > 1, hidden * experts, 0.0)
    return attention_params(hidden, heads, kv_heads) + experts * expert_params(hidden, ffn_hidden, mlp) + router


def total_params(layers: Array, hidden: Array, heads: Array, kv_heads: Array, ffn_hidden: Array,
                 vocab: Array, mlp: Array, experts: Array, tied_embeddings: Array) -> Array:
    """L · layer + V·h embedding (+ V·h output layer when untied).

    For GPT-3 175B this gives 12·L·h² + V·h = 174.6e9, Narayanan 2021 Eq. (2) without biases.
    """
    embed = vocab * hidden * np.where(tied_embeddings > 0, 1.0, 2.0)
    return layers * layer_params(hidden, heads, kv_heads, ffn_hidden, mlp, experts) + embed


def active_matmul_params_per_layer(hidden: Array, heads: Array, kv_heads: Array, ffn_hidden: Array,
                                   mlp: Array, experts: Array, top_k: Array) -> Array:
    """Weights one token multiplies in one layer: attention + k experts (+ router)."""
    router = np.where(experts > 1, hidden * experts, 0.0)
    return attention_params(hidden, heads, kv_heads) + top_k * expert_params(hidden, ffn_hidden, mlp) + router


def model_flops_per_token(layers: Array, hidden: Array, heads: Array, kv_heads: Array, ffn_hidden: Array,
                          vocab: Array, mlp: Array, experts: Array, top_k: Array, seq_len: Array) -> Array:
    """Model FLOPs per token for forward + backward (no recomputation), the MFU numerator.

    Korthikanti et al. 2022 Eq. (7): 72·B·L·s·h²·(1 + s/(6h) + V/(12hL)) per iteration, i.e. per token
    3 · [L·(2·P_active + 4·s·h) + 2·h·V], generalised to GQA, gated FFNs and MoE.  The attention
    score/context term counts the full s×s matrix (no causal halving), as Narayanan and Korthikanti do.
    """
    per_layer = 2.0 * active_matmul_params_per_layer(hidden, heads, kv_heads, ffn_hidden, mlp, experts, top_k)
    per_layer = per_layer + 4.0 * seq_len * hidden
    return 3.0 * (layers * per_layer + 2.0 * hidden * vocab)


def recompute_flops_per_token(layers: Array, hidden: Array, heads: Array, kv_heads: Array,
                              ffn_hidden: Array, mlp: Array, experts: Array, top_k: Array, seq_len: Array,
                              full: Array, selective: Array) -> Array:
    """Extra forward FLOPs per token executed by activation recomputation (for HFU).

    Full: one more forward of every layer, L·(2·P_active + 4·s·h) (Narayanan 2021 Eq. 3 counts it).
    Selective: the attention core only, L·4·s·h (Korthikanti 2022 Eq. 8).
    """
    attn_core = 4.0 * seq_len * hidden
    layer_fwd = 2.0 * active_matmul_params_per_layer(hidden, heads, kv_heads, ffn_hidden, mlp, experts,
                                                     top_k) + attn_core
    return layers * np.where(full, layer_fwd, np.where(selective, attn_core, 0.0))
