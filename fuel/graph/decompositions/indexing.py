"""Indexing and placement from INDEX_SELECT, SLICE_ASSIGN, ARANGE and elementwise ops:
gather (flat positions into the flattened input), tril/triu (an index mask), pad."""

from __future__ import annotations

from fuel.graph.decompositions.builder import Builder
from fuel.graph.decompositions.registry import decomposes
from fuel.graph.node import Node
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind


def positions(build: Builder, size: int, rank: int, dim: int) -> Node:
    """0..size-1 along ``dim`` of a rank-``rank`` tensor of ones elsewhere (int64)."""
    return build.unsqueeze_to(build.arange(size), rank, (dim,))


def wrapped(build: Builder, index: Node, size: int) -> Node:
    """``index`` as int64 with negative positions counted from ``size``."""
    index = build.cast(index, dt.int64)
    negative = build.elementwise(OpKind.LT, index, build.constant(0, dt.int64))
    return build.where(negative, build.scalar(OpKind.ADD, index, size), index)


def flat_select(build: Builder, source: Node, flat_index: Node) -> Node:
    """``source`` read at row-major flat positions ``flat_index`` (any shape)."""
    total = 1
    for size in source.shape:
        total *= size
    flat = build.reshape(source, (total,))
    count = 1
    for size in flat_index.shape:
        count *= size
    picked = build.index_select(flat, 0, build.reshape(flat_index, (count,)))
    return build.reshape(picked, flat_index.shape)


@decomposes(OpKind.GATHER)
def gather(node: Node, build: Builder) -> Node:
    """source[i0, ..., index[i], ..., ik] as one index_select over flat positions."""
    source, index = node.inputs
    dim, rank = node.params.dim, len(index.shape)
    region = tuple(source.shape[a] if a == dim else index.shape[a] for a in range(rank))
    if region != source.shape:
        for axis in range(rank):
            if region[axis] != source.shape[axis]:
                source = build.slice(source, axis, 0, region[axis])
    flat = build.constant(0, dt.int64, index.shape)
    stride = 1
    for axis in reversed(range(rank)):
        coordinate = (wrapped(build, index, region[dim]) if axis == dim
                      else positions(build, region[axis], rank, axis))
        flat = build.add(flat, build.scalar(OpKind.MUL, coordinate, stride))
        stride *= region[axis]
    return flat_select(build, source, flat)


def _triangle(node: Node, build: Builder, lower: bool) -> Node:
    x = node.inputs[0]
    rank = len(x.shape)
    rows = positions(build, x.shape[-2], rank, rank - 2)
    columns = positions(build, x.shape[-1], rank, rank - 1)
    offset = build.sub(columns, rows)
    bound = build.constant(node.params.diagonal, dt.int64)
    keep = build.elementwise(OpKind.LE if lower else OpKind.GE, offset, bound)
    return build.where(keep, x, build.constant(0, x.dtype))


@decomposes(OpKind.TRIL)
def tril(node: Node, build: Builder) -> Node:
    """x where column - row <= diagonal, else 0."""
    return _triangle(node, build, lower=True)


@decomposes(OpKind.TRIU)
def triu(node: Node, build: Builder) -> Node:
    """x where column - row >= diagonal, else 0."""
    return _triangle(node, build, lower=False)


def pad_constant(build: Builder, x: Node, widths, value) -> Node:
    """``x`` written into a FULL tensor of ``value`` grown by ``widths[d] = (before, after)``."""
    if all(before == 0 and after == 0 for before, after in widths):
        return x
    shape = tuple(s + before + after for s, (before, after) in zip(x.shape, widths))
    starts = tuple(before for before, _ in widths)
    stops = tuple(before + s for s, (before, _) in zip(x.shape, widths))
    return build.slice_assign(build.constant(value, x.dtype, shape), x, starts, stops,
                              (1,) * len(shape))


@decomposes(OpKind.PAD)
def pad(node: Node, build: Builder) -> Node:
    """A slice_assign of the input into a constant of the padded shape."""
    x = node.inputs[0]
    padded = pad_constant(build, x, node.params.widths, node.params.value)
    return padded if padded is not x else build.op(OpKind.CONTIGUOUS, x)
