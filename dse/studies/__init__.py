"""The five paper studies of the project, each as a figure (PNG) with its plotted data beside it (Parquet).

``python -m dse.studies -o DIR [--only 1,3]`` writes ``DIR/<stem>.png`` and ``DIR/<stem>.parquet`` per study.
Every study is one DATA function returning a pandas DataFrame (tested) and one DRAW function taking that
frame and a path (matplotlib object API on the Agg canvas, no ``pyplot``):

1. :func:`memory_footprint_data` / :func:`draw_memory_footprint` — memory per GPU of GPT-3 175B, GPT 530B and
   GPT 1T on A100 80 GB under the Korthikanti et al. 2022 layouts, for every recomputation mode × sequence
   parallelism (``memory_footprint``);
2. :func:`generation_speedup_data` / :func:`draw_generation_speedup` — the training speed-up A100 → H100 → B200
   → GB200 NVL72, separated into hardware factors switched on one group at a time (``generation_speedup``);
3. :func:`technology_node_data` / :func:`draw_technology_nodes` — a B200-class design rebuilt on every logic
   node from 12 nm to ~1 nm, with the memory and the scale-up network of each era, one factor at a time
   (``technology_nodes``);
4. :func:`inference_bound_data` / :func:`draw_inference_bound` — arithmetic intensity of every op of prefill
   and decode against each GPU's ridge point (``inference_bound``);
5. :func:`memory_technology_data` / :func:`draw_memory_technology` — inference latency of an H100-class chip
   re-equipped with HBM2E … HBM4E at fixed compute (``memory_technology``).

Method common to all studies: the cost model is evaluated once per study on arrays of configurations
(:func:`dse.evaluate`, or the kernels :func:`dse.cost.training.train_step` /
:func:`dse.cost.inference.infer_step` / :func:`dse.cost.inference.inference_ops` on hardware columns from
:func:`dse.hardware.catalog.hardware_columns` or :func:`dse.hardware.derive.derived_hardware_columns`).  Where a
study needs "the best layout", a small product grid of layouts is tiled over every hardware variant of the
study, the kernel is called once on all rows, and per variant the row of least ``step_time_s`` among the
feasible ones (reason code 0 and ``fits``; tensor parallelism inside one scale-up domain, as the sweep
specs' default ``tp_within_scaleup`` constraint) is kept.  Python loops only build the handful of scenarios; no loop
runs over configurations.  Every assumption of a study is stated in its data function's docstring; the model's
own assumptions (efficiencies, overlap, placement) are those of :mod:`dse.cost.training` and
:mod:`dse.cost.inference`.
"""


from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from dse.plots import write_plot_data
from dse.studies.common import (  # noqa: F401 - the package's public names
    LAYOUT,
    _best_frame,
    best_layouts,
    layout_grid,
)
from dse.studies.generation_speedup import (  # noqa: F401 - the package's public names
    BASE_SYSTEM,
    FACTOR_GROUPS,
    LOW_PRECISION_STEP,
    PRECISION_CAPS,
    SPEEDUP_GPUS,
    SPEEDUP_SCENARIOS,
    SYSTEM_LABELS,
    TARGET_SYSTEMS,
    _check_groups,
    draw_generation_speedup,
    factor_hardware,
    generation_speedup_data,
    generation_speedups,
    speedups_by_precision,
)
from dse.studies.inference_bound import (  # noqa: F401 - the package's public names
    BOUND_BATCHES,
    BOUND_SYSTEMS,
    INFER_SCENARIO,
    OP_NAMES,
    WEIGHT_GEMMS,
    draw_inference_bound,
    inference_bound_data,
)
from dse.studies.memory_footprint import (  # noqa: F401 - the package's public names
    KORTHIKANTI_LAYOUTS,
    RECOMPUTE_MODES,
    draw_memory_footprint,
    memory_footprint_data,
)
from dse.studies.memory_technology import (  # noqa: F401 - the package's public names
    DECODE_PARTS,
    MEMORY_TECHS,
    MEMTECH_BASE,
    MEMTECH_BATCHES,
    draw_memory_technology,
    memory_technology_data,
)
from dse.studies.technology_nodes import (  # noqa: F401 - the package's public names
    NODES,
    ROADMAP,
    SCENARIOS,
    TECH_BASE,
    TECH_LAYOUT_AXES,
    draw_technology_nodes,
    technology_node_data,
    technology_overrides,
)

