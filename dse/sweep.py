"""Evaluate a range of grid points into a typed Arrow table (one Parquet part of a sweep).

Columns: ``point`` (the global grid index), one per input of the model (categoricals dictionary-encoded,
counts as integers), one per output (float32: the kernel computes in float32, so nothing is lost), ``fits``
and ``infeasible_reason``.  Rows removed by the spec's constraints are not written; rows the model rejects
are written with their reason unless ``feasible_only``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from dse import codes
from dse.cost.inference import INFER_INPUTS, INFER_METRICS, infer_step, routing_skew
from dse.cost.select import INT_DOMAIN_MAX
from dse.cost.serving import LIMITS, SERVE_INPUTS, SERVE_METRICS, serve_step
from dse.cost.training import DTYPE, TRAIN_INPUTS, TRAIN_METRICS, train_step
from dse.defaults import CATEGORICAL, fill_defaults
from dse.grid import Grid
from dse.hardware import catalog as hwcat
from dse.hardware.derive import DERIVE_AXES, base_technology, derived_hardware_columns
from dse.spec import MODEL_KEYS, TECH_CAT_AXES, Spec, tech_vocabulary
from dse.stacks import (
    WHEN_UNEVEN_CODE,
    WHEN_VPP_CODE,
    embedding_loss_where_uneven,
    fill_serving_settings,
    knob_tables,
    stack_names,
    zero_stage_index,
)

#: Input columns written per row (after ``point``), in this order.
INPUT_COLUMNS = ("model", "system", "gpus", "tp", "pp", "dp", "cp", "ep", "etp", "vpp", "sp", "micro_batch",
                 "global_batch", "seq_len", "recompute", "zero", "precision", "attention", "tp_overlap",
                 "dp_overlap", "pp_overlap", "finetune", "lora_rank", "lora_targets", "offload", "zero3_fetch",
                 "pipeline_split", "layers_first_stage", "layers_last_stage", "doc_len", "kernels", "optimizer",
                 "memory_report", "adapter_precision", "dp_reduce", "zero3_collectives", "zero_with_pp", "cp_exchange",
                 "moe_gemm", "ep_dispatch", "ep_overlap", "cross_entropy", "moe_imbalance", "stack")
INFER_INPUT_COLUMNS = ("model", "system", "gpus", "tp", "pp", "dp", "batch", "input_len", "output_len",
                       "precision", "kv_precision", "moe_imbalance")
SMALL_INT_COLUMNS = ("sp", "zero", "dp_overlap", "pp_overlap")
CATEGORY_COLUMNS = {**CATEGORICAL, "kv_precision": codes.KV_PRECISION, "stack": stack_names(),
                    "decode_kv_reads": codes.DECODE_KV_READS, "arrival": codes.ARRIVAL,
                    "spec_method": codes.SPEC_METHOD}
SERVE_INPUT_COLUMNS = ("model", "system", "gpus", "tp", "pp", "dp", "batch", "input_len", "output_len",
                       "max_num_tokens", "request_rate", "precision", "kv_precision", "decode_kv_reads",
                       "prefill_gpus", "prefill_tp", "concurrency", "think_time_s", "arrival", "ep", "spec_tokens",
                       "spec_acceptance", "spec_method", "moe_imbalance", "stack")
FLOAT_INPUT_COLUMNS = ("request_rate", "moe_imbalance", "think_time_s", "spec_acceptance")


def tech_columns(spec: Spec) -> tuple[str, ...]:
    """Technology axes the spec sweeps (their columns are written after the inputs)."""
    present = {a.name for g in spec.grids for a in g.axes}
    return tuple(k for k in DERIVE_AXES if k in present)


#: Cost of a token at the spec's price_per_gpu_hour (NaN when the spec gives no price for the system).
COST_COLUMN = "cost_per_million_tokens_usd"


def task_columns(spec: Spec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(input columns, metric columns) of a sweep's rows."""
    if spec.task == "serve":
        return (*SERVE_INPUT_COLUMNS, *tech_columns(spec)), (*SERVE_METRICS, COST_COLUMN)
    if spec.task == "infer":
        return (*INFER_INPUT_COLUMNS, *tech_columns(spec)), (*INFER_METRICS, COST_COLUMN)
    return (*INPUT_COLUMNS, *tech_columns(spec)), (*TRAIN_METRICS, COST_COLUMN)


