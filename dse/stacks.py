"""The software stack of a measurement, a table row or a sweep point: the ``stack`` column / axis.

A stack names the software that ran (project and release).  Its **profile** (``dse/stacks.csv``, one row per
setting, each with its source: a paper section, a file at a commit, a release note) gives the defaults of the
knobs that software fixes.  Rules:

* a cell the table states always wins over the profile; the profile fills only empty cells;
* an empty ``stack`` means the current Megatron-core / NeMo defaults of the model (:mod:`dse.defaults`);
* an unknown stack is refused (exit 2) with the list of known ones, except in a case file (``dse validate``,
  ``dse calibrate``): there a release dse has no profile for is predicted with the nearest documented release
  of the same project and says so, and a stack of no known project is skipped with that reason
  (:func:`nearest_stack`); one such row never refuses the file.

Profile values: a value of the knob's vocabulary; ``auto`` (leave the model's default, e.g. ``sp`` = 1 when
tp > 1); ``when_vpp`` (1 when the row interleaves, vpp > 1, else 0: Megatron-Bridge's overlap_p2p_comm);
``when_uneven`` (``pipeline_split`` only: ``embedding_loss`` where the layers do not divide over pp·vpp and the
layers plus the embedding and the loss do, else ``even``; :func:`embedding_loss_where_uneven`).
Settings the cost model has no term for (``fp8_recipe``) are recorded for the reader; the serving settings
(``max_batch``, ``max_num_tokens``, ``kv_memory_fraction``, ``kv_block_tokens``, ``chunked_prefill``,
``cuda_graphs``, ``kv_reservation``, ``kv_memory_basis``, ``request_overhead_s``, ``request_setup_s``,
``host_overlap``) are the
engine's defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from io import StringIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dse import codes
from dse.cells import arrow_text as _arrow_text
from dse.cells import blank as _blank
from dse.cells import distinct_lower_names, is_categorical, to_float
from dse.cells import lower_names as _lower_names
from dse.defaults import DEFAULT_ZERO

#: Known stacks and what each names.
STACKS: dict[str, str] = {
    "megatron-lm-2021": "Megatron-LM as used in Narayanan et al. 2021 (PTD-P, SC'21 scripts)",
    "megatron-lm-2022": "Megatron-LM as used in Korthikanti et al. 2022 (sequence parallelism, selective "
                        "recomputation)",
    "deepspeed-zero3-2021": "DeepSpeed ZeRO-3 as measured in Narayanan et al. 2021",
    "nemo-24.03": "NVIDIA NeMo container 24.03",
    "nemo-24.07": "NVIDIA NeMo container 24.07",
    "nemo-25.09": "NVIDIA NeMo / Megatron-Bridge container 25.09",
    "nemo-25.11": "NVIDIA NeMo / Megatron-Bridge container 25.11",
    "nemo-26.02": "NVIDIA NeMo / Megatron-Bridge container 26.02",
    "megatron-core-2025": "Megatron-core library defaults (core_r0.14-0.15, 2025): nothing overlapped unless asked",
    "torchtitan-2024.08": "PyTorch torchtitan, August 2024 (FSDP2, TP, PP 1F1B; config_manager.py @a99d2e5d)",
    "torchtitan-2024.12": "PyTorch torchtitan, December 2024 (FSDP2, TP, PP, CP; config_manager.py @9dec370a)",
    "torchtitan-2025": "PyTorch torchtitan (FSDP2, selective activation checkpointing), 2025",
    "nemo-automodel-0.1": "NVIDIA NeMo Automodel (PyTorch FSDP2, torch pipelining, TE modules, DeepEP), as in its "
                          "first published performance summary (@89e3a9fdd, 2025-10)",
    "llm-foundry-2023": "MosaicML llm-foundry + Composer (PyTorch FSDP FULL_SHARD, MPT models), as in its 2023 "
                        "throughput benchmarks",
    "nemo-inference-2023": "NeMo framework inference of Llama-2 (2023 documentation)",
    "tensorrt-llm-0.9.0": "TensorRT-LLM 0.9.0 (perf-overview document)",
    "tensorrt-llm-0.10.0": "TensorRT-LLM 0.10.0 (perf-overview document)",
    "tensorrt-llm-1.0": "TensorRT-LLM 1.0 (perf-overview document, PyTorch backend)",
    "tensorrt-llm-1.1": "TensorRT-LLM 1.1 (the perf-overview page after v1.0, PyTorch backend; the release is an "
                        "ASSUMPTION, the page names none)",
    "vllm-0.11": "vLLM 0.11 (V1 engine)",
    "sglang-0.5": "SGLang 0.5",
    "deepspeed-2023": "HF Transformers + DeepSpeed (ZeRO, ZeRO-Offload) as benchmarked in Zhang et al. 2023 "
                      "(arXiv 2311.03687); version not stated",
    "peft-deepspeed-2023": "HF Transformers + DeepSpeed + HF PEFT (LoRA; QLoRA via bitsandbytes) as benchmarked in "
                           "Zhang et al. 2023",
    "megatron-lm-2023": "Megatron-LM as benchmarked in Zhang et al. 2023",
    "nim-llm-1.8.0": "NVIDIA NIM for LLMs 1.8.0 (engine not stated by its benchmark page)",
    "vllm-0.4": "vLLM 0.4 (V0 engine, no chunked prefill; defaults read at v0.4.2)",
    "vllm-0.6": "vLLM 0.6 (V0 engine; defaults read at v0.6.0)",
    "vllm-0.8": "vLLM 0.8 (V1 engine by default; defaults read at v0.8.5)",
    "sglang-0.3": "SGLang 0.3 (defaults read at v0.3.0)",
    "sglang-0.4": "SGLang 0.4 (defaults read at v0.4.0)",
    "tgi-2.0": "Hugging Face Text Generation Inference 2.0 (paged attention, no chunked prefill)",
    "tgi-3.0": "Hugging Face Text Generation Inference 3.0 (flashinfer, prefix caching, chunked prefill)",
    "lightllm-2023": "ModelTC LightLLM as of 2023-10-31 (TokenAttention, Efficient Router), the engine arXiv "
                     "2311.03687 measured",
}

#: Training knobs a profile sets (kernel inputs) and the values each takes.
TRAIN_KNOBS: dict[str, tuple[str, ...]] = {
    "attention": codes.ATTENTION, "tp_overlap": codes.TP_OVERLAP, "recompute": codes.RECOMPUTE,
    "dp_overlap": ("0", "1"), "pp_overlap": ("0", "1"), "sp": ("0", "1"), "zero": ("0", "1", "2", "3"),
    "zero3_fetch": codes.ZERO3_FETCH, "kernels": codes.KERNELS, "optimizer": codes.OPTIMIZER,
    "memory_report": codes.MEMORY_REPORT, "adapter_precision": codes.ADAPTER_PRECISION, "dp_reduce": codes.DP_REDUCE,
    "zero3_collectives": codes.ZERO3_COLLECTIVES, "zero_with_pp": codes.ZERO_WITH_PP, "cp_exchange": codes.CP_EXCHANGE,
    "moe_gemm": codes.MOE_GEMM,
    "ep_dispatch": codes.EP_DISPATCH,
    "ep_overlap": codes.EP_OVERLAP,
    "pipeline_split": codes.PIPELINE_SPLIT,
    "cross_entropy": codes.CROSS_ENTROPY,
}
#: Settings recorded for the reader (no term in the model) and serving-engine settings.
RECORDED: dict[str, str] = {"fp8_recipe": "text"}
SERVE_KNOBS: dict[str, str] = {"decode_kv_reads": "per_kv_head or per_query_head",
                               "max_batch": "integer", "max_num_tokens": "integer",
                               "kv_memory_fraction": "number in (0, 1]", "kv_block_tokens": "integer",
                               "chunked_prefill": "0 or 1", "cuda_graphs": "0 or 1",
                               "kv_reservation": "mean or full", "kv_memory_basis": "free or total",
                               "request_overhead_s": "seconds >= 0", "request_setup_s": "seconds >= 0",
                               "host_overlap": "none, always or single_stage",
                               "window_kv": "window or full", "moe_imbalance": "number >= 1",
                               "fp8_context_fmha": "0 or 1", "ep_comm": "alltoall or allgather",
                               "mla_decode": "roofline or measured"}
#: Values of the serving settings that name rather than count: their code in the kernel.
SERVE_VALUE_CODES: dict[str, tuple[str, ...]] = {"decode_kv_reads": codes.DECODE_KV_READS,
                                                 "kv_reservation": ("mean", "full"),
                                                 "kv_memory_basis": ("free", "total"),
                                                 "host_overlap": ("none", "always", "single_stage"),
                                                 "window_kv": ("window", "full"),
                                                 "ep_comm": ("alltoall", "allgather"),
                                                 "mla_decode": ("roofline", "measured")}
SPECIAL = ("auto", "when_vpp", "when_uneven")
#: The knobs a special value other than ``auto`` may set (``when_uneven`` resolves to a pipeline split).
SPECIAL_KNOBS: dict[str, tuple[str, ...]] = {"when_vpp": ("dp_overlap", "pp_overlap", "sp"),
                                             "when_uneven": ("pipeline_split",)}
#: The codes :func:`knob_tables` gives the row-dependent values (resolved by the sweep from the row).
WHEN_VPP_CODE, WHEN_UNEVEN_CODE = -1.0, -2.0


def embedding_loss_where_uneven(layers: np.ndarray, pp: np.ndarray, vpp: np.ndarray) -> np.ndarray:
    """Rows a ``when_uneven`` stack splits with the embedding and the loss counted as layers (True) rather than
    evenly: layers % (pp·vpp) != 0 and (layers + 2) % (pp·vpp) == 0 (empty pp or vpp: 1).

    Megatron-Bridge's Llama 3.1 405B recipes (126 layers) set ``account_for_embedding_in_pipeline_split`` and
    ``account_for_loss_in_pipeline_split``; its 8B and 70B recipes, whose layers divide, leave them off
    (dse/stacks.csv cites the files).  A row whose layers divide neither way keeps the even split and its
    reason ``layers % (pp*vpp) != 0``."""
    stages = np.nan_to_num(np.asarray(pp, dtype=np.float64), nan=1.0) * np.nan_to_num(
        np.asarray(vpp, dtype=np.float64), nan=1.0)
    layers = np.asarray(layers, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.fmod(layers, stages) != 0) & (np.fmod(layers + 2.0, stages) == 0)


def per_zero(value: str, zero: np.ndarray) -> np.ndarray | None:
    """The value of a per-ZeRO-stage setting (``a/b/c/d``: stages 0, 1, 2, 3) at each row's ``zero`` stage (NaN:
    the default stage 1), as strings; None for a plain value."""
    parts = value.split("/")
    if len(parts) == 1:
        return None
    return np.asarray(parts, dtype=object)[zero_stage_index(zero)]


def zero_stage_index(zero: np.ndarray) -> np.ndarray:
    """Each row's ZeRO stage as an index 0..3 into a per-stage setting (empty: the documented default)."""
    return np.where(np.isnan(zero), DEFAULT_ZERO, zero).astype(np.int64).clip(0, 3)


