"""Kernel-suite cases of reductions, scans, matmul, einsum, determinants and the row ops."""

from __future__ import annotations

import numpy as np

from fuel.ir import dtype as dt
from fuel.ir.ops import (
    NO_PARAMS,
    AxisParams,
    NormParams,
    OpKind,
    ReduceParams,
)
from fuel.ir.params import EinsumParams
from tests.backends.kernel_cases.base import (
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


def cumprod_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("cumprod", dtypes)
    rtol, atol = tolerance(d, loose=True)
    plans = [("dense", (4, 5), 1), ("transposed", (4, 3), 0), ("stepped", (2, 3, 6), 2),
             ("flipped", (6,), 0)]

    def reference(arrays, params):
        x = compute(arrays[0])
        wide = x if d.is_floating else x.astype(np.int64)
        return np.cumprod(wide, axis=params.dim).astype(d.numpy)

    return [Case(AxisParams(dim), [operand(
        values(d, shape, rng, 0.5, 1.5) if d.is_floating else values(d, shape, rng, -2, 2),
        kind)], reference, f"cumprod#{i}", rtol, atol)
        for i, (kind, shape, dim) in enumerate(plans)]


def einsum_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("einsum", dtypes)
    rtol, atol = tolerance(d, loose=True)
    unary = [("ij->ji", (3, 4)), ("ii->i", (4, 4)), ("ijk->k", (2, 3, 4))]
    binary = [("ij,jk->ik", (3, 4), (4, 5)), ("bij,bkj->bik", (2, 3, 4), (2, 5, 4)),
              ("i,j->ij", (3,), (4,))]

    def data(shape):
        return values(d, shape, rng, -4, 4)

    def reference(arrays, params):
        wide = [compute(a) if d.is_floating else a.astype(np.int64) for a in arrays]
        return np.einsum(params.equation, *wide).astype(d.numpy)

    if len(dtypes) == 2:
        return [Case(EinsumParams(eq), [operand(data(shape), "transposed" if i else "dense")],
                     reference, f"einsum#{i}", rtol, atol)
                for i, (eq, shape) in enumerate(unary)]
    return [Case(EinsumParams(eq), [operand(data(a)), operand(data(b), "stepped")], reference,
                 f"einsum#{i}", rtol, atol) for i, (eq, a, b) in enumerate(binary)]


def det_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("det", dtypes)
    rtol, atol = tolerance(d, loose=True)
    if d in (dt.float16, dt.bfloat16):
        rtol, atol = rtol * 4, atol * 8
    plans = [("dense", (3, 3)), ("transposed", (2, 4, 4)), ("stepped", (2, 2))]
    return [Case(NO_PARAMS, [operand(values(d, shape, rng, -1.5, 1.5), kind)],
                 lambda a, p: np.linalg.det(compute(a[0])).astype(d.numpy), f"det#{i}",
                 rtol, atol) for i, (kind, shape) in enumerate(plans)]

CASES = {
    **{op: reduce_cases(op) for op in (K.SUM, K.PROD, K.MEAN, K.MAX, K.MIN, K.ARGMAX,
                                       K.ARGMIN, K.ALL, K.ANY)},
    K.CUMSUM: cumsum_cases,
    K.MATMUL: matmul_cases,
    K.SOFTMAX: softmax_cases(K.SOFTMAX),
    K.LOG_SOFTMAX: softmax_cases(K.LOG_SOFTMAX),
    K.LAYER_NORM: norm_cases(K.LAYER_NORM),
    K.RMS_NORM: norm_cases(K.RMS_NORM),
    K.CUMPROD: cumprod_cases,
    K.EINSUM: einsum_cases,
    K.DET: det_cases,
}
