"""Sweep specs: declarative YAML → a checked, resolved :class:`Spec` (sub-grids of axes, constraints).

A spec (``spaces/*.yaml``, read with ``yaml.safe_load`` only) names models, systems, the workload and the
axes to sweep.  ``grids`` is a list of sub-grids, each the Cartesian product of its axes, so conditional
spaces ("cp only when tp ≥ 2") need no special code; ``grid`` is shorthand for one sub-grid.  An axis is a
single value, a list, or a range (``{start, stop, step}`` or ``{start, stop, pow2: true}``, both including
``stop``).  Exactly one of ``gpus`` and ``dp`` is given per sub-grid; the other is derived
(``dp = gpus / (tp·pp·cp)``).

Every problem raises :class:`SpecError` whose message names the file, the key, the bad value and what is
allowed (the CLI turns it into exit status 2 before anything is written).
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from dse.codes import ARRIVAL, ARRIVAL_RULE, DECODE_KV_READS, KV_PRECISION, PRECISION, SPEC_METHOD
from dse.cost.architecture import (
    ARCHITECTURE_CATEGORIES,
    ARCHITECTURE_COLUMNS,
    ARCHITECTURE_MIN,
    architecture_errors,
    code_column,
)
from dse.cost.inference import INFER_METRICS
from dse.cost.select import INT_DOMAIN_MAX
from dse.cost.serving import SERVE_METRICS
from dse.cost.training import TRAIN_METRICS
from dse.defaults import CATEGORICAL
from dse.frame import load_yaml_text
from dse.hardware.catalog import system_names
from dse.models.catalog import models as model_catalog
from dse.stacks import stack_names, stack_task_mismatch, stacks_for_task  # noqa: F401 (re-export)


class SpecError(ValueError):
    """A malformed spec: names the file, the key, the bad value and what is allowed."""


TOP_KEYS = ("name", "description", "task", "grid", "grids", "constraints", "models", "price_per_gpu_hour")
#: Integer axes and their allowed ranges (inclusive).
INT_AXES: dict[str, tuple[int, int | None]] = {
    "gpus": (1, None), "dp": (1, None), "tp": (1, None), "pp": (1, None), "cp": (1, None), "ep": (1, None),
    "vpp": (1, None), "micro_batch": (1, None), "global_batch": (1, None), "seq_len": (1, None),
    "sp": (0, 1), "zero": (0, 3), "dp_overlap": (0, 1), "pp_overlap": (0, 1), "lora_rank": (1, None),
    "layers_first_stage": (0, None), "layers_last_stage": (0, None), "doc_len": (1, None), "etp": (1, None),
}
#: Categorical axes (besides model and system) and their vocabularies.
CAT_AXES: dict[str, tuple[str, ...]] = {**{k: v for k, v in CATEGORICAL.items() if k != "mlp"},
                                        "stack": stack_names()}
GRID_KEYS = ("model", "system", *INT_AXES, "moe_imbalance", *CAT_AXES)
REQUIRED_GRID_KEYS = ("model", "system", "global_batch", "seq_len")
MODEL_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "experts", "top_k",
              "tied_embeddings", *ARCHITECTURE_COLUMNS)
REQUIRED_MODEL_KEYS = ("layers", "hidden", "heads", "vocab")
CONSTRAINT_KEYS = ("divisible", "tp_within_scaleup", "filters")
#: Inference sweeps (``task: infer``): replicas ``dp`` and the request shape instead of the training batch.
INFER_INT_AXES: dict[str, tuple[int, int | None]] = {
    "tp": (1, None), "pp": (1, None), "dp": (1, None), "batch": (1, None), "input_len": (1, None),
    "output_len": (1, None),
}
INFER_CAT_AXES: dict[str, tuple[str, ...]] = {"precision": PRECISION, "kv_precision": KV_PRECISION}
INFER_GRID_KEYS = ("model", "system", *INFER_INT_AXES, "moe_imbalance", *INFER_CAT_AXES)
INFER_REQUIRED_GRID_KEYS = ("model", "system", "batch", "input_len", "output_len")
MODEL_DIMENSIONS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "experts", "top_k")
#: Columns a filter may name: inputs, model dimensions, outputs (training sweeps).
FILTER_INPUT_COLUMNS = (*GRID_KEYS, *MODEL_DIMENSIONS)
FILTER_OUTPUT_COLUMNS = (*TRAIN_METRICS, "fits")


#: Technology axes that derive hypothetical hardware from a catalogued base ``system`` (dse.hardware.derive):
#: categorical ones index technology_nodes/*.csv, numeric ones replace the base's value.
TECH_CAT_AXES = ("node", "memory_tech", "network_tech", "scaleout_tech")
TECH_INT_AXES: dict[str, tuple[int, int | None]] = {
    "memory_devices": (1, 64), "dies": (1, 16), "die_area_mm2": (1, 5000), "power_w": (1, 100000),
}


def tech_vocabulary(name: str) -> tuple[str, ...]:
    """Ids allowed on a technology axis (read from technology_nodes/ on first use)."""
    from dse.hardware import technology as tech

    return {"node": tech.node_names, "memory_tech": tech.memory_names, "network_tech": tech.network_names,
            "scaleout_tech": tech.network_names}[name]()


@dataclass(frozen=True)
class TaskKeys:
    """What a sub-grid of a task may hold and what its filters may name."""

    int_axes: dict[str, tuple[int, int | None]]
    cat_axes: dict[str, tuple[str, ...]]
    grid_keys: tuple[str, ...]
    required: tuple[str, ...]
    filter_inputs: tuple[str, ...]
    filter_outputs: tuple[str, ...]


#: Serving sweeps (``task: serve``): engine limits and the offered load besides the layout and request shape.
SERVE_INT_AXES: dict[str, tuple[int, int | None]] = {**INFER_INT_AXES, "max_num_tokens": (1, None),
                                                     "prefill_gpus": (1, None), "prefill_tp": (1, None),
                                                     "concurrency": (1, None), "ep": (1, None),
                                                     "spec_tokens": (0, None)}
#: Positive real axes (any task that has them).
FLOAT_AXES = ("request_rate", "moe_imbalance", "think_time_s", "spec_acceptance")
#: Smallest value of a real axis (0: any positive number).
FLOAT_AXIS_MIN = {"moe_imbalance": 1.0}
#: Largest value of a real axis (an acceptance rate is a probability: (0, 1]).
FLOAT_AXIS_MAX = {"spec_acceptance": 1.0}
#: Real axes that also take 0 (a think time of 0 is the closed loop without one).
FLOAT_AXIS_ZERO = ("think_time_s",)
SERVE_CAT_AXES: dict[str, tuple[str, ...]] = {**INFER_CAT_AXES, "decode_kv_reads": DECODE_KV_READS,
                                              "stack": stack_names(), "arrival": ARRIVAL, "spec_method": SPEC_METHOD}
SERVE_GRID_KEYS = ("model", "system", *SERVE_INT_AXES, "request_rate", "think_time_s", "spec_acceptance",
                   "moe_imbalance", *SERVE_CAT_AXES)
SERVE_REQUIRED_GRID_KEYS = ("model", "system", "input_len", "output_len")

TASKS: dict[str, TaskKeys] = {
    "train": TaskKeys({**INT_AXES, **TECH_INT_AXES}, CAT_AXES, (*GRID_KEYS, *TECH_CAT_AXES, *TECH_INT_AXES),
                      REQUIRED_GRID_KEYS, FILTER_INPUT_COLUMNS, FILTER_OUTPUT_COLUMNS),
    "infer": TaskKeys({**INFER_INT_AXES, **TECH_INT_AXES}, INFER_CAT_AXES,
                      (*INFER_GRID_KEYS, *TECH_CAT_AXES, *TECH_INT_AXES), INFER_REQUIRED_GRID_KEYS,
                      (*INFER_GRID_KEYS, "gpus", *MODEL_DIMENSIONS), (*INFER_METRICS, "fits")),
    "serve": TaskKeys({**SERVE_INT_AXES, **TECH_INT_AXES}, SERVE_CAT_AXES,
                      (*SERVE_GRID_KEYS, *TECH_CAT_AXES, *TECH_INT_AXES), SERVE_REQUIRED_GRID_KEYS,
                      (*SERVE_GRID_KEYS, "gpus", *MODEL_DIMENSIONS), (*SERVE_METRICS, "fits")),
}


@dataclass(frozen=True)
class Axis:
    """One axis of a sub-grid: numeric values (categorical axes hold codes into ``labels``)."""

    name: str
    values: np.ndarray
    labels: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class SubGrid:
    axes: tuple[Axis, ...]  #: sorted by name, the last varies fastest

    @property
    def size(self) -> int:
        return math.prod(len(a) for a in self.axes)


@dataclass(frozen=True)
class Filter:
    """A safely parsed expression over columns; ``uses_outputs`` says whether it needs the model's outputs."""

    text: str
    names: frozenset[str]
    uses_outputs: bool
    evaluate: Callable[[Mapping[str, np.ndarray]], np.ndarray]


