"""The standard figure set of a sweep dataset (dse plot, make figures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse.dataset import load_results
from dse.outputs import write_atomic
from dse.plots.data import (
    best_rows,
    breakdown_data,
    gpu_roof,
    heatmap_data,
    layer_ops,
    pareto_data,
    roofline_data,
    scaling_data,
)
from dse.plots.draw import (
    _values,
    draw_breakdown,
    draw_heatmap,
    draw_pareto,
    draw_roofline,
    draw_scaling,
)
from dse.plots.labels import (
    config_label,
)

# ---- the standard set ----------------------------------------------------------------------------------------


def write_plot_data(data: pd.DataFrame, png: Path) -> Path:
    """Plot data beside its PNG as Parquet (same stem; string column names, a non-trivial index as columns,
    categoricals as strings)."""
    frame = data.copy()
    if not isinstance(frame.index, pd.RangeIndex):
        frame = frame.reset_index()
    frame.columns = [str(c) for c in frame.columns]
    for col in frame.columns:
        if isinstance(frame[col].dtype, pd.CategoricalDtype):
            frame[col] = frame[col].astype(str)
    return write_atomic(png.with_suffix(".parquet"), lambda tmp: frame.to_parquet(tmp, index=False))


def _slug(*parts: object) -> str:
    return "_".join(str(p).replace("/", "-").replace(" ", "-") for p in parts)


def _pick_model_system(frame: pd.DataFrame) -> tuple[str, str]:
    """The (model, system) whose feasible rows cover the most tp × pp cells; ties: the larger model, then the
    first system in catalog order."""
    cells = frame.groupby(["model", "system"], observed=True)[["tp", "pp"]].apply(
        lambda g: len(g.drop_duplicates())).rename("cells").reset_index()
    if "params_total" in frame.columns:
        size = frame.groupby("model", observed=True)["params_total"].max()
        cells["size"] = cells["model"].map(size).astype(np.float64)
    else:
        cells["size"] = 0.0
    cells["order"] = np.arange(len(cells))
    top = cells.sort_values(["cells", "size", "order"], ascending=[False, False, True]).iloc[0]
    return str(top["model"]), str(top["system"])


def _check_choice(results_dir: str | Path, frame: pd.DataFrame, column: str, value: str | None) -> None:
    """``--model`` / ``--system`` must name one of the dataset's values that has a feasible row."""
    if value is None:
        return
    feasible = [str(v) for v in _values(frame, column)]
    if value in feasible:
        return
    swept = {str(v) for v in pd.read_parquet(results_dir, columns=[column])[column].unique()}
    what = "has no feasible row in" if value in swept else f"is not a {column} of"
    raise ValueError(f"--{column}: value {value!r} {what} {results_dir}; allowed: {', '.join(feasible)}")


