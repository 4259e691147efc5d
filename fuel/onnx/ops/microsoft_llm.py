"""``com.microsoft`` transformer ops that onnxruntime's optimizer and quantizer write into
exported language models: MatMulNBits, RotaryEmbedding and MultiHeadAttention. Semantics
follow onnxruntime's contrib-op documentation; tests compare with onnxruntime."""

from __future__ import annotations

import math

import numpy as np

import fuel
from fuel.frontend.structured import matmul, softmax
from fuel.ir import dtype as dt
from fuel.onnx.context import OPS, NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.attention import split_heads
from fuel.onnx.ops.common import Tensor, cast
from fuel.onnx.ops.quantize import host

MS = "com.microsoft"


# ----------------------------------------------------------------------------- MatMulNBits


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The ``bits``-bit codes of ``packed`` (uint8, last axis), low bits first, ``count`` of
    them per row."""
    per_byte = 8 // bits
    mask = (1 << bits) - 1
    shifts = np.arange(per_byte, dtype=np.uint8) * bits
    codes = (packed[..., None] >> shifts) & mask
    return codes.reshape(packed.shape[:-1] + (-1,))[..., :count]


@onnx_op("MatMulNBits", domain=MS)
def matmul_nbits(ctx: NodeContext) -> Tensor:
    """Y = A @ dequantize(B).T (+ bias): B (N, K / block_size, block_size * bits / 8) holds
    ``bits``-bit codes, low bits first; w = (code - zero) * scale per block, the zero point
    2^(bits - 1) unless given (packed codes, or floats). The weights are constants:
    de-quantized once at load into a float32 (K, N) matrix."""
    a = ctx.input(0)
    bits, block = int(ctx.attr("bits", 4)), int(ctx.attr("block_size"))
    k, n = int(ctx.attr("K")), int(ctx.attr("N"))
    if bits not in (2, 4, 8):
        raise UnsupportedOp(f"MatMulNBits with bits={bits} is not supported (2, 4 or 8)")
    packed, scales = host(ctx, ctx.input(1)), host(ctx, ctx.input(2))
    zeros = host(ctx, ctx.optional(3)) if ctx.has(3) else None
    order = host(ctx, ctx.optional(4)) if ctx.has(4) else None
    if packed is None or scales is None or (ctx.has(3) and zeros is None) or (
            ctx.has(4) and order is None):
        raise UnsupportedOp("MatMulNBits needs its weights, scales, zero points and g_idx as "
                            "constants (initializers)")
    blocks = (k + block - 1) // block
    codes = _unpack(packed.reshape(n, blocks, -1), bits, block).reshape(n, blocks * block)
    codes = codes[:, :k].astype(np.float32)
    scales = scales.astype(np.float32).reshape(n, blocks)
    if zeros is None:
        zero = np.full((n, blocks), float(1 << (bits - 1)), np.float32)
    elif zeros.dtype == np.uint8:
        zero = _unpack(zeros.reshape(n, -1), bits, blocks).astype(np.float32)
    else:
        zero = zeros.astype(np.float32).reshape(n, blocks)
    group = (order.reshape(-1)[:k].astype(np.int64) if order is not None
             else np.arange(k) // block)
    weights = (codes - zero[:, group]) * scales[:, group]
    y = matmul(a, ctx.constant(np.ascontiguousarray(weights.T.astype(np.float32))))
    y = cast(y, a.dtype)
    return y + ctx.input(5) if ctx.has(5) else y


# ----------------------------------------------------------------------------- RotaryEmbedding


@onnx_op("RotaryEmbedding", domain=MS)
def rotary_embedding_ms(ctx: NodeContext) -> Tensor:
    """Inputs (input, position_ids, cos_cache, sin_cache): onnxruntime's order of the ONNX
    op's; a one-element position_ids is the first position (then position + 0..S-1)."""
    from fuel.onnx.context import NodeContext as Context

    if ctx.attr("is_packed_batching", 0):
        raise UnsupportedOp("RotaryEmbedding with is_packed_batching is not supported")
    x, positions = ctx.input(0), ctx.input(1)
    length = x.shape[1] if x.ndim == 3 else x.shape[2]
    if positions.numel() == 1:
        offset = cast(positions, dt.int64).reshape(())
        steps = fuel.tensor(np.arange(length, dtype=np.int64), device=x.device)
        positions = (steps + offset).reshape((1, length)).expand(x.shape[0], length)
    inputs = [x, ctx.input(2), ctx.input(3), cast(positions, dt.int64)]
    plain = Context(ctx.proto, ctx.builder, inputs, 23, ctx.label, ctx.scope)
    return OPS[("", "RotaryEmbedding")](plain)


