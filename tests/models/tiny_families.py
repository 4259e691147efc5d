"""Tiny random models of each decoder family: a transformers model (the oracle), saved as a
Hugging Face folder and written as GGUF the way llama.cpp's converter writes that family
(its tensor names and metadata keys, q/k rows interleaved for Llama-style families, Gemma's
norms stored as 1 + w)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tests.models.tiny_gguf import MERGES, SPECIAL, _permute_for_gguf, byte_tokens

TOKENS = SPECIAL + byte_tokens() + ["Ġt", "he", "Ġthe", "in", "Ġa"]
COMMON = dict(vocab_size=len(TOKENS), hidden_size=64, intermediate_size=96,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)
# family (a variant after "/") -> (Hugging Face model_type, config fields over COMMON)
FAMILY_CONFIGS = {
    "llama": ("llama", dict(rope_theta=500.0)),
    "llama/linear-rope": ("llama", dict(rope_parameters=dict(
        rope_type="linear", rope_theta=500.0, factor=2.0))),
    "llama/llama3-rope": ("llama", dict(rope_parameters=dict(
        rope_type="llama3", rope_theta=500.0, factor=8.0, low_freq_factor=1.0,
        high_freq_factor=4.0, original_max_position_embeddings=8))),
    "granite": ("granite", dict(embedding_multiplier=3.0, residual_multiplier=0.5,
                                attention_multiplier=0.2, logits_scaling=2.0)),
    "qwen2": ("qwen2", dict(rope_theta=1000.0, tie_word_embeddings=True)),
    "qwen3": ("qwen3", dict(num_key_value_heads=1, head_dim=128)),
    "gemma": ("gemma", dict(hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                            head_dim=32)),
    "gemma2": ("gemma2", dict(hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=16,
                              sliding_window=4, attn_logit_softcapping=3.0,
                              final_logit_softcapping=2.0, tie_word_embeddings=True)),
    "gemma3": ("gemma3_text", dict(hidden_activation="gelu_pytorch_tanh",
                                   query_pre_attn_scalar=16, sliding_window=4,
                                   num_hidden_layers=6, rope_theta=100000.0,
                                   rope_local_base_freq=10000.0, tie_word_embeddings=True)),
    "phi3": ("phi3", dict(partial_rotary_factor=0.5, num_key_value_heads=4)),
    # Phi-3.5's longrope: the short factors within the original context, cos and sin scaled
    "phi3/longrope": ("phi3", dict(
        partial_rotary_factor=0.5, num_key_value_heads=4, max_position_embeddings=192,
        original_max_position_embeddings=48, rope_parameters=dict(
            rope_type="longrope", rope_theta=10000.0, short_factor=[1.0, 1.5, 3.0, 7.0],
            long_factor=[1.0, 4.0, 16.0, 40.0]))),
    "olmo2": ("olmo2", dict()),
}
# families transformers itself reads from GGUF (a check of the writer's conventions; its
# reader ignores phi3's partial rotary dimension)
TRANSFORMERS_GGUF = ("llama", "qwen2", "qwen3")


def tiny_model(family: str, seed: int = 0):
    """A random transformers model of ``family`` (norms and biases randomized too)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, fields = FAMILY_CONFIGS[family]
    family = family.split("/")[0]
    torch.manual_seed(seed)
    config = AutoConfig.for_model(model_type, **{**COMMON, **fields})
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                parameter.add_(0.2 * torch.randn_like(parameter))
    return model


def save_folder(model, folder: Path) -> Path:
    """``model`` as a Hugging Face folder with the tiny byte-level tokenizer."""
    from fuel.models.tokenizer import byte_level_bpe

    model.save_pretrained(folder)
    types = [3] * len(SPECIAL) + [1] * (len(TOKENS) - len(SPECIAL))
    tokenizer = byte_level_bpe(TOKENS, MERGES, types, "smollm")
    (folder / "tokenizer.json").write_text(tokenizer.to_str())
    return folder


