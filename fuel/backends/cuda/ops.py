"""The CUDA backend's per-op kernels, nearly all renderings of the kernel IR (one LoopKernel per
launch, ``loops`` and ``fuel.compiler.row_kernels``): every unary and binary op of the
registry's coverage that renders, casts, where, copies, fills, cat, pad, slice assignment,
bitcasts, the reductions over any dims, cumsum, softmax/log_softmax and the norms. Hand-written
CUDA C only where the IR has no form: the indexed take and put (index_select, gather,
index_copy; an out-of-range index is reported at the next wait) and arange."""

from __future__ import annotations

import numpy as np

from fuel.backends.cuda.kernels import STRIDED, RenderedKernel, SourceKernel, kernel_list
from fuel.backends.cuda.loops import BITS, copy_loop, elementwise_loop, fill_loop, where_loop
from fuel.compiler.kernel_ir import LoopKernel, collapse
from fuel.compiler.render_cuda import CUDA_DTYPES, CUDA_TYPES, STORAGE_TYPES, helpers, renders
from fuel.compiler.row_kernels import (
    build_cumsum,
    cumsum_loop,
    norm_loop,
    output_dtype,
    reduction_loop,
    softmax_loop,
)
from fuel.dispatch.kernel import KernelList
from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.errors import InvalidArgument
from fuel.ir.layout import Layout
from fuel.ir.ops import ELEMENTWISE_OPS, OpKind, definition

# The registry's dtypes CUDA kernels take (in the registry's order).
DTYPES: tuple[DType, ...] = tuple(d for d in dt.ALL_DTYPES if d in CUDA_DTYPES)
NUMERIC: tuple[DType, ...] = tuple(d for d in DTYPES if not d.is_bool)
INDEX_DTYPES = (dt.int32, dt.int64)
RENDERED_FAMILIES = frozenset({"unary", "binary"})
SAMPLE = Layout.contiguous((4, 8))
MAX_DIMS = 8  # of the hand-written walks, once contiguous dims are merged


def _storage(dtype: DType) -> str:
    return STORAGE_TYPES.get(dtype, CUDA_TYPES[dtype])


# ----------------------------------------------------------------------------- elementwise

def _build_elementwise(op: OpKind, combo: tuple[DType, ...]):
    def build(inputs, outputs, layouts, params) -> LoopKernel | None:
        if layouts[-1].numel == 0:
            return None
        return elementwise_loop(op, combo, list(layouts))

    build.__qualname__ = f"elementwise_{op.value}"
    return build


def _renders(op: OpKind, combo: tuple[DType, ...]) -> bool:
    """Whether every op of ``op``'s definition (its expression's, for a composite) renders."""
    expression = definition(op).expression
    if expression is None:
        return renders(op.value, combo)
    compute = dt.float32 if combo[-1] in (dt.float16, dt.bfloat16) else combo[-1]
    return all(renders(name, (compute, compute)) for name in expression.ops())


def _add_elementwise(kernels: KernelList) -> None:
    for op in sorted(ELEMENTWISE_OPS, key=lambda o: o.value):
        if definition(op).family not in RENDERED_FAMILIES:
            continue
        for combo in definition(op).coverage:
            if all(d in CUDA_DTYPES for d in combo) and _renders(op, combo):
                sample = elementwise_loop(op, combo, [SAMPLE] * len(combo))
                kernels.add(op, [combo], RenderedKernel(
                    op.value, _build_elementwise(op, combo), sample), STRIDED)
    for source in DTYPES:
        for target in DTYPES:
            combo = (source, target)
            sample = elementwise_loop(OpKind.CAST, combo, [SAMPLE] * 2)
            kernels.add(OpKind.CAST, [combo], RenderedKernel(
                "cast", _build_elementwise(OpKind.CAST, combo), sample), STRIDED)


# ----------------------------------------------------------------------------- movement

def build_where(inputs, outputs, layouts, params):
    if layouts[-1].numel == 0:
        return None
    return where_loop(outputs[0].dtype, list(layouts))


def build_contiguous(inputs, outputs, layouts, params):
    if layouts[-1].numel == 0:
        return None
    return copy_loop(inputs[0].dtype, layouts[0], layouts[-1])


