"""OpenCL C generation shared by every kernel family: element types, the prelude, the
argument structs (walks over strided layouts) and the host side that fills them.

Every program is generated source text (never hand-written per dtype). Half types are
storage-only: ``float16`` is read and written with the core ``vload_half``/``vstore_half_rte``
and ``bfloat16`` with bit shifts, and both compute in ``float``, so neither needs
``cl_khr_fp16``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from fuel.compiler.kernel_ir import collapse as collapse_dims
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.errors import InvalidArgument
from fuel.ir.layout import Layout

MAX_DIMS = 8
WALK_OPERANDS = 4


@dataclass(frozen=True)
class CType:
    """How one fuel dtype lives in OpenCL C: storage type, compute type, load and store."""

    dtype: DType
    storage: str
    compute: str

    @property
    def name(self) -> str:
        return self.dtype.name

    @property
    def is_float(self) -> bool:
        return self.dtype.is_floating

    @property
    def is_signed(self) -> bool:
        return self.dtype.kind == "i"

    def load(self, pointer: str, index: str) -> str:
        """An expression of the compute type reading ``pointer[index]``."""
        if self.dtype is dt.float16:
            return f"vload_half({index}, {pointer})"
        if self.dtype is dt.bfloat16:
            return f"bf16_load({pointer}[{index}])"
        return f"{pointer}[{index}]"

    def store(self, pointer: str, index: str, value: str, via: str = "float") -> str:
        """A statement writing ``value`` (any arithmetic type) as this type. Halves round to
        nearest even from ``via`` (``float``, or ``double`` for a float64 source)."""
        if self.dtype is dt.float16:
            return f"vstore_half_rte(({via})({value}), {index}, {pointer});"
        if self.dtype is dt.bfloat16:
            return f"{pointer}[{index}] = bf16_store((float)({value}));"
        if self.dtype is dt.bool_:
            return f"{pointer}[{index}] = (uchar)(({value}) != 0);"
        return f"{pointer}[{index}] = ({self.storage})({value});"

    def literal(self, value: float | int) -> str:
        """``value`` as a constant of the compute type (never a stray double literal)."""
        return f"(({self.compute}){value!r})"


C_TYPES: dict[DType, CType] = {
    dt.bool_: CType(dt.bool_, "uchar", "uchar"),
    dt.uint8: CType(dt.uint8, "uchar", "uchar"),
    dt.int8: CType(dt.int8, "char", "char"),
    dt.int16: CType(dt.int16, "short", "short"),
    dt.int32: CType(dt.int32, "int", "int"),
    dt.int64: CType(dt.int64, "long", "long"),
    dt.float16: CType(dt.float16, "half", "float"),
    dt.bfloat16: CType(dt.bfloat16, "ushort", "float"),
    dt.float32: CType(dt.float32, "float", "float"),
    dt.float64: CType(dt.float64, "double", "double"),
}

# The dtypes OpenCL kernels are generated for (its own set: the registry's dtypes without a C
# type here, such as the unsigned 16/32/64-bit integers and the float8 family, are left out,
# so a graph using them on OpenCL raises NoBackendForOp naming the dtype).
OPENCL_DTYPES: tuple[DType, ...] = tuple(d for d in dt.ALL_DTYPES if d in C_TYPES)
OPENCL_INTEGER_DTYPES: tuple[DType, ...] = tuple(d for d in dt.INTEGER_DTYPES if d in C_TYPES)
OPENCL_NUMERIC_DTYPES: tuple[DType, ...] = tuple(d for d in dt.NUMERIC_DTYPES if d in C_TYPES)


def supports(combo) -> bool:
    """Whether every dtype of a binding key has an OpenCL C type."""
    return all(d in C_TYPES for d in combo)


# Bit-moving kernels (copies, where, gather, triangles) only care about the element size.
BITS_TYPES: dict[int, str] = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}


def ctype(dtype: DType) -> CType:
    return C_TYPES[dtype]


def accumulator(dtype: DType) -> str:
    """The type sums and products of ``dtype`` accumulate in (int64 for integers and bool)."""
    if dtype is dt.float64:
        return "double"
    return "float" if dtype.is_floating else "long"


_PRELUDE = """\
#define MAX_DIMS {max_dims}
typedef struct {{
    int ndim; int clamp; long n;
    long shape[MAX_DIMS];
    long strides[{operands}][MAX_DIMS];
    long offsets[{operands}];
}} walk_t;

