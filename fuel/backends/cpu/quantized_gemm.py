"""The prompt-shape quantized matmul (``quantized_gemm.c``): an integer GEMM for every block
format (16-bit activation codes by the weight codes in vpdpwssd / madd, lanes over activation
rows), from ``MIN_ROWS`` activation rows. Its library is the format's whole quantized library
with this tile added; ``quantized.py`` sends it the prompt shapes where ``serves`` says the
build has the tile (AVX2 or AVX-512), else they de-quantize tiles and multiply through BLAS.

Why: the de-quantize + BLAS path multiplies in float32 (16 lanes per FMA at best) after writing
every weight out as floats; the integer tile multiplies two 16-bit pairs per 32-bit lane (32
products per AVX-512 instruction) straight from the codes, each weight row unpacked once per
launch. Numbers: the op's (ops.py above ACTIVATION_BLOCK); not bit-identical to the decode
tiles (another order of float steps), within float32 rounding of the exact product.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

from fuel.backends.cpu.c_library import required_entry_point
from fuel.ir.dtype import QuantizedDType
from fuel.ir.errors import KernelError

SOURCE = Path(__file__).with_name("quantized_gemm.c")
# From this many activation rows the library's matmul runs the integer GEMM (below it, the
# format library's own tiles: the judge's variants there must agree bit for bit). The GEMM's
# float steps run in another order than the tiles', so a row's bits depend on which one ran:
# it starts where de-quantize + BLAS did (quantized.BLAS_ROWS), above the server's steps (its
# token budget, 64 rows by default), so a request batched with others still gets the bits it
# gets alone. From 32 rows prompts would be faster still (at 128 rows the GEMM takes 0.51-0.63x
# the time of de-quantize + BLAS, which the tiles only match between 64 and 96 rows), at the
# price of that guarantee.
MIN_ROWS = 96
PROBE = 5  # the entry's operation: whether this build has the tile
_served: dict = {}


def source_of(library_source: str) -> str:
    """The library's C: a format's quantized library (``library_source``, quantized.py's
    ``source_of``) with its entry renamed, then this tile."""
    return (f"#define GEMM_MIN_ROWS {MIN_ROWS}\n#define fuel_kernel fuel_quantized_kernel\n"
            + library_source + "#undef fuel_kernel\n" + SOURCE.read_text())


def library(dtype: QuantizedDType, library_source: Callable[[], str]):
    """``dtype``'s GEMM library (built or fetched from the kernel cache once); a KernelError
    where the machine has no working C compiler."""
    return required_entry_point(f"quantized_gemm_{dtype.name}",
                                lambda: source_of(library_source()), openmp=True)


def serves(dtype: QuantizedDType, rows: int, library_source: Callable[[], str]) -> bool:
    """Whether ``dtype``'s GEMM library runs a matmul of ``rows`` activation rows on its
    integer tile (asked of the build once: no AVX2, or float weights, hand it back)."""
    if rows < MIN_ROWS:
        return False
    served = _served.get(dtype)
    if served is None:
        try:
            function = library(dtype, library_source)
        except KernelError:
            served = False
        else:
            answer = ctypes.c_int64(0)
            data = (ctypes.c_void_p * 1)(ctypes.addressof(answer))
            function(data, (ctypes.c_int64 * 1)(PROBE), None)
            served = bool(answer.value)
        _served[dtype] = served
    return served
