"""``dse explain``: one configuration, every term of its time and memory breakdown, and its bottleneck.

The numbers come from the same kernel a sweep uses (:func:`dse.frame.evaluate_train` on a one-row table);
:func:`explain_table` returns them as data, :func:`format_explain` draws the text.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from dse import codes
from dse.cost.inference import OPS, inference_ops
from dse.cost.memory import optimizer_layout_bytes
from dse.cost.training import LAYER_BREAKDOWN, MEMORY_BREAKDOWN, MODULES, TIME_BREAKDOWN
from dse.frame import (
    evaluate_decode_bound,
    evaluate_ep_exchange,
    evaluate_infer,
    evaluate_prompt_attention_rate,
    evaluate_routed_expert_rates,
    evaluate_routing_skew,
    evaluate_train,
    infer_inputs,
)
from dse.hardware import catalog as hwcat

Overrides = dict[tuple[str, str], float]

TIME_LABELS = {
    "time_compute_s": "compute (forward + backward)",
    "time_recompute_s": "activation recomputation",
    "time_tp_comm_s": "tensor-parallel comm (exposed)",
    "time_cp_comm_s": "context-parallel comm (exposed)",
    "time_ep_comm_s": "expert-parallel all-to-all (exposed)",
    "time_host_s": "MoE host work (per-expert launches)",
    "time_pp_comm_s": "pipeline send/recv (exposed)",
    "time_bubble_s": "pipeline bubble",
    "time_dp_comm_s": "data-parallel sync (exposed, grad copies)",
    "time_optimizer_s": "optimizer step",
    "time_offload_s": "CPU offload (copies, CPU Adam; exposed)",
}
LAYER_LABELS = {
    "layer_gemm_ms": "GEMMs",
    "layer_attention_ms": "attention core",
    "layer_elementwise_ms": "element-wise kernels, grad copies",
    "layer_recompute_ms": "recomputation",
    "layer_tp_comm_ms": "TP comm (exposed)",
    "layer_cp_comm_ms": "CP comm (exposed)",
    "layer_ep_comm_ms": "EP all-to-all (exposed)",
    "layer_host_ms": "MoE host work (per-expert launches)",
}
MODULE_LABELS = {
    "embedding": "embedding",
    "qkv": "QKV projections",
    "rope": "RoPE (eager kernels)",
    "attention": "attention core (QK^T, softmax, PV)",
    "output": "attention output projection",
    "mlp": "MLP (router, experts)",
    "norm": "norms (fused: + residual, dropout)",
    "other": "residual adds, copies, casts",
    "adapters": "LoRA adapters, NF4 dequantization",
    "lm_head": "output layer (logits GEMM)",
    "loss": "loss, final norm, MTP modules",
    "recompute": "recomputation",
    "comm": "communication (exposed)",
    "host": "MoE host work",
}
#: The named parts of a step term that ``dse explain`` prints under it (dse.cost.training.DETAIL_METRICS).
DETAIL_LABELS = {
    "time_compute_s": (("detail_kernel_launch_s", "eager kernels' fixed time"),),
    "time_dp_comm_s": (("detail_grad_copy_s", "gradient bucket copies"),),
    "time_offload_s": (("detail_cpu_adam_s", "CPU Adam step"), ("detail_offload_copies_s", "host copies (exposed)")),
}
MEMORY_LABELS = {
    "mem_weights_bytes": "weights",
    "mem_grads_bytes": "gradients",
    "mem_optimizer_bytes": "optimizer states",
    "mem_activations_bytes": "activations",
    "mem_buffers_bytes": "runtime + comm buffers",
    "mem_step_extra_bytes": "optimizer-step temporaries",
}


#: The row key of :func:`dse.cost.inference.decode_hbm_bound` in an explained serving or inference row.
HBM_BOUND = "decode_hbm_bound_tokens_per_s_per_gpu"
#: The factor ``dse explain`` applies to the routed experts' GEMMs (:func:`dse.frame.evaluate_routing_skew`).
ROUTING_SKEW = "routing_skew"
#: The prompt attention's rate and kernel in an explained serving row
#: (:func:`dse.frame.evaluate_prompt_attention_rate`).
PROMPT_ATTENTION_RATE, PROMPT_ATTENTION_FP8 = "prompt_attention_flops_per_s", "prompt_attention_fp8"
#: 1 where an explained serving row's expert-parallel tokens travel by all-gather + reduce-scatter
#: (:func:`dse.frame.evaluate_ep_exchange`).
EP_ALLGATHER = "ep_allgather"
#: The routed experts' GEMM rate over the dense one and their weight-streaming rate over memory_rate
#: (:func:`dse.frame.evaluate_routed_expert_rates`).
ROUTED_GEMM, ROUTED_STREAM = "routed_gemm_fraction", "routed_stream_fraction"


def hbm_bound_text(row: pd.Series) -> str:
    """The line that sets the output rate against the HBM bound of reading the KV cache at peak bandwidth."""
    bound = float(row[HBM_BOUND])
    share = float(row["output_tokens_per_s_per_gpu"]) / bound if bound > 0 else float("nan")
    return (f"  {'  ceiling: KV reads at peak HBM, any batch':<40s} {bound:12.1f}    "
            f"({100 * share:.0f} % reached; dse.cost.inference.decode_hbm_bound)")


def explain_row(config: Mapping[str, object], overrides: Overrides | None = None) -> pd.Series:
    """Evaluate one configuration (a mapping of schema columns) and return inputs + outputs as a Series.

    ``overrides`` replaces efficiency constants (a ``dse calibrate`` result)."""
    frame = pd.DataFrame([dict(config)])
    frame.attrs["single_configuration"] = True
    if str(config.get("task", "train")) == "serve":
        from dse.frame import evaluate_serve

        out = evaluate_serve(frame, source="dse explain", overrides=overrides, with_inputs=True)
        row = out.iloc[0].copy()
        row[HBM_BOUND] = evaluate_decode_bound(frame, "serve", "dse explain", overrides)[0]
        row[ROUTING_SKEW] = evaluate_routing_skew(frame, "serve", "dse explain", overrides)[0]
        gemm, stream = evaluate_routed_expert_rates(frame, "serve", "dse explain", overrides)
        row[ROUTED_GEMM], row[ROUTED_STREAM] = gemm[0], stream[0]
        rate, fp8 = evaluate_prompt_attention_rate(frame, "dse explain", overrides)
        row[PROMPT_ATTENTION_RATE], row[PROMPT_ATTENTION_FP8] = rate[0], fp8[0]
        row[EP_ALLGATHER] = evaluate_ep_exchange(frame, "dse explain", overrides)[0]
        row["model"] = config.get("model", "custom model")
        row["task"] = "serve"
        row["stack"] = config.get("stack")
        return row
    if str(config.get("task", "train")) == "infer":
        out = evaluate_infer(frame, source="dse explain", overrides=overrides, with_inputs=True)
        row = out.iloc[0].copy()
        row[HBM_BOUND] = evaluate_decode_bound(frame, "infer", "dse explain", overrides)[0]
        row[ROUTING_SKEW] = evaluate_routing_skew(frame, "infer", "dse explain", overrides)[0]
        gemm, stream = evaluate_routed_expert_rates(frame, "infer", "dse explain", overrides)
        row[ROUTED_GEMM], row[ROUTED_STREAM] = gemm[0], stream[0]
        row["model"] = config.get("model", "custom model")
        row["task"] = "infer"
        return row
    out = evaluate_train(frame, source="dse explain", overrides=overrides, with_inputs=True, modules=True)
    row = out.iloc[0].copy()
    row["model"] = config.get("model", "custom model")
    row["stack"] = config.get("stack")
    return row


def explain_table(row: pd.Series) -> dict[str, pd.DataFrame]:
    """The breakdown tables of one evaluated row: time per step, time per layer, memory per GPU."""
    step = float(row["step_time_s"])
    time = pd.DataFrame({
        "term": [TIME_LABELS[k] for k in TIME_BREAKDOWN],
        "seconds": [float(row[k]) for k in TIME_BREAKDOWN],
    })
    time["share_pct"] = 100.0 * time["seconds"] / step
    layer_total = float(row["layer_time_ms"])
    layer = pd.DataFrame({
        "term": [LAYER_LABELS[k] for k in LAYER_BREAKDOWN],
        "ms": [float(row[k]) for k in LAYER_BREAKDOWN],
    })
    layer["share_pct"] = 100.0 * layer["ms"] / layer_total
    mem_total = float(row["mem_total_bytes"])
    memory = pd.DataFrame({
        "term": [MEMORY_LABELS[k] for k in MEMORY_BREAKDOWN],
        "GB": [float(row[k]) / 1e9 for k in MEMORY_BREAKDOWN],
    })
    memory["share_pct"] = 100.0 * memory["GB"] * 1e9 / mem_total
    tables = {"time": time, "layer": layer, "memory": memory}
    if f"module_{MODULES[0]}_fwd_s" in row:
        tables["modules"] = module_table(row)
    return tables


def module_table(row: pd.Series) -> pd.DataFrame:
    """The slowest pipeline rank's forward and backward in one step, by module (ms and share of the phase), as a
    profiler attributes kernels to the model's modules (:data:`dse.cost.training.MODULES`; Zhang et al. 2023
    Table VI is such a table).  The backward holds the exposed communication and the recomputation."""
    fwd = np.array([float(row[f"module_{k}_fwd_s"]) for k in MODULES]) * 1e3
    bwd = np.array([float(row[f"module_{k}_bwd_s"]) for k in MODULES]) * 1e3
    return pd.DataFrame({"module": list(MODULES), "term": [MODULE_LABELS[k] for k in MODULES],
                         "fwd_ms": fwd, "fwd_pct": 100.0 * fwd / fwd.sum(),
                         "bwd_ms": bwd, "bwd_pct": 100.0 * bwd / bwd.sum()})


def bottleneck(row: pd.Series) -> str:
    """The largest term of the step time, with its share."""
    values = np.array([float(row[k]) for k in TIME_BREAKDOWN])
    i = int(np.argmax(values))
    return f"{TIME_LABELS[TIME_BREAKDOWN[i]]} ({100.0 * values[i] / float(row['step_time_s']):.1f} % of the step)"


def stage_split_text(row: pd.Series) -> str:
    """``pipeline stages: first rank 15 layers + embedding, 6 middle ranks 16 each, last rank 15 + loss
    (embedding_loss split, 8 chunks per rank)`` — the split :func:`dse.cost.pipeline.stage_layers_split`
    gives."""
    from dse.cost.pipeline import stage_layers_split

    def value(key: str) -> float:
        v = row.get(key)
        return float("nan") if v is None or pd.isna(v) else float(v)

    split = str(row.get("pipeline_split", "even"))
    code = 1.0 if split == "embedding_loss" else 0.0
    p, v = float(row["pp"]), float(row["vpp"])
    first, middle, last = (float(np.asarray(a)) for a in stage_layers_split(
        np.asarray(float(row["layers"])), np.asarray(p), np.asarray(v), np.asarray(code),
        np.asarray(value("layers_first_stage")), np.asarray(value("layers_last_stage")),
        np.asarray(0.0 if np.isnan(value("mtp")) else value("mtp"))))
    explicit = not (np.isnan(value("layers_first_stage")) and np.isnan(value("layers_last_stage")))
    how = "explicit first/last" if explicit else f"{split} split"
    mid = f", {int(p) - 2} middle ranks {middle:g} each" if p > 2 else ""
    mtp = value("mtp")
    head = f" + {mtp:g} MTP module{'s' if mtp > 1 else ''}" if mtp > 0 else ""
    return (f"pipeline stages: first rank {first:g} layers + embedding{mid}, last rank {last:g}{head} + output layer "
            f"and loss ({how}, {int(v)} chunk{'s' if v > 1 else ''} per rank)")


def architecture_text(row: pd.Series, serving: bool = True) -> str:
    """The architecture columns a row sets (dse.cost.architecture), e.g. ``attention=mla kv_lora_rank=512 …
    moe_ffn_hidden=2048 shared_experts=1 dense_layers=3 mtp=1``; empty for a plain dense / GQA / MoE model.
    ``serving`` False (training) leaves out ``moe_quant``, which prices inference and serving only."""
    from dse.cost.architecture import ARCHITECTURE_CATEGORIES, ARCHITECTURE_COLUMNS

    parts = []
    for key in (*ARCHITECTURE_COLUMNS, "etp"):
        if key == "moe_quant" and not serving:
            continue  # the experts' storage prices inference and serving only
        value = row.get(key)
        if value is None or pd.isna(value) or (not isinstance(value, str) and float(value) <= 0):
            continue
        if key in ARCHITECTURE_CATEGORIES:
            names = ARCHITECTURE_CATEGORIES[key]
            name = value if isinstance(value, str) else names[int(value)]
            if name != names[0]:
                parts.append(f"{'attention' if key == 'attention_kind' else key}={name}")
        else:
            parts.append(f"{key}={int(float(value))}")
    return " ".join(parts)


def optimizer_text(row: pd.Series) -> str:
    """The row's optimizer layout and what it keeps per trained parameter before sharding
    (:func:`dse.cost.memory.optimizer_layout_bytes`), e.g. "optimizer adam_mixed: 2 + 2 + 12 bytes per trained
    parameter (weights, gradients, states), states sharded over 8 data-parallel ranks (zero 1)"; only the name on
    a LoRA / QLoRA row (the adapters' dtype scales the bytes); empty when the row does not name one."""
    name = row.get("optimizer")
    if not isinstance(name, str) or name not in codes.OPTIMIZER:
        return ""
    if row.get("finetune", "full") != "full":  # adapters: their dtype scales the bytes (adapter_precision)
        return f"optimizer {name}, on the adapters"
    grads, states = optimizer_layout_bytes(np.array([float(codes.OPTIMIZER.index(name))]))
    zero = int(row["zero"])
    shards = int(row["dp"]) * int(row["cp"])
    sharded = {0: "", 1: ", states", 2: ", gradients and states", 3: ", weights, gradients and states"}[min(zero, 3)]
    where = f"{sharded} sharded over {shards} data-parallel ranks (zero {zero})" if zero and shards > 1 else ""
    return (f"optimizer {name}: 2 + {float(grads[0]):g} + {float(states[0]):g} bytes per trained parameter "
            f"(weights, gradients, states){where}")


def format_explain(row: pd.Series) -> str:
    """Readable text for one evaluated configuration."""
    lines = []
    model = row.get("model", "custom model")
    lines.append(
        f"{model}: L={int(row['layers'])} h={int(row['hidden'])} heads={int(row['heads'])} "
        f"kv_heads={int(row['kv_heads'])} ffn={int(row['ffn_hidden'])} vocab={int(row['vocab'])} "
        f"mlp={row['mlp']} experts={int(row['experts'])} top_k={int(row['top_k'])}")
    if architecture_text(row, serving=False):
        lines.append(f"  {architecture_text(row, serving=False)}")
    lines.append(
        f"on {int(row['gpus'])} x {row['system']}: tp={int(row['tp'])} pp={int(row['pp'])} dp={int(row['dp'])} "
        f"cp={int(row['cp'])} ep={int(row['ep'])} vpp={int(row['vpp'])} sp={int(row['sp'])}; "
        f"micro_batch={int(row['micro_batch'])} global_batch={int(row['global_batch'])} "
        f"seq_len={int(row['seq_len'])}"
        + (f" packed, doc_len={int(row['doc_len'])}" if _given(row.get("doc_len")) else "")
        + f"; recompute={row['recompute']} zero={int(row['zero'])} "
        f"precision={row['precision']} attention={row['attention']} tp_overlap={row['tp_overlap']}"
        + (f"; finetune={row['finetune']} lora_rank={int(row['lora_rank'])} lora_targets={row['lora_targets']}"
           if row.get("finetune", "full") != "full" else "")
        + (f"; offload={row['offload']}" if row.get("offload", "none") != "none" else "")
        + (f"; cross_entropy={row['cross_entropy']}" if row.get("cross_entropy", "fused") != "fused" else "")
        + (f"; moe_imbalance={float(row['moe_imbalance']):g}"
           if int(row["experts"]) > 1 and float(row.get("moe_imbalance", 1.0)) != 1.0 else "")
        + (f"; ep_dispatch={row.get('ep_dispatch', 'alltoall')} ep_overlap={row.get('ep_overlap', 'none')}"
           if int(row["experts"]) > 1 and int(row["ep"]) > 1 else "")
        + (f"; stack={row['stack']}" if isinstance(row.get("stack"), str) and row.get("stack") else ""))
    if int(row["pp"]) > 1:
        lines.append(stage_split_text(row))
    reason = str(row["infeasible_reason"])
    if not np.isfinite(float(row["step_time_s"])):
        lines.append(f"\nNo answer for this configuration: {reason}")
        return "\n".join(lines)
    tables = explain_table(row)
    lines.append("")
    lines.append(f"Step time per optimizer step ({int(row['microbatches'])} micro-batches per pipeline)")
    for key, (_, r) in zip(TIME_BREAKDOWN, tables["time"].iterrows(), strict=True):
        lines.append(f"  {r['term']:<40s} {r['seconds']:12.4f} s  {r['share_pct']:6.1f} %")
        for detail, label in DETAIL_LABELS.get(key, ()):
            value = float(row.get(detail, 0.0))
            if value > 0:
                lines.append(f"    {'of which ' + label:<38s} {value:12.4f} s")
    lines.append(f"  {'total':<40s} {float(row['step_time_s']):12.4f} s")
    lines.append("")
    lines.append(f"One layer, one micro-batch, forward + backward: {float(row['layer_time_ms']):.3f} ms "
                 f"(forward {float(row['layer_fwd_ms']):.3f} ms, backward {float(row['layer_bwd_ms']):.3f} ms)")
    for _, r in tables["layer"].iterrows():
        lines.append(f"  {r['term']:<40s} {r['ms']:12.3f} ms {r['share_pct']:6.1f} %")
    if "modules" in tables:
        mods = tables["modules"]
        lines.append("")
        lines.append("Forward and backward by module, one step of the slowest pipeline rank "
                     f"(forward {mods['fwd_ms'].sum():.1f} ms, backward {mods['bwd_ms'].sum():.1f} ms)")
        for _, r in mods.loc[(mods["fwd_ms"] > 0) | (mods["bwd_ms"] > 0)].iterrows():
            lines.append(f"  {r['term']:<40s} {r['fwd_ms']:10.2f} ms {r['fwd_pct']:5.1f} %"
                         f" {r['bwd_ms']:10.2f} ms {r['bwd_pct']:5.1f} %")
    lines.append("")
    lines.append("Throughput")
    lines.append(f"  {'tokens/s':<40s} {float(row['tokens_per_s']):14.1f}")
    lines.append(f"  {'tokens/s per GPU':<40s} {float(row['tokens_per_s_per_gpu']):14.1f}")
    lines.append(f"  {'model TFLOP/s per GPU':<40s} {float(row['model_tflops_per_gpu']):14.1f}")
    lines.append(f"  {'MFU / HFU':<40s} {100 * float(row['mfu']):13.1f}% / {100 * float(row['hfu']):.1f}%")
    lines.append("")
    hbm = float(row["hbm_bytes"]) / 1e9 if "hbm_bytes" in row else float("nan")
    lines.append(f"Memory per GPU (peak pipeline stage; HBM {hbm:.1f} GB)")
    for key, (_, r) in zip(MEMORY_BREAKDOWN, tables["memory"].iterrows(), strict=True):
        lines.append(f"  {r['term']:<40s} {r['GB']:12.2f} GB {r['share_pct']:6.1f} %")
        loss = float(row.get("detail_loss_bytes", 0.0)) if key == "mem_activations_bytes" else 0.0
        if loss > 0:
            label = f"of which the loss ({row.get('cross_entropy', 'fused')})"
            lines.append(f"    {label:<38s} {loss / 1e9:12.2f} GB")
    lines.append(f"  {'total':<40s} {float(row['mem_total_bytes']) / 1e9:12.2f} GB  "
                 f"fits: {'yes' if bool(row['fits']) else 'NO'}")
    if optimizer_text(row):
        lines.append(f"  {optimizer_text(row)}")
    lines.append("")
    lines.append(f"Bottleneck: {bottleneck(row)}")
    if reason:
        lines.append(f"Infeasible: {reason}")
    return "\n".join(lines)


def inference_op_table(config: Mapping[str, object], overrides: Overrides | None = None) -> pd.DataFrame:
    """Per op (prefill and one decode step, per GPU and layer; logits once): FLOPs, bytes, arithmetic
    intensity, the GPU's ridge point and whether the op is compute- or memory-bound."""
    frame = pd.DataFrame([dict(config)])
    frame.attrs["single_configuration"] = True
    x, codes_ = infer_inputs(frame, "dse explain")
    ops = inference_ops(x, hwcat.hardware_columns(codes_, overrides))
    rows = []
    for key, op in ops.items():
        phase, name = key.split("/")
        rows.append({"phase": phase, "op": name, "GFLOP": float(op["flops"][0]) / 1e9,
                     "MB": float(op["bytes"][0]) / 1e6, "FLOP/byte": float(op["intensity"][0]),
                     "ridge FLOP/byte": float(op["ridge"][0]),
                     "bound": "memory" if bool(op["memory_bound"][0]) else "compute"})
    table = pd.DataFrame(rows)
    order = {name: i for i, name in enumerate(OPS)}
    return table.sort_values(["phase", "op"], key=lambda c: c.map(order) if c.name == "op" else
                             c.map({"prefill": 0, "decode": 1})).reset_index(drop=True)


#: What explain says instead of a time per output token when a request has a single output token.
NO_SECOND_TOKEN = "(output_len 1: the prefill makes the only token; there is no token after it)"


def one_output_token(row: pd.Series) -> bool:
    """A request of one output token: no decode step, so no time per output token (TPOT)."""
    try:
        return int(row["output_len"]) == 1
    except (KeyError, TypeError, ValueError):
        return False


def format_explain_infer(row: pd.Series, ops: pd.DataFrame) -> str:
    """Readable text for one evaluated inference configuration."""
    lines = [
        f"{row.get('model', 'custom model')}: L={int(row['layers'])} h={int(row['hidden'])} heads={int(row['heads'])} "
        f"kv_heads={int(row['kv_heads'])} ffn={int(row['ffn_hidden'])} vocab={int(row['vocab'])} mlp={row['mlp']} "
        f"experts={int(row['experts'])} top_k={int(row['top_k'])}",
        f"on {int(row['gpus'])} x {row['system']}: tp={int(row['tp'])} pp={int(row['pp'])} replicas={int(row['dp'])}; "
        f"batch={int(row['batch'])} input_len={int(row['input_len'])} output_len={int(row['output_len'])}; "
        f"precision={row['precision']} kv_precision={row['kv_precision']}",
    ]
    if architecture_text(row):
        lines.insert(1, f"  {architecture_text(row)}")
    if not np.isfinite(float(row["tpot_s"])):
        lines.append(f"\nNo answer for this configuration: {row['infeasible_reason']}")
        return "\n".join(lines)
    one = one_output_token(row)
    tpot = f"{'none':>12s}    {NO_SECOND_TOKEN}" if one else f"{1e3 * float(row['tpot_s']):12.3f} ms"
    lines += ["", "Latency and throughput",
              f"  {'time to first token (prefill)':<40s} {1e3 * float(row['ttft_s']):12.3f} ms",
              f"  {'time per output token (decode step)':<40s} {tpot}",
              f"  {'end-to-end latency of the batch':<40s} {float(row['e2e_latency_s']):12.3f} s",
              f"  {'output tokens/s':<40s} {float(row['output_tokens_per_s']):12.1f}",
              f"  {'output tokens/s per GPU':<40s} {float(row['output_tokens_per_s_per_gpu']):12.1f}",
              hbm_bound_text(row)]
    if not one:  # one output token: the prefill makes it, there is no decode step
        lines += ["", "One decode step, split (all layers)"]
        for key, label in (("decode_gemm_ms", "GEMMs (weight reads)"), ("decode_attention_ms", "attention (KV reads)"),
                           ("decode_tp_comm_ms", "TP all-reduces"), ("decode_logits_ms", "logits"),
                           ("decode_overhead_ms", "per-layer overhead (launches)")):
            lines.append(f"  {label:<40s} {float(row[key]):12.3f} ms")
            if key == "decode_gemm_ms" and expert_width_text(row):
                lines.append(expert_width_text(row))
    shown = ops[ops["phase"] != "decode"] if one and "phase" in ops.columns else ops
    lines += ["", "Ops per GPU and layer (logits once): arithmetic intensity against the ridge point",
              shown.to_string(index=False, float_format=lambda v: f"{v:,.3g}"), ""]
    hbm = float(row["hbm_bytes"]) / 1e9
    lines.append(f"Memory per GPU (HBM {hbm:.1f} GB)")
    for key, label in (("weights_bytes", "weights"), ("kv_cache_bytes", "KV cache"),
                       ("activations_bytes", "activations (prefill peak)")):
        lines.append(f"  {label:<40s} {float(row[key]) / 1e9:12.2f} GB")
    lines.append(f"  {'total (with 2 GB runtime reserve)':<40s} {float(row['mem_total_bytes']) / 1e9:12.2f} GB  "
                 f"fits: {'yes' if bool(row['fits']) else 'NO'}")
    lines.append(f"  {'largest batch that fits':<40s} {int(row['max_batch']):12d}")
    return "\n".join(lines)


SERVE_PART_LABELS = {
    "iter_gemm_ms": "GEMMs (all tokens of the iteration)", "iter_prefill_attention_ms": "prompt attention (causal)",
    "iter_decode_attention_ms": "decode attention (KV reads)", "iter_elementwise_ms": "norms, activations, KV writes",
    "iter_tp_comm_ms": "TP all-reduces", "iter_ep_comm_ms": "EP token exchange (dispatch + combine)",
    "iter_overhead_ms": "per-layer + per-request host overhead",
    "iter_logits_ms": "logits",
    "iter_pp_comm_ms": "pipeline send/recv",
    "iter_draft_ms": "speculative drafter (MTP or EAGLE)",
}
LIMIT_TEXT = {
    "batch": "the engine's maximum of concurrent requests (batch)",
    "kv_memory": "the KV cache that fits in the HBM left after weights and activations",
    "prefill_pool": "the prefill pool's capacity (disaggregated)",
    "kv_transfer": "the link that carries the KV cache from the prefill to the decode pool",
    "tokens": "the token budget per iteration (max_num_tokens)",
    "compute": "the offered load; the iteration is compute-bound (GEMM math)",
    "bandwidth": "the offered load; the iteration is bandwidth-bound (weights and KV reads)",
    "clients": "the clients (closed loop or burst): fewer than the engine would run, or thinking",
}


def expert_width_text(row: pd.Series) -> str:
    """For a model with routed experts: the expert width one GPU runs (the model's moe_ffn_hidden, else its
    ffn_hidden, over tp) and the fraction of their fitted rate its grouped GEMMs reach
    (:func:`dse.cost.inference.expert_width_efficiency`); empty for a dense model."""
    from dse.cost.inference import expert_width_efficiency

    if not _given(row.get("experts")) or float(row["experts"]) <= 1:
        return ""
    moe_f = float(row["moe_ffn_hidden"]) if _given(row.get("moe_ffn_hidden")) else 0.0
    width = (moe_f if moe_f > 0 else float(row["ffn_hidden"])) / float(row["tp"])
    w = float(expert_width_efficiency(np.array([width]))[0])
    ep = float(row["ep"]) if _given(row.get("ep")) else 1.0
    skew = float(row[ROUTING_SKEW])
    why = ("moe_imbalance, as given or as the stack sets it" if _given(row.get("moe_imbalance"))
           else f"the GPU's measured routing skew at ep {ep:.0f}")
    rates = ""
    if _given(row.get(ROUTED_GEMM)):
        rates = (f"\n    routed experts' grouped GEMMs at {float(row[ROUTED_GEMM]):.3f} of the dense GEMM rate, "
                 f"their weights streamed at {float(row[ROUTED_STREAM]):.3f} of memory_rate (the checkpoint's expert "
                 "format on this GPU's measured MoE kernels; dse.cost.inference.routed_expert_format)")
    return (f"    routed experts {width:.0f} wide per GPU: grouped GEMMs at {w:.2f} of their rate "
            "(dse.cost.inference.expert_width_efficiency)\n"
            f"    routed GEMMs x {skew:.2f} for uneven routing ({why}; dse.cost.inference.routing_skew)" + rates)


def format_explain_serve(row: pd.Series) -> str:
    """One screen for a serving configuration: steady state, binding limit, latencies, iteration breakdown."""
    from dse.cost.serving import ITERATION_PARTS

    rate, clients = row.get("request_rate"), row.get("concurrency")
    think, arrival = row.get("think_time_s"), row.get("arrival")
    load = ("maximum load (every request queued)" if rate is None or pd.isna(rate)
            else f"{float(rate):g} requests/s (Poisson)")
    if _given(clients):
        n = int(float(clients))  # type: ignore[arg-type]
        z = float(think) if _given(think) else 0.0  # type: ignore[arg-type]
        load = (f"a burst of {n} requests at once" if str(arrival) == "burst" else
                f"a closed loop of {n} clients" + (f" thinking {z:g} s between requests" if z > 0 else ""))
    batch = row.get("batch")
    lines = [
        f"{row.get('model', 'custom model')}: L={int(row['layers'])} h={int(row['hidden'])} heads={int(row['heads'])} "
        f"kv_heads={int(row['kv_heads'])} vocab={int(row['vocab'])}",
        f"serving on {int(row['gpus'])} x {row['system']}: {int(row['dp'])} replica(s) of tp={int(row['tp'])} "
        f"pp={int(row['pp'])}; precision={row['precision']} kv_precision={row['kv_precision']}; "
        f"input {int(row['input_len'])} + output {int(row['output_len'])} tokens; engine batch "
        f"{'unlimited' if batch is None or pd.isna(batch) else int(batch)}, max_num_tokens "
        f"{'unlimited' if pd.isna(row.get('max_num_tokens')) else int(row['max_num_tokens'])}; {load}"
        + (f"; stack={row['stack']}" if isinstance(row.get("stack"), str) and row.get("stack") else ""),
    ]
    if architecture_text(row):
        lines.insert(1, f"  {architecture_text(row)}")
    pre = row.get("prefill_gpus")
    if pre is not None and not pd.isna(pre):
        lines.append(f"disaggregated: prefill pool {int(pre)} GPUs in replicas of tp={int(row['prefill_tp'])}; "
                     f"decode pool {int(row['tp']) * int(row['pp']) * int(row['dp'])} GPUs (the layout above)"
                     + (f"; KV transfer {1e3 * float(row['kv_transfer_s']):.2f} ms per request"
                        if np.isfinite(float(row["kv_transfer_s"])) else ""))
    if not np.isfinite(float(row["tpot_s"])):
        lines.append(f"\nNo steady state: {row['infeasible_reason']}")
        return "\n".join(lines)
    lines += ["", "Steady state",
              f"  {'output tokens/s (deployment)':<40s} {float(row['output_tokens_per_s']):12.1f}",
              f"  {'output tokens/s per GPU':<40s} {float(row['output_tokens_per_s_per_gpu']):12.1f}",
              f"  {'  decoding only (prompts elsewhere)':<40s} "
              f"{float(row['decode_tokens_per_s_per_gpu']):12.1f}",
              hbm_bound_text(row),
              f"  {'requests/s':<40s} {float(row['requests_per_s']):12.3f}",
              f"  {'concurrent requests (deployment)':<40s} {float(row['running_requests']):12.1f}",
              f"  {'KV cache capacity (requests per replica)':<40s} {float(row['kv_capacity_requests']):12.0f}",
              f"  {'KV cache utilization':<40s} {100 * float(row['kv_cache_utilization']):11.1f}%",
              f"  binding limit: {row['limit']} — {LIMIT_TEXT.get(str(row['limit']), '')}",
              "", "Latency per request",
              f"  {'time to first token (mean)':<40s} {1e3 * float(row['ttft_s']):12.2f} ms",
              f"  {'  p50 / p90 / p99':<40s} " + " / ".join(f"{1e3 * float(row[f'ttft_p{q}_s']):.2f}"
                                                           for q in (50, 90, 99)) + " ms",
              f"  {'  of which waiting to be admitted (mean)':<40s} {1e3 * float(row['queue_wait_s']):12.2f} ms",
              f"  {'time per output token (mean)':<40s} "
              + (f"{'none':>12s}    {NO_SECOND_TOKEN}" if one_output_token(row)
                 else f"{1e3 * float(row['tpot_s']):12.2f} ms"),
              *([] if one_output_token(row) else [
                  f"  {'  p50 / p90 / p99':<40s} " + " / ".join(f"{1e3 * float(row[f'tpot_p{q}_s']):.2f}"
                                                               for q in (50, 90, 99)) + " ms"]),
              f"  {'tokens/s per user':<40s} " + (f"{'none':>12s}" if one_output_token(row)
                                                   else f"{float(row['tokens_per_s_per_user']):12.1f}"),
              "", f"One iteration of one pipeline stage: {float(row['iteration_ms']):.2f} ms, "
                  f"{float(row['iteration_tokens']):.0f} tokens"]
    total = float(row["iteration_ms"])
    for part in ITERATION_PARTS:
        v = float(row[part])
        if part == "iter_ep_comm_ms" and not v > 0.0:  # no expert parallelism: no all-to-all row
            continue
        lines.append(f"  {SERVE_PART_LABELS[part]:<40s} {v:12.3f} ms  {100 * v / total:5.1f} %")
        if part == "iter_gemm_ms" and expert_width_text(row):
            lines.append(expert_width_text(row))
        if part == "iter_ep_comm_ms":
            lines.append("    all-gather + reduce-scatter (the stack's ep_comm: TensorRT-LLM's attention DP; "
                         "dse.cost.serving.allgather_exchange_time)" if float(row[EP_ALLGATHER]) > 0 else
                         "    all-to-all of the routed copies (dse.cost.network.alltoall_time)")
        if part == "iter_prefill_attention_ms":
            kernel = ("FP8 context FMHA (the stack's fp8_context_fmha with an FP8 KV cache or FP8/FP4 GEMMs)"
                      if float(row[PROMPT_ATTENTION_FP8]) > 0 else "16-bit kernels")
            lines.append(f"    {kernel} at {float(row[PROMPT_ATTENTION_RATE]) / 1e12:.0f} TFLOP/s "
                         "(dse.cost.inference.prompt_attention_rate)")
    lines += ["", "Memory per GPU",
              f"  {'weights':<40s} {float(row['weights_bytes']) / 1e9:12.2f} GB",
              f"  {'KV cache in use':<40s} {float(row['kv_cache_bytes']) / 1e9:12.2f} GB",
              f"  {'total':<40s} {float(row['mem_total_bytes']) / 1e9:12.2f} GB of {float(row['hbm_bytes']) / 1e9:.1f}"]
    return "\n".join(lines)


def _given(value: object) -> bool:
    """A cell that holds a number (not empty, not NaN / NA)."""
    try:
        return bool(np.isfinite(float(value)))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
