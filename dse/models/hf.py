"""A Hugging Face ``config.json`` as a dse model: its fields mapped to the model columns in one table.

``dse models import config.json`` prints the catalog row; a spec's ``models: {name: {hf_config: path}}`` reads the
same.  Every field of the config is either mapped (:data:`FIELD_MAP`), or known not to change the cost
(:data:`NO_COST_FIELDS`, each with why), or refused: a field dse cannot model (a linear-attention or Mamba layer
type, for example) or does not know exits 2 naming it.  Nothing is dropped silently.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dse.cost.select import INT_DOMAIN_MAX

#: Model types read (transformers' ``model_type``); the rest are refused by name.
MODEL_TYPES: tuple[str, ...] = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3",
    "kimi_k2", "gpt_oss", "llama4", "llama4_text",
)

#: config field -> dse column.  Several names of one quantity (transformers' model families differ) map to one
#: column; :func:`hf_to_model` applies the few rules that need two fields (see its docstring).
FIELD_MAP: dict[str, str] = {
    "num_hidden_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
    "num_key_value_heads": "kv_heads", "head_dim": "head_dim", "intermediate_size": "ffn_hidden",
    "intermediate_size_mlp": "ffn_hidden", "vocab_size": "vocab", "tie_word_embeddings": "tied_embeddings",
    "max_position_embeddings": "max_seq_len",
    "n_routed_experts": "experts", "num_experts": "experts", "num_local_experts": "experts",
    "num_experts_per_tok": "top_k", "experts_per_token": "top_k",
    "moe_intermediate_size": "moe_ffn_hidden", "n_shared_experts": "shared_experts",
    "first_k_dense_replace": "dense_layers",
    "moe_layer_freq": "moe_every", "interleave_moe_layer_step": "moe_every", "decoder_sparse_step": "moe_every",
    "kv_lora_rank": "kv_lora_rank", "q_lora_rank": "q_lora_rank", "qk_rope_head_dim": "qk_rope_dim",
    "qk_nope_head_dim": "qk_nope_dim", "v_head_dim": "v_head_dim",
    "sliding_window": "sliding_window", "attention_chunk_size": "attention_chunk", "layer_types": "global_every",
    "num_nextn_predict_layers": "mtp", "hidden_act": "mlp",
}

#: Fields that do not change the cost dse models, and why.
NO_COST_FIELDS: dict[str, str] = {
    **{k: "metadata" for k in ("architectures", "model_type", "torch_dtype", "transformers_version", "auto_map",
                               "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "initializer_range",
                               "_name_or_path", "dtype", "for_llm_compressor")},
    **{k: "numerics, not shapes" for k in ("rms_norm_eps", "layer_norm_epsilon", "rope_theta", "rope_scaling",
                                           "rope_interleave", "attention_dropout", "hidden_dropout",
                                           "router_aux_loss_coef", "router_z_loss_coef", "aux_loss_alpha",
                                           "seq_aux", "norm_topk_prob", "scoring_func", "topk_method", "n_group",
                                           "topk_group", "routed_scaling_factor", "swiglu_limit",
                                           "attn_temperature_tuning", "floor_scale", "attn_scale",
                                           "output_router_logits", "router_jitter_noise", "use_qk_norm",
                                           "qk_layernorm", "ep_size")},
    "attention_bias": "biases are neglected (< 0.1 % of the FLOPs and bytes)",
    "mlp_bias": "biases are neglected (< 0.1 % of the FLOPs and bytes)",
    "quantization_config": "read for moe_quant (QUANT_METHODS); the other weights' format is the row's precision",
    "max_window_layers": "only with use_sliding_window true (refused then)",
    "use_sliding_window": "read with sliding_window",
    "mlp_only_layers": "read with decoder_sparse_step (must be empty)",
    "no_rope_layers": "Llama 4: the layers without RoPE are its global-attention layers (global_every)",
    "text_config": "Llama 4: the text model's fields are read from it",
    "vision_config": "the vision encoder is not modelled (text generation only)",
}

#: quantization_config -> moe_quant (how the checkpoint stores its routed experts): quant_method mxfp4 (gpt-oss), fp8
#: with a weight_block_size (DeepSeek-V3, Kimi K2: 128x128 blocks).  Any other method: the row's precision, one
#: scale per tensor (moe_quant tensor, the default).
QUANT_METHODS: dict[str, str] = {"mxfp4": "mxfp4", "fp8": "fp8_block"}

#: Activation names of a gated FFN (SwiGLU: gate, up, down) and of two-matrix ones.
GATED = ("silu", "swiglu", "swish")
TWO_MATRIX = {"gelu": "gelu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "relu2": "relu2"}
#: Llama 4: one global (NoPE) attention layer every 4 (transformers Llama4TextConfig, no_rope_layer_interval = 4).
LLAMA4_GLOBAL_EVERY = 4


#: Columns a config may set to 0 (none of them: no shared expert, no leading dense layer, no MTP module).
ZERO_ALLOWED = frozenset({"shared_experts", "dense_layers", "mtp"})
#: The largest size dse computes exactly (float32 integers): dse.cost.select's INT_DOMAIN_MAX.
SIZE_MAX = INT_DOMAIN_MAX


def _size(source: str, key: str, value: object, lo: int) -> int:
    """A config size field as an int: a JSON integer (not true/false) in lo..SIZE_MAX, else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= SIZE_MAX:
        raise ConfigError(f"{source}: field {key!r}: value {value!r} is not allowed; allowed: an integer >= {lo} and "
                          f"<= {SIZE_MAX:,}")
    return value


