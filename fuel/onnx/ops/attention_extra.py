"""The recurrent and preview attention ops: LinearAttention (linear / gated / delta rules),
CausalConvWithState and FlexAttention (score and probability modifier graphs)."""

from __future__ import annotations

import numpy as np

import fuel
from fuel.frontend.structured import matmul, softmax
from fuel.ir import dtype as dt
from fuel.nn import conv as nn_conv
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.attention import repeat_heads, split_heads
from fuel.onnx.ops.common import OpKind, Tensor, cast, unary
from fuel.onnx.proto import fuel_dtype


def _per_step(value: Tensor | None, batch: int, steps: int, heads: int, size: int):
    """decay / beta (B, T, H or H*size or 1) as (B, H', T, size') float32."""
    if value is None:
        return None
    last = value.shape[-1]
    value = cast(value, dt.float32)
    if last in (heads, 1):
        return value.reshape((batch, steps, last, 1)).permute(0, 2, 1, 3)
    if last == heads * size:
        return split_heads(value, heads)
    raise OnnxError(f"decay/beta last dim {last} must be {heads}, 1 or {heads * size}")


@onnx_op("LinearAttention")
def linear_attention(ctx: NodeContext) -> list[Tensor]:
    query, key, value = ctx.input(0), ctx.input(1), ctx.input(2)
    past, decay, beta = ctx.optional(3), ctx.optional(4), ctx.optional(5)
    rule = ctx.attr("update_rule", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise UnsupportedOp(f"update_rule {rule!r} is not supported")
    q_heads, kv_heads = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if not q_heads or not kv_heads or q_heads % kv_heads:
        raise OnnxError("q_num_heads must be a positive multiple of kv_num_heads")
    batch, steps, _ = query.shape
    q = cast(split_heads(query, q_heads), dt.float32)
    k = cast(split_heads(key, kv_heads), dt.float32)
    v = cast(split_heads(value, kv_heads), dt.float32)
    key_size, value_size = q.shape[3], v.shape[3]
    decay4 = _per_step(decay, batch, steps, kv_heads, key_size)
    beta4 = _per_step(beta, batch, steps, kv_heads, 1)
    if past is not None:
        state = cast(past, dt.float32)
    else:
        state = fuel.zeros(batch, kv_heads, key_size, value_size, device=ctx.device)
    scale = ctx.attr("scale", 0.0) or 1.0 / np.sqrt(key_size)
    outputs = []
    for t in range(steps):
        k_t, v_t = k[:, :, t, :], v[:, :, t, :]
        if rule in ("gated", "gated_delta"):
            state = state * unary(OpKind.EXP, decay4[:, :, t, :]).unsqueeze(-1)
        if rule in ("delta", "gated_delta"):
            retrieved = matmul(k_t.unsqueeze(2), state).squeeze(2)
            v_t = beta4[:, :, t, :] * (v_t - retrieved)
        state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(2)
        read = repeat_heads(state, q_heads // kv_heads)
        outputs.append(matmul(q[:, :, t, :].unsqueeze(2), read).squeeze(2) * float(scale))
    output = fuel.stack(outputs, 2).permute(0, 2, 1, 3).reshape((batch, steps, -1))
    state_dtype = past.dtype if past is not None else query.dtype
    return [cast(output, query.dtype), cast(state, state_dtype)]


@onnx_op("CausalConvWithState")
def causal_conv_with_state(ctx: NodeContext) -> list[Tensor]:
    x, weight, bias, past = ctx.input(0), ctx.input(1), ctx.optional(2), ctx.optional(3)
    activation = ctx.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise UnsupportedOp(f"activation {activation!r} is not supported")
    batch, channels, _ = x.shape
    kernel = weight.shape[2]
    if past is None:
        past = fuel.zeros(batch, channels, kernel - 1, dtype=x.dtype, device=ctx.device)
    padded = fuel.cat([past, x], 2) if kernel > 1 else x
    out = nn_conv.conv_nd(padded, weight, bias, (1,), (0,), (0,), (1,), channels)
    if activation != "none":
        wide = cast(out, dt.float32)
        out = cast(wide * unary(OpKind.SIGMOID, wide), x.dtype)
    state = padded.narrow(2, padded.shape[2] - (kernel - 1), kernel - 1)
    return [out, state]


def _modifier(ctx: NodeContext, name: str, scores: Tensor) -> Tensor:
    graph = ctx.attr(name)
    if graph is None:
        return scores
    result = ctx.run_subgraph(graph, [scores])
    if len(result) != 1:
        raise OnnxError(f"{name} must produce exactly one output")
    return cast(result[0], scores.dtype)


@onnx_op("FlexAttention", domain="ai.onnx.preview")
def flex_attention(ctx: NodeContext) -> Tensor:
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise OnnxError("FlexAttention takes rank-4 query, key and value")
    heads = q.shape[1]
    if heads != k.shape[1]:
        if heads % k.shape[1]:
            raise OnnxError("query heads must be a multiple of key/value heads")
        k, v = repeat_heads(k, heads // k.shape[1]), repeat_heads(v, heads // k.shape[1])
    scale = ctx.attr("scale")
    scale = 1.0 / np.sqrt(q.shape[3]) if scale is None else scale
    root = float(np.sqrt(np.float32(scale)).astype(q.dtype.numpy)) \
        if q.dtype is not dt.bfloat16 else float(np.sqrt(np.float32(scale)))
    precision = ctx.attr("softmax_precision")
    if precision is not None:
        work = fuel_dtype(precision, ctx.label)
    else:
        work = dt.float32 if q.dtype.itemsize < 4 else q.dtype
    scores = cast(matmul(q * root, k.transpose(-2, -1) * root), work)
    scores = _modifier(ctx, "score_mod", scores)
    probabilities = _modifier(ctx, "prob_mod", softmax(scores, -1))
    return cast(matmul(probabilities, cast(v, work)), v.dtype)
