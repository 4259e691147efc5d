"""The CUDA kernels run on the host, without a GPU: each rendered (or hand-written) CUDA C
source compiled by the C++ compiler against a shim (``__global__`` as nothing, the thread
indices as globals, CUDA's intrinsics as their host equivalents, the half helpers' inline PTX
as ``_Float16`` conversions with the same rounding) and launched serially, block by block and
thread by thread. So the renderer's CUDA output (types, casts, half roundings, literals, the
argument struct) is checked against the CPU kernels bit for bit where the suite asks for it.

Only launches without a barrier can run serially: elementwise kernels, a thread per row, and
the hand-written index kernels; the block-per-row renderings (trees in shared memory) are
left to a GPU. Math functions are glibc's, not CUDA's (whose ulp bounds differ), within the
suite's tolerances either way.
"""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from fuel.backends.cuda.kernels import THREADS, RenderedKernel, SourceKernel, blocks
from fuel.compiler.render_cuda import helpers, render_cuda
from fuel.extras import cache_root

SHIM = r"""
#include <cmath>
#include <math.h>
#include <cstring>
#include <cstdint>
#define __global__
#define __device__
#define __forceinline__ inline
struct fuel_dim { unsigned int x, y, z; };
static fuel_dim blockIdx, threadIdx, blockDim;
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline float __int_as_float(int v) { float f; memcpy(&f, &v, 4); return f; }
static inline float __uint_as_float(unsigned int v) { float f; memcpy(&f, &v, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int v; memcpy(&v, &f, 4);
  return v; }
static inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8);
  return d; }
static inline float __double2float_rz(double d) {
  float f = (float)d; if (std::fabs((double)f) > std::fabs(d)) f = std::nextafterf(f, 0.0f);
  return f; }
static inline int atomicCAS(int *address, int compare, int value) {
  const int old = *address; if (old == compare) *address = value; return old; }
"""
# The helpers with the inline PTX of the half conversions as _Float16 conversions (one
# rounding to nearest even, from float or straight from double, as cvt.rn does).
HOST_HELPERS = helpers(False).replace(
    'float value; asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits)); return value;',
    "_Float16 half; memcpy(&half, &bits, 2); return (float)half;").replace(
    'unsigned short bits; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value)); '
    "return bits;",
    "_Float16 half = (_Float16)value; unsigned short bits; memcpy(&bits, &half, 2); "
    "return bits;").replace(
    'unsigned short bits; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(bits) : "d"(value)); '
    "return bits;",
    "_Float16 half = (_Float16)value; unsigned short bits; memcpy(&bits, &half, 2); "
    "return bits;")
assert "asm(" not in HOST_HELPERS, "the device helpers changed: update HOST_HELPERS"


def _unit(kernels: list[tuple[str, int]]) -> str:
    """One C++ unit: each (source, pointer count) in a namespace with a launcher
    ``fuel_launch_<n>(pointers, arguments, blocks, threads)`` running it serially."""
    prelude = helpers(False)
    parts = [SHIM, HOST_HELPERS]
    for n, (source, count) in enumerate(kernels):
        body = source[len(prelude):] if source.startswith(prelude) else source
        body = body.replace("void fuel_kernel(", f"void fuel_kernel_{n}(")
        pointers = ", ".join(["void *"] * count)
        passed = ", ".join(f"p[{k}]" for k in range(count))
        parts.append(f"""namespace fuel_{n} {{
{body}
extern "C" void fuel_launch_{n}(void **p, const long long *values, long long grid,
                                 long long threads) {{
  fuel_arguments_t a; memcpy(&a, values, sizeof a);
  using kernel_t = void (*)({pointers}, fuel_arguments_t);
  const kernel_t kernel = (kernel_t)(void *)&fuel_kernel_{n};
  blockDim.x = (unsigned int)threads;
  for (long long b = 0; b < grid; ++b)
    for (long long t = 0; t < threads; ++t) {{
      blockIdx.x = (unsigned int)b; threadIdx.x = (unsigned int)t;
      kernel({passed}, a);
    }}
}}
}}""")
    return "\n".join(parts)