def stack_names() -> tuple[str, ...]:
    return tuple(STACKS)


#: The engine settings a serving row or point takes from its stack when it leaves them empty:
#: (profile key, serving kernel input).
SERVING_STACK_SETTINGS: tuple[tuple[str, str], ...] = (
    ("kv_memory_fraction", "kv_memory_fraction"), ("kv_block_tokens", "kv_block_tokens"), ("max_batch", "batch"),
    ("max_num_tokens", "max_num_tokens"), ("decode_kv_reads", "decode_kv_reads"), ("cuda_graphs", "cuda_graphs"),
    ("kv_reservation", "kv_reservation"), ("kv_memory_basis", "kv_memory_basis"),
    ("request_overhead_s", "request_overhead_s"), ("request_setup_s", "request_setup_s"),
    ("host_overlap", "host_overlap"), ("window_kv", "window_kv"), ("moe_imbalance", "moe_imbalance"),
    ("fp8_context_fmha", "fp8_context_fmha"), ("ep_comm", "ep_comm"), ("mla_decode", "mla_decode"))
#: Serving inputs that neither the row nor its stack sets take these values (no CUDA graphs, KV on demand, no host
#: time per running request).
SERVING_UNSTATED: dict[str, float] = {"cuda_graphs": 0.0, "kv_reservation": 0.0, "kv_memory_basis": 0.0,
                                      "request_overhead_s": 0.0, "request_setup_s": 0.0, "host_overlap": 0.0,
                                      "window_kv": 0.0, "fp8_context_fmha": 0.0, "ep_comm": 0.0, "mla_decode": 0.0}
