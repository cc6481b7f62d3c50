"""Small integer codes for the categorical knobs of the cost model.

Categorical inputs (recompute mode, precision, MLP kind, attention kernel, ...) are turned into integer
codes at the edge (spec loader, case reader, CLI) so that the cost kernels only ever see numeric arrays and
branch with boolean masks (the numpy-financial pattern).  The code of a value is its position in the tuple.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

#: Activation recomputation: none; selective (the attention core, Korthikanti 2022); full (every layer from its
#: input); op (torchtitan's op-level selective checkpointing: every second matmul and the element-wise ops).
RECOMPUTE: tuple[str, ...] = ("none", "selective", "full", "op")
RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL, RECOMPUTE_OP = 0, 1, 2, 3

#: Precision of the matmuls.  fp16 and bf16 run at the same tensor-core rate on every catalogued GPU; fp8 and
#: fp4 need tensor cores of that format; int8 and int4 are weight-only formats for inference (weights stored
#: in 1 or 0.5 byte, dequantized, multiplied in 16 bits).
PRECISION: tuple[str, ...] = ("fp16", "bf16", "fp8", "fp4", "int8", "int4")
PRECISION_FP16, PRECISION_BF16, PRECISION_FP8, PRECISION_FP4, PRECISION_INT8, PRECISION_INT4 = 0, 1, 2, 3, 4, 5

#: Precision of the KV cache (inference).  auto: 1 byte when the matmuls run in fp8 or fp4, else 2.
KV_PRECISION: tuple[str, ...] = ("auto", "fp16", "bf16", "fp8", "int8", "int4")
KV_AUTO = 0

#: Feed-forward kind: gelu = 2 matrices, swiglu = 3 matrices (gated), relu2 = 2 matrices (squared ReLU).
MLP: tuple[str, ...] = ("gelu", "swiglu", "relu2")
MLP_GELU, MLP_SWIGLU, MLP_RELU2 = 0, 1, 2

#: Attention kernel: fused FlashAttention-style (no s^2 tensor in HBM, causal blocks skipped), the unfused
#: Megatron-LM 2021/22 path (QK^T GEMM, fused scale-mask-softmax, dropout, AV GEMM), or cuDNN's fused
#: flash attention (Transformer Engine's FusedAttention, which TE prefers over FlashAttention-2 on Hopper and
#: later): the flash path's memory and FLOPs at the generation's ``attention_eff_fused``.
ATTENTION: tuple[str, ...] = ("flash", "standard", "cudnn")
ATTENTION_FLASH, ATTENTION_STANDARD, ATTENTION_CUDNN = 0, 1, 2

#: Attention of the model (not the kernel): grouped-query (also multi-head when kv_heads = heads, and
#: multi-query), multi-head (kv_heads must equal heads), or multi-head latent attention (DeepSeek-V2/V3,
#: Kimi K2; see dse.cost.architecture).
ATTENTION_KIND: tuple[str, ...] = ("gqa", "mha", "mla")
ATTENTION_KIND_MLA = 2

#: How a model's checkpoint stores its routed experts (inference and serving; dse.cost.inference
#: routed_expert_format): tensor — at the row's ``precision`` with one scale per tensor (today's behaviour);
#: fp8_block — FP8 with one scale per 128x128 weight block and per 1x128 activation tile (DeepSeek-V3 report
#: §3.3.2; DeepSeek-V3 and Kimi K2 ship it), used where the row's precision is fp8; mxfp4 — OCP MX FP4 values with one
#: power-of-two scale per 32 (gpt-oss ships its experts so, "All the other weights are in bf16"), at any precision.
MOE_QUANT: tuple[str, ...] = ("tensor", "fp8_block", "mxfp4")
MOE_QUANT_TENSOR, MOE_QUANT_FP8_BLOCK, MOE_QUANT_MXFP4 = 0, 1, 2

#: How tensor-parallel communication overlaps compute.  none: every collective is on the critical path
#: (Megatron-LM 2021).  backward: the backward all-reduce / reduce-scatter of input gradients runs under the
#: weight-gradient GEMM (Megatron-LM async TP communication, Korthikanti 2022 §6.2).  full: all TP
#: collectives pipelined with their GEMMs (Transformer Engine userbuffers, NeMo ``tp_comm_overlap``; needs
#: sequence parallelism, otherwise it falls back to ``backward``).
TP_OVERLAP: tuple[str, ...] = ("none", "backward", "full")
TP_OVERLAP_NONE, TP_OVERLAP_BACKWARD, TP_OVERLAP_FULL = 0, 1, 2

#: What is trained: every weight (full), low-rank adapters on frozen 16-bit weights (lora, Hu et al. 2021),
#: or adapters on frozen 4-bit NF4 weights dequantized on the fly (qlora, Dettmers et al. 2023).
FINETUNE: tuple[str, ...] = ("full", "lora", "qlora")
FINETUNE_FULL, FINETUNE_LORA, FINETUNE_QLORA = 0, 1, 2
#: Which projections carry adapters: every linear layer (QLoRA's choice), the attention ones, or Q and V
#: (the LoRA paper's choice).
LORA_TARGETS: tuple[str, ...] = ("all", "attention", "qv")
#: What lives in CPU memory (ZeRO-Offload / ZeRO-Infinity): nothing, the optimizer (states, master weights,
#: the step itself on the CPU), or the optimizer and the weights (streamed to the GPU layer by layer).
OFFLOAD: tuple[str, ...] = ("none", "optimizer", "all")
#: How ZeRO-3 / FSDP fetches sharded weights: prefetched under the previous layer's compute (FSDP2,
#: Megatron-FSDP, DeepSpeed with a prefetch window covering a layer) or on demand, each submodule's all-gather
#: waited for before it runs (DeepSpeed 2021: stage3_prefetch_bucket_size 5e7 elements, under one matrix of a
#: 100B-class model).
ZERO3_FETCH: tuple[str, ...] = ("prefetch", "on_demand")
#: How the layers split over pipeline stages: evenly (layers % (pp·vpp) == 0), or with the embedding and the
#: loss each counted as one layer (Megatron-core account_for_embedding_in_pipeline_split and
#: account_for_loss_in_pipeline_split): (layers + 2) slots split evenly over pp·vpp virtual stages, so the first
#: and the last virtual stage hold one transformer layer fewer.  Explicit ``layers_first_stage`` /
#: ``layers_last_stage`` (Megatron num_layers_in_first/last_pipeline_stage, per pipeline rank) override both.
PIPELINE_SPLIT: tuple[str, ...] = ("even", "embedding_loss")
PIPELINE_SPLIT_EMBEDDING_LOSS = 1
#: How a decode step's attention reads the KV cache of a grouped-query (GQA/MQA) model: once per KV head
#: (XQA, FlashDecoding, FlashInfer) or once per query head (TensorRT-LLM's masked MHA kernel, one thread
#: block per query head; TensorRT-LLM 0.9/0.10 used it for FP8 compute and wherever its heuristic did not
#: pick XQA).
DECODE_KV_READS: tuple[str, ...] = ("per_kv_head", "per_query_head")
#: How a serving benchmark sends its requests: an open Poisson stream at ``request_rate`` (``vllm bench serve
#: --request-rate``, MLPerf Server), a closed loop of ``concurrency`` clients each sending its next request when
#: its last one ends (after ``think_time_s``; AIPerf / genai-perf ``--concurrency``), or a burst of
#: ``concurrency`` requests all sent at t = 0 (``--request-rate inf``, MLPerf Offline, trtllm-bench).
ARRIVAL: tuple[str, ...] = ("poisson", "closed", "burst")
ARRIVAL_POISSON, ARRIVAL_CLOSED, ARRIVAL_BURST = 0, 1, 2
#: The drafter of speculative decoding: the model's own multi-token-prediction modules (``mtp``: DeepSeek-V3 §2.2
#: and §5.4.3; the model needs ``mtp`` modules), or an EAGLE head (``eagle``: Li et al. 2024, arXiv 2401.15077, and
#: EAGLE-3, arXiv 2503.01840: one decoder layer fed the target's hidden features through a fusion projection,
#: sharing the target's embedding and LM head; a separate checkpoint, so any target model can have one; vLLM
#: ``speculative_config.method = eagle/eagle3``, TensorRT-LLM ``Eagle3DecodingConfig``).
SPEC_METHOD: tuple[str, ...] = ("mtp", "eagle")
SPEC_METHOD_EAGLE = 1
#: What each arrival needs, as the errors of tables (dse.frame) and specs (dse.spec) say it.
ARRIVAL_RULE = "poisson with request_rate, closed or burst with concurrency"

#: How the framework runs a layer's small operations: fused kernels (Megatron-core / Transformer Engine: fused
#: norms, bias-dropout-add, RoPE, softmax) or eager PyTorch modules (HF Transformers: each operation of RMSNorm,
#: RoPE, the unfused softmax and the residual adds is its own kernel; see dse.cost.eager).
KERNELS: tuple[str, ...] = ("fused", "eager")
KERNELS_EAGER = 1
#: What the optimizer keeps per parameter and how its step runs: mixed-precision Adam (16-bit gradients, fp32
#: master weights, momentum and variance, 12 bytes, ZeRO's K = 12; a fused multi-tensor step); torch.optim.AdamW
#: on a 16-bit model (momentum and variance in the parameters' dtype, 4 bytes; the foreach step with its full-size
#: temporary); Megatron-core's optimizer with fp32 main gradients (``grad_reduce_in_fp32``: a 4-byte gradient
#: buffer, fp32 master weights, momentum and variance); or Apex's DistributedFusedAdam with
#: ``store_param_remainders`` (NeMo 1.x ``distributed_fused_adam`` on a bf16 model: a 4-byte gradient buffer,
#: the 16 low bits of each fp32 master weight, fp32 momentum and variance, 10 bytes).  See
#: :func:`dse.cost.memory.optimizer_layout_bytes`.
OPTIMIZER: tuple[str, ...] = ("adam_mixed", "adam_16bit", "adam_fp32_grads", "adam_remainders", "adam_16bit_master")
OPTIMIZER_MIXED = 0
OPTIMIZER_16BIT = 1
#: The dtype of LoRA adapters: the base model's 16 bits, or fp32 (HF PEFT 2023 creates ``lora_A`` / ``lora_B`` as
#: ``nn.Linear`` in the default float32 and moves them to the weight's device only).
ADAPTER_PRECISION: tuple[str, ...] = ("16bit", "fp32")
#: How the gradients are reduced: one collective per bucket (Megatron's distributed optimizer, FSDP, DDP with its
#: buckets as the gradients' storage), DeepSpeed's stage 1/2 ``average_tensor`` for ZeRO-1/2: one ``dist.reduce``
#: per destination rank's slice of each bucket (deepspeed/runtime/zero/stage_1_and_2.py, v0.9-0.12), buckets of
#: hidden² elements (HF Transformers' "auto" reduce_bucket_size, transformers/integrations/deepspeed.py) —
#: thousands of small collectives per step, or, without ZeRO, PyTorch DDP with ``gradient_as_bucket_view=False``
#: (its default, and accelerate's): each gradient copied into its bucket and back
#: (:data:`dse.cost.constants.DDP_COPY_BYTES`).
DP_REDUCE: tuple[str, ...] = ("reduce_scatter", "reduce_per_rank", "ddp_copy")
DP_REDUCE_PER_RANK, DP_REDUCE_DDP_COPY = 1, 2
#: How ZeRO-3 all-gathers a parameter and reduce-scatters its gradient: on one contiguous buffer (NCCL's collective
#: on a flat tensor: FSDP, ``all_gather_into_tensor``, DeepSpeed from v0.5.5), or over a list of one tensor per rank
#: (DeepSpeed v0.3's ``torch.distributed.all_gather(partitions, ...)`` / ``reduce_scatter(out, input_list)``), which
#: PyTorch's ProcessGroupNCCL runs through a flat copy: one ``copy_`` per rank after the all-gather and before the
#: reduce-scatter (:data:`dse.cost.constants.C10D_RANK_COPY_S`).
ZERO3_COLLECTIVES: tuple[str, ...] = ("flat", "rank_lists")
#: What a framework's memory report reads and the unit it calls "GB": allocated memory in 10^9 bytes, or in 2^30
#: (PyTorch's and DeepSpeed's memory printouts divide by 1024^3 and print "GB"), or the device memory in use in
#: 2^30 (``torch.cuda.mem_get_info`` total − free: the caching allocator's reserve included;
#: :func:`dse.cost.memory.phase_peak_bytes`).
MEMORY_REPORT: tuple[str, ...] = ("gb", "gib", "gib_in_use")
MEMORY_REPORT_IN_USE = MEMORY_REPORT.index("gib_in_use")
#: ZeRO ≥ 2 with pipeline parallelism: refused (DeepSpeed's engine asserts it: gradient partitioning and the
#: pipeline's micro-batch accumulation do not mix; the reason row ``zero >= 2 with pp > 1 unsupported``), or
#: FSDP2 under ``torch.distributed.pipelining`` (torchtitan): ``reshard_after_forward`` off and, on every backward
#: but the step's last, ``set_reshard_after_backward(False)`` / ``set_requires_gradient_sync(False)``, so the
#: stage's weights are all-gathered once per step and held, its gradients accumulate unsharded in the reduce
#: dtype and are reduce-scattered once, after the last backward (see
#: :func:`dse.cost.training.gather_once_bytes`).
ZERO_WITH_PP: tuple[str, ...] = ("refuse", "gather_once")
ZERO_WITH_PP_GATHER_ONCE = 1
#: How context parallelism exchanges K and V: a ring, one chunk per step, each step's transfer under the previous
#: step's attention (Megatron-core / Transformer Engine ``cp_comm_type`` p2p), or PyTorch's ``context_parallel``
#: with ``_AllGatherRotater`` (torchtitan's default ``context_parallel_rotate_method = allgather``): K and V
#: all-gathered once, hidden only under the first (local) block, the KV gradients sent around a ring in fp32
#: (see :func:`dse.cost.parallel.cp_allgather_exposed`).
CP_EXCHANGE: tuple[str, ...] = ("ring", "allgather")
CP_EXCHANGE_ALLGATHER = 1
#: How a mixture-of-experts layer runs its local experts' GEMMs: Transformer Engine's GroupedLinear (Megatron-core
#: ``TEGroupedMLP``), which launches each expert's GEMM, casts and transposes one by one from the host after a
#: device-to-host sync of the tokens per expert (a host time per local expert, constants.MOE_HOST_S_PER_LOCAL_EXPERT),
#: or one grouped-GEMM kernel per projection (the grouped_gemm package's ``ops.gmm``, NeMo Automodel's
#: GroupedExpertsDeepEP): no per-expert host time.
MOE_GEMM: tuple[str, ...] = ("per_expert", "grouped")
MOE_GEMM_GROUPED = 1
#: How the expert-parallel dispatch and combine move tokens: a plain all-to-all that sends every routed copy (top_k
#: per token) to its expert's GPU (Megatron-core's ``alltoall`` dispatcher over NCCL), or DeepEP's normal kernels,
#: which send a token once per remote destination node over the NIC and forward it over NVLink inside the node
#: (see :func:`dse.cost.network.deepep_dispatch_time`).
EP_DISPATCH: tuple[str, ...] = ("alltoall", "deepep")
EP_DISPATCH_DEEPEP = 1
#: Whether the expert-parallel all-to-alls of one micro-batch run beside the compute of another: Megatron-core's
#: combined 1F1B schedule (``--overlap-moe-expert-parallel-comm``, Megatron-Bridge ``moe_a2a_overlap``), which pairs
#: the forward of one micro-batch with the backward of another layer by layer, so that each one's dispatch and
#: combine hide under the other's attention and expert compute (see :func:`dse.cost.parallel.ep_overlap_exposed`).
EP_OVERLAP: tuple[str, ...] = ("none", "1f1b")
EP_OVERLAP_1F1B = 1
#: How the loss turns the logits into a cross entropy, which sets what it holds at the backward's start, in bytes per
#: logit (see :func:`dse.cost.memory.loss_bytes_per_logit`): ``fused``, Megatron's vocab-parallel cross entropy on
#: fp32 logits, exponentiated in place and kept for the backward (4); ``fp32_copy``, PyTorch's cross_entropy on an
#: fp32 copy of 16-bit logits (torchtitan since 2024-12, HF Transformers' Llama): its log-softmax output, that
#: output's gradient and the input gradient, all fp32 (12); ``16bit``, the same three on the 16-bit logits (6).
CROSS_ENTROPY: tuple[str, ...] = ("fused", "fp32_copy", "16bit")

#: Reasons a configuration has no answer.  Code 0 means feasible.  The order is the order of the checks:
#: the first failing check is reported.
REASONS: tuple[str, ...] = (
    "",
    "nonpositive_size",
    "size above 16777215 (exact-integer domain)",
    "unknown_system",
    "precision_unsupported_by_system",
    "int8/int4 are weight-only inference formats",
    "tp*pp*cp*dp != gpus",
    "hidden % heads != 0",
    "heads % kv_heads != 0",
    "top_k > experts",
    "heads % tp != 0",
    "kv_heads % tp != 0",
    "layers % (pp*vpp) != 0",
    "(layers+2) % (pp*vpp) != 0 (embedding/loss split)",
    "first/last stage layers do not fit the pipeline",
    "vpp > 1 needs pp > 1",
    "global_batch % (dp*micro_batch) != 0",
    "microbatches % pp != 0 (interleaved schedule)",
    "seq_len % (2*cp) != 0",
    "cp > 1 needs flash attention",
    "experts % ep != 0",
    "(dp*cp) % ep != 0",
    "zero >= 2 with pp > 1 unsupported",
    "kv_heads and tp: neither divides the other",
    "layers % pp != 0",  # no longer produced (inference.stage_layers); kept: codes are positions
    "crosses nodes without scale-out network",
    "exceeds_hbm",
    "overloaded",
    "prefill pool does not divide",
    "host_memory_exceeded",
    "(tp*cp*dp) % (ep*etp) != 0",
    "moe_ffn_hidden % etp != 0",
    "(tp*dp) % ep != 0",
    "spec_tokens needs mtp modules",
    "ep_overlap with full recompute unsupported",
    "ep_overlap with pp > 1 needs vpp > 1",
)
REASON_CODE: dict[str, int] = {r: i for i, r in enumerate(REASONS)}


def encode(values: Iterable[object] | object, vocabulary: Sequence[str], key: str = "value") -> np.ndarray:
    """Map names (case-insensitive) to their codes in ``vocabulary``.

    Raises ``ValueError`` naming ``key``, the bad value and the allowed values.  Used at the edges only
    (spec loader, case reader, CLI); the work is one hash factorization, then one step per distinct name, not
    per configuration.
    """
    arr = np.atleast_1d(np.asarray(values, dtype=object))
    inverse, uniq = pd.factorize(arr.ravel(), use_na_sentinel=False)  # one hash pass; names handled per value
    lookup = {name: i for i, name in enumerate(vocabulary)}
    table = np.empty(len(uniq), dtype=np.int64)
    for j, value in enumerate(uniq):
        name = str(value).strip().lower()
        if name not in lookup:
            raise ValueError(f"{key}: {name!r} is not allowed; allowed values: {', '.join(vocabulary)}")
        table[j] = lookup[name]
    return table[inverse].reshape(arr.shape)


def decode(codes: np.ndarray, vocabulary: Sequence[str]) -> np.ndarray:
    """Inverse of :func:`encode` (object array of names)."""
    return np.asarray(vocabulary, dtype=object)[np.asarray(codes, dtype=np.int64)]