@dataclass(frozen=True)
class Spec:
    name: str
    path: str
    task: str
    grids: tuple[SubGrid, ...]
    grid_keys: tuple[str, ...]  #: the columns a point of this task may carry
    model_names: tuple[str, ...]  #: vocabulary of the ``model`` axis (catalog + custom models)
    model_table: dict[str, np.ndarray]  #: dimensions per model code
    divisible: bool
    tp_within_scaleup: bool
    filters: tuple[Filter, ...]
    resolved: dict[str, Any] = field(default_factory=dict)  #: the spec with every default written out
    #: USD per GPU-hour by system code (NaN: no price given), for cost_per_million_tokens_usd
    prices: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: efficiency constants replaced by a calibration: sorted ``(generation, constant, value)``
    calibration: tuple[tuple[str, str, float], ...] = ()

    @property
    def size(self) -> int:
        return sum(g.size for g in self.grids)

    def with_calibration(self, overrides: Mapping[tuple[str, str], float], source: str) -> Spec:
        """This spec evaluated with the efficiency constants of a ``dse calibrate`` file (recorded in the
        resolved spec, so results and their digest say which constants made them)."""
        key = tuple(sorted((g, c, float(v)) for (g, c), v in overrides.items()))
        resolved = {**self.resolved, "calibration": {"file": source, "constants": [
            {"generation": g, "constant": c, "value": v} for g, c, v in key]}}
        return replace(self, calibration=key, resolved=resolved)

    def digest(self) -> str:
        """Content hash of the resolved spec (what the results depend on)."""
        return hashlib.sha256(json.dumps(self.resolved, sort_keys=True).encode()).hexdigest()[:16]


