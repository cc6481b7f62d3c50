"""Pareto fronts of sweep datasets: which configurations no other configuration beats on every objective.

Definitions.  Objectives are columns with a direction, ``"step_time_s:min"`` or ``"tokens_per_s_per_gpu:max"``.
Every ``max`` column is negated so that all objectives are minimised.  A point ``a`` *dominates* ``b`` when

    a_j <= b_j for every objective j   and   a_j < b_j for at least one j        (Pareto 1896; Deb 2001 §2.4)

and the *front* is the set of points no other point dominates.  Consequences: exact duplicates of a front point
are all on the front (neither dominates the other); a row with NaN in any objective is never on the front and
never dominates anything; ``±inf`` are ordinary values.  With groups, only points of the same group are
compared (one front per group).

Algorithms (all numpy, no Python loop over rows):

* Pre-filters, O(n).  k <= 2: the first objective is cut into B equal bins (B = n/64, at most 65 536); the
  least second objective of each bin, running-minimised along the bins, drops every point that a point of an
  earlier bin (so of a strictly smaller first objective) dominates (``np.minimum.at``, one gather).  k >= 3:
  each column is scaled to [0, 1] by its finite range (±inf clipped to 2 / −1) and the scaled columns summed
  into a score that is monotone (if ``a`` dominates ``b`` then ``s(a) <= s(b)``; rounding is monotone too);
  the point of least score of each group drops every point it dominates.  On random and sweep data these
  remove all but a few per mille (k = 2) or per cent (k >= 3) of the rows; on data that is all front, nothing.
* k = 1 and k = 2: lexicographic order then a running minimum (Kung, Luccio, Preparata 1975), O(n log n).
  The lexicographic order is realised as one ``argsort`` on the first objective (6× faster than
  ``np.lexsort`` at 10⁷ rows) plus, for each run of equal first objective, the minimum of the second
  (``np.minimum.reduceat``).  A point is on the front iff its second objective equals its run's minimum and is
  strictly below the minimum of every earlier run (``np.minimum.accumulate``, segmented per group).
* k = 3: after sorting lexicographically and merging exact duplicates, a point is dominated iff an earlier
  point is <= in the 2nd and 3rd objectives (the earlier one is <= in the 1st by the order, and distinct).
  That offline 2-D prefix-dominance question is answered by divide and conquer on the index (Bentley 1980;
  Kung, Luccio, Preparata 1975), one vectorized pass per level (sort by block and 2nd objective, running
  minimum of the 3rd), O(n log² n) however large the front.
* k >= 4: sort-filter-skyline (Chomicki, Godfrey, Gryz, Liang 2003) in blocks.  Points are sorted by score, so
  a point's dominators come before it (score ties aside, see below).  Blocks of ``block_size`` points are
  compared with numpy broadcasting against the front found so far (in chunks, dropping dominated points after
  each chunk: the first front points, of least score, dominate the most), then among themselves; the
  survivors are front points — no later point can dominate them — and join the front.  Checking against
  front points suffices: dominance is transitive, so whatever a dominated point dominates, a front point
  dominates too.  A later point of *equal* score may still dominate an earlier one (rounding); such front
  points are re-checked against each new block and dropped.  Cost O(n·|F|·k / vector width): fast when the
  front F is small (sweep data; random data of 10⁶ rows and 3–4 objectives has F ~ 10²–10³), quadratic when
  nearly every point is on the front.

Speed (``python -m dse.bench.pareto``, one core of the 2-core development machine): 2 objectives, 10⁷ rows:
0.5 s uniform random, 0.5 s nearly anti-correlated (40 000 front points), 2–3 s when every row is on the front
(the pre-filter removes nothing and the full sort runs); 3 objectives, 10⁶ rows: 0.1 s uniform random, 3 s
with every row on the front.

Entry points: :func:`pareto_mask` (arrays), :func:`front_mask` and :func:`pareto_front` (DataFrames, per group,
feasible rows).  This module computes fronts only: ``dse pareto`` (dataset → front table and figure) is
:func:`dse.pareto_report.run_pareto`, above it and above the drawing in :mod:`dse.plots`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

#: Allowed objective directions.
DIRECTIONS: tuple[str, ...] = ("min", "max")
#: Points per block of the k >= 4 algorithm, and front points compared per chunk.
BLOCK_SIZE = 1024
FRONT_CHUNK = 256

Objective = tuple[str, str]


def parse_objectives(specs: str | Iterable[str]) -> list[Objective]:
    """``["step_time_s:min", "gpus:min"]`` → ``[("step_time_s", "min"), ("gpus", "min")]``.

    Each string is ``NAME:DIRECTION`` with DIRECTION ``min`` or ``max`` (case-insensitive); a string may hold
    several, separated by commas (``"step_time_s:min,gpus:min"``).  Raises ``ValueError`` naming the bad
    string and the allowed directions.
    """
    if isinstance(specs, str):
        specs = [specs]
    out: list[Objective] = []
    for spec in specs:
        for part in str(spec).split(","):
            name, sep, direction = part.strip().rpartition(":")
            direction = direction.strip().lower()
            if not sep or not name.strip() or direction not in DIRECTIONS:
                raise ValueError(
                    f"objective {part.strip()!r} is not allowed: expected COLUMN:DIRECTION with DIRECTION one of "
                    f"{', '.join(DIRECTIONS)} (e.g. step_time_s:min, tokens_per_s_per_gpu:max)")
            out.append((name.strip(), direction))
    if not out:
        raise ValueError("no objective given: expected COLUMN:DIRECTION with DIRECTION one of "
                         f"{', '.join(DIRECTIONS)} (e.g. step_time_s:min)")
    return _each_once(out)


def _each_once(objectives: list[Objective]) -> list[Objective]:
    """The objectives, each column at most once (a front over one column twice has no meaning)."""
    seen: set[str] = set()
    for name, _ in objectives:
        if name in seen:
            raise ValueError(f"objective column {name!r} is given twice: "
                             f"{', '.join(f'{n}:{d}' for n, d in objectives)}; allowed: each column once")
        seen.add(name)
    return objectives


def as_objectives(objectives: str | Iterable[str | Objective]) -> list[Objective]:
    """Objectives given as strings (see :func:`parse_objectives`) or ``(column, direction)`` pairs."""
    if isinstance(objectives, str):
        return parse_objectives(objectives)
    out: list[Objective] = []
    for obj in objectives:
        if isinstance(obj, str):
            out.extend(parse_objectives(obj))
        else:
            name, direction = obj
            out.extend(parse_objectives(f"{name}:{direction}"))
    if not out:
        raise ValueError("no objective given: expected COLUMN:DIRECTION with DIRECTION one of "
                         f"{', '.join(DIRECTIONS)} (e.g. step_time_s:min)")
    return _each_once(out)


def pareto_mask(values: ArrayLike, directions: str | Sequence[str] = "min", groups: ArrayLike | None = None,
                block_size: int = BLOCK_SIZE) -> NDArray[np.bool_]:
    """Boolean mask of the rows of ``values`` (shape (n, k), or (n,) for one objective) on the Pareto front.

    ``directions``: one ``"min"``/``"max"`` per column (or one string for all).  ``groups``: optional labels of
    length n; one front per group.  Rows with a NaN are never on the front.  See the module docstring for the
    definition (duplicates of a front point are all kept) and the algorithms.
    """
    v = np.asarray(values)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2:
        raise ValueError(f"values must have shape (n, k); got shape {v.shape}")
    n, k = v.shape
    if k == 0:
        raise ValueError("values must have at least one objective column")
    dirs = [directions] * k if isinstance(directions, str) else list(directions)
    if len(dirs) != k:
        raise ValueError(f"{len(dirs)} directions for {k} objective columns")
    for d in dirs:
        if d not in DIRECTIONS:
            raise ValueError(f"direction {d!r} is not allowed; allowed: {', '.join(DIRECTIONS)}")
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    if v.dtype.kind != "f":
        v = v.astype(np.float64)
    # Minimisation form, one contiguous array per objective.
    cols = [np.negative(v[:, j]) if d == "max" else np.ascontiguousarray(v[:, j]) for j, d in enumerate(dirs)]
    g: NDArray[np.int64] | None = None
    if groups is not None:
        labels = np.asarray(groups)
        if labels.shape != (n,):
            raise ValueError(f"groups must have shape ({n},); got {labels.shape}")
        g = pd.factorize(labels, use_na_sentinel=False)[0].astype(np.int64)
    # Rows without NaN.
    ok = ~np.isnan(cols[0])
    for c in cols[1:]:
        ok &= ~np.isnan(c)
    idx: NDArray[np.intp] | None = None
    if not ok.all():
        idx = np.flatnonzero(ok)
        if idx.size == 0:
            return mask
        cols = [c[idx] for c in cols]
        g = g[idx] if g is not None else None
    if k <= 2:
        second = cols[1] if k == 2 else np.zeros_like(cols[0])
        cols = [cols[0], second]
        score = np.empty(0)
        keep = _grid_filter(cols[0], second, g)
    else:
        score = _score(cols)
        keep = _pivot_filter(cols, score, g)
    if not keep.all():
        sel = np.flatnonzero(keep)
        idx = sel if idx is None else idx[sel]
        score = score[sel] if score.size else score
        cols = [c[sel] for c in cols]
        g = g[sel] if g is not None else None
    if g is not None:
        g = _dense(g)
    if k <= 2:
        front = _front_2d(cols[0], cols[1], g)
    elif k == 3:
        front = _front_3d(cols[0], cols[1], cols[2], g)
    else:
        front = _front_nd(cols, score, g, block_size)
    if idx is None:
        return front
    mask[idx[front]] = True
    return mask


def front_mask(frame: pd.DataFrame, objectives: str | Iterable[str | Objective],
               by: str | Sequence[str] | None = None, feasible_only: bool = True) -> NDArray[np.bool_]:
    """Boolean mask over the rows of ``frame``: on the Pareto front of ``objectives`` (per group of ``by``
    columns).  With ``feasible_only``, rows whose ``fits`` column is false are neither on the front nor compared.
    Positional, so a frame with a repeated index works too."""
    objs = as_objectives(objectives)
    by_cols = [by] if isinstance(by, str) else list(by or [])
    for col in [c for c, _ in objs] + by_cols:
        if col not in frame.columns:
            raise ValueError(f"column {col!r} is not in the data; columns: {', '.join(map(str, frame.columns))}")
    for col, _ in objs:
        if not (pd.api.types.is_numeric_dtype(frame[col]) or pd.api.types.is_bool_dtype(frame[col])):
            raise ValueError(f"objective column {col!r} is not numeric (dtype {frame[col].dtype})")
    mask = np.zeros(len(frame), dtype=bool)
    rows = np.arange(len(frame))
    if feasible_only and "fits" in frame.columns:
        rows = np.flatnonzero(frame["fits"].to_numpy(dtype=bool))
    if rows.size == 0:
        return mask
    sub = frame.iloc[rows] if rows.size < len(frame) else frame
    values = np.column_stack([sub[c].to_numpy() for c, _ in objs])
    groups = sub.groupby(by_cols, observed=True, sort=False, dropna=False).ngroup().to_numpy() if by_cols else None
    mask[rows] = pareto_mask(values, [d for _, d in objs], groups)
    return mask


def pareto_front(frame: pd.DataFrame, objectives: str | Iterable[str | Objective],
                 by: str | Sequence[str] | None = None, feasible_only: bool = True) -> pd.DataFrame:
    """The rows of ``frame`` on the Pareto front of ``objectives`` (per group of ``by`` columns when given).

    ``objectives``: strings ``"COLUMN:min|max"`` or ``(column, direction)`` pairs.  ``feasible_only``: keep
    only rows whose ``fits`` column is true, when the frame has one.  The result keeps the original index and
    is sorted by the ``by`` columns then the first objective (best first), ready to draw as a line.
    """
    objs = as_objectives(objectives)
    by_cols = [by] if isinstance(by, str) else list(by or [])
    front = frame[front_mask(frame, objs, by_cols, feasible_only)]
    first, direction = objs[0]
    return front.sort_values(by_cols + [first], ascending=[True] * len(by_cols) + [direction == "min"],
                             kind="stable")


# ---- internals ---------------------------------------------------------------------------------------------


def _dense(g: NDArray[np.int64]) -> NDArray[np.int64]:
    """Group codes renumbered 0..G-1 in the order of first appearance, in the smallest integer type that
    holds them (a stable sort on ≤ 16-bit integers is a radix sort)."""
    codes = pd.factorize(g)[0]
    small = np.int16 if codes.size == 0 or codes.max() < np.iinfo(np.int16).max else np.int64
    return codes.astype(small)


def _score(cols: list[NDArray[np.floating]]) -> NDArray[np.float64]:
    """Sum of the columns scaled to [0, 1] by their finite range (±inf → 2 / −1): monotone in every column."""
    score = np.zeros(cols[0].shape[0], dtype=np.float64)
    for c in cols:
        lo, hi = float(c.min()), float(c.max())
        finite = np.isfinite(lo) and np.isfinite(hi)
        if not finite:
            fin = c[np.isfinite(c)]
            lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (0.0, 1.0)
        span = hi - lo if hi > lo else 1.0
        t = np.subtract(c, lo, dtype=np.float64)
        t *= 1.0 / span
        if not finite:
            np.clip(t, -1.0, 2.0, out=t)
        score += t
    return score


def _pivot_filter(cols: list[NDArray[np.floating]], score: NDArray[np.float64],
                  g: NDArray[np.int64] | None) -> NDArray[np.bool_]:
    """False for the points dominated by their group's point of least score (one O(n·k) pass)."""
    if g is None:
        p = int(np.argmin(score))
        pivots = [c[p] for c in cols]
        ge = cols[0] >= pivots[0]
        gt = cols[0] > pivots[0]
        for c, pv in zip(cols[1:], pivots[1:], strict=True):
            ge &= c >= pv
            gt |= c > pv
        return ~(ge & gt)
    n_groups = int(g.max()) + 1
    least = np.full(n_groups, np.inf)
    np.minimum.at(least, g, score)
    cand = np.flatnonzero(score == least[g])
    present, first = np.unique(g[cand], return_index=True)
    p_idx = cand[first]
    ge = np.ones(score.shape[0], dtype=bool)
    gt = np.zeros(score.shape[0], dtype=bool)
    for c in cols:
        pv = np.full(n_groups, np.inf, dtype=c.dtype)
        pv[present] = c[p_idx]
        pg = pv[g]
        ge &= c >= pg
        gt |= c > pg
    return ~(ge & gt)


