"""Energy and cost outputs: their definitions, checked on rows of the table API and of a sweep."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dse
from dse.hardware.catalog import systems
from dse.runner import prepare, run
from dse.spec import SpecError, resolve_spec
from dse.sweep import COST_COLUMN

TRAIN = {"task": "train", "model": "gpt3-175b", "gpus": 1024, "tp": 8, "pp": 16, "micro_batch": 1,
         "global_batch": 1536, "seq_len": 2048}


def test_training_energy_is_gpus_times_rated_power_times_step_time():
    """energy/step = GPUs · TDP · step time (all GPUs at rated power: an upper bound, stated in the README);
    energy/token divides by the tokens of a step, global_batch · seq_len."""
    frame = pd.DataFrame([{**TRAIN, "system": s} for s in ("a100-sxm-80gb", "h100-sxm-80gb", "b200")])
    out = dse.evaluate(frame)
    tdp = systems().loc[frame["system"], "tdp_w"].to_numpy()
    np.testing.assert_allclose(out["energy_per_step_j"], 1024 * tdp * out["step_time_s"], rtol=1e-6)
    np.testing.assert_allclose(out["energy_per_token_j"], out["energy_per_step_j"] / (1536 * 2048), rtol=1e-6)


def test_inference_energy_per_output_token():
    frame = pd.DataFrame([{"task": "infer", "model": "llama2-70b", "system": "h100-sxm-80gb", "tp": 4,
                           "batch": 16, "input_len": 1024, "output_len": 256, "precision": "fp8"}])
    out = dse.evaluate(frame)
    tdp = float(systems().loc["h100-sxm-80gb", "tdp_w"])
    expected = 4 * tdp * out["e2e_latency_s"] / (16 * 256)
    np.testing.assert_allclose(out["energy_per_output_token_j"], expected, rtol=1e-6)


def test_sweep_cost_per_million_tokens_from_the_spec_price(tmp_path):
    spec = resolve_spec({"name": "c", "price_per_gpu_hour": {"a100-sxm-80gb": 1.5},
                         "grid": {**{k: v for k, v in TRAIN.items() if k != "task"},
                                  "system": ["a100-sxm-80gb", "h100-sxm-80gb"]}}, "<test>")
    run(prepare(spec, tmp_path / "c"), jobs=1, progress=False)
    frame = pd.read_parquet(tmp_path / "c").set_index("system", drop=False)
    a100 = frame.loc["a100-sxm-80gb"]
    # USD = price · GPUs · hours; per million tokens of the step
    expected = 1.5 * 1024 * a100["step_time_s"] / 3600 / (1536 * 2048) * 1e6
    assert a100[COST_COLUMN] == pytest.approx(expected, rel=1e-5)
    assert np.isnan(frame.loc["h100-sxm-80gb", COST_COLUMN])  # no price given: no cost, not zero


@pytest.mark.parametrize(("price", "match"), [
    ("cheap", r"price_per_gpu_hour: value 'cheap' is not allowed; allowed: a positive number"),
    ({"tpu-v9": 1.0}, r"price_per_gpu_hour.tpu-v9: value 'tpu-v9' is not allowed; allowed: a100-sxm-80gb"),
    ({"b200": -2}, r"price_per_gpu_hour.b200: value -2 is not allowed; allowed: a positive number"),
])
def test_bad_price_names_the_key_and_allowed_values(price, match):
    with pytest.raises(SpecError, match=match):
        grid = {k: v for k, v in TRAIN.items() if k != "task"}
        resolve_spec({"name": "c", "price_per_gpu_hour": price, "grid": {**grid, "system": "b200"}}, "<test>")
