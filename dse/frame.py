"""The edge between tables and kernels: check a configuration table, fill documented defaults, encode
categorical columns, gather hardware columns, and add the model's outputs.

Tables use the columns of README.md, section 'Case files' (read by name, never by position) plus a few
optional knobs of this model (:data:`OPTIONAL_KNOBS`).  Empty cells take the defaults in
:data:`DEFAULTS_DOC`.  Every check names the row, the column, the bad value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from dse import codes
from dse.cost.inference import INFER_METRICS, infer_step
from dse.cost.select import INT_DOMAIN_MAX
from dse.cost.training import TRAIN_METRICS, train_step
from dse.defaults import CATEGORICAL, CATEGORICAL_DEFAULTS, DEFAULTS_DOC, fill_defaults  # noqa: F401 (re-export)
from dse.hardware import catalog as hwcat
from dse.models.catalog import models as model_catalog
from dse.stacks import apply_stack, stack_names

DIMENSION_COLUMNS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "experts", "top_k")
PARALLEL_COLUMNS = ("gpus", "tp", "pp", "dp", "cp", "ep", "vpp")
TRAIN_COLUMNS = ("sp", "micro_batch", "global_batch", "seq_len", "recompute", "zero", "precision")
#: Knobs of this model that the reference schema does not have; a table may add them as columns.
OPTIONAL_KNOBS = ("attention", "tp_overlap", "dp_overlap", "pp_overlap", "tied_embeddings", "lora_targets", "offload",
                  "decode_kv_reads", "prefill_gpus", "prefill_tp",
                  "zero3_fetch", "pipeline_split", "layers_first_stage", "layers_last_stage", "doc_len")

#: Integer columns: (minimum allowed value).
INTEGER_MIN: dict[str, int] = {
    "layers": 1, "hidden": 1, "heads": 1, "kv_heads": 1, "ffn_hidden": 1, "vocab": 1, "experts": 1,
    "top_k": 1, "gpus": 1, "tp": 1, "pp": 1, "dp": 1, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": 1,
    "global_batch": 1, "seq_len": 1, "sp": 0, "zero": 0, "dp_overlap": 0, "pp_overlap": 0,
    "tied_embeddings": 0, "batch": 1, "input_len": 1, "output_len": 0, "lora_rank": 1, "max_num_tokens": 1,
    "layers_first_stage": 0, "layers_last_stage": 0, "prefill_gpus": 1, "prefill_tp": 1, "doc_len": 1,
}
INTEGER_MAX: dict[str, int] = {"sp": 1, "zero": 3, "dp_overlap": 1, "pp_overlap": 1, "tied_embeddings": 1}
#: Every other integer column: at most INT_DOMAIN_MAX (2^24 − 1, the float32 kernels' exact range; see
#: :data:`dse.cost.select.INT_DOMAIN_MAX`).

class InputError(ValueError):
    """Bad input table: the message names the source, the row, the column, the value and what is allowed."""


#: Largest YAML input read (configurations, assumptions, calibrations are a few kB): checked before parsing.
MAX_YAML_BYTES = 1024 * 1024


def read_yaml(path: str | Path, what: str) -> object:
    """The parsed content of a user's YAML file (``what`` it should hold goes into the message); InputError
    naming the file when it is missing, unreadable or not YAML."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_YAML_BYTES:
            raise InputError(f"{p}: {size:,} bytes; allowed: a YAML file of at most {MAX_YAML_BYTES:,} bytes ({what})")
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"{p}: no such file") from exc
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{p}: not valid YAML ({what}): {' '.join(str(exc).split())}") from exc


def show(value: object) -> str:
    """A cell for a message: numpy scalars as plain Python values (``16777217``, not ``np.int64(16777217)``)."""
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)


def _where(source: str, frame: pd.DataFrame, pos: int) -> str:
    if frame.attrs.get("single_configuration"):
        return source
    row = frame.index[pos]
    case = ""
    if "case" in frame.columns and isinstance(frame["case"].iloc[pos], str):
        case = f" (case {frame['case'].iloc[pos]!r})"
    if source == "<frame>":  # a DataFrame: its index label, not a file line
        line = f"row index {show(row)}"
    else:
        line = f"row {row + 2}" if isinstance(row, (int, np.integer)) else f"row {row!r}"
    return f"{source}: {line}{case}"


def _arrow_text(series: pd.Series) -> pa.Array | pa.ChunkedArray | None:
    """The cells as Arrow strings (null where NaN or None), converted without a Python step per cell and
    without a copy for Arrow-backed text (a CSV read by Arrow stays in its chunks); None when they are not all
    text (numbers, mixed objects)."""
    if series.dtype.kind in "iufb":
        return None
    try:
        arr = pa.array(series, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        return None
    if pa.types.is_null(arr.type):  # every cell NaN or None
        return arr.cast(pa.string())
    return arr if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) else None


