"""Kernels on block-quantized (GGUF) weights on OpenCL: dequantize, quantized_matmul (float32
rows by an (n, k) quantized weight, read as stored: no float weight is made), embedding
lookup and round_int16_blocks. Blocks live on the device as the bytes the CPU stores; the
OpenCL C is ``quantized_source.py``. A quantized operand may be a view whose rows start at
whole blocks (a slice of rows, or of whole blocks of each row)."""

from __future__ import annotations

import numpy as np

from fuel.backends.opencl.codegen import collapse, numel
from fuel.backends.opencl.common import DENSE, STRIDED, ClKernel, int64, kernel_list, launch_1d
from fuel.backends.opencl.quantized_source import FORMATS, ROWS, quantized_program
from fuel.ir import dtype as dt
from fuel.ir.dtype import QuantizedDType
from fuel.ir.errors import InvalidArgument
from fuel.ir.layout import Layout
from fuel.ir.ops import ACTIVATION_BLOCK, OpKind

# Output columns per matmul work-group (one size, so PoCL compiles the kernel once).
MATMUL_GROUP = 64


def block_rows(dtype: QuantizedDType, layout: Layout, what: str) -> tuple[int, int, int]:
    """(rows, bytes from one row's first block to the next, byte offset of the first block)
    of a quantized operand whose layout is rows of whole blocks; InvalidArgument otherwise."""
    shape, strides = layout.shape, layout.strides
    dims, (leading,) = collapse(shape[:-1], [strides[:-1]])
    row_stride = leading[0] if dims else shape[-1]
    size = dtype.block_size
    if (len(dims) > 1 or (shape[-1] > 1 and strides[-1] != 1) or layout.offset % size
            or row_stride % size):
        raise InvalidArgument(
            f"the {what} ({dtype.name}, shape {shape}, strides {strides}, offset "
            f"{layout.offset}) is not rows of whole {size}-value blocks: OpenCL's quantized "
            "kernels read blocks as stored (slice whole rows or whole blocks of each row)")
    rows = numel(shape[:-1])
    return rows, dtype.storage_bytes(row_stride), dtype.storage_bytes(layout.offset)


def dense_rows(storage, layout: Layout):
    """(storage, layout) of ``layout``'s values as dense rows: as they are when they already
    are (any offset), else copied dense on the device."""
    if layout.is_contiguous():
        return storage, layout
    from fuel.backends.opencl.movement import strided_copy

    dense = storage.backend.allocate(storage.device, storage.dtype, layout.numel)
    target = Layout.contiguous(layout.shape)
    strided_copy(storage, layout, dense, target)
    return dense, target


def dequantize_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    """out = the blocks' float32 values, one work-item per 32 of them."""
    dtype, out_layout = inputs[0].dtype, layouts[-1]
    if out_layout.numel == 0:
        return
    rows, row_bytes, offset = block_rows(dtype, layouts[0], "dequantized tensor")
    parts = out_layout.shape[-1] // 32
    context, compiled = kernel.bind(outputs[0])
    launch_1d(context, compiled, rows * parts, outputs[0].buffer, inputs[0].buffer,
              int64(parts), int64(row_bytes), int64(offset), int64(rows * parts),
              int64(out_layout.offset))


def round_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    """round_int16_blocks over dense rows (``round_int16_block`` per block of 32)."""
    blocks = layouts[-1].numel // ACTIVATION_BLOCK
    if blocks == 0:
        return
    context, compiled = kernel.bind(outputs[0])
    launch_1d(context, compiled, blocks, outputs[0].buffer, inputs[0].buffer, int64(blocks),
              int64(layouts[0].offset), int64(layouts[-1].offset))


def matmul_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    """out (..., n) = x (..., k) @ dequantize(w).T, the weight read as stored."""
    weight, out_layout = inputs[1], layouts[-1]
    if out_layout.numel == 0:
        return
    n, k = layouts[1].shape
    if k == 0:
        from fuel.backends.opencl.movement import fill

        fill(outputs[0], out_layout, 0)
        return
    _, row_bytes, offset = block_rows(weight.dtype, layouts[1], "weight")
    x, x_layout = dense_rows(inputs[0], layouts[0])
    m = out_layout.numel // n
    context, compiled = kernel.bind(outputs[0])
    width = -(-n // MATMUL_GROUP) * MATMUL_GROUP
    context.launch(compiled, (width, -(-m // ROWS)), (MATMUL_GROUP, 1), outputs[0].buffer,
                   x.buffer, weight.buffer, int64(m), int64(n), int64(k),
                   int64(x_layout.offset), int64(offset), int64(row_bytes),
                   int64(out_layout.offset))


def embedding_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    """out[i] = dequantize(table[ids[i]]); an id out of range raises at the next wait."""
    table, ids = inputs
    table_layout, ids_layout, out_layout = layouts
    if out_layout.numel == 0:
        return
    rows, row_bytes, offset = block_rows(table.dtype, table_layout, "embedding table")
    parts = table_layout.shape[-1] // 32
    count = ids_layout.shape[0] * parts
    context, compiled = kernel.bind(outputs[0])
    code = context.fault_code("quantized_embedding", 0, rows)
    launch_1d(context, compiled, count, outputs[0].buffer, table.buffer, ids.buffer,
              int64(ids_layout.offset), int64(ids_layout.strides[0]), int64(parts),
              int64(rows), int64(row_bytes), int64(offset), int64(count),
              int64(out_layout.offset), np.int32(code), context.fault_buffer)


KERNELS = kernel_list()
# Formats without an OpenCL source here are de-quantized at load on this device (the loader
# asks the kernel registry; gguf_loader names them in its notice).
for _format in (f for f in dt.QUANTIZED_DTYPES if f.name in FORMATS):
    _spec = quantized_program(_format)
    KERNELS.add(OpKind.DEQUANTIZE, [(_format, dt.float32)],
                ClKernel(dequantize_kernel, _spec, "dequantize"), STRIDED)
    KERNELS.add(OpKind.QUANTIZED_MATMUL, [(dt.float32, _format, dt.float32)],
                ClKernel(matmul_kernel, _spec, "quantized_matmul"), STRIDED)
    for _index, _name in ((dt.int32, "int"), (dt.int64, "long")):
        KERNELS.add(OpKind.QUANTIZED_EMBEDDING, [(_format, _index, dt.float32)],
                    ClKernel(embedding_kernel, _spec, f"quantized_embedding_{_name}"), STRIDED)
# The rounding is format-independent; the q8_0 program's copy serves the op itself.
KERNELS.add(OpKind.ROUND_INT16_BLOCKS, [(dt.float32, dt.float32)],
            ClKernel(round_kernel, quantized_program(dt.q8_0), "round_int16_blocks"), DENSE)
