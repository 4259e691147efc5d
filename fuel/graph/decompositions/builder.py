"""Builder: makes the primitive nodes of one decomposition, on the decomposed node's device
and at its user site, so errors and explain() still name the user's line."""

from __future__ import annotations

from collections.abc import Callable

from fuel.graph.node import Node
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.ops import (
    NO_PARAMS,
    ArangeParams,
    AxisParams,
    CastParams,
    FullParams,
    OpKind,
    PermuteParams,
    ReduceParams,
    ShapeParams,
    SliceAssignParams,
    SliceParams,
    broadcast_shapes,
    infer,
)


def compute_dtype(dtype: DType) -> DType:
    """The dtype a decomposition computes in: float32 for the half types (fuel's contract:
    compute in float32, round once), the dtype itself otherwise."""
    return dt.float32 if dtype in (dt.float16, dt.bfloat16) else dtype


class Builder:
    """Node factory for one decomposition: every node lands on ``node``'s device and site."""

    def __init__(self, node: Node, has_kernel: Callable[[Node], bool] | None = None) -> None:
        self.device = node.device
        self.site = node.site
        self.has_kernel = has_kernel
        self.made: list[Node] = []  # every node this builder made, in order (recipes)

    def supports(self, kind: OpKind, *inputs: Node, params=NO_PARAMS) -> bool:
        """Whether the target backend has a kernel of its own for ``kind`` over ``inputs``
        (True when the builder was made without a kernel predicate)."""
        return self.has_kernel is None or self.has_kernel(self.op(kind, *inputs, params=params))

    # ------------------------------------------------------------------ generic
    def op(self, kind: OpKind, *inputs: Node, params=NO_PARAMS) -> Node:
        """``kind`` over ``inputs`` with its shape and dtype inferred from the registry."""
        shape, dtype = infer(kind, params, tuple(i.shape for i in inputs),
                             tuple(i.dtype for i in inputs))
        made = Node(kind, tuple(inputs), params, dtype, tuple(shape), self.device, self.site)
        self.made.append(made)
        return made

    def elementwise(self, kind: OpKind, *inputs: Node) -> Node:
        """A unary, binary or where node; operands are broadcast to one shape first."""
        shape = broadcast_shapes(*(i.shape for i in inputs)) if len(inputs) > 1 else None
        if shape is not None:
            inputs = tuple(self.expand(i, shape) for i in inputs)
        return self.op(kind, *inputs)

    # ------------------------------------------------------------------ constants
    def constant(self, value, dtype: DType, shape: tuple[int, ...] = ()) -> Node:
        """``value`` as a one-element FULL node viewed at ``shape`` (no upload, no leaf)."""
        scalar = self.op(OpKind.FULL, params=FullParams((), value, dtype))
        return self.expand(scalar, tuple(shape))

    def full(self, value, dtype: DType, shape: tuple[int, ...]) -> Node:
        """A dense tensor filled with ``value``."""
        return self.op(OpKind.FULL, params=FullParams(tuple(shape), value, dtype))

    def arange(self, count: int, dtype: DType = dt.int64, start=0, step=1) -> Node:
        return self.op(OpKind.ARANGE, params=ArangeParams(start, step, count, dtype))

    # ------------------------------------------------------------------ views and movement
    def cast(self, node: Node, dtype: DType) -> Node:
        if node.dtype is dtype:
            return node
        return self.op(OpKind.CAST, node, params=CastParams(dtype))

    def reshape(self, node: Node, shape: tuple[int, ...]) -> Node:
        shape = tuple(shape)
        if node.shape == shape:
            return node
        return self.op(OpKind.RESHAPE, node, params=ShapeParams(shape))

    def expand(self, node: Node, shape: tuple[int, ...]) -> Node:
        shape = tuple(shape)
        if node.shape == shape:
            return node
        return self.op(OpKind.EXPAND, node, params=ShapeParams(shape))

    def permute(self, node: Node, dims: tuple[int, ...]) -> Node:
        dims = tuple(dims)
        if dims == tuple(range(len(dims))):
            return node
        return self.op(OpKind.PERMUTE, node, params=PermuteParams(dims))

    def slice(self, node: Node, dim: int, start: int, stop: int, step: int = 1) -> Node:
        """``node[..., start:stop:step, ...]`` along ``dim`` (in range, positive step)."""
        starts = [0] * len(node.shape)
        stops = list(node.shape)
        steps = [1] * len(node.shape)
        starts[dim], stops[dim], steps[dim] = start, stop, step
        return self.op(OpKind.SLICE, node, params=SliceParams(tuple(starts), tuple(stops),
                                                              tuple(steps)))

    def slice_assign(self, target: Node, value: Node, starts, stops, steps) -> Node:
        return self.op(OpKind.SLICE_ASSIGN, target, value,
                       params=SliceAssignParams(tuple(starts), tuple(stops), tuple(steps)))

    def unsqueeze_to(self, node: Node, rank: int, dims: tuple[int, ...]) -> Node:
        """``node`` reshaped to ``rank`` dims, its own dims placed at ``dims`` (others 1)."""
        shape = [1] * rank
        for dim, size in zip(dims, node.shape):
            shape[dim] = size
        return self.reshape(node, tuple(shape))

    # ------------------------------------------------------------------ math
    def add(self, a: Node, b: Node) -> Node:
        return self.elementwise(OpKind.ADD, a, b)

    def sub(self, a: Node, b: Node) -> Node:
        return self.elementwise(OpKind.SUB, a, b)

    def mul(self, a: Node, b: Node) -> Node:
        return self.elementwise(OpKind.MUL, a, b)

    def div(self, a: Node, b: Node) -> Node:
        return self.elementwise(OpKind.DIV, a, b)

    def scalar(self, kind: OpKind, a: Node, value) -> Node:
        """``a kind value`` with ``value`` a constant of ``a``'s dtype."""
        return self.elementwise(kind, a, self.constant(value, a.dtype))

    def where(self, condition: Node, a: Node, b: Node) -> Node:
        return self.elementwise(OpKind.WHERE, condition, a, b)

    def sum(self, node: Node, dims, keepdim: bool = False) -> Node:
        return self.op(OpKind.SUM, node, params=ReduceParams(tuple(sorted(dims)), keepdim))

    def max(self, node: Node, dims, keepdim: bool = False) -> Node:
        return self.op(OpKind.MAX, node, params=ReduceParams(tuple(sorted(dims)), keepdim))

    def matmul(self, a: Node, b: Node) -> Node:
        return self.op(OpKind.MATMUL, a, b)

    def index_select(self, node: Node, dim: int, index: Node) -> Node:
        return self.op(OpKind.INDEX_SELECT, node, index, params=AxisParams(dim))

    def cat(self, nodes: list[Node], dim: int) -> Node:
        return self.op(OpKind.CAT, *nodes, params=AxisParams(dim))
