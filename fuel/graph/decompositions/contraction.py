"""Contractions from MATMUL and SUM: einsum (diagonals, sums, one batched matmul) and
conv_transpose (a stride-1 conv over the zero-dilated input with the flipped kernel)."""

from __future__ import annotations

from fuel.graph.decompositions.builder import Builder, compute_dtype
from fuel.graph.decompositions.indexing import pad_constant
from fuel.graph.decompositions.registry import decomposes
from fuel.graph.node import Node
from fuel.ir import dtype as dt
from fuel.ir.ops import ConvParams, OpKind, ReduceParams
from fuel.ir.rules import parse_einsum


def _product(sizes) -> int:
    total = 1
    for size in sizes:
        total *= size
    return total


def _distinct(build: Builder, x: Node, term: str) -> tuple[Node, str]:
    """``x`` with every repeated subscript reduced to its diagonal (mask, then sum)."""
    while len(set(term)) != len(term):
        letter = next(c for c in term if term.count(c) > 1)
        first = term.index(letter)
        second = term.index(letter, first + 1)
        size = x.shape[first]
        rank = len(x.shape)
        rows = build.unsqueeze_to(build.arange(size), rank, (first,))
        columns = build.unsqueeze_to(build.arange(size), rank, (second,))
        on_diagonal = build.elementwise(OpKind.EQ, rows, columns)
        masked = build.where(on_diagonal, x, build.constant(0, x.dtype))
        x = build.cast(build.sum(masked, (second,)), masked.dtype)
        term = term[:second] + term[second + 1:]
    return x, term


def _drop(build: Builder, x: Node, term: str, keep: set[str]) -> tuple[Node, str]:
    """Sum away the subscripts not in ``keep``."""
    dims = tuple(i for i, c in enumerate(term) if c not in keep)
    if not dims:
        return x, term
    return build.cast(build.sum(x, dims), x.dtype), "".join(c for c in term if c in keep)


def _arrange(build: Builder, x: Node, term: str, order: str) -> Node:
    return build.permute(x, tuple(term.index(c) for c in order))


@decomposes(OpKind.EINSUM)
def einsum(node: Node, build: Builder) -> Node:
    """Diagonals first, then sums over subscripts one operand alone holds, then a batched
    matmul over (batch, left, contracted) x (batch, contracted, right)."""
    terms, output = parse_einsum(node.params.equation)
    compute = compute_dtype(node.dtype)
    operands = []
    for position, (source, term) in enumerate(zip(node.inputs, terms)):
        x, term = _distinct(build, build.cast(source, compute), term)
        keep = set(output).union(*(set(t) for k, t in enumerate(terms) if k != position))
        operands.append(_drop(build, x, term, keep))
    if len(operands) == 1:
        x, term = operands[0]
        return build.cast(_arrange(build, x, term, output), node.dtype)
    (a, left_term), (b, right_term) = operands
    shared = [c for c in left_term if c in right_term]
    batch = "".join(c for c in shared if c in output)
    contracted = "".join(c for c in shared if c not in output)
    left = "".join(c for c in left_term if c not in right_term)
    right = "".join(c for c in right_term if c not in left_term)
    sizes = dict(zip(left_term, a.shape)) | dict(zip(right_term, b.shape))
    batch_shape = tuple(sizes[c] for c in batch)
    rows, inner, columns = (_product(sizes[c] for c in part)
                            for part in (left, contracted, right))
    a = build.reshape(_arrange(build, a, left_term, batch + left + contracted),
                      batch_shape + (rows, inner))
    b = build.reshape(_arrange(build, b, right_term, batch + contracted + right),
                      batch_shape + (inner, columns))
    product = build.reshape(build.matmul(a, b),
                            batch_shape + tuple(sizes[c] for c in left + right))
    return build.cast(_arrange(build, product, batch + left + right, output), node.dtype)


