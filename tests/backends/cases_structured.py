"""Conformance cases of reductions, cumsum, matmul, the row ops and indexing/structure ops."""

from __future__ import annotations

import numpy as np

from fuel.ir.layout import Layout
from fuel.ir.ops import (
    AxisParams,
    DiagonalParams,
    IndexCopyParams,
    NormParams,
    OpKind,
    PadParams,
    ReduceParams,
    SliceAssignParams,
)
from tests.backends.cases import (
    Case,
    broadcast,
    compute,
    operand,
    rng_for,
    tolerance,
    values,
)

K = OpKind

# (kind, shape, dims, keepdim); long rows and columns reach the work-group kernels.
REDUCE_PLANS = [
    ("dense", (3, 4, 5), (1,), False),
    ("transposed", (3, 4, 5), (0, 2), True),
    ("stepped", (3, 4, 5), (0, 1, 2), False),
    ("broadcast", (3, 4, 5), (2,), False),
    ("flipped", (3, 300), (1,), False),
    ("dense", (300, 3), (0,), True),
    ("dense", (2000,), (0,), False),
    ("dense", (4, 5), (), False),
]
INDEX_OPS = (K.ARGMAX, K.ARGMIN)


def _reduce_values(op, dtype, shape, rng):
    if op in (K.ALL, K.ANY):  # mostly true for all(), mostly false for any()
        return (rng.random(shape) < (0.9 if op is K.ALL else 0.1)).astype(dtype.numpy)
    if op is K.PROD:
        return values(dtype, shape, rng, 0.6, 1.4) if dtype.is_floating else \
            values(dtype, shape, rng, -1, 2)
    if op in (K.MAX, K.MIN) + INDEX_OPS and not dtype.is_floating:
        return values(dtype, shape, rng, 0, 9)  # many ties
    return values(dtype, shape, rng, special=op in (K.MAX, K.MIN) and dtype.is_floating)


def _reduce_reference(op, out_dtype):
    def reference(arrays, params):
        x = compute(arrays[0])
        axis, keep = params.dims, params.keepdim
        with np.errstate(all="ignore"):
            if op in INDEX_OPS:
                function = np.argmax if op is K.ARGMAX else np.argmin
                if len(axis) == 1:
                    result = function(x, axis=axis[0], keepdims=keep)
                else:
                    result = np.full((1,) * x.ndim if keep else (), function(x.reshape(-1)))
            elif op in (K.SUM, K.PROD) and not np.issubdtype(x.dtype, np.floating):
                function = np.sum if op is K.SUM else np.prod
                result = function(x, axis=axis, keepdims=keep, dtype=np.int64)
            else:
                function = {K.SUM: np.sum, K.PROD: np.prod, K.MEAN: np.mean, K.MAX: np.max,
                            K.MIN: np.min, K.ALL: np.all, K.ANY: np.any}[op]
                result = function(x, axis=axis, keepdims=keep)
        return np.asarray(result).astype(out_dtype.numpy)

    return reference


def _layout(data, kind, shape):
    if kind == "broadcast":
        return broadcast(data[:1], shape)
    return operand(data, kind)


def reduce_cases(op):
    def generate(dtypes):
        source, target = dtypes
        rng = rng_for(op, dtypes)
        rtol, atol = tolerance(target, loose=True)
        cases = []
        for i, (kind, shape, dims, keep) in enumerate(REDUCE_PLANS):
            if op in INDEX_OPS and 1 < len(dims) < len(shape):
                continue
            if not dims and op in INDEX_OPS:
                dims = tuple(range(len(shape)))
            data = _reduce_values(op, source, shape, rng)
            cases.append(Case(ReduceParams(dims, keep), [_layout(data, kind, shape)],
                              _reduce_reference(op, target), f"{op.value}#{i}", rtol, atol))
        return cases

    return generate


def cumsum_cases(dtypes):
    source, target = dtypes
    rng = rng_for("cumsum", dtypes)
    rtol, atol = tolerance(target, loose=True)
    plans = [("dense", (4, 5), 1), ("transposed", (4, 5), 0), ("stepped", (2, 3, 70), 2),
             ("flipped", (6,), 0)]

    def reference(arrays, params):
        x = compute(arrays[0])
        accumulate = None if np.issubdtype(x.dtype, np.floating) else np.int64
        return np.cumsum(x, axis=params.dim, dtype=accumulate).astype(target.numpy)

    return [Case(AxisParams(dim), [operand(values(source, shape, rng), kind)], reference,
                 f"cumsum#{i}", rtol, atol) for i, (kind, shape, dim) in enumerate(plans)]


