"""Gathers, scatters and the ops whose output shape depends on values (NonZero, Unique,
Compress: their inputs are read on the host while the graph is built)."""

from __future__ import annotations

import numpy as np

import fuel
from fuel.frontend.shape import gather, index_select
from fuel.ir import dtype as dt
from fuel.nn import tensor_ops
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError
from fuel.onnx.ops.common import Tensor, axis_of, cast, where


def _index(t: Tensor) -> Tensor:
    if t.dtype in (dt.int32, dt.int64):
        return t
    if t.dtype.is_integer:
        return cast(t, dt.int64)
    raise OnnxError(f"indices must be integers, got {t.dtype.name}")


@onnx_op("Gather")
def gather_(ctx: NodeContext) -> Tensor:
    x, indices = ctx.input(0), _index(ctx.input(1))
    axis = axis_of(ctx.attr("axis", 0), x.ndim)
    picked = index_select(x, axis, indices.reshape((-1,)))
    return picked.reshape(x.shape[:axis] + indices.shape + x.shape[axis + 1:])


@onnx_op("GatherElements")
def gather_elements(ctx: NodeContext) -> Tensor:
    x, indices = ctx.input(0), _index(ctx.input(1))
    return gather(x, axis_of(ctx.attr("axis", 0), x.ndim), indices)


@onnx_op("GatherND")
def gather_nd(ctx: NodeContext) -> Tensor:
    x, indices = ctx.input(0), cast(_index(ctx.input(1)), dt.int64)
    batch = ctx.attr("batch_dims", 0)
    depth = indices.shape[-1]
    inner = x.shape[batch:batch + depth]
    rest = x.shape[batch + depth:]
    batch_count = int(np.prod(x.shape[:batch], dtype=np.int64))
    block = int(np.prod(inner, dtype=np.int64))
    flat_data = x.reshape((batch_count * block,) + rest)
    sizes = ctx.constant(np.array(inner, dtype=np.int64))
    strides = ctx.constant(np.array([int(np.prod(inner[j + 1:], dtype=np.int64))
                                     for j in range(depth)], dtype=np.int64))
    wrapped = where(indices < 0, indices + sizes, indices, dtype=dt.int64)
    flat = (wrapped * strides).sum(-1) if depth else indices.sum(-1)
    if batch:
        offsets = np.arange(batch_count, dtype=np.int64).reshape(
            x.shape[:batch] + (1,) * (indices.ndim - 1 - batch)) * block
        flat = flat + ctx.constant(offsets)
    picked = index_select(flat_data, 0, flat.reshape((-1,)))
    return picked.reshape(indices.shape[:-1] + rest)


@onnx_op("ScatterElements", "Scatter")
def scatter_elements(ctx: NodeContext) -> Tensor:
    x, indices, updates = ctx.input(0), _index(ctx.input(1)), ctx.input(2)
    axis = axis_of(ctx.attr("axis", 0), x.ndim)
    reduction = ctx.attr("reduction", "none")
    return tensor_ops._scatter_elements(x, axis, indices, updates, reduction)


@onnx_op("ScatterND")
def scatter_nd(ctx: NodeContext) -> Tensor:
    x, indices, updates = ctx.input(0), _index(ctx.input(1)), ctx.input(2)
    return tensor_ops.scatter_nd(x, indices, updates, ctx.attr("reduction", "none"))


@onnx_op("TensorScatter")
def tensor_scatter(ctx: NodeContext) -> Tensor:
    cache, update = ctx.input(0), ctx.input(1)
    axis = axis_of(ctx.attr("axis", -2), cache.ndim)
    if axis == 0:
        raise OnnxError("TensorScatter axis cannot be the batch axis")
    starts = ctx.static(2)
    if starts is None:
        starts = np.zeros((cache.shape[0],), dtype=np.int64)
    length = cache.shape[axis]
    positions = np.asarray(starts, dtype=np.int64).reshape(-1, 1) + np.arange(update.shape[axis])
    if ctx.attr("mode", "linear") == "circular":
        positions = positions % length
    shape = [1] * cache.ndim
    shape[0], shape[axis] = cache.shape[0], update.shape[axis]
    index = ctx.constant(positions.reshape(shape)).expand(*update.shape)
    return tensor_ops._scatter_elements(cache, axis, index, update, "none")


