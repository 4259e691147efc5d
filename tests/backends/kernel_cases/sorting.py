"""Kernel-suite cases of argsort (stable, both directions)."""

from __future__ import annotations

import numpy as np

from fuel.ir.ops import OpKind
from fuel.ir.params import SortParams
from tests.backends.kernel_cases.base import Case, compute, operand, rng_for, values

K = OpKind


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


CASES = {
    K.ARGSORT: argsort_cases,
}
