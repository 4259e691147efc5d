"""The paged_attention kernel (``paged_attention.c``): attention of each query row over its
request's blocks of a paged key/value pool, without gathering them. One foreign call; the C
checks the block table and lengths first (IndexOutOfRange naming the bad entry). Threads: the
(row, kv head) pairs are split over OpenMP threads when the step has enough work
(``PARALLEL_WORK`` multiply-adds, decided at launch from the lengths)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

from fuel.backends.cpu.c_library import address, required_entry_point
from fuel.backends.cpu.quantized import thread_count
from fuel.compiler.foreign import ForeignCall
from fuel.dispatch.kernel import KernelList, Launcher
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.errors import IndexOutOfRange
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

KERNELS = KernelList(BackendId.CPU, "c")
SOURCE = Path(__file__).with_name("paged_attention.c")


def source() -> str:
    """The kernel's C: with ``VECTOR_EXPF`` where the toolchain links the vector math library
    (the softmax's expf then runs 16 lanes at a time)."""
    from fuel.compiler import toolchain

    found = toolchain.detect()
    vector = not isinstance(found, str) and found.vector_math
    return ("#define VECTOR_EXPF 1\n" if vector else "") + SOURCE.read_text()


class PagedAttentionKernel:
    """The C kernel; ``prepare`` binds pointers and sizes once (a replay is one call)."""

    __name__ = __qualname__ = "paged_attention"

    @property
    def revision_source(self) -> str:
        return SOURCE.read_text()

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: object) -> Launcher:
        q_layout, pool_layout, _, table_layout, _, _ = layouts
        rows, heads, dim = q_layout.shape
        blocks, block_size, kv_heads, _ = pool_layout.shape
        width = table_layout.shape[1]
        if rows == 0:
            return lambda: None
        function = required_entry_point("paged_attention", source, openmp=True)
        status = (ctypes.c_int64 * 1)()
        pointers = [address(s, layout) for s, layout in zip(list(inputs) + list(outputs),
                                                            layouts)]
        data = (ctypes.c_void_p * 7)(*pointers, ctypes.addressof(status))
        threads = thread_count()  # the C uses them only on enough work (PARALLEL_WORK)
        sizes = (ctypes.c_int64 * 8)(rows, heads, dim, blocks, block_size, kv_heads, width,
                                     threads)
        table = inputs[3].buffer[table_layout.offset:table_layout.offset + rows * width]
        lengths = inputs[4].buffer[layouts[4].offset:layouts[4].offset + rows]

        def failure(code: int) -> IndexOutOfRange:
            index = code - 1
            if index >= rows * width:
                t = index - rows * width
                return IndexOutOfRange(f"paged_attention: row {t}'s length {int(lengths[t])} "
                                       f"is outside 1..{width * block_size} (its block table "
                                       f"holds {width} blocks of {block_size})")
            t, b = divmod(index, width)
            return IndexOutOfRange(f"paged_attention: block {int(table[index])} (row {t}, "
                                   f"entry {b}) is out of range for a pool of {blocks} blocks")

        return ForeignCall(function, data, sizes, None, status, failure)

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self.prepare(inputs, outputs, layouts, params)()


KERNELS.add(OpKind.PAGED_ATTENTION, [(dt.float32,) * 3 + (dt.int64, dt.int64, dt.float32)],
            PagedAttentionKernel())
