"""Table cells as the cost model reads them: empty or not, numbers, lower-case names.

One definition for every reader of tables (:mod:`dse.frame`, :mod:`dse.stacks`, :mod:`dse.validation`), with
no Python step per cell.  A column may be numpy numbers, pandas' nullable or Arrow-backed numbers, text (object
or Arrow strings, as a case file gives), or a :class:`pandas.Categorical` — what :func:`factorized` makes of a
text column so that every check, parse and lower-casing runs once per distinct cell, not once per row (a table
of 10⁶ rows has a few thousand distinct cells per column at most).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

#: Text columns of at least this many rows are factorized by :func:`factorized` (below it, the per-row path is as
#: fast).
FACTORIZE_FROM_ROWS = 1024


def constant(n: int, value: float) -> np.ndarray:
    """A read-only float64 column of ``n`` equal values without allocating them (a stride-0 view): what a table's
    absent column becomes, so that a default, a check or a kernel tile reads one cached value instead of n."""
    return np.broadcast_to(np.float64(value), (n,))


def is_constant(arr: np.ndarray) -> bool:
    """True for a :func:`constant` column (a 1-D stride-0 view with at least one row)."""
    return arr.ndim == 1 and len(arr) > 0 and arr.strides[0] == 0


def is_categorical(series: pd.Series) -> bool:
    return isinstance(series.dtype, pd.CategoricalDtype)


def factorized(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text column of a large table as a Categorical of its distinct cells (the values are
    the same; numbers and small tables are left as they are).  pandas' hash factorization is one C pass per
    column.  A text column whose every cell is a plain integer (a case file's ``tp``, ``global_batch``, ...)
    becomes int64 numbers instead: Arrow's cast is one pass, a third of a hash factorization, and the readers
    check integers without parsing."""
    if len(frame) < FACTORIZE_FROM_ROWS:
        return frame
    columns: dict[str, Any] = {}
    for col in frame.columns:
        series = frame[col]
        if series.dtype.kind in "iufbmM" or is_categorical(series):
            continue
        ints = _integer_text(series)
        if ints is not None:
            columns[col] = ints
            continue
        codes, uniques = pd.factorize(series, use_na_sentinel=True)
        columns[col] = pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(uniques))
    if not columns:
        return frame
    return frame.assign(**columns)


def _integer_text(series: pd.Series) -> np.ndarray | None:
    """The cells as int64 when every one is the decimal text of an integer (no empty cell), else None."""
    text = arrow_text(series)
    if text is None or text.null_count or not len(text):
        return None
    if not pc.all(pc.ascii_is_decimal(text.slice(0, 64))).as_py():  # a failed cast costs ~50 ms on 200k cells:
        return None  # a look at the first cells skips the text columns (names) for a microsecond
    try:
        return to_numpy(pc.cast(text, pa.int64()), np.int64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # a name, a decimal, an empty cell, an overflow
        return None


def on_distinct(series: pd.Series, fn: Callable[[pd.Series], np.ndarray]) -> np.ndarray:
    """``fn`` (cells -> one value per cell) computed on the distinct cells of a Categorical ``series`` (its
    categories and one missing cell) and taken back to its rows."""
    cat = series.array
    categories = cat.categories
    codes = np.asarray(cat.codes)
    missing = bool((codes < 0).any())  # a missing cell is a distinct cell only when some row has one
    if categories.dtype.kind in "iufb":
        values = categories.to_numpy(dtype=np.float64)
        cells = pd.Series(np.append(values, np.nan) if missing else values)
    else:  # text (or mixed) categories as objects, with None for the missing cell
        values = categories.to_numpy(dtype=object)
        if missing:
            values = np.concatenate([values, np.array([None], dtype=object)])
        cells = pd.Series(values, dtype="object")  # objects: no string inference
    out = np.asarray(fn(cells))
    return out[np.where(codes < 0, len(categories), codes)] if missing else out[codes]


def arrow_text(series: pd.Series) -> pa.Array | pa.ChunkedArray | None:
    """The cells as Arrow strings (null where NaN or None), converted without a Python step per cell and
    without a copy for Arrow-backed text (a CSV read by Arrow stays in its chunks); None when they are not all
    text (numbers, mixed objects, categoricals)."""
    if series.dtype.kind in "iufb" or is_categorical(series):
        return None
    try:
        arr = pa.array(series, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        return None
    if pa.types.is_null(arr.type):  # every cell NaN or None
        return arr.cast(pa.string())
    return arr if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) else None


def to_numpy(arr: pa.Array | pa.ChunkedArray, dtype: Any) -> np.ndarray:
    """An Arrow array or chunked array as one numpy array of ``dtype`` (nulls as NaN for floats)."""
    values = arr.to_numpy() if isinstance(arr, pa.ChunkedArray) else arr.to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=dtype)