def build_bitcast(inputs, outputs, layouts, params):
    return build_contiguous(inputs, outputs, layouts, params)


def build_full(inputs, outputs, layouts, params):
    if layouts[-1].numel == 0:
        return None
    return fill_loop(outputs[0].dtype, params.value, layouts[-1])


def build_cat(inputs, outputs, layouts, params):
    """One copy per input into its region of the output."""
    out_layout, steps, start = layouts[-1], [], 0
    for storage, layout in zip(inputs, layouts[: len(inputs)]):
        size = layout.shape[params.dim]
        starts = tuple(start if axis == params.dim else 0 for axis in range(layout.ndim))
        stops = tuple(start + size if axis == params.dim else s
                      for axis, s in enumerate(out_layout.shape))
        region = out_layout.slice(starts, stops, (1,) * layout.ndim)
        if layout.numel:
            steps.append((copy_loop(storage.dtype, layout, region), [storage], outputs,
                          [layout, region]))
        start += size
    return steps


def build_pad(inputs, outputs, layouts, params):
    """A fill of the output, then a copy of the input into its region."""
    out_layout = layouts[-1]
    if out_layout.numel == 0:
        return None
    dtype = outputs[0].dtype
    steps = [(fill_loop(dtype, params.value, out_layout), [], outputs, [out_layout])]
    starts = tuple(before for before, _ in params.widths)
    stops = tuple(before + size for (before, _), size in zip(params.widths, layouts[0].shape))
    region = out_layout.slice(starts, stops, (1,) * out_layout.ndim)
    if layouts[0].numel:
        steps.append((copy_loop(dtype, layouts[0], region), inputs, outputs,
                      [layouts[0], region]))
    return steps


def build_slice_assign(inputs, outputs, layouts, params):
    """The target copied to the output (unless it is the output), then the value into the
    region."""
    target, value = inputs
    out, out_layout = outputs[0], layouts[-1]
    steps = []
    if (out.buffer is not target.buffer or layouts[0] != out_layout) and out_layout.numel:
        steps.append((copy_loop(out.dtype, layouts[0], out_layout), [target], outputs,
                      [layouts[0], out_layout]))
    region = out_layout.slice(params.starts, params.stops, params.steps)
    if region.numel:
        steps.append((copy_loop(out.dtype, layouts[1], region), [value], outputs,
                      [layouts[1], region]))
    return steps


def _add_movement(kernels: KernelList) -> None:
    def add(op: OpKind, combo, build, sample: LoopKernel) -> None:
        kernels.add(op, [combo], RenderedKernel(op.value, build, sample), STRIDED)

    for d in DTYPES:
        copy = copy_loop(d, SAMPLE, SAMPLE)
        add(OpKind.CONTIGUOUS, (d, d), build_contiguous, copy)
        kernels.add(OpKind.COPY, [(d, d)], CopyKernel(copy), STRIDED)
        add(OpKind.WHERE, (dt.bool_, d, d, d), build_where, where_loop(d, [SAMPLE] * 4))
        add(OpKind.CAT, (d, d), build_cat, copy)
        add(OpKind.PAD, (d, d), build_pad, copy)
        add(OpKind.SLICE_ASSIGN, (d, d, d), build_slice_assign, copy)
        add(OpKind.FULL, (d,), build_full, fill_loop(d, 0, SAMPLE))
        for other in DTYPES:
            if other.itemsize == d.itemsize:
                add(OpKind.BITCAST, (d, other), build_bitcast, copy)


class CopyKernel(RenderedKernel):
    """COPY out of a CUDA storage: on the same device a copy of bits; to anywhere else a
    download followed by the destination backend's ``write_from_host``."""

    def __init__(self, sample: LoopKernel) -> None:
        super().__init__("copy", build_contiguous, sample)

    def prepare(self, inputs, outputs, layouts, params):
        source, target = inputs[0], outputs[0]
        if target.backend is source.backend and target.device == source.device:
            return super().prepare(inputs, outputs, layouts, params)

        def run() -> None:
            host = source.backend.download(source, layouts[0])
            target.backend.write_from_host(target, np.ascontiguousarray(host))

        return run


