"""The wgpu kernels of the primitive set, as WGSL.

Elementwise ops, casts, where, copies and bitcasts are one-value LoopKernels rendered by
``fuel.compiler.render_wgsl`` (the renderer fused groups use too); reductions and cumsum are
``fuel.compiler.row_kernels`` LoopKernels rendered the same way (as OpenCL's); index_select
and the tiled matmul are shaders written here. Every launch records into the
device's open command batch (``runtime.DeviceContext.dispatch``) and returns at once.
float16 kernels are registered only where the adapter has ``shader-f16`` (``register``'s
``dtypes``); they compute in f32 and round each result to float16, as the CPU's do.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from fuel.backends.wgpu.elements import WGPU_DTYPES
from fuel.backends.wgpu.fill import full_kernel
from fuel.backends.wgpu.loops import (
    FUSED_SOURCE,
    KERNEL_SOURCE,
    STRIDED,
    LoopKernelFunction,
    RowKernel,
    WgslKernelGenerator,
    device_context,
    one_value,
    record_dispatch,
    strided_copy,
    unaliased,
)
from fuel.backends.wgpu.matmul import matmul_kernel
from fuel.compiler.fusion import FusionTarget
from fuel.compiler.kernel_ir import LoopKernel
from fuel.compiler.render_wgsl import (
    STORAGE_WORDS,
    renders,
    shader_header,
)
from fuel.compiler.row_kernels import build_cumsum, cumsum_loop, reduction_loop
from fuel.dispatch.kernel import BackendRecord, KernelBindingTable
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import PRIMITIVE_OPS, OpKind, definition

# ------------------------------------------------------------------ hand-written families


def copy_kernel(inputs, outputs, layouts, params) -> None:
    """Copy out of a wgpu storage: on the same device a strided copy; anywhere else a download
    (a submit point) followed by the destination's ``write_from_host``."""
    source, target = inputs[0], outputs[0]
    if target.backend is source.backend and target.device == source.device \
            and source.dtype in source.backend.kernel_dtypes(source.device):
        strided_copy(source, layouts[0], target, layouts[-1])
        return
    host = source.backend.download(source, layouts[0])
    target.backend.write_from_host(target, np.ascontiguousarray(host))


def arange_kernel(inputs, outputs, layouts, params) -> None:
    """Values computed on the host as the CPU kernel computes them (float64, then the dtype),
    recorded as an upload into the batch."""
    out = outputs[0]
    if out.dtype.kind in "iu":
        values = np.arange(params.count, dtype=np.int64) * int(params.step) + int(params.start)
    else:
        values = params.start + np.arange(params.count, dtype=np.float64) * params.step
    out.backend.write_from_host(out, values.astype(out.dtype.numpy))


def _walk(depth: int, operands: int, item: str = "item", prefix: str = "base") -> list[str]:
    """Lines decomposing ``item`` over ``params[1..depth]`` into each operand's offset
    (record ``p`` at ``1 + depth + p * (1 + depth)``)."""
    lines = [f"  var {prefix}{p} = params[{1 + depth + p * (1 + depth)}];" for p in range(operands)]
    if depth:
        lines += [f"  var rest = {item};",
                  f"  for (var d = {depth - 1}; d >= 0; d = d - 1) {{",
                  "    let size = params[1 + d]; let index = rest % size; rest = rest / size;"]
        lines += [f"    {prefix}{p} = {prefix}{p} + index * params[{1 + depth + p * (1 + depth)}"
                  f" + 1 + d];" for p in range(operands)]
        lines.append("  }")
    return lines




def _build_reduction(op: OpKind):
    def build(inputs, outputs, layouts, params) -> LoopKernel | None:
        if layouts[-1].numel == 0:
            return None
        return reduction_loop(op, inputs[0].dtype, layouts[0], layouts[-1], tuple(params.dims))

    build.__qualname__ = f"reduce_{op.value}"
    return build



_SAMPLE = Layout.contiguous((4, 8))


