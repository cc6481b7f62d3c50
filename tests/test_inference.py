"""Inference model: invariants the issue names, and the op classification."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dse
from dse import codes
from dse.cost.inference import INFER_METRICS, infer_step, inference_ops
from dse.hardware import catalog as hwcat
from dse.models.catalog import models


def _inputs(model: str = "llama2-7b", **changes):
    row = models().loc[model]
    x = {k: float(row[k]) for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "experts",
                                     "top_k", "tied_embeddings")}
    x.update({"mlp": float(row["mlp_code"]), "gpus": 1.0, "tp": 1.0, "pp": 1.0, "dp": 1.0, "batch": 1.0,
              "input_len": 512.0, "output_len": 128.0, "precision": float(codes.PRECISION_BF16),
              "kv_precision": 0.0})
    x.update({k: float(v) for k, v in changes.items()})
    return x


SYSTEMS = hwcat.system_names()


@pytest.mark.parametrize("system", SYSTEMS)
def test_decode_at_batch_one_is_memory_bound_on_every_gpu(system):
    hw = hwcat.hardware_columns(hwcat.system_codes([system]))
    precision = codes.PRECISION_FP8 if hw["tensor_fp8_flops"][0] > 0 else codes.PRECISION_BF16
    ops = inference_ops(_inputs(precision=precision), hw)
    for name, op in ops.items():
        if name.startswith("decode/"):
            assert bool(op["memory_bound"][0]), (system, name, op["intensity"][0], op["ridge"][0])


def test_long_prefill_gemms_are_compute_bound():
    hw = hwcat.hardware_columns(hwcat.system_codes(["h100-sxm-80gb"]))
    ops = inference_ops(_inputs(batch=8, input_len=2048), hw)
    for name in ("qkv_proj", "out_proj", "ffn_up", "ffn_down"):
        assert not bool(ops[f"prefill/{name}"]["memory_bound"][0])


def test_kv_cache_grows_linearly_with_batch_and_length():
    hw = hwcat.hardware_columns(hwcat.system_codes(["h100-sxm-80gb"]))
    batch = np.array([1.0, 2.0, 4.0, 8.0])
    out = infer_step({**_inputs(), "batch": batch}, hw)
    np.testing.assert_allclose(out["kv_cache_bytes"] / batch, out["kv_cache_bytes"][0], rtol=1e-6)
    total = np.array([256.0, 512.0, 1024.0])  # input + output length
    out = infer_step({**_inputs(), "input_len": total - 128.0, "output_len": 128.0}, hw)
    np.testing.assert_allclose(out["kv_cache_bytes"] / total, out["kv_cache_bytes"][0] / total[0], rtol=1e-6)
    # and the formula: batch * length * layers * 2 (K, V) * kv_heads * head_dim * 2 bytes
    row = models().loc["llama2-7b"]
    expected = 1 * 640 * row.layers * 2 * row.kv_heads * (row.hidden / row.heads) * 2
    assert infer_step(_inputs(), hw)["kv_cache_bytes"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("system", ["a100-sxm-80gb", "h100-sxm-80gb", "b200", "rtx4090"])
@pytest.mark.parametrize("batch", [1, 8, 32])
def test_int4_weights_never_slow_a_memory_bound_decode(system, batch):
    hw = hwcat.hardware_columns(hwcat.system_codes([system]))
    precisions = np.array([codes.PRECISION_BF16, codes.PRECISION_INT8, codes.PRECISION_INT4], dtype=float)
    out = infer_step({**_inputs(batch=batch), "precision": precisions}, hw)
    tpot = out["tpot_s"]
    assert tpot[2] <= tpot[1] <= tpot[0]


def test_outputs_positive_and_consistent():
    hw = hwcat.hardware_columns(hwcat.system_codes(["a100-sxm-80gb"]))
    out = infer_step(_inputs(batch=4, output_len=200), hw)
    for key in INFER_METRICS:
        assert np.isfinite(out[key]).all() and (out[key] >= 0).all(), key
    assert out["e2e_latency_s"] == pytest.approx(out["ttft_s"] + 199 * out["tpot_s"], rel=1e-5)
    assert out["output_tokens_per_s"] == pytest.approx(4 * 200 / out["e2e_latency_s"], rel=1e-5)
    assert out["max_batch"] >= 4 and bool(out["fits"])


def test_unsupported_precision_and_tp_get_reasons():
    hw = hwcat.hardware_columns(hwcat.system_codes(["a100-sxm-80gb"]))
    out = infer_step(_inputs(precision=codes.PRECISION_FP8), hw)
    assert codes.REASONS[int(out["reason"][0])] == "precision_unsupported_by_system"
    assert np.isnan(out["tpot_s"])
    out = infer_step(_inputs("llama2-70b", tp=3, gpus=3), hw)
    assert codes.REASONS[int(out["reason"][0])] == "heads % tp != 0"


def test_python_api_evaluates_inference_rows():
    frame = pd.DataFrame([
        {"task": "infer", "model": "llama2-70b", "system": "h100-sxm-80gb", "tp": 4, "batch": 16,
         "input_len": 1024, "output_len": 256, "precision": "fp8"},
        {"task": "train", "model": "llama3-8b", "system": "h100-sxm-80gb", "gpus": 8, "tp": 1, "pp": 1,
         "global_batch": 64, "seq_len": 8192},
    ])
    out = dse.evaluate(frame)
    assert np.isfinite(out.loc[0, "tpot_s"]) and np.isnan(out.loc[0, "step_time_s"])
    assert np.isfinite(out.loc[1, "step_time_s"]) and np.isnan(out.loc[1, "tpot_s"])


def test_expert_width_efficiency_is_linear_below_the_full_width():
    """Routed experts narrower than MOE_GEMM_FULL_WIDTH run their grouped GEMMs at f / f_full of the fitted rate
    (Qwen3-30B's 768: 0.62), wider ones at 1 (DeepSeek-V3's 2048, gpt-oss's 2880), and f = 0 (no routed experts)
    at 1."""
    from dse.cost import constants as K
    from dse.cost.inference import expert_width_efficiency

    w = expert_width_efficiency(np.array([0.0, 768.0, K.MOE_GEMM_FULL_WIDTH, 2048.0, 2880.0]))
    assert w.tolist() == pytest.approx([1.0, 768.0 / K.MOE_GEMM_FULL_WIDTH, 1.0, 1.0, 1.0])
