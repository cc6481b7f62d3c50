"""A results directory as a trustworthy dataset: one writer at a time, parts that are checked before they are
trusted, and readers that name a bad part instead of failing deep inside pyarrow.

* **Lock.** ``dse run`` holds an exclusive ``fcntl.flock`` on ``DIR/.dse.lock`` for the whole run; the file
  records the holder's pid.  A second writer exits 2 naming that pid.  The lock dies with its process, so a
  ``kill -9`` never leaves a stale lock.  The file starts with a dot, so ``pd.read_parquet(DIR)`` skips it.
* **Verified parts.** Each part carries in its Parquet metadata the spec digest, its index and its point range.
  :func:`check_part` trusts a part only if its footer reads, its metadata names the expected digest, index and
  range, and its ``point`` column (read back) counts the footer's rows, increases and lies in the range.
* **Completion mark.** ``dse run`` writes ``DIR/_complete.yaml`` (atomically, by rename) as its very last step:
  after every part, and after the ``--keep`` merge across the parts when the keep reduces (pareto, top).  A
  writer removes it before it changes any part.  So a dataset is complete only when the mark is there: a run
  killed after its last part but before or during the merge leaves parts that look whole but hold the local
  reductions, more rows than the kept ones.  The readers (:func:`verified_parts`, hence ``dse info``,
  ``dse pareto``, ``dse plot``, :func:`load_results`, :func:`dse.runner.read_results`) refuse such a dataset
  (:class:`DatasetError`, naming the ``--resume`` command that finishes it) and warn
  (:class:`IncompleteDatasetWarning`) on one whose parts are correct but not all written (keep all or
  feasible).  A dataset written before the mark existed is complete when every part is there and, for a
  reducing keep, its rows are their own reduction (the merge is idempotent, so exactly the merged datasets).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shlex
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq
import yaml

from dse.spec import SpecError

if TYPE_CHECKING:
    import pandas as pd

LOCK_FILE = ".dse.lock"
#: The resolved spec beside the parts; the leading underscore makes pd.read_parquet(dir) skip it.
SPEC_FILE = "_spec.yaml"
PART_GLOB = "part-*.parquet"
#: Written last by ``dse run`` (see the module docstring); the underscore makes pd.read_parquet(dir) skip it.
COMPLETE_FILE = "_complete.yaml"


class DatasetError(SpecError):
    """A results directory that cannot be used as asked (exit status 2, naming the file)."""


class IncompleteDatasetWarning(UserWarning):
    """A results directory whose rows are right but cover only part of the grid (a run not finished)."""


@dataclass
class DirectoryLock:
    """An exclusive lock on a results directory (see the module docstring)."""

    path: Path
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = -1


def lock_directory(directory: Path) -> DirectoryLock:
    """Take the writer's lock on ``directory`` (which exists) or raise :class:`DatasetError` naming the holder."""
    path = directory / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise DatasetError(f"{directory}: cannot create the lock file {LOCK_FILE}: {exc.strerror}; allowed: a "
                           "writable results directory") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = ""
        try:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        except OSError:
            pass
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            who = f"process {holder}" if holder else "another process"
            raise DatasetError(f"{directory}: another `dse run` is writing here ({who} holds {LOCK_FILE}); "
                               "allowed: wait for it to finish, or another -o") from exc
        raise DatasetError(f"{directory}: cannot lock {LOCK_FILE}: {exc.strerror}") from exc
    try:
        same = os.fstat(fd).st_ino == os.stat(path).st_ino
    except OSError:
        same = False
    if not same:  # the directory was removed or replaced between open and lock (a failed concurrent start)
        os.close(fd)
        raise DatasetError(f"{directory}: changed while `dse run` was starting (another run removed it); allowed: "
                           "run again")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return DirectoryLock(path, fd)


