"""The wgpu kernels of the primitive set, as WGSL.

Elementwise ops, casts, where, copies and bitcasts are one-value LoopKernels rendered by
``fuel.compiler.render_wgsl`` (the renderer fused groups use too); reductions, cumsum,
index_select and the tiled matmul are shaders written here. Every launch records into the
device's open command batch (``runtime.DeviceContext.dispatch``) and returns at once.
float16 kernels are registered only where the adapter has ``shader-f16`` (``register``'s
``dtypes``); they compute in f32 and round each result to float16, as the CPU's do.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from fuel.backends.wgpu.elements import WGPU_DTYPES, element_bytes
from fuel.backends.wgpu.fill import full_kernel
from fuel.backends.wgpu.loops import (
    FUSED_SOURCE,
    KERNEL_SOURCE,
    STRIDED,
    LoopKernelFunction,
    WgslKernelGenerator,
    device_context,
    one_value,
    record_dispatch,
    strided_copy,
    unaliased,
)
from fuel.backends.wgpu.matmul import matmul_kernel
from fuel.backends.wgpu.windows import split_launch
from fuel.compiler.fusion import FusionTarget
from fuel.compiler.render_wgsl import (
    PRELUDE,
    STORAGE_WORDS,
    VALUE_TYPES,
    from_word,
    is_float,
    literal,
    renders,
    rounded,
    shader_header,
    to_word,
)
from fuel.dispatch.kernel import BackendRecord, KernelBindingTable
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.layout import Layout, contiguous_strides
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




@cache
def _reduce_source(op: str, source, target, kept: int, reduced: int) -> str:
    """One invocation per output element: walk the kept dims to the row's start, then every
    reduced element (decomposed over the reduced sizes, which follow the kept ones). Float
    sums accumulate in f32 (Kahan), float16's rounded once at the store."""
    value = VALUE_TYPES[source]
    words = [STORAGE_WORDS[source], STORAGE_WORDS[target]]
    lines = [shader_header(words, [False, True], ["b0", "b1"], PRELUDE)]
    lines += _walk(kept, 2)
    total_at = 1 + kept + 2 * (1 + kept)  # reduced sizes follow the operand records
    lines.append("  var total = 1;")
    lines += [f"  total = total * params[{total_at + d}];" for d in range(reduced)]
    load = from_word("b0[at]", source)
    lines += ["  var first = true;"]
    accumulate = VALUE_TYPES[target]
    if op == "sum":
        lines += [f"  var acc: {accumulate} = {literal(0, target)};", "  var carry = 0.0;"]
    elif op == "max":
        lines.append(f"  var acc: {value} = {literal(0, source)};")
    else:
        lines += [f"  var best: {value} = {literal(0, source)};", "  var best_at = 0;"]
    lines += ["  for (var r = 0; r < total; r = r + 1) {",
              "    var at = base0; var left = r;"]
    for d in range(reduced - 1, -1, -1):
        lines.append(f"    at = at + (left % params[{total_at + d}]) * "
                     f"params[{total_at + reduced + d}]; left = left / params[{total_at + d}];")
    lines.append(f"    let v = {load};")
    if op == "sum":
        if is_float(target):
            lines += ["    let y = v - carry; let t = acc + y; carry = (t - acc) - y; acc = t;"]
        elif value == "bool":
            lines.append(f"    acc = acc + select({literal(0, target)}, {literal(1, target)}, v);")
        else:
            lines.append(f"    acc = acc + {accumulate}(v);")
    elif op == "max":
        if value == "f32":
            lines.append("    if (first || v > acc || fuel_isnan(v)) { if (!fuel_isnan(acc) || "
                         "first) { acc = v; } }")
        elif value == "bool":
            lines.append("    acc = acc || v;")
        else:
            lines.append("    if (first || v > acc) { acc = v; }")
    else:  # argmax: the first maximum; the first NaN wins (NumPy)
        if value == "f32":
            lines.append("    if (first || (!fuel_isnan(best) && (v > best || fuel_isnan(v)))) "
                         "{ best = v; best_at = r; }")
        elif value == "bool":
            lines.append("    if (first || (v && !best)) { best = v; best_at = r; }")
        else:
            lines.append("    if (first || v > best) { best = v; best_at = r; }")
    lines += ["    first = false;", "  }"]
    result = "best_at" if op == "argmax" else rounded("acc", target)
    lines += [f"  b1[base1] = {to_word(result, target)};", "}", ""]
    return "\n".join(lines)


