"""Composite elementwise ops through their registry ``expression``, written once for all."""

from __future__ import annotations

from fuel.graph.decompositions.builder import Builder, compute_dtype
from fuel.graph.decompositions.registry import DECOMPOSITIONS
from fuel.graph.node import Node
from fuel.ir.expression import Expression
from fuel.ir.ops import OPS, OpKind


def expression_decomposition(node: Node, build: Builder) -> Node:
    """Evaluate the op's scalar expression with primitive nodes: operands in the compute
    dtype (float32 for half types), constants as FULL views, the result cast back once."""
    expression: Expression = OPS[node.op].expression
    compute = compute_dtype(node.inputs[0].dtype)
    operands = [build.cast(source, compute) for source in node.inputs]
    values: dict[int, Node] = {}
    for part in expression.walk():
        if part.operand is not None:
            value = operands[part.operand]
        elif part.constant is not None:
            value = build.constant(part.constant, compute)
        else:
            value = build.elementwise(OpKind(part.op), *(values[id(a)] for a in part.args))
        values[id(part)] = value
    result = values[id(expression)]
    if result.shape != node.shape:
        result = build.expand(result, node.shape)
    return build.cast(result, node.dtype)


for _kind, _record in OPS.items():
    if _record.expression is not None:
        DECOMPOSITIONS[_kind] = expression_decomposition
