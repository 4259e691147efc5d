"""``com.microsoft`` QOperator ops that onnxruntime's ``quantize_static`` writes: QGemm,
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat,
QLinearGlobalAveragePool and QLinearAveragePool. Each follows onnxruntime's contrib-op
documentation and its CPU kernels' order of operations (the integer sums exactly, then
one float multiply and a round half to even), so outputs agree with onnxruntime's up to a
value on a rounding edge. Tests compare with onnxruntime."""

from __future__ import annotations

import numpy as np

from fuel.frontend.build import make
from fuel.frontend.reduce import reduce
from fuel.ir import dtype as dt
from fuel.ir.params import ConvParams, QLinearBinaryParams, QLinearConvParams
from fuel.nn import conv as nn_conv
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError
from fuel.onnx.ops.common import OpKind, Tensor, axis_of, cast, unary, where
from fuel.onnx.ops.conv import window_padding
from fuel.onnx.ops.quantize import _scalar_int, host, integer_matmul, quantize, requantize
from fuel.onnx.ops.quantized_tables import tabulated

MS = "com.microsoft"


def dequantized(x: Tensor, scale: Tensor, zero: Tensor | None) -> Tensor:
    """(x - zero) * scale in float32, per tensor."""
    shifted = cast(x, dt.float32)
    if zero is not None:
        shifted = shifted - cast(zero, dt.float32).reshape(())
    return shifted * cast(scale, dt.float32).reshape(())


def _target(zero: Tensor | None, like: Tensor) -> dt.DType:
    return zero.dtype if zero is not None else like.dtype


def _quantized(value: Tensor, scale: Tensor, zero: Tensor | None, like: Tensor) -> Tensor:
    zero = zero.reshape(()) if zero is not None else None
    return quantize(value, cast(scale, dt.float32).reshape(()), zero, _target(zero, like))


def _binary(ctx: NodeContext, combine, multiply: bool) -> Tensor:
    """A chain of one 8-bit source (QLinearMul(x, HardSigmoid(x)), ...) as a table lookup;
    else QLINEAR_BINARY where the scales and zero points are one-value constants; else
    float32 operations on the de-quantized operands."""
    a = dequantized(ctx.input(0), ctx.input(1), ctx.optional(2))
    b = dequantized(ctx.input(3), ctx.input(4), ctx.optional(5))
    result = _quantized(combine(a, b), ctx.input(6), ctx.optional(7), ctx.input(0))
    table = tabulated(ctx, result)
    if table is not result:
        return table
    x, y = ctx.input(0), ctx.input(3)
    if x.dtype is not y.dtype or result.dtype is not x.dtype:
        return result
    values = [host(ctx, ctx.optional(index)) for index in range(1, 8)]
    scales, zeros = [values[0], values[3], values[5]], [values[1], values[4], values[6]]
    if any(v is None or v.size != 1 for v in scales) or any(
            v is not None and v.size != 1 for v in zeros):
        return result
    scale = [float(np.float32(v.reshape(-1)[0])) for v in scales]
    zero = [0 if v is None else int(v.reshape(-1)[0]) for v in zeros]
    params = QLinearBinaryParams(multiply, scale[0], zero[0], scale[1], zero[1], scale[2],
                                 zero[2])
    return make(OpKind.QLINEAR_BINARY, (x._node, y._node), params)


@onnx_op("QLinearAdd", domain=MS)
def qlinear_add(ctx: NodeContext) -> Tensor:
    """C = quantize(dequantize(A) + dequantize(B)), with NumPy broadcasting."""
    return _binary(ctx, lambda a, b: a + b, False)


@onnx_op("QLinearMul", domain=MS)
def qlinear_mul(ctx: NodeContext) -> Tensor:
    """C = quantize(dequantize(A) * dequantize(B)), with NumPy broadcasting."""
    return _binary(ctx, lambda a, b: a * b, True)


def _unary(ctx: NodeContext, function) -> Tensor:
    """quantize(function(dequantize(x))), tabulated (onnxruntime tabulates these too)."""
    x = dequantized(ctx.input(0), ctx.input(1), ctx.optional(2))
    return tabulated(ctx, _quantized(function(x), ctx.input(3), ctx.optional(4), ctx.input(0)))


@onnx_op("QLinearSigmoid", domain=MS)
def qlinear_sigmoid(ctx: NodeContext) -> Tensor:
    return _unary(ctx, lambda x: unary(OpKind.SIGMOID, x))


@onnx_op("QLinearLeakyRelu", domain=MS)
def qlinear_leaky_relu(ctx: NodeContext) -> Tensor:
    alpha = float(ctx.attr("alpha", 0.01))
    return _unary(ctx, lambda x: where(x >= 0, x, x * alpha, dtype=x.dtype))