# ---- values --------------------------------------------------------------------------------------------------
def _err(path: str, key: str, value: object, allowed: str) -> SpecError:
    return SpecError(f"{path}: {key}: value {value!r} is not allowed; allowed: {allowed}")


def _int_values(path: str, key: str, raw: object, lo: int, hi: int | None) -> list[int]:
    """Integer values of an axis; ``hi`` None means the exact-integer domain, at most
    :data:`dse.cost.select.INT_DOMAIN_MAX` (2^24 − 1)."""
    if hi is None:
        hi = INT_DOMAIN_MAX
        allowed = f"integers >= {lo} and <= {hi:,} (2^24 - 1: sizes are computed exactly up to there)"
    else:
        allowed = f"integers in {lo}..{hi}"
    form = (f"{allowed}, as one value, a non-empty list, {{start, stop, step}} or {{start, stop, pow2: true}}")
    if isinstance(raw, Mapping):
        extra = set(raw) - {"start", "stop", "step", "pow2"}
        if extra or "start" not in raw or "stop" not in raw:
            raise _err(path, key, dict(raw), f"a range {{start, stop, step}} or {{start, stop, pow2: true}} "
                                             f"(unknown or missing keys: {sorted(extra) or ['start/stop']})")
        start, stop = raw["start"], raw["stop"]
        for part, v in (("start", start), ("stop", stop)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise _err(path, f"{key}.{part}", v, allowed)
        if start > stop:
            raise _err(path, key, dict(raw), "a range with start <= stop")
        if raw.get("pow2"):
            if "step" in raw:
                raise _err(path, key, dict(raw), "either step or pow2, not both")
            if start < 1:
                raise _err(path, f"{key}.start", start, "a power-of-two range starting at 1 or more")
            values = [2**i for i in range(0, 63) if start <= 2**i <= stop]
            if not values:
                raise _err(path, key, dict(raw), "a power-of-two range that contains a power of two")
        else:
            step = raw.get("step", 1)
            if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
                raise _err(path, f"{key}.step", step, "a positive integer")
            if (stop - start) // step + 1 > 1_000_000:
                raise _err(path, key, dict(raw), "at most 1,000,000 values on one axis")
            values = list(range(start, stop + 1, step))
    elif isinstance(raw, list):
        if not raw:
            raise _err(path, key, raw, "a non-empty list of " + allowed)
        values = raw
    else:
        values = [raw]
    out = []
    for v in values:
        if isinstance(v, bool) and hi == 1:
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool):
            raise _err(path, key, v, form)
        if v < lo or (hi is not None and v > hi):
            raise _err(path, key, v, allowed)
        out.append(v)
    if len(set(out)) != len(out):
        raise _err(path, key, raw, "distinct values (a value appears twice)")
    return out


def _float_values(path: str, key: str, raw: object, lo: float = 0.0, zero: bool = False,
                  hi: float = math.inf) -> list[float]:
    """Finite numbers above ``lo`` (at least ``lo`` when it is not 0; 0 too when ``zero``) and at most ``hi`` of a
    real axis (one value or a non-empty list of distinct values)."""
    values = raw if isinstance(raw, list) else [raw]
    allowed = ("finite numbers >= 0 (seconds), as one value or a non-empty list" if zero else
               f"numbers in (0, {hi:g}], as one value or a non-empty list" if math.isfinite(hi) else
               "positive finite numbers (requests/s), as one value or a non-empty list" if lo == 0.0 else
               f"finite numbers of at least {lo:g}, as one value or a non-empty list")
    hi = min(hi, float(INT_DOMAIN_MAX))  # the float32 kernels' range: larger reals overflow what they multiply
    allowed += f", at most {INT_DOMAIN_MAX:,}"
    if not values:
        raise _err(path, key, raw, allowed)
    out = []
    for v in values:
        if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                or (v < 0 if zero else v <= 0) or v < lo or v > hi):
            raise _err(path, key, v, allowed)
        out.append(float(v))
    if len(set(out)) != len(out):
        raise _err(path, key, raw, "distinct values (a value appears twice)")
    return out


def _name_values(path: str, key: str, raw: object, vocabulary: tuple[str, ...]) -> list[int]:
    values = raw if isinstance(raw, list) else [raw]
    if isinstance(raw, list) and not raw:
        raise _err(path, key, raw, "a non-empty list of: " + ", ".join(vocabulary))
    codes = []
    for v in values:
        name = str(v).strip().lower() if isinstance(v, str) else None
        if name is None or name not in vocabulary:
            raise _err(path, key, v, ", ".join(vocabulary))
        codes.append(vocabulary.index(name))
    if len(set(codes)) != len(codes):
        raise _err(path, key, raw, "distinct values (a value appears twice)")
    return codes


