"""How the wgpu backend holds each dtype on the device, and the byte sizes that follow: the
tables and helpers the backend and its kernels share."""

from __future__ import annotations

import numpy as np

from fuel.ir import dtype as dt
from fuel.ir.device import Device
from fuel.ir.dtype import DType
from fuel.ir.errors import DeviceError

# How each dtype kernels take is held on the device: one 32-bit word per element, float16 in
# two bytes (see the package doc). Every other dtype is stored as its host bytes and only moves.
ELEMENTS: dict[DType, np.dtype] = {
    dt.float32: np.dtype(np.float32), dt.int32: np.dtype(np.int32),
    dt.int64: np.dtype(np.int32), dt.uint32: np.dtype(np.uint32), dt.bool_: np.dtype(np.uint32),
    dt.float16: np.dtype(np.float16),
}
WGPU_DTYPES = tuple(ELEMENTS)
# The dtypes whose kernels need an adapter feature (requested when the adapter has it).
FEATURE_DTYPES: dict[DType, str] = {dt.float16: "shader-f16"}
# Buffer copies and storage bindings take offsets and sizes in multiples of 4 bytes.
ALIGNMENT_BYTES = 4


def element_bytes(dtype: DType) -> int:
    """Bytes of one element of ``dtype`` on the device (``ELEMENTS``; else its host bytes,
    packed types unpacked)."""
    element = ELEMENTS.get(dtype)
    return element.itemsize if element is not None else dtype.itemsize


def buffer_bytes(dtype: DType, size: int) -> int:
    """Bytes of a buffer holding ``size`` elements, rounded up to whole words (a binding's
    size is a multiple of 4 bytes: an odd count of float16 elements gets 2 bytes of padding)."""
    return max(-(-size * element_bytes(dtype) // ALIGNMENT_BYTES), 1) * ALIGNMENT_BYTES


def device_bytes(array: np.ndarray, dtype: DType, device: Device) -> np.ndarray:
    """The bytes of ``array`` as ``dtype`` is held on the device (``ELEMENTS``: int64 values
    outside the int32 range are refused, WGSL has no 64-bit integers; else the host bytes),
    padded to a whole word."""
    element = ELEMENTS.get(dtype, dtype.numpy)
    if dtype is dt.int64 and array.size:
        low, high = int(array.min()), int(array.max())
        if low < -(1 << 31) or high >= (1 << 31):
            raise DeviceError(
                f"int64 values up to {high if high >= (1 << 31) else low} cannot move to "
                f"{device}: wgpu holds int64 tensors as 32-bit integers (range +-2**31)")
    raw = np.ascontiguousarray(array.astype(element, copy=False)).reshape(-1).view(np.uint8)
    if raw.size % ALIGNMENT_BYTES:
        raw = np.concatenate([raw, np.zeros(-raw.size % ALIGNMENT_BYTES, np.uint8)])
    return raw
