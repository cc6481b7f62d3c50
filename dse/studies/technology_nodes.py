"""Study 3: a B200-class design on logic nodes 12 nm -> ~1 nm: logic vs memory vs network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.ticker import FixedLocator, NullLocator

from dse.cost.training import TIME_BREAKDOWN
from dse.frame import train_inputs
from dse.hardware import catalog as hwcat
from dse.hardware import derive
from dse.plots import (
    PLAIN_NUMBERS,
    TIME_NAMES,
    color_cycle,
    new_figure,
    plain_log,
    save_figure,
)
from dse.studies.common import _best_frame, best_layouts, layout_grid

#: Layout columns kept beside the best rows of a layout search.
from dse.studies.memory_footprint import RECOMPUTE_MODES

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
