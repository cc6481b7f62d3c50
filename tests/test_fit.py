"""The shipped FITTED efficiency constants are the least-squares optimum on shared/reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.validation.fit import (
    COMMODITY_FILES,
    COMMODITY_PARAMETERS,
    INFERENCE_FILES,
    INFERENCE_PARAMETERS,
    SERVING_FILES,
    SERVING_PARAMETERS,
    TRAINING_FILES,
    TRAINING_PARAMETERS,
    default_assumptions_path,
    log_error_objective,
    nelder_mead,
    shipped_value,
)
from dse.validation.validate import load_assumptions

GROUPS = {"training": (TRAINING_FILES, TRAINING_PARAMETERS), "inference": (INFERENCE_FILES, INFERENCE_PARAMETERS),
          "serving": (SERVING_FILES, SERVING_PARAMETERS), "commodity": (COMMODITY_FILES, COMMODITY_PARAMETERS)}


@pytest.mark.parametrize("group", list(GROUPS))
def test_shipped_constants_are_the_fit_optimum(ref, group):
    """Moving any fitted constant by ±2 % does not lower the objective: the values in efficiency.csv are the
    ones `python -m dse.validation.fit` finds (rounded), not hand-tuned."""
    files, params = GROUPS[group]
    objective = log_error_objective([ref / f for f in files], load_assumptions(default_assumptions_path()), params)
    x0 = np.array([shipped_value(g, c) for g, c in params])
    f0 = objective(x0)
    for i, (gen, col) in enumerate(params):
        for factor in (0.98, 1.02):
            x = x0.copy()
            x[i] *= factor
            assert objective(x) >= f0 * (1 - 1e-3), f"{gen}.{col} x{factor} fits better than the shipped value"


def test_nelder_mead_finds_a_known_minimum():
    target = np.array([0.3, 0.7, 0.45])
    best = nelder_mead(lambda x: float(np.sum((np.log(x) - np.log(target)) ** 2)), np.array([0.5, 0.5, 0.5]),
                       tol=1e-14, max_iter=2000)
    np.testing.assert_allclose(best, target, rtol=1e-4)


def assert_case_fit_optimum(names: tuple[str, ...], params: tuple[tuple[str, str], ...]) -> np.ndarray:
    """Moving any of ``params`` by ±2 % does not lower the objective on the published runs ``names`` kept in
    tests/cases: the shipped values are the fit's optimum (rounded).  Returns the shipped values."""
    from tests.conftest import REPO

    files = [REPO / "tests" / "cases" / f for f in names]
    objective = log_error_objective(files, load_assumptions(default_assumptions_path()), params)
    x0 = np.array([shipped_value(g, c) for g, c in params])
    f0 = objective(x0)
    for i in range(len(params)):
        for factor in (0.98, 1.02):
            x = x0.copy()
            x[i] *= factor
            assert objective(x) >= f0 * (1 - 1e-3), f"{params[i]} x{factor} fits better than the shipped value"
    return x0


def test_moe_host_constant_is_the_fit_optimum():
    """MOE_HOST_S_PER_LOCAL_EXPERT is the least-squares optimum on the Megatron-Bridge MoE runs kept in
    tests/cases (their sources in the file)."""
    from dse.validation.fit import MOE_FILES, MOE_PARAMETERS

    assert_case_fit_optimum(MOE_FILES, MOE_PARAMETERS)


def test_rank_copy_constant_is_the_fit_optimum():
    """C10D_RANK_COPY_S is the least-squares optimum on Narayanan et al. 2021's ZeRO-3 runs kept in tests/cases
    (their sources in the file)."""
    from dse.validation.fit import ZERO3_FILES, ZERO3_PARAMETERS

    assert_case_fit_optimum(ZERO3_FILES, ZERO3_PARAMETERS)


def test_engine_allreduce_constants_are_the_kernel_fit():
    """infer_allreduce_eff and infer_allreduce_latency_us in efficiency.csv are the least-squares fit of
    t = α + S·2(n−1)/n / busbw to TensorRT-LLM's measured custom all-reduce kernels (tests/kernels/
    trtllm_custom_allreduce.csv, from ai-dynamo/aiconfigurator @095f58a), rounded; Ada's is the L40S server's."""
    import pandas as pd

    from dse.hardware.catalog import efficiency
    from dse.validation.fit import engine_allreduce_constants
    from tests.conftest import REPO

    table = pd.read_csv(REPO / "tests" / "kernels" / "trtllm_custom_allreduce.csv")
    eff = efficiency()
    for generation, (fraction, alpha_us) in engine_allreduce_constants(table).items():
        assert float(eff.loc[generation, "infer_allreduce_eff"]) == pytest.approx(fraction, abs=6e-4), generation
        assert float(eff.loc[generation, "infer_allreduce_latency_us"]) == pytest.approx(alpha_us, abs=0.06), generation


