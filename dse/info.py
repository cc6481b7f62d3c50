"""``dse info results/NAME``: what a sweep dataset holds and its best rows."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dse.cost.inference import INFER_METRICS
from dse.cost.serving import SERVE_METRICS
from dse.cost.training import TRAIN_METRICS
from dse.dataset import DatasetError, read_spec_file, verified_parts
from dse.spec import SpecError
from dse.sweep import COST_COLUMN

HIGH_IS_BETTER = ("tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "hfu",
                  "output_tokens_per_s", "output_tokens_per_s_per_gpu", "max_batch", "requests_per_s",
                  "tokens_per_s_per_user", "running_requests")


def load(path: str | Path, columns: list[str] | None = None) -> pd.DataFrame:
    """The whole dataset as one DataFrame (``pd.read_parquet`` on the directory does the same), after every part
    is checked (:func:`dse.dataset.verified_parts`: a bad part raises an error naming it)."""
    parts = verified_parts(path)
    if not parts:
        raise DatasetError(f"{path}: holds no part yet; allowed: a results directory with at least one part")
    return pd.read_parquet(path, columns=columns)


def format_info(path: str | Path, metric: str | None = None, top: int = 10, by: tuple[str, ...] | None = None
                ) -> str:
    """Text summary: provenance, row counts, reasons, and the best rows by ``metric`` (default: ``step_time_s``
    for training sweeps, ``output_tokens_per_s_per_gpu`` for inference and serving ones) — overall, or the best
    row of each group of ``by`` columns (default: model and system when the sweep has several)."""
    root = Path(path)
    parts = verified_parts(root)
    meta = read_spec_file(root)
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
    lines = [f"{root}: spec {meta.get('source')} (digest {meta.get('spec_digest')}), dse {meta.get('dse_version')}, "
             f"created {meta.get('created')}",
             f"grid points {meta.get('points', 0):,}; parts {len(parts)} of {meta.get('parts')}; rows {rows:,}"]
    if meta.get("keep", "all") != "all":
        lines.append(f"kept: --keep {meta['keep']} (the rows are that reduction of the grid, not every point)")
    if not parts:
        return "\n".join(lines)
    schema = pq.read_schema(parts[0])
    metrics = {*TRAIN_METRICS, *INFER_METRICS, *SERVE_METRICS, COST_COLUMN}
    inputs = [c for c in schema.names if c not in metrics and c not in ("point", "fits", "infeasible_reason", "limit")]
    if metric is None:  # the task's headline: step time for training, output tokens/s per GPU for inference
        metric = "step_time_s" if "step_time_s" in schema.names else "output_tokens_per_s_per_gpu"
    # any numeric column ranks: a metric, or an input such as gpus ("fewest GPUs")
    numeric = [f.name for f in schema if f.name != "point" and (pa.types.is_integer(f.type)
                                                                or pa.types.is_floating(f.type))]
    if metric not in numeric:
        what = f"column {metric!r} of {root} is not numeric" if metric in schema.names else \
            f"value {metric!r} is not a column of {root}"
        raise SpecError(f"--metric: {what}; allowed: a metric "
                        f"({', '.join(c for c in numeric if c in metrics)}) or a numeric input "
                        f"({', '.join(c for c in numeric if c not in metrics)})")
    # the outputs the spec's filters name (its SLOs, say) and a serving row's binding limit are shown beside the
    # metric: what each row meets and what binds it
    filters = ((meta.get("spec") or {}).get("constraints") or {}).get("filters") or []
    named = {w for f in filters if isinstance(f, str) for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f)}
    extra = [c for c in schema.names if (c in metrics and c in named and c != metric) or c == "limit"]
    # the parts verified above (load would check them again)
    frame = pd.read_parquet(root, columns=list(dict.fromkeys([*inputs, metric, *extra, "mem_total_bytes", "fits",
                                                                "infeasible_reason"])))
    # show the inputs the sweep varies (and the layout), not the constant ones
    shown = [c for c in inputs if c in ("model", "system", "gpus", "tp", "pp", "dp") or frame[c].nunique() > 1]
    frame = frame[list(dict.fromkeys([*shown, metric, *extra, "mem_total_bytes", "fits", "infeasible_reason"]))]
    cols = list(frame.columns)
    feasible = frame[frame["fits"]]
    reasons = ", ".join(f"{k} {v:,}" for k, v in frame.loc[~frame["fits"], "infeasible_reason"]
                        .value_counts().items() if v)
    lines.append(f"feasible rows (divide and fit) {len(feasible):,}"
                 + (f"; reasons of the others: {reasons}" if reasons else "; every row is feasible"))
    if feasible.empty:
        return "\n".join(lines)
    ascending = metric not in HIGH_IS_BETTER
    ranked = feasible.sort_values(metric, ascending=ascending, kind="stable")  # ties: grid order
    if by is None:
        by = tuple(c for c in ("model", "system") if frame[c].nunique() > 1)
    unknown = [c for c in by if c not in frame.columns]
    if unknown:
        raise SpecError(f"--by: column {unknown[0]!r} is not allowed; allowed: {', '.join(cols)}")
    if by:
        best = ranked.drop_duplicates(subset=list(by), keep="first")  # every group's best row, however many
        groups = frame.groupby(list(by), observed=True).ngroups
        lines.append(f"best row per {' x '.join(by)} by {metric} ({'lowest' if ascending else 'highest'} first), "
                     f"{len(best)} of {groups} groups have a feasible row:")
    else:
        best = ranked.head(top)
        lines.append(f"best {len(best)} by {metric} ({'lowest' if ascending else 'highest'} first):")
    show = best.drop(columns=["fits", "infeasible_reason"]).copy()
    show["mem_total_bytes"] = (show["mem_total_bytes"].astype("float64") / 1e9).round(1)
    show = show.rename(columns={"mem_total_bytes": "mem_GB"})
    lines.append(show.to_string(index=False))
    return "\n".join(lines)
