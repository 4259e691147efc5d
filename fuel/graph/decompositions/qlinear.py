"""QLINEAR_CONV from primitive nodes, for a backend without its kernel: the float32
convolution of (x - x_zero) and the weights, whose integer sums it holds exactly while they
stay below 2**24 in magnitude, + the bias, times the multiplier, rounded half to even, +
y_zero, clamped and cast."""

from __future__ import annotations

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
