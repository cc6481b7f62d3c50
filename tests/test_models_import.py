"""Today's models (issue 23): Hugging Face configs read into the catalog's columns, and bad model input."""

from __future__ import annotations

import json
import math

import pytest

from dse.cli import main
from dse.cost.architecture import ARCHITECTURE_CATEGORIES
from dse.models.catalog import models
from dse.models.hf import ConfigError, hf_to_model, read_config
from tests.conftest import REPO

CONFIGS = sorted((REPO / "tests" / "hf_configs").glob("*.json"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_imported_config_equals_the_catalog_row(path):
    """The published config.json (tests/hf_configs, sources in SOURCES.md) and the hand-written catalog row agree
    on every column the importer sets: two independent transcriptions of the same model."""
    got = hf_to_model(read_config(path), str(path))
    row = models().loc[path.stem]
    for key, value in got.items():
        if key == "max_seq_len":
            continue
        want = row[key]
        if key == "moe_ffn_hidden" and (want is None or (isinstance(want, float) and math.isnan(want))):
            want = row["ffn_hidden"]  # empty = ffn_hidden
        if key in ("mlp", *ARCHITECTURE_CATEGORIES):
            assert str(want) == str(value), key
        else:
            assert float(want) == float(value), (path.stem, key, value, want)


def test_unknown_model_type_and_unmodelled_layer_types_are_refused(tmp_path):
    jamba = tmp_path / "config.json"
    jamba.write_text(json.dumps({"model_type": "jamba", "hidden_size": 4096}))
    with pytest.raises(ConfigError, match="model_type.*'jamba'.*allowed: llama"):
        hf_to_model(read_config(jamba), str(jamba))
    hybrid = {**json.loads((REPO / "tests/hf_configs/gpt-oss-20b.json").read_text()),
              "layer_types": ["linear_attention", "full_attention"] * 12}
    with pytest.raises(ConfigError, match="layer_types.*linear_attention"):
        hf_to_model(hybrid)
    unknown = {**json.loads((REPO / "tests/hf_configs/qwen3-32b.json").read_text()), "mamba_d_state": 16}
    with pytest.raises(ConfigError, match="'mamba_d_state'.*not known"):
        hf_to_model(unknown)


def test_models_import_cli_prints_a_row_and_exits_2_on_bad_input(tmp_path, capsys):
    assert main(["models", "import", str(REPO / "tests/hf_configs/deepseek-v3.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    header, row = out[0].split(","), out[1].split(",")
    cells = dict(zip(header, row, strict=True))
    assert cells["attention_kind"] == "mla" and cells["kv_lora_rank"] == "512" and cells["dense_layers"] == "3"
    assert cells["moe_quant"] == "fp8_block"  # quantization_config: fp8 with 128x128 weight blocks
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"model_type": "rwkv"}))
    assert main(["models", "import", str(bad)]) == 2
    assert "model_type" in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "column", "allowed"), [
    ({"kv_lora_rank": 512}, "kv_lora_rank", "unless attention_kind is mla"),
    ({"shared_experts": 1}, "shared_experts", "unless the model has experts"),
    ({"sliding_window": 0}, "sliding_window", "allowed"),
    ({"attention_kind": "mla"}, "kv_lora_rank", "attention_kind mla needs"),
])
def test_bad_architecture_cells_name_the_column(extra, column, allowed):
    import pandas as pd

    from dse.frame import InputError, evaluate

    row = {"task": "train", "model": "x", "layers": 4, "hidden": 1024, "heads": 8, "vocab": 32000,
           "system": "h100-sxm-80gb", "gpus": 8, "tp": 1, "global_batch": 8, "seq_len": 1024, **extra}
    with pytest.raises(InputError, match=f"'{column}'.*{allowed}"):
        evaluate(pd.DataFrame([row]))


def test_etp_that_does_not_tile_the_stage_is_a_reason_not_an_exception():
    import pandas as pd

    from dse.frame import evaluate

    row = {"task": "train", "model": "qwen3-30b-a3b", "system": "h100-sxm-80gb", "gpus": 8, "tp": 1, "ep": 8,
           "etp": 2, "global_batch": 64, "seq_len": 4096}
    out = evaluate(pd.DataFrame([row]))
    assert out["infeasible_reason"].iloc[0] == "(tp*cp*dp) % (ep*etp) != 0"


def _serve_row(**kw):
    row = {"task": "serve", "model": "deepseek-v3", "system": "b200", "tp": 1, "dp": 4, "input_len": 1024,
           "output_len": 1024, "precision": "fp4", "concurrency": 64}
    row.update(kw)
    return row


def test_wide_expert_parallelism_splits_the_experts_over_ep_gpus():
    """Serving with attention-DP + EP (TensorRT-LLM's DEP4): each of the 4 GPUs holds 1/4 of the routed
    experts.  The weights it drops against ep = 1 are 3/4 of the routed experts: 58 MoE layers x 256 experts x
    3 x 7168 x 2048 parameters (DeepSeek-V3's config.json: 61 layers, first_k_dense_replace 3,
    n_routed_experts 256, moe_intermediate_size 2048), at 0.5 byte (fp4)."""
    import pandas as pd

    from dse.frame import evaluate

    out = evaluate(pd.DataFrame([_serve_row(ep=4), _serve_row(ep=1)]))
    routed = 58 * 256 * 3 * 7168 * 2048
    drop = out["weights_bytes"].iloc[1] - out["weights_bytes"].iloc[0]
    assert drop == pytest.approx(0.75 * routed * 0.5, rel=1e-6)
    assert out["infeasible_reason"].iloc[1] == "exceeds_hbm"  # 671B in fp4 on one B200: no
    assert out["fits"].iloc[0]


