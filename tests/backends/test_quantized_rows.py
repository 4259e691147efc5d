"""The many-row quantized matmul (``quantized_rows.c``) against the format library's own
integer tiles: the same bits for every row count, thread count and tile remainder, and each
row's output the same bits as that row multiplied alone (the decode tile), so a batched
serving step answers each request as it would be answered alone. The formats' values
themselves are checked against gguf's de-quantizer by the kernel suite's cases."""

import ctypes

import numpy as np
import pytest

import fuel
from fuel.backends.cpu import BACKEND, quantized
from fuel.compiler import toolchain
from fuel.ir import dtype as dt
from fuel.ir.device import CPU
from fuel.ir.layout import Layout
from tests.backends.kernel_cases.quantized import (
    dequantized,
    quantized_blocks,
    rounded_activations,
)

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason="no C compiler")
FORMATS = (dt.q4_0, dt.q4_1, dt.q8_0, dt.iq4_nl, dt.q5_0, dt.q5_1)


def _weight(dtype, n, k, rng):
    gguf = pytest.importorskip("gguf")
    if dtype == dt.iq4_nl:  # gguf has no quantizer for it: random codes, sane scales
        blocks = quantized_blocks(dtype, n, k, rng)
        blocks[1, 0::dtype.block_bytes] = blocks[1, 1::dtype.block_bytes] = 0  # a zero row
        return np.ascontiguousarray(blocks).reshape(-1)
    values = rng.standard_normal((n, k)).astype(np.float32)
    values[:, :32] *= 40.0  # a block of outliers
    values[1, :] = 0.0  # an all-zero weight row
    blocks = gguf.quants.quantize(values, gguf.GGMLQuantizationType(dtype.gguf_type))
    return np.ascontiguousarray(blocks).view(np.uint8).reshape(-1)


def _activations(m, k, rng):
    x = (rng.standard_normal((m, k)) * rng.choice([1e-3, 1.0, 300.0], (m, 1))).astype(np.float32)
    x[0, 32:64] = 0.0  # an all-zero activation block
    x[:, 7] *= 50.0  # an outlier channel
    return x


def _run(function, x, weight, n, threads):
    m, k = x.shape
    out = np.full((m, n), np.nan, np.float32)
    data = (ctypes.c_void_p * 3)(x.ctypes.data, weight.ctypes.data, out.ctypes.data)
    function(data, (ctypes.c_int64 * 5)(quantized.MATMUL, m, n, k, threads), None)
    return out


@pytest.mark.parametrize("dtype", FORMATS, ids=lambda d: d.name)
def test_rows_tile_equals_the_integer_tile_and_each_row_alone(dtype):
    rng = np.random.default_rng(5)
    k = 96
    for n in (13, 203):  # a tile remainder; chunks over threads
        weight = _weight(dtype, n, k, rng)
        for m in (2, 3, 4, 5, 8, 9, 16, 17, 20, 24, 33):
            x = _activations(m, k, rng)
            rows = _run(quantized.rows_library(dtype), x, weight, n, 2)
            tile = _run(quantized.library(dtype), x, weight, n, 1)
            np.testing.assert_array_equal(rows.view(np.uint32), tile.view(np.uint32),
                                          err_msg=f"{dtype.name} m={m} n={n}")
            for i in (0, m - 1):
                alone = _run(quantized.library(dtype), x[i:i + 1].copy(), weight, n, 1)
                np.testing.assert_array_equal(rows[i].view(np.uint32),
                                              alone[0].view(np.uint32))



@pytest.mark.parametrize("dtype", FORMATS, ids=lambda d: d.name)
def test_prompt_shapes_match_gguf_dequantizer(dtype):
    """quantized_matmul at prompt shapes (2-130 activation rows: the rows tiles, the integer
    GEMM from its MIN_ROWS; odd counts of blocks, odd output widths) equals gguf's
    de-quantized weight times the activations rounded by the registry's 16-bit rule, within
    the kernel suite's tolerance for the format (float32 sums of the exact products)."""
    rng = np.random.default_rng(17)
    for n, k in ((37, 96), (203, 544), (9, 1504)):
        blocks = quantized_blocks(dtype, n, k, rng)
        weight = fuel.from_quantized(np.ascontiguousarray(blocks).reshape(-1), dtype, (n, k))
        reference_weight = dequantized(blocks, dtype).astype(np.float64)
        for m in (2, 3, 4, 5, 7, 8, 13, 16, 19, 20, 33, 64, 95, 96, 130):
            x = _activations(m, k, rng)
            out = fuel.quantized_matmul(fuel.from_numpy(x), weight).numpy()
            expected = rounded_activations(x).astype(np.float64) @ reference_weight.T
            scale = float((np.abs(x.astype(np.float64)) @ np.abs(reference_weight).T).max())
            np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6 * scale,
                                       err_msg=f"{dtype.name} m={m} n={n} k={k}")

