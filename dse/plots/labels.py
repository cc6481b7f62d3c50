"""Column labels, units and row descriptions shared by the plot data and the drawings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter

from dse.explain import MEMORY_LABELS, TIME_LABELS
from dse.info import HIGH_IS_BETTER

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
    "time_host_s": "MoE host launches",
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
    "mem_step_extra_bytes": "optimizer-step temporaries",
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
    "running_requests": ("requests running", "", 1.0),
    "queue_wait_s": ("queue wait", "s", 1.0),
    "concurrency": ("clients (closed loop)", "", 1.0),
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
