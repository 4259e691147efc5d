"""Sliding windows from INDEX_SELECT (im2col), MATMUL and reductions: conv, max/avg
pooling and max-pooling positions."""

from __future__ import annotations

from dataclasses import replace

from fuel.graph.decompositions.builder import Builder, compute_dtype
from fuel.graph.decompositions.indexing import pad_constant
from fuel.graph.decompositions.registry import decomposes
from fuel.graph.node import Node
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind
from fuel.ir.params import AxisParams


def _product(sizes) -> int:
    total = 1
    for size in sizes:
        total *= size
    return total


def windows(build: Builder, x: Node, first: int, kernel, strides, dilations, counts) -> Node:
    """Every window of the (padded) spatial dims ``first, first + 1, ...`` of ``x``: each
    spatial dim of size S becomes (count, kernel) through one index_select of the positions
    ``o * stride + k * dilation``; returns shape ``lead + (O1, K1, O2, K2, ...)``."""
    for i, (size, stride, dilation, count) in enumerate(zip(kernel, strides, dilations, counts)):
        axis = first + 2 * i
        starts = build.reshape(build.arange(count, step=stride), (count, 1))
        offsets = build.reshape(build.arange(size, step=dilation), (1, size))
        index = build.reshape(build.add(starts, offsets), (count * size,))
        picked = build.index_select(x, axis, index)
        shape = x.shape[:axis] + (count, size) + x.shape[axis + 1:]
        x = build.reshape(picked, shape)
    return x


def _windows_last(build: Builder, patches: Node, lead: int, rank: int) -> Node:
    """(*lead, O1, K1, O2, K2, ...) -> (*lead, O1, O2, ..., K1*K2*...)."""
    outs = tuple(lead + 2 * i for i in range(rank))
    sizes = tuple(lead + 2 * i + 1 for i in range(rank))
    moved = build.permute(patches, tuple(range(lead)) + outs + sizes)
    shape = patches.shape[:lead] + tuple(patches.shape[a] for a in outs)
    return build.reshape(moved, shape + (_product(patches.shape[a] for a in sizes),))


@decomposes(OpKind.CONV)
def conv(node: Node, build: Builder) -> Node:
    """im2col: pad, gather every window, one batched matmul per group. float32 accumulates
    in float64 where the backend multiplies float64 (as the CPU kernel does: equal weights
    give equal outputs whatever order the matmul sums in)."""
    x, weight = node.inputs
    params = node.params
    compute = compute_dtype(node.dtype)
    if compute is dt.float32:
        wide = build.constant(0.0, dt.float64, (1, 1))
        if build.supports(OpKind.MATMUL, wide, wide):
            compute = dt.float64
    x, weight = build.cast(x, compute), build.cast(weight, compute)
    rank = len(x.shape) - 2
    batch, out_channels, counts = node.shape[0], node.shape[1], node.shape[2:]
    groups = params.groups
    widths = ((0, 0), (0, 0)) + tuple(zip(params.pads_begin, params.pads_end))
    padded = pad_constant(build, x, widths, 0)
    kernel = weight.shape[2:]
    patches = windows(build, padded, 2, kernel, params.strides, params.dilations, counts)
    # (N, C, O1, K1, ...) -> (N, O1, ..., C, K1, ...) -> (N, groups, P, C/groups * K)
    outs = tuple(2 + 2 * i for i in range(rank))
    sizes = tuple(3 + 2 * i for i in range(rank))
    moved = build.permute(patches, (0,) + outs + (1,) + sizes)
    positions, depth = _product(counts), weight.shape[1] * _product(kernel)
    columns = build.reshape(moved, (batch, positions, groups, depth))
    columns = build.permute(columns, (0, 2, 1, 3))
    per_group = out_channels // groups
    filters = build.reshape(weight, (groups, per_group, depth))
    product = build.matmul(columns, build.permute(filters, (0, 2, 1)))  # (N, g, P, M/g)
    result = build.permute(product, (0, 1, 3, 2))
    return build.cast(build.reshape(result, node.shape), node.dtype)


