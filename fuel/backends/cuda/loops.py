"""The LoopKernels of the CUDA backend's per-op kernels, built from one launch's layouts (pure:
no CuPy): an elementwise op, a cast, where, a copy of bits, a fill. A dense output is written
by the elementwise rendering (a thread per element); a strided one (a region of a larger
buffer: cat, pad, slice assignment) by a row rendering without a reduction, its last dim the
row, whose stores walk the output's strides."""

from __future__ import annotations

import numpy as np

from fuel.compiler.kernel_ir import KernelBuilder, Load, LoopKernel, Store, Value
from fuel.compiler.row_kernels import rows_view
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

# The integer type a copy moves each element size's bits in (exact: NaN payloads kept).
BITS = {1: dt.uint8, 2: dt.int16, 4: dt.int32, 8: dt.int64}


def _viewed(layout: Layout, shape: tuple[int, ...]) -> Layout:
    return layout if layout.shape == shape else layout.broadcast_to(shape)


def _build(name: str, dtypes: list[DType], layouts: list[Layout], out: Layout, out_dtype: DType,
           compute) -> LoopKernel:
    """A loop over ``out``'s shape loading ``layouts`` (broadcast to it) as ``dtypes``;
    ``compute(builder, loads)`` gives the value stored as ``out_dtype``."""
    shape = out.shape
    views = [_viewed(layout, shape) for layout in layouts]
    if out.is_contiguous():
        builder = KernelBuilder(shape)
        loads = [builder.load(Load(d, v.strides)) for d, v in zip(dtypes, views)]
        store = Store(compute(builder, loads), out_dtype)
        return builder.build(name, [store], (name,))
    dims = (len(shape) - 1,) if shape else ()
    loop_shape, strides, count = rows_view(shape, [v.strides for v in views] + [out.strides],
                                           dims)
    builder = KernelBuilder(loop_shape)
    loads = [builder.load(Load(d, s)) for d, s in zip(dtypes, strides[:-1])]
    store = Store(compute(builder, loads), out_dtype, strides=strides[-1])
    return builder.build(name, [store], (name,), count)


def elementwise_loop(op: OpKind, combo: tuple[DType, ...], layouts: list[Layout]) -> LoopKernel:
    """``op`` (or a cast) over inputs of ``combo[:-1]`` into ``combo[-1]``."""
    *inputs, out = combo

    def compute(builder: KernelBuilder, loads: list[int]) -> int:
        if op is OpKind.CAST:
            return builder.cast(loads[0], out)
        return builder.cast(builder.apply(op, tuple(loads), out), out)

    return _build(op.value, inputs, list(layouts[:-1]), layouts[-1], out, compute)


def where_loop(dtype: DType, layouts: list[Layout]) -> LoopKernel:
    """``condition ? a : b``, the values moved as bits."""
    bits = BITS[dtype.itemsize]
    return _build("where", [dt.bool_, bits, bits], list(layouts[:-1]), layouts[-1], bits,
                  _where(bits))


def _where(bits: DType):
    def compute(builder: KernelBuilder, loads: list[int]) -> int:
        return builder.value(Value("where", bits, tuple(loads)))

    return compute


def copy_loop(dtype: DType, source: Layout, target: Layout) -> LoopKernel:
    """``target`` (any layout of the source's shape) = ``source``, as bits."""
    bits = BITS[dtype.itemsize]
    return _build("copy", [bits], [source], target, bits, lambda builder, loads: loads[0])


def fill_loop(dtype: DType, value, target: Layout) -> LoopKernel:
    """Every element of ``target`` = ``value`` (its bits as ``dtype`` holds it)."""
    bits = BITS[dtype.itemsize]
    pattern = np.asarray(value).astype(dtype.numpy).reshape(1).view(bits.numpy)[0]
    return _build("fill", [], [], target, bits,
                  lambda builder, loads: builder.constant(int(pattern), bits))