def test_engine_allreduce_is_slower_than_nccl_large_message_rate():
    """At the message sizes of a serving iteration an engine's all-reduce kernel does not reach NCCL's
    large-message NVLink SHARP bus bandwidth (~480 GB/s on H100, nccl-tests issues 212/290): TensorRT-LLM's
    measured 8-GPU all-reduce of 33.5 MB (2048 tokens x 8192 x bf16) takes 198.5 us (aiconfigurator table), and
    the shipped Hopper constants put it within 25 % of that, where the NCCL rate would say 132 us."""
    from dse.cost.network import allreduce_time, engine_tp_links
    from dse.hardware.catalog import hardware_table, system_names

    hw = {k: v[[system_names().index("h100-sxm-80gb")]] for k, v in hardware_table().items()}
    n = np.array([8.0])
    t = allreduce_time(33554432.0, n, engine_tp_links(n, hw))[0]
    assert t == pytest.approx(198.5e-6, rel=0.25)
    assert t > 33554432.0 * 1.75 / hw["scaleup_allreduce_bw"][0] + hw["scaleup_latency_s"][0]


def test_moe_grouped_gemm_table_is_the_fit_of_its_measured_points():
    """Every row of tests/kernels/trtllm_moe_grouped_gemm.csv (the fixed time, weight-streaming and GEMM fractions
    behind MOE_NVFP4_*, MOE_FP8_BLOCK_GEMM_FRACTION, MOE_MXFP4_BF16_GEMM_FRACTION and MOE_LAYER_FIXED_S) is
    dse.validation.fit.moe_grouped_gemm_fit of the measured TensorRT-LLM MoE layer points kept beside it
    (trtllm_moe_layer_points.csv, transcribed from ai-dynamo/aiconfigurator @095f58a moe_perf.parquet)."""
    import pandas as pd

    from dse.validation.fit import moe_grouped_gemm_fit

    kernels = Path(__file__).parent / "kernels"
    points = pd.read_csv(kernels / "trtllm_moe_layer_points.csv")
    table = pd.read_csv(kernels / "trtllm_moe_grouped_gemm.csv")
    for _, row in table.iterrows():
        rows = points[(points["gpu"] == row["gpu"]) & (points["dtype"] == row["dtype"])]
        assert len(rows) == row["points"], (row["gpu"], row["dtype"])
        fixed, stream, gemm, error = moe_grouped_gemm_fit(rows)
        assert (fixed * 1e6, stream, gemm, error * 100) == pytest.approx(
            (row["fixed_us"], row["stream_eff"], row["gemm_eff"], row["fit_mape_pct"]), abs=0.051), row["dtype"]


def test_moe_expert_width_is_the_fit_of_the_measured_tables():
    """MOE_GEMM_FULL_WIDTH is dse.validation.fit.moe_expert_width_fit of the measured TensorRT-LLM MoE layer points:
    at it no table's GEMM fraction exceeds its peak, one grid step wider the H100 BF16 one would, and the tables'
    mean error is below the error without a width factor (every tabled expert at its full rate, width 768)."""
    import pandas as pd

    from dse.cost import constants as K
    from dse.validation.fit import MOE_WIDTH_GRID, moe_expert_width_fit, moe_grouped_gemm_fit

    points = pd.read_csv(Path(__file__).parent / "kernels" / "trtllm_moe_layer_points.csv")
    assert moe_expert_width_fit(points) == K.MOE_GEMM_FULL_WIDTH
    tables = [rows for _, rows in points.groupby(["gpu", "dtype"])]

    def fits(width: float) -> list[tuple[float, float, float, float]]:
        return [moe_grouped_gemm_fit(rows, width) for rows in tables]

    step = float(MOE_WIDTH_GRID[1] - MOE_WIDTH_GRID[0])
    assert max(f[2] for f in fits(K.MOE_GEMM_FULL_WIDTH)) <= 1.0 < max(f[2] for f in fits(K.MOE_GEMM_FULL_WIDTH + step))

    def mean_error(width: float) -> float:
        return sum(f[3] * len(rows) for f, rows in zip(fits(width), tables, strict=True)) / len(points)

    assert mean_error(K.MOE_GEMM_FULL_WIDTH) < mean_error(768.0) - 0.02


