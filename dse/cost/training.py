"""Training step: time and memory of one configuration or millions, as numpy arrays.

Every input is an array (or scalar) of numbers or integer codes; all broadcast together; every branch is
taken under a mask (float 0/1, selected arithmetically, see :mod:`dse.cost.select`); a configuration that
does not divide gets NaN metrics and a reason code (:data:`dse.codes.REASONS`), never an exception.
Internally float32 (relative error ~1e-7, far below the model's), outputs float64 for tables and float32 for
sweeps (``out_dtype``).  One call serves
``dse explain`` and a 10⁹-point sweep.

Per micro-batch and layer on one GPU the time is

    t_layer = t_fwd + t_bwd + t_recompute
            + exposed TP (all-reduce, or all-gather + reduce-scatter with sp)
            + exposed CP (ring exchange of K,V under attention) + EP (all-to-all dispatch / combine)

with compute on a roofline per op (GEMMs at the precision's tensor rate, FlashAttention at its own rate,
norms / dropout / activations / softmax at HBM bandwidth).  A pipeline stage adds the embedding (first) or
logits and loss (last); the step is

    t_step = m · t_mb(slowest stage) + (p−1)/v · t_mb(mean stage) + exposed DP sync + optimizer step.

"Exposed" counts what a transfer hidden under compute takes from that compute (κ·M of a transfer M,
:func:`dse.cost.parallel.overlapped_exposed`): max(M − C, κ·M), not max(M − C, 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dse import codes
from dse.cost import constants as K
from dse.cost.architecture import (
    ARCHITECTURE_COLUMNS,
    active_layer_params,
    causal_keys,
    layer_gemms,
    layer_params,
    layer_record,
    mla_mask,
    mla_up_projection,
    model_input,
    mtp_params,
    windowed_span,
)
from dse.cost.compute import gemm_bytes, gemm_flops, matmul_rates, operand_bytes, roofline_time
from dse.cost.eager import (
    PEFT_ADAPTER_BYTES,
    PEFT_ADAPTER_KERNELS,
    adapted_modules,
    adapted_outputs,
    eager_activation_terms,
    eager_bmm_time,
    eager_elementwise_bytes,
    eager_kernels,
    eager_module_bytes,
    eager_module_kernels,
    eager_score_bytes,
)
from dse.cost.host import cpu_adam_time, host_state_bytes, offload_gradient_bytes, offload_parameter_bytes
from dse.cost.memory import (
    GRAD_BYTES,
    OPTIMIZER_TEMP_BYTES,
    adapter_input_bytes,
    dense_and_expert,
    gradient_bytes,
    layer_activation_terms,
    logits_bytes,
    loss_bytes_per_logit,
    op_sac_kept_bytes,
    optimizer_bytes,
    optimizer_layout_bytes,
    phase_peak_bytes,
    weight_bytes,
    zero_step_grad_bytes,
)
from dse.cost.network import (
    allgather_time,
    allreduce_time,
    alltoall_time,
    deepep_dispatch_time,
    group_links,
    p2p_time,
    reduce_scatter_time,
    ring_latency,
    spans_domains,
)
from dse.cost.parallel import (
    GRAD_COMM_BYTES,
    combined_1f1b_unpaired_share,
    cp_allgather_exposed,
    cp_grad_ring_exposed,
    cp_kv_chunk_bytes,
    cp_ring_backward_bytes,
    cp_ring_forward_bytes,
    embedding_gradient_tail,
    ep_dispatch_bytes,
    ep_overlap_exposed,
    overlapped_exposed,
    pp_activation_bytes,
    tp_activation_bytes,
    tp_backward_exposed,
)
from dse.cost.pipeline import (
    inflight_chunk_microbatches,
    pipeline_bubble_time,
    pipeline_time,
    stage_layers_split,
)
from dse.cost.select import INT_DOMAIN_MAX, divides, mask, on_rows, pick
from dse.cost.transformer import model_flops_per_token, recompute_flops_per_token
from dse.hardware.catalog import HARDWARE_COLUMNS

Array = Any  # numpy arrays or scalars that broadcast (the stubs cannot express broadcasting)
DTYPE = np.float32
#: Gather the divisible rows and compute only those when they are fewer than this fraction of the batch.
COMPACT_BELOW = 0.7

#: Inputs of :func:`train_step` (numbers, or integer codes for categorical knobs).
TRAIN_INPUTS: tuple[str, ...] = (
    "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "experts", "top_k",
    "tied_embeddings", "gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "sp", "micro_batch", "global_batch",
    "seq_len", "recompute", "zero", "precision", "attention", "tp_overlap", "dp_overlap", "pp_overlap",
    "finetune", "lora_rank", "lora_targets", "offload", "zero3_fetch", "pipeline_split", "layers_first_stage",
    "layers_last_stage", "doc_len", "kernels", "optimizer", "memory_report", "adapter_precision", "dp_reduce",
    "zero_with_pp", "cp_exchange", "moe_gemm", "ep_dispatch", "zero3_collectives",
    *ARCHITECTURE_COLUMNS, "etp", "moe_imbalance", "ep_overlap", "cross_entropy",
)

#: Metric outputs (NaN on configurations that do not divide).
TRAIN_METRICS: tuple[str, ...] = (
    "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "hfu",
    "layer_time_ms", "layer_fwd_ms", "layer_bwd_ms", "layer_gemm_ms", "layer_attention_ms",
    "layer_elementwise_ms", "layer_recompute_ms", "layer_tp_comm_ms", "layer_cp_comm_ms", "layer_ep_comm_ms",
    "layer_host_ms", "microbatches",
    "time_compute_s", "time_recompute_s", "time_tp_comm_s", "time_cp_comm_s", "time_ep_comm_s", "time_host_s",
    "time_pp_comm_s", "time_bubble_s", "time_dp_comm_s", "time_optimizer_s", "time_offload_s",
    "params_total", "params_per_gpu", "params_trainable", "energy_per_step_j", "energy_per_token_j",
    "mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes", "mem_activations_bytes",
    "mem_buffers_bytes", "mem_step_extra_bytes", "mem_total_bytes", "peak_memory_gb",
)

#: Outputs that do not depend on time: what the GPU holds (kept on ``host_memory_exceeded`` rows).
MEMORY_OUTPUTS: tuple[str, ...] = (
    "params_total", "params_per_gpu", "params_trainable", "mem_weights_bytes", "mem_grads_bytes",
    "mem_optimizer_bytes", "mem_activations_bytes", "mem_buffers_bytes", "mem_step_extra_bytes", "mem_total_bytes",
    "peak_memory_gb",
)

#: Components whose sum is ``step_time_s`` exactly.
TIME_BREAKDOWN: tuple[str, ...] = (
    "time_compute_s", "time_recompute_s", "time_tp_comm_s", "time_cp_comm_s", "time_ep_comm_s", "time_host_s",
    "time_pp_comm_s", "time_bubble_s", "time_dp_comm_s", "time_optimizer_s", "time_offload_s",
)

#: Components whose sum is ``layer_time_ms`` exactly.
LAYER_BREAKDOWN: tuple[str, ...] = (
    "layer_gemm_ms", "layer_attention_ms", "layer_elementwise_ms", "layer_recompute_ms", "layer_tp_comm_ms",
    "layer_cp_comm_ms", "layer_ep_comm_ms", "layer_host_ms",
)

#: Modules of ``dse explain``'s forward/backward table (:func:`train_step` with ``modules``): the slowest pipeline
#: rank's step, per GPU, module by module -- as a profiler attributes kernel time to the model's modules (Zhang et
#: al. 2023 Table VI).  Summed over forward and backward they are ``time_compute_s`` + ``time_recompute_s`` + the
#: exposed communication (tensor, context, expert, pipeline, data parallel) + ``time_host_s``.
MODULES: tuple[str, ...] = ("embedding", "qkv", "rope", "attention", "output", "mlp", "norm", "other", "adapters",
                            "lm_head", "loss", "recompute", "comm", "host")
MODULE_METRICS: tuple[str, ...] = tuple(f"module_{k}_{phase}_s" for k in MODULES for phase in ("fwd", "bwd"))
#: What ``dse explain`` names inside the step's terms (with ``modules``): the fixed time of the eager kernels of the
#: slowest rank's layers (in compute; ``dse.cost.eager``), the gradient bucket copies (in data-parallel sync), the
#: CPU Adam step and the exposed offload copies (in ``time_offload_s``), and the bytes the loss holds in the peak
#: stage's activations (``cross_entropy``; 0 where the peak stage is not the last).
DETAIL_METRICS: tuple[str, ...] = ("detail_kernel_launch_s", "detail_grad_copy_s", "detail_cpu_adam_s",
                                   "detail_offload_copies_s", "detail_loss_bytes")

#: Components whose sum is ``mem_total_bytes`` exactly (for the peak stage).
MEMORY_BREAKDOWN: tuple[str, ...] = (
    "mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes", "mem_activations_bytes",
    "mem_buffers_bytes", "mem_step_extra_bytes",
)


def train_step(inputs: Mapping[str, object], hw: Mapping[str, object],
               out_dtype: type = np.float64, modules: bool = False) -> dict[str, Array]:
    """Evaluate the training cost model.

    ``inputs`` holds :data:`TRAIN_INPUTS`, ``hw`` the :data:`dse.hardware.catalog.HARDWARE_COLUMNS`
    (achieved rates, SI units), each a scalar or an array; the result maps :data:`TRAIN_METRICS` plus
    ``fits`` (bool) and ``reason`` (int code into :data:`dse.codes.REASONS`) to arrays of the broadcast
    shape (``out_dtype``: float64 for tables; sweeps take the kernel's float32 as is).  With ``modules`` the
    result also holds :data:`MODULE_METRICS` and :data:`DETAIL_METRICS` (``dse explain``).
    """
    metrics = TRAIN_METRICS + (MODULE_METRICS + DETAIL_METRICS if modules else ())
    names = TRAIN_INPUTS + HARDWARE_COLUMNS
    arrays = np.broadcast_arrays(
        *[np.asarray(model_input(inputs, k), dtype=DTYPE) for k in TRAIN_INPUTS],
        *[np.asarray(hw[k], dtype=DTYPE) for k in HARDWARE_COLUMNS],
    )
    shape = arrays[0].shape
    cols = {k: a.ravel() for k, a in zip(names, arrays, strict=True)}
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        reason, cols[STAGE_SPLIT[0]], cols[STAGE_SPLIT[1]], cols[STAGE_SPLIT[2]] = _infeasible_reason(cols)
        ok = reason == 0
        n_ok = int(np.count_nonzero(ok))
        # Rows that do not divide get NaN, so they are not computed: when they are many (a product grid
        # usually has many), the divisible rows are gathered, evaluated, and scattered back.  Every row's
        # arithmetic is the same either way, so results do not depend on the batch.
        if n_ok < COMPACT_BELOW * ok.size:
            idx = np.flatnonzero(ok)
            sub = _train_step({k: v[idx] for k, v in cols.items()}, modules)
            block = np.full((len(metrics), ok.size), np.nan, dtype=out_dtype)
            out = dict(zip(metrics, block, strict=True))
            for k in metrics:
                out[k][idx] = sub[k]
            exceeds = np.zeros(ok.size, dtype=bool)
            exceeds[idx] = ~sub["fits"]
            host_exceeds = np.zeros(ok.size, dtype=bool)
            host_exceeds[idx] = ~sub["host_fits"]
        elif n_ok == ok.size:  # every row divides: the kernel's values as they are
            full = _train_step(cols, modules)
            out = {k: full[k].astype(out_dtype, copy=False) for k in metrics}
            exceeds = ~full["fits"]
            host_exceeds = np.broadcast_to(~full["host_fits"], ok.shape)
        else:
            full = _train_step(cols, modules)
            nan_mask = np.where(ok, 0.0, np.nan).astype(DTYPE)  # one select; metrics get NaN by an addition
            out = {k: (full[k] + nan_mask).astype(out_dtype, copy=False) for k in metrics}
            exceeds = ok & ~full["fits"]
            host_exceeds = ok & ~full["host_fits"]
    host_exceeds = host_exceeds & ~exceeds  # the GPU's memory is named first
    if host_exceeds.any():  # swapping host memory: no time is modelled (a reason, not a number); memory stays
        out = {k: v if k in MEMORY_OUTPUTS else np.where(host_exceeds, np.nan, v).astype(v.dtype, copy=False)
               for k, v in out.items()}
    result: dict[str, Array] = {k: v.reshape(shape) for k, v in out.items()}
    result["fits"] = (ok & ~exceeds & ~host_exceeds).reshape(shape)
    reason = np.where(host_exceeds, codes.REASON_CODE["host_memory_exceeded"], reason)
    result["reason"] = np.where(exceeds, codes.REASON_CODE["exceeds_hbm"], reason).astype(np.int16).reshape(shape)
    return result


def ddp_copy_time(dp_reduce: Array, zero: Array, dp_ranks: Array, tw: Array, trainable_layer: Array,
                  mem_rate: Array) -> Array:
    """Backward time per layer and micro-batch of PyTorch DDP's bucket copies (``dp_reduce = ddp_copy``, without
    ZeRO, more than one data-parallel rank): DDP_COPY_BYTES per trainable parameter of the layer
    (``trainable_layer``: the adapters under LoRA; fp32 adapters twice the bytes, ``tw``) at the HBM rate,

        t = DDP_COPY_BYTES · tw · P_trainable,layer / W_mem

    (torch reducer.cpp ``copy_grad_to_bucket`` in each gradient's hook, ``copy_bucket_to_grad`` when the backward
    ends; :data:`dse.cost.constants.DDP_COPY_BYTES`).  The embedding's and output layer's copies are left out."""
    f64 = np.asarray(trainable_layer).dtype.type
    on = np.asarray((dp_reduce == codes.DP_REDUCE_DDP_COPY) & (zero == 0) & (dp_ranks > 1)).astype(f64)
    return on * K.DDP_COPY_BYTES * tw * trainable_layer / mem_rate


def zero12_bucket_copy_time(dp_reduce: Array, zero: Array, dp_ranks: Array, dp_overlap: Array, offload: Array,
                            microbatches: Array, tw: Array, trainable_layer: Array, mem_rate: Array) -> Array:
    """Backward time per layer and micro-batch of DeepSpeed ZeRO-1/2's gradient buckets (``dp_reduce =
    reduce_per_rank``, ZeRO 1 or 2, more than one data-parallel rank), read off ``stage_1_and_2.py`` (v0.10.3) with
    its default ``contiguous_gradients``: each gradient's hook copies it into the reduction bucket on the compute
    stream (``reduce_independent_p_g_buckets_and_remove_grads``: ``new_grad_tensor.copy_(grad)``, a read and a write,
    DEEPSPEED_BUCKET_COPY_BYTES); without ``overlap_comm`` (``dp_overlap`` 0, the ZeRO-1/2 default) the bucket's
    in-place division by the world size (``average_tensor``: ``tensor.div_``, DEEPSPEED_BUCKET_AVERAGE_BYTES) and the
    copy of the rank's own slice into its gradient partition (``copy_grads_in_partition``, the bucket copy's bytes over
    the ranks; to the host instead with offload) run on that stream too:

        t = tw · P_trainable,layer · (B_copy + (1 − overlap) · (B_avg + (1 − offload) · B_copy / N_dp)) / W_mem

    ZeRO-2 reduces every micro-batch; ZeRO-1 only at the accumulation boundary, one micro-batch of ``microbatches``."""
    f64 = np.asarray(trainable_layer).dtype.type
    on = np.asarray((dp_reduce == codes.DP_REDUCE_PER_RANK) & (zero >= 1) & (zero < 3) & (dp_ranks > 1)).astype(f64)
    every = pick(mask(zero >= 2, trainable_layer), 1.0, 1.0 / microbatches)
    serial = 1.0 - dp_overlap
    moved = K.DEEPSPEED_BUCKET_COPY_BYTES + serial * (K.DEEPSPEED_BUCKET_AVERAGE_BYTES
                                                      + (1.0 - offload) * K.DEEPSPEED_BUCKET_COPY_BYTES / dp_ranks)
    return on * every * moved * tw * trainable_layer / mem_rate


def attention_span(seq_len: Array, doc_len: Array) -> Array:
    """Keys each query attends over (before the causal halving): the sequence length, or, for packed
    sequences, the mean document length ``doc_len`` (NaN: not packed; above ``seq_len``: one document).

    With documents of lengths l_i packed into s = sum(l_i) tokens and attention masked per document, the
    score and context FLOPs are sum(4·l_i²·h)/2 = 4·s·h·E[l²]/E[l]/2 per layer; for documents of one length
    E[l²]/E[l] = doc_len.  The same per-token term, 4·span·h, enters the model FLOPs (Korthikanti 2022 Eq. 7
    with s → span), so MFU counts the attention the run executes, as NeMo's fine-tuning tables do."""
    return np.where(np.isnan(doc_len), seq_len, np.minimum(doc_len, seq_len))