# ---- driver --------------------------------------------------------------------------------------------------

#: Study number → (file stem, data function, draw function, one-line description).
STUDIES: dict[int, tuple[str, Callable[[], pd.DataFrame], Callable[[pd.DataFrame, str | Path], Path], str]] = {
    1: ("memory_footprint", memory_footprint_data, draw_memory_footprint,
        "memory per GPU vs recomputation and sequence parallelism (Korthikanti 2022 layouts)"),
    2: ("generation_speedup", generation_speedup_data, draw_generation_speedup,
        "A100 → H100 → B200 → GB200 NVL72 training speed-up, factors separated"),
    3: ("technology_nodes", technology_node_data, draw_technology_nodes,
        "B200-class design on nodes 12 nm → ~1 nm: logic vs memory vs network"),
    4: ("inference_bound", inference_bound_data, draw_inference_bound,
        "inference ops: arithmetic intensity vs ridge point per GPU"),
    5: ("memory_technology", memory_technology_data, draw_memory_technology,
        "inference latency vs DRAM technology at fixed compute"),
}


def run_study(number: int, out_dir: str | Path) -> tuple[Path, pd.DataFrame]:
    """Compute study ``number``'s data, draw it to ``out_dir/<stem>.png`` and write ``<stem>.parquet``."""
    stem, data_fn, draw_fn, _ = STUDIES[number]
    data = data_fn()
    png = draw_fn(data, Path(out_dir) / f"{stem}.png")
    write_plot_data(data, png)
    return png, data


def _parse_only(text: str) -> list[int]:
    allowed = ", ".join(str(k) for k in STUDIES)
    picked: list[int] = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece.isdigit() or int(piece) not in STUDIES:
            raise argparse.ArgumentTypeError(f"{piece!r} is not a study number; allowed: {allowed} "
                                             "(comma-separated, e.g. 1,3)")
        if int(piece) not in picked:
            picked.append(int(piece))
    return picked


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m dse.studies -o DIR [--only 1,3]``.  Returns 0; bad arguments print a message
    to stderr and exit with status 2 (argparse)."""
    parser = argparse.ArgumentParser(
        prog="python -m dse.studies",
        description="Draw the paper studies: a PNG per study and its plotted data as Parquet beside it.",
        epilog="studies: " + "; ".join(f"{k} {v[0]} ({v[3]})" for k, v in STUDIES.items()))
    parser.add_argument("-o", "--out", required=True, help="output directory (created if missing)")
    parser.add_argument("--only", type=_parse_only, default=list(STUDIES),
                        help=f"comma-separated study numbers among {', '.join(map(str, STUDIES))} (default: all)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for number in args.only:
        start = time.perf_counter()
        png, data = run_study(number, out)
        print(f"study {number}: {png} (+ .parquet, {len(data)} rows) in {time.perf_counter() - start:.1f} s")
        if number == 2:
            for pair, value in generation_speedups(data).items():
                print(f"  gpt3-175b per-GPU training speed-up {pair}: ×{value:.2f}")
            capped = speedups_by_precision()
            for allowed, (_, part) in zip(PRECISION_CAPS, capped.groupby("precision_cap", sort=False),
                                          strict=True):
                pairs = ", ".join(f"{SYSTEM_LABELS[a]}→{SYSTEM_LABELS[b]} ×{t0 / t1:.2f}" for (a, t0), (b, t1) in
                                  itertools.pairwise(zip(part["system"], part["step_time_s"], strict=True)))
                print(f"  catalogued systems, precisions allowed {'+'.join(allowed)}: {pairs}")
    return 0

