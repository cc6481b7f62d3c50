"""Drawing: matplotlib object API on the Agg canvas (never pyplot), one function per figure kind."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import BoundaryNorm, ListedColormap, LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, LogLocator, NullFormatter, NullLocator

from dse.cost.training import MEMORY_BREAKDOWN, TIME_BREAKDOWN
from dse.pareto import Objective, as_objectives
from dse.plots.labels import (
    _DPI,
    PLAIN_NUMBERS,
    _display,
    axis_label,
    default_direction,
    quantity,
)

# ---- drawing -------------------------------------------------------------------------------------------------


def new_figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), dpi=_DPI, layout="constrained")


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix) atomically (:func:`dse.outputs.write_atomic`)."""
    from dse.outputs import figure_metadata, write_atomic

    # constrained layout + tight box: nothing clipped; PNG text marks the file as dse's (dse.outputs)
    meta = figure_metadata() if Path(path).suffix.lower() == ".png" else None
    return write_atomic(path, lambda tmp: fig.savefig(tmp, bbox_inches="tight", pad_inches=0.1, metadata=meta))


def _grid(fig: Figure, n: int, ncols: int, sharex: bool = False, sharey: bool = False) -> list[Axes]:
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=sharex, sharey=sharey).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return list(axes[:n])


def _values(data: pd.DataFrame, column: str | None) -> list[Any]:
    """Distinct values of a column in display order (category order, else sorted), or [None]."""
    if column is None:
        return [None]
    col = data[column]
    if isinstance(col.dtype, pd.CategoricalDtype):
        present = set(col.dropna())
        return [v for v in col.cat.categories if v in present]
    return sorted(pd.unique(col.dropna()))


def _select(data: pd.DataFrame, column: str | None, value: Any) -> pd.DataFrame:
    return data if column is None else data[data[column] == value]


def color_cycle(n: int, name: str | None = None) -> list[Any]:
    """``n`` distinct colours: tab10 up to 10, tab20 above (or the colormap ``name``)."""
    cmap = colormaps[name or ("tab10" if n <= 10 else "tab20")]
    return [cmap(i % cmap.N) for i in range(n)]


def plain_log(axis: Any, subs: Sequence[float] = (1.0, 2.0, 5.0)) -> None:
    """Log axis ticks at 1, 2, 5 × 10ⁿ (or ``subs``) written as plain numbers."""
    axis.set_major_locator(LogLocator(base=10.0, subs=tuple(subs)))
    axis.set_major_formatter(PLAIN_NUMBERS)
    axis.set_minor_formatter(NullFormatter())