def op_recompute_share(q_width: Array, kv_width: Array, o_width: Array, ffn_width: Array, n_mlp: Array) -> Array:
    """Share of a layer's forward matmul FLOPs that torchtitan's op-level selective checkpointing recomputes.

    Its policy (pytorch/torchtitan torchtitan/parallelisms/parallelize_llama.py @9dec370a, ``_custom_policy``)
    saves the outputs of the ops in ``_save_list`` (``aten.mm``, the SDPA kernels, the reduce-scatter, abs/max)
    "except every second mm", counting the layer's matmuls in forward order, and recomputes every other op.  In
    torchtitan's Llama block the order is wq, wk, wv, wo, then w1, w3, w2 (``w2(silu(w1(x)) * w3(x))``): the
    2nd, 4th and 6th are the K projection, the output projection and one FFN input matrix (w3; the second FFN
    matrix of a 2-matrix MLP likewise), so the recomputed share of the forward matmul FLOPs is

        (kv + o + f) / (q + 2·kv + o + n_mlp·f)     (per token, widths of one GPU's shard)

    with q, kv, o the query, key (= value) and output widths and f the FFN width: 36 % for Llama 3 8B and 70B.
    The element-wise ops (norms, RoPE, SiLU·mul, residual adds) are recomputed whole; attention is saved."""
    return (kv_width + o_width + ffn_width) / (q_width + 2.0 * kv_width + o_width + n_mlp * ffn_width)


def zero3_gathered_bytes(p_layer: Array, p_stage: Array, weight_stage_bytes: Array, prefetch: Array) -> Array:
    """Bytes of gathered (unsharded) weights a ZeRO-3 GPU holds at its peak.  Prefetching stacks (FSDP2,
    Megatron-FSDP: ``zero3_fetch = prefetch``) hold the layer that runs and the next one: 2 layers.  DeepSpeed
    (``on_demand``) releases a gathered parameter only when it will not be reused within
    ``stage3_max_reuse_distance`` parameters, up to ``stage3_max_live_parameters`` resident
    (:data:`dse.cost.constants.DEEPSPEED_MAX_LIVE_PARAMETERS`, 1e9 each by default): at the forward-to-backward turn
    min(1e9, the stage's parameters) stay gathered, at the bytes per parameter of the stage's weights."""
    per_param = weight_stage_bytes / np.maximum(p_stage, 1.0)
    resident = np.maximum(np.minimum(K.DEEPSPEED_MAX_LIVE_PARAMETERS, p_stage), 2.0 * p_layer)
    held = pick(prefetch, 2.0 * p_layer, resident)
    return per_param * held


def zero3_reused_share(p_stage: Array) -> Array:
    """Share of a stage's weights DeepSpeed ZeRO-3 does not gather again for the backward: after the step's first
    trace, ``release_sub_module`` keeps a parameter whose next use lies within ``stage3_max_reuse_distance``
    parameters of module traversal (microsoft/DeepSpeed deepspeed/runtime/zero/partitioned_param_coordinator.py
    ``__params_to_release``, v0.9-0.12; default 1e9, :data:`dse.cost.constants.DEEPSPEED_MAX_REUSE_DISTANCE`).  A
    submodule run with P parameters after it in the forward is reused after 2·P (the rest of the forward, then the
    backward back to it): the forward's last R/2 parameters stay gathered."""
    return np.minimum(0.5 * K.DEEPSPEED_MAX_REUSE_DISTANCE / np.maximum(p_stage, 1.0), 1.0)


def zero3_regathered_share(p_layer: Array) -> Array:
    """Share of a layer's weights DeepSpeed ZeRO-3 gathers a third time under full recomputation: the recomputed
    forward of a submodule with P parameters after it in its layer is followed by the layer's backward, reaching
    it after 2·P; parameters farther than ``stage3_max_reuse_distance`` (R) are released and gathered again, a
    share 1 - R/(2·layer) of the layer (none while the layer holds under R/2 parameters: Llama-2 7B/13B)."""
    return np.clip(1.0 - K.DEEPSPEED_MAX_REUSE_DISTANCE / (2.0 * np.maximum(p_layer, 1.0)), 0.0, 1.0)


