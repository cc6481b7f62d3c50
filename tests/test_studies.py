"""The five paper studies (dse.studies): properties their data must have by construction or by physics, and the
command line.  Each assertion says why it must hold; no number is copied from the code's own output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dse
from dse import studies
from dse.cost.training import MEMORY_BREAKDOWN
from dse.hardware import catalog as hwcat
from dse.hardware import technology as tech

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DECODE_GEMMS = list(studies.WEIGHT_GEMMS)


@pytest.fixture(scope="module")
def memory() -> pd.DataFrame:
    return studies.memory_footprint_data()


@pytest.fixture(scope="module")
def speedup() -> pd.DataFrame:
    return studies.generation_speedup_data()


@pytest.fixture(scope="module")
def nodes() -> pd.DataFrame:
    return studies.technology_node_data()


@pytest.fixture(scope="module")
def bound() -> pd.DataFrame:
    return studies.inference_bound_data()


@pytest.fixture(scope="module")
def memtech() -> pd.DataFrame:
    return studies.memory_technology_data()


# ---- study 1: memory footprint -------------------------------------------------------------------------------


def test_memory_activations_order_by_recompute(memory: pd.DataFrame) -> None:
    # Selective recomputation drops the s×s attention tensors (stored without it); full recomputation keeps
    # only each layer's input.  Each mode stores a strict subset of the one before, so activations fall.
    act = memory.pivot_table(index=["model", "sp"], columns="recompute", values="mem_activations_bytes")
    assert (act["none"] > act["selective"]).all()
    assert (act["selective"] > act["full"]).all()


def test_memory_sequence_parallel_lowers_activations(memory: pd.DataFrame) -> None:
    # Sequence parallelism splits the norm / dropout activations (and, with full recomputation, the stored
    # layer input) over the 8 tensor-parallel GPUs instead of replicating them.
    act = memory.pivot_table(index=["model", "recompute"], columns="sp", values="mem_activations_bytes")
    assert (act[1] < act[0]).all()


def test_memory_states_do_not_depend_on_recompute(memory: pd.DataFrame) -> None:
    # Recomputation and sp change what activations are kept, not the parameters a GPU holds, so weights,
    # gradients and optimizer states are the same in every variant of a model.
    for col in ("mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes"):
        spread = memory.groupby("model")[col].agg(lambda v: v.max() - v.min())
        assert (spread == 0).all(), col


def test_memory_bars_sum_to_total(memory: pd.DataFrame) -> None:
    # The drawn bars are the parts of MEMORY_BREAKDOWN, which the kernel defines to add up to the total
    # (float32 kernel: relative tolerance 1e-6).
    parts = memory[list(MEMORY_BREAKDOWN)].sum(axis=1)
    np.testing.assert_allclose(parts, memory["mem_total_bytes"], rtol=1e-6)
    # the capacity line is the A100's 80 GiB
    assert (memory["capacity_bytes"] == 80 * 2**30).all()


# ---- study 2: generation speed-up ---------------------------------------------------------------------------


def test_speedup_factors_multiply_to_total(speedup: pd.DataFrame) -> None:
    # f_i = T_{i-1} / T_i telescopes: the product over the steps is T_A100 / T_target, the total.
    steps = speedup[speedup["step"] > 0]
    product = steps.groupby(["model", "target"])["speedup_factor"].prod()
    total = steps.groupby(["model", "target"])["total_speedup"].first()
    np.testing.assert_allclose(product, total, rtol=1e-9)
    assert len(product) == len(studies.SPEEDUP_SCENARIOS) * len(studies.TARGET_SYSTEMS)


def test_every_target_is_faster_than_a100(speedup: pd.DataFrame) -> None:
    # Every target has more FLOP/s, bandwidth and capacity and at least the A100's links, so its best layout
    # must beat the A100's.
    totals = speedup[speedup["step"] > 0].groupby(["model", "target"])["total_speedup"].first()
    assert (totals > 1.0).all()


def test_low_precision_only_from_its_step(speedup: pd.DataFrame) -> None:
    # The rule of the study: fp8 / fp4 layouts are allowed once the lower-precision rates are switched on.
    early = speedup[speedup["step"] < studies.LOW_PRECISION_STEP]
    assert (early["precision"] == "bf16").all()


def test_last_step_is_the_target_itself(speedup: pd.DataFrame) -> None:
    # After the last group every hardware column is the target's, so the winning layout evaluated on the
    # catalogued target through the public API must give the same step time.
    last = speedup[speedup["step"] == len(studies.FACTOR_GROUPS)]
    rows = []
    for _, r in last.iterrows():
        fixed = next(f for m, f, _ in studies.SPEEDUP_SCENARIOS if m == r["model"])
        rows.append({"model": r["model"], "system": r["target"], "gpus": studies.SPEEDUP_GPUS, **fixed,
                     **{c: r[c] for c in studies.LAYOUT}})
    direct = dse.evaluate(pd.DataFrame(rows))
    np.testing.assert_allclose(direct["step_time_s"].to_numpy(), last["step_time_s"].to_numpy(), rtol=1e-6)


def test_generation_speedups_chain(speedup: pd.DataFrame) -> None:
    # Ratios of best step times chain: A100→B200 = A100→H100 × H100→B200.
    s = studies.generation_speedups(speedup)
    assert s["A100→B200"] == pytest.approx(s["A100→H100"] * s["H100→B200"], rel=1e-9)


# ---- study 3: technology nodes --------------------------------------------------------------------------------


def test_scenarios_coincide_at_the_base_era(nodes: pd.DataFrame) -> None:
    # At 12 nm every scenario uses the 12 nm node, HBM2 and NVLink 2: the same chip, the same step time.
    first = nodes[nodes["era"] == studies.NODES[0]]
    assert len(first) == len(studies.SCENARIOS)
    for col in ("node", "memory_tech", "network_tech"):
        assert first[col].nunique() == 1
    assert first["step_time_s"].nunique() == 1
    assert np.isfinite(first["step_time_s"]).all()


def test_logic_only_step_time_never_grows_as_the_node_shrinks(nodes: pd.DataFrame) -> None:
    # Precondition from the tables: logic density x speed and perf/W both grow along the node order, so the
    # derived peak (area- or power-limited, the smaller) grows too.
    logic = tech.logic_nodes().set_index("node").loc[list(studies.NODES)]
    assert np.all(np.diff(logic["logic_density_mtr_per_mm2"] * logic["relative_speed_iso_power"]) > 0)
    assert np.all(np.diff(logic["relative_perf_per_watt"]) > 0)
    # With memory and network fixed, every layout's step time is non-increasing in the FLOP rate (each term is
    # a sum or a max of compute and transfer times), so the best over the same grid is non-increasing too
    # (float32 kernel: 1e-6 slack).
    part = nodes[nodes["scenario"] == "logic only"].set_index("era").loc[list(studies.NODES)]
    assert np.all(np.diff(part["tensor_fp16_flops"]) > 0)
    t = part["step_time_s"].to_numpy()
    assert np.all(t[1:] <= t[:-1] * (1 + 1e-6))


def test_all_at_n4_has_the_b200_rates(nodes: pd.DataFrame) -> None:
    # n4 with HBM3E and NVLink 5 is the B200's own technology: the derived chip scales the B200 by exactly 1.
    row = nodes[(nodes["scenario"] == "all") & (nodes["era"] == "n4")].iloc[0]
    b200 = hwcat.hardware_columns(hwcat.system_codes(["b200"]))
    for col in ("tensor_fp16_flops", "hbm_bw", "scaleup_ring_bw", "scaleup_gpus"):
        assert row[col] == pytest.approx(float(b200[col][0]), rel=1e-9), col


def test_breakdown_fractions_sum_to_one(nodes: pd.DataFrame) -> None:
    # The drawn fractions are the TIME_BREAKDOWN terms over the step time, which they add up to.
    frac = nodes[[c for c in nodes.columns if c.startswith("frac_")]].sum(axis=1)
    np.testing.assert_allclose(frac, 1.0, rtol=1e-5)


# ---- study 4: compute- vs memory-bound ops --------------------------------------------------------------------


def test_decode_batch1_gemms_are_memory_bound(bound: pd.DataFrame) -> None:
    # At batch 1 a GEMM is a matrix-vector product: 2·N·K FLOPs over at least the 2·N·K bytes of its 16-bit
    # weights, i.e. at most 1 FLOP/byte, far below any GPU's ridge (peak FLOP/s ÷ bandwidth ≫ 1).
    rows = bound[(bound["phase"] == "decode") & (bound["batch"] == 1) & bound["op"].isin(DECODE_GEMMS)]
    assert len(rows) == len(DECODE_GEMMS) * len(studies.BOUND_SYSTEMS)
    assert rows["memory_bound"].all()
    assert (rows["intensity"] <= 1.0).all()


def test_decode_gemm_intensity_grows_with_batch(bound: pd.DataFrame) -> None:
    # The weights are read once per decode step whatever the batch while the FLOPs grow with it.
    rows = bound[(bound["phase"] == "decode") & bound["op"].isin(DECODE_GEMMS)]
    for _, group in rows.groupby(["system", "op"]):
        intensity = group.sort_values("batch")["intensity"].to_numpy()
        assert np.all(np.diff(intensity) > 0)


def test_prefill_layer_gemms_are_compute_bound(bound: pd.DataFrame) -> None:
    # Prefill GEMMs have M ≥ 2048 tokens and N, K ≥ 1024 (Llama 2 70B over tp 8), so I = 1/(1/M + 1/N + 1/K)
    # ≥ 1/(1/2048 + 2/1024) ≈ 410 FLOP/byte, above every catalogued GPU's 16-bit ridge in the study.
    rows = bound[(bound["phase"] == "prefill") & bound["op"].isin(["qkv_proj", "out_proj", "ffn_up", "ffn_down"])]
    assert not rows["memory_bound"].any()


# ---- study 5: latency vs DRAM technology ---------------------------------------------------------------------


def test_tpot_batch1_falls_with_bandwidth(memtech: pd.DataFrame) -> None:
    # Only the memory changes; a decode step streams all weights and the KV cache, so more bandwidth can only
    # shorten it.
    rows = memtech[memtech["batch"] == 1].sort_values("hbm_bw")
    assert rows["hbm_bw"].is_monotonic_increasing and rows["hbm_bw"].nunique() == len(rows)
    assert np.all(np.diff(rows["tpot_s"].to_numpy()) < 0)


def test_decode_weight_reads_scale_with_one_over_bandwidth(memtech: pd.DataFrame) -> None:
    # At batch 1 the decode GEMMs are weight streaming (≤ 1 FLOP/byte): their time × bandwidth is the weight
    # bytes / memory efficiency, the same for every technology (the FLOP term is < 1 % of it).
    rows = memtech[memtech["batch"] == 1]
    product = rows["decode_gemm_ms"] * rows["hbm_bw"]
    assert product.max() / product.min() < 1.02


def test_ttft_changes_less_than_tpot(memtech: pd.DataFrame) -> None:
    # Prefill GEMMs are compute-bound (hundreds of FLOP/byte) while decode is memory-bound, so a larger share
    # of TPOT than of TTFT is bandwidth time: from the slowest to the fastest memory TTFT must change less.
    for _, rows in memtech.groupby("batch"):
        rows = rows.sort_values("hbm_bw")
        ttft_change = 1.0 - rows["ttft_s"].iloc[-1] / rows["ttft_s"].iloc[0]
        tpot_change = 1.0 - rows["tpot_s"].iloc[-1] / rows["tpot_s"].iloc[0]
        assert 0.0 <= ttft_change < tpot_change


def test_hbm3_reproduces_the_catalogued_h100(memtech: pd.DataFrame) -> None:
    # Five HBM3 stacks at the H100's operating point are the catalogued H100's memory: same bandwidth, same
    # capacity, hence the same latencies as the catalogue system.
    rows = memtech[memtech["memory_tech"] == "hbm3"].sort_values("batch")
    frame = pd.DataFrame({**studies.INFER_SCENARIO, "system": studies.MEMTECH_BASE,
                          "batch": rows["batch"].to_numpy()})
    direct = dse.evaluate(frame)
    np.testing.assert_allclose(direct["tpot_s"].to_numpy(), rows["tpot_s"].to_numpy(), rtol=1e-6)
    np.testing.assert_allclose(direct["ttft_s"].to_numpy(), rows["ttft_s"].to_numpy(), rtol=1e-6)


# ---- command line ----------------------------------------------------------------------------------------------


def test_main_writes_png_and_parquet(tmp_path: Path, bound: pd.DataFrame) -> None:
    # The CLI draws the chosen study and writes its plotted data beside the PNG with the same stem.
    assert studies.main(["-o", str(tmp_path), "--only", "4"]) == 0
    png = tmp_path / "inference_bound.png"
    assert png.exists() and png.read_bytes()[:8] == PNG_SIGNATURE and png.stat().st_size > 10_000
    data = pd.read_parquet(png.with_suffix(".parquet"))
    assert len(data) == len(bound)
    assert set(bound.columns) <= set(data.columns)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inference_bound.parquet", "inference_bound.png"]


@pytest.mark.parametrize("value", ["7", "x", "1,0", ""])
def test_main_rejects_bad_only(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    # A bad study number is a usage error: exit status 2 and a message naming the allowed values.
    with pytest.raises(SystemExit) as exc:
        studies.main(["-o", str(tmp_path), "--only", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--only" in err and "allowed: 1, 2, 3, 4, 5" in err
    assert not any(tmp_path.iterdir())


def test_precision_capped_speedups_share_the_baseline(speedup: pd.DataFrame) -> None:
    # Same grid, same A100 hardware, bf16 only on both sides (the A100 has no fp8 / fp4): the bf16-capped A100
    # best step is the factor study's baseline; and widening the allowed formats can only help a GPU.
    capped = studies.speedups_by_precision()
    a100 = capped[capped["system"] == studies.BASE_SYSTEM]
    base = speedup[(speedup["model"] == "gpt3-175b") & (speedup["step"] == 0)]["step_time_s"].iloc[0]
    np.testing.assert_allclose(a100["step_time_s"], base, rtol=1e-12)
    wide = capped.pivot_table(index="system", columns="precision_cap", values="step_time_s")
    assert (wide["fp8"] <= wide["bf16"]).all() and (wide["fp4"] <= wide["fp8"]).all()


def _fmt(v: float) -> str:
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"


def test_readme_speedup_tables_are_the_study_output(speedup: pd.DataFrame) -> None:
    """The README's study-2 tables are this study's output, not prose: each waterfall row (factors in the
    order of FACTOR_GROUPS, then the total) and the MLPerf comparison's precision-capped row appear verbatim."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    names = {"gpt3-175b": "GPT-3 175B", "mixtral-8x22b": "Mixtral 8x22B"}
    steps = speedup[speedup["step"] > 0]
    for (model, target), part in steps.groupby(["model", "target"], sort=False):
        cells = [_fmt(v) for v in part.sort_values("step")["speedup_factor"]] + [_fmt(part["total_speedup"].iloc[0])]
        row = f"| {names[model]} → {studies.SYSTEM_LABELS[target]} | " + " | ".join(cells) + " |"
        assert row in readme, row
    capped = studies.speedups_by_precision()
    fp4 = capped[capped["precision_cap"] == "fp4"].set_index("system")["step_time_s"]
    a, h, b = fp4["a100-sxm-80gb"], fp4["h100-sxm-80gb"], fp4["b200"]
    row = f"| up to fp4 | {a / h:.2f} | {h / b:.2f} | {a / b:.1f} |"
    assert row in readme, row
