"""A decoder's weights from a GGUF file or a Hugging Face folder (``hf_folder``), in the
layout ``llama_graph`` runs: float32 converted once (``convert_weights``), or the GGUF blocks
kept as stored (``quantized_weights``). What differs by family (fused tensors, q/k rows
stored permuted, biases, the norms a layer has) comes from its row of ``families``."""

from __future__ import annotations

import numpy as np

from fuel.ir.dtype import QUANTIZED_BY_GGUF_TYPE
from fuel.ir.ops import ACTIVATION_ROUNDED_FORMATS
from fuel.models.common import progress
from fuel.models.families import FAMILIES
from fuel.models.gguf_loader import (
    GGUFModelFile,
    LlamaConfig,
    QuantizedArray,
    join_rows,
    unpermute_rope_rows,
)
from fuel.models.llama_graph import RoundedInput

# (LayerWeights field, GGUF tensor name) of the norm vectors a layer may have
LAYER_NORMS = (("attn_norm", "attn_norm"), ("ffn_norm", "ffn_norm"), ("q_norm", "attn_q_norm"),
               ("k_norm", "attn_k_norm"), ("post_attn_norm", "post_attention_norm"),
               ("post_ffn_norm", "post_ffw_norm"))


def _norms(source: GGUFModelFile, arrays: dict, i: int) -> None:
    """Layer ``i``'s norm vectors the file has (a family's absent ones stay absent)."""
    for part, name in LAYER_NORMS:
        full = f"blk.{i}.{name}.weight"
        if full in source.tensors:
            arrays[f"layers.{i}.{part}"] = source.tensor(full)


def _bias(source: GGUFModelFile, config: LlamaConfig, i: int, permuted: bool
          ) -> np.ndarray | None:
    """Layer ``i``'s q|k|v bias (q and k rows un-permuted like their weights), or None."""
    names = [f"blk.{i}.attn_{part}.bias" for part in ("q", "k", "v")]
    if not all(name in source.tensors for name in names):
        return None
    q, k, v = (source.tensor(name) for name in names)
    if permuted:
        q = unpermute_rope_rows(q, config.num_heads)
        k = unpermute_rope_rows(k, config.num_kv_heads)
    return np.concatenate([q, k, v]).astype(np.float32)


def convert_weights(source: GGUFModelFile, config: LlamaConfig) -> dict[str, np.ndarray]:
    """GGUF tensors -> fuel's layout: q/k rows un-permuted (families stored permuted), the
    attention scale folded into q (and its bias) where no q norm follows, q|k|v and gate|up
    fused, every matrix transposed to (in, out) and contiguous."""
    family = FAMILIES[config.family]
    permuted = source.rope_permuted
    scale = np.float32(config.query_scale)
    folded = family.qk_norm is None
    arrays: dict[str, np.ndarray] = {}
    if not folded:
        arrays["query_scale"] = float(scale)
    embed = source.tensor("token_embd.weight")
    arrays["embed_t"] = np.ascontiguousarray(embed.T)
    if not config.tied_embeddings:
        arrays["output_t"] = np.ascontiguousarray(source.tensor("output.weight").T)
    arrays["norm"] = source.tensor("output_norm.weight")
    heads_rows = config.num_heads * config.head_dim
    description = f"converting {source.path.name} (first load only)"
    for i in progress(range(config.num_layers), config.num_layers, description):
        def get(name: str, layer: int = i) -> np.ndarray:
            return source.tensor(f"blk.{layer}.{name}.weight")

        if family.fused_qkv:
            qkv = get("attn_qkv").copy()
        else:
            q, k = get("attn_q"), get("attn_k")
            if permuted:
                q = unpermute_rope_rows(q, config.num_heads)
                k = unpermute_rope_rows(k, config.num_kv_heads)
            qkv = np.concatenate([q, k, get("attn_v")])
        bias = _bias(source, config, i, permuted)
        if folded:
            qkv[:heads_rows] *= scale
            if bias is not None:
                bias[:heads_rows] *= scale
        if bias is not None:
            arrays[f"layers.{i}.qkv_bias"] = bias
        _norms(source, arrays, i)
        arrays[f"layers.{i}.qkv_t"] = np.ascontiguousarray(qkv.T)
        arrays[f"layers.{i}.o_t"] = np.ascontiguousarray(get("attn_output").T)
        gate_up = get("ffn_up") if family.fused_gate_up else np.concatenate(
            [get("ffn_gate"), get("ffn_up")])
        arrays[f"layers.{i}.gate_up_t"] = np.ascontiguousarray(gate_up.T)
        arrays[f"layers.{i}.down_t"] = np.ascontiguousarray(get("ffn_down").T)
    return arrays