_LIBRARIES: dict[str, ctypes.CDLL] = {}


def build(kernels: list[tuple[str, int]]) -> ctypes.CDLL:
    """The host library of ``kernels`` (cached on disk by the unit's digest)."""
    unit = _unit(kernels)
    key = hashlib.blake2b(unit.encode(), digest_size=16).hexdigest()
    if key in _LIBRARIES:
        return _LIBRARIES[key]
    folder = cache_root() / "cuda-emulation"
    folder.mkdir(parents=True, exist_ok=True)
    library = folder / f"{key}.so"
    if not library.exists():
        with tempfile.TemporaryDirectory() as scratch:
            source = Path(scratch) / "unit.cpp"
            source.write_text(unit)
            built = Path(scratch) / "unit.so"
            done = subprocess.run(
                ["g++", "-std=c++17", "-O0", "-shared", "-fPIC", "-ffp-contract=off",
                 "-fwrapv", "-w", "-o", str(built), str(source)],
                capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"the host compiler rejected the emulated CUDA:\n"
                                   f"{done.stderr[:4000]}")
            built.replace(library)
    _LIBRARIES[key] = found = ctypes.CDLL(str(library))
    return found


class Memory:
    """A host array standing in for a device storage (``buffer.ptr`` is its address)."""

    def __init__(self, array: np.ndarray, backend) -> None:
        self.array = np.ascontiguousarray(array).reshape(-1)
        self.dtype = None
        self.buffer = SimpleNamespace(ptr=self.array.ctypes.data)
        self.backend = backend
        self.device = None


class Context:
    """What the hand-written kernels' host functions ask of a device context."""

    def __init__(self) -> None:
        self.fault = np.zeros(4, np.int32)
        self.fault_buffer = SimpleNamespace(ptr=self.fault.ctypes.data)
        self.codes: dict[int, tuple] = {}

    def fault_code(self, what, dim, size) -> int:
        self.codes[len(self.codes) + 1] = (what, dim, size)
        return len(self.codes)

    def context(self, device):
        return self


def launches(kernel, inputs, outputs, layouts, params) -> list[tuple[str, list, list, int]]:
    """(source, pointers, arguments, threads in all) of each launch of one call, the
    serial rendering of every LoopKernel."""
    found = []
    if isinstance(kernel, SourceKernel):
        launch = kernel.host(kernel, inputs, outputs, layouts, params)
        steps = [] if launch is None else [(kernel.source, launch)]
        copy = getattr(kernel, "copy", None)  # index_copy's copy of the target comes first
        if copy is not None and (outputs[0].buffer is not inputs[0].buffer
                                 or layouts[0] != layouts[-1]):
            found += launches(copy, inputs[:1], outputs, [layouts[0], layouts[-1]], None)
        for source, (count, pointers, arguments) in steps:
            found.append((source, pointers, arguments, count))
        return found
    assert isinstance(kernel, RenderedKernel)
    for loop, ins, outs, lays in kernel.steps(inputs, outputs, layouts, params):
        if any(size == 0 for size in loop.rows_shape):
            continue
        program = render_cuda(loop, False)
        arguments = program.bind([layout.offset for layout in lays])
        count = 1
        for size in (loop.rows_shape if loop.reduced else ()):
            count *= size
        if not loop.reduced:
            count = program.arguments[0]
        found.append((program.source, [s.buffer.ptr for s in (*ins, *outs)], list(arguments),
                      count))
    return found


def run(library: ctypes.CDLL, index: int, pointers, arguments, count: int) -> None:
    """Launch kernel ``index`` of ``library`` over ``count`` threads (whole blocks)."""
    values = np.array(arguments, np.int64)
    addresses = (ctypes.c_void_p * len(pointers))(*pointers)
    function = getattr(library, f"fuel_launch_{index}")
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_longlong]
    function(addresses, values.ctypes.data, blocks(count), THREADS)
