"""Vectorized float32 erf and GELU for the CPU backend, in cache-sized blocks.

SciPy's float32 erf runs element by element (about 25 ms for 1.5M values here); a rational
approximation evaluated with in-place NumPy passes over L2-sized blocks takes a few ms, with a
maximum absolute error under 5e-7 (a few float32 ulps). float64 keeps the exact erf.
"""

from __future__ import annotations

import math

import numpy as np

# erf(x) ~ x * P(x^2) / Q(x^2) on [-4, 4] (the float32 erf of Eigen and XLA); outside, +-1.
_NUMERATOR = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
              -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
              -1.60960333262415e-02)
_DENOMINATOR = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                -7.37332916720468e-03, -1.42647390514189e-02)
_BLOCK = 32768
_INV_SQRT2 = np.float32(1.0 / math.sqrt(2.0))


def _erf_block(x: np.ndarray, out: np.ndarray, square: np.ndarray, numerator: np.ndarray,
               denominator: np.ndarray) -> None:
    """out = erf(x) for one contiguous float32 block (out may be x)."""
    np.clip(x, -4.0, 4.0, out=out)
    np.multiply(out, out, out=square)
    np.multiply(square, _NUMERATOR[0], out=numerator)
    numerator += _NUMERATOR[1]
    for coefficient in _NUMERATOR[2:]:
        numerator *= square
        numerator += coefficient
    numerator *= out
    np.multiply(square, _DENOMINATOR[0], out=denominator)
    denominator += _DENOMINATOR[1]
    for coefficient in _DENOMINATOR[2:]:
        denominator *= square
        denominator += coefficient
    np.divide(numerator, denominator, out=out)


def _blocks(x: np.ndarray, out: np.ndarray, body) -> None:
    source = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    direct = out.flags.c_contiguous and out.dtype == np.float32
    target = out.reshape(-1) if direct else np.empty(source.size, np.float32)
    scratch = [np.empty(min(_BLOCK, source.size), np.float32) for _ in range(3)]
    for start in range(0, source.size, _BLOCK):
        stop = min(source.size, start + _BLOCK)
        body(source[start:stop], target[start:stop], *(s[: stop - start] for s in scratch))
    if not direct:  # half-precision or strided output: round once on the way out
        out[...] = target.reshape(out.shape)


def erf_into(x: np.ndarray, out: np.ndarray) -> None:
    """out[...] = erf(x), computed in float32."""
    _blocks(x, out, _erf_block)


# erfc(z) = t exp(-z^2 - 1.26551223 + t P(t)), t = 1 / (1 + z / 2), z >= 0: fractional error
# under 1.2e-7 everywhere (Numerical Recipes' erfcc), so GELU keeps its relative accuracy in
# the negative tail where 1 + erf(x) cancels.
_ERFC = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
         0.09678418, 0.37409196, 1.00002368)


def _gelu_block(x, out, scaled, t, polynomial) -> None:
    """out = x Phi(x) = relu(x) - |x| erfc(|x| / sqrt 2) / 2: no cancellation in either tail."""
    np.abs(x, out=scaled)
    scaled *= _INV_SQRT2
    np.multiply(scaled, 0.5, out=t)
    t += 1.0
    np.reciprocal(t, out=t)
    polynomial.fill(_ERFC[0])
    for coefficient in _ERFC[1:]:
        polynomial *= t
        polynomial += coefficient
    polynomial *= t
    polynomial -= 1.26551223
    np.multiply(scaled, scaled, out=scaled)
    polynomial -= scaled
    np.maximum(polynomial, -87.0, out=polynomial)  # no denormals: they are slow on x86
    np.exp(polynomial, out=out)
    out *= t  # erfc(|x| / sqrt 2)
    np.abs(x, out=scaled)
    out *= scaled
    out *= -0.5
    np.maximum(x, 0.0, out=scaled)
    out += scaled


def gelu_into(x: np.ndarray, out: np.ndarray) -> None:
    """out[...] = 0.5 x (1 + erf(x / sqrt 2)), computed in float32."""
    _blocks(x, out, _gelu_block)
