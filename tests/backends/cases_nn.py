"""Conformance cases of the ops added for ONNX (merged into ``tests/backends/cases.py``):
inverse trigonometry, fmod, truncating division, bit shifts, convolution, pooling, argsort,
cumprod, scatter, einsum, grid sampling, determinants and bit casts."""

from __future__ import annotations

import numpy as np

from fuel.ir import dtype as dt
from fuel.ir.ops import NO_PARAMS, AxisParams, CastParams, OpKind
from fuel.ir.params import (
    ConvParams,
    EinsumParams,
    GridSampleParams,
    PoolParams,
    ScatterParams,
    SortParams,
)
from tests.backends import nn_references as naive
from tests.backends.cases import Case, broadcast, compute, operand, rng_for, tolerance, values

K = OpKind
PLANS_1 = [("dense", (3, 5)), ("transposed", (4, 6)), ("stepped", (2, 3, 4)), ("flipped", (5,)),
           ("dense", ()), ("dense", (0, 3))]
PLANS_2 = [(("dense", "dense"), (3, 5)), (("transposed", "stepped"), (4, 6)),
           (("flipped", "broadcast"), (3, 5)), (("dense", "dense"), (0, 3))]
# op -> (NumPy function, low, high): inputs drawn inside each function's domain.
TRIG = {
    K.TAN: (np.tan, -1.4, 1.4), K.ASIN: (np.arcsin, -0.95, 0.95),
    K.ACOS: (np.arccos, -0.95, 0.95), K.ATAN: (np.arctan, -4.0, 4.0),
    K.SINH: (np.sinh, -3.0, 3.0), K.COSH: (np.cosh, -3.0, 3.0),
    K.ASINH: (np.arcsinh, -4.0, 4.0), K.ACOSH: (np.arccosh, 1.05, 5.0),
    K.ATANH: (np.arctanh, -0.9, 0.9),
}


def _operand2(kind: str, data: np.ndarray, shape) -> object:
    if kind == "broadcast":
        return broadcast(data[:1], shape)
    return operand(data, kind)


def trig_cases(op):
    function, low, high = TRIG[op]

    def generate(dtypes):
        d = dtypes[0]
        rng = rng_for(op, dtypes)
        rtol, atol = tolerance(d, loose=True)
        return [Case(NO_PARAMS, [operand(values(d, shape, rng, low, high), kind)],
                     lambda a, p: function(compute(a[0])).astype(d.numpy), f"{op.value}#{i}",
                     rtol, atol) for i, (kind, shape) in enumerate(PLANS_1)]

    return generate


def _nonzero(d, shape, rng, low, high):
    data = values(d, shape, rng, low, high)
    if d.is_floating:
        return np.where(np.abs(compute(data)) < 0.25, 1.5, compute(data)).astype(d.numpy)
    return np.where(data == 0, d.numpy.type(3), data)


def _python_elementwise(function, out):
    def reference(arrays, params):
        a, b = (np.broadcast_to(x, arrays[0].shape) for x in arrays)
        flat = [function(int(x), int(y)) for x, y in zip(a.reshape(-1), b.reshape(-1))]
        return np.array(flat, dtype=np.int64).astype(out.numpy).reshape(a.shape)

    return reference


def _wrap(value: int, dtype) -> int:
    bits = dtype.itemsize * 8
    value &= (1 << bits) - 1
    if dtype.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def binary_int_cases(op):
    def generate(dtypes):
        d = dtypes[0]
        rng = rng_for(op, dtypes)
        bits = d.itemsize * 8
        if op is K.FMOD:
            reference = (lambda a, p: np.fmod(compute(a[0]), compute(a[1])).astype(d.numpy))
            rtol, atol = tolerance(d, loose=True)
        elif op is K.INT_DIV:
            reference = _python_elementwise(lambda x, y: abs(x) // abs(y) * (
                1 if (x >= 0) == (y > 0) else -1), d)
            rtol = atol = None
        else:
            left = op is K.BITSHIFT_LEFT

            def shift(x, s):
                if s < 0 or s >= bits:
                    return -1 if not left and x < 0 else 0
                return _wrap(x << s, d) if left else x >> s

            reference = _python_elementwise(shift, d)
            rtol = atol = None
        cases = []
        for i, (kinds, shape) in enumerate(PLANS_2):
            first = values(d, shape, rng, -40, 40) if op is not K.FMOD else \
                values(d, shape, rng, -9, 9)
            if op in (K.BITSHIFT_LEFT, K.BITSHIFT_RIGHT):
                second = rng.integers(-1, bits + 2, size=shape).astype(d.numpy) \
                    if d.kind == "i" else rng.integers(0, bits + 2, size=shape).astype(d.numpy)
            else:
                second = _nonzero(d, shape, rng, -7, 7)
            operands = [_operand2(kinds[0], first, shape), _operand2(kinds[1], second, shape)]
            cases.append(Case(NO_PARAMS, operands, reference, f"{op.value}#{i}", rtol, atol))
        return cases

    return generate


