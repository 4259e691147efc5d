"""Quantized ops from DEQUANTIZE: a backend without quantized kernels (OpenCL, the primitive
set) runs quantized_matmul as dequantize then matmul, quantized_embedding as dequantize then
index_select."""

from __future__ import annotations

from fuel.graph.decompositions.builder import Builder
from fuel.graph.decompositions.registry import decomposes
from fuel.graph.node import Node
from fuel.ir.ops import OpKind


@decomposes(OpKind.QUANTIZED_MATMUL)
def quantized_matmul(node: Node, build: Builder) -> Node:
    """x (..., k) @ dequantize(w).T as one (rows, k) x (k, n) matmul, reshaped back."""
    x, weight = node.inputs
    k = x.shape[-1]
    rows = 1
    for size in x.shape[:-1]:
        rows *= size
    values = build.op(OpKind.DEQUANTIZE, weight)
    product = build.matmul(build.reshape(x, (rows, k)), build.permute(values, (1, 0)))
    return build.reshape(product, node.shape)


@decomposes(OpKind.QUANTIZED_EMBEDDING)
def quantized_embedding(node: Node, build: Builder) -> Node:
    """dequantize(table)[ids]."""
    table, ids = node.inputs
    return build.index_select(build.op(OpKind.DEQUANTIZE, table), 0, ids)
