"""Plot data: every figure's DataFrame (tested; written beside each PNG as Parquet)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dse.cost import constants as K
from dse.cost.compute import gemm_bytes, gemm_flops
from dse.cost.training import MEMORY_BREAKDOWN, TIME_BREAKDOWN
from dse.pareto import Objective, as_objectives, front_mask
from dse.plots.labels import (
    _GIB,
    LAYOUT_COLUMNS,
    config_label,
    default_direction,
    describe,
)

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

    GEMMs: the mean layer's shapes of :func:`dse.cost.architecture.layer_gemms` (attention in and out, the dense
    FFN, the routed experts; MLA's up projections from :func:`~dse.cost.architecture.mla_up_projection`), each
    weighted by the share of layers that run it, ``2·m·n·k`` FLOPs and ``m·k·in + k·n·w + m·n·2`` bytes
    (:func:`dse.cost.compute.gemm_bytes`), T = b·s/cp.  FlashAttention: ``4·b·(s/cp)·keys·core/tp`` FLOPs (keys:
    :func:`~dse.cost.architecture.causal_keys`) and Q, K, V, O streamed once in 16 bits (the IO lower bound of
    Dao et al. 2022); unfused attention: ``4·b·s²·core/tp`` FLOPs and the 4 bytes per score element its two
    GEMMs move (QKᵀ writes 2, AV reads 2).  The memory-bound kernels the model times at HBM bandwidth
    (:mod:`dse.cost.training`, bytes from :mod:`dse.cost.constants`) are placed too, with the FLOPs their formulas
    do per element (:data:`ELEMENTWISE_FLOPS`): the two norms and the two bias-dropout-adds of the residual stream
    (T·h/sp elements), the FFN activation (T·ffn/tp elements), the unfused softmax and dropout over the score
    matrix, and fp8's cast-transpose kernels.  ``config`` holds a catalogued ``model`` name or the dimensions,
    and the layout columns.
    """
    from dse.codes import MLP
    from dse.cost.architecture import (
        ARCHITECTURE_CATEGORIES,
        ARCHITECTURE_COLUMNS,
        causal_keys,
        layer_gemms,
        layer_record,
        mla_up_projection,
    )

    c = dict(config)
    if "hidden" not in c:
        from dse.models.catalog import model_row

        dims = model_row(str(c["model"]))
        for key in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "experts", "top_k",
                    *ARCHITECTURE_COLUMNS):
            c[key] = dims[key]

    def num(key: str, default: float) -> float:
        value = c.get(key, default)
        return default if value is None or (isinstance(value, float) and np.isnan(value)) else float(value)

    h, a, V = num("hidden", 0), num("heads", 1), num("vocab", 0)
    E, topk = num("experts", 1), num("top_k", 1)
    t, cp, ep = num("tp", 1), num("cp", 1), num("ep", 1)
    etp = num("etp", 0) or t
    b, s = num("micro_batch", 1), num("seq_len", 0)
    precision = str(c.get("precision", "bf16"))
    ob = {"fp8": 1.0, "fp4": 0.5}.get(precision, 2.0)
    x = {"layers": num("layers", 1), "hidden": h, "heads": a, "kv_heads": num("kv_heads", a),
         "ffn_hidden": num("ffn_hidden", 4 * h), "experts": E, "top_k": topk,
         "mlp": float(MLP.index(str(c.get("mlp", "gelu")))),
         **{k: num(k, 0.0) for k in ARCHITECTURE_COLUMNS if k not in ARCHITECTURE_CATEGORIES},
         **{k: float(names.index(str(c[k]))) if isinstance(c.get(k), str) else 0.0
            for k, names in ARCHITECTURE_CATEGORIES.items()}}
    rec = layer_record({k: np.asarray(v, dtype=np.float64) for k, v in x.items()})
    moe = E > 1
    T = b * s / cp
    gated = " (gate + up)" if float(rec["n_mlp"]) == 3 else ""
    names_all = ["attention in (Q, MLA down projections)" if float(rec["attn_rep"]) > 0 else "QKV projection",
                 "attention output projection", "FFN in" + gated, "FFN out", "routed experts in" + gated,
                 "routed experts out"]
    names: list[str] = []
    flops: list[float] = []
    moved: list[float] = []
    shapes = layer_gemms(T, h, rec, t, etp, topk if moe else 1.0, ob, E / ep if moe else 1.0)
    for name, (m, n, k, w, share) in zip(names_all, shapes, strict=True):
        if float(share) * float(n) * float(k) > 0:
            names.append(name)
            flops.append(float(share * gemm_flops(m, n, k)))
            moved.append(float(share * gemm_bytes(m, n, k, ob, w, 2.0)))
    if float(rec["up_params"]) > 0:
        f_up, b_up = mla_up_projection(T, rec, t, ob)
        names.append("MLA up projections")
        flops.append(float(f_up))
        moved.append(float(b_up))
    core = float(rec["core"])
    if str(c.get("attention", "flash")) == "standard":
        names.append("attention core (unfused QKᵀ and AV)")  # its softmax and dropout: elementwise_ops
        flops.append(4.0 * b * s * s * core / t)
        moved.append(STANDARD_SCORE_GEMM_BYTES * b * (a / t) * s * s)
    else:
        keys = float(causal_keys(np.asarray(s), rec["window"], rec["full_frac"], K.CAUSAL_FRACTION, rec["chunk"]))
        names.append("attention core (flash)")
        flops.append(4.0 * b * (s / cp) * keys * core / t)
        moved.append(2.0 * (2.0 * b * (s / cp) * float(rec["q_width"]) / t + b * s * float(rec["kv_train"]) / t))
    names_ew, flops_ew, moved_ew = elementwise_ops(T, h, t, num("sp", 0.0) > 0, float(rec["n_mlp"]) == 3,
                                                   float(rec["ffn_dense"] + rec["moe_frac"] * topk * rec["ffn_moe"]),
                                                   precision, b * (a / t) * s * s
                                                   if str(c.get("attention", "flash")) == "standard" else 0.0)
    names += names_ew
    flops += flops_ew
    moved += moved_ew
    names.append("logits (last stage)")
    flops.append(float(gemm_flops(T, V / t, h)))
    moved.append(float(gemm_bytes(T, V / t, h, 2.0, 2.0, 2.0)))
    return pd.DataFrame({"name": names, "flops": flops, "bytes": moved})


