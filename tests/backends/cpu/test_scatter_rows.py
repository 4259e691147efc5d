"""scatter_rows.c (scatter_elements along the last dim without a reduction or adding floats,
the launcher a plan binds) against the NumPy kernel it stands in for: 4- and 8-byte
elements, int32 and int64 positions, negative positions, duplicates (the last wins, or
summed), data written in place or broadcast from one element, and an out-of-range position
refused before anything is written."""

from __future__ import annotations

import numpy as np
import pytest

from fuel.backends.cpu import BACKEND, scatter
from fuel.compiler import toolchain
from fuel.compiler.foreign import ForeignCall
from fuel.ir import dtype as dt
from fuel.ir.device import CPU
from fuel.ir.errors import IndexOutOfRange
from fuel.ir.layout import Layout
from fuel.ir.params import ScatterParams

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason="no C compiler")


def _scatter(data, index, updates, prepared: bool, in_place: bool = False,
             broadcast: bool = False, reduction: str = "none"):
    """``broadcast``: data is its first element at every position (a stride-0 layout)."""
    storages = [BACKEND.upload(CPU, a) for a in (data, index, updates)]
    out = storages[0] if in_place else BACKEND.allocate(CPU, dt.from_numpy(data.dtype),
                                                         data.size)
    layouts = [Layout.contiguous(a.shape) for a in (data, index, updates, data)]
    if broadcast:
        layouts[0] = Layout(data.shape, (0,) * data.ndim)
    params = ScatterParams(data.ndim - 1, reduction)
    if prepared:
        launcher = scatter.scatter_elements.prepare(storages, [out], layouts, params)
        assert isinstance(launcher, ForeignCall)
        launcher()
    else:
        scatter.scatter_elements(storages, [out], layouts, params)
    return out.buffer[:data.size].reshape(data.shape).copy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_c_scatter_matches_the_numpy_kernel(dtype, index_dtype):
    rng = np.random.default_rng(7)
    for shape, count in [((5, 3, 8), 2), ((4, 10), 1), ((9,), 9), ((2, 2, 4), 4)]:
        data = rng.integers(-50, 50, shape).astype(dtype)
        index = rng.integers(-shape[-1], shape[-1], shape[:-1] + (count,)).astype(index_dtype)
        updates = rng.integers(-50, 50, index.shape).astype(dtype)
        expected = _scatter(data, index, updates, prepared=False)
        np.testing.assert_array_equal(_scatter(data, index, updates, prepared=True), expected)
        np.testing.assert_array_equal(
            _scatter(data, index, updates, prepared=True, in_place=True), expected)
        expected = _scatter(data, index, updates, prepared=False, broadcast=True)
        assert (expected == data.reshape(-1)[0]).sum() >= data.size - index.size
        np.testing.assert_array_equal(
            _scatter(data, index, updates, prepared=True, broadcast=True), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_c_scatter_add_matches_the_numpy_kernel(dtype):
    """Adding floats: every update lands, duplicates summed (a gather's gradient)."""
    rng = np.random.default_rng(8)
    for shape, count in [((32, 10), 1), ((3, 4, 6), 9)]:
        data = rng.standard_normal(shape).astype(dtype)
        index = rng.integers(-shape[-1], shape[-1], shape[:-1] + (count,))
        updates = rng.standard_normal(index.shape).astype(dtype)
        for broadcast in (False, True):
            expected = _scatter(data, index, updates, False, broadcast=broadcast,
                                reduction="add")
            np.testing.assert_allclose(_scatter(data, index, updates, True, broadcast=broadcast,
                                                reduction="add"), expected, rtol=1e-6)


def test_c_scatter_refuses_an_out_of_range_position():
    data = np.zeros((2, 4), np.float32)
    index = np.array([[1], [4]], np.int64)
    with pytest.raises(IndexOutOfRange, match="index 4 is out of range for dim 1 of size 4"):
        _scatter(data, index, np.ones((2, 1), np.float32), prepared=True)