# ----------------------------------------------------------------------------- rows

NEEDS_ELEMENTS = frozenset({OpKind.MAX, OpKind.MIN, OpKind.ARGMAX, OpKind.ARGMIN})
REDUCTIONS = (OpKind.MAX, OpKind.MIN, OpKind.ARGMAX, OpKind.ARGMIN, OpKind.ALL, OpKind.ANY,
              OpKind.SUM, OpKind.PROD, OpKind.MEAN)


def _build_reduction(op: OpKind):
    def build(inputs, outputs, layouts, params) -> LoopKernel | None:
        layout, out_layout = layouts[0], layouts[-1]
        if out_layout.numel == 0:
            return None
        dims = params.dims
        if op in NEEDS_ELEMENTS and any(layout.shape[a] == 0 for a in dims):
            raise InvalidArgument(f"{op.value}: cannot reduce over an empty dimension "
                                  f"(input shape {layout.shape}, dims {dims})")
        return reduction_loop(op, inputs[0].dtype, layout, out_layout, dims)

    build.__qualname__ = f"reduce_{op.value}"
    return build


def _build_softmax(op: OpKind):
    def build(inputs, outputs, layouts, params) -> LoopKernel | None:
        if layouts[-1].numel == 0:
            return None
        return softmax_loop(op, inputs[0].dtype, layouts[0], layouts[-1], params.dim)

    build.__qualname__ = f"rows_{op.value}"
    return build


def _build_norm(op: OpKind):
    def build(inputs, outputs, layouts, params) -> LoopKernel | None:
        if layouts[-1].numel == 0:
            return None
        return norm_loop(op, inputs[0].dtype, list(layouts), params.axes, params.eps)

    build.__qualname__ = f"rows_{op.value}"
    return build


def _add_rows(kernels: KernelList) -> None:
    """Reductions and cumsum over every dtype; softmax, log_softmax and the norms over the
    float dtypes."""
    for source in DTYPES:
        for op in REDUCTIONS:
            if op is OpKind.MEAN and not source.is_floating:
                continue
            sample = reduction_loop(op, source, SAMPLE, Layout.contiguous((4,)), (1,))
            kernels.add(op, [(source, output_dtype(op, source))],
                        RenderedKernel(op.value, _build_reduction(op), sample), STRIDED)
        kernels.add(OpKind.CUMSUM, [(source, output_dtype(OpKind.CUMSUM, source))],
                    RenderedKernel("cumsum", build_cumsum, cumsum_loop(source, SAMPLE, SAMPLE, 1)),
                    STRIDED)
    weight = Layout.contiguous((8,))
    for d in dt.FLOAT_DTYPES:
        if d not in CUDA_DTYPES:
            continue
        for op in (OpKind.SOFTMAX, OpKind.LOG_SOFTMAX):
            kernels.add(op, [(d, d)], RenderedKernel(
                op.value, _build_softmax(op), softmax_loop(op, d, SAMPLE, SAMPLE, 1)), STRIDED)
        for op, count in ((OpKind.LAYER_NORM, 2), (OpKind.RMS_NORM, 1)):
            sample = norm_loop(op, d, [SAMPLE, *[weight] * count, SAMPLE], 1, 1e-5)
            kernels.add(op, [(d,) * (2 + count)],
                        RenderedKernel(op.value, _build_norm(op), sample), STRIDED)


# ----------------------------------------------------------------------------- indexing

# A walk over up to MAX_DIMS dims of three operands (arguments: count, dims, sizes, each
# operand's strides, their offsets, then the take's or put's own).
_WALK = """
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.v[0]) return;
  long long o0 = a.v[34], o1 = a.v[35], o2 = a.v[36], rest = i;
  for (int d = (int)a.v[1] - 1; d >= 0; --d) {
    const long long size = a.v[2 + d], c = rest % size; rest /= size;
    o0 += c * a.v[10 + d]; o1 += c * a.v[18 + d]; o2 += c * a.v[26 + d];
  }
  const long long raw = (long long)index[o1], size = a.v[38];
  const long long k = raw < 0 ? raw + size : raw;
  if (k < 0 || k >= size) {
    if (atomicCAS(fault, 0, (int)a.v[39]) == 0) {
      fault[1] = (int)raw; fault[2] = (int)(raw >> 32); }
    FALLBACK
    return;
  }
  ASSIGN
"""
_INDEXED = {
    "take": ("out[o2] = 0;", "out[o2] = src[o0 + k * a.v[37]];"),
    "put": ("", "out[o2 + k * a.v[37]] = src[o0];"),
}


