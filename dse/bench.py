"""``make bench``: throughput of the training cost model on one core.

Two arrays of N training configurations (catalogued models × systems × parallel layouts) as numpy columns:
random ones (most do not divide, as in a product grid; the kernel computes only the divisible rows) and ones
that all divide (every row runs the whole model).  Times :func:`dse.cost.train_step` over each in chunks and
reports configurations per second and the process's peak RSS.
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


def divisible_configs(n: int, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """N configurations that all divide: the divisible rows of N random ones, repeated to N rows."""
    x, systems = random_configs(n, seed)
    step = 65536
    finite = [np.isfinite(train_step({k: v[lo:lo + step] for k, v in x.items()},
                                     hwcat.hardware_columns(systems[lo:lo + step]))["step_time_s"])
              for lo in range(0, n, step)]
    keep = np.flatnonzero(np.concatenate(finite))
    reps = -(-n // len(keep))
    pick = np.tile(keep, reps)[:n]
    return {k: v[pick] for k, v in x.items()}, systems[pick]


def run(n: int, chunk: int, repeats: int, divisible: bool = False) -> dict[str, float]:
    x, systems = divisible_configs(n) if divisible else random_configs(n)
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
    parser.add_argument("--chunk", type=int, default=65536, help="configurations per kernel call")
    parser.add_argument("--repeats", type=int, default=3, help="time the best of R runs")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the target says
    for divisible, label in ((False, "random configurations"), (True, "configurations that all divide")):
        res = run(args.n, args.chunk, args.repeats, divisible)
        print(f"training cost model, one core, {label}: {res['configs']:,} in {res['seconds']:.3f} s "
              f"= {res['configs_per_s']:,.0f} configurations/s ({res['feasible']:,} divide); "
              f"peak RSS {res['peak_rss_bytes'] / 2**20:,.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
