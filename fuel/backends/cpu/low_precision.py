"""Conversions into the low-precision dtypes on the CPU: float8 (saturating or not) and the
rounding modes of float8_e8m0fnu (a power-of-two scale: exponent bits only)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fuel.ir import dtype as dt

_WIDE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_SUB_BYTE_INTEGERS = (dt.int2, dt.int4, dt.uint2, dt.uint4)
_EXPONENT_MASK = np.uint32(0xFF)
_MANTISSA_MASK = np.uint32(0x7FFFFF)


def cast_source(source: np.ndarray, target: dt.DType) -> np.ndarray:
    """``source`` ready for assignment into a ``target`` array: half and float8 values go to
    integers through float32; anything else goes to a low-precision float through float64 (one
    rounding); between two ml_dtypes integers without a direct cast (ml_dtypes before 0.7),
    through int64 (the same wrap-around values as the direct cast)."""
    floating = dt.from_numpy(source.dtype).is_floating
    if floating and target in _SUB_BYTE_INTEGERS:
        return _truncated_or_zero(source, target)
    narrow_float = floating and source.dtype not in _WIDE_FLOATS
    if narrow_float and not target.is_floating:
        return source.astype(np.float32)
    low_precision = target in dt.LOW_PRECISION_DTYPES
    if low_precision and target.is_floating and source.dtype not in _WIDE_FLOATS:
        return source.astype(np.float64)
    if not np.can_cast(source.dtype, target.numpy, "unsafe"):
        return source.astype(np.int64)
    return source


def _truncated_or_zero(source: np.ndarray, target: dt.DType) -> np.ndarray:
    """A float array into a 2- or 4-bit integer dtype: truncated toward zero where in range,
    else 0 (NaN too). ml_dtypes 0.7's direct cast does this (checked on every float16 and
    float8 value); earlier versions wrap instead, so fuel does not leave it to the library."""
    limits = ml_dtypes.iinfo(target.numpy)
    truncated = np.trunc(source.astype(np.float64))
    with np.errstate(invalid="ignore"):
        in_range = (truncated >= int(limits.min)) & (truncated <= int(limits.max))
    return np.where(in_range, truncated, 0).astype(np.int64)


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


def pack(values: np.ndarray, dtype: dt.DType) -> np.ndarray:
    """The packed bytes of ``values`` (any array of ``dtype``'s unpacked NumPy type): element
    i in bits ``(i % k) * bits`` of byte ``i // k``, k = 8 / bits, as ONNX stores them."""
    per_byte = 8 // dtype.bits
    codes = np.ascontiguousarray(values, dtype.numpy).reshape(-1).view(np.uint8)
    padded = np.zeros(dtype.storage_bytes(codes.size) * per_byte, np.uint8)
    padded[:codes.size] = codes & np.uint8((1 << dtype.bits) - 1)
    shifts = (np.arange(per_byte, dtype=np.uint8) * dtype.bits).astype(np.uint8)
    return np.bitwise_or.reduce(padded.reshape(-1, per_byte) << shifts, axis=1).astype(np.uint8)


def unpack(packed: np.ndarray, count: int, dtype: dt.DType) -> np.ndarray:
    """``count`` elements of ``dtype`` (ml_dtypes' one-byte arrays) from packed bytes."""
    per_byte = 8 // dtype.bits
    shifts = (np.arange(per_byte, dtype=np.uint8) * dtype.bits).astype(np.uint8)
    codes = (packed[:, None] >> shifts) & np.uint8((1 << dtype.bits) - 1)
    return np.ascontiguousarray(codes.reshape(-1)[:count]).view(dtype.numpy)


def is_packed(storage) -> bool:
    """Whether ``storage`` holds packed sub-byte elements (not an unpacked scratch array)."""
    return storage.dtype.is_packed and storage.buffer.dtype == np.uint8


def unpacked_output(kernel):
    """``kernel`` for outputs of a packed dtype: it writes one-byte elements into a scratch
    Storage, packed into the real output afterwards."""
    from fuel.memory import Storage

    def run(inputs, outputs, layouts, params):
        target = outputs[0]
        if not is_packed(target):
            return kernel(inputs, outputs, layouts, params)
        scratch = Storage(unpack(target.buffer, target.size, target.dtype), target.dtype,
                          target.size, target.device, target.backend)
        kernel(inputs, [scratch], layouts, params)
        target.buffer[...] = pack(scratch.buffer, target.dtype)

    run.__qualname__ = run.__name__ = getattr(kernel, "__name__", "kernel")
    run.__module__ = kernel.__module__
    return run