def indexed_source(kind: str, itemsize: int, index: DType) -> str:
    """take (``out[o2] = src[o0 + index[o1] * dim_stride]``) or put (``out[o2 + index[o1] *
    dim_stride] = src[o0]``) of elements of ``itemsize`` bytes, moved as bits."""
    bits = _storage(BITS[itemsize])
    fallback, assign = _INDEXED[kind]
    body = _WALK.replace("FALLBACK", fallback).replace("ASSIGN", assign)
    return (f"typedef struct {{ long long v[40]; }} fuel_arguments_t;\n"
            f"typedef {bits} T;\n"
            f'extern "C" __global__ void fuel_kernel(const T *src, const {_storage(index)} '
            f"*index, T *out, int *fault, const fuel_arguments_t a) {{{body}}}\n")


def _walk_arguments(shape, layouts: list[Layout], what: str) -> list[int]:
    sizes, strides = collapse(tuple(shape), [tuple(layout.strides) for layout in layouts])
    if len(sizes) > MAX_DIMS:
        raise InvalidArgument(f"{what}: CUDA index kernels walk at most {MAX_DIMS} dims once "
                              f"contiguous dims are merged; shape {tuple(shape)} needs "
                              f"{len(sizes)} (make the operands contiguous first)")
    count = 1
    for size in shape:
        count *= size
    values = [count, len(sizes), *sizes, *[0] * (MAX_DIMS - len(sizes))]
    for own in strides:
        values += [*own, *[0] * (MAX_DIMS - len(own))]
    values += [layout.offset for layout in layouts]
    return values


def take_host(select: bool):
    """gather / index_select: out[..., j, ...] = source[..., index[...], ...] along ``dim``."""

    def host(kernel, inputs, outputs, layouts, params):
        source, index = inputs
        source_layout, index_layout, out_layout = layouts[0], layouts[1], layouts[-1]
        if out_layout.numel == 0:
            return None
        dim, shape = params.dim, out_layout.shape
        strides = list(source_layout.strides)
        dim_stride, dim_size = strides[dim], source_layout.shape[dim]
        strides[dim] = 0
        source_view = Layout(shape, tuple(strides), source_layout.offset)
        if select:  # a 1-D index along dim, broadcast over the other dims
            index_strides = [0] * len(shape)
            index_strides[dim] = index_layout.strides[0]
            index_layout = Layout(shape, tuple(index_strides), index_layout.offset)
        what = "index_select" if select else "gather"
        context = outputs[0].backend.context(outputs[0].device)
        code = context.fault_code(what, dim, dim_size)
        arguments = _walk_arguments(shape, [source_view, index_layout, out_layout], what)
        arguments += [dim_stride, dim_size, code]
        pointers = [source.buffer.ptr, index.buffer.ptr, outputs[0].buffer.ptr,
                    context.fault_buffer.ptr]
        return out_layout.numel, pointers, arguments

    host.__qualname__ = "index_select" if select else "gather"
    return host


class IndexCopyKernel(SourceKernel):
    """out = target with ``out[..., index[j], ...] = source[..., j, ...]`` along ``dim``: the
    target copied first (unless it is the output), then the put."""

    def __init__(self, dtype: DType, index: DType) -> None:
        super().__init__("index_copy", indexed_source("put", dtype.itemsize, index),
                         _put_host)
        self.copy = RenderedKernel("copy", build_contiguous, copy_loop(dtype, SAMPLE, SAMPLE))

    def sources(self, inputs, outputs, layouts, params) -> list[str]:
        return [self.source, *self.copy.sources(inputs[:1], outputs, [layouts[0], layouts[-1]],
                                                None)]

    def prepare(self, inputs, outputs, layouts, params):
        target = inputs[0]
        out, out_layout = outputs[0], layouts[-1]
        first = None
        if out.buffer is not target.buffer or layouts[0] != out_layout:
            first = self.copy.prepare([target], outputs, [layouts[0], out_layout], None)
        put = super().prepare(inputs, outputs, layouts, params)
        if first is None:
            return put

        def run() -> None:
            first()
            put()

        return run


