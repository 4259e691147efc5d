"""Quantized ops from DEQUANTIZE: a backend whose only quantized kernel is dequantize (the
primitive set) runs quantized_matmul (quantized_matmul_int8) as round_int16_blocks
(round_int8_blocks) (for the formats that round their
activations), dequantize then matmul, quantized_embedding as dequantize then index_select, and
round_int16_blocks as the elementwise steps and the block max it is defined by."""

from __future__ import annotations

from fuel.graph.decompositions.builder import Builder
from fuel.graph.decompositions.registry import decomposes
from fuel.graph.node import Node
from fuel.ir.ops import (
    ACTIVATION_BLOCK,
    ACTIVATION_CODE_MAX,
    ACTIVATION_CODE_MAX_INT8,
    ACTIVATION_ROUNDED_FORMATS,
    OpKind,
)


@decomposes(OpKind.QUANTIZED_MATMUL)
def quantized_matmul(node: Node, build: Builder) -> Node:
    """x (..., k) @ dequantize(w).T as one (rows, k) x (k, n) matmul, reshaped back; x rounded
    to 16-bit blocks first where the weight's format says so (ops.ACTIVATION_ROUNDED_FORMATS)."""
    return _rounded_matmul(node, build, OpKind.ROUND_INT16_BLOCKS)


@decomposes(OpKind.QUANTIZED_MATMUL_INT8)
def quantized_matmul_int8(node: Node, build: Builder) -> Node:
    """quantized_matmul with x rounded to 8-bit blocks (round_int8_blocks) instead."""
    return _rounded_matmul(node, build, OpKind.ROUND_INT8_BLOCKS)


def _rounded_matmul(node: Node, build: Builder, rounding: OpKind) -> Node:
    x, weight = node.inputs
    k = x.shape[-1]
    rows = 1
    for size in x.shape[:-1]:
        rows *= size
    x = build.reshape(x, (rows, k))
    if weight.dtype in ACTIVATION_ROUNDED_FORMATS:
        x = build.op(rounding, x)
    values = build.op(OpKind.DEQUANTIZE, weight)
    product = build.matmul(x, build.permute(values, (1, 0)))
    return build.reshape(product, node.shape)


@decomposes(OpKind.ROUND_INT16_BLOCKS)
def round_int16_blocks(node: Node, build: Builder) -> Node:
    """Per block of 32: d = max|x| / 32767, inverse = 1 / d (0 where d is 0),
    d * round(x * inverse), in that order of float32 steps (as the CPU kernel computes it)."""
    return _round_blocks(node, build, ACTIVATION_CODE_MAX)


@decomposes(OpKind.ROUND_INT8_BLOCKS)
def round_int8_blocks(node: Node, build: Builder) -> Node:
    """round_int16_blocks' steps with d = max|x| / 127."""
    return _round_blocks(node, build, ACTIVATION_CODE_MAX_INT8)


def _round_blocks(node: Node, build: Builder, code_max: int) -> Node:
    (x,) = node.inputs
    blocks = x.shape[:-1] + (x.shape[-1] // ACTIVATION_BLOCK, ACTIVATION_BLOCK)
    values = build.reshape(x, blocks)
    largest = build.max(build.op(OpKind.ABS, values), (len(blocks) - 1,), keepdim=True)
    scale = build.scalar(OpKind.DIV, largest, float(code_max))
    positive = build.scalar(OpKind.GT, scale, 0.0)
    one = build.constant(1.0, scale.dtype, scale.shape)
    inverse = build.where(positive, build.div(one, scale), build.constant(0.0, scale.dtype,
                                                                          scale.shape))
    codes = build.op(OpKind.ROUND, build.mul(values, inverse))
    return build.reshape(build.mul(codes, scale), x.shape)


@decomposes(OpKind.QUANTIZED_EMBEDDING)
def quantized_embedding(node: Node, build: Builder) -> Node:
    """dequantize(table)[ids]."""
    table, ids = node.inputs
    return build.index_select(build.op(OpKind.DEQUANTIZE, table), 0, ids)
