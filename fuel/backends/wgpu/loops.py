"""Launching WGSL on the device: LoopKernels (one-value elementwise kernels and the planner's
fused groups) rendered by ``fuel.compiler.render_wgsl`` and recorded into the open batch."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache

import numpy as np

from fuel.backends.wgpu.elements import buffer_bytes, element_bytes
from fuel.backends.wgpu.windows import split_launch
from fuel.compiler.kernel_ir import KernelBuilder, Load, LoopKernel, Store, Value, collapse
from fuel.compiler.render_wgsl import (
    render_wgsl,
)
from fuel.dispatch.kernel import BindingEntry, KernelCaps, Launcher
from fuel.ir.errors import KernelError
from fuel.ir.layout import Layout, contiguous_strides
from fuel.ir.ops import OpKind

STRIDED = KernelCaps(strided_input=True)
KERNEL_SOURCE = "wgsl"
FUSED_SOURCE = "wgsl-fused"  # generated per fused group (tested by the fusion tests)



# ------------------------------------------------------------------ launching


def device_context(storage):
    return storage.backend.context(storage.device)


def record_dispatch(context, source: str, label: str, buffers: Sequence, writable: Sequence[bool],
                    meta: Sequence[int], items: int = 0, groups: tuple[int, int, int] | None = None,
                    bind: bool = False):
    """Record the dispatch now, or (``bind``) return a launcher that records it."""
    pipeline = context.pipeline(source, writable, label)
    record = context.bind if bind else context.dispatch
    return record(pipeline, buffers, np.asarray(meta, np.int64).astype(np.int32), items, groups)


def unaliased(inputs: Sequence, output) -> list:
    """``inputs`` with any that shares ``output``'s buffer copied first (a shader cannot bind
    one buffer as read-only and read-write at once)."""
    result = []
    for storage in inputs:
        if storage.buffer is output.buffer:
            copy = storage.backend.allocate(storage.device, storage.dtype, storage.size)
            device_context(storage).copy(storage.buffer, 0, copy.buffer, 0,
                                         buffer_bytes(storage.dtype, storage.size))
            storage = copy
        result.append(storage)
    return result


@cache
def _loop_source(values: tuple, load_dtypes: tuple, stores: tuple, reduced: int,
                 depth: int) -> str:
    """``load_dtypes``: (dtype, constant along the row) per load."""
    loads = tuple(Load(d, (0 if constant else 1,)) for d, constant in load_dtypes)
    return render_wgsl(LoopKernel("kernel", (), loads, values, stores, (), reduced), depth)


def run_loop(kernel: LoopKernel, inputs: Sequence, outputs: Sequence,
             in_layouts: Sequence[Layout], out_layouts: Sequence[Layout],
             shape: tuple[int, ...], bind: bool = False):
    """Launch ``kernel`` over ``shape``: inputs read through ``in_layouts`` (broadcast to
    ``shape``), outputs written through ``out_layouts``. With ``bind``: a launcher recording
    it (None where the launch cannot be bound once: nothing to do, or aliased operands)."""
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if count == 0:
        return None
    if bind and any(s.buffer is outputs[0].buffer for s in inputs):
        return None
    inputs = unaliased(inputs, outputs[0])
    layouts = list(in_layouts)
    for store, layout in zip(kernel.stores, out_layouts):
        strides = layout.strides
        if kernel.reduced and store.per_row:
            strides = tuple(strides[:len(shape) - 1]) + (0,)
        layouts.append(Layout(tuple(shape), strides, layout.offset))
    operands = list(inputs) + list(outputs)
    context = device_context(outputs[0])
    pieces = split_launch(context, shape, [s.buffer for s in operands], layouts,
                          [element_bytes(s.dtype) for s in operands],
                          fixed=(len(shape) - 1,) if kernel.reduced else (), label=kernel.name)
    if bind and len(pieces) > 1:
        return None
    writable = [False] * len(inputs) + [True] * len(outputs)
    launcher = None
    for piece in pieces:
        if kernel.reduced:
            depth, sizes = len(piece.shape), list(piece.shape)
            strides = [layout.strides for layout in piece.layouts]
            items = int(np.prod(piece.shape[:-1], dtype=np.int64)) if piece.shape[-1] else 0
        else:
            sizes, strides = collapse(piece.shape, [layout.strides for layout in piece.layouts])
            depth, items = len(sizes), int(np.prod(piece.shape, dtype=np.int64))
        meta = [items, *sizes]
        for layout, operand in zip(piece.layouts, strides):
            meta += [layout.offset, *operand]
        source = _loop_source(kernel.values, _load_patterns(kernel),
                              kernel.stores, kernel.reduced, depth)
        launcher = record_dispatch(context, source, kernel.name, piece.bindings, writable, meta,
                                   items, bind=bind)
    return launcher


def _load_patterns(kernel: LoopKernel) -> tuple:
    return tuple((load.dtype, bool(kernel.reduced) and load.strides[-1] == 0)
                 for load in kernel.loads)


@cache
def one_value(op: str, in_dtypes: tuple, out_dtype) -> LoopKernel:
    """The LoopKernel of one elementwise op (``copy`` and ``bitcast`` included)."""
    builder = KernelBuilder(())
    args = tuple(builder.load(Load(d, ())) for d in in_dtypes)
    if op == "copy":
        value = args[0]
    elif op == "bitcast":
        value = builder.value(Value("bitcast", out_dtype, args))
    else:
        value = builder.apply(OpKind(op), args, out_dtype)
    return builder.build(op, [Store(builder.cast(value, out_dtype), out_dtype)], (op,))


class LoopLaunch:
    """A kernel that runs as one WGSL launch: ``launch`` records it (``bind``: for replays,
    the params buffer and bind group made once, returning the recording launcher)."""

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self.launch(inputs, outputs, layouts)

    def prepare(self, inputs, outputs, layouts, params) -> Launcher:
        """For replays: the params buffer and bind group made once; a launch only records."""
        return self.launch(inputs, outputs, layouts, bind=True) or (
            lambda: self(inputs, outputs, layouts, params))

    def launch(self, inputs, outputs, layouts, bind: bool = False):
        raise NotImplementedError


class LoopKernelFunction(LoopLaunch):
    """A registered kernel made of one LoopKernel: walks strided inputs, writes a dense
    output."""

    def __init__(self, kernel: LoopKernel) -> None:
        self.kernel = kernel
        self.__qualname__ = self.__name__ = f"wgsl.{kernel.name}"

    def launch(self, inputs, outputs, layouts, bind: bool = False):
        out_layout = layouts[-1]
        shape = out_layout.shape
        in_layouts = [layout.broadcast_to(shape) for layout in layouts[:-1]]
        return run_loop(self.kernel, inputs, outputs, in_layouts, [out_layout], shape, bind)


def strided_copy(source, source_layout: Layout, target, target_layout: Layout) -> None:
    """Copy what ``source_layout`` views into ``target_layout``'s elements (same device)."""
    kernel = one_value("copy", (source.dtype,), target.dtype)
    run_loop(kernel, [source], [target], [source_layout.broadcast_to(target_layout.shape)],
             [target_layout], target_layout.shape)

