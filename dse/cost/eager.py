"""A transformer layer as eager PyTorch runs it (``kernels: eager``): the HF Transformers Llama modules, where each
tensor operation of RMSNorm, RoPE, the unfused softmax and the residual adds is its own kernel.

Counted from the modules' code (huggingface/transformers ``src/transformers/models/llama/modeling_llama.py``,
v4.31-4.38, 2023: ``LlamaRMSNorm.forward``, ``rotate_half``, ``apply_rotary_pos_emb``, ``LlamaAttention`` eager
path, ``LlamaMLP``), per layer and micro-batch, with T tokens, hidden h, KV width w, FFN width f and b·a·s²
attention scores; 16-bit activations, fp32 where the code casts:

* RMSNorm (twice): ``to(float32)`` r2 w4, ``pow(2)`` r4 w4, ``mean`` r4, ``+eps``, ``rsqrt``, ``x * r`` r4 w4,
  ``to(bf16)`` r4 w2, ``weight *`` r2 w2: 36 bytes per element, 8 kernels.  Its autograd backward, read off
  PyTorch's derivative formulas (tools/autograd/derivatives.yaml, 2.0-2.1): ``weight *`` the gradient times the
  weight r2 w2 and the weight's gradient, a product r2 r2 w2 summed over the tokens r2 (3 kernels); the cast back
  to fp32 r2 w4; ``x * r`` the gradient times r r4 w4 and r's gradient, a product r4 r4 w4 summed over the row r4
  (3); ``rsqrt``'s ``-0.5·g·r³`` on the row values (3, no bytes per element); ``mean``'s expanded division w4
  (1); ``pow(2)``'s ``g·(2·x^1)``: ``x.pow(1)`` r4 w4, ``·2`` r4 w4, ``·g`` r4 r4 w4 (3); the two paths to x added
  r4 r4 w4 (1); the cast to bf16 r4 w2 (1): 92 bytes per element in 16 kernels.  (Counted from the formulas,
  not profiled: an ASSUMPTION at the level of a few bytes and kernels.)
* residual adds (twice) r4 w2 and the attention output's ``transpose(1, 2).contiguous()`` r2 w2: 16 bytes per
  T·h forward; backward the two gradient accumulations, 12, and the copy back, 4, and the layout copies of the
  q, k and v gradients (``view(b, s, a, d).transpose(1, 2)`` backward: a transposed gradient reshaped, r2 w2 per
  element of q, k and v, 3 kernels).
* RoPE on q and k: ``q * cos`` r2 w2, ``rotate_half`` = ``-x2`` r1 w1 and ``cat`` r2 w2, ``* sin`` r2 w2, ``+`` r4 w2:
  20 bytes per element of q and of k, 5 kernels each, plus the 2 gathers of cos and sin by position.  Backward,
  per tensor: the gradient times cos and times sin (r2 w2 each, the tables read once), ``neg``'s r1 w1, the two
  slices' ``slice_backward`` (a zero fill w2 and a copy of the half r1 w1, each) and the three gradients of q added
  (r4 w2 twice): 36 bytes per element in 9 kernels.
* scores: ``/ sqrt(d)`` r2 w2, ``+ mask`` r2 w2, ``softmax(dtype=float32)`` r2 w4, ``.to(bf16)`` r4 w2: 20 bytes per
  score; backward (cast, softmax backward r4 r4 w4, division) 24 in 3 kernels besides the 4 bmms.
* SwiGLU: ``act_fn(gate)`` r2 w2 and ``* up`` r4 w2: 10 bytes per T·f (GELU: 4); backward 18 (GELU: 6).
* the two batched matmuls of the unfused attention (QKᵀ, PV): 2·b·a·s²·d FLOPs each, at their own low
  efficiency (:data:`dse.cost.constants.EAGER_BMM_EFFICIENCY`).

Kernels: 46 forward (16 norm, 12 RoPE, 7 attention GEMMs and bmms, 4 score ops, 2 MLP element-wise, 3 GEMMs of
the MLP, 2 adds) and 83 backward per layer (:data:`MODULE_KERNELS`); every kernel pays a fixed time besides its bytes
(:data:`dse.cost.constants.EAGER_KERNEL_S`: launch, ramp and tail of a small kernel).
"""

