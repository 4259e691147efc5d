"""Conversions into the low-precision dtypes on the CPU: float8 (saturating or not) and the
rounding modes of float8_e8m0fnu (a power-of-two scale: exponent bits only)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fuel.ir import dtype as dt

_WIDE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_EXPONENT_MASK = np.uint32(0xFF)
_MANTISSA_MASK = np.uint32(0x7FFFFF)


def cast_source(source: np.ndarray, target: dt.DType) -> np.ndarray:
    """``source`` ready for assignment into a ``target`` array: half and float8 values go to
    integers through float32; anything else goes to a low-precision float through float64 (one
    rounding)."""
    narrow_float = source.dtype.kind not in "biu" and source.dtype not in _WIDE_FLOATS
    if narrow_float and not target.is_floating:
        return source.astype(np.float32)
    if target in dt.LOW_PRECISION_DTYPES and source.dtype not in _WIDE_FLOATS:
        return source.astype(np.float64)
    return source


def saturate(source: np.ndarray, target: dt.DType) -> np.ndarray:
    """``source`` clamped to ``target``'s finite range (NaN stays NaN, infinities clamp)."""
    limits = ml_dtypes.finfo(target.numpy)
    return np.clip(source, float(limits.min), float(limits.max))


def to_float8_e8m0(source: np.ndarray, saturating: bool, round_mode: str) -> np.ndarray:
    """float8_e8m0fnu values of ``source`` (its float32 exponent, the sign dropped), rounded
    ``up`` (any fraction raises the exponent), ``down`` or to ``nearest`` (ties to even); NaN
    and infinity give NaN; ``saturating`` keeps the largest exponent from overflowing."""
    bits = np.asarray(source, np.float32).view(np.uint32)
    exponent = ((bits >> 23) & _EXPONENT_MASK).astype(np.uint16)
    special = exponent == 0xFF
    if round_mode == "up":
        increase = (bits & _MANTISSA_MASK) > 0
    elif round_mode == "nearest":
        guard = (bits & np.uint32(0x400000)) > 0
        rest = (bits & np.uint32(0x3FFFFF)) > 0
        increase = guard & (rest | (exponent > 0))
    elif round_mode == "down":
        increase = np.zeros(bits.shape, bool)
    else:
        raise ValueError(f"unknown round_mode {round_mode!r} (up, down or nearest)")
    increase &= ~special
    if saturating:
        increase &= exponent != 0xFE
    exponent = exponent + increase.astype(np.uint16)
    result = np.where(special, 0xFF, np.minimum(exponent, 0xFF)).astype(np.uint8)
    return result.view(ml_dtypes.float8_e8m0fnu)
