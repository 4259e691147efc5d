"""NumPy kernels for max and average pooling (N-d, any padding, ceil mode, max indices); the
indices of 2-d windows without padding or dilation in C (``pool_indices.c``)."""

from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import numpy as np

from fuel.backends.cpu.arrays import HALF_NUMPY, STRIDED, compute, kernel_list, output, view
from fuel.backends.cpu.c_library import address, entry_point
from fuel.backends.cpu.convolution import pad_spatial, windows
from fuel.compiler.foreign import ForeignCall
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind

KERNELS = kernel_list()
SOURCE = Path(__file__).with_name("pool_indices.c")
POOL_DTYPES = dt.FLOAT_DTYPES + dt.INTEGER_DTYPES


def _pool_input(x: np.ndarray, params, out_shape, value):
    """``x`` padded for the windows of ``out_shape`` (ceil mode may need extra end padding)."""
    rank = len(params.kernel)
    sizes = x.shape[x.ndim - rank:]
    ends = []
    for i in range(rank):
        span = (params.kernel[i] - 1) * params.dilations[i] + 1
        needed = (out_shape[i] - 1) * params.strides[i] + span if out_shape[i] else 0
        ends.append(max(params.pads_end[i], needed - sizes[i] - params.pads_begin[i], 0))
    return pad_spatial(x, params.pads_begin, ends, value), ends


def _lowest(dtype: np.dtype):
    if dtype.kind == "f" or dtype in HALF_NUMPY:
        return -np.inf
    return np.iinfo(dtype).min


@KERNELS.kernel(OpKind.MAX_POOL, [(d, d) for d in POOL_DTYPES], STRIDED)
def max_pool(inputs, outputs, layouts, params):
    x = view(inputs[0], layouts[0])
    out = output(outputs[0], layouts[-1])
    rank = len(params.kernel)
    spatial_out = out.shape[out.ndim - rank:]
    if out.size == 0:
        return
    padded, _ = _pool_input(x, params, spatial_out, _lowest(x.dtype))
    patches = windows(padded, params.kernel, params.strides, params.dilations, spatial_out)
    out[...] = patches.max(axis=tuple(range(patches.ndim - rank, patches.ndim)))


@KERNELS.kernel(OpKind.MAX_POOL_INDICES, [(d, dt.int64) for d in POOL_DTYPES], STRIDED)
def max_pool_indices(inputs, outputs, layouts, params):
    """Flat positions of the maxima within each spatial plane (row-major, or column-major
    when ``storage_order`` is 1); padding never wins."""
    x = view(inputs[0], layouts[0])
    out = output(outputs[0], layouts[-1])
    rank = len(params.kernel)
    spatial_in = x.shape[x.ndim - rank:]
    spatial_out = out.shape[out.ndim - rank:]
    if out.size == 0:
        return
    function = _library() if x.dtype == np.float32 and out.flags.c_contiguous and \
        _plain_2d(params, spatial_in, spatial_out) else None
    if function is not None:
        _indices_in_c(function, x, out, params, spatial_in, spatial_out)
        return
    padded, ends = _pool_input(x, params, spatial_out, _lowest(x.dtype))
    positions = np.arange(int(np.prod(spatial_in)), dtype=np.int64).reshape(spatial_in)
    if params.storage_order == 1:
        positions = np.arange(positions.size, dtype=np.int64).reshape(
            tuple(reversed(spatial_in))).transpose()
    positions = pad_spatial(positions, params.pads_begin, ends, -1)
    patches = windows(padded, params.kernel, params.strides, params.dilations, spatial_out)
    flat = patches.reshape(patches.shape[:patches.ndim - rank] + (-1,))
    choice = np.argmax(flat, axis=-1)
    position_windows = windows(positions, params.kernel, params.strides, params.dilations,
                               spatial_out)
    position_windows = position_windows.reshape(spatial_out + (-1,))
    spatial_index = tuple(np.indices(spatial_out))
    out[...] = position_windows[spatial_index + (choice,)]


