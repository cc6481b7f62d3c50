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
    assert {"default", "gpt3-175b-a100-1024", "llama3-70b-h100", "scaling-gpus", "llama2-70b-inference",
            "serve-slo-h200"} <= names


def test_default_space_is_a_few_hundred_thousand_points_and_sweeps(tmp_path):
    spec = load_spec(Path(__file__).resolve().parents[1] / "spaces" / "default.yaml")
    assert 100_000 <= spec.size <= 1_000_000
    stats = run(prepare(spec, tmp_path / "default"), jobs=1, progress=False)
    frame = pd.read_parquet(tmp_path / "default", columns=["model", "system", "fits", "tokens_per_s_per_gpu"])
    assert stats["rows"] == len(frame) > 1000
    feasible = frame[frame["fits"]]
    assert set(feasible["model"].astype(str)) == {"llama3-8b", "llama3-70b", "gpt3-175b", "mixtral-8x7b"}
    assert (feasible["tokens_per_s_per_gpu"] > 0).all()


def test_the_slo_space_answers_how_many_h200_with_the_slos_and_the_limit_beside(tmp_path):
    """Issue 22: one sweep answers "how many H200 for 2,000 requests/min of 1k/256 at TTFT p99 <= 1 s and >= 30
    tokens/s per user".  Every row written meets both SLOs at the offered rate; dse info ranks them fewest GPUs
    first (output tokens/s per GPU at a fixed rate) and shows the SLO columns and the binding limit."""
    from dse.info import format_info

    spec = load_spec(Path(__file__).resolve().parents[1] / "spaces" / "serve-slo-h200.yaml")
    run(prepare(spec, tmp_path / "slo"), jobs=1, progress=False)
    rows = pd.read_parquet(tmp_path / "slo")
    assert len(rows) and (rows["ttft_p99_s"] <= 1.0).all() and (rows["tokens_per_s_per_user"] >= 30).all()
    assert rows["requests_per_s"].to_numpy() == pytest.approx(2000 / 60, rel=1e-5)
    assert rows["limit"].astype(str).isin(["compute", "bandwidth"]).all()
    fewest = rows.loc[rows["output_tokens_per_s_per_gpu"].idxmax(), "gpus"]
    assert fewest == rows["gpus"].min()
    text = format_info(tmp_path / "slo")
    lines = text.splitlines()
    (at,) = [i for i, ln in enumerate(lines) if "output_tokens_per_s_per_gpu" in ln and "limit" in ln]
    assert "ttft_p99_s" in lines[at] and "tokens_per_s_per_user" in lines[at]
    assert lines[at + 1].split()[2] == str(int(fewest))  # model, system, gpus: the best row has the fewest
