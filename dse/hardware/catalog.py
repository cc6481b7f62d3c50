"""GPU system catalog and per-generation efficiency constants, as numpy columns in SI units.

``systems.csv`` holds one row per GPU system with the source of every number (derived from
``shared/hardware_specs.csv``); ``efficiency.csv`` holds the few efficiency constants, one row per GPU
generation, each marked FITTED (on ``shared/reference`` only, by :mod:`dse.validation.fit`), sourced, or
ASSUMPTION.  A system's peak is defined once, here.
"""

from __future__ import annotations

from functools import cache, lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from dse.cost.constants import MOE_NVFP4_GEMM_FRACTION, MOE_NVFP4_STREAM_FRACTION

#: Hardware columns handed to the cost kernels, in SI units (FLOP/s, bytes, bytes/s, seconds).  Peaks are
#: 0 where the GPU lacks a precision; ``*_rate`` / ``*_bw`` columns are achieved rates (peak × efficiency).
HARDWARE_COLUMNS: tuple[str, ...] = (
    "tensor_fp16_flops",
    "tensor_fp8_flops",
    "tensor_fp4_flops",
    "matmul_fp16_rate",
    "matmul_fp8_rate",
    "matmul_fp4_rate",
    "attention_rate",
    "attention_fused_rate",
    "memory_rate",
    "hbm_bw",
    "hbm_bytes",
    "scaleup_gpus",
    "scaleup_ring_bw",
    "scaleup_allreduce_bw",
    "scaleout_bw",
    "scaleup_latency_s",
    "scaleout_latency_s",
    "infer_allreduce_bw",
    "infer_allreduce_latency_s",
    "infer_allgather_bw",
    "infer_allgather_latency_s",
    "scaleup_multinode",
    "infer_matmul_fp16_rate",
    "infer_matmul_fp8_rate",
    "infer_matmul_fp4_rate",
    "infer_attention_rate",
    "infer_attention_fp8_rate",
    "infer_mla_decode_rate",
    "infer_mla_decode_fp8_rate",
    "layer_overhead_s",
    "layer_overhead_graphs_s",
    "host_bw",
    "tdp_w",
    "mmha_rate",
    "xqa_rate",
    "cpu_adam_rate",
    "host_mem_bytes",
    "moe_routing_skew",
    "moe_routing_skew_per_doubling",
    "moe_fp4_gemm_fraction",
    "moe_fp4_stream_fraction",
)

EFFICIENCY_COLUMNS: tuple[str, ...] = (
    "matmul_eff_fp16",
    "matmul_eff_fp8",
    "matmul_eff_fp4",
    "attention_eff",
    "attention_eff_fused",
    "memory_eff",
    "scaleup_ring_eff",
    "scaleup_allreduce_eff",
    "scaleout_eff",
    "infer_matmul_eff_fp16",
    "infer_matmul_eff_fp8",
    "infer_matmul_eff_fp4",
    "infer_attention_eff",
    "infer_attention_eff_fp8",
    "infer_mla_decode_eff",
    "infer_mla_decode_eff_fp8",
    "infer_allreduce_eff",
    "scaleup_latency_us",
    "scaleout_latency_us",
    "infer_allreduce_latency_us",
    "infer_allgather_eff",
    "infer_allgather_latency_us",
    "layer_overhead_us",
    "layer_overhead_graphs_us",
    "mmha_elements_per_clk",
    "xqa_memory_eff",
    "moe_routing_skew",
    "moe_routing_skew_per_doubling",
    "moe_fp4_gemm_eff",
    "moe_fp4_stream_eff",
)
#: Dimensionless fractions among the efficiency constants (the others are latencies in microseconds and the
#: masked-MHA decode kernel's element rate per SM and clock).
FRACTION_COLUMNS = tuple(c for c in EFFICIENCY_COLUMNS if "eff" in c)
#: Element rate of TensorRT-LLM's masked-MHA decode kernel per SM per clock (see :func:`achieved`).
PER_CLOCK_COLUMNS = ("mmha_elements_per_clk",)
#: Ratios of a time to a reference time: the MoE layer's time under real routing over balanced routing, at one
#: expert-parallel rank and its increase per doubling of the ranks (dse.cost.inference.routing_skew).
RATIO_COLUMNS = ("moe_routing_skew", "moe_routing_skew_per_doubling")


