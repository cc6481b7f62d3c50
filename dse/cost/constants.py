"""Byte counts of the memory-bound kernels and the fixed memory reserve, with their derivations.

These are properties of the kernels (how many bytes each one reads and writes per element), not efficiency
constants; they are not fitted.  Activations are 16-bit, dropout masks 1 byte (Korthikanti 2022 §4).
"""

#: Residual stream, forward, bytes per (token · hidden / sp) element of one layer: two norms
#: (read 2 + write 2 each) and two fused bias-dropout-add kernels (read 2 + residual 2, write 2, mask 1).
RESIDUAL_FWD_BYTES = 2 * 4.0 + 2 * 7.0
#: Residual stream, backward: two norm backwards (read x, dy, write dx: 6), two dropout-add backwards
#: (read dy 2 + mask 1, write 2: 5), and the two sums of the residual stream's gradient paths (read 2 + 2,
#: write 2: 6): a layer's input and its post-attention residual each feed a norm and a residual add, and
#: PyTorch's autograd adds the two incoming gradients with a kernel of its own (``InputBuffer::add``,
#: torch/csrc/autograd/input_buffer.cpp); nothing in Megatron-LM or Transformer Engine fuses it.  Korthikanti
#: 2022 Table 4 measures sequence parallelism 0.6 ms faster on the 22B layer, with and without selective
#: recomputation; the replicated bytes it divides by t give 0.55 / 0.55 ms with these sums, 0.30 / 0.29 without.
RESIDUAL_BWD_BYTES = 2 * 6.0 + 2 * 5.0 + 2 * 6.0

#: FFN activation, bytes per (token · ffn/t) element.  gelu/relu2: read 2, write 2; backward read x, dy,
#: write dx.  swiglu: read gate and up (4), write 2; backward read gate, up, dy (6), write two grads (4).
ACTIVATION_FWD_BYTES_2MAT = 4.0
ACTIVATION_BWD_BYTES_2MAT = 6.0
ACTIVATION_FWD_BYTES_SWIGLU = 6.0
ACTIVATION_BWD_BYTES_SWIGLU = 10.0

#: Mixture of experts: the token permutation around the routed experts, bytes per routed copy (token · top_k · h
#: element) of one MoE layer.  Megatron-core's token dispatchers permute each token's top_k copies into expert
#: order for the grouped GEMMs and merge them back after, weighted by the router probabilities
#: (``megatron/core/transformer/moe/moe_utils.py`` ``permute`` / ``unpermute``; with ``moe_permute_fusion``
#: Transformer Engine's ``moe_permute`` / ``moe_unpermute``, ``transformer_engine/pytorch/permutation.py``).
#: Forward: the permute reads the token row for each copy and writes the copy (2 + 2), the unpermute reads each
#: copy (2).  Backward: the unpermute's backward reads the output gradient for each copy, writes the copy's
#: gradient and reads the copy's forward output for the probability gradient (2 + 2 + 2); the permute's backward
#: reads each copy's gradient (2).  Per token element, the unpermute writes the merged token and the permute's
#: backward the token's gradient (MOE_PERMUTE_TOKEN_BYTES, each direction).  ASSUMPTION: every element read and
#: written once; the all-to-all dispatcher's second sort by local expert (``sort_chunks_by_idxs``, ep > 1) is not
#: counted.
MOE_PERMUTE_FWD_BYTES = 6.0
MOE_PERMUTE_BWD_BYTES = 8.0
MOE_PERMUTE_TOKEN_BYTES = 2.0

#: Standard (unfused) attention, bytes per element of the b·(a/t)·s·s score matrix.  Forward: QKᵀ writes
#: 2, fused scale-mask-softmax reads 2 writes 2, dropout reads 2 writes 2 plus a 1-byte mask, AV reads 2.
STANDARD_ATTENTION_FWD_BYTES = 13.0
#: Backward: AV backward writes dP 2 and reads P 2, dropout backward reads 2 + mask 1 and writes 2, softmax
#: backward reads y, dy and writes dx (6), the QKᵀ backward reads dS twice (4).
STANDARD_ATTENTION_BWD_BYTES = 19.0

