"""What ``dse run --keep`` keeps of a sweep: every row, the feasible ones, a Pareto front or the best K rows.

``--keep MODE`` with MODE one of

* ``all``: every point as a row (the default);
* ``feasible``: only rows that divide and fit (``fits`` true);
* ``pareto:COL:min|max,COL:min|max[,by=COL+COL]``: the feasible rows on the Pareto front of the objectives,
  one front per group of the ``by`` columns (see :func:`dse.pareto.pareto_mask`);
* ``top:K:COL[:min|max][,by=COL+COL]``: the K best feasible rows by ``COL`` (default direction: ``max`` for
  rates ``*_per_s*``, ``mfu``, ``hfu``, else ``min``), per group; ties go to the lower grid point.

Each part reduces its own rows before it is written; when every part is written, a merge reduces across the
parts and rewrites the parts that hold rows the global reduction drops.  Both reductions are idempotent and
the global one of any superset of the kept rows is the same (the front of the union of local fronts is the
global front; the best K of the union of local best K are the global best K), so a run killed at any point,
during the merge included, and resumed ends with the same dataset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from dse.pareto import DIRECTIONS, pareto_mask

KINDS = ("all", "feasible", "pareto", "top")
HELP = ("all | feasible | pareto:COL:min|max,COL:min|max[,by=COL+COL] | top:K:COL[:min|max][,by=COL+COL] "
        "(e.g. pareto:step_time_s:min,gpus:min,by=model or top:5:tokens_per_s_per_gpu:max,by=model+system)")


class KeepError(ValueError):
    """A malformed --keep value (exit status 2)."""


@dataclass(frozen=True)
class Keep:
    kind: str
    objectives: tuple[tuple[str, str], ...] = ()
    k: int = 0
    by: tuple[str, ...] = ()
    text: str = "all"

    @property
    def feasible_only(self) -> bool:
        return self.kind != "all"

    @property
    def reduces(self) -> bool:
        """Whether the parts need a merge across them (pareto and top)."""
        return self.kind in ("pareto", "top")

    def columns(self) -> list[str]:
        return [c for c, _ in self.objectives] + list(self.by)


def default_direction(column: str) -> str:
    return "max" if ("_per_s" in column or column in ("mfu", "hfu")) else "min"


def parse_keep(text: str, columns: Sequence[str] | None = None) -> Keep:
    """Parse a --keep value; with ``columns`` (the dataset's), also check that every named column exists."""
    raw = str(text).strip()
    head, _, rest = raw.partition(":")
    kind = head.strip().lower()
    if kind not in KINDS:
        raise KeepError(f"--keep: value {raw!r} is not allowed; allowed: {HELP}")
    if kind in ("all", "feasible"):
        if rest:
            raise KeepError(f"--keep: value {raw!r} is not allowed ({kind} takes no arguments); allowed: {HELP}")
        return Keep(kind, text=kind)
    items = [p.strip() for p in rest.split(",") if p.strip()]
    by: tuple[str, ...] = ()
    plain = []
    for item in items:
        if item.lower().startswith("by="):
            if by:
                raise KeepError(f"--keep: value {raw!r} gives 'by=' twice; allowed: one by= naming every column, "
                                f"joined by '+' (by=model+system)")
            by = tuple(c.strip() for c in item[3:].split("+") if c.strip())
            if not by:
                raise KeepError(f"--keep: value {raw!r}: 'by=' names no column; allowed: {HELP}")
        else:
            plain.append(item)
    if kind == "pareto":
        objectives = []
        for item in plain:
            name, sep, direction = item.rpartition(":")
            if not sep or not name or direction.lower() not in DIRECTIONS:
                raise KeepError(f"--keep: objective {item!r} in {raw!r} is not allowed: expected COL:min or COL:max; "
                                f"allowed: {HELP}")
            objectives.append((name, direction.lower()))
        if not objectives:
            raise KeepError(f"--keep: value {raw!r} names no objective; allowed: {HELP}")
        keep = Keep("pareto", tuple(objectives), by=by, text=raw)
    else:
        if len(plain) != 1:
            raise KeepError(f"--keep: value {raw!r} is not allowed: expected top:K:COL[:min|max]; allowed: {HELP}")
        fields = plain[0].split(":")
        if len(fields) not in (2, 3) or not fields[0].isdigit() or int(fields[0]) < 1 or not fields[1]:
            raise KeepError(f"--keep: value {raw!r} is not allowed: expected top:K:COL[:min|max] with K >= 1; "
                            f"allowed: {HELP}")
        direction = fields[2].lower() if len(fields) == 3 else default_direction(fields[1])
        if direction not in DIRECTIONS:
            raise KeepError(f"--keep: direction {fields[2]!r} in {raw!r} is not allowed; allowed: min, max")
        keep = Keep("top", ((fields[1], direction),), k=int(fields[0]), by=by, text=raw)
    if columns is not None:
        for col in keep.columns():
            if col not in columns:
                raise KeepError(f"--keep: column {col!r} in {raw!r} is not a column of this sweep's dataset; "
                                f"allowed: {', '.join(columns)}")
    return keep


def _numeric(table: pa.Table, column: str) -> NDArray[np.float64]:
    arr = table.column(column).combine_chunks()
    if pa.types.is_dictionary(arr.type):
        raise KeepError(f"--keep: objective column {column!r} is categorical; allowed: a numeric column")
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)


