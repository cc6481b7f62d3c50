"""Documented defaults for empty inputs, one source of truth for tables (``dse.frame``), ``dse explain`` and
sweep specs (``dse.sweep``).  They describe a current Megatron-core / NeMo stack."""

from __future__ import annotations

import numpy as np

from dse import cells, codes
from dse.cost.architecture import ARCHITECTURE_COLUMNS

#: Categorical defaults (names).
CATEGORICAL_DEFAULTS: dict[str, str] = {
    "mlp": "gelu",
    "recompute": "none",
    "precision": "bf16",
    "attention": "flash",
    "tp_overlap": "full",
    "finetune": "full",
    "lora_targets": "all",
    "offload": "none",
    "zero3_fetch": "prefetch",
    "pipeline_split": "even",
    "kernels": "fused",
    "optimizer": "adam_mixed",
    "memory_report": "gb",
    "adapter_precision": "16bit",
    "dp_reduce": "reduce_scatter",
    "zero3_collectives": "flat",
    "zero_with_pp": "refuse",
    "cp_exchange": "ring",
    "moe_gemm": "per_expert",
    "ep_dispatch": "alltoall",
    "ep_overlap": "none",
    "cross_entropy": "fused",
}
#: Vocabulary of each categorical input.
CATEGORICAL: dict[str, tuple[str, ...]] = {
    "mlp": codes.MLP,
    "recompute": codes.RECOMPUTE,
    "precision": codes.PRECISION,
    "attention": codes.ATTENTION,
    "tp_overlap": codes.TP_OVERLAP,
    "finetune": codes.FINETUNE,
    "lora_targets": codes.LORA_TARGETS,
    "offload": codes.OFFLOAD,
    "zero3_fetch": codes.ZERO3_FETCH,
    "pipeline_split": codes.PIPELINE_SPLIT,
    "kernels": codes.KERNELS,
    "optimizer": codes.OPTIMIZER,
    "memory_report": codes.MEMORY_REPORT,
    "adapter_precision": codes.ADAPTER_PRECISION,
    "dp_reduce": codes.DP_REDUCE,
    "zero3_collectives": codes.ZERO3_COLLECTIVES,
    "zero_with_pp": codes.ZERO_WITH_PP,
    "cp_exchange": codes.CP_EXCHANGE,
    "moe_gemm": codes.MOE_GEMM,
    "ep_dispatch": codes.EP_DISPATCH,
    "ep_overlap": codes.EP_OVERLAP,
    "cross_entropy": codes.CROSS_ENTROPY,
}

#: The defaults, as documented in the README ("Inputs, defaults and optional knobs").
DEFAULTS_DOC: dict[str, str] = {
    "kv_heads": "heads (multi-head attention)",
    "ffn_hidden": "4 * hidden",
    "mlp": "gelu",
    "experts": "1",
    "top_k": "1",
    "tp, pp": "1",
    "cp": "1",
    "ep": "1",
    "vpp": "1 (plain 1F1B)",
    "dp": "gpus / (tp * pp * cp)",
    "gpus": "tp * pp * cp * dp",
    "sp": "1 when tp > 1, else 0 (Megatron-core / NeMo default)",
    "micro_batch": "1",
    "recompute": "none",
    "zero": "1 (Megatron distributed optimizer, the NeMo default)",
    "precision": "bf16",
    "attention": "flash",
    "tp_overlap": "full (Transformer Engine userbuffers; needs sp, else backward)",
    "dp_overlap": "1 (gradient reduce-scatter / parameter all-gather overlapped)",
    "pp_overlap": "1 (pipeline send/recv overlapped with compute)",
    "tied_embeddings": "the catalog's value when `model` names a catalogued model with the same dimensions, else 0",
    "finetune": "full (every weight trained)",
    "lora_rank": "16 (for lora / qlora)",
    "lora_targets": "all (adapters on every linear layer, as QLoRA)",
    "offload": "none",
    "zero3_fetch": "prefetch (weights gathered under the previous layer's compute: FSDP2, Megatron-FSDP)",
    "pipeline_split": "even (layers % (pp·vpp) == 0)",
    "layers_first_stage, layers_last_stage": "empty (from pipeline_split)",
    "doc_len": "empty (one document per sequence: attention over seq_len)",
    "kernels": "fused (Megatron-core / Transformer Engine kernels)",
    "optimizer": "adam_mixed (fp32 master weights, momentum and variance)",
    "memory_report": "gb (peak_memory_gb in 10^9 bytes)",
    "adapter_precision": "16bit (LoRA adapters in the model's 16-bit dtype)",
    "dp_reduce": "reduce_scatter (one collective per gradient bucket)",
    "zero3_collectives": "flat (each ZeRO-3 gather and reduce-scatter on one contiguous buffer)",
    "zero_with_pp": "refuse (zero >= 2 with pp > 1 is a reason row, as DeepSpeed refuses it)",
    "cp_exchange": "ring (K,V chunks passed around a ring under the attention: Megatron-core / TE p2p)",
    "moe_gemm": "per_expert (TE GroupedLinear: each local expert's GEMMs launched from the host)",
    "ep_dispatch": "alltoall (every routed copy sent to its expert's GPU, over the NIC when remote)",
    "ep_overlap": "none (each micro-batch's expert all-to-alls on its own critical path)",
    "cross_entropy": "fused (Megatron's vocab-parallel cross entropy: 4 bytes per logit)",
    "etp": "tp (expert tensor parallel: experts split like the dense layers)",
    "moe_imbalance": ("train: 1 (balanced routing, as Megatron-Bridge's benchmarks force it); infer, serve: the GPU "
                      "generation's measured routing skew at the row's ep (1.94 on Hopper, 1.84 on Blackwell at ep 8; "
                      "1 for an expert load balancer such as EPLB, which the sglang-0.4/0.5 profiles assume)"),
    "head_dim": "hidden / heads",
    "attention_kind": "gqa (grouped-query; multi-head when kv_heads = heads)",
    "moe_quant": "tensor (routed experts at the row's precision, one scale per tensor)",
    "moe_ffn_hidden": "ffn_hidden (each routed expert as wide as the dense FFN)",
    "shared_experts, dense_layers, mtp": "0",
    "moe_every": "1 (every layer after the dense ones has experts)",
    "sliding_window": "empty (every layer attends over the whole context)",
    "global_every": "empty (with a window: every layer windowed)",
}