#: Profile values set for a fit (:mod:`dse.validation.fit`): (stack, key) -> value; empty when shipped.
PROFILE_OVERRIDES: dict[tuple[str, str], str] = {}


@cache
def serving_tables() -> dict[str, np.ndarray]:
    """Per serving input of SERVING_STACK_SETTINGS, the value each stack code (index into :func:`stack_names`)
    sets, as a number (named values as their code; NaN: the stack leaves it to the model)."""
    out = {}
    for key, col in SERVING_STACK_SETTINGS:
        table = np.full(len(STACKS), np.nan)
        for i, stack in enumerate(STACKS):
            value = profile(stack).get(key)
            if value is not None:
                table[i] = float(SERVE_VALUE_CODES[key].index(value)) if key in SERVE_VALUE_CODES else float(value)
        out[col] = table
    return out


def fill_serving_settings(x: dict[str, np.ndarray], stack_code: np.ndarray) -> None:
    """Fill, in place, the serving inputs of ``x`` left empty (NaN) from each row's stack (``stack_code``: index
    into :func:`stack_names`, negative or NaN for none), then the unstated ones with SERVING_UNSTATED."""
    code = np.nan_to_num(np.asarray(stack_code, dtype=np.float64), nan=-1.0).astype(np.int64)
    has = code >= 0
    for col, table in serving_tables().items():
        value = np.where(has, table[np.where(has, code, 0)], np.nan)
        x[col] = np.where(np.isnan(x[col]), value, x[col]).astype(x[col].dtype)
    for col, unstated in SERVING_UNSTATED.items():
        x[col] = np.where(np.isnan(x[col]), unstated, x[col]).astype(x[col].dtype)


