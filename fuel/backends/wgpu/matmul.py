"""The wgpu matmul: batched, strided operands, batch dims broadcast, split over binding windows.

Two shader shapes, chosen by the adapter. On a GPU, 16x16 tiles staged through workgroup
memory (``TILED``). On a CPU adapter (lavapipe runs shaders as LLVM code on the host's
cores, where a workgroup barrier is expensive and there is no on-chip memory to stage
through), each invocation accumulates ``BLOCK_ROWS`` rows of one output column in
registers, with no workgroup memory and no barrier (``REGISTER``): on lavapipe this is
the faster one (``bench/wgpu_matmul.py`` prints the ratio). float16 operands are read into
f32, accumulated in f32 and rounded once to float16 at the store (as the CPU's float16 matmul).
"""

from __future__ import annotations

from functools import cache, partial

import numpy as np

from fuel.backends.wgpu.elements import element_bytes
from fuel.backends.wgpu.fill import full_kernel
from fuel.backends.wgpu.loops import device_context, record_dispatch, unaliased
from fuel.backends.wgpu.windows import split_launch
from fuel.compiler.render_wgsl import (
    STORAGE_WORDS,
    float16_support,
    from_word,
    literal,
    rounded,
    to_word,
    value_type,
)
from fuel.dispatch.kernel import Variant
from fuel.ir.errors import KernelError
from fuel.ir.layout import Layout, contiguous_strides

TILE = 16  # the tiled shader's square tile
BLOCK_ROWS = 4  # output rows one invocation of the register shader accumulates
BLOCK_COLUMNS = 64  # invocations (output columns) per workgroup of the register shader
TILED, REGISTER = "tiled", "register"


def _header(dtype, batch_depth: int) -> tuple[list[str], callable]:
    """The bindings, and a function giving ``params`` index of operand p's record; the
    records: ``[M, N, K, batch sizes..., (offset, row stride, column stride, batch
    strides...) for a, b and the output]``."""
    word = STORAGE_WORDS[dtype]
    width = 3 + batch_depth

    def operand(p: int) -> int:
        return 3 + batch_depth + p * width
    return [*float16_support([word]),
            "@group(0) @binding(0) var<storage, read> params: array<i32>;",
            f"@group(0) @binding(1) var<storage, read> a: array<{word}>;",
            f"@group(0) @binding(2) var<storage, read> b: array<{word}>;",
            f"@group(0) @binding(3) var<storage, read_write> c: array<{word}>;"], operand


def _batch_walk(batch_depth: int, operand) -> list[str]:
    """Lines setting ``off0..2`` to the three operands' offsets for batch ``wid.z``."""
    walk = [f"  var off{p} = params[{operand(p)}];" for p in range(3)]
    if batch_depth:
        walk += ["  var rest = i32(wid.z);",
                 f"  for (var d = {batch_depth - 1}; d >= 0; d = d - 1) {{",
                 "    let size = params[3 + d]; let index = rest % size; rest = rest / size;"]
        walk += [f"    off{p} = off{p} + index * params[{operand(p)} + 3 + d];" for p in range(3)]
        walk.append("  }")
    return walk