# ---- filters -------------------------------------------------------------------------------------------------
_ALLOWED_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
                  ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.Compare,
                  ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Name, ast.Load, ast.Constant)
FILTER_SYNTAX = ("arithmetic (+ - * / // % **), comparisons (< <= > >= == !=), and / or / not, parentheses, "
                 "numbers, quoted names for categorical columns, and the columns: ")
FILTER_HELP = FILTER_SYNTAX + ", ".join(FILTER_INPUT_COLUMNS + FILTER_OUTPUT_COLUMNS)


def _is_truth_value(node: ast.AST) -> bool:
    """A filter expression that is true or false per point: a comparison, or and / or / not of such."""
    if isinstance(node, ast.Compare):
        return True
    if isinstance(node, ast.BoolOp):
        return all(_is_truth_value(v) for v in node.values)
    return isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and _is_truth_value(node.operand)


class _Elementwise(ast.NodeTransformer):
    """Rewrite Python's scalar logic into numpy's element-wise operators: ``a and b`` → ``a & b``,
    ``a or b`` → ``a | b``, ``not a`` → ``~a``, ``a < b < c`` → ``(a < b) & (b < c)``; numbers become floats
    (no arbitrary-precision integers inside a vectorized filter)."""

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        values = [self.visit(v) for v in node.values]
        op: ast.operator = ast.BitAnd() if isinstance(node.op, ast.And) else ast.BitOr()
        out = values[0]
        for v in values[1:]:
            out = ast.BinOp(left=out, op=op, right=v)
        return out

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        operand = self.visit(node.operand)
        if isinstance(node.op, ast.Not):
            return ast.UnaryOp(op=ast.Invert(), operand=operand)
        return ast.UnaryOp(op=node.op, operand=operand)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        operands = [self.visit(node.left), *[self.visit(c) for c in node.comparators]]
        parts = [ast.Compare(left=operands[i], ops=[op], comparators=[operands[i + 1]])
                 for i, op in enumerate(node.ops)]
        out: ast.expr = parts[0]
        for part in parts[1:]:
            out = ast.BinOp(left=out, op=ast.BitAnd(), right=part)
        return out

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, int) and not isinstance(node.value, bool):
            return ast.Constant(value=float(node.value))
        return node


#: Largest filter number: filters compare float64 columns, so an integer literal is converted to a float.
_FLOAT_MAX = int(np.finfo(np.float64).max)
#: Bounds of one filter expression (longer or deeper ones are refused before they reach the compiler).
MAX_FILTER_CHARS = 2000
MAX_FILTER_DEPTH = 50
#: Largest spec file read (a spec is a few axes; long axes are ranges): checked before parsing.
MAX_SPEC_BYTES = 256 * 1024


def _clip(text: str, limit: int = 120) -> str:
    """An expression for a message: quoted, cut to ``limit`` characters."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text):,} characters)"


def _depth(tree: ast.AST) -> int:
    """Nesting depth of an expression tree, iteratively (no recursion limit to hit)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


