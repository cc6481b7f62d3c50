"""The five paper studies of the project, each as a figure (PNG) with its plotted data beside it (Parquet).

``python -m dse.studies -o DIR [--only 1,3]`` writes ``DIR/<stem>.png`` and ``DIR/<stem>.parquet`` per study.
Every study is one DATA function returning a pandas DataFrame (tested) and one DRAW function taking that
frame and a path (matplotlib object API on the Agg canvas, no ``pyplot``):

1. :func:`memory_footprint_data` / :func:`draw_memory_footprint` — memory per GPU of GPT-3 175B, GPT 530B and
   GPT 1T on A100 80 GB under the Korthikanti et al. 2022 layouts, for every recomputation mode × sequence
   parallelism (``memory_footprint``);
2. :func:`generation_speedup_data` / :func:`draw_generation_speedup` — the training speed-up A100 → H100 → B200
   → GB200 NVL72, separated into hardware factors switched on one group at a time (``generation_speedup``);
3. :func:`technology_node_data` / :func:`draw_technology_nodes` — a B200-class design rebuilt on every logic
   node from 12 nm to ~1 nm, with the memory and the scale-up network of each era, one factor at a time
   (``technology_nodes``);
4. :func:`inference_bound_data` / :func:`draw_inference_bound` — arithmetic intensity of every op of prefill
   and decode against each GPU's ridge point (``inference_bound``);
5. :func:`memory_technology_data` / :func:`draw_memory_technology` — inference latency of an H100-class chip
   re-equipped with HBM2E … HBM4E at fixed compute (``memory_technology``).

Method common to all studies: the cost model is evaluated once per study on arrays of configurations
(:func:`dse.evaluate`, or the kernels :func:`dse.cost.training.train_step` /
:func:`dse.cost.inference.infer_step` / :func:`dse.cost.inference.inference_ops` on hardware columns from
:func:`dse.hardware.catalog.hardware_columns` or :func:`dse.hardware.derive.derived_hardware_columns`).  Where a
study needs "the best layout", a small product grid of layouts is tiled over every hardware variant of the
study, the kernel is called once on all rows, and per variant the row of least ``step_time_s`` among the
feasible ones (reason code 0 and ``fits``; tensor parallelism inside one scale-up domain, as the sweep
specs' default ``tp_within_scaleup`` constraint) is kept.  Python loops only build the handful of scenarios; no loop
runs over configurations.  Every assumption of a study is stated in its data function's docstring; the model's
own assumptions (efficiencies, overlap, placement) are those of :mod:`dse.cost.training` and
:mod:`dse.cost.inference`.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, NullLocator

import dse
from dse.cost.inference import OPS, infer_step, inference_ops
from dse.cost.training import MEMORY_BREAKDOWN, TIME_BREAKDOWN, train_step
from dse.frame import infer_inputs, train_inputs
from dse.hardware import catalog as hwcat
from dse.hardware import derive
from dse.plots import (
    MEMORY_NAMES,
    PLAIN_NUMBERS,
    TIME_NAMES,
    color_cycle,
    config_label,
    new_figure,
    plain_log,
    save_figure,
    write_plot_data,
)

#: Layout columns kept beside the best rows of a layout search.
LAYOUT: tuple[str, ...] = ("tp", "pp", "vpp", "dp", "cp", "ep", "micro_batch", "recompute", "zero", "precision")


# ---- shared machinery ------------------------------------------------------------------------------------------


def layout_grid(fixed: Mapping[str, Any], axes: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """Product grid of the ``axes`` values with the ``fixed`` columns added (one row per layout).

    ``dp`` is left out: :func:`dse.frame.train_inputs` derives it as ``gpus / (tp·pp·cp)`` and the kernel
    flags the layouts that do not divide, so they simply never win."""
    frame = pd.DataFrame(list(itertools.product(*axes.values())), columns=list(axes))
    for key, value in fixed.items():
        frame[key] = value
    return frame


def best_layouts(x: Mapping[str, np.ndarray], hw: Mapping[str, np.ndarray], allowed: np.ndarray | None = None,
                 tp_within_scaleup: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Best layout per hardware variant, in one call of :func:`dse.cost.training.train_step`.

    ``x`` holds the kernel inputs of n layouts (arrays of length n), ``hw`` the hardware columns of K variants
    (arrays of length K), ``allowed`` an optional (K, n) mask of the layouts a variant may use.  The n × K
    rows are built by tiling (layouts fastest); the result is the index (K,) of the layout of least step time
    among the allowed rows with reason 0 that fit in HBM (−1 where none does) and the kernel outputs as
    (K, n) arrays.  With ``tp_within_scaleup`` (the default, as the sweep specs' constraint of that name) a
    tensor-parallel group must fit in one scale-up domain (tp ≤ scaleup_gpus): Megatron practice, and the
    kernel's rail-optimised k·NIC bus bandwidth would otherwise make cross-node TP look nearly free."""
    n = len(next(iter(x.values())))
    k = len(next(iter(hw.values())))
    xs = {key: np.tile(np.asarray(v), k) for key, v in x.items()}
    hs = {key: np.repeat(np.asarray(v, dtype=np.float64), n) for key, v in hw.items()}
    res = train_step(xs, hs)
    out = {key: np.asarray(v).reshape(k, n) for key, v in res.items()}
    ok = (out["reason"] == 0) & out["fits"].astype(bool) & np.isfinite(out["step_time_s"])
    if allowed is not None:
        ok &= allowed
    if tp_within_scaleup:
        ok &= np.asarray(x["tp"])[None, :] <= np.asarray(hw["scaleup_gpus"], dtype=np.float64)[:, None]
    masked = np.where(ok, out["step_time_s"], np.inf)
    best = np.where(ok.any(axis=1), np.argmin(masked, axis=1), -1)
    return best, out


