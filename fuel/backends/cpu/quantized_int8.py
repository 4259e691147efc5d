"""quantized_matmul_int8 (the serving precision, ``ops.QUANTIZED_MATMUL_INT8``) on the 32-value
integer formats q4_0, q4_1 and q8_0: ``quantized_int8.c``, one library per format, any row
count (a decode tile for one activation row, a rows tile for batched steps and prompt chunks),
AVX-512 VNNI (vpdpbusd), AVX2 (maddubs) or portable C, threads by OpenMP over weight rows.
Each output is computed by the same float steps in every tile and build, so a row's result is
the same bits whatever rows share its launch (the serving engine's batching promise).

Every other format runs the op's decomposition (round_int8_blocks, dequantize, matmul): exact
to the rule, slower.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from fuel.backends.cpu.c_library import address, required_entry_point
from fuel.backends.cpu.quantized import HALF_SOURCE
from fuel.compiler.foreign import ForeignCall
from fuel.dispatch.kernel import KernelList, Launcher, Variant
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.dtype import QuantizedDType
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

KERNELS = KernelList(BackendId.CPU, "c")
SOURCE = Path(__file__).with_name("quantized_int8.c")
FORMATS: tuple[QuantizedDType, ...] = (dt.q4_0, dt.q4_1, dt.q8_0)
# Weights of at least this many bytes are split over threads.
PARALLEL_BYTES = 1 << 16


def source_of(dtype: QuantizedDType, prefix: str = "") -> str:
    """The C of ``dtype``'s library (``prefix`` first: a test's NO_AVX512 or PORTABLE)."""
    return (f"{prefix}#define FORMAT_{dtype.name.upper()} 1\n"
            f"#define BLOCK_BYTES {dtype.block_bytes}\n" + HALF_SOURCE.read_text()
            + SOURCE.read_text())


def library(dtype: QuantizedDType):
    """``dtype``'s compiled entry point (built or fetched from the kernel cache once); a
    KernelError where the machine has no working C compiler."""
    return required_entry_point(f"quantized_int8_{dtype.name}", lambda: source_of(dtype),
                                openmp=True)


class Int8MatmulKernel:
    """quantized_matmul_int8 on one format; ``prepare`` binds pointers and sizes once, so a
    replayed launch is one foreign call."""

    def __init__(self, dtype: QuantizedDType) -> None:
        self.dtype = dtype
        self.__qualname__ = self.__name__ = f"quantized_matmul_int8_{dtype.name}"

    @property
    def revision_source(self) -> str:
        """What the revision hash covers besides the Python code: the format's C source."""
        return source_of(self.dtype)

    def sizes(self, layouts: Sequence[Layout]) -> tuple[int, ...]:
        from fuel.backends.cpu.quantized import thread_count

        x, weight = layouts[0].shape, layouts[1].shape
        rows = 1
        for size in x[:-1]:
            rows *= size
        n, k = weight
        big = self.dtype.storage_bytes(n * k) >= PARALLEL_BYTES
        return (rows, n, k, thread_count() if big else 1)

    def variants(self, layouts: Sequence[Layout], params: object, device) -> tuple[Variant, ...]:
        """The thread counts, the rule's first (all threads from PARALLEL_BYTES of weights,
        else one): the judge's candidates (a small decode matmul on a busy machine may do
        better on one). Each output is computed alike on any count: the same bits."""
        from fuel.backends.cpu.quantized import thread_count

        threads = thread_count()
        if threads < 2:
            return ()
        rule = self.sizes(layouts)
        if 0 in rule[:3]:
            return ()
        counts = [rule[3]] + [c for c in (threads, 1) if c != rule[3]]
        return tuple(Variant(f"int8/{count}t", partial(self._prepare_on, count))
                     for count in counts)

    def _prepare_on(self, threads: int, inputs: Sequence, outputs: Sequence,
                    layouts: Sequence[Layout], params: object) -> Launcher:
        return self.prepare(inputs, outputs, layouts, params, threads)

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: object, threads: int | None = None) -> Launcher:
        sizes = self.sizes(layouts)
        if threads is not None:
            sizes = sizes[:3] + (threads,)
        if 0 in sizes[:3]:
            return lambda: None
        storages = list(inputs) + list(outputs)
        pointers = [address(storage, layout) for storage, layout in zip(storages, layouts)]
        return ForeignCall(library(self.dtype), (ctypes.c_void_p * 3)(*pointers),
                           (ctypes.c_int64 * 4)(*sizes))

    def __call__(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                 params: object) -> None:
        self.prepare(inputs, outputs, layouts, params)()


for _format in FORMATS:
    KERNELS.add(OpKind.QUANTIZED_MATMUL_INT8, [(dt.float32, _format, dt.float32)],
                Int8MatmulKernel(_format))
