"""QLINEAR_CONV as built on machines with less than this one: without AVX-512 (VNNI,
VBMI and the zmm tiles undefined: the AVX2 int16-pair panels, the float depthwise forms) and
without AVX2 (the portable C loops), every form against the NumPy reference. The kernel
suite and test_qlinear_team.py check the native build."""

import ctypes

import numpy as np
import pytest

from fuel.backends.cpu import qlinear_conv
from fuel.compiler import toolchain
from fuel.ir.params import ConvParams, QLinearConvParams

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason="no C compiler")

# Predefined target macros undefined after the source's includes (the intrinsics headers'
# target pragmas restore them): its #if blocks then take the paths a machine without those
# instructions compiles.
BUILDS = {
    "avx2": ("__AVX512F__", "__AVX512VNNI__", "__AVX512VL__", "__AVX512VBMI__",
             "__AVX512BW__"),
    "portable": ("__AVX512F__", "__AVX512VNNI__", "__AVX512VL__", "__AVX512VBMI__",
                 "__AVX512BW__", "__AVX2__", "__FMA__"),
}

INCLUDES = "#include <immintrin.h>\n#endif\n"

# (N, C, H, W, M, K, stride, pad, groups, x signed): patch matrix, pointwise as stored,
# deep pointwise (panels past 256 k), channels of 32+ (the channels-last form's shapes),
# depthwise (narrow, wide, strided), a whole-plane pooling, grouped.
SHAPES = [
    (1, 5, 9, 8, 7, 3, 1, 1, 1, False),
    (2, 24, 6, 7, 20, 1, 1, 0, 1, True),
    (1, 300, 5, 5, 13, 1, 1, 0, 1, False),
    (1, 40, 7, 9, 18, 3, 2, 1, 1, True),
    (1, 6, 8, 9, 6, 3, 1, 1, 6, False),
    (2, 4, 9, 37, 4, 3, 2, 1, 4, True),
    (1, 5, 6, 6, 5, 6, 1, 0, 5, False),
    (1, 8, 7, 7, 12, 3, 1, 1, 2, False),
]


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_build_matches_the_reference(build):
    source = qlinear_conv.source()
    includes = source.index(INCLUDES) + len(INCLUDES)
    undefine = "".join(f"#undef {name}\n" for name in BUILDS[build])
    function = toolchain.build(source[:includes] + undefine + source[includes:],
                               f"qlinear_conv_{build}").function
    for n, c, h, width, m, k, stride, pad, groups, signed in SHAPES:
        rng = np.random.default_rng(n + c + h + width + m)
        dtype = np.int8 if signed else np.uint8
        low, high = (-128, 128) if signed else (0, 256)
        x = rng.integers(low, high, (n, c, h, width)).astype(dtype)
        w = rng.integers(-128, 128, (m, c // groups, k, k)).astype(np.int8)
        bias = rng.integers(-3000, 3000, m).astype(np.int32)
        multiplier = (rng.random(m) * 2e-4 + 1e-4).astype(np.float32)
        size = [(extent + 2 * pad - k) // stride + 1 for extent in (h, width)]
        x_zero = -5 if signed else 7
        params = QLinearConvParams(ConvParams((stride, stride), (pad, pad), (pad, pad), (1, 1),
                                              groups), x_zero, 3, False)
        expected = qlinear_conv.reference(x, w, bias, multiplier, params)
        out = np.zeros((n, m, *size), np.uint8)
        row = (1, n, c, h, width, m, k, k, size[0], size[1], stride, stride, 1, 1, pad, pad,
               groups, x_zero, 3, int(signed), 0, 0)
        data = (ctypes.c_void_p * 6)(x.ctypes.data, w.ctypes.data, bias.ctypes.data,
                                     multiplier.ctypes.data, out.ctypes.data, None)
        function(data, (ctypes.c_int64 * 22)(*row), None)
        np.testing.assert_array_equal(out, expected, err_msg=f"{build} {x.shape} {w.shape}")