def log_subs(values: Any) -> tuple[float, ...]:
    """Labelled ticks per decade of a log axis showing ``values``: 1, 2, 3, 5, 7 × 10ⁿ when they span less than two
    decades (a panel of one model: its lines sit within a decade or so, and 1, 2, 5 left lines at 4,500 between the
    labels 2,000 and 5,000 with no value to read against), 1, 2, 5 over wider spans."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    return (1.0, 2.0, 3.0, 5.0, 7.0) if v.size and v.max() / v.min() < 100 else (1.0, 2.0, 5.0)


def _spans(values: np.ndarray, ratio: float = 30.0) -> bool:
    """Positive values spanning more than ``ratio`` — more than a decade and a half: a log axis reads better."""
    v = values[np.isfinite(values)]
    return bool(v.size) and float(v.min()) > 0 and float(v.max()) / float(v.min()) > ratio


def draw_pareto(data: pd.DataFrame, objectives: str | Sequence[str | Objective], path: str | Path,
                facet: str | None = None, hue: str | None = None, title: str | None = None,
                logx: bool | None = None, logy: bool | None = None) -> Path:
    """Draw :func:`pareto_data`: grey cloud, front per ``hue`` value as a line (2 objectives) or front points
    coloured by the third objective (3 objectives; a discrete scale when it takes ≤ 10 values), one panel per
    ``facet`` value.  ``logx``/``logy``: log axes (default: when the values span more than 30×, decided once
    for all panels)."""
    objs = as_objectives(objectives)
    (xc, xd), (yc, yd) = objs[0], objs[1]
    zc, zd = objs[2] if len(objs) == 3 else (None, None)
    facets = _values(data, facet)
    ncols = 2 if len(facets) > 1 else 1
    fig = new_figure(5.2 * ncols + (1.6 if hue and zc is None else 0.6), 0.6 + 3.9 * -(-len(facets) // ncols))
    axes = _grid(fig, len(facets), ncols)
    hues = _values(data, hue) if zc is None else [None]
    colors = dict(zip(hues, color_cycle(len(hues)), strict=True))
    norm: Normalize | None = None
    cmap: Any = "viridis"
    levels: np.ndarray | None = None
    if zc is not None:
        zv = _display(zc, data.loc[data["on_front"], zc])
        zv = zv[np.isfinite(zv)]
        levels = np.unique(zv)
        if 1 <= levels.size <= 10:  # few values (GPU counts): one colour each
            cmap = ListedColormap(colormaps["viridis"](np.linspace(0.0, 1.0, levels.size)))
            norm = BoundaryNorm(np.arange(levels.size + 1) - 0.5, levels.size)
        else:
            lo, hi = (float(zv.min()), float(zv.max())) if zv.size else (0.0, 1.0)
            norm = LogNorm(lo, hi) if lo > 0 and hi / lo > 20 else Normalize(lo, hi)
            levels = None
    scatter = None
    drawn: list[Any] = []
    for ax, fv in zip(axes, facets, strict=True):
        part = _select(data, facet, fv)
        cloud = part[~part["on_front"]]
        ax.scatter(_display(xc, cloud[xc]), _display(yc, cloud[yc]), s=4, color="0.75", alpha=0.5, linewidths=0,
                   rasterized=True)
        front = part[part["on_front"]]
        if zc is None:
            for hv in hues:
                line = _select(front, hue, hv).sort_values(xc)
                if line.empty:
                    continue
                ax.plot(_display(xc, line[xc]), _display(yc, line[yc]), "-o", ms=3.5, lw=1.5, color=colors[hv])
                if hv not in drawn:
                    drawn.append(hv)
        else:
            z = _display(zc, front[zc])
            c = np.searchsorted(levels, z) if levels is not None else z
            scatter = ax.scatter(_display(xc, front[xc]), _display(yc, front[yc]), c=c, norm=norm, cmap=cmap, s=22,
                                 edgecolors="k", linewidths=0.4, zorder=3)
        if logx if logx is not None else _spans(_display(xc, data[xc])):
            ax.set_xscale("log")
            plain_log(ax.xaxis)
        if logy if logy is not None else _spans(_display(yc, data[yc])):
            ax.set_yscale("log")
            plain_log(ax.yaxis)
        ax.set_xlabel(axis_label(xc, xd))
        ax.set_ylabel(axis_label(yc, yd))
        ax.grid(True, alpha=0.3)
        if facet is not None:
            ax.set_title(str(fv), fontsize=10)
    if zc is not None and scatter is not None:
        cbar = fig.colorbar(scatter, ax=axes, shrink=0.7)
        cbar.set_label(axis_label(zc, zd))
        if isinstance(norm, LogNorm):
            plain_log(cbar.ax.yaxis)
        if levels is not None:
            cbar.set_ticks(list(range(levels.size)), labels=[f"{v:g}" for v in levels])
    handles: list[Any] = [Line2D([], [], ls="", marker="o", ms=4, color="0.7", label="feasible configurations")]
    if zc is None:
        handles += [Line2D([], [], color=colors[hv], marker="o", ms=4, label=str(hv) if hue else "Pareto front")
                    for hv in drawn]
    else:
        handles.append(Line2D([], [], ls="", marker="o", ms=6, mfc="white", mec="k",
                              label=f"Pareto front (colour: {quantity(zc)[0]})"))
    fig.legend(handles=handles, loc="outside right center" if zc is None else "outside lower center",
               ncols=1 if zc is None else 2, fontsize=8, title=axis_label(hue) if hue and zc is None else None,
               frameon=False)
    names = " vs ".join(quantity(c)[0] for c, _ in objs[:2])
    fig.suptitle(title or f"Pareto front: {names}" + (f", colour = {quantity(zc)[0]}" if zc else ""))
    return save_figure(fig, path)


def draw_scaling(data: pd.DataFrame, metric: str, x: str, path: str | Path, hue: str | None = None,
                 style: str | None = None, title: str | None = None, direction: str | None = None,
                 facet: str | None = None) -> Path:
    """Draw :func:`scaling_data`: one line per (``hue``, ``style``) group, one panel per ``facet`` value (so a
    legend never lists more than the hue × style lines of one panel); categorical x as evenly spaced labelled
    positions, numeric x on a log₂ axis when it spans ≥ 8×."""
    xs = _values(data, x)
    categorical = not pd.api.types.is_numeric_dtype(data[x])
    position = {v: i for i, v in enumerate(xs)}
    hues, styles, facets = _values(data, hue), _values(data, style), _values(data, facet)
    colors = dict(zip(hues, color_cycle(len(hues)), strict=True))
    dashes = dict(zip(styles, ["-", "--", ":", "-."] * (len(styles) // 4 + 1), strict=False))
    markers = dict(zip(styles, ["o", "s", "^", "D", "v"] * (len(styles) // 5 + 1), strict=False))
    ncols = 2 if len(facets) > 1 else 1
    width = 7.5 + 0.04 * max(len(str(v)) for v in xs) * len(xs)
    fig = new_figure(width * (0.75 if ncols == 2 else 1.0) * ncols, 0.8 + 3.8 * -(-len(facets) // ncols))
    axes = _grid(fig, len(facets), ncols, sharey=False)
    yv = _display(metric, data[metric])
    yv = yv[np.isfinite(yv) & (yv > 0)]
    log_y = bool(yv.size) and yv.max() / yv.min() > 8  # groups of very different scale: log axis, plain numbers
    handles: dict[str, Any] = {}
    for ax, fv in zip(axes, facets, strict=True):
        panel = _select(data, facet, fv)
        for hv in hues:
            for sv in styles:
                line = _select(_select(panel, hue, hv), style, sv)
                if line.empty:
                    continue
                px = line[x].map(position).to_numpy(dtype=np.float64) if categorical else \
                    line[x].to_numpy(np.float64)
                parts = [str(v) if c != "gpus" else f"{v} GPUs" for c, v in ((hue, hv), (style, sv)) if c is not None]
                label = " · ".join(parts) or quantity(metric)[0]
                (h,) = ax.plot(px, _display(metric, line[metric]), linestyle=dashes[sv], marker=markers[sv], ms=4,
                               color=colors[hv], label=label)
                handles.setdefault(label, h)
        if categorical:
            ax.xaxis.set_major_locator(FixedLocator(list(range(len(xs)))))
            ax.set_xticklabels([str(v) for v in xs], rotation=30, ha="right")
            ax.set_xlim(-0.3, len(xs) - 0.7)
        else:
            xv = np.asarray(xs, dtype=np.float64)
            if xv.size and xv.min() > 0 and xv.max() / xv.min() >= 8:
                ax.set_xscale("log", base=2)
                ax.xaxis.set_major_locator(FixedLocator(list(xv)))
                ax.xaxis.set_minor_locator(NullLocator())
                ax.set_xticklabels([f"{v:g}" for v in xv], rotation=30 if xv.size > 8 else 0)
        ax.set_xlabel(axis_label(x))
        ax.set_ylabel(axis_label(metric, direction or default_direction(metric)))
        ax.grid(True, which="major", alpha=0.3)
        if log_y:
            ax.set_yscale("log")
            plain_log(ax.yaxis, log_subs(_display(metric, panel[metric])))
        else:
            ax.set_ylim(bottom=0)
        if facet is not None:
            ax.set_title(str(fv), fontsize=10)
    if hue or style:
        fig.legend(handles=list(handles.values()), loc="outside right upper", fontsize=8, frameon=False,
                   title=" · ".join(axis_label(c) for c in (hue, style) if c))
    best = "highest" if (direction or default_direction(metric)) == "max" else "lowest"
    fig.suptitle(title or f"Best {quantity(metric)[0]} vs {quantity(x)[0]} ({best} over all layouts)")
    return save_figure(fig, path)


#: A part of a stacked bar thinner than this share of its bar in every row cannot be seen (a few pixels at most).
VISIBLE_SHARE = 0.005


def visible_parts(data: pd.DataFrame, every: Sequence[str]) -> tuple[list[str], list[str]]:
    """(parts drawn, parts named only): a part is drawn when it is at least VISIBLE_SHARE of its bar's total in
    some row, named under the legend when it is above zero somewhere but thinner than that everywhere."""
    present = [p for p in every if p in data.columns and (data[p] > 0).any()]
    total = data[present].sum(axis=1).to_numpy(dtype=np.float64) if present else np.zeros(len(data))
    drawn: list[str] = []
    hidden: list[str] = []
    for p in present:
        share = data[p].to_numpy(dtype=np.float64) / np.where(total > 0, total, np.inf)
        (drawn if (share >= VISIBLE_SHARE).any() else hidden).append(p)
    return drawn, hidden


def draw_breakdown(data: pd.DataFrame, kind: str, path: str | Path, facet: str | None = None,
                   title: str | None = None) -> Path:
    """Draw :func:`breakdown_data` as horizontal stacked bars (one per row, labelled), one panel per ``facet``
    value, on one x scale (panels compare); parts too thin to see in every bar (:func:`visible_parts`) are left
    out of the bars and the legend and named under it; memory bars mark the HBM capacity."""
    every = TIME_BREAKDOWN if kind == "time" else MEMORY_BREAKDOWN
    parts, hidden = visible_parts(data, every)
    unit, factor = ("s", 1.0) if kind == "time" else ("GB", 1e-9)
    facets = _values(data, facet)
    heights = [max(len(_select(data, facet, fv)), 1) for fv in facets]
    longest = max((len(s) for s in data["label"]), default=10)
    fig = new_figure(6.0 + 0.065 * longest, 0.9 + sum(0.3 * h + 0.55 for h in heights))
    axes = fig.subplots(len(facets), 1, squeeze=False, sharex=True,
                        gridspec_kw={"height_ratios": heights}).ravel()
    palette = color_cycle(len(every))  # a part keeps its colour in every figure
    colors = {p: palette[every.index(p)] for p in parts}
    for ax, fv in zip(axes, facets, strict=True):
        part = _select(data, facet, fv).iloc[::-1]  # first row on top
        ypos = np.arange(len(part))
        left = np.zeros(len(part))
        for p in parts:
            width = part[p].to_numpy(dtype=np.float64) * factor
            ax.barh(ypos, width, left=left, height=0.7, color=colors[p], label=quantity(p)[0])
            left += width
        if kind == "memory" and "capacity_bytes" in part.columns:
            cap = part["capacity_bytes"].to_numpy(dtype=np.float64) * factor
            ax.scatter(cap, ypos, marker="|", s=200, color="k", linewidths=2, zorder=4,
                       label="HBM capacity (vendors' GB are GiB: an 80 GB GPU holds 85.9 GB)")
        ax.set_yticks(ypos, part["label"].tolist(), fontsize=8)
        ax.set_ylim(-0.6, len(part) - 0.4)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_axisbelow(True)
        ax.tick_params(axis="x", labelbottom=True)
        if facet is not None:
            ax.set_title(str(fv), fontsize=10, loc="left")
    axes[-1].set_xlabel(("step time" if kind == "time" else "memory per GPU") + f" ({unit})")
    handles, labels = axes[0].get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith("HBM"))  # bars first, capacity last
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 3),
               fontsize=8, frameon=False,
               title=f"under {VISIBLE_SHARE:.1%} of every bar, not drawn: " + ", ".join(quantity(p)[0] for p in hidden)
               if hidden else None, title_fontsize=8)
    default = "Step time breakdown (exposed communication)" if kind == "time" else "Memory per GPU (peak stage)"
    fig.suptitle(title or default)
    return save_figure(fig, path)


def draw_heatmap(data: pd.DataFrame, metric: str, path: str | Path, title: str | None = None,
                 direction: str | None = None) -> Path:
    """Draw :func:`heatmap_data`: cells coloured and annotated with the value, empty cells marked ``–``, the
    best cell outlined."""
    d = direction or default_direction(metric)
    values = _display(metric, data.to_numpy(dtype=np.float64))
    ny, nx = values.shape
    fig = new_figure(max(4.8, 1.0 * nx + 2.8), max(3.6, 0.65 * ny + 1.8))
    ax = fig.subplots()
    masked = np.ma.masked_invalid(values)
    cmap = "viridis_r" if d == "min" else "viridis"  # bright = good
    image = ax.imshow(masked, origin="lower", cmap=cmap, aspect="auto")
    ax.set_facecolor("0.9")
    finite = np.isfinite(values)
    if finite.any():
        lo, hi = np.nanmin(values), np.nanmax(values)
        top = float(np.nanmax(np.abs(values)))
        decimals = max(0, 2 - int(np.floor(np.log10(top)))) if top > 0 else 0
        for (i, j), v in np.ndenumerate(values):
            if np.isfinite(v):
                shade = (v - lo) / (hi - lo) if hi > lo else 0.5
                dark = shade > 0.5 if d == "min" else shade < 0.5  # dark cells get white text
                ax.text(j, i, f"{v:.{decimals}f}", ha="center", va="center", fontsize=8, color="w" if dark else "k")
            else:
                ax.text(j, i, "–", ha="center", va="center", fontsize=9, color="0.4")
        flat = np.where(finite, values, np.inf if d == "min" else -np.inf)
        bi, bj = np.unravel_index(np.argmin(flat) if d == "min" else np.argmax(flat), values.shape)
        ax.add_patch(_rectangle(bj - 0.5, bi - 0.5))
    ax.set_xticks(range(nx), [f"{v:g}" for v in data.columns])
    ax.set_yticks(range(ny), [f"{v:g}" for v in data.index])
    ax.set_xlabel(f"tensor parallel size ({data.columns.name})" if data.columns.name == "tp"
                  else axis_label(str(data.columns.name)))
    ax.set_ylabel(f"pipeline parallel size ({data.index.name})" if data.index.name == "pp"
                  else axis_label(str(data.index.name)))
    cbar = fig.colorbar(image, ax=ax)
    cbar.set_label(f"best {axis_label(metric)}")
    ax.set_title(title or f"Best {quantity(metric)[0]} per {data.columns.name} × {data.index.name}", fontsize=10)
    return save_figure(fig, path)


def _rectangle(x: float, y: float) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 1.0, 1.0, fill=False, edgecolor="red", linewidth=2.0, label="best")


def intensity_text(value: float) -> str:
    """An arithmetic intensity as a legend writes it: whole FLOP/byte with thousands separators from 10 up
    (3,955), two significant digits below (0.57)."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def achieved_rate(data: pd.DataFrame, achieved: Mapping[str, float] | None) -> np.ndarray:
    """FLOP/s of each operation on the roof the model uses, min(achieved FLOP/s, achieved bytes/s · I), or on the
    peak roof (``attainable_flops_per_s``) when no achieved rates are given."""
    if achieved is None:
        return data["attainable_flops_per_s"].to_numpy(dtype=np.float64)
    intensity = data["intensity_flop_per_byte"].to_numpy(dtype=np.float64)
    return np.minimum(float(achieved["achieved_flops"]), float(achieved["achieved_bandwidth"]) * intensity)


