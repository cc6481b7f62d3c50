"""The edge between tables and kernels: check a configuration table, fill documented defaults, encode
categorical columns, gather hardware columns, and add the model's outputs.

Tables use the columns of README.md, section 'Case files' (read by name, never by position) plus a few
optional knobs of this model (:data:`OPTIONAL_KNOBS`).  Empty cells take the defaults in
:data:`DEFAULTS_DOC`.  Every check names the row, the column, the bad value and what is allowed.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Container, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from dse import cells, codes
from dse.cost.architecture import (
    ARCHITECTURE_CATEGORIES,
    ARCHITECTURE_COLUMNS,
    ARCHITECTURE_INTEGERS,
    ARCHITECTURE_MIN,
    architecture_errors,
)
from dse.cost.inference import INFER_METRICS, decode_hbm_bound, infer_step, routing_skew
from dse.cost.select import INT_DOMAIN_MAX
from dse.cost.training import DETAIL_METRICS, MODULE_METRICS, TRAIN_METRICS, train_step
from dse.defaults import (  # noqa: F401 (re-export)
    CATEGORICAL,
    CATEGORICAL_DEFAULTS,
    DEFAULTS_DOC,
    fill_defaults,
    nan_to,
)
from dse.hardware import catalog as hwcat
from dse.models.catalog import models as model_catalog
from dse.stacks import apply_stack, fill_serving_settings, stack_names, stack_task_mismatch, stacks_for_task

DIMENSION_COLUMNS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "experts", "top_k")
PARALLEL_COLUMNS = ("gpus", "tp", "pp", "dp", "cp", "ep", "vpp")
TRAIN_COLUMNS = ("sp", "micro_batch", "global_batch", "seq_len", "recompute", "zero", "precision")
#: Knobs of this model that the reference schema does not have; a table may add them as columns.
OPTIONAL_KNOBS = ("attention", "tp_overlap", "dp_overlap", "pp_overlap", "tied_embeddings", "lora_targets", "offload",
                  "moe_imbalance", "decode_kv_reads", "prefill_gpus", "prefill_tp",
                  "zero3_fetch", "pipeline_split", "layers_first_stage", "layers_last_stage", "doc_len",
                  "kernels", "optimizer", "memory_report", "adapter_precision", "dp_reduce",
                  "zero3_collectives", "zero_with_pp", "cp_exchange", "moe_gemm", "ep_dispatch",
                  "ep_overlap", "cross_entropy")

#: Integer columns: (minimum allowed value).
INTEGER_MIN: dict[str, int] = {
    "layers": 1, "hidden": 1, "heads": 1, "kv_heads": 1, "ffn_hidden": 1, "vocab": 1, "experts": 1,
    "top_k": 1, "gpus": 1, "tp": 1, "pp": 1, "dp": 1, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": 1,
    "global_batch": 1, "seq_len": 1, "sp": 0, "zero": 0, "dp_overlap": 0, "pp_overlap": 0,
    "tied_embeddings": 0, "batch": 1, "input_len": 1, "output_len": 0, "lora_rank": 1, "max_num_tokens": 1,
    "layers_first_stage": 0, "layers_last_stage": 0, "prefill_gpus": 1, "prefill_tp": 1, "doc_len": 1,
    "concurrency": 1, "spec_tokens": 0, **ARCHITECTURE_MIN,
}
INTEGER_MAX: dict[str, int] = {"sp": 1, "zero": 3, "dp_overlap": 1, "pp_overlap": 1, "tied_embeddings": 1}
#: Every other integer column: at most INT_DOMAIN_MAX (2^24 − 1, the float32 kernels' exact range; see
#: :data:`dse.cost.select.INT_DOMAIN_MAX`).

class InputError(ValueError):
    """Bad input table: the message names the source, the row, the column, the value and what is allowed."""


class MissingColumn(InputError):
    """A required column the table lacks: ``columns`` (one of them required when several), ``task`` (or "")."""

    def __init__(self, source: str, columns: tuple[str, ...], task: str = "") -> None:
        self.columns, self.task = columns, task
        what = (f"column {columns[0]!r}" if len(columns) == 1
                else "column " + " or ".join(repr(c) for c in columns))
        need = ("required" + (f" for task {task!r}" if task else "") if len(columns) == 1
                else "one of them is required")
        super().__init__(f"{source}: missing {what} ({need}; see README.md, section 'Case files')")


#: Largest YAML input read (configurations, assumptions, calibrations are a few kB): checked before parsing.
MAX_YAML_BYTES = 1024 * 1024


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (plain YAML keeps the last silently: a
    spec with ``tp: 1`` and later ``tp: 99`` would sweep 99 without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: SafeLoader names it below
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark,
                    f"found the key {key!r} twice; allowed: each key once", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml_text(text: str) -> object:
    """YAML text parsed safely, a key given twice in one mapping refused (:class:`UniqueKeyLoader`)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def read_yaml(path: str | Path, what: str) -> object:
    """The parsed content of a user's YAML file (``what`` it should hold goes into the message); InputError
    naming the file when it is missing, unreadable or not YAML."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_YAML_BYTES:
            raise InputError(f"{p}: {size:,} bytes; allowed: a YAML file of at most {MAX_YAML_BYTES:,} bytes ({what})")
        return load_yaml_text(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"{p}: no such file") from exc
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{p}: not valid YAML ({what}): {' '.join(str(exc).split())}") from exc


def show(value: object) -> str:
    """A cell for a message: numpy scalars as plain Python values (``16777217``, not ``np.int64(16777217)``)."""
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)


def _where(source: str, frame: pd.DataFrame, pos: int) -> str:
    if frame.attrs.get("single_configuration"):
        return source
    row = frame.index[pos]
    case = ""
    if "case" in frame.columns and isinstance(frame["case"].iloc[pos], str):
        case = f" (case {frame['case'].iloc[pos]!r})"
    if source == "<frame>":  # a DataFrame: its index label, not a file line
        line = f"row index {show(row)}"
    else:
        line = f"row {row + 2}" if isinstance(row, (int, np.integer)) else f"row {row!r}"
    return f"{source}: {line}{case}"


_arrow_text = cells.arrow_text
_numpy = cells.to_numpy
_blank = cells.blank
_to_float = cells.to_float
_lower_names = cells.lower_names


def _integers(frame: pd.DataFrame, col: str, source: str) -> np.ndarray:
    """Column as float64 with NaN for empty cells (all NaN when ``frame`` has no such column); raises
    InputError on a non-integer or out-of-range value."""
    if col not in frame.columns:
        return cells.constant(len(frame), np.nan)
    raw = frame[col]
    if cells.is_categorical(raw):  # checked once per distinct cell; a bad one is named by its first row
        return _per_distinct_cell(frame, col, source, _integers)
    lo, hi = INTEGER_MIN.get(col, 0), INTEGER_MAX.get(col, INT_DOMAIN_MAX)
    if isinstance(raw.dtype, np.dtype) and raw.dtype.kind in "iu" and len(raw):  # numpy integers: a range check
        ints = raw.to_numpy()
        if lo <= ints.min() and ints.max() <= hi:
            return ints.astype(np.float64)
    blank = _blank(raw)
    vals = _to_float(raw, blank)
    with np.errstate(invalid="ignore"):
        bad = ~blank & ~((np.fmod(vals, 1.0) == 0) & (vals >= lo) & (vals <= hi))  # NaN (not a number) fails
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        allowed = (f"an integer >= {lo} and <= {hi:,} (2^24 - 1: sizes are computed exactly up to there)"
                   if hi == INT_DOMAIN_MAX else f"an integer in {lo}..{hi}")
        raise InputError(f"{_where(source, frame, pos)}, column {col!r}: value {show(raw.iloc[pos])} is not "
                         f"allowed; allowed: {allowed} (or empty for the default)")
    return vals


def _per_distinct_cell(frame: pd.DataFrame, col: str, source: str, parse: Any) -> np.ndarray:
    """``parse(frame, col, source)`` of a Categorical column, computed on its distinct cells and taken back to the
    rows; when a cell is bad, the row path runs instead so that the message names the first bad row."""
    try:
        return cells.on_distinct(frame[col], lambda c: parse(pd.DataFrame({col: c}), col, source))
    except InputError:
        return np.asarray(parse(frame.assign(**{col: frame[col].astype(object)}), col, source))


def _required_integers(frame: pd.DataFrame, col: str, source: str, task: str = "") -> np.ndarray:
    """:func:`_integers` of a column every row must fill (InputError naming the first empty cell)."""
    vals = _integers(frame, col, source)
    if np.isnan(vals).any():
        pos = int(np.flatnonzero(np.isnan(vals))[0])
        raise InputError(f"{_where(source, frame, pos)}, column {col!r}: empty, but a value is required"
                         + (f" for task {task!r}" if task else ""))
    return vals


def _categorical(frame: pd.DataFrame, col: str, source: str) -> np.ndarray:
    """Codes of a categorical column as float64, NaN for empty cells (filled by :func:`fill_defaults`; all NaN
    when ``frame`` has no such column)."""
    if col not in frame.columns:
        return cells.constant(len(frame), np.nan)
    raw = frame[col]
    if cells.is_categorical(raw):
        return _per_distinct_cell(frame, col, source, _categorical)
    blank = _blank(raw)
    default = CATEGORICAL_DEFAULTS[col]
    names = _lower_names(raw, blank, default)
    allowed = CATEGORICAL[col]
    ok = names.isin(allowed).to_numpy()
    if not ok.all():
        pos = int(np.flatnonzero(~ok)[0])
        raise InputError(f"{_where(source, frame, pos)}, column {col!r}: value {show(raw.iloc[pos])} is not allowed; "
                         f"allowed: {', '.join(allowed)} (or empty for the default {default!r})")
    out = codes.encode(names.to_numpy(), allowed, key=col).astype(np.float64)
    out[blank] = np.nan
    return out


def _fill_dimensions_from_catalog(frame: pd.DataFrame, source: str = "<frame>") -> pd.DataFrame:
    """Where a row names a catalogued model and leaves dimension columns out or empty, take the catalog's."""
    if "model" not in frame.columns:
        return frame
    cat = model_catalog()
    position = _catalog_position(frame["model"])
    known = position >= 0
    missing = np.zeros(len(frame), dtype=bool)
    for col in ("layers", "hidden", "heads", "vocab"):
        missing |= _blank(frame[col]) if col in frame.columns else True
    unknown = ~known & missing
    if unknown.any():
        pos = int(np.flatnonzero(unknown)[0])
        raise InputError(f"{_where(source, frame, pos)}, column 'model': value {show(frame['model'].iloc[pos])} is "
                         f"not a catalogued model, and the row does not give its dimensions (layers, hidden, heads, "
                         f"vocab); allowed: {', '.join(cat.index)} (see `dse models`), or any label with the "
                         "dimension columns filled")
    if not known.any():
        return frame
    frame = frame.copy(deep=False)  # columns are replaced, never changed in place (copy-on-write)
    model = frame["model"]  # the catalogued models the table names (few): its categories, or the rows' positions
    models = _catalog_position(pd.Series(model.cat.categories)) if cells.is_categorical(model) else np.unique(position)
    for col in (*DIMENSION_COLUMNS, *ARCHITECTURE_COLUMNS):
        if col in ARCHITECTURE_COLUMNS and col not in frame.columns:
            if pd.isna(_catalog_column(cat[col], models)).all():  # none of them sets it: the column stays absent
                continue
            frame[col] = pd.Series(_catalog_column(cat[col], position), index=frame.index)
        elif col not in frame.columns:
            frame[col] = pd.Series(_catalog_column(cat[col], position), index=frame.index, dtype=object).where(
                known, None)  # the catalog's value of each row's model (NaN: none)
        else:
            fill = _blank(frame[col]) & known
            if fill.any():
                frame[col] = frame[col].astype(object).where(~fill, pd.Series(_catalog_column(cat[col], position),
                                                                              index=frame.index))
    return frame