def constant_upper_bound(column: str) -> float:
    """Largest value an efficiency constant may take (fits and calibrations search below it, the catalog tests
    check it): fractions of peak 1.2 (NVLink SHARP all-reduce bus bandwidth exceeds the line rate), latencies
    1000 µs, element rates 128 per SM-clock (an SM issues 4 warp instructions of 32 lanes per clock, and an
    element costs at least one lane-instruction), time ratios 4."""
    return (1000.0 if column.endswith("_us") else 128.0 if column in PER_CLOCK_COLUMNS
            else 4.0 if column in RATIO_COLUMNS else 1.2)


#: Achieved fraction of the CPU-GPU link rate for offload copies (pinned-memory DMA).  ASSUMPTION: 0.8, not
#: sourced; it only matters with ``offload``.
HOST_LINK_EFFICIENCY = 0.8
#: DeepSpeed's CPU Adam (DeepSpeedCPUAdam, SIMD + OpenMP over the rank's fp32 partition) in parameters per second
#: per host core: "it reduces the optimizer time from 56 seconds to 8.2 seconds to an 11.6B parameter GPT2
#: model" (microsoft/DeepSpeed PR 735, 2021), 1.41e9 parameters/s, on the DGX-2 host the ZeRO-Offload work used
#: (2x Xeon Platinum 8168, 48 cores): 2.95e7 per core.  Each rank updates its own partition on its share of the
#: host's cores (cores / GPUs of the node).
CPU_ADAM_PARAMS_PER_CORE_S = 11.6e9 / 8.2 / 48.0
#: DRAM bytes CPU Adam moves per parameter: reads fp32 master, gradient, momentum, variance (16), writes the three
#: states (12) and the 16-bit copy sent back to the GPU (2).  The host's DRAM bandwidth over these bounds the rate.
CPU_ADAM_BYTES_PER_PARAM = 30.0
#: Collectives without GPU peer-to-peer (GeForce cards: NVIDIA/nccl issues 1127, 1309) go through host memory:
#: every byte a GPU sends is written to and read from host DRAM, and "on PCI systems, the performance you get is
#: usually determined by the bandwidth your CPU and memory can deliver" (NVIDIA, nccl issue 1639).  The bus
#: bandwidth of each of the node's GPUs is then at most this fraction of the host DRAM bandwidth over 2 x the
#: node's GPUs (see :func:`staged_bus_bandwidth`), and a GPU's offload copies at most this fraction over the node's
#: GPUs (one crossing per byte: :func:`offload_link_rate`).  FITTED on shared/reference
#: (zhang2023_train_bs1_lora7b.csv, the RTX 3090 and RTX 4090 servers) by python -m dse.validation.fit.
HOST_STAGED_EFFICIENCY = 0.0810


class CatalogError(ValueError):
    """A catalog file is malformed (names the file, the row and the column)."""


def _read_csv(name: str) -> pd.DataFrame:
    path = resources.files("dse.hardware").joinpath(name)
    with path.open("r", encoding="utf-8") as fh:
        return pd.read_csv(fh, dtype={"name": str, "generation": str}, keep_default_na=True)


