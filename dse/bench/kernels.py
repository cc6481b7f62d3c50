"""``make bench``: throughput of the training cost model on one core.

Two arrays of N training configurations (catalogued models × systems × parallel layouts) as numpy columns:
random ones (most do not divide, as in a product grid; the kernel computes only the divisible rows) and ones
that all divide (every row runs the whole model).  Times :func:`dse.cost.train_step` over each in chunks and
reports configurations per second and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from dse import codes
from dse.cost.architecture import ARCHITECTURE_COLUMNS, code_column
from dse.cost.training import DTYPE, TRAIN_INPUTS, train_step
from dse.hardware import catalog as hwcat
from dse.models.catalog import models
from dse.sweep import KERNEL_BATCH

#: Rows per kernel call compared by ``make bench`` (the sweep's tile, :data:`dse.sweep.KERNEL_BATCH`, is one).
TILE_SIZES = (8192, 16384, 32768, 65536, 131072, 262144)


def _random_models(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """The dimension and architecture columns of N models drawn from the catalog (kernel inputs): a mix of dense,
    MoE and MLA models in the catalog's proportions."""
    cat = models()
    pick = rng.integers(0, len(cat), n)
    x: dict[str, np.ndarray] = {}
    for col in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "experts", "top_k",
                "tied_embeddings"):
        x[col] = cat[col].to_numpy(dtype=np.float64)[pick]
    x["mlp"] = cat["mlp_code"].to_numpy(dtype=np.float64)[pick]
    for col in ARCHITECTURE_COLUMNS:  # today's models (MLA, fine-grained and shared experts, windows): 0 = not set
        values = cat[code_column(col)].to_numpy(dtype=np.float64)
        x[col] = np.nan_to_num(values)[pick]
    return x


