"""Study 1: memory per GPU vs recomputation and sequence parallelism (Korthikanti 2022 layouts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

import dse
from dse.cost.training import MEMORY_BREAKDOWN
from dse.plots import (
    MEMORY_NAMES,
    color_cycle,
    new_figure,
    save_figure,
)

#: Layout columns kept beside the best rows of a layout search.

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