@onnx_op("OneHot")
def one_hot(ctx: NodeContext) -> Tensor:
    indices, values = ctx.input(0), ctx.input(2)
    depth = int(ctx.static_scalar(1))
    axis = ctx.attr("axis", -1)
    rank = indices.ndim + 1
    axis = axis_of(axis, rank)
    work = dt.float64 if indices.dtype.is_floating else dt.int64
    index = cast(indices, work)
    index = where(index < 0, index + depth, index, dtype=work).unsqueeze(axis)
    positions = fuel.arange(depth, dtype=work, device=ctx.device).reshape(
        tuple(-1 if d == axis else 1 for d in range(rank)))
    flat_values = values.reshape((-1,))
    off, on = flat_values[0], flat_values[1]
    return where(index == positions, on, off, dtype=values.dtype)


@onnx_op("ReverseSequence")
def reverse_sequence(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    lengths = np.asarray(ctx.static(1), dtype=np.int64).reshape(-1)
    batch_axis = axis_of(ctx.attr("batch_axis", 1), x.ndim)
    time_axis = axis_of(ctx.attr("time_axis", 0), x.ndim)
    steps = x.shape[time_axis]
    time = np.arange(steps, dtype=np.int64)[:, None]
    source = np.where(time < lengths[None, :], lengths[None, :] - 1 - time, time)
    if batch_axis < time_axis:
        source = source.T
    shape = [1] * x.ndim
    shape[time_axis], shape[batch_axis] = steps, len(lengths)
    index = ctx.constant(source.reshape(shape)).expand(*x.shape)
    return gather(x, time_axis, index)


@onnx_op("Compress")
def compress(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    condition = np.asarray(ctx.static(1)).reshape(-1).astype(bool)
    axis = ctx.attr("axis")
    if axis is None:
        x, axis = x.reshape((-1,)), 0
    axis = axis_of(axis, x.ndim)
    positions = np.nonzero(condition[:x.shape[axis]])[0].astype(np.int64)
    return index_select(x, axis, ctx.constant(positions))


@onnx_op("NonZero")
def non_zero(ctx: NodeContext) -> Tensor:
    values = ctx.static(0)
    if values.ndim == 0:
        values = values.reshape(1)
    return ctx.constant(np.array(np.nonzero(values), dtype=np.int64).reshape(values.ndim, -1))


@onnx_op("Unique")
def unique(ctx: NodeContext) -> list[Tensor]:
    values = ctx.static(0)
    axis = ctx.attr("axis")
    if axis is None:
        y, first, inverse, counts = np.unique(values, True, True, True)
    else:
        axis = axis_of(axis, values.ndim)
        y, first, inverse, counts = np.unique(values, True, True, True, axis=axis)
    inverse = inverse.reshape(-1)
    if not ctx.attr("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(values.reshape(-1) if axis is None else values, first,
                    axis=0 if axis is None else axis)
    outputs = [y, first, inverse, counts]
    return [ctx.constant(np.asarray(v) if i == 0 else np.asarray(v, dtype=np.int64))
            for i, v in enumerate(outputs)]


@onnx_op("ArrayFeatureExtractor", domain="ai.onnx.ml")
def array_feature_extractor(ctx: NodeContext) -> Tensor:
    x, indices = ctx.input(0), _index(ctx.input(1))
    picked = index_select(x, x.ndim - 1, indices.reshape((-1,)))
    if x.ndim == 1:
        return picked.reshape((1, -1))
    return picked
