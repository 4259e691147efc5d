"""Batched matmul with broadcasting batch dims and any strides on the left operand.

Each work-item computes an 8x8 block of one batch entry's output: 8 rows of A against an
8-wide vector slice of a B row, 64 accumulators in registers (the usual register blocking of
CPU and GPU GEMMs). B rows must be contiguous (column stride 1): a B viewed otherwise (``x.T``)
is first copied dense, which costs O(K*N) against the O(M*N*K) product.
"""

from __future__ import annotations

from functools import cache, partial

import numpy as np

from fuel.backends.opencl.codegen import (
    MAX_DIMS,
    OPENCL_NUMERIC_DTYPES,
    CType,
    ProgramSpec,
    accumulator,
    ctype,
    fill_dims,
)
from fuel.backends.opencl.common import STRIDED, ClKernel, kernel_list, round_up
from fuel.dispatch.kernel import Variant
from fuel.ir import dtype as dt
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

BLOCK = 8

MATMUL_DTYPE = np.dtype([
    ("M", np.int64), ("N", np.int64), ("K", np.int64), ("bndim", np.int32), ("pad", np.int32),
    ("bshape", np.int64, MAX_DIMS), ("astride", np.int64, MAX_DIMS),
    ("bstride", np.int64, MAX_DIMS), ("aoff", np.int64), ("boff", np.int64),
    ("coff", np.int64), ("arow", np.int64), ("acol", np.int64), ("brow", np.int64),
])

_SOURCE = """
typedef struct {{
    long M, N, K; int bndim; int pad;
    long bshape[MAX_DIMS]; long astride[MAX_DIMS]; long bstride[MAX_DIMS];
    long aoff, boff, coff, arow, acol, brow;
}} matmul_t;

__kernel void matmul(__global {storage}* c, __global const {storage}* a,
                     __global const {storage}* b, const matmul_t p) {{
    const long column = get_global_id(0) * 8, row = get_global_id(1) * 8;
    const long batch = get_global_id(2);
    if (row >= p.M || column >= p.N) return;
    const long abase = p.aoff + dims_offset(p.bshape, p.astride, p.bndim, batch)
        + row * p.arow;
    const long bbase = p.boff + dims_offset(p.bshape, p.bstride, p.bndim, batch) + column;
    {acc}8 total[8];
    for (int i = 0; i < 8; ++i) total[i] = ({acc}8)0;
    if (row + 8 <= p.M && column + 8 <= p.N) {{
        for (long k = 0; k < p.K; ++k) {{
            const {acc}8 bv = {load_b8};
            const long ak = abase + k * p.acol;
            for (int i = 0; i < 8; ++i) total[i] += ({acc})({load_a}) * bv;
        }}
    }} else {{
        const int rows = (int)min(8L, p.M - row), columns = (int)min(8L, p.N - column);
        for (long k = 0; k < p.K; ++k) {{
            {acc} bs[8];
            for (int j = 0; j < 8; ++j)
                bs[j] = j < columns ? ({acc}){load_b1} : ({acc})0;
            const {acc}8 bv = vload8(0, bs);
            const long ak = abase + k * p.acol;
            for (int i = 0; i < rows; ++i) total[i] += ({acc})({load_a}) * bv;
        }}
    }}
    const long cbase = p.coff + batch * p.M * p.N + row * p.N + column;
    const int rows = (int)min(8L, p.M - row), columns = (int)min(8L, p.N - column);
    for (int i = 0; i < rows; ++i) {{
        {acc} values[8];
        vstore8(total[i], 0, values);
        for (int j = 0; j < columns; ++j) {{
            {store}
        }}
    }}
}}
"""


def _load_row8(t: CType, acc: str, pointer: str, index: str) -> str:
    """Eight consecutive elements of ``pointer`` from ``index`` as an ``acc``8 vector."""
    if t.dtype is dt.float16:
        return f"vload_half8(0, {pointer} + {index})"
    if t.dtype is dt.bfloat16:
        return f"as_float8(convert_uint8(vload8(0, {pointer} + {index})) << 16)"
    if t.storage == acc:
        return f"vload8(0, {pointer} + {index})"
    return f"convert_{acc}8(vload8(0, {pointer} + {index}))"


