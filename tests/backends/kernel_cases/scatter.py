"""Kernel-suite cases of scatter_elements and scatter_nd (every reduction)."""

from __future__ import annotations

import numpy as np

from fuel.ir.ops import OpKind
from fuel.ir.params import ScatterParams
from tests.backends.kernel_cases import references as naive
from tests.backends.kernel_cases.base import Case, operand, rng_for, values

K = OpKind


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


CASES = {
    K.SCATTER_ELEMENTS: scatter_elements_cases,
    K.SCATTER_ND: scatter_nd_cases,
}
