"""Launching WGSL on the device: LoopKernels (one-value elementwise kernels and the planner's
fused groups) rendered by ``fuel.compiler.render_wgsl`` and recorded into the open batch."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from functools import cache

import numpy as np

from fuel.backends.wgpu.elements import buffer_bytes, element_bytes
from fuel.backends.wgpu.windows import split_launch
from fuel.compiler.kernel_ir import (
    KernelBuilder,
    Load,
    LoopKernel,
    Store,
    Value,
    collapse,
    kernel_row_schedule,
    row_schedule,
    store_strides,
)
from fuel.compiler.render_wgsl_rows import render as render_wgsl
from fuel.dispatch.kernel import BindingEntry, KernelCaps, Launcher
from fuel.ir.errors import KernelError
from fuel.ir.layout import Layout
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
def _loop_source(values: tuple, load_dtypes: tuple, stores: tuple, reduced: bool,
                 depth: int, row_depth: int) -> str:
    """The WGSL of a kernel's values, loads and stores over ``depth`` dims, the last
    ``row_depth`` the row (with ``reduced``). The source depends on no shape or stride:
    ``load_dtypes`` is (dtype, constant along the row) per load, ``stores`` their
    (value, dtype, per_row)."""
    loads = tuple(Load(d, (0 if constant else 1,)) for d, constant in load_dtypes)
    stores = tuple(Store(value, dtype, per_row) for value, dtype, per_row in stores)
    return render_wgsl(LoopKernel("kernel", (1,) * reduced, loads, values, stores, (),
                                  int(reduced)), depth, row_depth)


def loop_source(kernel: LoopKernel, depth: int, row_depth: int = 1) -> str:
    """The WGSL of ``kernel`` over ``depth`` dims (of which ``row_depth`` are the row), shared
    by every kernel with its values, operand dtypes and row pattern."""
    first = len(kernel.shape) - kernel.reduced
    loads = tuple((load.dtype, bool(kernel.reduced) and not any(load.strides[first:]))
                  for load in kernel.loads)
    stores = tuple((store.value, store.dtype, store.per_row) for store in kernel.stores)
    return _loop_source(kernel.values, loads, stores, bool(kernel.reduced), depth, row_depth)


def run_loop(kernel: LoopKernel, inputs: Sequence, outputs: Sequence,
             in_layouts: Sequence[Layout], out_layouts: Sequence[Layout],
             shape: tuple[int, ...], bind: bool = False):
    """Launch ``kernel`` over ``shape``: inputs read through ``in_layouts`` (broadcast to
    ``shape``), outputs written through ``out_layouts``. With ``bind``: a launcher recording
    it (None where the launch cannot be bound once: nothing to do, or aliased operands)."""
    split = len(shape) - kernel.reduced
    if math.prod(shape[:split]) == 0:  # no element (or no row: an empty row folds to the
        return None                    # identity)
    if bind and any(s.buffer is outputs[0].buffer for s in inputs):
        return None
    inputs = unaliased(inputs, outputs[0])
    layouts = list(in_layouts)
    for store, layout in zip(kernel.stores, out_layouts):
        strides = layout.strides
        if kernel.reduced and store.per_row:
            strides = tuple(strides[:split]) + (0,) * kernel.reduced
        layouts.append(Layout(tuple(shape), strides, layout.offset))
    operands = list(inputs) + list(outputs)
    context = device_context(outputs[0])
    pieces = split_launch(context, shape, [s.buffer for s in operands], layouts,
                          [element_bytes(s.dtype) for s in operands],
                          fixed=range(split, len(shape)) if kernel.reduced else (),
                          label=kernel.name)
    if bind and len(pieces) > 1:
        return None
    writable = [False] * len(inputs) + [True] * len(outputs)
    launcher = None
    for piece in pieces:
        row_depth = 1
        if kernel.reduced:  # the row schedule: rows and row collapsed apart
            schedule = row_schedule(piece.shape, kernel.reduced,
                                    [layout.strides for layout in piece.layouts])
            sizes = [*schedule.outer_sizes, *schedule.row_sizes]
            strides = [(*outer, *row) for outer, row in zip(schedule.outer_strides,
                                                             schedule.row_strides)]
            row_depth, items = len(schedule.row_sizes), schedule.rows
        else:
            sizes, strides = collapse(piece.shape, [layout.strides for layout in piece.layouts])
            items = math.prod(piece.shape)
        meta = [items, *sizes]
        for layout, operand in zip(piece.layouts, strides):
            meta += [layout.offset, *operand]
        source = loop_source(kernel, len(sizes), row_depth)
        launcher = record_dispatch(context, source, kernel.name, piece.bindings, writable, meta,
                                   items, bind=bind)
    return launcher


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


def run_kernel(kernel: LoopKernel, inputs, outputs, layouts, bind: bool = False):
    """Launch ``kernel`` as its loads and stores walk it (each operand's offset from its
    layout in ``layouts``: inputs, then outputs)."""
    loads = len(kernel.loads)
    in_layouts = [Layout(kernel.shape, load.strides, layout.offset)
                  for load, layout in zip(kernel.loads, layouts)]
    out_layouts = [Layout(kernel.shape, store_strides(kernel, k), layout.offset)
                   for k, layout in enumerate(layouts[loads:loads + len(kernel.stores)])]
    return run_loop(kernel, inputs, outputs, in_layouts, out_layouts, kernel.shape, bind)


class FusedKernel(LoopLaunch):
    """A planner's fused group (a LoopKernel with its loads' strides) as one WGSL launch."""

    def __init__(self, kernel: LoopKernel) -> None:
        self.loop = kernel
        self.__qualname__ = self.__name__ = kernel.name

    def launch(self, inputs, outputs, layouts, bind: bool = False):
        return run_kernel(self.loop, inputs, outputs, layouts, bind)


class RowKernel(LoopLaunch):
    """A registered kernel (a reduction, a scan) whose launches are LoopKernels:
    ``build(inputs, outputs, layouts, params)`` gives one launch's (``row_kernels``) or None
    (nothing to do). ``__qualname__`` carries the digest of ``sample``'s rendering, so the
    binding's revision changes whenever the renderer's output does."""

    def __init__(self, name: str, build, sample: LoopKernel) -> None:
        self.builder = build
        self.built: dict = {}  # (layouts, dtypes, params) -> LoopKernel, for eager launches
        schedule = kernel_row_schedule(sample)
        source = loop_source(sample, len(schedule.outer_sizes) + len(schedule.row_sizes),
                             len(schedule.row_sizes))
        digest = hashlib.blake2b(source.encode(), digest_size=8).hexdigest()
        self.__qualname__ = self.__name__ = f"wgsl.{name}#{digest}"

    def build(self, inputs, outputs, layouts, params) -> LoopKernel | None:
        """The launch's LoopKernel, built once per layouts, dtypes and params."""
        key = (tuple(layouts), tuple(s.dtype for s in inputs), params)
        try:
            return self.built[key]
        except KeyError:
            pass
        except TypeError:  # params that do not hash: built each time
            return self.builder(inputs, outputs, layouts, params)
        if len(self.built) >= 1024:
            self.built.clear()
        loop = self.built[key] = self.builder(inputs, outputs, layouts, params)
        return loop

    def __call__(self, inputs, outputs, layouts, params) -> None:
        loop = self.build(inputs, outputs, layouts, params)
        if loop is not None:
            run_kernel(loop, inputs, outputs, layouts)

    def prepare(self, inputs, outputs, layouts, params) -> Launcher:
        loop = self.build(inputs, outputs, layouts, params)
        if loop is None:
            return lambda: None
        return run_kernel(loop, inputs, outputs, layouts, bind=True) or (
            lambda: run_kernel(loop, inputs, outputs, layouts))


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
    if kernel.reduced:
        schedule = kernel_row_schedule(kernel)
        row_depth = len(schedule.row_sizes)
        depth = len(schedule.outer_sizes) + row_depth
    else:
        row_depth, depth = 1, len(collapse(kernel.shape,
                                           [load.strides for load in kernel.loads])[0])
    source = loop_source(kernel, depth, row_depth)
    revision = int.from_bytes(hashlib.blake2b(source.encode(), digest_size=8).digest(), "little")
    return BindingEntry(FusedKernel(kernel), STRIDED, FUSED_SOURCE, revision)