class ConfigError(ValueError):
    """A config.json dse cannot turn into a model: names the file, the field, the value and what is allowed."""


def read_config(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8-sig"))  # a byte-order mark is allowed, as for case files
    except FileNotFoundError as exc:
        raise ConfigError(f"{p}: no such file") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{p}: not a JSON config ({' '.join(str(exc).split())})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: not a JSON object; allowed: a Hugging Face config.json")
    return data


def hf_to_model(config: dict[str, Any], source: str = "config.json") -> dict[str, Any]:  # noqa: PLR0912
    """The model columns of a Hugging Face config (catalog names, see README "Model architecture columns").

    Rules needing two fields: Llama 4's ``intermediate_size`` is its experts' width and ``intermediate_size_mlp``
    its dense layers'; GPT-OSS's ``intermediate_size`` is its experts' width (every layer routed);
    ``layer_types`` of ``sliding_attention`` / ``full_attention`` gives global_every (the period of the full
    layers); any other layer type is refused; ``sliding_window`` counts only when ``use_sliding_window`` is not
    false; MLA is ``kv_lora_rank`` present."""
    kind = config.get("model_type")
    if kind not in MODEL_TYPES:
        raise ConfigError(f"{source}: field 'model_type': value {kind!r} is not allowed; allowed: "
                          f"{', '.join(MODEL_TYPES)}")
    fields = dict(config)
    if config.get("text_config") is not None and not isinstance(config["text_config"], dict):
        raise ConfigError(f"{source}: field 'text_config': value {config['text_config']!r} is not allowed; allowed: "
                          "a mapping of the text model's fields (Llama 4)")
    if isinstance(config.get("text_config"), dict):  # Llama 4: the text model
        fields.update(config["text_config"])
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key in NO_COST_FIELDS or key == "text_config":
            continue
        if key not in FIELD_MAP:
            raise ConfigError(f"{source}: field {key!r} (value {value!r}) is not known to dse; allowed: the fields of "
                              "dse/models/hf.py FIELD_MAP (mapped) and NO_COST_FIELDS (no cost); a field that changes "
                              "the cost must be modelled before this config can be read")
        if value is None:
            continue
        col = FIELD_MAP[key]
        if col == "mlp":
            act = str(value).lower()
            if act in GATED:
                out["mlp"] = "swiglu"
            elif act in TWO_MATRIX:
                out["mlp"] = TWO_MATRIX[act]
            else:
                raise ConfigError(f"{source}: field 'hidden_act': value {value!r} is not allowed; allowed: "
                                  f"{', '.join((*GATED, *TWO_MATRIX))}")
        elif col == "global_every":
            if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
                raise ConfigError(f"{source}: field 'layer_types': value {value!r} is not allowed; allowed: a list of "
                                  "'sliding_attention' / 'full_attention', one per layer")
            types = list(value)
            bad = sorted({t for t in types if t not in ("sliding_attention", "full_attention")})
            if bad:
                raise ConfigError(f"{source}: field 'layer_types': value {bad[0]!r} is not allowed; allowed: "
                                  "sliding_attention, full_attention (dse has no linear-attention or state-space "
                                  "layer)")
            full = [i for i, t in enumerate(types) if t == "full_attention"]
            if full and len(full) < len(types):
                period = full[0] + 1
                if full != list(range(period - 1, len(types), period)):
                    raise ConfigError(f"{source}: field 'layer_types': full-attention layers {full[:6]}… are not one "
                                      "every N; allowed: a periodic pattern (one full layer every N)")
                out["global_every"] = period
        elif col == "tied_embeddings":
            if not isinstance(value, bool):
                raise ConfigError(f"{source}: field {key!r}: value {value!r} is not allowed; allowed: true or false")
            out[col] = int(value)
        else:
            out[col] = _size(source, key, value, 0 if col in ZERO_ALLOWED else 1)
    if kind in ("llama4", "llama4_text", "gpt_oss") and fields.get("intermediate_size") is None:
        raise ConfigError(f"{source}: field 'intermediate_size' missing; required for model_type {kind!r} (the "
                          "experts' width)" + (" in text_config" if kind == "llama4" else ""))
    if kind in ("llama4", "llama4_text"):
        out["moe_ffn_hidden"] = fields["intermediate_size"]
        out["ffn_hidden"] = fields.get("intermediate_size_mlp", fields["intermediate_size"])
        out["shared_experts"] = 1  # Llama4TextMoe: a shared expert beside the routed ones
        if out.get("attention_chunk"):
            out["global_every"] = LLAMA4_GLOBAL_EVERY
        out.setdefault("tied_embeddings", 0)
    if kind == "gpt_oss":
        out["moe_ffn_hidden"] = fields["intermediate_size"]
    if fields.get("use_sliding_window") is False:
        out.pop("sliding_window", None)
    if "kv_lora_rank" in out:
        out["attention_kind"] = "mla"
        out.pop("head_dim", None)  # MLA's head dims are qk_nope + qk_rope and v_head_dim
    if kind in ("qwen2_moe", "qwen3_moe") and fields.get("mlp_only_layers"):
        raise ConfigError(f"{source}: field 'mlp_only_layers': value {fields['mlp_only_layers']!r} is not allowed; "
                          "allowed: empty (dse places dense layers first, dense_layers, or periodically, moe_every)")
    if "experts" in out and int(out["experts"]) <= 1:
        for k in ("moe_ffn_hidden", "shared_experts", "dense_layers", "moe_every"):
            out.pop(k, None)
    quant = fields.get("quantization_config")
    if quant is not None and not isinstance(quant, dict):
        raise ConfigError(f"{source}: field 'quantization_config': value {quant!r} is not allowed; allowed: a mapping "
                          "with quant_method (Hugging Face's quantization config)")
    method = QUANT_METHODS.get(str((quant or {}).get("quant_method", "")).lower())
    if method == "mxfp4" or (method == "fp8_block" and (quant or {}).get("weight_block_size")):
        out["moe_quant"] = method
    if int(out.get("experts", 1)) <= 1:
        out.pop("moe_quant", None)  # no routed experts: a dense model's GEMMs run at the row's precision
    if int(out.get("moe_every", 1)) == 1:
        out.pop("moe_every", None)
    if not out.get("dense_layers"):
        out.pop("dense_layers", None)
    if not out.get("mtp"):
        out.pop("mtp", None)
    out.setdefault("mlp", "swiglu")
    out.setdefault("experts", 1)
    out.setdefault("top_k", 1)
    missing = [k for k in ("layers", "hidden", "heads", "vocab") if k not in out]
    if missing:
        raise ConfigError(f"{source}: field for {missing[0]!r} missing; required: num_hidden_layers, hidden_size, "
                          "num_attention_heads, vocab_size")
    return out
