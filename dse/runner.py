"""Run a sweep: split the grid into parts, evaluate them in parallel (joblib: loky locally, Dask on a
cluster), write each as its own Parquet file atomically, resume what is missing.

Layout of ``results/NAME/``: ``_spec.yaml`` (the resolved spec, package version, creation time, grid size, part
size), ``part-00000.parquet`` … (each written to a temporary name in the same directory and renamed when
complete, so a sweep killed at any moment leaves only complete parts).  Each part carries the resolved spec,
the package version and the creation time in its Parquet key-value metadata.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from dse import __version__
from dse.grid import Grid
from dse.spec import Spec, SpecError
from dse.sweep import evaluate_points, parquet_options

PART_FORMAT = "part-{:05d}.parquet"
#: The resolved spec beside the parts; the leading underscore makes pd.read_parquet(dir) skip it.
SPEC_FILE = "_spec.yaml"
DEFAULT_PART_SIZE = 262_144
DEFAULT_MAX_POINTS = 1_000_000_000


class RunError(SpecError):
    """A sweep that cannot start (existing results, limits); exit status 2, nothing written."""


@dataclass(frozen=True)
class RunPlan:
    spec: Spec
    out_dir: Path
    part_size: int
    n_points: int

    @property
    def n_parts(self) -> int:
        return -(-self.n_points // self.part_size)

    def part_range(self, i: int) -> tuple[int, int]:
        return i * self.part_size, min((i + 1) * self.part_size, self.n_points)

    def part_path(self, i: int) -> Path:
        return self.out_dir / PART_FORMAT.format(i)


def metadata(spec: Spec, created: str) -> dict[str, str]:
    return {"dse.spec": json.dumps(spec.resolved, sort_keys=True), "dse.spec_digest": spec.digest(),
            "dse.version": __version__, "dse.created": created}


def write_part(plan: RunPlan, i: int, created: str, feasible_only: bool) -> tuple[int, int, int]:
    """Evaluate part ``i`` and write it atomically; returns (part, points, rows written)."""
    start, stop = plan.part_range(i)
    table = evaluate_points(plan.spec, Grid(plan.spec), start, stop, feasible_only)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata(plan.spec, created)})
    final = plan.part_path(i)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    pq.write_table(table, tmp, **parquet_options(plan.spec))
    os.replace(tmp, final)
    return i, stop - start, table.num_rows


def _check_any_point(plan: RunPlan, feasible_only: bool) -> None:
    """Refuse a spec whose constraints leave no point, before anything is written (stops at the first kept
    row, so a normal spec costs one small evaluation)."""
    grid = Grid(plan.spec)
    probe = 65536
    for start in range(0, plan.n_points, probe):
        if evaluate_points(plan.spec, grid, start, min(start + probe, plan.n_points), feasible_only).num_rows:
            return
    raise RunError(f"{plan.spec.path}: constraints: the grid's {plan.n_points:,} points all fail the constraints "
                   f"(divisible={plan.spec.divisible}, tp_within_scaleup={plan.spec.tp_within_scaleup}, filters="
                   f"{[f.text for f in plan.spec.filters]}{', --feasible-only' if feasible_only else ''}); "
                   "allowed: constraints that keep at least one point")


def prepare(spec: Spec, out_dir: str | Path, part_size: int = DEFAULT_PART_SIZE,
            max_points: int = DEFAULT_MAX_POINTS, resume: bool = False, feasible_only: bool = False) -> RunPlan:
    """Check everything that can make the sweep fail before any file is written; return the plan."""
    if part_size < 1:
        raise RunError(f"--chunk-size: value {part_size} is not allowed; allowed: a positive integer")
    n = spec.size
    if n > max_points:
        raise RunError(f"{spec.path}: the grid has {n:,} points, more than --max-points {max_points:,}; allowed: "
                       "a smaller grid (fewer axis values or sub-grids) or a larger --max-points")
    plan = RunPlan(spec, Path(out_dir), part_size, n)
    target = plan.out_dir
    if target.exists() and not target.is_dir():
        raise RunError(f"{target}: exists and is not a directory; allowed: a new or existing results directory")
    spec_file = target / SPEC_FILE
    if target.exists() and any(target.iterdir()):
        if not resume:
            raise RunError(f"{target}: already holds results; allowed: --resume to finish them, or another -o")
        if not spec_file.exists():
            raise RunError(f"{target}: has no {SPEC_FILE}, so it was not written by `dse run`; allowed: another -o")
        previous = yaml.safe_load(spec_file.read_text(encoding="utf-8")) or {}
        same = (previous.get("spec_digest") == spec.digest() and previous.get("part_size") == part_size
                and previous.get("feasible_only", False) == feasible_only)
        if not same:
            raise RunError(f"{target}: holds a sweep of a different spec or part size (spec "
                           f"{previous.get('spec_digest')}, part size {previous.get('part_size')}); allowed: the same "
                           "spec and --chunk-size, or another -o")
    _check_any_point(plan, feasible_only)
    return plan


def _write_spec_file(plan: RunPlan, created: str, feasible_only: bool) -> None:
    spec_file = plan.out_dir / SPEC_FILE
    if spec_file.exists():
        return
    doc = {"spec": plan.spec.resolved, "spec_digest": plan.spec.digest(), "source": plan.spec.path,
           "dse_version": __version__, "created": created, "points": plan.n_points, "part_size": plan.part_size,
           "parts": plan.n_parts, "feasible_only": feasible_only}
    tmp = spec_file.with_name(f".{SPEC_FILE}.tmp-{os.getpid()}")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    os.replace(tmp, spec_file)


def missing_parts(plan: RunPlan) -> list[int]:
    return [i for i in range(plan.n_parts) if not plan.part_path(i).exists()]


def run(plan: RunPlan, jobs: int = -1, backend: str = "loky", scheduler: str | None = None,
        feasible_only: bool = False, progress: bool | None = None) -> dict[str, int | float]:
    """Evaluate the missing parts of ``plan`` in parallel; returns counts and the wall time."""
    from joblib import Parallel, delayed, parallel_config

    plan.out_dir.mkdir(parents=True, exist_ok=True)
    for stale in plan.out_dir.glob(".part-*.tmp-*"):
        stale.unlink()
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if (plan.out_dir / SPEC_FILE).exists():
        created = str((yaml.safe_load((plan.out_dir / SPEC_FILE).read_text()) or {}).get("created", created))
    _write_spec_file(plan, created, feasible_only)
    todo = missing_parts(plan)
    show = sys.stderr.isatty() if progress is None else progress
    bar = _progress(plan, todo, show)
    t0 = time.perf_counter()
    rows = 0
    client = None
    try:
        if backend == "dask":
            client = _dask_client(scheduler, jobs)
            config = parallel_config(backend="dask")
        elif backend == "loky":
            config = parallel_config(backend="loky", n_jobs=jobs)
        else:
            raise RunError(f"--backend: value {backend!r} is not allowed; allowed: loky, dask")
        with config:
            par = Parallel(n_jobs=jobs if backend == "loky" else -1, return_as="generator_unordered")
            for _, points, written in par(delayed(write_part)(plan, i, created, feasible_only) for i in todo):
                rows += written
                bar.update(points)
    finally:
        bar.close()
        if client is not None:
            client.close()
    return {"points": sum(plan.part_range(i)[1] - plan.part_range(i)[0] for i in todo), "rows": rows,
            "parts": len(todo), "seconds": time.perf_counter() - t0}


def _progress(plan: RunPlan, todo: list[int], show: bool):  # noqa: ANN202 - tqdm or a no-op
    from tqdm import tqdm

    total = sum(plan.part_range(i)[1] - plan.part_range(i)[0] for i in todo)
    return tqdm(total=total, unit="pt", unit_scale=True, disable=not show, desc=plan.spec.name, smoothing=0.1)


def _dask_client(scheduler: str | None, jobs: int):  # noqa: ANN202 - dask.distributed.Client
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as exc:
        raise RunError("--backend dask needs the optional Dask extra: pip install 'dse[dask]' "
                       "(dask[distributed])") from exc
    if scheduler:
        return Client(scheduler)
    workers = os.cpu_count() or 1 if jobs in (None, -1) else max(1, jobs)
    return Client(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None))


def read_results(path: str | Path) -> Iterator[pa.Table]:
    """Yield the parts of a results directory in order."""
    for part in sorted(Path(path).glob("part-*.parquet")):
        yield pq.read_table(part)


def remove(path: str | Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