@cache
def systems() -> pd.DataFrame:
    """The system catalog, indexed by catalog name, numbers as float64."""
    frame = _read_csv("systems.csv")
    numeric = [
        "tensor_fp16_tflops", "tensor_fp8_tflops", "tensor_fp4_tflops", "vector_fp32_tflops", "fp32_lanes_per_sm",
        "hbm_gb", "hbm_tbps", "scaleup_gpus", "scaleup_gbps", "scaleout_gbit", "host_gbps", "p2p", "bridge_gbps",
        "node_gpus", "gpus_per_switch", "host_cores", "host_mem_gb", "host_mem_gbps", "tdp_w", "power_limit_w",
        "gemm_rate_factor", "attention_rate_factor",
    ]
    for col in numeric:
        frame[col] = pd.to_numeric(frame[col], errors="raise").astype(np.float64)
    for col in ("tensor_fp16_tflops", "vector_fp32_tflops", "fp32_lanes_per_sm", "hbm_gb", "hbm_tbps",
                "scaleup_gpus", "scaleup_gbps", "node_gpus", "gpus_per_switch", "host_cores", "host_mem_gb",
                "host_mem_gbps"):
        bad = frame[col].isna() | (frame[col] <= 0)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise CatalogError(f"dse/hardware/systems.csv row {row + 2}: column {col!r} must be a positive number")
    limit = frame["power_limit_w"]
    bad = limit.notna() & ((limit <= 0) | (limit > frame["tdp_w"]))
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise CatalogError(f"dse/hardware/systems.csv row {row + 2}: column 'power_limit_w' must be a positive number "
                           "no larger than tdp_w (or empty: the part runs at its rated power)")
    for col in RATE_FACTOR_COLUMNS:
        bad = frame[col].notna() & (frame[col] <= 0)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise CatalogError(f"dse/hardware/systems.csv row {row + 2}: column {col!r} must be a positive number "
                               "(or empty: 1, the generation's constants as they are)")
    return frame.set_index("name", drop=False)


#: Per-system factors on the rates the generation's efficiency constants give (empty in systems.csv: 1).  A part
#: that runs the same kernels faster than the system its generation's constants were validated on, at the same
#: spec peaks, carries the measured ratio: ``gemm_rate_factor`` on the 16- and 8-bit GEMM rates (training and
#: serving), ``attention_rate_factor`` on the attention kernels' rates.  Both come from one harness measuring both
#: parts (TensorRT-LLM's kernel tables; each row's source column); FP4 rates take none (see systems.csv notes).
RATE_FACTOR_COLUMNS = ("gemm_rate_factor", "attention_rate_factor")


#: Exponent of the clock a power limit leaves: dynamic power P = C·V²·f with the supply voltage scaled with the
#: clock along the DVFS curve (V ∝ f), so P ∝ f³ and f ∝ P^(1/3) (the textbook CMOS relation; e.g. Hennessy &
#: Patterson, Computer Architecture, 6th ed., §1.5).  Checked on NVIDIA's datasheets of one die at two power
#: ratings: the H100 NVL at 400 W lists 835 dense BF16 TFLOP/s (1,671 with sparsity) against the 700 W H100
#: SXM's 989, a ratio of 0.844, and (400/700)^(1/3) = 0.830.
POWER_CLOCK_EXPONENT = 1.0 / 3.0


def power_clock_factor(tdp_w: np.ndarray, power_limit_w: np.ndarray) -> np.ndarray:
    """The compute clock (tensor and vector peaks) of a part run at ``power_limit_w`` below its rated ``tdp_w``,
    as a fraction of the rated clock: (limit / tdp)^(1/3) (:data:`POWER_CLOCK_EXPONENT`); 1 without a limit.
    Memory bandwidth is not scaled (the HBM has its own clock)."""
    ratio = np.where(np.isnan(power_limit_w), 1.0, power_limit_w / tdp_w)
    return ratio ** POWER_CLOCK_EXPONENT


def operating_power_w(sysf: pd.DataFrame) -> np.ndarray:
    """The power each catalogued system's GPU runs at: its ``power_limit_w`` when it runs below its rating, else its
    rated ``tdp_w`` (energy outputs; the base power of a derived chip, :mod:`dse.hardware.derive`)."""
    return sysf["power_limit_w"].fillna(sysf["tdp_w"]).to_numpy(dtype=np.float64)