@onnx_op("QLinearConcat", domain=MS)
def qlinear_concat(ctx: NodeContext) -> Tensor:
    """Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per operand; each
    operand re-quantized to Y's scale and zero point (a table lookup; copied as is when they
    are the same tensors), then concatenated along ``axis``."""
    import fuel

    y_scale, y_zero = ctx.input(0), ctx.optional(1)
    if (ctx.num_inputs - 2) % 3 or ctx.num_inputs < 5:
        raise OnnxError(f"QLinearConcat takes 2 + 3 * n inputs, got {ctx.num_inputs}")
    parts = []
    for start in range(2, ctx.num_inputs, 3):
        x = ctx.input(start)
        same = (ctx.inputs[start + 1] is ctx.inputs[0]
                and ctx.inputs[start + 2] is ctx.inputs[1])
        parts.append(x if same else tabulated(ctx, _quantized(
            dequantized(x, ctx.input(start + 1), ctx.optional(start + 2)), y_scale, y_zero,
            x)))
    axis = axis_of(ctx.attr("axis"), parts[0].ndim)
    return fuel.cat(parts, axis)


@onnx_op("QLinearGlobalAveragePool", domain=MS)
def qlinear_global_average_pool(ctx: NodeContext) -> Tensor:
    """The mean over the spatial dims, kept as size-1 dims (``channels_last``: (N, ..., C)):
    the integer sum less zero * count, times x_scale / (y_scale * count), rounded."""
    x, x_scale, x_zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    y_scale, y_zero = ctx.input(3), ctx.optional(4)
    last = bool(ctx.attr("channels_last", 0))
    axes = tuple(range(1, x.ndim - 1)) if last else tuple(range(2, x.ndim))
    count = int(np.prod([x.shape[a] for a in axes]))
    if not last:
        fast = _pool_as_depthwise(ctx, x, x_scale, x_zero, y_scale, y_zero, count)
        if fast is not None:
            return fast
    total = reduce(OpKind.SUM, cast(x, dt.int32), axes, True)
    if x_zero is not None:
        total = total - cast(x_zero, dt.int32).reshape(()) * count
    multiplier = cast(x_scale, dt.float32).reshape(()) / (
        cast(y_scale, dt.float32).reshape(()) * float(count))
    return requantize(total, multiplier, y_zero, x.dtype)


def _pool_as_depthwise(ctx: NodeContext, x: Tensor, x_scale, x_zero, y_scale, y_zero,
                       count: int) -> Tensor | None:
    """The channels-first mean as QLINEAR_CONV's depthwise form (one launch, no int32 copy):
    weights of ones over the whole plane summing x - x_zero, multiplier
    x_scale / (y_scale * count): the same integer sum and rounding (the kernel's plane-dot
    form). When the scales and zero points are constants and the plane has at most 65536
    values (int32 sums); else None."""
    xz, yz = _scalar_int(ctx, x_zero), _scalar_int(ctx, y_zero)
    scales = [host(ctx, s) for s in (x_scale, y_scale)]
    if (x.ndim != 4 or count > 65536 or xz is None or yz is None
            or any(v is None or v.size != 1 for v in scales)
            or x.dtype not in (dt.uint8, dt.int8)):
        return None
    target = y_zero.dtype if y_zero is not None else x.dtype
    channels, height, width = x.shape[1:]
    multiplier = scales[0].astype(np.float32).reshape(()) / (
        scales[1].astype(np.float32).reshape(()) * np.float32(count))
    params = QLinearConvParams(ConvParams((1, 1), (0, 0), (0, 0), (1, 1), channels), xz, yz,
                               target is dt.int8, constant_weights=True)
    operands = (x, ctx.constant(np.ones((channels, 1, height, width), np.int8)),
                ctx.constant(np.full(channels, 0, np.int32)),
                ctx.constant(np.full(channels, multiplier, np.float32)))
    return make(OpKind.QLINEAR_CONV, tuple(t._node for t in operands), params)


@onnx_op("QLinearAveragePool", domain=MS)
def qlinear_average_pool(ctx: NodeContext) -> Tensor:
    """The window means of the de-quantized input, re-quantized (channels first only): the
    integer window sums (exact in float32), times x_scale, divided by the count, rounded.
    onnxruntime sums de-quantized floats, so a mean on a rounding edge may land a step away."""
    if ctx.attr("channels_last", 0):
        raise OnnxError("QLinearAveragePool with channels_last is not supported")
    x = ctx.input(0)
    shifted = cast(x, dt.float32)
    if ctx.has(2):
        shifted = shifted - cast(ctx.input(2), dt.float32).reshape(())
    rank = x.ndim - 2
    kernel = tuple(ctx.attr("kernel_shape"))
    strides = tuple(ctx.attr("strides") or [1] * rank)
    begin, end = window_padding(ctx, x.shape[2:], kernel, strides, (1,) * rank)
    ceil, include = bool(ctx.attr("ceil_mode", 0)), bool(ctx.attr("count_include_pad", 0))
    sums = nn_conv.avg_pool_nd(shifted, kernel, strides, begin, end, None, ceil, include,
                               divide=False)
    counts = nn_conv.avg_pool_nd(shifted * 0.0 + 1.0, kernel, strides, begin, end, None, ceil,
                                 include, divide=False) if not include else None
    scale = cast(ctx.input(1), dt.float32).reshape(())
    if counts is None:
        counts = float(np.prod(kernel))
    means = sums * scale / counts
    return _quantized(means, ctx.input(3), ctx.optional(4), x)


