"""Lazy, index-based grid: ``len`` before any work, ``grid[i:j]`` decoded by mixed radix into numpy columns.

Point ``k`` of a sub-grid with axes a₀ … a_{n−1} (sorted by name, the last varying fastest) has digits
dᵢ = ⌊k / Πⱼ>ᵢ |aⱼ|⌋ mod |aᵢ| and values aᵢ[dᵢ].  Sub-grids follow each other in the spec's order, so a
global index range maps to contiguous ranges of one or more sub-grids.  No Python object is made per point.
"""

from __future__ import annotations

import numpy as np

from dse.spec import Spec


class Grid:
    """The points of a :class:`dse.spec.Spec`, decoded on demand."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.sizes = np.array([g.size for g in spec.grids], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])
        #: every column a point may carry (axes absent from a sub-grid decode as NaN = default)
        self.columns = tuple(k for k in spec.grid_keys if any(a.name == k for g in spec.grids for a in g.axes))

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, item: slice) -> dict[str, np.ndarray]:
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("a Grid is indexed by a contiguous slice, grid[i:j]")
        start, stop, _ = item.indices(len(self))
        return self.decode(start, max(start, stop))

    def decode(self, start: int, stop: int, dtype: type = np.float64) -> dict[str, np.ndarray]:
        """Columns of points [start, stop): one array per axis (codes for categorical axes; ``dtype`` float64,
        or float32 for the kernel — axis values are small integers, exact in both) and ``point``, the global
        index."""
        n = stop - start
        out: dict[str, np.ndarray] = {c: np.full(n, np.nan, dtype=dtype) for c in self.columns}
        out["point"] = np.arange(start, stop, dtype=np.int64)
        for g, grid in enumerate(self.spec.grids):
            lo = max(start, int(self.offsets[g]))
            hi = min(stop, int(self.offsets[g + 1]))
            if lo >= hi:
                continue
            local = np.arange(lo - self.offsets[g], hi - self.offsets[g], dtype=np.int64)
            rows = slice(lo - start, hi - start)
            stride = 1
            for axis in reversed(grid.axes):
                size = len(axis)
                digit = (local // stride) % size
                out[axis.name][rows] = axis.values[digit]
                stride *= size
        return out
