"""Kernels that only move bits, one program per element size: the strided copy (auto-contiguize,
downloads, cat, pad, slice assignment, same-device copies), where, tril/triu and the indexed
take behind gather and index_select. Plus fills, arange and the cross-device Copy."""

from __future__ import annotations

from functools import cache

import numpy as np

from fuel.backends.opencl.codegen import (
    BITS_TYPES,
    OPENCL_DTYPES,
    OPENCL_NUMERIC_DTYPES,
    ProgramSpec,
    ctype,
    make_walk,
    walk_kernel,
)
from fuel.backends.opencl.common import STRIDED, ClKernel, int64, kernel_list, launch_1d
from fuel.backends.opencl.elementwise import run_walk
from fuel.backends.opencl.runtime import cl, note_event, wrap_errors
from fuel.dispatch.kernel import KernelList
from fuel.ir import dtype as dt
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

INDEX_DTYPES = (dt.int32, dt.int64)

_BITS_SOURCE = """
__kernel void copy(__global T* dst, __global const T* src, const walk_t w) {
WALK2(    dst[o1] = src[o0];)
}
__kernel void where(__global T* out, __global const uchar* condition, __global const T* a,
                    __global const T* b, const walk_t w) {
WALK4(    out[o3] = condition[o0] ? a[o1] : b[o2];)
}
__kernel void triangle(__global T* out, __global const T* src, const walk_t w, long rows,
                       long columns, long diagonal, int lower) {
WALK2(    const long column = i % columns, row = (i / columns) % rows;
    const int keep = lower ? (column - row <= diagonal) : (column - row >= diagonal);
    out[o1] = keep ? src[o0] : (T)0;)
}
"""

# take: out[o2] = src[o0 + index[o1] * dim_stride]; put: out[o2 + index[o1] * dim_stride] =
# src[o0]. An out-of-range index records a fault (code, value) checked at the next wait.
_INDEXED_SOURCE = """
__kernel void {name}_{index}(__global T* out, __global const T* src,
                             __global const {index}* index, const walk_t w, long dim_stride,
                             long dim_size, int code, __global volatile int* fault) {{
WALK3(    const long raw = (long)index[o1];
    const long k = raw < 0 ? raw + dim_size : raw;
    if (k < 0 || k >= dim_size) {{
        if (atomic_cmpxchg(fault, 0, code) == 0) {{
            fault[1] = (int)raw;
            fault[2] = (int)(raw >> 32);
        }}
        {fallback}
    }} else {{
        {assign}
    }})
}}
"""
_INDEXED = {
    "take": ("out[o2] = (T)0;", "out[o2] = src[o0 + k * dim_stride];"),
    "put": ("", "out[o2 + k * dim_stride] = src[o0];"),
}


def _expand_walks(source: str) -> str:
    """Replace each ``WALKn(body)`` with the walk kernel of ``n`` operands around ``body``."""
    while "WALK" in source:
        start = source.index("WALK")
        count = int(source[start + 4])
        depth, position = 0, start + 5
        for position in range(start + 5, len(source)):
            depth += {"(": 1, ")": -1}.get(source[position], 0)
            if depth == 0:
                break
        body = source[start + 6: position]
        source = source[:start] + walk_kernel(count, body) + source[position + 1:]
    return source


@cache
def bits_program(itemsize: int) -> ProgramSpec:
    """Copy, where, triangle and take kernels for elements of ``itemsize`` bytes."""
    indexed = "".join(
        _INDEXED_SOURCE.format(name=name, index=ctype(d).storage, fallback=fallback,
                               assign=assign)
        for d in INDEX_DTYPES for name, (fallback, assign) in _INDEXED.items())
    source = _expand_walks(f"#define T {BITS_TYPES[itemsize]}\n{_BITS_SOURCE}{indexed}")
    return ProgramSpec(f"bits{itemsize * 8}", source)


def strided_copy(source, source_layout: Layout, target, target_layout: Layout) -> None:
    """Copy what ``source_layout`` views into ``target_layout`` (same shape, same device)."""
    if source_layout.numel == 0:
        return
    spec = bits_program(source.dtype.itemsize)
    context = target.backend.context(target.device)
    walk = make_walk(target_layout.shape, [source_layout, target_layout])
    launch_1d(context, context.kernel(spec, "copy"), target_layout.numel, target.buffer,
              source.buffer, walk, walk=walk)


def copy_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    """CONTIGUOUS: the strided copy into a dense output."""
    strided_copy(inputs[0], layouts[0], outputs[0], layouts[-1])


