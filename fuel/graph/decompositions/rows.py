"""Row ops (softmax, log_softmax, layer_norm, rms_norm), computed stably from reductions."""

from __future__ import annotations

from fuel.graph.decompositions.builder import Builder, compute_dtype
from fuel.graph.decompositions.registry import decomposes
from fuel.graph.node import Node
from fuel.ir.ops import OpKind


def _shifted(node: Node, build: Builder) -> tuple[Node, int]:
    """The input in its compute dtype minus its maximum along the op's dim (stability)."""
    dim = node.params.dim
    x = build.cast(node.inputs[0], compute_dtype(node.dtype))
    return build.sub(x, build.max(x, (dim,), keepdim=True)), dim


@decomposes(OpKind.SOFTMAX)
def softmax(node: Node, build: Builder) -> Node:
    """exp(x - max) / sum(exp(x - max))."""
    shifted, dim = _shifted(node, build)
    exponentials = build.op(OpKind.EXP, shifted)
    total = build.sum(exponentials, (dim,), keepdim=True)
    return build.cast(build.div(exponentials, total), node.dtype)


@decomposes(OpKind.LOG_SOFTMAX)
def log_softmax(node: Node, build: Builder) -> Node:
    """(x - max) - log(sum(exp(x - max)))."""
    shifted, dim = _shifted(node, build)
    total = build.sum(build.op(OpKind.EXP, shifted), (dim,), keepdim=True)
    return build.cast(build.sub(shifted, build.op(OpKind.LOG, total)), node.dtype)


def _trailing_mean(build: Builder, x: Node, axes: int) -> Node:
    dims = tuple(range(len(x.shape) - axes, len(x.shape)))
    count = 1
    for dim in dims:
        count *= x.shape[dim]
    total = build.sum(x, dims, keepdim=True)
    return build.div(total, build.constant(float(count), x.dtype))


def _root(build: Builder, mean_square: Node, eps: float) -> Node:
    return build.op(OpKind.SQRT, build.add(mean_square, build.constant(eps, mean_square.dtype)))


@decomposes(OpKind.LAYER_NORM)
def layer_norm(node: Node, build: Builder) -> Node:
    """(x - mean) / sqrt(mean((x - mean)^2) + eps) * weight + bias (two passes: stable)."""
    compute = compute_dtype(node.dtype)
    x, weight, bias = (build.cast(source, compute) for source in node.inputs)
    centered = build.sub(x, _trailing_mean(build, x, node.params.axes))
    variance = _trailing_mean(build, build.mul(centered, centered), node.params.axes)
    normalized = build.div(centered, _root(build, variance, node.params.eps))
    return build.cast(build.add(build.mul(normalized, weight), bias), node.dtype)


@decomposes(OpKind.RMS_NORM)
def rms_norm(node: Node, build: Builder) -> Node:
    """x * (1 / sqrt(mean(x^2) + eps)) * weight."""
    compute = compute_dtype(node.dtype)
    x, weight = (build.cast(source, compute) for source in node.inputs)
    mean_square = _trailing_mean(build, build.mul(x, x), node.params.axes)
    scale = build.div(build.constant(1.0, compute), _root(build, mean_square, node.params.eps))
    return build.cast(build.mul(build.mul(x, scale), weight), node.dtype)
