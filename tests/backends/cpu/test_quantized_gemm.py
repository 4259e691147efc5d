"""The prompt-shape integer GEMM (``quantized_gemm.c``), native build (AVX-512 with VNNI where
the machine has it) and its AVX2 tile (NO_AVX512), against gguf's de-quantizer times a float64
matmul of the rounded activations, for every block format: row counts at and past its
threshold with a tile remainder, weight rows not a multiple of the tile, several threads,
outlier rows and an all-zero activation block; the float-weight formats hand the matmul back to
their library (probe answers 0) and still compute it. The rule sends prompt shapes to it."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from fuel.backends.cpu import quantized, quantized_gemm
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
    if build == "native":
        return quantized.gemm_library(dtype)
    source = "#define NO_AVX512 1\n" + quantized_gemm.source_of(quantized.source_of(dtype))
    return toolchain.build(source, f"quantized_gemm_{dtype.name}_avx2_test",
                           toolchain.openmp_flags()).function


def _has_avx2() -> bool:
    try:
        with open("/proc/cpuinfo") as info:
            return any(line.startswith("flags") and " avx2 " in line + " " for line in info)
    except OSError:
        return False


def _call(function, arrays, sizes) -> None:
    data = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    function(data, (ctypes.c_int64 * len(sizes))(*sizes), None)


# the AVX2 build on one format of each unpacking path (32-value blocks with and without
# offsets, K formats with one scale per chunk and per half, with minimums, iq4's table): each
# build compiles a whole format library
AVX2_FORMATS = (dt.q4_0, dt.q4_1, dt.q8_0, dt.q4_k, dt.q6_k, dt.q2_k, dt.iq4_nl)
CASES = [(dtype, "native") for dtype in dt.QUANTIZED_DTYPES] + \
    [(dtype, "avx2") for dtype in AVX2_FORMATS]


@pytest.mark.parametrize(("dtype", "build"), CASES, ids=lambda c: getattr(c, "name", c))
def test_gemm_matches_gguf(dtype, build):
    function = _kernel(dtype, build)
    rng = np.random.default_rng(dtype.gguf_type)
    n, k = 29, 2 * max(dtype.block_size, 64)
    blocks = np.ascontiguousarray(quantized_blocks(dtype, n, k, rng))
    weight = dequantized(blocks, dtype).astype(np.float64)
    probe = np.zeros(1, np.int64)
    _call(function, [probe], (quantized_gemm.PROBE,))
    float_weights = dtype in (dt.f16_blocks, dt.bf16_blocks)
    if float_weights:
        assert probe[0] == 0
    elif _has_avx2():
        assert probe[0] == 1
    for m, threads in ((quantized_gemm.MIN_ROWS, 1), (quantized_gemm.MIN_ROWS + 5, 2),
                       (129, 3)):
        x = rng.normal(0.0, 1.0, (m, k)).astype(np.float32)
        x[1] *= 3000.0
        x[2, 32:64] = 0.0
        out = np.full((m, n), np.nan, np.float32)
        _call(function, [x, blocks, out], (quantized.MATMUL, m, n, k, threads))
        operand = x if float_weights else rounded_activations(x)
        expected = operand.astype(np.float64) @ weight.T
        scale = np.abs(operand).astype(np.float64) @ np.abs(weight).T
        # within float32 rounding of the exact product (relative to the sum of magnitudes)
        assert np.all(np.abs(out - expected) <= 2e-6 * scale + 1e-30), (dtype.name, m)


def test_the_rule_sends_prompt_shapes_to_the_gemm():
    from fuel.compiler import toolchain

    if toolchain.unavailable_reason() is not None:
        pytest.skip("no C compiler")
    assert not quantized.gemm_tile(dt.q4_k, quantized_gemm.MIN_ROWS - 1)
    assert not quantized.gemm_tile(dt.f16_blocks, 128)
    served = quantized.gemm_tile(dt.q4_k, 128)
    probe = np.zeros(1, np.int64)
    _call(quantized.gemm_library(dt.q4_k), [probe], (quantized_gemm.PROBE,))
    assert served == bool(probe[0])
