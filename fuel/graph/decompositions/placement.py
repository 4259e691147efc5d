"""Scatters, index_copy and argsort from one-hot comparisons, reductions, INDEX_SELECT and
MATMUL: every write target is compared with every written position (memory grows with
their product, fine for the index tensors ONNX and the models use)."""

from __future__ import annotations

from fuel.graph.decompositions.builder import Builder
from fuel.graph.decompositions.indexing import positions, wrapped
from fuel.graph.decompositions.registry import decomposes
from fuel.graph.node import Node
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind, ReduceParams, SliceAssignParams


def _product(sizes) -> int:
    total = 1
    for size in sizes:
        total *= size
    return total


def _lowest_highest(dtype):
    if dtype.is_floating:
        return float("-inf"), float("inf")
    if dtype.is_bool:
        return False, True
    import numpy as np

    info = np.iinfo(dtype.numpy)
    return int(info.min), int(info.max)


def flat_scatter(build: Builder, data: Node, targets: Node, updates: Node, reduction: str
                 ) -> Node:
    """``data`` (P, *tail) with row ``targets[q]`` (Q,) written (or reduced) from row q of
    ``updates`` (Q, *tail); for "none" the last write to a row wins."""
    rows, count = data.shape[0], targets.shape[0]
    tail = data.shape[1:]
    if count == 0:
        return build.op(OpKind.CONTIGUOUS, data)
    hits = build.elementwise(OpKind.EQ, build.reshape(targets, (1, count)),
                             build.reshape(build.arange(rows), (rows, 1)))  # (P, Q)
    hit = build.max(hits, (1,))
    rank = len(data.shape)
    row_hit = build.reshape(hit, (rows,) + (1,) * (rank - 1))
    if reduction == "none":
        order = build.reshape(build.arange(count), (1, count))
        last = build.max(build.where(hits, order, build.constant(-1, dt.int64)), (1,))
        safe = build.elementwise(OpKind.MAXIMUM, last, build.constant(0, dt.int64))
        return build.where(row_hit, build.index_select(updates, 0, safe), data)
    width = _product(tail)
    flat_updates = build.reshape(updates, (count, width))
    if reduction == "add" and not data.dtype.is_bool:
        one_hot = build.cast(hits, data.dtype)
        sums = build.reshape(build.matmul(one_hot, flat_updates), data.shape)
        return build.add(data, sums)
    lowest, highest = _lowest_highest(data.dtype)
    spread = build.unsqueeze_to(flat_updates, 3, (1, 2))  # (1, Q, W)
    chosen = build.unsqueeze_to(hits, 3, (0, 1))  # (P, Q, 1)
    kind, neutral = {"add": (OpKind.LOGICAL_OR, False), "mul": (OpKind.MUL, 1),
                     "max": (OpKind.MAXIMUM, lowest), "min": (OpKind.MINIMUM, highest)}[reduction]
    masked = build.where(chosen, spread, build.constant(neutral, data.dtype))
    if reduction == "mul":
        combined = build.op(OpKind.PROD, masked, params=ReduceParams((1,), False))
        combined = build.cast(combined, data.dtype)
    elif reduction == "min":
        combined = build.op(OpKind.MIN, masked, params=ReduceParams((1,), False))
    else:
        combined = build.max(masked, (1,))
    combined = build.reshape(combined, data.shape)
    if reduction == "add":  # bool: logical or
        return build.elementwise(OpKind.LOGICAL_OR, data, combined)
    return build.where(row_hit, build.elementwise(kind, data, combined), data)


def _flat_positions(build: Builder, index: Node, dim: int, region, strides) -> Node:
    """Row-major flat positions in a tensor of ``strides`` of every element of ``index``
    (whose values run along ``dim``)."""
    rank = len(index.shape)
    flat = build.constant(0, dt.int64, index.shape)
    for axis in range(rank):
        coordinate = (wrapped(build, index, region[dim]) if axis == dim
                      else positions(build, index.shape[axis], rank, axis))
        flat = build.add(flat, build.scalar(OpKind.MUL, coordinate, strides[axis]))
    return flat


def _strides(shape) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= size
    return tuple(reversed(strides))


@decomposes(OpKind.SCATTER_ELEMENTS)
def scatter_elements(node: Node, build: Builder) -> Node:
    """A flat scatter of every update element at its flat position in the data."""
    data, index, updates = node.inputs
    total, count = _product(data.shape), _product(index.shape)
    targets = _flat_positions(build, index, node.params.dim, data.shape, _strides(data.shape))
    flat = flat_scatter(build, build.reshape(data, (total,)), build.reshape(targets, (count,)),
                        build.reshape(updates, (count,)), node.params.reduction)
    return build.reshape(flat, node.shape)