def write_gguf(model, family: str, path: Path, matrix_type: str = "F32") -> Path:
    """``model`` as llama.cpp's converter writes a ``family`` GGUF (matrices in
    ``matrix_type``, vectors in F32)."""
    import gguf

    from fuel.models.families import FAMILIES
    from fuel.models.hf_folder import gguf_name, llama3_rope_factors

    family = family.split("/")[0]
    rows = FAMILIES[family]
    config = model.config
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size
                   // config.num_attention_heads)
    writer = gguf.GGUFWriter(str(path), family)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    parameters = getattr(config, "rope_parameters", None) or {}
    if "full_attention" in parameters:
        parameters = parameters["full_attention"]
    writer.add_rope_freq_base(float(getattr(config, "rope_theta", None)
                                    or parameters.get("rope_theta", 10000.0)))
    rotary = int(head_dim * float(getattr(config, "partial_rotary_factor", 1.0)))
    writer.add_rope_dimension_count(rotary)
    writer.add_uint32(f"{family}.vocab_size", config.vocab_size)
    rope_type = parameters.get("rope_type", "default")
    if rope_type == "linear":
        writer.add_string(f"{family}.rope.scaling.type", "linear")
        writer.add_float32(f"{family}.rope.scaling.factor", float(parameters["factor"]))
    elif rope_type == "llama3":  # llama.cpp's converter writes the factors as a tensor
        factors = llama3_rope_factors(parameters, float(parameters["rope_theta"]), rotary)
        writer.add_tensor("rope_freqs.weight", np.asarray(factors, np.float32))
    elif rope_type == "longrope":  # both factor lists as tensors, the attention factor a key
        original = int(config.original_max_position_embeddings)
        for kind in ("long", "short"):
            writer.add_tensor(f"rope_factors_{kind}.weight",
                              np.asarray(parameters[f"{kind}_factor"], np.float32))
        scale = config.max_position_embeddings / original
        writer.add_float32(f"{family}.rope.scaling.attn_factor",
                           math.sqrt(1.0 + math.log(scale) / math.log(original)))
        writer.add_uint32(f"{family}.rope.scaling.original_context_length", original)
    for key, attribute in (("attn_logit_softcapping", "attn_logit_softcapping"),
                           ("final_logit_softcapping", "final_logit_softcapping"),
                           ("embedding_scale", "embedding_multiplier"),
                           ("residual_scale", "residual_multiplier"),
                           ("attention.scale", "attention_multiplier"),
                           ("logit_scale", "logits_scaling")):
        if getattr(config, attribute, None):
            writer.add_float32(f"{family}.{key}", float(getattr(config, attribute)))
    if getattr(config, "sliding_window", None) and rows.sliding:
        writer.add_uint32(f"{family}.attention.sliding_window", config.sliding_window)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(TOKENS)
    writer.add_token_merges(MERGES)
    writer.add_token_types([3] * len(SPECIAL) + [1] * (len(TOKENS) - len(SPECIAL)))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(False)
    state = {name: value.detach().numpy().astype(np.float32)
             for name, value in model.state_dict().items()}
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    for name, value in state.items():
        target = gguf_name(name, rows)
        if target is None:
            continue
        if target.endswith("norm.weight"):
            value = value + np.float32(rows.hf_norm_offset)
        if rows.permuted_rope and (".attn_q." in target or ".attn_k." in target):
            heads = config.num_attention_heads if ".attn_q." in target else \
                config.num_key_value_heads
            value = _permute_for_gguf(value, heads)
        kind = matrix_type if value.ndim == 2 else "F32"
        qtype = gguf.GGMLQuantizationType[kind]
        data = gguf.quants.quantize(np.ascontiguousarray(value), qtype)
        if kind == "F32":
            writer.add_tensor(target, data)
        else:
            writer.add_tensor(target, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
