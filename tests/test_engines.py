"""Issue 22 item 5: serving-engine profiles (vLLM, SGLang, TGI, LightLLM, TensorRT-LLM, NIM).  Every profile
loads with values of each knob's kind and a cited source, every serving stack evaluates a row, and the knob values
the new profiles rely on do what their sources say."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.cost import constants as K
from dse.cost import serving
from dse.frame import evaluate, serve_inputs
from dse.hardware import catalog as hwcat
from dse.stacks import SERVE_KNOBS, SERVE_VALUE_CODES, STACKS, profile, profiles

NEW = ("vllm-0.4", "vllm-0.6", "vllm-0.8", "sglang-0.3", "sglang-0.4", "tgi-2.0", "tgi-3.0", "lightllm-2023")
SERVING = tuple(s for s in STACKS if any(k in profile(s) for k in SERVE_KNOBS if k != "cuda_graphs"))


def test_every_engine_profile_is_known_and_sets_engine_knobs():
    assert set(NEW) <= set(SERVING)
    assert {"tensorrt-llm-0.10.0", "tensorrt-llm-1.0", "vllm-0.11", "sglang-0.5", "nim-llm-1.8.0"} <= set(SERVING)
    for stack in NEW:
        assert {"kv_block_tokens", "chunked_prefill", "cuda_graphs", "kv_reservation"} <= set(profile(stack)), stack


@pytest.mark.parametrize("stack", SERVING)
def test_engine_values_are_of_their_kind_and_sourced(stack):
    table = profiles()
    rows = table[table["stack"] == stack]
    for key, value, source in zip(rows["key"], rows["value"], rows["source"], strict=True):
        assert len(source.strip()) > 20, (stack, key)
        if key in SERVE_VALUE_CODES:
            assert value in SERVE_VALUE_CODES[key], (stack, key, value)
        elif SERVE_KNOBS.get(key) == "integer":
            assert value.isdigit() and int(value) >= 1, (stack, key, value)
        elif SERVE_KNOBS.get(key) == "0 or 1":
            assert value in ("0", "1"), (stack, key, value)
        elif key == "kv_memory_fraction":
            assert 0.0 < float(value) <= 1.0, (stack, key, value)
    if stack in NEW:  # read at a tag or a commit, file named
        assert all("@" in src for src in rows["source"]), stack


@pytest.mark.parametrize("row", ["vllm-0.8,max_batch,0", "vllm-0.8,kv_memory_fraction,1.5",
                                 "vllm-0.8,cuda_graphs,2", "vllm-0.8,kv_memory_basis,half",
                                 "vllm-0.8,max_num_tokens,8k"])
def test_a_profile_with_a_value_of_the_wrong_kind_is_refused(monkeypatch, row):
    from importlib import resources

    from dse import stacks

    text = resources.files("dse").joinpath("stacks.csv").read_text(encoding="utf-8")
    stack, key, value = row.split(",")
    kept = "\n".join(ln for ln in text.splitlines() if not ln.startswith(f"{stack},{key},"))
    bad = f'{kept}\n{row},"a source long enough to pass the check"\n'

    class Files:
        def joinpath(self, name):
            return self

        def read_text(self, encoding):
            return bad

    monkeypatch.setattr(stacks.resources, "files", lambda package: Files())
    stacks.profiles.cache_clear()
    try:
        with pytest.raises(ValueError, match=f"{key} = '{value}'"):
            stacks.profiles()
    finally:
        monkeypatch.undo()
        stacks.profiles.cache_clear()


@pytest.mark.parametrize("stack", SERVING)
def test_a_serve_row_evaluates_with_every_engine(stack):
    rows = pd.DataFrame([
        {"task": "serve", "model": "llama3-70b", "system": "h100-sxm-80gb", "tp": 2, "input_len": 1000,
         "output_len": 1000, "precision": "fp8", "stack": stack},
        {"task": "serve", "model": "llama2-7b", "system": "a800-sxm-80gb", "tp": 1, "input_len": 512,
         "output_len": 512, "precision": "fp16", "stack": stack, "request_rate": 2.0},
        {"task": "serve", "model": "llama3-70b", "system": "a100-sxm-80gb", "tp": 1, "input_len": 128,
         "output_len": 128, "precision": "fp16", "stack": stack},  # 141 GB of weights on 80 GB: a reason
    ])
    out = evaluate(rows)
    assert np.isfinite(out["output_tokens_per_s_per_gpu"].iloc[:2]).all() and (out["ttft_s"].iloc[:2] > 0).all()
    assert np.isnan(out["output_tokens_per_s_per_gpu"].iloc[2]) and out["infeasible_reason"].iloc[2]


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


def test_token_level_kv_holds_the_context_exactly_and_blocks_round_it_up():
    """LightLLM's and SGLang's token pools (block 1) hold a request's mean context as is; vLLM's 16-token blocks
    round it up to whole blocks; TGI reserves prompt + max_new_tokens at admission (queue.rs), in 16-token
    blocks.  Mean context of 1000 in / 101 out: 1000 + 50.5 tokens."""
    assert _capacity("lightllm-2023")["pages"][0] == 1051.0  # ceil(1050.5 / 1) x 1
    assert _capacity("sglang-0.4")["pages"][0] == 1051.0
    assert _capacity("vllm-0.6")["pages"][0] == 1056.0  # ceil(1050.5 / 16) x 16
    assert _capacity("tgi-2.0")["pages"][0] == 1104.0  # ceil(1101 / 16) x 16: reserved to completion
    assert _capacity("tgi-3.0")["pages"][0] == 1101.0  # flashinfer: block 1


def test_engines_without_chunked_prefill_prefill_a_prompt_in_one_pass():
    """vLLM V0, TGI 2 and LightLLM 2023 prefill whole prompts (their budget is at least the longest prompt):
    their profiles leave max_num_tokens empty, so a 16k prompt takes one pass, where V1 vLLM's 8192 takes two."""
    for stack in STACKS:
        if profile(stack).get("chunked_prefill") == "0":
            assert "max_num_tokens" not in profile(stack), stack
    rows = pd.DataFrame([{"task": "serve", "model": "llama3-8b", "system": "h100-sxm-80gb", "tp": 1, "input_len": 16384,
                          "output_len": 2, "precision": "fp8", "request_rate": 0.01, "stack": s}
                         for s in ("vllm-0.4", "vllm-0.8")])
    out = evaluate(rows)
    v0, v1 = out.iloc[0], out.iloc[1]
    # at light load TTFT is the prefill passes: one pass of 16 384 tokens against two of 8 192 each, whose
    # second re-reads the weights and attends over the first chunk's keys too
    assert v0["ttft_s"] < v1["ttft_s"]


def test_tgi_caps_running_requests_at_its_router_limit():
    """TGI's router refuses requests beyond max_concurrent_requests 128 (launcher main.rs): at maximum load the
    engine runs 128 where the KV cache holds more."""
    out = evaluate(pd.DataFrame([{"task": "serve", "model": "llama3-70b", "system": "h100-sxm-80gb", "tp": 2,
                                  "input_len": 1000, "output_len": 1000, "precision": "fp8", "stack": "tgi-2.0"}]))
    assert out["running_requests"].iloc[0] == 128 and out["kv_capacity_requests"].iloc[0] > 128
    assert out["limit"].iloc[0] == "batch"