#: FlashAttention backward does 5 matmuls for the forward's 2 (it recomputes QKᵀ): 2.5× the forward FLOPs
#: (Dao 2023, arXiv 2307.08691 §4.1).
FLASH_BACKWARD_FLOP_RATIO = 2.5
#: Causal masking: FlashAttention skips the blocks above the diagonal, half the score matrix.
CAUSAL_FRACTION = 0.5

#: Low-precision (fp8/fp4) GEMMs need their 16-bit activation inputs and output gradients quantized: one
#: fused cast-transpose kernel per tensor (Transformer Engine) reads 2 bytes and writes the low-precision
#: copy and its transpose (for the weight-gradient GEMM): 2 + 1 + 1 bytes per element.
LOW_PRECISION_CAST_BYTES = 4.0
#: NVFP4 training quantizes the same tensors at a higher cost per element than fp8: a per-tensor amax pass for
#: the global scale, 16-element E4M3 block scales, a 16x16 random Hadamard transform on the weight-gradient
#: operands and stochastic rounding of gradients (Transformer Engine's NVFP4BlockScaling recipe;
#: docs/features/low_precision_training/nvfp4/nvfp4.rst @52e4c02810abd2ba853d1384270d17a7e3991b4e).
#: Measured in one benchmark on one GPU (Transformer Engine gemm_profiling.rst
#: @332941783386d09570eddc4be994298eee7aac73, B300, per layer of a 5B model at 15,872 tokens, quantizing
#: per GEMM call minus pre-quantized): NVFP4 6.439 - 3.754 = 2.685 ms, MXFP8 8.507 - 7.324 = 1.183 ms for the
#: same 2.48e9 quantized elements, i.e. 1.08 against 0.48 ns per element.  MXFP8's quantize is the plain
#: read-2-write-1 cast that LOW_PRECISION_CAST_BYTES counts, so NVFP4 costs 2.27x its bytes.
NVFP4_CAST_BYTES = LOW_PRECISION_CAST_BYTES * 2.685 / 1.183

#: Vocabulary-parallel cross-entropy, bytes per logits element (token · V/t), forward + backward: cast to
#: fp32 (read 2, write 4), max and sum-exp passes (read 4 + 4), softmax-minus-one-hot gradient (read 4,
#: write 2).
CROSS_ENTROPY_BYTES = 20.0
#: Embedding lookup per (token · h): forward reads and writes 2 + 2, backward scatter-adds into fp32 (8).
EMBEDDING_BYTES = 12.0

#: Mixed-precision Adam step per parameter held (16-bit weights, fp32 master weights and moments), bytes counted from
#: Megatron-LM's optimizer step (NVIDIA/Megatron-LM @739cb43dae, 2022-05, ``megatron/optimizer/optimizer.py``
#: ``MixedPrecisionOptimizer.step``, ``clip_grads.py``, ``training.py``) with fp32 gradient accumulation (bf16, where
#: Megatron forces it): the fp32 gradient handed to the optimizer as a view (``main_grad.float()``, no copy), the
#: gradient norm (``multi_tensor_l2norm``, r4), apex FusedAdam (read master, gradient, momentum, variance 16, write
#: three 12: 28), the copy of the master weights into the 16-bit weights (``multi_tensor_scale``, r4 w2: 6) and the
#: zeroing of the gradient buffer before the next step (``zero_grad_buffer``, w4): 42.  The clipping pass (r4 w4)
#: runs only when the norm exceeds ``--clip-grad`` and is not counted.
ADAM_BYTES_PER_PARAM = 42.0
#: fp16 training adds dynamic loss scaling to the step (same code): the fp16 gradient buffer (fp16 accumulation is
#: Megatron's default there) copied to fp32 for the optimizer (``main_grad.float()``, r2 w4: 6) and unscaled with
#: the inf/NaN check (``_amp_foreach_non_finite_check_and_unscale_``, r4 w4: 8), while its zeroing writes 2 bytes,
#: not 4: 54 in all.
LOSS_SCALING_BYTES_PER_PARAM = 6.0 + 8.0 - 2.0

