"""Model catalog: transformer dimensions by name, each row with its source (``models.csv``)."""

from __future__ import annotations

from functools import cache
from importlib import resources

import numpy as np
import pandas as pd

from dse.codes import MLP, encode
from dse.cost.architecture import ARCHITECTURE_CATEGORIES, ARCHITECTURE_INTEGERS, code_column

#: Dimension columns every model (catalogued or custom) must provide.
MODEL_COLUMNS: tuple[str, ...] = (
    "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "experts", "top_k",
)


@cache
def models() -> pd.DataFrame:
    """The model catalog indexed by name; integer dimensions, ``mlp`` as a code."""
    path = resources.files("dse.models").joinpath("models.csv")
    with path.open("r", encoding="utf-8") as fh:
        frame = pd.read_csv(fh, dtype={"name": str})
    for col in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "experts", "top_k",
                "tied_embeddings", "linear_bias"):
        frame[col] = pd.to_numeric(frame[col], errors="raise").astype(np.int64)
    frame["mlp_code"] = encode(frame["mlp"].to_numpy(), MLP, key="models.csv mlp")
    # optional architecture columns (dse.cost.architecture): empty = not set (NaN here, 0 in the kernels)
    frame["active_published_b"] = pd.to_numeric(frame["active_published_b"], errors="raise").astype(np.float64)
    for col in ARCHITECTURE_INTEGERS:
        frame[col] = pd.to_numeric(frame[col], errors="raise").astype(np.float64)
    for col, names in ARCHITECTURE_CATEGORIES.items():
        kind = frame[col].astype(object).where(frame[col].notna(), names[0])
        frame[code_column(col)] = encode(kind.to_numpy(), names, key=f"models.csv {col}")
    return frame.set_index("name", drop=False)


def model_names() -> tuple[str, ...]:
    return tuple(models().index)


def model_row(name: str) -> pd.Series:
    """One catalog row; raises ``KeyError`` listing the known names."""
    cat = models()
    key = name.strip().lower()
    if key not in cat.index:
        raise KeyError(f"model {name!r} is not in the catalog; known models: {', '.join(cat.index)}")
    row: pd.Series = cat.loc[key]  # type: ignore[assignment]  # a unique index gives one row
    return row


def model_record(rows: pd.DataFrame) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(model columns as float arrays, :func:`dse.cost.architecture.layer_record`) of catalog-shaped ``rows``
    (e.g. ``models().loc[["deepseek-v3"]]``): the record the cost kernels read, for callers that derive counts."""
    from dse.cost.architecture import ARCHITECTURE_COLUMNS, layer_record

    x = {k: rows[k].to_numpy(dtype=np.float64) for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden",
                                                       "vocab", "experts", "top_k", "tied_embeddings")}
    x["mlp"] = rows["mlp_code"].to_numpy(dtype=np.float64)
    for k in ARCHITECTURE_COLUMNS:
        x[k] = np.nan_to_num(rows[code_column(k)].to_numpy(dtype=np.float64))
    return x, layer_record(x)


def parameter_counts(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(total, active, active without the input embedding) parameters of catalog-shaped ``rows``, from the model
    record of :mod:`dse.cost.architecture` (what the cost kernels use): L mean layers + the input embedding
    + the output layer when untied.  Active counts the k routed experts a token visits; sources differ on
    counting the input embedding (a lookup, no FLOPs): OpenAI's gpt-oss card leaves it out, DeepSeek and Qwen
    count it.  MTP modules are not counted (DeepSeek-V3 publishes them apart)."""
    from dse.cost.architecture import active_layer_params, layer_params

    x, rec = model_record(rows)
    h, E, V, L = x["hidden"], x["experts"], x["vocab"], x["layers"]
    embed = V * h
    output = V * h * (x["tied_embeddings"] <= 0)
    total = L * layer_params(rec, h, E) + embed + output
    active = L * active_layer_params(rec, h, E, x["top_k"]) + embed + output
    return total, active, active - embed