def rank_list_copy_time(ranks: Array, rank_lists: Array) -> Array:
    """Seconds a ZeRO-3 collective over a list of one tensor per rank adds (``zero3_collectives = rank_lists``):
    n · C10D_RANK_COPY_S for n ranks.

    DeepSpeed v0.3 gathers each parameter with ``torch.distributed.all_gather(partitions, partitions[rank])``,
    ``partitions`` being n views of one flat buffer, and reduce-scatters each gradient with
    ``torch.distributed.reduce_scatter(out, input_list)`` over n slices (microsoft/DeepSpeed v0.3.16
    deepspeed/runtime/zero/partition_parameters.py ``_allgather_param``, ``_reduce_scatter_gradient``).  PyTorch's
    ProcessGroupNCCL of that time runs a list through a flat copy (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp
    ``allgather``: NCCL into ``outputFlattened``, then ``outputTensors[i][j].copy_(outputFlattened[i][j], true)``
    for each of the n ranks; ``reduce_scatter``: ``flatten_for_scatter_gather`` and a copy of each input in): n
    small copies issued one by one from the host on every collective, a cost that grows with the ranks at a fixed
    size per GPU.  Flat collectives (FSDP, ``all_gather_into_tensor``, DeepSpeed from v0.5.5) have none."""
    return rank_lists * ranks * K.C10D_RANK_COPY_S


def gather_once_bytes(stage_params: Array, dp_shards: Array, reduce_bytes: Array = 4.0) -> tuple[Array, Array]:
    """FSDP2 under pipeline parallelism (``zero_with_pp = gather_once``): the extra weight and gradient bytes per GPU.

    A pipeline stage's weights are all-gathered once per step, under its first forward, and kept; its gradients
    accumulate unsharded in the reduce dtype and are reduce-scattered once, after the stage's last backward.  In
    time (``_train_step``) that is

        t_dp = AG(2Ψ_stage, N_d) hidden under the first micro-batch's forward + RS(2Ψ_stage, N_d), not overlapped

    instead of ZeRO-3's 2·m gathers of the stage per step (m micro-batches).  In memory, beside the sharded copies
    that ZeRO-3 already counts (2Ψ/N_d of weights and of gradients):

        weights   += 2·Ψ_stage·(1 − 1/N_d)   (ZeRO-3: the unsharded 16-bit copy, held for the step)
        gradients += g_r·Ψ_stage              (the unsharded accumulation buffer; g_r = 4, fp32)

    Sources: PyTorch FSDP2 ``fully_shard`` docs (docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html),
    ``reshard_after_forward``: False keeps the unsharded parameters in memory after forward and avoids the
    all-gather in backward; torchtitan ``torchtitan/parallelisms/parallelize_llama.py`` ``apply_fsdp`` @9dec370a
    ("For PP, do not reshard after forward to avoid per-microbatch all-gathers": ``reshard_after_forward = False``
    when pp is enabled) and ``config_manager.py`` (``mixed_precision_reduce`` = float32); PyTorch
    ``torch/distributed/pipelining/stage.py`` ``backward_maybe_with_nosync`` (FSDP modules get
    ``set_reshard_after_backward(False)`` and ``set_requires_gradient_sync(False)`` on every backward but the
    step's last, whose end calls every FSDP state's ``post_backward``: the reduce-scatter runs after that
    backward); ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py`` ``FSDPParam.to_accumulated_grad_if_needed``
    (the unsharded gradient is kept in ``reduce_dtype``).  Returns (extra weight bytes, extra gradient bytes)."""
    return 2.0 * stage_params * (1.0 - 1.0 / dp_shards), reduce_bytes * stage_params


