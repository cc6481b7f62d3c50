"""Compare the cost model with measured cases (README.md, section 'Case files' schema).

A case file has one row per measured configuration.  Columns are read by name; the required ones are
:data:`REQUIRED_COLUMNS`, the optional ones :data:`OPTIONAL_COLUMNS` (plus this model's knobs,
:data:`dse.frame.OPTIONAL_KNOBS`).  Malformed files raise :class:`dse.frame.InputError` naming the file,
the row, the column, the value and what is allowed.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dse.cells import to_float
from dse.cost.architecture import ARCHITECTURE_COLUMNS
from dse.cost.inference import INFER_INPUTS
from dse.cost.serving import SERVE_INPUTS
from dse.cost.training import TRAIN_INPUTS
from dse.frame import (
    OPTIONAL_KNOBS,
    InputError,
    _distinct_rows,
    _lower_names,
    check_configuration_cells,
    distinct_apply,
    evaluate_decode_bound,
    evaluate_infer,
    evaluate_serve,
    evaluate_train,
    read_yaml,
)
from dse.frame import (
    _blank as blank_series,
)
from dse.stacks import apply_stack

REQUIRED_COLUMNS: tuple[str, ...] = (
    "case", "task", "model", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "experts",
    "top_k", "system", "gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "sp", "micro_batch", "global_batch",
    "seq_len", "recompute", "zero", "precision", "batch", "input_len", "output_len", "metric", "measured",
    "source",
)
#: Settings a source states that the model reads through other columns, kept for the reader and not used:
#: ``compile`` (torch.compile, 0/1: its effect is the row's ``kernels``), ``async_tp`` (torchtitan's AsyncTP, 0/1:
#: its effect is ``tp_overlap``), ``pp_schedule`` (the schedule's name: its effect is ``vpp``), ``ac_option``
#: (torchtitan's selective_ac_option, ``op`` or a layer interval: dse has one selective mode).
RECORDED_COLUMNS: tuple[str, ...] = ("compile", "async_tp", "pp_schedule", "ac_option")
OPTIONAL_COLUMNS: tuple[str, ...] = ("finetune", "lora_rank", "kv_precision", "max_num_tokens", "request_rate",
                                     "stack", "concurrency", "think_time_s", "arrival", "attention", "offload",
                                     *ARCHITECTURE_COLUMNS, "etp", "spec_tokens", "spec_acceptance", "spec_method",
                                     *RECORDED_COLUMNS)
#: Internal columns :func:`read_cases` adds: the stack a row named when it was predicted with the nearest documented
#: one, and why a row is skipped before it is predicted (a stack of no known project).
STACK_GIVEN, SKIP_REASON = "_stack_given", "_skip_reason"
#: Internal column: why a row's stack, a known one of the other task, was not applied (the row is predicted with the
#: defaults and says so, as for a release with no profile; explain, specs and dse.evaluate refuse it outright).
STACK_OTHER_TASK = "_stack_other_task"

#: Metrics of the schema and the model output each is compared with (None: not modelled yet).
METRICS: dict[str, str | None] = {
    "step_time_s": "step_time_s",
    "model_tflops_per_gpu": "model_tflops_per_gpu",
    "tokens_per_s_per_gpu": "tokens_per_s_per_gpu",
    "layer_time_ms": "layer_time_ms",
    "e2e_latency_s": "e2e_latency_s",
    "ttft_s": "ttft_s",
    "output_tokens_per_s_per_gpu": "output_tokens_per_s_per_gpu",
    "tpot_s": "tpot_s",
    "decode_tokens_per_s_per_gpu": "decode_tokens_per_s_per_gpu",
    "peak_memory_gb": "peak_memory_gb",
}
#: The tasks each metric belongs to.
METRIC_TASKS: dict[str, tuple[str, ...]] = {
    "step_time_s": ("train",), "model_tflops_per_gpu": ("train",), "tokens_per_s_per_gpu": ("train",),
    "layer_time_ms": ("train",), "e2e_latency_s": ("infer",), "ttft_s": ("infer", "serve"),
    "output_tokens_per_s_per_gpu": ("infer", "serve"), "tpot_s": ("infer", "serve"), "peak_memory_gb": ("train",),
    "decode_tokens_per_s_per_gpu": ("serve",)}
TASKS = ("train", "infer", "serve")
#: Tasks the cost model evaluates today; rows of the others are read, checked and reported as skipped.
MODELLED_TASKS = ("train", "infer", "serve")
SERVE_NOT_MODELLED = ("task 'serve' (in-flight batching under load) is read and checked but not modelled yet; "
                      "the static-batch 'infer' model does not describe it")


def usable_rows(frame: pd.DataFrame) -> np.ndarray:
    """Rows of a checked case frame the model compares: its task is modelled, the metric belongs to the task,
    and it is not mixture-of-experts inference (see :func:`validate_file` for why)."""
    task = frame["task"].to_numpy(dtype=object)
    metric_ok = metric_belongs(frame["metric"].to_numpy(dtype=object), task)
    experts = experts_column(frame)
    stack_ok = frame[SKIP_REASON].isna().to_numpy() if SKIP_REASON in frame else True
    return metric_ok & np.isin(task, MODELLED_TASKS) & ~((task == "infer") & (experts > 1)) & stack_ok


def experts_column(frame: pd.DataFrame) -> np.ndarray:
    """The ``experts`` cells as numbers, 1 (a dense model) where empty or absent."""
    if "experts" not in frame:
        return np.ones(len(frame))
    return np.nan_to_num(to_float(frame["experts"], blank_series(frame["experts"])), nan=1.0)


def metric_belongs(metric: np.ndarray, task: np.ndarray) -> np.ndarray:
    """Per row: the metric is one the model gives and it belongs to the row's task (:data:`METRIC_TASKS`), decided
    once per distinct (metric, task) pair (object arrays of names in, booleans out)."""
    m_codes, metrics = pd.factorize(metric)  # a file names a few metrics and tasks
    t_codes, tasks = pd.factorize(task)
    ok = np.array([[METRICS.get(m) is not None and t in METRIC_TASKS.get(m, ()) for t in tasks] for m in metrics],
                  dtype=bool).reshape(len(metrics), len(tasks))
    return ok[m_codes, t_codes]


@dataclass
class Assumption:
    """Values for cells a source leaves empty, for the cases matching ``cases`` (a glob)."""

    cases: str
    values: dict[str, object]
    source: str


@dataclass(slots=True)
class CaseResult:
    case: str
    file: str
    metric: str
    measured: float
    predicted: float | None = None
    error_pct: float | None = None
    skipped: str | None = None
    assumed: dict[str, object] = field(default_factory=dict)
    stack: str | None = None
    from_stack: dict[str, object] = field(default_factory=dict)
    stack_note: str | None = None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"case": self.case, "file": self.file, "metric": self.metric,
                                  "measured": self.measured}
        if self.skipped is not None:
            out["skipped"] = self.skipped
        else:
            out["predicted"] = self.predicted
            out["error_pct"] = self.error_pct
        if self.assumed:
            out["assumed"] = self.assumed
        out["stack"] = self.stack or "(none: current Megatron-core / NeMo defaults)"
        if self.stack_note:
            out["stack_note"] = self.stack_note
        out["filled_by_stack"] = self.from_stack
        return out


def load_assumptions(path: str | Path) -> list[Assumption]:
    """Read an assumptions YAML file (a list of ``{cases, set, source}``); errors name the file and entry."""
    path = Path(path)
    data = read_yaml(path, "assumptions: a list of {cases, set, source}")
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a list of {{cases, set, source}} entries, got {type(data).__name__}")
    out = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or set(entry) - {"cases", "set", "source"} or "cases" not in entry \
                or not isinstance(entry.get("set"), dict) or not entry.get("source"):
            raise InputError(f"{path}: entry {i + 1}: needs exactly the keys 'cases' (glob), 'set' (mapping) and "
                             f"'source' (text); got {entry!r}")
        out.append(Assumption(str(entry["cases"]), dict(entry["set"]), str(entry["source"]).strip()))
    return out


@functools.lru_cache(maxsize=4096)
def _plain(v: object) -> object:
    """A filled knob value for JSON: numbers as numbers, names as text."""
    text = str(v)
    return int(text) if text.isdigit() else text


def _blank(v: object) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v)) or (isinstance(v, str) and not v.strip())


def glob_regex(pattern: str) -> str:
    """A shell glob (:mod:`fnmatch`: ``*``, ``?``, ``[seq]``, ``[!seq]``; case-sensitive, the whole name) as an
    anchored regular expression that RE2 accepts, so that Arrow matches a column in one pass (``fnmatch.translate``
    writes atomic groups for a glob with two ``*``, which RE2 refuses)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i + (i < n and pattern[i] == "!")
            j += j < n and pattern[j] == "]"  # a ']' first in the set is a member
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:  # no closing bracket: a literal '[', as fnmatch reads it
                out.append(re.escape(c))
                continue
            body = pattern[i:j].replace("\\", "\\\\")
            i = j + 1
            negated, body = body.startswith("!"), body[1:] if body.startswith("!") else body
            out.append(("[^" if negated else "[") + ("\\" if body.startswith("^") else "") + body + "]")
        else:
            out.append(re.escape(c))
    return "(?s)^" + "".join(out) + "$"


