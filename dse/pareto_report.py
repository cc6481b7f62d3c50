"""``dse pareto``: a sweep dataset's front as a table (Parquet or CSV) and a figure.

The layer above :mod:`dse.pareto` (front computation, no plotting) and :mod:`dse.plots` (drawing).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from dse.dataset import load_results
from dse.outputs import write_atomic, written_by_dse
from dse.pareto import Objective, as_objectives, pareto_front
from dse.plots import describe, draw_pareto, pareto_data

SHOWN_COLUMNS: tuple[str, ...] = ("model", "system", "gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch",
                                  "global_batch", "recompute", "zero", "precision")
TABLE_SUFFIXES: tuple[str, ...] = (".parquet", ".csv")


def varying_inputs(frame: pd.DataFrame) -> list[str]:
    """The input columns of a sweep dataset that take more than one value, in the dataset's column order (so a
    front's rows can be read: e.g. ``seq_len`` when the sweep mixes 8192 and 32768)."""
    from dse.hardware.derive import DERIVE_AXES
    from dse.sweep import CATEGORY_COLUMNS, INFER_INPUT_COLUMNS, INPUT_COLUMNS, SERVE_INPUT_COLUMNS

    inputs = {*INPUT_COLUMNS, *INFER_INPUT_COLUMNS, *SERVE_INPUT_COLUMNS, *CATEGORY_COLUMNS, *DERIVE_AXES}
    return [c for c in frame.columns if c in inputs and frame[c].nunique(dropna=False) > 1]


def write_table(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write ``frame`` as Parquet or CSV, chosen by the suffix; ``ValueError`` for another suffix."""
    out = Path(path)
    if out.suffix.lower() not in TABLE_SUFFIXES:
        raise ValueError(f"output {str(out)!r}: suffix {out.suffix or '(none)'!r} is not allowed; allowed: "
                         f"{', '.join(TABLE_SUFFIXES)}")
    if out.suffix.lower() == ".csv":
        return write_atomic(out, lambda tmp: frame.to_csv(tmp, index=False))
    return write_atomic(out, lambda tmp: frame.to_parquet(tmp, index=False))


def format_front(front: pd.DataFrame, objectives: Sequence[Objective], by: Sequence[str] = (), top: int = 20) -> str:
    """Text of a front: its size per group, then up to ``top`` rows per group (groups, objectives, layout;
    byte columns in GB)."""
    varying = front.attrs.get("varying", [c for c in SHOWN_COLUMNS if c in front])
    layout = [c for c in ("model", "system", "gpus", "tp", "pp", "dp") if c in front]
    cols = list(dict.fromkeys([*by, *(c for c, _ in objectives), *layout, *(c for c in varying if c in front)]))
    names = ", ".join(f"{c} ({d})" for c, d in objectives)
    if front.empty:
        return f"Pareto front of {names}: no feasible row"
    show = front[cols].copy()
    for col in [c for c in cols if c.endswith("_bytes")]:  # bytes as GB, as `dse info` prints them
        show[col] = (show[col].astype("float64") / 1e9).round(2)
        show = show.rename(columns={col: col.removesuffix("_bytes") + "_GB"})
    if by:
        show = show.groupby(list(by), observed=True, sort=False).head(top)
        sizes = front.groupby(list(by), observed=True, sort=False).size()
        head = [f"Pareto front of {names} per {' x '.join(by)}: {len(front):,} rows in {len(sizes)} groups "
                f"(sizes {sizes.min()}–{sizes.max()}); up to {top} per group shown:"]
    else:
        show = show.head(top)
        head = [f"Pareto front of {names}: {len(front):,} rows; {len(show)} shown:"]
    return "\n".join(head + [show.to_string(index=False)])


def run_pareto(results: str | Path, objectives: str | Iterable[str | Objective], by: Sequence[str] = (),
               output: str | Path | None = None, figure: str | Path | None = None,
               feasible_only: bool = True) -> tuple[pd.DataFrame, list[Path]]:
    """``dse pareto``: the front of a sweep dataset; written to ``output`` (.parquet or .csv) when given, and
    drawn (2 or 3 objectives) to ``figure`` — default: beside ``output`` with the suffix ``.png`` — with the
    plot data beside the PNG as Parquet.  Returns the front and the files written."""
    objs = as_objectives(objectives)
    if output is not None and Path(output).suffix.lower() not in TABLE_SUFFIXES:
        write_table(pd.DataFrame(), output)  # raises the message naming the allowed suffixes
    beside = Path(output).with_suffix(".png") if output is not None and figure is None else None
    if beside is not None and beside.exists() and not written_by_dse(beside):
        raise ValueError(f"-o {output}: would replace {beside}, which dse did not draw (the figure goes beside the "
                         f"table); allowed: --figure PATH to draw it elsewhere, or move {beside.name} away")
    frame = load_results(results, feasible_only)
    front = pareto_front(frame, objs, by=list(by), feasible_only=feasible_only)
    front.attrs["varying"] = varying_inputs(frame)
    written: list[Path] = []
    if output is not None:
        written.append(write_table(front, output))
        if figure is None:
            figure = Path(output).with_suffix(".png")
    if figure is not None and len(objs) in (2, 3):
        data = pareto_data(frame, objs, by=list(by), feasible_only=feasible_only)
        # 2 objectives: one line per group of the last `by` column, one panel per value of the first (when
        # several); 3 objectives (colour taken): one panel per group
        facet: str | None = by[0] if len(by) >= 2 or (by and len(objs) == 3) else None
        hue = by[-1] if by and len(objs) == 2 else None
        if len(objs) == 3 and len(by) >= 2:
            facet = " · ".join(by)
            data[facet] = describe(data, list(by))
        png = draw_pareto(data, objs, figure, facet=facet, hue=hue)
        # the figure's data (front and a sample of the cloud) under its own name, never the front's file
        data_path = png.with_name(f"{png.stem}.plot-data.parquet")
        write_atomic(data_path, lambda tmp: data.to_parquet(tmp, index=False))
        written += [png, data_path]
    return front, written
