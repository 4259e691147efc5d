"""Decoder model families as data: how each differs from Llama, read by the one graph builder
(``llama_graph``) and the one weight loader (``llama``). A family is a row of ``FAMILIES``,
keyed by GGUF's ``general.architecture`` (Hugging Face's ``model_type`` maps to it through
``HF_MODEL_TYPES``); per-family numbers (soft-caps, multipliers, windows, rope bases) come
from the file's metadata into ``LlamaConfig``.

What a row says:
  * ``permuted_rope``: llama.cpp's converter interleaved the q/k rows (Llama's rotary layout);
    the loader restores Hugging Face's rotate-half order. Other families are stored in it.
  * ``qkv_bias``: q, k and v projections have biases (``attn_q.bias`` ...).
  * ``qk_norm``: RMS norm of q and k before RoPE, per head (``"head"``) or over all heads
    (``"full"``).
  * ``pre_norms`` / ``post_norms``: RMS norm before each block's input, and of each block's
    output before the residual add (``post_attention_norm``, ``post_ffw_norm``).
  * ``activation``: the gated feed-forward's activation (``silu`` or ``gelu_tanh``).
  * ``scaled_embedding``: the embeddings are multiplied by sqrt(hidden) (Gemma).
  * ``fused_qkv`` / ``fused_gate_up``: stored as one ``attn_qkv`` / one ``ffn_up`` of gate|up.
  * ``sliding``: which layers attend through a sliding window (a function of the layer index
    and the layer count), when the file gives a window.
  * ``hf_norm_offset``: Hugging Face stores its norms as ``w`` applied as ``1 + w``; GGUF
    stores ``1 + w`` (the HF loader adds it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fuel.models.common import ModelFormatError


@dataclass(frozen=True)
class Family:
    """One decoder family's differences from Llama (see the module's docstring)."""

    name: str
    permuted_rope: bool = False
    qkv_bias: bool = False
    qk_norm: str | None = None
    pre_norms: bool = True
    post_norms: bool = False
    activation: str = "silu"
    scaled_embedding: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    sliding: Callable[[int, int], bool] | None = None
    hf_norm_offset: float = 0.0
    # Gemma's attention scale: 1/sqrt(hidden / heads) for the 27B models (46 or 62 layers),
    # else 1/sqrt(head_dim) (llama.cpp's rule)
    gemma_scale: bool = False


def _every_other(layer: int, layers: int) -> bool:
    return layer % 2 == 0


def _five_of_six(layer: int, layers: int) -> bool:
    return (layer + 1) % 6 != 0


FAMILIES: dict[str, Family] = {family.name: family for family in (
    Family("llama", permuted_rope=True),
    Family("granite", permuted_rope=True),
    Family("qwen2", qkv_bias=True),
    Family("qwen3", qk_norm="head"),
    Family("gemma", activation="gelu_tanh", scaled_embedding=True, hf_norm_offset=1.0),
    Family("gemma2", activation="gelu_tanh", scaled_embedding=True, post_norms=True,
           sliding=_every_other, hf_norm_offset=1.0, gemma_scale=True),
    Family("gemma3", activation="gelu_tanh", scaled_embedding=True, post_norms=True,
           qk_norm="head", sliding=_five_of_six, hf_norm_offset=1.0, gemma_scale=True),
    Family("phi3", fused_qkv=True, fused_gate_up=True),
    Family("olmo2", qk_norm="full", pre_norms=False, post_norms=True),
)}

# Hugging Face config.json model_type -> GGUF architecture
HF_MODEL_TYPES = {"llama": "llama", "mistral": "llama", "granite": "granite", "qwen2": "qwen2",
                  "qwen3": "qwen3", "gemma": "gemma", "gemma2": "gemma2",
                  "gemma3_text": "gemma3", "phi3": "phi3", "olmo2": "olmo2"}


def family_of(architecture: object, where: str) -> Family:
    """The family called ``architecture``; a one-line ModelFormatError listing the supported
    ones otherwise."""
    family = FAMILIES.get(str(architecture))
    if family is None:
        raise ModelFormatError(f"{where} holds a '{architecture}' model; fuel runs these "
                               f"families: {', '.join(FAMILIES)}")
    return family
