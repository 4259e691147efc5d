"""The many-row quantized matmul (``quantized_rows.c``): batched decode steps and short prompt
chunks on the 32-value integer formats (q4_0, q4_1, q8_0), from ``ROWS_MIN`` activation rows
up to the BLAS switch (``quantized.BLAS_ROWS``). Its library is the format's whole quantized
library with this tile added, and it computes the same numbers bit for bit (the same integer
lane sums, float steps in the same order), so ``quantized.py``'s rule hands it those launches
and the judge may time it against the one-row-tile kernel as a variant of the same op.

Why: a step of B rows should cost far less than B one-row steps. quantized.c's many-row tile
(one weight row by four activation rows) spends its time on per-pair scale products, offsets
and activation loads; this tile shares them over four weight rows by four activation rows
(figures: ``bench/serve.py --kernels``).
"""

from __future__ import annotations

from pathlib import Path

from fuel.backends.cpu.c_library import entry_point
from fuel.ir import dtype as dt
from fuel.ir.dtype import QuantizedDType
from fuel.ir.errors import KernelError

SOURCE = Path(__file__).with_name("quantized_rows.c")
# The formats this tile serves (quantized.c's 32-value integer formats).
FORMATS: frozenset = frozenset({dt.q4_0, dt.q4_1, dt.q8_0})
# From this many activation rows the rows tile runs (one row: quantized.c's decode tile).
ROWS_MIN = 2


def source_of(dtype: QuantizedDType) -> str:
    """The library's C: ``dtype``'s quantized library with its entry renamed, then this tile."""
    from fuel.backends.cpu import quantized

    return ("#define fuel_kernel fuel_quantized_kernel\n" + quantized.source_of(dtype)
            + "#undef fuel_kernel\n" + SOURCE.read_text())


def serves(dtype, rows: int) -> bool:
    """Whether a matmul of ``rows`` activation rows on ``dtype`` runs here."""
    from fuel.backends.cpu.quantized import BLAS_ROWS

    return dtype in FORMATS and ROWS_MIN <= rows < BLAS_ROWS


def library(dtype: QuantizedDType):
    """``dtype``'s rows library (built or fetched from the kernel cache once); a KernelError
    where the machine has no working C compiler."""
    function = entry_point(f"quantized_rows_{dtype.name}", lambda: source_of(dtype),
                           openmp=True)
    if function is None:
        from fuel.compiler import toolchain

        raise KernelError(f"cannot compile quantized_rows_{dtype.name}: "
                          f"{toolchain.unavailable_reason()}")
    return function