@cache
def matmul_program(dtype) -> ProgramSpec:
    t = ctype(dtype)
    acc = accumulator(dtype)
    source = _SOURCE.format(
        storage=t.storage, acc=acc,
        load_a=t.load("a", "ak + i * p.arow"),
        load_b8=_load_row8(t, acc, "b", "bbase + k * p.brow"),
        load_b1=t.load("b", "bbase + k * p.brow + j"),
        store=t.store("c", "cbase + i * p.N + j", "values[j]"),
    )
    return ProgramSpec(f"matmul_{dtype.name}", source, dtype is dt.float64)


def _batch_strides(layout: Layout, batch_shape) -> list[int]:
    """The layout's batch strides aligned to ``batch_shape`` (0 where it broadcasts)."""
    own = layout.shape[:-2]
    lead = len(batch_shape) - len(own)
    strides = [0] * lead
    for size, own_size, stride in zip(batch_shape[lead:], own, layout.strides[:-2]):
        strides.append(stride if own_size == size else 0)
    return strides


def matmul_kernel(kernel: ClKernel, inputs, outputs, layouts, params, side: int = 0) -> None:
    """The tiled matmul in ``side`` x ``side`` work-groups (0: the device's rule, 16 where
    256-item groups fit, else 8)."""
    from fuel.backends.opencl.movement import fill, strided_copy

    a, b, out = layouts[0], layouts[1], layouts[-1]
    if out.numel == 0:
        return
    if a.shape[-1] == 0:  # an empty inner dim: the product is all zeros
        fill(outputs[0], out, 0)
        return
    right = inputs[1]
    if b.strides[-1] != 1 and b.shape[-1] > 1:
        dense = right.backend.allocate(right.device, right.dtype, b.numel)
        strided_copy(right, b, dense, Layout.contiguous(b.shape))
        right, b = dense, Layout.contiguous(b.shape)
    batch_shape = out.shape[:-2]
    rows, columns = out.shape[-2:]
    record = np.zeros((), MATMUL_DTYPE)
    record["M"], record["N"], record["K"] = rows, columns, a.shape[-1]
    record["bndim"] = fill_dims(record, "bshape", ["astride", "bstride"], batch_shape,
                                [_batch_strides(a, batch_shape), _batch_strides(b, batch_shape)])
    record["aoff"], record["boff"], record["coff"] = a.offset, b.offset, out.offset
    record["arow"], record["acol"], record["brow"] = a.strides[-2], a.strides[-1], b.strides[-2]
    batches = int(np.prod(batch_shape, dtype=np.int64)) if batch_shape else 1
    context, compiled = kernel.bind(outputs[0])
    side = side or default_side(context)
    grid = (round_up(-(-columns // BLOCK), side), round_up(-(-rows // BLOCK), side), batches)
    context.launch(compiled, grid, (side, side, 1), outputs[0].buffer, inputs[0].buffer,
                   right.buffer, record)


def default_side(context) -> int:
    """The work-group side the device's rule picks: 16 where 256-item groups fit, else 8."""
    return 16 if context.work_group >= 256 else 8


class ClMatmul(ClKernel):
    """The tiled matmul, whose work-group sides (8 x 8 and, where they fit, 16 x 16) are the
    judge's variants, the device's rule first."""

    def variants(self, layouts, params, device) -> tuple[Variant, ...]:
        from fuel.backends import get_backend

        context = get_backend(device).context(device)
        first = default_side(context)
        sides = [first] + [s for s in (16, 8) if s != first and s * s <= context.work_group]
        return tuple(Variant(f"{s}x{s}", partial(_bound, self, s)) for s in sides)


def _bound(kernel: ClMatmul, side: int, inputs, outputs, layouts, params):
    return partial(matmul_kernel, kernel, inputs, outputs, layouts, params, side)


KERNELS = kernel_list()
for _d in OPENCL_NUMERIC_DTYPES:
    KERNELS.add(OpKind.MATMUL, [(_d, _d, _d)],
                ClMatmul(matmul_kernel, matmul_program(_d), "matmul"), STRIDED)
