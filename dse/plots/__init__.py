"""Figures of sweep datasets.

Each figure has a DATA function that returns a pandas DataFrame (tested; written beside every PNG as Parquet)
and a separate DRAWING function that takes that frame and writes a PNG.  Drawing uses matplotlib's object API
with the Agg canvas (``matplotlib.figure.Figure``, never ``pyplot``): no display, no global state.

* Pareto front — :func:`pareto_data` / :func:`draw_pareto`: every feasible point (grey cloud) and the front of
  two objectives (a line per group) or three (the third as a colour scale).
* Scaling — :func:`scaling_data` / :func:`draw_scaling`: the best value of a metric per x (GPUs, system, ...)
  and group, one line per group.
* Breakdowns — :func:`breakdown_data` / :func:`draw_breakdown`: stacked step time (``TIME_BREAKDOWN``) or
  memory per GPU (``MEMORY_BREAKDOWN``) of chosen rows, labelled by :func:`config_label`.
* tp × pp heatmap — :func:`heatmap_data` / :func:`draw_heatmap`: the best step time per (tp, pp) cell, the
  minimum over every other axis.
* Roofline — :func:`roofline_data` / :func:`draw_roofline`: operations placed at their arithmetic intensity
  under ``min(peak, bandwidth · intensity)`` (Williams, Waterman, Patterson 2009), ridge point marked;
  :func:`layer_ops` gives the operations of one transformer layer of a configuration.

:func:`draw_standard_figures` draws the standard set of a sweep dataset.
"""


from __future__ import annotations

from dse.plots.data import (  # noqa: F401 - the package's public names
    _check_columns,
    best_rows,
    breakdown_data,
    feasible_rows,
    gpu_roof,
    heatmap_data,
    layer_ops,
    pareto_data,
    roofline_data,
    scaling_data,
)
from dse.plots.draw import (  # noqa: F401 - the package's public names
    _grid,
    _rectangle,
    _select,
    _spans,
    _values,
    color_cycle,
    draw_breakdown,
    draw_heatmap,
    draw_pareto,
    draw_roofline,
    draw_scaling,
    new_figure,
    plain_log,
    save_figure,
)
from dse.plots.labels import (  # noqa: F401 - the package's public names
    _DESCRIBE,
    _DPI,
    _GIB,
    LAYOUT_COLUMNS,
    MEMORY_NAMES,
    PLAIN_NUMBERS,
    QUANTITIES,
    TIME_NAMES,
    _display,
    _int_text,
    axis_label,
    config_label,
    default_direction,
    describe,
    quantity,
)
from dse.plots.standard import (  # noqa: F401 - the package's public names
    _inference_figures,
    _pick_model_system,
    _serving_figures,
    _slug,
    draw_standard_figures,
    write_plot_data,
)