def test_the_rule_runs_many_rows_on_the_rows_tile_and_offers_both_tiles(monkeypatch):
    """quantized_matmul's variants for 8 rows of q4_1: the rows tile first (the rule's), then
    the one-weight-row tile, each on the rule's thread count and the other; every variant
    gives the same bits."""
    monkeypatch.setenv("FUEL_THREADS", "2")
    rng = np.random.default_rng(3)
    n, k, m = 64, 128, 8
    weight = fuel.from_quantized(_weight(dt.q4_1, n, k, rng), fuel.q4_1, (n, k))
    x = _activations(m, k, rng)
    kernel = quantized.QuantizedKernel(quantized.MATMUL, dt.q4_1)
    layouts = [Layout.contiguous((m, k)), weight._node.layout, Layout.contiguous((m, n))]
    variants = kernel.variants(layouts, None, CPU)
    assert [v.name.split("/")[0] for v in variants] == ["int-rows"] * 2 + ["int-dot"] * 2
    found = []
    for variant in variants:
        out = BACKEND.allocate(CPU, dt.float32, m * n)
        variant.prepare([BACKEND.upload(CPU, x.reshape(-1)), weight._node.buffer], [out],
                        layouts, None)()
        found.append(out.buffer.copy())
    for other in found[1:]:
        np.testing.assert_array_equal(found[0].view(np.uint32), other.view(np.uint32))
    # and the op itself (the rule: the rows tile) gives those bits
    product = fuel.quantized_matmul(fuel.from_numpy(x), weight).numpy().reshape(-1)
    np.testing.assert_array_equal(product.view(np.uint32), found[0].view(np.uint32))



@pytest.mark.parametrize("dtype", (dt.f16_blocks, dt.q4_1), ids=lambda d: d.name)
def test_a_weight_read_from_memory_offers_no_single_thread_candidate(monkeypatch, dtype):
    """From SERIAL_CANDIDATE_BYTES of weight the decode shape has one candidate (all
    threads, the rule's), so nothing is judged; a smaller weight still offers both counts
    and 8 rows of q4_1 both tiles on all threads."""
    monkeypatch.setenv("FUEL_THREADS", "2")
    kernel = quantized.QuantizedKernel(quantized.MATMUL, dtype)
    k = 4096
    big = -(-quantized.SERIAL_CANDIDATE_BYTES // dtype.row_bytes(k))

    def names(m, n):
        layouts = [Layout.contiguous((m, k)), Layout.contiguous((n, k)),
                   Layout.contiguous((m, n))]
        return [v.name for v in kernel.variants(layouts, None, CPU)]

    assert names(1, big) == []
    assert names(1, 256) == ["int-dot/2t", "int-dot/1t"]
    if dtype == dt.q4_1:
        assert names(8, big) == ["int-rows/2t", "int-dot/2t"]

@pytest.mark.parametrize("dtype", FORMATS, ids=lambda d: d.name)
def test_the_avx2_rows_tile_equals_each_row_alone(dtype):
    """The rows library built without AVX-512 (NO_AVX512: the AVX2 tile, as on a machine
    without it) gives each row the bits of that row alone, as the native (wide) build does."""
    from fuel.backends.cpu import quantized_rows

    source = "#define NO_AVX512 1\n" + quantized_rows.source_of(quantized.source_of(dtype))
    function = toolchain.build(source, f"quantized_rows_{dtype.name}_avx2_test").function
    rng = np.random.default_rng(11)
    k, n = 96, 37
    weight = _weight(dtype, n, k, rng)
    for m in (2, 9, 19):
        x = _activations(m, k, rng)
        rows = _run(function, x, weight, n, 2)
        native = _run(quantized.rows_library(dtype), x, weight, n, 1)
        np.testing.assert_array_equal(rows.view(np.uint32), native.view(np.uint32))
        for i in range(m):
            alone = _run(function, x[i:i + 1].copy(), weight, n, 1)
            np.testing.assert_array_equal(rows[i].view(np.uint32), alone[0].view(np.uint32))
