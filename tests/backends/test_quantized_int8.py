"""quantized_matmul_int8 (the serving precision) on the CPU: quantized_int8.c against a NumPy
reference of the registry's 8-bit rule over random shapes for each format; each output the
same bits whatever rows share its launch (rows tile against the decode tile of that row
alone), on every thread count and in every build (AVX-512 VNNI, AVX2 without it, portable C:
one float order per output); the op itself (kernel formats and the decomposition of the
others); the serving engine's paged step at int8 answering each row as alone."""

import ctypes

import numpy as np
import pytest

import fuel
from fuel.backends.cpu import quantized_int8
from fuel.compiler import toolchain
from fuel.ir import dtype as dt
from tests.backends.kernel_cases.quantized import rounded_activations

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason="no C compiler")
FORMATS = quantized_int8.FORMATS


def _weight(dtype, n, k, rng):
    gguf = pytest.importorskip("gguf")
    values = rng.standard_normal((n, k)).astype(np.float32)
    values[:, :32] *= 40.0  # a block of outliers
    values[min(1, n - 1), :] = 0.0  # an all-zero weight row
    kind = gguf.GGMLQuantizationType(dtype.gguf_type)
    blocks = gguf.quants.quantize(values, kind)
    return (np.ascontiguousarray(blocks).view(np.uint8).reshape(-1),
            gguf.quants.dequantize(blocks, kind).reshape(n, k).astype(np.float64))


def _activations(m, k, rng):
    x = (rng.standard_normal((m, k)) * rng.choice([1e-3, 1.0, 300.0], (m, 1))).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero activation block
    x[:, 7] *= 50.0  # an outlier channel
    return x


def _run(function, x, weight, n, threads):
    m, k = x.shape
    out = np.full((m, n), np.nan, np.float32)
    data = (ctypes.c_void_p * 3)(x.ctypes.data, weight.ctypes.data, out.ctypes.data)
    function(data, (ctypes.c_int64 * 4)(m, n, k, threads), None)
    return out


def _reference(x, values):
    return rounded_activations(x, 127.0).astype(np.float64) @ values.T


@pytest.mark.parametrize("dtype", FORMATS, ids=lambda d: d.name)
def test_kernel_matches_the_8bit_rule_and_each_row_alone(dtype):
    rng = np.random.default_rng(3)
    function = quantized_int8.library(dtype)
    for n, blocks in ((13, 3), (37, 1), (203, 18)):
        k = 32 * blocks
        weight, values = _weight(dtype, n, k, rng)
        for m in (1, 2, 7, 8, 9, 33):
            x = _activations(m, k, rng)
            out = _run(function, x, weight, n, 2)
            expected = _reference(x, values)
            scale = (np.abs(rounded_activations(x, 127.0)).astype(np.float64)
                     @ np.abs(values).T).max()
            np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6 * scale,
                                       err_msg=f"{dtype.name} m={m} n={n} k={k}")
            one_thread = _run(function, x, weight, n, 1)
            np.testing.assert_array_equal(out.view(np.uint32), one_thread.view(np.uint32))
            for i in {0, m // 2, m - 1}:
                alone = _run(function, x[i:i + 1].copy(), weight, n, 1)
                np.testing.assert_array_equal(out[i].view(np.uint32), alone[0].view(np.uint32),
                                              err_msg=f"{dtype.name} row {i} of {m}")


@pytest.mark.parametrize("build", ["NO_AVX512", "PORTABLE"])
@pytest.mark.parametrize("dtype", FORMATS, ids=lambda d: d.name)
def test_fallback_builds_give_the_same_bits(dtype, build):
    """Built without AVX-512 (the AVX2 maddubs tiles) or without intrinsics (portable C), as
    on machines without them: the native build's bits, row by row and alone."""
    source = quantized_int8.source_of(dtype, f"#define {build} 1\n")
    function = toolchain.build(source, f"quantized_int8_{dtype.name}_{build.lower()}_test",
                               toolchain.openmp_flags()).function
    rng = np.random.default_rng(17)
    k, n = 96, 29
    weight, _ = _weight(dtype, n, k, rng)
    for m in (1, 3, 9, 17):
        x = _activations(m, k, rng)
        built = _run(function, x, weight, n, 2)
        native = _run(quantized_int8.library(dtype), x, weight, n, 1)
        np.testing.assert_array_equal(built.view(np.uint32), native.view(np.uint32),
                                      err_msg=f"{build} {dtype.name} m={m}")
        alone = _run(function, x[m - 1:].copy(), weight, n, 1)
        np.testing.assert_array_equal(built[m - 1].view(np.uint32), alone[0].view(np.uint32))


@pytest.mark.parametrize("dtype", (dt.q4_1, dt.q4_k, dt.f16_blocks), ids=lambda d: d.name)
def test_op_follows_the_rule_on_kernel_and_decomposed_formats(dtype):
    """fuel.quantized_matmul_int8: q4_1 on the C kernel, q4_k by the decomposition
    (round_int8_blocks, dequantize, matmul), f16 blocks multiplied unrounded; and
    round_int8_blocks exactly as the NumPy rule."""
    pytest.importorskip("gguf")
    from tests.backends.kernel_cases.quantized import dequantized, quantized_blocks

    rng = np.random.default_rng(23)
    n, k = 11, 2 * dtype.block_size
    blocks = quantized_blocks(dtype, n, k, rng)
    values = dequantized(blocks, dtype).astype(np.float64)
    x = rng.standard_normal((5, k)).astype(np.float32)
    weight = fuel.from_quantized(np.ascontiguousarray(blocks).reshape(-1), dtype, (n, k))
    got = fuel.quantized_matmul_int8(fuel.from_numpy(x), weight).numpy()
    rounded = x if dtype == dt.f16_blocks else rounded_activations(x, 127.0)
    np.testing.assert_allclose(got, rounded.astype(np.float64) @ values.T, rtol=1e-5,
                               atol=1e-5 * np.abs(values).max() * np.abs(x).max())
    np.testing.assert_array_equal(fuel.round_int8_blocks(fuel.from_numpy(x)).numpy(),
                                  rounded_activations(x, 127.0))


def test_int8_differs_from_int16_on_the_same_weight():
    """The two precisions are distinct rules (8-bit codes are coarser)."""
    rng = np.random.default_rng(29)
    weight, values = _weight(dt.q8_0, 16, 64, rng)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    w = fuel.from_quantized(weight, dt.q8_0, (16, 64))
    int8 = fuel.quantized_matmul_int8(fuel.from_numpy(x), w).numpy()
    int16 = fuel.quantized_matmul(fuel.from_numpy(x), w).numpy()
    assert not np.array_equal(int8, int16)
    np.testing.assert_allclose(int8, _reference(x, values), rtol=1e-5, atol=1e-4)
