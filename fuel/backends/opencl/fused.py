"""Fused nodes on OpenCL: each group's LoopKernel rendered to OpenCL C (fuel.compiler's
``render_opencl``) and launched like every other OpenCL kernel; ``RenderedKernel`` registers
the reductions and row ops the same way (one LoopKernel per launch's layouts).

The backend registers ``generate_opencl_kernel`` at ``(OpKind.FUSED, (), opencl)`` and declares
its ``FusionTarget``; the planner calls the generator with a fused group's LoopKernel and gets a
BindingEntry (source tag ``opencl``, revision = hash of the generated source). Programs go
through the device's program cache (keyed by source digest, built once per device, on the
first launch on that device; a build failure is a KernelError carrying the compiler log).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np

from fuel.backends.opencl.codegen import ProgramSpec
from fuel.backends.opencl.common import group_size, launch_1d, use_groups
from fuel.backends.opencl.runtime import cl
from fuel.compiler.fusion import FusionTarget
from fuel.compiler.kernel_ir import LoopKernel, has_scan
from fuel.compiler.render_expression import renders
from fuel.compiler.render_opencl import KERNEL_NAME, OpenClProgram, render_opencl, rendered_dtypes
from fuel.compiler.render_opencl_rows import render_opencl_rows
from fuel.dispatch.kernel import BindingEntry, KernelCaps, Launcher
from fuel.ir import dtype as dt
from fuel.ir.layout import Layout

GENERATED = KernelCaps(strided_input=True)
KERNEL_SOURCE = "opencl"


def render(kernel: LoopKernel, group: bool = False) -> OpenClProgram:
    """The OpenCL C of ``kernel``: one with a row through ``render_opencl_rows`` (a work-group
    per row with ``group``, a work-item per row otherwise), an elementwise one through
    ``render_opencl``."""
    return render_opencl_rows(kernel, group) if kernel.reduced else render_opencl(kernel)


class FusedOpenClKernel:
    """A LoopKernel as an OpenCL kernel: ``kernel(inputs, outputs, layouts, params)``. A row
    kernel has two renderings (a work-item or a work-group per row), chosen per launch as the
    hand-written row kernels choose (``use_groups``); each is built on first use."""

    def __init__(self, kernel: LoopKernel) -> None:
        self.loop = kernel
        self.empty = any(size == 0 for size in kernel.rows_shape)  # (an empty row folds)
        self.rows = self.length = 1
        for size in kernel.rows_shape:
            self.rows *= size
        for size in kernel.row_shape:
            self.length *= size
        self.serial = not kernel.reduced or has_scan(kernel)  # (a scan folds its row in order)
        self.variants = {}  # group? -> (OpenClProgram, ProgramSpec)
        self.__qualname__ = self.__name__ = kernel.name

    def variant(self, group: bool):
        """(OpenClProgram, ProgramSpec) of one rendering, rendered once."""
        found = self.variants.get(group)
        if found is None:
            program = render(self.loop, group)
            spec = ProgramSpec(f"{self.loop.name}{'[group]' if group else ''}", program.source,
                               program.fp64)
            found = self.variants[group] = (program, spec)
        return found

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: object) -> Launcher:
        """Build (once per device) and bind the buffers and arguments; the launcher enqueues."""
        if self.empty:
            return lambda: None
        context = outputs[0].backend.context(outputs[0].device)
        group = not self.serial and use_groups(context, self.rows, self.length)
        program, spec = self.variant(group)
        compiled = context.kernel(spec, KERNEL_NAME)
        arguments = np.array(program.bind([layout.offset for layout in layouts]), np.int64)
        buffers = [storage.buffer for storage in (*inputs, *outputs)]
        if group:
            size = group_size(context, compiled, self.length)
            scratch = cl.LocalMemory(size * program.scratch)
            rows = self.rows
            return lambda: context.launch(compiled, (rows * size,), (size,), *buffers,
                                          arguments, scratch)
        count = self.rows if self.loop.reduced else program.arguments[0]
        return lambda: launch_1d(context, compiled, count, *buffers, arguments)

    def __call__(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                 params: object) -> None:
        self.prepare(inputs, outputs, layouts, params)()


@lru_cache(maxsize=4096)
def loop_kernel(kernel: LoopKernel) -> FusedOpenClKernel:
    """The kernel of ``kernel``, made (and rendered) once per LoopKernel."""
    return FusedOpenClKernel(kernel)


class RenderedKernel:
    """A registered OpenCL kernel (a reduction, a row op) whose launches are LoopKernels:
    ``build(inputs, outputs, layouts, params)`` describes one launch in the kernel IR (or
    gives None: nothing to do) and ``render`` writes its program. ``__qualname__``
    carries the digest of ``sample``'s rendering, so the binding's revision hash changes
    whenever the renderer's output does."""

    def __init__(self, name: str, build: Callable, sample: LoopKernel) -> None:
        self.build = build
        self.name = name
        source = render(sample).source
        digest = hashlib.blake2b(source.encode(), digest_size=8).hexdigest()
        self.__qualname__ = f"opencl.{name}[{build.__qualname__}]#{digest}"

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: object) -> Launcher:
        loop = self.build(inputs, outputs, layouts, params)
        if loop is None:
            return lambda: None
        return loop_kernel(loop).prepare(inputs, outputs, layouts, params)

    def __call__(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                 params: object) -> None:
        self.prepare(inputs, outputs, layouts, params)()

    def __repr__(self) -> str:
        return f"RenderedKernel({self.__qualname__})"


def generate_opencl_kernel(kernel: LoopKernel) -> BindingEntry:
    """The OpenCL kernel of ``kernel``; the entry's revision hash is its generated source's."""
    fused = FusedOpenClKernel(kernel)
    program, _ = fused.variant(False)
    revision = int.from_bytes(hashlib.blake2b(program.source.encode(), digest_size=8).digest(),
                              "little")
    return BindingEntry(fused, GENERATED, KERNEL_SOURCE, revision)


def fusion_target(fp64: bool, prefers_decomposed: frozenset = frozenset()) -> FusionTarget:
    """What fusion may hand the OpenCL renderer on devices with (or without) float64, and
    the composites the backend prefers decomposed and fused (its measured set).
    Math functions pay: OpenCL's are vectorized builtins on every driver (PoCL included)."""
    dtypes = rendered_dtypes(fp64)
    return FusionTarget(unavailable_reason=lambda: None,
                        renders=lambda op, combo: renders(op, combo, dtypes),
                        math_pays=lambda: True,
                        reduce_dtypes=frozenset(d for d in (dt.float32, dt.float64)
                                                if d in dtypes),
                        prefers_decomposed=frozenset(prefers_decomposed))