def glob_rows(names: pa.Array, pattern: str) -> np.ndarray:
    """Which ``names`` match the glob ``pattern`` (:func:`fnmatch.fnmatchcase`): one Arrow pass with
    :func:`glob_regex`; a set RE2 refuses (a reversed range such as ``[z-a]``, which fnmatch reads as empty) falls
    back to fnmatch per name."""
    try:
        return np.asarray(pc.match_substring_regex(names, glob_regex(pattern)).to_numpy(zero_copy_only=False),
                          dtype=bool)
    except pa.ArrowInvalid:
        return np.array([fnmatch.fnmatchcase(s, pattern) for s in names.to_pylist()], dtype=bool)


def apply_assumptions(frame: pd.DataFrame, assumptions: Sequence[Assumption]) -> tuple[pd.DataFrame, list[dict]]:
    """Fill empty cells from matching assumptions (later rules override earlier ones; stated cells win).

    Returns the filled frame and, per row, the values that were actually applied.
    """
    empty: dict = {}  # shared by every row no assumption applies to (never mutated)
    applied: list[dict] = [empty] * len(frame)
    if not assumptions:
        return frame, applied
    cases = pa.array(frame["case"].astype(str).to_numpy(dtype=object), type=pa.string())
    wanted: dict[str, np.ndarray] = {}  # column -> per-row value to fill (None: nothing), later rules win
    for rule in assumptions:
        rows = glob_rows(cases, rule.cases)
        if not rows.any():
            continue
        for col, value in rule.values.items():
            target = wanted.setdefault(col, np.full(len(frame), None, dtype=object))
            target[rows] = value
    filled_cols: dict[str, np.ndarray] = {}
    if wanted:
        frame = frame.copy(deep=False)  # the caller's frame is never changed: columns are replaced
    for col, value in wanted.items():
        if col not in frame.columns:
            frame[col] = pd.Series([None] * len(frame), index=frame.index, dtype=object)
        take = ~pd.isna(value) & blank_series(frame[col])
        if take.any():
            column = frame[col].to_numpy(dtype=object).copy()
            column[take] = value[take]
            frame[col] = column
            kept = np.full(len(frame), None, dtype=object)
            kept[take] = value[take]
            filled_cols[col] = kept
    if filled_cols:
        applied = [empty] * len(frame)
        any_rows = np.flatnonzero(np.any([~pd.isna(v) for v in filled_cols.values()], axis=0))
        for pos in any_rows:
            applied[pos] = {c: v[pos] for c, v in filled_cols.items() if v[pos] is not None}
    return frame, applied


