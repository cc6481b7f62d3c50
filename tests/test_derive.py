"""Derived hardware: real chips rebuilt from the technology tables, and hypothetical ones."""

from __future__ import annotations

import numpy as np
import pytest

from dse.cli import main
from dse.hardware import catalog as hwcat
from dse.hardware import derive

# The chips and the technology rows they are built from (technology_nodes/*.csv; device counts from the
# memory table's reference_gpu rows): node, memory, devices, scale-up link.
REAL = {
    "a100-sxm-80gb": ("n7", "hbm2e", 5, "nvlink3"),
    "h100-sxm-80gb": ("n4", "hbm3", 5, "nvlink4"),
    "b200": ("n4", "hbm3e", 8, "nvlink5"),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_chips_rebuilt_from_the_tables_within_10_percent(name):
    node, memory, devices, network = REAL[name]
    raw = derive.derive_raw(hwcat.system_codes([name]), {
        "node": derive.codes("logic", [node], "node"), "memory_tech": derive.codes("memory", [memory], "memory"),
        "memory_devices": devices, "network_tech": derive.codes("network", [network], "network")})
    real = hwcat.systems().loc[name]
    assert raw["tensor_fp16_flops"][0] / 1e12 == pytest.approx(real["tensor_fp16_tflops"], rel=0.10)
    assert raw["hbm_bw"][0] / 1e12 == pytest.approx(real["hbm_tbps"], rel=0.10)
    assert raw["hbm_bytes"][0] / 2**30 == pytest.approx(real["hbm_gb"], rel=0.10)
    assert raw["scaleup_bw"][0] / 1e9 == pytest.approx(real["scaleup_gbps"], rel=0.10)


def test_base_without_overrides_is_the_catalog_chip():
    codes = np.arange(len(hwcat.system_names()))
    derived = derive.derive_raw(codes, {})
    for key, value in hwcat.raw_table().items():
        np.testing.assert_array_equal(derived[key], value)


def test_shrinks_raise_compute_and_become_power_limited():
    b200 = hwcat.system_codes(["b200"] * 8)
    nodes = derive.codes("logic", ["n12", "n7", "n5", "n4", "n3", "n2", "a14", "a10"], "node")
    flops = derive.derive_raw(b200, {"node": nodes})["tensor_fp16_flops"]
    assert np.all(np.diff(flops) > 0)
    # at 1 nm the power term binds: the area term alone would give more
    from dse.hardware.technology import logic_nodes

    t = logic_nodes()
    area_ratio = (t.loc["a10", "logic_density_mtr_per_mm2"] * t.loc["a10", "relative_speed_iso_power"]) / (
        t.loc["n4", "logic_density_mtr_per_mm2"] * t.loc["n4", "relative_speed_iso_power"])
    power_ratio = t.loc["a10", "relative_perf_per_watt"] / t.loc["n4", "relative_perf_per_watt"]
    assert power_ratio < area_ratio
    assert flops[-1] / flops[3] == pytest.approx(power_ratio, rel=1e-9)


def test_memory_and_network_axes():
    h100 = hwcat.system_codes(["h100-sxm-80gb"] * 2)
    raw = derive.derive_raw(h100, {"memory_tech": derive.codes("memory", ["hbm3", "hbm4e"], "m")})
    assert raw["hbm_bw"][1] > 2 * raw["hbm_bw"][0]
    raw = derive.derive_raw(h100, {"network_tech": derive.codes("network", ["nvlink4", "nvlink5-nvl72"], "n")})
    assert raw["scaleup_gpus"].tolist() == [8.0, 72.0]
    with pytest.raises(ValueError, match="scale-out"):
        derive.derive_raw(h100, {"scaleout_tech": derive.codes("network", ["nvlink5", "nvlink5"], "n")})


def test_spec_naming_an_unknown_node_lists_the_nodes(tmp_path, capsys):
    spec = tmp_path / "x.yaml"
    spec.write_text("grid: {model: llama3-8b, system: h100-sxm-80gb, node: n0p5, gpus: 8, seq_len: 4096, "
                    "global_batch: 64}\n")
    code = main(["run", str(spec), "-o", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err
    assert code == 2
    assert "grid.node" in err and "'n0p5'" in err and "n12, n7, n5, n4, n3, n2, a14, a10" in err
    assert not (tmp_path / "out").exists()
