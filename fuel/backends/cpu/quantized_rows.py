"""The many-row quantized matmul (``quantized_rows.c``): batched decode steps and short prompt
chunks on the 32-value integer formats (q4_0, q4_1, q8_0; iq4_nl: q4_0's layout, its nibbles
through the non-linear table; q5_0, q5_1), from ``ROWS_MIN`` activation rows
up to the BLAS switch (``quantized.BLAS_ROWS``). Its library is the format's whole quantized
library with this tile added, and it computes the same numbers bit for bit (the same integer
lane sums, float steps in the same order), so ``quantized.py``'s rule hands it those launches
and the judge may time it against the one-row-tile kernel as a variant of the same op.

Why: a step of B rows should cost far less than B one-row steps. quantized.c's many-row tile
(one weight row by four activation rows) spends time on per-pair scale products, offsets and
activation loads; this tile shares them over two weight rows by eight activation rows: 0.84-
0.89x its CPU time (``bench/serve.py --kernels``). The rest, two 16-bit multiply-adds, a
conversion and an fma per weight block and pair of rows, is fixed by the op's numerics.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fuel.backends.cpu.c_library import required_entry_point
from fuel.ir import dtype as dt
from fuel.ir.dtype import QuantizedDType

SOURCE = Path(__file__).with_name("quantized_rows.c")
WIDE_SOURCE = Path(__file__).with_name("quantized_rows_wide.c")  # its AVX-512 tile, placed first
# The formats this tile serves (quantized.c's 32-value integer formats with byte-permute unpacking).
FORMATS: frozenset = frozenset({dt.q4_0, dt.q4_1, dt.q8_0, dt.iq4_nl, dt.q5_0, dt.q5_1})
# From this many activation rows the rows tile runs (one row: quantized.c's decode tile), up
# to quantized.BLAS_ROWS.
ROWS_MIN = 2


def tile_source() -> str:
    """This tile's C: the wide (AVX-512) tile, then the others."""
    return WIDE_SOURCE.read_text() + SOURCE.read_text()


def source_of(library_source: str) -> str:
    """The library's C: a format's quantized library (``library_source``, quantized.py's
    ``source_of``) with its entry renamed, then the wide tile and this tile."""
    return ("#define fuel_kernel fuel_quantized_kernel\n" + library_source
            + "#undef fuel_kernel\n" + tile_source())


def serves(dtype, rows: int) -> bool:
    """Whether this tile serves a matmul of ``rows`` activation rows on ``dtype`` (quantized.py
    sends it those below its BLAS switch)."""
    return dtype in FORMATS and rows >= ROWS_MIN


def library(dtype: QuantizedDType, library_source: Callable[[], str]):
    """``dtype``'s rows library (built or fetched from the kernel cache once; its C from
    ``library_source()``, the format's library); a KernelError where the machine has no
    working C compiler."""
    return required_entry_point(f"quantized_rows_{dtype.name}",
                                lambda: source_of(library_source()), openmp=True)