def _project_and_version(name: str) -> tuple[str, tuple[float, ...]]:
    """``nemo-25.09`` -> ('nemo', (25, 9)); ``deepspeed-zero3-2021`` -> ('deepspeed-zero3', (2021,)): the project
    is the name up to its first part that starts with a digit, the version the numbers after it."""
    parts = name.split("-")
    cut = next((i for i, part in enumerate(parts) if part[:1].isdigit()), len(parts))
    numbers = re.findall(r"\d+", "-".join(parts[cut:]))
    return "-".join(parts[:cut]), tuple(float(n) for n in numbers)


def nearest_stack(name: str) -> tuple[str | None, str]:
    """The documented stack a case file's ``stack`` cell is predicted with, and what to tell the reader.

    A known stack is itself (note empty).  An unknown release of a known project (``vllm-0.12``,
    ``nemo-26.04``) takes the newest documented release not newer than it, else the oldest one newer than it.
    A name of no known project returns None and the reason to skip the row."""
    if name in STACKS:
        return name, ""
    project, version = _project_and_version(name)
    same = [(v, s) for s, (p, v) in ((s, _project_and_version(s)) for s in STACKS) if p == project]
    if not project or not same:
        return None, (f"stack {name!r} has no profile and no release of the same project is documented; "
                      f"documented: {', '.join(STACKS)}")
    older = [(v, s) for v, s in same if v <= version]
    chosen = max(older)[1] if older else min(same)[1]
    return chosen, f"stack {name!r} has no profile: predicted with {chosen!r}, the nearest documented release"


