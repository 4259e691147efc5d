"""Kernel-suite cases of gather, index_select, cat, triangles, pad, slice assignment and
index_copy."""

from __future__ import annotations

import numpy as np

from fuel.ir.layout import Layout
from fuel.ir.ops import (
    AxisParams,
    DiagonalParams,
    IndexCopyParams,
    OpKind,
    PadParams,
    SliceAssignParams,
)
from tests.backends.kernel_cases.base import (
    Case,
    broadcast,
    operand,
    rng_for,
    values,
)

K = OpKind


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
        # dense parts along the channels of NCHW (concat.c's rows)
        (1, [operand(values(d, (2, 3, 4, 5), rng)), operand(values(d, (2, 1, 4, 5), rng)),
              operand(values(d, (2, 2, 4, 5), rng))]),
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
    K.GATHER: gather_cases,
    K.INDEX_SELECT: index_select_cases,
    K.CAT: cat_cases,
    K.TRIL: triangle_cases(K.TRIL),
    K.TRIU: triangle_cases(K.TRIU),
    K.PAD: pad_cases,
    K.SLICE_ASSIGN: slice_assign_cases,
    K.INDEX_COPY: index_copy_cases,
}