inline float bf16_load(ushort bits) {{ return as_float(((uint)bits) << 16); }}
inline ushort bf16_store(float value) {{
    uint u = as_uint(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}}

/* Offset of flat index ``i`` over one (shape, stride) pair of ``ndim`` dims. */
inline long dims_offset(const long* shape, const long* stride, int ndim, long i) {{
    if (ndim == 1) return i * stride[0];
    long offset = 0;
    for (int d = ndim - 1; d >= 0; --d) {{
        long c = i % shape[d];
        i /= shape[d];
        offset += c * stride[d];
    }}
    return offset;
}}
"""


def walk_kernel(count: int, body: str) -> str:
    """A walk kernel's statements: ``body`` runs with ``o0..o{count-1}``, the element offsets
    of flat index ``i`` for each operand of the ``walk_t w``. One-dimensional walks (the
    contiguous case, stride-0 scalars included) take a straight-line path the compiler can
    vectorize; others decode ``i`` dim by dim. Neither has a bounds check (a branch that
    stops some compilers from vectorizing): ``launch_1d`` covers a flat walk exactly, with
    whole groups, and sets ``w.clamp`` for launches rounded up past ``w.n``, whose extra
    items then rewrite the last element's value."""
    ks = range(count)
    flat = ", ".join(f"o{k} = w.offsets[{k}] + i * w.strides[{k}][0]" for k in ks)
    start = ", ".join(f"o{k} = w.offsets[{k}]" for k in ks)
    step = " ".join(f"o{k} += c * w.strides[{k}][d];" for k in ks)
    return f"""    if (w.ndim <= 1 && !w.clamp) {{
        const long i = get_global_id(0);
        const long {flat};
{body}
        return;
    }}
    const long i = min((long)get_global_id(0), w.n - 1);
    long {start};
    long rest = i;
    for (int d = w.ndim - 1; d >= 0; --d) {{
        const long size = w.shape[d], c = rest % size;
        rest /= size;
        {step}
    }}
{body}
"""


def prelude(fp64: bool) -> str:
    """Pragmas, argument structs and helpers every program starts with."""
    head = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if fp64 else ""
    return head + _PRELUDE.format(max_dims=MAX_DIMS, operands=WALK_OPERANDS)


@dataclass(frozen=True)
class ProgramSpec:
    """The source of one OpenCL program (several kernels), built lazily once per device."""

    name: str
    source: str
    fp64: bool = False

    @cached_property
    def digest(self) -> str:
        return hashlib.blake2b(self.full_source.encode(), digest_size=8).hexdigest()

    @cached_property
    def full_source(self) -> str:
        return prelude(self.fp64) + "\n" + self.source

    def __repr__(self) -> str:
        return f"ProgramSpec({self.name}#{self.digest})"


def needs_fp64(*dtypes: DType) -> bool:
    return any(d is dt.float64 for d in dtypes)


# ----------------------------------------------------------------------------- host structs

WALK_DTYPE = np.dtype([
    ("ndim", np.int32), ("clamp", np.int32), ("n", np.int64),
    ("shape", np.int64, MAX_DIMS), ("strides", np.int64, (WALK_OPERANDS, MAX_DIMS)),
    ("offsets", np.int64, WALK_OPERANDS),
])


def collapse(shape, stride_lists) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours that are contiguous for every operand
    (``kernel_ir.collapse``, the renderers' too), at most ``MAX_DIMS`` of them; no dim at all
    when every size is 1."""
    if all(size == 1 for size in shape):
        return [], [[] for _ in stride_lists]
    sizes, strides = collapse_dims(tuple(shape), [tuple(own) for own in stride_lists])
    if len(sizes) > MAX_DIMS:
        raise InvalidArgument(
            f"OpenCL kernels walk at most {MAX_DIMS} dims once contiguous dims are merged; "
            f"shape {tuple(shape)} with strides {[tuple(s) for s in stride_lists]} needs "
            f"{len(sizes)} (make the tensor contiguous first)"
        )
    return list(sizes), [list(own) for own in strides]


def make_walk(shape, layouts: list[Layout]) -> np.ndarray:
    """A ``walk_t`` over ``shape`` with one operand per layout (each viewed as ``shape``)."""
    dims, strides = collapse(shape, [layout.strides for layout in layouts])
    walk = np.zeros((), WALK_DTYPE)
    walk["ndim"] = len(dims)
    walk["n"] = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    walk["shape"][: len(dims)] = dims
    for k, (own, layout) in enumerate(zip(strides, layouts)):
        walk["strides"][k, : len(dims)] = own
        walk["offsets"][k] = layout.offset
    return walk


def fill_dims(record: np.ndarray, shape_field: str, stride_fields, shape, stride_lists) -> int:
    """Collapse (shape, strides...) into the named fields of ``record``; returns ndim."""
    dims, strides = collapse(shape, stride_lists)
    record[shape_field][: len(dims)] = dims
    for field, own in zip(stride_fields, strides):
        record[field][: len(dims)] = own
    return len(dims)


def numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
