"""Differential-test helpers: the same expression in fuel and in NumPy."""

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fuel
from fuel.ir import dtype as dt

FLOATS = [dt.float16, dt.bfloat16, dt.float32, dt.float64]
INTS = [dt.uint8, dt.int8, dt.int16, dt.int32, dt.int64]


def tolerance(d) -> dict:
    return {
        "float16": dict(rtol=2e-3, atol=2e-3),
        "bfloat16": dict(rtol=2e-2, atol=2e-2),
        "float32": dict(rtol=1e-5, atol=1e-6),
        "float64": dict(rtol=1e-10, atol=1e-12),
    }.get(d.name, dict(rtol=0, atol=0))


def arrays(d, shape, low=-3.0, high=3.0, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if d.is_bool:
        return rng.random(shape) < 0.5
    if d.is_integer:
        info = np.iinfo(d.numpy)
        lo, hi = max(info.min, -50), min(info.max, 50)
        return rng.integers(lo, hi + 1, size=shape).astype(d.numpy)
    values = rng.uniform(low, high, size=shape)
    return values.astype(np.float32).astype(d.numpy) if d is dt.bfloat16 else values.astype(
        d.numpy)


def reference_input(a: np.ndarray) -> np.ndarray:
    """Half types computed in float32 (fuel's contract: compute in float32, round once)."""
    if a.dtype in (np.float16, ml_dtypes.bfloat16):
        return a.astype(np.float32)
    return a


def check(result: fuel.Tensor, expected: np.ndarray, d=None) -> None:
    got = result.numpy()
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    d = d or result.dtype
    if d.is_floating:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   equal_nan=True, **tolerance(d))
    else:
        np.testing.assert_array_equal(got, expected.astype(got.dtype))


def broadcastable_shapes(max_dims=3):
    return hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=max_dims,
                                             max_side=4)


small_shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)