@cache
def efficiency() -> pd.DataFrame:
    """Efficiency constants per GPU generation (fractions of peak; latencies in microseconds)."""
    frame = _read_csv("efficiency.csv")
    for col in EFFICIENCY_COLUMNS:
        frame[col] = pd.to_numeric(frame[col], errors="raise").astype(np.float64)
    return frame.set_index("generation", drop=False)


def system_names() -> tuple[str, ...]:
    return tuple(systems().index)


def system_codes(names: object, key: str = "system") -> np.ndarray:
    """Catalog names → integer codes (position in :func:`system_names`); unknown names raise ValueError."""
    from dse.codes import encode

    return encode(names, system_names(), key=key)


def achieved(raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Kernel hardware columns from raw peaks and efficiencies (arrays of any shape, SI units).

    matmul rate = tensor peak × matmul efficiency (per precision); attention rate = 16-bit peak × attention
    efficiency (FlashAttention-style kernels; cuDNN's fused attention: × ``attention_eff_fused``); memory
    rate = HBM bandwidth × memory efficiency; scale-up bus bandwidth = per-direction link
    rate × NCCL efficiency (ring, and all-reduce which may use in-switch reduction); scale-out = NIC rate ×
    efficiency.  Missing peaks (no fp8 on Ampere, no NIC on a consumer card) become 0.

    Decode attention kernels of TensorRT-LLM <= 0.10 (``decode_kv_reads = per_query_head``): masked MHA per
    query head on the CUDA cores is bound by instruction issue, not by a FLOP peak or by HBM: its rate in KV
    elements per second (``mmha_rate``) is the GPU's SM clocks per second (SMs × clock = FP32 vector peak /
    (2 · FP32 lanes per SM)) times a per-clock element rate per generation.  The Hopper XQA kernel, per KV head
    on the tensor cores over an FP8 cache (one byte per element), streams the cache at its own fraction of
    the HBM bandwidth (``xqa_rate`` = HBM bandwidth × ``xqa_memory_eff``; 0 where the generation has none).
    """
    z = lambda a: np.nan_to_num(np.asarray(a, dtype=np.float64), nan=0.0)  # noqa: E731
    # a part measured faster than its generation's reference at the same peaks (RATE_FACTOR_COLUMNS; 1 elsewhere)
    gemm_x = np.asarray(raw.get("gemm_rate_factor", 1.0), dtype=np.float64)
    attn_x = np.asarray(raw.get("attention_rate_factor", 1.0), dtype=np.float64)
    return {
        "tensor_fp16_flops": z(raw["tensor_fp16_flops"]),
        "tensor_fp8_flops": z(raw["tensor_fp8_flops"]),
        "tensor_fp4_flops": z(raw["tensor_fp4_flops"]),
        "matmul_fp16_rate": z(raw["tensor_fp16_flops"] * raw["matmul_eff_fp16"] * gemm_x),
        "matmul_fp8_rate": z(raw["tensor_fp8_flops"] * raw["matmul_eff_fp8"] * gemm_x),
        "matmul_fp4_rate": z(raw["tensor_fp4_flops"] * raw["matmul_eff_fp4"]),
        "attention_rate": z(raw["tensor_fp16_flops"] * raw["attention_eff"] * attn_x),
        # cuDNN's fused flash attention (attention = cudnn): its own fraction of the 16-bit peak
        "attention_fused_rate": z(raw["tensor_fp16_flops"] * raw["attention_eff_fused"] * attn_x),
        "memory_rate": z(raw["hbm_bw"] * raw["memory_eff"]),
        "hbm_bw": z(raw["hbm_bw"]),
        "hbm_bytes": z(raw["hbm_bytes"]),
        "scaleup_gpus": z(raw["scaleup_gpus"]),
        # without GPU peer-to-peer (GeForce cards) collectives go through host memory (staged_bus_bandwidth)
        "scaleup_ring_bw": z(np.where(raw["p2p"] > 0, raw["scaleup_bw"] * raw["scaleup_ring_eff"],
                                      staged_bus_bandwidth(raw))),
        "scaleup_allreduce_bw": z(np.where(raw["p2p"] > 0, raw["scaleup_bw"] * raw["scaleup_allreduce_eff"],
                                           staged_bus_bandwidth(raw))),
        "scaleout_bw": z(raw["scaleout_bw"] * raw["scaleout_eff"]),
        "scaleup_latency_s": z(raw["scaleup_latency_s"]),
        "scaleout_latency_s": z(raw["scaleout_latency_s"]),
        # an inference engine's own tensor-parallel all-reduce kernels at the message sizes of its iterations
        # (dse.cost.network.engine_tp_links); without peer-to-peer they stage through host memory like NCCL
        "infer_allreduce_bw": z(np.where(raw["p2p"] > 0, raw["scaleup_bw"] * raw["infer_allreduce_eff"],
                                         staged_bus_bandwidth(raw))),
        "infer_allreduce_latency_s": z(np.where(raw["p2p"] > 0, raw["infer_allreduce_latency_s"],
                                                raw["scaleup_latency_s"])),
        # and NCCL's all-gather and reduce-scatter at those sizes, the attention-DP MoE exchange of TensorRT-LLM
        # (dse.cost.network.engine_ep_links); staged through host memory without peer-to-peer
        "infer_allgather_bw": z(np.where(raw["p2p"] > 0, raw["scaleup_bw"] * raw["infer_allgather_eff"],
                                         staged_bus_bandwidth(raw))),
        "infer_allgather_latency_s": z(np.where(raw["p2p"] > 0, raw["infer_allgather_latency_s"],
                                                raw["scaleup_latency_s"])),
        # 1 where the scale-up (NVLink) domain spans more than one node: a multi-node NVLink system (GB200 NVL72),
        # what TensorRT-LLM's MNNVL all-to-all needs (MnnvlMemory.supports_mnnvl)
        "scaleup_multinode": z((raw["scaleup_gpus"] > raw["node_gpus"]).astype(np.float64)),
        # inference engines (TensorRT-LLM kernels) reach other GEMM efficiencies than training frameworks
        "infer_matmul_fp16_rate": z(raw["tensor_fp16_flops"] * raw["infer_matmul_eff_fp16"] * gemm_x),
        "infer_matmul_fp8_rate": z(raw["tensor_fp8_flops"] * raw["infer_matmul_eff_fp8"] * gemm_x),
        # and their own context (prompt) attention kernels: TensorRT-LLM's fused multi-head attention
        "infer_attention_rate": z(raw["tensor_fp16_flops"] * raw["infer_attention_eff"] * attn_x),
        # and its FP8 context FMHA (FP8 Q, K, V: dse.cost.inference.prompt_attention_rate), of the same 16-bit peak;
        # a generation without FP8 tensor cores (empty) runs the 16-bit kernel
        "infer_attention_fp8_rate": z(raw["tensor_fp16_flops"] * attn_x * np.where(
            np.isnan(raw["infer_attention_eff_fp8"]), raw["infer_attention_eff"], raw["infer_attention_eff_fp8"])),
        # and its MLA decode kernels with a BF16 / FP8 latent cache (dse.cost.inference.mla_decode_time); 0 where
        # no table measures them
        "infer_mla_decode_rate": z(raw["tensor_fp16_flops"] * attn_x * raw["infer_mla_decode_eff"]),
        "infer_mla_decode_fp8_rate": z(raw["tensor_fp16_flops"] * attn_x * raw["infer_mla_decode_eff_fp8"]),
        "infer_matmul_fp4_rate": z(raw["tensor_fp4_flops"] * raw["infer_matmul_eff_fp4"]),
        "layer_overhead_s": z(raw["layer_overhead_s"]),
        # the same decode pass captured in a CUDA graph (an engine's cuda_graphs): no per-kernel launches
        "layer_overhead_graphs_s": z(raw["layer_overhead_graphs_s"]),
        "host_bw": z(offload_link_rate(raw)),
        "tdp_w": z(raw["tdp_w"]),
        "mmha_rate": z(raw["sm_clocks"] * raw["mmha_elements_per_clk"]),
        "xqa_rate": z(raw["hbm_bw"] * raw["xqa_memory_eff"]),
        "cpu_adam_rate": z(cpu_adam_rate(raw)),
        "host_mem_bytes": z(raw["host_mem_bytes"] / raw["node_gpus"]),
        # serving: the routed experts' GEMM time under real routing over balanced (dse.cost.inference.routing_skew)
        "moe_routing_skew": np.nan_to_num(np.asarray(raw["moe_routing_skew"], dtype=np.float64), nan=1.0),
        "moe_routing_skew_per_doubling": z(raw["moe_routing_skew_per_doubling"]),
        # serving: the routed experts' NVFP4 grouped GEMMs and weight streaming as fractions of the dense NVFP4 rate
        # and of memory_rate (dse.cost.inference.moe_grouped_gemm_fractions); empty: B200's measured constants
        "moe_fp4_gemm_fraction": np.nan_to_num(np.asarray(raw["moe_fp4_gemm_eff"], dtype=np.float64),
                                               nan=MOE_NVFP4_GEMM_FRACTION),
        "moe_fp4_stream_fraction": np.nan_to_num(np.asarray(raw["moe_fp4_stream_eff"], dtype=np.float64),
                                                 nan=MOE_NVFP4_STREAM_FRACTION),
    }


def staged_bus_bandwidth(raw: dict[str, np.ndarray]) -> np.ndarray:
    """Bus bandwidth (bytes/s) of one GPU's collectives through host memory (no GPU peer-to-peer).

    Each byte a GPU sends is written to host DRAM and read back by its peer, and every GPU of the node sends at
    once, so the host's DRAM carries 2 x node_gpus x busbw: busbw <= HOST_STAGED_EFFICIENCY x DRAM / (2 x
    node_gpus).  The bytes also cross the GPU's own link once per direction and, behind a PCIe switch, the
    switch's uplink shared by gpus_per_switch GPUs: busbw <= link / gpus_per_switch.  The smaller bound holds."""
    link = raw["host_bw"] * HOST_LINK_EFFICIENCY / raw["gpus_per_switch"]
    return np.minimum(0.5 * host_staged_share(raw), link)