def cost_per_million_tokens(spec: Spec, systems: np.ndarray, x: dict[str, np.ndarray],
                            out: dict[str, np.ndarray]) -> np.ndarray:
    """USD per million tokens: price · gpus · time / 3600 / tokens · 10⁶ — tokens trained per step, or output
    tokens generated per batch (inference)."""
    if not len(spec.prices) or np.isnan(spec.prices).all():
        return np.full(len(systems), np.nan, dtype=DTYPE)  # no price: no cost
    price = spec.prices[systems]
    if spec.task == "serve":  # per million output tokens at the steady-state throughput
        return price * x["gpus"] / 3600.0 / out["output_tokens_per_s"] * 1e6
    if spec.task == "infer":
        hours, tokens = out["e2e_latency_s"] / 3600.0, x["dp"] * x["batch"] * x["output_len"]
    else:
        hours, tokens = out["step_time_s"] / 3600.0, x["global_batch"] * x["seq_len"]
    return price * x["gpus"] * hours / tokens * 1e6
#: Reasons that mean "does not divide" (dropped by ``constraints.divisible``).  exceeds_hbm and overloaded are
#: not: such a configuration divides, and its row is an answer (it needs more memory than the GPU has, or is
#: offered more requests than it serves), written with its reason as ``dse explain`` shows it.
DIVISIBILITY_REASONS = frozenset(i for i, r in enumerate(codes.REASONS) if r not in ("", "exceeds_hbm",
                                                                                    "overloaded"))
#: Rows evaluated per kernel call (bounded memory whatever the part size), chosen by ``make bench``'s tile
#: comparison (record ``train_tiles``): smaller tiles keep the float32 temporaries in L2 but pay the kernel's
#: ~1,000 numpy calls more often.  On the 2-core benchmark machine the training kernel's rate on configurations
#: that all divide peaks from 16,384 to 32,768 rows and falls beyond (65,536: about 12 % slower, 262,144: about
#: 30 %); the serving and inference kernels are flat from 32,768 up.  32,768 rows (128 KiB per array).
KERNEL_BATCH = 32768


def schema(spec: Spec) -> pa.Schema:
    """Arrow schema of a sweep's parts (fixed by the spec, so every part has the same)."""
    inputs, metrics = task_columns(spec)
    fields = [pa.field("point", pa.int64())]
    for col in inputs:
        if col in ("model", "system") or col in CATEGORY_COLUMNS or col in TECH_CAT_AXES:
            fields.append(pa.field(col, pa.dictionary(pa.int16(), pa.string())))
        elif col in SMALL_INT_COLUMNS:
            fields.append(pa.field(col, pa.int8()))
        elif col in FLOAT_INPUT_COLUMNS:
            fields.append(pa.field(col, pa.float32()))
        else:
            fields.append(pa.field(col, pa.int32()))
    fields += [pa.field(m, pa.float32()) for m in metrics]
    if spec.task == "serve":
        fields.append(pa.field("limit", pa.dictionary(pa.int8(), pa.string())))
    fields += [pa.field("fits", pa.bool_()), pa.field("infeasible_reason", pa.dictionary(pa.int8(), pa.string()))]
    return pa.schema(fields)


