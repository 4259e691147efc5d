"""The C renderer's float exp (fuel_expf): NumPy's exp wherever the result is a normal float,
0 where it is below FLT_MIN (subnormals flushed), NaN and infinities kept; a masked softmax
(-inf in most of each row, the vector exp's slow inputs) against NumPy."""

import numpy as np
import pytest

import fuel
import fuel.nn.functional as F
from fuel.compiler import toolchain

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason=str(toolchain.unavailable_reason()))

SPECIAL = [-np.inf, -1e30, -200.0, -104.0, -100.0, -87.4, -87.34, -87.33, -87.3, -50.0, -1.0,
           -0.0, 0.0, 1e-30, 1.0, 50.0, 88.7, 88.8, 1e30, np.inf, np.nan]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_fused_exp_is_numpy_exp_with_subnormal_results_flushed(dtype):
    rng = np.random.default_rng(0)
    x = np.concatenate([SPECIAL * 3, rng.uniform(-120, 90, 2000)]).astype(np.float32)
    with np.errstate(over="ignore"):
        tensor = fuel.from_numpy(x.astype(dtype))
    result = ((tensor * 1.0 + 0.0).exp()).numpy().astype(np.float32)  # one fused kernel
    with np.errstate(over="ignore"):
        expected = np.exp(x.astype(dtype).astype(np.float32)).astype(dtype)
    expected = expected.astype(np.float32)
    flushed = (expected < np.finfo(np.float32).tiny) & (expected > 0)
    expected[flushed] = 0.0
    tolerance = 2e-6 if dtype == np.float32 else 1e-3
    np.testing.assert_allclose(result, expected, rtol=tolerance, atol=0)
    assert np.array_equal(np.isnan(result), np.isnan(expected))


@pytest.mark.parametrize("position", [0, 70, 255])
def test_masked_softmax_matches_numpy(position):
    rng = np.random.default_rng(position)
    scores = rng.standard_normal((3, 3, 256)).astype(np.float32) * 4
    mask = np.where(np.arange(256)[None, :] <= position, 0, -np.inf).astype(np.float32)
    mask = np.repeat(mask, 3, axis=0)
    result = F.softmax(fuel.from_numpy(scores) * 0.125 + fuel.from_numpy(mask), -1).numpy()
    shifted = scores * np.float32(0.125) + mask
    weights = np.exp((shifted - shifted.max(-1, keepdims=True)).astype(np.float64))
    expected = weights / weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-7)
    assert not result[..., position + 1:].any()