def host_staged_share(raw: dict[str, np.ndarray]) -> np.ndarray:
    """Bytes/s of the host path one GPU gets when every GPU of the node moves data through host memory at once:
    HOST_STAGED_EFFICIENCY x DRAM bandwidth / node_gpus.  A staged collective byte crosses it twice
    (:func:`staged_bus_bandwidth`), an offload copy once (:func:`offload_link_rate`)."""
    return HOST_STAGED_EFFICIENCY * raw["host_mem_bw"] / raw["node_gpus"]


def offload_link_rate(raw: dict[str, np.ndarray]) -> np.ndarray:
    """Bytes/s of one GPU's offload copies (ZeRO-Offload) while every GPU of the node copies at once: its link at
    HOST_LINK_EFFICIENCY, shared behind a PCIe switch by gpus_per_switch GPUs, and at most its share of the host
    DRAM bandwidth (each copied byte is written or read once there).

    On a server without GPU peer-to-peer the staged collectives measure the path every byte between a GPU and the
    host takes (:func:`staged_bus_bandwidth`: HOST_STAGED_EFFICIENCY of the DRAM bandwidth, each staged byte
    crossing it twice); an offload copy crosses it once, so it runs at most at HOST_STAGED_EFFICIENCY x DRAM /
    node_gpus, twice the staged bus bandwidth (with the fitted 0.0764: 2.7 GB/s on the RTX 4090 server, 2.0 on the
    RTX 3090 one).  The paper's LoRA ZeRO-3 runs measure that path directly: putting the frozen 16-bit weights on
    the host (3.4 GB each rank fetches per step) adds 1.4-1.9 s on the RTX 4090 server and 2.3-3.8 s on the RTX
    3090 ones, 1.8-2.4 and 0.9-1.5 GB/s per GPU, where their links give 6.3 and 25.6 GB/s (0.5 s, 6.8 GB/s, on the
    A800 server; tests/reference/zhang2023_train_bs1_lora7b.csv, t9-...-l-z3-o and -l-f-r-z3-o against the same
    runs without offload; one RTX 3090 pair runs faster offloaded, the runs' noise).  Servers with peer-to-peer
    stage nothing: dse has no measure of their host path besides the link and the DRAM."""
    link = raw["host_bw"] * HOST_LINK_EFFICIENCY / raw["gpus_per_switch"]
    staged = np.where(raw["p2p"] > 0, np.inf, host_staged_share(raw))
    return np.minimum(np.minimum(link, raw["host_mem_bw"] / raw["node_gpus"]), staged)