#: Case columns that only training rows may fill (an inference or serving row with one is refused, not ignored):
#: the optional columns and knobs the training kernel reads and neither the inference nor the serving kernel does.
TRAIN_ONLY_COLUMNS: tuple[str, ...] = tuple(dict.fromkeys(
    c for c in (*OPTIONAL_COLUMNS, *OPTIONAL_KNOBS) if c in TRAIN_INPUTS and c not in INFER_INPUTS
    and c not in SERVE_INPUTS))


def read_cases(path: str | Path) -> pd.DataFrame:
    """Read and check a case file; raise InputError naming the file, row and column of the first problem."""
    path = Path(path)
    try:
        header = list(pd.read_csv(path, dtype=str, nrows=0).columns)
        # the free-text `source` column is checked for presence but not loaded: nothing downstream reads it, and
        # on a large file it is most of the bytes
        usecols = [c for c in header if c != "source"]
        try:  # Arrow's multithreaded reader (6x faster); anything it refuses goes to the C reader for the message
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""], engine="pyarrow",
                                usecols=usecols)
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            raise
        except Exception:  # noqa: BLE001 - pyarrow raises several types; the C reader below names the problem
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])[usecols]
    except FileNotFoundError as exc:
        raise InputError(f"{path}: no such file") from exc
    except pd.errors.EmptyDataError as exc:
        raise InputError(f"{path}: empty file; expected a CSV header with the columns of "
                         "README.md, section 'Case files'") from exc
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a readable CSV file: {str(exc).strip()}") from exc
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(repr(c) for c in missing)}; the schema is in "
                         "README.md, section 'Case files'")
    known = set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS) | set(OPTIONAL_KNOBS)
    unknown = [c for c in header if c not in known]
    if unknown:
        raise InputError(f"{path}: unknown column(s) {', '.join(repr(c) for c in unknown)}; allowed: "
                         f"{', '.join(sorted(known))}")
    if frame.empty:
        raise InputError(f"{path}: no cases (the file has a header but no rows)")

    def where(pos: int, col: str) -> str:
        return f"{path}: row {pos + 2} (case {frame['case'].iloc[pos]!r}), column {col!r}"

    case = frame["case"]
    blank_case = case.isna().to_numpy()
    if blank_case.any():
        first = int(np.flatnonzero(blank_case)[0])
        raise InputError(f"{path}: row {first + 2}, column 'case': empty; every case needs a unique id")
    dup = case.duplicated().to_numpy()
    if dup.any():
        first = int(np.flatnonzero(dup)[0])
        raise InputError(f"{where(first, 'case')}: duplicate case id")
    task = frame["task"].fillna("").str.strip().str.lower()
    bad = ~task.isin(TASKS).to_numpy()
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise InputError(f"{where(pos, 'task')}: value {frame['task'].iloc[pos]!r} is not allowed; allowed: "
                         f"{', '.join(TASKS)}")
    for col in TRAIN_ONLY_COLUMNS:  # a training setting on an inference or serving row is a mistake, not a no-op
        if col not in frame.columns:
            continue
        bad = ((task != "train") & frame[col].notna() & (frame[col].str.strip() != "")).to_numpy()
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise InputError(f"{where(pos, col)}: value {frame[col].iloc[pos]!r} is not allowed on a row of task "
                             f"{task.iloc[pos]!r}; allowed: empty ({col} is a training setting: task train)")
    metric = frame["metric"].fillna("").str.strip()
    bad = ~metric.isin(list(METRICS)).to_numpy()
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise InputError(f"{where(pos, 'metric')}: value {frame['metric'].iloc[pos]!r} is not allowed; allowed: "
                         f"{', '.join(METRICS)}")
    measured = pd.Series(to_float(frame["measured"], blank_series(frame["measured"])), index=frame.index)
    bad = ~((measured > 0) & np.isfinite(measured)).to_numpy()
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise InputError(f"{where(pos, 'measured')}: value {frame['measured'].iloc[pos]!r} is not allowed; "
                         "allowed: a positive finite number")
    frame["task"] = task
    frame["metric"] = metric
    frame["measured"] = measured.astype(np.float64)
    frame = _resolve_stacks(frame)
    distinct = _distinct_rows(frame)  # repeated configurations are checked once (the first bad row is named)
    check_configuration_cells(frame if distinct is None else frame.iloc[distinct[0]], str(path))
    return frame


