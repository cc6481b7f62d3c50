"""Plot data functions on a small synthetic sweep, and every drawing function writes a PNG."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse import plots
from dse.cost.training import MEMORY_BREAKDOWN, TIME_BREAKDOWN
from dse.pareto import pareto_front

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def synthetic_sweep(seed: int = 0) -> pd.DataFrame:
    """A sweep-shaped frame: catalogued models and systems, layouts, breakdown parts that sum to the totals."""
    rng = np.random.default_rng(seed)
    grid = list(itertools.product(["llama3-8b", "llama3-70b"], ["h100-sxm-80gb", "b200"], [64, 128, 256],
                                  [1, 2, 4, 8], [1, 2, 4], [256, 512], ["none", "selective"]))
    f = pd.DataFrame(grid, columns=["model", "system", "gpus", "tp", "pp", "global_batch", "recompute"])
    n = len(f)
    for col in ("model", "system", "recompute"):
        f[col] = pd.Categorical(f[col], categories=list(dict.fromkeys(f[col])))
    f["dp"] = f["gpus"] // (f["tp"] * f["pp"])
    f["cp"], f["ep"], f["vpp"], f["micro_batch"], f["zero"] = 1, 1, 1, 1, 1
    f["seq_len"] = 8192
    f["precision"] = pd.Categorical(rng.choice(["bf16", "fp8"], n))
    for col in TIME_BREAKDOWN:
        f[col] = (rng.random(n) * (3.0 if col == "time_compute_s" else 0.3)).astype(np.float32)
    f["step_time_s"] = f[list(TIME_BREAKDOWN)].sum(axis=1).astype(np.float32)
    for col in MEMORY_BREAKDOWN:
        f[col] = (rng.random(n) * 20e9).astype(np.float32)
    f["mem_total_bytes"] = f[list(MEMORY_BREAKDOWN)].sum(axis=1).astype(np.float32)
    f["tokens_per_s_per_gpu"] = (f["global_batch"] * f["seq_len"] / f["step_time_s"] / f["gpus"]).astype(np.float32)
    f["params_total"] = np.where(f["model"] == "llama3-8b", 8e9, 70e9).astype(np.float32)
    f["fits"] = rng.random(n) < 0.8
    return f


@pytest.fixture(scope="module")
def sweep() -> pd.DataFrame:
    return synthetic_sweep()


def is_png(path: Path) -> bool:
    return path.exists() and path.stat().st_size > 2000 and path.read_bytes()[:8] == PNG_SIGNATURE


def test_config_label_and_describe() -> None:
    rows = pd.DataFrame({"tp": [8, 1], "pp": [4, 2], "vpp": [1, 3], "dp": [32, 4], "cp": [1, 2], "ep": [1, 1],
                         "micro_batch": [1, 2], "recompute": pd.Categorical(["selective", "none"]),
                         "zero": [1, 3], "precision": ["bf16", "fp8"], "gpus": [1024, 16],
                         "global_batch": [512, 64], "system": ["h100-sxm-80gb", "b200"]})
    assert plots.config_label(rows).tolist() == ["tp8 pp4 dp32 mb1 sel", "tp1 pp2 vpp3 dp4 cp2 mb2 z3 fp8"]
    assert plots.describe(rows, ["system", "gpus", "global_batch"]).tolist() == [
        "h100-sxm-80gb · 1024 GPUs · batch 512", "b200 · 16 GPUs · batch 64"]


def test_axis_labels_carry_units() -> None:
    assert plots.axis_label("mem_total_bytes", "min") == "memory per GPU (GB) — lower is better"
    assert plots.axis_label("tokens_per_s_per_gpu") == "throughput (tokens/s per GPU)"
    assert plots.axis_label("step_time_s") == "step time (s)"
    assert plots.axis_label("model_tflops_per_gpu") == "model FLOP rate (TFLOP/s per GPU)"
    assert plots.quantity("mem_weights_bytes") == ("weights", "GB", 1e-9)


def test_scaling_takes_the_best_feasible_row_per_x_and_group(sweep: pd.DataFrame) -> None:
    data = plots.scaling_data(sweep, "tokens_per_s_per_gpu", x="gpus", by=["model", "system"])
    feasible = sweep[sweep["fits"]]
    expected = feasible.groupby(["model", "system", "gpus"], observed=True)["tokens_per_s_per_gpu"].max()
    got = data.set_index(["model", "system", "gpus"])["tokens_per_s_per_gpu"]
    assert len(data) == len(expected) == 12
    assert np.allclose(got.loc[expected.index].to_numpy(), expected.to_numpy())
    # an infeasible row better than every feasible one is ignored
    boosted = sweep.copy()
    boosted.loc[~boosted["fits"], "tokens_per_s_per_gpu"] = 1e12
    assert plots.scaling_data(boosted, "tokens_per_s_per_gpu", x="gpus").equals(
        plots.scaling_data(sweep, "tokens_per_s_per_gpu", x="gpus"))
    # lower is better for times; the config label is the best row's
    fastest = plots.scaling_data(sweep, "step_time_s", x="system", by=["model"])
    expected_t = feasible.groupby(["model", "system"], observed=True)["step_time_s"].min()
    assert np.allclose(fastest.set_index(["model", "system"])["step_time_s"].loc[expected_t.index], expected_t)
    best = feasible.iloc[[int(np.argmin(feasible["step_time_s"].to_numpy()))]]
    row = fastest[fastest["step_time_s"] == best["step_time_s"].iloc[0]].iloc[0]
    assert row["config"] == plots.config_label(best).iloc[0]
    assert list(fastest["system"].astype(str)[:2]) == ["h100-sxm-80gb", "b200"]  # category order kept


def test_heatmap_takes_the_minimum_over_other_axes(sweep: pd.DataFrame) -> None:
    where = {"model": "llama3-70b", "system": "b200", "gpus": 256}
    table = plots.heatmap_data(sweep, "step_time_s", where=where)
    sel = sweep[sweep["fits"] & (sweep["model"] == "llama3-70b") & (sweep["system"] == "b200")
                & (sweep["gpus"] == 256)]
    assert table.index.name == "pp" and table.columns.name == "tp"
    assert list(table.index) == [1, 2, 4] and list(table.columns) == [1, 2, 4, 8]
    expected = sel.groupby(["pp", "tp"])["step_time_s"].min()
    assert len(expected) == 12 and np.allclose(table.stack().loc[expected.index], expected)
    # a cell with no feasible row is NaN
    emptier = sweep.copy()
    emptier.loc[(emptier["tp"] == 8) & (emptier["pp"] == 4), "fits"] = False
    assert pd.isna(plots.heatmap_data(emptier, "step_time_s", where=where).to_numpy()[2, 3])  # pp 4, tp 8
    # throughput-like metrics take the maximum
    thr = plots.heatmap_data(sweep, "tokens_per_s_per_gpu", where=where)
    top = sel[(sel.pp == 1) & (sel.tp == 1)]["tokens_per_s_per_gpu"].max()
    assert thr.to_numpy()[0, 0] == pytest.approx(float(top))
    with pytest.raises(ValueError, match="no feasible row has system = 'tpu'; values: b200, h100-sxm-80gb"):
        plots.heatmap_data(sweep, where={"system": "tpu"})


def test_breakdown_parts_sum_to_totals(sweep: pd.DataFrame) -> None:
    best = plots.best_rows(sweep, "tokens_per_s_per_gpu", ["model", "system"])
    assert len(best) == 4
    time = plots.breakdown_data(best, "time", label_by=["system"], facet="model")
    assert np.allclose(time[list(TIME_BREAKDOWN)].sum(axis=1), time["total"], rtol=1e-5)
    assert time["label"].iloc[0].startswith("h100-sxm-80gb  |  tp")
    memory = plots.breakdown_data(best, "memory", facet="model")
    assert np.allclose(memory[list(MEMORY_BREAKDOWN)].sum(axis=1), memory["total"], rtol=1e-5)
    cap = dict(zip(best["system"].astype(str), memory["capacity_bytes"], strict=True))
    assert cap["h100-sxm-80gb"] == 80 * 2**30  # binary GB, as `fits` reads them
    with pytest.raises(ValueError, match="kind 'energy' is not allowed"):
        plots.breakdown_data(best, "energy")


def test_pareto_data_marks_the_front(sweep: pd.DataFrame) -> None:
    objectives = ["tokens_per_s_per_gpu:max", "mem_total_bytes:min"]
    data = plots.pareto_data(sweep, objectives, by=["model", "system"])
    front = pareto_front(sweep, objectives, by=["model", "system"])
    assert data["on_front"].sum() == len(front)
    assert len(data) == int(sweep["fits"].sum())  # the cloud is every other feasible point
    assert set(data.columns) == {"model", "system", "tokens_per_s_per_gpu", "mem_total_bytes", "on_front", "config"}
    small = plots.pareto_data(sweep, objectives, max_cloud=50)
    assert (~small["on_front"]).sum() == 50
    three = plots.pareto_data(sweep, [*objectives, "gpus:min"], by=["model"])
    assert three["on_front"].sum() == len(pareto_front(sweep, [*objectives, "gpus:min"], by="model"))
    with pytest.raises(ValueError, match="needs 2 or 3 objectives"):
        plots.pareto_data(sweep, ["step_time_s:min"])


def test_roofline_places_ops_under_the_roof() -> None:
    ops = pd.DataFrame({"name": ["gemm", "norm"], "flops": [2e12, 1e9], "bytes": [1e9, 1e9]})
    data = plots.roofline_data(ops, peak_flops=1e15, bandwidth=2e12)
    assert data["ridge_flop_per_byte"].iloc[0] == pytest.approx(500.0)
    assert data["intensity_flop_per_byte"].tolist() == pytest.approx([2000.0, 1.0])
    assert data["attainable_flops_per_s"].tolist() == pytest.approx([1e15, 2e12])
    assert data["bound"].tolist() == ["compute", "memory"]
    assert data["roofline_time_s"].tolist() == pytest.approx([2e-3, 5e-4])


def test_layer_ops_follow_the_model_shapes() -> None:
    ops = plots.layer_ops({"model": "llama3-70b", "tp": 8, "cp": 1, "micro_batch": 1, "seq_len": 8192,
                           "precision": "bf16"}).set_index("name")
    h, kv, f, T = 8192, 8 * 8192 / 64, 28672, 8192
    assert ops.loc["QKV projection", "flops"] == pytest.approx(2 * T * (h + 2 * kv) / 8 * h)
    assert ops.loc["FFN in (gate + up)", "flops"] == pytest.approx(2 * T * 2 * f / 8 * h)
    assert ops.loc["attention core (flash)", "flops"] == pytest.approx(0.5 * 4 * T * T * h / 8)
    assert (ops["bytes"] > 0).all()
    roof = plots.gpu_roof("h100-sxm-80gb", "bf16")
    assert roof["achieved_flops"] < roof["peak_flops"] and roof["achieved_bandwidth"] < roof["bandwidth"]


def test_drawing_functions_write_pngs(sweep: pd.DataFrame, tmp_path: Path) -> None:
    two = ["tokens_per_s_per_gpu:max", "mem_total_bytes:min"]
    data = plots.pareto_data(sweep, two, by=["model", "system"])
    assert is_png(plots.draw_pareto(data, two, tmp_path / "p2.png", facet="model", hue="system"))
    three = ["step_time_s:min", "mem_total_bytes:min", "gpus:min"]
    data = plots.pareto_data(sweep, three, by=["model"])
    assert is_png(plots.draw_pareto(data, three, tmp_path / "p3.png", facet="model"))
    data = plots.scaling_data(sweep, "tokens_per_s_per_gpu", x="gpus", by=["model", "system"])
    assert is_png(plots.draw_scaling(data, "tokens_per_s_per_gpu", "gpus", tmp_path / "s.png", hue="model",
                                     style="system"))
    best = plots.best_rows(sweep, "tokens_per_s_per_gpu", ["model", "system"])
    for kind in ("time", "memory"):
        data = plots.breakdown_data(best, kind, label_by=["system"], facet="model")
        assert is_png(plots.draw_breakdown(data, kind, tmp_path / f"b_{kind}.png", facet="model"))
    data = plots.heatmap_data(sweep, where={"model": "llama3-8b", "system": "b200"})
    assert is_png(plots.draw_heatmap(data, "step_time_s", tmp_path / "h.png"))
    roof = plots.gpu_roof("b200", "fp8")
    data = plots.roofline_data(plots.layer_ops({"model": "llama3-8b", "tp": 2, "seq_len": 8192}),
                               roof["peak_flops"], roof["bandwidth"])
    assert is_png(plots.draw_roofline(data, tmp_path / "sub" / "r.png", achieved=roof))


def test_standard_figures_from_a_dataset(sweep: pd.DataFrame, tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    sweep.iloc[: len(sweep) // 2].to_parquet(results / "part-00000.parquet")
    sweep.iloc[len(sweep) // 2:].to_parquet(results / "part-00001.parquet")
    written = plots.draw_standard_figures(results, tmp_path / "figures")
    names = {p.name for p in written}
    assert {"pareto_throughput_memory.png", "pareto_time_memory_gpus.png", "scaling_system.png",
            "scaling_gpus.png", "breakdown_time.png", "breakdown_memory.png"} <= names
    assert any(n.startswith("heatmap_tp_pp_") for n in names) and any(n.startswith("roofline_") for n in names)
    for png in written:
        assert is_png(png)
        data = pd.read_parquet(png.with_suffix(".parquet"))
        assert len(data) > 0


SPACES = sorted(p.name for p in (Path(__file__).resolve().parents[1] / "spaces").glob("*.yaml"))


@pytest.mark.parametrize("space", SPACES)
def test_every_shipped_space_plots(tmp_path, space):
    """Issue 11: every results directory `dse run` can make must plot.  A sample of each shipped space (the
    constraint probe's windows, at most 2^16 points) is written as a dataset and drawn."""
    import pyarrow.parquet as pq

    from dse.grid import Grid
    from dse.plots import draw_standard_figures
    from dse.runner import _probe_windows
    from dse.spec import load_spec
    from dse.sweep import evaluate_points

    spec = load_spec(Path(__file__).resolve().parents[1] / "spaces" / space)
    grid = Grid(spec)
    windows = _probe_windows(spec.size)
    step = max(1, len(windows) // 4)
    tables = [evaluate_points(spec, grid, lo, min(hi, lo + 16384)) for lo, hi in windows[::step][:4]]
    data = tmp_path / "results"
    data.mkdir()
    for i, t in enumerate(tables):
        pq.write_table(t, data / f"part-{i:05d}.parquet")
    written = draw_standard_figures(data, tmp_path / "figures")
    assert written and all(p.exists() and p.stat().st_size > 10_000 for p in written)


def test_log_axes_and_legends_stay_readable(tmp_path, monkeypatch):
    """Issue 11: values spanning decades get log axes (time and cost fronts spanned 500x on linear axes), and a
    scaling figure of many models x systems is faceted by model so that its legend lists only the systems."""
    import dse.plots as plots

    assert plots._spans(np.array([0.1, 5.0])) and not plots._spans(np.array([1.0, 20.0]))
    figures = []
    import dse.plots.draw as draw  # draw_scaling looks save_figure up in its own module

    monkeypatch.setattr(draw, "save_figure", lambda fig, path: figures.append(fig) or Path(path))
    data = pd.DataFrame([{"model": f"m{m}", "system": f"s{s}", "gpus": g, "tokens_per_s_per_gpu": 100.0 * (s + 1)}
                         for m in range(4) for s in range(5) for g in (64, 128, 256)])
    plots.draw_scaling(data, "tokens_per_s_per_gpu", "gpus", tmp_path / "x.png", hue="system", facet="model")
    (fig,) = figures
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 5
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 4


def test_layer_ops_of_an_mla_moe_model_are_the_kernel_shapes() -> None:
    """DeepSeek-V3 (config.json: h 7168, 128 heads, q_lora 1536, kv_lora 512, rope 64, nope 128, v 128, 256 routed
    experts of 2048, top 8, 1 shared, 3 dense layers of 18432): the roofline's ops are the mean layer's."""
    ops = plots.layer_ops({"model": "deepseek-v3", "tp": 1, "ep": 8, "micro_batch": 1, "seq_len": 4096,
                           "precision": "bf16"}).set_index("name")
    T, h, a = 4096, 7168, 128
    phi = 58 / 61  # MoE layers
    assert ops.loc["attention in (Q, MLA down projections)", "flops"] == pytest.approx(2 * T * (1536 + 512 + 64) * h)
    assert ops.loc["MLA up projections", "flops"] == pytest.approx(2 * T * (1536 * a * 192 + 512 * a * 256))
    assert ops.loc["attention output projection", "flops"] == pytest.approx(2 * T * h * a * 128)
    assert ops.loc["routed experts in (gate + up)", "flops"] == pytest.approx(phi * 2 * T * 8 * 2 * 2048 * h,
                                                                             rel=1e-6)
    dense_width = (1 - phi) * 18432 + phi * 2048  # dense layers and the shared expert
    assert ops.loc["FFN out", "flops"] == pytest.approx(2 * T * h * dense_width, rel=1e-6)


def test_breakdown_panels_share_one_scale_and_thin_parts_are_named(monkeypatch, tmp_path: Path) -> None:
    """Issue 24's figure review: breakdown_time's panels used different x scales, and a part too thin to see
    (the optimizer step, a millisecond of a 10-second step) had a legend entry with no visible bar.  The panels now
    share x, and such a part is named under the legend instead of drawn."""
    from dse.plots import draw

    data = pd.DataFrame({"label": ["a", "b"], "model": ["m1", "m2"], "time_compute_s": [10.0, 1.0],
                         "time_bubble_s": [1.0, 0.5], "time_optimizer_s": [0.001, 0.0002]})
    drawn, hidden = draw.visible_parts(data, ["time_compute_s", "time_bubble_s", "time_optimizer_s"])
    assert drawn == ["time_compute_s", "time_bubble_s"] and hidden == ["time_optimizer_s"]
    captured = {}

    def keep(fig, path):
        captured["fig"] = fig
        return Path(path)

    monkeypatch.setattr(draw, "save_figure", keep)
    draw.draw_breakdown(data, "time", tmp_path / "b.png", facet="model")
    axes = captured["fig"].axes
    assert axes[0].get_shared_x_axes().joined(axes[0], axes[1])
    assert "optimizer" in captured["fig"].legends[0].get_title().get_text()


def test_serving_titles_name_the_request_shape() -> None:
    from dse.plots.standard import request_shape

    assert request_shape(pd.DataFrame({"input_len": [1000, 1000], "output_len": [1000, 1000]})) == \
        " · 1000 in / 1000 out tokens"
    assert request_shape(pd.DataFrame({"input_len": [1000, 128], "output_len": [1000, 128]})) == ""


def test_roofline_markers_sit_on_the_roof_the_model_uses() -> None:
    """Issue 24's review: the roofline's markers sat on the peak roof while the model times each op on its
    achieved rates; with those rates given, each op is at min(achieved FLOP/s, achieved bytes/s x intensity)."""
    from dse.plots import draw

    data = pd.DataFrame({"intensity_flop_per_byte": [10.0, 1000.0], "attainable_flops_per_s": [3e13, 9.9e14]})
    roof = {"achieved_flops": 6e14, "achieved_bandwidth": 2.5e12}
    np.testing.assert_allclose(draw.achieved_rate(data, roof), [2.5e13, 6e14])
    np.testing.assert_allclose(draw.achieved_rate(data, None), [3e13, 9.9e14])


def test_roofline_places_the_memory_bound_kernels_the_model_times() -> None:
    """Issue 24's figure review: the roofline showed GEMMs and attention only; the norms, bias-dropout-adds, FFN
    activation, unfused softmax and fp8 casts, which the model times at HBM bandwidth, were missing.  Their bytes
    are the model's per-element counts: Llama 3 70B, tp 8 with sp, T = 8192: the residual stream has T·h/8
    elements, 2 norms x (read 2 + write 2) and 2 bias-dropout-adds x 7 bytes (22 = RESIDUAL_FWD_BYTES); SwiGLU
    reads gate and up and writes one (6 bytes per T·ffn/8 element); fp8 casts 4 bytes per T·(2h + ffn)/8."""
    from dse.cost import constants as K

    ops = plots.layer_ops({"model": "llama3-70b", "tp": 8, "sp": 1, "micro_batch": 1, "seq_len": 8192,
                           "precision": "fp8"}).set_index("name")
    T, h, f = 8192, 8192, 28672
    resid = T * h / 8
    assert ops.loc["2 norms (RMSNorm)", "bytes"] == pytest.approx(2 * 4 * resid)
    assert ops.loc["2 bias-dropout-adds", "bytes"] == pytest.approx(2 * 7 * resid)
    assert (ops.loc["2 norms (RMSNorm)", "bytes"] + ops.loc["2 bias-dropout-adds", "bytes"]
            == pytest.approx(K.RESIDUAL_FWD_BYTES * resid))
    assert ops.loc["FFN activation (SwiGLU)", "bytes"] == pytest.approx(6 * T * f / 8)
    assert ops.loc["cast-transposes (fp8)", "bytes"] == pytest.approx(4 * T * (2 * h + f) / 8)
    roof = plots.gpu_roof("h100-sxm-80gb", "fp8")
    data = plots.roofline_data(ops.reset_index(), roof["peak_flops"], roof["bandwidth"]).set_index("name")
    elementwise = ["2 norms (RMSNorm)", "2 bias-dropout-adds", "FFN activation (SwiGLU)", "cast-transposes (fp8)"]
    assert (data.loc[elementwise, "bound"] == "memory").all()
    assert (data.loc[elementwise, "intensity_flop_per_byte"] < 3).all()
    # unfused attention: the two score GEMMs move 4 bytes per score element, softmax and dropout the other 9
    gpt = plots.layer_ops({"model": "gpt3-175b", "tp": 8, "micro_batch": 1, "seq_len": 2048,
                           "attention": "standard"}).set_index("name")
    scores = 1 * (96 / 8) * 2048 * 2048
    assert gpt.loc["attention core (unfused QKᵀ and AV)", "bytes"] == pytest.approx(4 * scores)
    assert gpt.loc["scale-mask-softmax + dropout", "bytes"] == pytest.approx(
        (K.STANDARD_ATTENTION_FWD_BYTES - 4) * scores)
    assert "2 norms (LayerNorm)" in gpt.index and "FFN activation (GELU)" in gpt.index


def test_scaling_log_axis_labels_enough_values_to_read_a_line(tmp_path: Path, monkeypatch) -> None:
    """Issue 24's figure review: scaling_gpus had too few tick labels to read a value (a panel of 440 ... 4,500
    tokens/s showed only 500, 1000, 2000).  A panel spanning less than two decades labels 1, 2, 3, 5, 7 x 10^n."""
    from dse.plots import draw

    assert draw.log_subs([440.0, 4500.0]) == (1.0, 2.0, 3.0, 5.0, 7.0)
    assert draw.log_subs([1.0, 1e4]) == (1.0, 2.0, 5.0)
    data = pd.DataFrame({"gpus": [128, 256, 128, 256], "system": ["a", "a", "b", "b"],
                         "tokens_per_s_per_gpu": [440.0, 445.0, 4400.0, 4500.0]})
    captured = {}
    save = draw.save_figure
    monkeypatch.setattr(draw, "save_figure", lambda fig, path: captured.setdefault("fig", fig) and save(fig, path))
    draw.draw_scaling(data, "tokens_per_s_per_gpu", "gpus", tmp_path / "s.png", hue="system")
    ax = captured["fig"].axes[0]
    lo, hi = ax.get_ylim()
    shown = [t for t in ax.get_yticks() if lo <= t <= hi]
    assert len(shown) >= 5, shown