def test_expert_parallel_group_must_tile_the_replicas():
    import pandas as pd

    from dse.frame import evaluate

    out = evaluate(pd.DataFrame([_serve_row(ep=8)]))
    assert out["infeasible_reason"].iloc[0] == "(tp*dp) % ep != 0"


def test_mtp_speculative_decoding_speeds_decode_as_deepseek_reports():
    """DeepSeek-V3 §5.4.3: with its MTP module as the drafter, 85-90 % of second tokens are accepted and decoding
    runs about 1.8x the tokens per second.  dse keeps a step's 1 + α tokens and charges the draft module (one
    layer, its projection and the head) and the verification of two tokens, so the speed-up per user at one
    client lies below 1 + α = 1.85 and well above 1."""
    import pandas as pd

    from dse.frame import evaluate

    base = {"task": "serve", "model": "deepseek-v3", "system": "h200-sxm-141gb", "tp": 8, "input_len": 1000,
            "output_len": 1000, "precision": "fp8", "concurrency": 1, "stack": "tensorrt-llm-1.0"}
    out = evaluate(pd.DataFrame([base, {**base, "spec_tokens": 1}]))
    speedup = out["tokens_per_s_per_user"].iloc[1] / out["tokens_per_s_per_user"].iloc[0]
    assert 1.4 < speedup < 1.85
    llama = evaluate(pd.DataFrame([{**base, "model": "llama3.3-70b", "spec_tokens": 1}]))
    assert llama["infeasible_reason"].iloc[0] == "spec_tokens needs mtp modules"


def test_expert_load_imbalance_paces_the_routed_gemms_and_the_all_to_all():
    """moe_imbalance = 1.25 (the busiest expert GPU gets 25 % more tokens than the mean, Switch Transformer's
    capacity factor as an example): the EP all-to-all moves 25 % more bytes; the dense parts do not change."""
    import pandas as pd

    from dse.frame import evaluate

    row = {"task": "train", "model": "qwen3-235b-a22b", "system": "gb200-nvl72", "gpus": 64, "tp": 1, "pp": 2,
           "ep": 16, "global_batch": 512, "seq_len": 4096}
    out = evaluate(pd.DataFrame([row, {**row, "moe_imbalance": 1.25}]))
    assert out["layer_ep_comm_ms"].iloc[1] > out["layer_ep_comm_ms"].iloc[0]
    assert out["layer_attention_ms"].iloc[1] == pytest.approx(out["layer_attention_ms"].iloc[0])
    assert out["layer_gemm_ms"].iloc[1] > out["layer_gemm_ms"].iloc[0]
    assert out["step_time_s"].iloc[1] > out["step_time_s"].iloc[0]
    with pytest.raises(Exception, match="moe_imbalance.*at least 1"):
        evaluate(pd.DataFrame([{**row, "moe_imbalance": 0.8}]))


def test_quantization_config_sets_the_routed_experts_format():
    """quantization_config: mxfp4 (gpt-oss) and block-scaled fp8 (DeepSeek-V3) set moe_quant; fp8 without blocks, any
    other method, or a dense model leave it empty (the row's precision); a config that is not a mapping exits 2."""
    oss = json.loads((REPO / "tests/hf_configs/gpt-oss-20b.json").read_text())
    assert hf_to_model(oss)["moe_quant"] == "mxfp4"
    assert "moe_quant" not in hf_to_model({**oss, "quantization_config": {"quant_method": "fp8"}})
    assert "moe_quant" not in hf_to_model({**oss, "quantization_config": {"quant_method": "modelopt"}})
    dense = json.loads((REPO / "tests/hf_configs/qwen3-32b.json").read_text())
    block = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    assert "moe_quant" not in hf_to_model({**dense, "quantization_config": block})
    with pytest.raises(ConfigError, match="'quantization_config'.*allowed: a mapping"):
        hf_to_model({**oss, "quantization_config": "mxfp4"})


def test_moe_quant_is_read_checked_and_sizes_the_expert_weights():
    """moe_quant: a bad name or a format for a model without experts is refused naming the column; the catalog's
    mxfp4 for gpt-oss-20b stores its routed experts at 4.25 bits instead of 16: the weights shrink by exactly
    layers x experts x 3 x h x f x (2 - 0.53125) bytes (24 x 32 x 3 x 2880 x 2880 routed weights)."""
    import pandas as pd

    import dse
    from dse.frame import InputError

    row = {"model": "gpt-oss-20b", "system": "h100-sxm-80gb", "gpus": 1, "tp": 1, "precision": "bf16",
           "input_len": 100, "output_len": 100, "task": "serve"}
    with pytest.raises(InputError, match="'moe_quant': value 'nvfp4'.*allowed: tensor, fp8_block, mxfp4"):
        dse.evaluate(pd.DataFrame([{**row, "moe_quant": "nvfp4"}]))
    with pytest.raises(InputError, match="'moe_quant': value 'mxfp4'.*experts > 1"):
        dse.evaluate(pd.DataFrame([{**row, "model": "llama3-8b", "moe_quant": "mxfp4"}]))
    out = dse.evaluate(pd.DataFrame([{**row, "moe_quant": "tensor"}, {**row, "moe_quant": None}]))
    routed = 24 * 32 * 3 * 2880 * 2880
    saved = out["weights_bytes"].iloc[0] - out["weights_bytes"].iloc[1]
    assert saved == pytest.approx(routed * (2.0 - 0.53125), rel=1e-5)