def _reduction_kernel(op: OpKind, source) -> RowKernel:
    """One reduction of ``source`` values (every launch a ``row_kernels`` LoopKernel)."""
    return RowKernel(op.value, _build_reduction(op), reduction_loop(
        op, source, _SAMPLE, Layout.contiguous((4,)), (1,)))


def _cumsum_kernel(source) -> RowKernel:
    return RowKernel("cumsum", build_cumsum, cumsum_loop(source, _SAMPLE, _SAMPLE, 1))


@cache
def _index_select_source(source, index, depth: int) -> str:
    words = [STORAGE_WORDS[source], STORAGE_WORDS[index], STORAGE_WORDS[source], "i32"]
    lines = [shader_header(words, [False, False, True, True], ["b0", "b1", "b2", "b3"])]
    lines += _walk(depth, 2)  # operand 0: the source without its dim; 1: the output
    tail = 1 + depth + 2 * (1 + depth)
    lines += ["  var j = item;",
              f"  for (var d = {depth - 1}; d > params[{tail}]; d = d - 1) "
              "{ j = j / params[1 + d]; }",
              f"  j = j % params[1 + params[{tail}]];",
              f"  var chosen = i32(b1[params[{tail + 1}] + j * params[{tail + 2}]]);",
              f"  let size = params[{tail + 3}];",
              "  if (chosen < 0) { chosen = chosen + size; }",
              "  if (chosen < 0 || chosen >= size) {",
              "    b3[0] = 1; b3[1] = i32(b1[params[" + str(tail + 1) + "] + j * params["
              + str(tail + 2) + "]]); b3[2] = size; b3[3] = params[" + str(tail) + "];",
              "    chosen = 0;", "  }",
              f"  b2[base1] = b0[base0 + chosen * params[{tail + 4}]];", "}", ""]
    return "\n".join(lines)


def index_select_kernel(inputs, outputs, layouts, params) -> None:
    """out[..., j, ...] = source[..., index[j], ...]; a negative index counts from the end, an
    out-of-range one is reported at the next wait (KernelIndexError naming it)."""
    source_layout, index_layout, out_layout = layouts
    out = outputs[0]
    if out_layout.numel == 0:
        return
    dim = params.dim
    shape = out_layout.shape
    strides = list(source_layout.strides)
    strides[dim] = 0
    meta = [out_layout.numel, *shape, source_layout.offset, *strides,
            out_layout.offset, *out_layout.strides, dim, index_layout.offset,
            index_layout.strides[0] if index_layout.ndim else 0, source_layout.shape[dim],
            source_layout.strides[dim]]
    context = device_context(out)
    source = _index_select_source(inputs[0].dtype, inputs[1].dtype, len(shape))
    inputs = unaliased(inputs, out)
    context.fault_watch.append(f"index_select along dim {dim}")
    record_dispatch(context, source, "index_select",
                    [inputs[0].buffer, inputs[1].buffer, out.buffer, context.fault_buffer],
                    [False, False, True, True], meta, out_layout.numel)


def cat_kernel(inputs, outputs, layouts, params) -> None:
    """Each input copied into its slice of the output along ``dim``."""
    out, out_layout = outputs[0], layouts[-1]
    dim, start = params.dim, 0
    for storage, layout in zip(inputs, layouts[:-1]):
        size = layout.shape[dim]
        if size and layout.numel:
            region = Layout(layout.shape, out_layout.strides,
                            out_layout.offset + start * out_layout.strides[dim])
            strided_copy(storage, layout, out, region)
        start += size


def slice_assign_kernel(inputs, outputs, layouts, params) -> None:
    """The target copied to the output (unless in place), then the value into the region."""
    target, value = inputs
    out, out_layout = outputs[0], layouts[-1]
    if target.buffer is not out.buffer:
        strided_copy(target, layouts[0], out, out_layout)
    region = out_layout.slice(params.starts, params.stops, params.steps)
    if region.numel:
        strided_copy(value, layouts[1].broadcast_to(region.shape), out, region)