#: PyTorch DDP with ``gradient_as_bucket_view=False`` (the default of torch.nn.parallel.DistributedDataParallel and of
#: HF accelerate) keeps its buckets apart from the gradients: the reducer copies each gradient into its bucket in the
#: backward, divided by the world size as it copies, and the all-reduced bucket back into the gradient when the
#: backward ends (torch/csrc/distributed/c10d/reducer.cpp ``copy_grad_to_bucket``, ``copy_bucket_to_grad``): a read
#: and a write of each 16-bit gradient each way, 8 bytes per trainable parameter and micro-batch, on the compute
#: stream (``dp_reduce = ddp_copy``; twice that for fp32 gradients).
DDP_COPY_BYTES = 8.0
#: DeepSpeed ZeRO-1/2 with ``contiguous_gradients`` (its default): each 16-bit gradient copied into the reduction
#: bucket in its hook, a read and a write (deepspeed/runtime/zero/stage_1_and_2.py v0.10.3
#: ``reduce_independent_p_g_buckets_and_remove_grads``), and the same bytes again for the rank's own slice copied into
#: its gradient partition (``copy_grads_in_partition``).
DEEPSPEED_BUCKET_COPY_BYTES = 4.0
#: The bucket divided in place by the data-parallel world size before it is reduced (``average_tensor``:
#: ``tensor.div_``), a read and a write of each 16-bit gradient.
DEEPSPEED_BUCKET_AVERAGE_BYTES = 4.0

#: Memory the framework holds besides model states and activations: CUDA context, NCCL buffers and
#: allocator fragmentation.  ASSUMPTION (not sourced): 2 GB; documented in the README.
RUNTIME_RESERVED_BYTES = 2.0e9

#: QLoRA weight storage: 4-bit NormalFloat plus double-quantized block constants, 4.127 bits per weight
#: (Dettmers et al. 2023, arXiv 2305.14314 §3: "reduces the memory footprint ... from 0.5 bits to 0.127 bits
#: per parameter" for the constants) = 0.516 bytes.
QLORA_WEIGHT_BYTES = 4.127 / 8.0
#: Dequantizing a QLoRA weight before its GEMM reads its 4-bit form and writes a 16-bit copy: bytes per weight
#: and use (forward, backward input-gradient, recomputed forward).
QLORA_DEQUANT_BYTES = QLORA_WEIGHT_BYTES + 2.0
#: The fraction of the HBM rate bitsandbytes' NF4 dequantization reaches (bitsandbytes 0.40-0.41, 2023: one
#: dequantize kernel per weight and use, then a 16-bit GEMM).  No kernel benchmark was found (QLoRA's author:
#: "4-bit QLoRA training speed is roughly on par with 16-bit LoRA", artidoro/qlora issue 107; a user: "the time
#: cost of QLoRa is five times that of LoRa", allenai/open-instruct issue 109).  FITTED on shared/reference
#: (zhang2023_train_bs1_lora7b.csv, the QLoRA rows) by python -m dse.validation.fit.
QLORA_DEQUANT_EFFICIENCY = 0.1021


# ---- ring collectives: start-up latency (NCCL's tuning model) ---------------------------------------------
#: NCCL 2.x ``src/graph/tuning.h`` (the Ampere-era model, 2020-21): ``baseLat`` Ring/Simple 8.4 µs and ``hwLat``
#: Ring/Simple per ring step, 3.4 µs over NVLink and 9.6 µs over the network (NCCL_HW_NVLINK / NCCL_HW_NET).
#: Used by :func:`dse.cost.network.ring_latency` for ZeRO-3's many small gathers.
NCCL_RING_BASE_LATENCY_S = 8.4e-6
NCCL_RING_HOP_SCALEUP_S = 3.4e-6
NCCL_RING_HOP_SCALEOUT_S = 9.6e-6
#: Collectives per transformer layer and pass of a ZeRO-3 step.  on_demand (DeepSpeed 2021): one per parameter
#: tensor of the layer — QKV, projection, two MLP matrices, each with its bias, and two layer norms' scale and
#: bias: 12 (ASSUMPTION: DeepSpeed's partitioned-parameter coordinator gathered each submodule's parameters when
#: the submodule ran; that it issued one collective per parameter tensor is not verified).  prefetch (FSDP2,
#: Megatron-FSDP): one per layer (each transformer block is one unit).
ZERO3_COLLECTIVES_PER_LAYER_ON_DEMAND = 12.0
ZERO3_COLLECTIVES_PER_LAYER_PREFETCH = 1.0
#: DeepSpeed keeps a parameter whole on every rank below stage3_param_persistence_threshold elements (1e5, the
#: code default: deepspeed/runtime/zero/config.py v0.9-0.12): a LoRA adapter of rank r on a width-h layer (r·h
#: elements) above it is partitioned and fetched like a weight.
ZERO3_PERSISTENCE_THRESHOLD = 1.0e5
#: What fetching one parameter on demand costs DeepSpeed besides the collective (the partitioned-parameter
#: coordinator's Python hooks, the all-gather's launch and the wait before the submodule runs).  FITTED on
#: shared/reference (zhang2023_train_bs1_lora7b.csv, the A800 ZeRO-3 rows) by python -m dse.validation.fit.
ZERO3_FETCH_OVERHEAD_S = 205e-6