def _best_frame(layouts: pd.DataFrame, x: Mapping[str, np.ndarray], best: np.ndarray,
                out: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """One row per variant: the winning layout (with the resolved ``dp``), its step time, throughput,
    memory and step-time breakdown (NaN where no layout was feasible)."""
    k = len(best)
    idx = np.maximum(best, 0)
    found = best >= 0
    rows = pd.DataFrame({col: layouts[col].to_numpy()[idx] for col in LAYOUT if col in layouts.columns})
    rows["dp"] = np.asarray(x["dp"])[idx].astype(np.int64)
    for col in ("cp", "ep", "zero"):
        if col not in rows:
            rows[col] = np.asarray(x[col])[idx].astype(np.int64)
    metrics = ("step_time_s", "tokens_per_s_per_gpu", "mem_total_bytes", *TIME_BREAKDOWN)
    for col in metrics:
        rows[col] = np.where(found, out[col][np.arange(k), idx], np.nan)
    rows["layout"] = np.where(found, config_label(rows).to_numpy(), "no feasible layout")
    return rows


# ---- study 1: memory footprint -----------------------------------------------------------------------------------

#: Korthikanti et al. 2022 (arXiv 2205.05198) Table 3: model → (pipeline stages, GPUs = global batch).
KORTHIKANTI_LAYOUTS: dict[str, tuple[int, int]] = {"gpt3-175b": (8, 64), "gpt-530b": (35, 280), "gpt-1t": (64, 512)}
RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "full")


def memory_footprint_data() -> pd.DataFrame:
    """Memory per GPU (peak pipeline stage) of GPT-3 175B, GPT 530B and GPT 1T, per recomputation mode and
    sequence parallelism.

    Layouts of Korthikanti et al. 2022 Table 3 on A100 80 GB: tensor parallel 8, pipeline 8 / 35 / 64 on
    64 / 280 / 512 GPUs (data parallel 1), global batch = GPUs (64 / 280 / 512), micro-batch 1, sequence 2048,
    plain 1F1B schedule, no distributed optimizer (``zero`` 0: every GPU of the (single) data-parallel group
    holds its stage's 16-bit weights, 16-bit gradients and 12 bytes/parameter of fp32 master weights and
    Adam moments).  The catalog models divide: 96 / 8, 105 / 35, 128 / 64 layers per stage.

    ASSUMPTION: the unfused (``attention = standard``) attention of Megatron-LM in 2022, which stores the
    s × s softmax and dropout tensors — what selective recomputation drops.  With a fused FlashAttention
    kernel those tensors never exist and selective recomputation saves nothing.

    Per-GPU terms (:mod:`dse.cost.memory`, peak of the first and the last stage): weights 2·P_stage,
    gradients 2·P_stage, optimizer 12·P_stage, activations = in-flight layer-micro-batches × bytes per layer
    (Korthikanti eq. 2: s·b·h·(34 + 5·a·s/h) without parallelism; /t with tp and sp; 34 → 24 + 10/t without
    sp; the 5·a·s/h term dropped by selective; 2·s·b·h (/t with sp) by full), plus a fixed runtime reserve.
    Columns: ``model``, ``recompute``, ``sp``, ``label``, the five ``mem_*_bytes`` parts, ``mem_total_bytes``,
    ``capacity_bytes`` (80 GiB), ``fits``, ``step_time_s``.
    """
    rows = [
        {"task": "train", "model": model, "system": "a100-sxm-80gb", "gpus": gpus, "tp": 8, "pp": pp, "dp": 1,
         "micro_batch": 1, "global_batch": gpus, "seq_len": 2048, "recompute": mode, "sp": sp, "zero": 0,
         "attention": "standard", "precision": "bf16"}
        for model, (pp, gpus) in KORTHIKANTI_LAYOUTS.items() for mode in RECOMPUTE_MODES for sp in (0, 1)
    ]
    res = dse.evaluate(pd.DataFrame(rows))
    out = res[["model", "recompute", "sp", "tp", "pp", "gpus"]].copy()
    mode = out["recompute"].astype(str).map({"none": "no", "selective": "selective", "full": "full"})
    out["label"] = mode + " recompute, " + np.where(out["sp"] > 0, "with sp", "no sp")
    for col in (*MEMORY_BREAKDOWN, "mem_total_bytes", "step_time_s"):
        out[col] = res[col].astype(np.float64)
    out["capacity_bytes"] = res["hbm_bytes"].astype(np.float64)
    out["fits"] = res["fits"].astype(bool)
    return out.reset_index(drop=True)


