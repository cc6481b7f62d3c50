"""Figures of sweep datasets.

Each figure has a DATA function that returns a pandas DataFrame (tested; written beside every PNG as Parquet)
and a separate DRAWING function that takes that frame and writes a PNG.  Drawing uses matplotlib's object API
with the Agg canvas (``matplotlib.figure.Figure``, never ``pyplot``): no display, no global state.

* Pareto front — :func:`pareto_data` / :func:`draw_pareto`: every feasible point (grey cloud) and the front of
  two objectives (a line per group) or three (the third as a colour scale).
* Scaling — :func:`scaling_data` / :func:`draw_scaling`: the best value of a metric per x (GPUs, system, ...)
  and group, one line per group.
* Breakdowns — :func:`breakdown_data` / :func:`draw_breakdown`: stacked step time (``TIME_BREAKDOWN``) or
  memory per GPU (``MEMORY_BREAKDOWN``) of chosen rows, labelled by :func:`config_label`.
* tp × pp heatmap — :func:`heatmap_data` / :func:`draw_heatmap`: the best step time per (tp, pp) cell, the
  minimum over every other axis.
* Roofline — :func:`roofline_data` / :func:`draw_roofline`: operations placed at their arithmetic intensity
  under ``min(peak, bandwidth · intensity)`` (Williams, Waterman, Patterson 2009), ridge point marked;
  :func:`layer_ops` gives the operations of one transformer layer of a configuration.

:func:`draw_standard_figures` draws the standard set of a sweep dataset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import BoundaryNorm, ListedColormap, LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

from dse.cost import constants as K
from dse.cost.compute import gemm_bytes, gemm_flops
from dse.cost.training import MEMORY_BREAKDOWN, TIME_BREAKDOWN
from dse.cost.transformer import kv_width, layer_gemm_shapes
from dse.explain import MEMORY_LABELS, TIME_LABELS
from dse.info import HIGH_IS_BETTER
from dse.pareto import Objective, as_objectives, front_mask, load_results

#: Columns that describe a parallel layout (kept beside the metric in scaling and breakdown data).
LAYOUT_COLUMNS: tuple[str, ...] = ("model", "system", "gpus", "tp", "pp", "vpp", "dp", "cp", "ep", "micro_batch",
                                   "global_batch", "seq_len", "recompute", "zero", "precision", "batch", "input_len",
                                   "output_len", "kv_precision")

TIME_NAMES: dict[str, str] = {
    "time_compute_s": "compute (forward + backward)",
    "time_recompute_s": "recomputation",
    "time_tp_comm_s": "TP comm (exposed)",
    "time_cp_comm_s": "CP comm (exposed)",
    "time_ep_comm_s": "EP all-to-all (exposed)",
    "time_pp_comm_s": "PP send/recv (exposed)",
    "time_bubble_s": "pipeline bubble",
    "time_dp_comm_s": "DP sync (exposed)",
    "time_optimizer_s": "optimizer step",
}
MEMORY_NAMES: dict[str, str] = {
    "mem_weights_bytes": "weights",
    "mem_grads_bytes": "gradients",
    "mem_optimizer_bytes": "optimizer states",
    "mem_activations_bytes": "activations",
    "mem_buffers_bytes": "runtime + comm buffers",
}
#: column → (name, unit, factor from the column's unit to the displayed unit)
QUANTITIES: dict[str, tuple[str, str, float]] = {
    "step_time_s": ("step time", "s", 1.0),
    "tokens_per_s": ("throughput", "tokens/s", 1.0),
    "tokens_per_s_per_gpu": ("throughput", "tokens/s per GPU", 1.0),
    "model_tflops_per_gpu": ("model FLOP rate", "TFLOP/s per GPU", 1.0),
    "mfu": ("MFU", "%", 100.0),
    "hfu": ("HFU", "%", 100.0),
    "mem_total_bytes": ("memory per GPU", "GB", 1e-9),
    "params_per_gpu": ("parameters per GPU", "billions", 1e-9),
    "params_total": ("parameters", "billions", 1e-9),
    "layer_time_ms": ("layer time", "ms", 1.0),
    "gpus": ("GPUs", "", 1.0),
    "system": ("system", "", 1.0),
    "model": ("model", "", 1.0),
    "global_batch": ("global batch", "sequences", 1.0),
    "seq_len": ("sequence length", "tokens", 1.0),
    "microbatches": ("micro-batches per step", "", 1.0),
    "energy_per_step_j": ("energy per step", "kJ", 1e-3),
    "energy_per_token_j": ("energy per token", "J", 1.0),
    "cost_per_million_tokens_usd": ("cost", "USD per million tokens", 1.0),
    "ttft_s": ("time to first token", "s", 1.0),
    "tpot_s": ("time per output token", "ms", 1e3),
    "e2e_latency_s": ("end-to-end latency", "s", 1.0),
    "output_tokens_per_s_per_gpu": ("output throughput", "tokens/s per GPU", 1.0),
    "kv_cache_bytes": ("KV cache per GPU", "GB", 1e-9),
    "batch": ("batch", "requests", 1.0),
    "tokens_per_s_per_user": ("interactivity", "tokens/s per user", 1.0),
    "requests_per_s": ("request throughput", "requests/s", 1.0),
    "concurrency": ("concurrent requests", "", 1.0),
    "input_len": ("input length", "tokens", 1.0),
    "output_len": ("output length", "tokens", 1.0),
}
_DPI = 150
PLAIN_NUMBERS = FuncFormatter(lambda v, _: f"{v:g}")  # 0.1, 1, 10 on log axes instead of 10^-1, 10^0, 10^1
_GIB = 2.0**30


# ---- labels and units --------------------------------------------------------------------------------------


def quantity(column: str) -> tuple[str, str, float]:
    """(name, unit, factor) to display a column: bytes as GB (10⁹), times in s or ms, fractions in %."""
    if column in QUANTITIES:
        return QUANTITIES[column]
    if column in MEMORY_NAMES or column in MEMORY_LABELS:
        return MEMORY_NAMES.get(column) or MEMORY_LABELS[column], "GB", 1e-9
    if column in TIME_NAMES or column in TIME_LABELS:
        return TIME_NAMES.get(column) or TIME_LABELS[column], "s", 1.0
    if column.endswith("_bytes"):
        return column.removesuffix("_bytes").replace("_", " "), "GB", 1e-9
    if column.endswith("_ms"):
        return column.removesuffix("_ms").replace("_", " "), "ms", 1.0
    if column.endswith("_s"):
        return column.removesuffix("_s").replace("_", " "), "s", 1.0
    return column.replace("_", " "), "", 1.0


def axis_label(column: str, direction: str | None = None) -> str:
    """``"memory per GPU (GB)"``; with a direction, ``"memory per GPU (GB) — lower is better"``."""
    name, unit, _ = quantity(column)
    text = f"{name} ({unit})" if unit else name
    if direction is not None:
        text += f" — {'lower' if direction == 'min' else 'higher'} is better"
    return text


def _display(column: str, values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64) * quantity(column)[2]


def default_direction(metric: str) -> str:
    """``max`` for throughput-like metrics (:data:`dse.info.HIGH_IS_BETTER`), else ``min``."""
    return "max" if metric in HIGH_IS_BETTER else "min"


def _int_text(values: Any) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(v)
    text = np.where(finite, v, 0.0).round().astype(np.int64).astype(str)
    return np.where(finite, text, "?")


def config_label(frame: pd.DataFrame) -> pd.Series:
    """Short layout strings, e.g. ``"tp8 pp4 dp32 mb1 sel"`` (vectorized over rows).

    Always tp, pp, dp and the micro-batch; vpp, cp, ep only when > 1; the recomputation mode (``sel``,
    ``full``) when not ``none``; ZeRO stage when not 1 (``z3``); precision when not bf16 (``fp8``).
    """
    n = len(frame)
    label = np.full(n, "", dtype=object)

    def add(text: np.ndarray, show: np.ndarray | None = None) -> None:
        nonlocal label
        piece = np.char.add(" ", text.astype(str))
        label = label + (piece if show is None else np.where(show, piece, "")).astype(object)

    for col, prefix, always in (("tp", "tp", True), ("pp", "pp", True), ("vpp", "vpp", False),
                                ("dp", "dp", True), ("cp", "cp", False), ("ep", "ep", False),
                                ("micro_batch", "mb", True)):
        if col in frame.columns:
            values = frame[col].to_numpy(dtype=np.float64)
            add(np.char.add(prefix, _int_text(values)), None if always else values > 1)
    if "recompute" in frame.columns:
        mode = frame["recompute"].astype(str).to_numpy()
        add(np.where(mode == "selective", "sel", mode), mode != "none")
    if "zero" in frame.columns:
        zero = frame["zero"].to_numpy(dtype=np.float64)
        add(np.char.add("z", _int_text(zero)), zero != 1)
    if "precision" in frame.columns:
        precision = frame["precision"].astype(str).to_numpy()
        add(precision, precision != "bf16")
    if "batch" in frame.columns:  # inference: requests in flight and the request shape
        add(np.char.add("b", _int_text(frame["batch"].to_numpy(dtype=np.float64))))
    for col, prefix in (("input_len", "in"), ("output_len", "out")):
        if col in frame.columns:
            add(np.char.add(prefix, _int_text(frame[col].to_numpy(dtype=np.float64))))
    if "kv_precision" in frame.columns:
        kv = frame["kv_precision"].astype(str).to_numpy()
        add(np.char.add("kv-", kv.astype(str)), kv != "auto")
    return pd.Series(label.astype(str), index=frame.index, dtype=object).str.strip()


_DESCRIBE: dict[str, tuple[str, str]] = {"gpus": ("", " GPUs"), "global_batch": ("batch ", ""),
                                        "seq_len": ("seq ", ""), "micro_batch": ("mb", "")}


def describe(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """Values of ``columns`` joined with " · ", counts with their unit (``"h100-sxm-80gb · 1024 GPUs · batch
    512"``), vectorized over rows."""
    pieces = []
    for col in columns:
        prefix, suffix = _DESCRIBE.get(col, ("", ""))
        values = frame[col]
        text = _int_text(values) if pd.api.types.is_numeric_dtype(values) else values.astype(str).to_numpy()
        pieces.append(np.char.add(np.char.add(prefix, text.astype(str)), suffix))
    if not pieces:
        return pd.Series("", index=frame.index, dtype=object)
    out = pieces[0].astype(object)
    for piece in pieces[1:]:
        out = out + np.char.add(" · ", piece).astype(object)
    return pd.Series(out.astype(str), index=frame.index, dtype=object)


# ---- data ----------------------------------------------------------------------------------------------------


def feasible_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows whose ``fits`` column is true (all rows when there is none)."""
    return frame[frame["fits"].to_numpy(dtype=bool)] if "fits" in frame.columns else frame


def _check_columns(frame: pd.DataFrame, columns: Sequence[str]) -> None:
    for col in columns:
        if col not in frame.columns:
            raise ValueError(f"column {col!r} is not in the data; columns: {', '.join(map(str, frame.columns))}")


def best_rows(frame: pd.DataFrame, metric: str, by: Sequence[str] = (), direction: str | None = None,
              feasible_only: bool = True) -> pd.DataFrame:
    """The best row by ``metric`` of each group of ``by`` columns (the overall best when ``by`` is empty),
    sorted by the groups; ``direction`` defaults to :func:`default_direction`."""
    by = list(by)
    _check_columns(frame, [metric, *by])
    d = direction or default_direction(metric)
    sub = feasible_rows(frame) if feasible_only else frame
    sub = sub[np.isfinite(sub[metric].to_numpy(dtype=np.float64))]
    ranked = sub.sort_values(metric, ascending=d == "min", kind="stable")
    if not by:
        return ranked.head(1)
    best = ranked.drop_duplicates(subset=by, keep="first")
    return best.sort_values(by, kind="stable")


def pareto_data(frame: pd.DataFrame, objectives: str | Sequence[str | Objective], by: Sequence[str] = (),
                feasible_only: bool = True, max_cloud: int | None = 20000, seed: int = 0) -> pd.DataFrame:
    """Points of a Pareto figure: the front (``on_front`` true) per group of ``by`` and the cloud of the other
    feasible points (at most ``max_cloud`` of them, a seeded random sample, so large sweeps stay drawable).

    Two objectives draw as x and y; a third is the colour.  Columns: ``by``, the objectives, ``on_front``,
    ``config`` (:func:`config_label`).  Front rows come first, sorted by group and the first objective.
    """
    objs = as_objectives(objectives)
    if len(objs) not in (2, 3):
        raise ValueError(f"a Pareto figure needs 2 or 3 objectives; got {len(objs)}: "
                         f"{', '.join(f'{c}:{d}' for c, d in objs)}")
    by = list(by)
    cols = [c for c, _ in objs]
    _check_columns(frame, [*cols, *by])
    sub = feasible_rows(frame) if feasible_only else frame
    on_front = front_mask(sub, objs, by=by, feasible_only=False)
    keep = [c for c in dict.fromkeys([*by, *cols, *LAYOUT_COLUMNS]) if c in sub.columns]
    ranks = [*by, cols[0]]
    front = sub.iloc[np.flatnonzero(on_front)][keep].sort_values(
        ranks, ascending=[True] * len(by) + [objs[0][1] == "min"], kind="stable")
    cloud = sub.iloc[np.flatnonzero(~on_front)][keep]
    cloud = cloud[np.isfinite(cloud[cols].to_numpy(dtype=np.float64)).all(axis=1)]
    if max_cloud is not None and len(cloud) > max_cloud:
        pick = np.sort(np.random.default_rng(seed).choice(len(cloud), max_cloud, replace=False))
        cloud = cloud.iloc[pick]
    out = pd.concat([front.assign(on_front=True), cloud.assign(on_front=False)])
    out["config"] = config_label(out)
    return out[[*by, *cols, "on_front", "config"]].reset_index(drop=True)


def scaling_data(frame: pd.DataFrame, metric: str, x: str = "gpus", by: Sequence[str] = ("model",),
                 direction: str | None = None, feasible_only: bool = True) -> pd.DataFrame:
    """The best ``metric`` per ``x`` value and group of ``by`` (e.g. the best tokens/s per GPU per system and
    model): one row each, with the layout of the best row and its :func:`config_label`.  Sorted by group and
    x (a categorical x keeps its category order, e.g. the catalog order of systems)."""
    best = best_rows(frame, metric, [*by, x], direction, feasible_only)
    keep = [c for c in dict.fromkeys([*by, x, metric, *LAYOUT_COLUMNS]) if c in best.columns]
    out = best[keep].copy()
    out["config"] = config_label(out)
    return out.sort_values([*by, x], kind="stable").reset_index(drop=True)


def breakdown_data(rows: pd.DataFrame, kind: str = "time", label_by: Sequence[str] = (),
                   facet: str | None = None) -> pd.DataFrame:
    """Stacked parts of chosen rows: ``kind="time"`` → :data:`TIME_BREAKDOWN` (s, summing to ``step_time_s``),
    ``"memory"`` → :data:`MEMORY_BREAKDOWN` (bytes, summing to ``mem_total_bytes``).

    Columns: ``facet`` (when given), ``label`` (the ``label_by`` values, then :func:`config_label`), the
    parts, ``total``; for memory also ``capacity_bytes``, the HBM of the row's system read as binary GB (as
    ``fits`` compares it), NaN for systems not in the catalog.
    """
    if kind not in ("time", "memory"):
        raise ValueError(f"kind {kind!r} is not allowed; allowed: time, memory")
    every, total = (TIME_BREAKDOWN, "step_time_s") if kind == "time" else (MEMORY_BREAKDOWN, "mem_total_bytes")
    _check_columns(rows, [total, *label_by, *([facet] if facet else [])])
    parts = [p for p in every if p in rows.columns]  # a dataset written before a part existed lacks it
    if not parts:
        raise ValueError(f"no {kind} breakdown column ({', '.join(every)}) is in the data")
    out = pd.DataFrame(index=rows.index)
    if facet:
        out[facet] = rows[facet]
    label = config_label(rows)
    if label_by:
        label = describe(rows, label_by) + "  |  " + label
    out["label"] = label
    for p in parts:
        out[p] = rows[p].to_numpy(dtype=np.float64)
    out["total"] = rows[total].to_numpy(dtype=np.float64)
    if kind == "memory":
        out["capacity_bytes"] = np.nan
        if "system" in rows.columns:
            from dse.hardware.catalog import systems

            hbm = systems()["hbm_gb"] * _GIB
            out["capacity_bytes"] = rows["system"].astype(str).map(hbm).to_numpy(dtype=np.float64)
    return out.reset_index(drop=True)


def heatmap_data(frame: pd.DataFrame, metric: str = "step_time_s", x: str = "tp", y: str = "pp",
                 where: Mapping[str, object] | None = None, direction: str | None = None,
                 feasible_only: bool = True) -> pd.DataFrame:
    """Best ``metric`` per (y, x) cell — the minimum (or maximum, for throughput-like metrics) over every other
    axis — of the rows matching ``where`` (e.g. ``{"model": "llama3-70b", "system": "h100-sxm-80gb"}``).
    A pivot table: index the ``y`` values, columns the ``x`` values, NaN where no row is feasible."""
    d = direction or default_direction(metric)
    _check_columns(frame, [metric, x, y, *(where or {})])
    sub = feasible_rows(frame) if feasible_only else frame
    for col, value in (where or {}).items():
        match = sub[col].astype(str).to_numpy() == str(value)
        if not match.any():
            known = sorted(map(str, pd.unique(sub[col].astype(str))))
            raise ValueError(f"no {'feasible ' if feasible_only else ''}row has {col} = {value!r}; "
                             f"values: {', '.join(known)}")
        sub = sub[match]
    grouped = sub.groupby([y, x], observed=True)[metric]
    cells = grouped.min() if d == "min" else grouped.max()
    table = cells.unstack(x).sort_index().sort_index(axis=1).astype(np.float64)
    table.index.name, table.columns.name = y, x
    return table


def layer_ops(config: Mapping[str, Any]) -> pd.DataFrame:
    """FLOPs and HBM bytes of the forward operations of one transformer layer, one micro-batch, one GPU, with
    the shapes :mod:`dse.cost.training` times (plus the logits GEMM of the last stage).

    GEMMs: the shapes of :func:`dse.cost.transformer.layer_gemm_shapes` (the ones the training model times),
    ``2·m·n·k`` FLOPs and ``m·k·in + k·n·w + m·n·2`` bytes (:func:`dse.cost.compute.gemm_bytes`), T = b·s/cp.
    FlashAttention: ``CAUSAL_FRACTION · 4·b·(s/cp)·s·h/tp`` FLOPs and Q, K, V, O streamed once in 16 bits (the IO
    lower bound of Dao et al. 2022); unfused attention: ``4·b·s²·h/tp`` FLOPs and
    ``STANDARD_ATTENTION_FWD_BYTES`` per score element.  Element-wise kernels have no FLOPs in the model and are
    left out.  ``config`` holds a catalogued ``model`` name or the dimensions, and the layout columns.
    """
    c = dict(config)
    if "hidden" not in c:
        from dse.models.catalog import model_row

        dims = model_row(str(c["model"]))
        for key in ("hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "experts", "top_k"):
            c[key] = dims[key]

    def num(key: str, default: float) -> float:
        value = c.get(key, default)
        return default if value is None or (isinstance(value, float) and np.isnan(value)) else float(value)

    h, a, f, V = num("hidden", 0), num("heads", 1), num("ffn_hidden", 4 * num("hidden", 0)), num("vocab", 0)
    g = num("kv_heads", a)
    E, topk = num("experts", 1), num("top_k", 1)
    t, cp, ep = num("tp", 1), num("cp", 1), num("ep", 1)
    b, s = num("micro_batch", 1), num("seq_len", 0)
    precision = str(c.get("precision", "bf16"))
    ob = {"fp8": 1.0, "fp4": 0.5}.get(precision, 2.0)
    n_mlp = 3.0 if str(c.get("mlp", "gelu")) == "swiglu" else 2.0
    moe = E > 1
    T = b * s / cp
    kvw = kv_width(h, a, g)
    names = ["QKV projection", "attention output projection", "FFN in" + (" (gate + up)" if n_mlp == 3 else ""),
             "FFN out"]
    shapes = layer_gemm_shapes(T, h, kvw, f, n_mlp, t, topk if moe else 1.0, ob, E / ep if moe else 1.0)
    flops = [float(gemm_flops(m, n, k)) for m, n, k, _ in shapes]
    moved = [float(gemm_bytes(m, n, k, ob, w, 2.0)) for m, n, k, w in shapes]
    if str(c.get("attention", "flash")) == "standard":
        names.append("attention core (unfused)")
        flops.append(4.0 * b * s * s * h / t)
        moved.append(K.STANDARD_ATTENTION_FWD_BYTES * b * (a / t) * s * s)
    else:
        names.append("attention core (flash)")
        flops.append(K.CAUSAL_FRACTION * 4.0 * b * (s / cp) * s * h / t)
        moved.append(2.0 * (2.0 * b * (s / cp) * h / t + 2.0 * b * s * kvw / t))
    names.append("logits (last stage)")
    flops.append(float(gemm_flops(T, V / t, h)))
    moved.append(float(gemm_bytes(T, V / t, h, 2.0, 2.0, 2.0)))
    return pd.DataFrame({"name": names, "flops": flops, "bytes": moved})


def gpu_roof(system: str, precision: str = "bf16") -> dict[str, float]:
    """Peak dense tensor FLOP/s at ``precision`` and HBM bytes/s of a catalogued system, and the achieved rates
    the model uses (the kernel's hardware columns, :func:`dse.hardware.catalog.hardware_columns`)."""
    from dse.hardware import catalog as hwcat

    if system not in hwcat.system_names():
        raise ValueError(f"system {system!r} is not in the catalog; known systems: "
                         f"{', '.join(hwcat.system_names())}")
    hw = {k: float(v[0]) for k, v in hwcat.hardware_columns(hwcat.system_codes([system])).items()}
    fmt = {"fp8": "fp8", "fp4": "fp4"}.get(precision, "fp16")
    return {"peak_flops": hw[f"tensor_{fmt}_flops"], "bandwidth": hw["hbm_bw"],
            "achieved_flops": hw[f"matmul_{fmt}_rate"], "achieved_bandwidth": hw["memory_rate"]}


def roofline_data(ops: pd.DataFrame, peak_flops: float, bandwidth: float) -> pd.DataFrame:
    """Operations (columns ``name``, ``flops``, ``bytes``) placed on the roofline of a GPU with ``peak_flops``
    (FLOP/s) and ``bandwidth`` (bytes/s): arithmetic intensity I = F / B (FLOP/byte), attainable rate
    min(peak, bandwidth · I) (FLOP/s), bound (``memory`` below the ridge point I* = peak / bandwidth, else
    ``compute``) and roofline time max(F / peak, B / bandwidth) (s).  Williams, Waterman, Patterson 2009."""
    _check_columns(ops, ["name", "flops", "bytes"])
    flops = ops["flops"].to_numpy(dtype=np.float64)
    moved = ops["bytes"].to_numpy(dtype=np.float64)
    intensity = flops / moved
    ridge = peak_flops / bandwidth
    out = ops.copy()
    out["intensity_flop_per_byte"] = intensity
    out["attainable_flops_per_s"] = np.minimum(peak_flops, bandwidth * intensity)
    out["bound"] = np.where(intensity >= ridge, "compute", "memory")
    out["roofline_time_s"] = np.maximum(flops / peak_flops, moved / bandwidth)
    out["peak_flops_per_s"] = peak_flops
    out["bandwidth_bytes_per_s"] = bandwidth
    out["ridge_flop_per_byte"] = ridge
    return out


# ---- drawing -------------------------------------------------------------------------------------------------


def new_figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), dpi=_DPI, layout="constrained")


