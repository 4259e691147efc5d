"""NumPy kernels for scatter_elements and scatter_nd (replace, or reduce with add, mul, max or
min)."""

from __future__ import annotations

import numpy as np

from fuel.backends.cpu.arrays import STRIDED, array_kernel, kernel_list
from fuel.backends.cpu.indexing import INDEX_DTYPES, check_indices
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