def draw_roofline(data: pd.DataFrame, path: str | Path, title: str | None = None,
                  achieved: Mapping[str, float] | None = None) -> Path:
    """Draw :func:`roofline_data` on log-log axes: the roof min(peak, bandwidth · I), the ridge point, every
    operation at its intensity and attainable rate (TFLOP/s); optionally the rates the model achieves
    (``achieved`` with ``achieved_flops`` and ``achieved_bandwidth``, dashed), and then the operations sit on that
    roof (:func:`achieved_rate`), the one the model times them on."""
    peak = float(data["peak_flops_per_s"].iloc[0])
    bandwidth = float(data["bandwidth_bytes_per_s"].iloc[0])
    ridge = peak / bandwidth
    intensity = data["intensity_flop_per_byte"].to_numpy(dtype=np.float64)
    lo = min(float(np.nanmin(intensity)), ridge) / 8.0
    hi = max(float(np.nanmax(intensity)), ridge) * 4.0
    grid = np.geomspace(lo, hi, 200)
    fig = new_figure(7.5, 5.6)
    ax = fig.subplots()
    ax.plot(grid, np.minimum(peak, bandwidth * grid) / 1e12, "k-", lw=2,
            label=f"peak roof: {peak / 1e12:.0f} TFLOP/s, {bandwidth / 1e12:.2f} TB/s")
    if achieved is not None:
        ap, ab = float(achieved["achieved_flops"]), float(achieved["achieved_bandwidth"])
        ax.plot(grid, np.minimum(ap, ab * grid) / 1e12, "k--", lw=1,
                label=f"rates the model uses: {ap / 1e12:.0f} TFLOP/s ({100 * ap / peak:.0f} %), "
                      f"{ab / 1e12:.2f} TB/s ({100 * ab / bandwidth:.0f} %)")
    ax.axvline(ridge, color="0.4", ls=":", lw=1)
    bottom = bandwidth * lo / 1e12 / 2
    ax.text(ridge * 0.9, np.sqrt(bottom * peak / 1e12), f"ridge point {ridge:.0f} FLOP/byte", rotation=90,
            ha="right", va="center", fontsize=8, color="0.3")
    markers = ["o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">"]
    colors = color_cycle(len(data))
    on_roof = achieved_rate(data, achieved)
    for i, (_, op) in enumerate(data.iterrows()):  # one marker per operation (a handful), for the legend
        ax.scatter(op["intensity_flop_per_byte"], on_roof[i] / 1e12, s=60, zorder=3,
                   marker=markers[i % len(markers)], color=colors[i], edgecolors="k", linewidths=0.5,
                   label=f"{op['name']}: {intensity_text(op['intensity_flop_per_byte'])} FLOP/byte, "
                         f"{op['bound']}-bound")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(bottom, peak / 1e12 * 3)
    plain_log(ax.xaxis, (1.0,) if hi / lo > 1e4 else (1.0, 2.0, 5.0))  # six decades: 1, 2, 5 labels collide
    plain_log(ax.yaxis)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable performance (TFLOP/s)")
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside lower center", ncols=1, fontsize=8, frameon=False)
    ax.set_title(title or "Roofline", fontsize=10)
    return save_figure(fig, path)