# ----------------------------------------------------------------------------- MultiHeadAttention


def _heads(x: Tensor, heads: int) -> Tensor:
    """(B, S, N * h) -> (B, N, S, h); a 4-D (B, N, S, h) input as it is."""
    return x if x.ndim == 4 else split_heads(x, heads)


@onnx_op("MultiHeadAttention", domain=MS)
def multi_head_attention(ctx: NodeContext) -> list:
    """softmax(Q K^T * scale + masks) V per head, Q, K, V (B, S, N * h) plus their bias (one
    (3 * N * h) vector), or K, V already (B, N, L, h); key_padding_mask (B, L) of 1 (keep) and
    0 (mask_filter_value added), attention_bias (B or 1, N or 1, S, L), past_key / past_value
    (B, N, P, h) put before K and V. Outputs: (B, S, N * h)
    and the present key and value."""
    heads = int(ctx.attr("num_heads"))
    query, key, value = ctx.input(0), ctx.optional(1), ctx.optional(2)
    if key is None or value is None or query.ndim != 3:
        raise UnsupportedOp("MultiHeadAttention with packed QKV or KV is not supported")
    if ctx.attr("unidirectional", 0):  # onnxruntime's CPU result matches no causal mask
        raise UnsupportedOp("MultiHeadAttention with unidirectional=1 is not supported")
    bias = ctx.optional(3)
    if bias is not None:
        hidden, value_hidden = query.shape[-1], bias.shape[0] - 2 * query.shape[-1]
        query = query + bias.narrow(0, 0, hidden)
        if key.ndim == 3:
            key = key + bias.narrow(0, hidden, hidden)
        if value.ndim == 3:
            value = value + bias.narrow(0, 2 * hidden, value_hidden)
    q, k, v = _heads(query, heads), _heads(key, heads), _heads(value, heads)
    past_key, past_value = ctx.optional(6), ctx.optional(7)
    if past_key is not None and past_value is not None:
        k, v = fuel.cat([past_key, k], 2), fuel.cat([past_value, v], 2)
    size = q.shape[-1]
    scale = float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(size)
    work = dt.float32 if q.dtype in (dt.float16, dt.bfloat16) else q.dtype
    scores = matmul(cast(q, work), cast(k, work).permute(0, 1, 3, 2)) * scale
    queries, keys = scores.shape[2], scores.shape[3]
    filter_value = float(ctx.attr("mask_filter_value", -10000.0))
    padding = ctx.optional(4)
    if padding is not None:
        if padding.ndim != 2:
            raise UnsupportedOp(f"MultiHeadAttention's key_padding_mask of shape "
                                f"{padding.shape} is not supported (only (batch, keys))")
        keep = cast(padding, work).reshape((padding.shape[0], 1, 1, keys))
        scores = scores + (1.0 - keep) * filter_value
    if ctx.has(5):
        scores = scores + cast(ctx.input(5), work)
    if tuple(scores.shape[2:]) != (queries, keys):
        raise OnnxError(f"attention scores of shape {scores.shape} do not match the queries "
                        f"and keys ({queries}, {keys})")
    out = matmul(softmax(scores, -1), cast(v, work))
    batch = out.shape[0]
    out = cast(out.permute(0, 2, 1, 3).reshape((batch, queries, -1)), query.dtype)
    return [out, k, v]