def read_spec_file(directory: Path) -> dict:
    """The ``_spec.yaml`` of a results directory as a mapping; :class:`DatasetError` if missing or garbage."""
    spec_file = directory / SPEC_FILE
    try:
        data = yaml.safe_load(spec_file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DatasetError(f"{directory}: not a results directory written by `dse run` (no {SPEC_FILE})") from exc
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise DatasetError(f"{spec_file}: not a readable {SPEC_FILE} ({' '.join(str(exc).split())[:200]}); "
                           "allowed: the file `dse run` wrote (rerun into a new -o)") from exc
    needed = ("spec_digest", "points", "part_size", "parts")
    if not isinstance(data, dict) or any(k not in data for k in needed):
        raise DatasetError(f"{spec_file}: not a {SPEC_FILE} written by `dse run` (needs the keys "
                           f"{', '.join(needed)}); allowed: the file `dse run` wrote (rerun into a new -o)")
    return data


def check_part(path: Path, digest: str | None = None, index: int | None = None,
               point_range: tuple[int, int] | None = None) -> str | None:
    """Why the part at ``path`` cannot be trusted, or None when it can (see the module docstring)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if size == 0:
        return "empty (0 bytes)"
    try:
        pf = pq.ParquetFile(path)
        meta = pf.schema_arrow.metadata or {}
        rows = pf.metadata.num_rows
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        return f"damaged (footer unreadable: {' '.join(str(exc).split())[:120]})"
    found = meta.get(b"dse.spec_digest", b"").decode()
    if digest is not None and found != digest:
        return f"of another spec (digest {found or 'none'}, expected {digest})"
    if index is not None and meta.get(b"dse.part", b"").decode() != str(index):
        return f"not part {index} (its metadata says part {meta.get(b'dse.part', b'?').decode()})"
    if point_range is not None and meta.get(b"dse.points", b"").decode() != f"{point_range[0]}-{point_range[1]}":
        return (f"of another point range ({meta.get(b'dse.points', b'?').decode()}, expected "
                f"{point_range[0]}-{point_range[1]})")
    try:
        points = pf.read(columns=["point"]).column("point").to_numpy()
    except Exception as exc:  # noqa: BLE001
        return f"damaged (data unreadable: {' '.join(str(exc).split())[:120]})"
    if len(points) != rows:
        return f"damaged ({len(points)} rows read, footer says {rows})"
    if len(points) and point_range is not None:
        if points[0] < point_range[0] or points[-1] >= point_range[1] or np.any(np.diff(points) <= 0):
            return "damaged (its points are not the increasing points of its range)"
    return None


def kept(meta: dict) -> str:
    """The ``--keep`` text of a ``_spec.yaml`` (older files: from ``feasible_only``)."""
    return str(meta.get("keep", "feasible" if meta.get("feasible_only", False) else "all"))


def resume_command(root: Path, meta: dict) -> str:
    """The ``dse run`` command line that finishes the sweep in ``root`` (same spec, part size and keep)."""
    words = ["dse", "run", str(meta.get("source") or "SPEC"), "-o", str(root), "--resume", "--chunk-size",
             str(meta["part_size"])]
    if kept(meta) != "all":
        words += ["--keep", kept(meta)]
    calibration = (meta.get("spec") or {}).get("calibration") if isinstance(meta.get("spec"), dict) else None
    if isinstance(calibration, dict) and calibration.get("file"):
        words += ["--calibration", str(calibration["file"])]
    return shlex.join(words)


def _reduces(keep_text: str) -> bool:
    return keep_text.partition(":")[0].strip().lower() in ("pareto", "top")


def _read_complete_mark(root: Path, digest: str) -> bool:
    try:
        mark = yaml.safe_load((root / COMPLETE_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(mark, dict) and str(mark.get("spec_digest")) == digest


def _is_own_reduction(parts: list[Path], keep_text: str) -> bool:
    """Whether the rows of ``parts`` are their own ``--keep`` reduction (a merged dataset; see dse.keep)."""
    import pyarrow as pa

    from dse.keep import KeepError, keep_mask, parse_keep

    try:
        keep = parse_keep(keep_text)
        columns = list(dict.fromkeys(["point", "fits", *keep.columns()]))
        table = pa.concat_tables([pq.read_table(p, columns=columns) for p in parts])
        return bool(keep_mask(table, keep).all())
    except (KeepError, KeyError, ValueError, pa.ArrowException):
        return False


def check_complete(root: Path, meta: dict, parts: list[Path]) -> None:
    """Refuse (:class:`DatasetError`) a dataset whose rows are not yet what ``dse run`` promises, warn
    (:class:`IncompleteDatasetWarning`) on one whose rows are right but not all written; see the module
    docstring.  ``parts``: the verified parts of ``root``."""
    n_parts = int(meta["parts"])
    keep_text = kept(meta)
    all_there = len(parts) == n_parts
    if all_there and _read_complete_mark(root, str(meta["spec_digest"])):
        return
    finish = f"run with --resume to finish it: `{resume_command(root, meta)}`"
    if _reduces(keep_text):
        if all_there and not (root / COMPLETE_FILE).exists() and _is_own_reduction(parts, keep_text):
            return  # written before the mark existed, and merged
        state = "written, not merged" if all_there else "written"
        raise DatasetError(f"{root}: incomplete: the run stopped before its --keep {keep_text} merge finished "
                           f"({len(parts)} of {n_parts} parts {state}), so its rows are not the kept ones; "
                           f"allowed: {finish}")
    if not all_there:
        warnings.warn(f"{root}: incomplete: {len(parts)} of {n_parts} parts written, so the rows cover only part of "
                      f"the grid; {finish}", IncompleteDatasetWarning, stacklevel=3)


def verified_parts(directory: str | Path, complete: bool = True) -> list[Path]:
    """The parts of a results directory, each checked against ``_spec.yaml``; raises :class:`DatasetError`
    naming the first bad part (for readers: ``dse info``, ``pareto``, ``plot``).  With ``complete`` (the
    default), also :func:`check_complete`: an unmerged reducing dataset is refused, a partial one warned of."""
    root = Path(directory)
    if not root.is_dir():
        raise DatasetError(f"{root}: not a results directory written by `dse run` (no such directory)")
    meta = read_spec_file(root)
    digest, part_size, n_points = str(meta["spec_digest"]), int(meta["part_size"]), int(meta["points"])
    parts = sorted(root.glob(PART_GLOB))
    for p in parts:
        try:
            index = int(p.name[len("part-"):-len(".parquet")])
        except ValueError:
            raise DatasetError(f"{p}: not a part `dse run` writes (part-NNNNN.parquet)") from None
        rng = (index * part_size, min((index + 1) * part_size, n_points))
        why = check_part(p, digest, index, rng)
        if why is not None:
            raise DatasetError(f"{p}: bad part: {why}; allowed: `{resume_command(root, meta)}` recomputes it")
    if complete:
        check_complete(root, meta, parts)
    return parts


def load_results(path: str | Path, feasible_only: bool = True) -> pd.DataFrame:
    """A sweep dataset (``results/NAME``, or one Parquet file), only the rows that fit when ``feasible_only``
    (read with predicate push-down).  Raises ``ValueError`` when the path holds no dataset."""
    import pyarrow.dataset as ds

    root = Path(path)
    if not root.exists():
        raise ValueError(f"{root}: no such results directory")
    if root.is_dir() and (root / SPEC_FILE).exists():
        try:
            files = verified_parts(root)  # a sweep: every part checked, a bad one named
        except DatasetError as exc:
            raise ValueError(str(exc)) from exc
    else:
        files = [root] if root.is_file() else sorted(p for p in root.glob("*.parquet")
                                                     if not p.name.startswith(("_", ".")))
    if not files:
        raise ValueError(f"{root}: no Parquet part in this directory (write one with `dse run`)")
    dataset = ds.dataset([str(f) for f in files], format="parquet")  # only the parts, whatever else lies there
    feasible = feasible_only and "fits" in dataset.schema.names
    table = dataset.to_table(filter=ds.field("fits") == True if feasible else None)  # noqa: E712 - an expression
    return table.to_pandas()
