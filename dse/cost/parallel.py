"""Communication volumes of each parallelism, per layer and micro-batch (bytes), and the groups they run on.

Group placement (Megatron-LM order tp → cp → ep → dp → pp): TP stride 1; CP stride t; EP stride t·c;
the gradient-synchronisation group of dense weights is dp·cp with stride t (context-parallel ranks hold
the same weights); expert weights synchronise over dp·cp/ep with stride t·c·ep; PP neighbours are t·c·dp
ranks apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any  # numpy arrays or scalars that broadcast (the stubs cannot express broadcasting)

ACTIVATION_BYTES = 2.0  #: activations and their gradients travel in 16 bits (bf16/fp16)
GRAD_COMM_BYTES = 2.0  #: gradients are reduced in 16 bits (ZeRO §7.1 convention; NeMo grad_sync_dtype bf16)


def tp_activation_bytes(tokens: Array, hidden: Array) -> Array:
    """Size of one TP collective: the full b·s·h activation of a micro-batch, 2 bytes each.

    Narayanan 2021 §3.2: "tensors of total size bsh need to be all-reduced among t model replicas twice
    each in the forward and backward pass for each layer".  With sequence parallelism each all-reduce
    becomes an all-gather plus a reduce-scatter of the same size (Korthikanti 2022 §4.2.2).
    """
    return ACTIVATION_BYTES * tokens * hidden


def cp_kv_chunk_bytes(micro_batch: Array, seq_len: Array, cp: Array, kv_width: Array, tp: Array) -> Array:
    """K and V of one sequence chunk, exchanged at each of the cp−1 steps of ring attention:
    2 · b · (s/cp) · (g·d/t) · 2 bytes."""
    return 2.0 * micro_batch * seq_len / cp * kv_width / tp * ACTIVATION_BYTES


def cp_allgather_exposed(gather_s: Array, attention_s: Array, cp: Array) -> Array:
    """Exposed time of PyTorch's all-gather K,V exchange in one pass (forward, or the backward's re-gather):

        t = max(AG(cp·C_kv) − t_attn / cp, 0)

    ``gather_s`` the all-gather of every rank's K,V chunk, ``attention_s`` the pass's attention on this rank.
    PyTorch ``torch/distributed/tensor/experimental/_attention.py`` ``_AllGatherRotater`` ("Only one communication
    will be done"): ``exchange_buffers`` issues the all-gather at step 0 and ``next_buffer`` waits for it at step
    1, so only step 0 -- the rank's local causal block, 1/cp of its load-balanced attention -- runs under it.
    ``_templated_ring_attention_backward`` creates a new ``_AllGatherRotater`` for K,V: the backward gathers
    again."""
    return np.maximum(gather_s - attention_s / cp, 0.0)


def cp_grad_ring_exposed(step_s: Array, attention_s: Array, cp: Array) -> Array:
    """Exposed time of the backward's KV-gradient ring in PyTorch's context parallelism:

        t = max((cp − 1)·T − t_attn_bwd·(cp − 1)/cp, 0) + T,   T = C_dkv / link + α,   C_dkv = 2·C_kv (fp32)

    ``_templated_ring_attention_backward`` sends the accumulated dK, dV to the next rank after every one of its
    cp steps (``dkv_rotater``, all-to-all permute) in the accumulation dtype (``_cp_options.convert_to_f32``:
    fp32).  The first cp − 1 transfers are waited for after the next step's kernel, so each hides under one
    step's attention backward; the last one is waited for right after the loop (``next_grad_kv =
    dkv_rotater.next_buffer()``) with no kernel left to hide it: one transfer is always exposed.
    PyTorch ``torch/distributed/tensor/experimental/_attention.py`` (Dec 2024 and 2025 versions alike)."""
    return np.maximum((cp - 1.0) * step_s - attention_s * (cp - 1.0) / cp, 0.0) + step_s


def ep_dispatch_bytes(tokens: Array, hidden: Array, top_k: Array, tp: Array, sp: Array) -> Array:
    """Bytes one GPU sends in one MoE all-to-all: its tokens (sequence-sharded with sp, a 0/1 mask) × top_k ×
    h × 2."""
    return tokens * top_k * hidden * ACTIVATION_BYTES / (1.0 + sp * (tp - 1.0))


def pp_activation_bytes(micro_batch: Array, seq_len: Array, cp: Array, hidden: Array, tp: Array) -> Array:
    """Activation sent between pipeline stages per micro-batch: b·(s/cp)·h·2/t bytes.

    Narayanan 2021 §4.1 scatter/gather: each of the t ranks sends 1/t of the bsh tensor over its own NIC
    (with sequence parallelism the tensor is already sharded)."""
    return micro_batch * seq_len / cp * hidden * ACTIVATION_BYTES / tp
