"""Study 5: inference latency vs DRAM technology at fixed compute."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import FixedLocator, NullLocator

from dse.cost.inference import infer_step
from dse.frame import infer_inputs
from dse.hardware import derive
from dse.plots import (
    PLAIN_NUMBERS,
    color_cycle,
    new_figure,
    plain_log,
    save_figure,
)
from dse.studies.inference_bound import INFER_SCENARIO

#: Layout columns kept beside the best rows of a layout search.

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