def group_ids(table: pa.Table, by: Sequence[str]) -> NDArray[np.int64] | None:
    """Dense group numbers of the rows by the values of the ``by`` columns (strings for dictionary columns, so
    tables of different parts group alike), or None without ``by``."""
    if not by or table.num_rows == 0:
        return None
    codes = []
    for col in by:
        arr = table.column(col).combine_chunks()
        if pa.types.is_dictionary(arr.type):  # group by the label, not the index (dictionaries may differ)
            labels = np.array([str(v) for v in arr.dictionary.to_pylist()] + ["\0null"], dtype=object)
            _, label_code = np.unique(labels, return_inverse=True)
            index = arr.indices.fill_null(len(labels) - 1).to_numpy(zero_copy_only=False).astype(np.int64)
            values = label_code.reshape(-1)[index]
        else:
            values = arr.to_numpy(zero_copy_only=False)
            if values.dtype == object:
                values = np.array(["\0null" if v is None else v for v in values], dtype=object)
        _, inverse = np.unique(values, return_inverse=True)
        codes.append(inverse.reshape(-1))
    if len(codes) == 1:
        return codes[0].astype(np.int64)
    _, inverse = np.unique(np.column_stack(codes), axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def keep_mask(table: pa.Table, keep: Keep) -> NDArray[np.bool_]:
    """Rows of ``table`` (a sweep part or their union) that ``keep`` keeps."""
    n = table.num_rows
    if keep.kind == "all" or n == 0:
        return np.ones(n, dtype=bool)
    fits = np.asarray(table.column("fits").to_numpy(zero_copy_only=False), dtype=bool)
    if keep.kind == "feasible":
        return fits
    groups = group_ids(table, keep.by)
    mask = np.zeros(n, dtype=bool)
    if keep.kind == "pareto":
        values = np.column_stack([_numeric(table, c) for c, _ in keep.objectives])
        rows = np.flatnonzero(fits)
        if rows.size:
            mask[rows] = pareto_mask(values[rows], [d for _, d in keep.objectives],
                                     None if groups is None else groups[rows])
        return mask
    (column, direction), = keep.objectives
    value = _numeric(table, column)
    ok = fits & np.isfinite(value)
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return mask
    points = table.column("point").to_numpy()[rows]
    key = value[rows] if direction == "min" else -value[rows]
    g = np.zeros(rows.size, dtype=np.int64) if groups is None else groups[rows]
    order = np.lexsort((points, key, g))
    g_sorted = g[order]
    starts = np.r_[0, np.flatnonzero(np.diff(g_sorted)) + 1]
    rank = np.arange(rows.size) - np.repeat(starts, np.diff(np.r_[starts, rows.size]))
    mask[rows[order[rank < keep.k]]] = True
    return mask


def reduce_table(table: pa.Table, keep: Keep) -> pa.Table:
    if keep.kind == "all":
        return table
    mask = keep_mask(table, keep)
    return table if mask.all() else table.filter(pa.array(mask))