def _numpy(arr: pa.Array | pa.ChunkedArray, dtype: Any) -> np.ndarray:
    """An Arrow array or chunked array as one numpy array of ``dtype`` (nulls as NaN for floats)."""
    values = arr.to_numpy() if isinstance(arr, pa.ChunkedArray) else arr.to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=dtype)


def _blank(series: pd.Series) -> np.ndarray:
    """True where a cell is empty (NaN, None or whitespace), vectorized: numeric columns by isnan, text by
    Arrow's whitespace trim (no Python step per cell)."""
    if not len(series):
        return np.zeros(0, dtype=bool)
    kind = series.dtype.kind
    if kind in "iub" and isinstance(series.dtype, np.dtype):  # numpy integers and booleans have no empty cell
        return np.zeros(len(series), dtype=bool)
    if kind in "iufb":  # floats (NaN) and nullable or Arrow-backed numbers (<NA>)
        return np.asarray(series.isna().to_numpy(), dtype=bool)
    text = _arrow_text(series)
    if text is not None:
        empty = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(text)), 0)
        return _numpy(pc.fill_null(empty, True), bool)
    na = series.isna().to_numpy()
    mixed = series.where(~na, "").astype(str).astype("string[pyarrow]")  # e.g. numbers and text in one column
    return na | (mixed.str.strip() == "").to_numpy(dtype=bool, na_value=True)


def _to_float(raw: pd.Series, blank: np.ndarray) -> np.ndarray:
    """Cells as float64 (NaN where blank or not a number): numeric columns as they are, text parsed by Arrow's
    vectorized cast (pandas' per-cell parser only when a cell does not parse, to find it)."""
    if raw.dtype.kind in "iufb":
        return raw.to_numpy(dtype=np.float64, na_value=np.nan)
    text = _arrow_text(raw)
    if text is not None:
        trimmed = pc.utf8_trim_whitespace(text)
        try:
            cells = pc.if_else(pa.array(blank), pa.scalar(None, trimmed.type), trimmed)
            return _numpy(pc.cast(cells, pa.float64()), np.float64)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
    return pd.to_numeric(raw.where(~blank, np.nan), errors="coerce").to_numpy(dtype=np.float64)


def _lower_names(raw: pd.Series, blank: np.ndarray, default: str) -> pd.Series:
    """Cells as stripped lower-case names (``default`` where blank), vectorized through Arrow strings."""
    text = _arrow_text(raw)
    if text is not None:
        names = pc.utf8_lower(pc.utf8_trim_whitespace(text)).cast(pa.string())
        names = pc.if_else(pa.array(blank), pa.scalar(default, pa.string()), names)
        return pd.Series(_numpy(names, object), index=raw.index, dtype=object)
    mixed = raw.astype(object).where(~blank, default).astype(str).astype("string[pyarrow]")
    return mixed.str.strip().str.lower().astype(object)


def _integers(frame: pd.DataFrame, col: str, source: str) -> np.ndarray:
    """Column as float64 with NaN for empty cells (all NaN when ``frame`` has no such column); raises
    InputError on a non-integer or out-of-range value."""
    if col not in frame.columns:
        return np.full(len(frame), np.nan)
    raw = frame[col]
    blank = _blank(raw)
    vals = _to_float(raw, blank)
    lo, hi = INTEGER_MIN.get(col, 0), INTEGER_MAX.get(col, INT_DOMAIN_MAX)
    with np.errstate(invalid="ignore"):
        bad = ~blank & ~((np.fmod(vals, 1.0) == 0) & (vals >= lo) & (vals <= hi))  # NaN (not a number) fails
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        allowed = (f"an integer >= {lo} and <= {hi:,} (2^24 - 1: sizes are computed exactly up to there)"
                   if hi == INT_DOMAIN_MAX else f"an integer in {lo}..{hi}")
        raise InputError(f"{_where(source, frame, pos)}, column {col!r}: value {show(raw.iloc[pos])} is not "
                         f"allowed; allowed: {allowed} (or empty for the default)")
    return vals


def _required_integers(frame: pd.DataFrame, col: str, source: str, task: str = "") -> np.ndarray:
    """:func:`_integers` of a column every row must fill (InputError naming the first empty cell)."""
    vals = _integers(frame, col, source)
    if np.isnan(vals).any():
        pos = int(np.flatnonzero(np.isnan(vals))[0])
        raise InputError(f"{_where(source, frame, pos)}, column {col!r}: empty, but a value is required"
                         + (f" for task {task!r}" if task else ""))
    return vals