def _grid_filter(x: NDArray[np.floating], y: NDArray[np.floating], g: NDArray[np.int64] | None,
                 max_cells: int = 1 << 18) -> NDArray[np.bool_]:
    """False for points (x, y minimised) dominated by a point of an earlier x bin of their group, O(n).

    x is cut into B equal bins over its finite range (±inf into the end bins): b(x) is non-decreasing in x, so
    a point of an earlier bin has a strictly smaller x, and a point whose y is >= the least y of the earlier
    (non-empty) bins is dominated.  Least y per (group, bin) by ``np.minimum.at``, running minimum along the
    bins.  B = n/64, at most 65 536 and (groups × B) <= ``max_cells``: on random or sweep data all but a few
    per mille of the points go, so the sort that follows is short."""
    n = x.shape[0]
    n_groups = int(g.max()) + 1 if g is not None else 1
    bins = int(min(65536, n // 64, max_cells // n_groups))
    lo, hi = float(x.min()), float(x.max())
    if not (np.isfinite(lo) and np.isfinite(hi)):
        fin = x[np.isfinite(x)]
        lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (0.0, 0.0)
    if bins < 2 or not hi > lo:
        return np.ones(n, dtype=bool)
    pos = np.subtract(x, lo, dtype=np.float64)
    pos *= bins / (hi - lo)
    np.clip(pos, 0.0, bins - 1.0, out=pos)
    cell = pos.astype(np.int64)
    if g is not None:
        cell += g * bins
    least = np.full(n_groups * bins, np.inf, dtype=y.dtype)  # same dtype: the fast path of ufunc.at
    np.minimum.at(least, cell, y)
    occupied = np.bincount(cell, minlength=n_groups * bins).reshape(n_groups, bins) > 0
    grid = least.reshape(n_groups, bins)
    # least y of the strictly earlier bins of the group; NaN where none holds a point (y >= NaN is false)
    before = np.full_like(grid, np.nan)
    before[:, 1:] = np.minimum.accumulate(grid[:, :-1], axis=1)
    seen = np.logical_or.accumulate(occupied[:, :-1], axis=1)
    before[:, 1:][~seen] = np.nan
    return ~(y >= before.ravel()[cell])


def _front_2d(x: NDArray[np.floating], y: NDArray[np.floating], g: NDArray[np.integer] | None) -> NDArray[np.bool_]:
    """Front of (x, y), both minimised: sort by x, minimum of y per run of equal x, running minimum over runs."""
    n = x.shape[0]
    order = np.argsort(x)
    if g is not None:
        order = order[np.argsort(g[order], kind="stable")]
    xs, ys = x[order], y[order]
    new_run = np.empty(n, dtype=bool)
    new_run[0] = True
    np.not_equal(xs[1:], xs[:-1], out=new_run[1:])
    if g is not None:
        gs = g[order]
        new_group = np.empty(n, dtype=bool)
        new_group[0] = True
        np.not_equal(gs[1:], gs[:-1], out=new_group[1:])
        new_run |= new_group
    starts = np.flatnonzero(new_run)
    ties = starts.size < n
    run_min = np.minimum.reduceat(ys, starts) if ties else ys
    record = np.empty(starts.size, dtype=bool)
    record[0] = True
    if g is None:
        np.less(run_min[1:], np.minimum.accumulate(run_min[:-1]), out=record[1:])
    else:
        run_g = gs[starts]
        best = pd.Series(run_min).groupby(run_g, sort=False).cummin().to_numpy()
        record[1:] = (run_min[1:] < best[:-1]) | (run_g[1:] != run_g[:-1])
    if ties:
        lengths = np.diff(starts, append=n)
        keep_sorted = np.repeat(record, lengths) & (ys == np.repeat(run_min, lengths))
    else:
        keep_sorted = record
    front = np.zeros(n, dtype=bool)
    front[order[keep_sorted]] = True
    return front


def _dense_rank(v: NDArray[np.generic]) -> NDArray[np.int64]:
    """0-based ranks, equal values sharing one rank."""
    return np.unique(v, return_inverse=True)[1].astype(np.int64).ravel()


def _front_3d(x: NDArray[np.floating], y: NDArray[np.floating], z: NDArray[np.floating],
              g: NDArray[np.integer] | None) -> NDArray[np.bool_]:
    """Front of three minimised columns, O(n log² n) whatever its size (see the module docstring)."""
    n = x.shape[0]
    order = np.lexsort((z, y, x) if g is None else (z, y, x, g))
    xs, ys, zs = x[order], y[order], z[order]
    new = np.empty(n, dtype=bool)  # first of each run of identical points (duplicates share the answer)
    new[0] = True
    new[1:] = (xs[1:] != xs[:-1]) | (ys[1:] != ys[:-1]) | (zs[1:] != zs[:-1])
    if g is not None:
        gs = g[order]
        new[1:] |= gs[1:] != gs[:-1]
    rep = np.flatnonzero(new)
    y_rank, z_rank = _dense_rank(ys[rep]), _dense_rank(zs[rep])
    if g is not None:  # an earlier group's points get larger y ranks than any later group's: never compared
        groups = gs[rep].astype(np.int64)
        y_rank = _dense_rank(y_rank + (int(groups.max()) - groups) * rep.size)
    dominated = _prefix_dominance(y_rank, z_rank)
    front = np.zeros(n, dtype=bool)
    front[order[~dominated[np.cumsum(new) - 1]]] = True
    return front


def _prefix_dominance(y: NDArray[np.int64], z: NDArray[np.int64]) -> NDArray[np.bool_]:
    """For each j: is there an i < j with y_i <= y_j and z_i <= z_j?  (ranks, y < 2⁶²/m)

    Divide and conquer on the index (Bentley 1980), one numpy pass per level: at level l every block of 2^(l+1)
    indices is split into a left and a right half; sorting by (block, y, left first) and taking a running
    minimum of the left halves' z (a per-block restart is made by adding a block offset larger than any rank to
    earlier blocks) answers every right point's query against its left half at once.  The levels together
    cover every pair i < j once.  A point found dominated drops out of later levels as a query and as a
    candidate dominator (whatever it dominates, its own dominator does too).
    """
    m = y.shape[0]
    dominated = np.zeros(m, dtype=bool)
    index = np.arange(m, dtype=np.int64)
    y_span, big = int(y.max()) + 1 if m else 1, m  # big: above every z rank
    level = 0
    while (1 << level) < m:
        live = np.flatnonzero(~dominated)
        i = index[live]
        block = i >> (level + 1)
        right = ((i >> level) & 1).astype(bool)
        order = np.argsort((block * y_span + y[live]) * 2 + right)
        b, r, zs = block[order], right[order], z[live][order]
        offset = (int(b[-1]) + 1 - b) * (m + 1)
        best = np.minimum.accumulate(np.where(r, big, zs) + offset)
        hit = r & (best - offset <= zs)
        dominated[live[order[hit]]] = True
        level += 1
    return dominated


def _dominated(a: NDArray[np.floating], b: NDArray[np.floating], ga: NDArray[np.integer] | None,
               gb: NDArray[np.integer] | None) -> NDArray[np.bool_]:
    """For each row of ``b``: is it dominated by some row of ``a`` (of the same group)?  Rows (m, k) and
    (n, k); an (m, n) comparison per objective.  Strictness is checked only on the (few) weakly dominating
    pairs."""
    le = a[:, None, 0] <= b[None, :, 0]
    if ga is not None and gb is not None:
        le &= ga[:, None] == gb[None, :]
    for j in range(1, a.shape[1]):
        le &= a[:, None, j] <= b[None, :, j]
    ia, ib = np.nonzero(le)
    out = np.zeros(b.shape[0], dtype=bool)
    if ia.size:
        strict = (a[ia] < b[ib]).any(axis=1)
        out[ib[strict]] = True
    return out


def _front_nd(cols: list[NDArray[np.floating]], score: NDArray[np.float64], g: NDArray[np.integer] | None,
              block_size: int) -> NDArray[np.bool_]:
    """Front of k >= 3 minimised columns (used for k >= 4): sort-filter-skyline in blocks (module docstring)."""
    n = score.shape[0]
    order = np.argsort(score)
    if g is not None:
        order = order[np.argsort(g[order], kind="stable")]
    vals = np.stack([c[order] for c in cols], axis=1)
    sc = score[order]
    gs = g[order] if g is not None else None
    k = vals.shape[1]
    f_val = np.empty((0, k), dtype=vals.dtype)
    f_sc = np.empty(0, dtype=np.float64)
    f_pos = np.empty(0, dtype=np.int64)
    f_g = np.empty(0, dtype=gs.dtype) if gs is not None else None
    for lo in range(0, n, block_size):
        hi = min(lo + block_size, n)
        pos = np.arange(lo, hi)
        bv, bs = vals[lo:hi], sc[lo:hi]
        bg = gs[lo:hi] if gs is not None else None
        # Front points of earlier groups cannot dominate this block (sorted by group, then score).
        first = int(np.searchsorted(f_g, bg[0], side="left")) if f_g is not None and bg is not None else 0
        for c0 in range(first, f_val.shape[0], FRONT_CHUNK):
            c1 = min(c0 + FRONT_CHUNK, f_val.shape[0])
            dom = _dominated(f_val[c0:c1], bv, f_g[c0:c1] if f_g is not None else None, bg)
            if dom.any():
                live = ~dom
                pos, bv, bs = pos[live], bv[live], bs[live]
                bg = bg[live] if bg is not None else None
            if pos.size == 0:
                break
        if pos.size == 0:
            continue
        live = ~_dominated(bv, bv, bg, bg)
        pos, bv, bs = pos[live], bv[live], bs[live]
        bg = bg[live] if bg is not None else None
        # Earlier front points of equal score may be dominated by the new ones (score ties from rounding).
        tied = first + np.flatnonzero(f_sc[first:] >= bs.min())
        if tied.size:
            gone = _dominated(bv, f_val[tied], bg, f_g[tied] if f_g is not None else None)
            if gone.any():
                stay = np.ones(f_val.shape[0], dtype=bool)
                stay[tied[gone]] = False
                f_val, f_sc, f_pos = f_val[stay], f_sc[stay], f_pos[stay]
                f_g = f_g[stay] if f_g is not None else None
        f_val = np.concatenate([f_val, bv])
        f_sc = np.concatenate([f_sc, bs])
        f_pos = np.concatenate([f_pos, pos])
        if f_g is not None and bg is not None:
            f_g = np.concatenate([f_g, bg])
    front = np.zeros(n, dtype=bool)
    front[order[f_pos]] = True
    return front


# ---- command level (``dse pareto``) --------------------------------------------------------------------------

#: Columns printed with a front (besides the groups and the objectives), when present.
