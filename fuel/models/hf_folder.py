"""Hugging Face model folders (``config.json`` + safetensors + ``tokenizer.json``) of the
families in ``families``, read through the interface the GGUF loaders use: tensors by their
GGUF names (in Hugging Face's rotary order, norms as GGUF stores them), a ``LlamaConfig``
from ``config.json``, the tokenizer from ``tokenizer.json``. ``llama.load_model`` loads
either kind of source with the same description of the family."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from pathlib import Path

import ml_dtypes
import numpy as np

from fuel.models.common import ModelFormatError, require
from fuel.models.families import FAMILIES, HF_MODEL_TYPES, Family
from fuel.models.gguf_loader import LlamaConfig
from fuel.models.tokenizer import end_of_generation_ids

_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")
# Hugging Face's names inside a layer -> GGUF's (post_attention_layernorm depends on the
# family: see gguf_name)
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.qkv_proj.weight": "attn_qkv.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight", "mlp.gate_up_proj.weight": "ffn_up.weight",
}
_TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight",
              "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}


def gguf_name(name: str, family: Family) -> str | None:
    """The GGUF name of the Hugging Face tensor ``name`` (None for one fuel does not use)."""
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    match = _LAYER.fullmatch(name)
    if match is None:
        return None
    layer, rest = match.groups()
    if rest == "post_attention_layernorm.weight":
        part = "post_attention_norm.weight" if family.post_norms else "ffn_norm.weight"
    else:
        part = _LAYER_NAMES.get(rest)
    return None if part is None else f"blk.{layer}.{part}"


def _rope_theta(values: dict, layers: str = "full_attention", default: float = 10000.0
                ) -> float:
    """The rope base of ``layers`` (``full_attention`` or ``sliding_attention``): from
    ``rope_parameters`` (per layer kind in transformers 5's Gemma 3) or the older keys."""
    parameters = values.get("rope_parameters") or {}
    if layers in parameters:
        parameters = parameters[layers]
    key = "rope_theta" if layers == "full_attention" else "rope_local_base_freq"
    return float(values.get(key) or parameters.get("rope_theta") or default)


def hf_config(values: dict, family: Family, tied: bool, where: str) -> LlamaConfig:
    """A ``LlamaConfig`` from a Hugging Face ``config.json``'s values."""
    hidden = int(values["hidden_size"])
    heads = int(values["num_attention_heads"])
    head_dim = int(values.get("head_dim") or hidden // heads)
    layers = int(values["num_hidden_layers"])
    rotary = int(head_dim * float(values.get("partial_rotary_factor", 1.0)))
    scaling = values.get("rope_scaling") or values.get("rope_parameters") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(
        scaling, dict) else "default"
    if kind not in ("default", "linear", "llama3", "longrope"):
        raise ModelFormatError(f"{where}: rope scaling '{kind}' is not supported (fuel runs "
                               "default, linear, llama3 and longrope)")
    factors: tuple[float, ...] = ()
    mscale = 1.0
    if kind == "llama3":
        factors = llama3_rope_factors(scaling, _rope_theta(values), rotary)
    elif kind == "longrope":
        factors, mscale = longrope_short(scaling, values, where)
    window = int(values.get("sliding_window") or 0) if family.sliding else 0
    layer_types = values.get("layer_types")
    if window and layer_types:
        sliding = tuple(kind == "sliding_attention" for kind in layer_types)
    elif window:
        sliding = tuple(family.sliding(i, layers) for i in range(layers))
    else:
        sliding = ()
    scale = 0.0
    if values.get("query_pre_attn_scalar"):
        scale = float(values["query_pre_attn_scalar"]) ** -0.5
    if values.get("attention_multiplier"):
        scale = float(values["attention_multiplier"])
    embedding_scale = float(values.get("embedding_multiplier", 1.0))
    if family.scaled_embedding:
        embedding_scale = float(np.sqrt(np.float32(hidden)))

    def token(key: str) -> int | None:
        value = values.get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        return None if value is None else int(value)

    return LlamaConfig(
        vocab_size=int(values["vocab_size"]), hidden_size=hidden,
        intermediate_size=int(values["intermediate_size"]), num_layers=layers,
        num_heads=heads, num_kv_heads=int(values.get("num_key_value_heads") or heads),
        head_dim=head_dim, rope_base=_rope_theta(values),
        rms_eps=float(values.get("rms_norm_eps", 1e-6)),
        context_length=int(values.get("max_position_embeddings", 2048)),
        bos_token_id=token("bos_token_id"), eos_token_id=token("eos_token_id"),
        add_bos_token=False, tied_embeddings=tied, family=family.name,
        rope_dim=rotary if rotary != head_dim else 0,
        rope_scale=float(scaling.get("factor", 1.0)) if kind == "linear" else 1.0,
        rope_factors=factors, rope_mscale=mscale,
        rope_base_local=_rope_theta(values, "sliding_attention", 10000.0)
        if family.name == "gemma3" else 0.0,
        attention_scale=scale,
        attention_softcap=float(values.get("attn_logit_softcapping") or 0.0),
        final_softcap=float(values.get("final_logit_softcapping") or 0.0),
        sliding_window=window, sliding_layers=sliding, embedding_scale=embedding_scale,
        residual_scale=float(values.get("residual_multiplier", 1.0)),
        logit_scale=float(values.get("logits_scaling", 1.0)),
    )


def longrope_short(scaling: dict, values: dict, where: str) -> tuple[tuple[float, ...], float]:
    """longrope's short factors and its attention factor (cos and sin multiplied by it:
    ``attention_factor``, else sqrt(1 + ln(s) / ln(original)) for s = the context over the
    original context, 1 where s <= 1), as transformers computes them; the long factors serve
    contexts beyond the original one, which fuel does not switch to."""
    short = scaling.get("short_factor")
    if not isinstance(short, list) or not short:
        raise ModelFormatError(f"{where}: longrope scaling without its short_factor list")
    original = scaling.get("original_max_position_embeddings") or values.get(
        "original_max_position_embeddings") or values.get("max_position_embeddings", 2048)
    context = values.get("max_position_embeddings", original)
    factor = float(scaling.get("factor") or context / original)
    mscale = scaling.get("attention_factor")
    if mscale is None:
        mscale = 1.0 if factor <= 1.0 else math.sqrt(1.0 + math.log(factor) / math.log(original))
    return tuple(float(f) for f in short), float(mscale)


def llama3_rope_factors(scaling: dict, base: float, dim: int) -> tuple[float, ...]:
    """Llama 3's per-frequency divisors (what llama.cpp's converter writes as
    ``rope_freqs.weight``)."""
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    original = float(scaling["original_max_position_embeddings"])
    frequencies = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    factors = []
    for frequency in frequencies:
        wavelength = 2 * np.pi / frequency
        if wavelength < original / high:
            factors.append(1.0)
        elif wavelength > original / low:
            factors.append(factor)
        else:
            smooth = (original / wavelength - low) / (high - low)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return tuple(float(f) for f in factors)


SAFETENSORS_TYPES = {"F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
                     "BF16": np.dtype(ml_dtypes.bfloat16)}


def read_safetensors_header(path: Path) -> tuple[dict, int]:
    """A safetensors file's header (tensor name -> dtype, shape, data_offsets) and where its
    data starts."""
    with open(path, "rb") as file:
        prefix = file.read(8)
        if len(prefix) < 8:
            raise ModelFormatError(f"{path.name} is not a safetensors file (too short)")
        length = int.from_bytes(prefix, "little")
        if length > path.stat().st_size - 8:
            raise ModelFormatError(f"{path.name}: its header length {length} runs past the end")
        try:
            header = json.loads(file.read(length))
        except ValueError as error:
            raise ModelFormatError(f"{path.name}: unreadable header ({error})") from None
    return header, 8 + length


class HFModelFolder:
    """A Hugging Face model folder read as the loaders read a GGUF file (``tensors``,
    ``tensor``, ``llama_config``, ``tokenizer``)."""

    rope_permuted = False

    def __init__(self, folder: str | os.PathLike) -> None:
        self.path = Path(folder)
        config_path = self.path / "config.json"
        if not config_path.exists():
            raise ModelFormatError(f"{self.path} has no config.json (a Hugging Face model folder "
                                   "holds config.json, *.safetensors and tokenizer.json)")
        self.values = json.loads(config_path.read_text())
        model_type = self.values.get("model_type")
        architecture = HF_MODEL_TYPES.get(model_type)
        if architecture is None:
            raise ModelFormatError(f"{self.path} holds a '{model_type}' model; fuel runs these "
                                   f"model types: {', '.join(HF_MODEL_TYPES)}")
        self.family = FAMILIES[architecture]
        files = sorted(self.path.glob("*.safetensors"))
        if not files:
            raise ModelFormatError(f"{self.path} has no *.safetensors weights")
        self._where: dict[str, tuple[Path, dict, int]] = {}
        for file in files:
            header, start = read_safetensors_header(file)
            for name, entry in header.items():
                target = gguf_name(name, self.family)
                if target is not None and isinstance(entry, dict):
                    self._where[target] = (file, entry, start)
        self.tensors = dict.fromkeys(self._where)
        if "output.weight" in self.tensors and self.values.get("tie_word_embeddings"):
            del self.tensors["output.weight"]

    def llama_config(self) -> LlamaConfig:
        config = hf_config(self.values, self.family, "output.weight" not in self.tensors,
                           str(self.path))
        return dataclasses.replace(config, end_token_ids=self.end_token_ids())

    def end_token_ids(self) -> tuple[int, ...]:
        """The ids that end a generation: EOS in ``config.json`` and
        ``generation_config.json`` (one id or a list), and the tokens of ``tokenizer.json``
        whose text ends a turn, the text or a fill-in-the-middle span (the set llama.cpp
        reads from a GGUF converted from this folder)."""
        size = int(self.values.get("vocab_size") or 0)
        named: dict[str, int | None] = {}
        for source in (self.values, self._json("generation_config.json")):
            value = source.get("eos_token_id")
            for index in value if isinstance(value, list) else [value]:
                if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < size:
                    named[f"eos {index}"] = index
        vocabulary = self._json("tokenizer.json")
        model = vocabulary.get("model")
        vocab = model.get("vocab") if isinstance(model, dict) else None
        texts = dict(vocab) if isinstance(vocab, dict) else {}  # (SentencePiece's is a list)
        texts.update({entry.get("content"): entry.get("id")
                      for entry in vocabulary.get("added_tokens") or []
                      if isinstance(entry, dict)})
        placed = {index: text for text, index in texts.items()
                  if isinstance(text, str) and isinstance(index, int) and 0 <= index < size}
        tokens = [""] * (max(placed) + 1 if placed else 0)
        for index, text in placed.items():
            tokens[index] = text
        return end_of_generation_ids(tokens, named)

    def _json(self, name: str) -> dict:
        """The object in this folder's file ``name``; empty where it is missing or not an
        object (``tokenizer.json`` itself is checked where the tokenizer is built)."""
        path = self.path / name
        if not path.exists():
            return {}
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise ModelFormatError(f"{path}: not valid JSON ({error})") from None
        return value if isinstance(value, dict) else {}

    def tensor(self, name: str) -> np.ndarray:
        """The tensor GGUF calls ``name`` as float32 (norms as GGUF stores them)."""
        if name not in self._where:
            raise ModelFormatError(f"{self.path} lacks the tensor GGUF calls '{name}'")
        file, entry, start = self._where[name]
        kind = SAFETENSORS_TYPES.get(entry.get("dtype"))
        if kind is None:
            raise ModelFormatError(f"{file.name}: tensor '{name}' has the type "
                                   f"{entry.get('dtype')}; fuel reads F32, F16 and BF16")
        begin, end = (int(v) for v in entry["data_offsets"])
        shape = tuple(int(d) for d in entry["shape"])
        if (end - begin) != int(np.prod(shape, dtype=np.int64)) * kind.itemsize:
            raise ModelFormatError(f"{file.name}: tensor '{name}' has {end - begin} bytes for "
                                   f"shape {shape}")
        raw = np.fromfile(file, np.uint8, end - begin, offset=start + begin)
        values = raw.view(kind).reshape(shape).astype(np.float32)
        if name.endswith("norm.weight") and self.family.hf_norm_offset:
            values = values + np.float32(self.family.hf_norm_offset)
        return values

    def tokenizer(self):
        tokenizers = require("tokenizers", "loading a Hugging Face model folder")
        path = self.path / "tokenizer.json"
        if not path.exists():
            raise ModelFormatError(f"{self.path} has no tokenizer.json")
        return tokenizers.Tokenizer.from_file(str(path))

    def value(self, key: str, default=None):
        """GGUF metadata the loaders ask for: only the chat template (from
        tokenizer_config.json) has a counterpart here."""
        if key == "tokenizer.chat_template":
            return self._json("tokenizer_config.json").get("chat_template", default)
        return default