def _pool_padding(x: Node, params, counts) -> tuple[int, tuple]:
    """The leading dim count and per-dim (before, after) padding, with the extra end padding
    a ceil-mode window needs."""
    rank = len(params.kernel)
    lead = len(x.shape) - rank
    widths = [(0, 0)] * lead
    for i in range(rank):
        span = (params.kernel[i] - 1) * params.dilations[i] + 1
        needed = (counts[i] - 1) * params.strides[i] + span if counts[i] else 0
        end = max(params.pads_end[i], needed - x.shape[lead + i] - params.pads_begin[i], 0)
        widths.append((params.pads_begin[i], end))
    return lead, tuple(widths)


def _lowest(dtype):
    if dtype.is_floating:
        return float("-inf")
    if dtype.is_bool:
        return False
    import numpy as np

    return int(np.iinfo(dtype.numpy).min)


def _pooled(build: Builder, x: Node, params, counts, value) -> tuple[Node, int]:
    lead, widths = _pool_padding(x, params, counts)
    padded = pad_constant(build, x, widths, value)
    patches = windows(build, padded, lead, params.kernel, params.strides, params.dilations,
                      counts)
    return _windows_last(build, patches, lead, len(params.kernel)), lead


@decomposes(OpKind.MAX_POOL)
def max_pool(node: Node, build: Builder) -> Node:
    """The maximum of every window (padding is the dtype's lowest value)."""
    x = node.inputs[0]
    rank = len(node.params.kernel)
    counts = node.shape[len(node.shape) - rank:]
    patches, _ = _pooled(build, x, node.params, counts, _lowest(x.dtype))
    return build.max(patches, (len(patches.shape) - 1,))


@decomposes(OpKind.MAX_POOL_INDICES)
def max_pool_indices(node: Node, build: Builder) -> Node:
    """The flat position (row- or column-major per ``storage_order``) of each window's first
    maximum: argmax over the window, then that window's position."""
    x = node.inputs[0]
    params = node.params
    rank = len(params.kernel)
    counts = node.shape[len(node.shape) - rank:]
    spatial = x.shape[len(x.shape) - rank:]
    patches, lead = _pooled(build, x, params, counts, _lowest(x.dtype))
    last = len(patches.shape) - 1
    first = build.op(OpKind.ARGMAX, patches, params=_keep_last(last))
    if params.storage_order == 1:
        flat = build.reshape(build.arange(_product(spatial)), tuple(reversed(spatial)))
        flat = build.permute(flat, tuple(reversed(range(rank))))
    else:
        flat = build.reshape(build.arange(_product(spatial)), spatial)
    flat = build.reshape(flat, (1,) * lead + spatial)
    position_patches, _ = _pooled(build, flat, params, counts, -1)
    window = build.unsqueeze_to(build.arange(patches.shape[last]), last + 1, (last,))
    chosen = build.elementwise(OpKind.EQ, window, first)
    picked = build.where(chosen, position_patches, build.constant(0, dt.int64))
    return build.reshape(build.sum(picked, (last,)), node.shape)


def _keep_last(last: int):
    from fuel.ir.ops import ReduceParams

    return ReduceParams((last,), True)


@decomposes(OpKind.AVG_POOL)
def avg_pool(node: Node, build: Builder) -> Node:
    """Window sums (zero padding) divided by each window's count of counted elements."""
    x = node.inputs[0]
    params = node.params
    compute = compute_dtype(node.dtype)
    rank = len(params.kernel)
    counts = node.shape[len(node.shape) - rank:]
    patches, lead = _pooled(build, build.cast(x, compute), params, counts, 0)
    sums = build.sum(patches, (len(patches.shape) - 1,))
    if not params.divide:
        return build.cast(sums, node.dtype)
    spatial = x.shape[lead:]
    ones = build.constant(1.0, compute, spatial)
    _, widths = _pool_padding(ones, params, counts)
    if params.count_include_pad:
        explicit = tuple(zip(params.pads_begin, params.pads_end))
        ones = pad_constant(build, ones, explicit, 1.0)
        extra = tuple((0, max(end - explicit_end, 0))
                      for (_, end), explicit_end in zip(widths, params.pads_end))
        mask = pad_constant(build, ones, extra, 0.0)
    else:
        mask = pad_constant(build, ones, widths, 0.0)
    count_patches = windows(build, mask, 0, params.kernel, params.strides, params.dilations,
                            counts)
    divisor = build.sum(_windows_last(build, count_patches, 0, rank), (rank,))
    return build.cast(build.div(sums, divisor), node.dtype)


