"""Files the commands write beside a dataset (``dse pareto -o``, ``dse plot -o``): checked before the work, and
written under a temporary name renamed when complete, so a failure (a read-only directory, a full disk,
Ctrl-C) never leaves half a file."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path


def unwritable(directory: str | Path) -> str | None:
    """Why files cannot be created in ``directory`` (created with its parents when missing), or None: its
    nearest existing ancestor must be a writable directory."""
    target = Path(directory)
    probe = target
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path`` (same suffix, so writers that choose the format by
    it still do) and rename it to ``path``; the temporary file is removed if anything fails."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp-{os.getpid()}{out.suffix}")
    try:
        write(tmp)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return out


def write_error(option: str, target: str | Path, exc: OSError) -> str:
    """One line for a write that failed: the option, the file, the system's reason, what is allowed."""
    reason = os.strerror(exc.errno) if exc.errno else " ".join(str(exc).split())[:200]
    where = exc.filename or target
    return f"{option} {target}: cannot write {where}: {reason}; allowed: a writable directory with free space"
