"""A transformer layer as eager PyTorch runs it (``kernels: eager``): the HF Transformers Llama modules, where each
tensor operation of RMSNorm, RoPE, the unfused softmax and the residual adds is its own kernel.

Counted from the modules' code (huggingface/transformers ``src/transformers/models/llama/modeling_llama.py``,
v4.31-4.38, 2023: ``LlamaRMSNorm.forward``, ``rotate_half``, ``apply_rotary_pos_emb``, ``LlamaAttention`` eager
path, ``LlamaMLP``), per layer and micro-batch, with T tokens, hidden h, KV width w, FFN width f and b·a·s²
attention scores; 16-bit activations, fp32 where the code casts:

* RMSNorm (twice): ``to(float32)`` r2 w4, ``pow(2)`` r4 w4, ``mean`` r4, ``+eps``, ``rsqrt``, ``x * r`` r4 w4,
  ``to(bf16)`` r4 w2, ``weight *`` r2 w2: 36 bytes per element, 8 kernels.  Its autograd backward (mul, cast,
  mul with the row reduction, mean, pow, the two gradient paths added, cast back) moves 78 bytes, 12 kernels.
  (Backward byte and kernel counts are read off autograd's formulas for these operations, not profiled: an
  ASSUMPTION at the level of a few bytes and kernels.)
* residual adds (twice) r4 w2 and the attention output's ``transpose(1, 2).contiguous()`` r2 w2: 16 bytes per
  T·h forward; backward the two gradient accumulations, 12, and the copy back, 4.
* RoPE on q and k: ``q * cos`` r2 w2, ``rotate_half`` = ``-x2`` r1 w1 and ``cat`` r2 w2, ``* sin`` r2 w2, ``+`` r4 w2:
  20 bytes per element of q and of k, 5 kernels each, plus the 2 gathers of cos and sin by position; backward
  about as many bytes (24) in 8 kernels.
* scores: ``/ sqrt(d)`` r2 w2, ``+ mask`` r2 w2, ``softmax(dtype=float32)`` r2 w4, ``.to(bf16)`` r4 w2: 20 bytes per
  score; backward (cast, softmax backward r4 r4 w4, division) 24.
* SwiGLU: ``act_fn(gate)`` r2 w2 and ``* up`` r4 w2: 10 bytes per T·f (GELU: 4); backward 18 (GELU: 6).
* the two batched matmuls of the unfused attention (QKᵀ, PV): 2·b·a·s²·d FLOPs each, at their own low
  efficiency (:data:`dse.cost.constants.EAGER_BMM_EFFICIENCY`).

Kernels: 46 forward (16 norm, 12 RoPE, 7 attention GEMMs and bmms, 4 score ops, 2 MLP element-wise, 3 GEMMs of
the MLP, 2 adds) and 78 backward per layer (GEMMs twice); every kernel pays a fixed time besides its bytes
(:data:`dse.cost.constants.EAGER_KERNEL_S`: launch, ramp and tail of a small kernel).
"""

from __future__ import annotations

from typing import Any

from dse.cost.select import mask

Array = Any  # numpy arrays or scalars that broadcast

#: Bytes per element moved by the eager element-wise operations (forward, backward), see the module docstring.
NORM_BYTES = (2 * 36.0, 2 * 78.0)  # two RMSNorms per layer, per T·h element
RESIDUAL_BYTES = (2 * 6.0 + 4.0, 12.0 + 4.0)  # two residual adds + the attention output copy, per T·h
ROPE_BYTES = (20.0, 24.0)  # per element of q and of k
SCORE_BYTES = (20.0, 24.0)  # per attention score
SWIGLU_BYTES = (10.0, 18.0)  # per T·f element
GELU_BYTES = (4.0, 6.0)
#: Kernels per layer and micro-batch (forward, backward).
KERNELS_PER_LAYER = (46.0, 78.0)


#: Kernels the unfused attention adds over a fused (flash) kernel: the two bmms and the four score operations
#: forward replace one flash kernel; backward eight replace one.
UNFUSED_ATTENTION_KERNELS = (5.0, 7.0)
#: A LoRA adapter on an eager Linear (HF PEFT ``lora.Linear.forward``: ``lora_A``, ``lora_B``, ``* scaling`` r2 w2,
#: ``result +=`` r4 w2; the dropout is ``nn.Identity`` at PEFT's default ``lora_dropout=0``): 4 kernels and 10 bytes
#: per output element forward; backward 7 kernels and 14 bytes (the scaling and the add's gradient paths).
PEFT_ADAPTER_KERNELS = (4.0, 7.0)
PEFT_ADAPTER_BYTES = (10.0, 14.0)


def eager_elementwise_bytes(tokens: Array, hidden: Array, kv_width: Array, ffn_elems: Array, swiglu: Array,
                            backward: bool) -> Array:
    """Bytes the eager element-wise operations of one layer move in its forward (or backward): norms, residual
    adds, RoPE on q and k and the MLP activation.  ``tokens``·``hidden`` are the residual-stream elements, ``ffn_elems``
    = T·f (times the experts a token visits), ``swiglu`` a 0/1 mask."""
    i = 1 if backward else 0
    act = GELU_BYTES[i] + swiglu * (SWIGLU_BYTES[i] - GELU_BYTES[i])
    return ((NORM_BYTES[i] + RESIDUAL_BYTES[i]) * tokens * hidden + ROPE_BYTES[i] * tokens * (hidden + kv_width)
            + act * ffn_elems)


