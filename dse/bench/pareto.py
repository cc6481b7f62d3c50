"""Benchmark of :func:`dse.pareto.pareto_mask` on one core, against the ``paretoset`` package when installed.

``python -m dse.bench.pareto [--rows 10000000] [--budget 60]``

Data sets of N rows (seeded):

* ``uniform``: two objectives uniform on [0, 1), both minimised — the pre-filter removes almost every row,
  the front has ~ln N points;
* ``anti``: ``y = 1 − x + 0.01·u`` — nearly anti-correlated, the pre-filter removes almost nothing and the
  full sort runs (the worst case of the 2-objective algorithm);
* ``uniform3``: three uniform objectives, N/10 rows (a small front);
* ``sphere3``: N/10 points on the positive octant of the unit sphere, three objectives maximised — every point
  is on the front (the worst case of an O(N·|front|) algorithm; the 3-objective divide and conquer does not
  care).

Both are timed on the first 10⁴, 10⁵, ... rows of each data set.  ``paretoset`` (numba, O(N·|front|)) runs
after a warm-up call that pays its JIT compilation, and is skipped when its time, estimated from its previous
size as proportional to rows × front size, would exceed ``--budget``.  Agreement: the two masks compared
element by element on the same rows (``distinct=False``, so duplicates are kept as :func:`pareto_mask` keeps
them).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from dse.pareto import pareto_mask

Mask = NDArray[np.bool_]


def make_data(kind: str, n: int, seed: int = 0) -> tuple[NDArray[np.float64], list[str]]:
    """(values (n, k), directions) of one benchmark data set."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return rng.random((n, 2)), ["min", "min"]
    if kind == "anti":
        x = rng.random(n)
        return np.column_stack([x, 1.0 - x + 0.01 * rng.random(n)]), ["min", "min"]
    if kind == "uniform3":
        return rng.random((n, 3)), ["min", "min", "min"]
    if kind == "sphere3":
        v = np.abs(rng.normal(size=(n, 3)))
        return v / np.linalg.norm(v, axis=1)[:, None], ["max", "max", "max"]
    raise ValueError(f"data set {kind!r} is not known; known: uniform, anti, uniform3, sphere3")


def _timed(fn: Callable[[], Mask]) -> tuple[float, Mask]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _paretoset() -> Callable[..., Mask] | None:
    try:
        from paretoset import paretoset  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    fn: Callable[..., Mask] = paretoset
    return fn


def run(rows: int, budget: float, seed: int = 0) -> list[dict[str, object]]:
    """Rows of the result table: data set, rows, front size, pareto_mask time, paretoset time, agreement.

    paretoset's time is estimated before each call from its previous one as proportional to rows × front size
    (its algorithm compares every row with the front); a call estimated above ``budget`` seconds is not run."""
    other = _paretoset()
    if other is not None:
        other(np.random.default_rng(1).random((1000, 3)), sense=["min"] * 3, distinct=False)  # JIT warm-up
    results: list[dict[str, object]] = []
    small = max(rows // 10, 1)
    for kind, n_rows in (("uniform", rows), ("anti", rows), ("uniform3", small), ("sphere3", small)):
        values, dirs = make_data(kind, n_rows, seed)
        sizes = sorted({s for s in (10**4, 10**5, 10**6, 10**7) if s < n_rows} | {n_rows})
        last: tuple[int, int, float] | None = None  # rows, front, paretoset seconds
        for n in sizes:
            sub = values[:n]
            t_mine, mine = _timed(lambda: pareto_mask(sub, dirs))  # noqa: B023 - called at once
            row: dict[str, object] = {"data": kind, "rows": n, "front": int(mine.sum()), "pareto_mask_s": t_mine,
                                      "paretoset_s": None, "agree": None}
            results.append(row)
            fn = other
            if fn is None:
                continue
            if last is not None:
                estimate = last[2] * (n / last[0]) * (max(int(mine.sum()), 1) / max(last[1], 1))
                if estimate > budget:
                    row["paretoset_s"] = f"~{estimate:.0f} (estimated, not run)"
                    fn = None
            if fn is None:
                continue
            t_theirs, theirs = _timed(lambda: np.asarray(fn(sub, sense=dirs, distinct=False)))  # noqa: B023
            row.update(paretoset_s=t_theirs, agree=bool(np.array_equal(mine, theirs)))
            last = (n, int(mine.sum()), t_theirs)
    return results


def format_results(results: list[dict[str, object]]) -> str:
    def fmt(v: object) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3f}"
        if isinstance(v, bool):
            return "yes" if v else "NO"
        return str(v)

    cols = ("data", "rows", "front", "pareto_mask_s", "paretoset_s", "agree")
    table = [cols] + [tuple(fmt(r[c]) for c in cols) for r in results]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dse.bench.pareto", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10**7, help="rows of the 2-objective data sets (default 1e7)")
    parser.add_argument("--budget", type=float, default=60.0,
                        help="seconds allowed for one paretoset call (estimated before running it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-record", action="store_true",
                        help="do not write dse/bench/figures.json and the README's speed table")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    print(f"pareto_mask vs paretoset on one core; paretoset {'installed' if _paretoset() else 'NOT installed'}")
    results = run(args.rows, args.budget, args.seed)
    print(format_results(results))
    if not args.no_record:
        from dse.bench.kernels import save_records

        save_records(summary_records(results))
    return 0


def summary_records(results: list[dict[str, object]]) -> list[dict[str, str]]:
    """Two rows of the README's speed table: the largest size of each data set, with paretoset beside it."""
    from dse.bench.kernels import record, sci

    def largest(kind: str) -> dict[str, object]:
        return max((r for r in results if r["data"] == kind), key=lambda r: int(str(r["rows"])))

    def theirs(r: dict[str, object]) -> str:
        t = r["paretoset_s"]
        return "not installed" if t is None and _paretoset() is None else (
            f"{t:.2f} s" if isinstance(t, float) else str(t).replace(" (", " s (", 1))

    u, a, u3, s3 = (largest(k) for k in ("uniform", "anti", "uniform3", "sphere3"))
    return [
        record("pareto_2", f"Pareto front, one core, 2 objectives, {sci(float(str(u['rows'])))} rows "
               "(`python -m dse.bench.pareto`)",
               f"{u['pareto_mask_s']:.2f} s uniform random (front {u['front']}), {a['pareto_mask_s']:.2f} s nearly "
               f"anti-correlated (front {a['front']:,}); `paretoset`: {theirs(u)} and {theirs(a)}"),
        record("pareto_3", f"Pareto front, 3 objectives, {sci(float(str(u3['rows'])))} rows",
               f"{u3['pareto_mask_s']:.2f} s random (paretoset {theirs(u3)}); {s3['pareto_mask_s']:.2f} s with every "
               f"row on the front (paretoset {theirs(s3)})"),
    ]


if __name__ == "__main__":
    raise SystemExit(main())