def save_figure(fig: Figure, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight", pad_inches=0.1)  # constrained layout + tight box: nothing clipped
    return out


def _grid(fig: Figure, n: int, ncols: int, sharex: bool = False, sharey: bool = False) -> list[Axes]:
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=sharex, sharey=sharey).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return list(axes[:n])


def _values(data: pd.DataFrame, column: str | None) -> list[Any]:
    """Distinct values of a column in display order (category order, else sorted), or [None]."""
    if column is None:
        return [None]
    col = data[column]
    if isinstance(col.dtype, pd.CategoricalDtype):
        present = set(col.dropna())
        return [v for v in col.cat.categories if v in present]
    return sorted(pd.unique(col.dropna()))


def _select(data: pd.DataFrame, column: str | None, value: Any) -> pd.DataFrame:
    return data if column is None else data[data[column] == value]


def color_cycle(n: int, name: str | None = None) -> list[Any]:
    """``n`` distinct colours: tab10 up to 10, tab20 above (or the colormap ``name``)."""
    cmap = colormaps[name or ("tab10" if n <= 10 else "tab20")]
    return [cmap(i % cmap.N) for i in range(n)]


def plain_log(axis: Any, subs: Sequence[float] = (1.0, 2.0, 5.0)) -> None:
    """Log axis ticks at 1, 2, 5 × 10ⁿ (or ``subs``) written as plain numbers."""
    axis.set_major_locator(LogLocator(base=10.0, subs=tuple(subs)))
    axis.set_major_formatter(PLAIN_NUMBERS)
    axis.set_minor_formatter(NullFormatter())