def eager_score_bytes(scores: Array, backward: bool) -> Array:
    """Bytes of the unfused softmax chain over ``scores`` = b·a·s² (scale, mask, fp32 softmax, cast back)."""
    return SCORE_BYTES[1 if backward else 0] * scores


def eager_kernels(standard_attention: Array, adapted_modules: Array, backward: bool) -> Array:
    """Kernels one layer launches in its forward (or backward): :data:`KERNELS_PER_LAYER` with the unfused
    attention, :data:`UNFUSED_ATTENTION_KERNELS` fewer with a flash kernel, plus PEFT_ADAPTER_KERNELS per module
    carrying a LoRA adapter (``adapted_modules``, 0 for full training)."""
    i = 1 if backward else 0
    return (KERNELS_PER_LAYER[i] - (1.0 - standard_attention) * UNFUSED_ATTENTION_KERNELS[i]
            + adapted_modules * PEFT_ADAPTER_KERNELS[i])


def eager_bmm_time(micro_batch: Array, heads: Array, seq_len: Array, head_dim: Array, rate: Array) -> Array:
    """Forward time of the unfused attention's two batched matmuls (QKᵀ and PV): 2 · 2·b·a·s²·d FLOPs at
    ``rate`` (the 16-bit tensor peak times EAGER_BMM_EFFICIENCY)."""
    return 2.0 * 2.0 * micro_batch * heads * seq_len * seq_len * head_dim / rate


def adapted_modules(lora_targets: Array, mlp_matrices: Array) -> Array:
    """Linear modules per layer carrying a LoRA adapter: every one (q, k, v, o and the MLP's matrices), the four
    of the attention, or q and v (:data:`dse.codes.LORA_TARGETS` codes 0, 1, 2)."""
    return (mask(lora_targets == 0, lora_targets) * (4.0 + mlp_matrices) + mask(lora_targets == 1, lora_targets) * 4.0
            + mask(lora_targets == 2, lora_targets) * 2.0)


def adapted_outputs(lora_targets: Array, hidden: Array, kv_width: Array, ffn: Array, mlp_matrices: Array) -> Array:
    """Output features per token of the adapted modules (what the adapters' scaling and add touch): q, k, v, o
    (2h + 2w), the MLP's (matrices − 1)·f + h, or q and v (h + w)."""
    attention = 2.0 * hidden + 2.0 * kv_width
    mlp = (mlp_matrices - 1.0) * ffn + hidden
    every, attention_only = mask(lora_targets == 0, lora_targets), mask(lora_targets == 1, lora_targets)
    return every * (attention + mlp) + attention_only * attention + mask(lora_targets == 2, lora_targets) * (
        hidden + kv_width)


def eager_activation_terms(tokens: Array, micro_batch: Array, seq_len: Array, heads: Array, hidden: Array,
                           q_width: Array, kv_width: Array, o_width: Array, ffn_hidden: Array, swiglu: Array,
                           tp: Array, standard_attention: Array, frozen: Array, quantized: Array
                           ) -> tuple[Array, Array]:
    """(kept, scores) bytes one eager HF Llama layer saves for its backward, per micro-batch and GPU: what autograd
    keeps of the modules' operations (transformers modeling_llama.py v4.31-4.38, bf16).  PyTorch saves an operand
    of a product only when the other operand needs a gradient (the generated ``MulBackward0`` / ``MmBackward0``:
    ``if (grad_fn->should_compute_output(i)) ... = SavedVariable(...)``), so frozen weights (``frozen``: LoRA,
    QLoRA) keep their linears' inputs and the norms' normalised values out, and RoPE's products with cos and sin
    keep nothing of q and k.  bitsandbytes' 4-bit linears (``quantized``: QLoRA) keep their input whenever it
    needs a gradient (``MatMul4Bit.forward``: ``if any(ctx.needs_input_grad[:2]): ctx.tensors = (A, B)``,
    bitsandbytes autograd/_functions.py, 0.41):

    * RMSNorm (twice): ``to(float32)`` feeds ``pow`` and ``x * rsqrt``, which keep the fp32 copy (4 bytes); with
      a trained weight, ``weight *`` keeps the bf16 normalised value (2); the linears after it their input (2);
    * attention: QKᵀ keeps the rotated q and k (2 + 2), PV keeps v (2) and the bf16 probabilities, the fp32
      softmax its fp32 output: 6 bytes per score (b·a·s², unfused only; FlashAttention 2 keeps q, k, v and its
      output, the o_proj input below);
    * o_proj its input (2); the SwiGLU MLP: SiLU its input (2), the product SiLU's output and up (2 + 2),
      down_proj the product (2); GELU: its input (2) and fc2's (2).
    No dropout (Llama's attention and residual dropouts are absent).  Megatron's fused layer (Korthikanti 2022
    Table 2, :func:`dse.cost.memory.layer_activation_terms`) keeps 2 + 2 per norm and 5 bytes per score."""
    trained = 1.0 - frozen
    inputs = trained + frozen * quantized  # linears that keep their input
    ffn = (2.0 + 4.0 * swiglu + 2.0 * inputs) * ffn_hidden
    kept = tokens * (2.0 * (4.0 + 2.0 * trained + 2.0 * inputs) * hidden
                     + (2.0 * q_width + 4.0 * kv_width + 2.0 * inputs * o_width + ffn) / tp)
    scores = standard_attention * (6.0 * micro_batch * heads / tp * seq_len * seq_len)
    return kept, scores