def draw_memory_footprint(data: pd.DataFrame, path: str | Path) -> Path:
    """Horizontal stacked bars (GB) of the memory parts, one panel per model, one bar per recomputation mode ×
    sp, the HBM capacity as a vertical line; the total is written at the end of each bar."""
    models = list(dict.fromkeys(data["model"]))
    fig = new_figure(9.0, 1.3 + 2.0 * len(models))
    axes = fig.subplots(len(models), 1, sharex=True, squeeze=False).ravel()
    palette = color_cycle(len(MEMORY_BREAKDOWN))
    cap = float(data["capacity_bytes"].iloc[0]) / 1e9
    top = float(data["mem_total_bytes"].max()) / 1e9
    for ax, model in zip(axes, models, strict=True):
        part = data[data["model"] == model].iloc[::-1]
        y = np.arange(len(part))
        left = np.zeros(len(part))
        for color, col in zip(palette, MEMORY_BREAKDOWN, strict=True):
            width = part[col].to_numpy(dtype=np.float64) / 1e9
            ax.barh(y, width, left=left, height=0.7, color=color, label=MEMORY_NAMES[col])
            left += width
        for yi, total, fits in zip(y, left, part["fits"], strict=True):
            ax.text(total + top * 0.008, yi, f"{total:.0f} GB" + ("" if fits else " — does not fit"),
                    va="center", fontsize=7.5, color="k" if fits else "firebrick", zorder=5,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6})
        ax.axvline(cap, color="k", lw=1.5, ls="--", label=f"A100 HBM capacity (80 GiB = {cap:.1f} GB)")
        ax.set_yticks(y, part["label"].tolist(), fontsize=8)
        ax.set_ylim(-0.6, len(part) - 0.4)
        first = part.iloc[0]
        ax.set_title(f"{model}: tp {int(first['tp'])} × pp {int(first['pp'])} on {int(first['gpus'])} GPUs, "
                     f"global batch {int(first['gpus'])}", fontsize=9, loc="left")
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_axisbelow(True)
    axes[-1].set_xlabel("memory per GPU, peak pipeline stage (GB = 10⁹ bytes)")
    axes[-1].set_xlim(0, top * 1.22)
    handles, labels = axes[0].get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith("A100"))  # parts first, capacity last
    fig.legend([handles[i] for i in order], [labels[i] for i in order], loc="outside lower center", ncols=3,
               fontsize=8, frameon=False)
    fig.suptitle("Memory per GPU vs activation recomputation and sequence parallelism (sp)\n"
                 "A100 80 GB, Korthikanti et al. 2022 layouts, sequence 2048, micro-batch 1, no distributed "
                 "optimizer, unfused attention", fontsize=10)
    return save_figure(fig, path)


# ---- study 2: generation speed-up, factors separated ---------------------------------------------------------

#: Hardware-column groups switched on one at a time, cumulatively, in this order.  The last group also carries
#: the columns that do not enter the training step time (inference GEMM rates, per-layer launch overhead, host
#: link, power), so that after it the hardware is exactly the target's.
FACTOR_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("16-bit FLOP/s", ("tensor_fp16_flops", "matmul_fp16_rate", "attention_rate")),
    ("fp8/fp4 FLOP/s", ("tensor_fp8_flops", "matmul_fp8_rate", "tensor_fp4_flops", "matmul_fp4_rate")),
    ("HBM bandwidth + capacity", ("hbm_bw", "memory_rate", "hbm_bytes")),
    ("scale-up (NVLink)", ("scaleup_gpus", "scaleup_ring_bw", "scaleup_allreduce_bw", "scaleup_latency_s",
                           "scaleout_latency_s")),
    ("scale-out (NIC)", ("scaleout_bw", "infer_matmul_fp16_rate", "infer_matmul_fp8_rate",
                         "infer_matmul_fp4_rate", "layer_overhead_s", "host_bw", "tdp_w")),
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


# ---- study 3: technology nodes -------------------------------------------------------------------------------

NODES: tuple[str, ...] = ("n12", "n7", "n5", "n4", "n3", "n2", "a14", "a10")
#: Node → (memory technology, scale-up network) of its era, anchored on the NVIDIA GPU made on (or closest
#: to) the node: V100 (12 nm: HBM2, NVLink 2), A100 (7 nm: HBM2E, NVLink 3), H100 (4N, a 5 nm-class process:
#: HBM3, NVLink 4), B200 (4NP: HBM3E, NVLink 5 in an 8-GPU HGX — the base design itself), Rubin (3 nm: HBM4,
#: NVLink 6 with its 72-GPU domain); n2, A14 and A10 take the newest rows of the tables (HBM4E, NVLink 6).
ROADMAP: dict[str, tuple[str, str]] = {
    "n12": ("hbm2", "nvlink2"), "n7": ("hbm2e", "nvlink3"), "n5": ("hbm3", "nvlink4"), "n4": ("hbm3e", "nvlink5"),
    "n3": ("hbm4", "nvlink6"), "n2": ("hbm4e", "nvlink6"), "a14": ("hbm4e", "nvlink6"), "a10": ("hbm4e", "nvlink6"),
}
SCENARIOS: tuple[str, ...] = ("logic only", "memory only", "network only", "all")
TECH_BASE = "b200"
TECH_LAYOUT_AXES: dict[str, list[Any]] = {"tp": [1, 2, 4, 8, 16], "pp": [1, 2, 4, 8, 16, 32],
                                          "vpp": [1, 2, 3, 4, 6], "micro_batch": [1, 2, 4],
                                          "recompute": list(RECOMPUTE_MODES), "precision": ["bf16"]}


def technology_overrides() -> pd.DataFrame:
    """One row per (scenario, node): the node, memory and network technology ids of the derived chip."""
    old_mem, old_net = ROADMAP[NODES[0]]
    rows = []
    for scenario in SCENARIOS:
        for node in NODES:
            mem, net = ROADMAP[node]
            rows.append({
                "scenario": scenario, "node": node if scenario in ("logic only", "all") else NODES[0],
                "memory_tech": mem if scenario in ("memory only", "all") else old_mem,
                "network_tech": net if scenario in ("network only", "all") else old_net, "era": node,
            })
    return pd.DataFrame(rows)


