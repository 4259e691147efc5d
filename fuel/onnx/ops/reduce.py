"""Reductions, arg-reductions, softmax family, scans and TopK."""

from __future__ import annotations

import numpy as np

import fuel
from fuel.frontend.reduce import argreduce, cumsum, reduce
from fuel.frontend.structured import log_softmax, softmax
from fuel.ir import dtype as dt
from fuel.nn import conv as nn_conv
from fuel.nn import tensor_ops
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError
from fuel.onnx.ops.common import (
    OpKind,
    Tensor,
    axis_of,
    cast,
    full,
    narrow,
    neg_inf,
    pos_inf,
    unary,
    where,
)

# op type -> (pre-transform, reduce op, post-transform, value of an empty reduction)
_REDUCTIONS = {
    "ReduceSum": (None, OpKind.SUM, None, 0),
    "ReduceMean": (None, OpKind.MEAN, None, float("nan")),
    "ReduceMax": (None, OpKind.MAX, None, "lowest"),
    "ReduceMin": (None, OpKind.MIN, None, "highest"),
    "ReduceProd": (None, OpKind.PROD, None, 1),
    "ReduceL1": ("abs", OpKind.SUM, None, 0),
    "ReduceL2": ("square", OpKind.SUM, "sqrt", 0),
    "ReduceLogSum": (None, OpKind.SUM, "log", float("-inf")),
    "ReduceSumSquare": ("square", OpKind.SUM, None, 0),
}


def reduce_axes(ctx: NodeContext, x: Tensor, axes_input_since: int) -> tuple[int, ...] | None:
    """The reduced axes (sorted, non-negative); () when the op is a no-op; None for all."""
    if ctx.opset >= axes_input_since:
        axes = ctx.static_ints(1)
    else:
        axes = ctx.attr("axes")
    if not axes:
        return () if ctx.attr("noop_with_empty_axes", 0) else None
    normalized = sorted({axis_of(a, x.ndim) for a in axes})
    return tuple(normalized)


def _reduce_converter(op_type: str):
    pre, op, post, empty = _REDUCTIONS[op_type]
    since = 13 if op_type == "ReduceSum" else 18

    def convert(ctx: NodeContext) -> Tensor:
        x = ctx.input(0)
        axes = reduce_axes(ctx, x, since)
        keepdims = bool(ctx.attr("keepdims", 1))
        if op is OpKind.MEAN:
            pooled = _plane_mean(x, axes, keepdims)
            if pooled is not None:
                return pooled
        return reduce_values(x, op, axes, keepdims, pre, post, empty)

    return convert


def plane_window(x: Tensor) -> tuple[int, ...] | None:
    """The pooling window over a float32 3-d or 4-d tensor's whole plane (every dim past the
    channels, each known and non-empty), or None: the CPU pools reduce each plane in C, where
    the general reduction runs NumPy's."""
    if x.dtype != dt.float32 or x.ndim not in (3, 4):
        return None
    window = tuple(x.shape[2:])
    return window if all(isinstance(d, int) and d > 0 for d in window) else None


def _plane_mean(x: Tensor, axes, keepdims: bool) -> Tensor | None:
    """A mean over every dim past the channels (torch's ``x.mean([2, 3])`` at a CNN's end) as
    an average pool over each plane (mnasnet's 1280 7x7 planes: one launch of 10 us where
    NumPy's mean took 49), or None for other axes or shapes."""
    window = plane_window(x)
    if (window is None or axes is None or tuple(axes) != tuple(range(2, x.ndim))
            or not all(isinstance(d, int) and d > 0 for d in x.shape[:2])):
        return None
    pooled = nn_conv.avg_pool_nd(x, window)
    return pooled if keepdims else pooled.reshape(tuple(x.shape[:2]))


def reduce_values(x: Tensor, op: OpKind, axes, keepdims: bool, pre=None, post=None,
                  empty=0) -> Tensor:
    """An ONNX reduction of ``x``: transform, reduce over ``axes`` (None: all), transform back
    to ``x``'s dtype; a reduction over no element gives ``empty``."""
    dims = tuple(range(x.ndim)) if axes is None else tuple(axes)
    dtype = x.dtype
    work = x
    exact = op in (OpKind.MAX, OpKind.MIN) or (dtype.is_integer and op in (
        OpKind.SUM, OpKind.PROD) and pre is None and post is None)
    if not exact and not dtype.is_floating:
        work = cast(x, dt.float64)
    if pre == "abs":
        work = unary(OpKind.ABS, work)
    elif pre == "square":
        work = work * work
    if any(work.shape[d] == 0 for d in dims):
        shape = tuple(1 if d in dims else s for d, s in enumerate(x.shape)) if keepdims else \
            tuple(s for d, s in enumerate(x.shape) if d not in dims)
        value = {"lowest": neg_inf(dtype), "highest": pos_inf(dtype)}.get(empty, empty)
        return full(shape, value, dtype, x.device)
    result = reduce(op, work, dims, keepdims) if dims else work
    if post == "sqrt":
        result = unary(OpKind.SQRT, result)
    elif post == "log":
        result = unary(OpKind.LOG, result)
    return cast(result, dtype)


