"""Gradient rules of the windowed ops: convolution and max pooling (registered into
``fuel.frontend.gradients.RULES``; ``fuel.frontend.backward`` imports this module)."""

from __future__ import annotations

import math

from fuel.frontend.base import TensorBase
from fuel.frontend.build import make
from fuel.frontend.gradients import Values, _through_decomposition, gradient, reshaped
from fuel.graph.node import Node
from fuel.ir.ops import (
    AxisParams,
    ConvParams,
    OpKind,
    PermuteParams,
    PoolParams,
    ScatterParams,
    SliceParams,
)


@gradient(OpKind.CONV)
def _conv(v: Values, g):
    x, weight = v.inputs
    p: ConvParams = v.params
    rank = len(x.shape) - 2
    kernel = weight.shape[2:]
    dx = _conv_input(g, x, weight, p, rank, kernel) if v.needs(0) else None
    # d weight: per group, x (channels as the batch) convolved with g (batch as channels);
    # stride and dilation trade places.
    swapped = ConvParams(p.dilations, p.pads_begin, p.pads_end, p.strides, 1)
    channels, outputs = weight.shape[1], weight.shape[0] // p.groups
    parts = []
    for group in range(p.groups):
        xs = _swap(_channels(x, group * channels, channels))
        gs = _swap(_channels(g._node, group * outputs, outputs))
        part = make(OpKind.CONV, (xs, gs), swapped)._node  # (C, M, K')
        if part.shape[2:] != kernel:
            part = make(OpKind.SLICE, (part,), SliceParams(
                (0,) * (rank + 2), part.shape[:2] + kernel, (1,) * (rank + 2)))._node
        parts.append(make(OpKind.PERMUTE, (part,), _SWAP[rank + 2]))
    dw = _join(parts)
    if dw._node.op is OpKind.PERMUTE and min(dw.shape[:2]) > 1:
        # Dense, in the weight's own layout (as torch's): an optimizer updates it in place.
        dw = make(OpKind.CONTIGUOUS, (dw._node,), None)
    return (dx, dw)


def _conv_input(g, x: Node, weight: Node, p: ConvParams, rank: int, kernel):
    """d x: the transposed convolution of g with the same weights, sized back to x."""
    reach = [(o - 1) * s - b - e + d * (k - 1) + 1 for o, s, b, e, d, k in
             zip(g.shape[2:], p.strides, p.pads_begin, p.pads_end, p.dilations, kernel)]
    output_padding = tuple(size - r for size, r in zip(x.shape[2:], reach))
    # Stride 1, one group: the same as a convolution of g with the weights' channels swapped
    # and taps flipped, padded by the kernel's reach less the forward's padding: it runs on
    # the convolution kernels (the judged, fast ones) rather than the transposed one.
    full = [d * (k - 1) for d, k in zip(p.dilations, kernel)]
    begin = tuple(f - b for f, b in zip(full, p.pads_begin))
    end = tuple(f - e for f, e in zip(full, p.pads_end))
    if p.groups == 1 and all(s == 1 for s in p.strides) and not any(output_padding) and \
            min(begin + end) >= 0:
        swapped = _swap(weight)  # (C, M, K...), then every tap flipped
        shape = swapped.shape
        flipped = make(OpKind.SLICE, (swapped,), SliceParams(
            (0, 0) + tuple(k - 1 for k in kernel), shape[:2] + (-1,) * rank,
            (1, 1) + (-1,) * rank))
        return make(OpKind.CONV, (g._node, flipped._node),
                    ConvParams((1,) * rank, begin, end, p.dilations, 1))
    transposed = ConvParams(p.strides, p.pads_begin, p.pads_end, p.dilations, p.groups,
                            output_padding)
    return make(OpKind.CONV_TRANSPOSE, (g._node, weight), transposed)


_SWAP = {n: PermuteParams((1, 0) + tuple(range(2, n))) for n in range(3, 6)}


def _swap(node: Node) -> Node:
    """``node`` with its first two dims swapped (a view)."""
    return make(OpKind.PERMUTE, (node,), _SWAP[len(node.shape)])._node


def _channels(node: Node, start: int, count: int) -> Node:
    """Channels [start, start + count) of ``node`` (itself when that is all of them)."""
    shape = node.shape
    if start == 0 and count == shape[1]:
        return node
    stops = (shape[0], start + count) + shape[2:]
    return make(OpKind.SLICE, (node,), SliceParams(
        (0, start) + (0,) * (len(shape) - 2), stops, (1,) * len(shape)))._node


def _join(parts: list[TensorBase]) -> TensorBase:
    if len(parts) == 1:
        return parts[0]
    return make(OpKind.CAT, tuple(p._node for p in parts), AxisParams(0))




@gradient(OpKind.MAX_POOL)
def _max_pool(v: Values, g):
    """Each window's gradient to its first maximum (torch's max_pool backward). Windows that
    tile the input (kernel = stride, no padding or dilation): the gradient scattered (no
    accumulation: the windows pick distinct positions) into zeros at MAX_POOL_INDICES'
    choice; other windows through the decomposition (which shares a tied window's gradient
    among its maxima)."""
    x = v.x[0]
    p: PoolParams = v.params
    rank = len(p.kernel)
    lead = x.ndim - rank
    spatial, counts = x.shape[lead:], v.node.shape[lead:]
    if tuple(p.kernel) != tuple(p.strides) or any(p.pads_begin) or any(p.pads_end) or \
            any(d != 1 for d in p.dilations) or p.storage_order != 0 or \
            any(c * k != s for c, k, s in zip(counts, p.kernel, spatial)):
        return tuple(_through_decomposition(v.node, v.inputs, g))
    indices = make(OpKind.MAX_POOL_INDICES, (x._node,), p)
    planes = x.shape[:lead] + (math.prod(spatial),)
    picked = x.shape[:lead] + (math.prod(counts),)
    zeros = v.zeros(planes, g.dtype)
    # Tiled windows pick distinct positions: a plain scatter (no accumulation) puts each
    # window's gradient at its maximum, the rest stays zero.
    routed = make(OpKind.SCATTER_ELEMENTS, (zeros._node, reshaped(indices, picked)._node,
                                             reshaped(g, picked)._node),
                  ScatterParams(lead, "none"))
    return (reshaped(routed, x.shape),)
