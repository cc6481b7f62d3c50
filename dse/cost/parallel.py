"""Communication volumes of each parallelism, per layer and micro-batch (bytes), and the groups they run on.

Group placement (Megatron-LM order tp → cp → ep → dp → pp): TP stride 1; CP stride t; EP stride t·c;
the gradient-synchronisation group of dense weights is dp·cp with stride t (context-parallel ranks hold
the same weights); expert weights synchronise over dp·cp/ep with stride t·c·ep; PP neighbours are t·c·dp
ranks apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.cost import constants as K

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


def cp_ring_forward_bytes(elements: Array, cp: Array) -> Array:
    """HBM bytes of the element-wise work around the attention kernels in one pass of PyTorch's ring attention
    forward, on the rank with the most (the last: every step after the first merges a full-length output):

        B_fwd = (20 + 46·(cp − 1))·E,   E = b·(s/cp)·a·d/t   (elements of the local Q, K, V or output chunk)

    Counted from ``_templated_ring_attention`` and ``_SDPAMerger`` (``torch/distributed/tensor/experimental/
    _attention.py``), eager PyTorch, one read and one write per operand: ``key.contiguous()`` and
    ``value.contiguous()`` 8E; per step but the last, ``torch.cat`` of K and V for the send 8E; every step's
    output cast to fp32 (``convert_to_f32``) 6E; every step after the first merges in fp32,
    ``out − sigmoid(lse_b − lse)·(out − out_b)``, three passes 32E; the result cast back 6E.  ASSUMPTION: no
    fusion of these passes (torch.compile would fuse some of them)."""
    return (20.0 + 46.0 * (cp - 1.0)) * elements


def cp_ring_backward_bytes(elements: Array, cp: Array) -> Array:
    """HBM bytes of the element-wise work around the attention kernels in PyTorch's ring attention backward, on
    the last rank (every step after the first adds into half of dK, dV: ``_partial_update``):

        B_bwd = (84 + 60·(cp − 1))·E

    Counted from ``_templated_ring_attention_backward`` (``torch/distributed/tensor/experimental/_attention.py``),
    eager PyTorch, fp32 accumulation (``_cp_options.convert_to_f32``): zero-filled dQ, dK, dV 12E;
    ``contiguous()`` of K and V 8E; per step but the last, ``torch.cat`` of K and V 8E; the first step's dK, dV
    added in fp32 20E; every later step's ``_partial_update`` of dK and dV (a half-size add, then ``torch.cat``
    of the full fp32 tensor) 26E; every step ``torch.cat`` of dK and dV for the send 16E and dQ added 10E; dQ
    and the received dK, dV cast back 18E.  ASSUMPTION: no fusion of these passes."""
    return (84.0 + 60.0 * (cp - 1.0)) * elements


def ep_dispatch_bytes(tokens: Array, hidden: Array, top_k: Array, tp: Array, sp: Array) -> Array:
    """Bytes one GPU sends in one MoE all-to-all: its tokens (sequence-sharded with sp, a 0/1 mask) × top_k ×
    h × 2."""
    return tokens * top_k * hidden * ACTIVATION_BYTES / (1.0 + sp * (tp - 1.0))


def pp_activation_bytes(micro_batch: Array, seq_len: Array, cp: Array, hidden: Array, tp: Array) -> Array:
    """Activation sent between pipeline stages per micro-batch: b·(s/cp)·h·2/t bytes.

    Narayanan 2021 §4.1 scatter/gather: each of the t ranks sends 1/t of the bsh tensor over its own NIC
    (with sequence parallelism the tensor is already sharded)."""
    return micro_batch * seq_len / cp * hidden * ACTIVATION_BYTES / tp


def tp_backward_exposed(grad_gather_s: Array, regather_s: Array, reduce_s: Array, dgrad_s: Array, wgrad_s: Array,
                        overlap: Array) -> Array:
    """Exposed tensor-parallel communication of one layer's backward (``overlap`` a 0/1 mask: Megatron's
    asynchronous linear backward, ``tp_overlap = backward``):

        t = t_gather + max(max(t_regather − t_dgrad, 0) + max(t_reduce − t_wgrad, 0), κ·(t_regather + t_reduce))
                                                                                   (overlap)
        t = t_gather + t_regather + t_reduce                                       (none)

    (κ: what the overlapped transfers take from the GEMMs beside them, :func:`overlapped_exposed`).

    ``grad_gather_s`` the all-gathers of the row-parallel GEMMs' output gradients (sequence parallelism; waited for
    before those GEMMs run), ``regather_s`` the re-gathers of the column-parallel GEMMs' sequence-sharded inputs for
    their weight gradients (sp), ``reduce_s`` the reduction of their input gradients (all-reduce, or reduce-scatter
    with sp), ``dgrad_s`` and ``wgrad_s`` the layer's input- and weight-gradient GEMMs.  NVIDIA/Megatron-LM
    ``megatron/mpu/layers.py`` ``LinearWithGradAccumulationAndAsyncCommunication.backward`` @739cb43dae (May 2022,
    the sequence-parallel release of Korthikanti et al. 2022), unchanged in ``megatron/core/tensor_parallel/
    layers.py`` @d98e8a64dd: with sp the input all-gather is issued ``async_op=True`` before ``grad_output.matmul(
    weight)`` (the dgrad) and waited for after it, then the reduce-scatter of the input gradient is issued
    ``async_op=True`` before the weight-gradient GEMM and waited for after it; without sp the input-gradient
    all-reduce is issued ``async_op=True`` before the weight-gradient GEMM (``--async-tensor-model-parallel-allreduce``,
    on by default since 2022-02)."""
    hidden = overlap * (np.minimum(regather_s, dgrad_s) + np.minimum(reduce_s, wgrad_s))
    return grad_gather_s + overlapped_exposed(regather_s + reduce_s - hidden, overlap * (regather_s + reduce_s))


def combined_1f1b_unpaired_share(microbatches: Array, pp: Array, vpp: Array) -> Array:
    """Share of a pipeline rank's forward and backward steps that Megatron-core's combined 1F1B schedule runs
    alone, with no step of another micro-batch to pair with (their expert all-to-alls stay exposed):

        u = min(1, W / (m·v)),  W = 1 (pp = 1),  W = 2·(pp − 1) + (vpp − 1)·pp (pp > 1)

    m micro-batches of v model chunks each.  Without pipelining the first forward and the last backward run
    alone (Megatron-core ``combined_1f1b_schedule_for_no_pipelining``: "the forward pass of Transformer layers for
    one micro-batch runs in parallel with the backward pass of another"); with the interleaved schedule the
    warm-up forwards and cool-down backwards do, (pp − rank − 1)·2 + (vpp − 1)·pp of each
    (``megatron/core/pipeline_parallel/schedules.py`` ``get_pp_rank_microbatches``), taken at the first rank, which
    has the most.  The combined schedule needs vpp > 1 when pp > 1 (a reason row otherwise)."""
    warmup = np.where(pp > 1, 2.0 * (pp - 1.0) + (vpp - 1.0) * pp, 1.0)
    return np.minimum(1.0, warmup / (microbatches * vpp))


def ep_overlap_exposed(ep_fwd: Array, ep_bwd: Array, attn_fwd: Array, mlp_fwd: Array, attn_bwd: Array,
                       mlp_dgrad: Array, mlp_wgrad: Array, unpaired: Array) -> Array:
    """Exposed expert-parallel all-to-all time per layer and micro-batch under Megatron-core's combined 1F1B
    schedule (``--overlap-moe-expert-parallel-comm``; Megatron-Bridge ``moe_a2a_overlap``).  In the steady state the
    forward of one micro-batch and the backward of another run as one merged step, layer by layer, each all-to-all
    on the communication stream beside one compute node of the other direction
    (``TransformerLayerSchedulePlan.run``, ``megatron/core/models/common/model_chunk_schedule_plan.py``, with
    ``delay_wgrad_compute``): the backward's combine beside the forward's attention, the forward's dispatch beside
    the backward's expert input gradients, the backward's dispatch beside the expert weight gradients and the
    forward's experts, the forward's combine beside the backward's attention:

        ideal = [a_b − A_f]⁺ + [a_f − M_dgrad]⁺ + [a_b − (M_wgrad + M_f)]⁺ + [a_f − A_b]⁺
        t = u·(2a_f + 2a_b) + (1 − u)·max(ideal, κ·(2a_f + 2a_b))

    a_f, a_b one all-to-all (dispatch or combine, half of the layer's forward or backward ones), A the attention
    node (attention, norms, router: all of the layer's compute but the MLP node), M the MLP node (experts, shared
    expert, activation), u the steps that run alone (:func:`combined_1f1b_unpaired_share`); what runs beside
    compute still takes κ of it (:func:`overlapped_exposed`).  "EP A2A in forward step is hidden by the
    attention/mlp computation in the backward step, and vice versa" (Megatron-core
    ``core.pipeline_parallel.combined_1f1b``); nothing hides without a second micro-batch."""
    a_f, a_b = 0.5 * ep_fwd, 0.5 * ep_bwd
    ideal = (np.maximum(a_b - attn_fwd, 0.0) + np.maximum(a_f - mlp_dgrad, 0.0)
             + np.maximum(a_b - (mlp_wgrad + mlp_fwd), 0.0) + np.maximum(a_f - attn_bwd, 0.0))
    paired = overlapped_exposed(ideal, ep_fwd + ep_bwd)
    return unpaired * (ep_fwd + ep_bwd) + (1.0 - unpaired) * paired


def embedding_gradient_tail(grad_sync_s: Array, embed_params: Array, stage_params: Array) -> Array:
    """Seconds of a stage's overlapped gradient reduction that no backward compute can hide: the input embedding's.

        t = t_sync · P_emb / P_stage

    The embedding is the first module of the forward, so the backward produces its gradient last; PyTorch DDP gives
    a parameter larger than its bucket (``bucket_cap_mb``, 25 MB) a bucket of its own and Megatron-core's DDP fills
    its buckets in the reverse order of use, so that bucket is reduced after the backward has ended and the
    optimizer waits for it (``torch/nn/parallel/distributed.py`` ``_DDPSink`` / ``reducer.cpp`` ``finalize_backward``;
    ``megatron/core/distributed/param_and_grad_buffer.py``), at the rate of the stage's whole reduction
    ``grad_sync_s`` of ``stage_params`` parameters."""
    return grad_sync_s * embed_params / stage_params


def overlapped_exposed(exposed_s: Array, overlapped_s: Array, unhidden_s: Array | float = 0.0) -> Array:
    """Exposed time of communication that runs beside compute, counting what it takes from that compute:

        t = max(t_exposed, U + κ·(M − U)),   κ = σ / (1 + σ)

    ``exposed_s`` the exposed time on an ideal overlap (max(M − C, 0) for a transfer M under compute C),
    ``overlapped_s`` the communication M issued to run beside compute.  While M runs, compute proceeds at
    1/(1 + σ) of its rate (σ = ``OVERLAP_COMPUTE_SLOWDOWN``, Lee et al. 2025, measured): compute C with M beside
    it ends at C + κ·M when M ≤ C·(1 + σ), else at M -- so the step pays max(M − C, κ·M) over C.  ``unhidden_s``
    (U) is the part of M that can only start after the compute has ended (e.g.
    :func:`embedding_gradient_tail`): paid whole, the rest at κ; U = 0 is the plain form."""
    kappa = K.OVERLAP_COMPUTE_SLOWDOWN / (1.0 + K.OVERLAP_COMPUTE_SLOWDOWN)
    return np.maximum(exposed_s, unhidden_s + kappa * (overlapped_s - unhidden_s))