for _name in _REDUCTIONS:
    onnx_op(_name)(_reduce_converter(_name))


@onnx_op("ReduceLogSumExp")
def reduce_log_sum_exp(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    axes = reduce_axes(ctx, x, 18)
    keepdims = bool(ctx.attr("keepdims", 1))
    dims = tuple(range(x.ndim)) if axes is None else axes
    if not dims:
        return x
    work = x if x.dtype.is_floating else cast(x, dt.float64)
    if any(x.shape[d] == 0 for d in dims):
        return reduce_values(x, OpKind.SUM, dims, keepdims, empty=float("-inf"))
    peak = reduce(OpKind.MAX, work, dims, True)
    finite_peak = where(unary(OpKind.ISNAN, peak - peak), 0.0, peak, dtype=peak.dtype)
    total = reduce(OpKind.SUM, unary(OpKind.EXP, work - finite_peak), dims, True)
    result = unary(OpKind.LOG, total) + finite_peak
    if not keepdims:
        result = result.reshape(tuple(s for d, s in enumerate(result.shape) if d not in dims))
    return cast(result, x.dtype)


def _arg_converter(op: OpKind):
    def convert(ctx: NodeContext) -> Tensor:
        x = ctx.input(0)
        axis = axis_of(ctx.attr("axis", 0), x.ndim)
        keepdims = bool(ctx.attr("keepdims", 1))
        if ctx.attr("select_last_index", 0):
            flipped = x.flip(axis)
            index = argreduce(op, flipped, axis, keepdims)
            return (x.shape[axis] - 1) - index
        return argreduce(op, x, axis, keepdims)

    return convert


onnx_op("ArgMax")(_arg_converter(OpKind.ARGMAX))
onnx_op("ArgMin")(_arg_converter(OpKind.ARGMIN))


def _coerced_2d(ctx: NodeContext, x: Tensor, function) -> Tensor:
    """Softmax-style ops before opset 13 flatten to 2-D at ``axis`` (default 1)."""
    if ctx.opset >= 13:
        return function(x, axis_of(ctx.attr("axis", -1), x.ndim))
    axis = axis_of(ctx.attr("axis", 1), x.ndim) if x.ndim else 0
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    flat = x.reshape((outer, -1)) if x.numel() else x.reshape((outer, 0))
    return function(flat, 1).reshape(x.shape)


@onnx_op("Softmax")
def softmax_(ctx: NodeContext) -> Tensor:
    return _coerced_2d(ctx, ctx.input(0), softmax)


@onnx_op("LogSoftmax")
def log_softmax_(ctx: NodeContext) -> Tensor:
    return _coerced_2d(ctx, ctx.input(0), log_softmax)


def hardmax(x: Tensor, axis: int) -> Tensor:
    """1 at the first maximum along ``axis``, 0 elsewhere."""
    index = argreduce(OpKind.ARGMAX, x, axis, True)
    positions = fuel.arange(x.shape[axis], device=x.device).reshape(
        tuple(-1 if d == axis else 1 for d in range(x.ndim)))
    return cast(positions == index, x.dtype)


@onnx_op("Hardmax")
def hardmax_(ctx: NodeContext) -> Tensor:
    return _coerced_2d(ctx, ctx.input(0), hardmax)


def _scan_converter(cumulative):
    def convert(ctx: NodeContext) -> Tensor:
        x = ctx.input(0)
        axis = axis_of(ctx.static_scalar(1), x.ndim)
        work = x.flip(axis) if ctx.attr("reverse", 0) else x
        result = cumulative(work, axis)
        if ctx.attr("exclusive", 0):
            identity = 0 if cumulative is cumsum else 1
            head = full(tuple(1 if d == axis else s for d, s in enumerate(x.shape)), identity,
                        result.dtype, x.device)
            result = fuel.cat([head, narrow(result, axis, 0, x.shape[axis] - 1)], axis)
        if ctx.attr("reverse", 0):
            result = result.flip(axis)
        return cast(result, x.dtype)

    return convert


onnx_op("CumSum")(_scan_converter(cumsum))
onnx_op("CumProd")(_scan_converter(tensor_ops.cumprod))


@onnx_op("TopK")
def top_k(ctx: NodeContext) -> list[Tensor]:
    x = ctx.input(0)
    k = ctx.static_scalar(1) if ctx.opset >= 10 else ctx.attr("k")
    axis = axis_of(ctx.attr("axis", -1), x.ndim)
    if not 0 <= k <= x.shape[axis]:
        raise OnnxError(f"k={k} is out of range for axis {axis} of size {x.shape[axis]}")
    values, indices = tensor_ops.topk(x, int(k), axis, largest=bool(ctx.attr("largest", 1)))
    return [values, indices]