@cache
def profiles() -> pd.DataFrame:
    """The profile table (stack, key, value, source), checked: every stack known, every key and value allowed,
    every setting sourced, no setting twice."""
    text = resources.files("dse").joinpath("stacks.csv").read_text(encoding="utf-8")
    table = pd.read_csv(StringIO(text), dtype=str, keep_default_na=False)
    for i, row in table.iterrows():
        where = f"dse/stacks.csv row {int(str(i)) + 2}"
        if row["stack"] not in STACKS:
            raise ValueError(f"{where}: unknown stack {row['stack']!r}")
        key, value = row["key"], row["value"]
        if key in TRAIN_KNOBS:
            parts = value.split("/")
            special = tuple(v for v in SPECIAL if key in SPECIAL_KNOBS.get(v, (key,)))
            if len(parts) not in (1, 4) or any(v not in TRAIN_KNOBS[key] and (v not in special or len(parts) > 1)
                                               for v in parts):
                raise ValueError(f"{where}: {key} = {value!r}; allowed: {', '.join(TRAIN_KNOBS[key] + special)}, or "
                                 "four of the values joined by '/' (one per ZeRO stage 0/1/2/3)")
        elif key in SERVE_VALUE_CODES:
            if value not in SERVE_VALUE_CODES[key]:
                raise ValueError(f"{where}: {key} = {value!r}; allowed: {', '.join(SERVE_VALUE_CODES[key])}")
        elif key in SERVE_KNOBS and not _serve_number_allowed(SERVE_KNOBS[key], value):
            raise ValueError(f"{where}: {key} = {value!r}; allowed: {SERVE_KNOBS[key]}")
        elif key not in RECORDED and key not in SERVE_KNOBS:
            raise ValueError(f"{where}: unknown key {key!r}")
        if not row["source"].strip():
            raise ValueError(f"{where}: a setting without a source")
    dup = table.duplicated(["stack", "key"])
    if dup.any():
        raise ValueError(f"dse/stacks.csv: {table.loc[dup, ['stack', 'key']].iloc[0].tolist()} is set twice")
    return table


def _serve_number_allowed(allowed: str, value: str) -> bool:
    """A counting serving setting's value is of its kind (SERVE_KNOBS: a positive integer, a number in (0, 1],
    0 or 1)."""
    if allowed == "0 or 1":
        return value in ("0", "1")
    if allowed == "integer":
        return value.isdigit() and int(value) >= 1
    try:
        number = float(value)
    except ValueError:
        return False
    if allowed == "seconds >= 0":
        return 0.0 <= number < 1.0
    if allowed == "number >= 1":
        return 1.0 <= number < float("inf")
    return 0.0 < number <= 1.0


def profile(stack: str) -> dict[str, str]:
    """The settings of one stack: key -> value."""
    t = profiles()
    part = t[t["stack"] == stack]
    settings = dict(zip(part["key"], part["value"], strict=True))
    settings.update({k: v for (s, k), v in PROFILE_OVERRIDES.items() if s == stack})
    return settings


