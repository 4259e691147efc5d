"""Render a LoopKernel into CUDA C: the GPU C family's walk (``render_opencl`` and
``render_opencl_rows``) spelled for CUDA, compiled by NVRTC (``fuel.compiler.nvrtc``).

The kernels have the OpenCL renderings' structure and arguments: ``extern "C" __global__ void
fuel_kernel`` takes each load's pointer, each store's, then the by-value struct of 64-bit
arguments (``OpenClProgram.arguments``), so a rendered source depends only on the DAG, the
loop depth and the operands' row-stride patterns, and one compiled module serves every shape.
Elementwise kernels run a thread per element (a rounded-up grid clamps to the last element),
row kernels a thread per row or a block per row with trees in shared memory
(``extern __shared__``, sized at launch), scans a thread per row.

Semantics are the C renderer's: exact ops are bit-identical to the CPU's (NVRTC's
``--fmad=false`` keeps multiplies and adds apart; divides and square roots are correctly
rounded by default). float16 and bfloat16 are storage types (``unsigned short``) computed in
float: each value of a half dtype is rounded to it where it is computed (float16 through the
``cvt.rn`` instructions, bfloat16 to nearest even on its bits), so a fused half chain gives the
unfused bits and fusion takes them; a cast from float64 or an integer rounds once, straight to
the half type (bfloat16 through float rounded to odd). No header is included: NVRTC needs
none of the CUDA toolkit's.
"""

from __future__ import annotations

from fuel.compiler.kernel_ir import LoopKernel, Value
from fuel.compiler.legalize import Legalization
from fuel.compiler.render_expression import Dialect, render_value
from fuel.compiler.render_opencl import KERNEL_NAME, Language, OpenClProgram, render_opencl
from fuel.compiler.render_opencl_rows import render_opencl_rows
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType

__all__ = ["CUDA", "CUDA_DTYPES", "CUDA_OPTIONS", "KERNEL_NAME", "render_cuda", "renders"]

# The type each dtype is computed in; ``STORAGE_TYPES`` where it differs in memory.
CUDA_TYPES: dict[DType, str] = {
    dt.bool_: "bool", dt.uint8: "unsigned char", dt.int8: "signed char", dt.int16: "short",
    dt.int32: "int", dt.int64: "long long", dt.float16: "float", dt.bfloat16: "float",
    dt.float32: "float", dt.float64: "double",
}
STORAGE_TYPES = {dt.bool_: "unsigned char", dt.float16: "unsigned short",
                 dt.bfloat16: "unsigned short"}
# Every dtype renders, fused or alone (the half types rounded where computed).
CUDA_DTYPES = frozenset(CUDA_TYPES)
CUDA_DIALECT = Dialect(
    types=CUDA_TYPES,
    unsigned_types={dt.uint8: "unsigned char", dt.uint16: "unsigned short",
                    dt.uint32: "unsigned int", dt.uint64: "unsigned long long"},
    float_suffix="f", round_function="rint", integer_suffix="LL")
# NVRTC's options for every kernel (the target architecture is added per device): no
# contraction of multiplies and adds into FMAs (exact ops stay bit-identical to the CPU's).
CUDA_OPTIONS = ("--std=c++17", "--fmad=false")
# What the IR is rewritten into before rendering: integer powers render (a helper).
LEGALIZATION = Legalization(integer_pow=True)

_HELPERS = r"""#define FUEL_DEVICE static __device__ __forceinline__
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fc00000)
#endif
FUEL_DEVICE float fuel_remainder_float(float a, float b) {
  float r = fmodf(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
FUEL_DEVICE double fuel_remainder_double(double a, double b) {
  double r = fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
FUEL_DEVICE long long fuel_power_integer(long long base, long long exponent) {
  if (exponent < 0) return base == 1 ? 1 : (base == -1 ? ((exponent & 1) ? -1 : 1) : 0);
  unsigned long long result = 1, square = (unsigned long long)base;
  for (unsigned long long e = (unsigned long long)exponent; e; e >>= 1) {
    if (e & 1) result *= square; square *= square; }
  return (long long)result; }
FUEL_DEVICE float fuel_f16_load(unsigned short bits) {
  float value; asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits)); return value; }
FUEL_DEVICE unsigned short fuel_f16_bits(float value) {
  unsigned short bits; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value)); return bits; }
FUEL_DEVICE unsigned short fuel_f16_bits_from_double(double value) {
  unsigned short bits; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(bits) : "d"(value)); return bits; }
FUEL_DEVICE float fuel_f16_round(float value) { return fuel_f16_load(fuel_f16_bits(value)); }
FUEL_DEVICE float fuel_f16_from_double(double value) {
  return fuel_f16_load(fuel_f16_bits_from_double(value)); }
FUEL_DEVICE float fuel_bf16_load(unsigned short bits) {
  return __uint_as_float(((unsigned int)bits) << 16); }
FUEL_DEVICE unsigned short fuel_bf16_bits(float value) {
  unsigned int word = __float_as_uint(value);
  if ((word & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((word >> 16) | 0x40u);
  word += 0x7fffu + ((word >> 16) & 1u); return (unsigned short)(word >> 16); }
FUEL_DEVICE float fuel_bf16_round(float value) { return fuel_bf16_load(fuel_bf16_bits(value)); }
FUEL_DEVICE float fuel_bf16_from_double(double value) {
  float narrow = __double2float_rz(value);
  if ((double)narrow != value && value == value)
    narrow = __uint_as_float(__float_as_uint(narrow) | 1u);
  return fuel_bf16_round(narrow); }
"""