def parse_filter(path: str, key: str, text: object, categorical: Mapping[str, tuple[str, ...]],
                 task: str = "train") -> Filter:
    """Parse a filter expression with :mod:`ast` (never ``eval``) into a vectorized function of columns."""
    keys = TASKS[task]
    inputs, outputs = keys.filter_inputs, keys.filter_outputs
    FILTER_HELP = FILTER_SYNTAX + ", ".join(inputs + outputs)  # noqa: N806 - the module constant, per task
    if not isinstance(text, str) or not text.strip():
        raise _err(path, key, text, "a non-empty expression string: " + FILTER_HELP)
    if len(text) > MAX_FILTER_CHARS:
        raise SpecError(f"{path}: {key}: expression of {len(text):,} characters is not allowed; allowed: at most "
                        f"{MAX_FILTER_CHARS:,} characters (split it into several filters: they are and-ed)")
    try:
        tree = ast.parse(text, mode="eval")
        depth = _depth(tree)
    except (RecursionError, MemoryError) as exc:
        raise SpecError(f"{path}: {key}: expression {_clip(text)} nests too deeply; allowed: at most "
                        f"{MAX_FILTER_DEPTH} levels of nesting") from exc
    except SyntaxError as exc:
        raise SpecError(f"{path}: {key}: expression {_clip(text)} is not valid syntax ({exc.msg}); allowed: "
                        f"{FILTER_HELP}") from exc
    if depth > MAX_FILTER_DEPTH:
        raise SpecError(f"{path}: {key}: expression {_clip(text)} nests {depth} levels deep; allowed: at most "
                        f"{MAX_FILTER_DEPTH} levels (split it into several filters: they are and-ed)")
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise SpecError(f"{path}: {key}: expression {_clip(text)} uses {type(node).__name__!r}, which is not "
                            f"allowed; allowed: {FILTER_HELP}")
        if isinstance(node, ast.Name):
            if node.id not in inputs and node.id not in outputs:
                raise SpecError(f"{path}: {key}: expression {_clip(text)} names {node.id!r}, which is not a column; "
                                f"allowed: {FILTER_HELP}")
            names.add(node.id)
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str)) \
                or isinstance(node, ast.Constant) and isinstance(node.value, bool):
            raise SpecError(f"{path}: {key}: expression {_clip(text)} has constant {node.value!r}; "
                            f"allowed: {FILTER_HELP}")
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and abs(node.value) > _FLOAT_MAX:
            digits = str(abs(node.value))
            raise SpecError(f"{path}: {key}: expression {_clip(text, 60)} has a number of {len(digits):,} digits "
                            f"({digits[:12]}...), too large for a float column; allowed: numbers of magnitude at most "
                            f"{_FLOAT_MAX:.4g}")
    if not names:
        raise SpecError(f"{path}: {key}: expression {_clip(text)} names no column; allowed: {FILTER_HELP}")

    def to_code(column: str, value: str) -> float:
        vocab = categorical.get(column)
        if vocab is None:
            raise SpecError(f"{path}: {key}: expression {_clip(text)} compares {column!r} with the text {value!r}; "
                            f"only categorical columns ({', '.join(categorical)}) take quoted names")
        if value.lower() not in vocab:
            raise SpecError(f"{path}: {key}: expression {_clip(text)}: {value!r} is not a value of {column!r}; "
                            f"allowed: {', '.join(vocab)}")
        return float(vocab.index(value.lower()))

    # string constants are only meaningful against a categorical column in a comparison
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            cols = [o.id for o in operands if isinstance(o, ast.Name)]
            for o in operands:
                if isinstance(o, ast.Constant) and isinstance(o.value, str):
                    if len(cols) != 1:
                        raise SpecError(f"{path}: {key}: expression {_clip(text)}: a quoted name must be compared with "
                                        "exactly one categorical column")
                    o.value = to_code(cols[0], o.value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            raise SpecError(f"{path}: {key}: expression {_clip(text)}: the text {node.value!r} is only allowed in a "
                            "comparison with a categorical column")
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exponent = node.right
            if not (isinstance(exponent, ast.Constant) and isinstance(exponent.value, (int, float))
                    and abs(exponent.value) <= 64):
                raise SpecError(f"{path}: {key}: expression {_clip(text)}: an exponent must be a number between -64 "
                                f"and 64; allowed: {FILTER_HELP}")
    for node in ast.walk(tree):  # and / or / not combine truth values: comparisons, or and / or / not of them
        operands = (node.values if isinstance(node, ast.BoolOp)
                    else [node.operand] if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) else [])
        for operand in operands:
            if not _is_truth_value(operand):
                raise SpecError(f"{path}: {key}: expression {_clip(text)}: 'and', 'or' and 'not' combine comparisons, "
                                f"not {_clip(ast.unparse(operand), 40)}; allowed: comparisons joined by and / or / not "
                                f"(e.g. tp <= 4 and not pp == 1); {FILTER_HELP}")
    tree = ast.fix_missing_locations(_Elementwise().visit(tree))
    code = compile(tree, filename=f"<filter {text}>", mode="eval")

    def evaluate(columns: Mapping[str, np.ndarray]) -> np.ndarray:
        env = {n: columns[n] for n in names}
        with np.errstate(all="ignore"):
            result = eval(code, {"__builtins__": {}}, env)  # noqa: S307 - checked and rewritten AST
        return np.broadcast_to(np.asarray(result, dtype=bool), np.shape(next(iter(env.values()))))

    return Filter(text, frozenset(names), bool(names & set(outputs)), evaluate)