@decomposes(OpKind.CONV_TRANSPOSE)
def conv_transpose(node: Node, build: Builder) -> Node:
    """Insert stride - 1 zeros between input elements, pad by dilation * (kernel - 1) less
    the op's padding (plus output_padding at the end), convolve with the flipped kernel."""
    x, weight = node.inputs
    params: ConvParams = node.params
    compute = compute_dtype(node.dtype)
    x, weight = build.cast(x, compute), build.cast(weight, compute)
    rank = len(x.shape) - 2
    kernel = weight.shape[2:]
    spaced = (x.shape[:2] + tuple((s - 1) * stride + 1 for s, stride in
                                  zip(x.shape[2:], params.strides)))
    if spaced != x.shape:
        zeros = build.constant(0, compute, spaced)
        x = build.slice_assign(zeros, x, (0,) * len(spaced), spaced,
                               (1, 1) + tuple(params.strides))
    output_padding = params.output_padding or (0,) * rank
    widths = [(0, 0), (0, 0)]
    for i in range(rank):
        reach = params.dilations[i] * (kernel[i] - 1)
        widths.append((reach - params.pads_begin[i],
                       reach - params.pads_end[i] + output_padding[i]))
    x = _pad_or_crop(build, x, widths)
    for i in range(rank):  # flip the kernel
        size = kernel[i]
        x_axis = 2 + i
        weight = build.index_select(weight, x_axis,
                                    build.arange(size, start=size - 1, step=-1))
    groups = params.groups
    in_channels, per_group = weight.shape[0], weight.shape[1]
    weight = build.reshape(weight, (groups, in_channels // groups, per_group) + kernel)
    weight = build.permute(weight, (0, 2, 1) + tuple(range(3, 3 + rank)))
    weight = build.reshape(weight, (groups * per_group, in_channels // groups) + kernel)
    forward = ConvParams((1,) * rank, (0,) * rank, (0,) * rank, tuple(params.dilations),
                         groups)
    return build.cast(build.op(OpKind.CONV, x, weight, params=forward), node.dtype)


def _pad_or_crop(build: Builder, x: Node, widths) -> Node:
    """Zero padding where a width is positive, a slice where it is negative."""
    for axis, (before, after) in enumerate(widths):
        if before < 0 or after < 0:
            stop = x.shape[axis] + min(after, 0)
            x = build.slice(x, axis, max(-before, 0), stop)
    grow = tuple((max(before, 0), max(after, 0)) for before, after in widths)
    return pad_constant(build, x, grow, 0)





@decomposes(OpKind.DET)
def det(node: Node, build: Builder) -> Node:
    """Gaussian elimination with partial pivoting, unrolled over the (static) size: the
    product of the pivots, negated once per row swap (a zero pivot gives 0)."""
    compute = compute_dtype(node.dtype)
    a = build.cast(node.inputs[0], compute)
    size = a.shape[-1]
    rank = len(a.shape)
    batch = a.shape[:-2]
    result = build.constant(1.0, compute, batch)
    row = build.unsqueeze_to(build.arange(size), rank, (rank - 2,))  # (..., n, 1)
    zero, one = build.constant(0.0, compute), build.constant(1.0, compute)
    for k in range(size):
        column = build.slice(a, rank - 1, k, k + 1)  # (..., n, 1)
        below = build.elementwise(OpKind.GE, row, build.constant(k, dt.int64))
        candidates = build.where(below, build.op(OpKind.ABS, column),
                                 build.constant(-1.0, compute))
        pivot_row = build.op(OpKind.ARGMAX, candidates,
                             params=ReduceParams((rank - 2,), True))  # (..., 1, 1)
        is_pivot = build.elementwise(OpKind.EQ, row, pivot_row)  # (..., n, 1)
        is_k = build.elementwise(OpKind.EQ, row, build.constant(k, dt.int64))
        pivot_values = build.sum(build.where(is_pivot, a, zero), (rank - 2,), keepdim=True)
        row_k = build.slice(a, rank - 2, k, k + 1)  # (..., 1, n)
        a = build.where(is_k, pivot_values, build.where(is_pivot, row_k, a))
        swapped = build.op(OpKind.LOGICAL_NOT, build.reshape(
            build.elementwise(OpKind.EQ, pivot_row, build.constant(k, dt.int64)), batch))
        pivot = build.reshape(build.slice(build.slice(a, rank - 2, k, k + 1), rank - 1, k,
                                          k + 1), batch)
        result = build.mul(build.where(swapped, build.op(OpKind.NEG, result), result), pivot)
        safe = build.where(build.elementwise(OpKind.EQ, pivot, zero), one, pivot)
        factors = build.div(build.slice(a, rank - 1, k, k + 1),
                            build.reshape(safe, batch + (1, 1)))  # (..., n, 1)
        after = build.elementwise(OpKind.GT, row, build.constant(k, dt.int64))
        update = build.mul(build.where(after, factors, zero), build.slice(a, rank - 2, k, k + 1))
        a = build.sub(a, update)
    return build.cast(result, node.dtype)