def device_kernels(device):
    """A predicate: whether ``device``'s backend runs a quantized format (a dequantize kernel
    of its own, so quantized ops reach it directly or through their decompositions)."""
    from fuel.backends import get_backend
    from fuel.dispatch.kernel import global_table
    from fuel.ir import dtype as dt
    from fuel.ir.device import parse_device
    from fuel.ir.ops import OpKind

    backend_id = get_backend(parse_device(device)).backend_id

    def runs(dtype) -> bool:
        table = global_table()
        return bool(table.lookup_alternatives(OpKind.DEQUANTIZE, (dtype, dt.float32),
                                              backend_id))

    return runs


def quantized_weights(source: GGUFModelFile, config: LlamaConfig, device=None) -> dict:
    """GGUF tensors kept in their block formats (``QuantizedArray``, ``(out, in)``): q/k rows
    un-permuted, q|k|v and gate|up joined where their formats match (else tuples of parts),
    the attention scale left to the graph (``query_scale``). Tensors used as stored are views
    of the memory map (gate|up too where they lie back to back in the file); those reordered
    or joined are read from it once, into their place in fresh arrays. Formats without
    kernels (on fuel or on ``device``) arrive dequantized and are transposed to ``(in, out)``
    like the float path."""
    kernels = device_kernels(device)

    def rounds_input(name: str) -> bool:
        """Whether the stored format's quantized_matmul rounds its input (ops' definition)."""
        stored_as = QUANTIZED_BY_GGUF_TYPE.get(int(source.tensors[name].tensor_type))
        return stored_as in ACTIVATION_ROUNDED_FORMATS

    def float_part(part: np.ndarray, name: str) -> object:
        values = np.ascontiguousarray(part.T)
        return RoundedInput(values) if rounds_input(name) else values

    def as_projection(parts: list, names: list[str]) -> object:
        if all(isinstance(p, QuantizedArray) for p in parts):
            joined = join_rows(parts)
            if joined is not None:
                return joined
            return tuple(p.materialized() for p in parts)
        floats = tuple(p.materialized() if isinstance(p, QuantizedArray) else float_part(p, name)
                       for p, name in zip(parts, names))
        return floats if len(floats) > 1 else floats[0]

    def rope_rows(value, heads: int):
        if isinstance(value, QuantizedArray):
            return value.reorder_rows(lambda rows: unpermute_rope_rows(rows, heads))
        return unpermute_rope_rows(value, heads)

    family = FAMILIES[config.family]
    arrays: dict = {"query_scale": config.query_scale}
    embed = source.stored("token_embd.weight", kernels=kernels)
    arrays["embed_t"] = embed if isinstance(embed, QuantizedArray) else np.ascontiguousarray(
        embed.T)
    if not config.tied_embeddings:
        arrays["output_t"] = as_projection([source.stored("output.weight", kernels=kernels)],
                                           ["output.weight"])
    elif not isinstance(embed, QuantizedArray):
        arrays["tied_output_rounds"] = rounds_input("token_embd.weight")
    arrays["norm"] = source.tensor("output_norm.weight")
    for i in progress(range(config.num_layers), config.num_layers,
                      f"mapping {source.path.name}'s blocks"):
        def get(name: str, layer: int = i):
            return source.stored(full(name, layer), kernels)

        def full(name: str, layer: int = i) -> str:
            return f"blk.{layer}.{name}.weight"

        def projection(names: list[str], parts: list | None = None) -> object:
            parts = parts or [get(name) for name in names]
            return as_projection(parts, [full(name) for name in names])

        if family.fused_qkv:
            arrays[f"layers.{i}.qkv_t"] = projection(["attn_qkv"])
        else:
            q, k = get("attn_q"), get("attn_k")
            if family.permuted_rope:
                q, k = rope_rows(q, config.num_heads), rope_rows(k, config.num_kv_heads)
            arrays[f"layers.{i}.qkv_t"] = projection(["attn_q", "attn_k", "attn_v"],
                                                     [q, k, get("attn_v")])
        bias = _bias(source, config, i, family.permuted_rope)
        if bias is not None:
            arrays[f"layers.{i}.qkv_bias"] = bias
        _norms(source, arrays, i)
        arrays[f"layers.{i}.o_t"] = projection(["attn_output"])
        if family.fused_gate_up:
            arrays[f"layers.{i}.gate_up_t"] = projection(["ffn_up"])
        else:
            together = source.stored_together([full("ffn_gate"), full("ffn_up")], kernels)
            arrays[f"layers.{i}.gate_up_t"] = together or projection(["ffn_gate", "ffn_up"])
        arrays[f"layers.{i}.down_t"] = projection(["ffn_down"])
    return arrays
