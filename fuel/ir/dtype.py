"""DType: fuel's element types, their NumPy mapping (ml_dtypes for the low-precision ones) and
Array-API type promotion.

``ALL_DTYPES`` are the standard types every generic kernel takes (bool, the signed and unsigned
integers, the four floats). ``FLOAT8_DTYPES`` (ONNX's float8 family) and ``PACKED_DTYPES``
(int4, uint4, int2, uint2, float4_e2m1fn: several elements per byte) are the low-precision
types, with a narrower coverage declared in the op registry: casts, comparisons, copies and
selection. ``KNOWN_DTYPES`` is every dtype fuel has a name for."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fuel.ir.errors import DTypeError


class DType:
    """An element type. ``name`` is the NumPy name; ``itemsize`` is in bytes."""

    __slots__ = ("name", "itemsize", "numpy", "kind", "rank", "bits")

    def __init__(self, name: str, numpy_dtype: np.dtype, kind: str, rank: int,
                 bits: int | None = None) -> None:
        self.name = name
        self.numpy = np.dtype(numpy_dtype)
        self.itemsize = self.numpy.itemsize
        self.kind = kind  # "b" bool, "u" unsigned, "i" signed, "f" floating
        self.rank = rank
        self.bits = bits if bits is not None else self.itemsize * 8  # width of one element

    @property
    def is_packed(self) -> bool:
        """Whether several elements share a byte (stored packed, unpacked by kernels)."""
        return self.bits < 8

    def storage_bytes(self, count: int) -> int:
        """Bytes that ``count`` elements take in storage (packed for sub-byte types)."""
        return (count * self.bits + 7) // 8

    @property
    def is_quantized(self) -> bool:
        """Whether this is a block-quantized format (a QuantizedDType)."""
        return self.kind == "q"

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
uint16 = DType("uint16", np.uint16, "u", 2)
uint32 = DType("uint32", np.uint32, "u", 3)
uint64 = DType("uint64", np.uint64, "u", 4)
int8 = DType("int8", np.int8, "i", 1)
int16 = DType("int16", np.int16, "i", 2)
int32 = DType("int32", np.int32, "i", 3)
int64 = DType("int64", np.int64, "i", 4)
float16 = DType("float16", np.float16, "f", 5)
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16, "f", 5)
float32 = DType("float32", np.float32, "f", 6)
float64 = DType("float64", np.float64, "f", 7)
# ONNX's float8 family (rank 4: below the 16-bit floats); names as ml_dtypes spells them.
float8_e4m3fn = DType("float8_e4m3fn", ml_dtypes.float8_e4m3fn, "f", 4)
float8_e4m3fnuz = DType("float8_e4m3fnuz", ml_dtypes.float8_e4m3fnuz, "f", 4)
float8_e5m2 = DType("float8_e5m2", ml_dtypes.float8_e5m2, "f", 4)
float8_e5m2fnuz = DType("float8_e5m2fnuz", ml_dtypes.float8_e5m2fnuz, "f", 4)
float8_e8m0fnu = DType("float8_e8m0fnu", ml_dtypes.float8_e8m0fnu, "f", 4)

# Sub-byte types: ``bits`` per element, stored packed as ONNX stores them (the first element
# in the lowest bits of a byte); kernels unpack them to ml_dtypes' one-byte arrays.
int4 = DType("int4", ml_dtypes.int4, "i", 0, bits=4)
uint4 = DType("uint4", ml_dtypes.uint4, "u", 0, bits=4)
int2 = DType("int2", ml_dtypes.int2, "i", -1, bits=2)
uint2 = DType("uint2", ml_dtypes.uint2, "u", -1, bits=2)
float4_e2m1fn = DType("float4_e2m1fn", ml_dtypes.float4_e2m1fn, "f", 3, bits=4)

ALL_DTYPES: tuple[DType, ...] = (
    bool_, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, bfloat16, float32,
    float64,
)
FLOAT_DTYPES: tuple[DType, ...] = (float16, bfloat16, float32, float64)
INTEGER_DTYPES: tuple[DType, ...] = (uint8, uint16, uint32, uint64, int8, int16, int32, int64)
NUMERIC_DTYPES: tuple[DType, ...] = INTEGER_DTYPES + FLOAT_DTYPES
FLOAT8_DTYPES: tuple[DType, ...] = (
    float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu,
)
PACKED_DTYPES: tuple[DType, ...] = (int4, uint4, int2, uint2, float4_e2m1fn)
LOW_PRECISION_DTYPES: tuple[DType, ...] = FLOAT8_DTYPES + PACKED_DTYPES
# Floats a cast may saturate into (ONNX Cast's ``saturate``): out-of-range values clamp.
SATURABLE_DTYPES: tuple[DType, ...] = FLOAT8_DTYPES + (float4_e2m1fn,)
KNOWN_DTYPES: tuple[DType, ...] = ALL_DTYPES + LOW_PRECISION_DTYPES
DEFAULT_FLOAT = float32
DEFAULT_INT = int64

# ------------------------------------------------------------------ strings (ONNX STRING)
# Python ``str`` objects in NumPy object arrays (NumPy ``str_`` and StringDType arrays convert
# on upload). Only the CPU backend holds them: no other backend registers a kernel for the
# dtype, so a string node elsewhere raises NoBackendForOp naming it. Kind "s": neither number
# nor bool, promoting with nothing but itself; its coverage is declared per op in the registry
# (string ops, equality, copies), never through KNOWN_DTYPES.
string = DType("string", np.object_, "s", -2)
STRING_DTYPES: tuple[DType, ...] = (string,)
NAMED_DTYPES: tuple[DType, ...] = KNOWN_DTYPES + STRING_DTYPES
_STRING_NUMPY_KINDS = "OUT"  # object, str_, StringDType

_BY_NAME = {d.name: d for d in NAMED_DTYPES}
_BY_NUMPY = {d.numpy: d for d in NAMED_DTYPES}


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
    if found is None and key.kind in _STRING_NUMPY_KINDS:
        return string
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
    if a is string or b is string:
        raise DTypeError(f"{a.name} and {b.name} do not promote: strings combine only with "
                         "strings")
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_floating and b.is_floating:
        if a.rank == b.rank:  # float16 with bfloat16, or two float8 formats
            return float32
        return a if a.rank > b.rank else b
    if a.is_floating:
        return a
    if b.is_floating:
        return b
    if a.kind == b.kind:
        return a if a.rank > b.rank else b
    unsigned, signed = (a, b) if a.kind == "u" else (b, a)
    if signed.bits > unsigned.bits:
        return signed
    return _SIGNED_BY_BITS.get(unsigned.bits * 2, int64)


_SIGNED_BY_BITS = {4: int4, 8: int8, 16: int16, 32: int32, 64: int64}


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


# ------------------------------------------------------------------ block-quantized types
# GGUF's block formats (issue 12). A quantized tensor's last dim is cut into blocks of
# ``block_size`` elements, each stored as ``block_bytes`` bytes (scales and packed codes, as
# ggml lays them out); storage is those bytes (uint8). Only the quantized ops take them.


class QuantizedDType(DType):
    """A GGUF block format: ``block_size`` elements in ``block_bytes`` bytes per block;
    ``gguf_type`` is its GGMLQuantizationType number."""

    __slots__ = ("block_size", "block_bytes", "gguf_type")

    def __init__(self, name: str, block_size: int, block_bytes: int, gguf_type: int) -> None:
        super().__init__(name, np.uint8, "q", -2, bits=8)
        self.block_size = block_size
        self.block_bytes = block_bytes
        self.gguf_type = gguf_type

    def storage_bytes(self, count: int) -> int:
        """Bytes of ``count`` elements: whole blocks (a partial block takes a whole one)."""
        return -(-count // self.block_size) * self.block_bytes

    def row_bytes(self, row: int) -> int:
        """Bytes of one row of ``row`` elements (a multiple of ``block_size``)."""
        return row // self.block_size * self.block_bytes


q4_0 = QuantizedDType("q4_0", 32, 18, 2)
q4_1 = QuantizedDType("q4_1", 32, 20, 3)
q8_0 = QuantizedDType("q8_0", 32, 34, 8)
q5_0 = QuantizedDType("q5_0", 32, 22, 6)
q5_1 = QuantizedDType("q5_1", 32, 24, 7)
q2_k = QuantizedDType("q2_k", 256, 84, 10)
q3_k = QuantizedDType("q3_k", 256, 110, 11)
q4_k = QuantizedDType("q4_k", 256, 144, 12)
q5_k = QuantizedDType("q5_k", 256, 176, 13)
q6_k = QuantizedDType("q6_k", 256, 210, 14)
iq4_nl = QuantizedDType("iq4_nl", 32, 18, 20)
iq4_xs = QuantizedDType("iq4_xs", 256, 136, 23)
# GGUF's float weights, kept as stored in blocks of 32 (their matmul multiplies floats).
f16_blocks = QuantizedDType("f16_blocks", 32, 64, 1)
bf16_blocks = QuantizedDType("bf16_blocks", 32, 64, 30)
QUANTIZED_DTYPES: tuple[QuantizedDType, ...] = (q4_0, q4_1, q8_0, q4_k, q6_k, q5_k, q5_0, q5_1,
                                                q3_k, q2_k, iq4_nl, iq4_xs, f16_blocks,
                                                bf16_blocks)
QUANTIZED_BY_GGUF_TYPE = {d.gguf_type: d for d in QUANTIZED_DTYPES}
_BY_NAME.update((d.name, d) for d in QUANTIZED_DTYPES)
