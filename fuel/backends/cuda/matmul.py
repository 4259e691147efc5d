"""Batched matmul on cuBLAS (``cublasGemmStridedBatchedEx`` through CuPy's binding): float32
and float64 in their own precision, float16 and bfloat16 on tensor cores accumulating in
float32 (``CUBLAS_COMPUTE_32F``; no TF32: float32 stays IEEE). Row-major operands are handed
to column-major cuBLAS as their transposes (C^T = B^T A^T); a row-major or a transposed
(``x.T``) matrix is read in place, batch dims broadcast through stride 0; an operand whose
batch dims no single stride walks, or whose matrix is neither, is first copied dense."""

from __future__ import annotations

import numpy as np

from fuel.backends.cuda.kernels import STRIDED, kernel_list, loop_kernel
from fuel.backends.cuda.loops import copy_loop, fill_loop
from fuel.compiler.kernel_ir import collapse
from fuel.ir import dtype as dt
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

OP_N, OP_T = 0, 1
CUDA_DATA_TYPES = {dt.float32: 0, dt.float64: 1, dt.float16: 2, dt.bfloat16: 14}
COMPUTE_32F, COMPUTE_64F = 68, 70
GEMM_DEFAULT = -1
MATMUL_DTYPES = (dt.float16, dt.bfloat16, dt.float32, dt.float64)


def _batch(layout: Layout, batch: tuple[int, ...]) -> Layout:
    """``layout`` with its batch dims broadcast to ``batch``."""
    return layout.broadcast_to(batch + layout.shape[-2:])


def _matrix(rows: int, columns: int, row_stride: int, column_stride: int
            ) -> tuple[int, int] | None:
    """(cuBLAS op, leading dim) of a row-major (rows, columns) matrix read as the
    column-major (columns, rows) one cuBLAS computes with; None when it is neither row- nor
    column-contiguous."""
    if column_stride == 1 or columns == 1:
        ld = row_stride if rows > 1 else max(1, columns)
        if ld >= max(1, columns):
            return OP_N, ld
    if row_stride == 1 or rows == 1:
        ld = column_stride if columns > 1 else max(1, rows)
        if ld >= max(1, rows):
            return OP_T, ld
    return None


def _strided(layout: Layout, batch: tuple[int, ...]):
    """(op, ld, batch stride) of one operand, or None when it must be copied dense."""
    rows, columns = layout.shape[-2:]
    matrix = _matrix(rows, columns, *layout.strides[-2:])
    if matrix is None:
        return None
    sizes, (strides,) = collapse(batch, [layout.strides[:-2]])
    if len(sizes) > 1:
        return None
    return (*matrix, strides[0])


class MatmulKernel:
    """``out = a @ b`` over broadcast batch dims, on cuBLAS."""

    def __init__(self, dtype) -> None:
        self.dtype = dtype
        self.__qualname__ = f"cuda.matmul[cublas:{dtype.name}]"

    def sources(self, inputs, outputs, layouts, params) -> list[str]:
        return []  # cuBLAS (the dense copies and fills are rendered kernels of their own)

    def prepare(self, inputs, outputs, layouts, params):
        a, b = inputs
        out = outputs[0]
        a_layout, b_layout, out_layout = layouts
        if out_layout.numel == 0:
            return lambda: None
        batch = out_layout.shape[:-2]
        m, n = out_layout.shape[-2:]
        k = a_layout.shape[-1]
        if k == 0:  # a sum over nothing
            return loop_kernel(fill_loop(self.dtype, 0, out_layout)).prepare(
                [], outputs, [out_layout], None)
        count = 1
        for size in batch:
            count *= size
        launchers = []
        operands = []
        for storage, layout in ((a, _batch(a_layout, batch)), (b, _batch(b_layout, batch))):
            found = _strided(layout, batch)
            if found is None:  # copy it dense first
                dense = Layout.contiguous(layout.shape)
                copy = storage.backend.allocate(storage.device, storage.dtype, dense.numel)
                launchers.append(loop_kernel(copy_loop(storage.dtype, layout, dense)).prepare(
                    [storage], [copy], [layout, dense], None))
                storage, layout = copy, dense
                found = _strided(layout, batch)
            operands.append((storage, layout, found))
        (a_storage, a_view, (a_op, lda, a_stride)), (b_storage, b_view, (b_op, ldb, b_stride)) \
            = operands
        context = out.backend.context(out.device)
        handle = context.cublas()
        itemsize = self.dtype.itemsize
        data_type = CUDA_DATA_TYPES[self.dtype]
        wide = self.dtype is dt.float64
        scalars = np.array([1.0, 0.0], np.float64 if wide else np.float32)
        compute = COMPUTE_64F if wide else COMPUTE_32F
        a_pointer = a_storage.buffer.ptr + a_view.offset * itemsize
        b_pointer = b_storage.buffer.ptr + b_view.offset * itemsize
        c_pointer = out.buffer.ptr + out_layout.offset * itemsize
        from cupy_backends.cuda.libs import cublas

        gemm = cublas.gemmStridedBatchedEx
        alpha, beta = scalars.ctypes.data, scalars.ctypes.data + scalars.itemsize
        keep = (scalars, operands)

        def call() -> None:
            # C^T (n x m, column-major) = B^T (n x k) @ A^T (k x m)
            gemm(handle, b_op, a_op, n, m, k, alpha, b_pointer, data_type, ldb, b_stride,
                 a_pointer, data_type, lda, a_stride, beta, c_pointer, data_type, n, m * n,
                 count, compute, GEMM_DEFAULT)

        def run() -> None:
            _ = keep
            for launcher in launchers:
                launcher()
            context.enqueue(call)

        return run

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self.prepare(inputs, outputs, layouts, params)()


KERNELS = kernel_list()
for _d in MATMUL_DTYPES:
    KERNELS.add(OpKind.MATMUL, [(_d, _d, _d)], MatmulKernel(_d), STRIDED)
