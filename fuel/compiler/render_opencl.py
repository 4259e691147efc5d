"""Render a LoopKernel into OpenCL C (or CUDA C): one ``fuel_kernel`` per program.

Arguments: each load's ``__global`` pointer, then each store's, then ``arguments``, a struct of
64-bit integers passed by value: the collapsed loop sizes, each load's strides per dim and
element offset, each store's offset (``OpenClProgram.arguments`` computes it for a shape and
layout). The source depends only on the value DAG, the loop depth and each load's
innermost-stride pattern (dense, broadcast, strided), so one built program serves every shape
with that pattern (the backend's program cache keys on the source).

Elementwise kernels run one work-item per output element (the flat index decoded over the
outer dims; launches rounded up to whole work-groups clamp to the last element, so no branch
stops the compiler from vectorizing across work-items). Kernels with a reduction (``reduced``)
are ``render_opencl_rows``'s: a row per work-item or a work-group per row. Values are computed
as the C renderer computes them (``render_expression``); sums of float32 accumulate in float.

The GPU C family shares this walk: a ``Language`` says how one spells the qualifiers, the
work-item indices, the barrier, the types and the half loads and stores (``OPENCL`` here,
``render_cuda.CUDA`` for CUDA C); the kernels' structure and arguments are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fuel.compiler.kernel_ir import LoopKernel, Value, collapse, stride_pattern
from fuel.compiler.render_expression import Dialect, render_value, renders
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.layout import contiguous_strides

# The type each dtype is computed in; ``STORAGE_TYPES`` where it differs in memory. Half types
# are storage only: read into float (vload_half, bf16_load), rounded to nearest even on store,
# so they render in one-op kernels (a fused chain would skip the rounding between its ops, so
# fusion leaves them out: FUSED_DTYPES).
OPENCL_TYPES: dict[DType, str] = {
    dt.bool_: "bool", dt.uint8: "uchar", dt.int8: "char", dt.int16: "short", dt.int32: "int",
    dt.int64: "long", dt.float16: "float", dt.bfloat16: "float", dt.float32: "float",
    dt.float64: "double",
}
STORAGE_TYPES = {dt.bool_: "uchar", dt.float16: "half", dt.bfloat16: "ushort"}
FUSED_DTYPES = frozenset(OPENCL_TYPES) - {dt.float16, dt.bfloat16}
OPENCL_DIALECT = Dialect(
    types=OPENCL_TYPES,
    unsigned_types={dt.uint8: "uchar", dt.uint16: "ushort", dt.uint32: "uint",
                    dt.uint64: "ulong"},
    float_suffix="", round_function="rint", integer_suffix="L")
KERNEL_NAME = "fuel_kernel"

_HELPERS = """#pragma OPENCL FP_CONTRACT OFF
inline float fuel_remainder_float(float a, float b) {
  float r = fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
inline long fuel_power_integer(long base, long exponent) {
  if (exponent < 0) return base == 1 ? 1 : (base == -1 ? ((exponent & 1) ? -1 : 1) : 0);
  ulong result = 1, square = (ulong)base;
  for (ulong e = (ulong)exponent; e; e >>= 1) { if (e & 1) result *= square; square *= square; }
  return (long)result; }
"""
_DOUBLE_HELPERS = """inline double fuel_remainder_double(double a, double b) {
  double r = fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
"""


@dataclass(frozen=True)
class Language:
    """How one GPU C-family language spells what the shared kernel walk writes: the compute
    and storage types, the pointer and scratch qualifiers, the kernel's head, the work-item
    indices, the barrier, the helpers and the half types' loads and stores (``OPENCL``;
    ``render_cuda.CUDA``)."""

    name: str
    dialect: Dialect
    types: Mapping[DType, str]  # the type a value of each dtype is computed in
    storage_types: Mapping[DType, str]  # where the type in memory differs
    index: str  # the 64-bit signed integer type of indices and arguments
    pointer: str  # the qualifier of a kernel's buffer pointers ("__global ")
    local: str  # the qualifier of a pointer into the work-group's scratch ("__local ")
    kernel: str  # what precedes the kernel's name
    global_id: str
    group_id: str
    local_id: str
    local_size: str
    barrier: str
    helpers: Callable[[bool], str]  # the helpers, given whether float64 is used
    # (kernel, load, index) -> element ``index`` of ``in<load>`` in its compute type
    load: Callable[[LoopKernel, int, str], str]
    # (kernel, store, pointer, index) -> the statement writing the store's value
    store: Callable[[LoopKernel, int, str, str], str]
    scratch_parameter: str  # a work-group-per-row kernel's extra parameter ("" if none)
    scratch_declaration: str  # its first statement, declaring ``scratch`` ("" if none)
    # (kernel, value) -> a computed value's expression, where the language rounds values of
    # storage-only dtypes where they are computed (None: ``render_value`` as it is)
    compute: Callable[[LoopKernel, Value], str] | None = None

    def storage(self, dtype: DType) -> str:
        return self.storage_types.get(dtype, self.types[dtype])


@dataclass(frozen=True, slots=True)
class OpenClProgram:
    """A rendered kernel: its source, whether it needs cl_khr_fp64, its arguments for this
    shape and layout (int64 values; ``offsets`` are where each operand's element offset goes,
    loads then stores), the collapsed sizes (for the launch) and the local memory a
    work-group-per-row launch needs per work-item."""

    source: str
    fp64: bool
    arguments: tuple[int, ...]
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    scratch: int = 8  # bytes of local memory per work-item (work-group-per-row variant)

    def bind(self, offsets) -> tuple[int, ...]:
        """The arguments with each operand's element offset (loads, then stores)."""
        values = list(self.arguments)
        for position, offset in zip(self.offsets, offsets):
            values[position] = offset
        return tuple(values)


def rendered_dtypes(fp64: bool) -> frozenset[DType]:
    """The dtypes fused kernels take on a device with (or without) double precision."""
    return frozenset(d for d in FUSED_DTYPES if fp64 or d is not dt.float64)


def helpers(fp64: bool) -> str:
    """The pragmas and helper functions rendered values may call."""
    return "\n".join(["#pragma OPENCL EXTENSION cl_khr_fp64 : enable" if fp64 else "", _HELPERS,
                      _DOUBLE_HELPERS if fp64 else ""])


def renders_alone(op: str, dtypes: tuple[DType, ...]) -> bool:
    """Whether a one-op kernel of ``op`` over ``dtypes`` renders: what fused kernels take,
    plus half types and integer powers."""
    if op == "pow" and dtypes[0].is_integer:
        return all(d is dtypes[0] for d in dtypes)
    floats = {dt.float16: dt.float32, dt.bfloat16: dt.float32}
    return renders(op, tuple(floats.get(d, d) for d in dtypes), FUSED_DTYPES)


def load_expression(kernel: LoopKernel, load: int, index: str) -> str:
    """Element ``index`` of load ``load`` (pointer ``in<load>``), in its compute type."""
    dtype = kernel.loads[load].dtype
    if dtype is dt.float16:
        return f"vload_half({index}, in{load})"
    if dtype is dt.bfloat16:
        return f"bf16_load(in{load}[{index}])"
    return f"in{load}[{index}]"


def store_statement(kernel: LoopKernel, store: int, pointer: str, index: str) -> str:
    """Write store ``store``'s value to ``pointer[index]``; half types round to nearest even
    (from double when the value is a cast of a float64, so it rounds once)."""
    target = kernel.stores[store]
    value = kernel.values[target.value]
    name = f"v{target.value}"
    if target.dtype is dt.float16:
        if value.op == "cast" and kernel.values[value.args[0]].dtype is dt.float64:
            name = f"v{value.args[0]}"
        return f"vstore_half_rte({name}, {index}, {pointer});"
    if target.dtype is dt.bfloat16:
        return f"{pointer}[{index}] = bf16_store({name});"
    return f"{pointer}[{index}] = {name};"


OPENCL = Language(
    name="opencl", dialect=OPENCL_DIALECT, types=OPENCL_TYPES, storage_types=STORAGE_TYPES,
    index="long", pointer="__global ", local="__local ", kernel="__kernel void",
    global_id="get_global_id(0)", group_id="get_group_id(0)", local_id="get_local_id(0)",
    local_size="get_local_size(0)", barrier="barrier(CLK_LOCAL_MEM_FENCE)",
    helpers=helpers, load=load_expression, store=store_statement,
    scratch_parameter=", __local uchar *scratch", scratch_declaration="")


def element_lines(kernel: LoopKernel, indices, load_index, indent: str,
                  language: Language = OPENCL) -> list[str]:
    """Declarations of the values ``indices`` (loads at ``load_index(load)``)."""
    lines = []
    for i in indices:
        value = kernel.values[i]
        if value.op == "load":
            expression = language.load(kernel, value.load, load_index(value.load))
        elif language.compute is not None:
            expression = language.compute(kernel, value)
        else:
            expression = render_value(kernel, value, [], language.dialect)
        lines.append(f"{indent}const {language.types[value.dtype]} v{i} = {expression};")
    return lines


def render_opencl(kernel: LoopKernel, language: Language = OPENCL) -> OpenClProgram:
    """The OpenCL C (or ``language``'s) of the elementwise ``kernel`` (one with a row is
    ``render_opencl_rows``'s, which builds on this module)."""
    if kernel.reduced:
        raise ValueError(f"{kernel.name} has a row: render it with render_opencl_rows")
    return _render_elements(kernel, language)


def uses_double(kernel: LoopKernel) -> bool:
    return any(v.dtype is dt.float64 for v in kernel.values) or any(
        load.dtype is dt.float64 for load in kernel.loads)


def storage(dtype: DType) -> str:
    return STORAGE_TYPES.get(dtype, OPENCL_TYPES[dtype])


def head(kernel: LoopKernel, argument_count: int, scratch: bool = False,
         language: Language = OPENCL) -> list[str]:
    """Helpers, the argument struct and the kernel's signature (with the work-group's
    ``scratch`` memory where asked)."""
    lines = [language.helpers(uses_double(kernel)),
             f"typedef struct {{ {language.index} v[{argument_count}]; }} fuel_arguments_t;"]
    parameters = [f"{language.pointer}const {language.storage(load.dtype)} *data{k}"
                  for k, load in enumerate(kernel.loads)]
    parameters += [f"{language.pointer}{language.storage(store.dtype)} *result{k}"
                   for k, store in enumerate(kernel.stores)]
    parameters.append("const fuel_arguments_t arguments"
                      + (language.scratch_parameter if scratch else ""))
    lines.append(f"{language.kernel} {KERNEL_NAME}(" + ", ".join(parameters) + ") {")
    if scratch and language.scratch_declaration:
        lines.append(language.scratch_declaration)
    return lines


def _bases(kernel: LoopKernel, outer_dims: int, dims: int, index: str, sizes_at: int,
           patterns: list[str], language: Language) -> list[str]:
    """Each load's pointer at outer index ``index`` decoded over the ``outer_dims`` outer sizes
    (argument ``sizes_at`` on), and a strided load's inner step. A load's arguments are its
    ``dims`` strides then its offset, after the sizes."""
    loads = range(len(kernel.loads))
    first = sizes_at + dims  # where the loads' arguments start

    def stride(k: int, d: int) -> str:
        return f"arguments.v[{first + k * (dims + 1) + d}]"

    long = language.index
    lines = [f"  {long} base{k} = arguments.v[{first + k * (dims + 1) + dims}];" for k in loads]
    if outer_dims:
        lines.append(f"  {long} rest = {index};")
        for d in range(outer_dims - 1, -1, -1):
            lines.append(f"  {{ const {long} size = arguments.v[{sizes_at + d}], "
                         "position = rest % size; rest /= size;")
            lines += [f"    base{k} += position * {stride(k, d)};" for k in loads]
            lines.append("  }")
    for k, load in enumerate(kernel.loads):
        lines.append(f"  {language.pointer}const {language.storage(load.dtype)} *in{k} = "
                     f"data{k} + base{k};")
        if patterns[k] == "strided":
            lines.append(f"  const {long} step{k} = {stride(k, dims - 1)};")
    return lines


def _value_lines(kernel: LoopKernel, indices, patterns: list[str], indent: str,
                 language: Language) -> list[str]:
    return element_lines(kernel, indices, lambda load: {
        "dense": "i", "broadcast": "0", "strided": f"i * step{load}"}[patterns[load]], indent,
        language)


def _arguments(sizes, strides: list[tuple[int, ...]], kernel: LoopKernel, lead: tuple[int, ...]
               ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(arguments, where the offsets go): lead, sizes, each load's strides and offset, each
    store's offset."""
    flat = [*lead, *sizes]
    offsets = []
    for load, own in zip(kernel.loads, strides):
        flat += own
        offsets.append(len(flat))
        flat.append(load.offset)
    for _ in kernel.stores:
        offsets.append(len(flat))
        flat.append(0)
    return tuple(flat), tuple(offsets)


def _store_offset(kernel: LoopKernel, position: int, argument_count: int) -> str:
    return f"arguments.v[{argument_count - len(kernel.stores) + position}]"


def _render_elements(kernel: LoopKernel, language: Language) -> OpenClProgram:
    output_strides = contiguous_strides(kernel.shape)
    sizes, strides = collapse(kernel.shape, [load.strides for load in kernel.loads]
                              + [output_strides] * len(kernel.stores))
    depth = len(sizes)
    load_strides = strides[:len(kernel.loads)]
    patterns = [stride_pattern(s[-1:]) for s in load_strides]
    count = 1
    for size in sizes:
        count *= size
    arguments, offsets = _arguments(sizes, load_strides, kernel, (count,))
    long = language.index
    lines = head(kernel, len(arguments), language=language)
    lines.append(f"  const {long} flat = min(({long}){language.global_id}, "
                 "arguments.v[0] - 1);")
    if depth > 1:
        lines.append(f"  const {long} inner = arguments.v[{depth}];")
        lines.append(f"  const {long} i = flat % inner;")
        lines += _bases(kernel, depth - 1, depth, "flat / inner", 1, patterns, language)
    else:
        lines.append(f"  const {long} i = flat;")
        lines += _bases(kernel, 0, depth, "0", 1, patterns, language)
    lines += _value_lines(kernel, range(len(kernel.values)), patterns, "  ", language)
    for k in range(len(kernel.stores)):
        lines.append("  " + language.store(
            kernel, k, f"result{k}", f"{_store_offset(kernel, k, len(arguments))} + flat"))
    lines += ["}", ""]
    return OpenClProgram("\n".join(lines), uses_double(kernel), arguments, offsets,
                         tuple(sizes))