def copy_from_device(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    """Copy out of an OpenCL storage: on the same device a strided copy; to anywhere else a
    download followed by the destination backend's ``write_from_host``."""
    source, target = inputs[0], outputs[0]
    if target.backend is source.backend and target.device == source.device:
        strided_copy(source, layouts[0], target, layouts[-1])
        return
    host = source.backend.download(source, layouts[0])
    target.backend.write_from_host(target, np.ascontiguousarray(host))


def where_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    run_walk(kernel, inputs, outputs, layouts, params)


def triangle_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    out_layout = layouts[-1]
    if out_layout.numel == 0:
        return
    rows, columns = out_layout.shape[-2:]
    context, compiled = kernel.bind(outputs[0])
    walk = make_walk(out_layout.shape, [layouts[0], out_layout])
    launch_1d(context, compiled, out_layout.numel, outputs[0].buffer, inputs[0].buffer, walk,
              int64(rows), int64(columns), int64(params.diagonal),
              np.int32(kernel.settings["lower"]), walk=walk)


def take_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    """gather / index_select: out[..., j, ...] = source[..., index[...], ...] along ``dim``."""
    source, index = inputs
    source_layout, index_layout, out_layout = layouts[0], layouts[1], layouts[-1]
    if out_layout.numel == 0:
        return
    dim = params.dim
    shape = out_layout.shape
    strides = list(source_layout.strides)
    dim_stride, dim_size = strides[dim], source_layout.shape[dim]
    strides[dim] = 0
    source_view = Layout(shape, tuple(strides), source_layout.offset)
    if kernel.settings["select"]:  # a 1-D index along dim, broadcast over the other dims
        index_strides = [0] * len(shape)
        index_strides[dim] = index_layout.strides[0]
        index_layout = Layout(shape, tuple(index_strides), index_layout.offset)
    context, compiled = kernel.bind(outputs[0])
    what = f"{'index_select' if kernel.settings['select'] else 'gather'}"
    code = context.fault_code(what, dim, dim_size)
    walk = make_walk(shape, [source_view, index_layout, out_layout])
    launch_1d(context, compiled, out_layout.numel, outputs[0].buffer, source.buffer,
              index.buffer, walk, int64(dim_stride), int64(dim_size), np.int32(code),
              context.fault_buffer, walk=walk)


def index_copy_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    """out = target with ``out[..., index[j], ...] = source[..., j, ...]`` along ``dim``."""
    target, index, source = inputs
    out, out_layout = outputs[0], layouts[-1]
    if out.buffer is not target.buffer or layouts[0] != out_layout:
        strided_copy(target, layouts[0], out, out_layout)
    source_layout = layouts[2]
    if source_layout.numel == 0:
        return
    dim = params.dim
    shape = source_layout.shape
    strides = list(out_layout.strides)
    dim_stride, dim_size = strides[dim], out_layout.shape[dim]
    strides[dim] = 0
    index_strides = [0] * len(shape)
    index_strides[dim] = layouts[1].strides[0]
    index_view = Layout(shape, tuple(index_strides), layouts[1].offset)
    context, compiled = kernel.bind(out)
    code = context.fault_code("index_copy", dim, dim_size)
    walk = make_walk(shape, [source_layout, index_view,
                             Layout(shape, tuple(strides), out_layout.offset)])
    launch_1d(context, compiled, source_layout.numel, out.buffer, source.buffer, index.buffer,
              walk, int64(dim_stride), int64(dim_size), np.int32(code), context.fault_buffer,
              walk=walk)


def cat_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    out_layout = layouts[-1]
    start = 0
    for storage, layout in zip(inputs, layouts[: len(inputs)]):
        size = layout.shape[params.dim]
        starts = tuple(start if axis == params.dim else 0 for axis in range(layout.ndim))
        stops = tuple(start + size if axis == params.dim else s
                      for axis, s in enumerate(out_layout.shape))
        region = out_layout.slice(starts, stops, (1,) * layout.ndim)
        strided_copy(storage, layout, outputs[0], region)
        start += size


def fill(storage, layout: Layout, value) -> None:
    """Set every element of a dense ``layout`` of ``storage`` to ``value``."""
    if layout.numel == 0:
        return
    pattern = np.asarray(value).astype(storage.dtype.numpy).reshape(1)
    context = storage.backend.context(storage.device)
    itemsize = storage.dtype.itemsize
    with wrap_errors(f"fill on {storage.device} failed"), context.lock:
        note_event(cl.enqueue_fill_buffer(context.queue, storage.buffer, pattern,
                                          layout.offset * itemsize, layout.numel * itemsize))


def full_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    fill(outputs[0], layouts[-1], params.value)


def pad_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    out_layout = layouts[-1]
    fill(outputs[0], out_layout, params.value)
    starts = tuple(before for before, _ in params.widths)
    stops = tuple(before + size for (before, _), size in zip(params.widths, layouts[0].shape))
    region = out_layout.slice(starts, stops, (1,) * out_layout.ndim)
    strided_copy(inputs[0], layouts[0], outputs[0], region)


def slice_assign_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    target, value = inputs
    out, out_layout = outputs[0], layouts[-1]
    if out.buffer is not target.buffer or layouts[0] != out_layout:
        strided_copy(target, layouts[0], out, out_layout)
    region = out_layout.slice(params.starts, params.stops, params.steps)
    strided_copy(value, layouts[1], out, region)


_ARANGE_SOURCE = """
__kernel void arange(__global {storage}* out, long n, {real} start, {real} step,
                     long istart, long istep) {{
    const long i = get_global_id(0);
    if (i >= n) return;
    {body}
}}
"""


@cache
def arange_program(dtype, fp64: bool) -> ProgramSpec:
    """``start + i * step``: integers in int64, floats in double where the device has it."""
    t = ctype(dtype)
    real = "double" if fp64 else "float"
    if dtype.is_floating:
        body = t.store("out", "i", f"start + ({real})i * step", via=real)
    else:
        body = t.store("out", "i", "istart + i * istep")
    source = _ARANGE_SOURCE.format(storage=t.storage, real=real, body=body)
    return ProgramSpec(f"arange_{dtype.name}", source, fp64)


def arange_kernel(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    """Floats step in double on a device that has it (the registered program), else in float:
    decided per device at launch."""
    count = layouts[-1].numel
    if count == 0:
        return
    target = outputs[0]
    context = target.backend.context(target.device)
    wide = target.dtype.is_floating and context.fp64
    compiled = context.kernel(arange_program(target.dtype, wide), kernel.name)
    real = np.float64 if wide else np.float32
    integral = not target.dtype.is_floating
    launch_1d(context, compiled, count, outputs[0].buffer, int64(count), real(params.start),
              real(params.step), int64(int(params.start) if integral else 0),
              int64(int(params.step) if integral else 0))


def _add_movement(kernels: KernelList) -> None:
    """Add the bit-moving kernels (every dtype) and the generators to ``kernels``."""

    def add(op, dtypes, kernel: ClKernel) -> None:
        kernels.add(op, dtypes, kernel, STRIDED)

    for d in OPENCL_DTYPES:
        spec = bits_program(d.itemsize)
        add(OpKind.CONTIGUOUS, [(d, d)], ClKernel(copy_kernel, spec, "copy"))
        add(OpKind.COPY, [(d, d)], ClKernel(copy_from_device, spec, "copy"))
        add(OpKind.WHERE, [(dt.bool_, d, d, d)], ClKernel(where_kernel, spec, "where"))
        add(OpKind.TRIL, [(d, d)], ClKernel(triangle_kernel, spec, "triangle", lower=1))
        add(OpKind.TRIU, [(d, d)], ClKernel(triangle_kernel, spec, "triangle", lower=0))
        add(OpKind.CAT, [(d, d)], ClKernel(cat_kernel, spec, "copy"))
        add(OpKind.PAD, [(d, d)], ClKernel(pad_kernel, spec, "copy"))
        add(OpKind.SLICE_ASSIGN, [(d, d, d)], ClKernel(slice_assign_kernel, spec, "copy"))
        kernels.add(OpKind.FULL, [(d,)], ClKernel(full_kernel, None, "fill"))
        for index in INDEX_DTYPES:
            name = f"take_{ctype(index).storage}"
            add(OpKind.GATHER, [(d, index, d)], ClKernel(take_kernel, spec, name, select=False))
            add(OpKind.INDEX_SELECT, [(d, index, d)],
                ClKernel(take_kernel, spec, name, select=True))
            add(OpKind.INDEX_COPY, [(d, index, d, d)],
                ClKernel(index_copy_kernel, spec, f"put_{ctype(index).storage}"))
    for d in OPENCL_NUMERIC_DTYPES:
        kernels.add(OpKind.ARANGE, [(d,)],
                    ClKernel(arange_kernel, arange_program(d, d.is_floating), "arange"))


KERNELS = kernel_list()
_add_movement(KERNELS)