def random_configs(n: int, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """N random training configurations over the catalogs (kernel inputs, system codes)."""
    rng = np.random.default_rng(seed)
    x = _random_models(rng, n)
    pow2 = lambda hi: 2.0 ** rng.integers(0, hi + 1, n)  # noqa: E731
    x["tp"], x["pp"], x["dp"], x["cp"] = pow2(3), pow2(4), pow2(7), pow2(1)
    x["ep"] = np.where(x["experts"] > 1, pow2(3), 1.0)
    x["etp"] = np.zeros(n)  # expert tensor parallel = tp
    x["moe_imbalance"] = np.ones(n)  # balanced routing
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
    x["finetune"] = rng.choice([0.0, 0.0, 0.0, 1.0, 2.0], n)
    x["lora_rank"] = rng.choice([8.0, 16.0, 64.0], n)
    x["lora_targets"] = rng.integers(0, 3, n).astype(np.float64)
    x["offload"] = rng.choice([0.0, 0.0, 0.0, 1.0, 2.0], n)
    x["zero3_fetch"] = rng.choice([0.0, 0.0, 0.0, 1.0], n)
    x["pipeline_split"] = rng.choice([0.0, 0.0, 0.0, 1.0], n)
    x["layers_first_stage"] = np.full(n, np.nan)
    x["layers_last_stage"] = np.full(n, np.nan)
    x["doc_len"] = np.full(n, np.nan)
    systems = rng.integers(0, len(hwcat.system_names()), n)
    # drawn after the system (the draws above unchanged): a quarter eager HF kernels, a quarter torch's 16-bit AdamW
    x["kernels"] = rng.choice([0.0, 0.0, 0.0, 1.0], n)
    x["optimizer"] = rng.choice([0.0, 0.0, 0.0, 1.0], n)
    x["memory_report"] = rng.integers(0, 2, n).astype(np.float64)
    x["adapter_precision"] = rng.integers(0, 2, n).astype(np.float64)
    x["dp_reduce"] = rng.integers(0, 2, n).astype(np.float64)
    x["zero_with_pp"] = rng.integers(0, 2, n).astype(np.float64)
    x["cp_exchange"] = rng.integers(0, 2, n).astype(np.float64)
    x["moe_gemm"] = np.zeros(n)  # (not drawn: the other draws unchanged)
    x["ep_dispatch"] = np.zeros(n)  # (not drawn: the other draws unchanged)
    x["zero3_collectives"] = rng.integers(0, 2, n).astype(np.float64)  # (drawn last: the other draws unchanged)
    x["ep_overlap"] = np.zeros(n)  # (not drawn: the other draws unchanged)
    x["cross_entropy"] = np.zeros(n)  # (not drawn: the other draws unchanged)
    assert set(x) == set(TRAIN_INPUTS)
    # the kernel's working precision: the sweep engine decodes grids straight into it (values are small
    # integers and codes, exact in float32)
    return {k: v.astype(DTYPE) for k, v in x.items()}, systems


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
            hw = hwcat.hardware_columns(systems[lo:hi], dtype=DTYPE)
            out = train_step({k: v[lo:hi] for k, v in x.items()}, hw, out_dtype=DTYPE)
            feasible += int(np.count_nonzero(np.isfinite(out["step_time_s"])))
        best = min(best, time.perf_counter() - t0)
    return {"configs": n, "seconds": best, "configs_per_s": n / best, "feasible": feasible,
            "peak_rss_bytes": peak_rss_bytes()}


def _tree_rss_bytes(root: int) -> int:
    """Resident memory of a process and all its descendants (Linux /proc), in bytes."""
    page = os.sysconf("SC_PAGE_SIZE")
    total, frontier, seen = 0, [root], set()
    while frontier:
        pid = frontier.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * page
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    frontier.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return total


def sweep_bench(spec_data: dict, jobs: int, label: str, keep: str | None = None,
                inspect: Any = None) -> dict[str, Any]:
    """Run a sweep spec end to end (grid → kernel → Parquet) and sample the process tree's peak RSS."""
    import shutil
    import tempfile
    import threading

    from dse.runner import prepare
    from dse.runner import run as run_sweep
    from dse.spec import resolve_spec

    spec = resolve_spec(spec_data, label)
    out = Path(tempfile.mkdtemp(prefix="dse-bench-")) / spec.name
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss_bytes(os.getpid()))
            done.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        plan = prepare(spec, out, keep=keep)
        stats = run_sweep(plan, jobs=jobs, progress=False)
        extra = inspect(out) if inspect is not None else {}
    finally:
        done.set()
        sampler.join()
        size = sum(p.stat().st_size for p in out.glob("*.parquet")) if out.exists() else 0
        shutil.rmtree(out.parent, ignore_errors=True)
    return {**stats, **extra, "peak_rss_bytes": peak[0], "bytes_written": size, "grid_points": spec.size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dse.bench", description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=1_000_000, help="configurations (default 10^6)")
    parser.add_argument("--chunk", type=int, default=KERNEL_BATCH,
                        help=f"configurations per kernel call (default {KERNEL_BATCH:,}, the sweep's tile)")
    parser.add_argument("--repeats", type=int, default=3, help="time the best of R runs")
    parser.add_argument("--sweep-jobs", type=int, default=2, help="workers for the end-to-end sweep benchmarks")
    parser.add_argument("--no-sweep", action="store_true", help="only the kernel benchmark")
    parser.add_argument("--no-1e9", action="store_true", help="skip the 10^9-point co-design run (~8 minutes)")
    parser.add_argument("--no-record", action="store_true",
                        help=f"do not write {FIGURES_FILE.name} and the README's speed table")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    records: list[dict[str, str]] = []
    if not args.no_sweep:
        records += run_sweep_benchmarks(args.sweep_jobs, args.no_1e9)
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if cores:
        os.sched_setaffinity(0, {min(cores)})  # the kernels on one core, as the target says
    for divisible, key, label in ((False, "train_random", "random configurations"),
                                  (True, "train_divisible", "configurations that all divide")):
        res = run(args.n, args.chunk, args.repeats, divisible)
        print(f"training cost model, one core, {label}: {res['configs']:,} in {res['seconds']:.3f} s "
              f"= {res['configs_per_s']:,.0f} configurations/s ({res['feasible']:,} divide); "
              f"peak RSS {res['peak_rss_bytes'] / 2**20:,.0f} MiB")
        records.append(record(
            key, f"training model, one core, {sci(res['configs'])} {label} (fine-tuning and offload mixed in; "
            "float32 outputs, as a sweep takes them)",
            f"{sci(res['configs_per_s'])} configurations/s ({res['feasible'] / res['configs']:.0%} divide), "
            f"peak RSS {mib(res['peak_rss_bytes'])}"))
    # the kernel's tile: rows per call (sweep.KERNEL_BATCH); per-call overhead against arrays leaving the cache
    tiles = {chunk: run(args.n, chunk, args.repeats, True)["configs_per_s"] for chunk in TILE_SIZES}
    print("training cost model, one core, all-dividing, configurations/s by rows per kernel call: "
          + "; ".join(f"{c:,}: {v:,.0f}" for c, v in tiles.items()))
    records.append(record(
        "train_tiles", f"training model, one core, all-dividing, by rows per kernel call (sweeps use "
        f"{KERNEL_BATCH:,})", "; ".join(f"{c:,}: {sci(v)}" for c, v in tiles.items())
        + " configurations/s"))
    for kernel, bench_fn, what in (("serve", serve_bench, "serving model (half under a request rate, a tenth "
                                                          "disaggregated)"),
                                   ("infer", infer_bench, "static-batch inference model")):
        for only, label in ((False, "random configurations"), (True, "configurations it answers (divide, fit)")):
            res = bench_fn(max(args.n // 4, 1), args.chunk, args.repeats, only)
            print(f"{kernel} cost model, one core, {label}: {res['configs']:,} in {res['seconds']:.3f} s = "
                  f"{res['configs_per_s']:,.0f} configurations/s ({res['answered']:,} answered); peak RSS "
                  f"{res['peak_rss_bytes'] / 2**20:,.0f} MiB")
            records.append(record(
                f"{kernel}_{'answered' if only else 'random'}", f"{what}, one core, {sci(res['configs'])} {label}",
                f"{sci(res['configs_per_s'])} configurations/s ({res['answered'] / res['configs']:.0%} answered), "
                f"peak RSS {mib(res['peak_rss_bytes'])}"))
    # mostly distinct rows (issue 24), one core as the issue measures them
    for typed, key, label in ((False, "table_distinct", "text cells, as a case file reads"),
                              (True, "table_distinct_typed", "typed columns, as pd.read_csv gives")):
        res = table_bench(typed=typed, repeats=args.repeats, distinct=True)
        print(f"tables, dse.evaluate on {res['rows']:,} rows ({res['distinct']:,} distinct), {label}, one core: "
              f"{res['seconds']:.2f} s = {res['rows_per_s']:,.0f} rows/s")
        records.append(record(
            key, f"tables, `dse.evaluate` on {res['rows']:,} rows of which {res['distinct']:,} distinct, {label} "
            "(Narayanan cases, micro-batch, global batch and sequence length varied), one core",
            f"{sci(res['rows_per_s'])} rows/s, peak RSS {mib(res['peak_rss_bytes'])}"))
    if cores:
        os.sched_setaffinity(0, cores)  # tables as a user runs them: every core (Arrow's CSV reader uses them)
    for typed, key, label in ((False, "table_evaluate", "text cells, as a case file reads"),
                              (True, "table_evaluate_typed", "typed columns, as pd.read_csv gives")):
        res = table_bench(typed=typed, repeats=args.repeats)
        print(f"tables, dse.evaluate on {res['rows']:,} rows ({res['distinct']:,} distinct), {label}: "
              f"{res['seconds']:.2f} s = {res['rows_per_s']:,.0f} rows/s; peak RSS "
              f"{res['peak_rss_bytes'] / 2**20:,.0f} MiB")
        records.append(record(
            key, f"tables, `dse.evaluate` on {res['rows']:,} rows of which {res['distinct']:,} distinct, {label} "
            "(Narayanan cases resampled, micro-batch varied)",
            f"{sci(res['rows_per_s'])} rows/s, peak RSS {mib(res['peak_rss_bytes'])}"))
    res = validate_bench()
    print(f"dse validate of {res['rows']:,} cases: {res['seconds']:.2f} s = {res['rows_per_s']:,.0f} cases/s; "
          f"peak RSS {res['peak_rss_bytes'] / 2**20:,.0f} MiB")
    records.append(record(
        "table_validate", f"`dse validate` of a {res['rows']:,}-case file (Narayanan cases resampled, unique ids, the "
        f"shipped assumptions applied; {len(cores) or os.cpu_count()} cores)",
        f"{sci(res['rows_per_s'])} cases/s ({res['seconds']:.1f} s), peak RSS {mib(res['peak_rss_bytes'])}"))
    if not args.no_record:
        save_records(records)
    return 0


def keep_benchmarks(jobs: int, base: dict, skip_1e9: bool) -> list[dict[str, str]]:
    """--keep pareto: points/s on the benchmark space; on a ~10^7-point sub-space of the co-design space the
    kept front is checked against the front of a --keep all run; then the 10^9-point space's wall time."""
    import pandas as pd

    from dse.pareto import pareto_front

    records = []
    keep = "pareto:step_time_s:min,gpus:min,by=global_batch"
    res = sweep_bench(base, jobs, str(BENCH_SPEC), keep=keep)
    print(f"sweep --keep {keep}, {jobs} workers: {res['grid_points']:,} points, {res['rows']:,} rows kept in "
          f"{res['seconds']:.2f} s = {res['points'] / res['seconds']:,.0f} points/s; peak RSS "
          f"{res['peak_rss_bytes'] / 2**20:,.0f} MiB", flush=True)
    records.append(record(
        "sweep_keep_pareto", f"sweep, {jobs} workers, same space with `--keep {keep}`",
        f"{sci(res['points'] / res['seconds'])} points/s ({res['seconds']:.1f} s, {res['rows']:,} rows kept), "
        f"peak RSS of all processes {mib(res['peak_rss_bytes'])}"))

    codesign = yaml.safe_load(CODESIGN_SPEC.read_text(encoding="utf-8"))
    objectives = ["step_time_s:min", "energy_per_token_j:min", "gpus:min"]
    keep = "pareto:" + ",".join(objectives) + ",by=model"
    sub = {**codesign, "name": "codesign-1e7", "grid": {**codesign["grid"], "node": "n5", "memory_tech": "hbm3e",
                                                         "scaleout_tech": "ib-ndr"}}
    columns = ["point", "model", "fits", "step_time_s", "energy_per_token_j", "gpus"]

    if not skip_1e9:
        res = sweep_bench(codesign, jobs, str(CODESIGN_SPEC), keep=keep)
        print(f"10^9 space {CODESIGN_SPEC.name}: {res['grid_points']:,} points --keep {keep}, {res['rows']:,} rows "
              f"kept in {res['seconds']:.0f} s = {res['points'] / res['seconds']:,.0f} points/s; peak RSS of all "
              f"processes {res['peak_rss_bytes'] / 2**20:,.0f} MiB", flush=True)
        records.append(record(
            "codesign_1e9", f"`{CODESIGN_SPEC.name}`: {sci(res['grid_points'])} points, {jobs} workers, "
            f"`--keep {keep}`",
            f"{res['seconds'] / 60:.1f} min ({sci(res['points'] / res['seconds'])} points/s, {res['rows']:,} rows "
            f"kept), peak RSS of all processes {mib(res['peak_rss_bytes'])}"))

    def front_points(out: Path) -> dict[str, Any]:
        frame = pd.read_parquet(out, columns=columns)
        return {"front": sorted(pareto_front(frame, objectives, by="model")["point"].tolist())}

    def kept_points(out: Path) -> dict[str, Any]:
        return {"front": sorted(pd.read_parquet(out, columns=["point"])["point"].tolist())}

    full = sweep_bench(sub, jobs, "codesign 1e7 --keep all", inspect=front_points)
    kept = sweep_bench(sub, jobs, "codesign 1e7 --keep pareto", keep=keep, inspect=kept_points)
    same = full["front"] == kept["front"]
    print(f"co-design sub-space {full['grid_points']:,} points: --keep all {full['seconds']:.1f} s, --keep pareto "
          f"{kept['seconds']:.1f} s; kept front {len(kept['front'])} rows, "
          f"{'EQUAL to' if same else 'DIFFERENT from'} the front of the full run", flush=True)
    records.append(record(
        "keep_equals_full", f"`--keep {keep}` on a {sci(full['grid_points'])}-point sub-space of "
        f"`{CODESIGN_SPEC.name}` against the front of its `--keep all` run",
        f"{'equal' if same else 'DIFFERENT'} ({len(kept['front'])} rows); {full['seconds']:.1f} s with every row "
        f"written, {kept['seconds']:.1f} s reduced"))
    return records


def run_sweep_benchmarks(jobs: int, skip_1e9: bool = False) -> list[dict[str, str]]:
    """End-to-end sweeps (run first, while this process is still small, so the RSS figures are the engine's)."""
    records = []
    base = yaml.safe_load(BENCH_SPEC.read_text(encoding="utf-8"))
    res = sweep_bench(base, jobs, str(BENCH_SPEC))
    print(f"sweep, spec to Parquet, {jobs} workers: {res['grid_points']:,} points ({BENCH_SPEC.name}), "
          f"{res['rows']:,} rows written in {res['seconds']:.2f} s = {res['points'] / res['seconds']:,.0f} "
          f"points/s; {res['bytes_written'] / 2**20:,.0f} MiB on disk; peak RSS of all processes "
          f"{res['peak_rss_bytes'] / 2**20:,.0f} MiB", flush=True)
    records.append(record(
        "sweep_train", f"sweep, spec → Parquet, {jobs} workers, `{BENCH_SPEC.name}`: {sci(res['grid_points'])} "
        "points, every point written as a row",
        f"{sci(res['points'] / res['seconds'])} points/s ({res['seconds']:.1f} s), "
        f"{mib(res['bytes_written'])} of Parquet, peak RSS of all processes {mib(res['peak_rss_bytes'])}"))
    res = sweep_bench(SERVE_BENCH_SPEC, jobs, "serving bench space")
    print(f"serving sweep, spec to Parquet, {jobs} workers: {res['grid_points']:,} points (task serve, half under a "
          f"request rate), {res['rows']:,} rows in {res['seconds']:.2f} s = {res['points'] / res['seconds']:,.0f} "
          f"points/s; peak RSS of all processes {res['peak_rss_bytes'] / 2**20:,.0f} MiB", flush=True)
    records.append(record(
        "sweep_serve", f"serving sweep, spec → Parquet, {jobs} workers: {sci(res['grid_points'])} points "
        "(`task: serve`, 4 models × 6 systems, half under a request rate)",
        f"{sci(res['points'] / res['seconds'])} points/s ({res['seconds']:.1f} s), "
        f"peak RSS of all processes {mib(res['peak_rss_bytes'])}"))
    sizes = []
    for target in (10**6, 10**7, 10**8):
        spec = scaled_spec(base, target)
        res = sweep_bench(spec, jobs, f"{BENCH_SPEC.name} scaled to ~{target:.0e}")
        print(f"memory vs grid size: {res['grid_points']:,} points, {res['rows']:,} rows kept (divisible, fits), "
              f"{res['seconds']:.1f} s, peak RSS of all processes {res['peak_rss_bytes'] / 2**20:,.0f} MiB",
              flush=True)
        sizes.append(f"{sci(res['grid_points'])} points: {mib(res['peak_rss_bytes'])} ({res['seconds']:.1f} s)")
    records.append(record(
        "sweep_memory", "peak RSS of all processes vs grid size (same space, batch axis resized; divisible, "
        "fitting rows kept)", "; ".join(sizes)))
    return records + keep_benchmarks(jobs, base, skip_1e9)


def sci(value: float) -> str:
    """3.75e6 -> '3.75 × 10⁶' (the README's number style)."""
    if not np.isfinite(value) or value <= 0:
        return f"{value:g}"
    exp = int(np.floor(np.log10(value)))
    mant = value / 10**exp
    if round(mant, 2) >= 10:
        mant, exp = mant / 10, exp + 1
    sup = str(exp).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{mant:.2f} × 10{sup}"


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.0f} MiB"


def machine() -> str:
    """A short description of the machine the figures come from (CPU model and cores)."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores{', ' + model if model else ''}"


def record(key: str, benchmark: str, result: str) -> dict[str, str]:
    """One row of the README's speed table, as measured now."""
    return {"key": key, "benchmark": benchmark, "result": result,
            "measured": time.strftime("%Y-%m-%d"), "machine": machine()}


#: Where ``make bench`` keeps its latest figures (tracked, so the README's speed table is generated from them).
FIGURES_FILE = Path(__file__).resolve().parent / "figures.json"
README = Path(__file__).resolve().parents[2] / "README.md"
#: Row order of the README's table (keys not listed go last, in the order measured).
ORDER = ("train_random", "train_divisible", "train_tiles", "serve_random", "serve_answered", "infer_random",
         "infer_answered", "table_distinct", "table_distinct_typed", "table_evaluate", "table_evaluate_typed",
         "table_validate",
         "sweep_train", "sweep_keep_pareto",
         "sweep_serve", "sweep_memory", "keep_equals_full", "codesign_1e9", "pareto_2", "pareto_3")
BEGIN, END = "<!-- bench-table: generated by make bench from dse/bench/figures.json -->", "<!-- /bench-table -->"


def load_records(path: Path = FIGURES_FILE) -> list[dict[str, str]]:
    if not path.exists():
        return []
    data: list[dict[str, str]] = json.loads(path.read_text(encoding="utf-8"))
    return data


def render_table(records: list[dict[str, str]]) -> str:
    """The README's speed table (markdown) from the recorded figures."""
    rank = {k: i for i, k in enumerate(ORDER)}
    rows = sorted(records, key=lambda r: rank.get(r["key"], len(ORDER)))
    dates = sorted({r["measured"] for r in rows})
    machines = sorted({r["machine"] for r in rows})
    lines = [f"Measured {', '.join(dates)} on {'; '.join(machines)}; figures vary by up to ±30 % between runs on "
             "this shared machine.  The one-core kernels and `dse.evaluate` are the best of 3 timings.",
             "", "| benchmark | result |", "|---|---|"]
    lines += [f"| {r['benchmark']} | {r['result']} |" for r in rows]
    return "\n".join(lines)


def save_records(new: list[dict[str, str]], path: Path = FIGURES_FILE, readme: Path = README) -> None:
    """Merge the new figures into the record file (by key) and regenerate the README's speed table."""
    merged = {r["key"]: r for r in load_records(path)}
    merged.update({r["key"]: r for r in new})
    records = list(merged.values())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    if readme.exists():
        text = readme.read_text(encoding="utf-8")
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            readme.write_text(f"{head}{BEGIN}\n{render_table(records)}\n{END}{tail}", encoding="utf-8")
    print(f"recorded in {path.name}; README speed table regenerated")


BENCH_SPEC = Path(__file__).resolve().parents[2] / "spaces" / "gpt3-175b-a100-1024-10m.yaml"
CODESIGN_SPEC = Path(__file__).resolve().parents[2] / "spaces" / "technology-codesign-1e9.yaml"
#: A serving space of ~1.3e6 points: 4 models x 6 systems x layouts x engine limits x lengths x precisions x rates.
SERVE_BENCH_SPEC = {
    "name": "serve-bench", "task": "serve",
    "grid": {"model": ["llama3.1-8b", "llama3.3-70b", "mixtral-8x7b", "llama3.1-405b"],
             "system": ["a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "b200", "gb200-nvl72", "rtx-pro-6000"],
             "tp": [1, 2, 4, 8], "pp": [1, 2], "dp": [1, 2], "batch": {"start": 1, "stop": 1024, "pow2": True},
             "max_num_tokens": [2048, 8192], "input_len": [128, 1000, 4000], "output_len": [128, 1000],
             "precision": ["bf16", "fp8", "fp4"], "request_rate": [0.5, 5.0]},
    "constraints": {"divisible": False, "tp_within_scaleup": False},
}


def scaled_spec(base: dict, target: int) -> dict:
    """The benchmark spec with its global-batch axis resized so the grid has about ``target`` points, and only
    rows that divide and fit kept (so a 10^8-point grid does not write 10^8 rows: RSS is what is measured)."""
    spec = dict(base)
    grid = dict(spec["grid"])
    others = 1
    for key, value in grid.items():
        if key == "global_batch":
            continue
        if isinstance(value, list):
            others *= len(value)
        elif isinstance(value, dict):
            others *= sum(1 for i in range(63) if value["start"] <= 2**i <= value["stop"])
    n_batches = max(1, round(target / others))
    grid["global_batch"] = [512 * (i + 1) for i in range(n_batches)]
    spec.update({"grid": grid, "name": f"bench-{target:.0e}".replace("+", ""),
                 "constraints": {"divisible": True, "tp_within_scaleup": False,
                                 "filters": ["mem_total_bytes <= 85e9"]}})
    return spec



def random_serve_configs(n: int, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """N random serving configurations over the catalogs (kernel inputs of dse.cost.serving, system codes):
    half at maximum load (a third of those closed loops of N clients), half under a request rate; a tenth
    disaggregated."""
    from dse.cost.serving import SERVE_INPUTS

    rng = np.random.default_rng(seed)
    x = _random_models(rng, n)
    pow2 = lambda hi: 2.0 ** rng.integers(0, hi + 1, n)  # noqa: E731
    x["tp"], x["pp"], x["dp"] = pow2(3), pow2(1), pow2(2)
    x["gpus"] = x["tp"] * x["pp"] * x["dp"]
    x["batch"] = np.where(rng.random(n) < 0.2, np.nan, pow2(10))
    x["input_len"] = rng.choice([128.0, 1000.0, 2048.0, 8192.0], n)
    x["output_len"] = rng.choice([128.0, 500.0, 2048.0], n)
    x["precision"] = rng.choice([1.0, 2.0, 3.0], n)
    x["kv_precision"] = np.zeros(n)
    x["max_num_tokens"] = rng.choice([2048.0, 8192.0, np.nan], n)
    x["request_rate"] = np.where(rng.random(n) < 0.5, np.nan, rng.uniform(0.1, 50.0, n))
    x["kv_memory_fraction"] = np.full(n, np.nan)
    x["kv_block_tokens"] = np.full(n, np.nan)
    x["decode_kv_reads"] = rng.integers(0, 2, n).astype(np.float64)
    disagg = rng.random(n) < 0.1
    x["prefill_tp"] = np.where(disagg, pow2(2), np.nan)
    x["prefill_gpus"] = np.where(disagg, x["prefill_tp"] * pow2(2), np.nan)
    # a third of the maximum-load rows are closed loops of 1-256 clients (drawn last: the other draws unchanged)
    closed = np.isnan(x["request_rate"]) & (rng.random(n) < 1.0 / 3.0)
    x["concurrency"] = np.where(closed, pow2(8), np.nan)
    x["cuda_graphs"] = rng.integers(0, 2, n).astype(np.float64)
    x["kv_reservation"] = rng.integers(0, 2, n).astype(np.float64)
    x["request_overhead_s"] = np.full(n, 1e-5)  # every row: under CUDA graphs the host loop overlaps the GPU
    # host time per admitted request where the loop does not overlap (TensorRT-LLM 0.10's; not drawn)
    x["request_setup_s"] = np.where(x["cuda_graphs"] > 0, 0.0, 1e-3)
    x["host_overlap"] = (x["cuda_graphs"] > 0).astype(np.float64)  # (not drawn: the other draws unchanged)
    x["kv_memory_basis"] = np.zeros(n)  # (not drawn: the other draws unchanged)
    x["window_kv"] = x["kv_reservation"].copy()  # windowed layers held in full where KV is reserved (not drawn)
    x["fp8_context_fmha"] = x["cuda_graphs"].copy()  # FP8 context FMHA with the graph-replaying engines (not drawn)
    x["ep_comm"] = x["cuda_graphs"].copy()  # their all-gather MoE exchange (not drawn: the other draws unchanged)
    x["mla_decode"] = x["cuda_graphs"].copy()  # and their measured MLA decode kernels (not drawn)
    # wide expert parallelism on a third of the mixture-of-experts rows (drawn last: the other draws unchanged)
    x["ep"] = np.where((x["experts"] > 1) & (rng.random(n) < 1.0 / 3.0), x["tp"] * x["dp"], 1.0)
    # MTP speculative decoding on the models that have the module (one draft token per step)
    x["spec_tokens"] = np.where(x["mtp"] > 0, 1.0, 0.0)
    x["spec_acceptance"] = np.full(n, np.nan)
    systems = rng.integers(0, len(hwcat.system_names()), n)
    # a third of the closed loops think 1-10 s between requests, a third are bursts (drawn after the systems: the
    # other draws unchanged)
    kind = rng.random(n)
    x["think_time_s"] = np.where(closed & (kind < 1.0 / 3.0), rng.uniform(1.0, 10.0, n), np.nan)
    x["arrival"] = np.where(closed & (kind >= 2.0 / 3.0), float(codes.ARRIVAL_BURST), np.nan)
    # an EAGLE head drafting 2 tokens at acceptance 0.7 on a quarter of the models without MTP modules (drawn last)
    eagle = ~(x["mtp"] > 0) & (rng.random(n) < 0.25)
    x["spec_method"] = np.where(eagle, float(codes.SPEC_METHOD_EAGLE), np.nan)
    x["spec_tokens"] = np.where(eagle, 2.0, x["spec_tokens"])
    x["spec_acceptance"] = np.where(eagle, 0.7, x["spec_acceptance"])
    x["moe_imbalance"] = np.full(n, np.nan)  # the GPU generation's measured routing skew (not drawn)
    assert set(x) == set(SERVE_INPUTS)
    # the kernel's float32, as a sweep's grid decodes its points and as the training bench draws them
    return {k: v.astype(DTYPE) for k, v in x.items()}, systems


def _answered_only(x: dict[str, np.ndarray], systems: np.ndarray, step: Any, n: int
                   ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The configurations the kernel answers (divide, fit, a steady state), tiled to ``n`` rows."""
    ok = np.flatnonzero(step(x, hwcat.hardware_columns(systems))["fits"])
    idx = ok[np.arange(n) % ok.size]
    return {k: v[idx] for k, v in x.items()}, systems[idx]


def _time_kernel(step: Any, x: dict[str, np.ndarray], systems: np.ndarray, chunk: int, repeats: int
                 ) -> dict[str, float]:
    """Best of ``repeats`` timings of an inference-side kernel over ``x`` in chunks (one core)."""
    n = len(systems)
    best, answered = float("inf"), 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        answered = 0
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            # as a sweep calls it: float32 hardware columns in, float32 outputs out
            out = step({k: v[lo:hi] for k, v in x.items()}, hwcat.hardware_columns(systems[lo:hi], dtype=DTYPE),
                       out_dtype=DTYPE)
            answered += int(np.count_nonzero(out["fits"]))
        best = min(best, time.perf_counter() - t0)
    return {"configs": n, "seconds": best, "configs_per_s": n / best, "answered": answered,
            "peak_rss_bytes": peak_rss_bytes()}


def serve_bench(n: int, chunk: int, repeats: int, answered_only: bool = False) -> dict[str, float]:
    """The serving kernel on one core over N random configurations (or only ones it answers)."""
    from dse.cost.serving import serve_step

    x, systems = random_serve_configs(n)
    if answered_only:
        x, systems = _answered_only(x, systems, serve_step, n)
    return _time_kernel(serve_step, x, systems, chunk, repeats)


REFERENCE_CASES = Path(__file__).resolve().parents[2] / "tests" / "reference" / "megatron_narayanan2021_table1.csv"


def infer_bench(n: int, chunk: int, repeats: int, answered_only: bool = False) -> dict[str, float]:
    """The static-batch inference kernel on one core over N random configurations (or only ones it answers)."""
    from dse.cost.inference import INFER_INPUTS, infer_step

    xs, systems = random_serve_configs(n)
    x = {k: xs[k] for k in INFER_INPUTS}
    x["batch"] = np.where(np.isnan(x["batch"]), 64.0, x["batch"])
    if answered_only:
        x, systems = _answered_only(x, systems, infer_step, n)
    return _time_kernel(infer_step, x, systems, chunk, repeats)


def distinct_table(rows: int = 200_000, typed: bool = False) -> Any:
    """A table of mostly distinct training rows (issue 24): the Narayanan Table 1 configurations with
    micro_batch in {1, 2, 4}, global_batch = dp · micro_batch · a random integer in 1..4096 and seq_len in
    {512, 1024, 2048, 3072, 4096}; text cells (as the case reader gives) or typed columns (as pd.read_csv)."""
    import pandas as pd

    from dse.validation.validate import read_cases

    cases = pd.read_csv(REFERENCE_CASES) if typed else read_cases(REFERENCE_CASES)
    cols = [c for c in cases.columns if c not in ("case", "metric", "measured", "source", "task")]
    rng = np.random.default_rng(0)
    big = cases[cols].sample(rows, replace=True, random_state=0).reset_index(drop=True)
    mb = rng.choice([1, 2, 4], rows)
    gb = pd.to_numeric(big["dp"]).to_numpy() * mb * rng.integers(1, 4097, rows)
    seq = rng.choice([512, 1024, 2048, 3072, 4096], rows)
    for col, values in (("micro_batch", mb), ("global_batch", gb), ("seq_len", seq)):
        big[col] = values if typed else values.astype(str)
    return big


def table_bench(rows: int = 200_000, typed: bool = False, repeats: int = 3, distinct: bool = False
                ) -> dict[str, float]:
    """dse.evaluate on a table of ``rows`` rows from a case file: text cells (as the case reader gives) or
    typed columns (as ``pd.read_csv`` gives); repeated rows (the cases resampled, micro-batch varied) or mostly
    distinct ones (:func:`distinct_table`); the best of ``repeats`` timings, as for the kernels."""
    import pandas as pd

    from dse.frame import evaluate
    from dse.validation.validate import read_cases

    if distinct:
        big = distinct_table(rows, typed)
    else:
        cases = pd.read_csv(REFERENCE_CASES) if typed else read_cases(REFERENCE_CASES)
        cols = [c for c in cases.columns if c not in ("case", "metric", "measured", "source", "task")]
        big = cases[cols].sample(rows, replace=True, random_state=0).reset_index(drop=True)
        mb = np.random.default_rng(0).choice([1, 2, 4], rows)
        big["micro_batch"] = mb if typed else mb.astype(str)
    seconds = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        evaluate(big)
        seconds = min(seconds, time.perf_counter() - t0)
    return {"rows": rows, "distinct": len(big.drop_duplicates()), "seconds": seconds, "rows_per_s": rows / seconds,
            "peak_rss_bytes": peak_rss_bytes()}


def validate_bench(rows: int = 1_000_000) -> dict[str, float]:
    """What ``dse validate`` does with a case file of ``rows`` cases (:func:`dse.validation.validate.validate_table`
    with the shipped assumptions, then :func:`~dse.validation.validate.summarize_table`), timed in a fresh process
    so that its peak RSS is validate's, not this benchmark's (which built the file)."""
    import subprocess
    import tempfile

    import pandas as pd

    cases = pd.read_csv(REFERENCE_CASES, dtype=str, keep_default_na=False)
    big = cases.sample(rows, replace=True, random_state=0).reset_index(drop=True)
    big["case"] = [f"case-{i}" for i in range(rows)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cases.csv"
        big.to_csv(path, index=False)
        del big
        code = ("import sys, time, resource; from dse.validation.fit import default_assumptions_path; "
                "from dse.validation.validate import load_assumptions, summarize_table, validate_table; "
                "a = load_assumptions(default_assumptions_path()); "
                "t0 = time.perf_counter(); summarize_table(validate_table(sys.argv[1], a)); "
                "print(time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    seconds, rss = (float(v) for v in out.stdout.split())
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds, "peak_rss_bytes": rss}


if __name__ == "__main__":
    sys.exit(main())
