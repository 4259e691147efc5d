"""Normalizations: BatchNormalization, InstanceNormalization, GroupNormalization,
LayerNormalization, RMSNormalization, LpNormalization, MeanVarianceNormalization."""

from __future__ import annotations

from fuel.frontend.reduce import reduce
from fuel.ir import dtype as dt
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError
from fuel.onnx.ops.common import OpKind, Tensor, axis_of, cast, compute_dtype, unary, where


def _per_channel(t: Tensor, rank: int) -> Tensor:
    return t.reshape((-1,) + (1,) * (rank - 2))


def moments(x: Tensor, axes: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Mean and population variance over ``axes`` (kept as size-1 dims)."""
    mean = reduce(OpKind.MEAN, x, axes, True)
    centered = x - mean
    return mean, reduce(OpKind.MEAN, centered * centered, axes, True)


def _stash(ctx: NodeContext, x: Tensor) -> dt.DType:
    return dt.float32 if ctx.attr("stash_type", 1) == 1 and x.dtype in (
        dt.float16, dt.bfloat16) else x.dtype


@onnx_op("BatchNormalization")
def batch_normalization(ctx: NodeContext):
    x, scale, bias, mean, var = (ctx.input(i) for i in range(5))
    eps = ctx.attr("epsilon", 1e-5)
    training = bool(ctx.attr("training_mode", 0)) if ctx.opset >= 14 else (
        ctx.opset < 7 and not ctx.attr("is_test", 0)) or (
        7 <= ctx.opset < 14 and ctx.num_outputs > 1)
    rank = x.ndim
    work = compute_dtype(x.dtype)
    xw = cast(x, work)
    if training:
        axes = (0,) + tuple(range(2, rank))
        batch_mean, batch_var = moments(xw, axes)
        use_mean, use_var = batch_mean, batch_var
    else:
        use_mean = _per_channel(cast(mean, work), rank)
        use_var = _per_channel(cast(var, work), rank)
    normalized = (xw - use_mean) / unary(OpKind.SQRT, use_var + eps)
    y = normalized * _per_channel(cast(scale, work), rank) + _per_channel(cast(bias, work), rank)
    y = cast(y, x.dtype)
    if not training:
        return [y]
    momentum = ctx.attr("momentum", 0.9)
    running_mean = mean * momentum + cast(batch_mean.reshape((-1,)), mean.dtype) * (1 - momentum)
    running_var = var * momentum + cast(batch_var.reshape((-1,)), var.dtype) * (1 - momentum)
    return [y, running_mean, running_var]


@onnx_op("InstanceNormalization")
def instance_normalization(ctx: NodeContext) -> Tensor:
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    work = compute_dtype(x.dtype)
    xw = cast(x, work)
    mean, var = moments(xw, tuple(range(2, x.ndim)))
    y = (xw - mean) / unary(OpKind.SQRT, var + ctx.attr("epsilon", 1e-5))
    y = y * _per_channel(cast(scale, work), x.ndim) + _per_channel(cast(bias, work), x.ndim)
    return cast(y, x.dtype)


@onnx_op("GroupNormalization")
def group_normalization(ctx: NodeContext) -> Tensor:
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    groups = ctx.attr("num_groups")
    n, channels = x.shape[:2]
    if channels % groups:
        raise OnnxError(f"{channels} channels do not split into {groups} groups")
    work = _stash(ctx, x)
    grouped = cast(x, work).reshape((n, groups, -1))
    mean, var = moments(grouped, (2,))
    normalized = ((grouped - mean) / unary(OpKind.SQRT, var + ctx.attr("epsilon", 1e-5)))
    if scale.shape[0] == groups and groups != channels:
        per_group = (1, groups, 1)
        normalized = normalized * cast(scale, work).reshape(per_group) + cast(
            bias, work).reshape(per_group)
        return cast(normalized.reshape(x.shape), x.dtype)
    normalized = normalized.reshape(x.shape)
    y = normalized * _per_channel(cast(scale, work), x.ndim) + _per_channel(cast(bias, work),
                                                                           x.ndim)
    return cast(y, x.dtype)


@onnx_op("LayerNormalization")
def layer_normalization(ctx: NodeContext) -> list[Tensor]:
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.optional(2)
    axis = axis_of(ctx.attr("axis", -1), x.ndim)
    axes = tuple(range(axis, x.ndim))
    work = _stash(ctx, x)
    xw = cast(x, work)
    mean, var = moments(xw, axes)
    inverse = unary(OpKind.RSQRT, var + ctx.attr("epsilon", 1e-5))
    y = cast((xw - mean) * inverse, x.dtype) if work is not x.dtype else (xw - mean) * inverse
    y = y * scale
    if bias is not None:
        y = y + bias
    return [cast(y, x.dtype), mean, inverse]


@onnx_op("RMSNormalization")
def rms_normalization(ctx: NodeContext) -> Tensor:
    x, scale = ctx.input(0), ctx.input(1)
    axis = axis_of(ctx.attr("axis", -1), x.ndim)
    axes = tuple(range(axis, x.ndim))
    work = _stash(ctx, x)
    xw = cast(x, work)
    mean_square = reduce(OpKind.MEAN, xw * xw, axes, True)
    y = xw * unary(OpKind.RSQRT, mean_square + ctx.attr("epsilon", 1e-5))
    y = cast(y, x.dtype) * scale
    return cast(y, x.dtype)


@onnx_op("LpNormalization")
def lp_normalization(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    axis = axis_of(ctx.attr("axis", -1), x.ndim)
    p = ctx.attr("p", 2)
    if p == 1:
        norm = reduce(OpKind.SUM, unary(OpKind.ABS, x), (axis,), True)
    elif p == 2:
        norm = unary(OpKind.SQRT, reduce(OpKind.SUM, x * x, (axis,), True))
    else:
        raise OnnxError(f"LpNormalization p must be 1 or 2, got {p}")
    norm = cast(norm, x.dtype)
    return where(norm == 0, 0, x / norm, dtype=x.dtype)


@onnx_op("MeanVarianceNormalization")
def mean_variance_normalization(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    axes = tuple(sorted(axis_of(a, x.ndim) for a in (ctx.attr("axes") or [0, 2, 3])))
    mean = reduce(OpKind.MEAN, x, axes, True)
    mean_of_square = reduce(OpKind.MEAN, x * x, axes, True)
    std = unary(OpKind.SQRT, mean_of_square - mean * mean)
    return (x - mean) / (std + 1e-9)