@decomposes(OpKind.SCATTER_ND)
def scatter_nd(node: Node, build: Builder) -> Node:
    """A flat scatter of update slices at the flat positions of their leading indices."""
    data, index, updates = node.inputs
    depth = index.shape[-1]
    lead, tail = data.shape[:depth], data.shape[depth:]
    count = _product(index.shape[:-1])
    strides = _strides(lead)
    flat = build.constant(0, dt.int64, (count,))
    table = build.reshape(index, (count, depth))
    for k in range(depth):
        column = build.reshape(build.slice(table, 1, k, k + 1), (count,))
        flat = build.add(flat, build.scalar(OpKind.MUL, wrapped(build, column, lead[k]),
                                            strides[k]))
    rows = build.reshape(data, (_product(lead),) + tail)
    written = flat_scatter(build, rows, flat, build.reshape(updates, (count,) + tail),
                           node.params.reduction)
    return build.reshape(written, node.shape)


@decomposes(OpKind.INDEX_COPY)
def index_copy(node: Node, build: Builder) -> Node:
    """The target with its slices at ``index`` along ``dim`` replaced, written back over the
    whole target with one slice_assign (in place when the op was)."""
    target, index, source = node.inputs
    dim = node.params.dim
    order = (dim,) + tuple(a for a in range(len(target.shape)) if a != dim)
    moved_target = build.permute(target, order)
    moved_source = build.permute(source, order)
    targets = wrapped(build, build.reshape(index, (index.shape[0] if index.shape else 1,)),
                      target.shape[dim])
    written = flat_scatter(build, moved_target, targets, moved_source, "none")
    inverse = tuple(order.index(a) for a in range(len(order)))
    value = build.permute(written, inverse)
    everything = SliceAssignParams((0,) * len(target.shape), tuple(target.shape),
                                   (1,) * len(target.shape), node.params.inplace)
    return build.op(OpKind.SLICE_ASSIGN, target, value, params=everything)


@decomposes(OpKind.ARGSORT)
def argsort(node: Node, build: Builder) -> Node:
    """Stable ranks from pairwise comparisons (NaN last, as NumPy), then each rank's
    position: out[r] = sum_i i * (rank_i == r)."""
    x = node.inputs[0]
    dim, rank = node.params.dim, len(node.inputs[0].shape)
    size = x.shape[dim]
    key = x
    if node.params.descending:
        key = build.op(OpKind.NEG if x.dtype.is_floating else OpKind.BITWISE_NOT, x)
    # mine: element i along axis dim (j broadcast); theirs: element j along axis dim + 1
    mine = build.unsqueeze_to(key, rank + 1, tuple(a if a <= dim else a + 1
                                                   for a in range(rank)))
    theirs = build.unsqueeze_to(key, rank + 1, tuple(a if a < dim else a + 1
                                                     for a in range(rank)))
    before = build.elementwise(OpKind.LT, theirs, mine)
    if x.dtype.is_floating:
        nan_mine = build.op(OpKind.ISNAN, mine)
        nan_theirs = build.op(OpKind.ISNAN, theirs)
        before = build.elementwise(OpKind.LOGICAL_OR, before, build.elementwise(
            OpKind.LOGICAL_AND, nan_mine, build.op(OpKind.LOGICAL_NOT, nan_theirs)))
        equal = build.elementwise(OpKind.LOGICAL_OR, build.elementwise(OpKind.EQ, theirs, mine),
                                  build.elementwise(OpKind.LOGICAL_AND, nan_mine, nan_theirs))
    else:
        equal = build.elementwise(OpKind.EQ, theirs, mine)
    i = positions(build, size, rank + 1, dim)
    j = positions(build, size, rank + 1, dim + 1)
    earlier_tie = build.elementwise(OpKind.LOGICAL_AND, equal, build.elementwise(OpKind.LT, j, i))
    ranks = build.sum(build.cast(build.elementwise(OpKind.LOGICAL_OR, before, earlier_tie),
                                 dt.int64), (dim + 1,), keepdim=True)  # rank of i, at axis dim
    # out[r] = sum_i i * (rank_i == r): i along axis dim, r along axis dim + 1
    r = positions(build, size, rank + 1, dim + 1)
    placed = build.where(build.elementwise(OpKind.EQ, ranks, r), i,
                         build.constant(0, dt.int64))
    return build.sum(placed, (dim,))