def _categorical(frame: pd.DataFrame, col: str, source: str) -> np.ndarray:
    """Codes of a categorical column as float64, NaN for empty cells (filled by :func:`fill_defaults`; all NaN
    when ``frame`` has no such column)."""
    if col not in frame.columns:
        return np.full(len(frame), np.nan)
    raw = frame[col]
    blank = _blank(raw)
    default = CATEGORICAL_DEFAULTS[col]
    names = _lower_names(raw, blank, default)
    allowed = CATEGORICAL[col]
    ok = names.isin(allowed).to_numpy()
    if not ok.all():
        pos = int(np.flatnonzero(~ok)[0])
        raise InputError(f"{_where(source, frame, pos)}, column {col!r}: value {show(raw.iloc[pos])} is not allowed; "
                         f"allowed: {', '.join(allowed)} (or empty for the default {default!r})")
    out = codes.encode(names.to_numpy(), allowed, key=col).astype(np.float64)
    out[blank] = np.nan
    return out


def _fill_dimensions_from_catalog(frame: pd.DataFrame, source: str = "<frame>") -> pd.DataFrame:
    """Where a row names a catalogued model and leaves dimension columns out or empty, take the catalog's."""
    if "model" not in frame.columns:
        return frame
    cat = model_catalog()
    names = frame["model"].astype(str).str.strip().str.lower()
    known = names.isin(cat.index).to_numpy()
    missing = np.zeros(len(frame), dtype=bool)
    for col in ("layers", "hidden", "heads", "vocab"):
        missing |= _blank(frame[col]) if col in frame.columns else True
    unknown = ~known & missing
    if unknown.any():
        pos = int(np.flatnonzero(unknown)[0])
        raise InputError(f"{_where(source, frame, pos)}, column 'model': value {show(frame['model'].iloc[pos])} is "
                         f"not a catalogued model, and the row does not give its dimensions (layers, hidden, heads, "
                         f"vocab); allowed: {', '.join(cat.index)} (see `dse models`), or any label with the "
                         "dimension columns filled")
    if not known.any():
        return frame
    frame = frame.copy()
    rows = cat.reindex(names.to_numpy())  # the catalog row of each row's model (NaN where not catalogued)
    for col in DIMENSION_COLUMNS:
        values = rows[col].to_numpy()
        if col not in frame.columns:
            frame[col] = pd.Series(values, index=frame.index, dtype=object).where(known, None)
        else:
            blank = _blank(frame[col])
            frame[col] = frame[col].astype(object).where(~(blank & known), pd.Series(values, index=frame.index))
    return frame


def check_configuration_cells(frame: pd.DataFrame, source: str) -> None:
    """Check the cells every row may carry, whatever its task: integer columns, categorical columns and the
    system name.  Raises :class:`InputError` naming the row and column of the first bad cell."""
    for col in INTEGER_MIN:
        if col in frame.columns:
            _integers(frame, col, source)
    for col in CATEGORICAL:
        if col in frame.columns:
            _categorical(frame, col, source)
    if "request_rate" in frame.columns:
        raw = frame["request_rate"]
        blank = _blank(raw)
        rate = pd.to_numeric(raw.where(~blank, np.nan), errors="coerce").to_numpy(dtype=np.float64)
        bad = ~blank & ~(np.isfinite(rate) & (rate > 0))
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise InputError(f"{_where(source, frame, pos)}, column 'request_rate': value {show(raw.iloc[pos])} is not "
                             "allowed; allowed: a positive finite number of requests/s (or empty for offline, "
                             "maximum load)")
    check_stack(frame, source)
    if "system" in frame.columns:
        system = frame["system"]
        blank = _blank(system)
        names = system.astype(object).where(~blank, "").astype(str).str.strip().str.lower()
        known = (names.isin(hwcat.system_names()) | blank).to_numpy()
        if not known.all():
            pos = int(np.flatnonzero(~known)[0])
            raise InputError(f"{_where(source, frame, pos)}, column 'system': value {show(system.iloc[pos])} is not a "
                             f"catalogued system; allowed: {', '.join(hwcat.system_names())}")


def check_stack(frame: pd.DataFrame, source: str) -> None:
    """Every non-empty ``stack`` cell names a known stack (InputError listing them otherwise)."""
    if "stack" not in frame.columns:
        return
    raw = frame["stack"]
    blank = _blank(raw)
    names = _lower_names(raw, blank, "")
    ok = (names.isin(stack_names()) | blank).to_numpy()
    if not ok.all():
        pos = int(np.flatnonzero(~ok)[0])
        raise InputError(f"{_where(source, frame, pos)}, column 'stack': value {show(raw.iloc[pos])} is not a known "
                         f"stack; allowed: {', '.join(stack_names())} (or empty for the current Megatron-core / "
                         "NeMo defaults)")


