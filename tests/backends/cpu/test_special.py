"""The CPU backend's vectorized float32 erf/GELU against math.erf (double precision)."""

import math

import numpy as np

import fuel
from fuel.backends.cpu.special import erf_into, gelu_into


def test_erf_float32_is_within_a_few_ulps_everywhere():
    x = np.concatenate([np.linspace(-10, 10, 200001), [1e-30, -1e-8, 1e-4, 3.9, 4.1]])
    x = x.astype(np.float32)
    out = np.empty_like(x)
    erf_into(x, out)
    exact = np.array([math.erf(v) for v in x.astype(np.float64)])
    assert np.max(np.abs(out - exact)) < 5e-7
    small = np.abs(exact) < 1e-2
    assert np.max(np.abs(out[small] - exact[small]) / np.maximum(np.abs(exact[small]), 1e-38)) \
        < 1e-6


def test_gelu_float32_and_half_match_the_exact_formula():
    x = np.linspace(-8, 8, 4096).astype(np.float32)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    out = np.empty_like(x)
    gelu_into(x, out)
    np.testing.assert_allclose(out, exact, rtol=2e-6, atol=5e-7)
    half = fuel.from_numpy(x.astype(np.float16)).gelu().numpy()
    np.testing.assert_allclose(half.astype(np.float64), exact, rtol=2e-3, atol=2e-3)
    strided = fuel.from_numpy(x.reshape(64, 64)[:, ::2].copy()).t().gelu().numpy()
    np.testing.assert_allclose(strided, exact.reshape(64, 64)[:, ::2].T, rtol=2e-6, atol=5e-7)