@cache
def matmul_source(dtype, batch_depth: int, shape: str, block_rows: int = BLOCK_ROWS) -> str:
    """The WGSL of a batched matmul over ``dtype`` in the given shader ``shape`` (the register
    shape accumulating ``block_rows`` rows per invocation)."""
    value, zero = value_type(dtype), literal(0, dtype)

    def read(word: str) -> str:
        return from_word(word, dtype)

    def store(result: str) -> str:
        return to_word(rounded(result, dtype), dtype)
    bindings, operand = _header(dtype, batch_depth)
    a, b, c = operand(0), operand(1), operand(2)
    entry = ("fn main(@builtin(workgroup_id) wid: vec3<u32>, "
             "@builtin(local_invocation_id) lid: vec3<u32>) {")
    if shape == REGISTER:
        rows = range(block_rows)
        return "\n".join([
            *bindings,
            f"@compute @workgroup_size({BLOCK_COLUMNS})", entry,
            "  let m = params[0]; let n = params[1]; let k = params[2];",
            f"  let column = i32(wid.x) * {BLOCK_COLUMNS} + i32(lid.x);",
            "  if (column >= n) { return; }",
            f"  let first = i32(wid.y) * {block_rows};",
            *_batch_walk(batch_depth, operand),
            f"  let a_row = params[{a} + 1]; let a_step = params[{a} + 2];",
            f"  let b_step = params[{b} + 1];",
            # rows past the end read the last row again (in bounds) and are not stored
            *[f"  let a{r} = off0 + min(first + {r}, m - 1) * a_row;" for r in rows],
            f"  let b0 = off1 + column * params[{b} + 2];",
            *[f"  var acc{r}: {value} = {zero};" for r in rows],
            "  for (var t = 0; t < k; t = t + 1) {",
            f"    let y = {read('b[b0 + t * b_step]')};",
            *[f"    acc{r} = acc{r} + {read(f'a[a{r} + t * a_step]')} * y;" for r in rows],
            "  }",
            f"  let c0 = off2 + column * params[{c} + 2];",
            *[f"  if (first + {r} < m) {{ c[c0 + (first + {r}) * params[{c} + 1]] = "
              f"{store(f'acc{r}')}; }}" for r in rows],
            "}", ""])
    return "\n".join([
        *bindings,
        f"var<workgroup> tile_a: array<array<{value}, {TILE}>, {TILE}>;",
        f"var<workgroup> tile_b: array<array<{value}, {TILE}>, {TILE}>;",
        f"@compute @workgroup_size({TILE}, {TILE})", entry,
        "  let m = params[0]; let n = params[1]; let k = params[2];",
        f"  let row = i32(wid.y) * {TILE} + i32(lid.y);",
        f"  let column = i32(wid.x) * {TILE} + i32(lid.x);",
        *_batch_walk(batch_depth, operand),
        f"  var acc: {value} = {zero};",
        f"  for (var t = 0; t < k; t = t + {TILE}) {{",
        "    let ak = t + i32(lid.x);",
        "    let bk = t + i32(lid.y);",
        f"    var x: {value} = {zero};",
        f"    var y: {value} = {zero};",
        f"    if (row < m && ak < k) {{ x = "
        f"{read(f'a[off0 + row * params[{a} + 1] + ak * params[{a} + 2]]')}; }}",
        f"    if (bk < k && column < n) {{ y = "
        f"{read(f'b[off1 + bk * params[{b} + 1] + column * params[{b} + 2]]')}; }}",
        "    tile_a[lid.y][lid.x] = x;",
        "    tile_b[lid.y][lid.x] = y;",
        "    workgroupBarrier();",
        f"    for (var i = 0; i < {TILE}; i = i + 1) {{",
        "      acc = acc + tile_a[lid.y][i] * tile_b[i][lid.x];",
        "    }",
        "    workgroupBarrier();",
        "  }",
        f"  if (row < m && column < n) {{ c[off2 + row * params[{c} + 1] + "
        f"column * params[{c} + 2]] = {store('acc')}; }}",
        "}", ""])


def shader_shape(context) -> str:
    """The matmul shader shape for this adapter: ``REGISTER`` on a CPU adapter, else
    ``TILED`` (``context.matmul_shape`` overrides, for tests and the benchmark)."""
    if context.matmul_shape is not None:
        return context.matmul_shape
    return REGISTER if str(context.info.get("adapter_type", "")).upper() == "CPU" else TILED


class MatmulKernel:
    """Batched matmul (batch dims broadcast) in the adapter's shader shape; both shapes are
    the judge's variants (``fuel.runtime.judge``), the adapter's first."""

    __name__ = __qualname__ = "matmul_kernel"

    def __call__(self, inputs, outputs, layouts, params) -> None:
        matmul_in_shape(inputs, outputs, layouts, shader_shape(device_context(outputs[0])))

    def variants(self, layouts, params, device) -> tuple[Variant, ...]:
        from fuel.backends import get_backend

        context = get_backend(device).context(device)
        if context.matmul_shape is not None:  # set by a test or the benchmark: no contest
            return (Variant(context.matmul_shape, partial(_bound, context.matmul_shape)),)
        first = shader_shape(context)
        shapes = (first, TILED if first == REGISTER else REGISTER)
        return tuple(Variant(shape, partial(_bound, shape)) for shape in shapes)