def tied_embeddings_default(frame: pd.DataFrame, dims: Mapping[str, np.ndarray]) -> np.ndarray:
    """Catalog value of ``tied_embeddings`` for rows whose ``model`` is catalogued with the same dimensions."""
    n = len(frame)
    out = np.zeros(n, dtype=np.float64)
    if "model" not in frame.columns:
        return out
    cat = model_catalog()
    names = frame["model"].astype(str).str.strip().str.lower().to_numpy()
    rows = cat.reindex(names)
    same = np.array(rows["layers"].notna().to_numpy(), dtype=bool)
    for col in ("layers", "hidden", "heads", "vocab"):
        same &= rows[col].to_numpy(dtype=np.float64) == dims[col]
    out[same] = rows["tied_embeddings"].to_numpy(dtype=np.float64)[same]
    return out


def train_inputs(frame: pd.DataFrame, source: str = "<frame>") -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Checked, default-filled kernel inputs of a training table, and the system codes.

    Raises :class:`InputError` naming the row and column of the first bad cell.
    """
    frame = _fill_dimensions_from_catalog(frame, source)
    check_stack(frame, source)
    frame, _ = apply_stack(frame, record=False)  # the stack's profile fills the knobs the row leaves empty
    for col in ("layers", "hidden", "heads", "vocab", "system", "tp", "pp", "seq_len", "global_batch"):
        if col not in frame.columns:
            raise InputError(f"{source}: missing column {col!r} (required; see README.md, section 'Case files')")
    if "dp" not in frame.columns and "gpus" not in frame.columns:
        raise InputError(f"{source}: missing column 'dp' or 'gpus' (one of them is required)")
    x: dict[str, np.ndarray] = {}
    for name in ("layers", "hidden", "heads", "vocab", "tp", "pp", "seq_len", "global_batch"):
        x[name] = _required_integers(frame, name, source)
    ints = {k: _integers(frame, k, source) for k in (
        "kv_heads", "ffn_hidden", "experts", "top_k", "cp", "ep", "vpp", "micro_batch", "sp", "zero", "dp",
        "gpus", "dp_overlap", "pp_overlap", "tied_embeddings", "lora_rank", "layers_first_stage",
        "layers_last_stage", "doc_len")}

    both_missing = np.isnan(ints["dp"]) & np.isnan(ints["gpus"])
    if both_missing.any():
        pos = int(np.flatnonzero(both_missing)[0])
        raise InputError(f"{_where(source, frame, pos)}, columns 'dp' and 'gpus': both empty; give at least one")
    x.update(ints)
    for key in CATEGORICAL:
        x[key] = _categorical(frame, key, source)
    if np.isnan(x["tied_embeddings"]).any():
        x["tied_embeddings"] = np.where(np.isnan(x["tied_embeddings"]), tied_embeddings_default(frame, x),
                                        x["tied_embeddings"])
    fill_defaults(x)

    return x, _system_codes(frame, source)


def evaluate_train(frame: pd.DataFrame, source: str = "<frame>",
                   overrides: dict[tuple[str, str], float] | None = None,
                   with_inputs: bool = False) -> pd.DataFrame:
    """Training outputs for every row of ``frame`` (same index), as typed columns.

    With ``with_inputs`` the resolved inputs (defaults filled) and the GPU's HBM capacity come first.
    """
    x, sys_codes = train_inputs(frame, source)
    hw = hwcat.hardware_columns(sys_codes, overrides)
    res = train_step(x, hw)
    out = pd.DataFrame({k: res[k] for k in TRAIN_METRICS}, index=frame.index)
    out["fits"] = res["fits"].astype(bool)
    reason = res["reason"].astype(np.int64)
    out["infeasible_reason"] = pd.Categorical.from_codes(reason, categories=pd.Index(codes.REASONS))
    if with_inputs:
        out = _inputs_beside(out, x, sys_codes, hw, CATEGORICAL, integers=True,
                             nullable=("layers_first_stage", "layers_last_stage", "doc_len"))
    return out


def _system_codes(frame: pd.DataFrame, source: str) -> np.ndarray:
    system = frame["system"]
    blank = _blank(system)
    names = system.astype(object).where(~blank, "").astype(str).str.strip().str.lower()
    known = names.isin(hwcat.system_names()).to_numpy()
    if not known.all():
        pos = int(np.flatnonzero(~known)[0])
        raise InputError(f"{_where(source, frame, pos)}, column 'system': value {show(system.iloc[pos])} is not a "
                         f"catalogued system; allowed: {', '.join(hwcat.system_names())}")
    return hwcat.system_codes(names.to_numpy())


def infer_inputs(frame: pd.DataFrame, source: str = "<frame>", task: str = "infer"
                 ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Checked, default-filled inputs of the inference kernel for a table of ``task == 'infer'`` rows.

    Required: the model dimensions (or a catalogued ``model``), ``system``, ``tp``, ``batch``, ``input_len``,
    ``output_len``.  Defaults: ``pp`` 1, ``dp`` 1 (replicas), ``gpus`` tp·pp·dp, ``precision`` bf16,
    ``kv_precision`` auto, and the model defaults of :func:`fill_defaults`.
    """
    frame = _fill_dimensions_from_catalog(frame, source)
    check_stack(frame, source)
    for col in ("layers", "hidden", "heads", "vocab", "system", "tp", "batch", "input_len", "output_len"):
        if col not in frame.columns:
            raise InputError(f"{source}: missing column {col!r} (required for task {task!r}; see "
                             "README.md, section 'Case files')")
    x: dict[str, np.ndarray] = {}
    for name in ("layers", "hidden", "heads", "vocab", "tp", "batch", "input_len", "output_len"):
        x[name] = _required_integers(frame, name, source, task=task)
    for k in ("kv_heads", "ffn_hidden", "experts", "top_k", "pp", "dp", "gpus", "tied_embeddings"):
        x[k] = _integers(frame, k, source)
    for key in ("mlp", "precision"):
        x[key] = _categorical(frame, key, source)
    raw = frame["kv_precision"] if "kv_precision" in frame.columns else pd.Series(np.nan, index=frame.index,
                                                                                   dtype=object)
    blank = _blank(raw)
    kv_names = raw.astype(object).where(~blank, "auto").astype(str).str.strip().str.lower()
    ok = kv_names.isin(codes.KV_PRECISION).to_numpy()
    if not ok.all():
        pos = int(np.flatnonzero(~ok)[0])
        raise InputError(f"{_where(source, frame, pos)}, column 'kv_precision': value {show(raw.iloc[pos])} is not "
                         f"allowed; allowed: {', '.join(codes.KV_PRECISION)} (or empty for 'auto')")
    x["kv_precision"] = codes.encode(kv_names.to_numpy(), codes.KV_PRECISION, key="kv_precision").astype(np.float64)
    fill: dict[str, np.ndarray | float] = {"kv_heads": x["heads"], "ffn_hidden": 4.0 * x["hidden"], "experts": 1.0,
                                           "top_k": 1.0, "pp": 1.0, "dp": 1.0}
    for key, default in fill.items():
        x[key] = np.where(np.isnan(x[key]), default, x[key])
    x["gpus"] = np.where(np.isnan(x["gpus"]), x["tp"] * x["pp"] * x["dp"], x["gpus"])
    x["decode_kv_reads"] = _decode_kv_reads(frame, source)
    tied = tied_embeddings_default(frame, x)
    x["tied_embeddings"] = np.where(np.isnan(x["tied_embeddings"]), tied, x["tied_embeddings"])
    for key, name in (("mlp", "gelu"), ("precision", "bf16")):
        x[key] = np.where(np.isnan(x[key]), float(CATEGORICAL[key].index(name)), x[key])
    return x, _system_codes(frame, source)