def _train_step(x: dict[str, Array], modules: bool = False) -> dict[str, Array]:  # noqa: PLR0915 - one formula, read top to bottom
    L, h, a, f, V = x["layers"], x["hidden"], x["heads"], x["ffn_hidden"], x["vocab"]
    E, topk, mlp = x["experts"], x["top_k"], x["mlp"]
    gpus, t, p, d, c, e, v = x["gpus"], x["tp"], x["pp"], x["dp"], x["cp"], x["ep"], x["vpp"]
    b, B, s = x["micro_batch"], x["global_batch"], x["seq_len"]
    zero = x["zero"]
    hw = x
    f64 = x["layers"].dtype.type

    # ---- categorical knobs as float 0/1 masks -----------------------------------------------------------
    full = (x["recompute"] == codes.RECOMPUTE_FULL).astype(f64)
    selective = (x["recompute"] == codes.RECOMPUTE_SELECTIVE).astype(f64)
    op_sac = (x["recompute"] == codes.RECOMPUTE_OP).astype(f64)
    standard = (x["attention"] == codes.ATTENTION_STANDARD).astype(f64)
    is_fp8 = (x["precision"] == codes.PRECISION_FP8).astype(f64)
    is_fp4 = (x["precision"] == codes.PRECISION_FP4).astype(f64)
    sp = ((x["sp"] > 0) & (t > 1)).astype(f64)
    # Transformer Engine's userbuffers overlap needs sequence parallelism; without it, only the backward
    # (Megatron's asynchronous input-gradient reduction and sp input re-gather, tp_backward_exposed) can overlap.
    tp_full = ((x["tp_overlap"] == codes.TP_OVERLAP_FULL) & (sp > 0)).astype(f64)
    tp_async = ((x["tp_overlap"] == codes.TP_OVERLAP_BACKWARD)
                | ((x["tp_overlap"] == codes.TP_OVERLAP_FULL) & (sp == 0))).astype(f64)
    dp_overlap = (x["dp_overlap"] > 0).astype(f64)
    pp_overlap = (x["pp_overlap"] > 0).astype(f64)
    moe = (E > 1).astype(f64)
    single = (p <= 1).astype(f64)
    untied = (x["tied_embeddings"] <= 0).astype(f64)
    swiglu = (mlp == codes.MLP_SWIGLU).astype(f64)
    z1, z3 = (zero >= 1).astype(f64), (zero >= 3).astype(f64)
    # FSDP2 under pipeline parallelism (zero_with_pp = gather_once; rows with zero >= 2 and pp > 1 reach the
    # kernel only with it): the weights are gathered once per step and the gradients reduced once, after the
    # step's last backward -- in time a ZeRO-1/2 layout whose reduction is not overlapped; in memory
    # gather_once_bytes.  z3 below is the per-micro-batch ZeRO-3 gather.
    once = ((zero >= 2) & (p > 1) & (x["zero_with_pp"] == codes.ZERO_WITH_PP_GATHER_ONCE)).astype(f64)
    z3 = z3 * (1.0 - once)
    peft = (x["finetune"] >= codes.FINETUNE_LORA).astype(f64)  # adapters on frozen weights
    qlora = (x["finetune"] == codes.FINETUNE_QLORA).astype(f64)
    prefetch = (x["zero3_fetch"] == 0).astype(f64)
    adam16 = (x["optimizer"] == codes.OPTIMIZER_16BIT).astype(f64)
    # bytes of a trainable parameter over 2: fp32 LoRA adapters (adapter_precision) hold, send and update twice
    # the bytes of 16-bit ones
    tw = 1.0 + peft * (x["adapter_precision"] >= 1).astype(f64)
    eager = (x["kernels"] == codes.KERNELS_EAGER).astype(f64)
    gib = (x["memory_report"] >= 1).astype(f64)  # GiB: "gib" (allocated) and "gib_in_use" (device memory in use)
    in_use = (x["memory_report"] == codes.MEMORY_REPORT_IN_USE).astype(f64)
    off_opt = (x["offload"] >= 1).astype(f64)
    off_all = (x["offload"] >= 2).astype(f64)
    # Whole-batch switches: the fine-tuning and offload terms are computed only when some row of this call
    # uses them (a masked term is exactly the alternative where its mask is 0, so skipping it when the mask is
    # 0 everywhere changes no value; it saves a quarter of the kernel's time on pre-training sweeps).
    any_peft, any_qlora = bool(peft.any()), bool(qlora.any())
    any_offload, any_stream = bool(off_opt.any()), bool(off_all.any())
    any_eager = bool(eager.any())

    # ---- shapes: the mean layer of the model record (dse.cost.architecture) ------------------------------
    kk = 1.0 + moe * (topk - 1.0)  # expert visits per token
    rec = layer_record(x)
    kvw = rec["kv_train"] / 2.0  # K (or V) values per token (g·d; MLA's up-projected a·(nope + rope) and a·v)
    n_mlp = rec["n_mlp"]
    phi = rec["moe_frac"]  # share of layers with routed experts
    et = np.where(x["etp"] > 0, x["etp"], t)  # expert tensor parallel (empty: tp)
    any_moe, any_mla, any_mtp = bool((phi > 0).any()), bool(mla_mask(x).any()), bool((x["mtp"] > 0).any())
    ffn_tok = rec["ffn_dense"] + phi * kk * rec["ffn_moe"]  # FFN width one token passes through, mean layer
    imbalance = np.maximum(x["moe_imbalance"], 1.0)  # the busiest expert GPU's routed tokens over the mean
    m = B / (d * b)  # micro-batches per step
    T = b * s / c  # tokens per GPU per micro-batch
    resid = T * h / (1.0 + sp * (t - 1.0))  # residual-stream elements per GPU
    if STAGE_SPLIT[0] in x:  # train_step's reason check has split the layers already
        L_first, L_mid, L_last = (x[k] for k in STAGE_SPLIT)
    else:
        L_first, L_mid, L_last = stage_layers_split(L, p, v, x["pipeline_split"], x["layers_first_stage"],
                                                    x["layers_last_stage"], x["mtp"])
    D = hw["scaleup_gpus"]

    # ---- rates ------------------------------------------------------------------------------------------
    peak, mm_rate = matmul_rates(is_fp8, is_fp4, hw)
    rate16 = hw["matmul_fp16_rate"]
    mem_rate = hw["memory_rate"]
    ob = operand_bytes(is_fp8, is_fp4)

    # ---- GEMMs of one layer, forward (backward = dgrad + wgrad, each the forward's shape) ---------------
    shapes = layer_gemms(T, h, rec, t, et, kk, ob, E / e)
    n_qkv = shapes[0][1]
    # attention in, attention out, dense FFN in and out (kept apart for dse explain's module table)
    qkv_gemm, out_gemm, fc1_gemm, fc2_gemm = (
        share * roofline_time(gemm_flops(gm, gn, gk), gemm_bytes(gm, gn, gk, ob, w, 2.0), mm_rate, mem_rate)
        for gm, gn, gk, w, share in shapes[:4])
    gemm_fwd = qkv_gemm + out_gemm + fc1_gemm + fc2_gemm
    routed_gemm: Array | float = 0.0
    up_gemm: Array | float = 0.0
    # the routed experts and MLA's up projections, computed on the rows that have them (a sweep mixes models)
    if any_moe:
        def routed(sub: Any) -> Array:
            out = 0.0
            for gm, gn, gk, w, share in shapes[4:]:
                out = out + sub(share) * roofline_time(gemm_flops(sub(gm), sub(gn), sub(gk)),
                                                       gemm_bytes(sub(gm), sub(gn), sub(gk), sub(ob), sub(w), 2.0),
                                                       sub(mm_rate), sub(mem_rate))
            return out
        # the GPU with the most tokens routed to its experts paces the layer (moe_imbalance: its load over the
        # mean, 1 = balanced; the all-to-all below too)
        routed_gemm = on_rows(phi > 0, lambda sub: sub(imbalance) * routed(sub), T)
        gemm_fwd = gemm_fwd + routed_gemm
    if any_mla:
        def up(sub: Any) -> Array:
            flops, moved = mla_up_projection(sub(T), {k: sub(v) for k, v in rec.items()}, sub(t), sub(ob))
            return roofline_time(flops, moved, sub(mm_rate), sub(mem_rate))
        up_gemm = on_rows(mla_mask(x) > 0, up, T)
        gemm_fwd = gemm_fwd + up_gemm
    router_gemm = phi * gemm_flops(T, E, h) / rate16
    gemm_fwd = gemm_fwd + router_gemm
    # ---- parameters of the mean layer held per GPU -------------------------------------------------------
    p_attn = (h * rec["attn_in"] + rec["up_params"] + rec["o_width"] * h) / t + h * rec["attn_rep"]
    p_expert_layer = phi * (E / e) * rec["expert_params"] / et
    p_router = phi * h * E
    p_layer = p_attn + n_mlp * h * rec["ffn_dense"] / t + p_expert_layer + p_router
    # ---- LoRA / QLoRA: rank-r adapters B·A on the target projections (Hu et al. 2021) -----------------
    # An adapter on a d_in×d_out weight holds r·(d_in + d_out) parameters and costs 2·r·(d_in + d_out) FLOPs
    # per token forward.  The frozen weights need no weight gradient: their backward is the input-gradient
    # GEMM only, half of full training's.
    r = x["lora_rank"]
    targets = x["lora_targets"]
    adapter_layer: Array | float = 0.0
    adapter_fwd: Array | float = 0.0
    dequant: Array | float = 0.0
    if any_peft:
        # Fused projections (Megatron/NeMo: linear_qkv, linear_fc1 = gate + up) carry one adapter each, whose
        # lora_A reads h once; HF's modules (kernels = eager) are separate q, k, v and gate, up Linears, each with
        # its own r x h lora_A: 2h more per layer in the attention (k and v beside q; not for MLA) and
        # (matrices - 2)·h more in the SwiGLU MLP (huggingface/transformers modeling_llama.py LlamaAttention,
        # LlamaMLP; PEFT lora.Linear wraps each targeted nn.Linear).  Llama-2-7B at rank 64 on every linear:
        # 32 · 64 · (4·8192 + 3·15104) = 159,907,840 trainable parameters.
        separate = eager * (1.0 - mla_mask(x))
        attn_io = pick(mask(targets == 2, h), (h + rec["q_width"]) + (h + kvw),
                       (h + rec["attn_in"]) + (rec["o_width"] + h) + separate * 2.0 * h)
        is_all = (targets == 0).astype(f64)
        mlp_io = is_all * ((h + (n_mlp - 1.0) * rec["ffn_dense"]) + (rec["ffn_dense"] + h)
                           + eager * (n_mlp - 2.0) * h)
        moe_io = is_all * phi * ((h + (n_mlp - 1.0) * rec["ffn_moe"]) + (rec["ffn_moe"] + h)
                                 + eager * (n_mlp - 2.0) * h)
        adapter_layer = r * (attn_io + mlp_io + moe_io * E / e) / t  # parameters per GPU, layer
        adapter_fwd = peft * gemm_flops(T, r, attn_io + mlp_io + moe_io * kk) / t / mm_rate
        if any_qlora:
            # per use of the weights, at the dequantization kernel's fraction of the HBM rate
            dequant = qlora * K.QLORA_DEQUANT_BYTES * p_layer / (mem_rate * K.QLORA_DEQUANT_EFFICIENCY)
        gemm_bwd = pick(peft, gemm_fwd + 2.0 * adapter_fwd + dequant, 2.0 * gemm_fwd)
        wgrad = pick(peft, 2.0 * adapter_fwd, gemm_fwd)
        gemm_fwd = gemm_fwd + adapter_fwd + dequant
    else:
        gemm_bwd, wgrad = 2.0 * gemm_fwd, gemm_fwd

    # ---- attention core ---------------------------------------------------------------------------------
    # Packed sequences (several documents of mean length doc_len in one sequence of s tokens, attention masked
    # per document: cu_seqlens / THD layout in flash attention and cuDNN) attend over doc_len keys per query
    # instead of s; a fused kernel skips the masked blocks, an unfused one still computes the full s x s.
    # Sliding-window layers attend over at most ``sliding_window`` keys (dse.cost.architecture.causal_keys).
    span = attention_span(s, x["doc_len"])
    core = rec["core"]  # a·(d_qk + d_v)/2: h for multi-head attention
    keys = causal_keys(span, rec["window"], rec["full_frac"], K.CAUSAL_FRACTION, rec["chunk"])
    # cuDNN's fused flash attention (attention = cudnn) runs the flash path at its own rate (attention_fused_rate)
    cudnn = (x["attention"] == codes.ATTENTION_CUDNN).astype(f64)
    flash_fwd = 4.0 * b * (s / c) * keys * core / t / pick(cudnn, hw["attention_fused_rate"], hw["attention_rate"])
    scores = b * (a / t) * s * s
    std_fwd = 4.0 * b * s * s * core / t / rate16 + K.STANDARD_ATTENTION_FWD_BYTES * scores / mem_rate
    std_bwd = 8.0 * b * s * s * core / t / rate16 + K.STANDARD_ATTENTION_BWD_BYTES * scores / mem_rate
    if any_eager:  # HF's unfused attention: two batched matmuls at their own rate and the eager softmax chain
        bmm = eager_bmm_time(b, a / t, s, rec["head_dim"], hw["tensor_fp16_flops"] * K.EAGER_BMM_EFFICIENCY)
        std_fwd = pick(eager, bmm + eager_score_bytes(scores, backward=False) / mem_rate, std_fwd)
        std_bwd = pick(eager, 2.0 * bmm + eager_score_bytes(scores, backward=True) / mem_rate, std_bwd)
    attn_fwd = pick(standard, std_fwd, flash_fwd)
    attn_bwd = pick(standard, std_bwd, K.FLASH_BACKWARD_FLOP_RATIO * flash_fwd)

    # ---- memory-bound element-wise kernels --------------------------------------------------------------
    act_elems = T * ffn_tok / t
    act_fwd_bytes = pick(swiglu, K.ACTIVATION_FWD_BYTES_SWIGLU, K.ACTIVATION_FWD_BYTES_2MAT)
    act_bwd_bytes = pick(swiglu, K.ACTIVATION_BWD_BYTES_SWIGLU, K.ACTIVATION_BWD_BYTES_2MAT)
    # fp8/fp4: cast-transpose of each GEMM's activation input (forward) and output gradient (backward);
    # NVFP4's quantization (amax, block scales, Hadamard transform, stochastic rounding) costs more per element
    cast = is_fp8 * K.LOW_PRECISION_CAST_BYTES + is_fp4 * K.NVFP4_CAST_BYTES
    # the GEMM inputs quantized, forward: QKV's (h), the output projection's, the dense or shared FFN's (h) and the
    # routed experts' (their k routed copies of each token, k·h), and FC2's; backward, the output gradients of
    # the same GEMMs (a dense model: 2h each way, as before the routed copies were counted)
    ffn_in = mask(rec["ffn_dense"] > 0, h) * h + phi * kk * h
    cast_fwd = cast * T * (h + ffn_in + rec["o_width"] / t + ffn_tok / t)
    cast_bwd = cast * T * (n_qkv + h + ffn_in + (n_mlp - 1.0) * ffn_tok / t)
    # the MoE layers' token permutation into expert order and back (routed copies per GPU: phi·k per token)
    permute_fwd = phi * resid * (K.MOE_PERMUTE_FWD_BYTES * kk + K.MOE_PERMUTE_TOKEN_BYTES)
    permute_bwd = phi * resid * (K.MOE_PERMUTE_BWD_BYTES * kk + K.MOE_PERMUTE_TOKEN_BYTES)
    # bytes moved (forward, backward): norms + residual adds + dropout, the MLP activation, the low-precision casts
    ew_moved = ((K.RESIDUAL_FWD_BYTES * resid, act_fwd_bytes * act_elems + permute_fwd, cast_fwd),
                (K.RESIDUAL_BWD_BYTES * resid, act_bwd_bytes * act_elems + permute_bwd, cast_bwd))
    ew_fwd = (ew_moved[0][0] + ew_moved[0][1] + ew_moved[0][2]) / mem_rate
    ew_bwd = (ew_moved[1][0] + ew_moved[1][1] + ew_moved[1][2]) / mem_rate
    if any_eager:  # eager PyTorch modules: every operation its own kernel (dse.cost.eager)
        qk = T * (rec["q_width"] + kvw) / t
        kvw_t = T * kvw / t  # elements of v
        adapted = peft * adapted_modules(x["lora_targets"], n_mlp)
        adapter_out = peft * adapted_outputs(x["lora_targets"], h, rec["q_width"], kvw, f, n_mlp) * T / t
        eager_fwd = ((eager_elementwise_bytes(resid, qk, kvw_t, act_elems, swiglu, backward=False)
                      + PEFT_ADAPTER_BYTES[0] * adapter_out) / mem_rate
                     + eager_kernels(standard, adapted, backward=False) * K.EAGER_KERNEL_S)
        eager_bwd = ((eager_elementwise_bytes(resid, qk, kvw_t, act_elems, swiglu, backward=True)
                      + PEFT_ADAPTER_BYTES[1] * adapter_out) / mem_rate
                     + eager_kernels(standard, adapted, backward=True) * K.EAGER_KERNEL_S)
        ew_fwd = pick(eager, eager_fwd, ew_fwd)
        ew_bwd = pick(eager, eager_bwd, ew_bwd)

    fwd_compute = gemm_fwd + attn_fwd + ew_fwd
    # gradient copies on the compute stream: DDP's buckets, or DeepSpeed ZeRO-1/2's
    trainable_layer = pick(peft, adapter_layer, p_layer)  # the layer's parameters the optimizer updates
    grad_copy = ddp_copy_time(x["dp_reduce"], zero, d * c, tw, trainable_layer, mem_rate)
    grad_copy = grad_copy + zero12_bucket_copy_time(x["dp_reduce"], zero, d * c, dp_overlap, off_opt, m, tw,
                                                    trainable_layer, mem_rate)
    bwd_compute = gemm_bwd + attn_bwd + ew_bwd + grad_copy

    # ---- tensor parallel communication ------------------------------------------------------------------
    S = tp_activation_bytes(T, h)
    tp_links = group_links(np.ones_like(t), t, hw)
    ar = allreduce_time(S, t, tp_links)
    ag = allgather_time(S, t, tp_links)
    rs = ag  # same volume and links as the all-gather
    tp_fwd_comm = pick(sp, 2.0 * (ag + rs), 2.0 * ar)
    dgrad_reduce = pick(sp, 2.0 * rs, 2.0 * ar)  # input-gradient reduction of the column-parallel GEMMs
    grad_gather = sp * 2.0 * ag  # sp: gathers of the row-parallel GEMMs' output gradients
    regather = sp * 2.0 * ag  # sp: re-gather of the column-parallel GEMMs' inputs for their wgrad
    tp_fwd = overlapped_exposed(tp_fwd_comm - tp_full * np.minimum(tp_fwd_comm, gemm_fwd), tp_full * tp_fwd_comm)
    tp_bwd_none = dgrad_reduce + grad_gather + regather
    tp_bwd = pick(tp_full, overlapped_exposed(tp_bwd_none - np.minimum(tp_bwd_none, gemm_bwd), tp_bwd_none),
                  tp_backward_exposed(grad_gather, regather, dgrad_reduce, gemm_bwd - wgrad, wgrad, tp_async))

    # ---- context parallel: ring exchange of K,V hidden under attention ----------------------------------
    cp_cross = spans_domains(t, c, D)
    cp_step = p2p_time(cp_kv_chunk_bytes(b, s, c, kvw, t), cp_cross, hw)
    cp_fwd = overlapped_exposed(np.maximum((c - 1.0) * cp_step - attn_fwd, 0.0), (c - 1.0) * cp_step)
    cp_bwd = overlapped_exposed(np.maximum(2.0 * (c - 1.0) * cp_step - attn_bwd, 0.0), 2.0 * (c - 1.0) * cp_step)
    # PyTorch's context_parallel with the all-gather rotater (torchtitan): K,V gathered once per pass, under the
    # local block only; the KV gradients around a ring in fp32.  torchtitan's Llama repeats the KV heads before
    # SDPA (models/llama/model.py repeat_kv @9dec370a), so the chunks are a·d wide, not g·d.
    cp_ag = (c > 1) * (x["cp_exchange"] == codes.CP_EXCHANGE_ALLGATHER).astype(f64)
    if bool(cp_ag.any()):
        kv_chunk = cp_kv_chunk_bytes(b, s, c, rec["q_width"], t)
        kv_gather = allgather_time(c * kv_chunk, c, group_links(t, c, hw))
        # plus the ring's own element-wise kernels on the compute stream: the fp32 merges of the partial outputs
        # and the fp32 accumulation of the gradients (memory-bound, E = elements of the local Q chunk)
        chunk_elems = b * (s / c) * rec["q_width"] / t
        ag_fwd = (overlapped_exposed(cp_allgather_exposed(kv_gather, attn_fwd, c), kv_gather)
                  + cp_ring_forward_bytes(chunk_elems, c) / mem_rate)
        ag_bwd = (overlapped_exposed(cp_allgather_exposed(kv_gather, attn_bwd, c), kv_gather)
                  + cp_grad_ring_exposed(p2p_time(2.0 * kv_chunk, cp_cross, hw), attn_bwd, c)
                  + cp_ring_backward_bytes(chunk_elems, c) / mem_rate)
        cp_fwd = pick(cp_ag, ag_fwd, cp_fwd)
        cp_bwd = pick(cp_ag, ag_bwd, cp_bwd)

    # ---- expert parallel: dispatch + combine all-to-all, forward and backward ---------------------------
    ep_fwd = phi * 2.0 * alltoall_time(imbalance * ep_dispatch_bytes(T, h, kk, t, sp), t * c, e, hw)
    # DeepEP (ep_dispatch = deepep): a token crosses the NIC once per destination node, then NVLink
    deepep = moe * (x["ep_dispatch"] == codes.EP_DISPATCH_DEEPEP).astype(f64)
    if bool(deepep.any()):
        deepep_fwd = phi * 2.0 * deepep_dispatch_time(imbalance * ep_dispatch_bytes(T, h, 1.0, t, sp), E, kk,
                                                      t * c, e, hw)
        ep_fwd = pick(deepep, deepep_fwd, ep_fwd)
    ep_bwd = ep_fwd

    # ---- recomputation ----------------------------------------------------------------------------------
    op_share = op_recompute_share(rec["q_width"], kvw, rec["o_width"], ffn_tok, n_mlp)
    recompute = full * fwd_compute + selective * attn_fwd + op_sac * (op_share * gemm_fwd + ew_fwd)
    layer_tp = tp_fwd + tp_bwd + full * tp_fwd
    layer_cp = cp_fwd + cp_bwd + full * cp_fwd
    layer_ep = ep_fwd + ep_bwd + full * ep_fwd
    # Megatron-core's combined 1F1B (ep_overlap = 1f1b): one micro-batch's all-to-alls under another's compute;
    # the forward and backward parts shrink in proportion (full recomputation is a reason row with it)
    ep_ov = moe * (x["ep_overlap"] == codes.EP_OVERLAP_1F1B).astype(f64)
    if bool(ep_ov.any()):
        # the layer's MLP node (experts, shared expert, activation) and the rest (attention node)
        mlp_gemm = fc1_gemm + fc2_gemm + routed_gemm
        mlp_fwd = mlp_gemm + ew_moved[0][1] / mem_rate
        mlp_dgrad = mlp_gemm + ew_moved[1][1] / mem_rate
        ep_exposed = ep_overlap_exposed(ep_fwd, ep_bwd, np.maximum(fwd_compute - mlp_fwd, 0.0), mlp_fwd,
                                        np.maximum(bwd_compute + recompute - mlp_dgrad - mlp_gemm, 0.0),
                                        mlp_dgrad, mlp_gemm, combined_1f1b_unpaired_share(m, p, v))
        ep_share = pick(ep_ov, ep_exposed / np.maximum(layer_ep, 1e-30), 1.0)
        ep_fwd, ep_bwd, layer_ep = ep_fwd * ep_share, ep_bwd * ep_share, layer_ep * ep_share
    # ---- the host's work in the MoE layers (Megatron-core with Transformer Engine) ------------------------
    # The dropless token dispatcher reads the tokens per expert back to the host each layer (a device-to-host
    # sync), and TE's GroupedLinear runs its experts' GEMMs, casts and transposes expert by expert: the CPU
    # launches work in proportion to the GPU's local experts, and after the sync the GPU waits for it.  A fixed
    # time per local expert, MoE layer and micro-batch (forward 1/3, backward 2/3: one GEMM forward, two
    # backward), fitted on Megatron-Bridge's published MoE runs (constants.MOE_HOST_S_PER_LOCAL_EXPERT).
    # One grouped-GEMM kernel per projection (moe_gemm = grouped: grouped_gemm's ops.gmm) launches nothing per expert.
    per_expert = (x["moe_gemm"] != codes.MOE_GEMM_GROUPED).astype(f64)
    host_fwd = per_expert * phi * (E / e) * K.MOE_HOST_S_PER_LOCAL_EXPERT / 3.0
    layer_host = host_fwd * (3.0 + full)  # full recomputation runs the forward again
    layer_compute = fwd_compute + bwd_compute
    layer_time = layer_compute + recompute + layer_tp + layer_cp + layer_ep + layer_host

    # ---- stage extras: embedding (first), final norm + logits + loss (last) -----------------------------
    first_extra = K.EMBEDDING_BYTES * T * h / mem_rate
    logits_gemm = roofline_time(gemm_flops(T, V / t, h), gemm_bytes(T, V / t, h, 2.0, 2.0, 2.0), rate16,
                                mem_rate)
    last_extra = (3.0 * logits_gemm + (K.CROSS_ENTROPY_BYTES * T * V / t + (4.0 + 6.0) * resid) / mem_rate)
    if any_mtp:  # DeepSeek-V3 §2.2: each module a block, a 2h -> h projection, the shared head and its own loss
        mtp_proj = roofline_time(gemm_flops(T, h, 2.0 * h / t), gemm_bytes(T, h, 2.0 * h / t, ob, ob, 2.0), mm_rate,
                                 mem_rate)
        last_extra = last_extra + x["mtp"] * (layer_time + 3.0 * mtp_proj + last_extra)
    # the slowest pipeline rank paces the steady state: the first (embedding), the last (logits, loss) or,
    # with an uneven split, a middle one
    t_first = L_first * layer_time + first_extra + single * last_extra
    t_last = L_last * layer_time + last_extra + single * first_extra
    t_mid = (p > 2) * L_mid * layer_time
    mid_slowest = ((t_mid > t_first) & (t_mid > t_last)).astype(f64)
    lps = pick(mid_slowest, L_mid, pick((t_first >= t_last).astype(f64), L_first, L_last))  # its layers
    stage_layers = lps * layer_time
    extra_slowest = np.maximum(np.maximum(t_first, t_last), t_mid) - stage_layers

    # ---- pipeline point-to-point ------------------------------------------------------------------------
    pp_cross = spans_domains(t * c * d, p, D)
    p2p_mb = (p > 1) * (2.0 * v * p2p_time(pp_activation_bytes(b, s, c, h, t), pp_cross, hw))
    stage_compute = lps * (layer_compute + recompute)
    pp_exposed = overlapped_exposed(p2p_mb - pp_overlap * np.minimum(p2p_mb, stage_compute), pp_overlap * p2p_mb)

    t_mb_slowest = stage_layers + extra_slowest + pp_exposed
    t_mb_mean = (L * layer_time + first_extra + last_extra) / p + pp_exposed
    t_pipe = pipeline_time(m, p, v, t_mb_slowest, t_mb_mean)
    bubble = pipeline_bubble_time(p, v, t_mb_mean)

    # ---- parameters held per GPU (the mean layer's p_layer above) --------------------------------------
    p_embed = V * h / t
    # With pp > 1 the first stage holds the embedding and the last the output layer (a copy when tied):
    # one V·h/t matrix each.  With pp = 1 the only stage holds 1 (tied) or 2 (untied).
    # The fullest rank's parameters set the weight, gradient and optimizer memory (with an uneven split it
    # may be a middle rank); its layer count is lpm.
    p_first = L_first * p_layer + p_embed * (1.0 + single * untied)
    p_last = L_last * p_layer + p_embed
    mtp_experts = 0.0 * p_last  # the MTP modules' routed experts on a GPU of the last rank
    if any_mtp:  # the MTP modules live with the output head, their routed experts split over ep·etp like the others
        mtp_experts = x["mtp"] * mask(E > 1, E) * E * rec["expert_params"] / (e * et)
        p_mtp = (mtp_params(rec, h, E, x["mtp"]) - mtp_experts * e * et) / t + mtp_experts
        p_last = p_last + p_mtp
        p_first = p_first + single * p_mtp
    p_mid = (p > 2) * L_mid * p_layer
    mid_fullest = ((p_mid > p_first) & (p_mid > p_last)).astype(f64)
    first_holds_more = ((p_first >= p_last) | (p <= 1)).astype(f64)  # the first rank holds the most, or is the only
    lpm = pick(mid_fullest, L_mid, pick(first_holds_more, L_first, L_last))
    p_stage = np.maximum(np.maximum(p_first, (1.0 - single) * p_last), p_mid)
    last_fullest = (1.0 - mid_fullest) * (1.0 - first_holds_more)
    p_expert = lpm * p_expert_layer + (last_fullest + single) * mtp_experts
    p_dense = p_stage - p_expert
    # what the optimizer updates: every weight, or (LoRA / QLoRA) only the adapters, all synced as dense
    # bytes of the weights a GPU holds: 16-bit, or QLoRA's 4-bit layers with 16-bit embeddings and adapters
    if any_peft:
        p_adapters = lpm * adapter_layer
        p_train = pick(peft, p_adapters, p_stage)
        p_dense_train = pick(peft, p_adapters, p_dense)
        p_expert_train = (1.0 - peft) * p_expert
        weight_stage_bytes = 2.0 * p_stage + peft * 2.0 * tw * p_adapters
        if any_qlora:
            weight_stage_bytes = pick(qlora, K.QLORA_WEIGHT_BYTES * lpm * p_layer + 2.0 * (p_stage - lpm * p_layer),
                                      2.0 * p_stage) + peft * 2.0 * tw * p_adapters
    else:
        p_train, p_dense_train, p_expert_train = p_stage, p_dense, p_expert
        weight_stage_bytes = 2.0 * p_stage

    # ---- data parallel synchronisation and optimizer ----------------------------------------------------
    dpc = d * c
    edp = t * dpc / (e * et)
    dense_links = group_links(t, dpc, hw)
    expert_links = group_links(et * e, edp, hw)  # expert-data-parallel ranks: tp·dp·cp/(ep·etp), past the ep·etp
    g_dense, g_expert = GRAD_COMM_BYTES * tw * p_dense_train, GRAD_COMM_BYTES * p_expert_train
    grad_sync = pick(
        z1,
        reduce_scatter_time(g_dense, dpc, dense_links) + reduce_scatter_time(g_expert, edp, expert_links),
        allreduce_time(g_dense, dpc, dense_links) + allreduce_time(g_expert, edp, expert_links),
    )
    # DeepSpeed's ZeRO-1/2 reduction: a dist.reduce per destination rank and hidden²-element bucket, each paying
    # a ring collective's start-up (dp_reduce = reduce_per_rank)
    per_rank = z1 * (1.0 - z3) * (x["dp_reduce"] == codes.DP_REDUCE_PER_RANK).astype(f64)
    grad_sync = grad_sync + per_rank * dpc * np.ceil(p_train / (h * h)) * ring_latency(t, dpc, D)
    param_gather = z1 * (allgather_time(2.0 * tw * p_dense_train, dpc, dense_links)
                         + allgather_time(2.0 * p_expert_train, edp, expert_links))
    # ZeRO-3 gathers every held weight (trainable or frozen) for each micro-batch's forward and backward; FSDP
    # shards the routed experts over their expert-data-parallel ranks (torchtitan's and Automodel's
    # dp_shard_mod_ep mesh), the rest over dp·cp
    expert_share = p_expert / np.maximum(p_stage, 1.0)
    weight_gather = z3 * (allgather_time(weight_stage_bytes * (1.0 - expert_share), dpc, dense_links)
                          + allgather_time(weight_stage_bytes * expert_share, edp, expert_links))
    bwd_window = lps * (bwd_compute + recompute)
    fwd_window = lps * fwd_compute
    # the distributed optimizer shards each parameter over the ranks that hold a copy of it: dense ones over
    # dp·cp, routed experts over the expert-data-parallel group (Megatron-core keeps the expert parameters in
    # their own buffers, reduced and sharded over expert_data_parallel_group: core/distributed/
    # distributed_data_parallel.py, core/optimizer/distrib_optimizer.py)
    opt_params = p_dense_train / (1.0 + z1 * (dpc - 1.0)) + p_expert_train / (1.0 + z1 * (edp - 1.0))
    is_fp16 = (x["precision"] == codes.PRECISION_FP16).astype(f64)
    adam_bytes = K.ADAM_BYTES_PER_PARAM + is_fp16 * K.LOSS_SCALING_BYTES_PER_PARAM
    t_opt_gpu = opt_params * pick(adam16, tw * K.ADAM_16BIT_BYTES_PER_PARAM, adam_bytes) / mem_rate

    # ---- CPU offload (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity, Rajbhandari et al. 2021) --------------
    # optimizer: gradients go to the CPU under the last backward, the CPU runs Adam, updated 16-bit weights
    # come back before the next forward.  all: the weights also live on the CPU and are streamed in for every
    # micro-batch's forward and backward, prefetched under the compute.
    host = hw["host_bw"]

    # ---- what the compute hides -----------------------------------------------------------------------
    # Per micro-batch, transfers on different links (NIC for data-parallel sync, PCIe for offload) proceed at
    # once behind that micro-batch's compute: the longest sets the exposed time.  ZeRO-1/2's parameter
    # all-gather hides under the first forward, the gradient reduction under the last backward (ZeRO-3:
    # its gathers under every micro-batch).  Without dp_overlap the data-parallel transfers are serial.
    z12 = z1 * (1.0 - z3)  # ZeRO-1/2, and gather_once: parameters gathered under the first forward
    # ZeRO-3: forward and backward of one micro-batch.  Fetched on demand (DeepSpeed), a gathered parameter is
    # released after its submodule runs unless it is reused within stage3_max_reuse_distance parameters
    # (zero3_reused_share): the forward's last R/2 parameters stay gathered into the backward, and full
    # recomputation's second forward of a layer is followed at once by that layer's backward, which re-gathers
    # only what lies farther than R from its recomputed use (none while a layer holds under R/2 parameters).
    passes = 2.0 + (1.0 - prefetch) * (full * zero3_regathered_share(p_layer) - zero3_reused_share(p_stage))
    # each pass issues one ring collective per parameter tensor (on_demand) or per layer (prefetch), and the
    # backward as many gradient reduce-scatters: their start-up latency grows with the ranks (NCCL's model)
    per_layer = pick(prefetch, K.ZERO3_COLLECTIVES_PER_LAYER_PREFETCH, K.ZERO3_COLLECTIVES_PER_LAYER_ON_DEMAND)
    if any_peft:  # on demand, LoRA adapters above the persistence threshold are fetched one by one too
        kept = mask(x["lora_rank"] * h < K.ZERO3_PERSISTENCE_THRESHOLD, h)
        per_layer = per_layer + (1.0 - prefetch) * peft * (1.0 - kept) * 2.0 * adapted_modules(x["lora_targets"],
                                                                                              n_mlp)
    # each fetch also pays the framework's own cost on demand (DeepSpeed's partitioned-parameter coordinator)
    fetch_latency = (ring_latency(t, dpc, D) + (1.0 - prefetch) * K.ZERO3_FETCH_OVERHEAD_S
                     + rank_list_copy_time(dpc, (x["zero3_collectives"] >= 1).astype(f64)))
    z3_latency = z3 * (passes + 1.0) * per_layer * lps * fetch_latency
    gathers = passes * weight_gather + z3_latency
    # ZeRO-3 weight gathers hide under compute only when prefetched (zero3_fetch = prefetch); fetched on demand
    # (DeepSpeed 2021: each submodule's all-gather is waited for before it runs) they are serial.
    gathers_hidden = dp_overlap * prefetch * gathers

    def exposed(stream_: Array, d2h_: Array) -> Array:
        regular = np.maximum(0.0, np.maximum(gathers_hidden - stage_compute, stream_ - stage_compute))
        first = np.maximum(regular, dp_overlap * z12 * param_gather - fwd_window)
        # gather_once: the pipeline stage reduce-scatters after its last backward has finished (serial_dp)
        last = np.maximum(dp_overlap * (1.0 - once) * grad_sync + gathers_hidden - pick(z3, stage_compute, bwd_window),
                          d2h_ + stream_ - stage_compute)
        only = np.maximum(np.maximum(first, last), 0.0)
        many = np.maximum(first, 0.0) + np.maximum(m - 2.0, 0.0) * regular + np.maximum(last, 0.0)
        return pick(mask(m <= 1, m), only, many)

    serial_dp = ((1.0 - dp_overlap) * (grad_sync + z12 * param_gather) + (1.0 - dp_overlap * prefetch) * m * gathers
                 + dp_overlap * once * grad_sync)
    # what the overlapped data-parallel collectives take from the compute beside them (overlapped_exposed)
    dp_beside = dp_overlap * ((1.0 - once) * grad_sync + z12 * param_gather) + m * gathers_hidden
    # the input embedding's gradient comes last: its reduction, on the stage that holds it, hides under nothing
    # (overlapped reductions of ZeRO 0-2 and the distributed optimizer; LoRA freezes the embedding):
    # max(ideal exposure, tail + κ·(the rest)): overlapped_exposed with the tail unhidden
    tail = (dp_overlap * (1.0 - once) * (1.0 - z3) * (1.0 - peft) * (1.0 - mid_fullest) * first_holds_more
            * embedding_gradient_tail(grad_sync, p_embed, p_stage))
    hidden_dp = overlapped_exposed(exposed(0.0, 0.0), dp_beside, tail)
    dp_exposed = serial_dp + hidden_dp
    host_state = 0.0 * t_opt_gpu
    if any_offload:
        d2h = off_opt * offload_gradient_bytes(opt_params, (zero >= 3).astype(f64)) / host
        # with the weights on the host too (ZeRO-3 offload_param) the step writes the 16-bit partition into its
        # pinned host buffer (stage3.py param_groups_fp16_flat_cpu_memory): no copy to the GPU in the step
        h2d = off_opt * (1.0 - off_all) * offload_parameter_bytes(opt_params) / host
        cpu_adam = off_opt * cpu_adam_time(opt_params, hw["cpu_adam_rate"])
        # offload all: each micro-batch's forward and backward read the weights from the host (ZeRO-3: the rank's
        # own partition, then the all-gather above; without ZeRO-3 the whole stage's weights)
        stream = off_all * 2.0 * weight_stage_bytes / (1.0 + z3 * (dpc - 1.0)) / host
        offload = cpu_adam + h2d + np.maximum(exposed(stream, d2h) - hidden_dp, 0.0)
        t_opt = (1.0 - off_opt) * t_opt_gpu
        host_state = host_state_bytes(off_opt * opt_params, off_all * weight_stage_bytes / (1.0 + z3 * (dpc - 1.0)))
    else:
        offload, t_opt = 0.0 * t_opt_gpu, t_opt_gpu
        cpu_adam = 0.0 * t_opt_gpu

    step = t_pipe + dp_exposed + t_opt + offload

    # ---- outputs ----------------------------------------------------------------------------------------
    tokens = B * s
    params_total = L * layer_params(rec, h, E) + V * h * (1.0 + untied)
    p_active = active_layer_params(rec, h, E, kk)
    span_w = windowed_span(span, rec["window"], rec["full_frac"], rec["chunk"])
    mflops = model_flops_per_token(L, p_active, span_w, h, V, core=core) * tokens
    if any_mtp:  # each MTP module: a block, its projection, the shared head (forward and backward)
        mtp_active = mtp_params(rec, h, E, 1.0) - mask(E > 1, E) * (E - kk) * rec["expert_params"]
        mflops = mflops + x["mtp"] * model_flops_per_token(1.0, mtp_active, span_w, h, V, core=core) * tokens
    # LoRA / QLoRA execute the forward and the input gradient of the frozen model (2/3 of full training's
    # FLOPs, no weight gradient) plus forward and both gradients of the adapters
    if any_peft:
        adapter_flops = 3.0 * L * gemm_flops(1.0, r, attn_io + mlp_io * kk) * tokens
        mflops = pick(peft, mflops * (2.0 / 3.0) + adapter_flops, mflops)
    hflops = mflops + recompute_flops_per_token(L, p_active, span_w, h, full, selective, core=core,
                                                op_share=op_sac * op_share) * tokens
    gpu_seconds = step * gpus

    out: dict[str, Array] = {
        "step_time_s": step,
        "tokens_per_s": tokens / step,
        "tokens_per_s_per_gpu": tokens / gpu_seconds,
        "model_tflops_per_gpu": mflops / gpu_seconds * 1e-12,
        "mfu": mflops / (gpu_seconds * peak),
        "hfu": hflops / (gpu_seconds * peak),
        "layer_time_ms": layer_time * 1e3,
        "layer_fwd_ms": (fwd_compute + tp_fwd + cp_fwd + ep_fwd + host_fwd) * 1e3,
        "layer_bwd_ms": (bwd_compute + recompute + tp_bwd + cp_bwd + ep_bwd + full * (tp_fwd + cp_fwd + ep_fwd)
                         + layer_host - host_fwd)
        * 1e3,
        "layer_gemm_ms": (gemm_fwd + gemm_bwd) * 1e3,
        "layer_attention_ms": (attn_fwd + attn_bwd) * 1e3,
        "layer_elementwise_ms": (ew_fwd + ew_bwd + grad_copy) * 1e3,
        "layer_recompute_ms": recompute * 1e3,
        "layer_tp_comm_ms": layer_tp * 1e3,
        "layer_cp_comm_ms": layer_cp * 1e3,
        "layer_ep_comm_ms": layer_ep * 1e3,
        "layer_host_ms": layer_host * 1e3,
        "microbatches": m,
        # the gradient bucket copies are data-parallel synchronisation done on the compute stream (not overlapped)
        "time_compute_s": m * (lps * (layer_compute - grad_copy) + extra_slowest),
        "time_recompute_s": m * lps * recompute,
        "time_tp_comm_s": m * lps * layer_tp,
        "time_cp_comm_s": m * lps * layer_cp,
        "time_ep_comm_s": m * lps * layer_ep,
        "time_host_s": m * lps * layer_host,
        "time_pp_comm_s": m * pp_exposed,
        "time_bubble_s": bubble,
        "time_dp_comm_s": dp_exposed + m * lps * grad_copy,
        "time_optimizer_s": t_opt,
        "time_offload_s": offload,
        "params_total": params_total,
        "params_per_gpu": p_stage,
        "params_trainable": pick(peft, L * adapter_layer * t, params_total) if any_peft else params_total,
        # every GPU drawing its rated power for the whole step (ASSUMPTION: an upper bound; host, network
        # and cooling not included)
        "energy_per_step_j": gpu_seconds * hw["tdp_w"],
        "energy_per_token_j": gpu_seconds * hw["tdp_w"] / tokens,
    }

    # ---- memory of the first and the last pipeline stage; the larger one is reported --------------------
    kept, scores, _ = layer_activation_terms(T, b, s, h, a, kvw, ffn_tok, mlp, 1.0, t, sp, standard, ob,
                                             q_width=rec["q_width"], o_width=rec["o_width"], latent=rec["attn_rep"])
    if any_eager:  # HF's eager modules save more than the fused ones (dse.cost.eager.eager_activation_terms)
        kept_e, scores_e = eager_activation_terms(T, b, s, a, h, rec["q_width"], kvw, rec["o_width"], ffn_tok,
                                                  swiglu, t, standard, peft, qlora)
        # not under op-level checkpointing, which recomputes the element-wise ops (their copies are not kept)
        hf = eager * (1.0 - op_sac)
        kept, scores = pick(hf, kept_e, kept), pick(hf, scores_e, scores)
    sel_mem = selective + op_sac
    if any_peft:  # the adapters' input copies in their dtype (memory.adapter_input_bytes)
        kept = kept + peft * adapter_input_bytes(T, h, rec["o_width"], ffn_tok, n_mlp, x["lora_targets"], t,
                                                 4.0 * (tw - 1.0))
    act_layer = pick(full, 2.0 * resid, kept + (1.0 - sel_mem) * scores)  # memory.activation_bytes_per_layer
    op_kept = 0.0
    if op_sac.any():  # torchtitan's op-level policy keeps the outputs it saves, not selective's set
        op_kept = op_sac_kept_bytes(T, h, rec["q_width"], kvw, rec["o_width"], ffn_tok, n_mlp, kk, a, t, sp)
        act_layer = pick(op_sac, op_kept, act_layer)
    # The layer being back-propagated rebuilds what recomputation dropped: its s×s attention tensors
    # (selective), all its activations on top of its stored input (full), or what op-level checkpointing did
    # not save (op).
    act_transient = (selective * scores + full * (kept + scores - 2.0 * resid)
                     + op_sac * np.maximum(kept + scores - op_kept, 0.0))
    logits = logits_bytes(T, V, t, loss_bytes_per_logit(x["cross_entropy"]))
    # per rank: the chunk·micro-batches in flight times its layers; first, second (the fullest middle rank) and
    # last.  Taken with the fullest rank's parameters: an upper bound when they are different ranks.
    act_first = inflight_chunk_microbatches(m, p, v, 0.0) * L_first * act_layer + act_transient + single * logits
    act_mid = (p > 2) * (inflight_chunk_microbatches(m, p, v, 1.0) * L_mid * act_layer + act_transient)
    act_last = (inflight_chunk_microbatches(m, p, v, p - 1.0) * (L_last + x["mtp"]) * act_layer + act_transient
                + logits * (1.0 + x["mtp"]))
    act = np.maximum(np.maximum(act_first, act_last), act_mid)
    held = weight_stage_bytes / 2.0  # memory.weight_bytes counts 2 bytes each
    weights = dense_and_expert(weight_bytes, held * (1.0 - expert_share), held * expert_share, dpc, edp, zero)
    if any_stream:
        weights = pick(off_all, 2.0 * (weight_stage_bytes / lpm), weights)  # offloaded: two layers on the GPU
    # fp32 LoRA adapters (tw = 2) have fp32 gradients whatever the layout; 16-bit-state Adam keeps their dtype
    grad_per_param, state_per_param = optimizer_layout_bytes(x["optimizer"])
    grad_per = np.maximum(grad_per_param / tw, GRAD_BYTES)
    # routed experts' gradients and states shard over their expert-data-parallel ranks (edp), the rest over dp·cp
    grads = tw * dense_and_expert(gradient_bytes, p_dense_train, p_expert_train, dpc, edp, zero, grad_per)
    state = pick(adam16, tw * state_per_param, state_per_param)
    optim = dense_and_expert(optimizer_bytes, p_dense_train, p_expert_train, dpc, edp, zero, state)
    if any_offload:
        optim = (1.0 - off_opt) * optim
    held_weights = dense_and_expert(lambda w, n: gather_once_bytes(w, n)[0], held * (1.0 - expert_share),
                                    held * expert_share, dpc, edp)
    _, held_grads = gather_once_bytes(p_train, dpc)
    weights = weights + once * (zero >= 3) * held_weights
    grads = grads + once * held_grads
    # ZeRO-3's gathered layers (zero3_gathered_bytes); a stage kept gathered for the step (gather_once) has none
    buffers = K.RUNTIME_RESERVED_BYTES + z3 * (1.0 - once) * zero3_gathered_bytes(p_layer, p_stage,
                                                                                  weight_stage_bytes, prefetch)
    # the peak of the step is that of the forward/backward (activations held) or of the optimizer step (the
    # activations freed, the step's temporaries allocated), whichever is larger; as device memory in use, the
    # caching allocator's high-water mark (memory.phase_peak_bytes)
    step_param = (1.0 - off_opt) * adam16 * tw * OPTIMIZER_TEMP_BYTES[1] * opt_params
    # DeepSpeed's ZeRO optimizer (the stacks' DeepSpeed knobs: dp_reduce = reduce_per_rank, zero3_fetch = on_demand)
    # casts the partition's gradients to fp32 for the step (memory.zero_step_grad_bytes)
    ds_zero = (((x["dp_reduce"] == codes.DP_REDUCE_PER_RANK) | (x["zero3_fetch"] == 1))
               & (x["optimizer"] == codes.OPTIMIZER_MIXED) & (zero >= 1)).astype(f64)
    step_flat = (1.0 - off_opt) * ds_zero * zero_step_grad_bytes(opt_params, 2.0 * tw)
    phase = phase_peak_bytes(act, step_flat, step_param, T, h, in_use)
    total = weights + grads + optim + buffers + phase
    out.update({
        "mem_weights_bytes": weights, "mem_grads_bytes": grads, "mem_optimizer_bytes": optim,
        "mem_activations_bytes": act, "mem_buffers_bytes": buffers,
        "mem_step_extra_bytes": phase - act, "mem_total_bytes": total,
        # in the unit the framework's report calls GB (memory_report): 10^9 bytes, or 2^30 (PyTorch, DeepSpeed)
        "peak_memory_gb": total / pick(gib, 2.0**30, 1e9),
    })

    if modules:  # dse explain: the step's forward and backward by module (MODULES)
        # layer modules, per layer and micro-batch: each GEMM backward twice its forward (frozen: once), the
        # element-wise work where it runs, an eager module's kernels at EAGER_KERNEL_S each, the gradient bucket
        # copies with the module whose parameters they copy
        twice = 2.0 - peft
        mod = {"qkv": qkv_gemm + up_gemm, "output": out_gemm, "mlp": fc1_gemm + fc2_gemm + routed_gemm + router_gemm}
        fwd_m = {**mod, "attention": attn_fwd, "adapters": adapter_fwd + dequant}
        bwd_m = {k: twice * v for k, v in mod.items()}
        bwd_m |= {"attention": attn_bwd, "adapters": 2.0 * adapter_fwd + dequant}
        for phase_m, i in ((fwd_m, 0), (bwd_m, 1)):
            # element-wise bytes: fused kernels' norm + residual + dropout, activation and fp8 casts, or eager's
            moved = {"norm": ew_moved[i][0], "mlp": ew_moved[i][1], "other": ew_moved[i][2], "rope": 0.0 * resid}
            if any_eager:
                parts = eager_module_bytes(resid, qk, kvw_t, act_elems, swiglu, backward=bool(i))
                moved = {k: pick(eager, parts[k], v) for k, v in moved.items()}
                for k, n in eager_module_kernels(standard, backward=bool(i)).items():
                    phase_m[k] = phase_m.get(k, 0.0) + eager * n * K.EAGER_KERNEL_S
                phase_m["adapters"] = phase_m["adapters"] + eager * (PEFT_ADAPTER_BYTES[i] * adapter_out / mem_rate
                                                                     + adapted * PEFT_ADAPTER_KERNELS[i]
                                                                     * K.EAGER_KERNEL_S)
            for k, v in moved.items():
                phase_m[k] = phase_m.get(k, 0.0) + v / mem_rate
        p_out = rec["o_width"] * h / t
        p_qkv = p_attn - p_out  # the layer's attention parameters but the output projection's
        for k, share in (("qkv", p_qkv), ("output", p_out), ("mlp", p_layer - p_qkv - p_out)):
            bwd_m[k] = bwd_m[k] + (1.0 - peft) * grad_copy * share / p_layer
        bwd_m["adapters"] = bwd_m["adapters"] + peft * grad_copy
        n_layers = m * lps
        # the slowest rank's extras: the embedding on the first rank, the output layer and the loss on the last
        first_slowest = (1.0 - mid_slowest) * (t_first >= t_last).astype(f64)
        emb_on = pick(single, 1.0, first_slowest)
        head_on = pick(single, 1.0, (1.0 - mid_slowest) * (1.0 - first_slowest))
        comm_fwd = n_layers * (tp_fwd + cp_fwd + ep_fwd)
        steps = {"embedding": (m * emb_on * first_extra, 0.0 * m)}
        steps |= {k: (n_layers * fwd_m[k], n_layers * bwd_m[k]) for k in MODULES[1:9]}
        steps |= {
            "lm_head": (m * head_on * logits_gemm, m * head_on * 2.0 * logits_gemm),
            "loss": (m * head_on * (last_extra - 3.0 * logits_gemm), 0.0 * m),
            "recompute": (0.0 * m, n_layers * recompute),
            "comm": (comm_fwd, n_layers * (layer_tp + layer_cp + layer_ep) - comm_fwd + m * pp_exposed + dp_exposed),
            "host": (n_layers * host_fwd, n_layers * (layer_host - host_fwd)),
        }
        for k, (fwd_s, bwd_s) in steps.items():
            out[f"module_{k}_fwd_s"] = fwd_s + 0.0 * step
            out[f"module_{k}_bwd_s"] = bwd_s + 0.0 * step
        launches = 0.0 * step
        if any_eager:  # every kernel of an eager layer, forward, backward and a full recomputation's forward
            launches = n_layers * eager * K.EAGER_KERNEL_S * (
                (1.0 + full) * eager_kernels(standard, adapted, backward=False) + eager_kernels(standard, adapted,
                                                                                              backward=True))
        out.update({"detail_kernel_launch_s": launches + 0.0 * step, "detail_grad_copy_s": n_layers * grad_copy,
                    "detail_cpu_adam_s": cpu_adam + 0.0 * step, "detail_offload_copies_s": offload - cpu_adam,
                    # what the loss holds in the reported activations: where the last stage is the peak one
                    "detail_loss_bytes": (act_last >= act) * logits * (1.0 + x["mtp"]) + 0.0 * step})

    # in the kernel's dtype: train_step casts once, to the caller's
    names = TRAIN_METRICS + (MODULE_METRICS + DETAIL_METRICS if modules else ())
    result: dict[str, Array] = {k: out[k] for k in names}
    result["fits"] = total <= hw["hbm_bytes"]
    result["host_fits"] = host_state <= hw["host_mem_bytes"]
    return result