def _plain_2d(params, spatial_in, spatial_out) -> bool:
    """Whether 2-d windows need no padding or dilation and index row-major, every window
    inside the plane (a training CNN's pooling): pool_indices.c takes them."""
    return (len(params.kernel) == 2 and set(params.dilations) == {1}
            and not any(params.pads_begin) and not any(params.pads_end)
            and params.storage_order == 0
            and all((o - 1) * s + k <= i for o, s, k, i in
                    zip(spatial_out, params.strides, params.kernel, spatial_in)))


def _library():
    """pool_indices.c's entry point (built or fetched from the kernel cache once), or None
    where the machine has no working C compiler."""
    return entry_point("pool_indices", lambda: SOURCE.read_text())


def _prepare_indices(inputs, outputs, layouts, params):
    """The bound launcher of max_pool_indices: one ForeignCall of pool_indices.c (which a
    replay runs in its C launch sequence, no Python per launch) where it takes the launch: a
    float32 input whose leading dims walk as one, a dense output, plain 2-d windows; else the
    kernel above bound."""
    x, out = layouts[0], layouts[-1]
    shape, strides = x.shape, x.strides
    lead = len(shape) - 2
    function = None
    if inputs[0].dtype is dt.float32 and lead >= 0 and out.numel and out.is_contiguous() and \
            _plain_2d(params, shape[lead:], out.shape[lead:]) and all(
                strides[d] == strides[d + 1] * shape[d + 1]
                for d in range(lead - 1) if shape[d] > 1):
        function = _library()
    if function is None:
        return functools.partial(max_pool_indices, inputs, outputs, layouts, params)
    plane_step = strides[lead - 1] if lead else 0
    sizes = (ctypes.c_int64 * 9)(math.prod(shape[:lead]), *shape[lead:], *out.shape[lead:],
                                 *params.kernel, *params.strides)
    data = (ctypes.c_void_p * 2)(address(inputs[0], x), address(outputs[0], out))
    return ForeignCall(function, data, sizes, (ctypes.c_int64 * 3)(plane_step, *strides[lead:]),
                       rebindable=True)


max_pool_indices.prepare = _prepare_indices
max_pool_indices.revision_source = SOURCE.read_text()


def _indices_in_c(function, x: np.ndarray, out: np.ndarray, params, spatial_in,
                  spatial_out) -> None:
    planes = x.shape[:-2]
    flat = x.reshape((-1,) + x.shape[-2:])  # a view where the leading dims merge, else a copy
    steps = [s // x.itemsize for s in flat.strides]
    count = int(np.prod(planes, dtype=np.int64))
    sizes = (ctypes.c_int64 * 9)(count, *spatial_in, *spatial_out, *params.kernel,
                                 *params.strides)
    data = (ctypes.c_void_p * 2)(flat.ctypes.data, out.ctypes.data)
    function(data, sizes, (ctypes.c_int64 * 3)(*steps))


@KERNELS.kernel(OpKind.AVG_POOL, [(d, d) for d in dt.FLOAT_DTYPES], STRIDED)
def avg_pool(inputs, outputs, layouts, params):
    x = compute(view(inputs[0], layouts[0]))
    out = output(outputs[0], layouts[-1])
    rank = len(params.kernel)
    spatial_in = x.shape[x.ndim - rank:]
    spatial_out = out.shape[out.ndim - rank:]
    if out.size == 0:
        return
    padded, ends = _pool_input(x, params, spatial_out, 0)
    axes = tuple(range(padded.ndim, padded.ndim + rank))
    patches = windows(padded, params.kernel, params.strides, params.dilations, spatial_out)
    sums = patches.sum(axis=tuple(a - rank + (patches.ndim - padded.ndim) for a in axes))
    if not params.divide:
        out[...] = sums
        return
    ones = np.ones(spatial_in, dtype=x.dtype)
    if params.count_include_pad:
        ones = pad_spatial(ones, params.pads_begin, params.pads_end, 1)
        extra = [e - p for e, p in zip(ends, params.pads_end)]
        mask = pad_spatial(ones, (0,) * rank, [max(e, 0) for e in extra], 0)
    else:
        mask = pad_spatial(ones, params.pads_begin, ends, 0)
    counts = windows(mask, params.kernel, params.strides, params.dilations, spatial_out)
    counts = counts.sum(axis=tuple(range(rank, 2 * rank)))
    with np.errstate(all="ignore"):
        out[...] = sums / counts