@onnx_op("QGemm", domain=MS)
def qgemm(ctx: NodeContext) -> Tensor:
    """Y = alpha * (A - a_zero)(B - b_zero) + C (int32 bias) in int32, then re-quantized with
    alpha * a_scale * b_scale / y_scale (per column when b's scale is), or, without
    y_zero_point, scaled to float by alpha * a_scale * b_scale (/ y_scale when given)."""
    a, a_scale, a_zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    b, b_scale, b_zero = ctx.input(3), ctx.input(4), ctx.optional(5)
    bias, y_scale, y_zero = ctx.optional(6), ctx.optional(7), ctx.optional(8)
    if ctx.attr("transA", 0):
        a = a.permute(1, 0)
    transposed = bool(ctx.attr("transB", 0))
    fast = _integer_qgemm(ctx, a, a_zero, b, b_zero, bias, b_scale, y_scale, y_zero,
                          transposed, float(ctx.attr("alpha", 1.0)))
    if fast is not None:
        return fast
    product = integer_matmul(ctx, a, a_zero, b, b_zero, transposed)
    if bias is not None:
        product = product + cast(bias, dt.float32)
    alpha = float(ctx.attr("alpha", 1.0))
    a_scale = cast(a_scale, dt.float32).reshape(())
    scale = (a_scale * alpha if alpha != 1.0 else a_scale) * cast(b_scale, dt.float32).reshape(-1)
    if y_scale is not None:
        scale = scale / cast(y_scale, dt.float32).reshape(())
    if b_scale.numel() == 1:
        scale = scale.reshape(())
    if y_zero is None:
        return product * scale
    return requantize(product, scale, y_zero, a.dtype)


def _integer_qgemm(ctx: NodeContext, a: Tensor, a_zero, b: Tensor, b_zero, bias, b_scale,
                   y_scale, y_zero, transposed: bool, alpha: float) -> Tensor | None:
    """A quantized-output QGemm on QLINEAR_CONV (8-bit products summed exactly in int32, the
    8-bit weights read as stored): A (M, K) as a 1 x K x M x 1 image, B as N 1x1 filters, the
    (1, N, M, 1) result read back as (M, N); when B, the bias, the scales and the zero points
    are constants and B less its zero point fits int8; else None."""
    a_scale = ctx.input(1)
    weights, shift, constant_bias = host(ctx, b), host(ctx, b_zero), host(ctx, bias)
    scales = [host(ctx, s) for s in (a_scale, b_scale, y_scale)]
    az, yz = _scalar_int(ctx, a_zero), _scalar_int(ctx, y_zero)
    if (y_zero is None or a.ndim != 2 or a.dtype not in (dt.uint8, dt.int8)
            or y_zero.dtype not in (dt.uint8, dt.int8) or weights is None or weights.ndim != 2
            or az is None or yz is None or any(v is None for v in scales)
            or (b_zero is not None and shift is None)
            or (bias is not None and constant_bias is None)):
        return None
    values = weights.astype(np.int32)
    if not transposed:
        values = values.T
    if shift is not None:
        values = values - (shift.astype(np.int32).reshape(-1, 1) if shift.size > 1
                           else int(shift.reshape(-1)[0]))
    if values.min(initial=0) < -128 or values.max(initial=0) > 127:
        return None
    columns, depth = values.shape
    first = scales[0].astype(np.float32).reshape(())
    if alpha != 1.0:
        first = first * np.float32(alpha)
    multiplier = (first * scales[1].astype(np.float32).reshape(-1)
                  / scales[2].astype(np.float32).reshape(()))
    params = QLinearConvParams(ConvParams((1, 1), (0, 0), (0, 0), (1, 1), 1), az, yz,
                               y_zero.dtype is dt.int8, constant_weights=True)
    rows = a.shape[0]
    image = a.permute(1, 0).contiguous().reshape(1, depth, rows, 1)
    operands = (image, ctx.constant(np.ascontiguousarray(
        values.reshape(columns, depth, 1, 1).astype(np.int8))), ctx.constant(
        np.broadcast_to(np.asarray(0 if constant_bias is None else constant_bias, np.int32)
                        .reshape(-1), (columns,)).copy()),
                ctx.constant(np.broadcast_to(multiplier.astype(np.float32).reshape(-1),
                                             (columns,)).copy()))
    out = make(OpKind.QLINEAR_CONV, tuple(t._node for t in operands), params)
    return out.reshape(columns, rows).permute(1, 0)