# ------------------------------------------------------------------ fused groups


class FusedKernel(LoopLaunch):
    """A planner's fused group (a LoopKernel with its loads' strides) as one WGSL launch."""

    def __init__(self, kernel: LoopKernel) -> None:
        self.loop = kernel
        self.__qualname__ = self.__name__ = kernel.name

    def launch(self, inputs, outputs, layouts, bind: bool = False):
        kernel = self.loop
        in_layouts = [Layout(kernel.shape, load.strides, layout.offset)
                      for load, layout in zip(kernel.loads, layouts)]
        out_layouts = [Layout(kernel.shape, contiguous_strides(kernel.shape)
                              if not store.per_row else
                              contiguous_strides(kernel.shape[:-1]) + (0,), layouts[-1].offset)
                       for store in kernel.stores]
        return run_loop(kernel, inputs, outputs, in_layouts, out_layouts, kernel.shape, bind)


class WgslKernelGenerator:
    """The generator of fused kernels a wgpu backend registers at ``(FUSED, (), backend)``,
    for the dtypes its device's kernels take."""

    def __init__(self, dtypes: frozenset) -> None:
        self.dtypes = dtypes
        self.__qualname__ = self.__name__ = "generate_wgsl_kernel"

    def __call__(self, kernel: LoopKernel) -> BindingEntry:
        return generate_wgsl_kernel(kernel, self.dtypes)


def generate_wgsl_kernel(kernel: LoopKernel, kernel_dtypes: frozenset) -> BindingEntry:
    """The binding of a fused group on wgpu: its WGSL (rendered now, so a dtype the device's
    kernels do not take fails at plan time with the group's name)."""
    dtypes = [load.dtype for load in kernel.loads] + [s.dtype for s in kernel.stores]
    unsupported = sorted({d.name for d in dtypes if d not in kernel_dtypes})
    if unsupported:
        raise KernelError(f"{kernel.name} reads or writes {', '.join(unsupported)}, which this "
                          f"wgpu device's kernels do not take")
    depth = len(kernel.shape) if kernel.reduced else len(collapse(
        kernel.shape, [load.strides for load in kernel.loads])[0])
    source = _loop_source(kernel.values, _load_patterns(kernel),
                          kernel.stores, kernel.reduced, depth)
    revision = int.from_bytes(hashlib.blake2b(source.encode(), digest_size=8).digest(), "little")
    return BindingEntry(FusedKernel(kernel), STRIDED, FUSED_SOURCE, revision)

