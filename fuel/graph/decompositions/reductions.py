"""Reductions and scans from SUM, MAX, ARGMAX, CUMSUM and elementwise ops: mean, min,
argmin, all, any, prod (a pairwise tree of multiplies, exact for integers) and cumprod."""

from __future__ import annotations

from fuel.graph.decompositions.builder import Builder, compute_dtype
from fuel.graph.decompositions.registry import decomposes
from fuel.graph.node import Node
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind, ReduceParams


def _count(shape: tuple[int, ...], dims) -> int:
    count = 1
    for dim in dims:
        count *= shape[dim]
    return count


@decomposes(OpKind.MEAN)
def mean(node: Node, build: Builder) -> Node:
    """sum / count in the compute dtype."""
    x = build.cast(node.inputs[0], compute_dtype(node.dtype))
    params = node.params
    total = build.sum(x, params.dims, params.keepdim)
    count = build.constant(float(_count(x.shape, params.dims)), x.dtype)
    return build.cast(build.div(total, count), node.dtype)


def _reversed_order(build: Builder, x: Node) -> Node:
    """An order-reversing bijection: not for bool, ~x for integers, -x for floats."""
    if x.dtype is dt.bool_:
        return build.op(OpKind.LOGICAL_NOT, x)
    if x.dtype.is_integer:
        return build.op(OpKind.BITWISE_NOT, x)
    return build.op(OpKind.NEG, x)


@decomposes(OpKind.MIN)
def minimum(node: Node, build: Builder) -> Node:
    """reverse(max(reverse(x))): exact for every dtype (NaN propagates as in max)."""
    params = node.params
    return _reversed_order(build, build.max(_reversed_order(build, node.inputs[0]),
                                            params.dims, params.keepdim))


@decomposes(OpKind.ARGMIN)
def argmin(node: Node, build: Builder) -> Node:
    """argmax of the order-reversed input (the first minimum stays first)."""
    return build.op(OpKind.ARGMAX, _reversed_order(build, node.inputs[0]), params=node.params)


@decomposes(OpKind.ANY)
def any_(node: Node, build: Builder) -> Node:
    """max of the values as bool."""
    params = node.params
    return build.max(build.cast(node.inputs[0], dt.bool_), params.dims, params.keepdim)


@decomposes(OpKind.ALL)
def all_(node: Node, build: Builder) -> Node:
    """not any(not x)."""
    params = node.params
    negated = build.op(OpKind.LOGICAL_NOT, node.inputs[0])
    return build.op(OpKind.LOGICAL_NOT, build.max(negated, params.dims, params.keepdim))


def _to_last(build: Builder, x: Node, dims: tuple[int, ...]) -> Node:
    """``x`` with ``dims`` moved to the end and merged into one trailing dim."""
    rest = [d for d in range(len(x.shape)) if d not in dims]
    moved = build.permute(x, tuple(rest) + tuple(dims))
    return build.reshape(moved, tuple(x.shape[d] for d in rest) + (_count(x.shape, dims),))


@decomposes(OpKind.PROD)
def prod(node: Node, build: Builder) -> Node:
    """Pairwise products along the reduced elements: log2(n) multiply levels."""
    params: ReduceParams = node.params
    x = build.cast(node.inputs[0], node.dtype)
    work = _to_last(build, x, params.dims)
    last = len(work.shape) - 1
    while work.shape[last] != 1:
        size = work.shape[last]
        if size == 0 or size % 2:
            one = build.constant(1, work.dtype, work.shape[:last] + (1,))
            work = build.cat([work, one], last)
            continue
        work = build.mul(build.slice(work, last, 0, size, 2), build.slice(work, last, 1, size, 2))
    return build.reshape(work, node.shape)


@decomposes(OpKind.CUMPROD)
def cumprod(node: Node, build: Builder) -> Node:
    """Hillis-Steele scan: multiply by the running values shifted by 1, 2, 4, ... (ones in)."""
    dim = node.params.dim
    work = build.cast(node.inputs[0], node.dtype)
    size = work.shape[dim]
    shift = 1
    while shift < size:
        ones_shape = work.shape[:dim] + (shift,) + work.shape[dim + 1:]
        shifted = build.cat([build.constant(1, work.dtype, ones_shape),
                             build.slice(work, dim, 0, size - shift)], dim)
        work = build.mul(work, shifted)
        shift *= 2
    return work
