"""Tiled, batched matmul with broadcasting batch dims and any operand strides (transposed
operands arrive as views). Each work-group computes a TILE x TILE block of one batch entry,
staging TILE x TILE blocks of both operands in local memory."""

from __future__ import annotations

from functools import cache

import numpy as np

from fuel.backends.opencl.codegen import MAX_DIMS, ProgramSpec, accumulator, ctype, fill_dims
from fuel.backends.opencl.common import STRIDED, ClKernel, round_up
from fuel.dispatch.kernel import KernelList
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind

TILE = 16

MATMUL_DTYPE = np.dtype([
    ("M", np.int64), ("N", np.int64), ("K", np.int64), ("bndim", np.int32), ("pad", np.int32),
    ("bshape", np.int64, MAX_DIMS), ("astride", np.int64, MAX_DIMS),
    ("bstride", np.int64, MAX_DIMS), ("aoff", np.int64), ("boff", np.int64),
    ("coff", np.int64), ("arow", np.int64), ("acol", np.int64), ("brow", np.int64),
    ("bcol", np.int64),
])

_SOURCE = """
#define TILE {tile}
typedef struct {{
    long M, N, K; int bndim; int pad;
    long bshape[MAX_DIMS]; long astride[MAX_DIMS]; long bstride[MAX_DIMS];
    long aoff, boff, coff, arow, acol, brow, bcol;
}} matmul_t;

__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1)))
void matmul(__global {storage}* c, __global const {storage}* a, __global const {storage}* b,
            const matmul_t p) {{
    const int tx = get_local_id(0), ty = get_local_id(1);
    const long column = get_group_id(0) * TILE + tx, row = get_group_id(1) * TILE + ty;
    const long batch = get_global_id(2);
    const long abase = p.aoff + dims_offset(p.bshape, p.astride, p.bndim, batch);
    const long bbase = p.boff + dims_offset(p.bshape, p.bstride, p.bndim, batch);
    __local {acc} atile[TILE][TILE];
    __local {acc} btile[TILE][TILE + 1];
    {acc} total = 0;
    for (long k0 = 0; k0 < p.K; k0 += TILE) {{
        const long ka = k0 + tx, kb = k0 + ty;
        atile[ty][tx] = (row < p.M && ka < p.K)
            ? ({acc}){load_a} : ({acc})0;
        btile[ty][tx] = (kb < p.K && column < p.N)
            ? ({acc}){load_b} : ({acc})0;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TILE; ++k) total += atile[ty][k] * btile[k][tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }}
    if (row < p.M && column < p.N) {{
        {store}
    }}
}}
"""


@cache
def matmul_program(dtype) -> ProgramSpec:
    t = ctype(dtype)
    source = _SOURCE.format(
        tile=TILE, storage=t.storage, acc=accumulator(dtype),
        load_a=t.load("a", "abase + row * p.arow + ka * p.acol"),
        load_b=t.load("b", "bbase + kb * p.brow + column * p.bcol"),
        store=t.store("c", "p.coff + batch * p.M * p.N + row * p.N + column", "total"),
    )
    return ProgramSpec(f"matmul_{dtype.name}", source, dtype is dt.float64)


def _batch_strides(layout, batch_shape) -> list[int]:
    """The layout's batch strides aligned to ``batch_shape`` (0 where it broadcasts)."""
    own = layout.shape[:-2]
    lead = len(batch_shape) - len(own)
    strides = [0] * lead
    for size, own_size, stride in zip(batch_shape[lead:], own, layout.strides[:-2]):
        strides.append(stride if own_size == size else 0)
    return strides


def matmul_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    a, b, out = layouts[0], layouts[1], layouts[-1]
    if out.numel == 0:
        return
    batch_shape = out.shape[:-2]
    rows, columns = out.shape[-2:]
    record = np.zeros((), MATMUL_DTYPE)
    record["M"], record["N"], record["K"] = rows, columns, a.shape[-1]
    record["bndim"] = fill_dims(record, "bshape", ["astride", "bstride"], batch_shape,
                                [_batch_strides(a, batch_shape), _batch_strides(b, batch_shape)])
    record["aoff"], record["boff"], record["coff"] = a.offset, b.offset, out.offset
    record["arow"], record["acol"] = a.strides[-2], a.strides[-1]
    record["brow"], record["bcol"] = b.strides[-2], b.strides[-1]
    batches = int(np.prod(batch_shape, dtype=np.int64)) if batch_shape else 1
    context, compiled = kernel.bind(outputs[0])
    if a.shape[-1] == 0:  # an empty inner dim: the product is all zeros
        from fuel.backends.opencl.movement import fill

        fill(outputs[0], out, 0)
        return
    context.launch(compiled, (round_up(columns, TILE), round_up(rows, TILE), batches),
                   (TILE, TILE, 1), outputs[0].buffer, inputs[0].buffer, inputs[1].buffer,
                   record)


def register_matmul(kernels: KernelList, fp64: bool) -> None:
    for d in dt.NUMERIC_DTYPES:
        kernels.add(OpKind.MATMUL, [(d, d, d)],
                    ClKernel(matmul_kernel, matmul_program(d), "matmul"), STRIDED)
