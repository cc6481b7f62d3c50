"""Study 4: inference ops, arithmetic intensity against each GPU's ridge point."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.ticker import FixedLocator, NullLocator

from dse.cost.inference import OPS, inference_ops
from dse.frame import infer_inputs
from dse.hardware import catalog as hwcat
from dse.plots import (
    color_cycle,
    new_figure,
    plain_log,
    save_figure,
)
from dse.studies.generation_speedup import SYSTEM_LABELS

#: Layout columns kept beside the best rows of a layout search.

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