# ------------------------------------------------------------------ registration


def _elementwise_rows(kernel_dtypes: frozenset):
    """(op, dtypes, kernel) for every elementwise primitive over ``kernel_dtypes``."""
    rows = []
    for op in sorted(PRIMITIVE_OPS, key=lambda o: o.value):
        record = definition(op)
        if record.family not in ("unary", "binary", "select") and op is not OpKind.CAST:
            continue
        for dtypes in record.coverage:
            if all(d in kernel_dtypes for d in dtypes) and renders(
                    op.value if op is not OpKind.CAST else "cast", dtypes):
                rows.append((op, dtypes, LoopKernelFunction(one_value(
                    op.value if op is not OpKind.CAST else "copy", dtypes[:-1], dtypes[-1]))))
    return rows


def register(table: KernelBindingTable, backend_id: BackendId, dtypes: frozenset) -> None:
    """Add the wgpu kernels of the primitive set under ``backend_id``, over the dtypes the
    device's kernels take (``WgpuBackend.kernel_dtypes``: float16 only with shader-f16)."""
    def add(op, key, kernel):
        table.register(op, tuple(key), backend_id, kernel, STRIDED, KERNEL_SOURCE)

    floats = [d for d in (dt.float32, dt.float16) if d in dtypes]
    for op, key, kernel in _elementwise_rows(dtypes):
        add(op, key, kernel)
    # Every dtype moves to and from the device (stored as raw bytes where no kernel takes it).
    for key in definition(OpKind.COPY).coverage:
        add(OpKind.COPY, key, copy_kernel)
    for d in WGPU_DTYPES:
        if d not in dtypes:
            continue
        add(OpKind.CONTIGUOUS, (d, d), LoopKernelFunction(one_value("copy", (d,), d)))
        add(OpKind.FULL, (d,), full_kernel)
        add(OpKind.CAT, (d, d), cat_kernel)
        add(OpKind.SLICE_ASSIGN, (d, d, d), slice_assign_kernel)
        add(OpKind.MAX, (d, d), _reduction_kernel(OpKind.MAX, d))
        add(OpKind.ARGMAX, (d, dt.int64), _reduction_kernel(OpKind.ARGMAX, d))
        for index in (dt.int32, dt.int64):
            add(OpKind.INDEX_SELECT, (d, index, d), index_select_kernel)
        add(OpKind.BITCAST, (d, d), LoopKernelFunction(one_value("copy", (d,), d)))
    for a in (dt.float32, dt.int32, dt.uint32):  # the 32-bit ones (no 16-bit integers here)
        for b in (dt.float32, dt.int32, dt.uint32):
            if a is not b:
                add(OpKind.BITCAST, (a, b), LoopKernelFunction(one_value("bitcast", (a,), b)))
    for d in (*floats, dt.int32, dt.int64, dt.uint32):
        add(OpKind.ARANGE, (d,), arange_kernel)
        add(OpKind.MATMUL, (d, d, d), matmul_kernel)
    for source, target in ((*((f, f) for f in floats), (dt.bool_, dt.int64),
                            (dt.int32, dt.int64), (dt.int64, dt.int64), (dt.uint32, dt.int64))):
        add(OpKind.SUM, (source, target), _reduction_kernel(OpKind.SUM, source))
        add(OpKind.CUMSUM, (source, target), _cumsum_kernel(source))
    table.register(OpKind.FUSED, (), backend_id, WgslKernelGenerator(dtypes), STRIDED,
                   FUSED_SOURCE)
    # Fused groups render as WGSL; its math functions are the GPU's own (they always pay).
    table.declare_backend(backend_id, BackendRecord(fusion=FusionTarget(
        unavailable_reason=lambda: None, math_pays=lambda: True,
        renders=lambda op, key: all(d in dtypes for d in key) and renders(op, key),
        reduce_dtypes=frozenset(floats))))
