"""Run a sweep: split the grid into parts, evaluate them in parallel (joblib: loky locally, Dask on a
cluster), write each as its own Parquet file atomically, resume what is missing.

Layout of ``results/NAME/``: ``_spec.yaml`` (the resolved spec, package version, creation time, grid size, part
size), ``part-00000.parquet`` … (each written to a temporary name in the same directory and renamed when
complete, so a sweep killed at any moment leaves only complete parts).  Each part carries the resolved spec,
the package version and the creation time in its Parquet key-value metadata.  ``_complete.yaml``, written last
(after the ``--keep`` merge), marks the dataset complete; a run removes it before it changes any part (see
:mod:`dse.dataset`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from dse import __version__
from dse.dataset import (
    COMPLETE_FILE,
    LOCK_FILE,
    SPEC_FILE,
    check_part,
    lock_directory,
    read_spec_file,
    verified_parts,
)
from dse.grid import Grid
from dse.keep import Keep, KeepError, keep_mask, parse_keep, reduce_table
from dse.spec import Spec, SpecError
from dse.sweep import evaluate_points, parquet_options

PART_FORMAT = "part-{:05d}.parquet"
DEFAULT_PART_SIZE = 262_144
DEFAULT_MAX_POINTS = 1_000_000_000
#: Largest --chunk-size: a part is evaluated and encoded in memory (about 300 bytes a row with its
#: temporaries), so 2^21 points keep one worker under ~0.7 GB.
MAX_PART_SIZE = 2**21
#: Largest --max-points: the grid index is an int64 (2^63); 10^15 points would take decades at 10^6/s.
MAX_MAX_POINTS = 10**15
#: Parts of fewer than SMALL_PART_SIZE points are mostly overhead: each Parquet part carries its own schema and
#: footer (~20 KB) and is one task (--chunk-size 1 on 6,912 points: 136 MB in 6,912 files and 20 s, against
#: 0.3 MB and 0.5 s at the default).  More than SMALL_PARTS_COUNT of them get a warning, more than
#: MAX_SMALL_PARTS are refused.
SMALL_PART_SIZE = 1000
SMALL_PARTS_COUNT = 1000
MAX_SMALL_PARTS = 100_000
#: Points the constraint probe evaluates before the run (all of them when the grid is smaller).
PROBE_POINTS = 2**20
PROBE_WINDOW = 65536


def max_jobs() -> int:
    """Largest --jobs: 4 workers per core (more only thrash, and each loky worker holds semaphores)."""
    return max(8, 4 * (os.cpu_count() or 1))


class RunError(SpecError):
    """A sweep that cannot start (existing results, limits); exit status 2, nothing written."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run, with what was kept and how to go on (``dse`` prints it, exit status 130)."""


@dataclass(frozen=True)
class RunPlan:
    spec: Spec
    out_dir: Path
    part_size: int
    n_points: int
    keep: Keep = Keep("all")

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
    table = evaluate_points(plan.spec, Grid(plan.spec), start, stop, feasible_only or plan.keep.feasible_only)
    table = reduce_table(table, plan.keep)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata(plan.spec, created),
                                           "dse.part": str(i), "dse.points": f"{start}-{stop}"})
    _write_atomic(plan, i, table)
    return i, stop - start, table.num_rows