def _resolve_stacks(frame: pd.DataFrame) -> pd.DataFrame:
    """A release dse has no profile for is predicted with the nearest documented one (the name it gave is kept
    in :data:`STACK_GIVEN`); a stack of no known project marks its rows skipped (:data:`SKIP_REASON`).  The
    work is one step per distinct stack name, never per row."""
    from dse.stacks import nearest_stack, stack_task_mismatch

    if "stack" not in frame.columns:
        return frame
    names = _lower_names(frame["stack"], blank_series(frame["stack"]), "")
    unknown = [s for s in pd.unique(names) if s and nearest_stack(s)[1]]
    tasks = (frame["task"].astype(str).str.strip().str.lower() if "task" in frame.columns
             else pd.Series("train", index=frame.index))
    pairs = pd.DataFrame({"stack": names.to_numpy(), "task": tasks.to_numpy()}).drop_duplicates()
    other = [(s, t, why) for s, t in pairs.itertuples(index=False)
             if s and s not in unknown and t in ("train", "infer", "serve") and (why := stack_task_mismatch(s, t))]
    if not unknown and not other:
        return frame
    frame = frame.copy(deep=False)
    given = np.full(len(frame), None, dtype=object)
    skip = np.full(len(frame), None, dtype=object)
    why_other = np.full(len(frame), None, dtype=object)
    stack = frame["stack"].to_numpy(dtype=object).copy()
    for name, task, why in other:  # a known stack of the other task sets nothing here: the defaults, said so
        rows = ((names == name) & (tasks == task)).to_numpy()
        given[rows], why_other[rows], stack[rows] = name, why, None
    if other:
        frame[STACK_OTHER_TASK] = why_other
    for name in unknown:
        rows = (names == name).to_numpy()
        chosen, note = nearest_stack(name)
        given[rows] = name
        if chosen is None:
            skip[rows] = note
            stack[rows] = None  # checked and predicted as nothing: the row is skipped
        else:
            stack[rows] = chosen
    frame["stack"] = stack
    frame[STACK_GIVEN] = given
    frame[SKIP_REASON] = skip
    return frame


