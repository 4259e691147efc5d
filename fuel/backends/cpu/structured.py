"""NumPy kernels for reductions, scans, matmul, einsum, determinants and the row-wise
normalizations.

The executor runs kernels under ``np.errstate(all="ignore")``: NaN and inf pass through
like NumPy, without warnings.
"""

from __future__ import annotations

import numpy as np

from fuel.backends.cpu.arrays import STRIDED, array_kernel, compute, kernel_list, output, view
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind

KERNELS = kernel_list()
ACCUMULATE_DTYPES = [(d, dt.int64) for d in (dt.bool_,) + dt.INTEGER_DTYPES] + [
    (d, d) for d in dt.FLOAT_DTYPES
]


def _reduction(function, upcast: bool):
    def reduce(source, out, params):
        if upcast:
            source = compute(source)
        result = function(source, axis=params.dims, keepdims=params.keepdim)
        out[...] = np.asarray(result).reshape(out.shape)

    reduce.__name__ = f"reduce[{function.__name__}]"
    return array_kernel(reduce)


def _sum(source, axis, keepdims):
    if source.dtype.kind in "biu":
        return np.sum(source, axis=axis, keepdims=keepdims, dtype=np.int64)
    return np.sum(source, axis=axis, keepdims=keepdims)


def _prod(source, axis, keepdims):
    if source.dtype.kind in "biu":
        return np.prod(source, axis=axis, keepdims=keepdims, dtype=np.int64)
    return np.prod(source, axis=axis, keepdims=keepdims)


def _mean(source, axis, keepdims):
    return np.mean(source, axis=axis, keepdims=keepdims)


def _max(source, axis, keepdims):
    return np.max(source, axis=axis, keepdims=keepdims)


def _min(source, axis, keepdims):
    return np.min(source, axis=axis, keepdims=keepdims)


def _all(source, axis, keepdims):
    return np.all(source, axis=axis, keepdims=keepdims)


def _any(source, axis, keepdims):
    return np.any(source, axis=axis, keepdims=keepdims)


def _arg(function):
    def reduce_index(source, axis, keepdims):
        if len(axis) == 1:
            return function(source, axis=axis[0], keepdims=keepdims)
        flat = function(source.reshape(-1))
        return np.full((1,) * source.ndim if keepdims else (), flat, dtype=np.int64)

    reduce_index.__name__ = function.__name__
    return reduce_index


NUMERIC_AND_BOOL = (dt.bool_,) + dt.NUMERIC_DTYPES
KERNELS.add(OpKind.SUM, ACCUMULATE_DTYPES, _reduction(_sum, True), STRIDED)
KERNELS.add(OpKind.PROD, ACCUMULATE_DTYPES, _reduction(_prod, True), STRIDED)
KERNELS.add(OpKind.MEAN, [(d, d) for d in dt.FLOAT_DTYPES], _reduction(_mean, True), STRIDED)
KERNELS.add(OpKind.MAX, [(d, d) for d in NUMERIC_AND_BOOL], _reduction(_max, False), STRIDED)
KERNELS.add(OpKind.MIN, [(d, d) for d in NUMERIC_AND_BOOL], _reduction(_min, False), STRIDED)
KERNELS.add(OpKind.ALL, [(d, dt.bool_) for d in dt.ALL_DTYPES], _reduction(_all, False),
            STRIDED)
KERNELS.add(OpKind.ANY, [(d, dt.bool_) for d in dt.ALL_DTYPES], _reduction(_any, False),
            STRIDED)
KERNELS.add(OpKind.ARGMAX, [(d, dt.int64) for d in NUMERIC_AND_BOOL],
            _reduction(_arg(np.argmax), False), STRIDED)
KERNELS.add(OpKind.ARGMIN, [(d, dt.int64) for d in NUMERIC_AND_BOOL],
            _reduction(_arg(np.argmin), False), STRIDED)


@KERNELS.kernel(OpKind.CUMSUM, ACCUMULATE_DTYPES, STRIDED)
@array_kernel
def cumsum(source, out, params):
    source = compute(source)
    accumulate = np.int64 if source.dtype.kind in "biu" else None
    out[...] = np.cumsum(source, axis=params.dim, dtype=accumulate)