# ---- eager PyTorch (HF Transformers modules; kernels = eager, dse.cost.eager) ------------------------------
#: Fixed time of one small kernel of an eager PyTorch layer besides the bytes it moves (launch, ramp and tail;
#: a CUDA kernel launch alone costs "about 4-6 us", pegainfer blog; the NVIDIA CUDA Graphs blog measured ~3.8 us
#: per back-to-back kernel on V100).  FITTED on shared/reference (zhang2023_train_bs1_lora7b.csv with the module
#: profile of zhang2023_module_profiles.md) by python -m dse.validation.fit.
EAGER_KERNEL_S = 11.65e-6
#: The unfused attention's batched matmuls (QKᵀ, PV; 2·b·a·s²·d FLOPs each, head_dim 128) reach only this fraction
#: of the 16-bit tensor peak: Zhang et al. 2023 Table VI profiles them at 4.32 + 2.21 ms for 2 × 64 GFLOP on the
#: A800 (batch 2, sequence 350, 32 layers), 19.6 TFLOP/s of 312 (zhang2023_module_profiles.md).  One Ampere
#: measurement at one shape: on other GPUs and shapes an ASSUMPTION.
EAGER_BMM_EFFICIENCY = 128.5e9 / (6.53e-3 * 312e12)
#: torch.optim.AdamW (foreach) on 16-bit parameters, bytes per parameter of its step (torch/optim/adamw.py
#: _multi_tensor_adamw): weight decay ``_foreach_mul_`` r2 w2, ``_foreach_lerp_`` of the momentum r2 r2 w2,
#: ``_foreach_mul_`` + ``_foreach_addcmul_`` of the variance r2 w2 + r2 r2 w2, ``_foreach_sqrt`` r2 w2 into a
#: full-size temporary, ``_foreach_div_`` and ``_foreach_add_`` on it r2 w2 each, ``_foreach_addcdiv_`` of the
#: parameter r2 r2 r2 w2 (40), plus the trainer's gradient clipping (``clip_grad_norm_``: the norm r2, the scaling
#: r2 w2; 6).
ADAM_16BIT_BYTES_PER_PARAM = 46.0

#: DeepSpeed ZeRO-3 keeps gathered parameters resident: "stage3_max_reuse_distance: do not release a parameter if it
#: will be reused within this threshold of parameters" and "stage3_max_live_parameters: the maximum number of
#: parameters resident per GPU before releasing", both 1e9 by default (microsoft/DeepSpeed
#: deepspeed/runtime/zero/config.py @03dc2b92, max_live_parameters / max_reuse_distance = pp_int(1e9); HF
#: Transformers' DeepSpeed examples keep 1e9).  At the turn from the forward to the backward every recently used
#: layer is reused within far fewer than 1e9 parameters, so the gathered 16-bit weights resident reach
#: min(1e9, the stage's parameters): 2 GB for Llama-2 7B, where one layer is 0.4 GB.
DEEPSPEED_MAX_LIVE_PARAMETERS = 1e9
#: stage3_max_reuse_distance, the same default (deepspeed/runtime/zero/config.py, v0.9-0.12: max_reuse_distance =
#: pp_int(1e9)); ZeRO-3's time uses it (dse.cost.training.zero3_reused_share, zero3_regathered_share).
DEEPSPEED_MAX_REUSE_DISTANCE = 1e9