def check_configuration_cells(frame: pd.DataFrame, source: str) -> None:
    """Check the cells every row may carry, whatever its task: integer columns, categorical columns and the
    system name.  Raises :class:`InputError` naming the row and column of the first bad cell."""
    for col in INTEGER_MIN:
        if col in frame.columns:
            _integers(frame, col, source)
    for col in CATEGORICAL:
        if col in frame.columns:
            _categorical(frame, col, source)
    _reals(frame, "request_rate", source, lambda v: v > 0,
           "a positive finite number of requests/s (or empty for offline, maximum load)")
    check_stack(frame, source)
    if "system" in frame.columns:
        system = frame["system"]
        blank = _blank(system)
        names = system.astype(object).where(~blank, "").astype(str).str.strip().str.lower()
        known = (names.isin(hwcat.system_names()) | blank).to_numpy()
        if not known.all():
            pos = int(np.flatnonzero(~known)[0])
            raise InputError(f"{_where(source, frame, pos)}, column 'system': value {show(system.iloc[pos])} is not a "
                             f"catalogued system; allowed: {', '.join(hwcat.system_names())}")


def check_stack(frame: pd.DataFrame, source: str, task: str | None = None) -> None:
    """Every non-empty ``stack`` cell names a known stack (InputError listing them otherwise), and, for the rows
    of one ``task``, a stack of that task: a training stack sets nothing of a serving engine and an inference
    engine nothing of a training run (:func:`dse.stacks.stack_task_mismatch`), so either would silently mean the
    defaults."""
    if "stack" not in frame.columns:
        return
    raw = frame["stack"]
    codes_, names = cells.distinct_lower_names(raw)  # a table names a few stacks: each checked once
    known = set(stack_names())
    for i, name in enumerate(names):
        why = None
        if name and name not in known:
            why = (f"is not a known stack; allowed: {', '.join(stack_names())} (or empty for the current "
                   "Megatron-core / NeMo defaults)")
        elif name and task is not None and (mismatch := stack_task_mismatch(str(name), task)):
            why = (f"is not allowed on a {task!r} row ({mismatch}); allowed: {', '.join(stacks_for_task(task))} "
                   "(or empty)")
        if why:
            pos = int(np.flatnonzero(codes_ == i)[0])
            raise InputError(f"{_where(source, frame, pos)}, column 'stack': value {show(raw.iloc[pos])} {why}")


