"""The convolution's batched form (conv_patches.c's patch matrices of the whole batch, then
one batched product) against the float64 reference, on the shapes it is the rule's choice
for (a small CNN's convolutions and their gradients: batch-sized channels, kernels as large
as the plane) and on the ones conv_patches.c walks another way (strides, dilations, rows of
more than 16 outputs, windows past the plane); and the rule's choices."""

from __future__ import annotations

import numpy as np
import pytest

from fuel.backends.cpu import convolution_c
from fuel.ir.ops import OpKind
from fuel.ir.params import ConvEpilogueParams, ConvParams
from tests.backends.cpu.test_convolution_c import _run, _siblings, reference
from tests.backends.kernel_cases.convolution import epilogue_reference

CASES = [  # (x shape, w shape, strides, pads begin, pads end, dilations)
    ((32, 1, 8, 8), (16, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # the digits CNN
    ((32, 16, 4, 4), (32, 16, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    ((32, 32, 4, 4), (16, 32, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # its input gradient
    ((1, 32, 8, 8), (16, 32, 8, 8), (1, 1), (1, 1), (1, 1), (1, 1)),  # its weight gradients
    ((16, 32, 4, 4), (32, 32, 4, 4), (1, 1), (1, 1), (1, 1), (1, 1)),
    ((3, 5, 9, 7), (4, 5, 3, 2), (2, 3), (1, 0), (2, 1), (1, 2)),  # strided, dilated
    ((2, 3, 5, 40), (6, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # rows over 16 outputs
    ((2, 4, 6, 6), (5, 4, 2, 2), (1, 1), (0, 3), (2, 0), (2, 1)),  # windows past the plane
    ((2, 3, 1, 9), (2, 3, 1, 4), (1, 1), (0, 2), (0, 1), (1, 1)),  # 1-d as height 1
]


def _params(case) -> ConvParams:
    _, _, strides, begin, end, dilations = case
    return ConvParams(strides, begin, end, dilations, 1)


@pytest.mark.parametrize("case", CASES)
def test_batched_form_matches_the_reference(case):
    rng = np.random.default_rng(sum(case[0]) + sum(case[1]))
    params = _params(case)
    x = rng.standard_normal(case[0]).astype(np.float32)
    w = rng.standard_normal(case[1]).astype(np.float32)
    expected = reference(x, w, params)
    entry = next(e for e in _siblings(OpKind.CONV, 2) if e.kernel.form == "batched")
    geometry = convolution_c.Geometry.of(x.shape, w.shape, expected.shape, params)
    assert convolution_c.accepts("batched", geometry)
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(_run(entry, [x, w], expected.shape, params), expected,
                               rtol=1e-4, atol=1e-4 * scale)
    # The fused convolution: the epilogue after the product.
    bias = rng.standard_normal(w.shape[0]).astype(np.float32)
    fused = ConvEpilogueParams(params, "relu", 0.0, 0.0, False)
    want = epilogue_reference(expected, fused, bias.astype(np.float64), None, None)
    sibling = next(e for e in _siblings(OpKind.CONV_FUSED, 3) if e.kernel.form == "batched")
    np.testing.assert_allclose(_run(sibling, [x, w, bias], expected.shape, fused), want,
                               rtol=1e-4, atol=1e-4 * scale)


def test_the_rule_picks_batched_for_small_planes():
    for case in CASES[:5]:  # the digits CNN's convolutions and gradients
        params = _params(case)
        out = reference(np.zeros(case[0]), np.zeros(case[1]), params).shape
        geometry = convolution_c.Geometry.of(case[0], case[1], out, params)
        assert convolution_c.choose_form(geometry) == "batched", case
    # One image on a 7x7 plane (an ImageNet model's last stage), a large launch, a grouped
    # one: not batched.
    last_stage = convolution_c.Geometry(1, 256, 14, 14, 512, 1, 1, 7, 7, 2, 2, 1, 1, 0, 0, 1)
    large = convolution_c.Geometry(8, 512, 7, 7, 512, 3, 3, 7, 7, 1, 1, 1, 1, 1, 1, 1)
    grouped = convolution_c.Geometry(4, 32, 4, 4, 32, 3, 3, 4, 4, 1, 1, 1, 1, 1, 1, 4)
    for geometry in (last_stage, large, grouped):
        assert convolution_c.choose_form(geometry) != "batched", geometry