def evaluate_infer(frame: pd.DataFrame, source: str = "<frame>",
                   overrides: dict[tuple[str, str], float] | None = None,
                   with_inputs: bool = False) -> pd.DataFrame:
    """Inference outputs for every row of ``frame`` (same index), as typed columns."""
    x, sys_codes = infer_inputs(frame, source)
    hw = hwcat.hardware_columns(sys_codes, overrides)
    res = infer_step(x, hw)
    out = pd.DataFrame({k: res[k] for k in INFER_METRICS}, index=frame.index)
    out["fits"] = res["fits"].astype(bool)
    out["infeasible_reason"] = pd.Categorical.from_codes(res["reason"].astype(np.int64),
                                                         categories=pd.Index(codes.REASONS))
    if with_inputs:
        out = _inputs_beside(out, x, sys_codes, hw, INFERENCE_VOCABULARIES, integers=True)
    return out


#: Categorical inputs of the inference-side models, decoded back to names beside their outputs.
INFERENCE_VOCABULARIES = {"mlp": codes.MLP, "precision": codes.PRECISION, "kv_precision": codes.KV_PRECISION}


def _inputs_beside(out: pd.DataFrame, x: Mapping[str, np.ndarray], sys_codes: np.ndarray,
                   hw: Mapping[str, np.ndarray], vocabularies: Mapping[str, tuple[str, ...]], integers: bool,
                   nullable: tuple[str, ...] = ()) -> pd.DataFrame:
    """The resolved inputs (``system`` first, categorical codes decoded back to names by ``vocabularies``, the
    GPU's ``hbm_bytes`` last) then ``out``, for display and audit.  With ``integers`` the numeric inputs are
    int64 (``nullable`` ones Int64: empty means "from the split" or "not packed"); without, as computed (the
    serving model's inputs may be empty or fractional)."""
    columns: dict[str, Any] = {"system": np.asarray(hwcat.system_names(), dtype=object)[sys_codes]}
    for k, v in x.items():
        if k in vocabularies:
            columns[k] = codes.decode(np.asarray(v), vocabularies[k])
        elif k in nullable:
            columns[k] = pd.array(np.asarray(v, dtype=np.float64), dtype="Int64")
        else:
            columns[k] = np.asarray(v).astype(np.int64) if integers else np.asarray(v)
    columns["hbm_bytes"] = hw["hbm_bytes"]
    return pd.concat([pd.DataFrame(columns, index=out.index), out], axis=1)