def _spans(values: np.ndarray, ratio: float = 30.0) -> bool:
    """Positive values spanning more than ``ratio`` — more than a decade and a half: a log axis reads better."""
    v = values[np.isfinite(values)]
    return bool(v.size) and float(v.min()) > 0 and float(v.max()) / float(v.min()) > ratio


def draw_pareto(data: pd.DataFrame, objectives: str | Sequence[str | Objective], path: str | Path,
                facet: str | None = None, hue: str | None = None, title: str | None = None,
                logx: bool | None = None, logy: bool | None = None) -> Path:
    """Draw :func:`pareto_data`: grey cloud, front per ``hue`` value as a line (2 objectives) or front points
    coloured by the third objective (3 objectives; a discrete scale when it takes ≤ 10 values), one panel per
    ``facet`` value.  ``logx``/``logy``: log axes (default: when the values span more than 30×, decided once
    for all panels)."""
    objs = as_objectives(objectives)
    (xc, xd), (yc, yd) = objs[0], objs[1]
    zc, zd = objs[2] if len(objs) == 3 else (None, None)
    facets = _values(data, facet)
    ncols = 2 if len(facets) > 1 else 1
    fig = new_figure(5.2 * ncols + (1.6 if hue and zc is None else 0.6), 0.6 + 3.9 * -(-len(facets) // ncols))
    axes = _grid(fig, len(facets), ncols)
    hues = _values(data, hue) if zc is None else [None]
    colors = dict(zip(hues, color_cycle(len(hues)), strict=True))
    norm: Normalize | None = None
    cmap: Any = "viridis"
    levels: np.ndarray | None = None
    if zc is not None:
        zv = _display(zc, data.loc[data["on_front"], zc])
        zv = zv[np.isfinite(zv)]
        levels = np.unique(zv)
        if 1 <= levels.size <= 10:  # few values (GPU counts): one colour each
            cmap = ListedColormap(colormaps["viridis"](np.linspace(0.0, 1.0, levels.size)))
            norm = BoundaryNorm(np.arange(levels.size + 1) - 0.5, levels.size)
        else:
            lo, hi = (float(zv.min()), float(zv.max())) if zv.size else (0.0, 1.0)
            norm = LogNorm(lo, hi) if lo > 0 and hi / lo > 20 else Normalize(lo, hi)
            levels = None
    scatter = None
    drawn: list[Any] = []
    for ax, fv in zip(axes, facets, strict=True):
        part = _select(data, facet, fv)
        cloud = part[~part["on_front"]]
        ax.scatter(_display(xc, cloud[xc]), _display(yc, cloud[yc]), s=4, color="0.75", alpha=0.5, linewidths=0,
                   rasterized=True)
        front = part[part["on_front"]]
        if zc is None:
            for hv in hues:
                line = _select(front, hue, hv).sort_values(xc)
                if line.empty:
                    continue
                ax.plot(_display(xc, line[xc]), _display(yc, line[yc]), "-o", ms=3.5, lw=1.5, color=colors[hv])
                if hv not in drawn:
                    drawn.append(hv)
        else:
            z = _display(zc, front[zc])
            c = np.searchsorted(levels, z) if levels is not None else z
            scatter = ax.scatter(_display(xc, front[xc]), _display(yc, front[yc]), c=c, norm=norm, cmap=cmap, s=22,
                                 edgecolors="k", linewidths=0.4, zorder=3)
        if logx if logx is not None else _spans(_display(xc, data[xc])):
            ax.set_xscale("log")
            plain_log(ax.xaxis)
        if logy if logy is not None else _spans(_display(yc, data[yc])):
            ax.set_yscale("log")
            plain_log(ax.yaxis)
        ax.set_xlabel(axis_label(xc, xd))
        ax.set_ylabel(axis_label(yc, yd))
        ax.grid(True, alpha=0.3)
        if facet is not None:
            ax.set_title(str(fv), fontsize=10)
    if zc is not None and scatter is not None:
        cbar = fig.colorbar(scatter, ax=axes, shrink=0.7)
        cbar.set_label(axis_label(zc, zd))
        if isinstance(norm, LogNorm):
            plain_log(cbar.ax.yaxis)
        if levels is not None:
            cbar.set_ticks(list(range(levels.size)), labels=[f"{v:g}" for v in levels])
    handles: list[Any] = [Line2D([], [], ls="", marker="o", ms=4, color="0.7", label="feasible configurations")]
    if zc is None:
        handles += [Line2D([], [], color=colors[hv], marker="o", ms=4, label=str(hv) if hue else "Pareto front")
                    for hv in drawn]
    else:
        handles.append(Line2D([], [], ls="", marker="o", ms=6, mfc="white", mec="k",
                              label=f"Pareto front (colour: {quantity(zc)[0]})"))
    fig.legend(handles=handles, loc="outside right center" if zc is None else "outside lower center",
               ncols=1 if zc is None else 2, fontsize=8, title=axis_label(hue) if hue and zc is None else None,
               frameon=False)
    names = " vs ".join(quantity(c)[0] for c, _ in objs[:2])
    fig.suptitle(title or f"Pareto front: {names}" + (f", colour = {quantity(zc)[0]}" if zc else ""))
    return save_figure(fig, path)


def draw_scaling(data: pd.DataFrame, metric: str, x: str, path: str | Path, hue: str | None = None,
                 style: str | None = None, title: str | None = None, direction: str | None = None,
                 facet: str | None = None) -> Path:
    """Draw :func:`scaling_data`: one line per (``hue``, ``style``) group, one panel per ``facet`` value (so a
    legend never lists more than the hue × style lines of one panel); categorical x as evenly spaced labelled
    positions, numeric x on a log₂ axis when it spans ≥ 8×."""
    xs = _values(data, x)
    categorical = not pd.api.types.is_numeric_dtype(data[x])
    position = {v: i for i, v in enumerate(xs)}
    hues, styles, facets = _values(data, hue), _values(data, style), _values(data, facet)
    colors = dict(zip(hues, color_cycle(len(hues)), strict=True))
    dashes = dict(zip(styles, ["-", "--", ":", "-."] * (len(styles) // 4 + 1), strict=False))
    markers = dict(zip(styles, ["o", "s", "^", "D", "v"] * (len(styles) // 5 + 1), strict=False))
    ncols = 2 if len(facets) > 1 else 1
    width = 7.5 + 0.04 * max(len(str(v)) for v in xs) * len(xs)
    fig = new_figure(width * (0.75 if ncols == 2 else 1.0) * ncols, 0.8 + 3.8 * -(-len(facets) // ncols))
    axes = _grid(fig, len(facets), ncols, sharey=False)
    yv = _display(metric, data[metric])
    yv = yv[np.isfinite(yv) & (yv > 0)]
    log_y = bool(yv.size) and yv.max() / yv.min() > 8  # groups of very different scale: log axis, plain numbers
    handles: dict[str, Any] = {}
    for ax, fv in zip(axes, facets, strict=True):
        panel = _select(data, facet, fv)
        for hv in hues:
            for sv in styles:
                line = _select(_select(panel, hue, hv), style, sv)
                if line.empty:
                    continue
                px = line[x].map(position).to_numpy(dtype=np.float64) if categorical else \
                    line[x].to_numpy(np.float64)
                parts = [str(v) if c != "gpus" else f"{v} GPUs" for c, v in ((hue, hv), (style, sv)) if c is not None]
                label = " · ".join(parts) or quantity(metric)[0]
                (h,) = ax.plot(px, _display(metric, line[metric]), linestyle=dashes[sv], marker=markers[sv], ms=4,
                               color=colors[hv], label=label)
                handles.setdefault(label, h)
        if categorical:
            ax.xaxis.set_major_locator(FixedLocator(list(range(len(xs)))))
            ax.set_xticklabels([str(v) for v in xs], rotation=30, ha="right")
            ax.set_xlim(-0.3, len(xs) - 0.7)
        else:
            xv = np.asarray(xs, dtype=np.float64)
            if xv.size and xv.min() > 0 and xv.max() / xv.min() >= 8:
                ax.set_xscale("log", base=2)
                ax.xaxis.set_major_locator(FixedLocator(list(xv)))
                ax.xaxis.set_minor_locator(NullLocator())
                ax.set_xticklabels([f"{v:g}" for v in xv], rotation=30 if xv.size > 8 else 0)
        ax.set_xlabel(axis_label(x))
        ax.set_ylabel(axis_label(metric, direction or default_direction(metric)))
        ax.grid(True, which="major", alpha=0.3)
        if log_y:
            ax.set_yscale("log")
            plain_log(ax.yaxis)
        else:
            ax.set_ylim(bottom=0)
        if facet is not None:
            ax.set_title(str(fv), fontsize=10)
    if hue or style:
        fig.legend(handles=list(handles.values()), loc="outside right upper", fontsize=8, frameon=False,
                   title=" · ".join(axis_label(c) for c in (hue, style) if c))
    best = "highest" if (direction or default_direction(metric)) == "max" else "lowest"
    fig.suptitle(title or f"Best {quantity(metric)[0]} vs {quantity(x)[0]} ({best} over all layouts)")
    return save_figure(fig, path)


def draw_breakdown(data: pd.DataFrame, kind: str, path: str | Path, facet: str | None = None,
                   title: str | None = None) -> Path:
    """Draw :func:`breakdown_data` as horizontal stacked bars (one per row, labelled), one panel per ``facet``
    value; parts that are zero in every row are left out of the legend; memory bars mark the HBM capacity."""
    every = TIME_BREAKDOWN if kind == "time" else MEMORY_BREAKDOWN
    parts = [p for p in every if p in data.columns and (data[p] > 0).any()]
    unit, factor = ("s", 1.0) if kind == "time" else ("GB", 1e-9)
    facets = _values(data, facet)
    heights = [max(len(_select(data, facet, fv)), 1) for fv in facets]
    longest = max((len(s) for s in data["label"]), default=10)
    fig = new_figure(6.0 + 0.065 * longest, 0.9 + sum(0.3 * h + 0.55 for h in heights))
    axes = fig.subplots(len(facets), 1, squeeze=False, sharex=kind == "memory",
                        gridspec_kw={"height_ratios": heights}).ravel()
    palette = color_cycle(len(every))  # a part keeps its colour in every figure
    colors = {p: palette[every.index(p)] for p in parts}
    for ax, fv in zip(axes, facets, strict=True):
        part = _select(data, facet, fv).iloc[::-1]  # first row on top
        ypos = np.arange(len(part))
        left = np.zeros(len(part))
        for p in parts:
            width = part[p].to_numpy(dtype=np.float64) * factor
            ax.barh(ypos, width, left=left, height=0.7, color=colors[p], label=quantity(p)[0])
            left += width
        if kind == "memory" and "capacity_bytes" in part.columns:
            cap = part["capacity_bytes"].to_numpy(dtype=np.float64) * factor
            ax.scatter(cap, ypos, marker="|", s=200, color="k", linewidths=2, zorder=4,
                       label="HBM capacity (80 GB = 80 GiB)")
        ax.set_yticks(ypos, part["label"].tolist(), fontsize=8)
        ax.set_ylim(-0.6, len(part) - 0.4)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_axisbelow(True)
        ax.tick_params(axis="x", labelbottom=True)
        if facet is not None:
            ax.set_title(str(fv), fontsize=10, loc="left")
    axes[-1].set_xlabel(("step time" if kind == "time" else "memory per GPU") + f" ({unit})")
    handles, labels = axes[0].get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith("HBM"))  # bars first, capacity last
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 3),
               fontsize=8, frameon=False)
    default = "Step time breakdown (exposed communication)" if kind == "time" else "Memory per GPU (peak stage)"
    fig.suptitle(title or default)
    return save_figure(fig, path)


def draw_heatmap(data: pd.DataFrame, metric: str, path: str | Path, title: str | None = None,
                 direction: str | None = None) -> Path:
    """Draw :func:`heatmap_data`: cells coloured and annotated with the value, empty cells marked ``–``, the
    best cell outlined."""
    d = direction or default_direction(metric)
    values = _display(metric, data.to_numpy(dtype=np.float64))
    ny, nx = values.shape
    fig = new_figure(max(4.8, 1.0 * nx + 2.8), max(3.6, 0.65 * ny + 1.8))
    ax = fig.subplots()
    masked = np.ma.masked_invalid(values)
    cmap = "viridis_r" if d == "min" else "viridis"  # bright = good
    image = ax.imshow(masked, origin="lower", cmap=cmap, aspect="auto")
    ax.set_facecolor("0.9")
    finite = np.isfinite(values)
    if finite.any():
        lo, hi = np.nanmin(values), np.nanmax(values)
        top = float(np.nanmax(np.abs(values)))
        decimals = max(0, 2 - int(np.floor(np.log10(top)))) if top > 0 else 0
        for (i, j), v in np.ndenumerate(values):
            if np.isfinite(v):
                shade = (v - lo) / (hi - lo) if hi > lo else 0.5
                dark = shade > 0.5 if d == "min" else shade < 0.5  # dark cells get white text
                ax.text(j, i, f"{v:.{decimals}f}", ha="center", va="center", fontsize=8, color="w" if dark else "k")
            else:
                ax.text(j, i, "–", ha="center", va="center", fontsize=9, color="0.4")
        flat = np.where(finite, values, np.inf if d == "min" else -np.inf)
        bi, bj = np.unravel_index(np.argmin(flat) if d == "min" else np.argmax(flat), values.shape)
        ax.add_patch(_rectangle(bj - 0.5, bi - 0.5))
    ax.set_xticks(range(nx), [f"{v:g}" for v in data.columns])
    ax.set_yticks(range(ny), [f"{v:g}" for v in data.index])
    ax.set_xlabel(f"tensor parallel size ({data.columns.name})" if data.columns.name == "tp"
                  else axis_label(str(data.columns.name)))
    ax.set_ylabel(f"pipeline parallel size ({data.index.name})" if data.index.name == "pp"
                  else axis_label(str(data.index.name)))
    cbar = fig.colorbar(image, ax=ax)
    cbar.set_label(f"best {axis_label(metric)}")
    ax.set_title(title or f"Best {quantity(metric)[0]} per {data.columns.name} × {data.index.name}", fontsize=10)
    return save_figure(fig, path)


def _rectangle(x: float, y: float) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 1.0, 1.0, fill=False, edgecolor="red", linewidth=2.0, label="best")


def draw_roofline(data: pd.DataFrame, path: str | Path, title: str | None = None,
                  achieved: Mapping[str, float] | None = None) -> Path:
    """Draw :func:`roofline_data` on log-log axes: the roof min(peak, bandwidth · I), the ridge point, every
    operation at its intensity and attainable rate (TFLOP/s); optionally the rates the model achieves
    (``achieved`` with ``achieved_flops`` and ``achieved_bandwidth``, dashed)."""
    peak = float(data["peak_flops_per_s"].iloc[0])
    bandwidth = float(data["bandwidth_bytes_per_s"].iloc[0])
    ridge = peak / bandwidth
    intensity = data["intensity_flop_per_byte"].to_numpy(dtype=np.float64)
    lo = min(float(np.nanmin(intensity)), ridge) / 8.0
    hi = max(float(np.nanmax(intensity)), ridge) * 4.0
    grid = np.geomspace(lo, hi, 200)
    fig = new_figure(7.5, 5.6)
    ax = fig.subplots()
    ax.plot(grid, np.minimum(peak, bandwidth * grid) / 1e12, "k-", lw=2,
            label=f"peak roof: {peak / 1e12:.0f} TFLOP/s, {bandwidth / 1e12:.2f} TB/s")
    if achieved is not None:
        ap, ab = float(achieved["achieved_flops"]), float(achieved["achieved_bandwidth"])
        ax.plot(grid, np.minimum(ap, ab * grid) / 1e12, "k--", lw=1,
                label=f"rates the model uses: {ap / 1e12:.0f} TFLOP/s ({100 * ap / peak:.0f} %), "
                      f"{ab / 1e12:.2f} TB/s ({100 * ab / bandwidth:.0f} %)")
    ax.axvline(ridge, color="0.4", ls=":", lw=1)
    bottom = bandwidth * lo / 1e12 / 2
    ax.text(ridge * 0.9, np.sqrt(bottom * peak / 1e12), f"ridge point {ridge:.0f} FLOP/byte", rotation=90,
            ha="right", va="center", fontsize=8, color="0.3")
    markers = ["o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">"]
    colors = color_cycle(len(data))
    for i, (_, op) in enumerate(data.iterrows()):  # one marker per operation (a handful), for the legend
        ax.scatter(op["intensity_flop_per_byte"], op["attainable_flops_per_s"] / 1e12, s=60, zorder=3,
                   marker=markers[i % len(markers)], color=colors[i], edgecolors="k", linewidths=0.5,
                   label=f"{op['name']}: {op['intensity_flop_per_byte']:.0f} FLOP/byte, {op['bound']}-bound")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(bottom, peak / 1e12 * 3)
    plain_log(ax.xaxis)
    plain_log(ax.yaxis)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable performance (TFLOP/s)")
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside lower center", ncols=1, fontsize=8, frameon=False)
    ax.set_title(title or "Roofline", fontsize=10)
    return save_figure(fig, path)


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
    out = png.with_suffix(".parquet")
    frame.to_parquet(out, index=False)
    return out


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
    out.mkdir(parents=True, exist_ok=True)
    frame = load_results(results_dir)
    if frame.empty:
        raise ValueError(f"{results_dir}: no feasible row to draw")
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
    if model is None or system is None:
        picked = _pick_model_system(frame)
        model, system = model or picked[0], system or picked[1]
    pair = frame[(frame["model"].astype(str) == model) & (frame["system"].astype(str) == system)]
    if pair.empty:
        raise ValueError(f"{results_dir}: no feasible row for model {model!r} on system {system!r}")
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


def _serving_figures(frame: pd.DataFrame, out: Path, emit: Any, scope: str, facet: str | None) -> None:
    """Standard figures of a serving sweep (``task: serve``):

    * ``pareto_throughput_interactivity.png``: output tokens/s per GPU (max) against tokens/s per user (max),
      one front per system — the throughput each level of interactivity costs (the standard serving answer);
    * ``scaling_batch.png`` (>= 2 engine batch sizes): the best output tokens/s per GPU per batch and system.
    """
    objs = ["tokens_per_s_per_user:max", "output_tokens_per_s_per_gpu:max"]
    data = pareto_data(frame, objs, by=["model", "system"])
    emit(data, draw_pareto(data, objs, out / "pareto_throughput_interactivity.png", facet=facet, hue="system",
                           title=f"Serving frontier: output throughput per GPU vs tokens/s per user (one front per "
                                 f"system){scope}", logx=True, logy=True))
    if "batch" in frame.columns and frame["batch"].nunique() >= 2:
        data = scaling_data(frame, "output_tokens_per_s_per_gpu", x="batch", by=["model", "system"])
        emit(data, draw_scaling(data, "output_tokens_per_s_per_gpu", "batch", out / "scaling_batch.png",
                                hue="system", facet=facet,
                                title=f"Best output throughput vs engine batch (highest over all layouts){scope}"))
