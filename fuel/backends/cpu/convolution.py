"""NumPy kernels for convolution and transposed convolution (N-d, any padding), and the
window views pooling shares."""

from __future__ import annotations

import itertools

import numpy as np

from fuel.backends.cpu.arrays import HALF_NUMPY, STRIDED, compute, kernel_list, output, view
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind

KERNELS = kernel_list()
CONV_DTYPES = dt.FLOAT_DTYPES + (dt.int32, dt.int64)


def windows(x: np.ndarray, kernel, strides, dilations, counts=None) -> np.ndarray:
    """A view of shape ``x.shape[:lead] + out + kernel`` over the trailing ``len(kernel)``
    dims of an already padded ``x`` (no copy); ``counts`` trims each output dim."""
    rank = len(kernel)
    lead = x.ndim - rank
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    axes = tuple(range(lead, x.ndim))
    view_ = np.lib.stride_tricks.sliding_window_view(x, spans, axis=axes)
    index = (slice(None),) * lead
    index += tuple(slice(None, None if counts is None else (c - 1) * s + 1, s)
                   for c, s in zip(counts or [None] * rank, strides))
    index += tuple(slice(None, None, d) for d in dilations)
    return view_[index]


def pad_spatial(x: np.ndarray, begin, end, value) -> np.ndarray:
    """Pad the trailing dims (``begin``/``end`` per dim, non-negative) with ``value``."""
    rank = len(begin)
    widths = [(0, 0)] * (x.ndim - rank) + [(b, e) for b, e in zip(begin, end)]
    if not any(b or e for b, e in widths):
        return x
    return np.pad(x, widths, mode="constant", constant_values=value)


def _accumulated(array: np.ndarray) -> np.ndarray:
    """Floats are accumulated in float64; integers as they are."""
    floating = array.dtype.kind == "f" or array.dtype in HALF_NUMPY
    return array.astype(np.float64) if floating else array


def _letters(count: int, start: int = 0) -> str:
    return "".join(chr(ord("p") + start + i) for i in range(count))


@KERNELS.kernel(OpKind.CONV, [(d, d, d) for d in CONV_DTYPES], STRIDED)
def conv(inputs, outputs, layouts, params):
    """float32 accumulates in float64: output channels with equal weights then round to equal
    values whatever order the BLAS kernel sums each column in."""
    out = output(outputs[0], layouts[-1])
    out[...] = convolve(_accumulated(view(inputs[0], layouts[0])),
                        _accumulated(view(inputs[1], layouts[1])), params, out.shape[2:])


def convolve(x: np.ndarray, w: np.ndarray, params, counts) -> np.ndarray:
    """The N-d convolution of ``x`` (N, C, ...) by ``w`` (M, C/groups, ...) to ``counts``
    output positions a spatial dim, in ``x``'s dtype: (N, M, *counts)."""
    rank = x.ndim - 2
    padded = pad_spatial(x, params.pads_begin, params.pads_end, 0)
    patches = windows(padded, w.shape[2:], params.strides, params.dilations, list(counts))
    groups = params.groups
    n, channels = x.shape[:2]
    if groups == 1:
        result = np.tensordot(patches, w, axes=([1] + list(range(2 + rank, 2 + 2 * rank)),
                                                list(range(1, 2 + rank))))
        return np.moveaxis(result, -1, 1)
    spatial = _letters(rank)
    window = _letters(rank, rank)
    grouped = patches.reshape((n, groups, channels // groups) + patches.shape[2:])
    weight = w.reshape((groups, w.shape[0] // groups) + w.shape[1:])
    result = np.einsum(f"ngc{spatial}{window},gmc{window}->ngm{spatial}", grouped, weight,
                       optimize=True)
    return result.reshape((n, w.shape[0]) + tuple(counts))


@KERNELS.kernel(OpKind.CONV_TRANSPOSE, [(d, d, d) for d in CONV_DTYPES], STRIDED)
def conv_transpose(inputs, outputs, layouts, params):
    x = compute(view(inputs[0], layouts[0]))
    w = compute(view(inputs[1], layouts[1]))
    out = output(outputs[0], layouts[-1])
    rank = x.ndim - 2
    groups = params.groups
    n, channels = x.shape[:2]
    per_group_in = channels // groups
    per_group_out = w.shape[1]
    kernel = w.shape[2:]
    sizes = x.shape[2:]
    padding = params.output_padding or (0,) * rank
    full_shape = tuple(
        params.strides[i] * (sizes[i] - 1) + (kernel[i] - 1) * params.dilations[i] + 1
        + padding[i] for i in range(rank))
    full = np.zeros((n, per_group_out * groups) + full_shape, dtype=np.result_type(x, w))
    for position in itertools.product(*(range(k) for k in kernel)):
        tap = w[(slice(None), slice(None)) + position]  # (C, M/groups)
        region = tuple(
            slice(p * d, p * d + s * (size - 1) + 1, s)
            for p, d, s, size in zip(position, params.dilations, params.strides, sizes))
        for g in range(groups):
            source = x[:, g * per_group_in:(g + 1) * per_group_in]
            weights = tap[g * per_group_in:(g + 1) * per_group_in]
            contribution = np.moveaxis(np.tensordot(source, weights, axes=([1], [0])), -1, 1)
            target = (slice(None), slice(g * per_group_out, (g + 1) * per_group_out)) + region
            full[target] += contribution
    crop = tuple(slice(b, b + size) for b, size in zip(params.pads_begin, out.shape[2:]))
    out[...] = full[(slice(None), slice(None)) + crop]
