"""``make bench``: throughput of the training cost model on random configurations, on one core.

Builds N random training configurations (catalogued models × systems × parallel layouts, many of them
infeasible on purpose, as in a real sweep) as numpy columns, then times :func:`dse.cost.train_step` over
them in chunks and reports configurations per second and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np

from dse import codes
from dse.cost.training import TRAIN_INPUTS, train_step
from dse.hardware import catalog as hwcat
from dse.models.catalog import models


def random_configs(n: int, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """N random training configurations over the catalogs (kernel inputs, system codes)."""
    rng = np.random.default_rng(seed)
    cat = models()
    pick = rng.integers(0, len(cat), n)
    x: dict[str, np.ndarray] = {}
    for col in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "experts", "top_k",
                "tied_embeddings"):
        x[col] = cat[col].to_numpy(dtype=np.float64)[pick]
    x["mlp"] = cat["mlp_code"].to_numpy(dtype=np.float64)[pick]
    pow2 = lambda hi: 2.0 ** rng.integers(0, hi + 1, n)  # noqa: E731
    x["tp"], x["pp"], x["dp"], x["cp"] = pow2(3), pow2(4), pow2(7), pow2(1)
    x["ep"] = np.where(x["experts"] > 1, pow2(3), 1.0)
    x["gpus"] = x["tp"] * x["pp"] * x["dp"] * x["cp"]
    x["vpp"] = rng.choice([1.0, 2.0, 3.0, 4.0], n)
    x["sp"] = rng.integers(0, 2, n).astype(np.float64)
    x["micro_batch"] = pow2(3)
    x["global_batch"] = x["dp"] * x["micro_batch"] * 2.0 ** rng.integers(0, 6, n)
    x["seq_len"] = rng.choice([2048.0, 4096.0, 8192.0], n)
    x["recompute"] = rng.integers(0, len(codes.RECOMPUTE), n).astype(np.float64)
    x["zero"] = rng.integers(0, 4, n).astype(np.float64)
    x["precision"] = rng.choice([1.0, 2.0], n)
    x["attention"] = rng.integers(0, 2, n).astype(np.float64)
    x["tp_overlap"] = rng.integers(0, 3, n).astype(np.float64)
    x["dp_overlap"] = np.ones(n)
    x["pp_overlap"] = np.ones(n)
    assert set(x) == set(TRAIN_INPUTS)
    systems = rng.integers(0, len(hwcat.system_names()), n)
    return x, systems


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def run(n: int, chunk: int, repeats: int) -> dict[str, float]:
    x, systems = random_configs(n)
    best = float("inf")
    feasible = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        feasible = 0
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            hw = hwcat.hardware_columns(systems[lo:hi])
            out = train_step({k: v[lo:hi] for k, v in x.items()}, hw)
            feasible += int(np.count_nonzero(np.isfinite(out["step_time_s"])))
        best = min(best, time.perf_counter() - t0)
    return {"configs": n, "seconds": best, "configs_per_s": n / best, "feasible": feasible,
            "peak_rss_bytes": peak_rss_bytes()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dse.bench", description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=1_000_000, help="configurations (default 10^6)")
    parser.add_argument("--chunk", type=int, default=8192, help="configurations per kernel call")
    parser.add_argument("--repeats", type=int, default=3, help="time the best of R runs")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the target says
    res = run(args.n, args.chunk, args.repeats)
    print(f"training cost model, one core: {res['configs']:,} configurations in {res['seconds']:.3f} s "
          f"= {res['configs_per_s']:,.0f} configurations/s ({res['feasible']:,} feasible); "
          f"peak RSS {res['peak_rss_bytes'] / 2**20:,.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
