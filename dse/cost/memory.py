"""Memory per GPU: model states (weights, gradients, optimizer) and activations.

Model states follow ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054 §3.1, §5): mixed-precision Adam keeps
2Ψ bytes of 16-bit weights, 2Ψ of 16-bit gradients and KΨ = 12Ψ of fp32 master weights, momentum and
variance.  Stage 1 shards the optimizer states over the N_d data-parallel ranks, stage 2 also the
gradients, stage 3 also the weights:  (2 + 2 + K)Ψ → 2Ψ + 2Ψ + KΨ/N_d → 2Ψ + (2+K)Ψ/N_d → (2+2+K)Ψ/N_d.

Activations follow Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, generalised to GQA, gated FFNs,
MoE, FlashAttention and context parallelism.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dse.codes import MLP_SWIGLU
from dse.cost.select import mask

Array = Any  # numpy arrays or scalars that broadcast (the stubs cannot express broadcasting)

WEIGHT_BYTES = 2.0  #: 16-bit weights (ZeRO §3.1)
GRAD_BYTES = 2.0  #: 16-bit gradients (ZeRO §3.1)
OPTIMIZER_BYTES = 12.0  #: fp32 master weights + Adam momentum + variance, K = 12 (ZeRO §3.1)


def weight_bytes(params: Array, dp_shards: Array, zero: Array) -> Array:
    """16-bit weights, sharded over the data-parallel ranks at ZeRO-3: 2Ψ / (N_d if zero = 3)."""
    return WEIGHT_BYTES * params / (1.0 + (zero >= 3) * (dp_shards - 1.0))


def dense_and_expert(per_shard: Callable[..., Array], dense: Array, experts: Array, dp_shards: Array,
                     expert_shards: Array, *args: Array) -> Array:
    """``per_shard(dense, dp_shards, *args) + per_shard(experts, expert_shards, *args)``: a sharded quantity of a GPU
    whose routed experts shard over their own data-parallel group (tp·dp·cp/(ep·etp) ranks) and the rest over
    dp·cp, as Megatron-core's expert buffers and distributed optimizer and FSDP's expert mesh (NeMo Automodel's
    ``ep_shard``) keep them."""
    return per_shard(dense, dp_shards, *args) + per_shard(experts, expert_shards, *args)


def gradient_bytes(params: Array, dp_shards: Array, zero: Array, per_param: Array = GRAD_BYTES) -> Array:
    """Gradients, sharded at ZeRO ≥ 2: gΨ / (N_d if zero ≥ 2), g = ``per_param`` (2 for 16-bit gradients)."""
    return per_param * params / (1.0 + (zero >= 2) * (dp_shards - 1.0))


#: Bytes per parameter the optimizer keeps, by :data:`dse.codes.OPTIMIZER` code (see
#: :func:`optimizer_layout_bytes`): mixed-precision Adam's fp32 master weight, momentum and variance (12, ZeRO
#: §3.1); torch.optim.AdamW on a 16-bit model keeps momentum and variance in the parameters' dtype
#: (``torch.zeros_like(p)``) and no master copy (4); Megatron-core's fp32 master weight, momentum and variance
#: (12); Apex DistributedFusedAdam's int16 remainder of the fp32 master weight and fp32 momentum and variance (10);
#: the same optimizer with 16-bit state and a stored 16-bit copy of the weights (6).
OPTIMIZER_STATE_BYTES = (OPTIMIZER_BYTES, 4.0, OPTIMIZER_BYTES, 10.0, 6.0)
#: Bytes per parameter of the gradient buffer, by :data:`dse.codes.OPTIMIZER` code: 16-bit (ZeRO §3.1; torch
#: AdamW on a 16-bit model), or fp32 main gradients (Megatron-core ``grad_reduce_in_fp32``; Apex
#: DistributedFusedAdam's contiguous buffer in ``grad_sync_dtype``, which defaults to the fp32 state dtype).
GRADIENT_BYTES_PER_PARAM = (GRAD_BYTES, GRAD_BYTES, 4.0, 4.0, GRAD_BYTES)
#: Temporaries of the step per updated parameter: none for a fused step; torch's foreach AdamW allocates
#: ``exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)``, one 16-bit copy of every variance (2); the step's peak
#: is then weights + gradients + states + this.
OPTIMIZER_TEMP_BYTES = (0.0, 2.0, 0.0, 0.0, 0.0)


def optimizer_layout_bytes(optimizer: Array) -> tuple[Array, Array]:
    """(gradient, optimizer-state) bytes per trained parameter of each row's optimizer layout (a
    :data:`dse.codes.OPTIMIZER` code), before ZeRO sharding.  With the 2-byte weights, per parameter:

    * ``adam_mixed``        2 + 2 + 12 = 16   (ZeRO, Rajbhandari et al. 2020 §3.1: 2Ψ + 2Ψ + KΨ, K = 12)
    * ``adam_16bit``        2 + 2 + 4  = 8    (torch.optim.AdamW state in the parameters' dtype)
    * ``adam_fp32_grads``   2 + 4 + 12 = 18   (NVIDIA/Megatron-LM docs/source/api-guide/dist_optimizer.md
      @ecb5dfad: "bf16 parameters, fp32 gradients: 18 non-distributed, 6 + 12/d distributed")
    * ``adam_remainders``   2 + 4 + 10 = 16   (NVIDIA/apex apex/contrib/optimizers/distributed_fused_adam.py
      @f3f04924: ``store_param_remainders`` keeps an int16 ``param_remainders_shard`` instead of an fp32
      ``params_shard``, beside fp32 ``exp_avg_shard`` and ``exp_avg_sq_shard``; the contiguous gradient buffer is
      ``grad_sync_dtype``, by default the fp32 state dtype.  NVIDIA/NeMo
      nemo/collections/nlp/models/language_modeling/megatron_base_model.py @579983fb sets
      ``store_param_remainders`` for a bf16 model with fp32 optimizer state: 6 + 10/d distributed)
    * ``adam_16bit_master`` 2 + 2 + 6 = 10   (the same Apex optimizer with ``dtype`` bf16: bf16 ``exp_avg_shard`` and
      ``exp_avg_sq_shard``, and a bf16 ``params_shard`` because megatron_base_model.py @579983fb sets
      ``store_params`` when the model keeps FP8 parameters (``fp8_params``); the contiguous gradient buffer in
      ``grad_sync_dtype`` bf16.  NeMo 24.07's SFT configuration, NVIDIA/NeMo-Framework-Launcher
      launcher_scripts/conf/peft/llama/sft.yaml @24.07: ``optim: distributed_fused_adam, dtype: bf16,
      grad_sync_dtype: bf16``, run with ``fp8_params=true`` by examples/peft/llama/h100/*.sh: 4 + 6/d distributed.
      The FP8 parameters count as the 2 weight bytes: their data and the transpose Transformer Engine caches for the
      backward GEMMs)

    The master-weight saving of the remainders (2 bytes) is what the fp32 gradient buffer costs (2 bytes) when
    nothing is sharded (d = 1); with d > 1 the states shrink and the gradient buffer does not."""
    dtype = optimizer.dtype if isinstance(optimizer, np.ndarray) and optimizer.dtype.kind == "f" else np.float64
    code = np.asarray(optimizer).astype(np.int64)
    return (np.asarray(GRADIENT_BYTES_PER_PARAM, dtype=dtype)[code],
            np.asarray(OPTIMIZER_STATE_BYTES, dtype=dtype)[code])


def optimizer_bytes(params: Array, dp_shards: Array, zero: Array, state_bytes: Array = OPTIMIZER_BYTES) -> Array:
    """Optimizer states, sharded at ZeRO ≥ 1: KΨ / (N_d if zero ≥ 1), K = ``state_bytes`` (12 for mixed-precision
    Adam)."""
    return state_bytes * params / (1.0 + (zero >= 1) * (dp_shards - 1.0))


def layer_activation_terms(
    tokens: Array, micro_batch: Array, seq_len: Array, hidden: Array, heads: Array, kv_width: Array,
    ffn_hidden: Array, mlp: Array, top_k: Array, tp: Array, sp: Array, standard_attention: Array,
    gemm_input_bytes: Array, *, q_width: Array | None = None, o_width: Array | None = None, latent: Array = 0.0,
) -> tuple[Array, Array, Array]:
    """(kept, scores, residual) of one layer for one micro-batch on one GPU, in bytes / elements.

    Korthikanti 2022 Table 2, in bytes, per layer (s·b tokens, 16-bit values, 1-byte dropout masks):

    * tensor parallel                 sbh·(10 + 24/t + 5as/(ht))
    * tensor + sequence parallel      sbh·(34/t + 5as/(ht))
    * + selective recomputation       drops the 5as²b/t attention term
    * full recomputation              2sbh (only the layer input; /t with sequence parallelism)

    Generalised term by term.  Replicated part (divided by t only with sequence parallelism): two norm
    inputs 2h + 2h, two norm outputs that feed the QKV and FFN GEMMs, two dropout masks h + h.  Split part
    (divided by t): Q 2h, K and V 2·2·g·d, the output-projection input, and the FFN — activation input 2f
    (gelu, relu2) or gate + up 4f (swiglu) — and the second-linear input, for the top_k experts a token
    visits.  The four GEMM inputs are saved at ``gemm_input_bytes`` (2 in 16-bit training; 1 when
    Transformer Engine keeps FP8 copies for the backward GEMMs), so with 16 bits this is exactly Table 2.
    ``kept`` is replicated + split; ``scores`` the 5as²b/t term, which exists only for the standard
    (unfused) attention kernel — FlashAttention keeps no s×s tensor; ``residual`` is the residual-stream
    element count b·s·h/(t if sp).  ``tokens`` = b·s/cp; ``sp`` and ``standard_attention`` are 0/1 masks.

    Heads of their own width (dse.cost.architecture.layer_record): Q is ``q_width`` = a·d_qk wide and the
    output projection's input ``o_width`` = a·d_v (both h when d = h/a); MLA also keeps its ``latent``
    down-projections (q_lora + kv_lora + rope, 16-bit, on every tensor-parallel rank).
    """
    gi = gemm_input_bytes
    q = hidden if q_width is None else q_width
    o = hidden if o_width is None else o_width
    resid = tokens * hidden / (1.0 + sp * (tp - 1.0))
    replicated = (6.0 + 2.0 * gi) * resid + 2.0 * tokens * latent
    ffn_act = 2.0 + 2.0 * mask(mlp == MLP_SWIGLU, mlp)
    split = tokens * (2.0 * q + gi * o + 4.0 * kv_width + (ffn_act + gi) * top_k * ffn_hidden) / tp
    scores = standard_attention * (5.0 * micro_batch * heads / tp * seq_len * seq_len)
    return replicated + split, scores, resid


def activation_bytes_per_layer(
    tokens: Array, micro_batch: Array, seq_len: Array, hidden: Array, heads: Array, kv_width: Array,
    ffn_hidden: Array, mlp: Array, top_k: Array, tp: Array, sp: Array, standard_attention: Array,
    selective: Array, full: Array, gemm_input_bytes: Array,
) -> Array:
    """Bytes one layer keeps for its backward pass (see :func:`layer_activation_terms`): kept + scores
    without recomputation, kept with selective recomputation (the attention core is recomputed), 2·residual
    (the layer input) with full recomputation.  ``selective`` and ``full`` are 0/1 masks."""
    kept, scores, resid = layer_activation_terms(tokens, micro_batch, seq_len, hidden, heads, kv_width,
                                                 ffn_hidden, mlp, top_k, tp, sp, standard_attention,
                                                 gemm_input_bytes)
    stored = kept + (1.0 - selective) * scores
    return stored + full * (2.0 * resid - stored)


def logits_bytes(tokens: Array, vocab: Array, tp: Array, per_logit: Array = 4.0) -> Array:
    """What the loss holds on the last stage at the backward's start: ``per_logit`` bytes for each of the s·b·V/t
    logits of a GPU (:func:`loss_bytes_per_logit`; 4 for the fp32 logits of Megatron's vocabulary-parallel loss,
    Korthikanti §4.3: 4·s·b·V/t)."""
    return per_logit * tokens * vocab / tp


#: Bytes per logit the loss holds at the backward's start, by ``cross_entropy`` code (dse.codes.CROSS_ENTROPY).
LOSS_BYTES_PER_LOGIT = np.array([4.0, 12.0, 6.0])


def loss_bytes_per_logit(cross_entropy: Array) -> Array:
    """Bytes per logit a GPU holds when the loss's backward starts, by how the loss is computed (``cross_entropy``):

    * ``fused`` (4): Megatron's vocab-parallel cross entropy casts the logits to fp32, exponentiates them in place
      and keeps that one tensor for its backward, which writes the gradient into it (megatron/core/
      tensor_parallel/cross_entropy.py ``_VocabParallelCrossEntropy``; Korthikanti et al. 2022 §4.3, 4·s·b·V/t);
    * ``fp32_copy`` (12): ``torch.nn.functional.cross_entropy`` on an fp32 copy of the 16-bit logits, as torchtitan
      (train.py @9dec370a ``loss_fn``: ``cross_entropy(pred.flatten(0, 1).float(), ...)``, then ``del pred`` before
      the backward; torchtitan/components/loss.py @000204a4 the same) and HF Transformers' Llama (``logits =
      logits.float()``, then ``CrossEntropyLoss`` on a shifted contiguous copy) compute it: the backward of
      log_softmax reads its saved fp32 output and the fp32 gradient nll_loss hands it, and writes an fp32 input
      gradient, three fp32 tensors of the logits' shape at once (the forward's peak, the 16-bit logits, the fp32
      copy and the log-softmax output, is 10 bytes);
    * ``16bit`` (6): the same three tensors in 16 bits, cross_entropy on the 16-bit logits (torchtitan train.py
      @a99d2e5d, 2024-08)."""
    code = np.asarray(cross_entropy)
    table = LOSS_BYTES_PER_LOGIT.astype(code.dtype if code.dtype.kind == "f" else np.float64)  # the kernel's dtype
    return table[np.nan_to_num(code).astype(np.int64)]


def op_sac_kept_bytes(tokens: Array, hidden: Array, q_width: Array, kv_width: Array, o_width: Array,
                      ffn_width: Array, mlp_matrices: Array, expert_visits: Array, heads: Array, tp: Array,
                      sp: Array) -> Array:
    """Bytes one layer keeps for the backward, per micro-batch and GPU, under torchtitan's op-level selective
    checkpointing (``recompute = op``).  Its policy (pytorch/torchtitan torchtitan/parallelisms/
    parallelize_llama.py @9dec370a, ``_save_list`` and ``_custom_policy``) saves the outputs of ``aten.mm`` except
    every second one, of the SDPA kernels and of the reduce-scatters, and recomputes everything else from the
    block's input, which the checkpoint keeps.  In the Llama block the matmuls run wq, wk, wv, wo, w1, (w3), w2, so
    the saved ones are wq, wv and w1, and w2 after a gated FFN (the 7th); a 2-matrix FFN's w2 is the 6th and is
    recomputed.  In 16-bit values, per token (widths of one GPU's shard):

        kept = 2·(x + q + kv + o + f + [gated]·k·h + 2·sp·x) + 4·a

    x the block input (h, /t with sequence parallelism), q, kv and o the query, value and attention-output widths,
    f the FFN width a token passes through, k its expert visits (w2's output is h wide for each), the two
    reduce-scatter outputs with sequence parallelism, and SDPA's fp32 log-sum-exp per head a.  The s×s scores are
    never kept (the saved SDPA kernels are the fused ones).  ASSUMPTION where torchtitan has no such model: LoRA
    adapters' matmuls (which would shift the count's parity) and MoE routers are left out of the count."""
    resid = tokens * hidden / (1.0 + sp * (tp - 1.0))
    gated = np.asarray(np.asarray(mlp_matrices) >= 3.0, dtype=np.asarray(tokens).dtype)
    split = tokens * (q_width + kv_width + o_width + ffn_width) / tp
    w2_out = gated * expert_visits * tokens * hidden  # a row-parallel matmul's output: whole h on every rank
    return 2.0 * (resid * (1.0 + 2.0 * sp) + split + w2_out) + 4.0 * tokens * heads / tp


def adapter_input_bytes(tokens: Array, hidden: Array, o_width: Array, ffn: Array, mlp_matrices: Array,
                        lora_targets: Array, tp: Array, adapter_bytes: Array) -> Array:
    """Bytes the LoRA adapters of one layer keep for the backward pass: each adapted linear casts its input to the
    adapters' dtype and feeds it to ``lora_A``, which saves it for its weight gradient,

        a_LoRA = adapter_bytes · tokens · Σ d_in(adapted modules) / t

    with Σ d_in = q, k, v and o inputs 3h + o_width, the MLP's (matrices − 1)·h + f, for ``lora_targets`` = all
    (the attention's four for ``attention``, q and v's 2h for ``qv``).  Source: huggingface/peft
    src/peft/tuners/lora.py @v0.5.0 (7d0324e3) ``Linear.forward``: ``x = x.to(self.lora_A[...].weight.dtype)`` then
    ``self.lora_B(self.lora_A(self.lora_dropout(x)))``; the 4-bit ``Linear4bit.forward`` does the same; q, k and v
    are separate HF Llama modules, so each holds its own copy.  ``adapter_bytes`` is 4 for the float32 adapters PEFT
    creates (``adapter_precision``); ``lora_dropout`` defaults to 0.0 (``nn.Identity``, no mask kept).  The copy of a
    16-bit adapter's input is the input itself (``to`` returns it), already counted: pass 0 then."""
    attention = 3.0 * hidden + o_width
    mlp = (mlp_matrices - 1.0) * hidden + ffn
    every, attention_only = mask(lora_targets == 0, lora_targets), mask(lora_targets == 1, lora_targets)
    d_in = every * (attention + mlp) + attention_only * attention + mask(lora_targets == 2, lora_targets) * 2.0 * hidden
    return adapter_bytes * tokens * d_in / tp


#: Bytes per parameter of a rank's optimizer partition that DeepSpeed's ZeRO step allocates (16-bit gradients):
#: ``self.flatten(self.averaged_gradients[i])`` (a 16-bit flat copy, 2) ``.to(fp32)`` (4), both alive at the cast.
ZERO_STEP_GRAD_BYTES = 6.0


def zero_step_grad_bytes(partition_params: Array, grad_bytes: Array = 2.0) -> Array:
    """Temporaries of DeepSpeed's ZeRO optimizer step (no offload) over the rank's partition of Ψ/N_d parameters:
    the partition's gradients are flattened into one tensor and cast to the fp32 of the master weights, which the
    step then reads as ``single_partition_of_fp32_groups[i].grad``,

        m_step = (g + 4) · Ψ/N_d  for g-byte gradients (16-bit: 6 = ZERO_STEP_GRAD_BYTES);  4 · Ψ/N_d when g = 4
        (``flatten`` copies; ``.to(float32)`` of a float32 tensor returns it)

    Sources: microsoft/DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py @v0.10.3 ``step``: ``single_grad_partition
    = self.flatten(self.averaged_gradients[i]).to(self.single_partition_of_fp32_groups[i].dtype)``;
    deepspeed/runtime/zero/stage3.py @v0.10.3 ``_prepare_fp32_grad_for_sub_group``: the same per sub-group
    (``sub_group_size`` 1e9 elements by default, more than a 7B/13B rank's partition at N_d = 8).  The activations are
    freed by then: the step's peak is the model states plus this."""
    return (grad_bytes + 4.0 * mask(grad_bytes < 4.0, partition_params)) * partition_params


def phase_peak_bytes(activations: Array, step_flat: Array, step_per_param: Array, tokens: Array, hidden: Array,
                     in_use: Array) -> Array:
    """Peak above the model states of a training step, as the framework's memory reading sees it.

    Allocated memory (``torch.cuda.max_memory_allocated``; DeepSpeed's ``see_memory_usage``): the larger of the
    forward/backward peak (activations held) and the optimizer step's (activations freed, temporaries allocated):

        m = max(A, S),  S = S_flat + S_param

    Device memory in use (``torch.cuda.mem_get_info`` total − free, ``memory_report = gib_in_use``): PyTorch's
    caching allocator keeps every segment it has cudaMalloc'ed until ``empty_cache`` (which DeepSpeed 0.9-0.12 calls
    only at start-up, ``stage_1_and_2.py`` / ``stage3.py`` @v0.10.3), and it serves a request from the smallest
    cached free block at least as large, splitting it (pytorch/pytorch ``c10/cuda/CUDACachingAllocator.cpp``: best
    fit over the large-block pool, Note [Block splitting]; PyTorch docs, CUDA semantics, "Memory management":
    memory the allocator caches still shows as used).  The first iteration's activations are cached when the
    optimizer step allocates its temporaries, and a temporary that no cached block can hold takes a new segment:

        m_in_use = max(A + S_new, S)

    with S_new the temporaries larger than any activation tensor: DeepSpeed ZeRO's flat partition-sized gradient
    copies (``zero_step_grad_bytes``, GBs) always; torch's per-parameter AdamW temporaries (``_foreach_*`` results
    of the h × f weight matrices) only while a micro-batch's activation tensors (tokens × f) are smaller, i.e.
    tokens < h.  Later iterations reuse those segments, so the reading after training is this high-water mark.
    ASSUMPTION: the activations' blocks are the token-sized tensors (no larger cached block from elsewhere)."""
    s_new = step_flat + step_per_param * mask(tokens < hidden, tokens)
    return np.maximum(activations + in_use * s_new, step_flat + step_per_param)
