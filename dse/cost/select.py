"""Branch-free helpers for the kernels.

``np.where`` on an unsorted mask costs ~6 ns per element on this class of machine, ~4× an arithmetic
select, so categorical branches use float 0/1 masks (numpy-financial's "compute every branch under a
mask", done arithmetically).  Both branches must be finite where they are multiplied by 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any  # numpy arrays or scalars that broadcast (the stubs cannot express broadcasting)


def pick(mask: Array, if_true: Array | float, if_false: Array | float) -> Array:
    """t·m + f·(1 − m) for a float 0/1 mask: exact, since one term is multiplied by 1 and the other by 0."""
    return if_true * mask + if_false * (1.0 - mask)


def mask(cond: Array, like: Array) -> Array:
    """``cond`` as a float 0/1 mask in the floating dtype of ``like`` (the kernel's working dtype).  Not
    ``cond * 1.0``: a bool array times a Python float is float64, and one float64 mask turns every term it
    touches of a float32 kernel into float64 (twice the memory traffic).  Python scalars (``dse explain``,
    tests) and non-float arrays give float64."""
    dtype = like.dtype if isinstance(like, (np.ndarray, np.generic)) and like.dtype.kind == "f" else np.float64
    return np.asarray(cond).astype(dtype)


#: Largest integer input (tables, specs, explain): 2^24 − 1.  The kernels compute in float32, whose integers are
#: exact up to 2^24.  With every input ≤ 2^24 − 1, :func:`divides` is exact (below), a product of inputs is
#: either exact (< 2^24) or rounds to ≥ 2^24 and so cannot equal an input (``tp*pp*cp*dp == gpus`` stays
#: exact), and every written integer fits the int32 columns of a sweep.  A size derived inside the kernel
#: (``gpus = tp·pp·cp·dp``) that leaves the domain is the reason "size above 16777215 (exact-integer domain)".
INT_DOMAIN_MAX = 2**24 - 1


def divides(divisor: Array, value: Array) -> Array:
    """True where ``divisor`` divides ``value``, exact in float32 for integer ``value`` ≤ :data:`INT_DOMAIN_MAX`:
    value/divisor is exact when the quotient q is an integer; otherwise q is at least 1/divisor away from an
    integer while its rounding error is at most q·2^-24 = value/(divisor·2^24) < 1/divisor."""
    q = value / divisor
    return q == np.floor(q)


def on_rows(rows: Array, term: Any, like: Array) -> Array:
    """A term that is 0 outside ``rows`` (a boolean mask), computed on those rows only and scattered into zeros
    shaped as ``like``: a sweep mixes models, and the terms of one architecture (routed experts, MLA) need not
    run on the others.  ``term(sub)`` gets ``sub``, which takes the rows of an array and passes scalars."""
    return _scatter_rows(rows, lambda idx: (term(lambda a: a) if idx is None
                                             else term(lambda a: a[idx] if np.ndim(a) else a),), like, 1)[0]


def _scatter_rows(rows: Array, term: Any, like: Array, n_out: int) -> list[Array]:
    """The shared body of :func:`on_rows` and :func:`columns_on_rows`: ``term(idx)`` returns ``n_out`` arrays on
    the rows ``idx`` (``None``: every row, returned as they are); they are scattered into zeros shaped as ``like``."""
    idx = np.flatnonzero(rows)
    if idx.size == rows.size:
        return list(term(None))
    outs = [np.zeros_like(like) for _ in range(n_out)]
    if idx.size:
        for out, v in zip(outs, term(idx), strict=True):
            out[idx] = v
    return outs


class RowsOf(dict):  # type: ignore[type-arg]
    """The rows ``idx`` of a kernel's column dict, taken column by column when a term first reads one (a term
    computed on a few rows of a sweep reads a handful of the ~150 columns; taking them all would cost more than
    the term).  Scalars pass through."""

    def __init__(self, columns: dict[str, Array], idx: Array) -> None:
        super().__init__()
        self.columns, self.idx = columns, idx

    def __missing__(self, key: str) -> Array:
        v = self.columns[key]
        v = v[self.idx] if np.ndim(v) else v
        self[key] = v
        return v


def columns_on_rows(rows: Array, term: Any, columns: dict[str, Array], like: Array, n_out: int) -> list[Array]:
    """:func:`on_rows` for a term of the kernel's column dict that returns ``n_out`` arrays: ``term(cols)``
    gets the columns on ``rows`` only (:class:`RowsOf`) and its outputs are scattered into zeros shaped as
    ``like``; every row: ``term(columns)`` as is."""
    outs = _scatter_rows(rows, lambda idx: term(columns if idx is None else RowsOf(columns, idx)), like, n_out)
    return [np.broadcast_to(v, np.shape(like)) for v in outs]