def helpers(fp64: bool) -> str:
    """The macros and device functions rendered values may call (float64 needs nothing)."""
    return _HELPERS


def load_expression(kernel: LoopKernel, load: int, index: str) -> str:
    """Element ``index`` of load ``load`` (pointer ``in<load>``), in its compute type."""
    dtype = kernel.loads[load].dtype
    if dtype is dt.float16:
        return f"fuel_f16_load(in{load}[{index}])"
    if dtype is dt.bfloat16:
        return f"fuel_bf16_load(in{load}[{index}])"
    return f"in{load}[{index}]"


def store_statement(kernel: LoopKernel, store: int, pointer: str, index: str) -> str:
    """Write store ``store``'s value to ``pointer[index]`` (a half value is already rounded:
    its bits convert exactly)."""
    target = kernel.stores[store]
    name = f"v{target.value}"
    if target.dtype is dt.float16:
        return f"{pointer}[{index}] = fuel_f16_bits({name});"
    if target.dtype is dt.bfloat16:
        return f"{pointer}[{index}] = fuel_bf16_bits({name});"
    return f"{pointer}[{index}] = {name};"


def compute(kernel: LoopKernel, value: Value) -> str:
    """A computed value's expression; one of a half type rounded to it where it is computed
    (a cast from float64 or an integer straight from double, once)."""
    dtype = value.dtype
    if dtype not in (dt.float16, dt.bfloat16) or value.op == "where":
        return render_value(kernel, value, [], CUDA_DIALECT)
    name = "f16" if dtype is dt.float16 else "bf16"
    if value.op == "cast":
        source = kernel.values[value.args[0]].dtype
        if source is dtype:
            return f"v{value.args[0]}"
        if source is dt.float64 or not source.is_floating:
            return f"fuel_{name}_from_double((double)v{value.args[0]})"
        return f"fuel_{name}_round((float)v{value.args[0]})"
    return f"fuel_{name}_round({render_value(kernel, value, [], CUDA_DIALECT)})"


CUDA = Language(
    name="cuda", dialect=CUDA_DIALECT, types=CUDA_TYPES, storage_types=STORAGE_TYPES,
    index="long long", pointer="", local="", kernel='extern "C" __global__ void',
    global_id="((long long)blockIdx.x * blockDim.x + threadIdx.x)",
    group_id="((long long)blockIdx.x)", local_id="((long long)threadIdx.x)",
    local_size="((long long)blockDim.x)", barrier="__syncthreads()",
    helpers=helpers, load=load_expression, store=store_statement, scratch_parameter="",
    scratch_declaration="  extern __shared__ long long fuel_scratch[];\n"
                        "  unsigned char *scratch = (unsigned char *)fuel_scratch;",
    compute=compute)


def renders(op: str, dtypes: tuple[DType, ...]) -> bool:
    """Whether ``op`` over ``dtypes`` (inputs, then output) renders in CUDA C."""
    return LEGALIZATION.renders(op, dtypes, CUDA_DTYPES)


def render_cuda(kernel: LoopKernel, group: bool = False) -> OpenClProgram:
    """The CUDA C of ``kernel``: a kernel with a row a block per row (``group``) or a thread
    per row, an elementwise one a thread per element. The program's ``scratch`` is the
    shared memory a block-per-row launch needs per thread."""
    if kernel.reduced:
        return render_opencl_rows(kernel, group, CUDA)
    return render_opencl(kernel, CUDA)
