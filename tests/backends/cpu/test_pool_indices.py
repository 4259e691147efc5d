"""pool_indices.c (max pooling's indices of 2-d windows without padding) against the NumPy
path it stands in for: ties (the first maximum wins), NaNs (the first NaN wins), overlapping
and tiling windows, a strided input."""

from __future__ import annotations

import numpy as np
import pytest

from fuel.backends.cpu import BACKEND, pooling
from fuel.compiler import toolchain
from fuel.ir import dtype as dt
from fuel.ir.device import CPU
from fuel.ir.layout import Layout
from fuel.ir.params import PoolParams


def _indices(x: np.ndarray, params: PoolParams, out_shape: tuple,
             prepared: bool = False) -> np.ndarray:
    base = x.base if x.base is not None else x
    storage = BACKEND.upload(CPU, base.reshape(-1))
    offset = (x.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // 4
    layout = Layout(x.shape, tuple(s // 4 for s in x.strides), offset)
    out = BACKEND.allocate(CPU, dt.int64, int(np.prod(out_shape)))
    operands = ([storage], [out], [layout, Layout.contiguous(out_shape)], params)
    if prepared:  # the launcher a plan binds: pool_indices.c's ForeignCall where it applies
        pooling.max_pool_indices.prepare(*operands)()
    else:
        pooling.max_pool_indices(*operands)
    return out.buffer.reshape(out_shape).copy()


@pytest.mark.skipif(toolchain.unavailable_reason() is not None, reason="no C compiler")
@pytest.mark.parametrize("kernel, stride", [((2, 2), (2, 2)), ((3, 3), (1, 1)),
                                            ((2, 3), (2, 1))], ids=str)
def test_c_indices_match_the_numpy_path(kernel, stride, monkeypatch):
    rng = np.random.default_rng(sum(kernel) + sum(stride))
    values = rng.integers(0, 3, (2, 3, 9, 12)).astype(np.float32)  # many ties
    values[0, 0, 0, 1] = values[1, 2, 4, 4] = values[1, 2, 5, 5] = np.nan
    # dense, a strided (flipped) input, leading dims that do not walk as one (transposed)
    for x in (values, values[:, :, :, ::-1], values.transpose(1, 0, 2, 3)):
        params = PoolParams(kernel, stride, (0, 0), (0, 0), (1, 1))
        out_shape = x.shape[:2] + tuple((i - k) // s + 1 for i, k, s in
                                        zip(x.shape[2:], kernel, stride))
        assert pooling._plain_2d(params, x.shape[2:], out_shape[2:])
        found = _indices(x, params, out_shape)
        bound = _indices(x, params, out_shape, prepared=True)
        monkeypatch.setattr(pooling, "_library", lambda: None)
        expected = _indices(x, params, out_shape)
        monkeypatch.undo()
        np.testing.assert_array_equal(found, expected)
        np.testing.assert_array_equal(bound, expected)
