"""Linear quantization: QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked),
DynamicQuantizeLinear, QLinearMatMul, QLinearConv (8- and 16-bit integers, int32, float8)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fuel.frontend.build import make
from fuel.frontend.structured import matmul
from fuel.ir import dtype as dt
from fuel.ir.ops import CastParams
from fuel.nn import conv as nn_conv
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedDType
from fuel.onnx.ops.common import OpKind, Tensor, axis_of, cast, unary, where
from fuel.onnx.ops.conv import window_padding
from fuel.onnx.proto import fuel_dtype

QUANTIZED = (dt.uint8, dt.int8, dt.uint16, dt.int16, dt.int4, dt.uint4, dt.int2, dt.uint2)
FLOAT_QUANTIZED = dt.FLOAT8_DTYPES + (dt.float4_e2m1fn,)


def spread(value: Tensor, like: Tensor, axis: int, block: int) -> Tensor:
    """A scale or zero point broadcast against ``like``: a scalar, one value per ``axis``
    entry, or one value per ``block`` entries along ``axis``."""
    if value.numel() == 1:
        return value.reshape(())
    axis = axis_of(axis, like.ndim)
    if not block:
        if value.ndim != 1:
            raise OnnxError(f"a per-axis scale must be 1-D, got shape {value.shape}")
        return value.reshape(tuple(-1 if d == axis else 1 for d in range(like.ndim)))
    picks = np.minimum(np.arange(like.shape[axis]) // block, value.shape[axis] - 1)
    import fuel

    return value.index_select(axis, fuel.tensor(picks.astype(np.int64), device=like.device))


def quantize(x: Tensor, scale: Tensor, zero: Tensor | None, target: dt.DType,
             saturate: bool = True) -> Tensor:
    """saturate(round_half_even(x / scale) + zero) as ``target``; for a float8 target,
    x / scale rounded to the nearest float8, clamped to its range when ``saturate`` (ONNX
    requires a float8 zero point to be 0; like onnxruntime, it is not added, keeping -0)."""
    if target not in QUANTIZED + FLOAT_QUANTIZED:
        raise UnsupportedDType(f"quantizing to {target.name} is not supported")
    work = dt.float64 if dt.float64 in (x.dtype, scale.dtype) else dt.float32
    ratio = cast(x, work) / cast(scale, work)
    if target in FLOAT_QUANTIZED:
        return make(OpKind.CAST, (ratio._node,), CastParams(target, saturate))
    rounded = unary(OpKind.ROUND, ratio)
    if zero is not None:
        rounded = rounded + cast(zero, work)
    info = ml_dtypes.iinfo(target.numpy)
    return cast(rounded.clamp(float(info.min), float(info.max)), target)


@onnx_op("QuantizeLinear")
def quantize_linear(ctx: NodeContext) -> Tensor:
    x, scale, zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    target = zero.dtype if zero is not None else ctx.elem_dtype("output_dtype", dt.uint8)
    scale = spread(scale, x, axis, block)
    zero = spread(zero, x, axis, block) if zero is not None else None
    return quantize(x, scale, zero, target, bool(ctx.attr("saturate", 1)))


@onnx_op("DequantizeLinear")
def dequantize_linear(ctx: NodeContext) -> Tensor:
    x, scale, zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    if x.dtype not in QUANTIZED + FLOAT_QUANTIZED + (dt.int32,):
        raise UnsupportedDType(f"dequantizing {x.dtype.name} is not supported")
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    out = ctx.attr("output_dtype")
    target = fuel_dtype(out, ctx.label) if out else scale.dtype
    scale = spread(scale, x, axis, block)
    work = dt.float64 if scale.dtype is dt.float64 else dt.float32
    exact = work if x.dtype in FLOAT_QUANTIZED else dt.int32  # holds every value of x exactly
    shifted = cast(x, exact)
    if zero is not None:
        shifted = shifted - cast(spread(zero, x, axis, block), exact)
    return cast(cast(shifted, work) * cast(scale, work), target)


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: NodeContext) -> list[Tensor]:
    x = ctx.input(0)
    high = x.amax().clamp(min=0.0)
    low = x.amin().clamp(max=0.0)
    span = high - low
    scale = where(span == 0, 1.0, span, dtype=span.dtype) / 255.0
    zero = unary(OpKind.ROUND, (0.0 - low / scale).clamp(0.0, 255.0))
    y = (unary(OpKind.ROUND, x / scale) + zero).clamp(0.0, 255.0)
    return [cast(y, dt.uint8), cast(scale, x.dtype), cast(zero, dt.uint8)]


def _requantize(ctx: NodeContext, accumulated: Tensor, scale: Tensor, y_scale: Tensor,
                y_zero: Tensor | None, fallback: dt.DType) -> Tensor:
    work = dt.float32
    value = cast(accumulated, work) * (cast(scale, work) / cast(y_scale, work))
    target = y_zero.dtype if y_zero is not None else fallback
    if y_zero is not None:
        value = value + cast(y_zero, work)
    info = np.iinfo(target.numpy)
    return cast(unary(OpKind.ROUND, value).clamp(float(info.min), float(info.max)), target)


def _shifted(x: Tensor, zero: Tensor | None, axis: int | None = None) -> Tensor:
    value = cast(x, dt.int32)
    if zero is None:
        return value
    zero = cast(zero, dt.int32)
    if zero.numel() > 1 and axis is not None:
        zero = zero.reshape(tuple(-1 if d == axis else 1 for d in range(x.ndim)))
    elif zero.numel() == 1:
        zero = zero.reshape(())
    return value - zero


@onnx_op("QLinearMatMul")
def qlinear_matmul(ctx: NodeContext) -> Tensor:
    a, a_scale, a_zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    b, b_scale, b_zero = ctx.input(3), ctx.input(4), ctx.optional(5)
    y_scale, y_zero = ctx.input(6), ctx.optional(7)
    product = matmul(_shifted(a, a_zero), _shifted(b, b_zero, b.ndim - 1))
    return _requantize(ctx, product, a_scale * b_scale, y_scale, y_zero, a.dtype)


@onnx_op("QLinearConv")
def qlinear_conv(ctx: NodeContext) -> Tensor:
    x, x_scale, x_zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    w, w_scale, w_zero = ctx.input(3), ctx.input(4), ctx.optional(5)
    y_scale, y_zero, bias = ctx.input(6), ctx.optional(7), ctx.optional(8)
    kernel = tuple(ctx.attr("kernel_shape") or w.shape[2:])
    rank = x.ndim - 2
    strides = tuple(ctx.attr("strides") or [1] * rank)
    dilations = tuple(ctx.attr("dilations") or [1] * rank)
    begin, end = window_padding(ctx, x.shape[2:], kernel, strides, dilations)
    accumulated = nn_conv.conv_nd(_shifted(x, x_zero), _shifted(w, w_zero, 0), None, strides,
                                  begin, end, dilations, ctx.attr("group", 1))
    if bias is not None:
        accumulated = accumulated + cast(bias, dt.int32).reshape((-1,) + (1,) * rank)
    scale = cast(x_scale, dt.float32) * cast(w_scale, dt.float32)
    if scale.numel() > 1:
        scale = scale.reshape((-1,) + (1,) * rank)
    return _requantize(ctx, accumulated, scale, y_scale, y_zero, x.dtype)
