"""OpenCL's block-quantized kernels beyond the kernel suite's small cases: views of quantized
weights (rows of whole blocks) against gguf's de-quantizer, a misaligned view refused by name,
quantized_matmul over k longer than one staged chunk at the decode and prompt shapes against
gguf + the registry's activation rounding + a float64 matmul and against the CPU kernel, an
out-of-range embedding id, and the kernels' names in explain and ``fuel kernels``."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
from fuel.backends.opencl.quantized_source import CHUNK
from fuel.ir import dtype as dt
from fuel.ir.errors import IndexOutOfRange, KernelError
from fuel.ir.ops import ACTIVATION_ROUNDED_FORMATS
from tests.backends.kernel_cases.quantized import (
    dequantized,
    quantized_blocks,
    rounded_activations,
)

pytest.importorskip("gguf")


def _weight(dtype, rows: int, k: int, seed: int, device):
    blocks = quantized_blocks(dtype, rows, k, np.random.default_rng(seed))
    return blocks, fuel.from_quantized(blocks.reshape(-1), dtype, (rows, k), device=device)


@pytest.mark.parametrize("dtype", [dt.q4_1, dt.q6_k], ids=lambda d: d.name)
def test_dequantize_views_of_whole_blocks(opencl, dtype):
    _, device = opencl
    k = 3 * dtype.block_size
    blocks, weight = _weight(dtype, 7, k, 1, device)
    values = dequantized(blocks, dtype)
    np.testing.assert_array_equal(fuel.dequantize(weight).numpy(), values)
    np.testing.assert_array_equal(fuel.dequantize(weight[2:6]).numpy(), values[2:6])
    columns = slice(dtype.block_size, 3 * dtype.block_size)  # whole blocks of every row
    np.testing.assert_array_equal(fuel.dequantize(weight[1:5, columns]).numpy(),
                                  values[1:5, columns])


def test_every_kind_of_float16_scale_reads_exactly(opencl):
    """The kernels read float16 scales in integer steps: zeros, subnormals, the largest
    normal, infinities and NaN give gguf's values bit for bit (NaN where it has NaN)."""
    _, device = opencl
    blocks, _ = _weight(dt.q4_1, 2, 5 * 32, 7, None)
    scales = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
                       0x7E00], np.uint16)
    for place, offset in enumerate((0, 2)):  # d, then m, of every block
        blocks.reshape(10, 20)[:, offset:offset + 2] = np.roll(scales, place).view(
            np.uint8).reshape(10, 2)
    weight = fuel.from_quantized(blocks.reshape(-1), dt.q4_1, (2, 160), device=device)
    with np.errstate(invalid="ignore"):
        expected = dequantized(blocks, dt.q4_1)
    np.testing.assert_array_equal(fuel.dequantize(weight).numpy(), expected)


def test_a_view_inside_a_block_is_refused_by_name(opencl):
    _, device = opencl
    _, weight = _weight(dt.q8_0, 4, 64, 2, device)
    with pytest.raises(KernelError, match=r"dequantize q8_0.*offset 16\) is not rows of whole "
                                          r"32-value blocks"):
        fuel.dequantize(weight[:, 16:48]).numpy()


@pytest.mark.parametrize("dtype", [dt.q4_0, dt.q4_1, dt.q8_0, dt.q4_k],
                         ids=lambda d: d.name)
@pytest.mark.parametrize("rows", [1, 37], ids=["decode", "prompt"])
def test_quantized_matmul_over_several_chunks(opencl, dtype, rows):
    """k spans two staged chunks (the second partial), n is not a multiple of the work-group,
    rows not a multiple of the rows per work-item. Within float32 summation error of the
    float64 product of the same rounded activations and de-quantized weights (rtol 1e-5,
    atol 1e-6 of sum |x| |w|), as the CPU kernel."""
    _, device = opencl
    k = CHUNK + (256 if dtype.block_size == 256 else 96)
    n = 70
    blocks, weight = _weight(dtype, n, k, 3, device)
    x = np.random.default_rng(4).normal(0.0, 1.0, (rows, k)).astype(np.float32)
    got = fuel.quantized_matmul(fuel.tensor(x, device=device), weight).numpy()
    values = dequantized(blocks, dtype).astype(np.float64)
    used = rounded_activations(x) if dtype in ACTIVATION_ROUNDED_FORMATS else x
    expected = used.astype(np.float64) @ values.T
    atol = 1e-6 * float((np.abs(x.astype(np.float64)) @ np.abs(values).T).max())
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=atol)
    _, on_cpu = _weight(dtype, n, k, 3, "cpu")
    cpu = fuel.quantized_matmul(fuel.tensor(x), on_cpu).numpy()
    np.testing.assert_allclose(got, cpu, rtol=1e-5, atol=atol)


def test_embedding_id_out_of_range_raises(opencl):
    _, device = opencl
    _, table = _weight(dt.q8_0, 5, 64, 5, device)
    ids = fuel.tensor(np.array([1, 5], np.int64), device=device)
    with pytest.raises(IndexOutOfRange, match="quantized_embedding: index 5"):
        fuel.quantized_embedding(table, ids).numpy()


def test_quantized_kernels_show_in_explain_and_the_kernel_list(opencl, capsys):
    from fuel.cli import main

    _, device = opencl
    _, weight = _weight(dt.q4_1, 8, 64, 6, device)
    report = str(fuel.quantized_matmul(fuel.ones(2, 64, device=device), weight).explain())
    assert "quantized_matmul" in report and "opencl #" in report
    assert "decomposed" not in report
    assert main(["kernels", "--op", "dequantize"]) == 0
    listed = capsys.readouterr().out
    assert "opencl" in listed and "q6_k" in listed