def kernel_inputs(spec: Spec, cols: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Decoded grid columns → kernel inputs (model dimensions looked up, defaults filled) and system codes."""
    n = len(cols["point"])
    model = cols["model"].astype(np.int64)
    x: dict[str, np.ndarray] = {k: spec.model_table[k].astype(DTYPE)[model] for k in MODEL_KEYS}
    names = SERVE_INPUTS if spec.task == "serve" else INFER_INPUTS if spec.task == "infer" else TRAIN_INPUTS
    for key in names:
        if key in x:
            continue
        x[key] = cols[key].copy() if key in cols else np.full(n, np.nan, dtype=DTYPE)
    if spec.task == "serve":
        for key, default in (("tp", 1.0), ("pp", 1.0), ("dp", 1.0), ("kv_precision", float(codes.KV_AUTO)),
                             ("precision", float(codes.PRECISION_BF16)), ("ep", 1.0), ("spec_tokens", 0.0)):
            x[key] = np.where(np.isnan(x[key]), default, x[key]).astype(DTYPE)
        x["gpus"] = (x["tp"] * x["pp"] * x["dp"] + np.nan_to_num(x["prefill_gpus"])).astype(DTYPE)
        x["stack"] = cols["stack"] if "stack" in cols else np.full(n, np.nan, dtype=DTYPE)
        fill_serving_settings(x, x["stack"])
    elif spec.task == "infer":
        for key, default in (("tp", 1.0), ("pp", 1.0), ("dp", 1.0), ("kv_precision", float(codes.KV_AUTO)),
                             ("precision", float(codes.PRECISION_BF16))):
            x[key] = np.where(np.isnan(x[key]), default, x[key]).astype(DTYPE)
        x["gpus"] = (x["tp"] * x["pp"] * x["dp"]).astype(DTYPE)
    else:
        x["stack"] = cols["stack"] if "stack" in cols else np.full(n, np.nan, dtype=DTYPE)
        if "stack" in cols:
            _fill_from_stack(x, cols["stack"])
        fill_defaults(x)
    return x, cols["system"].astype(np.int64)


def _fill_from_stack(x: dict[str, np.ndarray], stack: np.ndarray) -> None:
    """Knobs a point leaves empty (NaN) take its stack's profile value (:func:`dse.stacks.knob_tables`),
    gathered by stack code; a point without a stack keeps NaN (the model's default)."""
    tables = knob_tables(stack_names())
    has = ~np.isnan(stack)
    code = np.where(has, stack, 0).astype(np.int64)
    if "zero" in tables:  # the stage first: other settings may depend on it (one value per ZeRO stage)
        tables = {"zero": tables["zero"], **tables}
    for key, table in tables.items():
        if key not in x:
            continue
        stage = zero_stage_index(x["zero"])
        value = np.where(has, table[code, stage], np.nan)
        value = np.where(value == WHEN_VPP_CODE, (x["vpp"] > 1).astype(np.float64), value)
        if (value == WHEN_UNEVEN_CODE).any():
            uneven = embedding_loss_where_uneven(x["layers"], x["pp"], x["vpp"])
            value = np.where(value == WHEN_UNEVEN_CODE, np.where(uneven, float(codes.PIPELINE_SPLIT_EMBEDDING_LOSS),
                                                                 float(codes.PIPELINE_SPLIT.index("even"))), value)
        x[key] = np.where(np.isnan(x[key]), value, x[key]).astype(x[key].dtype)


def _derived_runs(systems: np.ndarray, techs: dict[str, np.ndarray],
                  calibration: tuple[tuple[str, str, float], ...]) -> dict[str, np.ndarray]:
    """Derived hardware columns, computed once per run of equal (system, technology) rows and repeated: the
    technology axes vary slowly in grid order, so a batch holds a few runs (same values as row by row)."""
    n = len(systems)
    stack = np.column_stack([systems.astype(np.float64), *(np.nan_to_num(v, nan=-1.0) for v in techs.values())])
    starts = np.r_[0, np.flatnonzero(np.any(stack[1:] != stack[:-1], axis=1)) + 1] if n else np.zeros(0, int)
    if len(starts) > n // 4:  # little to gain: compute row by row
        return derived_hardware_columns(systems, techs, dtype=DTYPE, efficiency=calibration)
    lengths = np.diff(np.r_[starts, n])
    hw = derived_hardware_columns(systems[starts], {k: v[starts] for k, v in techs.items()}, dtype=DTYPE,
                                  efficiency=calibration)
    return {k: np.repeat(v, lengths) for k, v in hw.items()}


def evaluate_points(spec: Spec, grid: Grid, start: int, stop: int, feasible_only: bool = False) -> pa.Table:
    """Evaluate grid points [start, stop) into a table with :func:`schema`."""
    tables = [_evaluate_batch(spec, grid, lo, min(lo + KERNEL_BATCH, stop), feasible_only)
              for lo in range(start, stop, KERNEL_BATCH)]
    if not tables:
        return schema(spec).empty_table()
    return pa.concat_tables(tables)


def _kernel_columns(spec: Spec, grid: Grid, start: int, stop: int
                    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """Grid columns, kernel inputs, hardware columns and system codes of the points [start, stop)."""
    cols = grid.decode(start, stop, dtype=DTYPE)
    x, systems = kernel_inputs(spec, cols)
    techs = tech_columns(spec)
    if techs:
        hw = _derived_runs(systems, {k: cols[k].astype(np.float64) for k in techs}, spec.calibration)
        base = base_technology()
        for k in techs:  # carried to the table (not kernel inputs): the value used, the base's where not swept
            fallback = base[k][systems] if k in base else np.full(len(systems), np.nan)
            x[k] = np.where(np.isnan(cols[k]), fallback, cols[k])
    else:
        hw = hwcat.hardware_columns(systems, {(g, c): v for g, c, v in spec.calibration}, dtype=DTYPE)
    return cols, x, hw, systems


def _step(spec: Spec, x: dict[str, np.ndarray], hw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if spec.task == "serve":
        return serve_step(x, hw, out_dtype=DTYPE)
    return infer_step(x, hw, out_dtype=DTYPE) if spec.task == "infer" else train_step(x, hw, out_dtype=DTYPE)


def reasons_before_constraints(spec: Spec, grid: Grid, ranges: list[tuple[int, int]]) -> str:
    """What the model says of the points in ``ranges`` before any constraint, as text for a message: the count
    of each infeasible reason (and of the points the model answers), and for overloaded serving points the
    request rates offered and the most any of them serves (its capacity, at maximum load)."""
    counts = np.zeros(len(codes.REASONS), dtype=np.int64)
    offered, capacity = [np.inf, -np.inf], 0.0
    over_code = codes.REASON_CODE["overloaded"]
    for start, stop in ranges:
        for lo in range(start, stop, KERNEL_BATCH):
            _, x, hw, _ = _kernel_columns(spec, grid, lo, min(lo + KERNEL_BATCH, stop))
            reason = _step(spec, x, hw)["reason"]
            counts += np.bincount(reason, minlength=len(codes.REASONS))
            over = np.flatnonzero(reason == over_code)
            if spec.task == "serve" and over.size:
                rate = x["request_rate"][over]
                offered = [min(offered[0], float(rate.min())), max(offered[1], float(rate.max()))]
                at_max_load = {**{k: v[over] for k, v in x.items()}, "request_rate": np.full(over.size, np.nan)}
                served = _step(spec, at_max_load, {k: v[over] for k, v in hw.items()})["requests_per_s"]
                capacity = max(capacity, float(np.nanmax(served, initial=0.0)))
    parts = [f"{'answered' if not r else r} {n:,}" for r, n in zip(codes.REASONS, counts.tolist(), strict=True) if n]
    if counts[over_code]:
        lo_hi = f"{offered[0]:,g}" + (f" to {offered[1]:,g}" if offered[1] > offered[0] else "")
        i = [r for r, n in zip(codes.REASONS, counts.tolist(), strict=True) if n].index("overloaded")
        parts[i] += (f" (offered {lo_hi} requests/s; the most any of them serves, at maximum load, is "
                     f"{capacity:,.3g} requests/s)")
    return ", ".join(parts)


def _evaluate_batch(spec: Spec, grid: Grid, start: int, stop: int, feasible_only: bool) -> pa.Table:
    cols, x, hw, systems = _kernel_columns(spec, grid, start, stop)
    keep = np.ones(len(systems), dtype=bool)
    if spec.tp_within_scaleup:
        keep &= x["tp"] <= hw["scaleup_gpus"]
    view = {**x, "model": cols["model"], "system": cols["system"]}
    for f in spec.filters:
        if not f.uses_outputs:
            keep &= f.evaluate(view)
    idx = np.flatnonzero(keep)
    if idx.size < keep.size:
        x = {k: v[idx] for k, v in x.items()}
        hw = {k: v[idx] for k, v in hw.items()}
        systems, points, model = systems[idx], cols["point"][idx], cols["model"][idx]
    else:
        points, model = cols["point"], cols["model"]
    out = _step(spec, x, hw)
    out[COST_COLUMN] = cost_per_million_tokens(spec, systems, x, out)
    if spec.task in ("serve", "infer"):  # written as used: the GPU's measured skew where empty, none for dense models
        x = {**x, "moe_imbalance": np.where(x["experts"] > 1, routing_skew({**x, **hw}), np.nan).astype(DTYPE)}
    keep = np.ones(len(points), dtype=bool)
    reason = out["reason"]
    if spec.divisible:
        keep &= ~np.isin(reason, list(DIVISIBILITY_REASONS))
    if feasible_only:
        keep &= reason == 0
    if any(f.uses_outputs for f in spec.filters):
        view = {**x, **out, "model": model, "system": systems.astype(np.float64)}
        for f in spec.filters:
            if f.uses_outputs:
                keep &= f.evaluate(view)
    if keep.all():
        return _table(spec, points, model, systems, x, out)
    idx = np.flatnonzero(keep)
    return _table(spec, points[idx], model[idx], systems[idx], {k: v[idx] for k, v in x.items()},
                  {k: v[idx] for k, v in out.items()})


def parquet_options(spec: Spec) -> dict[str, object]:
    """Writer options: dictionary encoding only where values repeat (categoricals), statistics on the inputs
    (for predicate push-down when reading), zstd.  Dictionary-encoding the float metrics costs more than the
    whole evaluation and buys nothing."""
    sch = schema(spec)
    dictionary = [f.name for f in sch if pa.types.is_dictionary(f.type)]
    statistics = [f.name for f in sch if f.name not in task_columns(spec)[1]]
    return {"compression": "zstd", "compression_level": 1, "use_dictionary": dictionary,
            "write_statistics": statistics}


def _dictionary(codes_: np.ndarray, labels: tuple[str, ...], index_type: pa.DataType) -> pa.DictionaryArray:
    missing = np.isnan(codes_) if codes_.dtype.kind == "f" else np.zeros(len(codes_), dtype=bool)
    indices = np.where(missing, 0, codes_).astype(index_type.to_pandas_dtype())
    return pa.DictionaryArray.from_arrays(pa.array(indices, type=index_type, mask=missing if missing.any() else None),
                                          pa.array(list(labels), type=pa.string()))


def _integer_array(values: np.ndarray, type_: pa.DataType) -> pa.Array:
    """An integer column; a value outside the exact-integer domain (only sizes the kernel derives, e.g.
    gpus = tp·pp·cp·dp, can be: inputs are checked at the edge) is written as null, never wrapped or rounded
    (its row carries the reason "size above 16777215 (exact-integer domain)")."""
    outside = ~((values >= 0) & (values <= INT_DOMAIN_MAX))
    if not outside.any():
        return pa.array(values.astype(type_.to_pandas_dtype()))
    clean = np.where(outside, 0, values).astype(type_.to_pandas_dtype())
    return pa.array(clean, type=type_, mask=outside)


def _table(spec: Spec, points: np.ndarray, model: np.ndarray, systems: np.ndarray, x: dict[str, np.ndarray],
           out: dict[str, np.ndarray]) -> pa.Table:
    sch = schema(spec)
    inputs, metrics = task_columns(spec)
    arrays: list[pa.Array] = [pa.array(points, type=pa.int64())]
    for col in inputs:
        if col == "model":
            arrays.append(_dictionary(model, spec.model_names, pa.int16()))
        elif col == "system":
            arrays.append(_dictionary(systems, hwcat.system_names(), pa.int16()))
        elif col in CATEGORY_COLUMNS:
            arrays.append(_dictionary(x[col], CATEGORY_COLUMNS[col], pa.int16()))
        elif col in TECH_CAT_AXES:
            arrays.append(_dictionary(x[col], tech_vocabulary(col), pa.int16()))
        elif col in FLOAT_INPUT_COLUMNS:
            arrays.append(pa.array(x[col].astype(np.float32), mask=np.isnan(x[col])))
        else:
            arrays.append(_integer_array(x[col], sch.field(col).type))
    for m in metrics:
        arrays.append(pa.array(out[m].astype(np.float32)))
    if spec.task == "serve":
        limit = out["limit"].astype(np.float64)
        arrays.append(_dictionary(np.where(limit < 0, np.nan, limit), LIMITS, pa.int8()))
    arrays.append(pa.array(out["fits"]))
    arrays.append(_dictionary(out["reason"], codes.REASONS, pa.int8()))
    return pa.Table.from_arrays(arrays, schema=sch)