@KERNELS.kernel(OpKind.CUMPROD, [(d, d) for d in dt.NUMERIC_DTYPES], STRIDED)
def cumprod(inputs, outputs, layouts, params):
    x = compute(view(inputs[0], layouts[0]))
    output(outputs[0], layouts[-1])[...] = np.cumprod(x, axis=params.dim)


@KERNELS.kernel(OpKind.MATMUL, [(d, d, d) for d in dt.NUMERIC_DTYPES], STRIDED)
@array_kernel
def matmul(a, b, out, params):
    if out.dtype.kind == "f" and out.dtype.itemsize >= 4:
        np.matmul(a, b, out=out)
    else:
        out[...] = np.matmul(compute(a), compute(b))


def _einsum_kernel(inputs, outputs, layouts, params):
    arrays = [compute(view(s, layout)) for s, layout in zip(inputs, layouts)]
    out = output(outputs[0], layouts[-1])
    out[...] = np.einsum(params.equation, *arrays, optimize=len(arrays) > 1)


_einsum_kernel.__qualname__ = "einsum"
EINSUM_DTYPES = dt.NUMERIC_DTYPES
KERNELS.add(OpKind.EINSUM, [(d, d) for d in EINSUM_DTYPES], _einsum_kernel, STRIDED)
KERNELS.add(OpKind.EINSUM, [(d, d, d) for d in EINSUM_DTYPES], _einsum_kernel, STRIDED)


@KERNELS.kernel(OpKind.DET, [(d, d) for d in dt.FLOAT_DTYPES], STRIDED)
def det(inputs, outputs, layouts, params):
    x = compute(view(inputs[0], layouts[0]))
    out = output(outputs[0], layouts[-1])
    out[...] = np.linalg.det(x) if x.size else np.ones(out.shape)


def _softmax_into(x: np.ndarray, axis: int, out: np.ndarray, log: bool) -> None:
    """Stable (log-)softmax of ``x`` along ``axis`` written into ``out`` with in-place passes
    (float32 scratch for the half types: computed in float32, rounded once)."""
    work = out if out.dtype in (np.float32, np.float64) else np.empty(out.shape, np.float32)
    np.subtract(x, np.max(x, axis=axis, keepdims=True), out=work)
    if log:
        total = np.sum(np.exp(work), axis=axis, keepdims=True)
        work -= np.log(total)
    else:
        np.exp(work, out=work)
        work /= np.sum(work, axis=axis, keepdims=True)
    if work is not out:
        out[...] = work


@KERNELS.kernel(OpKind.SOFTMAX, [(d, d) for d in dt.FLOAT_DTYPES], STRIDED)
@array_kernel
def softmax(source, out, params):
    _softmax_into(compute(source), params.dim, out, log=False)


@KERNELS.kernel(OpKind.LOG_SOFTMAX, [(d, d) for d in dt.FLOAT_DTYPES], STRIDED)
@array_kernel
def log_softmax(source, out, params):
    _softmax_into(compute(source), params.dim, out, log=True)


@KERNELS.kernel(OpKind.LAYER_NORM, [(d,) * 4 for d in dt.FLOAT_DTYPES], STRIDED)
@array_kernel
def layer_norm(x, weight, bias, out, params):
    x, weight, bias = compute(x), compute(weight), compute(bias)
    axes = tuple(range(x.ndim - params.axes, x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    variance = np.mean(np.square(centered), axis=axes, keepdims=True)
    normalized = centered / np.sqrt(variance + np.asarray(params.eps, dtype=x.dtype))
    out[...] = normalized * weight + bias


@KERNELS.kernel(OpKind.RMS_NORM, [(d,) * 3 for d in dt.FLOAT_DTYPES], STRIDED)
@array_kernel
def rms_norm(x, weight, out, params):
    x, weight = compute(x), compute(weight)
    axes = tuple(range(x.ndim - params.axes, x.ndim))
    mean_square = np.mean(np.square(x), axis=axes, keepdims=True)
    scale = 1.0 / np.sqrt(mean_square + np.asarray(params.eps, dtype=x.dtype))
    out[...] = x * scale * weight
