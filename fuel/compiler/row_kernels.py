"""The reductions, row ops and scans of the op set as LoopKernels: one launch's IR, built from
its operands' layouts, that any renderer writes (the OpenCL backend's reduce, cumsum,
softmax and norm kernels are these, rendered by ``render_opencl``). The reduced axes move
last as the row (walked through their strides), the kept axes index the rows (the output
index). Pure: imports only the IR layers.
"""

from __future__ import annotations

from fuel.compiler.kernel_ir import HALF_DTYPES, KernelBuilder, Load, LoopKernel, Store
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind


def output_dtype(op: OpKind, source: DType) -> DType:
    if op in (OpKind.ARGMAX, OpKind.ARGMIN):
        return dt.int64
    if op in (OpKind.ALL, OpKind.ANY):
        return dt.bool_
    if op in (OpKind.SUM, OpKind.PROD, OpKind.CUMSUM):
        return dt.int64 if not source.is_floating else source
    return source


def rows_view(shape: tuple[int, ...], strides: list[tuple[int, ...]], dims
              ) -> tuple[tuple[int, ...], list[tuple[int, ...]], int]:
    """(loop shape, each operand's strides, row dims): ``dims`` moved last as the row (a row
    of one element when there are none)."""
    kept = [axis for axis in range(len(shape)) if axis not in dims]
    order = kept + [axis for axis in range(len(shape)) if axis in dims]
    if len(order) == len(kept):
        return (tuple(shape[a] for a in order) + (1,),
                [tuple(s[a] for a in order) + (0,) for s in strides], 1)
    return (tuple(shape[a] for a in order), [tuple(s[a] for a in order) for s in strides],
            len(order) - len(kept))


def reduction_loop(op: OpKind, source: DType, layout: Layout, out_layout: Layout,
                   dims: tuple[int, ...]) -> LoopKernel:
    """One reduction of ``layout`` over ``dims`` into ``out_layout`` (kept dims, keepdim or
    not) as a LoopKernel."""
    kept = [axis for axis in range(layout.ndim) if axis not in dims]
    if out_layout.ndim == layout.ndim:
        out_strides = tuple(out_layout.strides[a] for a in kept)
    else:
        out_strides = tuple(out_layout.strides)
    shape, (strides,), count = rows_view(layout.shape, [layout.strides], dims)
    target = output_dtype(op, source)
    builder = KernelBuilder(shape)
    folded = builder.fold(op.value, builder.load(Load(source, strides)), target)
    store = Store(folded, target, per_row=True, strides=out_strides + (0,) * count)
    return builder.build(op.value, [store], (op.value,), count)


def cumsum_loop(source: DType, layout: Layout, out_layout: Layout, dim: int) -> LoopKernel:
    """The running sum of ``layout`` along ``dim`` into ``out_layout`` as a LoopKernel."""
    dims = (dim,) if layout.ndim else ()
    shape, (strides, out_strides), count = rows_view(layout.shape, [layout.strides,
                                                                    out_layout.strides], dims)
    target = output_dtype(OpKind.CUMSUM, source)
    builder = KernelBuilder(shape)
    running = builder.fold("cumsum", builder.load(Load(source, strides)), target)
    return builder.build("cumsum", [Store(running, target, strides=out_strides)], ("cumsum",),
                         count)


def _compute(dtype: DType) -> DType:
    return dt.float32 if dtype in HALF_DTYPES else dtype


def softmax_loop(op: OpKind, dtype: DType, layout: Layout, out_layout: Layout, dim: int
                 ) -> LoopKernel:
    """softmax or log_softmax of ``layout`` along ``dim`` into ``out_layout``:
    exp(x - max) / sum, or (x - max) - log(sum)."""
    dims = (dim,) if layout.ndim else ()
    shape, (strides, out_strides), count = rows_view(layout.shape, [layout.strides,
                                                                    out_layout.strides], dims)
    compute = _compute(dtype)
    builder = KernelBuilder(shape)
    x = builder.cast(builder.load(Load(dtype, strides)), compute)
    shifted = builder.apply(OpKind.SUB, (x, builder.fold("max", x, compute)), compute)
    exponential = builder.apply(OpKind.EXP, (shifted,), compute)
    total = builder.fold("sum", exponential, compute)
    if op is OpKind.LOG_SOFTMAX:
        result = builder.apply(OpKind.SUB, (shifted, builder.apply(OpKind.LOG, (total,),
                                                                   compute)), compute)
    else:
        result = builder.apply(OpKind.DIV, (exponential, total), compute)
    store = Store(builder.cast(result, dtype), dtype, strides=out_strides)
    return builder.build(op.value, [store], (op.value,), count)


def norm_loop(op: OpKind, dtype: DType, layouts: list[Layout], axes: int, eps: float
              ) -> LoopKernel:
    """layer_norm ((x - mean) / sqrt(var + eps) * weight + bias) or rms_norm
    (x / sqrt(mean(x * x) + eps) * weight) over the trailing ``axes`` dims; ``layouts``: the
    input's, weight's (and bias's), then the output's."""
    layout, out_layout = layouts[0], layouts[-1]
    shape = layout.shape
    operands = [layout.strides] + [w.broadcast_to(shape).strides for w in layouts[1:-1]] + [
        out_layout.strides]
    shape, operands, count = rows_view(shape, operands, tuple(range(len(shape) - axes,
                                                                    len(shape))))
    compute = _compute(dtype)
    builder = KernelBuilder(shape)

    def apply(op: OpKind, *args: int) -> int:
        return builder.apply(op, args, compute)

    x, weight, *bias = [builder.cast(builder.load(Load(dtype, s)), compute)
                        for s in operands[:-1]]
    epsilon = builder.constant(eps, compute)
    if op is OpKind.LAYER_NORM:
        centered = apply(OpKind.SUB, x, builder.fold("mean", x, compute))
        variance = builder.fold("mean", apply(OpKind.MUL, centered, centered), compute)
        deviation = apply(OpKind.SQRT, apply(OpKind.ADD, variance, epsilon))
        result = apply(OpKind.ADD, apply(OpKind.MUL, apply(OpKind.DIV, centered, deviation),
                                         weight), bias[0])
    else:
        squares = builder.fold("mean", apply(OpKind.MUL, x, x), compute)
        scale = apply(OpKind.DIV, builder.constant(1, compute),
                      apply(OpKind.SQRT, apply(OpKind.ADD, squares, epsilon)))
        result = apply(OpKind.MUL, apply(OpKind.MUL, x, scale), weight)
    store = Store(builder.cast(result, dtype), dtype, strides=operands[-1])
    return builder.build(op.value, [store], (op.value,), count)


def build_cumsum(inputs, outputs, layouts, params) -> LoopKernel | None:
    """A cumsum launch's LoopKernel (None for an empty output): the row kernels' builder that
    the OpenCL and wgpu backends share."""
    if layouts[-1].numel == 0:
        return None
    return cumsum_loop(inputs[0].dtype, layouts[0], layouts[-1], params.dim)
