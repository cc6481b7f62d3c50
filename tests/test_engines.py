"""Issue 22 item 5: what differs between serving engines, as profile knobs that do what their sources say."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.cost import constants as K
from dse.cost import serving
from dse.frame import serve_inputs
from dse.hardware import catalog as hwcat


def _capacity(stack: str, **row) -> dict[str, np.ndarray]:
    """The KV capacity terms of one serve row under ``stack`` (the kernel's own function)."""
    frame = pd.DataFrame([{"model": "llama3-70b", "system": "h100-sxm-80gb", "tp": 2, "input_len": 1000,
                           "output_len": 101, "precision": "fp8", "stack": stack, **row}])
    x, systems = serve_inputs(frame)
    x.update({k: np.asarray(v, dtype=np.float64) for k, v in hwcat.hardware_columns(systems).items()})
    budget = np.where(np.isnan(x["max_num_tokens"]), np.inf, x["max_num_tokens"])
    return {**serving._kv_capacity(x, budget), "hbm": x["hbm_bytes"], "basis": x["kv_memory_basis"]}


def test_kv_fraction_of_the_whole_memory_or_of_what_is_left():
    """vLLM's gpu_memory_utilization bounds weights + activations + KV (worker.py: total x 0.9 - peak); TensorRT-LLM's
    free fraction takes 0.9 of what the weights and activations leave.  Same 0.9, less KV for vLLM by 0.1 x the
    memory in use."""
    vllm, trt = _capacity("vllm-0.11"), _capacity("tensorrt-llm-1.0")
    used = trt["weights"] + trt["activations"] + K.RUNTIME_RESERVED_BYTES
    assert vllm["basis"][0] == 1.0 and trt["basis"][0] == 0.0
    assert trt["kv_budget"] == pytest.approx(0.9 * (trt["hbm"] - used), rel=1e-6)
    assert vllm["kv_budget"] == pytest.approx(0.9 * vllm["hbm"] - used, rel=1e-6)
    assert (trt["kv_budget"] - vllm["kv_budget"]) == pytest.approx(0.1 * used, rel=1e-6)


def test_an_unset_basis_is_the_free_fraction_of_before():
    """A stack that names no basis (nim-llm-1.8.0, tensorrt-llm-*) keeps today's formula exactly."""
    nim = _capacity("nim-llm-1.8.0")
    used = nim["weights"] + nim["activations"] + K.RUNTIME_RESERVED_BYTES
    assert nim["basis"][0] == 0.0 and np.array_equal(nim["kv_budget"], 0.9 * (nim["hbm"] - used))