def draw_standard_figures(results_dir: str | Path, out_dir: str | Path, model: str | None = None,
                          system: str | None = None) -> list[Path]:
    """Draw the standard figures of a sweep dataset into ``out_dir``, each PNG with its plot data beside it
    (same name, ``.parquet``); returns the PNG paths.

    * ``pareto_throughput_memory.png``: tokens/s per GPU (max) vs memory per GPU (min), one panel per model,
      one front per system;
    * ``pareto_time_memory_gpus.png``: step time (min) vs memory (min), colour = GPUs (min), per model;
    * ``scaling_system.png`` (several systems): best tokens/s per GPU per system, per model and GPU count;
    * ``scaling_gpus.png`` (≥ 3 GPU counts): best tokens/s per GPU per GPU count, per model and system;
    * ``breakdown_time.png``, ``breakdown_memory.png``: the best row (tokens/s per GPU) of each model × system;
    * ``heatmap_tp_pp_MODEL_SYSTEM.png``: best step time per tp × pp at the largest GPU count and the median
      global batch of that pair (``model``/``system``, or the pair covering the most tp × pp cells);
    * ``roofline_MODEL_SYSTEM.png``: the layer operations of that pair's best row on its GPU's roofline.
    """
    out = Path(out_dir)
    frame = load_results(results_dir)
    if frame.empty:
        raise ValueError(f"{results_dir}: no feasible row to draw")
    _check_choice(results_dir, frame, "model", model)
    _check_choice(results_dir, frame, "system", system)
    training = "tokens_per_s_per_user" not in frame.columns and "e2e_latency_s" not in frame.columns
    if training:  # the pair of the heatmap and the roofline, checked before anything is drawn
        if model is None or system is None:
            picked = _pick_model_system(frame[frame["model"].astype(str) == model] if model else
                                        frame[frame["system"].astype(str) == system] if system else frame)
            model, system = model or picked[0], system or picked[1]
        pair = frame[(frame["model"].astype(str) == model) & (frame["system"].astype(str) == system)]
        if pair.empty:
            raise ValueError(f"{results_dir}: no feasible row for model {model!r} on system {system!r}; allowed: "
                             f"a system with feasible rows of {model!r}: "
                             f"{', '.join(map(str, _values(frame[frame['model'].astype(str) == model], 'system')))}")
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def emit(data: pd.DataFrame, png: Path) -> None:
        write_plot_data(data, png)
        written.append(png)

    models = _values(frame, "model")
    systems_ = _values(frame, "system")
    scope = f" — {models[0]}" if len(models) == 1 else ""
    by_ms = ["model", "system"]
    facet = "model" if len(models) > 1 else None
    if "tokens_per_s_per_user" in frame.columns:  # a serving sweep (task: serve)
        _serving_figures(frame, out, emit, scope, facet)
        return written
    if "e2e_latency_s" in frame.columns:  # an inference sweep (task: infer)
        _inference_figures(frame, out, emit, scope, facet)
        return written
    thr, mem = "tokens_per_s_per_gpu:max", "mem_total_bytes:min"
    data = pareto_data(frame, [thr, mem], by=by_ms)
    emit(data, draw_pareto(data, [thr, mem], out / "pareto_throughput_memory.png", facet=facet, hue="system",
                           title=f"Pareto front: throughput vs memory per GPU (one front per system){scope}",
                           logx=False, logy=False))
    three = ["step_time_s:min", "mem_total_bytes:min", "gpus:min"]
    data = pareto_data(frame, three, by=["model"])
    title = f"Pareto front: step time vs memory per GPU vs GPUs{scope or ' (one front per model)'}"
    emit(data, draw_pareto(data, three, out / "pareto_time_memory_gpus.png", facet=facet, title=title, logx=True,
                           logy=False))
    if len(systems_) > 1:
        data = scaling_data(frame, "tokens_per_s_per_gpu", x="system", by=["model", "gpus"])
        emit(data, draw_scaling(data, "tokens_per_s_per_gpu", "system", out / "scaling_system.png", hue="gpus",
                                facet=facet,
                                title=f"Best throughput vs system (highest over all layouts){scope}"))
    if frame["gpus"].nunique() >= 3:
        data = scaling_data(frame, "tokens_per_s_per_gpu", x="gpus", by=by_ms)
        emit(data, draw_scaling(data, "tokens_per_s_per_gpu", "gpus", out / "scaling_gpus.png", hue="system",
                                facet=facet,
                                title=f"Best throughput vs GPUs (highest over all layouts){scope}"))
    # compare systems at one cluster size: the largest GPU count (per-GPU throughput is best on the smallest
    # clusters, so an unrestricted "best row" would compare different GPU counts)
    at = int(frame["gpus"].max())
    best = best_rows(frame[frame["gpus"] == at], "tokens_per_s_per_gpu", by_ms)
    for kind in ("time", "memory"):
        data = breakdown_data(best, kind, label_by=["system", "gpus", "global_batch"], facet=facet)
        title = (f"Step time of the best layout (tokens/s per GPU) on {at} GPUs per model and system"
                 if kind == "time" else
                 f"Memory per GPU of the best layout (tokens/s per GPU) on {at} GPUs per model and system") + scope
        emit(data, draw_breakdown(data, kind, out / f"breakdown_{kind}.png", facet=facet, title=title))
    assert model is not None and system is not None
    gpus = int(pair["gpus"].max())
    batches = np.sort(pair.loc[pair["gpus"] == gpus, "global_batch"].unique())
    batch = int(batches[(len(batches) - 1) // 2])
    data = heatmap_data(pair, "step_time_s", where={"gpus": gpus, "global_batch": batch})
    png = out / f"heatmap_tp_pp_{_slug(model, system)}.png"
    emit(data, draw_heatmap(data, "step_time_s", png, title=(
        f"Best step time, {model} on {gpus} × {system}, global batch {batch}\n"
        "(minimum over every other axis; – no feasible layout; red box = best)")))
    row = best_rows(pair, "tokens_per_s_per_gpu").iloc[0]
    try:
        ops = layer_ops({str(k): v for k, v in row.items()})
    except KeyError:  # a custom model of the spec: its dimensions are not in the dataset
        return written
    roof = gpu_roof(system, str(row.get("precision", "bf16")))
    data = roofline_data(ops, roof["peak_flops"], roof["bandwidth"])
    png = out / f"roofline_{_slug(model, system)}.png"
    label = config_label(pd.DataFrame([row])).iloc[0]
    emit(data, draw_roofline(data, png, achieved=roof, title=(
        f"One layer's forward, {model} on {system} ({row.get('precision', 'bf16')})\n"
        f"best layout: {label}, sequence {int(row['seq_len'])}")))
    return written


def _inference_figures(frame: pd.DataFrame, out: Path, emit: Any, scope: str, facet: str | None) -> None:
    """Standard figures of an inference sweep (``task: infer``):

    * ``pareto_latency_throughput.png``: request latency (min) vs output tokens/s per GPU (max), one front
      per system — the throughput a latency budget buys;
    * ``pareto_tpot_throughput.png``: time per output token (min) vs output tokens/s per GPU (max), per
      system — interactivity against cost;
    * ``scaling_batch.png`` (≥ 2 batch sizes): the best output tokens/s per GPU per batch size and system.
    """
    scope = scope + request_shape(frame)
    thr = "output_tokens_per_s_per_gpu:max"
    for lat, name, what in (("e2e_latency_s:min", "pareto_latency_throughput", "request latency"),
                            ("tpot_s:min", "pareto_tpot_throughput", "time per output token")):
        data = pareto_data(frame, [lat, thr], by=["model", "system"])
        emit(data, draw_pareto(data, [lat, thr], out / f"{name}.png", facet=facet, hue="system",
                               title=f"Pareto front: {what} vs output throughput per GPU (one front per system)"
                                     f"{scope}", logx=True, logy=True))
    if frame["batch"].nunique() >= 2:
        data = scaling_data(frame, "output_tokens_per_s_per_gpu", x="batch", by=["model", "system"])
        emit(data, draw_scaling(data, "output_tokens_per_s_per_gpu", "batch", out / "scaling_batch.png",
                                hue="system", facet=facet,
                                title=f"Best output throughput vs batch (highest over all layouts){scope}"))


def request_shape(frame: pd.DataFrame) -> str:
    """`` · 1000 in / 1000 out tokens`` when every row has one prompt and output length (a title names what the
    figure was measured at), else empty."""
    if not {"input_len", "output_len"} <= set(frame.columns):
        return ""
    pairs = frame[["input_len", "output_len"]].drop_duplicates()
    if len(pairs) != 1:
        return ""
    s_in, s_out = (int(v) for v in pairs.iloc[0])
    return f" · {s_in} in / {s_out} out tokens"


def _serving_figures(frame: pd.DataFrame, out: Path, emit: Any, scope: str, facet: str | None) -> None:
    """Standard figures of a serving sweep (``task: serve``):

    * ``pareto_throughput_interactivity.png``: output tokens/s per GPU (max) against tokens/s per user (max),
      one front per system — the throughput each level of interactivity costs (the standard serving answer);
    * ``scaling_batch.png`` (>= 2 engine batch sizes): the best output tokens/s per GPU per batch and system.
    """
    objs = ["tokens_per_s_per_user:max", "output_tokens_per_s_per_gpu:max"]
    scope = scope + request_shape(frame)
    data = pareto_data(frame, objs, by=["model", "system"])
    emit(data, draw_pareto(data, objs, out / "pareto_throughput_interactivity.png", facet=facet, hue="system",
                           title=f"Serving frontier: output throughput per GPU vs tokens/s per user (one front per "
                                 f"system){scope}", logx=True, logy=True))
    if "batch" in frame.columns and frame["batch"].nunique() >= 2:
        data = scaling_data(frame, "output_tokens_per_s_per_gpu", x="batch", by=["model", "system"])
        emit(data, draw_scaling(data, "output_tokens_per_s_per_gpu", "batch", out / "scaling_batch.png",
                                hue="system", facet=facet,
                                title=f"Best output throughput vs engine batch (highest over all layouts){scope}"))