def test_moe_routing_skew_is_the_fit_of_the_measured_tables():
    """moe_routing_skew and moe_routing_skew_per_doubling in efficiency.csv are dse.validation.fit.moe_routing_skew of
    TensorRT-LLM's MoE tables (tests/kernels/trtllm_moe_routing_skew.csv, from ai-dynamo/aiconfigurator @095f58a:
    power-law over balanced routing), rounded; Ampere, with no balanced table, carries Hopper's.  The tables
    themselves say the skew grows with the expert-parallel ranks: on every measured generation the median ratio
    at ep 8 is above the one at ep 1, and the Hopper and Blackwell ones at ep 8 are 1.8-2.0."""
    import pandas as pd

    from dse.hardware.catalog import efficiency
    from dse.validation.fit import moe_routing_skew

    points = pd.read_csv(Path(__file__).parent / "kernels" / "trtllm_moe_routing_skew.csv")
    fitted = moe_routing_skew(points)
    eff = efficiency()
    assert set(fitted) == set(eff.index) - {"ampere"}
    for generation, (skew, per_doubling) in fitted.items():
        assert float(eff.loc[generation, "moe_routing_skew"]) == pytest.approx(skew, abs=6e-4), generation
        assert float(eff.loc[generation, "moe_routing_skew_per_doubling"]) == pytest.approx(per_doubling, abs=6e-4)
    for column in ("moe_routing_skew", "moe_routing_skew_per_doubling"):
        assert eff.loc["ampere", column] == eff.loc["hopper", column]
    ratio = pd.concat([points["power_law_1_01_us"], points["power_law_1_2_us"]]) / pd.concat(
        [points["balanced_us"], points["balanced_us"]])
    frame = pd.DataFrame({"gpu": pd.concat([points["gpu"]] * 2), "ep": pd.concat([points["ep"]] * 2), "r": ratio})
    median = frame.groupby(["gpu", "ep"])["r"].median()
    for gpu in points["gpu"].unique():
        assert median[gpu, 8] > median[gpu, 1], gpu
    for gpu in ("h100_sxm", "h200_sxm", "b200_sxm", "gb200"):
        assert 1.8 <= median[gpu, 8] <= 2.0, gpu


def test_engine_allgather_constants_are_the_nccl_fit():
    """infer_allgather_eff and infer_allgather_latency_us in efficiency.csv are the least-squares fit of
    t = α + S·(n−1)/n / busbw to NCCL's measured all-gathers and reduce-scatters over 2-8 GPUs (tests/kernels/
    nccl_allgather_reducescatter.csv, from ai-dynamo/aiconfigurator @095f58a), rounded, and the fit is a fair
    model of the points it is fitted on: mean relative error under 25 % per generation (the ring model has no
    protocol switch at small sizes), except the L40S PCIe server's 59 % (2 GPUs reach several times the bus
    bandwidth of 8, a topology the catalog does not describe, as for its all-reduce kernels)."""
    import numpy as np
    import pandas as pd

    from dse.hardware.catalog import efficiency, systems
    from dse.validation.fit import KERNEL_TABLE_SYSTEMS, engine_allgather_constants
    from tests.conftest import REPO

    table = pd.read_csv(REPO / "tests" / "kernels" / "nccl_allgather_reducescatter.csv")
    eff, catalog = efficiency(), systems()
    fitted = engine_allgather_constants(table)
    assert set(fitted) == {"ampere", "hopper", "blackwell", "ada", "blackwell-sm120"}
    for generation, (fraction, alpha_us) in fitted.items():
        assert float(eff.loc[generation, "infer_allgather_eff"]) == pytest.approx(fraction, abs=6e-4), generation
        assert float(eff.loc[generation, "infer_allgather_latency_us"]) == pytest.approx(alpha_us, abs=0.06)
    line = table["gpu"].map(KERNEL_TABLE_SYSTEMS).map(catalog["scaleup_gbps"]) * 1e9
    gen = table["gpu"].map(KERNEL_TABLE_SYSTEMS).map(catalog["generation"])
    busbw = line * gen.map(lambda g: fitted[g][0])
    alpha = gen.map(lambda g: fitted[g][1]) * 1e-6
    n = table["num_gpus"]
    model = alpha + table["message_bytes"] * (n - 1) / n / busbw
    error = (model / (table["latency_us"] * 1e-6) - 1.0).abs().groupby(gen).mean()
    assert (error.drop("ada") < 0.25).all() and error["ada"] < 0.65, error.to_dict()
    assert table["source"].str.contains("aiconfigurator @095f58a").all()
    assert np.isfinite(table["latency_us"]).all()