def _reduce_kernel(op: str):
    def kernel(inputs, outputs, layouts, params) -> None:
        layout, out = layouts[0], outputs[0]
        count = layouts[-1].numel
        if count == 0:
            return
        dims = set(params.dims)
        kept = [d for d in range(layout.ndim) if d not in dims and layout.shape[d] != 1]
        reduced = [d for d in range(layout.ndim) if d in dims and layout.shape[d] != 1]
        order = kept + reduced
        space = tuple(layout.shape[d] for d in order)
        kept_shape = space[:len(kept)]
        spaced = [Layout(space, tuple(layout.strides[d] for d in order), layout.offset),
                  Layout(space, contiguous_strides(kept_shape) + (0,) * len(reduced),
                         layouts[-1].offset)]
        source = _reduce_source(op, inputs[0].dtype, out.dtype, len(kept), len(reduced))
        context = device_context(out)
        for piece in split_launch(context, space, [inputs[0].buffer, out.buffer], spaced,
                                  [element_bytes(inputs[0].dtype), element_bytes(out.dtype)],
                                  fixed=range(len(kept), len(order)), label=op):
            source_layout, out_piece = piece.layouts
            sizes = piece.shape[:len(kept)]
            items = int(np.prod(sizes, dtype=np.int64))
            meta = [items, *sizes, source_layout.offset, *source_layout.strides[:len(kept)],
                    out_piece.offset, *out_piece.strides[:len(kept)], *piece.shape[len(kept):],
                    *source_layout.strides[len(kept):]]
            record_dispatch(context, source, op, piece.bindings, [False, True], meta, items)
    kernel.__qualname__ = kernel.__name__ = f"wgsl.{op}"
    return kernel


@cache
def _cumsum_source(source, target, depth: int) -> str:
    words = [STORAGE_WORDS[source], STORAGE_WORDS[target]]
    lines = [shader_header(words, [False, True], ["b0", "b1"])]
    lines += _walk(depth, 2)
    length_at = 1 + depth + 2 * (1 + depth)
    value = "select(0, 1, b0[at] != 0u)" if source.is_bool else from_word("b0[at]", source)
    convert = VALUE_TYPES[target]
    lines += [f"  let length = params[{length_at}];",
              f"  var acc: {convert} = {literal(0, target)};",
              "  for (var j = 0; j < length; j = j + 1) {",
              f"    let at = base0 + j * params[{length_at + 1}];",
              f"    acc = acc + {convert}({value});",
              f"    b1[base1 + j * params[{length_at + 2}]] = "
              f"{to_word(rounded('acc', target), target)};",
              "  }", "}", ""]
    return "\n".join(lines)


def cumsum_kernel(inputs, outputs, layouts, params) -> None:
    """One invocation per line along ``dim``, summing in order (as NumPy's cumsum)."""
    layout, out_layout, out = layouts[0], layouts[-1], outputs[0]
    dim = params.dim
    if out_layout.numel == 0:
        return
    outer = [d for d in range(layout.ndim) if d != dim]
    lines = int(np.prod([layout.shape[d] for d in outer], dtype=np.int64))
    meta = [lines, *(layout.shape[d] for d in outer)]
    for item in (layout, out_layout):
        meta += [item.offset, *(item.strides[d] for d in outer)]
    meta += [layout.shape[dim], layout.strides[dim], out_layout.strides[dim]]
    source = _cumsum_source(inputs[0].dtype, out.dtype, len(outer))
    inputs = unaliased(inputs, out)
    record_dispatch(device_context(out), source, "cumsum", [inputs[0].buffer, out.buffer],
                    [False, True], meta, lines)


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
        add(OpKind.MAX, (d, d), _reduce_kernel("max"))
        add(OpKind.ARGMAX, (d, dt.int64), _reduce_kernel("argmax"))
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
        add(OpKind.SUM, (source, target), _reduce_kernel("sum"))
        add(OpKind.CUMSUM, (source, target), cumsum_kernel)
    table.register(OpKind.FUSED, (), backend_id, WgslKernelGenerator(dtypes), STRIDED,
                   FUSED_SOURCE)
    # Fused groups render as WGSL; its math functions are the GPU's own (they always pay).
    table.declare_backend(backend_id, BackendRecord(fusion=FusionTarget(
        unavailable_reason=lambda: None, math_pays=lambda: True,
        renders=lambda op, key: all(d in dtypes for d in key) and renders(op, key),
        reduce_dtypes=frozenset(floats))))