#: Host time of one per-rank copy of a list-based ZeRO-3 collective (dse.cost.training.rank_list_copy_time): the
#: ``copy_`` PyTorch's ProcessGroupNCCL issues for each rank's slice of a list all-gather or reduce-scatter (an ATen
#: copy dispatched from C++ and a device-to-device cudaMemcpyAsync of a few hundred kB: launch-bound).  FITTED
#: (python -m dse.validation.fit, group "zero3") on tests/cases/narayanan2021_table2_zero3.csv (Narayanan et al.
#: 2021 Table 2, DeepSpeed ZeRO-3 on 384-2240 A100s: its step time stays flat or grows when the GPUs double at a
#: fixed global batch, one micro-batch per GPU, so a cost per collective grows with the ranks).
C10D_RANK_COPY_S = 4.94e-6

#: Host time per local routed expert, MoE layer and micro-batch (forward + backward) of Megatron-core with
#: Transformer Engine: the dropless dispatcher's device-to-host sync of the tokens per expert, then TE's
#: GroupedLinear launching each local expert's GEMMs, casts and transposes one by one (the CPU's launches,
#: not the GPU, pace the layer when experts are many and small).  FITTED (python -m dse.validation.fit, group
#: "moe") on tests/cases/megatron_bridge_moe_train.csv (Megatron-Bridge performance summary 25.09-26.02, 38 runs);
#: checked on the held-out 2026 releases (megatron_bridge_moe_train_2026.csv).  The evidence that it is fixed per
#: micro-batch: Qwen3-30B-A3B on 8 B200 runs 9,691 tokens/s/GPU at micro-batch 1 and 26,695 at 4 (26.02,
#: 26.02.01): 8.8 ms then 12.8 ms per layer and micro-batch, a fixed 7.5 ms for its 16 local experts (0.47 ms each).
MOE_HOST_S_PER_LOCAL_EXPERT = 4.648e-4