def _put_host(kernel, inputs, outputs, layouts, params):
    _, index, source = inputs
    out, out_layout, source_layout = outputs[0], layouts[-1], layouts[2]
    if source_layout.numel == 0:
        return None
    dim, shape = params.dim, source_layout.shape
    strides = list(out_layout.strides)
    dim_stride, dim_size = strides[dim], out_layout.shape[dim]
    strides[dim] = 0
    index_strides = [0] * len(shape)
    index_strides[dim] = layouts[1].strides[0]
    index_view = Layout(shape, tuple(index_strides), layouts[1].offset)
    context = out.backend.context(out.device)
    code = context.fault_code("index_copy", dim, dim_size)
    arguments = _walk_arguments(shape, [source_layout, index_view,
                                        Layout(shape, tuple(strides), out_layout.offset)],
                                "index_copy")
    arguments += [dim_stride, dim_size, code]
    pointers = [source.buffer.ptr, index.buffer.ptr, out.buffer.ptr, context.fault_buffer.ptr]
    return source_layout.numel, pointers, arguments


def arange_source(dtype: DType) -> str:
    """``out[i] = start + i * step``: floats computed in double and rounded once, integers in
    int64 (arguments: count, start and step as double bits, then as integers)."""
    if dtype is dt.float16:
        store = "out[i] = fuel_f16_bits_from_double(value);"
    elif dtype is dt.bfloat16:
        store = "out[i] = fuel_bf16_bits(fuel_bf16_from_double(value));"
    else:
        store = f"out[i] = ({CUDA_TYPES[dtype]})value;"
    if dtype.is_floating:
        value = "const double value = __longlong_as_double(a.v[1]) + " \
                "(double)i * __longlong_as_double(a.v[2]);"
    else:
        value = "const long long value = a.v[3] + i * a.v[4];"
    return (helpers(False) + "typedef struct { long long v[5]; } fuel_arguments_t;\n"
            f'extern "C" __global__ void fuel_kernel({_storage(dtype)} *out, '
            "const fuel_arguments_t a) {\n"
            "  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
            "  if (i >= a.v[0]) return;\n"
            f"  {value}\n  {store}\n}}\n")


def _arange_host(kernel, inputs, outputs, layouts, params):
    count = layouts[-1].numel
    if count == 0:
        return None
    bits = np.array([float(params.start), float(params.step)], np.float64).view(np.int64)
    integral = not outputs[0].dtype.is_floating
    arguments = [count, int(bits[0]), int(bits[1]),
                 int(params.start) if integral else 0, int(params.step) if integral else 0]
    return count, [outputs[0].buffer.ptr + layouts[-1].offset * outputs[0].dtype.itemsize], \
        arguments


def _add_indexing(kernels: KernelList) -> None:
    for d in DTYPES:
        for index in INDEX_DTYPES:
            take = indexed_source("take", d.itemsize, index)
            kernels.add(OpKind.GATHER, [(d, index, d)],
                        SourceKernel("gather", take, take_host(False)), STRIDED)
            kernels.add(OpKind.INDEX_SELECT, [(d, index, d)],
                        SourceKernel("index_select", take, take_host(True)), STRIDED)
            kernels.add(OpKind.INDEX_COPY, [(d, index, d, d)], IndexCopyKernel(d, index),
                        STRIDED)
    for d in NUMERIC:
        kernels.add(OpKind.ARANGE, [(d,)], SourceKernel("arange", arange_source(d),
                                                        _arange_host))


KERNELS = kernel_list()
_add_elementwise(KERNELS)
_add_movement(KERNELS)
_add_rows(KERNELS)
_add_indexing(KERNELS)