def _conv_data(d, shape, rng):
    return values(d, shape, rng, -3, 3) if not d.is_floating else values(d, shape, rng)


CONV_PLANS = [  # input, weight, strides, begin, end, dilations, groups
    ((1, 2, 7), (3, 2, 3), (2,), (1,), (0,), (1,), 1),
    ((2, 4, 6, 5), (6, 2, 3, 2), (1, 2), (1, 0), (2, 1), (2, 1), 2),
    ((1, 2, 4, 3, 3), (2, 2, 2, 2, 2), (1, 1, 2), (0, 1, 0), (1, 0, 1), (1, 1, 1), 1),
]


def conv_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("conv", dtypes)
    rtol, atol = tolerance(d, loose=True)
    cases = []
    for i, (xs, ws, strides, begin, end, dilations, groups) in enumerate(CONV_PLANS):
        params = ConvParams(strides, begin, end, dilations, groups)
        operands = [operand(_conv_data(d, xs, rng), "stepped" if i == 1 else "dense"),
                    operand(_conv_data(d, ws, rng), "transposed" if i == 2 else "dense")]
        cases.append(Case(params, operands, lambda a, p: naive.conv(
            compute(a[0]), compute(a[1]), p.strides, p.pads_begin, p.pads_end, p.dilations,
            p.groups).astype(d.numpy), f"conv#{i}", rtol, atol))
    return cases


def conv_transpose_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("conv_transpose", dtypes)
    rtol, atol = tolerance(d, loose=True)
    plans = [((1, 2, 4), (2, 3, 3), (2,), (1,), (0,), (1,), 1, (1,)),
             ((2, 4, 3, 2), (4, 1, 2, 3), (2, 1), (0, 1), (1, 0), (1, 2), 2, (1, 0))]
    cases = []
    for i, (xs, ws, strides, begin, end, dilations, groups, padding) in enumerate(plans):
        params = ConvParams(strides, begin, end, dilations, groups, padding)
        operands = [operand(_conv_data(d, xs, rng), "flipped" if i else "dense"),
                    operand(_conv_data(d, ws, rng))]
        cases.append(Case(params, operands, lambda a, p: naive.conv_transpose(
            compute(a[0]), compute(a[1]), p.strides, p.pads_begin, p.pads_end, p.dilations,
            p.groups, p.output_padding).astype(d.numpy), f"conv_transpose#{i}", rtol, atol))
    return cases


POOL_PLANS = [  # shape, kind, params
    ((2, 3, 7, 6), "dense", PoolParams((3, 2), (2, 2), (1, 0), (1, 1), (1, 1), True, True)),
    ((1, 2, 9), "stepped", PoolParams((3,), (2,), (0,), (2,), (2,), False, False)),
    ((2, 5, 5), "transposed", PoolParams((2, 3), (1, 2), (1, 1), (0, 1), (1, 1), True,
                                         False, True, 1)),
    ((1, 1, 4, 4, 4), "dense", PoolParams((2, 2, 2), (2, 2, 2), (0, 0, 0), (0, 0, 0),
                                          (1, 1, 1))),
]


def pool_cases(op):
    kind = {K.MAX_POOL: "max", K.MAX_POOL_INDICES: "indices", K.AVG_POOL: "avg"}[op]

    def generate(dtypes):
        d = dtypes[0]
        rng = rng_for(op, dtypes)
        rtol, atol = tolerance(d, loose=True)
        cases = []
        for i, (shape, layout, params) in enumerate(POOL_PLANS):
            if kind == "avg" and i == 1:
                params = PoolParams(params.kernel, params.strides, params.pads_begin,
                                    params.pads_end, params.dilations, divide=False)
            data = values(d, shape, rng, -60, 60) if d.is_integer else values(d, shape, rng)
            if kind == "indices":  # distinct values: the position of the maximum is unique
                data = rng.permutation(data.size).reshape(shape).astype(d.numpy) \
                    if d.itemsize > 1 or data.size < 120 else data
            cases.append(Case(params, [operand(data, layout)], lambda a, p: naive.pool(
                compute(a[0]), p, kind).astype(dtypes[-1].numpy), f"{op.value}#{i}", rtol,
                atol))
        return cases

    return generate


def argsort_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("argsort", dtypes)
    plans = [("dense", (4, 7), 1, False), ("transposed", (5, 3), 0, True),
             ("stepped", (2, 3, 9), 2, True), ("flipped", (6,), 0, False)]

    def reference(arrays, params):
        x = compute(arrays[0])
        moved = np.moveaxis(x, params.dim, -1)
        rows = moved.reshape(-1, moved.shape[-1])
        sign = -1 if params.descending else 1
        order = [sorted(range(len(row)), key=lambda k, r=row: (sign * float(r[k]), k))
                 for row in rows]
        return np.moveaxis(np.array(order, dtype=np.int64).reshape(moved.shape), -1, params.dim)

    return [Case(SortParams(dim, descending), [operand(values(d, shape, rng, 0, 5), kind)],
                 reference, f"argsort#{i}")
            for i, (kind, shape, dim, descending) in enumerate(plans)]


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