def cpu_adam_rate(raw: dict[str, np.ndarray]) -> np.ndarray:
    """Parameters/s one GPU's rank updates with DeepSpeed's CPU Adam: its share of the host's cores at
    CPU_ADAM_PARAMS_PER_CORE_S, at most its share of the DRAM bandwidth over CPU_ADAM_BYTES_PER_PARAM."""
    cores = raw["host_cores"] / raw["node_gpus"] * CPU_ADAM_PARAMS_PER_CORE_S
    dram = raw["host_mem_bw"] / raw["node_gpus"] / CPU_ADAM_BYTES_PER_PARAM
    return np.minimum(cores, dram)


@lru_cache(maxsize=256)
def raw_table(overrides: tuple[tuple[str, str, float], ...] = ()) -> dict[str, np.ndarray]:
    """Raw peaks and efficiencies, one entry per catalogued system (code order), SI units."""
    sysf = systems()
    eff = efficiency().copy()
    for generation, column, value in overrides:
        if generation not in eff.index or column not in EFFICIENCY_COLUMNS:
            raise CatalogError(f"no efficiency constant {column!r} for generation {generation!r}; generations: "
                               f"{', '.join(eff.index)}; constants: {', '.join(EFFICIENCY_COLUMNS)}")
        eff.loc[generation, column] = value
    missing = sorted(set(sysf["generation"]) - set(eff.index))
    if missing:
        raise CatalogError(f"dse/hardware/efficiency.csv: no row for generation(s) {missing}")
    g = eff.loc[sysf["generation"].to_numpy()]
    clock = power_clock_factor(sysf["tdp_w"].to_numpy(), sysf["power_limit_w"].to_numpy())  # 1 at rated power
    table = {
        "tensor_fp16_flops": sysf["tensor_fp16_tflops"].to_numpy() * 1e12 * clock,
        "tensor_fp8_flops": sysf["tensor_fp8_tflops"].to_numpy() * 1e12 * clock,
        "tensor_fp4_flops": sysf["tensor_fp4_tflops"].to_numpy() * 1e12 * clock,
        # NVIDIA's "80 GB" / "141 GB" / "24 GB" labels count binary gigabytes: memory dies hold 2^n bits and
        # NVIDIA's aiconfigurator models the capacities as GiB (shared/hardware_specs.md, notes).
        "hbm_bytes": sysf["hbm_gb"].to_numpy() * 2.0**30,
        "hbm_bw": sysf["hbm_tbps"].to_numpy() * 1e12,
        "scaleup_gpus": sysf["scaleup_gpus"].to_numpy(),
        "scaleup_bw": sysf["scaleup_gbps"].to_numpy() * 1e9,
        "p2p": sysf["p2p"].to_numpy(),
        "host_bw": sysf["host_gbps"].to_numpy() * 1e9,
        "node_gpus": sysf["node_gpus"].to_numpy(),
        "gpus_per_switch": sysf["gpus_per_switch"].to_numpy(),
        "host_cores": sysf["host_cores"].to_numpy(),
        "host_mem_bytes": sysf["host_mem_gb"].to_numpy() * 1e9,
        "host_mem_bw": sysf["host_mem_gbps"].to_numpy() * 1e9,
        "tdp_w": operating_power_w(sysf),  # the power drawn at most (energy outputs)
        "gemm_rate_factor": sysf["gemm_rate_factor"].fillna(1.0).to_numpy(),
        "attention_rate_factor": sysf["attention_rate_factor"].fillna(1.0).to_numpy(),
        # SMs × clock (per second): the FP32 vector peak is 2 FLOPs per lane per SM per clock
        "sm_clocks": sysf["vector_fp32_tflops"].to_numpy() * 1e12 * clock
        / (2.0 * sysf["fp32_lanes_per_sm"].to_numpy()),
        "scaleout_bw": sysf["scaleout_gbit"].to_numpy() * 1e9 / 8.0,
        "scaleup_latency_s": g["scaleup_latency_us"].to_numpy() * 1e-6,
        "scaleout_latency_s": g["scaleout_latency_us"].to_numpy() * 1e-6,
        "infer_allreduce_latency_s": g["infer_allreduce_latency_us"].to_numpy() * 1e-6,
        "infer_allgather_latency_s": g["infer_allgather_latency_us"].to_numpy() * 1e-6,
    }
    table["layer_overhead_s"] = g["layer_overhead_us"].to_numpy() * 1e-6
    table["layer_overhead_graphs_s"] = g["layer_overhead_graphs_us"].to_numpy() * 1e-6
    for col in FRACTION_COLUMNS + PER_CLOCK_COLUMNS + RATIO_COLUMNS:
        table[col] = g[col].to_numpy()
    return {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in table.items()}


