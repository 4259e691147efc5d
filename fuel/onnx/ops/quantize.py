"""Linear quantization: QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked),
DynamicQuantizeLinear (8- and 16-bit integers, int32, float8), and the integer products
ConvInteger, MatMulInteger, QLinearMatMul and QLinearConv."""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np

from fuel.frontend.build import make
from fuel.frontend.structured import matmul
from fuel.ir import dtype as dt
from fuel.ir.ops import CastParams, definition
from fuel.ir.params import ConvParams, QLinearConvParams, QuantizeParams
from fuel.nn import conv as nn_conv
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedDType
from fuel.onnx.ops.common import OpKind, Tensor, axis_of, cast, unary, where
from fuel.onnx.ops.conv import window_padding
from fuel.onnx.ops.quantized_tables import tabulated
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


def _per_tensor(ctx: NodeContext, scale: Tensor, zero: Tensor | None) -> QuantizeParams | None:
    """One constant float32 scale and one constant integer zero point (or none) as
    QuantizeParams, else None."""
    scales, zeros = host(ctx, scale), host(ctx, zero)
    if scales is None or scales.size != 1 or scale.dtype is not dt.float32 or (
            zero is not None and (zeros is None or zeros.size != 1)):
        return None
    return QuantizeParams(float(scales.reshape(-1)[0]),
                          int(zeros.reshape(-1)[0]) if zero is not None else 0)


@onnx_op("QuantizeLinear")
def quantize_linear(ctx: NodeContext) -> Tensor:
    x, scale, zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    target = zero.dtype if zero is not None else ctx.elem_dtype("output_dtype", dt.uint8)
    single = _per_tensor(ctx, scale, zero) if x.dtype is dt.float32 and target in (
        dt.uint8, dt.int8) else None
    scale = spread(scale, x, axis, block)
    zero = spread(zero, x, axis, block) if zero is not None else None
    quantized = quantize(x, scale, zero, target, bool(ctx.attr("saturate", 1)))
    table = tabulated(ctx, quantized)
    if table is not quantized or single is None or definition(x._node.op).family in (
            "unary", "binary", "select"):
        return table  # a float elementwise producer: the decomposition fuses into its loop
    # per tensor: one pass (QLINEAR_QUANTIZE, the same float32 steps)
    return make(OpKind.QLINEAR_QUANTIZE, (x._node,), replace(single, target=target))


def _constant_dequantized(ctx: NodeContext, x: Tensor, scale: Tensor, zero: Tensor | None,
                          axis: int, block: int, target: dt.DType) -> Tensor | None:
    """A DequantizeLinear of constants (a QDQ model's weights and biases) computed once at
    load with the same float32 steps, or None: 8-bit and int32 values, per tensor or per axis
    scales of float32."""
    values, scales, zeros = host(ctx, x), host(ctx, scale), host(ctx, zero)
    if (values is None or scales is None or (zero is not None and zeros is None) or block
            or x.dtype not in (dt.uint8, dt.int8, dt.int32) or scale.dtype is not dt.float32
            or target is not dt.float32):
        return None
    shifted = values.astype(np.int64)
    if scales.size > 1 or (zeros is not None and zeros.size > 1):
        axis = axis_of(axis, values.ndim)
        if scales.size not in (1, values.shape[axis]):
            return None
    if zeros is not None:
        shifted = shifted - _along(zeros.astype(np.int64), axis, values.ndim)
    result = shifted.astype(np.int32).astype(np.float32) * _along(scales.astype(np.float32),
                                                                   axis, values.ndim)
    return ctx.constant(np.ascontiguousarray(result, np.float32))


@onnx_op("DequantizeLinear")
def dequantize_linear(ctx: NodeContext) -> Tensor:
    x, scale, zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    if x.dtype not in QUANTIZED + FLOAT_QUANTIZED + (dt.int32,):
        raise UnsupportedDType(f"dequantizing {x.dtype.name} is not supported")
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    out = ctx.attr("output_dtype")
    target = fuel_dtype(out, ctx.label) if out else scale.dtype
    folded = _constant_dequantized(ctx, x, scale, zero, axis, block, target)
    if folded is not None:
        return folded
    single = _per_tensor(ctx, scale, zero) if x.dtype in (dt.uint8, dt.int8) and (
        target is dt.float32) else None
    if single is not None:  # per tensor: one pass (QLINEAR_DEQUANTIZE, the same float32 steps)
        return make(OpKind.QLINEAR_DEQUANTIZE, (x._node,), single)
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


