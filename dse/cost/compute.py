"""Compute terms: GEMM FLOPs and bytes, and their time on a roofline with per-precision efficiency.

All functions take numpy arrays (or scalars) that broadcast together and return arrays of their dtype (the
kernels pass float32; Python scalars give float64).
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any  # numpy arrays or scalars that broadcast (the stubs cannot express broadcasting)


def gemm_flops(m: Array, n: Array, k: Array) -> Array:
    """FLOPs of an (m×k)·(k×n) matrix product: 2·m·n·k.

    Narayanan et al. 2021 (arXiv 2104.04473), Appendix: "A_{m×k} × X_{k×n} requires 2m×k×n FLOPs".
    """
    return 2.0 * m * n * k


def gemm_bytes(m: Array, n: Array, k: Array, in_bytes: Array, weight_bytes: Array, out_bytes: Array) -> Array:
    """HBM bytes of one GEMM that streams each operand once: m·k·in + k·n·w + m·n·out."""
    return m * k * in_bytes + k * n * weight_bytes + m * n * out_bytes


def roofline_time(flops: Array, bytes_moved: Array, flops_rate: Array, bytes_rate: Array) -> Array:
    """t = max(F / P_eff, B / W_eff): the roofline bound (Williams, Waterman, Patterson 2009) with
    achieved rates P_eff = peak·efficiency and W_eff = bandwidth·efficiency."""
    return np.maximum(flops / flops_rate, bytes_moved / bytes_rate)


def matmul_rates(is_fp8: Array, is_fp4: Array, hw: dict[str, Array]) -> tuple[Array, Array]:
    """(dense tensor peak, achieved GEMM rate) at the matmul precision; fp16 and bf16 share one rate.

    The peak is 0 where the GPU has no tensor-core support for that precision (e.g. fp8 on A100); the
    caller reports such rows as infeasible.  Masks are float 0/1 arrays.
    """
    is_16 = 1.0 - is_fp8 - is_fp4
    peak = hw["tensor_fp16_flops"] * is_16 + hw["tensor_fp8_flops"] * is_fp8 + hw["tensor_fp4_flops"] * is_fp4
    rate = hw["matmul_fp16_rate"] * is_16 + hw["matmul_fp8_rate"] * is_fp8 + hw["matmul_fp4_rate"] * is_fp4
    return peak, rate


def operand_bytes(is_fp8: Array, is_fp4: Array) -> Array:
    """Bytes per GEMM input element at the matmul precision (16-bit: 2, fp8: 1, fp4: 0.5)."""
    return 2.0 - is_fp8 - 1.5 * is_fp4