def _bound(shape: str, inputs, outputs, layouts, params):
    return partial(matmul_in_shape, inputs, outputs, layouts, shape)


matmul_kernel = MatmulKernel()


def matmul_in_shape(inputs, outputs, layouts, shape: str) -> None:
    """Batched matmul (batch dims broadcast) in shader ``shape`` (TILED or REGISTER)."""
    a_layout, b_layout, out_layout = layouts
    out = outputs[0]
    if out_layout.numel == 0:
        return
    a_layout = a_layout if a_layout.ndim > 1 else Layout((1,) + a_layout.shape,
                                                         (0,) + a_layout.strides,
                                                         a_layout.offset)
    b_layout = b_layout if b_layout.ndim > 1 else Layout(b_layout.shape + (1,),
                                                         b_layout.strides + (0,),
                                                         b_layout.offset)
    m, k = a_layout.shape[-2:]
    n = b_layout.shape[-1]
    batch = tuple(np.broadcast_shapes(a_layout.shape[:-2], b_layout.shape[:-2]))
    c_layout = Layout(batch + (m, n), contiguous_strides(batch + (m, n)), out_layout.offset)
    a_full = a_layout.broadcast_to(batch + (m, k))
    b_full = b_layout.broadcast_to(batch + (k, n))
    inputs = unaliased(inputs, out)
    count = int(np.prod(batch, dtype=np.int64)) if batch else 1
    context = device_context(out)
    if count > context.max_groups:
        raise KernelError(f"matmul over {count} batches exceeds the adapter's "
                          f"max-compute-workgroups-per-dimension ({context.max_groups})")
    if k == 0:
        full_kernel([], [out], [out_layout], _Zero())
        return
    # The launch's index space is (batch..., m, n, k): k is never cut (no partial sums).
    depth = len(batch)
    space = batch + (m, n, k)
    spaced = [Layout(space, a_full.strides[:-2] + (a_full.strides[-2], 0, a_full.strides[-1]),
                     a_full.offset),
              Layout(space, b_full.strides[:-2] + (0, b_full.strides[-1], b_full.strides[-2]),
                     b_full.offset),
              Layout(space, c_layout.strides[:-2] + (c_layout.strides[-2], c_layout.strides[-1],
                                                     0), c_layout.offset)]
    block_rows = 1 if m == 1 else BLOCK_ROWS  # a matrix-vector product: no repeated rows
    source = matmul_source(out.dtype, depth, shape, block_rows)
    across, down = (BLOCK_COLUMNS, block_rows) if shape == REGISTER else (TILE, TILE)
    for piece in split_launch(context, space, [inputs[0].buffer, inputs[1].buffer, out.buffer],
                              spaced, [element_bytes(s.dtype) for s in (*inputs, out)],
                              fixed=(depth + 2,), label="matmul"):
        rows, columns = piece.shape[depth], piece.shape[depth + 1]
        a, b, c = piece.layouts
        meta = [rows, columns, k, *piece.shape[:depth]]
        meta += [a.offset, a.strides[depth], a.strides[depth + 2], *a.strides[:depth]]
        meta += [b.offset, b.strides[depth + 2], b.strides[depth + 1], *b.strides[:depth]]
        meta += [c.offset, c.strides[depth], c.strides[depth + 1], *c.strides[:depth]]
        batches = int(np.prod(piece.shape[:depth], dtype=np.int64)) if depth else 1
        record_dispatch(context, source, "matmul", piece.bindings, [False, False, True], meta,
                        groups=(-(-columns // across), -(-rows // down), batches))


class _Zero:
    value = 0