def blank(series: pd.Series) -> np.ndarray:
    """True where a cell is empty (NaN, None or whitespace), vectorized: numeric columns by isnan, text by
    Arrow's whitespace trim (no Python step per cell)."""
    if not len(series):
        return np.zeros(0, dtype=bool)
    if is_categorical(series):
        return on_distinct(series, blank).astype(bool)
    kind = series.dtype.kind
    if kind in "iub" and isinstance(series.dtype, np.dtype):  # numpy integers and booleans have no empty cell
        return np.zeros(len(series), dtype=bool)
    if kind in "iufb":  # floats (NaN) and nullable or Arrow-backed numbers (<NA>)
        return np.asarray(series.isna().to_numpy(), dtype=bool)
    text = arrow_text(series)
    if text is not None:
        empty = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(text)), 0)
        return to_numpy(pc.fill_null(empty, True), bool)
    na = series.isna().to_numpy()
    mixed = series.where(~na, "").astype(str).astype("string[pyarrow]")  # e.g. numbers and text in one column
    return na | (mixed.str.strip() == "").to_numpy(dtype=bool, na_value=True)


def to_float(raw: pd.Series, empty: np.ndarray) -> np.ndarray:
    """Cells as float64 (NaN where ``empty`` or not a number): numeric columns as they are, text parsed by
    Arrow's vectorized cast (pandas' per-cell parser only when a cell does not parse, to find it)."""
    if is_categorical(raw):
        return on_distinct(raw, lambda cells: to_float(cells, blank(cells))).astype(np.float64)
    if raw.dtype.kind in "iufb":
        return raw.to_numpy(dtype=np.float64, na_value=np.nan)
    text = arrow_text(raw)
    if text is not None:
        trimmed = pc.utf8_trim_whitespace(text)
        try:
            cells = pc.if_else(pa.array(empty), pa.scalar(None, trimmed.type), trimmed)
            return to_numpy(pc.cast(cells, pa.float64()), np.float64)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
    return pd.to_numeric(raw.where(~empty, np.nan), errors="coerce").to_numpy(dtype=np.float64)


def distinct_lower_names(raw: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes, names): each cell's index into ``names``, the column's distinct cells as stripped lower-case names
    ("" for an empty one; a missing cell has code -1).  For a column of a few distinct names (a stack, a model)
    every check and lookup then runs once per name, not once per row."""
    codes, distinct = pd.factorize(raw)
    cells = pd.Series(np.asarray(distinct, dtype=object), dtype=object)
    return np.asarray(codes), lower_names(cells, blank(cells), "").to_numpy(dtype=object)


def lower_names(raw: pd.Series, empty: np.ndarray, default: str) -> pd.Series:
    """Cells as stripped lower-case names (``default`` where ``empty``), vectorized through Arrow strings."""
    if is_categorical(raw):  # per distinct cell, and a Categorical again: comparisons and uniques on codes
        cat = raw.array
        distinct = np.append(cat.categories.to_numpy(dtype=object), np.array([None], dtype=object))
        cells = pd.Series(distinct, dtype="object")
        remap, uniques = pd.factorize(lower_names(cells, blank(cells), default).to_numpy(dtype=object))
        codes = np.asarray(cat.codes)
        new = remap[np.where(codes < 0, len(cells) - 1, codes)]  # the missing cell is the last distinct one
        return pd.Series(pd.Categorical.from_codes(new, dtype=pd.CategoricalDtype(pd.Index(uniques))), index=raw.index)
    text = arrow_text(raw)
    if text is not None:
        names = pc.utf8_lower(pc.utf8_trim_whitespace(text)).cast(pa.string())
        names = pc.if_else(pa.array(empty), pa.scalar(default, pa.string()), names)
        return pd.Series(to_numpy(names, object), index=raw.index, dtype=object)
    mixed = raw.astype(object).where(~empty, default).astype(str).astype("string[pyarrow]")
    return mixed.str.strip().str.lower().astype(object)