def matmul_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("matmul", dtypes)
    rtol, atol = tolerance(d, loose=True)

    def data(shape):
        return values(d, shape, rng, -5, 5) if not d.is_floating else values(d, shape, rng)

    plans = [
        (operand(data((3, 4))), operand(data((4, 5)))),
        (operand(data((5, 7)), "transposed"), operand(data((7, 3)), "flipped")),
        (operand(data((2, 3, 4)), "stepped"), broadcast(data((4, 5)), (2, 4, 5))),
        (operand(data((2, 1, 3, 4))), operand(data((5, 4, 6)), "transposed")),
        (operand(data((33, 40))), operand(data((40, 17)))),
        (operand(data((2, 0))), operand(data((0, 3)))),
    ]

    def reference(arrays, params):
        a, b = (compute(x) for x in arrays)
        if d.is_floating:
            return np.matmul(a, b).astype(d.numpy)
        return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(d.numpy)

    return [Case(None, list(plan), reference, f"matmul#{i}", rtol, atol)
            for i, plan in enumerate(plans)]


def softmax_cases(op):
    def generate(dtypes):
        d = dtypes[0]
        rng = rng_for(op, dtypes)
        rtol, atol = tolerance(d, loose=True)
        plans = [("dense", (3, 5), 1), ("transposed", (4, 6), 0), ("dense", (2, 3, 100), 2),
                 ("stepped", (2, 70, 3), 1), ("flipped", (7,), 0)]

        def reference(arrays, params):
            x = compute(arrays[0])
            shifted = x - np.max(x, axis=params.dim, keepdims=True)
            total = np.sum(np.exp(shifted), axis=params.dim, keepdims=True)
            result = shifted - np.log(total) if op is K.LOG_SOFTMAX else np.exp(shifted) / total
            return result.astype(d.numpy)

        return [Case(AxisParams(dim), [operand(values(d, shape, rng), kind)], reference,
                     f"{op.value}#{i}", rtol, atol)
                for i, (kind, shape, dim) in enumerate(plans)]

    return generate


def norm_cases(op):
    def generate(dtypes):
        d = dtypes[0]
        rng = rng_for(op, dtypes)
        rtol, atol = tolerance(d, loose=True)
        plans = [("dense", (4, 6), 1), ("transposed", (2, 3, 80), 1), ("stepped", (2, 4, 5), 2)]

        def reference(arrays, params):
            x, weight = compute(arrays[0]), compute(arrays[1])
            axes = tuple(range(x.ndim - params.axes, x.ndim))
            if op is K.RMS_NORM:
                scale = 1.0 / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + params.eps)
                return (x * scale * weight).astype(d.numpy)
            centered = x - np.mean(x, axis=axes, keepdims=True)
            deviation = np.sqrt(np.mean(centered ** 2, axis=axes, keepdims=True) + params.eps)
            return (centered / deviation * weight + compute(arrays[2])).astype(d.numpy)

        cases = []
        for i, (kind, shape, axes) in enumerate(plans):
            trailing = shape[len(shape) - axes:]
            operands = [operand(values(d, shape, rng), kind),
                        operand(values(d, trailing, rng, 0.5, 1.5))]
            if op is K.LAYER_NORM:
                operands.append(operand(values(d, trailing, rng), "flipped"))
            cases.append(Case(NormParams(axes, 1e-5), operands, reference, f"{op.value}#{i}",
                              rtol, atol))
        return cases

    return generate


def _wrap(index, size):
    index = index.astype(np.int64)
    return np.where(index < 0, index + size, index)


def gather_cases(dtypes):
    source, index_dtype, _ = dtypes
    rng = rng_for("gather", dtypes)
    plans = [("dense", (4, 5, 6), (4, 5, 6), 1), ("transposed", (4, 5, 6), (2, 3, 6), 2),
             ("stepped", (3, 4), (5, 4), 0)]

    def reference(arrays, params):
        x, index = arrays
        region = tuple(slice(None) if a == params.dim else slice(0, s)
                       for a, s in enumerate(index.shape))
        return np.take_along_axis(x[region], _wrap(index, x.shape[params.dim]), params.dim)

    cases = []
    for i, (kind, shape, index_shape, dim) in enumerate(plans):
        size = shape[dim]
        index = rng.integers(-size, size, size=index_shape).astype(index_dtype.numpy)
        cases.append(Case(AxisParams(dim), [operand(values(source, shape, rng), kind),
                                            operand(index, "flipped")], reference,
                          f"gather#{i}"))
    return cases


def index_select_cases(dtypes):
    source, index_dtype, _ = dtypes
    rng = rng_for("index_select", dtypes)
    plans = [("dense", (4, 5, 6), 1, 3), ("transposed", (4, 5, 6), 0, 7),
             ("stepped", (3, 8), 1, 5), ("dense", (6,), 0, 2)]

    def reference(arrays, params):
        x, index = arrays
        return np.take(x, _wrap(index, x.shape[params.dim]), axis=params.dim)

    cases = []
    for i, (kind, shape, dim, count) in enumerate(plans):
        size = shape[dim]
        index = rng.integers(-size, size, size=(count,)).astype(index_dtype.numpy)
        cases.append(Case(AxisParams(dim), [operand(values(source, shape, rng), kind),
                                            operand(index, "stepped")], reference,
                          f"index_select#{i}"))
    return cases