def _write_atomic(plan: RunPlan, i: int, table: pa.Table) -> None:
    final = plan.part_path(i)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(table, tmp, **parquet_options(plan.spec))
        os.replace(tmp, final)
    except BaseException:  # a full disk, Ctrl-C: no half-written temporary part stays behind
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def _write_text_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` under a temporary name renamed when complete (removed if the write fails)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def _resume_hint(plan: RunPlan) -> str:
    from dse.dataset import resume_command

    return resume_command(plan.out_dir, {"source": plan.spec.path, "part_size": plan.part_size,
                                         "keep": plan.keep.text, "spec": plan.spec.resolved})


def _write_error(plan: RunPlan, exc: OSError, done: int, todo: int) -> RunError:
    """A write that failed (a full disk, a quota, a read-only file system) as one line: what, where, and how to
    go on."""
    reason = os.strerror(exc.errno) if exc.errno else " ".join(str(exc).split())[:200]
    where = exc.filename or plan.out_dir
    kept = (f"{done} of {todo} parts written by this run are kept" if done else "no part written by this run")
    return RunError(f"{where}: cannot write the dataset: {reason} [{errno.errorcode.get(exc.errno or 0, 'OSError')}] "
                    f"({kept}); allowed: free space on that file system (or make it writable), then "
                    f"`{_resume_hint(plan)}`")


def merge_parts(plan: RunPlan) -> int:
    """The --keep reduction across the parts: rewrite (atomically) each part that holds rows the global
    reduction drops; returns the rows kept.  Idempotent (see :mod:`dse.keep`)."""
    if not plan.keep.reduces:
        return -1
    tables = [pq.read_table(plan.part_path(i)) for i in range(plan.n_parts)]
    sizes = [t.num_rows for t in tables]
    merged = pa.concat_tables(tables) if tables else None
    if merged is None:
        return 0
    mask = keep_mask(merged, plan.keep)
    offset = 0
    for i, (table, n) in enumerate(zip(tables, sizes, strict=True)):
        part_mask = mask[offset:offset + n]
        offset += n
        if not part_mask.all():
            _write_atomic(plan, i, table.filter(pa.array(part_mask)))
    return int(mask.sum())


def _probe_windows(n_points: int) -> list[tuple[int, int]]:
    """Ranges the constraint probe evaluates: the whole grid when it has at most PROBE_POINTS points, else
    PROBE_POINTS / PROBE_WINDOW windows spread evenly over it (the fastest axes vary inside a window, the
    slower ones across windows)."""
    if n_points <= PROBE_POINTS:
        return [(s, min(s + PROBE_WINDOW, n_points)) for s in range(0, n_points, PROBE_WINDOW)]
    count = PROBE_POINTS // PROBE_WINDOW
    starts = np.linspace(0, n_points - PROBE_WINDOW, count).astype(np.int64)
    return [(int(s), int(s) + PROBE_WINDOW) for s in np.unique(starts)]


def _check_any_point(plan: RunPlan, feasible_only: bool) -> bool:
    """Refuse a grid whose constraints leave no point, before anything is written.  Exact for grids of up to
    PROBE_POINTS points; a larger grid is sampled (bounded time, ~1 s) and, when the sample keeps nothing,
    run anyway: returns False so that the caller can say so."""
    grid = Grid(plan.spec)
    windows = _probe_windows(plan.n_points)
    for start, stop in windows:
        if evaluate_points(plan.spec, grid, start, stop, feasible_only).num_rows:
            return True
    if plan.n_points > PROBE_POINTS:
        return False
    from dse.sweep import reasons_before_constraints

    raise RunError(f"{plan.spec.path}: constraints: the grid's {plan.n_points:,} points all fail the constraints "
                   f"(divisible={plan.spec.divisible}, tp_within_scaleup={plan.spec.tp_within_scaleup}, filters="
                   f"{[f.text for f in plan.spec.filters]}{', --keep ' + plan.keep.text if feasible_only else ''}); "
                   f"the model's answers before them: {reasons_before_constraints(plan.spec, grid, windows)}; "
                   "allowed: constraints that keep at least one point")


def check_options(jobs: int = -1, part_size: int = DEFAULT_PART_SIZE, max_points: int = DEFAULT_MAX_POINTS,
                  backend: str = "loky") -> None:
    """Refuse option values a run cannot use (exit 2, before anything is read or written)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not (jobs == -1 or 1 <= jobs <= max_jobs()):
        raise RunError(f"--jobs: value {jobs} is not allowed; allowed: -1 (all cores) or 1..{max_jobs()}")
    if isinstance(part_size, bool) or not isinstance(part_size, int) or not 1 <= part_size <= MAX_PART_SIZE:
        raise RunError(f"--chunk-size: value {part_size} is not allowed; allowed: an integer in 1..{MAX_PART_SIZE:,}")
    if isinstance(max_points, bool) or not isinstance(max_points, int) or not 1 <= max_points <= MAX_MAX_POINTS:
        raise RunError(f"--max-points: value {max_points} is not allowed; allowed: an integer in "
                       f"1..{MAX_MAX_POINTS:,}")
    if backend not in ("loky", "dask"):
        raise RunError(f"--backend: value {backend!r} is not allowed; allowed: loky, dask")


def _holds_results(target: Path) -> bool:
    return target.is_dir() and any(p.name != LOCK_FILE for p in target.iterdir())


def _check_existing(plan: RunPlan, resume: bool, feasible_only: bool) -> None:
    """What is already in -o must be nothing, or (with --resume) a sweep of the same spec and part size."""
    target = plan.out_dir
    if target.exists() and not target.is_dir():
        raise RunError(f"{target}: exists and is not a directory; allowed: a new or existing results directory")
    if not _holds_results(target):
        return
    if not resume:
        raise RunError(f"{target}: already holds results; allowed: --resume to finish them, or another -o")
    if not (target / SPEC_FILE).exists():
        raise RunError(f"{target}: has no {SPEC_FILE}, so it was not written by `dse run`; allowed: another -o")
    previous = read_spec_file(target)
    kept = previous.get("keep", "feasible" if previous.get("feasible_only", False) else "all")
    same = (previous.get("spec_digest") == plan.spec.digest() and previous.get("part_size") == plan.part_size
            and kept == plan.keep.text)
    if not same:
        raise RunError(f"{target}: holds a sweep of a different spec, part size or --keep (spec "
                       f"{previous.get('spec_digest')}, part size {previous.get('part_size')}, keep {kept}); "
                       "allowed: the same spec, --chunk-size and --keep, or another -o")


def prepare(spec: Spec, out_dir: str | Path, part_size: int = DEFAULT_PART_SIZE,
            max_points: int = DEFAULT_MAX_POINTS, resume: bool = False, feasible_only: bool = False,
            keep: str | Keep | None = None) -> RunPlan:
    """Check everything that can make the sweep fail before any file is written; return the plan.

    ``keep``: what the dataset keeps (:mod:`dse.keep`; ``feasible_only`` is ``keep="feasible"``)."""
    check_options(part_size=part_size, max_points=max_points)
    kept = _parse_keep(spec, keep, feasible_only)
    feasible_only = kept.feasible_only
    n = spec.size
    if n > max_points:
        raise RunError(f"{spec.path}: the grid has {n:,} points, more than --max-points {max_points:,}; allowed: "
                       "a smaller grid (fewer axis values or sub-grids) or a larger --max-points")
    plan = RunPlan(spec, Path(out_dir), part_size, n, kept)
    if part_size < SMALL_PART_SIZE and plan.n_parts > MAX_SMALL_PARTS:
        raise RunError(f"--chunk-size: value {part_size:,} splits the {n:,} points into {plan.n_parts:,} parts (one "
                       f"Parquet file each); allowed: at most {MAX_SMALL_PARTS:,} parts of fewer than "
                       f"{SMALL_PART_SIZE:,} points, a --chunk-size of at least "
                       f"{min(-(-n // MAX_SMALL_PARTS), SMALL_PART_SIZE):,} (default {DEFAULT_PART_SIZE:,})")
    if part_size < SMALL_PART_SIZE and plan.n_parts > SMALL_PARTS_COUNT:
        print(f"--chunk-size: warning: {plan.n_parts:,} parts of {part_size:,} point(s) each, one Parquet file per "
              f"part with its own schema and footer (~20 KB) and one task each: the dataset is many times larger "
              f"and slower than with --chunk-size {SMALL_PART_SIZE:,} or more (default {DEFAULT_PART_SIZE:,})",
              file=sys.stderr)
    _check_output_path(plan.out_dir)
    _check_existing(plan, resume, feasible_only)
    if not _check_any_point(plan, feasible_only):
        print(f"{spec.path}: note: no point of a {PROBE_POINTS:,}-point sample of the {n:,} passes the constraints; "
              "running anyway (the dataset may be empty)", file=sys.stderr)
    return plan


def _parse_keep(spec: Spec, keep: str | Keep | None, feasible_only: bool) -> Keep:
    from dse.sweep import schema

    if keep is None:
        keep = "feasible" if feasible_only else "all"
    sch = schema(spec)
    try:
        kept = keep if isinstance(keep, Keep) else parse_keep(keep, sch.names)
    except KeepError as exc:
        raise RunError(f"{spec.path}: {exc}") from exc
    for col, _ in kept.objectives:
        typ = sch.field(col).type
        if not (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
            numeric = [f.name for f in sch if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)]
            raise RunError(f"{spec.path}: --keep: objective column {col!r} in {kept.text!r} is not numeric; "
                           f"allowed: {', '.join(numeric)}")
    if feasible_only and kept.kind == "all":
        raise RunError(f"{spec.path}: --feasible-only with --keep all; allowed: one of them (--feasible-only is "
                       "--keep feasible)")
    return kept


def _check_output_path(target: Path) -> None:
    """-o must be a directory or creatable as one: its nearest existing ancestor is a writable directory."""
    probe = target
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe != target and not probe.is_dir():
        raise RunError(f"{target}: cannot create the results directory: {probe} is a file; allowed: a path whose "
                       "parents are directories")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise RunError(f"{target}: cannot write there ({probe} is not writable); allowed: a writable path")


def _write_spec_file(plan: RunPlan, created: str, feasible_only: bool) -> bool:
    spec_file = plan.out_dir / SPEC_FILE
    if spec_file.exists():
        return False
    doc = {"spec": plan.spec.resolved, "spec_digest": plan.spec.digest(), "source": plan.spec.path,
           "dse_version": __version__, "created": created, "points": plan.n_points, "part_size": plan.part_size,
           "parts": plan.n_parts, "feasible_only": plan.keep.feasible_only, "keep": plan.keep.text}
    _write_text_atomic(spec_file, yaml.safe_dump(doc, sort_keys=False))
    return True


def _write_complete_mark(plan: RunPlan) -> None:
    """The completion mark, written atomically after every part (and the merge) is in place."""
    rows = sum(pq.ParquetFile(plan.part_path(i)).metadata.num_rows for i in range(plan.n_parts))
    doc = {"complete": True, "spec_digest": plan.spec.digest(), "parts": plan.n_parts, "rows": rows,
           "keep": plan.keep.text, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _write_text_atomic(plan.out_dir / COMPLETE_FILE, yaml.safe_dump(doc, sort_keys=False))


def missing_parts(plan: RunPlan) -> list[int]:
    return [i for i in range(plan.n_parts) if not plan.part_path(i).exists()]


def bad_parts(plan: RunPlan) -> list[tuple[int, str]]:
    """Existing parts that cannot be trusted (see :func:`dse.dataset.check_part`), with why."""
    out = []
    for i in range(plan.n_parts):
        path = plan.part_path(i)
        if path.exists():
            why = check_part(path, plan.spec.digest(), i, plan.part_range(i))
            if why is not None:
                out.append((i, why))
    return out


def _make_directory(target: Path) -> Path | None:
    """Create -o (and missing parents); returns the topmost directory created (to remove on failure)."""
    top = None
    probe = target
    while not probe.exists():
        top = probe
        probe = probe.parent
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"{target}: cannot create the results directory: {exc.strerror}; allowed: a writable "
                       "path") from exc
    return top


def run(plan: RunPlan, jobs: int = -1, backend: str = "loky", scheduler: str | None = None,
        feasible_only: bool = False, progress: bool | None = None, resume: bool = True,
        report: Callable[[str], None] | None = None) -> dict[str, int | float]:
    """Evaluate the missing parts of ``plan`` in parallel; returns counts and the wall time.

    Order: options checked and the Dask scheduler reached (nothing written yet), then -o created and locked,
    what it holds checked again under the lock, bad parts removed (each reported), the spec file written,
    and the missing parts evaluated.  A failure before the first part leaves nothing behind."""
    from joblib import Parallel, delayed, parallel_config

    check_options(jobs=jobs, part_size=plan.part_size, backend=backend)
    if feasible_only and plan.keep.kind == "all":  # the older flag on a plan made without --keep
        plan = dataclasses.replace(plan, keep=Keep("feasible", text="feasible"))
    feasible_only = plan.keep.feasible_only
    say = report or (lambda msg: print(msg, file=sys.stderr))
    client = _dask_client(scheduler, jobs) if backend == "dask" else None
    created_top = None
    lock = None
    wrote_spec = False
    try:
        created_top = _make_directory(plan.out_dir)
        lock = lock_directory(plan.out_dir)
        _check_existing(plan, resume, feasible_only)
        for stale in [*plan.out_dir.glob(".part-*.tmp-*"), *plan.out_dir.glob(f".{COMPLETE_FILE}.tmp-*")]:
            stale.unlink()
        bad = bad_parts(plan)
        if bad or missing_parts(plan):  # the dataset changes: incomplete until this run marks it again
            (plan.out_dir / COMPLETE_FILE).unlink(missing_ok=True)
        for i, why in bad:
            say(f"{plan.part_path(i)}: {why}; recomputing it")
            plan.part_path(i).unlink()
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if (plan.out_dir / SPEC_FILE).exists():
            created = str(read_spec_file(plan.out_dir).get("created", created))
        wrote_spec = _write_spec_file(plan, created, feasible_only)
    except BaseException as exc:
        if lock is not None:  # only the lock holder may remove what it created (another run may own -o)
            if created_top is not None:
                shutil.rmtree(created_top, ignore_errors=True)
            elif wrote_spec:
                (plan.out_dir / SPEC_FILE).unlink(missing_ok=True)
            lock.release()
        if client is not None:
            client.close()
        if isinstance(exc, OSError):
            raise _write_error(plan, exc, 0, 0) from None
        raise
    todo = missing_parts(plan)
    if backend == "loky" and todo:
        remove_stale_shm()
    show = sys.stderr.isatty() if progress is None else progress
    bar = _progress(plan, todo, show)
    t0 = time.perf_counter()
    rows = 0
    done = 0
    try:
        config = parallel_config(backend="dask") if backend == "dask" else parallel_config(
            backend="loky", n_jobs=jobs, initializer=_worker_ignores_ctrl_c)
        with config:
            par = Parallel(n_jobs=jobs if backend == "loky" else -1, return_as="generator_unordered")
            # workers get absolute paths: a reused loky worker keeps the working directory it started in
            abs_plan = dataclasses.replace(plan, out_dir=plan.out_dir.absolute())
            for _, points, written in par(delayed(write_part)(abs_plan, i, created, feasible_only) for i in todo):
                rows += written
                done += 1
                bar.update(points)
        if not missing_parts(plan):
            if plan.keep.reduces:
                rows = merge_parts(plan)
            _write_complete_mark(plan)
    except BaseException as exc:
        # the workers are gone (joblib ends them on an error or Ctrl-C); the temporary parts of those it
        # stopped mid-write are ours to remove (we hold the lock)
        for stale in plan.out_dir.glob(".part-*.tmp-*"):
            with contextlib.suppress(OSError):
                stale.unlink()
        if done == 0 and wrote_spec and not any(plan.out_dir.glob("part-*.parquet")):  # nothing to resume
            if created_top is not None:
                shutil.rmtree(created_top, ignore_errors=True)
            else:
                (plan.out_dir / SPEC_FILE).unlink(missing_ok=True)
        written = sum(plan.part_path(i).exists() for i in todo)  # also those done but not yet reported
        if isinstance(exc, OSError):
            raise _write_error(plan, exc, written, len(todo)) from None
        if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, RunInterrupted):
            if not plan.out_dir.exists():
                raise RunInterrupted(f"{plan.out_dir}: nothing written") from None
            raise RunInterrupted(f"{plan.out_dir}: {written} of {len(todo)} parts written by this run are kept, "
                                 f"the dataset is incomplete; finish it with `{_resume_hint(plan)}`") from None
        raise
    finally:
        bar.close()
        lock.release()
        if client is not None:
            client.close()
    return {"points": sum(plan.part_range(i)[1] - plan.part_range(i)[0] for i in todo), "rows": rows,
            "parts": len(todo), "seconds": time.perf_counter() - t0}


#: Shared-memory entries joblib's loky backend creates, named after the creating process: its semaphores
#: (``sem.loky-PID-*``) and memmapping folders (``joblib_memmapping_folder_PID_*``).
SHM_DIR = Path("/dev/shm")
_SHM_PREFIXES = ("sem.loky-", "joblib_memmapping_folder_")


def remove_stale_shm(shm: Path = SHM_DIR) -> list[str]:
    """Remove the loky/joblib entries of ``shm`` that a dead process of this user left (a kill -9 of a run and
    its resource tracker leaves them; a clean exit or Ctrl-C does not); returns their names.  An entry whose
    process still runs, or of another user, is left alone."""
    removed: list[str] = []
    if not shm.is_dir():
        return removed
    try:
        entries = list(shm.iterdir())
    except OSError:
        return removed
    for entry in entries:
        prefix = next((p for p in _SHM_PREFIXES if entry.name.startswith(p)), None)
        if prefix is None:
            continue
        pid_text = entry.name[len(prefix):].replace("_", "-").split("-", 1)[0]
        try:
            if not pid_text.isdigit() or entry.lstat().st_uid != os.getuid() or _alive(int(pid_text)):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry.name)
        except OSError:
            continue
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True


def _worker_ignores_ctrl_c() -> None:
    """Loky workers ignore SIGINT: a terminal's Ctrl-C reaches the whole process group, and a worker would print
    its own KeyboardInterrupt traceback; the parent stops them (and removes their temporary parts) instead."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


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
        try:
            return Client(scheduler, timeout=5)
        except (OSError, TimeoutError) as exc:
            raise RunError(f"--scheduler: cannot reach the Dask scheduler {scheduler!r} ({exc}); allowed: the "
                           "address of a running scheduler, tcp://host:port") from exc
    workers = os.cpu_count() or 1 if jobs in (None, -1) else max(1, jobs)
    return Client(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None))


def read_results(path: str | Path) -> Iterator[pa.Table]:
    """Yield the parts of a results directory in order (each checked first; a bad one raises DatasetError)."""
    for part in verified_parts(path):
        yield pq.read_table(part)


def remove(path: str | Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
