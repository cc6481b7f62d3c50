"""Study 2: A100 -> H100 -> B200 -> GB200 NVL72 training speed-up, hardware factors separated."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, NullLocator

from dse.frame import train_inputs
from dse.hardware import catalog as hwcat
from dse.plots import (
    PLAIN_NUMBERS,
    color_cycle,
    new_figure,
    save_figure,
)
from dse.studies.common import _best_frame, best_layouts, layout_grid

#: Layout columns kept beside the best rows of a layout search.
from dse.studies.memory_footprint import RECOMPUTE_MODES

# ---- study 2: generation speed-up, factors separated ---------------------------------------------------------

#: Hardware-column groups switched on one at a time, cumulatively, in this order.  The last group also carries
#: the columns that do not enter the training step time (inference GEMM rates, per-layer launch overhead, host
#: link, power), so that after it the hardware is exactly the target's.
FACTOR_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("16-bit FLOP/s", ("tensor_fp16_flops", "matmul_fp16_rate", "attention_rate", "attention_fused_rate",
                        "infer_attention_rate", "infer_mla_decode_rate")),
    ("fp8/fp4 FLOP/s", ("tensor_fp8_flops", "matmul_fp8_rate", "tensor_fp4_flops", "matmul_fp4_rate",
                        "infer_attention_fp8_rate", "infer_mla_decode_fp8_rate")),
    ("HBM bandwidth + capacity", ("hbm_bw", "memory_rate", "hbm_bytes")),
    ("scale-up (NVLink)", ("scaleup_gpus", "scaleup_ring_bw", "scaleup_allreduce_bw", "scaleup_latency_s",
                           "scaleout_latency_s")),
    ("scale-out (NIC)", ("scaleout_bw", "infer_matmul_fp16_rate", "infer_matmul_fp8_rate",
                         "infer_matmul_fp4_rate", "layer_overhead_s", "host_bw", "tdp_w", "mmha_rate",
                         "xqa_rate", "cpu_adam_rate", "host_mem_bytes", "layer_overhead_graphs_s",
                         "infer_allreduce_bw", "infer_allreduce_latency_s", "infer_allgather_bw",
                         "infer_allgather_latency_s", "scaleup_multinode", "moe_routing_skew",
                         "moe_routing_skew_per_doubling", "moe_fp4_gemm_fraction", "moe_fp4_stream_fraction")),
)
#: Step index of the lower-precision group: from it on the layout search may use fp8 / fp4.
LOW_PRECISION_STEP = 2
BASE_SYSTEM = "a100-sxm-80gb"
TARGET_SYSTEMS: tuple[str, ...] = ("h100-sxm-80gb", "b200", "gb200-nvl72")
SYSTEM_LABELS: dict[str, str] = {"a100-sxm-80gb": "A100", "h100-sxm-80gb": "H100", "h200-sxm-141gb": "H200",
                                 "b200": "B200", "gb200-nvl72": "GB200 NVL72"}
SPEEDUP_GPUS = 1024

#: (model, fixed columns, layout axes) of the speed-up study.
SPEEDUP_SCENARIOS: tuple[tuple[str, dict[str, Any], dict[str, list[Any]]], ...] = (
    ("gpt3-175b", {"seq_len": 2048, "global_batch": 1536},
     {"tp": [1, 2, 4, 8, 16, 32], "pp": [1, 2, 4, 8, 16, 32], "vpp": [1, 2, 3, 4, 6], "micro_batch": [1, 2, 4],
      "recompute": list(RECOMPUTE_MODES), "precision": ["bf16", "fp8", "fp4"]}),
    ("mixtral-8x22b", {"seq_len": 4096, "global_batch": 1024},
     {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "vpp": [1, 2, 7], "ep": [1, 2, 4, 8], "micro_batch": [1, 2],
      "recompute": list(RECOMPUTE_MODES), "precision": ["bf16", "fp8", "fp4"]}),
)


def _check_groups() -> None:
    grouped = [c for _, cols in FACTOR_GROUPS for c in cols]
    if sorted(grouped) != sorted(hwcat.HARDWARE_COLUMNS) or len(set(grouped)) != len(grouped):
        raise AssertionError("FACTOR_GROUPS must hold every hardware column exactly once")


def factor_hardware(base: str, target: str) -> dict[str, np.ndarray]:
    """Hardware columns of the cumulative switch from ``base`` to ``target``: K = 1 + len(FACTOR_GROUPS)
    variants (arrays of length K); variant 0 is the base, variant i has groups 1..i set to the target's,
    the last is the target exactly."""
    _check_groups()
    cols = hwcat.hardware_columns(hwcat.system_codes([base, target]))
    k = 1 + len(FACTOR_GROUPS)
    hw = {c: np.full(k, float(v[0])) for c, v in cols.items()}
    for step, (_, group) in enumerate(FACTOR_GROUPS, start=1):
        for c in group:
            hw[c][step:] = float(cols[c][1])
    return hw


def generation_speedup_data(targets: Sequence[str] = TARGET_SYSTEMS, gpus: int = SPEEDUP_GPUS) -> pd.DataFrame:
    """Training speed-up from A100 to each target GPU at equal GPU count, split into hardware factors.

    Method: start from the A100's hardware columns (:func:`dse.hardware.catalog.hardware_columns`) and switch
    on the target's values one group of :data:`FACTOR_GROUPS` at a time, cumulatively, in this order:
    (a) dense 16-bit FLOP/s (tensor peak, achieved GEMM and attention rates), (b) lower precision (fp8 and,
    where the target has it, fp4 peaks and GEMM rates), (c) memory (HBM bandwidth, achieved memory rate,
    capacity), (d) scale-up (domain size, ring and all-reduce bus bandwidths, latencies), (e) scale-out (NIC
    bandwidth; the remaining columns do not enter the training step).  At every step the layout is
    re-optimised: T_i = min over the layout grid of the step time (feasible and fitting rows; precision bf16
    only before step (b) — the A100 has no fp8/fp4 rates anyway).  The factor of step i is
    f_i = T_{i−1} / T_i, so Π f_i = T_A100 / T_target, the total speed-up (per GPU and per cluster alike,
    the GPU count being equal).  The attribution depends on the order: a factor switched on later acts on a
    step time that earlier factors already shortened (e.g. faster compute exposes more communication, which
    the network factors then recover).  Efficiencies are each generation's (``efficiency.csv``); a column's
    achieved rate moves with its group, so (a) includes Hopper's different attention efficiency.

    Scenarios (:data:`SPEEDUP_SCENARIOS`): GPT-3 175B, sequence 2048, global batch 1536; Mixtral 8x22B,
    sequence 4096, global batch 1024, expert parallel 1-8; both on 1024 GPUs (``gpus``).  1024 GPUs are not
    a whole number of 72-GPU NVL72 racks: the model places ranks in order into scale-up domains and does not
    require full racks (14 full racks and a partial one).  Layout grid: tp, pp, vpp, micro-batch, recompute,
    precision (and ep for Mixtral) as listed, tp at most the scale-up domain of the variant (so step (d) of
    GB200 NVL72 also unlocks tp 16 / 32); cp 1, ZeRO-1 distributed optimizer, sequence parallelism and
    overlapped TP / DP / PP communication (the documented defaults).  fp4 training is allowed wherever the
    GPU has fp4 tensor cores, at the Blackwell fp4 GEMM efficiency of ``efficiency.csv`` (an ASSUMPTION there:
    the fp8 value); :func:`speedups_by_precision` gives the totals with the search limited to bf16 or fp8.

    Columns: ``model``, ``target``, ``step`` (0 = A100), ``factor``, ``speedup_factor`` (f_i),
    ``cumulative_speedup`` (Π_{j≤i} f_j), ``total_speedup``, the best layout and its step time breakdown.
    """
    frames = []
    for model, fixed, axes in SPEEDUP_SCENARIOS:
        layouts = layout_grid({"model": model, "system": BASE_SYSTEM, "gpus": gpus, **fixed}, axes)
        x, _ = train_inputs(layouts, f"generation speed-up grid ({model})")
        variants = [factor_hardware(BASE_SYSTEM, t) for t in targets]
        k = 1 + len(FACTOR_GROUPS)
        # variant 0 (the A100) once, then steps 1..5 of every target
        hw = {c: np.concatenate([variants[0][c][:1]] + [v[c][1:] for v in variants]) for c in variants[0]}
        step = np.concatenate([[0]] + [np.arange(1, k)] * len(targets))
        low = (layouts["precision"] != "bf16").to_numpy()
        allowed = ~((step < LOW_PRECISION_STEP)[:, None] & low[None, :])
        best, out = best_layouts(x, hw, allowed)
        rows = _best_frame(layouts, x, best, out)
        rows.insert(0, "model", model)
        rows.insert(1, "target", [BASE_SYSTEM] + [t for t in targets for _ in range(k - 1)])
        rows.insert(2, "step", step)
        rows.insert(3, "factor", ["A100 (baseline)"] + [name for _ in targets for name, _ in FACTOR_GROUPS])
        times = rows["step_time_s"].to_numpy()
        base_time = float(times[0])
        # T_{i-1} of every row: the previous step of the same target, the A100 before step 1
        blocks = times[1:].reshape(len(targets), k - 1)
        prev = np.concatenate([[base_time], np.hstack([np.full((len(targets), 1), base_time),
                                                       blocks[:, :-1]]).ravel()])
        rows.insert(4, "speedup_factor", prev / times)
        rows.insert(5, "cumulative_speedup", base_time / rows["step_time_s"].to_numpy())
        last = rows.groupby("target", sort=False)["step_time_s"].transform("last")
        rows.insert(6, "total_speedup", base_time / last.to_numpy())
        frames.append(rows)
    data = pd.concat(frames, ignore_index=True)
    data["speedup_factor"] = np.where(data["step"] == 0, 1.0, data["speedup_factor"])
    return data


def generation_speedups(data: pd.DataFrame, model: str = "gpt3-175b") -> dict[str, float]:
    """Total per-GPU training speed-ups of ``model`` between generations (equal GPU count, best layout each):
    ``A100→H100``, ``H100→B200``, ``A100→B200`` (and ``B200→GB200 NVL72`` when present)."""
    part = data[(data["model"] == model)]
    best = {t: float(part.loc[part["target"] == t, "step_time_s"].iloc[-1]) for t in part["target"].unique()}
    out: dict[str, float] = {}
    for a, b in (("a100-sxm-80gb", "h100-sxm-80gb"), ("h100-sxm-80gb", "b200"), ("a100-sxm-80gb", "b200"),
                 ("b200", "gb200-nvl72")):
        if a in best and b in best:
            out[f"{SYSTEM_LABELS[a]}→{SYSTEM_LABELS[b]}"] = best[a] / best[b]
    return out


PRECISION_CAPS: tuple[tuple[str, ...], ...] = (("bf16",), ("bf16", "fp8"), ("bf16", "fp8", "fp4"))


def speedups_by_precision(model: str = "gpt3-175b", systems: Sequence[str] = (BASE_SYSTEM, *TARGET_SYSTEMS),
                          gpus: int = SPEEDUP_GPUS) -> pd.DataFrame:
    """Best step time of ``model`` on each catalogued system (real hardware, no factor switching) when the
    layout search may use only bf16, up to fp8, or up to fp4, and the per-GPU speed-ups between consecutive
    systems — the comparison to make with published per-GPU claims, which state the precision used (e.g.
    MLPerf Training rounds ran GPT-3 175B in fp8 on H100 and B200).  Same layout grid and rules as
    :func:`generation_speedup_data`, one kernel call for every (cap, system)."""
    fixed, axes = next((f, a) for m, f, a in SPEEDUP_SCENARIOS if m == model)
    layouts = layout_grid({"model": model, "system": BASE_SYSTEM, "gpus": gpus, **fixed}, axes)
    x, _ = train_inputs(layouts, f"precision-capped grid ({model})")
    codes_ = hwcat.system_codes(list(systems) * len(PRECISION_CAPS))
    hw = hwcat.hardware_columns(codes_)
    caps = np.repeat(np.arange(len(PRECISION_CAPS)), len(systems))
    allowed = np.stack([layouts["precision"].isin(PRECISION_CAPS[c]).to_numpy() for c in caps])
    best, out = best_layouts(x, hw, allowed)
    rows = _best_frame(layouts, x, best, out)
    rows.insert(0, "system", list(systems) * len(PRECISION_CAPS))
    rows.insert(1, "precision_cap", [PRECISION_CAPS[c][-1] for c in caps])
    rows["speedup_vs_previous"] = rows.groupby("precision_cap", sort=False)["step_time_s"].transform(
        lambda t: t.shift(1) / t)
    rows["speedup_vs_first"] = rows.groupby("precision_cap", sort=False)["step_time_s"].transform(
        lambda t: t.iloc[0] / t)
    return rows


def draw_generation_speedup(data: pd.DataFrame, path: str | Path) -> Path:
    """Waterfall of the factor speed-ups on a log axis (so the bars add up to the total), one panel per model,
    one group of bars per target GPU; each factor bar spans from the cumulative speed-up before it to the one
    after it; the grey bar is the total, annotated; the best layout at each step is listed below the bars."""
    models = list(dict.fromkeys(data["model"]))
    targets = [t for t in dict.fromkeys(data["target"]) if t != BASE_SYSTEM]
    names = [name for name, _ in FACTOR_GROUPS]
    colour_of = dict(zip(names, color_cycle(len(names)), strict=True))
    nf = len(names)
    fig = new_figure(12.5, 1.5 + 4.6 * len(models))
    axes = fig.subplots(len(models), 1, squeeze=False).ravel()
    for ax, model in zip(axes, models, strict=True):
        part = data[data["model"] == model]
        base = part[part["step"] == 0].iloc[0]
        hi = float(part["cumulative_speedup"].max())
        lo = float(min(part["cumulative_speedup"].min(), 1.0))
        for g, target in enumerate(targets):
            rows = part[part["target"] == target].sort_values("step")
            x0 = g * (nf + 2.0)
            before = 1.0
            for i, (_, r) in enumerate(rows.iterrows()):  # five bars per group
                after = float(r["cumulative_speedup"])
                f = float(r["speedup_factor"])
                low_, high_ = min(before, after), max(before, after)
                # a factor of ~1 still gets a visible sliver (2 % of the axis value)
                ax.bar(x0 + i, max(high_ - low_, 0.02 * low_), bottom=low_, width=0.8,
                       color=colour_of[str(r["factor"])], edgecolor="k", linewidth=0.4, hatch="//" if f < 1 else None)
                ax.text(x0 + i, high_ * 1.04, f"×{f:.2f}", ha="center", va="bottom", fontsize=7)
                ax.text(x0 + i, lo / 1.08, "\n".join(str(r["layout"]).split()), ha="center", va="top",
                        fontsize=6, color="0.3", linespacing=1.0)
                before = after
            total = float(rows["total_speedup"].iloc[-1])
            ax.bar(x0 + nf, total - 1.0, bottom=1.0, width=0.8, color="0.6", edgecolor="k", linewidth=0.4)
            ax.text(x0 + nf, total * 1.04, f"total\n×{total:.2f}", ha="center", va="bottom", fontsize=8,
                    fontweight="bold")
            ax.text(x0 + (nf - 1) / 2.0 + 0.5, hi * 2.1, f"A100 → {SYSTEM_LABELS.get(target, target)}",
                    ha="center", va="bottom", fontsize=9)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_ylim(lo / 3.3, hi * 3.3)
        ticks = [v for v in (0.5, 1, 2, 3, 5, 10, 20, 30, 50, 100, 200) if lo / 1.2 <= v <= hi * 3.3]
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_major_formatter(PLAIN_NUMBERS)
        ax.yaxis.set_minor_locator(NullLocator())
        ax.text(-0.6, lo / 1.08, "best\nlayout:", ha="right", va="top", fontsize=6, color="0.3")
        ax.set_ylabel("speed-up over A100, cumulative (×, log)")
        ax.set_xticks([])
        ax.set_xlim(-1.6, len(targets) * (nf + 2.0) - 1.2)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.set_title(f"{model}, {SPEEDUP_GPUS} GPUs — A100 best layout {base['layout']}: step "
                     f"{float(base['step_time_s']):.2f} s (layout re-optimised at every step, listed under "
                     "each bar)", fontsize=9, loc="left")
    handles = [Patch(facecolor=colour_of[n], edgecolor="k", linewidth=0.4, label=f"({chr(97 + i)}) {n}")
               for i, n in enumerate(names)]
    handles.append(Patch(facecolor="0.6", edgecolor="k", linewidth=0.4, label="total (product of the factors)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=6, fontsize=8, frameon=False,
               title="hardware group switched from the A100's to the target's, cumulatively in this order")
    fig.suptitle("Training speed-up per GPU generation at equal GPU count, separated into hardware factors "
                 "(attribution depends on the order)", fontsize=11)
    return save_figure(fig, path)