@lru_cache(maxsize=256)
def _achieved_table(overrides: tuple[tuple[str, str, float], ...] = ()) -> dict[str, np.ndarray]:
    return achieved(raw_table(overrides))


def hardware_columns(
    codes: np.ndarray, overrides: dict[tuple[str, str], float] | None = None, dtype: type = np.float64
) -> dict[str, np.ndarray]:
    """Gather the hardware columns for an array of system codes.

    ``overrides`` maps ``(generation, constant)`` to a value and replaces an efficiency constant (used by
    calibration); the catalog files are never modified.  ``dtype=np.float32`` hands the kernel its working
    precision directly (sweeps, benchmarks).
    """
    key = _override_key(overrides)
    table = _achieved_table(key)
    idx = np.asarray(codes, dtype=np.int64)
    if dtype is not np.float64:  # the kernel computes in float32: gather from a float32 copy, no per-row cast
        table = _achieved_table_as(key, np.dtype(dtype).str)
    return {name: col[idx] for name, col in table.items()}


def hardware_table(overrides: dict[tuple[str, str], float] | None = None) -> dict[str, np.ndarray]:
    """The hardware columns of every catalogued system (indexed by system code), float64: gather one column
    with ``hardware_table()[name][codes]`` instead of every column with :func:`hardware_columns`."""
    return _achieved_table(_override_key(overrides))


def _override_key(overrides: dict[tuple[str, str], float] | None) -> tuple[tuple[str, str, float], ...]:
    """Efficiency overrides as the hashable, ordered key of the cached hardware tables."""
    return tuple(sorted((g, c, float(v)) for (g, c), v in (overrides or {}).items()))


@lru_cache(maxsize=64)
def _achieved_table_as(key: tuple[tuple[str, str, float], ...], dtype: str) -> dict[str, np.ndarray]:
    return {k: v.astype(dtype) for k, v in _achieved_table(key).items()}