def technology_node_data(gpus: int = 1024) -> pd.DataFrame:
    """Best GPT-3 175B training step of a B200-class design rebuilt on each logic node, four scenarios.

    Derived chip (:mod:`dse.hardware.derive`): the B200 (two dies of 800 mm², 1000 W, eight memory stacks,
    Blackwell efficiency constants and latencies, 400 Gb/s NIC) with its logic node, memory technology and
    scale-up network replaced.  Dense tensor FLOP/s of every precision scale as

        peak = peak_B200 · min( ρ·v / (ρ·v)_n4 ,  η / η_n4 )

    (ρ logic density, v speed at iso-power, η performance per watt; equal area and power, so the first term
    is the transistor × clock limit and the second the power limit), HBM bandwidth and capacity are
    8 stacks × the technology's per-stack values at the shipped operating point, and the scale-up link gives
    the per-GPU bandwidth and, for NVLink 6, a 72-GPU domain.  Roadmap (:data:`ROADMAP`): n12 HBM2 + NVLink 2,
    n7 HBM2E + NVLink 3, n5 HBM3 + NVLink 4, n4 HBM3E + NVLink 5 (= the catalogued B200), n3 HBM4 + NVLink 6,
    n2 / A14 / A10 HBM4E + NVLink 6 (no newer memory or link is in the tables, so beyond n2 only logic
    improves).  At n4 the "all" design has the B200's FLOP/s, bandwidth and link; its capacity is 8 × 24 GiB
    = 192 GiB (HBM3E's reference stack) against the catalogue's 180 GB.  Scenarios: "logic only" (node
    follows the roadmap; HBM2 and NVLink 2 kept), "memory only" (12 nm logic and NVLink 2; memory follows),
    "network only" (12 nm logic and HBM2; network follows), "all".  At n12 the four coincide.

    Workload: 1024 GPUs, sequence 2048, global batch 1536, bf16 only (so precision is not a confound); the
    layout is re-optimised per point over tp 1-16, pp 1-32, vpp 1-6, micro-batch 1-4 and every recomputation
    mode (:data:`TECH_LAYOUT_AXES`), ZeRO-1, sequence parallelism, overlapped communication.  Columns:
    ``scenario``, ``node``, ``era``, the technology ids, the derived hardware (``tensor_fp16_flops``,
    ``hbm_bw``, ``hbm_bytes``, ``scaleup_ring_bw``, ``scaleup_gpus``), the best layout, its step time and breakdown,
    ``speedup_vs_n12`` and ``dominant`` (the largest breakdown term).
    """
    spec = technology_overrides()
    k = len(spec)
    system = np.full(k, hwcat.system_codes([TECH_BASE])[0])
    overrides = {
        "node": derive.codes("logic", spec["node"].to_numpy(), "node").astype(np.float64),
        "memory_tech": derive.codes("memory", spec["memory_tech"].to_numpy(), "memory_tech").astype(np.float64),
        "network_tech": derive.codes("network", spec["network_tech"].to_numpy(), "network_tech").astype(np.float64),
    }
    hw = derive.derived_hardware_columns(system, overrides)
    layouts = layout_grid({"model": "gpt3-175b", "system": TECH_BASE, "gpus": gpus, "seq_len": 2048,
                           "global_batch": 1536}, TECH_LAYOUT_AXES)
    x, _ = train_inputs(layouts, "technology-node grid")
    best, out = best_layouts(x, hw)
    rows = _best_frame(layouts, x, best, out)
    data = pd.concat([spec.reset_index(drop=True), rows], axis=1)
    data["tensor_fp16_flops"] = hw["tensor_fp16_flops"]
    data["hbm_bw"] = hw["hbm_bw"]
    data["hbm_bytes"] = hw["hbm_bytes"]
    data["scaleup_ring_bw"] = hw["scaleup_ring_bw"]
    data["scaleup_gpus"] = hw["scaleup_gpus"]
    ref = float(data.loc[(data["scenario"] == "all") & (data["node"] == NODES[0]), "step_time_s"].iloc[0])
    data["speedup_vs_n12"] = ref / data["step_time_s"]
    parts = data[list(TIME_BREAKDOWN)].to_numpy(dtype=np.float64)
    data["dominant"] = np.asarray(TIME_BREAKDOWN, dtype=object)[np.nanargmax(np.nan_to_num(parts, nan=-1.0), axis=1)]
    for col in TIME_BREAKDOWN:
        data[col.replace("time_", "frac_")] = data[col] / data["step_time_s"]
    return data