from __future__ import annotations

from typing import Any

from dse.cost.select import mask

Array = Any  # numpy arrays or scalars that broadcast

#: Bytes per element moved by the eager element-wise operations (forward, backward), see the module docstring.
NORM_BYTES = (2 * 36.0, 2 * 92.0)  # two RMSNorms per layer, per T·h element
RESIDUAL_BYTES = (2 * 6.0 + 4.0, 12.0 + 4.0)  # two residual adds + the attention output copy, per T·h
LAYOUT_COPY_BYTES = (0.0, 4.0)  # the q, k, v gradients' layout copies, per element of q, k and v
ROPE_BYTES = (20.0, 36.0)  # per element of q and of k
SCORE_BYTES = (20.0, 24.0)  # per attention score
SWIGLU_BYTES = (10.0, 18.0)  # per T·f element
GELU_BYTES = (4.0, 6.0)
#: Kernels per layer and micro-batch (forward, backward) by module, the unfused attention's included (module
#: docstring): q, k, v projections 3 (backward 6 GEMMs and the 2 adds of their input gradients: 8), RoPE 12 (18),
#: the two bmms and four score operations 6 (4 bmms and 3 score gradients: 7), o_proj 1 (2), RMSNorm 16 (32), the
#: MLP's 3 GEMMs and 2 element-wise 5 (its 6 GEMMs, the product's 2 and SiLU's gradient and the add of the gate and
#: up input gradients: 10), and the rest (the 2 residual adds and the attention output's copy 3; backward the 2
#: gradient accumulations, the copy back and the q, k, v layout copies: 6).
MODULE_KERNELS: dict[str, tuple[float, float]] = {
    "qkv": (3.0, 8.0), "rope": (12.0, 18.0), "attention": (6.0, 7.0), "output": (1.0, 2.0),
    "norm": (16.0, 32.0), "mlp": (5.0, 10.0), "other": (3.0, 6.0),
}
KERNELS_PER_LAYER = (sum(k[0] for k in MODULE_KERNELS.values()), sum(k[1] for k in MODULE_KERNELS.values()))


#: Kernels the unfused attention adds over a fused (flash) kernel: the two bmms and the four score operations
#: forward replace one flash kernel; backward seven replace one.
UNFUSED_ATTENTION_KERNELS = (5.0, 6.0)
#: A LoRA adapter on an eager Linear (HF PEFT ``lora.Linear.forward``: ``lora_A``, ``lora_B``, ``* scaling`` r2 w2,
#: ``result +=`` r4 w2; the dropout is ``nn.Identity`` at PEFT's default ``lora_dropout=0``): 4 kernels and 10 bytes
#: per output element forward; backward 7 kernels and 14 bytes (the scaling and the add's gradient paths).
PEFT_ADAPTER_KERNELS = (4.0, 7.0)
PEFT_ADAPTER_BYTES = (10.0, 14.0)


def eager_module_bytes(resid_elems: Array, qk_elems: Array, v_elems: Array, ffn_elems: Array, swiglu: Array,
                       backward: bool) -> dict[str, Array]:
    """Bytes the eager element-wise operations of one layer move in its forward (or backward), by module: the
    norms and the rest (residual adds, the attention output's copy) per element of the residual stream
    (``resid_elems`` = T·h) and the rest's layout copies per element of q, k and v, RoPE per element of q and of
    k (``qk_elems`` = T·(q width + k width)/t, ``v_elems`` = T·(v width)/t) and the MLP activation per
    ``ffn_elems`` = T·f (times the experts a token visits); ``swiglu`` a 0/1 mask."""
    i = 1 if backward else 0
    act = GELU_BYTES[i] + swiglu * (SWIGLU_BYTES[i] - GELU_BYTES[i])
    return {"norm": NORM_BYTES[i] * resid_elems,
            "other": RESIDUAL_BYTES[i] * resid_elems + LAYOUT_COPY_BYTES[i] * (qk_elems + v_elems),
            "rope": ROPE_BYTES[i] * qk_elems, "mlp": act * ffn_elems}


