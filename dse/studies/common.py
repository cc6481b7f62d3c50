"""Machinery shared by the studies: layout grids and the best feasible layout per hardware variant."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dse.cost.training import TIME_BREAKDOWN, train_step
from dse.plots import (
    config_label,
)

#: Layout columns kept beside the best rows of a layout search.

LAYOUT: tuple[str, ...] = ("tp", "pp", "vpp", "dp", "cp", "ep", "micro_batch", "recompute", "zero", "precision")


# ---- shared machinery ------------------------------------------------------------------------------------------


def layout_grid(fixed: Mapping[str, Any], axes: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """Product grid of the ``axes`` values with the ``fixed`` columns added (one row per layout).

    ``dp`` is left out: :func:`dse.frame.train_inputs` derives it as ``gpus / (tp·pp·cp)`` and the kernel
    flags the layouts that do not divide, so they simply never win."""
    frame = pd.DataFrame(list(itertools.product(*axes.values())), columns=list(axes))
    for key, value in fixed.items():
        frame[key] = value
    return frame


def best_layouts(x: Mapping[str, np.ndarray], hw: Mapping[str, np.ndarray], allowed: np.ndarray | None = None,
                 tp_within_scaleup: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Best layout per hardware variant, in one call of :func:`dse.cost.training.train_step`.

    ``x`` holds the kernel inputs of n layouts (arrays of length n), ``hw`` the hardware columns of K variants
    (arrays of length K), ``allowed`` an optional (K, n) mask of the layouts a variant may use.  The n × K
    rows are built by tiling (layouts fastest); the result is the index (K,) of the layout of least step time
    among the allowed rows with reason 0 that fit in HBM (−1 where none does) and the kernel outputs as
    (K, n) arrays.  With ``tp_within_scaleup`` (the default, as the sweep specs' constraint of that name) a
    tensor-parallel group must fit in one scale-up domain (tp ≤ scaleup_gpus): Megatron practice, and the
    kernel's rail-optimised k·NIC bus bandwidth would otherwise make cross-node TP look nearly free."""
    n = len(next(iter(x.values())))
    k = len(next(iter(hw.values())))
    xs = {key: np.tile(np.asarray(v), k) for key, v in x.items()}
    hs = {key: np.repeat(np.asarray(v, dtype=np.float64), n) for key, v in hw.items()}
    res = train_step(xs, hs)
    out = {key: np.asarray(v).reshape(k, n) for key, v in res.items()}
    ok = (out["reason"] == 0) & out["fits"].astype(bool) & np.isfinite(out["step_time_s"])
    if allowed is not None:
        ok &= allowed
    if tp_within_scaleup:
        ok &= np.asarray(x["tp"])[None, :] <= np.asarray(hw["scaleup_gpus"], dtype=np.float64)[:, None]
    masked = np.where(ok, out["step_time_s"], np.inf)
    best = np.where(ok.any(axis=1), np.argmin(masked, axis=1), -1)
    return best, out


def _best_frame(layouts: pd.DataFrame, x: Mapping[str, np.ndarray], best: np.ndarray,
                out: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """One row per variant: the winning layout (with the resolved ``dp``), its step time, throughput,
    memory and step-time breakdown (NaN where no layout was feasible)."""
    k = len(best)
    idx = np.maximum(best, 0)
    found = best >= 0
    rows = pd.DataFrame({col: layouts[col].to_numpy()[idx] for col in LAYOUT if col in layouts.columns})
    rows["dp"] = np.asarray(x["dp"])[idx].astype(np.int64)
    for col in ("cp", "ep", "zero"):
        if col not in rows:
            rows[col] = np.asarray(x[col])[idx].astype(np.int64)
    metrics = ("step_time_s", "tokens_per_s_per_gpu", "mem_total_bytes", *TIME_BREAKDOWN)
    for col in metrics:
        rows[col] = np.where(found, out[col][np.arange(k), idx], np.nan)
    rows["layout"] = np.where(found, config_label(rows).to_numpy(), "no feasible layout")
    return rows