# ----------------------------------------------------------------------------- integer products
#
# ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul (and com.microsoft QGemm) multiply
# 8-bit integers with zero points taken off. They run on the float32 kernels with operands
# that hold those integers exactly (|x - zero| <= 255): every product is exact, and so is
# every partial sum below 2**24, which covers a product over K terms whenever
# K * max|x - x_zero| * max|w - w_zero| < 2**24; past that a sum rounds by at most a
# relative 2**-24 (a following float requantization shows it only at a rounding edge). A
# convolution form that transforms its operands (Winograd's) lands near the integer instead:
# integer outputs are rounded to it. QLinearConv with constant weights runs QLINEAR_CONV
# (exact int32 sums, fuel.backends.cpu.qlinear_conv) instead.
# Constant weights are converted once, at import. Other integer widths take exact int32.

EXACT = (dt.uint8, dt.int8, dt.uint4, dt.int4)


def host(ctx: NodeContext, tensor: Tensor | None) -> np.ndarray | None:
    """The host value of a constant input (an initializer), else None (never realizes)."""
    if tensor is None:
        return None
    from fuel.onnx.ops.conv_fusion import known

    return known(ctx, tensor._node)


def _along(value: np.ndarray | Tensor, axis: int, ndim: int):
    """A scalar, or a per-``axis`` vector reshaped to broadcast over a rank-``ndim`` value."""
    count = value.size if isinstance(value, np.ndarray) else value.numel()
    if count == 1:
        return value.reshape(())
    return value.reshape(tuple(-1 if d == axis else 1 for d in range(ndim)))


def float_integers(ctx: NodeContext, x: Tensor, zero: Tensor | None, axis: int = 0) -> Tensor:
    """``x - zero`` as float32 (exact for 8-bit ``x``); ``zero`` per tensor or per ``axis``
    entry. A constant ``x`` (and zero point) is converted on the host, once."""
    value, shift = host(ctx, x), host(ctx, zero)
    if value is not None and (zero is None or shift is not None):
        result = value.astype(np.float32)
        if shift is not None:
            result = result - _along(shift.astype(np.float32), axis, value.ndim)
        return ctx.constant(np.ascontiguousarray(result, np.float32))
    result = cast(x, dt.float32)
    if zero is not None:
        result = result - _along(cast(zero, dt.float32), axis, x.ndim)
    return result


def _shifted(x: Tensor, zero: Tensor | None, axis: int | None = None) -> Tensor:
    """``x - zero`` in int32 (the exact path for wider integers)."""
    value = cast(x, dt.int32)
    if zero is None:
        return value
    return value - _along(cast(zero, dt.int32), axis if axis is not None else 0, x.ndim)


def scale_product(ctx: NodeContext, *scales: Tensor | None, divide: Tensor | None = None,
                  axis: int = 1, ndim: int = 1) -> Tensor:
    """The product of ``scales`` (float32, in order) divided by ``divide``, computed on the
    host when all are constants (the same float32 operations), shaped per ``axis``."""
    values = [host(ctx, s) for s in scales + ((divide,) if divide is not None else ())]
    if all(v is not None for v in values):
        product = values[0].astype(np.float32).reshape(-1)
        for other in values[1:len(scales)]:
            product = product * other.astype(np.float32).reshape(-1)
        if divide is not None:
            product = product / values[-1].astype(np.float32).reshape(-1)
        return _along(ctx.constant(product.astype(np.float32)), axis, ndim)
    product = cast(scales[0], dt.float32).reshape(-1)
    for other in scales[1:]:
        product = product * cast(other, dt.float32).reshape(-1)
    if divide is not None:
        product = product / cast(divide, dt.float32).reshape(-1)
    return _along(product, axis, ndim)


def requantize(accumulated: Tensor, multiplier: Tensor, zero: Tensor | None,
               fallback: dt.DType) -> Tensor:
    """saturate(round_half_even(accumulated * multiplier) + zero) as the zero point's dtype
    (``fallback`` without one): onnxruntime's requantization of an integer sum."""
    value = unary(OpKind.ROUND, cast(accumulated, dt.float32) * multiplier)
    target = zero.dtype if zero is not None else fallback
    if zero is not None:
        value = value + cast(zero, dt.float32).reshape(())
    info = np.iinfo(target.numpy)
    return cast(value.clamp(float(info.min), float(info.max)), target)


