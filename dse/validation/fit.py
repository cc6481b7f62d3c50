"""Fit the few efficiency constants on measured cases, by least squares on log error.

The shipped constants in ``dse/hardware/efficiency.csv`` marked FITTED come from running this on
``shared/reference`` (training cases) with ``dse/validation/reference_assumptions.yaml``::

    python -m dse.validation.fit ../shared/reference/*.csv

Objective: Σ_(file, metric) mean_cases (ln(predicted / measured))², each file and metric weighted equally so
that a file with many rows does not drown a small one.  Minimised by Nelder–Mead over the constants
(efficiencies bounded to (0, 1.2], overheads to (0, 1000] µs, element rates to (0, 128] per SM-clock;
:func:`dse.hardware.catalog.constant_upper_bound`),
separately for the training, the inference, the serving and the commodity-server constants (global module
constants of the host, eager-kernel, DeepSpeed-fetch and bitsandbytes terms, fitted on the Zhang et al. 2023 file).
One group fits on published runs this repository keeps in ``tests/cases`` (no shared file constrains it): the
Megatron-core MoE host time and the per-rank copies of DeepSpeed v0.3's list-based ZeRO-3 collectives
(``python -m dse.validation.fit tests/cases/*.csv``); the efficiency constants fitted
on such runs come from ``dse calibrate --params`` instead.  A test re-runs each fit and checks the shipped
constants match it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from dse.cost import constants as K
from dse.hardware.catalog import constant_upper_bound
from dse.validation.validate import Assumption, load_assumptions, validate_table

#: The constants fitted on shared/reference, per generation: only those the reference cases constrain,
#: in three independent groups (no training case depends on an inference or serving constant, and so on).
TRAINING_PARAMETERS: tuple[tuple[str, str], ...] = (
    ("ampere", "matmul_eff_fp16"),
    ("ampere", "memory_eff"),
    ("hopper", "matmul_eff_fp8"),
)
INFERENCE_PARAMETERS: tuple[tuple[str, str], ...] = (
    ("ampere", "infer_matmul_eff_fp16"),
    ("hopper", "infer_matmul_eff_fp8"),
    ("ampere", "layer_overhead_us"),
    ("hopper", "layer_overhead_us"),
)
#: The element rates of TensorRT-LLM 0.10's decode attention kernels (per SM and clock), fitted on its serving
#: file only: no other reference file runs those kernels (the 0.9.0 static-batch file is left per KV head).
#: With them, the host time per running request of its batch manager (a stack setting, ``("stack:NAME", KEY)``:
#: a dse/stacks.csv value).
SERVING_PARAMETERS: tuple[tuple[str, str], ...] = (
    ("ampere", "mmha_elements_per_clk"),
    ("hopper", "mmha_elements_per_clk"),
    ("hopper", "xqa_memory_eff"),
    ("stack:tensorrt-llm-0.10.0", "request_setup_s"),
)
STACK_PREFIX = "stack:"
#: Global constants of the commodity-server terms (issue 21), ``("global", NAME)``: module constants rather than
#: per-generation rows, fitted on the Zhang et al. 2023 training file only (no other reference file runs HF's eager
#: kernels, DeepSpeed's on-demand ZeRO-3 fetches, bitsandbytes' NF4 or collectives through host memory).
COMMODITY_PARAMETERS: tuple[tuple[str, str], ...] = (
    ("global", "HOST_STAGED_EFFICIENCY"),
    ("global", "EAGER_KERNEL_S"),
    ("global", "ZERO3_FETCH_OVERHEAD_S"),
    ("global", "QLORA_DEQUANT_EFFICIENCY"),
)
#: Where each global constant lives.
GLOBAL_CONSTANTS: dict[str, str] = {"HOST_STAGED_EFFICIENCY": "dse.hardware.catalog",
                                    "EAGER_KERNEL_S": "dse.cost.constants",
                                    "ZERO3_FETCH_OVERHEAD_S": "dse.cost.constants",
                                    "QLORA_DEQUANT_EFFICIENCY": "dse.cost.constants",
                                    "MOE_HOST_S_PER_LOCAL_EXPERT": "dse.cost.constants",
                                    "C10D_RANK_COPY_S": "dse.cost.constants"}
#: The per-layer overhead of a decode pass replayed from a CUDA graph, fitted on the only shared file whose engine
#: runs under CUDA graphs (NIM 1.8, TensorRT-LLM engine).
GRAPHS_PARAMETERS: tuple[tuple[str, str], ...] = (("hopper", "layer_overhead_graphs_us"),)
#: The host time per local expert of Megatron-core's MoE layers, fitted on the Megatron-Bridge MoE runs this
#: repository keeps (tests/cases, with their sources): no shared file trains a mixture-of-experts model.
MOE_PARAMETERS: tuple[tuple[str, str], ...] = (("global", "MOE_HOST_S_PER_LOCAL_EXPERT"),)
#: The host time per rank of DeepSpeed v0.3's list-based ZeRO-3 collectives, fitted on Narayanan et al. 2021's
#: ZeRO-3 runs this repository keeps (tests/cases): no shared file runs ZeRO-3 beyond one 8-GPU server.
ZERO3_PARAMETERS: tuple[tuple[str, str], ...] = (("global", "C10D_RANK_COPY_S"),)
FITTED_PARAMETERS = (TRAINING_PARAMETERS + INFERENCE_PARAMETERS + SERVING_PARAMETERS + COMMODITY_PARAMETERS
                     + GRAPHS_PARAMETERS + MOE_PARAMETERS + ZERO3_PARAMETERS)
TRAINING_FILES = ("megatron_narayanan2021_table1.csv", "megatron_korthikanti2022_table4.csv", "nemo_h100_24.07.csv")
COMMODITY_FILES = ("zhang2023_train_bs1_lora7b.csv",)
GRAPHS_FILES = ("nim_1.8.0_concurrency_h100.csv",)
INFERENCE_FILES = ("llama2_inference_a100.csv", "trtllm_0.9.0_a100_h100.csv")
SERVING_FILES = ("trtllm_0.10.0_serve_a100_h100.csv",)
MOE_FILES = ("megatron_bridge_moe_train.csv",)
ZERO3_FILES = ("narayanan2021_table2_zero3.csv",)


def default_assumptions_path() -> Path:
    return Path(str(resources.files("dse.validation").joinpath("reference_assumptions.yaml")))


def log_error_objective(files: Sequence[str | Path], assumptions: Sequence[Assumption],
                        params: Sequence[tuple[str, str]]) -> Callable[[np.ndarray], float]:
    """The function of the parameter vector that :func:`fit` minimises."""

    upper = np.array([np.inf if g == "global" or g.startswith(STACK_PREFIX) else constant_upper_bound(c)
                      for g, c in params])

    def objective(values: np.ndarray) -> float:
        if np.any(values <= 0) or np.any(values > upper):
            return 1e9
        overrides = {p: float(v) for p, v in zip(params, values, strict=True)
                     if p[0] != "global" and not p[0].startswith(STACK_PREFIX)}
        saved = _set_globals({c: float(v) for (g, c), v in zip(params, values, strict=True) if g == "global"})
        _set_stack_values({(g.removeprefix(STACK_PREFIX), c): float(v) for (g, c), v in zip(params, values, strict=True)
                           if g.startswith(STACK_PREFIX)})
        try:
            total = 0.0
            for f in files:
                table = validate_table(f, assumptions, overrides)
                table = table[table["skipped"].isna()]
                square = np.square(np.log(table["predicted"].to_numpy() / table["measured"].to_numpy()))
                total += float(pd.Series(square).groupby(table["metric"].to_numpy(), sort=False).mean().sum())
        finally:
            _set_globals(saved)
            _set_stack_values({})
        return total

    return objective


#: The GPUs of TensorRT-LLM's measured kernel tables (aiconfigurator) → the catalog system each ran on, whose
#: generation, peaks, HBM and scale-up line rate (dse/hardware/systems.csv) the fits below measure against:
#: :func:`engine_allreduce_constants` (H100 and H200 share NVLink 4 and pool into Hopper) and
#: :func:`moe_grouped_gemm_fit`.
KERNEL_TABLE_SYSTEMS: dict[str, str] = {"a100_sxm": "a100-sxm-80gb", "h100_sxm": "h100-sxm-80gb",
                                            "h200_sxm": "h200-sxm-141gb", "b200_sxm": "b200", "l40s": "l40s",
                                            "rtx_pro_6000_server": "rtx-pro-6000", "gb200": "gb200-nvl72",
                                            "b300_sxm": "b300", "gb300": "gb300-nvl72"}
#: Fewest routed tokens per expert (T·k/E) at which :func:`moe_routing_skew` reads a kernel table: the grouped GEMMs
#: are compute-bound there, as the routed term it scales (dse.cost.inference.layer_pass_terms) is.
MOE_SKEW_MIN_TOKENS_PER_EXPERT = 256.0
#: Largest expert-parallel size :func:`moe_routing_skew` fits over: one NVLink domain of 8-16 GPUs, where the tables
#: are dense (past it they hold fewer shapes and the ratio saturates on Blackwell).
MOE_SKEW_MAX_EP = 16


def engine_allreduce_fit(message_bytes: np.ndarray, ranks: np.ndarray, seconds: np.ndarray,
                         passes: float = 2.0) -> tuple[float, float]:
    """(α in s, bus bandwidth in B/s) of the all-reduce model t = α + S·2(n−1)/n / busbw
    (:func:`dse.cost.network.allreduce_time`) fitted to measured kernel times by least squares on relative error:
    min Σ ((α + S·f / busbw) / t − 1)², linear in (α, 1/busbw); ``passes`` 1 fits the all-gather and
    reduce-scatter model t = α + S·(n−1)/n / busbw (:func:`dse.cost.network.allgather_time`)."""
    t = np.asarray(seconds, dtype=np.float64)
    n = np.asarray(ranks, dtype=np.float64)
    a = np.c_[1.0 / t, np.asarray(message_bytes, dtype=np.float64) * passes * (n - 1.0) / n / t]
    (alpha, inv_bw), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return float(alpha), float(1.0 / inv_bw)


def engine_allreduce_constants(table: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per generation: (infer_allreduce_eff, infer_allreduce_latency_us) from a table of measured all-reduce kernels
    (columns gpu, num_gpus, message_bytes, latency_us; tests/kernels/trtllm_custom_allreduce.csv), the bus bandwidth
    as a fraction of the scale-up line rate of the system each GPU ran on (:data:`KERNEL_TABLE_SYSTEMS`)."""
    return engine_collective_constants(table, passes=2.0)


