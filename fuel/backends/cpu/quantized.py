"""Kernels on block-quantized (GGUF) weights: dequantize, quantized matmul (float32 rows by an
(n, k) quantized weight), embedding lookup. Written in C (``quantized.c``; the formats in
``quantized_formats.c``, the K formats' decode kernel in ``quantized_decode.c``; prompt shapes
on the integer GEMM of ``quantized_gemm.c``, a few decoded rows on ``quantized_rows.c``), built
per format through the kernel compiler's toolchain and cache on first use, registered with
source tag ``c``.

Threads: the matmul splits its output rows over OpenMP threads when the weight is large
enough (``PARALLEL_BYTES``); OpenBLAS's pool is idle meanwhile (no BLAS call runs inside a
kernel). How finished threads wait: ``c_library``.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import numpy as np

from fuel.backends.cpu import matmul_gemm, quantized_gemm, quantized_rows
from fuel.backends.cpu.c_library import address, required_entry_point
from fuel.compiler.foreign import ForeignCall
from fuel.dispatch.kernel import KernelList, Launcher, Variant
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.dtype import QuantizedDType
from fuel.ir.errors import IndexOutOfRange
from fuel.ir.layout import Layout
from fuel.ir.ops import ACTIVATION_BLOCK, ACTIVATION_CODE_MAX, ACTIVATION_ROUNDED_FORMATS, OpKind

KERNELS = KernelList(BackendId.CPU, "c")
SOURCE = Path(__file__).with_name("quantized.c")
FORMATS_SOURCE = Path(__file__).with_name("quantized_formats.c")
HALF_SOURCE = Path(__file__).with_name("half_float.h")  # half_to_float, shared
DECODE_SOURCE = Path(__file__).with_name("quantized_decode.c")
# Weights of at least this many bytes are split over threads (below it a thread's start-up
# costs more than it saves).
PARALLEL_BYTES = 1 << 16
# From this many bytes of weight the judge is offered no single-thread variant: a weight this
# big is read from memory, which one thread does not saturate, so all threads win on an idle
# machine (f16 at the decode shape, 134 MB: 1.16-1.24x NumPy's streaming read on two threads,
# 0.82x on one), and a verdict timed while another process holds the second core would store
# the one thread for good.
SERIAL_CANDIDATE_BYTES = 8 << 20
DEQUANTIZE, MATMUL, EMBEDDING, ROUND, DEQUANTIZE_THREADED = 0, 1, 2, 3, 4
# Prompt shapes: from quantized_gemm.MIN_ROWS (96) activation rows, every block format runs
# quantized_gemm.c's integer GEMM where the build has it (AVX2 / AVX-512; SmolLM2's four layer
# matmuls at 128 rows, one thread: 0.51-0.63x the time of de-quantizing + BLAS). Elsewhere, and
# for the float weights (f16_blocks, bf16_blocks), at least BLAS_ROWS rows de-quantize the
# weight a tile of rows at a time (about TILE_FLOATS values, cache-sized) and multiply through
# BLAS; for the formats in ops.ACTIVATION_ROUNDED_FORMATS the rows are first rounded to 16-bit
# blocks (the C kernel's operation 3), so every shape computes the op's one numerics; below
# BLAS_ROWS the C kernel dots those 16-bit blocks in integers, each weight block unpacked once
# for four activation rows. Crossover of that tile and BLAS (SmolLM2's four layer matmuls, one
# thread, CPU time): C / BLAS 0.52 at 16 rows, 0.95 at 64, 1.03 at 96, 1.04 at 128.
BLAS_ROWS = 96
TILE_FLOATS = 1 << 18

def thread_count() -> int:
    """Threads a large quantized matmul uses: ``FUEL_THREADS`` or the cores this process may
    run on."""
    configured = os.environ.get("FUEL_THREADS")
    if configured and configured.isdigit() and int(configured) > 0:
        return int(configured)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - platforms without affinity
        return os.cpu_count() or 1


def rows_tile(dtype, rows: int) -> bool:
    """Whether a matmul of ``rows`` activation rows runs on quantized_rows.c's many-row tile
    (from its ROWS_MIN rows, below BLAS_ROWS, on the formats it serves)."""
    return rows < BLAS_ROWS and quantized_rows.serves(dtype, rows)


def gemm_tile(dtype, rows: int) -> bool:
    """Whether a matmul of ``rows`` activation rows runs on quantized_gemm.c's integer GEMM
    (from its MIN_ROWS rows, where this machine's build has the tile)."""
    return quantized_gemm.serves(dtype, rows, partial(source_of, dtype))


def gemm_library(dtype: QuantizedDType):
    """``dtype``'s GEMM library (its format library with quantized_gemm.c's tile)."""
    return quantized_gemm.library(dtype, partial(source_of, dtype))


def rows_library(dtype: QuantizedDType):
    """``dtype``'s many-row library (its format library with quantized_rows.c's tile)."""
    return quantized_rows.library(dtype, partial(source_of, dtype))


def source_of(dtype: QuantizedDType) -> str:
    """The C source of ``dtype``'s library: its format macros (and the registry's activation
    code bound), then ``half_float.h``, ``quantized_formats.c``, ``quantized_decode.c`` and
    ``quantized.c``."""
    return (f"#define FORMAT_{dtype.name.upper()} 1\n#define BLOCK_SIZE {dtype.block_size}\n"
            f"#define BLOCK_BYTES {dtype.block_bytes}\n"
            f"#define ACTIVATION_CODE_MAX {ACTIVATION_CODE_MAX}\n" + HALF_SOURCE.read_text()
            + FORMATS_SOURCE.read_text()
            + DECODE_SOURCE.read_text() + SOURCE.read_text())


def library(dtype: QuantizedDType):
    """``dtype``'s compiled entry point (built or fetched from the kernel cache once); a
    KernelError where the machine has no working C compiler."""
    return required_entry_point(f"quantized_{dtype.name}", lambda: source_of(dtype),
                                openmp=True)


class QuantizedKernel:
    """One operation on one format; ``prepare`` binds pointers and sizes once, so a replayed
    launch is one foreign call."""

    def __init__(self, operation: int, dtype: QuantizedDType) -> None:
        self.operation = operation
        self.dtype = dtype
        name = ("dequantize", "quantized_matmul", "quantized_embedding")[operation] + "_" \
            + dtype.name if operation != ROUND else "round_int16_blocks"
        self.__qualname__ = self.__name__ = name

    @property
    def revision_source(self) -> str:
        """What the revision hash covers besides the Python code: the format's C source (and,
        for the matmul, the integer GEMM's and the many-row tile's)."""
        if self.operation != MATMUL:
            return source_of(self.dtype)
        text = quantized_gemm.source_of(source_of(self.dtype))
        if self.dtype in quantized_rows.FORMATS:
            text += quantized_rows.tile_source()
        return text

    def sizes(self, inputs: Sequence, layouts: Sequence[Layout]) -> tuple[int, ...]:
        if self.operation == DEQUANTIZE:
            return (DEQUANTIZE, layouts[0].numel)
        if self.operation == MATMUL:
            x, weight = layouts[0].shape, layouts[1].shape
            rows = 1
            for size in x[:-1]:
                rows *= size
            n, k = weight
            big = self.dtype.storage_bytes(n * k) >= PARALLEL_BYTES
            return (MATMUL, rows, n, k, thread_count() if big else 1)
        if self.operation == ROUND:
            return (ROUND, layouts[0].numel // ACTIVATION_BLOCK)
        return (EMBEDDING, layouts[1].shape[0], layouts[0].shape[1], inputs[1].dtype.itemsize)

    def variants(self, layouts: Sequence[Layout], params: object, device) -> tuple[Variant, ...]:
        """A decode-shape matmul's thread counts, the rule's first (all threads from
        PARALLEL_BYTES of weights, else one): the judge's candidates. Each output is computed
        alike on any count, so they agree bit for bit. None for the other operations, the
        prompt shapes (de-quantized tiles on BLAS) or a single thread; no one-thread
        candidate from SERIAL_CANDIDATE_BYTES of weight, so a decode-shape matmul that big
        has nothing to judge."""
        threads = thread_count()
        if self.operation != MATMUL or threads < 2:
            return ()
        rule = self.sizes((), layouts)
        if rule[1] >= BLAS_ROWS or 0 in rule[1:] or gemm_tile(self.dtype, rule[1]):
            return ()
        counts = [rule[4]] + [c for c in (threads, 1) if c != rule[4]]
        if self.dtype.storage_bytes(rule[2] * rule[3]) >= SERIAL_CANDIDATE_BYTES:
            counts = [threads]
        # many rows on the 32-value integer formats: quantized_rows.c's tile first (the
        # rule's), this library's one-weight-row tile after it; the same bits either way
        tiles = ("int-rows", "int-dot") if rows_tile(self.dtype, rule[1]) else ("int-dot",)
        found = tuple(Variant(f"{tile}/{count}t", partial(self._prepare_on, count, tile))
                      for tile in tiles for count in counts)
        return found if len(found) > 1 else ()

    def _prepare_on(self, threads: int, tile: str, inputs: Sequence, outputs: Sequence,
                    layouts: Sequence[Layout], params: object) -> Launcher:
        return self.prepare(inputs, outputs, layouts, params, threads, tile)

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: object, threads: int | None = None, tile: str | None = None
                ) -> Launcher:
        sizes = self.sizes(inputs, layouts)
        if threads is not None and self.operation == MATMUL:
            sizes = sizes[:4] + (threads,)
        if any(size == 0 for size in sizes[1:]):
            return lambda: None
        storages = list(inputs) + list(outputs)
        pointers = [address(storage, layout) for storage, layout in zip(storages, layouts)]
        data = (ctypes.c_void_p * len(pointers))(*pointers)
        size_array = (ctypes.c_int64 * len(sizes))(*sizes)
        if self.operation == MATMUL and gemm_tile(self.dtype, sizes[1]):
            return ForeignCall(gemm_library(self.dtype), data, size_array)
        if self.operation == MATMUL and tile != "int-dot" and rows_tile(self.dtype, sizes[1]):
            return ForeignCall(rows_library(self.dtype), data, size_array)
        function = library(self.dtype)
        if self.operation == MATMUL and sizes[1] >= BLAS_ROWS:
            return self._tiled(function, storages, layouts, sizes)
        if self.operation != EMBEDDING:
            return ForeignCall(function, data, size_array)
        rows = layouts[0].shape[0]
        ids_storage, ids_layout = inputs[1], layouts[1]
        ids = ids_storage.buffer[ids_layout.offset:ids_layout.offset + ids_layout.shape[0]]

        def launch() -> None:
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= rows:
                bad = low if low < 0 else high
                raise IndexOutOfRange(f"embedding index {bad} is out of range for a table of "
                                      f"{rows} rows")
            function(data, size_array, None)

        return launch

    def _tiled(self, function, storages: list, layouts: Sequence[Layout], sizes) -> Launcher:
        """The prompt-shape launcher: per tile of weight rows, de-quantize (the C kernel's
        operation 4, split over the threads) into a scratch buffer, then one matmul into the
        output columns: the float32 matmul's gemm form on fuel's OpenMP team, writing the
        columns in place (``np.matmul`` and a copy where that form is not built)."""
        _, rows, n, k, _ = sizes
        x_storage, weight_storage, out_storage = storages
        x_layout, weight_layout, out_layout = layouts
        x = x_storage.buffer[x_layout.offset:x_layout.offset + rows * k].reshape(rows, k)
        out = out_storage.buffer[out_layout.offset:out_layout.offset + rows * n].reshape(rows, n)
        tile = max(16, min(n, TILE_FLOATS // k))
        scratch = np.empty((tile, k), np.float32)
        part = np.empty((rows, tile), np.float32)
        row_bytes = self.dtype.row_bytes(k)
        base = address(weight_storage, weight_layout)
        if self.dtype in ACTIVATION_ROUNDED_FORMATS:
            rounded = np.empty((rows, k), np.float32)
            rounding = ((ctypes.c_void_p * 2)(x.ctypes.data, rounded.ctypes.data),
                        (ctypes.c_int64 * 2)(ROUND, rows * k // ACTIVATION_BLOCK))
            x = rounded
        else:
            rounding = None
        threads = thread_count() if rows * n * k >= PARALLEL_BYTES * 16 else 1
        built = matmul_gemm.library() is not None
        calls = []
        for start in range(0, n, tile):
            count = min(tile, n - start)
            data = (ctypes.c_void_p * 2)(base + start * row_bytes, scratch.ctypes.data)
            product = None
            arguments = matmul_gemm.gemm_arguments(rows, count, k, (k, 1, 1, k, n), (),
                                                   threads) if built else None
            if arguments is not None:  # x @ scratch.T straight into out[:, start:start + count]
                product = matmul_gemm.foreign_call(
                    (x.ctypes.data, scratch.ctypes.data, out.ctypes.data + 4 * start),
                    arguments)
            calls.append((start, count, data,
                          (ctypes.c_int64 * 3)(DEQUANTIZE_THREADED, count * k, threads),
                          product))

        def launch() -> None:
            if rounding is not None:
                function(*rounding, None)
            for start, count, data, size_array, product in calls:
                function(data, size_array, None)
                if product is not None:
                    product()
                    continue
                np.matmul(x, scratch[:count].T, out=part[:, :count])
                out[:, start:start + count] = part[:, :count]

        return launch

    def __call__(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                 params: object) -> None:
        self.prepare(inputs, outputs, layouts, params)()


for _format in dt.QUANTIZED_DTYPES:
    KERNELS.add(OpKind.DEQUANTIZE, [(_format, dt.float32)], QuantizedKernel(DEQUANTIZE, _format))
    KERNELS.add(OpKind.QUANTIZED_MATMUL, [(dt.float32, _format, dt.float32)],
                QuantizedKernel(MATMUL, _format))
    KERNELS.add(OpKind.QUANTIZED_EMBEDDING,
                [(_format, index, dt.float32) for index in (dt.int32, dt.int64)],
                QuantizedKernel(EMBEDDING, _format))
# The rounding is format-independent C; the q8_0 library's copy serves the op itself.
KERNELS.add(OpKind.ROUND_INT16_BLOCKS, [(dt.float32, dt.float32)], QuantizedKernel(ROUND, dt.q8_0))