def architecture_inputs(frame: pd.DataFrame, x: dict[str, np.ndarray], source: str) -> None:
    """Read the optional architecture columns (:data:`dse.cost.architecture.ARCHITECTURE_COLUMNS`) and ``etp``
    into ``x`` (empty = 0, not set), after checking each range and their combinations: InputError naming the
    row, the column, the value and what is allowed."""
    for k in (*ARCHITECTURE_INTEGERS, "etp"):
        x[k] = _integers(frame, k, source)
    for k, names in ARCHITECTURE_CATEGORIES.items():
        x[k] = _named_codes(frame, k, names, source) if k in frame.columns else cells.constant(len(frame), np.nan)
    absent = all(cells.is_constant(x[k]) and np.isnan(x[k][0]) for k in (*ARCHITECTURE_INTEGERS,
                                                                         *ARCHITECTURE_CATEGORIES))
    for bad, col, allowed in ([] if absent else architecture_errors(x)):  # no column given: nothing to contradict
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            value = frame[col].iloc[pos] if col in frame.columns else None
            raise InputError(f"{_where(source, frame, pos)}, column {col!r}: value {show(value)} is not allowed; "
                             f"allowed: {allowed}")
    for k in (*ARCHITECTURE_COLUMNS, "etp"):
        x[k] = nan_to(x[k], 0.0)


def tied_embeddings_default(frame: pd.DataFrame, dims: Mapping[str, np.ndarray]) -> np.ndarray:
    """Catalog value of ``tied_embeddings`` for rows whose ``model`` is catalogued with the same dimensions."""
    n = len(frame)
    out = np.zeros(n, dtype=np.float64)
    if "model" not in frame.columns:
        return out
    cat = model_catalog()
    position = _catalog_position(frame["model"])
    same = position >= 0
    for col in ("layers", "hidden", "heads", "vocab"):
        same &= _catalog_column(cat[col], position).astype(np.float64) == dims[col]
    out[same] = _catalog_column(cat["tied_embeddings"], position).astype(np.float64)[same]
    return out


def _catalog_position(model: pd.Series) -> np.ndarray:
    """Row of each cell's model in the model catalog (-1: not catalogued), looked up once per distinct cell."""
    if cells.is_categorical(model):
        return cells.on_distinct(model, _catalog_position).astype(np.int64)
    names = _lower_names(model, _blank(model), "")
    return np.asarray(model_catalog().index.get_indexer(pd.Index(names.to_numpy(dtype=object))), dtype=np.int64)


def _catalog_column(values: pd.Series, position: np.ndarray) -> np.ndarray:
    """A catalog column's value at each ``position`` (NaN where -1)."""
    numeric = values.dtype.kind in "iufb"
    column = np.append(values.to_numpy(dtype=np.float64 if numeric else object), np.nan)
    return column[np.where(position >= 0, position, len(values))]


def train_inputs(frame: pd.DataFrame, source: str = "<frame>") -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Checked, default-filled kernel inputs of a training table, and the system codes.

    Raises :class:`InputError` naming the row and column of the first bad cell.
    """
    frame = _fill_dimensions_from_catalog(frame, source)
    check_stack(frame, source, "train")
    frame, _ = apply_stack(frame, record=False)  # the stack's profile fills the knobs the row leaves empty
    for col in ("layers", "hidden", "heads", "vocab", "system", "seq_len", "global_batch"):
        if col not in frame.columns:
            raise MissingColumn(source, (col,))
    if "dp" not in frame.columns and "gpus" not in frame.columns:
        raise MissingColumn(source, ("gpus", "dp"))
    x: dict[str, np.ndarray] = {}
    for name in ("layers", "hidden", "heads", "vocab", "seq_len", "global_batch"):
        x[name] = _required_integers(frame, name, source)
    ints = {k: _integers(frame, k, source) for k in ("tp", "pp",
        "kv_heads", "ffn_hidden", "experts", "top_k", "cp", "ep", "vpp", "micro_batch", "sp", "zero", "dp",
        "gpus", "dp_overlap", "pp_overlap", "tied_embeddings", "lora_rank", "layers_first_stage",
        "layers_last_stage", "doc_len")}

    both_missing = np.isnan(ints["dp"]) & np.isnan(ints["gpus"])
    if both_missing.any():
        pos = int(np.flatnonzero(both_missing)[0])
        raise InputError(f"{_where(source, frame, pos)}, columns 'dp' and 'gpus': both empty; give at least one")
    x.update(ints)
    architecture_inputs(frame, x, source)
    x["moe_imbalance"] = _at_least_one(frame, "moe_imbalance", source)
    for key in CATEGORICAL:
        x[key] = _categorical(frame, key, source)
    if np.isnan(x["tied_embeddings"]).any():
        x["tied_embeddings"] = np.where(np.isnan(x["tied_embeddings"]), tied_embeddings_default(frame, x),
                                        x["tied_embeddings"])
    fill_defaults(x)

    return x, _system_codes(frame, source)


def evaluate_train(frame: pd.DataFrame, source: str = "<frame>",
                   overrides: dict[tuple[str, str], float] | None = None,
                   with_inputs: bool | Container[str] = False, modules: bool = False) -> pd.DataFrame:
    """Training outputs for every row of ``frame`` (same index), as typed columns.

    With ``with_inputs`` the resolved inputs (defaults filled) and the GPU's HBM capacity come first (a collection:
    only the inputs it names); with ``modules`` the forward and backward by module
    (:data:`dse.cost.training.MODULE_METRICS`) follow the metrics.
    """
    x, sys_codes = train_inputs(frame, source)
    metrics = TRAIN_METRICS + (MODULE_METRICS + DETAIL_METRICS if modules else ())
    step = functools.partial(train_step, modules=True) if modules else train_step
    block, res = in_tiles(step, x, sys_codes, metrics, overrides)
    out = _metric_frame(block, metrics, frame.index)
    out["fits"] = res["fits"].astype(bool)
    reason = res["reason"].astype(np.int64)
    out["infeasible_reason"] = pd.Categorical.from_codes(reason, categories=pd.Index(codes.REASONS))
    if with_inputs:
        hbm = {"hbm_bytes": hwcat.hardware_table(overrides)["hbm_bytes"][sys_codes]}
        out = _inputs_beside(out, x, sys_codes, hbm, CATEGORICAL, integers=True,
                             nullable=("layers_first_stage", "layers_last_stage", "doc_len"), only=with_inputs,
                             reals=REAL_INPUTS)
    return out


#: Inputs that take real values (the others are integers or codes): shown as given (or empty), not as int64.
REAL_INPUTS = ("moe_imbalance",)


#: Rows per kernel call when a table is evaluated: a tile's temporaries (about 1,000 numpy arrays of the tile's
#: length) stay in the core's L2 cache (4 MiB on the benchmark machine) while the call overhead is paid 8 times
#: for 200,000 rows, not 25.  The training kernel on the issue-24 table of 200,000 distinct rows (inputs, hardware
#: gather and output copy included; one core, best of 7): 0.128 s in one call, 0.109 s in tiles of 8,192,
#: 0.094 s of 16,384, 0.089 s of 24,576, 0.092 s of 32,768, 0.095 s of 65,536.  Rows are independent, so a
#: tile's results are the whole call's.
TABLE_TILE = 24576


def in_tiles(step: Any, x: Mapping[str, np.ndarray], systems: np.ndarray, metrics: Sequence[str],
             overrides: dict[tuple[str, str], float] | None = None,
             tile: int = TABLE_TILE) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``step(x, hw, out_dtype=float32)`` (a kernel: arrays of n rows in, arrays of n rows out) evaluated ``tile``
    rows at a time, each tile's hardware columns gathered for its ``systems`` codes in the kernel's float32: the
    ``metrics`` go into one float64 block of shape (len(metrics), n), converted as they are copied (a DataFrame
    takes the block as it is), the other outputs (``fits``, ``reason``, ...) into arrays of their own dtype.
    Scalars (broadcast inputs) pass to every tile as they are."""
    n = len(systems)
    block = np.empty((len(metrics), n), dtype=np.float64)
    rest: dict[str, np.ndarray] = {}
    for lo in range(0, n, tile):
        hi = min(lo + tile, n)
        hw = hwcat.hardware_columns(systems[lo:hi], overrides, dtype=np.float32)
        part = step({k: v[lo:hi] if np.ndim(v) else v for k, v in x.items()}, hw, out_dtype=np.float32)
        for i, k in enumerate(metrics):
            block[i, lo:hi] = part[k]
        for k, v in part.items():
            if k not in rest and k not in metrics:
                rest[k] = np.empty(n, dtype=np.asarray(v).dtype)
            if k in rest:
                rest[k][lo:hi] = v
    return block, rest