#: The columns of :func:`validate_table`, the fields of :class:`CaseResult` in order.
RESULT_COLUMNS = ("case", "file", "metric", "measured", "predicted", "error_pct", "skipped", "assumed", "stack",
                  "from_stack", "stack_note")


def validate_file(path: str | Path, assumptions: Sequence[Assumption] = (),
                  overrides: dict[tuple[str, str], float] | None = None) -> list[CaseResult]:
    """Predict every case of one file; returns one result per case (skipped ones say why).  One object per case:
    for a few thousand cases; :func:`validate_table` gives the same results as columns, for any number."""
    return case_results(validate_table(path, assumptions, overrides))


def case_results(table: pd.DataFrame) -> list[CaseResult]:
    """The rows of a :func:`validate_table` as :class:`CaseResult` objects (None where a value is missing)."""
    cols = [table[c].to_numpy(dtype=object) for c in RESULT_COLUMNS]
    skipped = table["skipped"].notna().to_numpy()
    cols[4][skipped] = None  # no prediction and no error where the case is skipped
    cols[5][skipped] = None
    return [CaseResult(*row) for row in zip(*(c.tolist() for c in cols), strict=True)]


def validate_table(path: str | Path, assumptions: Sequence[Assumption] = (),
                   overrides: dict[tuple[str, str], float] | None = None) -> pd.DataFrame:
    """Predict every case of one file: one row per case with the columns :data:`RESULT_COLUMNS` (the fields of
    :class:`CaseResult`).  ``predicted`` and ``error_pct`` are NaN where ``skipped`` says why the case has no
    prediction; ``assumed`` and ``from_stack`` hold the values filled per case (dicts shared between rows).
    Every step is a column operation: no Python step per case."""
    path = Path(path)
    frame = read_cases(path)
    frame, applied = apply_assumptions(frame, assumptions)
    frame, from_stack = apply_stack(frame)
    predict = frame[SKIP_REASON].isna().to_numpy() if SKIP_REASON in frame else np.ones(len(frame), dtype=bool)
    is_train = (frame["task"] == "train").to_numpy() & predict
    is_infer = (frame["task"] == "infer").to_numpy() & predict
    needed = [*dict.fromkeys(c for c in METRICS.values() if c is not None), "infeasible_reason"]
    predicted_parts = []
    if is_train.any():
        predicted_parts.append(distinct_apply(_rows(frame, is_train), lambda f: evaluate_train(
            f, source=str(path), overrides=overrides), needed))
    if is_infer.any():
        predicted_parts.append(distinct_apply(_rows(frame, is_infer), lambda f: evaluate_infer(
            f, source=str(path), overrides=overrides), needed))
    is_serve = (frame["task"] == "serve").to_numpy() & predict
    if is_serve.any():
        predicted_parts.append(distinct_apply(_rows(frame, is_serve), lambda f: evaluate_serve(
            f, source=str(path), overrides=overrides), needed))
    predicted = pd.concat(predicted_parts) if predicted_parts else pd.DataFrame(index=frame.index)
    predicted = predicted.reindex(frame.index)
    # one column per result field, then the results (no per-row pandas access)
    metric = frame["metric"].astype(str).to_numpy(dtype=object)
    task = frame["task"].astype(str).to_numpy(dtype=object)
    measured = frame["measured"].to_numpy(dtype=np.float64)
    value = np.full(len(frame), np.nan)
    for name, out_col in METRICS.items():
        rows = metric == name
        if out_col is not None and rows.any() and out_col in predicted.columns:
            value[rows] = predicted[out_col].to_numpy(dtype=np.float64)[rows]
    reason = (predicted["infeasible_reason"].astype(str).to_numpy(dtype=object) if "infeasible_reason" in predicted
              else np.full(len(frame), "", dtype=object))
    experts = experts_column(frame)
    n = len(frame)
    if "stack" in frame:
        stack_names_ = _lower_names(frame["stack"], blank_series(frame["stack"]), "")
        stacks = stack_names_.where(stack_names_ != "", None).to_numpy(dtype=object)
    else:
        stacks = np.full(n, None, dtype=object)
    cases = frame["case"].astype(str).to_numpy(dtype=object)
    name = path.name
    # why a case is skipped, decided per column (first rule that applies wins)
    skipped = np.full(n, None, dtype=object)
    rows = ~metric_belongs(metric, task)
    skipped[rows] = _messages(lambda m, t: f"metric {m!r} does not belong to task {t!r}", metric[rows], task[rows])
    open_rows = skipped == None  # noqa: E711 - elementwise on an object array
    if SKIP_REASON in frame:
        stack_skip = frame[SKIP_REASON].to_numpy(dtype=object)
        rule = open_rows & ~pd.isna(stack_skip)
        skipped[rule] = stack_skip[rule]
        open_rows &= ~rule
    rule = open_rows & ~np.isin(task, MODELLED_TASKS)
    skipped[rule] = SERVE_NOT_MODELLED
    open_rows &= ~rule
    rule = open_rows & (task == "infer") & (experts > 1)
    skipped[rule] = ("mixture-of-experts inference is modelled (uniform routing, grouped GEMMs on the "
                     "roofline) but not validated: serving engines' MoE kernels (TensorRT-LLM 0.9) land "
                     "-50 % ... +80 % from that bound, far outside what the dense cases show")
    open_rows &= ~rule
    rows = open_rows & ~np.isfinite(value)
    skipped[rows] = _messages(lambda r: f"model gives no value: {r}", reason[rows])
    answered = open_rows & np.isfinite(value)
    over, bound = _above_hbm_bound(frame, path, overrides, answered, task, metric, measured, value)
    skipped[over] = _messages(lambda m, b: f"measured {m:.4g} is {m / b:.1f}x the HBM bound of the stated "
                              f"configuration ({b:.4g} output tokens/s per GPU: the KV cache each decode token "
                              "reads at the mean context, at the GPU's peak bandwidth; "
                              "dse.cost.inference.decode_hbm_bound), so the run did not have the configuration "
                              "the row states", measured[over], bound[over])
    answered &= ~over
    predicted_value = np.where(answered, value, np.nan)
    error = (predicted_value / measured - 1.0) * 100.0
    notes = np.full(n, None, dtype=object)
    if STACK_GIVEN in frame:
        given = frame[STACK_GIVEN].to_numpy(dtype=object)
        has = ~pd.isna(given) & (skipped == None)  # noqa: E711 - elementwise on an object array
        other = (frame[STACK_OTHER_TASK].to_numpy(dtype=object) if STACK_OTHER_TASK in frame
                 else np.full(n, None, dtype=object))
        wrong = has & ~pd.isna(other)
        has &= pd.isna(other)
        notes[has] = _messages(lambda g, s: f"stack {g!r} has no profile: predicted with {s!r}, the nearest "
                               "documented release", given[has], stacks[has])
        notes[wrong] = _messages(lambda g, w: f"stack {g!r} is {w}: predicted with the defaults", given[wrong],
                                 other[wrong])
    # a measured run the model puts over its GPU's memory still gets its prediction scored, and a note: it ran, so
    # the row leaves out a memory-saving setting (activation offloading, recomputation) or a memory term is missing
    over_memory = answered & (reason == "exceeds_hbm")
    if over_memory.any():
        prior = notes[over_memory]
        notes[over_memory] = np.where(pd.isna(prior), MEMORY_NOTE,
                                      _messages(lambda p: f"{p}; {MEMORY_NOTE}", prior.astype(object)))
    assumed = np.empty(n, dtype=object)
    assumed[:] = applied
    text = {"case": cases, "file": np.full(n, name, dtype=object), "metric": metric, "skipped": skipped,
            "assumed": assumed, "stack": stacks, "from_stack": _plain_records(from_stack), "stack_note": notes}
    # object columns, so that None stays None (pandas would infer its str dtype and turn None into NaN)
    columns = {k: pd.Series(v, dtype=object, copy=False) for k, v in text.items()}
    columns.update(measured=pd.Series(measured), predicted=pd.Series(predicted_value), error_pct=pd.Series(error))
    return pd.DataFrame({c: columns[c] for c in RESULT_COLUMNS})


