"""Launches over buffers above the adapter's max-storage-buffer-binding-size are split into
pieces bound through windows. The limit is lowered to a few hundred bytes so small tensors
exercise the split; results against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
from fuel.backends.wgpu.windows import split_launch
from fuel.ir import dtype as dt
from fuel.ir.errors import FuelError
from fuel.ir.layout import Layout

LIMIT = 512  # bytes one binding may see during these tests


@pytest.fixture
def small_bindings(wgpu_device, monkeypatch):
    backend, device, context = wgpu_device
    monkeypatch.setattr(context, "max_binding", LIMIT)
    return backend, device, context


def _assert_windows_cover(pieces, shape, element_bytes: int, buffer, context) -> None:
    """More than one piece; each binds an aligned window of whole words, inside the buffer and
    at most LIMIT bytes, that holds its layout's span; together they cover ``shape``."""
    assert len(pieces) > 1
    seen = np.zeros(shape, bool)
    for piece in pieces:
        (binding,) = piece.bindings
        assert binding.size <= LIMIT and binding.size % 4 == 0
        assert binding.offset % context.alignment == 0
        assert binding.offset + binding.size <= buffer.size
        low, high = piece.layouts[0].span()
        assert low >= 0 and high * element_bytes <= binding.size
        rows, columns = piece.starts
        seen[rows:rows + piece.shape[0], columns:columns + piece.shape[1]] = True
    assert seen.all()


def test_every_piece_binds_at_most_the_limit_and_covers_the_space(small_bindings):
    backend, device, context = small_bindings
    buffer = backend.allocate(device, dt.float32, 1200).buffer
    transposed = Layout((30, 40), (1, 30), 0)
    pieces = split_launch(context, (30, 40), [buffer], [transposed], [4])
    _assert_windows_cover(pieces, (30, 40), 4, buffer, context)


def test_elementwise_matmul_and_reductions_split_over_windows(small_bindings):
    backend, device, context = small_bindings
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 30)).astype(np.float32)
    row = rng.standard_normal(30).astype(np.float32)
    weight = rng.standard_normal((24, 50)).astype(np.float32)  # used transposed, as a Gemm
    a = rng.standard_normal((8, 50)).astype(np.float32)
    on = fuel.tensor(x).to(device)
    np.testing.assert_allclose((on * 2 + fuel.tensor(row).to(device)).numpy(), x * 2 + row,
                               rtol=1e-6)
    np.testing.assert_allclose(on.sum(dim=1).numpy(), x.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(on.transpose(0, 1).sum(dim=0).numpy(), x.sum(1), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(fuel.nn.functional.softmax(on, dim=-1).numpy(),
                               np.exp(x) / np.exp(x).sum(1, keepdims=True), rtol=1e-5)
    got = fuel.tensor(a).to(device) @ fuel.tensor(weight).to(device).transpose(0, 1)
    np.testing.assert_allclose(got.numpy(), a @ weight.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(fuel.full((40, 30), 1.5, device=device).numpy(),
                                  np.full((40, 30), 1.5, np.float32))


def test_a_row_above_the_limit_that_cannot_be_split_is_refused_by_name(small_bindings):
    backend, device, context = small_bindings
    x = fuel.tensor(np.ones((2, 300), np.float32)).to(device)
    with pytest.raises(FuelError, match="max-storage-buffer-binding-size"):
        fuel.nn.functional.softmax(x, dim=-1).numpy()


def test_float16_windows_are_word_aligned_and_cover_the_space(small_bindings):
    backend, device, context = small_bindings
    if dt.float16 not in backend.kernel_dtypes(device):
        pytest.skip("the wgpu adapter lacks shader-f16: no float16 kernels")
    buffer = backend.allocate(device, dt.float16, 31 * 41).buffer  # odd count: padded
    assert buffer.size % 4 == 0 and buffer.size >= 31 * 41 * 2
    transposed = Layout((31, 41), (1, 31), 0)
    pieces = split_launch(context, (31, 41), [buffer], [transposed], [2])
    _assert_windows_cover(pieces, (31, 41), 2, buffer, context)


def test_float16_launches_split_over_windows(small_bindings):
    backend, device, context = small_bindings
    if dt.float16 not in backend.kernel_dtypes(device):
        pytest.skip("the wgpu adapter lacks shader-f16: no float16 kernels")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((41, 31)).astype(np.float16)  # 2542 bytes: five windows at least
    row = rng.standard_normal(31).astype(np.float16)
    a = rng.standard_normal((9, 51)).astype(np.float16)
    weight = rng.standard_normal((23, 51)).astype(np.float16)
    on = fuel.tensor(x).to(device)
    np.testing.assert_array_equal((on[1:] * 2 + fuel.tensor(row).to(device)).numpy(),
                                  x[1:] * np.float16(2) + row)
    np.testing.assert_allclose(on.sum(dim=1).numpy().astype(np.float32),
                               x.astype(np.float32).sum(1), rtol=2e-3, atol=2e-3)
    got = fuel.tensor(a).to(device) @ fuel.tensor(weight).to(device).transpose(0, 1)
    expected = (a.astype(np.float32) @ weight.T.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(got.numpy().astype(np.float32), expected.astype(np.float32),
                               rtol=2e-3, atol=2e-3)
    np.testing.assert_array_equal(fuel.full((41, 31), 1.5, dtype=fuel.float16,
                                            device=device).numpy(),
                                  np.full((41, 31), 1.5, np.float16))