def _activation(build: Builder, y: Node, params, slope: Node | None) -> Node:
    """CONV_FUSED's activation over ``y`` from primitive and composite elementwise nodes."""
    kind, alpha, beta = params.activation, params.alpha, params.beta
    zero = build.constant(0.0, y.dtype)
    if kind == "relu":
        return build.op(OpKind.RELU, y)
    if kind == "clip":
        return build.elementwise(OpKind.MINIMUM, build.elementwise(
            OpKind.MAXIMUM, y, build.constant(alpha, y.dtype)), build.constant(beta, y.dtype))
    if kind in ("sigmoid", "tanh", "silu"):
        return build.op({"sigmoid": OpKind.SIGMOID, "tanh": OpKind.TANH,
                         "silu": OpKind.SILU}[kind], y)
    if kind in ("hard_sigmoid", "hard_swish"):
        if kind == "hard_swish":
            alpha, beta = 1.0 / 6.0, 0.5
        t = build.add(build.scalar(OpKind.MUL, y, alpha), build.constant(beta, y.dtype))
        t = build.elementwise(OpKind.MINIMUM, build.elementwise(OpKind.MAXIMUM, t, zero),
                              build.constant(1.0, y.dtype))
        return build.mul(y, t) if kind == "hard_swish" else t
    if kind in ("leaky_relu", "prelu"):
        factor = build.constant(alpha, y.dtype) if kind == "leaky_relu" else \
            build.reshape(slope, (1, y.shape[1]) + (1,) * (len(y.shape) - 2))
        negative = build.elementwise(OpKind.LT, y, zero)
        return build.where(negative, build.mul(y, factor), y)
    return y


def from_blocked(build: Builder, node: Node) -> Node:
    """(N, C/16, H, W, 16) -> (N, C, H, W)."""
    n, blocks, h, w, block = node.shape
    return build.reshape(build.permute(node, (0, 1, 4, 2, 3)), (n, blocks * block, h, w))


def to_blocked(build: Builder, node: Node, block: int) -> Node:
    """(N, C, H, W) -> (N, C/block, H, W, block)."""
    n, c, h, w = node.shape
    return build.permute(build.reshape(node, (n, c // block, block, h, w)), (0, 1, 3, 4, 2))


@decomposes(OpKind.CONV_BLOCKED)
def conv_blocked(node: Node, build: Builder) -> Node:
    """CONV_FUSED on the planar input (a stem's is planar already; times the input scale
    where there is one) and residual, its output blocked again."""
    params = node.params
    x = node.inputs[0]
    x = x if len(x.shape) == 4 else from_blocked(build, x)
    if params.input_scale:
        x = build.mul(x, build.reshape(node.inputs[-1], (*x.shape[:2], 1, 1)))
    inputs = [x, *node.inputs[1:3]]
    if params.residual:
        inputs.append(from_blocked(build, node.inputs[3]))
    y = build.op(OpKind.CONV_FUSED, *inputs, params=replace(params, input_scale=False))
    return to_blocked(build, y, node.shape[-1])


@decomposes(OpKind.CONV_BLOCKED_CAT)
def conv_blocked_cat(node: Node, build: Builder) -> Node:
    """Each part a CONV_BLOCKED, joined along the channel blocks."""
    parts = [build.op(OpKind.CONV_BLOCKED, *node.inputs[3 * k:3 * k + 3], params=part)
             for k, part in enumerate(node.params.parts)]
    return build.op(OpKind.CAT, *parts, params=AxisParams(1))


@decomposes(OpKind.CONV_FUSED)
def conv_fused(node: Node, build: Builder) -> Node:
    """conv, + bias per channel, + residual, then the activation: separate nodes."""
    params = node.params
    x, weight, bias = node.inputs[:3]
    y = build.op(OpKind.CONV, x, weight, params=params.conv)
    y = build.add(y, build.reshape(bias, (1, y.shape[1]) + (1,) * (len(y.shape) - 2)))
    if params.residual:
        y = build.add(y, node.inputs[3])
    slope = node.inputs[-1] if params.activation == "prelu" else None
    return _activation(build, y, params, slope)
