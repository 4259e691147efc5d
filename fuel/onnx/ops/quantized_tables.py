"""Quantized elementwise chains of one 8-bit input, tabulated.

A QOperator or QDQ model spends much of its elementwise time in chains such as
DequantizeLinear -> HardSigmoid -> QuantizeLinear -> QLinearMul (a quantized HardSwish) or
QLinearSigmoid -> QLinearMul (SiLU): float work per element whose result depends on one 8-bit
value only. ``tabulated`` finds such a chain behind an 8-bit result (elementwise nodes and
one-value constants over a single 8-bit source of the result's shape), evaluates the same fuel
nodes once on all 256 values of the source's dtype, and returns QLINEAR_LOOKUP(source, table):
one byte-indexed pass, with the chain's own arithmetic (onnxruntime tabulates QLinearSigmoid
and QLinearLeakyRelu the same way).
"""

from __future__ import annotations

import math

import numpy as np

from fuel.frontend.build import make, wrap
from fuel.graph.node import Node
from fuel.ir import dtype as dt
from fuel.ir.ops import NoParams, OpKind, definition
from fuel.ir.params import ShapeParams
from fuel.onnx.context import NodeContext
from fuel.onnx.ops.common import Tensor
from fuel.onnx.ops.conv_fusion import known

EIGHT_BIT = (dt.uint8, dt.int8)
LIMIT = 256  # nodes a chain may hold
_ELEMENTWISE = frozenset(("unary", "binary", "select"))


def _elementwise(node: Node) -> bool:
    return (definition(node.op).family in _ELEMENTWISE or node.op in (
        OpKind.CAST, OpKind.QLINEAR_LOOKUP, OpKind.QLINEAR_BINARY, OpKind.QLINEAR_QUANTIZE,
        OpKind.QLINEAR_DEQUANTIZE))


def _chain(ctx: NodeContext, result: Node):
    """(the source, {id: depends on the source} for every node of the chain, {id: one-value
    stand-in} for its constants of more values) or None."""
    feeds = ctx.builder.feed_nodes
    memo: dict[int, bool] = {}
    scalars: dict[int, Node] = {}
    sources: list[Node] = []

    def visit(node: Node) -> bool | None:
        """Whether ``node`` depends on the source; None when the chain is not one."""
        hit = memo.get(id(node))
        if hit is not None:
            return hit
        if len(memo) >= LIMIT:
            return None
        if id(node) not in feeds and (not node.inputs or known(ctx, node) is not None):
            memo[id(node)] = False
            return False
        if node.op in (OpKind.EXPAND, OpKind.RESHAPE) and id(node) not in feeds:
            below = visit(node.inputs[0])  # a constant's view; the source's is no chain
            if below is not False:
                return None
            memo[id(node)] = False
            return False
        if id(node) in feeds or not _elementwise(node) or node is not result and (
                node.dtype in EIGHT_BIT and node.op is not OpKind.QLINEAR_LOOKUP):
            return source(node)  # the chain ends at an 8-bit value (a table's input)
        # QLINEAR_LOOKUP's table is a constant of its own shape; the rest must be one value
        operands = node.inputs[:1] if node.op is OpKind.QLINEAR_LOOKUP else node.inputs
        found = False
        for child in operands:
            below = visit(child)
            if below is None or not below and math.prod(child.shape) != 1 and _scalar(
                    ctx, child, scalars) is None:
                return None
            found = found or below
        if found and tuple(node.shape) != tuple(result.shape):
            return None
        memo[id(node)] = found
        return found

    def source(node: Node) -> bool | None:
        if node.dtype not in EIGHT_BIT or tuple(node.shape) != tuple(result.shape):
            return None
        if sources and sources[0] is not node:
            return None
        sources.append(node)
        memo[id(node)] = True
        return True

    if visit(result) is not True:
        return None
    return sources[0], memo, scalars


def _scalar(ctx: NodeContext, node: Node, scalars: dict[int, Node]) -> Node | None:
    """A one-value node standing for the constant ``node`` whose elements are all equal (a
    broadcast scalar, or a constant filled at build time), recorded in ``scalars``; else
    None."""
    if node.op is OpKind.EXPAND and math.prod(node.inputs[0].shape) == 1:
        made = node.inputs[0]
    elif node.op is OpKind.LOAD and node.buffer is not None:
        values = wrap(node).numpy()
        first = values.reshape(-1)[:1]
        if first.size != 1 or not (values == first[0]).all():
            return None
        made = ctx.constant(first.reshape(()))._node
    else:
        return None
    scalars[id(node)] = made
    return made


def tabulated(ctx: NodeContext, result: Tensor) -> Tensor:
    """``result`` as QLINEAR_LOOKUP(source, table) when it is an 8-bit elementwise function of
    one 8-bit tensor of its shape (see the module's docstring), else ``result`` itself."""
    node = result._node
    if node.dtype not in EIGHT_BIT or node.op is OpKind.QLINEAR_LOOKUP:
        return result
    found = _chain(ctx, node)
    if found is None:
        return result
    source, depends, scalars = found
    if source is node:
        return result
    probe_values = np.arange(256, dtype=np.uint8).view(source.dtype.numpy)
    probe = ctx.constant(probe_values)._node
    rebuilt: dict[int, Node] = {id(source): probe}

    def rebuild(current: Node) -> Node:
        hit = rebuilt.get(id(current))
        if hit is not None:
            return hit
        if not depends.get(id(current), False):  # a one-value constant, as a scalar
            current = scalars.get(id(current), current)
            made = current if not current.shape else make(
                OpKind.RESHAPE, (current,), ShapeParams(()))._node
        elif current.op is OpKind.QLINEAR_LOOKUP:
            made = make(current.op, (rebuild(current.inputs[0]), current.inputs[1]),
                        current.params)._node
        else:
            made = make(current.op, tuple(rebuild(child) for child in current.inputs),
                        current.params)._node
        rebuilt[id(current)] = made
        return made

    table = ctx.builder.host_value(make(OpKind.RESHAPE, (rebuild(node),), ShapeParams((256,))))
    lookup = make(OpKind.QLINEAR_LOOKUP, (source, ctx.constant(
        np.ascontiguousarray(table.astype(node.dtype.numpy)))._node), NoParams())
    return lookup

