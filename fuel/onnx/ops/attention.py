"""Attention (opset 23+), RotaryEmbedding and SwiGLU, decomposed into matmul, softmax and
masks; the causal, sliding-window and padding masks are built on the host."""

from __future__ import annotations

import numpy as np

import fuel
from fuel.frontend.structured import matmul, softmax
from fuel.ir import dtype as dt
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError
from fuel.onnx.ops.common import OpKind, Tensor, cast, compute_dtype, unary, where
from fuel.onnx.proto import fuel_dtype

NEG_INF = float("-inf")


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    batch, length, hidden = x.shape
    if heads <= 0 or hidden % heads:
        raise OnnxError(f"hidden size {hidden} does not split into {heads} heads")
    return x.reshape((batch, length, heads, hidden // heads)).permute(0, 2, 1, 3)


def repeat_heads(x: Tensor, repeat: int) -> Tensor:
    """Repeat each head ``repeat`` times in place: [h0, h0, h1, h1, ...]."""
    if repeat == 1:
        return x
    batch, heads, length, size = x.shape
    return x.unsqueeze(2).expand(batch, heads, repeat, length, size).reshape(
        (batch, heads * repeat, length, size))


def _host_masks(q_len: int, kv_len: int, offset, causal: bool, left: int, right: int):
    """The additive causal and sliding-window bias (0 / -inf) or None; ``offset`` is a
    scalar or a per-batch array (then the result is (batch, 1, q, kv))."""
    if not causal and left < 0 and right < 0:
        return None
    rows = np.arange(q_len).reshape(q_len, 1)
    columns = np.arange(kv_len).reshape(1, kv_len)
    per_batch = np.ndim(offset) > 0
    position = rows + (np.reshape(offset, (-1, 1, 1)) if per_batch else int(offset))
    allowed = np.ones(np.broadcast_shapes(position.shape, columns.shape), dtype=bool)
    if causal:
        allowed &= columns <= position
    if left >= 0:
        allowed &= position - columns <= left
    if right >= 0:
        allowed &= columns - position <= right
    bias = np.where(allowed, 0.0, NEG_INF)
    return bias.reshape(bias.shape[0], 1, q_len, kv_len) if per_batch else bias


def _mask_bias(mask: Tensor | None, kv_len: int, dtype) -> Tensor | None:
    """The attention mask as an additive bias of ``dtype`` padded to ``kv_len`` keys."""
    if mask is None:
        return None
    missing = kv_len - mask.shape[-1]
    if mask.dtype.is_bool:
        if missing > 0:
            mask = fuel.nn.functional.pad(mask, (0, missing), value=False)
        return where(mask, 0.0, NEG_INF, dtype=dtype)
    mask = cast(mask, dtype)
    if missing > 0:
        mask = fuel.nn.functional.pad(mask, (0, missing), value=NEG_INF)
    return mask


def _attention_bias(ctx: NodeContext, q: Tensor, kv_len: int, past_key, nonpad):
    """The additive bias: the attention mask plus the host-built causal, sliding-window and
    key-padding masks (None when there is none)."""
    q_len = q.shape[2]
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    causal = bool(ctx.attr("is_causal", 0))
    if past_key is None and nonpad is not None:
        offset = np.asarray(nonpad, dtype=np.int64).reshape(-1) - q_len
    else:
        offset = past_key.shape[2] if past_key is not None else 0
    bias = _mask_bias(ctx.optional(3), kv_len, q.dtype)
    host = _host_masks(q_len, kv_len, offset, causal, left, right)
    if nonpad is not None:
        keep = np.arange(kv_len) < np.asarray(nonpad).reshape(-1, 1)
        padding = np.where(keep, 0.0, NEG_INF).reshape(-1, 1, 1, kv_len)
        host = padding if host is None else host + padding
    if host is not None:
        host_tensor = ctx.constant(host.astype(q.dtype.numpy))
        bias = host_tensor if bias is None else bias + host_tensor
    return bias


@onnx_op("Attention")
def attention(ctx: NodeContext) -> list:
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    past_key, past_value = ctx.optional(4), ctx.optional(5)
    # Half-precision attention is computed in float32 and rounded once at the end (as
    # onnxruntime does): rounding scores and probabilities to float16 step by step is off by
    # an ulp of the output against the exact result.
    result_dtype = q.dtype
    wide = compute_dtype(q.dtype)
    q, k, v = cast(q, wide), cast(k, wide), cast(v, wide)
    past_key = cast(past_key, wide) if past_key is not None else None
    past_value = cast(past_value, wide) if past_value is not None else None
    nonpad = ctx.static(6)
    rank3 = q.ndim == 3
    if rank3:
        q = split_heads(q, ctx.attr("q_num_heads", 0))
        k = split_heads(k, ctx.attr("kv_num_heads", 0))
        v = split_heads(v, ctx.attr("kv_num_heads", 0))
    scale = ctx.attr("scale")
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[3])
    root = float(q.dtype.numpy.type(np.sqrt(scale))) if q.dtype is not dt.bfloat16 else \
        float(np.sqrt(scale))
    if past_key is not None:
        k = fuel.cat([past_key, k], 2)
    if past_value is not None:
        v = fuel.cat([past_value, v], 2)
    present_key, present_value = k, v
    bias = _attention_bias(ctx, q, k.shape[2], past_key, nonpad)
    heads = q.shape[1]
    if heads != k.shape[1]:
        if heads % k.shape[1]:
            raise OnnxError(f"{heads} query heads are not a multiple of {k.shape[1]} kv heads")
        k, v = repeat_heads(k, heads // k.shape[1]), repeat_heads(v, heads // k.shape[1])
    scores = matmul(q * root, k.transpose(-2, -1) * root)
    softcap = ctx.attr("softcap", 0.0)
    if softcap and softcap > 0:
        scores = unary(OpKind.TANH, scores / softcap) * softcap
    mode = ctx.attr("qk_matmul_output_mode", 0)
    biased = scores + bias if bias is not None else scores
    qk_output = biased if mode == 2 else scores
    precision = ctx.attr("softmax_precision")
    work = fuel_dtype(precision, ctx.label) if precision is not None else biased.dtype
    probabilities = softmax(cast(biased, work), -1)
    if bias is not None:
        masked_row = bias.amax(-1, keepdim=True) if bias.ndim else None
        if masked_row is not None:
            probabilities = where(masked_row == NEG_INF, 0.0, probabilities,
                                  dtype=probabilities.dtype)
    if mode == 3:
        qk_output = probabilities
    output = matmul(cast(probabilities, q.dtype), v)
    if rank3:
        batch, _, length, _ = output.shape
        output = output.permute(0, 2, 1, 3).reshape((batch, length, -1))
    return [cast(output, result_dtype), cast(present_key, result_dtype),
            cast(present_value, result_dtype), cast(qk_output, result_dtype)]


@onnx_op("RotaryEmbedding")
def rotary_embedding(ctx: NodeContext) -> Tensor:
    x, cos_cache, sin_cache = ctx.input(0), ctx.input(1), ctx.input(2)
    positions = ctx.optional(3)
    original = x.shape
    if x.ndim == 4:
        x = x.permute(0, 2, 1, 3)
    else:
        batch, length, hidden = x.shape
        heads = ctx.attr("num_heads", 0)
        if not heads or hidden % heads:
            raise OnnxError(f"hidden size {hidden} needs num_heads dividing it")
        x = x.reshape((batch, length, heads, hidden // heads))
    head_size = x.shape[3]
    dim = ctx.attr("rotary_embedding_dim", 0) or head_size
    rotate, keep = x.narrow(3, 0, dim), x.narrow(3, dim, head_size - dim)
    if positions is not None:
        flat = positions.reshape((-1,))
        cos_cache = cos_cache.index_select(0, flat).reshape(positions.shape + (dim // 2,))
        sin_cache = sin_cache.index_select(0, flat).reshape(positions.shape + (dim // 2,))
    cos_cache, sin_cache = cos_cache.unsqueeze(2), sin_cache.unsqueeze(2)
    if ctx.attr("interleaved", 0):
        pairs = rotate.reshape(rotate.shape[:3] + (dim // 2, 2))
        x1, x2 = pairs[..., 0], pairs[..., 1]
    else:
        x1, x2 = rotate.narrow(3, 0, dim // 2), rotate.narrow(3, dim // 2, dim // 2)
    real = cos_cache * x1 - sin_cache * x2
    imaginary = sin_cache * x1 + cos_cache * x2
    if ctx.attr("interleaved", 0):
        rotated = fuel.stack([real, imaginary], -1).reshape(rotate.shape)
    else:
        rotated = fuel.cat([real, imaginary], -1)
    result = fuel.cat([rotated, keep], -1) if head_size > dim else rotated
    if len(original) == 3:
        return result.reshape(original)
    return result.permute(0, 2, 1, 3)


@onnx_op("SwiGLU")
def swiglu(ctx: NodeContext) -> Tensor:
    a, b = ctx.input(0), ctx.input(1)
    if a.shape != b.shape or a.dtype is not b.dtype:
        raise OnnxError(f"SwiGLU needs equal shapes and dtypes, got {a.shape} {a.dtype.name} "
                        f"and {b.shape} {b.dtype.name}")
    alpha = ctx.attr("alpha", 1.0)
    return a * unary(OpKind.SIGMOID, a * alpha) * b