def draw_technology_nodes(data: pd.DataFrame, path: str | Path) -> Path:
    """Left: best step time vs node per scenario (log y; right axis: speed-up over the all-12 nm design);
    right: the step time breakdown of the "all" scenario as stacked fractions, the dominant term named."""
    fig = new_figure(13.0, 5.6)
    ax, bx = fig.subplots(1, 2, width_ratios=[1.15, 1.0])
    pos = np.arange(len(NODES))
    colour_of = dict(zip(SCENARIOS, ["tab:blue", "tab:orange", "tab:green", "k"], strict=True))
    styles = dict(zip(SCENARIOS, ["-o", "-s", "-^", "-D"], strict=True))
    for scenario in SCENARIOS:
        part = data[data["scenario"] == scenario].set_index("era").loc[list(NODES)]
        ax.plot(pos, part["step_time_s"], styles[scenario], color=colour_of[scenario], ms=4.5,
                lw=2.2 if scenario == "all" else 1.4, label=scenario)
    everything = data[data["scenario"] == "all"].set_index("era").loc[list(NODES)]
    for p, (_, r) in list(zip(pos, everything.iterrows(), strict=True))[1:]:
        ax.annotate(f"×{float(r['speedup_vs_n12']):.1f}", (p, float(r["step_time_s"])), textcoords="offset points",
                    xytext=(0, -11), ha="center", va="top", fontsize=7)
    for i, scenario in enumerate(SCENARIOS[:3]):  # the single-factor lines end with their total speed-up
        last = data[(data["scenario"] == scenario) & (data["era"] == NODES[-1])].iloc[0]
        ax.annotate(f"{scenario} ×{float(last['speedup_vs_n12']):.2f}", (pos[-1], float(last["step_time_s"])),
                    textcoords="offset points", xytext=(-4, 6 + 9 * (i != 0) * (2 - i)), ha="right",
                    va="bottom", fontsize=7, color=colour_of[scenario])
    labels = [f"{n}\n{m.upper()}\n{net.replace('nvlink', 'NVLink ')}" for n, (m, net) in ROADMAP.items()]
    ax.set_xticks(pos, labels, fontsize=7.5)
    ax.set_xlabel("logic node (top), with the memory and scale-up network of its era")
    ax.set_yscale("log")
    plain_log(ax.yaxis)
    ax.set_ylabel("best training step time (s, log) — lower is better")
    ax.grid(True, which="major", alpha=0.3)
    ref = float(everything["step_time_s"].iloc[0])
    lo_t = float(data["step_time_s"].min())
    ax.set_ylim(lo_t / 1.6, float(data["step_time_s"].max()) * 1.7)

    def inverse(v: Any) -> Any:
        v = np.asarray(v, dtype=np.float64)
        return ref / np.where(v > 0, v, np.nan)

    sec = ax.secondary_yaxis("right", functions=(inverse, inverse))
    sec.set_ylabel("speed-up over the all-12 nm design (×, log)")
    sec.yaxis.set_major_locator(FixedLocator([1, 2, 3, 5, 10, 20, 30, 50]))
    sec.yaxis.set_major_formatter(PLAIN_NUMBERS)
    sec.yaxis.set_minor_locator(NullLocator())
    ax.legend(title="what follows the roadmap", fontsize=8, title_fontsize=8, loc="lower left")
    ax.set_title("GPT-3 175B, 1024 GPUs, batch 1536 × 2048, bf16;\nB200-class design (2 × 800 mm², 1000 W, "
                 "8 HBM stacks) rebuilt per node;\nlabels: speed-up of 'all' over n12", fontsize=9)

    parts = [c for c in TIME_BREAKDOWN if (everything[c] > 0).any()]
    palette = dict(zip(TIME_BREAKDOWN, color_cycle(len(TIME_BREAKDOWN)), strict=True))
    bottom = np.zeros(len(NODES))
    for col in parts:
        frac = (everything[col] / everything["step_time_s"]).to_numpy(dtype=np.float64)
        bx.bar(pos, frac, bottom=bottom, width=0.75, color=palette[col], label=TIME_NAMES.get(col, col))
        bottom += frac
    for p, (_, r) in zip(pos, everything.iterrows(), strict=True):
        bx.text(p, 1.02, TIME_NAMES.get(str(r["dominant"]), str(r["dominant"])).split(" (")[0], rotation=90,
                ha="center", va="bottom", fontsize=7)
        bx.text(p, -0.02, "\n".join(str(r["layout"]).split()), ha="center", va="top", fontsize=6, color="0.3")
        compute = float(r["time_compute_s"]) / float(r["step_time_s"])
        bx.text(p, compute / 2.0, f"{100 * compute:.0f} %", ha="center", va="center", fontsize=7, color="w")
    bx.set_xticks(pos, ["\n" * 5 + n for n in NODES], fontsize=8)
    bx.set_ylim(0, 1.32)
    bx.yaxis.set_major_locator(FixedLocator([0, 0.2, 0.4, 0.6, 0.8, 1.0]))
    bx.set_ylabel("fraction of the step time")
    bx.set_xlabel("logic node ('all' scenario; best layout under each bar, dominant term above)")
    bx.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, title="step time term",
              title_fontsize=8)
    bx.set_title("What the step time is made of ('all' scenario);\ncompute = GEMMs + attention + memory-bound "
                 "element-wise kernels", fontsize=9)
    fig.suptitle("Technology-node design-space exploration, 12 nm → ~1 nm: logic vs memory vs network",
                 fontsize=11)
    return save_figure(fig, path)


# ---- study 4: compute- vs memory-bound ops in inference ------------------------------------------------------

BOUND_SYSTEMS: tuple[str, ...] = ("a100-sxm-80gb", "h100-sxm-80gb", "b200")
BOUND_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: Decode ops that are GEMMs with a weight operand (attention multiplies by the per-request KV cache instead).
WEIGHT_GEMMS: tuple[str, ...] = ("qkv_proj", "out_proj", "ffn_up", "ffn_down", "logits")
INFER_SCENARIO: dict[str, Any] = {"task": "infer", "model": "llama2-70b", "tp": 8, "pp": 1, "input_len": 2048,
                                  "output_len": 256, "precision": "bf16"}


def inference_bound_data(systems: Sequence[str] = BOUND_SYSTEMS,
                         batches: Sequence[int] = BOUND_BATCHES) -> pd.DataFrame:
    """Arithmetic intensity of every op of prefill and of one decode step against each GPU's ridge point.

    Llama 2 70B, tp 8, bf16 (weights, activations and KV cache 2 bytes), input 2048, output 256, batch 1-512,
    on A100, H100 and B200 (:func:`dse.cost.inference.inference_ops`, per GPU and layer, logits once).  An
    op of F FLOPs moving B HBM bytes has intensity I = F / B; it is memory-bound when I < ridge =
    peak FLOP/s / peak HBM bytes/s at its precision (Williams et al. 2009; peaks, not achieved rates).  For a
    GEMM of M tokens, N outputs, K inputs: F = 2·M·N·K, B = 2·(M·K + K·N + M·N), so I = 1 / (1/M + 1/N + 1/K):
    I ≈ M when M ≪ N, K (decode: M = batch; the weights are read once per step whatever the batch) and
    I → 1 / (1/N + 1/K) as M grows (prefill: M = batch × 2048 tokens).  The
    logits of prefill are computed for the last token of each request only (M = batch).  Decode attention
    reads the KV cache of each request once per step: I = 4·h/t / (4·kv_heads/t·d) ≈ heads / kv_heads per GPU,
    independent of the batch.  The decode step is evaluated at the mean context 2048 + 128.
    Columns: ``system``, ``batch``, ``phase``, ``op``, ``flops``, ``bytes``, ``intensity``, ``ridge``,
    ``memory_bound``.
    """
    grid = pd.DataFrame(list(itertools.product(systems, batches)), columns=["system", "batch"])
    frame = grid.assign(**INFER_SCENARIO)
    x, codes_ = infer_inputs(frame, "inference-bound grid")
    ops = inference_ops(x, hwcat.hardware_columns(codes_))
    pieces = []
    for key, op in ops.items():  # 12 ops, each over every (system, batch) row
        phase, name = key.split("/")
        piece = grid.copy()
        piece["phase"], piece["op"] = phase, name
        for col in ("flops", "bytes", "intensity", "ridge", "memory_bound"):
            piece[col] = np.asarray(op[col])
        pieces.append(piece)
    data = pd.concat(pieces, ignore_index=True)
    data["memory_bound"] = data["memory_bound"].astype(bool)
    return data