#: ZeRO stage of a row that states none: Megatron's distributed optimizer, the NeMo default.
DEFAULT_ZERO = 1.0

#: Adapter rank when lora / qlora is asked without one.  ASSUMPTION: 16, between the LoRA paper's 4-8 and
#: QLoRA's 64 (Hu et al. 2021; Dettmers et al. 2023).
DEFAULT_LORA_RANK = 16.0


def nan_to(arr: np.ndarray, value: np.ndarray | float) -> np.ndarray:
    """``arr`` with its NaN entries replaced by ``value`` (an array of the same shape or a scalar), in ``arr``'s
    dtype; ``arr`` itself when it has none, and a constant array when it is all NaN and ``value`` is a scalar (the
    usual cases of a table's column, each cheaper than a select)."""
    if cells.is_constant(arr) and np.ndim(value) == 0:  # an absent column: one value, still no allocation
        return arr if not np.isnan(arr[0]) else cells.constant(len(arr), float(value))
    empty = np.isnan(arr)
    if not empty.any():
        return arr
    if np.ndim(value) == 0 and empty.all():
        return np.full(arr.shape, value, dtype=arr.dtype)
    return np.where(empty, value, arr).astype(arr.dtype, copy=False)


def fill_defaults(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Replace NaN (empty) entries of the kernel inputs by the documented defaults, in place and returned.

    Categorical inputs are codes (NaN = empty).  ``dp`` is derived from ``gpus`` (rounded down; a layout that
    does not divide is then reported by the model) and ``gpus`` from ``dp``; one of them must be given.
    """

    def fill(key: str, default: np.ndarray | float) -> None:
        x[key] = nan_to(x[key], default)

    fill("tp", 1.0)
    fill("pp", 1.0)
    fill("kv_heads", x["heads"])
    fill("ffn_hidden", 4.0 * x["hidden"])
    for key in ("experts", "top_k", "cp", "ep", "vpp", "micro_batch"):
        fill(key, 1.0)
    model_parallel = x["tp"] * x["pp"] * x["cp"]
    fill("dp", np.floor(x["gpus"] / model_parallel))
    fill("gpus", model_parallel * x["dp"])
    fill("sp", (x["tp"] > 1).astype(np.float64))
    fill("zero", DEFAULT_ZERO)
    fill("dp_overlap", 1.0)
    fill("pp_overlap", 1.0)
    fill("tied_embeddings", 0.0)
    fill("lora_rank", DEFAULT_LORA_RANK)
    for key, name in CATEGORICAL_DEFAULTS.items():
        fill(key, float(CATEGORICAL[key].index(name)))
    if "moe_imbalance" in x:
        fill("moe_imbalance", 1.0)
    else:
        x["moe_imbalance"] = np.ones_like(x["layers"])
    for key in (*ARCHITECTURE_COLUMNS, "etp"):  # optional model columns: empty = not set (0)
        if key in x:
            fill(key, 0.0)
        else:
            x[key] = np.zeros_like(x["layers"])
    return x