#: The note of a measured run that the model predicts does not fit in its GPU's memory (infeasible reason
#: ``exceeds_hbm``); its prediction is still scored.
MEMORY_NOTE = ("the model puts this measured run over its GPU memory (exceeds_hbm), yet it ran: the row leaves out a "
               "memory-saving setting (activation offloading, recomputation) or a memory term is missing; "
               "its prediction is scored")


#: Throughput metrics checked against the HBM bound of their configuration.
BOUNDED_METRICS = ("output_tokens_per_s_per_gpu", "decode_tokens_per_s_per_gpu")


def _above_hbm_bound(frame: pd.DataFrame, path: Path, overrides: dict[tuple[str, str], float] | None,
                     answered: np.ndarray, task: np.ndarray, metric: np.ndarray, measured: np.ndarray,
                     predicted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows whose measured throughput exceeds :func:`dse.cost.inference.decode_hbm_bound`, the bound per row).

    Only rows measured above their prediction can be above the bound (the model's decode reads the same KV
    cache at the HBM bandwidth times an efficiency of at most 1), so only those are evaluated (distinct rows
    once, like the predictions)."""
    bound = np.full(len(frame), np.inf)
    for name in ("infer", "serve"):
        rows = answered & (task == name) & np.isin(metric, BOUNDED_METRICS) & (measured > predicted)
        if rows.any():
            got = distinct_apply(_rows(frame, rows), lambda f, t=name: pd.DataFrame(
                {"bound": evaluate_decode_bound(f, t, str(path), overrides)}, index=f.index))
            bound[rows] = got["bound"].to_numpy(dtype=np.float64)
    return answered & (measured > bound), bound


def _plain_records(records: Sequence[dict[str, object]] | np.ndarray) -> np.ndarray:
    """The stack records of :func:`dse.stacks.apply_stack` (one per row, shared between the rows of one stack and
    task) with their values made plain (:func:`_plain`), each distinct record converted once."""
    out = np.empty(len(records), dtype=object)
    if not len(records):
        return out
    ids = np.fromiter(map(id, records), dtype=np.int64, count=len(records))
    distinct, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    plain = np.empty(len(distinct), dtype=object)
    plain[:] = [{k: _plain(v) for k, v in records[int(i)].items()} for i in first]
    out[:] = plain[inverse.reshape(-1)]
    return out


def _messages(fmt: Callable[..., str], *columns: np.ndarray) -> np.ndarray:
    """``fmt(*cells)`` for every row of ``columns`` (object arrays of one length), formatted once per distinct
    combination of cells, not once per row (a file of 10⁶ cases that do not fit has a handful of reasons)."""
    out = np.empty(len(columns[0]), dtype=object)
    if not len(out):
        return out
    keys = pd.MultiIndex.from_arrays([pd.Index(c, dtype=object) for c in columns])
    codes_, distinct = keys.factorize()
    out[:] = np.array([fmt(*cells) for cells in distinct], dtype=object)[codes_]
    return out


def _rows(frame: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """The rows of ``mask`` (the frame itself, not a copy, when that is every row)."""
    return frame if mask.all() else frame.loc[mask]


def summarize_table(table: pd.DataFrame) -> list[dict[str, object]]:
    """MAPE per (file, metric) of a :func:`validate_table` (or several concatenated), in order of first
    appearance: n, mape_pct, max_abs_error_pct, skipped (the same as :func:`summarize` of its results)."""
    err = table["error_pct"].abs().where(table["skipped"].isna())
    groups = pd.DataFrame({"file": table["file"].to_numpy(), "metric": table["metric"].to_numpy(),
                           "err": err.to_numpy(dtype=np.float64), "skipped": table["skipped"].notna().to_numpy()})
    stats = groups.groupby(["file", "metric"], sort=False).agg(
        n=("err", "count"), mape_pct=("err", "mean"), max_abs_error_pct=("err", "max"), skipped=("skipped", "sum"))
    keys = stats.index.to_list()  # one entry per (file, metric) group, not per case
    return [{"file": f, "metric": m, "n": int(n), "mape_pct": float(mape) if n else None,
             "max_abs_error_pct": float(mx) if n else None, "skipped": int(sk)}
            for (f, m), n, mape, mx, sk in zip(keys, stats["n"], stats["mape_pct"], stats["max_abs_error_pct"],
                                                stats["skipped"], strict=True)]


def file_mape_table(table: pd.DataFrame) -> dict[str, float | None]:
    """MAPE per file over all its compared cases of a :func:`validate_table` (the same as :func:`file_mape`)."""
    err = table["error_pct"].abs().where(table["skipped"].isna())
    means = err.groupby(table["file"].to_numpy(), sort=False).mean()
    return {str(f): (None if pd.isna(m) else float(m)) for f, m in means.items()}


def _results_table(results: Sequence[CaseResult]) -> pd.DataFrame:
    """The columns :func:`summarize_table` reads, from per-case results (None error: skipped or no value)."""
    error = [np.nan if r.error_pct is None else r.error_pct for r in results]
    return pd.DataFrame({"file": [r.file for r in results], "metric": [r.metric for r in results],
                         "error_pct": np.asarray(error, dtype=np.float64),
                         "skipped": pd.Series([r.skipped for r in results], dtype=object)})


def summarize(results: Sequence[CaseResult]) -> list[dict[str, object]]:
    """MAPE per (file, metric) of per-case results: :func:`summarize_table` of them."""
    return summarize_table(_results_table(results))


def file_mape(results: Sequence[CaseResult]) -> dict[str, float | None]:
    """MAPE per file over all its compared cases of per-case results: :func:`file_mape_table` of them."""
    return file_mape_table(_results_table(results))