OP_NAMES: dict[str, str] = {"qkv_proj": "QKV projection", "out_proj": "output projection",
                            "ffn_up": "FFN up + gate (SwiGLU)", "ffn_down": "FFN down", "logits": "logits (LM head)",
                            "attention": "attention core"}


def draw_inference_bound(data: pd.DataFrame, path: str | Path) -> Path:
    """Two panels (prefill, decode step): intensity vs batch (log-log), one line per op; each GPU's ridge as a
    horizontal line; the region below every ridge (memory-bound on all GPUs) shaded blue, above every ridge
    (compute-bound on all) orange; between the ridges the bound depends on the GPU.  Intensity does not depend
    on the GPU at one precision, so one line per op serves all three."""
    fig = new_figure(12.5, 5.4)
    axes = fig.subplots(1, 2, sharey=True)
    ops = list(OPS)
    colour_of = dict(zip(ops, color_cycle(len(ops)), strict=True))
    markers = dict(zip(ops, ["o", "s", "^", "D", "v", "P"], strict=True))
    ridges = data[data["op"] == "qkv_proj"].groupby("system", sort=False)["ridge"].first()
    lo_r, hi_r = float(ridges.min()), float(ridges.max())
    ymin = float(data["intensity"].min()) / 2.0
    ymax = float(data["intensity"].max()) * 3.0
    batches = np.sort(data["batch"].unique())
    styles = ["--", "-.", ":"]
    for ax, phase in zip(axes, ("prefill", "decode"), strict=True):
        part = data[data["phase"] == phase]
        ax.axhspan(ymin, lo_r, color="tab:blue", alpha=0.07, lw=0)
        ax.axhspan(hi_r, ymax, color="tab:orange", alpha=0.08, lw=0)
        for op in ops:
            line = part[(part["op"] == op) & (part["system"] == part["system"].iloc[0])].sort_values("batch")
            ax.plot(line["batch"], line["intensity"], "-", marker=markers[op], ms=4, color=colour_of[op],
                    label=OP_NAMES[op])
        for style, (system, ridge) in zip(styles, ridges.items(), strict=False):
            ax.axhline(ridge, color="0.25", ls=style, lw=1.1,
                       label=f"ridge {SYSTEM_LABELS.get(str(system), system)}: {ridge:.0f} FLOP/byte")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(list(batches)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(list(batches), [str(b) for b in batches])
        ax.set_yscale("log")
        plain_log(ax.yaxis, (1.0,))
        ax.set_ylim(ymin, ymax)
        ax.set_xlabel("batch (requests)")
        ax.grid(True, which="major", alpha=0.3)
        title = ("prefill: batch × 2048 prompt tokens per GEMM (logits: last token only)" if phase == "prefill"
                 else "one decode step: batch tokens per GEMM, KV cache at context 2176")
        ax.set_title(title, fontsize=9)
        ax.text(batches[-1], ymin * 1.3, "memory-bound on every GPU\n(below the lowest ridge)", ha="right",
                va="bottom", fontsize=8, color="tab:blue")
        ax.text(batches[0], ymax / 1.3, "compute-bound on every GPU (above the highest ridge)", ha="left",
                va="top", fontsize=8, color="tab:orange")
        if phase == "decode":
            ax.annotate("weight GEMMs: intensity ≈ batch\n(all weights read once per step)", (8, 8.0),
                        xytext=(2.2, 40), fontsize=7.5, ha="center", arrowprops={"arrowstyle": "-", "lw": 0.6})
            ax.text(batches[-1], 8.0 * 1.15, "attention: ≈ heads / kv_heads, any batch", ha="right", va="bottom",
                    fontsize=7.5, color=colour_of["attention"])
    axes[0].set_ylabel("arithmetic intensity (FLOP/byte, log)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=5, fontsize=8, frameon=False)
    fig.suptitle("Llama 2 70B inference, tp 8, bf16, input 2048 / output 256: which ops are compute- or "
                 "memory-bound\n(per GPU and layer; an op is memory-bound on a GPU when it lies below that "
                 "GPU's ridge = peak 16-bit FLOP/s ÷ peak HBM bandwidth)", fontsize=10)
    return save_figure(fig, path)


# ---- study 5: inference latency vs DRAM technology -----------------------------------------------------------

MEMORY_TECHS: tuple[str, ...] = ("hbm2e", "hbm3", "hbm3e", "hbm4", "hbm4e")
MEMTECH_BASE = "h100-sxm-80gb"
MEMTECH_BATCHES: tuple[int, ...] = (1, 16, 128)


def memory_technology_data(base: str = MEMTECH_BASE, techs: Sequence[str] = MEMORY_TECHS,
                           batches: Sequence[int] = MEMTECH_BATCHES) -> pd.DataFrame:
    """Inference latency of a derived chip whose only change is its DRAM technology.

    Base: the H100 SXM (compute, efficiencies, per-layer launch overhead, NVLink 4, five memory stacks) with
    ``memory_tech`` ∈ HBM2E, HBM3, HBM3E, HBM4, HBM4E and the same five stacks
    (:func:`dse.hardware.derive.derived_hardware_columns`): bandwidth = 5 × the per-stack rate at the shipped
    operating point (reference GPU's, else 0.85 × headline), capacity = 5 × per-stack capacity.  ASSUMPTION:
    the package takes HBM4's 2048-bit stacks without other change (a real design needs a new memory PHY).
    HBM3 reproduces the catalogued H100 (3.35 TB/s).

    Workload: Llama 2 70B, tp 8, bf16, input 2048, output 256, batch 1, 16, 128.  The inference model
    (:mod:`dse.cost.inference`) times every op as F / P_eff + B / W_eff plus a fixed per-layer overhead, so
    TPOT = Σ_ops (F/P + B/W) + L·overhead + TP all-reduces: the decode step's B (all weights + the KV cache)
    dominates its F, hence TPOT follows 1 / bandwidth down to the overhead floor; prefill (batch × 2048
    tokens per GEMM) is dominated by F / P, hence TTFT barely moves.  Columns: ``memory_tech``, ``batch``,
    ``hbm_bw``, ``hbm_bytes``, ``ttft_s``, ``tpot_s``, ``e2e_latency_s``, the decode split
    (``decode_gemm_ms``, ``decode_attention_ms``, ``decode_tp_comm_ms``, ``decode_logits_ms``,
    ``decode_overhead_ms``, ``decode_other_ms`` = the rest: element-wise kernels), ``fits``, and latencies
    relative to the first technology (``*_rel``).
    """
    grid = pd.DataFrame(list(itertools.product(techs, batches)), columns=["memory_tech", "batch"])
    frame = grid.assign(**INFER_SCENARIO, system=base)
    x, codes_ = infer_inputs(frame, "memory-technology grid")
    mem = derive.codes("memory", grid["memory_tech"].to_numpy(), "memory_tech").astype(np.float64)
    hw = derive.derived_hardware_columns(codes_, {"memory_tech": mem})
    res = infer_step(x, hw)
    data = grid.copy()
    data["hbm_bw"] = hw["hbm_bw"]
    data["hbm_bytes"] = hw["hbm_bytes"]
    for col in ("ttft_s", "tpot_s", "e2e_latency_s", "decode_gemm_ms", "decode_attention_ms", "decode_tp_comm_ms",
                "decode_logits_ms", "decode_overhead_ms", "kv_cache_bytes", "weights_bytes"):
        data[col] = np.asarray(res[col], dtype=np.float64)
    # the decode step's remaining terms: element-wise kernels (norms, activation, KV append) and pipeline p2p
    data["decode_other_ms"] = data["tpot_s"] * 1e3 - data[["decode_gemm_ms", "decode_attention_ms",
                                                            "decode_tp_comm_ms", "decode_logits_ms",
                                                            "decode_overhead_ms"]].sum(axis=1)
    data["fits"] = np.asarray(res["fits"], dtype=bool)
    first = data.groupby("batch")[["ttft_s", "tpot_s", "e2e_latency_s"]].transform("first")
    for col in ("ttft_s", "tpot_s", "e2e_latency_s"):
        data[col.replace("_s", "_rel")] = data[col] / first[col]
    data["bw_rel"] = data["hbm_bw"] / data.groupby("batch")["hbm_bw"].transform("first")
    return data


DECODE_PARTS: dict[str, str] = {
    "decode_gemm_ms": "weight GEMMs (weight reads)", "decode_attention_ms": "attention (KV-cache reads)",
    "decode_other_ms": "element-wise kernels", "decode_logits_ms": "logits (LM head)",
    "decode_tp_comm_ms": "TP all-reduces", "decode_overhead_ms": "per-layer launch overhead (fixed)",
}


def draw_memory_technology(data: pd.DataFrame, path: str | Path) -> Path:
    """Four panels against HBM bandwidth (log x, each technology labelled with bandwidth and capacity): TPOT
    (ms), TTFT (ms), both relative to the first technology with the 1 / bandwidth line, and the decode step of
    the smallest batch split into its terms (stacked, ms) — the bandwidth-bound terms shrink, the fixed
    per-layer overhead does not."""
    techs = list(dict.fromkeys(data["memory_tech"]))
    batches = sorted(data["batch"].unique())
    colour_of = dict(zip(batches, color_cycle(len(batches)), strict=True))
    fig = new_figure(12.0, 9.0)
    (ax_tpot, ax_ttft), (rel, split) = fig.subplots(2, 2)
    bw = data.groupby("memory_tech", sort=False)["hbm_bw"].first().loc[techs].to_numpy() / 1e12
    cap = data.groupby("memory_tech", sort=False)["hbm_bytes"].first().loc[techs].to_numpy() / 1e9
    ticks = [f"{t.upper()}\n{b:.1f} TB/s\n{c:.0f} GB" for t, b, c in zip(techs, bw, cap, strict=True)]
    for ax, col, name in ((ax_tpot, "tpot_s", "time per output token (TPOT)"),
                          (ax_ttft, "ttft_s", "time to first token (TTFT)")):
        for b in batches:
            line = data[data["batch"] == b].set_index("memory_tech").loc[techs]
            ax.plot(bw, line[col] * 1e3, "-o", ms=4, color=colour_of[b], label=f"batch {b}")
        ax.set_yscale("log")
        plain_log(ax.yaxis)
        ax.set_ylabel(f"{name} (ms, log)")
        ax.legend(fontsize=8, loc="upper right" if col == "tpot_s" else "center right",
                  bbox_to_anchor=None if col == "tpot_s" else (1.0, 0.33))
    ax_tpot.set_title("Decode step", fontsize=9)
    ax_ttft.set_title("Prefill of the batch (2048 prompt tokens per request)", fontsize=9)
    for b in batches:
        line = data[data["batch"] == b].set_index("memory_tech").loc[techs]
        rel.plot(bw, line["tpot_rel"], "-o", ms=4, color=colour_of[b], label=f"TPOT, batch {b}")
        rel.plot(bw, line["ttft_rel"], "--s", ms=3.5, color=colour_of[b], alpha=0.8, label=f"TTFT, batch {b}")
    rel.plot(bw, bw[0] / bw, ":", color="k", lw=1.5, label="∝ 1 / bandwidth")
    rel.set_yscale("log")
    rel.yaxis.set_major_locator(FixedLocator([0.1, 0.2, 0.3, 0.5, 0.7, 1.0]))
    rel.yaxis.set_major_formatter(PLAIN_NUMBERS)
    rel.yaxis.set_minor_locator(NullLocator())
    rel.set_ylabel(f"latency relative to {techs[0].upper()} (log)")
    rel.set_title("TPOT falls with bandwidth down to a fixed floor; TTFT falls less", fontsize=9)
    rel.legend(fontsize=7, loc="lower left", ncols=2)

    smallest = data[data["batch"] == batches[0]].set_index("memory_tech").loc[techs]
    bottom = np.zeros(len(techs))
    palette = color_cycle(len(DECODE_PARTS), "tab10")
    width = np.diff(np.log(bw)).min() * 0.55 if len(bw) > 1 else 0.3
    for color, (col, name) in zip(palette, DECODE_PARTS.items(), strict=True):
        values = smallest[col].to_numpy(dtype=np.float64)
        split.bar(bw, values, bottom=bottom, width=bw * width, color=color, label=name, edgecolor="k",
                  linewidth=0.3)
        bottom += values
    split.set_ylabel(f"decode step at batch {batches[0]}, split (ms)")
    split.set_ylim(0, bottom.max() * 1.12)
    split.set_title(f"TPOT at batch {batches[0]}: what each term costs", fontsize=9)
    split.legend(fontsize=7, loc="upper right")
    for ax in (ax_tpot, ax_ttft, rel, split):
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(list(bw)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(list(bw), ticks, fontsize=7)
        ax.set_xlabel("HBM technology: bandwidth per GPU (TB/s, log), capacity (GB)", fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
        ax.set_axisbelow(True)
    fig.suptitle("Llama 2 70B inference (tp 8, bf16, input 2048, output 256) on an H100-class chip with 5 stacks "
                 "of each HBM generation, compute unchanged", fontsize=10)
    return save_figure(fig, path)


# ---- driver --------------------------------------------------------------------------------------------------

#: Study number → (file stem, data function, draw function, one-line description).
STUDIES: dict[int, tuple[str, Callable[[], pd.DataFrame], Callable[[pd.DataFrame, str | Path], Path], str]] = {
    1: ("memory_footprint", memory_footprint_data, draw_memory_footprint,
        "memory per GPU vs recomputation and sequence parallelism (Korthikanti 2022 layouts)"),
    2: ("generation_speedup", generation_speedup_data, draw_generation_speedup,
        "A100 → H100 → B200 → GB200 NVL72 training speed-up, factors separated"),
    3: ("technology_nodes", technology_node_data, draw_technology_nodes,
        "B200-class design on nodes 12 nm → ~1 nm: logic vs memory vs network"),
    4: ("inference_bound", inference_bound_data, draw_inference_bound,
        "inference ops: arithmetic intensity vs ridge point per GPU"),
    5: ("memory_technology", memory_technology_data, draw_memory_technology,
        "inference latency vs DRAM technology at fixed compute"),
}


def run_study(number: int, out_dir: str | Path) -> tuple[Path, pd.DataFrame]:
    """Compute study ``number``'s data, draw it to ``out_dir/<stem>.png`` and write ``<stem>.parquet``."""
    stem, data_fn, draw_fn, _ = STUDIES[number]
    data = data_fn()
    png = draw_fn(data, Path(out_dir) / f"{stem}.png")
    write_plot_data(data, png)
    return png, data


def _parse_only(text: str) -> list[int]:
    allowed = ", ".join(str(k) for k in STUDIES)
    picked: list[int] = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece.isdigit() or int(piece) not in STUDIES:
            raise argparse.ArgumentTypeError(f"{piece!r} is not a study number; allowed: {allowed} "
                                             "(comma-separated, e.g. 1,3)")
        if int(piece) not in picked:
            picked.append(int(piece))
    return picked


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m dse.studies -o DIR [--only 1,3]``.  Returns 0; bad arguments print a message
    to stderr and exit with status 2 (argparse)."""
    parser = argparse.ArgumentParser(
        prog="python -m dse.studies",
        description="Draw the paper studies: a PNG per study and its plotted data as Parquet beside it.",
        epilog="studies: " + "; ".join(f"{k} {v[0]} ({v[3]})" for k, v in STUDIES.items()))
    parser.add_argument("-o", "--out", required=True, help="output directory (created if missing)")
    parser.add_argument("--only", type=_parse_only, default=list(STUDIES),
                        help=f"comma-separated study numbers among {', '.join(map(str, STUDIES))} (default: all)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for number in args.only:
        start = time.perf_counter()
        png, data = run_study(number, out)
        print(f"study {number}: {png} (+ .parquet, {len(data)} rows) in {time.perf_counter() - start:.1f} s")
        if number == 2:
            for pair, value in generation_speedups(data).items():
                print(f"  gpt3-175b per-GPU training speed-up {pair}: ×{value:.2f}")
            capped = speedups_by_precision()
            for allowed, (_, part) in zip(PRECISION_CAPS, capped.groupby("precision_cap", sort=False),
                                          strict=True):
                pairs = ", ".join(f"{SYSTEM_LABELS[a]}→{SYSTEM_LABELS[b]} ×{t0 / t1:.2f}" for (a, t0), (b, t1) in
                                  itertools.pairwise(zip(part["system"], part["step_time_s"], strict=True)))
                print(f"  catalogued systems, precisions allowed {'+'.join(allowed)}: {pairs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
