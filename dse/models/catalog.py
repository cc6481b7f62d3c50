"""Model catalog: transformer dimensions by name, each row with its source (``models.csv``)."""

from __future__ import annotations

from functools import cache
from importlib import resources

import numpy as np
import pandas as pd

from dse.codes import MLP, encode

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
