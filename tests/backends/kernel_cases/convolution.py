"""Kernel-suite cases of convolution and transposed convolution (N-d, groups, dilations)."""

from __future__ import annotations

from fuel.ir.ops import OpKind
from fuel.ir.params import ConvParams
from tests.backends.kernel_cases import references as naive
from tests.backends.kernel_cases.base import Case, compute, operand, rng_for, tolerance, values

K = OpKind


def _conv_data(d, shape, rng):
    return values(d, shape, rng, -3, 3) if not d.is_floating else values(d, shape, rng)


CONV_PLANS = [  # input, weight, strides, begin, end, dilations, groups
    ((1, 2, 7), (3, 2, 3), (2,), (1,), (0,), (1,), 1),
    ((2, 4, 6, 5), (6, 2, 3, 2), (1, 2), (1, 0), (2, 1), (2, 1), 2),
    ((1, 2, 4, 3, 3), (2, 2, 2, 2, 2), (1, 1, 2), (0, 1, 0), (1, 0, 1), (1, 1, 1), 1),
]


def conv_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("conv", dtypes)
    rtol, atol = tolerance(d, loose=True)
    cases = []
    for i, (xs, ws, strides, begin, end, dilations, groups) in enumerate(CONV_PLANS):
        params = ConvParams(strides, begin, end, dilations, groups)
        operands = [operand(_conv_data(d, xs, rng), "stepped" if i == 1 else "dense"),
                    operand(_conv_data(d, ws, rng), "transposed" if i == 2 else "dense")]
        cases.append(Case(params, operands, lambda a, p: naive.conv(
            compute(a[0]), compute(a[1]), p.strides, p.pads_begin, p.pads_end, p.dilations,
            p.groups).astype(d.numpy), f"conv#{i}", rtol, atol))
    return cases


def conv_transpose_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("conv_transpose", dtypes)
    rtol, atol = tolerance(d, loose=True)
    plans = [((1, 2, 4), (2, 3, 3), (2,), (1,), (0,), (1,), 1, (1,)),
             ((2, 4, 3, 2), (4, 1, 2, 3), (2, 1), (0, 1), (1, 0), (1, 2), 2, (1, 0))]
    cases = []
    for i, (xs, ws, strides, begin, end, dilations, groups, padding) in enumerate(plans):
        params = ConvParams(strides, begin, end, dilations, groups, padding)
        operands = [operand(_conv_data(d, xs, rng), "flipped" if i else "dense"),
                    operand(_conv_data(d, ws, rng))]
        cases.append(Case(params, operands, lambda a, p: naive.conv_transpose(
            compute(a[0]), compute(a[1]), p.strides, p.pads_begin, p.pads_end, p.dilations,
            p.groups, p.output_padding).astype(d.numpy), f"conv_transpose#{i}", rtol, atol))
    return cases


CASES = {
    K.CONV: conv_cases,
    K.CONV_TRANSPOSE: conv_transpose_cases,
}