def apply_stack(frame: pd.DataFrame, knobs: Mapping[str, tuple[str, ...]] = TRAIN_KNOBS, record: bool = True
                ) -> tuple[pd.DataFrame, Sequence[dict[str, object]] | np.ndarray]:
    """Fill the empty knob cells of rows that name a stack from its profile (stated cells win).

    Returns the filled frame and, per row, the values filled (for ``dse validate --json``; a list or an object
    array of dicts shared between rows).  The work is one masked assignment per (stack, knob) present, not one
    step per row."""
    empty: dict[str, object] = {}  # shared by every row nothing was filled in (never mutated)
    filled: list[dict[str, object]] = [empty] * len(frame)
    if "stack" not in frame.columns or not len(frame):
        return frame, filled
    codes_, names = distinct_lower_names(frame["stack"])  # a table names a few stacks: each read once
    present = [s for s in pd.unique(names) if s]
    if not present:
        return frame, filled
    # what was filled, per row, as a bit per knob: rows with the same stack, bits and vpp > 1 share one record
    bit_of: dict[str, int] = {}
    bits = np.zeros(len(frame), dtype=np.int64)
    frame = frame.copy(deep=False)  # columns are replaced, never changed in place (copy-on-write)
    vpp = np.nan_to_num(to_float(frame["vpp"], _blank(frame["vpp"])), nan=1.0) if "vpp" in frame.columns else \
        np.ones(len(frame))
    n = len(frame)
    uneven: np.ndarray | None = None  # rows a when_uneven stack splits with the embedding and the loss
    for stack in present:
        rows = np.isin(codes_, np.flatnonzero(names == stack))
        for key, value in profile(stack).items():
            if key not in knobs or value == "auto":
                continue
            target = rows & (_blank(frame[key]) if key in frame.columns else True)
            if not target.any():
                continue
            # a value per row (when_vpp, when_uneven, or one per ZeRO stage), or one value for every row
            if value == "when_vpp":
                per_row: np.ndarray | None = np.where(vpp > 1, "1", "0").astype(object)
            elif value == "when_uneven":
                if uneven is None:
                    uneven = embedding_loss_where_uneven(_layers(frame), _column(frame, "pp"), vpp)
                per_row = np.asarray(codes.PIPELINE_SPLIT, dtype=object)[uneven.astype(np.int64)]
            else:
                per_row = per_zero(value, _zero_stage(frame))
            values = [value] if per_row is None else sorted(set(per_row[target].tolist()))
            present_column = frame[key] if key in frame.columns else None
            if present_column is not None and present_column.dtype.kind in "iufb" and all(v.isdigit()
                                                                                            for v in values):
                # numbers (a typed frame) stay numbers
                vals = np.full(n, float(value)) if per_row is None else per_row.astype(np.float64)
                frame[key] = pd.Series(np.where(target, vals, present_column.to_numpy(dtype=np.float64)),
                                       index=frame.index)
            elif present_column is None or is_categorical(present_column):
                # a new column, or a factorized table's: a Categorical (no string per row)
                old: list[str] = [] if present_column is None else [str(c) for c in present_column.cat.categories]
                categories: list[str] = old + [v for v in values if v not in old]
                codes_now = np.full(n, -1, dtype=np.int64) if present_column is None else \
                    np.asarray(present_column.cat.codes, dtype=np.int64)
                lookup = {v: i for i, v in enumerate(categories)}
                fill_code = lookup[value] if per_row is None else pd.Series(per_row).map(lookup).fillna(-1).to_numpy(
                    dtype=np.int64)
                fill_codes = np.where(target, fill_code, codes_now).astype(np.int64)
                frame[key] = pd.Series(pd.Categorical.from_codes(fill_codes, pd.Index(categories)), index=frame.index)
            elif (text := _arrow_text(present_column)) is not None:
                # text cells (a case file): one Arrow select, no Python object per cell
                fill = (pa.scalar(value) if per_row is None else pa.array(per_row.astype(str))).cast(text.type)
                frame[key] = pd.Series(pc.if_else(pa.array(target), fill, text), dtype="str", index=frame.index)
            else:  # numbers with a name to fill, or mixed cells: objects
                vals = np.full(n, value, dtype=object) if per_row is None else per_row
                column = frame[key].to_numpy(dtype=object).copy()
                column[target] = vals[target]
                frame[key] = pd.Series(column, index=frame.index, dtype=object)  # no per-cell string inference
            if record:  # what validate --json reports (tables skip it)
                bits[target] |= np.int64(1) << bit_of.setdefault(key, len(bit_of))
    if record and bits.any():
        name_code, name_values = pd.factorize(np.append(names, "")[codes_])  # per row; a missing cell (-1): ""
        stage = zero_stage_index(_zero_stage(frame))
        split = np.zeros(n, dtype=np.int64) if uneven is None else uneven.astype(np.int64)
        combo_key = (name_code.astype(np.int64) << 41) | (bits << 4) | (split << 3) | (stage << 1) | (vpp > 1)
        combos, group = np.unique(combo_key, return_inverse=True)
        group = group.reshape(-1)
        records: list[dict[str, object]] = []
        for combo in combos.tolist():
            stack, mask, split_code, zero, interleaved = (str(name_values[combo >> 41]), (combo >> 4) & (2**37 - 1),
                                                          (combo >> 3) & 1, (combo >> 1) & 3, combo & 1)
            prof = profile(stack) if stack else {}
            records.append({knob: (("1" if interleaved else "0") if prof[knob] == "when_vpp"
                                   else codes.PIPELINE_SPLIT[split_code] if prof[knob] == "when_uneven"
                                   else prof[knob].split("/")[zero] if "/" in prof[knob] else prof[knob])
                            for knob, bit in bit_of.items() if mask >> bit & 1})
        distinct = np.empty(len(records), dtype=object)
        distinct[:] = [r if r else empty for r in records]  # one per distinct combination, not per row
        return frame, distinct[group]
    return frame, filled