def _metric_frame(block: np.ndarray, metrics: Sequence[str], index: pd.Index) -> pd.DataFrame:
    """The metrics block of :func:`in_tiles` as a DataFrame without a copy (one float64 block)."""
    return pd.DataFrame(block.T, columns=list(metrics), index=index, copy=False)


def _system_codes(frame: pd.DataFrame, source: str) -> np.ndarray:
    system = frame["system"]
    if cells.is_categorical(system):
        return _per_distinct_cell(frame, "system", source, lambda f, _, src: _system_codes(f, src)).astype(np.int64)
    names = _lower_names(system, _blank(system), "")
    known = names.isin(hwcat.system_names()).to_numpy()
    if not known.all():
        pos = int(np.flatnonzero(~known)[0])
        raise InputError(f"{_where(source, frame, pos)}, column 'system': value {show(system.iloc[pos])} is not a "
                         f"catalogued system; allowed: {', '.join(hwcat.system_names())}")
    return hwcat.system_codes(names.to_numpy())


def infer_inputs(frame: pd.DataFrame, source: str = "<frame>", task: str = "infer"
                 ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Checked, default-filled inputs of the inference kernel for a table of ``task == 'infer'`` rows.

    Required: the model dimensions (or a catalogued ``model``), ``system``, ``tp``, ``batch``, ``input_len``,
    ``output_len``.  Defaults: ``pp`` 1, ``dp`` 1 (replicas), ``gpus`` tp·pp·dp, ``precision`` bf16,
    ``kv_precision`` auto, and the model defaults of :func:`fill_defaults`.
    """
    frame = _fill_dimensions_from_catalog(frame, source)
    check_stack(frame, source, task)
    for col in ("layers", "hidden", "heads", "vocab", "system", "tp", "batch", "input_len", "output_len"):
        if col not in frame.columns:
            raise MissingColumn(source, (col,), task)
    x: dict[str, np.ndarray] = {}
    for name in ("layers", "hidden", "heads", "vocab", "tp", "batch", "input_len", "output_len"):
        x[name] = _required_integers(frame, name, source, task=task)
    for k in ("kv_heads", "ffn_hidden", "experts", "top_k", "pp", "dp", "gpus", "tied_embeddings"):
        x[k] = _integers(frame, k, source)
    architecture_inputs(frame, x, source)
    # empty: the GPU generation's measured routing skew (dse.cost.inference.routing_skew)
    x["moe_imbalance"] = _at_least_one(frame, "moe_imbalance", source)
    for key in ("mlp", "precision"):
        x[key] = _categorical(frame, key, source)
    raw = frame["kv_precision"] if "kv_precision" in frame.columns else pd.Series(np.nan, index=frame.index,
                                                                                   dtype=object)
    blank = _blank(raw)
    kv_names = raw.astype(object).where(~blank, "auto").astype(str).str.strip().str.lower()
    ok = kv_names.isin(codes.KV_PRECISION).to_numpy()
    if not ok.all():
        pos = int(np.flatnonzero(~ok)[0])
        raise InputError(f"{_where(source, frame, pos)}, column 'kv_precision': value {show(raw.iloc[pos])} is not "
                         f"allowed; allowed: {', '.join(codes.KV_PRECISION)} (or empty for 'auto')")
    x["kv_precision"] = codes.encode(kv_names.to_numpy(), codes.KV_PRECISION, key="kv_precision").astype(np.float64)
    fill: dict[str, np.ndarray | float] = {"kv_heads": x["heads"], "ffn_hidden": 4.0 * x["hidden"], "experts": 1.0,
                                           "top_k": 1.0, "pp": 1.0, "dp": 1.0}
    for key, default in fill.items():
        x[key] = np.where(np.isnan(x[key]), default, x[key])
    x["gpus"] = np.where(np.isnan(x["gpus"]), x["tp"] * x["pp"] * x["dp"], x["gpus"])
    x["decode_kv_reads"] = _decode_kv_reads(frame, source)
    tied = tied_embeddings_default(frame, x)
    x["tied_embeddings"] = np.where(np.isnan(x["tied_embeddings"]), tied, x["tied_embeddings"])
    for key, name in (("mlp", "gelu"), ("precision", "bf16")):
        x[key] = np.where(np.isnan(x[key]), float(CATEGORICAL[key].index(name)), x[key])
    return x, _system_codes(frame, source)


def evaluate_infer(frame: pd.DataFrame, source: str = "<frame>",
                   overrides: dict[tuple[str, str], float] | None = None,
                   with_inputs: bool | Container[str] = False) -> pd.DataFrame:
    """Inference outputs for every row of ``frame`` (same index), as typed columns."""
    x, sys_codes = infer_inputs(frame, source)
    hw = hwcat.hardware_columns(sys_codes, overrides)
    res = infer_step(x, hw)
    out = pd.DataFrame({k: res[k] for k in INFER_METRICS}, index=frame.index)
    out["fits"] = res["fits"].astype(bool)
    out["infeasible_reason"] = pd.Categorical.from_codes(res["reason"].astype(np.int64),
                                                         categories=pd.Index(codes.REASONS))
    if with_inputs:
        out = _inputs_beside(out, x, sys_codes, hw, INFERENCE_VOCABULARIES, integers=True, only=with_inputs,
                             reals=REAL_INPUTS)
    return out


def evaluate_decode_bound(frame: pd.DataFrame, task: str, source: str = "<frame>",
                          overrides: dict[tuple[str, str], float] | None = None) -> np.ndarray:
    """The HBM bound on output tokens per second per GPU (:func:`dse.cost.inference.decode_hbm_bound`) of every
    row of ``frame``, all rows of one ``task`` (infer or serve), in row order."""
    x, sys_codes = (serve_inputs if task == "serve" else infer_inputs)(frame, source)
    return np.asarray(decode_hbm_bound(x, hwcat.hardware_columns(sys_codes, overrides)), dtype=np.float64)


def evaluate_routing_skew(frame: pd.DataFrame, task: str, source: str = "<frame>",
                          overrides: dict[tuple[str, str], float] | None = None) -> np.ndarray:
    """The factor on the routed experts' GEMMs (:func:`dse.cost.inference.routing_skew`: the row's
    ``moe_imbalance``, as given or as its stack sets it, else the GPU generation's measured skew at its ep) of every
    row of ``frame``, all rows of one ``task`` (infer or serve), in row order; NaN for a dense model."""
    x = kernel_columns(frame, task, source, overrides)
    return np.where(x["experts"] > 1, routing_skew(x), np.nan).astype(np.float64)


def evaluate_routed_expert_rates(frame: pd.DataFrame, task: str, source: str = "<frame>",
                                 overrides: dict[tuple[str, str], float] | None = None
                                 ) -> tuple[np.ndarray, np.ndarray]:
    """(GEMM rate over the row's dense serving GEMM rate, weight-streaming rate over ``memory_rate``) of the routed
    experts of every row of ``frame``, all rows of one ``task`` (infer or serve), in row order
    (:func:`dse.cost.inference.routed_expert_format`: the checkpoint's expert format and the GPU's measured MoE
    kernels); NaN for a dense model."""
    from dse.cost.inference import _rates, routed_expert_format

    x = kernel_columns(frame, task, source, overrides)
    _, rate, act, wb = _rates(x)
    rate_e, _, _, stream = routed_expert_format(x, rate, act, wb)
    moe = x["experts"] > 1
    return (np.where(moe, rate_e / rate, np.nan).astype(np.float64),
            np.where(moe, stream, np.nan).astype(np.float64))


def evaluate_prompt_attention_rate(frame: pd.DataFrame, source: str = "<frame>",
                                   overrides: dict[tuple[str, str], float] | None = None
                                   ) -> tuple[np.ndarray, np.ndarray]:
    """(FLOP/s, 1 where FP8 context FMHA) of the prompt attention of every serving row of ``frame``, in row order
    (:func:`dse.cost.inference.prompt_attention_rate`, :func:`dse.cost.inference.fp8_context_fmha_rows`)."""
    from dse.cost.inference import fp8_context_fmha_rows, kv_bytes_per_value, prompt_attention_rate

    both = kernel_columns(frame, "serve", source, overrides)
    kv_b = kv_bytes_per_value(both["kv_precision"], both["precision"])
    return (prompt_attention_rate(both, kv_b).astype(np.float64),
            np.asarray(fp8_context_fmha_rows(both, kv_b), dtype=np.float64))


def evaluate_ep_exchange(frame: pd.DataFrame, source: str = "<frame>",
                         overrides: dict[tuple[str, str], float] | None = None) -> np.ndarray:
    """1 where a serving row's expert-parallel tokens travel by all-gather and reduce-scatter, else 0 (an
    all-to-all, or no expert parallelism), in row order (:func:`dse.cost.serving.allgather_exchange_rows`)."""
    from dse.cost.serving import allgather_exchange_rows

    return np.asarray(allgather_exchange_rows(kernel_columns(frame, "serve", source, overrides)), dtype=np.float64)


def kernel_columns(frame: pd.DataFrame, task: str, source: str = "<frame>",
                   overrides: dict[tuple[str, str], float] | None = None) -> dict[str, np.ndarray]:
    """The inference (``task`` infer) or serving kernel's input columns of ``frame`` with the hardware columns of
    each row's system beside them, as one dict: what a single term of those kernels reads (``dse explain``)."""
    x, sys_codes = (serve_inputs if task == "serve" else infer_inputs)(frame, source)
    return {**x, **hwcat.hardware_columns(sys_codes, overrides)}


#: Categorical inputs of the inference-side models, decoded back to names beside their outputs.
INFERENCE_VOCABULARIES = {"mlp": codes.MLP, "precision": codes.PRECISION, "kv_precision": codes.KV_PRECISION}


def _inputs_beside(out: pd.DataFrame, x: Mapping[str, np.ndarray], sys_codes: np.ndarray,
                   hw: Mapping[str, np.ndarray], vocabularies: Mapping[str, tuple[str, ...]], integers: bool,
                   nullable: tuple[str, ...] = (), only: bool | Container[str] = True,
                   reals: tuple[str, ...] = ()) -> pd.DataFrame:
    """The resolved inputs (``system`` first, categorical codes decoded back to names by ``vocabularies``, the
    GPU's ``hbm_bytes`` last) then ``out``, for display and audit.  With ``integers`` the numeric inputs are
    int64 (``nullable`` ones Int64: empty means "from the split" or "not packed"; ``reals``, real-valued inputs
    such as ``moe_imbalance``, stay float64); without, as computed (the serving model's inputs may be empty or
    fractional)."""
    wanted = (lambda k: True) if only is True or only is False else (lambda k: k in only)  # noqa: E731
    columns: dict[str, Any] = {}
    if wanted("system"):
        columns["system"] = pd.Categorical.from_codes(np.asarray(sys_codes, dtype=np.int64),
                                                      pd.Index(hwcat.system_names()))
    for k, v in x.items():
        if not wanted(k):
            continue
        constant = cells.is_constant(np.asarray(v))  # an absent column's default: written once, not converted
        if k in vocabularies:  # names as a Categorical of the vocabulary: no string per row
            code = np.full(len(v), v[0], dtype=np.int16) if constant else np.asarray(v, dtype=np.int16)
            columns[k] = pd.Categorical.from_codes(code, dtype=pd.CategoricalDtype(pd.Index(vocabularies[k])),
                                                   validate=False)  # codes the encoder made: in range
        elif k in nullable:
            columns[k] = (pd.arrays.IntegerArray(np.zeros(len(v), dtype=np.int64), np.ones(len(v), dtype=bool))
                          if constant and np.isnan(v[0]) else pd.array(np.asarray(v, dtype=np.float64), dtype="Int64"))
        elif k in reals:
            columns[k] = np.asarray(v, dtype=np.float64) if not constant else np.full(len(v), v[0], dtype=np.float64)
        elif constant:
            columns[k] = np.full(len(v), v[0], dtype=np.int64 if integers else np.asarray(v).dtype)
        else:
            columns[k] = np.asarray(v).astype(np.int64) if integers else np.asarray(v)
    if wanted("hbm_bytes"):
        columns["hbm_bytes"] = hw["hbm_bytes"]
    return pd.concat([pd.DataFrame(columns, index=out.index, copy=False), out], axis=1) if columns else out


def _decode_kv_reads(frame: pd.DataFrame, source: str) -> np.ndarray:
    """``decode_kv_reads`` codes: the row's value, else its stack's, else per KV head (0)."""
    n = len(frame)
    out = _named_codes(frame, "decode_kv_reads", codes.DECODE_KV_READS, source) if "decode_kv_reads" in \
        frame.columns else np.full(n, np.nan)
    if "stack" in frame.columns:
        from dse.stacks import profile

        names = _lower_names(frame["stack"], _blank(frame["stack"]), "")
        for stack in [s for s in pd.unique(names) if s]:
            value = profile(stack).get("decode_kv_reads")
            if value is not None:
                rows = (names == stack).to_numpy()
                out = np.where(rows & np.isnan(out), float(codes.DECODE_KV_READS.index(value)), out)
    return np.where(np.isnan(out), 0.0, out)


def _named_codes(frame: pd.DataFrame, col: str, vocab: tuple[str, ...], source: str) -> np.ndarray:
    """Codes of a categorical column outside :data:`CATEGORICAL` (NaN for empty cells)."""
    raw = frame[col]
    blank = _blank(raw)
    names = _lower_names(raw, blank, vocab[0])
    ok = names.isin(vocab).to_numpy()
    if not ok.all():
        pos = int(np.flatnonzero(~ok)[0])
        raise InputError(f"{_where(source, frame, pos)}, column {col!r}: value {show(raw.iloc[pos])} is not allowed; "
                         f"allowed: {', '.join(vocab)} (or empty for the default)")
    out = codes.encode(names.to_numpy(), vocab, key=col).astype(np.float64)
    out[blank] = np.nan
    return out


def _reals(frame: pd.DataFrame, col: str, source: str, valid: Any, allowed: str) -> np.ndarray:
    """An optional column of real numbers (NaN where empty or absent); InputError naming the first cell that is
    not a number or for which ``valid`` (a function of the float array) is false, with ``allowed``."""
    if col not in frame.columns:
        return np.full(len(frame), np.nan)
    raw = frame[col]
    blank = _blank(raw)
    vals = pd.to_numeric(raw.where(~blank, np.nan), errors="coerce").to_numpy(np.float64)
    with np.errstate(invalid="ignore"):  # at most INT_DOMAIN_MAX: larger reals overflow the float32 kernels
        bad = ~blank & ~(np.isfinite(vals) & valid(vals) & (vals <= INT_DOMAIN_MAX))
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise InputError(f"{_where(source, frame, pos)}, column {col!r}: value {show(raw.iloc[pos])} is not allowed; "
                         f"allowed: {allowed}, at most {INT_DOMAIN_MAX:,}")
    return vals


def _at_least_one(frame: pd.DataFrame, col: str, source: str) -> np.ndarray:
    """``moe_imbalance``-like columns: finite numbers >= 1 (NaN where empty)."""
    return _reals(frame, col, source, lambda v: v >= 1.0, "a finite number of at least 1 (the busiest expert GPU's "
                  "load over the mean), or empty for the default (1 in training; in inference and serving the GPU's "
                  "measured routing skew)")


def _probability(frame: pd.DataFrame, col: str, source: str) -> np.ndarray:
    """Numbers in (0, 1] (NaN where empty), as the sweep axis takes them (spec.FLOAT_AXIS_MAX)."""
    return _reals(frame, col, source, lambda v: (v > 0) & (v <= 1),
                  "a number in (0, 1], or empty for the default")


def serve_inputs(frame: pd.DataFrame, source: str = "<frame>") -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Checked inputs of the serving model for ``task == 'serve'`` rows: those of :func:`infer_inputs` (with
    ``batch`` optional: empty = only memory limits the concurrency) plus ``max_num_tokens`` (empty: no token
    budget), ``request_rate`` (empty: maximum load), ``concurrency`` (clients of a closed loop; empty: not one),
    ``think_time_s`` (a closed loop's think time; empty: 0), ``arrival`` (poisson, closed or burst; empty: from
    the load columns) and the engine's KV settings from the row's stack."""
    frame = frame.copy(deep=False)  # columns are replaced, never changed in place (copy-on-write)
    n = len(frame)
    batch = frame["batch"] if "batch" in frame.columns else pd.Series([np.nan] * n, index=frame.index)
    blank_batch = _blank(batch)
    frame["batch"] = batch.astype(object).where(~blank_batch, 1)
    x, systems = infer_inputs(frame, source, task="serve")
    x["batch"] = np.where(blank_batch, np.nan, x["batch"])
    x["max_num_tokens"] = _integers(frame, "max_num_tokens", source)
    x["request_rate"] = _reals(frame, "request_rate", source, lambda v: v > 0,
                               "a positive finite number of requests/s (or empty for offline, maximum load)")
    x["kv_memory_fraction"] = np.full(n, np.nan)
    x["kv_block_tokens"] = np.full(n, np.nan)
    x["cuda_graphs"] = np.full(n, np.nan)
    x["kv_reservation"] = np.full(n, np.nan)
    x["kv_memory_basis"] = np.full(n, np.nan)
    x["request_overhead_s"] = np.full(n, np.nan)
    x["request_setup_s"] = np.full(n, np.nan)
    x["host_overlap"] = np.full(n, np.nan)
    x["window_kv"] = np.full(n, np.nan)
    x["fp8_context_fmha"] = np.full(n, np.nan)
    x["ep_comm"] = np.full(n, np.nan)
    x["mla_decode"] = np.full(n, np.nan)
    # (decode_kv_reads: filled by infer_inputs from the row or its stack)
    x["concurrency"] = _integers(frame, "concurrency", source)
    both = ~np.isnan(x["concurrency"]) & ~np.isnan(x["request_rate"])
    if both.any():
        pos = int(np.flatnonzero(both)[0])
        raise InputError(f"{_where(source, frame, pos)}, columns 'concurrency' and 'request_rate': both given; "
                         "allowed: one of them (concurrency: clients of a closed loop; request_rate: an open "
                         "stream of requests/s), or neither for maximum load")
    x["think_time_s"] = _reals(frame, "think_time_s", source, lambda v: v >= 0,
                               "a finite number of seconds >= 0 (a closed loop's think time), or empty for 0")
    x["arrival"] = (_named_codes(frame, "arrival", codes.ARRIVAL, source) if "arrival" in frame.columns
                    else np.full(n, np.nan))
    _check_arrival(frame, x, source)
    x["spec_tokens"] = np.nan_to_num(_integers(frame, "spec_tokens", source), nan=0.0)  # MTP drafts per step
    x["spec_acceptance"] = _probability(frame, "spec_acceptance", source)
    x["spec_method"] = (_named_codes(frame, "spec_method", codes.SPEC_METHOD, source) if "spec_method" in frame.columns
                        else np.full(n, np.nan))
    _check_spec_method(frame, x, source)
    ep = _integers(frame, "ep", source)  # wide expert parallelism (empty or 1: experts split by tp)
    x["ep"] = np.where(np.isnan(ep), 1.0, ep)
    x["prefill_gpus"] = _integers(frame, "prefill_gpus", source)
    from dse.cost.serving import prefill_tp_of

    # the prefill pool's replicas default to the decode pool's tp (serving.prefill_tp_of), shown as resolved
    x["prefill_tp"] = np.where(np.isnan(x["prefill_gpus"]), np.nan, prefill_tp_of(
        {"prefill_tp": _integers(frame, "prefill_tp", source), "tp": x["tp"]}))
    # a disaggregated deployment's GPUs: the prefill pool's and the decode pool's (tp·pp·dp)
    x["gpus"] = np.where(np.isnan(x["prefill_gpus"]), x["gpus"], x["tp"] * x["pp"] * x["dp"] + x["prefill_gpus"])
    stack_code = np.full(n, -1)
    if "stack" in frame.columns:  # the engine's defaults where the row leaves them empty
        names = _lower_names(frame["stack"], _blank(frame["stack"]), "")
        stack_code = pd.Index(stack_names()).get_indexer(pd.Index(names.to_numpy(dtype=object)))
    fill_serving_settings(x, stack_code)
    return x, systems


def _check_spec_method(frame: pd.DataFrame, x: dict[str, np.ndarray], source: str) -> None:
    """An EAGLE drafter's acceptance rate is the row's to give: it depends on the head's training data and the
    traffic (no default, unlike the MTP module's, constants.MTP_ACCEPTANCE)."""
    bad = (x["spec_method"] == codes.SPEC_METHOD_EAGLE) & (x["spec_tokens"] > 0) & np.isnan(x["spec_acceptance"])
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise InputError(f"{_where(source, frame, pos)}, column 'spec_acceptance': value empty is not allowed with "
                         "spec_method eagle; allowed: the EAGLE head's measured acceptance rate, a number in (0, 1]")


def _check_arrival(frame: pd.DataFrame, x: dict[str, np.ndarray], source: str) -> None:
    """``arrival`` agrees with the load columns (poisson: ``request_rate``; closed, burst: ``concurrency``) and a
    think time belongs to a closed loop; InputError naming the first row that breaks it."""
    rate, clients = ~np.isnan(x["request_rate"]), ~np.isnan(x["concurrency"])
    arrival, think = x["arrival"], np.nan_to_num(x["think_time_s"])
    checks = (
        (arrival == codes.ARRIVAL_POISSON) & ~rate, "arrival",
        f"'poisson' needs a request_rate; allowed: {codes.ARRIVAL_RULE}",
        (np.isin(arrival, (codes.ARRIVAL_CLOSED, codes.ARRIVAL_BURST))) & ~clients, "arrival",
        f"closed and burst need a concurrency (clients or requests sent); allowed: {codes.ARRIVAL_RULE}",
        (think > 0) & ~(clients & (arrival != codes.ARRIVAL_BURST)), "think_time_s",
        "a think time needs a closed loop; allowed: 0 or empty, or a think time with concurrency (arrival empty or "
        "closed)",
    )
    for i in range(0, len(checks), 3):
        bad, col, allowed = checks[i], checks[i + 1], checks[i + 2]
        if np.any(bad):
            pos = int(np.flatnonzero(bad)[0])
            raise InputError(f"{_where(source, frame, pos)}, column {col!r}: value {show(frame[col].iloc[pos])} is "
                             f"not allowed here: {allowed}")


def evaluate_serve(frame: pd.DataFrame, source: str = "<frame>",
                   overrides: dict[tuple[str, str], float] | None = None,
                   with_inputs: bool | Container[str] = False) -> pd.DataFrame:
    """Serving outputs (:mod:`dse.cost.serving`) for every row of ``frame`` (same index)."""
    from dse.cost.serving import LIMITS, SERVE_METRICS, serve_step

    x, sys_codes = serve_inputs(frame, source)
    hw = hwcat.hardware_columns(sys_codes, overrides)
    res = serve_step(x, hw)
    out = pd.DataFrame({k: res[k] for k in SERVE_METRICS}, index=frame.index)
    limit = res["limit"].astype(np.int64)
    out["limit"] = np.where(limit >= 0, np.asarray(LIMITS, dtype=object)[np.maximum(limit, 0)], "")
    out["fits"] = res["fits"].astype(bool)
    out["infeasible_reason"] = pd.Categorical.from_codes(res["reason"].astype(np.int64),
                                                         categories=pd.Index(codes.REASONS))
    if with_inputs:
        out = _inputs_beside(out, x, sys_codes, hw, INFERENCE_VOCABULARIES, integers=False, only=with_inputs)
    return out


def evaluate(frame: pd.DataFrame, overrides: dict[tuple[str, str], float] | None = None) -> pd.DataFrame:
    """Return ``frame`` with every output column of the cost model added (Python API for notebooks).

    ``frame`` has the configuration columns of README.md, section 'Case files' (``case``, ``metric``,
    ``measured`` and ``source`` are not needed); a row may give only ``model`` (a catalogued name) instead of
    the dimension columns.  ``task`` (train when absent) selects the training or the inference model; each row
    gets the outputs of its task (the other task's columns are NaN).  Input columns the frame leaves out are
    added with the values used (catalog dimensions, documented defaults); columns it has are never changed.

    Rows that repeat an earlier row (in every column the model reads) are evaluated once: the checks, the
    defaults and the kernel run on the distinct rows (in order of first appearance, so an error still names
    the first bad row of ``frame``), and their outputs are repeated.
    """
    work = cells.factorized(frame)  # text columns as their distinct cells: checked and parsed once per cell
    distinct = _distinct_rows(work)
    if distinct is None:
        out = _evaluate(work, overrides)
    else:
        first, inverse = distinct
        once = _evaluate(frame.iloc[first], overrides)
        out = _take_rows(once[[c for c in once.columns if c not in frame.columns]], inverse, frame.index)
    added = [c for c in out.columns if c not in frame.columns]  # columns the frame has are never changed
    return pd.concat([frame, out if len(added) == len(out.columns) else out[added]], axis=1)


def _take_rows(frame: pd.DataFrame, positions: np.ndarray, index: pd.Index) -> pd.DataFrame:
    """``frame.take(positions)`` with ``index``, same columns and dtypes: the numpy columns of one dtype are
    gathered as one 2-D block (one pass instead of one per column, several times faster than pandas' take of
    unconsolidated columns), the others (text, categorical, nullable) one by one."""
    columns: dict[str, Any] = {}
    by_dtype: dict[np.dtype, list[str]] = {}
    for col in frame.columns:
        dtype = frame[col].dtype
        if isinstance(dtype, np.dtype) and dtype.kind in "fiub":
            by_dtype.setdefault(dtype, []).append(col)
        else:
            columns[col] = frame[col].array.take(positions)
    for names in by_dtype.values():
        block = np.take(np.stack([frame[c].to_numpy() for c in names]), positions, axis=1)
        columns.update(zip(names, block, strict=True))
    return pd.DataFrame({c: columns[c] for c in frame.columns}, index=index, copy=False)


def distinct_apply(frame: pd.DataFrame, fn: Any, columns: list[str] | None = None) -> pd.DataFrame:
    """``fn(frame)`` (a frame of outputs with ``frame``'s index), only its ``columns`` when given, computed on
    the distinct rows only and repeated (see :func:`evaluate`); on every row when they are mostly distinct."""
    distinct = _distinct_rows(frame)
    if distinct is None:
        out: pd.DataFrame = fn(frame)
        return out if columns is None else out[[c for c in columns if c in out.columns]]
    first, inverse = distinct
    once: pd.DataFrame = fn(frame.iloc[first])
    if columns is not None:
        once = once[[c for c in columns if c in once.columns]]
    return _take_rows(once, inverse, frame.index)


#: Evaluate distinct rows only when they are at most this fraction of the table.
DISTINCT_BELOW = 0.5
#: Rows of the first look at a large table (:func:`_distinct_rows`): when they are mostly distinct, the table is
#: taken as mostly distinct without hashing every row (a wrong guess costs time, never a different result).
DISTINCT_PROBE_ROWS = 8192


def _distinct_rows(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """(positions of the first row of each distinct row, in order; each row's distinct-row number), or None
    when the rows are mostly distinct (nothing to gain) or the frame is small.  Rows are compared on the
    columns the model reads (``case``, ``measured``, ``source`` and ``metric`` are ignored)."""
    n = len(frame)
    if n < 1024:
        return None
    probe = DISTINCT_PROBE_ROWS
    if n > 4 * probe:  # a first look at a slice: when it is mostly distinct, the whole table likely is too
        head = _distinct_rows(frame.iloc[:probe])
        if head is None or len(head[0]) > DISTINCT_BELOW * probe:
            return None
    ignore = {"case", "measured", "source", "metric"}
    key = np.zeros(n, dtype=np.int64)
    radix = 1
    for col in [c for c in frame.columns if c not in ignore]:
        if _constant(frame[col]):  # one value: it distinguishes no rows (a cheaper pass than hashing it)
            continue
        codes, uniques = pd.factorize(frame[col], use_na_sentinel=False)
        k = max(len(uniques), 1)
        if radix * k >= 2**62:  # compress the key so far before it overflows
            _, key = np.unique(key, return_inverse=True)
            key = key.reshape(-1).astype(np.int64)
            radix = int(key.max()) + 1
            if radix * k >= 2**62:
                return None
        key = key * k + codes
        radix *= k
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if len(first) > DISTINCT_BELOW * n:
        return None
    order = np.argsort(first, kind="stable")  # distinct rows in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.reshape(-1)]


def _constant(series: pd.Series) -> bool:
    """True when every cell of ``series`` is the same value (or every cell is missing), compared as stored."""
    text = _arrow_text(series)
    if text is not None:
        if text.null_count:
            return text.null_count == len(text)
        # cells of different lengths differ: the offsets tell it without reading the text
        chunks = text.chunks if isinstance(text, pa.ChunkedArray) else [text]
        width = np.int64 if pa.types.is_large_string(text.type) else np.int32
        first_length = None
        for chunk in (c for c in chunks if len(c)):
            offsets = np.frombuffer(chunk.buffers()[1], dtype=width)[chunk.offset:chunk.offset + len(chunk) + 1]
            lengths = np.diff(offsets)
            first_length = lengths[0] if first_length is None else first_length
            if (lengths != first_length).any():
                return False
        return bool(pc.all(pc.equal(text, text[0])).as_py())
    if isinstance(series.dtype, np.dtype) and series.dtype.kind in "iufb":
        values = series.to_numpy()
        return bool((values == values[0]).all() or (series.dtype.kind == "f" and np.isnan(values).all()))
    return False


class _NotIn:
    """The names not among ``columns`` (``k in _NotIn(cols)`` is ``k not in cols``)."""

    def __init__(self, columns: Collection[str]) -> None:
        self.columns = set(columns)

    def __contains__(self, key: object) -> bool:
        return key not in self.columns


def _evaluate(frame: pd.DataFrame, overrides: dict[tuple[str, str], float] | None = None) -> pd.DataFrame:
    frame = frame.copy(deep=False)  # columns are replaced, never changed in place (copy-on-write)
    task = _lower_names(frame["task"], _blank(frame["task"]), "") if "task" in frame.columns else \
        pd.Series("train", index=frame.index)
    bad = ~task.isin(("train", "infer", "serve", "nan", ""))
    if bad.any():
        pos = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(f"{_where('<frame>', frame, pos)}, column 'task': value {show(frame['task'].iloc[pos])} is "
                         "not allowed; allowed: train, infer, serve")
    is_infer = (task == "infer").to_numpy()
    is_serve = (task == "serve").to_numpy()
    missing = _NotIn(frame.columns)  # the inputs the frame leaves out are added beside the outputs
    from dse.cost.serving import SERVE_METRICS

    is_train = ~is_infer & ~is_serve
    parts = []
    for rows, run, metrics in ((is_train, evaluate_train, (*TRAIN_METRICS, "fits", "infeasible_reason")),
                               (is_serve, evaluate_serve, (*SERVE_METRICS, "limit", "fits", "infeasible_reason")),
                               (is_infer, evaluate_infer, (*INFER_METRICS, "fits", "infeasible_reason"))):
        if rows.all():  # one task (the usual table): its outputs as they are, no row selection
            return _added_columns(run(frame, overrides=overrides, with_inputs=missing), metrics)
        if rows.any():
            parts.append((run(frame.loc[rows], overrides=overrides, with_inputs=missing), metrics))
    output_columns = [c for _, cols in parts for c in cols]
    result: dict[str, Any] = {}
    for outputs, _ in parts:
        # inputs the frame left out (dimensions of a named model, defaults) are added, never overwritten
        for column in outputs.columns:
            if column not in result and column not in output_columns:
                result[column] = outputs[column].reindex(frame.index)
    for column in dict.fromkeys(output_columns):
        pieces = [o[column] for o, cols in parts if column in cols]
        result[column] = pd.concat(pieces).reindex(frame.index) if len(pieces) > 1 else \
            pieces[0].reindex(frame.index)
    return pd.DataFrame(result, index=frame.index)


def _added_columns(outputs: pd.DataFrame, metrics: tuple[str, ...]) -> pd.DataFrame:
    """A single task's outputs in the column order of the mixed case: the inputs the frame left out, then the
    outputs."""
    order = [c for c in outputs.columns if c not in metrics] + [c for c in metrics if c in outputs.columns]
    return outputs[order] if order != list(outputs.columns) else outputs
