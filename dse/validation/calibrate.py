"""``dse calibrate``: fit the model's efficiency constants to a user's own measured cases.

Least squares on log error (Σ over file × metric groups of the mean squared ln(predicted / measured)),
Nelder–Mead from the shipped values, with leave-one-out error so that over-fitting shows: each case is
predicted by constants fitted without it.  The result is a small YAML file that ``dse run``, ``dse explain``
and ``dse validate`` accept with ``--calibration``; the shipped catalog is never modified.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from dse import __version__, codes
from dse.cost.inference import infer_step
from dse.cost.serving import serve_step
from dse.cost.training import train_step
from dse.frame import InputError, infer_inputs, read_yaml, serve_inputs, train_inputs
from dse.hardware import catalog as hwcat
from dse.stacks import apply_stack
from dse.validation.fit import nelder_mead
from dse.validation.validate import METRICS, Assumption, apply_assumptions, read_cases, usable_rows

Overrides = dict[tuple[str, str], float]
#: Each task's decoder of case rows into kernel inputs, and its kernel (one code path with dse validate).
TASK_INPUTS = {"train": train_inputs, "infer": infer_inputs, "serve": serve_inputs}
TASK_STEPS = {"train": train_step, "infer": infer_step, "serve": serve_step}


@dataclass
class _Block:
    """Rows of one file and task, decoded once into kernel inputs."""

    task: str
    x: dict[str, np.ndarray]
    systems: np.ndarray
    columns: np.ndarray  #: the output compared with each row's measurement (strings)
    measured: np.ndarray
    group: np.ndarray  #: (file, metric) label per row


@dataclass
class CaseSet:
    """Measured cases of one or more files, read and checked once, evaluated many times (only the hardware
    columns change between evaluations, so the kernel inputs are decoded once)."""

    frames: list[tuple[str, pd.DataFrame]]
    blocks: list[_Block]

    @classmethod
    def load(cls, files: Sequence[str | Path], assumptions: Sequence[Assumption] = ()) -> CaseSet:
        frames, blocks = [], []
        labels: dict[tuple[str, str], int] = {}
        for f in files:
            frame, _ = apply_assumptions(read_cases(f), assumptions)
            frame, _ = apply_stack(frame)
            frame = frame.loc[usable_rows(frame)]
            frames.append((str(f), frame))
            for task, inputs in TASK_INPUTS.items():
                part = frame.loc[frame["task"] == task]
                if part.empty:
                    continue
                x, systems = inputs(part, str(f))
                group = np.array([labels.setdefault((str(f), m), len(labels)) for m in part["metric"]])
                blocks.append(_Block(task, x, systems, part["metric"].map(METRICS).to_numpy(str),
                                     part["measured"].to_numpy(np.float64), group))
        return cls(frames, blocks)

    def cases(self) -> list[tuple[str, str, str]]:
        """(file, case id, metric) of every usable case, in the order of :meth:`log_errors`."""
        out: list[tuple[str, str, str]] = []
        for f, fr in self.frames:
            for task in TASK_INPUTS:
                part = fr.loc[fr["task"] == task]
                out.extend((f, str(c), str(m)) for c, m in zip(part["case"], part["metric"], strict=True))
        return out

    def log_errors(self, overrides: Overrides | None = None) -> tuple[np.ndarray, np.ndarray]:
        """ln(predicted / measured) per usable case (NaN where the model gives no value) and its group label
        (file, metric) as an integer."""
        errs, groups = [], []
        for b in self.blocks:
            hw = hwcat.hardware_columns(b.systems, overrides)
            out = TASK_STEPS[b.task](b.x, hw)
            pred = np.full(len(b.measured), np.nan)
            for c in set(b.columns):  # the handful of metrics, each gathered as one array
                rows = b.columns == c
                pred[rows] = out[c][rows]
            with np.errstate(invalid="ignore", divide="ignore"):
                errs.append(np.log(pred / b.measured))
            groups.append(b.group)
        return (np.concatenate(errs) if errs else np.zeros(0),
                np.concatenate(groups) if groups else np.zeros(0, int))


def default_parameters(cases: CaseSet) -> list[tuple[str, str]]:
    """The constants the cases constrain: per GPU generation present, the GEMM efficiency at each precision
    used and the memory efficiency (training), the serving GEMM efficiency and per-layer overhead (inference and
    serving)."""
    sysf = hwcat.systems()
    params: dict[tuple[str, str], None] = {}
    for _, frame in cases.frames:
        for system, task, precision in zip(frame["system"], frame["task"], frame["precision"].fillna("bf16"),
                                           strict=True):
            gen = str(sysf.loc[str(system).strip().lower(), "generation"])
            prec = str(precision).strip().lower()
            fmt = "fp8" if prec == "fp8" else "fp4" if prec == "fp4" else "fp16"
            if task == "train":
                params[(gen, f"matmul_eff_{fmt}")] = None
                params[(gen, "memory_eff")] = None
            else:
                params[(gen, f"infer_matmul_eff_{fmt}")] = None
                params[(gen, "layer_overhead_us")] = None
    return list(params)


def _objective(cases: CaseSet, params: Sequence[tuple[str, str]], exclude: int | None = None):  # noqa: ANN202
    upper = np.array([hwcat.constant_upper_bound(c) for _, c in params])

    def f(values: np.ndarray) -> float:
        if np.any(values <= 0) or np.any(values > upper):
            return 1e9
        errs, groups = cases.log_errors({p: float(v) for p, v in zip(params, values, strict=True)})
        keep = np.isfinite(errs)
        if exclude is not None:
            keep[exclude] = False
        total = 0.0
        for g in np.unique(groups[keep]):
            total += float(np.mean(np.square(errs[keep & (groups == g)])))
        return total

    return f


def parse_params(text: str) -> list[tuple[str, str]]:
    """``gen:constant,gen:constant`` → pairs, checked against the efficiency table."""
    eff = hwcat.efficiency()
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        gen, _, const = item.partition(":")
        if gen not in eff.index or const not in hwcat.EFFICIENCY_COLUMNS:
            raise InputError(f"--params: value {item!r} is not allowed; allowed: generation:constant with "
                             f"generation one of {', '.join(eff.index)} and constant one of "
                             f"{', '.join(hwcat.EFFICIENCY_COLUMNS)}")
        out.append((gen, const))
    if not out:
        raise InputError("--params: value '' is not allowed; allowed: one or more generation:constant")
    return out


def shipped_values(params: Sequence[tuple[str, str]]) -> np.ndarray:
    eff = hwcat.efficiency()
    values = []
    for gen, col in params:
        if gen not in eff.index or col not in hwcat.EFFICIENCY_COLUMNS:
            raise InputError(f"--params: {gen}:{col} is not an efficiency constant; generations: "
                             f"{', '.join(eff.index)}; constants: {', '.join(hwcat.EFFICIENCY_COLUMNS)}")
        v = float(eff[col].to_numpy()[eff.index.get_loc(gen)])
        values.append(v if np.isfinite(v) and v > 0 else 0.5)
    return np.asarray(values, dtype=np.float64)


def mape(cases: CaseSet, overrides: Overrides | None) -> float:
    errs, _ = cases.log_errors(overrides)
    ok = np.isfinite(errs)
    return float(np.mean(np.abs(np.exp(errs[ok]) - 1.0)) * 100.0) if ok.any() else float("nan")


def uncertainty(cases: CaseSet, params: Sequence[tuple[str, str]], fitted: Overrides
                ) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], int]]:
    """How well the cases pin each constant down: its relative standard error (%), and the number of cases
    whose prediction depends on it.

    J_ij = ∂ ln prediction_i / ∂ ln θ_j (central differences at ±5 %), r the log errors at the fit.  Two
    estimates, the larger reported:

    * Gauss–Newton with independent cases: Cov = σ² (JᵀJ)⁻¹, σ² = Σ r² / (n − k);
    * cluster-robust (sandwich) for the objective actually minimised, Σ_g mean_g r² (weights w = 1/n_g), with
      each (file, metric) group as a cluster: Cov = G/(G−1) · A⁻¹ B A⁻¹, A = JᵀWJ, B = Σ_g s_g s_gᵀ,
      s_g = J_gᵀ W_g r_g.  Cases of one file share their software and hardware, so their errors are not
      independent; counting them as independent understates the error (issue 11: Hopper memory_eff moved
      0.956 → 0.817 with the MAPE unchanged while the first estimate said ± 8.5 %).

    Correlated constants (two that the cases can only trade against each other) get large errors; a constant no
    case depends on gets infinity."""
    base, groups = cases.log_errors(fitted)
    ok = np.isfinite(base)
    cols, hits = [], {}
    for p in params:
        up, _ = cases.log_errors({**fitted, p: fitted[p] * 1.05})
        down, _ = cases.log_errors({**fitted, p: fitted[p] / 1.05})
        d = (up - down) / (2.0 * np.log(1.05))
        ok &= np.isfinite(d)
        cols.append(d)
        hits[p] = int(np.sum(np.abs(d) > 1e-3))
    jac = np.column_stack(cols)[ok]
    r, g = base[ok], groups[ok]
    n, k = jac.shape
    sigma2 = float(np.sum(r**2)) / max(n - k, 1)
    cov_plain = sigma2 * np.linalg.pinv(jac.T @ jac)
    labels, inverse, sizes = np.unique(g, return_inverse=True, return_counts=True)
    w = 1.0 / sizes[inverse]
    a_inv = np.linalg.pinv(jac.T @ (w[:, None] * jac))
    scores = np.zeros((len(labels), k))
    np.add.at(scores, inverse, jac * (w * r)[:, None])
    n_groups = len(labels)
    cov_cluster = a_inv @ (scores.T @ scores) @ a_inv * (n_groups / max(n_groups - 1, 1))
    out = {}
    for i, p in enumerate(params):
        used = bool(np.any(np.abs(jac[:, i]) > 1e-3))
        var = max(cov_plain[i, i], cov_cluster[i, i], 0.0)
        out[p] = float(np.sqrt(var) * 100.0) if used else float("inf")
    return out, hits


def calibrate(cases: CaseSet, params: Sequence[tuple[str, str]], leave_one_out: bool = True,
              max_iter: int = 300) -> dict[str, object]:
    """Fit ``params``; report the constants, the MAPE before and after, and the leave-one-out MAPE."""
    x0 = shipped_values(params)
    best = nelder_mead(_objective(cases, params), x0, max_iter=max_iter)
    fitted = {p: float(v) for p, v in zip(params, best, strict=True)}
    result: dict[str, object] = {
        "constants": fitted, "shipped": {p: float(v) for p, v in zip(params, x0, strict=True)},
        "mape_before_pct": mape(cases, None), "mape_after_pct": mape(cases, fitted),
        "cases": len(cases.cases()),
    }
    result["uncertainty_pct"], result["cases_affected"] = uncertainty(cases, params, fitted)
    if leave_one_out:
        errors = []
        errs_all, _ = cases.log_errors(fitted)
        for i in np.flatnonzero(np.isfinite(errs_all)):
            xi = nelder_mead(_objective(cases, params, exclude=int(i)), best, step=0.05, max_iter=max_iter)
            errs, _ = cases.log_errors({p: float(v) for p, v in zip(params, xi, strict=True)})
            errors.append(abs(np.exp(errs[i]) - 1.0) * 100.0)
        result["mape_leave_one_out_pct"] = float(np.mean(errors)) if errors else float("nan")
    return result


def write_calibration(path: str | Path, result: dict[str, object], files: Sequence[str]) -> None:
    constants = result["constants"]
    unc = result.get("uncertainty_pct", {})
    assert isinstance(constants, dict) and isinstance(unc, dict)
    doc = {
        "dse_calibration": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "dse_version": __version__,
        "fitted_on": [str(f) for f in files],
        "constants": [{"generation": g, "constant": c, "value": round(v, 6),
                       **({"uncertainty_pct": round(float(unc[(g, c)]), 2)} if (g, c) in unc else {})}
                      for (g, c), v in constants.items()],
        "mape_before_pct": round(float(result["mape_before_pct"]), 3),  # type: ignore[arg-type]
        "mape_after_pct": round(float(result["mape_after_pct"]), 3),  # type: ignore[arg-type]
    }
    if "mape_leave_one_out_pct" in result:
        doc["mape_leave_one_out_pct"] = round(float(result["mape_leave_one_out_pct"]), 3)  # type: ignore[arg-type]
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    os.replace(tmp, out)


def load_calibration(path: str | Path) -> Overrides:
    """Overrides from a calibration file; errors name the file, the entry and what is allowed."""
    p = Path(path)
    doc = read_yaml(p, "a calibration written by `dse calibrate`")
    if not isinstance(doc, dict) or not isinstance(doc.get("constants"), list):
        raise InputError(f"{p}: expected a mapping with a 'constants' list, as written by `dse calibrate`")
    eff = hwcat.efficiency()
    out: Overrides = {}
    for i, entry in enumerate(doc["constants"]):
        ok = isinstance(entry, dict) and {"generation", "constant", "value"} <= set(entry)
        if not ok or entry["generation"] not in eff.index or entry["constant"] not in hwcat.EFFICIENCY_COLUMNS \
                or not isinstance(entry["value"], (int, float)) or not entry["value"] > 0:
            raise InputError(f"{p}: constants[{i}]: {entry!r} is not allowed; allowed: {{generation: one of "
                             f"{', '.join(eff.index)}, constant: one of {', '.join(hwcat.EFFICIENCY_COLUMNS)}, "
                             "value: a positive number}")
        bound = hwcat.constant_upper_bound(str(entry["constant"]))
        if isinstance(entry["value"], bool) or not entry["value"] <= bound:
            raise InputError(f"{p}: constants[{i}]: {entry['generation']}:{entry['constant']} value {entry['value']!r} "
                             f"is not allowed; allowed: a positive number at most {bound:g} (the bound `dse calibrate` "
                             "fits within)")
        out[(str(entry["generation"]), str(entry["constant"]))] = float(entry["value"])
    return out


__all__ = ["CaseSet", "calibrate", "codes", "default_parameters", "load_calibration", "write_calibration"]
