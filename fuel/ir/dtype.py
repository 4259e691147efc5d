"""DType: the ten element types, their NumPy mapping and Array-API type promotion."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fuel.ir.errors import DTypeError


class DType:
    """An element type. ``name`` is the NumPy name; ``itemsize`` is in bytes."""

    __slots__ = ("name", "itemsize", "numpy", "kind", "rank")

    def __init__(self, name: str, numpy_dtype: np.dtype, kind: str, rank: int) -> None:
        self.name = name
        self.numpy = np.dtype(numpy_dtype)
        self.itemsize = self.numpy.itemsize
        self.kind = kind  # "b" bool, "u" unsigned, "i" signed, "f" floating
        self.rank = rank

    @property
    def is_floating(self) -> bool:
        return self.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("u", "i")

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    def __repr__(self) -> str:
        return f"fuel.{self.name}"

    def __reduce__(self):
        return (from_name, (self.name,))


bool_ = DType("bool", np.bool_, "b", 0)
uint8 = DType("uint8", np.uint8, "u", 1)
int8 = DType("int8", np.int8, "i", 1)
int16 = DType("int16", np.int16, "i", 2)
int32 = DType("int32", np.int32, "i", 3)
int64 = DType("int64", np.int64, "i", 4)
float16 = DType("float16", np.float16, "f", 5)
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16, "f", 5)
float32 = DType("float32", np.float32, "f", 6)
float64 = DType("float64", np.float64, "f", 7)

ALL_DTYPES: tuple[DType, ...] = (
    bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64,
)
FLOAT_DTYPES: tuple[DType, ...] = (float16, bfloat16, float32, float64)
INTEGER_DTYPES: tuple[DType, ...] = (uint8, int8, int16, int32, int64)
NUMERIC_DTYPES: tuple[DType, ...] = INTEGER_DTYPES + FLOAT_DTYPES
DEFAULT_FLOAT = float32
DEFAULT_INT = int64

_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NUMPY = {d.numpy: d for d in ALL_DTYPES}


def from_name(name: str) -> DType:
    """The DType called ``name`` (NumPy spelling, e.g. ``"float32"``)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise DTypeError(f"unknown dtype {name!r}; known: {', '.join(_BY_NAME)}") from None


def from_numpy(numpy_dtype) -> DType:
    """The DType matching a NumPy dtype; raises DTypeError for unsupported ones."""
    key = np.dtype(numpy_dtype)
    found = _BY_NUMPY.get(key)
    if found is None:
        raise DTypeError(
            f"NumPy dtype {key} has no fuel equivalent; supported: {', '.join(_BY_NAME)}"
        )
    return found


def to_dtype(value) -> DType:
    """Accept a DType, a name, a NumPy dtype or a Python type (bool, int, float)."""
    if isinstance(value, DType):
        return value
    if value is bool:
        return bool_
    if value is int:
        return DEFAULT_INT
    if value is float:
        return DEFAULT_FLOAT
    if isinstance(value, str):
        return from_name(value)
    try:
        return from_numpy(value)
    except TypeError:
        raise DTypeError(f"{value!r} is not a dtype") from None


def promote_types(a: DType, b: DType) -> DType:
    """Array-API promotion of two tensor dtypes (torch's choice for int with float)."""
    if a is b:
        return a
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_floating and b.is_floating:
        if a.rank == b.rank:  # float16 with bfloat16
            return float32
        return a if a.rank > b.rank else b
    if a.is_floating:
        return a
    if b.is_floating:
        return b
    if a.kind == b.kind:
        return a if a.rank > b.rank else b
    unsigned, signed = (a, b) if a.kind == "u" else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    return _SIGNED_BY_SIZE.get(unsigned.itemsize * 2, int64)


_SIGNED_BY_SIZE = {1: int8, 2: int16, 4: int32, 8: int64}


def scalar_kind(value) -> str:
    """The weak kind of a Python scalar: ``"b"``, ``"i"`` or ``"f"``."""
    if isinstance(value, (bool, np.bool_)):
        return "b"
    if isinstance(value, (int, np.integer)):
        return "i"
    if isinstance(value, (float, np.floating)):
        return "f"
    raise DTypeError(f"{type(value).__name__} {value!r} is not a number")


def promote_with_scalar(tensor_dtype: DType, value) -> DType:
    """Promotion of a tensor dtype with a weakly typed Python scalar (torch semantics)."""
    kind = scalar_kind(value)
    if kind == "b":
        return tensor_dtype
    if kind == "i":
        return DEFAULT_INT if tensor_dtype.is_bool else tensor_dtype
    return tensor_dtype if tensor_dtype.is_floating else DEFAULT_FLOAT


def infer_from_python(data) -> DType:
    """The dtype ``fuel.tensor`` gives nested Python data (torch's defaults)."""
    kinds = set()
    _collect_kinds(data, kinds)
    if "f" in kinds:
        return DEFAULT_FLOAT
    if "i" in kinds:
        return DEFAULT_INT
    return bool_


def _collect_kinds(data, kinds: set) -> None:
    if isinstance(data, (list, tuple)):
        for item in data:
            _collect_kinds(item, kinds)
    else:
        kinds.add(scalar_kind(data))
