"""NumPy kernels of the other ops added for ONNX: inverse trigonometry, fmod, integer division,
bit shifts, argsort, cumprod, scatter and einsum."""

from __future__ import annotations

import numpy as np

from fuel.backends.cpu.arrays import (
    CPU_KERNELS,
    STRIDED,
    array_kernel,
    combos,
    compute,
    output,
    view,
)
from fuel.backends.cpu.elementwise import _make_elementwise
from fuel.backends.cpu.indexing import check_indices
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind


def _truncating_divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Integer division rounding toward zero (C semantics); division by zero gives 0."""
    safe = np.where(y == 0, 1, y)
    quotient = np.floor_divide(x, safe)
    remainder = np.remainder(x, safe)
    adjust = (remainder != 0) & ((x < 0) ^ (safe < 0))
    return np.where(y == 0, 0, quotient + adjust.astype(quotient.dtype))


def _shift(function):
    """Shifts by a negative amount or by the bit width or more give 0 (-1 for a right shift
    of a negative number); left shifts of signed numbers wrap."""

    def shift(x, y):
        bits = x.dtype.itemsize * 8
        too_far = (y < 0) | (y >= bits)
        amount = np.where(too_far, 0, y).astype(x.dtype)
        if function is np.left_shift and x.dtype.kind == "i":
            unsigned = np.dtype(f"u{x.dtype.itemsize}")
            shifted = np.left_shift(x.view(unsigned), amount.astype(unsigned)).view(x.dtype)
        else:
            shifted = function(x, amount)
        fill = np.zeros((), x.dtype)
        if function is np.right_shift and x.dtype.kind == "i":
            fill = np.where(x < 0, np.array(-1, x.dtype), fill)
        return np.where(too_far, fill, shifted)

    shift.__name__ = function.__name__
    return shift


NN_UNARY = {
    OpKind.TAN: np.tan, OpKind.ASIN: np.arcsin, OpKind.ACOS: np.arccos, OpKind.ATAN: np.arctan,
    OpKind.SINH: np.sinh, OpKind.COSH: np.cosh, OpKind.ASINH: np.arcsinh,
    OpKind.ACOSH: np.arccosh, OpKind.ATANH: np.arctanh,
}
for _op, _function in NN_UNARY.items():
    CPU_KERNELS.add(_op, combos(dt.FLOAT_DTYPES, 1), _make_elementwise(_function), STRIDED)
CPU_KERNELS.add(OpKind.FMOD, combos(dt.NUMERIC_DTYPES, 2), _make_elementwise(np.fmod), STRIDED)
CPU_KERNELS.add(OpKind.INT_DIV, combos(dt.INTEGER_DTYPES, 2),
                _make_elementwise(_truncating_divide), STRIDED)
CPU_KERNELS.add(OpKind.BITSHIFT_LEFT, combos(dt.INTEGER_DTYPES, 2),
                _make_elementwise(_shift(np.left_shift)), STRIDED)
CPU_KERNELS.add(OpKind.BITSHIFT_RIGHT, combos(dt.INTEGER_DTYPES, 2),
                _make_elementwise(_shift(np.right_shift)), STRIDED)

SORTABLE = (dt.bool_,) + dt.NUMERIC_DTYPES
INDEX_DTYPES = (dt.int32, dt.int64)


@CPU_KERNELS.kernel(OpKind.ARGSORT, [(d, dt.int64) for d in SORTABLE], STRIDED)
def argsort(inputs, outputs, layouts, params):
    """Stable: equal values keep ascending positions in both directions."""
    x = compute(view(inputs[0], layouts[0]))
    if params.descending:
        key = -x if x.dtype.kind == "f" else np.invert(x)
    else:
        key = x
    output(outputs[0], layouts[-1])[...] = np.argsort(key, axis=params.dim, kind="stable")


@CPU_KERNELS.kernel(OpKind.CUMPROD, [(d, d) for d in dt.NUMERIC_DTYPES], STRIDED)
def cumprod(inputs, outputs, layouts, params):
    x = compute(view(inputs[0], layouts[0]))
    output(outputs[0], layouts[-1])[...] = np.cumprod(x, axis=params.dim)


_REDUCERS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(out: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> None:
    if reduction == "none":
        out[where] = updates
    else:
        _REDUCERS[reduction].at(out, where, updates)


@CPU_KERNELS.kernel(OpKind.SCATTER_ELEMENTS,
                    [(d, i, d, d) for d in dt.ALL_DTYPES for i in INDEX_DTYPES], STRIDED)
@array_kernel
def scatter_elements(data, index, updates, out, params):
    out[...] = data
    if index.size == 0:
        return
    index = check_indices(index, data.shape[params.dim], params.dim)
    where = list(np.indices(index.shape, sparse=True))
    where[params.dim] = index
    _scatter(out, tuple(where), updates, params.reduction)


@CPU_KERNELS.kernel(OpKind.SCATTER_ND,
                    [(d, i, d, d) for d in dt.ALL_DTYPES for i in INDEX_DTYPES], STRIDED)
@array_kernel
def scatter_nd(data, index, updates, out, params):
    out[...] = data
    depth = index.shape[-1]
    flat = index.reshape(-1, depth)
    if flat.shape[0] == 0:
        return
    where = tuple(check_indices(flat[:, k], data.shape[k], k) for k in range(depth))
    values = updates.reshape((flat.shape[0],) + data.shape[depth:])
    _scatter(out, where, values, params.reduction)


def _einsum_kernel(inputs, outputs, layouts, params):
    arrays = [compute(view(s, layout)) for s, layout in zip(inputs, layouts)]
    out = output(outputs[0], layouts[-1])
    out[...] = np.einsum(params.equation, *arrays, optimize=len(arrays) > 1)


_einsum_kernel.__qualname__ = "einsum"
EINSUM_DTYPES = dt.NUMERIC_DTYPES
CPU_KERNELS.add(OpKind.EINSUM, [(d, d) for d in EINSUM_DTYPES], _einsum_kernel, STRIDED)
CPU_KERNELS.add(OpKind.EINSUM, [(d, d, d) for d in EINSUM_DTYPES], _einsum_kernel, STRIDED)
