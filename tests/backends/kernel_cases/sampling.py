"""Kernel-suite cases of grid sampling (every mode and padding)."""

from __future__ import annotations

from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind
from fuel.ir.params import GridSampleParams
from tests.backends.kernel_cases import references as naive
from tests.backends.kernel_cases.base import Case, compute, operand, rng_for, tolerance, values

K = OpKind


def grid_sample_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("grid_sample", dtypes)
    rtol, atol = tolerance(d, loose=True)
    if d in (dt.float16, dt.bfloat16):
        rtol, atol = rtol * 4, atol * 8
    plans = [("linear", "zeros", False), ("nearest", "border", True),
             ("cubic", "reflection", False), ("linear", "reflection", True),
             ("cubic", "zeros", True)]
    cases = []
    for i, (mode, padding, align) in enumerate(plans):
        x = values(d, (1, 2, 4, 5), rng)
        grid = values(d, (1, 3, 2, 2), rng, -1.3, 1.3)
        cases.append(Case(GridSampleParams(mode, padding, align),
                          [operand(x, "transposed" if i % 2 else "dense"), operand(grid)],
                          lambda a, p: naive.grid_sample_2d(
                              compute(a[0]), compute(a[1]), p.mode, p.padding_mode,
                              p.align_corners).astype(d.numpy), f"grid_sample#{i}", rtol, atol))
    return cases


CASES = {
    K.GRID_SAMPLE: grid_sample_cases,
}
