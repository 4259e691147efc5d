"""NumPy kernel for argsort (stable, ascending or descending)."""

from __future__ import annotations

import numpy as np

from fuel.backends.cpu.arrays import STRIDED, compute, kernel_list, output, view
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind

KERNELS = kernel_list()
SORTABLE = (dt.bool_,) + dt.NUMERIC_DTYPES


@KERNELS.kernel(OpKind.ARGSORT, [(d, dt.int64) for d in SORTABLE], STRIDED)
def argsort(inputs, outputs, layouts, params):
    """Stable: equal values keep ascending positions in both directions."""
    x = compute(view(inputs[0], layouts[0]))
    if params.descending:
        key = -x if x.dtype.kind == "f" else np.invert(x)
    else:
        key = x
    output(outputs[0], layouts[-1])[...] = np.argsort(key, axis=params.dim, kind="stable")