def _column(frame: pd.DataFrame, key: str) -> np.ndarray:
    """A numeric column as float64 (NaN where empty or absent)."""
    if key not in frame.columns:
        return np.full(len(frame), np.nan)
    return to_float(frame[key], _blank(frame[key]))


def _layers(frame: pd.DataFrame) -> np.ndarray:
    """Each row's layer count: the row's ``layers`` cell, else its catalogued model's (NaN: neither)."""
    layers = _column(frame, "layers")
    missing = np.isnan(layers)
    if missing.any() and "model" in frame.columns:
        from dse.models.catalog import models  # the catalog only when a row leaves its layers to it

        catalog = models()["layers"]
        names = _lower_names(frame["model"], _blank(frame["model"]), "")
        position = catalog.index.get_indexer(pd.Index(names.to_numpy(dtype=object)))
        known = np.append(catalog.to_numpy(dtype=np.float64), np.nan)[np.where(position >= 0, position, len(catalog))]
        layers = np.where(missing, known, layers)
    return layers


def _zero_stage(frame: pd.DataFrame) -> np.ndarray:
    """Each row's ZeRO stage as a number (NaN where empty)."""
    if "zero" not in frame.columns:
        return np.full(len(frame), np.nan)
    return to_float(frame["zero"], _blank(frame["zero"]))


def knob_tables(names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """For sweeps: per training knob, the value each stack code (row: index into ``names``) sets at each ZeRO
    stage (column 0..3), as a float code (NaN: leave the default; WHEN_VPP_CODE, WHEN_UNEVEN_CODE: resolved per
    row by the sweep).  ``names`` is the spec's
    stack vocabulary."""
    out: dict[str, np.ndarray] = {}
    for key, vocab in TRAIN_KNOBS.items():
        arr = np.full((len(names), 4), np.nan)
        for i, stack in enumerate(names):
            value = profile(stack).get(key)
            if value is None or value == "auto":
                continue
            parts = value.split("/") if "/" in value else [value] * 4
            arr[i] = [WHEN_VPP_CODE if v == "when_vpp" else WHEN_UNEVEN_CODE if v == "when_uneven"
                      else float(vocab.index(v)) for v in parts]
        out[key] = arr
    return out


def training_stack(stack: str) -> bool:
    """A stack whose profile sets training knobs (dse/stacks.csv)."""
    return any(k in TRAIN_KNOBS for k in profile(stack))


def stack_task_mismatch(stack: str, task: str) -> str | None:
    """Why ``stack`` cannot fill a ``task`` configuration, or None.  A training stack (its profile sets training
    knobs: dse/stacks.csv) fills nothing of a serving engine, and an inference engine nothing of a training run,
    so either on the other task would silently mean the defaults."""
    training = training_stack(stack)
    if task == "train" and not training:
        return "an inference stack: it sets no training knob"
    if task != "train" and training:
        return "a training stack: it sets no serving-engine setting"
    return None


def stacks_for_task(task: str) -> list[str]:
    return [s for s in stack_names() if stack_task_mismatch(s, task) is None]
