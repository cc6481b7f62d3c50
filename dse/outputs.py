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


#: The PNG ``Software`` text that marks a figure as written by dse (see :func:`written_by_dse`).
FIGURE_SOFTWARE = "dse"


def figure_metadata() -> dict[str, str]:
    """PNG text chunks of every figure dse draws."""
    import matplotlib

    from dse import __version__

    return {"Software": f"{FIGURE_SOFTWARE} {__version__} (matplotlib {matplotlib.__version__})"}


def written_by_dse(png: str | Path) -> bool:
    """Whether the PNG at ``png`` is a figure dse drew: its ``Software`` text names dse, or (figures drawn before
    that text existed) its plot data lies beside it as ``STEM.plot-data.parquet`` or ``STEM.parquet``."""
    path = Path(png)
    try:
        from PIL import Image

        with Image.open(path) as image:
            software = str(image.info.get("Software", ""))
    except Exception:  # noqa: BLE001 - not an image Pillow reads: not ours
        software = ""
    if software.startswith(f"{FIGURE_SOFTWARE} "):
        return True
    return path.with_name(f"{path.stem}.plot-data.parquet").exists() or path.with_suffix(".parquet").exists()
