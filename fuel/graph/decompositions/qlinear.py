"""The 8-bit QLINEAR ops from primitive nodes, for a backend without their kernels.

QLINEAR_CONV: the float32 convolution of (x - x_zero) and the weights, whose integer sums it
holds exactly while they stay below 2**24 in magnitude, + the bias, times the multiplier,
rounded half to even, + y_zero, clamped and cast. QLINEAR_LOOKUP: an index_select of the
table. QLINEAR_BINARY: float32 arithmetic on the operands, rounded, clamped and cast.
QLINEAR_QUANTIZE / QLINEAR_DEQUANTIZE: ONNX QuantizeLinear / DequantizeLinear's float32 steps."""

from __future__ import annotations

import numpy as np

from fuel.graph.decompositions.builder import Builder
from fuel.graph.decompositions.registry import decomposes
from fuel.graph.node import Node
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind


@decomposes(OpKind.QLINEAR_CONV)
def qlinear_conv(node: Node, build: Builder) -> Node:
    params = node.params
    x, weight, bias, multiplier = node.inputs
    shifted = build.elementwise(OpKind.SUB, build.cast(x, dt.float32),
                                build.constant(float(params.x_zero), dt.float32))
    y = build.op(OpKind.CONV, shifted, build.cast(weight, dt.float32), params=params.conv)
    channel = (1, y.shape[1]) + (1,) * (len(y.shape) - 2)
    y = build.add(y, build.reshape(build.cast(bias, dt.float32), channel))
    y = build.mul(y, build.reshape(multiplier, channel))
    y = build.elementwise(OpKind.ADD, build.op(OpKind.ROUND, y),
                          build.constant(float(params.y_zero), dt.float32))
    low, high = (-128.0, 127.0) if params.y_signed else (0.0, 255.0)
    y = build.elementwise(OpKind.MINIMUM, build.elementwise(
        OpKind.MAXIMUM, y, build.constant(low, dt.float32)), build.constant(high, dt.float32))
    return build.cast(y, node.dtype)


@decomposes(OpKind.QLINEAR_LOOKUP)
def qlinear_lookup(node: Node, build: Builder) -> Node:
    """table[x's byte]: the byte (x, or x + 256 where an int8 x is negative) as an int64
    index into the table, gathered, in x's shape."""
    x, table = node.inputs
    index = build.cast(x, dt.int64)
    if x.dtype is dt.int8:
        index = build.elementwise(OpKind.BITWISE_AND, index, build.constant(255, dt.int64))
    count = 1
    for size in x.shape:
        count *= size
    picked = build.index_select(table, 0, build.reshape(index, (count,)))
    return build.reshape(picked, node.shape)


@decomposes(OpKind.QLINEAR_BINARY)
def qlinear_binary(node: Node, build: Builder) -> Node:
    """QLinearAdd as float32 arithmetic a * ra + (b * rb + constant) (onnxruntime fuses the
    multiply-adds: a sum on a rounding edge may land a step away) and
    QLinearMul as the product of the shifted operands times the scale ratio, then rounded
    half to even, + y_zero (for Mul), saturated and cast."""
    p = node.params
    a, b = (build.cast(operand, dt.float32) for operand in node.inputs)

    def constant(value: float) -> Node:
        return build.constant(float(np.float32(value)), dt.float32)

    if p.multiply:
        ratio = np.float32(np.float32(p.a_scale) * np.float32(p.b_scale)) / np.float32(p.y_scale)
        product = build.mul(build.sub(a, constant(p.a_zero)), build.sub(b, constant(p.b_zero)))
        y = build.add(build.mul(product, constant(ratio)), constant(p.y_zero))
    else:
        ra, rb, fixed = add_ratios(p)
        y = build.add(build.mul(a, constant(ra)),
                      build.add(build.mul(b, constant(rb)), constant(fixed)))
    y = build.op(OpKind.ROUND, y)
    low, high = (-128.0, 127.0) if node.dtype is dt.int8 else (0.0, 255.0)
    y = build.elementwise(OpKind.MINIMUM, build.elementwise(
        OpKind.MAXIMUM, y, build.constant(low, dt.float32)), build.constant(high, dt.float32))
    return build.cast(y, node.dtype)


def add_ratios(params) -> tuple[float, float, float]:
    """QLinearAdd's float32 constants: a_scale / y_scale, b_scale / y_scale and y_zero less
    both zero points' share, as onnxruntime computes them."""
    ra = np.float32(params.a_scale) / np.float32(params.y_scale)
    rb = np.float32(params.b_scale) / np.float32(params.y_scale)
    fixed = np.float32(params.y_zero) - (ra * np.float32(params.a_zero)
                                         + rb * np.float32(params.b_zero))
    return float(ra), float(rb), float(np.float32(fixed))


@decomposes(OpKind.QLINEAR_QUANTIZE)
def qlinear_quantize(node: Node, build: Builder) -> Node:
    """x / scale in float32, rounded half to even, + zero, saturated and cast."""
    p = node.params
    ratio = build.div(node.inputs[0], build.constant(float(np.float32(p.scale)), dt.float32))
    y = build.add(build.op(OpKind.ROUND, ratio), build.constant(float(p.zero), dt.float32))
    low, high = (-128.0, 127.0) if node.dtype is dt.int8 else (0.0, 255.0)
    y = build.elementwise(OpKind.MINIMUM, build.elementwise(
        OpKind.MAXIMUM, y, build.constant(low, dt.float32)), build.constant(high, dt.float32))
    return build.cast(y, node.dtype)


@decomposes(OpKind.QLINEAR_DEQUANTIZE)
def qlinear_dequantize(node: Node, build: Builder) -> Node:
    """(x - zero) in int32, as float32, times the scale."""
    p = node.params
    shifted = build.sub(build.cast(node.inputs[0], dt.int32), build.constant(p.zero, dt.int32))
    return build.mul(build.cast(shifted, dt.float32),
                     build.constant(float(np.float32(p.scale)), dt.float32))
