"""The shipped spaces load, and the default one sweeps quickly (what `make run` does)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dse.runner import prepare, run
from dse.spec import load_spec

SPACES = sorted((Path(__file__).resolve().parents[1] / "spaces").glob("*.yaml"))


@pytest.mark.parametrize("path", SPACES, ids=[p.stem for p in SPACES])
def test_space_loads(path):
    spec = load_spec(path)
    assert spec.size > 0 and spec.name == path.stem


def test_required_spaces_exist():
    names = {p.stem for p in SPACES}
    assert {"default", "gpt3-175b-a100-1024", "llama3-70b-h100", "scaling-gpus", "llama2-70b-inference"} <= names


def test_default_space_is_a_few_hundred_thousand_points_and_sweeps(tmp_path):
    spec = load_spec(Path(__file__).resolve().parents[1] / "spaces" / "default.yaml")
    assert 100_000 <= spec.size <= 1_000_000
    stats = run(prepare(spec, tmp_path / "default"), jobs=1, progress=False)
    frame = pd.read_parquet(tmp_path / "default", columns=["model", "system", "fits", "tokens_per_s_per_gpu"])
    assert stats["rows"] == len(frame) > 1000
    feasible = frame[frame["fits"]]
    assert set(feasible["model"].astype(str)) == {"llama3-8b", "llama3-70b", "gpt3-175b", "mixtral-8x7b"}
    assert (feasible["tokens_per_s_per_gpu"] > 0).all()