#: Serving: the expert width (FFN width per GPU) from which a routed expert's grouped GEMMs reach the fractions below;
#: narrower experts reach f / MOE_GEMM_FULL_WIDTH of them (dse.cost.inference.expert_width_efficiency).  FITTED on
#: TensorRT-LLM's measured MoE layer tables (tests/kernels/trtllm_moe_layer_points.csv, ai-dynamo/aiconfigurator
#: @095f58a) by dse.validation.fit.moe_expert_width_fit: the widest width at which no table's GEMM fraction exceeds
#: its peak (tests/test_fit.py reproduces it).
MOE_GEMM_FULL_WIDTH = 1232.0
#: Serving: the routed experts' NVFP4 grouped GEMMs (TensorRT-LLM's CUTLASS MoE, B200) run at this fraction of the
#: engine's dense NVFP4 GEMM rate.  Sourced: TensorRT-LLM 1.2.0rc5's measured MoE layer tables in
#: ai-dynamo/aiconfigurator @095f58a (b200_sxm/moe/trtllm/1.2.0rc5/moe_perf.parquet; DeepSeek-V3, Qwen3-235B and
#: Qwen3-30B expert shapes, moe_ep 1-8) fitted to fixed + weights / (HBM · s) + FLOPs / (peak · g · w(f)), w the
#: expert-width factor (MOE_GEMM_FULL_WIDTH): g = 0.198 of the FP4 peak, over the 0.3772 its dense NVFP4 GEMMs reach
#: (tests/kernels/trtllm_gemm_large_m.csv).  Derivation kept in
#: tests/kernels/trtllm_moe_grouped_gemm.csv (tests/test_training_model.py checks it), itself
#: dse.validation.fit.moe_grouped_gemm_fit of the measured points in tests/kernels/trtllm_moe_layer_points.csv
#: (tests/test_fit.py reproduces every row; the same holds for the block-FP8 and MXFP4 fractions below).
MOE_NVFP4_GEMM_FRACTION = 0.525
#: ... and they stream the visited experts' weights at this fraction of ``memory_rate``: the same fit's 0.575 of the
#: HBM peak for 0.5625 bytes per weight (NVFP4 values and their FP8 scale per 16), where dse counts 0.5 bytes at
#: memory_eff (0.956) of the peak: 0.575 / 0.956 · 0.5 / 0.5625.
MOE_NVFP4_STREAM_FRACTION = 0.535
#: Serving: routed experts stored as FP8 with a scale per 128x128 weight block (``moe_quant`` fp8_block: DeepSeek-V3,
#: Kimi K2) run their grouped GEMMs at this fraction of the engine's dense FP8 GEMM rate.  Sourced: the same
#: TensorRT-LLM 1.2.0rc5 tables, H100 CUTLASS block-scaled kernels, g = 0.284 of the FP8 peak over the 0.588 of its
#: dense FP8 GEMMs (trtllm_gemm_large_m.csv); H200's gives 0.289 / 0.588 = 0.491 (2 % apart) and B200's DeepGEMM
#: 0.277 / 0.492 = 0.563 (17 % above; the Hopper kernels are what the value takes).  Their weight streaming is within
#: 3 % of per-tensor FP8's (no factor).
MOE_FP8_BLOCK_GEMM_FRACTION = 0.483
#: Serving: MXFP4 routed experts (``moe_quant`` mxfp4: gpt-oss) on a GPU without microscaling tensor cores (Hopper,
#: Ampere) are dequantized into BF16 math (TensorRT-LLM examples/models/core/gpt_oss/README.md: "Hopper | bf16 |
#: mxfp4", Triton MoE) and reach this fraction of the engine's dense 16-bit GEMM rate.  Sourced: the same 1.2.0rc5
#: tables, H100 w4a16_mxfp4 at gpt-oss shapes, g = 0.422 of the BF16 peak over the 0.785 of its dense BF16 GEMMs (H200:
#: 0.418, the same).  On Blackwell the activations are MXFP8 ("Blackwell | mxfp8 | mxfp4"): B200's w4a8_mxfp4_mxfp8
#: table (1.3.0rc20) gives 0.465 of the FP8 peak, 0.945 of the dense FP8 fraction, so no factor there.
MOE_MXFP4_BF16_GEMM_FRACTION = 0.537
#: Bytes per MXFP4 weight: 4-bit E2M1 values and one 8-bit E8M0 scale per block of 32 (OCP Microscaling Formats (MX)
#: Specification v1.0, 2023, Table 1).
MXFP4_BYTES_PER_WEIGHT = 0.5 + 1.0 / 32.0
#: Serving: fixed GPU time of one MoE layer per forward pass (router top-k, token permutation, finalize / unpermute:
#: kernels that do not scale with the tokens at serving sizes), seconds.  Sourced: the fixed term of the same fits of
#: TensorRT-LLM 1.2.0rc5's measured MoE layer tables (CUDA-graph replays), median over H100, H200 and B200 and their
#: BF16, FP8, block FP8, NVFP4 and W4A16 kernels (26.2-70.9 µs; tests/kernels/trtllm_moe_grouped_gemm.csv).
MOE_LAYER_FIXED_S = 39.5e-6

#: Acceptance rate of a multi-token-prediction draft token in speculative decoding: DeepSeek-V3 technical report
#: (arXiv 2412.19437) §5.4.3, "the acceptance rate of the second token prediction ranges between 85% and 90%"
#: (1.8x tokens per second); the lower end.  A row's ``spec_acceptance`` overrides it.
MTP_ACCEPTANCE = 0.85


#: A collective that runs beside compute slows that compute down: NCCL's kernels take SMs and HBM bandwidth from
#: the kernels they overlap.  Lee et al. 2025, "Characterizing Compute-Communication Overlap in GPU-Accelerated
#: Distributed Deep Learning: Performance and Power Implications" (arXiv 2507.03114, abstract): on 4x A100, H100,
#: MI250 and MI210 with GPT and LLaMA models, "overlapping computation and communication can result in an average
#: computational slowdown of 18.9%, with a maximum of 40.0%" against the same compute with no communication beside
#: it.  The average is taken (dse.cost.parallel.overlapped_exposed).
OVERLAP_COMPUTE_SLOWDOWN = 0.189
