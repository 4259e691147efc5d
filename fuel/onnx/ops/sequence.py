"""Sequence and Optional ops: a sequence is a Python list of lazy tensors."""

from __future__ import annotations

import numpy as np

import fuel
from fuel.ir import dtype as dt
from fuel.onnx.context import NodeContext, OptionalValue, SequenceValue, onnx_op
from fuel.onnx.errors import OnnxError
from fuel.onnx.ops.common import Tensor, axis_of, narrow


def _sequence(ctx: NodeContext, index: int) -> SequenceValue:
    value = ctx.value(index)
    if isinstance(value, OptionalValue):
        value = value.value
    if not isinstance(value, SequenceValue):
        raise OnnxError(f"input {index} must be a sequence, got {type(value).__name__}")
    return value


def _position(ctx: NodeContext, index: int, length: int, default: int, insert: bool) -> int:
    position = ctx.static_scalar(index)
    if position is None:
        return default
    position = int(position)
    limit = length + 1 if insert else length
    if not -limit <= position < limit:
        raise OnnxError(f"position {position} is out of range for a sequence of {length}")
    return position + length if position < 0 else position


@onnx_op("SequenceConstruct")
def sequence_construct(ctx: NodeContext) -> SequenceValue:
    items = [ctx.input(i) for i in range(ctx.num_inputs)]
    return SequenceValue(items, items[0].dtype if items else None)


@onnx_op("SequenceEmpty")
def sequence_empty(ctx: NodeContext) -> SequenceValue:
    return SequenceValue([], ctx.elem_dtype("dtype", dt.float32))


@onnx_op("SequenceAt")
def sequence_at(ctx: NodeContext) -> Tensor:
    sequence = _sequence(ctx, 0)
    return sequence.items[_position(ctx, 1, len(sequence.items), 0, False)]


@onnx_op("SequenceInsert")
def sequence_insert(ctx: NodeContext) -> SequenceValue:
    sequence = _sequence(ctx, 0)
    items = list(sequence.items)
    items.insert(_position(ctx, 2, len(items), len(items), True), ctx.input(1))
    return SequenceValue(items, sequence.dtype or ctx.input(1).dtype)


@onnx_op("SequenceErase")
def sequence_erase(ctx: NodeContext) -> SequenceValue:
    sequence = _sequence(ctx, 0)
    items = list(sequence.items)
    del items[_position(ctx, 1, len(items), len(items) - 1, False)]
    return SequenceValue(items, sequence.dtype)


@onnx_op("SequenceLength")
def sequence_length(ctx: NodeContext) -> Tensor:
    return ctx.constant(np.array(len(_sequence(ctx, 0).items), dtype=np.int64))


@onnx_op("ConcatFromSequence")
def concat_from_sequence(ctx: NodeContext) -> Tensor:
    items = _sequence(ctx, 0).items
    if not items:
        raise OnnxError("ConcatFromSequence of an empty sequence")
    axis = ctx.attr("axis")
    if ctx.attr("new_axis", 0):
        return fuel.stack(items, axis_of(axis, items[0].ndim + 1))
    return fuel.cat(items, axis_of(axis, items[0].ndim))


@onnx_op("SplitToSequence")
def split_to_sequence(ctx: NodeContext) -> SequenceValue:
    x = ctx.input(0)
    axis = axis_of(ctx.attr("axis", 0), x.ndim)
    length = x.shape[axis]
    split = ctx.static(1)
    if split is None:
        parts = [narrow(x, axis, i, i + 1) for i in range(length)]
        if not ctx.attr("keepdims", 1):
            parts = [p.squeeze(axis) for p in parts]
        return SequenceValue(parts, x.dtype)
    split = np.asarray(split).reshape(-1) if np.asarray(split).ndim else int(split)
    if isinstance(split, int):
        sizes = [min(split, length - start) for start in range(0, length, split)]
    else:
        sizes = [int(s) for s in split]
    if sum(sizes) != length:
        raise OnnxError(f"split sizes {sizes} do not add up to {length}")
    parts, start = [], 0
    for size in sizes:
        parts.append(narrow(x, axis, start, start + size))
        start += size
    return SequenceValue(parts, x.dtype)


@onnx_op("SequenceMap")
def sequence_map(ctx: NodeContext) -> list[SequenceValue]:
    body = ctx.attr("body")
    first = _sequence(ctx, 0)
    values = [ctx.value(i) for i in range(ctx.num_inputs)]
    collected: list[list] = [[] for _ in body.output]
    for position in range(len(first.items)):
        inputs = [v.items[position] if isinstance(v, SequenceValue) else v for v in values]
        for out, value in zip(collected, ctx.run_subgraph(body, inputs)):
            out.append(value)
    return [SequenceValue(items, items[0].dtype if items else None) for items in collected]


@onnx_op("Optional")
def optional(ctx: NodeContext) -> OptionalValue:
    return OptionalValue(ctx.value(0) if ctx.has(0) else None, ctx.attr("type"))


@onnx_op("OptionalHasElement")
def optional_has_element(ctx: NodeContext) -> Tensor:
    value = ctx.value(0) if ctx.has(0) else None
    present = value.value is not None if isinstance(value, OptionalValue) else value is not None
    return ctx.constant(np.array(present))


@onnx_op("OptionalGetElement")
def optional_get_element(ctx: NodeContext):
    value = ctx.value(0)
    if isinstance(value, OptionalValue):
        if value.value is None:
            raise OnnxError("OptionalGetElement of an empty optional")
        return value.value
    if value is None:
        raise OnnxError("OptionalGetElement needs an input")
    return value
