"""Kernel-suite cases of max pooling (values and indices) and average pooling."""

from __future__ import annotations

from fuel.ir.ops import OpKind
from fuel.ir.params import PoolParams
from tests.backends.kernel_cases import references as naive
from tests.backends.kernel_cases.base import Case, compute, operand, rng_for, tolerance, values

K = OpKind


POOL_PLANS = [  # shape, kind, params
    ((2, 3, 7, 6), "dense", PoolParams((3, 2), (2, 2), (1, 0), (1, 1), (1, 1), True, True)),
    ((1, 2, 9), "stepped", PoolParams((3,), (2,), (0,), (2,), (2,), False, False)),
    ((2, 5, 5), "transposed", PoolParams((2, 3), (1, 2), (1, 1), (0, 1), (1, 1), True,
                                         False, True, 1)),
    ((1, 1, 4, 4, 4), "dense", PoolParams((2, 2, 2), (2, 2, 2), (0, 0, 0), (0, 0, 0),
                                          (1, 1, 1))),
    # Windows that tile the plane (the tiled fast path): whole, and cropped odd sizes of a
    # strided input with unequal window sides.
    ((2, 3, 8, 8), "dense", PoolParams((2, 2), (2, 2), (0, 0), (0, 0), (1, 1))),
    ((2, 3, 7, 11), "transposed", PoolParams((2, 3), (2, 3), (0, 0), (0, 0), (1, 1))),
    # 8-bit C forms (qlinear_pool.c): runs of one wide row at strides 1 and 2 (ceil mode past
    # the end), whole narrow rows per register, a 5x5 window, dilations, 1-d
    ((1, 3, 9, 70), "dense", PoolParams((3, 3), (1, 1), (1, 1), (1, 1), (1, 1))),
    ((2, 2, 11, 75), "dense", PoolParams((3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True)),
    ((1, 4, 7, 7), "dense", PoolParams((3, 3), (2, 2), (0, 0), (0, 0), (1, 1), True)),
    ((1, 2, 13, 13), "dense", PoolParams((5, 5), (1, 1), (2, 2), (2, 2), (1, 1))),
    ((1, 2, 12, 20), "dense", PoolParams((2, 3), (1, 2), (0, 1), (1, 0), (2, 1))),
    ((2, 3, 40), "dense", PoolParams((3,), (2,), (1,), (1,), (1,))),
]


def pool_cases(op):
    kind = {K.MAX_POOL: "max", K.MAX_POOL_INDICES: "indices", K.AVG_POOL: "avg"}[op]

    def generate(dtypes):
        d = dtypes[0]
        rng = rng_for(op, dtypes)
        rtol, atol = tolerance(d, loose=True)
        cases = []
        for i, (shape, layout, params) in enumerate(POOL_PLANS):
            if kind == "avg" and i == 1:
                params = PoolParams(params.kernel, params.strides, params.pads_begin,
                                    params.pads_end, params.dilations, divide=False)
            data = values(d, shape, rng, -60, 60) if d.is_integer else values(d, shape, rng)
            if kind == "indices":  # distinct values: the position of the maximum is unique
                data = rng.permutation(data.size).reshape(shape).astype(d.numpy) \
                    if d.itemsize > 1 or data.size < 120 else data
            cases.append(Case(params, [operand(data, layout)], lambda a, p: naive.pool(
                compute(a[0]), p, kind).astype(dtypes[-1].numpy), f"{op.value}#{i}", rtol,
                atol))
        return cases

    return generate


CASES = {
    **{op: pool_cases(op) for op in (K.MAX_POOL, K.MAX_POOL_INDICES, K.AVG_POOL)},
}
