"""Tests of the technology tables (technology_nodes/*.csv) and their loader (dse.hardware.technology).

The tables are read raw (every cell as text) to check provenance, and through the loader to check the numbers:
required rows exist, generations improve monotonically, the DERIVED cumulative columns follow from the per-node
gains, and the three reference GPUs (A100, H100, B200) are reproduced from their technologies.  Malformed copies
of the files, written to ``tmp_path`` and loaded through ``DSE_TECHNOLOGY_DIR``, must raise
:class:`TechnologyError` naming the file, the line, the column and the bad value.
"""

from __future__ import annotations

import csv
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.hardware import catalog as hwcat
from dse.hardware import technology as tech
from tests.conftest import REPO

TECH_DIR = REPO / "technology_nodes"
SHARED_SPECS = REPO.parent / "shared" / "hardware_specs.csv"
FILES = ("logic.csv", "memory.csv", "network.csv")

SWEEP_NODES = ("n12", "n7", "n5", "n4", "n3", "n2", "a14", "a10")
HBM_GENERATIONS = ("hbm2", "hbm2e", "hbm3", "hbm3e", "hbm4", "hbm4e")
REQUIRED_MEMORIES = HBM_GENERATIONS + ("gddr6x", "gddr7")
NVLINK_GENERATIONS = ("nvlink3", "nvlink4", "nvlink5", "nvlink6")
REQUIRED_NETWORKS = NVLINK_GENERATIONS + ("ib-hdr", "ib-ndr", "ib-xdr", "eth-400g", "eth-800g", "pcie4", "pcie5",
                                          "pcie6")

#: The reference GPUs: (catalog name in shared/hardware_specs.csv and dse/hardware/systems.csv, logic node, memory,
#: NVLink generation, scale-out technology).  Memory stack counts come from memory.csv's max_stacks_per_package:
#: A100 5 active HBM2E stacks, H100 5 active HBM3 stacks, B200 8 HBM3E stacks (sources in that file's rows).
REFERENCE_GPUS = (
    ("a100-sxm-80gb", "n7", "hbm2e", "nvlink3", "ib-hdr"),
    ("h100-sxm-80gb", "n4", "hbm3", "nvlink4", "ib-ndr"),
    ("b200", "n4", "hbm3e", "nvlink5", "ib-ndr"),
)
PROCESS_TO_NODE = {"TSMC N7": "n7", "TSMC 4N": "n4", "TSMC 4NP": "n4"}