#: Keys under which :func:`train_step` hands the reason check's layer split (first, middle, last rank) to the
#: kernel, so that :func:`dse.cost.pipeline.stage_layers_split` runs once per call.
STAGE_SPLIT = ("_layers_first_rank", "_layers_middle_rank", "_layers_last_rank")


def _infeasible_reason(x: dict[str, Array]) -> tuple[Array, Array, Array, Array]:
    """First failing divisibility / support check as a code into :data:`dse.codes.REASONS` (0 = feasible), and
    the layers of the first, a middle and the last pipeline rank (:func:`dse.cost.pipeline.stage_layers_split`),
    which the checks need and the kernel reuses."""
    L, h, a, g, V = x["layers"], x["hidden"], x["heads"], x["kv_heads"], x["vocab"]
    t, p, d, c, e, v = x["tp"], x["pp"], x["dp"], x["cp"], x["ep"], x["vpp"]
    b, B, s = x["micro_batch"], x["global_batch"], x["seq_len"]
    microbatches = B / (d * b)
    explicit = ~np.isnan(x["layers_first_stage"]) | ~np.isnan(x["layers_last_stage"])
    emb_split = x["pipeline_split"] == codes.PIPELINE_SPLIT_EMBEDDING_LOSS
    first, middle, last = stage_layers_split(L, p, v, x["pipeline_split"], x["layers_first_stage"],
                                             x["layers_last_stage"], x["mtp"])
    first_l, middle_l, last_l = (np.broadcast_to(a, L.shape) for a in (first, middle, last))
    is_fp8 = (x["precision"] == codes.PRECISION_FP8).astype(L.dtype)
    is_fp4 = (x["precision"] == codes.PRECISION_FP4).astype(L.dtype)
    peak, _ = matmul_rates(is_fp8, is_fp4, x)
    sizes = (L, h, a, g, x["ffn_hidden"], V, x["experts"], x["top_k"], x["gpus"], t, p, d, c, e, v, b, B, s)
    smallest, largest = sizes[0], sizes[0]
    for arr in sizes[1:]:
        smallest, largest = np.minimum(smallest, arr), np.maximum(largest, arr)
    etp_set = (x["etp"] > 0) & (x["etp"] != t)  # expert tensor parallel other than tp
    ep_overlap = (x["ep_overlap"] == codes.EP_OVERLAP_1F1B) & (e > 1) & (x["experts"] > 1)
    R = codes.REASON_CODE
    checks = (
        (R["nonpositive_size"], ~(smallest > 0)),
        (R["size above 16777215 (exact-integer domain)"], largest > INT_DOMAIN_MAX),
        (R["unknown_system"], ~(x["tensor_fp16_flops"] > 0)),
        (R["precision_unsupported_by_system"], ~(peak > 0)),
        (R["int8/int4 are weight-only inference formats"], x["precision"] >= codes.PRECISION_INT8),
        (R["tp*pp*cp*dp != gpus"], t * p * c * d != x["gpus"]),
        (R["hidden % heads != 0"], ~divides(a, h) & ~(x["head_dim"] > 0) & ~(mla_mask(x) > 0)),
        (R["heads % kv_heads != 0"], ~divides(g, a)),
        (R["top_k > experts"], x["top_k"] > x["experts"]),
        (R["heads % tp != 0"], ~divides(t, a)),
        (R["kv_heads % tp != 0"], ~divides(t, g)),
        (R["layers % (pp*vpp) != 0"], ~explicit & ~emb_split & ~divides(p * v, L)),
        (R["(layers+2) % (pp*vpp) != 0 (embedding/loss split)"],
         ~explicit & emb_split & ~divides(p * v, L + 2.0 + x["mtp"])),
        (R["first/last stage layers do not fit the pipeline"], explicit & (
            (p <= 1) | (first < 0) | (last < 0) | (middle < 0) | ((p == 2) & (first + last != L)))),
        (R["vpp > 1 needs pp > 1"], (v > 1) & (p <= 1)),
        (R["global_batch % (dp*micro_batch) != 0"], ~divides(d * b, B)),
        (R["microbatches % pp != 0 (interleaved schedule)"], (v > 1) & ~divides(p, microbatches)),
        (R["seq_len % (2*cp) != 0"], (c > 1) & ~divides(2.0 * c, s)),
        (R["cp > 1 needs flash attention"], (c > 1) & (x["attention"] == codes.ATTENTION_STANDARD)),
        (R["experts % ep != 0"], ~divides(e, x["experts"])),
        (R["(dp*cp) % ep != 0"], ~etp_set & ~divides(e, d * c)),
        (R["(tp*cp*dp) % (ep*etp) != 0"], etp_set & ~divides(e * x["etp"], t * c * d)),
        (R["moe_ffn_hidden % etp != 0"], etp_set & ~divides(x["etp"], np.where(x["moe_ffn_hidden"] > 0,
                                                                                x["moe_ffn_hidden"], x["ffn_hidden"]))),
        (R["zero >= 2 with pp > 1 unsupported"], (x["zero"] >= 2) & (p > 1)
         & (x["zero_with_pp"] != codes.ZERO_WITH_PP_GATHER_ONCE)),
        (R["crosses nodes without scale-out network"], ~(x["scaleout_bw"] > 0) & (x["gpus"] > x["scaleup_gpus"])),
        # Megatron-Bridge refuses the combined 1F1B schedule with full recomputation, and without interleaving
        # when pp > 1 (src/megatron/bridge/training/comm_overlap.py); inert without expert parallelism
        (R["ep_overlap with full recompute unsupported"], ep_overlap & (x["recompute"] == codes.RECOMPUTE_FULL)),
        (R["ep_overlap with pp > 1 needs vpp > 1"], ep_overlap & (p > 1) & (v <= 1)),
    )
    # The first failing check wins: walk them from last to first, each writing its code where it fails.
    reason = np.zeros(L.shape, dtype=L.dtype)
    for code, failed in reversed(checks):
        np.copyto(reason, code, where=failed)
    return reason, first_l, middle_l, last_l