def integer_matmul(ctx: NodeContext, a: Tensor, a_zero: Tensor | None, b: Tensor,
                   b_zero: Tensor | None, transposed: bool = False) -> Tensor:
    """(a - a_zero) @ (b - b_zero) (``b`` given transposed when ``transposed``; b_zero per
    tensor or per column), float32 when both are 8-bit, else int32."""
    if a.dtype in EXACT and b.dtype in EXACT:
        left = float_integers(ctx, a, a_zero, a.ndim - 2)
        right = float_integers(ctx, b, b_zero, b.ndim - 2 if transposed else b.ndim - 1)
    else:
        left = _shifted(a, a_zero, a.ndim - 2)
        right = _shifted(b, b_zero, b.ndim - 2 if transposed else b.ndim - 1)
    return matmul(left, right.permute(1, 0) if transposed else right)


def integer_conv(ctx: NodeContext, x: Tensor, x_zero: Tensor | None, w: Tensor,
                 w_zero: Tensor | None, bias: Tensor | None = None) -> Tensor:
    """conv(x - x_zero, w - w_zero) + bias with the node's conv attributes (w_zero per
    tensor or per output channel): float32 on the float convolution when x and w are 8-bit,
    else int32."""
    kernel = tuple(ctx.attr("kernel_shape") or w.shape[2:])
    rank = x.ndim - 2
    strides = tuple(ctx.attr("strides") or [1] * rank)
    dilations = tuple(ctx.attr("dilations") or [1] * rank)
    begin, end = window_padding(ctx, x.shape[2:], kernel, strides, dilations)
    groups = int(ctx.attr("group", 1))
    if x.dtype not in EXACT or w.dtype not in EXACT:
        out = nn_conv.conv_nd(_shifted(x, x_zero), _shifted(w, w_zero, 0), None, strides,
                              begin, end, dilations, groups)
        return out if bias is None else out + cast(bias, dt.int32).reshape(
            (-1,) + (1,) * rank)
    left, right = float_integers(ctx, x, x_zero), float_integers(ctx, w, w_zero, 0)
    constant_bias = host(ctx, bias) if bias is not None else np.zeros(w.shape[0])
    if 1 <= rank <= 3 and constant_bias is not None:
        params = ConvParams(strides, tuple(begin), tuple(end), dilations, groups)
        return nn_conv.conv_fused(left, right, ctx.constant(
            np.asarray(constant_bias, np.float32).reshape(-1)), params)
    out = nn_conv.conv_nd(left, right, None, strides, begin, end, dilations, groups)
    return out if bias is None else out + cast(bias, dt.float32).reshape((-1,) + (1,) * rank)


def _as_int32(value: Tensor) -> Tensor:
    """An integer sum held in float32 or int32, as int32: a float sum is rounded first (a
    convolution form that transforms its operands, Winograd's, lands near the integer)."""
    if value.dtype is dt.int32:
        return value
    return cast(unary(OpKind.ROUND, value), dt.int32)


@onnx_op("ConvInteger")
def conv_integer(ctx: NodeContext) -> Tensor:
    return _as_int32(integer_conv(ctx, ctx.input(0), ctx.optional(2), ctx.input(1),
                                  ctx.optional(3)))


@onnx_op("MatMulInteger")
def matmul_integer(ctx: NodeContext) -> Tensor:
    a, b = ctx.input(0), ctx.input(1)
    if a.ndim < 2 or b.ndim < 2:  # vectors: the exact int32 product
        return matmul(_shifted(a, ctx.optional(2), a.ndim - 1),
                      _shifted(b, ctx.optional(3), b.ndim - 1))
    return _as_int32(integer_matmul(ctx, a, ctx.optional(2), b, ctx.optional(3)))