def engine_allgather_constants(table: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per generation: (infer_allgather_eff, infer_allgather_latency_us) from a table of measured NCCL all-gathers and
    reduce-scatters (columns gpu, num_gpus, message_bytes, latency_us; tests/kernels/nccl_allgather_reducescatter.csv):
    one fit of t = α + S·(n−1)/n / busbw over both collectives, 2-8 GPUs and 64 KB-128 MB, the bus bandwidth as a
    fraction of the scale-up line rate of the system each GPU ran on (:data:`KERNEL_TABLE_SYSTEMS`)."""
    return engine_collective_constants(table, passes=1.0)


def engine_collective_constants(table: pd.DataFrame, passes: float) -> dict[str, tuple[float, float]]:
    """Per generation: (bus bandwidth as a fraction of the scale-up line rate, α in µs) of
    :func:`engine_allreduce_fit` with ``passes`` over the rows of each generation's GPUs (:data:`KERNEL_TABLE_SYSTEMS`);
    a generation whose tables pool GPUs of different line rates is refused."""
    from dse.hardware.catalog import systems

    catalog = systems()
    system = table["gpu"].map(KERNEL_TABLE_SYSTEMS)
    generation = system.map(catalog["generation"])
    line = system.map(catalog["scaleup_gbps"]) * 1e9
    out: dict[str, tuple[float, float]] = {}
    for gen, rows in table.groupby(generation):
        rates = line[rows.index].unique()
        if len(rates) != 1:
            raise ValueError(f"{gen}: the kernel table pools GPUs of different scale-up line rates: {sorted(rates)}")
        alpha, busbw = engine_allreduce_fit(rows["message_bytes"].to_numpy(), rows["num_gpus"].to_numpy(),
                                            rows["latency_us"].to_numpy() * 1e-6, passes=passes)
        out[str(gen)] = (busbw / float(rates[0]), alpha * 1e6)
    return out


#: Bytes per stored expert weight in TensorRT-LLM's MoE kernel tables, scales included: FP8 with an fp32 scale per
#: 128x128 block (DeepSeek-V3 report §3.3.2), NVFP4 with an FP8 scale per 16, MXFP4 with an E8M0 scale per 32 (OCP MX
#: v1.0 Table 1); and the tensor-core peak each kernel's math runs at (W4A16 dequantizes into 16-bit math, W4A8 runs
#: MXFP8).
MOE_TABLE_WEIGHT_BYTES: dict[str, float] = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0 + 4.0 / 128**2,
                                            "nvfp4": 0.5 + 1.0 / 16.0, "w4a16_mxfp4": K.MXFP4_BYTES_PER_WEIGHT,
                                            "w4a8_mxfp4_mxfp8": K.MXFP4_BYTES_PER_WEIGHT}
MOE_TABLE_PEAK: dict[str, str] = {"bfloat16": "tensor_fp16_tflops", "w4a16_mxfp4": "tensor_fp16_tflops",
                                  "fp8": "tensor_fp8_tflops", "fp8_block": "tensor_fp8_tflops",
                                  "w4a8_mxfp4_mxfp8": "tensor_fp8_tflops", "nvfp4": "tensor_fp4_tflops"}


def moe_grouped_gemm_fit(points: pd.DataFrame, full_width: float | None = None) -> tuple[float, float, float, float]:
    """(fixed s, weight-streaming fraction of the HBM peak, GEMM fraction of the dtype's peak, mean relative error) of
    one MoE layer kernel (one gpu and dtype of tests/kernels/trtllm_moe_layer_points.csv): least squares on relative
    error of L = fixed + W_visited / (HBM · s) + F / (peak · g · w(f)), with T tokens, each routed to k of E experts
    split over ep GPUs, F = 2·3·h·f·T·k/ep (gate, up and down), W_visited = E/ep·(1 − (1 − k/E)^T)·3·h·f bytes of
    the experts the tokens visit (:func:`dse.cost.inference.experts_visited`) and w(f) the expert-width factor
    (:func:`dse.cost.inference.expert_width_efficiency`, full width ``full_width``, default the shipped
    MOE_GEMM_FULL_WIDTH); peaks and HBM from the catalog system the table ran on (:data:`KERNEL_TABLE_SYSTEMS`)."""
    from dse.cost.inference import expert_width_efficiency, experts_visited
    from dse.hardware.catalog import systems

    (gpu,) = points["gpu"].unique()
    (dtype,) = points["dtype"].unique()
    system = systems().loc[[KERNEL_TABLE_SYSTEMS[str(gpu)]]]
    peak = float(system[MOE_TABLE_PEAK[str(dtype)]].iloc[0]) * 1e12
    hbm = float(system["hbm_tbps"].iloc[0]) * 1e12
    t, h, f = (points[c].to_numpy(dtype=np.float64) for c in ("tokens", "hidden", "inter"))
    e, k, ep = (points[c].to_numpy(dtype=np.float64) for c in ("experts", "top_k", "ep"))
    latency = points["latency_us"].to_numpy(dtype=np.float64) * 1e-6
    flops = t * k / ep * 6.0 * h * f / expert_width_efficiency(f, full_width)
    weights = experts_visited(e, k, t) / ep * 3.0 * h * f * MOE_TABLE_WEIGHT_BYTES[str(dtype)]
    a = np.stack([np.ones_like(t), weights / hbm, flops / peak], 1)
    (fixed, inv_s, inv_g), *_ = np.linalg.lstsq(a / latency[:, None], np.ones_like(latency), rcond=None)
    error = float(np.mean(np.abs(a @ np.array([fixed, inv_s, inv_g]) / latency - 1.0)))
    return float(fixed), float(1.0 / inv_s), float(1.0 / inv_g), error


def moe_routing_skew(points: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per generation: (``moe_routing_skew``, ``moe_routing_skew_per_doubling``), the time of a MoE layer's kernels
    when the tokens are routed as real routers route them over their time when the tokens are spread evenly, as
    r(ep) = skew + per_doubling · log2(ep) for ep expert-parallel ranks, from TensorRT-LLM's measured MoE tables
    (tests/kernels/trtllm_moe_routing_skew.csv: ai-dynamo/aiconfigurator @095f58a systems/data/<gpu>/moe/trtllm/
    1.3.0rc20/moe_perf.parquet, the catalog's MoE shapes).  aiconfigurator, NVIDIA's model of these engines, times
    MoE layers with a power-law token distribution by default (sdk/config.py ``workload_distribution =
    "power_law"``; α 1.01 for the DeepSeek family, sdk/models/deepseek.py, 1.2 for the others, sdk/models/moe.py),
    and its tables time every layer at both α and balanced.  The ratio grows with the ranks (the busiest rank paces
    the layer; one rank still pays for uneven expert sizes in its grouped GEMMs): least squares of r(ep) on the
    median ratio at each tabled ep from 1 to :data:`MOE_SKEW_MAX_EP` (both α, every table of the generation pooled,
    at :data:`MOE_SKEW_MIN_TOKENS_PER_EXPERT` or more routed tokens per expert: compute-bound sizes)."""
    from dse.hardware.catalog import systems

    rows = points[(points["tokens"] * points["top_k"] / points["experts"] >= MOE_SKEW_MIN_TOKENS_PER_EXPERT)
                  & (points["ep"] <= MOE_SKEW_MAX_EP)]
    generation = rows["gpu"].map(KERNEL_TABLE_SYSTEMS).map(systems()["generation"])
    ratio = pd.concat([rows["power_law_1_01_us"] / rows["balanced_us"], rows["power_law_1_2_us"] / rows["balanced_us"]])
    frame = pd.DataFrame({"generation": pd.concat([generation, generation]), "ep": pd.concat([rows["ep"], rows["ep"]]),
                          "ratio": ratio})
    out: dict[str, tuple[float, float]] = {}
    for gen, g in frame.groupby("generation"):
        median = g.groupby("ep")["ratio"].median()
        x = np.log2(median.index.to_numpy(dtype=np.float64))
        (skew, per_doubling), *_ = np.linalg.lstsq(np.c_[np.ones_like(x), x], median.to_numpy(), rcond=None)
        out[str(gen)] = (float(skew), float(per_doubling))
    return out


#: The grid (elements) :func:`moe_expert_width_fit` searches: 768 (every tabled expert at its full rate) to 2048.
MOE_WIDTH_GRID = np.arange(768.0, 2048.0 + 1.0, 16.0)


def moe_expert_width_fit(points: pd.DataFrame) -> float:
    """MOE_GEMM_FULL_WIDTH from every table of tests/kernels/trtllm_moe_layer_points.csv: the widest full width on
    :data:`MOE_WIDTH_GRID` at which no table's fitted GEMM fraction (:func:`moe_grouped_gemm_fit`) exceeds 1 of its
    peak.  The tables' mean error falls as the width grows through that range (13.4 % at 768, 11.0 % at 1232,
    9.8 % at 2048), because Qwen3-30B's 768-wide experts run at about half the fraction of the 1536-2880-wide ones
    at every token count above a few thousand; past the bound the H100 BF16 kernel would have to beat its peak on
    the wide shapes, so the bound, not the error, sets the width."""
    tables = [rows for _, rows in points.groupby(["gpu", "dtype"])]
    best = float(MOE_WIDTH_GRID[0])
    for width in MOE_WIDTH_GRID:
        if max(moe_grouped_gemm_fit(rows, float(width))[2] for rows in tables) > 1.0:
            break
        best = float(width)
    return best


def shipped_value(generation: str, column: str) -> float:
    """The shipped value of a fitted constant: an efficiency.csv cell, a global module constant or a stack
    setting (``stack:NAME``)."""
    if generation == "global":
        return float(getattr(importlib.import_module(GLOBAL_CONSTANTS[column]), column))
    if generation.startswith(STACK_PREFIX):
        from dse.stacks import profile

        return float(profile(generation.removeprefix(STACK_PREFIX))[column])
    from dse.hardware.catalog import efficiency

    eff = efficiency()
    return float(eff[column].to_numpy()[eff.index.get_loc(generation)])


def _set_stack_values(values: dict[tuple[str, str], float]) -> None:
    """Set the stack settings a fit tries ((stack, key) -> value; {} restores the shipped profiles) and drop the
    serving tables built from them."""
    from dse import stacks

    stacks.PROFILE_OVERRIDES.clear()
    stacks.PROFILE_OVERRIDES.update({k: repr(v) for k, v in values.items()})
    stacks.serving_tables.cache_clear()


def _set_globals(values: dict[str, float]) -> dict[str, float]:
    """Set global constants (returns the previous values) and drop the hardware tables built from them."""
    from dse.hardware import catalog

    previous = {}
    for name, value in values.items():
        module = importlib.import_module(GLOBAL_CONSTANTS[name])
        previous[name] = getattr(module, name)
        setattr(module, name, value)
    if values:
        catalog.raw_table.cache_clear()
        catalog._achieved_table.cache_clear()
        catalog._achieved_table_as.cache_clear()
    return previous


def nelder_mead(fun: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.1, tol: float = 1e-7,
                max_iter: int = 400) -> np.ndarray:
    """Plain Nelder–Mead (Nelder & Mead 1965) with the standard coefficients 1, 2, 0.5, 0.5; the initial
    simplex moves each coordinate by ``step`` times its magnitude."""
    n = len(x0)
    scale = np.where(x0 != 0, np.abs(x0), 1.0) * step
    simplex = np.vstack([x0] + [x0 + scale[i] * np.eye(n)[i] for i in range(n)])
    values = np.array([fun(x) for x in simplex])
    for _ in range(max_iter):
        order = np.argsort(values)
        simplex, values = simplex[order], values[order]
        if values[-1] - values[0] < tol:
            break
        centroid = simplex[:-1].mean(axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = fun(reflected)
        if values[0] <= fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
            continue
        if fr < values[0]:
            expanded = centroid + 2.0 * (centroid - simplex[-1])
            fe = fun(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
            continue
        contracted = centroid + 0.5 * (simplex[-1] - centroid)
        fc = fun(contracted)
        if fc < values[-1]:
            simplex[-1], values[-1] = contracted, fc
            continue
        simplex[1:] = simplex[0] + 0.5 * (simplex[1:] - simplex[0])
        values[1:] = [fun(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


def fit(files: Sequence[str | Path], assumptions: Sequence[Assumption],
        params: Sequence[tuple[str, str]] = TRAINING_PARAMETERS,
        start: Sequence[float] | None = None) -> dict[tuple[str, str], float]:
    """Least-squares fit of ``params`` (``(generation, constant)`` pairs) on the cases of ``files``."""
    shipped = [shipped_value(g, c) for g, c in params]
    x0 = np.array(start if start is not None else shipped, dtype=np.float64)
    best = nelder_mead(log_error_objective(files, assumptions, params), x0)
    return {p: float(v) for p, v in zip(params, best, strict=True)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dse.validation.fit", description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", help="case files in the shared/reference schema")
    parser.add_argument("--assume", default=str(default_assumptions_path()), help="assumptions YAML")
    args = parser.parse_args(argv)
    assumptions = load_assumptions(args.assume)
    for names, params in ((TRAINING_FILES, TRAINING_PARAMETERS), (INFERENCE_FILES, INFERENCE_PARAMETERS),
                          (SERVING_FILES, SERVING_PARAMETERS), (COMMODITY_FILES, COMMODITY_PARAMETERS),
                          (GRAPHS_FILES, GRAPHS_PARAMETERS), (MOE_FILES, MOE_PARAMETERS),
                          (ZERO3_FILES, ZERO3_PARAMETERS)):
        files = [f for f in args.files if Path(f).name in names]
        if not files:
            continue
        for (gen, col), value in fit(files, assumptions, params).items():
            print(f"{gen:10s} {col:26s} {value:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
