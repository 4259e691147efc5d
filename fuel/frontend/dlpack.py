"""DLPack exchange on the host: export a NumPy view of a tensor, import any producer's tensor.

NumPy speaks DLPack for the dtypes it owns (bool, integers, float16/32/64); the others that
DLPack describes and fuel holds (bfloat16 and the float8 formats, ml_dtypes' types in NumPy)
travel as an unsigned integer of the same width whose DLPack type code is rewritten in the
capsule: on export after NumPy made it, on import before NumPy reads it. NumPy owns the
capsule's lifetime either way (its deleter keeps the exported array, and so the tensor's
storage, alive while a consumer holds the memory). Sub-byte types (int4, uint4, int2, uint2,
float4_e2m1fn: packed in fuel's storage), strings and block-quantized types have no DLPack
form here: exporting them raises ``BufferError``.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from fuel.ir import dtype as dt
from fuel.ir.errors import DTypeError, InvalidArgument

# DLPack's type codes (dlpack.h, DLDataTypeCode) for the types NumPy cannot name.
_K_DL_UINT = 1
_K_DL_BFLOAT = 4
_SPECIAL_CODES: dict[dt.DType, int] = {
    dt.bfloat16: _K_DL_BFLOAT,
    dt.float8_e4m3fn: 10,
    dt.float8_e4m3fnuz: 11,
    dt.float8_e5m2: 12,
    dt.float8_e5m2fnuz: 13,
    dt.float8_e8m0fnu: 14,
}
_BY_CODE = {(code, d.itemsize * 8): d for d, code in _SPECIAL_CODES.items()}
_CARRIER = {1: np.uint8, 2: np.uint16}  # the unsigned integer a special type travels as

K_DL_CPU = 1
_VERSIONED = b"dltensor_versioned"
_LEGACY = b"dltensor"


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):  # DLPack < 1.0
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):  # DLPack >= 1.0
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dl_tensor(capsule: Any) -> _DLTensor:
    """The DLTensor inside an unconsumed capsule (versioned or legacy)."""
    if _capsule_is_valid(capsule, _VERSIONED):
        managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, _VERSIONED))
        return managed.dl_tensor
    if _capsule_is_valid(capsule, _LEGACY):
        return _DLManagedTensor.from_address(_capsule_pointer(capsule, _LEGACY)).dl_tensor
    raise InvalidArgument("from_dlpack() got a capsule that is not an unconsumed DLPack "
                          "tensor (a capsule can be consumed once)")


def exportable(dtype: dt.DType) -> bool:
    """Whether DLPack can describe ``dtype`` as fuel stores it."""
    return not (dtype.is_packed or dtype.is_quantized or dtype is dt.string)


def export(array: np.ndarray, dtype: dt.DType, *, stream: Any = None,
           max_version: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
    """A DLPack capsule over ``array`` (a host view of a tensor of ``dtype``), for a consumer
    that understands DLPack up to ``max_version``. A legacy consumer (no ``max_version``)
    cannot be told the memory is read-only, so it gets a copy (``copy=False``: BufferError)."""
    if not exportable(dtype):
        raise BufferError(f"DLPack cannot describe fuel dtype {dtype.name} (packed, string or "
                          f"block-quantized); convert it first, e.g. .to(fuel.float32)")
    legacy = max_version is None or max_version[0] < 1
    if legacy and not array.flags.writeable:
        if copy is False:
            raise BufferError("a DLPack consumer older than 1.0 cannot be told this tensor is "
                              "read-only; export with max_version=(1, 0) or copy=True")
        array = np.array(array, copy=True)
        copy = None
    code = _SPECIAL_CODES.get(dtype)
    source = array if code is None else array.view(_CARRIER[dtype.itemsize])
    arguments: dict[str, Any] = {"stream": stream, "copy": copy}
    if not legacy:
        arguments["max_version"] = max_version
    capsule = source.__dlpack__(**arguments)
    if code is not None:
        _dl_tensor(capsule).dtype.code = code
    return capsule


class _Retyped:
    """A producer seen through NumPy's ``from_dlpack``: the special types' codes become the
    unsigned carrier NumPy reads, and ``special`` remembers which fuel dtype it was."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.special: dt.DType | None = None

    def __dlpack_device__(self) -> tuple[int, int]:
        if hasattr(self.source, "__dlpack_device__"):
            return tuple(self.source.__dlpack_device__())
        tensor = _dl_tensor(self.source)
        return (tensor.device_type, tensor.device_id)

    def __dlpack__(self, **arguments: Any) -> Any:
        source = self.source
        capsule = source.__dlpack__(**arguments) if hasattr(source, "__dlpack__") else source
        described = _dl_tensor(capsule).dtype
        special = _BY_CODE.get((described.code, described.bits))
        if special is not None:
            if described.lanes != 1:
                raise DTypeError(f"from_dlpack(): {described.lanes}-lane vectors of "
                                 f"{special.name} have no fuel dtype")
            described.code = _K_DL_UINT
            self.special = special
        return capsule


def to_numpy(source: Any) -> np.ndarray:
    """A host NumPy array over the memory ``source`` exports through DLPack (an object with
    ``__dlpack__``, or a capsule), without a copy; the array keeps the producer's memory
    alive."""
    if isinstance(source, np.ndarray):
        return source
    if not hasattr(source, "__dlpack__") and type(source).__name__ != "PyCapsule":
        raise InvalidArgument(f"from_dlpack() takes an object with __dlpack__ (NumPy, torch, "
                              f"JAX, CuPy arrays) or a DLPack capsule, got "
                              f"{type(source).__name__}")
    retyped = _Retyped(source)
    device = retyped.__dlpack_device__()
    if device[0] != K_DL_CPU:
        raise InvalidArgument(f"from_dlpack(): the tensor lives on DLPack device {device} "
                              f"(type {device[0]}), not the host; fuel imports host memory "
                              f"only: move it to the CPU first (torch: .cpu())")
    try:
        array = np.from_dlpack(retyped)
    except (BufferError, RuntimeError, TypeError) as error:
        raise DTypeError(f"from_dlpack(): {error}") from None
    if retyped.special is not None:
        array = array.view(retyped.special.numpy)
    return array