@onnx_op("QLinearMatMul")
def qlinear_matmul(ctx: NodeContext) -> Tensor:
    a, a_scale, a_zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    b, b_scale, b_zero = ctx.input(3), ctx.input(4), ctx.optional(5)
    y_scale, y_zero = ctx.input(6), ctx.optional(7)
    if a.ndim < 2 or b.ndim < 2:
        product = matmul(_shifted(a, a_zero, a.ndim - 1), _shifted(b, b_zero, b.ndim - 1))
        multiplier = scale_product(ctx, a_scale, b_scale, divide=y_scale, axis=0, ndim=1)
    else:
        product = integer_matmul(ctx, a, a_zero, b, b_zero)
        multiplier = scale_product(ctx, a_scale, b_scale, divide=y_scale, axis=product.ndim - 1,
                                   ndim=product.ndim)
    return requantize(product, multiplier, y_zero, a.dtype)


def _scalar_int(ctx: NodeContext, tensor: Tensor | None) -> int | None:
    """A constant one-value zero point as an int (0 when absent), else None."""
    if tensor is None:
        return 0
    value = host(ctx, tensor)
    return int(value.reshape(-1)[0]) if value is not None and value.size == 1 else None


def _integer_kernel(ctx: NodeContext, x: Tensor, x_zero, w: Tensor, w_zero, bias,
                    multiplier: np.ndarray, y_zero, target: dt.DType) -> Tensor | None:
    """QLINEAR_CONV (8-bit sums in int32, fuel.backends.cpu.qlinear_conv) when the weights,
    bias, zero points and scales are constants, the weights less their zero point fit int8
    and the convolution is 1-d or 2-d; else None."""
    weights, shift, constant_bias = host(ctx, w), host(ctx, w_zero), host(ctx, bias)
    xz, yz = _scalar_int(ctx, x_zero), _scalar_int(ctx, y_zero)
    if (x.dtype not in (dt.uint8, dt.int8) or target not in (dt.uint8, dt.int8)
            or weights is None or not 1 <= x.ndim - 2 <= 2 or xz is None or yz is None
            or (w_zero is not None and shift is None) or (bias is not None and
                                                           constant_bias is None)):
        return None
    channels = weights.shape[0]
    values = weights.astype(np.int32)
    if shift is not None:
        values = values - _along(shift.astype(np.int32), 0, values.ndim)
    if values.min(initial=0) < -128 or values.max(initial=0) > 127:
        return None
    kernel = tuple(ctx.attr("kernel_shape") or w.shape[2:])
    rank = x.ndim - 2
    strides = tuple(ctx.attr("strides") or [1] * rank)
    dilations = tuple(ctx.attr("dilations") or [1] * rank)
    begin, end = window_padding(ctx, x.shape[2:], kernel, strides, dilations)
    params = QLinearConvParams(ConvParams(strides, tuple(begin), tuple(end), dilations,
                                          int(ctx.attr("group", 1))), xz, yz,
                               target is dt.int8, constant_weights=True)
    operands = (x, ctx.constant(values.astype(np.int8)), ctx.constant(
        np.broadcast_to(np.asarray(0 if constant_bias is None else constant_bias, np.int32)
                        .reshape(-1), (channels,)).copy()),
                ctx.constant(np.broadcast_to(multiplier.reshape(-1), (channels,)).copy()))
    return make(OpKind.QLINEAR_CONV, tuple(t._node for t in operands), params)


@onnx_op("QLinearConv")
def qlinear_conv(ctx: NodeContext) -> Tensor:
    x, x_scale, x_zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    w, w_scale, w_zero = ctx.input(3), ctx.input(4), ctx.optional(5)
    y_scale, y_zero, bias = ctx.input(6), ctx.optional(7), ctx.optional(8)
    scales = [host(ctx, s) for s in (x_scale, w_scale, y_scale)]
    if all(s is not None for s in scales):
        multiplier = (scales[0].astype(np.float32).reshape(-1) * scales[1].astype(
            np.float32).reshape(-1) / scales[2].astype(np.float32).reshape(-1))
        fast = _integer_kernel(ctx, x, x_zero, w, w_zero, bias, multiplier, y_zero,
                               y_zero.dtype if y_zero is not None else x.dtype)
        if fast is not None:
            return fast
    accumulated = integer_conv(ctx, x, x_zero, w, w_zero, bias)
    multiplier = scale_product(ctx, x_scale, w_scale, divide=y_scale, axis=1, ndim=x.ndim)
    return requantize(accumulated, multiplier, y_zero, x.dtype)
