"""CUDA kernels whose launches are LoopKernels (fused groups, the elementwise family,
reductions, scans and row ops), rendered by ``fuel.compiler.render_cuda``, compiled by NVRTC
once per source and device, and launched on the device's stream; and ``SourceKernel``, the
hand-written CUDA C kernels (indexing, arange) launched the same way.

Everything here imports without CuPy: a kernel touches the device only when it is prepared,
so the binding lists (and the CI's NVRTC check of every rendering) exist on any machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from functools import lru_cache

from fuel.compiler.fusion import FusionTarget
from fuel.compiler.kernel_ir import LoopKernel, has_scan
from fuel.compiler.render_cuda import CUDA_DTYPES, render_cuda, renders
from fuel.compiler.render_opencl import OpenClProgram
from fuel.dispatch.kernel import BindingEntry, KernelCaps, KernelList, Launcher
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.layout import Layout

KERNEL_SOURCE = "cuda"
STRIDED = KernelCaps(strided_input=True)
THREADS = 256  # threads per block of an elementwise launch
ROW_THREADS = 256  # the most threads of a block per row


def kernel_list() -> KernelList:
    """An empty list of CUDA bindings, for one kernel module to fill next to its kernels."""
    return KernelList(BackendId.CUDA, kernel_source=KERNEL_SOURCE)


def digest(source: str) -> str:
    return hashlib.blake2b(source.encode(), digest_size=16).hexdigest()


def blocks(count: int, threads: int = THREADS) -> int:
    return (count + threads - 1) // threads


def row_threads(length: int) -> int:
    """Threads of a block per row: a power of two up to ``ROW_THREADS``, no more than the
    row needs."""
    size = 32
    while size < ROW_THREADS and size < length:
        size *= 2
    return size


def use_groups(length: int) -> bool:
    """A block per row (a tree in shared memory) for rows of 64 elements or more; a thread
    per row otherwise."""
    return length >= 64


class LoopCudaKernel:
    """A LoopKernel as a CUDA kernel: ``kernel(inputs, outputs, layouts, params)``. A row
    kernel has two renderings (a thread or a block per row), chosen per launch by the row's
    length; each is rendered once and compiled once per device."""

    def __init__(self, kernel: LoopKernel) -> None:
        self.loop = kernel
        self.empty = any(size == 0 for size in kernel.rows_shape)
        self.rows = self.length = 1
        for size in kernel.rows_shape:
            self.rows *= size
        for size in kernel.row_shape:
            self.length *= size
        self.serial = not kernel.reduced or has_scan(kernel)
        self.variants: dict[bool, tuple[OpenClProgram, str]] = {}
        self.__qualname__ = self.__name__ = kernel.name

    def variant(self, group: bool) -> tuple[OpenClProgram, str]:
        """(program, source digest) of one rendering, rendered once."""
        found = self.variants.get(group)
        if found is None:
            program = render_cuda(self.loop, group)
            found = self.variants[group] = (program, digest(program.source))
        return found

    def renderings(self) -> list[OpenClProgram]:
        """Every rendering a launch may use (the CI compiles each)."""
        groups = (False,) if self.serial else (False, True)
        return [self.variant(group)[0] for group in groups]

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: object) -> Launcher:
        """Compile (once per device) and bind the buffers and arguments."""
        if self.empty:
            return lambda: None
        storage = outputs[0]
        context = storage.backend.context(storage.device)
        group = not self.serial and use_groups(self.length)
        program, key = self.variant(group)
        function = context.function(program.source, key)
        arguments = program.bind([layout.offset for layout in layouts])
        pointers = [s.buffer.ptr for s in (*inputs, *outputs)]
        if group:
            threads = row_threads(self.length)
            return context.launcher(function, self.rows, threads, threads * program.scratch,
                                    pointers, arguments)
        count = self.rows if self.loop.reduced else program.arguments[0]
        return context.launcher(function, blocks(count), THREADS, 0, pointers, arguments)

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self.prepare(inputs, outputs, layouts, params)()


@lru_cache(maxsize=4096)
def loop_kernel(kernel: LoopKernel) -> LoopCudaKernel:
    """The kernel of ``kernel``, made (and rendered) once per LoopKernel."""
    return LoopCudaKernel(kernel)


class RenderedKernel:
    """A registered CUDA kernel whose launches are LoopKernels: ``build(inputs, outputs,
    layouts, params)`` describes one launch in the kernel IR (None: nothing to do), or
    several as a list of (LoopKernel, inputs, outputs, layouts) (a cat's copies, a pad's fill
    and copy). ``__qualname__`` carries the digest of ``sample``'s rendering, so the
    binding's revision hash changes whenever the renderer's output does."""

    def __init__(self, name: str, build: Callable, sample: LoopKernel) -> None:
        self.build = build
        self.name = name
        source = render_cuda(sample).source
        self.__qualname__ = f"cuda.{name}[{build.__qualname__}]#{digest(source)[:16]}"

    def steps(self, inputs, outputs, layouts, params) -> list[tuple]:
        """The launches of one call: (LoopKernel, inputs, outputs, layouts) each."""
        built = self.build(inputs, outputs, layouts, params)
        if built is None:
            return []
        if isinstance(built, LoopKernel):
            return [(built, inputs, outputs, layouts)]
        return list(built)

    def sources(self, inputs, outputs, layouts, params) -> list[str]:
        """The CUDA C of every rendering one call may launch (no device needed)."""
        return [program.source for loop, *_ in self.steps(inputs, outputs, layouts, params)
                for program in loop_kernel(loop).renderings()]

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: object) -> Launcher:
        launchers = [loop_kernel(loop).prepare(ins, outs, lays, params)
                     for loop, ins, outs, lays in self.steps(inputs, outputs, layouts, params)]
        if len(launchers) == 1:
            return launchers[0]

        def run() -> None:
            for launcher in launchers:
                launcher()

        return run

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self.prepare(inputs, outputs, layouts, params)()

    def __repr__(self) -> str:
        return f"RenderedKernel({self.__qualname__})"


class SourceKernel:
    """A hand-written CUDA C kernel (``fuel_kernel`` taking buffer pointers, then a struct of
    64-bit arguments, as the rendered ones): ``host(kernel, inputs, outputs, layouts,
    params)`` gives (thread count, pointers, arguments) of one launch, or None."""

    def __init__(self, name: str, source: str, host: Callable) -> None:
        self.name = name
        self.source = source
        self.key = digest(source)
        self.host = host
        self.__qualname__ = f"cuda.{name}[{host.__qualname__}]#{self.key[:16]}"

    def prepare(self, inputs, outputs, layouts, params) -> Launcher:
        launch = self.host(self, inputs, outputs, layouts, params)
        if launch is None:
            return lambda: None
        count, pointers, arguments = launch
        storage = outputs[0]
        context = storage.backend.context(storage.device)
        function = context.function(self.source, self.key)
        return context.launcher(function, blocks(count), THREADS, 0, pointers, arguments)

    def sources(self, inputs, outputs, layouts, params) -> list[str]:
        return [self.source]

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self.prepare(inputs, outputs, layouts, params)()

    def __repr__(self) -> str:
        return f"SourceKernel({self.__qualname__})"


GENERATED = KernelCaps(strided_input=True)


def generate_cuda_kernel(kernel: LoopKernel) -> BindingEntry:
    """The CUDA kernel of a fused group's ``kernel``; revision = its source's hash."""
    fused = LoopCudaKernel(kernel)
    program, key = fused.variant(False)
    return BindingEntry(fused, GENERATED, KERNEL_SOURCE, int(key[:16], 16))


def fusion_target(prefers_decomposed: frozenset = frozenset()) -> FusionTarget:
    """What fusion may hand the CUDA renderer: every op and dtype it renders (half types
    included: each value is rounded where it is computed), math functions (CUDA's are
    device builtins), float32/float64 row reductions."""
    return FusionTarget(unavailable_reason=lambda: None,
                        renders=renders,
                        math_pays=lambda: True,
                        reduce_dtypes=frozenset({dt.float32, dt.float64}),
                        prefers_decomposed=frozenset(prefers_decomposed))


__all__ = ["CUDA_DTYPES", "GENERATED", "KERNEL_SOURCE", "LoopCudaKernel", "RenderedKernel",
           "SourceKernel", "fusion_target", "generate_cuda_kernel", "kernel_list"]
