"""The quantized C kernels on a team of threads (the float convolutions' work pool, handed to
each library when it loads, qlinear_units.h): every QLINEAR_CONV form, the 8-bit max pool,
the table lookup and the binary pass give the same bytes on two threads as on one and as a
NumPy reference. The kernel suite's cases are below the work that wakes a second thread, so
these launches are large enough to split."""

import ctypes

import numpy as np
import pytest

from fuel.backends.cpu import qlinear_conv, qlinear_elementwise, qlinear_pool
from fuel.compiler import toolchain
from fuel.ir.params import ConvParams, QLinearConvParams

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason="no C compiler")

# (N, C, H, W, M, K, stride, pad, groups): the patch-matrix gemm (few channels, a stride-2
# stem), channels last, pointwise as stored, depthwise by quads (narrow and strided planes),
# depthwise rows (a window past the quads' 64 bytes), a whole-plane pooling and grouped.
SHAPES = [
    (1, 16, 30, 31, 40, 3, 1, 1, 1),
    (1, 3, 64, 64, 24, 3, 2, 1, 1),
    (2, 40, 20, 20, 36, 3, 1, 1, 1),
    (1, 64, 24, 24, 80, 1, 1, 0, 1),
    (2, 96, 7, 7, 96, 3, 1, 1, 96),
    (1, 48, 40, 40, 48, 3, 2, 1, 48),
    (1, 32, 24, 120, 32, 3, 4, 1, 32),
    (2, 256, 7, 7, 256, 7, 1, 0, 256),
    (1, 32, 24, 24, 64, 5, 1, 2, 2),
    # deep pointwise: four panels (the last of 1 position) and a pair after four, an odd
    # count of k steps; a strided 1x1 through its patch rows
    (1, 300, 7, 7, 40, 1, 1, 0, 1),
    (2, 260, 9, 9, 13, 1, 1, 0, 1),
    (1, 72, 13, 13, 24, 1, 2, 0, 1),
]


def _launch(function, x, w, bias, multiplier, out_shape, threads, stride, pad, groups):
    out = np.zeros(out_shape, np.uint8)
    n, c, h, width = x.shape
    m, _, k, _ = w.shape
    row = (threads, n, c, h, width, m, k, k, out_shape[2], out_shape[3], stride, stride, 1, 1,
           pad, pad, groups, 7, 3, 0, 0)
    data = (ctypes.c_void_p * 6)(x.ctypes.data, w.ctypes.data, bias.ctypes.data,
                                 multiplier.ctypes.data, out.ctypes.data, None)
    function(data, (ctypes.c_int64 * 22)(*row, 0), None)
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_two_threads_match_one_and_the_reference(shape):
    function = qlinear_conv.library()
    n, c, h, width, m, k, stride, pad, groups = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(0, 256, (n, c, h, width)).astype(np.uint8)
    w = rng.integers(-128, 128, (m, c // groups, k, k)).astype(np.int8)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    multiplier = (rng.random(m) * 2e-4 + 1e-4).astype(np.float32)
    size = [(extent + 2 * pad - k) // stride + 1 for extent in (h, width)]
    out_shape = (n, m, *size)
    params = QLinearConvParams(ConvParams((stride, stride), (pad, pad), (pad, pad), (1, 1),
                                          groups), 7, 3, False)
    expected = qlinear_conv.reference(x, w, bias, multiplier, params)
    one = _launch(function, x, w, bias, multiplier, out_shape, 1, stride, pad, groups)
    two = _launch(function, x, w, bias, multiplier, out_shape, 2, stride, pad, groups)
    np.testing.assert_array_equal(one, expected)
    np.testing.assert_array_equal(two, expected)


@pytest.mark.parametrize("is_signed", [False, True])
def test_max_pool_on_two_threads(is_signed):
    function = qlinear_pool.library()
    rng = np.random.default_rng(5)
    kind = np.int8 if is_signed else np.uint8
    info = np.iinfo(kind)
    x = rng.integers(info.min, info.max + 1, (2, 24, 27, 29)).astype(kind)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=info.min)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    expected = windows[:, :, ::2, ::2].max(axis=(-2, -1))
    results = []
    for threads in (1, 2):
        out = np.zeros(expected.shape, kind)
        row = (threads, 48, 27, 29, *expected.shape[2:], 3, 3, 2, 2, 1, 1, 1, 1, int(is_signed))
        data = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
        function(data, (ctypes.c_int64 * len(row))(*row), None)
        results.append(out)
    np.testing.assert_array_equal(results[0], expected)
    np.testing.assert_array_equal(results[1], expected)


def test_lookup_and_binary_on_two_threads():
    function = qlinear_elementwise.library()
    rng = np.random.default_rng(6)
    x = rng.integers(0, 256, 300_001).astype(np.uint8)
    b = rng.integers(0, 256, 300_001).astype(np.uint8)
    table = rng.integers(0, 256, 256).astype(np.uint8)
    bits = [int(np.float32(v).view(np.uint32)) for v in (0.7, 0.45, -3.25)]
    lookups, sums = [], []
    for threads in (1, 2):
        out = np.zeros_like(x)
        data = (ctypes.c_void_p * 3)(x.ctypes.data, table.ctypes.data, out.ctypes.data)
        function(data, (ctypes.c_int64 * 3)(0, x.size, threads), None)
        lookups.append(out)
        out = np.zeros_like(x)
        data = (ctypes.c_void_p * 3)(x.ctypes.data, b.ctypes.data, out.ctypes.data)
        row = (1, 1, x.size, 0, 1, 0, 1, 0, 3, 5, 7, *bits, threads)
        function(data, (ctypes.c_int64 * len(row))(*row), None)
        sums.append(out)
    np.testing.assert_array_equal(lookups[0], table[x])
    np.testing.assert_array_equal(lookups[1], table[x])
    assert sums[0].std() > 10  # a real spread of values, not a saturated pass
    np.testing.assert_array_equal(sums[1], sums[0])