def eager_elementwise_bytes(resid_elems: Array, qk_elems: Array, v_elems: Array, ffn_elems: Array, swiglu: Array,
                            backward: bool) -> Array:
    """The sum of :func:`eager_module_bytes` (what the training kernel charges one layer's element-wise work)."""
    parts = eager_module_bytes(resid_elems, qk_elems, v_elems, ffn_elems, swiglu, backward)
    return parts["norm"] + parts["other"] + parts["rope"] + parts["mlp"]


def eager_score_bytes(scores: Array, backward: bool) -> Array:
    """Bytes of the unfused softmax chain over ``scores`` = b·a·s² (scale, mask, fp32 softmax, cast back)."""
    return SCORE_BYTES[1 if backward else 0] * scores


def eager_module_kernels(standard_attention: Array, backward: bool) -> dict[str, Array]:
    """Kernels one layer's modules launch in its forward (or backward): :data:`MODULE_KERNELS` with the unfused
    attention, :data:`UNFUSED_ATTENTION_KERNELS` fewer in the attention with a flash kernel."""
    i = 1 if backward else 0
    launches: dict[str, Array] = {k: n[i] for k, n in MODULE_KERNELS.items()}
    launches["attention"] = launches["attention"] - (1.0 - standard_attention) * UNFUSED_ATTENTION_KERNELS[i]
    return launches


def eager_kernels(standard_attention: Array, adapted_modules: Array, backward: bool) -> Array:
    """Kernels one layer launches in its forward (or backward): the modules' (:func:`eager_module_kernels`; small
    integers, so the sum is exact) plus PEFT_ADAPTER_KERNELS per module carrying a LoRA adapter
    (``adapted_modules``, 0 for full training)."""
    launches = sum(eager_module_kernels(standard_attention, backward).values())
    return launches + adapted_modules * PEFT_ADAPTER_KERNELS[1 if backward else 0]


def eager_bmm_time(micro_batch: Array, heads: Array, seq_len: Array, head_dim: Array, rate: Array) -> Array:
    """Forward time of the unfused attention's two batched matmuls (QKᵀ and PV): 2 · 2·b·a·s²·d FLOPs at
    ``rate`` (the 16-bit tensor peak times EAGER_BMM_EFFICIENCY)."""
    return 2.0 * 2.0 * micro_batch * heads * seq_len * seq_len * head_dim / rate


def adapted_modules(lora_targets: Array, mlp_matrices: Array) -> Array:
    """Linear modules per layer carrying a LoRA adapter: every one (q, k, v, o and the MLP's matrices), the four
    of the attention, or q and v (:data:`dse.codes.LORA_TARGETS` codes 0, 1, 2)."""
    return (mask(lora_targets == 0, lora_targets) * (4.0 + mlp_matrices) + mask(lora_targets == 1, lora_targets) * 4.0
            + mask(lora_targets == 2, lora_targets) * 2.0)


def adapted_outputs(lora_targets: Array, hidden: Array, q_width: Array, kv_width: Array, ffn: Array,
                    mlp_matrices: Array) -> Array:
    """Output features per token of the adapted modules (what the adapters' scaling and add touch): q, k, v, o
    (q width + 2w + h; q width = heads · head_dim, h for Llama), the MLP's (matrices − 1)·f + h, or q and v
    (q width + w)."""
    attention = q_width + 2.0 * kv_width + hidden
    mlp = (mlp_matrices - 1.0) * ffn + hidden
    every, attention_only = mask(lora_targets == 0, lora_targets), mask(lora_targets == 1, lora_targets)
    return every * (attention + mlp) + attention_only * attention + mask(lora_targets == 2, lora_targets) * (
        q_width + kv_width)


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