# ---- the spec --------------------------------------------------------------------------------------------------
def _custom_models(path: str, raw: object) -> dict[str, dict[str, object]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _err(path, "models", raw, "a mapping of model name to its dimensions")
    out = {}
    catalog = model_catalog()
    for name, dims in raw.items():
        key = f"models.{name}"
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
            raise _err(path, "models", name, "a lowercase name of letters, digits, '.', '_' or '-'")
        if name in catalog.index:
            raise _err(path, key, name, "a name that is not already in the catalog (see `dse models`)")
        if not isinstance(dims, Mapping):
            raise _err(path, key, dims, "a mapping with keys " + ", ".join(MODEL_KEYS))
        if "hf_config" in dims:  # a Hugging Face config.json (dse.models.hf); keys beside it override its values
            dims = {**_hf_dims(path, f"{key}.hf_config", dims["hf_config"]),
                    **{k: v for k, v in dims.items() if k != "hf_config"}}
        unknown = set(dims) - set(MODEL_KEYS)
        if unknown:
            raise SpecError(f"{path}: {key}: key {sorted(unknown)[0]!r} is not allowed; allowed keys: "
                            f"{', '.join(MODEL_KEYS)}")
        for req in REQUIRED_MODEL_KEYS:
            if req not in dims:
                raise SpecError(f"{path}: {key}: missing key {req!r}; required: {', '.join(REQUIRED_MODEL_KEYS)}")
        model: dict[str, object] = {}
        for k in MODEL_KEYS:
            if k not in dims:
                continue
            if k == "mlp":
                if dims[k] not in CATEGORICAL["mlp"]:
                    raise _err(path, f"{key}.mlp", dims[k], ", ".join(CATEGORICAL["mlp"]))
                model[k] = dims[k]
            elif k in ARCHITECTURE_CATEGORIES:
                if dims[k] not in ARCHITECTURE_CATEGORIES[k]:
                    raise _err(path, f"{key}.{k}", dims[k], ", ".join(ARCHITECTURE_CATEGORIES[k]))
                model[k] = dims[k]
            else:
                lo = 0 if k == "tied_embeddings" else ARCHITECTURE_MIN.get(k, 1)
                (model[k],) = _int_values(path, f"{key}.{k}", dims[k], lo, 1 if k == "tied_embeddings" else None)
        _check_architecture(path, key, model)
        heads = int(model["heads"])  # type: ignore[call-overload]
        hidden = int(model["hidden"])  # type: ignore[call-overload]
        if hidden % heads and "head_dim" not in model and model.get("attention_kind") != "mla":
            raise _err(path, f"{key}.hidden", model["hidden"], f"a multiple of heads ({heads}), or give head_dim")
        kv = int(model.get("kv_heads", heads))  # type: ignore[call-overload]
        if heads % kv:
            raise _err(path, f"{key}.kv_heads", kv, f"a divisor of heads ({heads})")
        if int(model.get("top_k", 1)) > int(model.get("experts", 1)):  # type: ignore[call-overload]
            raise _err(path, f"{key}.top_k", model.get("top_k"), "at most experts")
        out[name] = model
    return out


def _hf_dims(path: str, key: str, raw: object) -> dict[str, object]:
    """The model keys of a Hugging Face config named in a spec (relative to the spec's directory)."""
    from dse.models.hf import ConfigError, hf_to_model, read_config

    if not isinstance(raw, str) or not raw.strip():
        raise _err(path, key, raw, "the path of a Hugging Face config.json")
    file = Path(raw) if Path(raw).is_absolute() else Path(path).parent / raw
    try:
        model = hf_to_model(read_config(file), str(file))
    except ConfigError as exc:
        raise SpecError(f"{path}: {key}: {exc}") from exc
    return {k: v for k, v in model.items() if k in MODEL_KEYS}


def _check_architecture(path: str, key: str, model: Mapping[str, object]) -> None:
    """The combinations of a custom model's architecture keys (dse.cost.architecture.architecture_errors)."""
    cols = {k: np.asarray([np.nan if k not in model else float(ARCHITECTURE_CATEGORIES[k].index(str(model[k])))
                           if k in ARCHITECTURE_CATEGORIES else float(model[k])])  # type: ignore[arg-type]
            for k in ("layers", "heads", "kv_heads", "experts", *ARCHITECTURE_COLUMNS)}
    for bad, col, allowed in architecture_errors(cols):
        if bad[0]:
            raise _err(path, f"{key}.{col}", model.get(col), allowed)


def _model_table(custom: Mapping[str, Mapping[str, object]]) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
    cat = model_catalog()
    names = tuple(cat.index) + tuple(custom)
    table: dict[str, list[float]] = {k: [] for k in MODEL_KEYS}
    for name in cat.index:
        row = cat.loc[name]
        for k in MODEL_KEYS:
            value = row[code_column(k)]
            table[k].append(0.0 if pd.isna(value) else float(value))
    for dims in custom.values():
        heads = float(dims["heads"])  # type: ignore[arg-type]
        hidden = float(dims["hidden"])  # type: ignore[arg-type]
        defaults = {"kv_heads": heads, "ffn_hidden": 4.0 * hidden, "experts": 1.0, "top_k": 1.0,
                    "tied_embeddings": 0.0}
        for k in MODEL_KEYS:
            if k == "mlp":
                table[k].append(float(CATEGORICAL["mlp"].index(str(dims.get("mlp", "gelu")))))
            elif k in ARCHITECTURE_CATEGORIES:
                vocab = ARCHITECTURE_CATEGORIES[k]
                table[k].append(float(vocab.index(str(dims.get(k, vocab[0])))))
            else:
                table[k].append(float(dims.get(k, defaults.get(k, 0.0))))  # type: ignore[arg-type]
    return names, {k: np.asarray(v, dtype=np.float64) for k, v in table.items()}


def _subgrid(path: str, key: str, raw: object, model_names: tuple[str, ...],
             task: str = "train") -> tuple[SubGrid, dict[str, Any]]:
    keys = TASKS[task]
    if not isinstance(raw, Mapping):
        raise _err(path, key, raw, "a mapping of axis name to values; axes: " + ", ".join(keys.grid_keys))
    unknown = [k for k in raw if k not in keys.grid_keys]
    if unknown:
        raise SpecError(f"{path}: {key}: key {unknown[0]!r} is not allowed (task {task!r}); allowed keys: "
                        f"{', '.join(keys.grid_keys)}")
    for req in keys.required:
        if req not in raw:
            raise SpecError(f"{path}: {key}: missing key {req!r}; required: {', '.join(keys.required)}"
                            + (", and one of gpus or dp" if task == "train" else ""))
    if task == "train" and ("gpus" in raw) == ("dp" in raw):
        raise SpecError(f"{path}: {key}: give exactly one of 'gpus' and 'dp' (the other is derived: "
                        f"dp = gpus / (tp*pp*cp)); got {'both' if 'gpus' in raw else 'neither'}")
    axes = []
    resolved: dict[str, Any] = {}
    for name in sorted(raw):
        akey = f"{key}.{name}"
        value = raw[name]
        if name == "model":
            codes = _name_values(path, akey, value, model_names)
            axes.append(Axis(name, np.asarray(codes, dtype=np.float64), model_names))
            resolved[name] = [model_names[c] for c in codes]
        elif name == "system":
            names = system_names()
            codes = _name_values(path, akey, value, names)
            axes.append(Axis(name, np.asarray(codes, dtype=np.float64), names))
            resolved[name] = [names[c] for c in codes]
        elif name in TECH_CAT_AXES:
            vocab = tech_vocabulary(name)
            codes = _name_values(path, akey, value, vocab)
            axes.append(Axis(name, np.asarray(codes, dtype=np.float64), vocab))
            resolved[name] = [vocab[c] for c in codes]
        elif name in FLOAT_AXES:
            reals = _float_values(path, akey, value, FLOAT_AXIS_MIN.get(name, 0.0), name in FLOAT_AXIS_ZERO,
                                  FLOAT_AXIS_MAX.get(name, math.inf))
            axes.append(Axis(name, np.asarray(reals, dtype=np.float64)))
            resolved[name] = reals
        elif name in keys.cat_axes:
            vocab = keys.cat_axes[name]
            codes = _name_values(path, akey, value, vocab)
            axes.append(Axis(name, np.asarray(codes, dtype=np.float64), vocab))
            resolved[name] = [vocab[c] for c in codes]
        else:
            lo, hi = keys.int_axes[name]
            ints = _int_values(path, akey, value, lo, hi)
            axes.append(Axis(name, np.asarray(ints, dtype=np.float64)))
            resolved[name] = ints
    if task == "serve" and "prefill_tp" in raw and "prefill_gpus" not in raw:
        raise SpecError(f"{path}: {key}.prefill_tp: given without {key}.prefill_gpus, so no point has a prefill pool "
                        f"for it to split; allowed: prefill_gpus with it (disaggregated prefill), or neither")
    if task == "serve":
        _check_arrival(path, key, raw, resolved)
        if "eagle" in resolved.get("spec_method", []) and "spec_acceptance" not in raw \
                and any(v > 0 for v in resolved.get("spec_tokens", [])):
            raise SpecError(f"{path}: {key}.spec_method: value 'eagle' is not allowed without "
                            f"{key}.spec_acceptance; allowed: eagle with the head's measured acceptance rate "
                            "(spec_acceptance in (0, 1]; it depends on the head and the traffic, so dse has no "
                            "default), or mtp")
    for stack in resolved.get("stack", []):
        why = stack_task_mismatch(stack, task)
        if why:
            raise SpecError(f"{path}: {key}.stack: value {stack!r} is not allowed on a {task!r} spec ({why}); "
                            f"allowed: {', '.join(stacks_for_task(task))}")
    return SubGrid(tuple(axes)), resolved


def _check_arrival(path: str, key: str, raw: Mapping[str, object], resolved: Mapping[str, Any]) -> None:
    """A serve sub-grid's ``arrival`` values agree with its load axes (poisson: request_rate; closed, burst:
    concurrency), and a ``think_time_s`` above 0 comes with a closed loop (concurrency, arrival not only burst)."""
    allowed = ARRIVAL_RULE
    if "request_rate" in raw and "concurrency" in raw:  # every point would carry both (rows refuse that too)
        raise SpecError(f"{path}: {key}: request_rate and concurrency are both given; allowed: one of them per "
                        "sub-grid (request_rate: an open stream of requests/s; concurrency: the clients of a closed "
                        "loop), or neither for maximum load; sweep both with two sub-grids (grids:)")
    for value in resolved.get("arrival", []):
        needs = "request_rate" if value == "poisson" else "concurrency"
        if needs not in raw:
            raise SpecError(f"{path}: {key}.arrival: value {value!r} is not allowed without {key}.{needs}; "
                            f"allowed: {allowed}")
    if any(v > 0 for v in resolved.get("think_time_s", [])):
        if "concurrency" not in raw or resolved.get("arrival", ["closed"]) in (["burst"], ["poisson"]):
            raise SpecError(f"{path}: {key}.think_time_s: value {raw['think_time_s']!r} is not allowed here: a think "
                            "time needs a closed loop; allowed: think_time_s with concurrency (arrival absent or "
                            "closed), or 0")


def load_spec(path: str | Path) -> Spec:
    """Read, check and resolve a spec file; raise :class:`SpecError` on any problem."""
    p = Path(path)
    label = str(path)
    try:
        size = p.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError(f"{label}: the spec file has {size:,} bytes; allowed: at most {MAX_SPEC_BYTES:,} (write "
                            "long axes as ranges {start, stop, step} or {start, stop, pow2: true})")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise SpecError(f"{label}: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{label}: cannot read the spec: {exc}") from exc
    try:
        data = load_yaml_text(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{label}: not valid YAML: {' '.join(str(exc).split())}; allowed: a YAML mapping with keys "
                        f"{', '.join(TOP_KEYS)}") from exc
    return resolve_spec(data, label, default_name=p.stem)


def resolve_spec(data: object, label: str = "<spec>", default_name: str = "sweep") -> Spec:
    """Check and resolve an already parsed spec (a mapping)."""
    if data is None:
        raise SpecError(f"{label}: empty spec; expected a mapping with keys {', '.join(TOP_KEYS)}")
    if not isinstance(data, Mapping):
        raise SpecError(f"{label}: the spec must be a mapping with keys {', '.join(TOP_KEYS)}; got "
                        f"{type(data).__name__}")
    unknown = [k for k in data if k not in TOP_KEYS]
    if unknown:
        raise SpecError(f"{label}: key {unknown[0]!r} is not allowed; allowed keys: {', '.join(TOP_KEYS)}")
    name = data.get("name", default_name)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise _err(label, "name", name, "a name of letters, digits, '.', '_' or '-' (it names results/<name>)")
    task = data.get("task", "train")
    if not isinstance(task, str) or task not in TASKS:
        raise _err(label, "task", task, ", ".join(TASKS))
    description = data.get("description", "")
    if not isinstance(description, str):
        raise _err(label, "description", description, "text")
    custom = _custom_models(label, data.get("models"))
    model_names, model_table = _model_table(custom)

    if ("grid" in data) == ("grids" in data):
        raise SpecError(f"{label}: give exactly one of 'grid' (one product) and 'grids' (a list of products); got "
                        f"{'both' if 'grid' in data else 'neither'}")
    raw_grids = [data["grid"]] if "grid" in data else data["grids"]
    if not isinstance(raw_grids, list) or not raw_grids:
        raise _err(label, "grids", raw_grids, "a non-empty list of mappings (one product of axes each)")
    grids, resolved_grids = [], []
    for i, raw in enumerate(raw_grids):
        key = "grid" if "grid" in data else f"grids[{i}]"
        grid, resolved = _subgrid(label, key, raw, model_names, task)
        grids.append(grid)
        resolved_grids.append(resolved)

    constraints = data.get("constraints")
    if constraints is None:
        constraints = {}
    if not isinstance(constraints, Mapping):
        raise _err(label, "constraints", constraints, "a mapping with keys " + ", ".join(CONSTRAINT_KEYS))
    unknown = [k for k in constraints if k not in CONSTRAINT_KEYS]
    if unknown:
        raise SpecError(f"{label}: constraints: key {unknown[0]!r} is not allowed; allowed keys: "
                        f"{', '.join(CONSTRAINT_KEYS)}")
    flags = {}
    for k in ("divisible", "tp_within_scaleup"):
        v = constraints.get(k, True)
        if not isinstance(v, bool):
            raise _err(label, f"constraints.{k}", v, "true or false")
        flags[k] = v
    raw_filters = constraints.get("filters", [])
    if isinstance(raw_filters, str):
        raw_filters = [raw_filters]
    if not isinstance(raw_filters, list):
        raise _err(label, "constraints.filters", raw_filters, "a list of expression strings")
    categorical = {"model": model_names, "system": system_names(), **TASKS[task].cat_axes}
    filters = tuple(parse_filter(label, f"constraints.filters[{i}]", f, categorical, task)
                    for i, f in enumerate(raw_filters))

    prices = np.full(len(system_names()), np.nan)
    raw_prices = data.get("price_per_gpu_hour")
    resolved_prices: dict[str, float] = {}
    if raw_prices is not None:
        if isinstance(raw_prices, (int, float)) and not isinstance(raw_prices, bool):
            raw_prices = {n: raw_prices for n in system_names()}
        if not isinstance(raw_prices, Mapping):
            raise _err(label, "price_per_gpu_hour", raw_prices, "a positive number (USD per GPU-hour for every "
                       "system) or a mapping of system name to one")
        for sysname, price in raw_prices.items():
            key = f"price_per_gpu_hour.{sysname}"
            if sysname not in system_names():
                raise _err(label, key, sysname, ", ".join(system_names()))
            if not isinstance(price, (int, float)) or isinstance(price, bool) or not price > 0:
                raise _err(label, key, price, "a positive number (USD per GPU-hour)")
            prices[system_names().index(sysname)] = float(price)
            resolved_prices[sysname] = float(price)
    resolved_spec = {
        "name": name, "description": description, "task": task, "price_per_gpu_hour": resolved_prices,
        "models": {k: dict(v) for k, v in custom.items()},
        "grids": resolved_grids,
        "constraints": {**flags, "filters": [f.text for f in filters]},
    }
    return Spec(name=name, path=label, task=task, grids=tuple(grids), grid_keys=TASKS[task].grid_keys,
                model_names=model_names,
                model_table=model_table, divisible=flags["divisible"], tp_within_scaleup=flags["tp_within_scaleup"],
                filters=filters, resolved=resolved_spec, prices=prices)