def _decode_kv_reads(frame: pd.DataFrame, source: str) -> np.ndarray:
    """``decode_kv_reads`` codes: the row's value, else its stack's, else per KV head (0)."""
    n = len(frame)
    out = _named_codes(frame, "decode_kv_reads", codes.DECODE_KV_READS, source) if "decode_kv_reads" in \
        frame.columns else np.full(n, np.nan)
    if "stack" in frame.columns:
        from dse.stacks import profile

        names = _lower_names(frame["stack"], _blank(frame["stack"]), "")
        for stack in [s for s in pd.unique(names) if s]:
            value = profile(stack).get("decode_kv_reads")
            if value is not None:
                rows = (names == stack).to_numpy()
                out = np.where(rows & np.isnan(out), float(codes.DECODE_KV_READS.index(value)), out)
    return np.where(np.isnan(out), 0.0, out)


def _named_codes(frame: pd.DataFrame, col: str, vocab: tuple[str, ...], source: str) -> np.ndarray:
    """Codes of a categorical column outside :data:`CATEGORICAL` (NaN for empty cells)."""
    raw = frame[col]
    blank = _blank(raw)
    names = _lower_names(raw, blank, vocab[0])
    ok = names.isin(vocab).to_numpy()
    if not ok.all():
        pos = int(np.flatnonzero(~ok)[0])
        raise InputError(f"{_where(source, frame, pos)}, column {col!r}: value {show(raw.iloc[pos])} is not allowed; "
                         f"allowed: {', '.join(vocab)} (or empty for the default)")
    out = codes.encode(names.to_numpy(), vocab, key=col).astype(np.float64)
    out[blank] = np.nan
    return out


