"""Hypothetical GPUs from technology: a catalogued chip re-built on another logic node, memory or network.

A derived chip starts from a *base* system of the catalog (its architecture, die area, power, memory device
count, scale-up domain) and replaces any of: the logic node, the memory technology (and device count), the
scale-up link, the scale-out NIC, the die area, the die count, the power budget.  Vectorized like the cost
kernels: every argument is an array (codes for technologies, NaN = keep the base's), so ``node``,
``memory_tech`` and ``network_tech`` are sweep axes.

Compute (dense tensor FLOP/s, every precision alike):

    peak = base_peak · min( (ρ·A·n·v) / (ρ·A·n·v)_base ,  (P·η) / (P·η)_base )

with ρ the node's logic density (MTr/mm²), A the die area, n the die count, v the node's relative speed at
iso-power, P the power budget and η the node's relative performance per watt (technology_nodes/logic.csv).
The first term is the area (transistor × clock) limit, the second the power limit; the base design is taken
to sit at both, so the base reproduces itself exactly and a shrink that adds transistors faster than it cuts
energy per operation becomes power-limited (dark silicon).  What technology cannot predict is architecture:
re-building an H100 from an A100 base gives 780 TFLOP/s against the real 989 (Hopper doubled the tensor-core
rate per SM), a B200 from an H100 base 1413 against 2250 — see the README.

Memory: bandwidth = devices × the technology's per-device rate at the operating point NVIDIA ships it at
(``reference_bw_per_stack_GBps``; else the headline rate × :data:`OPERATING_FRACTION`), capacity = devices ×
per-device capacity (reference, else headline).  Scale-up: the link's per-GPU one-direction bandwidth and, when
the row names one, its domain size; scale-out: the NIC's one-direction rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from dse.hardware import catalog as hwcat
from dse.hardware import technology as tech

#: Shipped HBM runs below its headline rate; where a technology has no shipped reference GPU, this fraction
#: of the headline is used.  ASSUMPTION: 0.85, inside the 82-100 % that the referenced parts show
#: (technology_nodes/memory.csv: A100 HBM2E 100 %, H100 HBM3 82 %, B200 HBM3E 83 %, Rubin HBM4 98 %).
OPERATING_FRACTION = 0.85

#: Sweep axes that derive hardware, with the technology table each one indexes (numeric ones: None).
DERIVE_AXES: dict[str, str | None] = {
    "node": "logic", "memory_tech": "memory", "network_tech": "network", "scaleout_tech": "network",
    "memory_devices": None, "die_area_mm2": None, "dies": None, "power_w": None,
}


def _names(kind: str) -> tuple[str, ...]:
    return {"logic": tech.node_names, "memory": tech.memory_names, "network": tech.network_names}[kind]()


def codes(kind: str, names: object, key: str) -> np.ndarray:
    """Technology ids → integer codes (position in the table); unknown ids raise ValueError listing them."""
    from dse.codes import encode

    return encode(names, _names(kind), key=key)


@cache
def _logic() -> dict[str, np.ndarray]:
    t = tech.logic_nodes()
    return {"density": t["logic_density_mtr_per_mm2"].to_numpy(float),
            "speed": t["relative_speed_iso_power"].to_numpy(float),
            "ppw": t["relative_perf_per_watt"].to_numpy(float)}


@cache
def _memory() -> dict[str, np.ndarray]:
    t = tech.memory_techs()
    headline_bw = t["bandwidth_per_stack_GBps"].to_numpy(float)
    ref_bw = pd.to_numeric(t["reference_bw_per_stack_GBps"], errors="coerce").to_numpy(float)
    headline_cap = pd.to_numeric(t["capacity_per_stack_GB"], errors="coerce").to_numpy(float)
    ref_cap = pd.to_numeric(t["reference_capacity_per_stack_GB"], errors="coerce").to_numpy(float)
    return {"bw": np.where(np.isnan(ref_bw), headline_bw * OPERATING_FRACTION, ref_bw) * 1e9,
            "capacity": np.where(np.isnan(ref_cap), headline_cap, ref_cap) * 2.0**30}


@cache
def _network() -> dict[str, np.ndarray]:
    t = tech.network_techs()
    domain = pd.to_numeric(t["domain_gpus"], errors="coerce").to_numpy(float)
    return {"bw": t["bw_unidir_GBps"].to_numpy(float) * 1e9, "domain": domain,
            "scaleup": (t["kind"] != "scaleout").to_numpy()}


@cache
def base_technology() -> dict[str, np.ndarray]:
    """Per catalogued system: codes of its node, memory and network, its device count, dies, area, power."""
    sysf = hwcat.systems()
    return {
        "node": codes("logic", sysf["node"].to_numpy(), "systems.csv node").astype(float),
        "memory_tech": codes("memory", sysf["memory_tech"].to_numpy(), "systems.csv memory_tech").astype(float),
        "network_tech": codes("network", sysf["network_tech"].to_numpy(), "systems.csv network_tech").astype(float),
        "memory_devices": sysf["memory_devices"].to_numpy(float),
        "dies": sysf["dies"].to_numpy(float),
        "die_area_mm2": sysf["die_area_mm2"].to_numpy(float),
        "power_w": hwcat.operating_power_w(sysf),  # the power its clock-scaled peaks are the base's at
    }


def derive_raw(system: np.ndarray, overrides: Mapping[str, Any] | None = None,
               efficiency: tuple[tuple[str, str, float], ...] = ()) -> dict[str, np.ndarray]:
    """Raw hardware columns (as :func:`dse.hardware.catalog.raw_table`) of the base ``system`` codes with the
    ``overrides`` (arrays or scalars of :data:`DERIVE_AXES`; NaN keeps the base's) applied, row by row.
    ``efficiency`` replaces efficiency constants (``(generation, constant, value)``, a calibration)."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(DERIVE_AXES))
    if unknown:
        raise ValueError(f"derive: {unknown[0]!r} is not a technology axis; allowed: {', '.join(DERIVE_AXES)}")
    sys_codes = np.asarray(system, dtype=np.int64)
    raw = {k: v[sys_codes] for k, v in hwcat.raw_table(efficiency).items()}
    base = {k: v[sys_codes] for k, v in base_technology().items()}
    shape = sys_codes.shape

    def value(key: str) -> np.ndarray:
        given = np.broadcast_to(np.asarray(overrides.get(key, np.nan), dtype=np.float64), shape)
        return np.where(np.isnan(given), base[key], given)

    logic, memory, network = _logic(), _memory(), _network()
    node, node0 = value("node").astype(np.int64), base["node"].astype(np.int64)
    area_term = logic["density"][node] * value("die_area_mm2") * value("dies") * logic["speed"][node]
    area_base = logic["density"][node0] * base["die_area_mm2"] * base["dies"] * logic["speed"][node0]
    power_term = value("power_w") * logic["ppw"][node]
    power_base = base["power_w"] * logic["ppw"][node0]
    scale = np.minimum(area_term / area_base, power_term / power_base)
    raw["tdp_w"] = value("power_w")
    for col in ("tensor_fp16_flops", "tensor_fp8_flops", "tensor_fp4_flops", "sm_clocks"):
        raw[col] = raw[col] * scale

    mem_given = "memory_tech" in overrides or "memory_devices" in overrides
    if mem_given:
        mem = value("memory_tech").astype(np.int64)
        devices = value("memory_devices")
        raw["hbm_bw"] = devices * memory["bw"][mem]
        raw["hbm_bytes"] = devices * memory["capacity"][mem]

    if "network_tech" in overrides:
        net_given = ~np.isnan(np.broadcast_to(np.asarray(overrides["network_tech"], dtype=float), shape))
        net = value("network_tech").astype(np.int64)
        if not network["scaleup"][net[net_given]].all():
            raise ValueError("derive: network_tech must be a scale-up or PCIe row (nvlink*, pcie*); use "
                             "scaleout_tech for NICs")
        raw["scaleup_bw"] = np.where(net_given, network["bw"][net], raw["scaleup_bw"])
        domain = network["domain"][net]
        raw["scaleup_gpus"] = np.where(net_given & ~np.isnan(domain), domain, raw["scaleup_gpus"])
    if "scaleout_tech" in overrides:
        out_given = ~np.isnan(np.broadcast_to(np.asarray(overrides["scaleout_tech"], dtype=float), shape))
        nic = np.where(out_given, np.broadcast_to(np.asarray(overrides["scaleout_tech"], dtype=float), shape), 0)
        nic = nic.astype(np.int64)
        if network["scaleup"][nic[out_given]].any():
            raise ValueError("derive: scaleout_tech must be a scale-out row (ib-*, eth-*)")
        raw["scaleout_bw"] = np.where(out_given, network["bw"][nic], raw["scaleout_bw"])
    return raw


def derived_hardware_columns(system: np.ndarray, overrides: Mapping[str, Any] | None = None,
                             dtype: type = np.float64,
                             efficiency: tuple[tuple[str, str, float], ...] = ()) -> dict[str, np.ndarray]:
    """Kernel hardware columns of derived chips (achieved rates, as :func:`hardware_columns`)."""
    return {k: v.astype(dtype) for k, v in hwcat.achieved(derive_raw(system, overrides, efficiency)).items()}
