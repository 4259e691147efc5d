"""NumPy kernels for scatter_elements and scatter_nd (replace, or reduce with add, mul, max or
min); scatter_elements along the last dim of dense operands without a reduction (or adding
floats) in C (``scatter_rows.c``)."""

from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import numpy as np

from fuel.backends.cpu.arrays import STRIDED, array_kernel, kernel_list
from fuel.backends.cpu.c_library import address, entry_point
from fuel.backends.cpu.indexing import INDEX_DTYPES, check_indices, rows_failure, rows_source
from fuel.compiler.foreign import ForeignCall
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind

KERNELS = kernel_list()

_REDUCERS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(out: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> None:
    if reduction == "none":
        out[where] = updates
    else:
        _REDUCERS[reduction].at(out, where, updates)


@KERNELS.kernel(OpKind.SCATTER_ELEMENTS,
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


ROWS_SOURCE = Path(__file__).with_name("scatter_rows.c")


def _prepare_scatter_elements(inputs, outputs, layouts, params):
    """The bound launcher of scatter_elements: one ForeignCall of ``scatter_rows.c`` (run in a
    replay's C launch sequence) for a scatter without reduction (or adding floats) along the
    last dim of dense operands whose rows match (a max pool's gradient, a gather's; the data
    may be one element broadcast, a zeros constant) and 4- or 8-byte elements; else the NumPy
    kernel bound."""
    data, index, updates, out = layouts
    function = None
    shape = data.shape
    add = params.reduction == "add" and inputs[0].buffer.dtype.kind == "f"
    item = inputs[0].buffer.itemsize
    if (params.reduction == "none" or add) and len(shape) >= 1 and index.numel \
            and params.dim in (-1, len(shape) - 1) and index.shape == updates.shape \
            and index.shape[:-1] == shape[:-1] and out.shape == shape \
            and (data.is_contiguous() or not any(data.strides)) \
            and all(layout.is_contiguous() for layout in layouts[1:]) and item in (4, 8) \
            and item == inputs[2].buffer.itemsize == inputs[0].dtype.itemsize \
            and not inputs[0].buffer.dtype.hasobject:
        function = entry_point("scatter_rows", lambda: rows_source(ROWS_SOURCE))
    if function is None:
        return functools.partial(scatter_elements, inputs, outputs, layouts, params)
    width = shape[-1]
    status = (ctypes.c_int64 * 1)()
    data_array = (ctypes.c_void_p * 5)(
        *[address(storage, layout) for storage, layout in
          zip((inputs[0], inputs[1], inputs[2], outputs[0]), layouts)], ctypes.addressof(status))
    sizes = (ctypes.c_int64 * 7)(math.prod(shape[:-1]), width, index.shape[-1],
                                 inputs[1].buffer.itemsize, inputs[0].buffer.itemsize,
                                 int(not data.is_contiguous()), int(add))
    return ForeignCall(function, data_array, sizes, None, status,
                       rows_failure(inputs[1], index, width, len(shape) - 1))


scatter_elements.prepare = _prepare_scatter_elements
scatter_elements.revision_source = rows_source(ROWS_SOURCE)


@KERNELS.kernel(OpKind.SCATTER_ND,
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