def cat_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("cat", dtypes)
    plans = [
        (0, [operand(values(d, (2, 3), rng)), operand(values(d, (4, 3), rng), "transposed")]),
        (1, [operand(values(d, (3, 2), rng), "stepped"), broadcast(values(d, (1, 4), rng),
                                                                    (3, 4)),
             operand(values(d, (3, 1), rng), "flipped")]),
        (2, [operand(values(d, (2, 2, 0), rng)), operand(values(d, (2, 2, 3), rng))]),
    ]
    return [Case(AxisParams(dim), operands,
                 lambda a, p: np.concatenate(a, axis=p.dim), f"cat#{i}")
            for i, (dim, operands) in enumerate(plans)]


def triangle_cases(op):
    def generate(dtypes):
        d = dtypes[0]
        rng = rng_for(op, dtypes)
        plans = [("dense", (5, 7), 0), ("transposed", (2, 4, 3), -1), ("stepped", (6, 4), 2)]
        function = np.tril if op is K.TRIL else np.triu
        return [Case(DiagonalParams(diagonal), [operand(values(d, shape, rng), kind)],
                     lambda a, p: function(a[0], p.diagonal), f"{op.value}#{i}")
                for i, (kind, shape, diagonal) in enumerate(plans)]

    return generate


def pad_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("pad", dtypes)
    fill = True if d.is_bool else 7 if d.is_integer else 1.5
    plans = [("dense", (3, 4), ((1, 2), (0, 3))), ("transposed", (2, 3, 2), ((0, 0), (2, 1),
                                                                            (1, 1)))]

    def reference(arrays, params):
        return np.pad(arrays[0], params.widths, constant_values=params.value)

    return [Case(PadParams(widths, fill), [operand(values(d, shape, rng), kind)], reference,
                 f"pad#{i}") for i, (kind, shape, widths) in enumerate(plans)]


def slice_assign_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("slice_assign", dtypes)
    plans = [((1, 0), (4, 6), (1, 2), "dense", "transposed", False),
             ((4, 5), (-1, 0), (-2, -1), "stepped", "dense", False),
             ((0, 2), (5, 3), (2, 1), "dense", "flipped", True)]

    def reference(arrays, params):
        out = np.array(arrays[0])
        region = Layout.contiguous(out.shape).slice(params.starts, params.stops, params.steps)
        view = np.lib.stride_tricks.as_strided(
            out.reshape(-1)[region.offset:], region.shape,
            tuple(s * out.itemsize for s in region.strides))
        view[...] = arrays[1]
        return out

    cases = []
    for i, (starts, stops, steps, kind, value_kind, inplace) in enumerate(plans):
        target = values(d, (5, 6), rng)
        region = Layout.contiguous((5, 6)).slice(starts, stops, steps)
        operands = [operand(target, kind), operand(values(d, region.shape, rng), value_kind)]
        cases.append(Case(SliceAssignParams(starts, stops, steps, inplace), operands, reference,
                          f"slice_assign#{i}", inplace=inplace))
    return cases


def index_copy_cases(dtypes):
    d, index_dtype = dtypes[0], dtypes[1]
    rng = rng_for("index_copy", dtypes)
    plans = [((5, 6), 0, "dense", "transposed", False), ((4, 7, 3), 1, "stepped", "dense", False),
             ((6, 5), 1, "dense", "flipped", True)]

    def reference(arrays, params):
        out = np.array(arrays[0])
        position = _wrap(arrays[1], out.shape[params.dim])
        out[(slice(None),) * params.dim + (position,)] = arrays[2]
        return out

    cases = []
    for i, (shape, dim, kind, source_kind, inplace) in enumerate(plans):
        size = shape[dim]
        chosen = rng.permutation(size)[: max(1, size // 2)]
        index = np.where(rng.random(chosen.shape) < 0.5, chosen - size, chosen)
        source_shape = shape[:dim] + (len(chosen),) + shape[dim + 1:]
        operands = [operand(values(d, shape, rng), kind),
                    operand(index.astype(index_dtype.numpy), "stepped"),
                    operand(values(d, source_shape, rng), source_kind)]
        cases.append(Case(IndexCopyParams(dim, inplace), operands, reference,
                          f"index_copy#{i}", inplace=inplace))
    return cases


CASES = {
    **{op: reduce_cases(op) for op in (K.SUM, K.PROD, K.MEAN, K.MAX, K.MIN, K.ARGMAX,
                                       K.ARGMIN, K.ALL, K.ANY)},
    K.CUMSUM: cumsum_cases,
    K.MATMUL: matmul_cases,
    K.SOFTMAX: softmax_cases(K.SOFTMAX),
    K.LOG_SOFTMAX: softmax_cases(K.LOG_SOFTMAX),
    K.LAYER_NORM: norm_cases(K.LAYER_NORM),
    K.RMS_NORM: norm_cases(K.RMS_NORM),
    K.GATHER: gather_cases,
    K.INDEX_SELECT: index_select_cases,
    K.CAT: cat_cases,
    K.TRIL: triangle_cases(K.TRIL),
    K.TRIU: triangle_cases(K.TRIU),
    K.PAD: pad_cases,
    K.SLICE_ASSIGN: slice_assign_cases,
    K.INDEX_COPY: index_copy_cases,
}