#: FLOPs per element of the memory-bound kernels, counted from their formulas (they are only placed on the
#: roofline's x axis; the model times these kernels by their bytes): RMSNorm x·rsqrt(mean(x²) + ε)·g: square,
#: sum, scale, gain (4); LayerNorm adds the mean's subtraction, the variance's and the shift (7); bias-dropout-add
#: bias, mask, 1/(1−p) scale, residual (4); GELU's tanh form 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (8, tanh
#: counted as one); SwiGLU silu(g)·u = g·u/(1 + exp(−g)) (4); scale-mask-softmax: scale, mask, max, subtract,
#: exp, sum, divide (7) and dropout (2); fp8 cast-transpose: amax and scale (2).
#: Bytes per score element the unfused attention's two GEMMs move (QKᵀ writes the scores, AV reads the
#: probabilities: 2 + 2); the other 9 of ``STANDARD_ATTENTION_FWD_BYTES`` are the softmax's and dropout's.
STANDARD_SCORE_GEMM_BYTES = 4.0
ELEMENTWISE_FLOPS = {"rmsnorm": 4.0, "layernorm": 7.0, "bias_dropout_add": 4.0, "gelu": 8.0, "swiglu": 4.0,
                     "softmax_dropout": 9.0, "cast": 2.0}


def elementwise_ops(T: float, h: float, t: float, sp: bool, gated: bool, ffn_tok: float, precision: str,
                    scores: float) -> tuple[list[str], list[float], list[float]]:
    """The forward's memory-bound kernels of one layer on one GPU, as (names, FLOPs, bytes), with the bytes per
    element the training model charges (:mod:`dse.cost.constants`): norms (read 2, write 2) and bias-dropout-adds
    (7) over the residual stream's T·h/sp elements, the FFN activation (``ACTIVATION_FWD_BYTES_*``) over T·ffn/tp,
    the unfused score matrix's softmax and dropout (the 13 bytes of ``STANDARD_ATTENTION_FWD_BYTES`` less the 4
    its two GEMMs move) and fp8's cast-transposes (``LOW_PRECISION_CAST_BYTES``).  A gated (SwiGLU) model is taken
    to use RMSNorm (Llama, Qwen, Mistral, DeepSeek) and a GELU one LayerNorm (GPT-3, Megatron's GPT)."""
    resid = T * h / (t if sp and t > 1 else 1.0)
    act = T * ffn_tok / t
    norm = "rmsnorm" if gated else "layernorm"
    F = ELEMENTWISE_FLOPS
    names = [f"2 norms ({'RMSNorm' if gated else 'LayerNorm'})", "2 bias-dropout-adds",
             "FFN activation (" + ("SwiGLU" if gated else "GELU") + ")"]
    flops = [2.0 * F[norm] * resid, 2.0 * F["bias_dropout_add"] * resid, F["swiglu" if gated else "gelu"] * act]
    moved = [2.0 * 4.0 * resid, 2.0 * 7.0 * resid,
             (K.ACTIVATION_FWD_BYTES_SWIGLU if gated else K.ACTIVATION_FWD_BYTES_2MAT) * act]
    if scores > 0:
        names.append("scale-mask-softmax + dropout")
        flops.append(F["softmax_dropout"] * scores)
        moved.append((K.STANDARD_ATTENTION_FWD_BYTES - STANDARD_SCORE_GEMM_BYTES) * scores)
    if precision in ("fp8", "fp4"):
        names.append("cast-transposes (" + precision + ")")
        cast_elems = T * (2.0 * h + ffn_tok) / t
        flops.append(F["cast"] * cast_elems)
        moved.append((K.LOW_PRECISION_CAST_BYTES if precision == "fp8" else K.NVFP4_CAST_BYTES) * cast_elems)
    return names, flops, moved


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
