"""Convolution and pooling ONNX ops: Conv, ConvTranspose, MaxPool, AveragePool, LpPool, the
global pools, MaxUnpool, LRN (ConvInteger: quantize.py)."""

from __future__ import annotations

import math

import numpy as np

from fuel.ir import dtype as dt
from fuel.nn import conv as nn_conv
from fuel.nn import tensor_ops
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.common import OpKind, Tensor, cast, full, unary
from fuel.onnx.ops.reduce import plane_window, reduce_values


def window_padding(ctx: NodeContext, sizes, kernel, strides, dilations):
    """(pads_begin, pads_end) from ``pads`` or ``auto_pad`` (SAME_UPPER/SAME_LOWER/VALID)."""
    rank = len(sizes)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(sizes, kernel, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
        return tuple(begin), tuple(end)
    if auto_pad == "VALID":
        return (0,) * rank, (0,) * rank
    if auto_pad not in ("NOTSET", ""):
        raise UnsupportedOp(f"auto_pad {auto_pad!r} is not supported")
    pads = ctx.attr("pads") or [0] * (2 * rank)
    if len(pads) != 2 * rank or any(p < 0 for p in pads):
        raise OnnxError(f"pads {pads} must be {2 * rank} non-negative values")
    return tuple(pads[:rank]), tuple(pads[rank:])


def _spatial(ctx: NodeContext, x: Tensor, kernel):
    rank = x.ndim - 2
    if rank < 1:
        raise OnnxError(f"input must be (N, C, ...), got shape {x.shape}")
    strides = tuple(ctx.attr("strides") or [1] * rank)
    dilations = tuple(ctx.attr("dilations") or [1] * rank)
    begin, end = window_padding(ctx, x.shape[2:], kernel, strides, dilations)
    return strides, dilations, begin, end


@onnx_op("Conv")
def conv(ctx: NodeContext) -> Tensor:
    x, w, bias = ctx.input(0), ctx.input(1), ctx.optional(2)
    kernel = tuple(ctx.attr("kernel_shape") or w.shape[2:])
    strides, dilations, begin, end = _spatial(ctx, x, kernel)
    return nn_conv.conv_nd(x, w, bias, strides, begin, end, dilations, ctx.attr("group", 1))


@onnx_op("ConvTranspose")
def conv_transpose(ctx: NodeContext) -> Tensor:
    x, w, bias = ctx.input(0), ctx.input(1), ctx.optional(2)
    rank = x.ndim - 2
    kernel = tuple(ctx.attr("kernel_shape") or w.shape[2:])
    strides = tuple(ctx.attr("strides") or [1] * rank)
    dilations = tuple(ctx.attr("dilations") or [1] * rank)
    padding = list(ctx.attr("output_padding") or [0] * rank)
    output_shape = ctx.attr("output_shape")
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if output_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        output_shape = [size * s for size, s in zip(x.shape[2:], strides)]
    if output_shape is not None:
        output_shape = list(output_shape)[-rank:]
        begin, end = [], []
        for i in range(rank):
            natural = (strides[i] * (x.shape[2 + i] - 1) + padding[i]
                       + (kernel[i] - 1) * dilations[i] + 1)
            total = natural - output_shape[i]
            if total < 0:
                padding[i] -= total
                total = 0
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
    else:
        pads = ctx.attr("pads") or [0] * (2 * rank)
        begin, end = pads[:rank], pads[rank:]
    return nn_conv.conv_transpose_nd(x, w, bias, strides, begin, end, dilations,
                                     ctx.attr("group", 1), padding)


def _pool_setup(ctx: NodeContext, x: Tensor):
    kernel = tuple(ctx.attr("kernel_shape") or ())
    if not kernel:
        raise OnnxError("pooling needs kernel_shape")
    rank = len(kernel)
    strides = tuple(ctx.attr("strides") or [1] * rank)
    dilations = tuple(ctx.attr("dilations") or [1] * rank)
    begin, end = window_padding(ctx, x.shape[x.ndim - rank:], kernel, strides, dilations)
    return kernel, strides, dilations, begin, end, bool(ctx.attr("ceil_mode", 0))


@onnx_op("MaxPool")
def max_pool(ctx: NodeContext):
    x = ctx.input(0)
    kernel, strides, dilations, begin, end, ceil_mode = _pool_setup(ctx, x)
    order = ctx.attr("storage_order", 0)
    if not ctx.wants_output(1):
        return nn_conv.max_pool_nd(x, kernel, strides, begin, end, dilations, ceil_mode)
    values, positions = nn_conv.max_pool_nd(x, kernel, strides, begin, end, dilations,
                                            ceil_mode, return_indices=True,
                                            storage_order=order)
    rank = len(kernel)
    plane = int(np.prod(x.shape[x.ndim - rank:], dtype=np.int64))
    lead = x.shape[:x.ndim - rank]
    base = np.arange(int(np.prod(lead, dtype=np.int64)), dtype=np.int64) * plane
    return [values, positions + ctx.constant(base.reshape(lead + (1,) * rank))]


@onnx_op("AveragePool")
def average_pool(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    kernel, strides, dilations, begin, end, ceil_mode = _pool_setup(ctx, x)
    include = bool(ctx.attr("count_include_pad", 0))
    return nn_conv.avg_pool_nd(x, kernel, strides, begin, end, dilations, ceil_mode, include)


@onnx_op("LpPool")
def lp_pool(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    kernel, strides, dilations, begin, end, ceil_mode = _pool_setup(ctx, x)
    p = ctx.attr("p", 2)
    powered = unary(OpKind.ABS, x) ** float(p)
    sums = nn_conv.avg_pool_nd(powered, kernel, strides, begin, end, dilations, ceil_mode,
                               True, divide=False)
    return sums ** (1.0 / p)


def _global(op_type: str):
    def convert(ctx: NodeContext) -> Tensor:
        x = ctx.input(0)
        axes = tuple(range(2, x.ndim))
        window = plane_window(x)
        if op_type != "GlobalLpPool" and window is not None:
            if op_type == "GlobalMaxPool":
                return nn_conv.max_pool_nd(x, window)
            return nn_conv.avg_pool_nd(x, window)
        if op_type == "GlobalMaxPool":
            return reduce_values(x, OpKind.MAX, axes, True, empty="lowest")
        if op_type == "GlobalAveragePool":
            return reduce_values(x, OpKind.MEAN, axes, True)
        p = ctx.attr("p", 2)
        total = reduce_values(unary(OpKind.ABS, x) ** float(p), OpKind.SUM, axes, True)
        return total ** (1.0 / p)

    return convert


for _name in ("GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"):
    onnx_op(_name)(_global(_name))


@onnx_op("MaxUnpool")
def max_unpool(ctx: NodeContext) -> Tensor:
    x, indices = ctx.input(0), cast(ctx.input(1), dt.int64)
    kernel = tuple(ctx.attr("kernel_shape"))
    rank = len(kernel)
    strides = tuple(ctx.attr("strides") or [1] * rank)
    pads = ctx.attr("pads") or [0] * (2 * rank)
    spatial = [(x.shape[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[rank + i]
               for i in range(rank)]
    inferred = tuple(x.shape[:2]) + tuple(spatial)
    total = int(np.prod(inferred, dtype=np.int64))
    flat = full((total,), 0, x.dtype, x.device)
    result = tensor_ops._scatter_elements(flat, 0, indices.reshape((-1,)), x.reshape((-1,)),
                                          "none").reshape(inferred)
    shape = ctx.static_ints(2)
    if shape is None or tuple(shape) == inferred:
        return result
    from fuel.onnx.ops.shape import pad_tensor

    widths = [(0, int(want) - have) for want, have in zip(shape, inferred)]
    return pad_tensor(result, widths, "constant", 0)


@onnx_op("LRN")
def lrn(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    size = ctx.attr("size")
    alpha, beta, bias = ctx.attr("alpha", 1e-4), ctx.attr("beta", 0.75), ctx.attr("bias", 1.0)
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    square = x * x
    widths = [0, 0] * (x.ndim - 2) + [before, after]
    padded = square.reshape(x.shape) if not any(widths) else _pad_channels(square, widths)
    channels = x.shape[1]
    total = None
    for offset in range(size):
        part = padded.narrow(1, offset, channels)
        total = part if total is None else total + part
    return x / ((total * (alpha / size) + bias) ** beta)


def _pad_channels(x: Tensor, widths) -> Tensor:
    from fuel.frontend.shape import pad

    return pad(x, widths, 0)