def _reductions(d):
    return ("none",) if d.is_bool else ("none", "add", "mul", "max", "min")


def scatter_elements_cases(dtypes):
    d, index_dtype = dtypes[0], dtypes[1]
    rng = rng_for("scatter_elements", dtypes)
    cases = []
    for i, reduction in enumerate(_reductions(d)):
        data = values(d, (4, 5), rng, -5, 5)
        dim = i % 2
        size = data.shape[dim]
        if reduction == "none":  # unique targets: the order of writes does not matter
            index = np.stack([rng.permutation(size)[:3] for _ in range(3)], 1 - dim)
            index = index.T if dim == 1 else index
        else:
            index = rng.integers(-size, size, size=(3, 3) if dim == 0 else (3, 3))
        updates = values(d, index.shape, rng, -5, 5)
        operands = [operand(data, "transposed"), operand(index.astype(index_dtype.numpy)),
                    operand(updates, "stepped")]
        cases.append(Case(ScatterParams(dim, reduction), operands, lambda a, p: (
            naive.scatter_elements(a[0], a[1], a[2], p.dim, p.reduction)),
            f"scatter_elements#{i}"))
    return cases


def scatter_nd_cases(dtypes):
    d, index_dtype = dtypes[0], dtypes[1]
    rng = rng_for("scatter_nd", dtypes)
    cases = []
    for i, reduction in enumerate(_reductions(d)):
        data = values(d, (4, 3, 2), rng, -5, 5)
        if reduction == "none":
            rows = rng.permutation(4)[:3]
            index = np.stack([rows, rng.integers(-3, 3, size=3)], 1)
        else:
            index = np.stack([rng.integers(-4, 4, size=5), rng.integers(0, 3, size=5)], 1)
        updates = values(d, (index.shape[0], 2), rng, -5, 5)
        operands = [operand(data, "flipped"), operand(index.astype(index_dtype.numpy)),
                    operand(updates)]
        cases.append(Case(ScatterParams(0, reduction), operands, lambda a, p: (
            naive.scatter_nd(a[0], a[1], a[2], p.reduction)), f"scatter_nd#{i}"))
    return cases


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


def grid_sample_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("grid_sample", dtypes)
    rtol, atol = tolerance(d, loose=True)
    if d in (dt.float16, dt.bfloat16):
        rtol, atol = rtol * 4, atol * 8
    plans = [("linear", "zeros", False), ("nearest", "border", True),
             ("cubic", "reflection", False), ("linear", "reflection", True),
             ("cubic", "zeros", True)]
    cases = []
    for i, (mode, padding, align) in enumerate(plans):
        x = values(d, (1, 2, 4, 5), rng)
        grid = values(d, (1, 3, 2, 2), rng, -1.3, 1.3)
        cases.append(Case(GridSampleParams(mode, padding, align),
                          [operand(x, "transposed" if i % 2 else "dense"), operand(grid)],
                          lambda a, p: naive.grid_sample_2d(
                              compute(a[0]), compute(a[1]), p.mode, p.padding_mode,
                              p.align_corners).astype(d.numpy), f"grid_sample#{i}", rtol, atol))
    return cases


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


def bitcast_cases(dtypes):
    source, target = dtypes
    rng = rng_for("bitcast", dtypes)
    cases = []
    for i, (kind, shape) in enumerate(PLANS_1):
        data = values(source, shape, rng, -50, 50)
        cases.append(Case(CastParams(target), [operand(data, kind)],
                          lambda a, p: np.array(a[0], copy=True).view(p.dtype.numpy),
                          f"bitcast#{i}", 0.0, 0.0))
    return cases


CASES = {
    **{op: trig_cases(op) for op in TRIG},
    **{op: binary_int_cases(op) for op in (K.FMOD, K.INT_DIV, K.BITSHIFT_LEFT,
                                           K.BITSHIFT_RIGHT)},
    K.CONV: conv_cases,
    K.CONV_TRANSPOSE: conv_transpose_cases,
    **{op: pool_cases(op) for op in (K.MAX_POOL, K.MAX_POOL_INDICES, K.AVG_POOL)},
    K.ARGSORT: argsort_cases,
    K.CUMPROD: cumprod_cases,
    K.SCATTER_ELEMENTS: scatter_elements_cases,
    K.SCATTER_ND: scatter_nd_cases,
    K.EINSUM: einsum_cases,
    K.GRID_SAMPLE: grid_sample_cases,
    K.DET: det_cases,
    K.BITCAST: bitcast_cases,
}
