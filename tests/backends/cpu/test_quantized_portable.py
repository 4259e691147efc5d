"""The quantized kernels' portable C (built with PORTABLE, as on a machine without AVX2) and
their AVX2 C without AVX-512 (NO_AVX512: no VNNI, no 16-bit permutes; the kernel suite checks
the native build) agree with gguf's de-quantizer times a float64 matmul
of the rounded activations, for every block format, at the decode shape and a short prompt
(four activation rows, a remainder of three), and de-quantizes as gguf does."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from fuel.backends.cpu.quantized import DEQUANTIZE, MATMUL, source_of
from fuel.ir import dtype as dt
from tests.backends.kernel_cases.quantized import (
    dequantized,
    quantized_blocks,
    rounded_activations,
)

pytest.importorskip("gguf")


def _kernel(dtype, build: str):
    from fuel.compiler import toolchain

    if toolchain.unavailable_reason() is not None:
        pytest.skip("no C compiler")
    prefix = {"portable": "#define PORTABLE 1\n", "avx2": "#define NO_AVX512 1\n"}[build]
    return toolchain.build(prefix + source_of(dtype), f"quantized_{dtype.name}_test").function


def _call(function, arrays, sizes) -> None:
    data = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    function(data, (ctypes.c_int64 * len(sizes))(*sizes), None)


@pytest.mark.parametrize("build", ["portable", "avx2"])
@pytest.mark.parametrize("dtype", dt.QUANTIZED_DTYPES, ids=lambda d: d.name)
def test_portable_quantized_kernel_matches_gguf(dtype, build):
    function = _kernel(dtype, build)
    rng = np.random.default_rng(dtype.gguf_type)
    n, k = 9, 2 * max(dtype.block_size, 64)
    blocks = np.ascontiguousarray(quantized_blocks(dtype, n, k, rng))
    weight = dequantized(blocks, dtype).astype(np.float32)
    values = np.empty((n, k), np.float32)
    _call(function, [blocks, values], (DEQUANTIZE, n * k))
    np.testing.assert_allclose(values, weight, rtol=1e-6, atol=0)
    rounds = dtype not in (dt.f16_blocks, dt.bf16_blocks)
    for m in (1, 7):
        x = rng.normal(0.0, 1.0, (m, k)).astype(np.float32)
        out = np.empty((m, n), np.float32)
        _call(function, [x, blocks, out], (MATMUL, m, n, k, 1))
        operand = rounded_activations(x) if rounds else x
        expected = operand.astype(np.float64) @ weight.astype(np.float64).T
        scale = float((np.abs(x) @ np.abs(weight).T).max())
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6 * scale)