def serve_inputs(frame: pd.DataFrame, source: str = "<frame>") -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Checked inputs of the serving model for ``task == 'serve'`` rows: those of :func:`infer_inputs` (with
    ``batch`` optional: empty = only memory limits the concurrency) plus ``max_num_tokens`` (empty: no token
    budget), ``request_rate`` (empty: maximum load) and the engine's KV settings from the row's stack."""
    frame = frame.copy()
    n = len(frame)
    batch = frame["batch"] if "batch" in frame.columns else pd.Series([np.nan] * n, index=frame.index)
    blank_batch = _blank(batch)
    frame["batch"] = batch.astype(object).where(~blank_batch, 1)
    x, systems = infer_inputs(frame, source, task="serve")
    x["batch"] = np.where(blank_batch, np.nan, x["batch"])
    empty = pd.Series([np.nan] * n, index=frame.index, dtype=object)
    work = frame.assign(**{k: frame[k] if k in frame.columns else empty for k in ("max_num_tokens", "request_rate")})
    x["max_num_tokens"] = _integers(frame, "max_num_tokens", source)
    check_configuration_cells(work[["request_rate"]], source)  # a positive finite number or empty
    rate = work["request_rate"]
    x["request_rate"] = pd.to_numeric(rate.where(~_blank(rate), np.nan), errors="coerce").to_numpy(np.float64)
    x["kv_memory_fraction"] = np.full(n, np.nan)
    x["kv_block_tokens"] = np.full(n, np.nan)
    # (decode_kv_reads: filled by infer_inputs from the row or its stack)
    x["prefill_gpus"] = _integers(frame, "prefill_gpus", source)
    x["prefill_tp"] = _integers(frame, "prefill_tp", source)
    # a disaggregated deployment's GPUs: the prefill pool's and the decode pool's (tp·pp·dp)
    x["gpus"] = np.where(np.isnan(x["prefill_gpus"]), x["gpus"], x["tp"] * x["pp"] * x["dp"] + x["prefill_gpus"])
    if "stack" in frame.columns:
        from dse.stacks import profile

        names = _lower_names(frame["stack"], _blank(frame["stack"]), "")
        for stack in [s for s in pd.unique(names) if s]:
            rows = (names == stack).to_numpy()
            prof = profile(stack)
            for key, col in (("kv_memory_fraction", "kv_memory_fraction"), ("kv_block_tokens", "kv_block_tokens"),
                             ("max_batch", "batch"), ("max_num_tokens", "max_num_tokens"),
                             ("decode_kv_reads", "decode_kv_reads")):
                if key in prof:  # the engine's default where the row leaves it empty
                    value = float(codes.DECODE_KV_READS.index(prof[key])) if key == "decode_kv_reads" else \
                        float(prof[key])
                    x[col] = np.where(rows & np.isnan(x[col]), value, x[col])
    return x, systems


def evaluate_serve(frame: pd.DataFrame, source: str = "<frame>",
                   overrides: dict[tuple[str, str], float] | None = None,
                   with_inputs: bool = False) -> pd.DataFrame:
    """Serving outputs (:mod:`dse.cost.serving`) for every row of ``frame`` (same index)."""
    from dse.cost.serving import LIMITS, SERVE_METRICS, serve_step

    x, sys_codes = serve_inputs(frame, source)
    hw = hwcat.hardware_columns(sys_codes, overrides)
    res = serve_step(x, hw)
    out = pd.DataFrame({k: res[k] for k in SERVE_METRICS}, index=frame.index)
    limit = res["limit"].astype(np.int64)
    out["limit"] = np.where(limit >= 0, np.asarray(LIMITS, dtype=object)[np.maximum(limit, 0)], "")
    out["fits"] = res["fits"].astype(bool)
    out["infeasible_reason"] = pd.Categorical.from_codes(res["reason"].astype(np.int64),
                                                         categories=pd.Index(codes.REASONS))
    if with_inputs:
        out = _inputs_beside(out, x, sys_codes, hw, INFERENCE_VOCABULARIES, integers=False)
    return out


def evaluate(frame: pd.DataFrame, overrides: dict[tuple[str, str], float] | None = None) -> pd.DataFrame:
    """Return ``frame`` with every output column of the cost model added (Python API for notebooks).

    ``frame`` has the configuration columns of README.md, section 'Case files' (``case``, ``metric``,
    ``measured`` and ``source`` are not needed); a row may give only ``model`` (a catalogued name) instead of
    the dimension columns.  ``task`` (train when absent) selects the training or the inference model; each row
    gets the outputs of its task (the other task's columns are NaN).  Input columns the frame leaves out are
    added with the values used (catalog dimensions, documented defaults); columns it has are never changed.

    Rows that repeat an earlier row (in every column the model reads) are evaluated once: the checks, the
    defaults and the kernel run on the distinct rows (in order of first appearance, so an error still names
    the first bad row of ``frame``), and their outputs are repeated.
    """
    distinct = _distinct_rows(frame)
    if distinct is None:
        return _evaluate(frame, overrides)
    first, inverse = distinct
    once = _evaluate(frame.iloc[first], overrides)
    added = [c for c in once.columns if c not in frame.columns]
    return pd.concat([frame, _take_rows(once[added], inverse, frame.index)], axis=1)


def _take_rows(frame: pd.DataFrame, positions: np.ndarray, index: pd.Index) -> pd.DataFrame:
    """``frame.take(positions)`` with ``index``, same columns and dtypes: the numpy columns of one dtype are
    gathered as one 2-D block (one pass instead of one per column, several times faster than pandas' take of
    unconsolidated columns), the others (text, categorical, nullable) one by one."""
    columns: dict[str, Any] = {}
    by_dtype: dict[np.dtype, list[str]] = {}
    for col in frame.columns:
        dtype = frame[col].dtype
        if isinstance(dtype, np.dtype) and dtype.kind in "fiub":
            by_dtype.setdefault(dtype, []).append(col)
        else:
            columns[col] = frame[col].array.take(positions)
    for names in by_dtype.values():
        block = np.take(np.stack([frame[c].to_numpy() for c in names]), positions, axis=1)
        columns.update(zip(names, block, strict=True))
    return pd.DataFrame({c: columns[c] for c in frame.columns}, index=index, copy=False)


def distinct_apply(frame: pd.DataFrame, fn: Any, columns: list[str] | None = None) -> pd.DataFrame:
    """``fn(frame)`` (a frame of outputs with ``frame``'s index), only its ``columns`` when given, computed on
    the distinct rows only and repeated (see :func:`evaluate`); on every row when they are mostly distinct."""
    distinct = _distinct_rows(frame)
    if distinct is None:
        out: pd.DataFrame = fn(frame)
        return out if columns is None else out[[c for c in columns if c in out.columns]]
    first, inverse = distinct
    once: pd.DataFrame = fn(frame.iloc[first])
    if columns is not None:
        once = once[[c for c in columns if c in once.columns]]
    return _take_rows(once, inverse, frame.index)


#: Evaluate distinct rows only when they are at most this fraction of the table.
DISTINCT_BELOW = 0.5


def _distinct_rows(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """(positions of the first row of each distinct row, in order; each row's distinct-row number), or None
    when the rows are mostly distinct (nothing to gain) or the frame is small.  Rows are compared on the
    columns the model reads (``case``, ``measured``, ``source`` and ``metric`` are ignored)."""
    n = len(frame)
    if n < 1024:
        return None
    ignore = {"case", "measured", "source", "metric"}
    key = np.zeros(n, dtype=np.int64)
    radix = 1
    for col in [c for c in frame.columns if c not in ignore]:
        if _constant(frame[col]):  # one value: it distinguishes no rows (a cheaper pass than hashing it)
            continue
        codes, uniques = pd.factorize(frame[col], use_na_sentinel=False)
        k = max(len(uniques), 1)
        if radix * k >= 2**62:  # compress the key so far before it overflows
            _, key = np.unique(key, return_inverse=True)
            key = key.reshape(-1).astype(np.int64)
            radix = int(key.max()) + 1
            if radix * k >= 2**62:
                return None
        key = key * k + codes
        radix *= k
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if len(first) > DISTINCT_BELOW * n:
        return None
    order = np.argsort(first, kind="stable")  # distinct rows in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.reshape(-1)]


def _constant(series: pd.Series) -> bool:
    """True when every cell of ``series`` is the same value (or every cell is missing), compared as stored."""
    text = _arrow_text(series)
    if text is not None:
        if text.null_count:
            return text.null_count == len(text)
        # cells of different lengths differ: the offsets tell it without reading the text
        chunks = text.chunks if isinstance(text, pa.ChunkedArray) else [text]
        width = np.int64 if pa.types.is_large_string(text.type) else np.int32
        first_length = None
        for chunk in (c for c in chunks if len(c)):
            offsets = np.frombuffer(chunk.buffers()[1], dtype=width)[chunk.offset:chunk.offset + len(chunk) + 1]
            lengths = np.diff(offsets)
            first_length = lengths[0] if first_length is None else first_length
            if (lengths != first_length).any():
                return False
        return bool(pc.all(pc.equal(text, text[0])).as_py())
    if isinstance(series.dtype, np.dtype) and series.dtype.kind in "iufb":
        values = series.to_numpy()
        return bool((values == values[0]).all() or (series.dtype.kind == "f" and np.isnan(values).all()))
    return False


def _evaluate(frame: pd.DataFrame, overrides: dict[tuple[str, str], float] | None = None) -> pd.DataFrame:
    frame = frame.copy()
    task = frame["task"].astype(str).str.strip().str.lower() if "task" in frame.columns else \
        pd.Series("train", index=frame.index)
    bad = ~task.isin(("train", "infer", "serve", "nan", ""))
    if bad.any():
        pos = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(f"{_where('<frame>', frame, pos)}, column 'task': value {show(frame['task'].iloc[pos])} is "
                         "not allowed; allowed: train, infer, serve")
    is_infer = (task == "infer").to_numpy()
    is_serve = (task == "serve").to_numpy()
    parts = []
    if (~is_infer & ~is_serve).any():
        parts.append((evaluate_train(frame.loc[~is_infer & ~is_serve], overrides=overrides, with_inputs=True),
                      (*TRAIN_METRICS, "fits", "infeasible_reason")))
    if is_serve.any():
        from dse.cost.serving import SERVE_METRICS

        parts.append((evaluate_serve(frame.loc[is_serve], overrides=overrides, with_inputs=True),
                      (*SERVE_METRICS, "limit", "fits", "infeasible_reason")))
    if is_infer.any():
        parts.append((evaluate_infer(frame.loc[is_infer], overrides=overrides, with_inputs=True),
                      (*INFER_METRICS, "fits", "infeasible_reason")))
    result = frame
    output_columns = [c for _, cols in parts for c in cols]
    for outputs, _ in parts:
        # inputs the frame left out (dimensions of a named model, defaults) are added, never overwritten
        for column in outputs.columns:
            if column not in result.columns and column not in output_columns:
                result[column] = outputs[column].reindex(frame.index)
    for column in dict.fromkeys(output_columns):
        pieces = [o[column] for o, cols in parts if column in cols]
        result[column] = pd.concat(pieces).reindex(frame.index) if len(pieces) > 1 else \
            pieces[0].reindex(frame.index)
    return result