@pytest.fixture(autouse=True)
def _fresh_tables(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts from the repository's tables with an empty cache, and leaves the cache empty."""
    monkeypatch.delenv(tech.ENV_DIR, raising=False)
    tech.clear_cache()
    yield
    tech.clear_cache()


def _raw(name: str) -> pd.DataFrame:
    return pd.read_csv(TECH_DIR / name, dtype=str, keep_default_na=False)


def _shared_specs() -> pd.DataFrame | None:
    if not SHARED_SPECS.exists():
        return None
    return pd.read_csv(SHARED_SPECS, dtype={"catalog_name": str}).set_index("catalog_name")


# ---------------------------------------------------------------------------------------------------------
# loading, ids, provenance
# ---------------------------------------------------------------------------------------------------------

def test_tables_load_indexed_by_id():
    logic, memory, network = tech.logic_nodes(), tech.memory_techs(), tech.network_techs()
    assert tuple(logic.index) == tech.node_names() == tuple(_raw("logic.csv")["node"])
    assert tuple(memory.index) == tech.memory_names() == tuple(_raw("memory.csv")["id"])
    assert tuple(network.index) == tech.network_names() == tuple(_raw("network.csv")["id"])
    for frame in (logic, memory, network):
        assert frame.index.is_unique
        assert all(i == i.lower() for i in frame.index)
        assert frame["year"].dtype == np.int64
    assert logic["logic_density_mtr_per_mm2"].dtype == np.float64
    assert tech.technology_dir() == TECH_DIR.resolve()


def test_loaded_frames_are_copies():
    frame = tech.memory_techs()
    frame.loc["hbm3", "bandwidth_per_stack_GBps"] = -1.0
    assert tech.memory_techs().loc["hbm3", "bandwidth_per_stack_GBps"] == 819.0


@pytest.mark.parametrize("name", FILES)
def test_every_row_has_a_source_with_resolved_tags(name: str):
    raw = _raw(name)
    readme = (TECH_DIR / "README.md").read_text(encoding="utf-8")
    for _, row in raw.iterrows():
        assert row["source"].strip(), f"{name}: row {row.iloc[0]} has no source"
        for tag in re.findall(r"\[([A-Z]+-[A-Za-z0-9-]+)\]", row["source"] + " " + row["notes"] + " "
                              + row["assumption"]):
            assert f"| {tag} |" in readme, f"{name}: tag [{tag}] of row {row.iloc[0]} is not resolved in README.md"


@pytest.mark.parametrize("name", FILES)
def test_assumptions_name_the_cells_they_cover(name: str):
    """A non-empty ``assumption`` names the column(s) it is about."""
    raw = _raw(name)
    numeric = [c for c in raw.columns if c not in ("source", "notes", "assumption", "name", "standard", "kind",
                                                   "reference_gpu", "compared_against")]
    for _, row in raw.iterrows():
        text = row["assumption"]
        if text:
            assert any(col in text for col in numeric), (name, row.iloc[0], text)


def test_required_rows_exist():
    assert set(SWEEP_NODES) <= set(tech.node_names())
    assert tuple(n for n in tech.node_names() if n in SWEEP_NODES) == SWEEP_NODES, "file order is sweep order"
    assert set(REQUIRED_MEMORIES) <= set(tech.memory_names())
    assert set(REQUIRED_NETWORKS) <= set(tech.network_names())
    kinds = tech.network_techs()["kind"]
    assert {kinds[n] for n in NVLINK_GENERATIONS} == {"scaleup"}
    assert {kinds[n] for n in ("ib-hdr", "ib-ndr", "ib-xdr", "eth-400g", "eth-800g")} == {"scaleout"}
    assert {kinds[n] for n in ("pcie4", "pcie5", "pcie6")} == {"pcie"}
    domains = set(tech.network_techs().query("kind == 'scaleup'")["domain_gpus"])
    assert {8.0, 72.0, 144.0, 576.0} <= domains


# ---------------------------------------------------------------------------------------------------------
# monotonic sanity and DERIVED columns
# ---------------------------------------------------------------------------------------------------------

def test_logic_improves_with_every_shrink():
    logic = tech.logic_nodes().loc[list(SWEEP_NODES)]
    for col in ("logic_density_mtr_per_mm2", "relative_speed_iso_power", "relative_perf_per_watt"):
        assert np.all(np.diff(logic[col].to_numpy()) > 0), col
    assert np.all(np.diff(logic["year"].to_numpy()) > 0)
    assert np.all(np.diff(logic["sram_bitcell_um2"].to_numpy()) <= 0), "SRAM bitcells never grow"
    assert logic.loc["n12", "relative_perf_per_watt"] == 1.0


def test_logic_cumulative_columns_follow_the_chain():
    """relative_perf_per_watt = Π 1/(1 − power reduction), relative_speed = Π (1 + speed gain), density = Π gain,
    each along compared_against (recomputed here independently of the loader's own check)."""
    logic = tech.logic_nodes()
    for node, row in logic.iterrows():
        ref = row["compared_against"]
        if not ref:
            continue
        base = logic.loc[ref]
        ppw = base["relative_perf_per_watt"] / (1 - row["power_reduction_iso_speed_vs_prev"])
        speed = base["relative_speed_iso_power"] * (1 + row["speed_gain_iso_power_vs_prev"])
        density = base["logic_density_mtr_per_mm2"] * row["density_gain_vs_prev"]
        assert row["relative_perf_per_watt"] == pytest.approx(ppw, rel=5e-3), node
        assert row["relative_speed_iso_power"] == pytest.approx(speed, rel=5e-3), node
        assert row["logic_density_mtr_per_mm2"] == pytest.approx(density, rel=3e-2), node
    # N3 is compared against N5 (TSMC quotes no N3E-vs-N4P figures), not against the N4 row before it
    assert logic.loc["n3", "compared_against"] == "n5"


def test_hbm_and_gddr_bandwidth_grow_by_generation():
    memory = tech.memory_techs()
    hbm = memory.loc[list(HBM_GENERATIONS), "bandwidth_per_stack_GBps"].to_numpy()
    assert np.all(np.diff(hbm) > 0)
    gddr = memory.loc[["gddr6", "gddr6x", "gddr7"], "bandwidth_per_stack_GBps"].to_numpy()
    assert np.all(np.diff(gddr) > 0)
    hbm_years = memory.loc[list(HBM_GENERATIONS), "year"].to_numpy()
    assert np.all(np.diff(hbm_years) > 0)


def test_memory_bandwidth_is_pin_rate_times_width_within_rounding():
    """Headline per-stack bandwidth ≈ pin rate × interface width / 8 (vendor 'greater than' figures allow ~5 %)."""
    memory = tech.memory_techs()
    implied = memory["pin_speed_gbps"] * memory["interface_width_bits"] / 8.0
    ratio = memory["bandwidth_per_stack_GBps"] / implied
    assert ratio.between(0.97, 1.05).all(), ratio.to_dict()


def test_interconnect_bandwidth_grows_by_generation():
    net = tech.network_techs()
    for family in (NVLINK_GENERATIONS, ("pcie4", "pcie5", "pcie6", "pcie7"), ("ib-hdr", "ib-ndr", "ib-xdr", "ib-gdr"),
                   ("eth-400g", "eth-800g", "eth-1600g")):
        bw = net.loc[list(family), "bw_unidir_GBps"].to_numpy()
        assert np.all(np.diff(bw) > 0), family
    pcie = net.loc[["pcie4", "pcie5", "pcie6", "pcie7"], "bw_unidir_GBps"].to_numpy()
    assert np.allclose(pcie[1:] / pcie[:-1], 2.0), "each PCIe generation doubles the rate"
    assert (net["bw_bidir_GBps"] == 2 * net["bw_unidir_GBps"]).all()
    assert (net["line_rate_gbps"] == 8 * net["bw_unidir_GBps"]).all()


# ---------------------------------------------------------------------------------------------------------
# consistency with the GPU catalog (A100 / H100 / B200)
# ---------------------------------------------------------------------------------------------------------

def _reference_memory_bandwidth_GBps(memory_id: str) -> float:
    """stacks × per-stack bandwidth at the reference GPU's operating point (memory.csv)."""
    row = tech.lookup("memory", memory_id)
    return float(row["max_stacks_per_package"] * row["reference_bw_per_stack_GBps"])


@pytest.mark.parametrize(("gpu", "node", "memory_id", "nvlink", "scaleout"), REFERENCE_GPUS)
def test_reference_gpus_reproduced_from_the_repo_catalog(gpu, node, memory_id, nvlink, scaleout):
    """dse/hardware/systems.csv (derived from shared/hardware_specs.csv): HBM TB/s and NVLink per direction."""
    system = hwcat.systems().loc[gpu]
    assert tech.lookup("memory", memory_id)["reference_gpu"] == gpu
    predicted = _reference_memory_bandwidth_GBps(memory_id)
    assert predicted == pytest.approx(system["hbm_tbps"] * 1000.0, rel=0.10)
    assert tech.lookup("network", nvlink)["bw_unidir_GBps"] == pytest.approx(system["scaleup_gbps"])
    assert tech.lookup("network", scaleout)["line_rate_gbps"] == pytest.approx(system["scaleout_gbit"])


@pytest.mark.skipif(not SHARED_SPECS.exists(), reason="../shared/hardware_specs.csv not beside this checkout")
@pytest.mark.parametrize(("gpu", "node", "memory_id", "nvlink", "scaleout"), REFERENCE_GPUS)
def test_reference_gpus_reproduced_from_shared_specs(gpu, node, memory_id, nvlink, scaleout):
    specs = _shared_specs()
    assert specs is not None
    spec = specs.loc[gpu]
    assert PROCESS_TO_NODE[spec["process_node"]] == node
    mem = tech.lookup("memory", memory_id)
    assert spec["hbm_type"].lower() == memory_id
    predicted = _reference_memory_bandwidth_GBps(memory_id)
    assert predicted == pytest.approx(spec["hbm_bandwidth_tbps"] * 1000.0, rel=0.10)
    # capacity: stacks × reference capacity covers the vendor's label (B200: 8 × 24 GB = 192 GB physical, 180 usable)
    assert mem["max_stacks_per_package"] * mem["reference_capacity_per_stack_GB"] >= spec["hbm_capacity_gb"]
    net = tech.lookup("network", nvlink)
    assert net["bw_bidir_GBps"] == spec["nvlink_bandwidth_gbps_per_gpu_bidirectional"]
    assert net["domain_gpus"] == spec["scale_up_domain_gpus"]
    out = tech.lookup("network", scaleout)
    assert out["line_rate_gbps"] * out["ports_per_gpu"] == spec["scale_out_nic_gbps_per_gpu"]
    logic = tech.lookup("logic", node)
    die_density = spec["transistors_billion"] * 1e3 / spec["die_area_mm2"] if spec["die_area_mm2"] > 0 else np.nan
    if np.isfinite(die_density):
        assert logic["gpu_die_density_mtr_per_mm2"] == pytest.approx(die_density, rel=0.01)


def test_shipped_hbm_runs_at_or_below_the_headline():
    """Products run HBM at 82-100 % of the headline per-stack rate (H100 HBM3 5.2 of 6.4 Gb/s, B200 HBM3E 1.0 of
    1.2 TB/s): stacks × headline alone over-predicts H100 and B200 by ~20 %, which is why memory.csv carries the
    reference operating point."""
    memory = tech.memory_techs()
    hbm = memory[(memory["kind"] == "hbm") & memory["reference_bw_per_stack_GBps"].notna()]
    derate = hbm["reference_bw_per_stack_GBps"] / hbm["bandwidth_per_stack_GBps"]
    assert derate.between(0.8, 1.0).all(), derate.to_dict()
    headline_a100 = 5 * memory.loc["hbm2e", "bandwidth_per_stack_GBps"]
    assert headline_a100 == pytest.approx(2039.0, rel=0.10)


# ---------------------------------------------------------------------------------------------------------
# lookup and unknown names
# ---------------------------------------------------------------------------------------------------------

def test_lookup_is_case_insensitive_and_accepts_aliases():
    assert tech.lookup("logic", "N7")["logic_density_mtr_per_mm2"] == 91.2
    assert tech.lookup("node", " a10 ")["node"] == "a10"
    assert tech.lookup("Memory", "HBM3E")["max_stacks_per_package"] == 8
    assert tech.lookup("network", "NVLink5")["bw_bidir_GBps"] == 1800


@pytest.mark.parametrize(("kind", "name", "listed"), [
    ("logic", "n1", "n12, n7, n5, n4, n3, n2, a14, a10"),
    ("memory", "hbm5", "hbm3e"),
    ("network", "nvlink9", "nvlink6"),
])
def test_unknown_names_list_the_known_ones(kind: str, name: str, listed: str):
    with pytest.raises(ValueError, match=re.escape(listed)) as info:
        tech.lookup(kind, name)
    assert repr(name) in str(info.value)
    assert not isinstance(info.value, tech.TechnologyError), "unknown names are not malformed files"


def test_unknown_kind_lists_the_kinds():
    with pytest.raises(ValueError, match="logic.*memory.*network"):
        tech.lookup("storage", "nvme")


# ---------------------------------------------------------------------------------------------------------
# malformed files
# ---------------------------------------------------------------------------------------------------------

def _copy_tables(tmp_path: Path) -> Path:
    target = tmp_path / "technology_nodes"
    target.mkdir()
    for name in FILES + ("README.md",):
        shutil.copy(TECH_DIR / name, target / name)
    return target


def _edit(path: Path, ident: str, column: str, value: str) -> int:
    """Set one cell (row chosen by its id in the first column) and return that row's 1-based line number."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    header = rows[0]
    for index, row in enumerate(rows[1:], start=2):
        if row[0] == ident:
            row[header.index(column)] = value
            with path.open("w", newline="", encoding="utf-8") as fh:
                csv.writer(fh, lineterminator="\n").writerows(rows)
            return index  # one record per line in these files (no embedded newlines)
    raise AssertionError(f"no row {ident!r} in {path}")


def _point_at(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    monkeypatch.setenv(tech.ENV_DIR, str(directory))
    tech.clear_cache()


LOADERS: dict[str, Callable[[], pd.DataFrame]] = {
    "logic.csv": tech.logic_nodes, "memory.csv": tech.memory_techs, "network.csv": tech.network_techs,
}

#: (file, row id, column, bad value, phrase of what is allowed)
MALFORMED = [
    ("logic.csv", "n5", "logic_density_mtr_per_mm2", "dense", "expected a number"),
    ("logic.csv", "n3", "logic_density_mtr_per_mm2", "-274.1", "positive"),
    ("logic.csv", "n2", "logic_density_mtr_per_mm2", "", "a value is required"),
    ("logic.csv", "n7", "source", "", "every row needs a source"),
    ("logic.csv", "a14", "speed_gain_iso_power_vs_prev", "10", "fraction strictly between 0 and 1"),
    ("logic.csv", "a14", "relative_perf_per_watt", "12.0", "DERIVED value must equal 9.62"),
    ("logic.csv", "n4", "compared_against", "n3", "the id of an earlier row"),
    ("logic.csv", "n2", "year", "2025.5", "whole year"),
    ("logic.csv", "n3", "node", "N3", "lower-case"),
    ("logic.csv", "n3", "node", "n5", "must be unique"),
    ("memory.csv", "hbm3", "bandwidth_per_stack_GBps", "fast", "expected a number"),
    ("memory.csv", "hbm3e", "kind", "sram", "one of hbm, gddr, lpddr"),
    ("memory.csv", "hbm4", "max_stacks_per_package", "", "required for kind 'hbm'"),
    ("memory.csv", "gddr7", "energy_pj_per_bit", "0", "positive"),
    ("memory.csv", "hbm2", "source", " ", "every row needs a source"),
    ("network.csv", "nvlink4", "bw_unidir_GBps", "inf", "positive"),
    ("network.csv", "nvlink5", "bw_bidir_GBps", "900", "2 × bw_unidir_GBps"),
    ("network.csv", "ib-ndr", "kind", "scale-out", "one of scaleup, scaleout, pcie"),
    ("network.csv", "nvlink6", "domain_gpus", "", "required for kind 'scaleup'"),
    ("network.csv", "pcie5", "latency_us", "-1", "positive"),
]


@pytest.mark.parametrize(("name", "ident", "column", "value", "allowed"), MALFORMED)
def test_malformed_cell_names_file_row_column_value(tmp_path, monkeypatch, name, ident, column, value, allowed):
    directory = _copy_tables(tmp_path)
    line = _edit(directory / name, ident, column, value)
    _point_at(monkeypatch, directory)
    with pytest.raises(tech.TechnologyError) as info:
        LOADERS[name]()
    message = str(info.value)
    assert name in message
    assert f"row {line}" in message
    assert repr(column) in message
    assert repr(value.strip()) in message
    assert allowed in message
    assert isinstance(info.value, ValueError)


def test_missing_column_is_reported_with_the_required_list(tmp_path, monkeypatch):
    directory = _copy_tables(tmp_path)
    path = directory / "network.csv"
    frame = pd.read_csv(path, dtype=str, keep_default_na=False).drop(columns=["latency_us"])
    frame.to_csv(path, index=False)
    _point_at(monkeypatch, directory)
    with pytest.raises(tech.TechnologyError, match=r"network\.csv: row 1 \(header\): missing column\(s\) "
                                                   r"'latency_us'; required columns: id, year"):
        tech.network_techs()


def test_missing_directory_is_reported(tmp_path, monkeypatch):
    _point_at(monkeypatch, tmp_path / "nowhere")
    with pytest.raises(tech.TechnologyError, match=r"logic\.csv: technology table not found.*DSE_TECHNOLOGY_DIR"):
        tech.logic_nodes()


def test_environment_override_and_cache(tmp_path, monkeypatch):
    """DSE_TECHNOLOGY_DIR selects the folder; tables are cached per folder until clear_cache()."""
    directory = _copy_tables(tmp_path)
    _edit(directory / "memory.csv", "hbm3", "name", "HBM3 (edited copy)")
    assert tech.lookup("memory", "hbm3")["name"] == "HBM3"
    _point_at(monkeypatch, directory)
    assert tech.lookup("memory", "hbm3")["name"] == "HBM3 (edited copy)"
    assert tech.technology_dir() == directory.resolve()
    _edit(directory / "memory.csv", "hbm3", "name", "HBM3 (edited twice)")
    assert tech.lookup("memory", "hbm3")["name"] == "HBM3 (edited copy)", "cached"
    tech.clear_cache()
    assert tech.lookup("memory", "hbm3")["name"] == "HBM3 (edited twice)"
    monkeypatch.delenv(tech.ENV_DIR)
    assert tech.lookup("memory", "hbm3")["name"] == "HBM3"


def test_derived_hardware_by_runs_equals_row_by_row():
    """The sweep derives hardware once per run of equal (system, technology) rows; same values as per row."""
    import numpy as np

    from dse.hardware.derive import derived_hardware_columns
    from dse.sweep import DTYPE, _derived_runs

    rng = np.random.default_rng(0)
    n = 4000
    runs = np.repeat(np.arange(40), n // 40)  # 40 runs of 100 equal rows
    systems = rng.integers(0, 3, 40)[runs]
    techs = {"node": rng.integers(0, 5, 40)[runs].astype(float),
             "memory_devices": np.where(rng.random(40) < 0.3, np.nan, rng.integers(4, 9, 40))[runs],
             "power_w": rng.choice([700.0, 1000.0], 40)[runs]}
    fast = _derived_runs(systems, techs, ())
    slow = derived_hardware_columns(systems, techs, dtype=DTYPE)
    assert fast.keys() == slow.keys()
    for k in slow:
        np.testing.assert_array_equal(fast[k], slow[k], err_msg=k)
