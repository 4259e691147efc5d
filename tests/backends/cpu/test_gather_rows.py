"""gather_rows.c (gather along the last dim, the launcher a plan binds) against the NumPy
kernel it stands in for: 1- to 8-byte elements, int32 and int64 positions, negative
positions, and an out-of-range position refused."""

from __future__ import annotations

import numpy as np
import pytest

from fuel.backends.cpu import BACKEND, indexing
from fuel.compiler import toolchain
from fuel.compiler.foreign import ForeignCall
from fuel.ir import dtype as dt
from fuel.ir.device import CPU
from fuel.ir.errors import IndexOutOfRange
from fuel.ir.layout import Layout
from fuel.ir.params import AxisParams

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason="no C compiler")


def _gather(source, index, prepared: bool):
    storages = [BACKEND.upload(CPU, a) for a in (source, index)]
    out = BACKEND.allocate(CPU, dt.from_numpy(source.dtype), index.size)
    layouts = [Layout.contiguous(a.shape) for a in (source, index, index)]
    params = AxisParams(source.ndim - 1)
    if prepared:
        launcher = indexing.gather.prepare(storages, [out], layouts, params)
        assert isinstance(launcher, ForeignCall)
        launcher()
    else:
        indexing.gather(storages, [out], layouts, params)
    return out.buffer[:index.size].reshape(index.shape).copy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.float16, np.int64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_c_gather_matches_the_numpy_kernel(dtype, index_dtype):
    rng = np.random.default_rng(9)
    for shape, count in [((32, 10), 1), ((5, 3, 8), 6), ((7,), 3)]:
        source = rng.integers(-50, 50, shape).astype(dtype)
        index = rng.integers(-shape[-1], shape[-1], shape[:-1] + (count,)).astype(index_dtype)
        np.testing.assert_array_equal(_gather(source, index, True),
                                      _gather(source, index, False))


def test_c_gather_refuses_an_out_of_range_position():
    with pytest.raises(IndexOutOfRange, match="index -5 is out of range for dim 1 of size 4"):
        _gather(np.zeros((2, 4), np.float32), np.array([[1], [-5]], np.int64), True)
