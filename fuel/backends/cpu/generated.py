"""Generated C kernels as fuel kernels: the CPU backend's binding for fused nodes (the
kernel compiler renders and builds them; this backend binds, launches and profiles them).

The CPU backend registers ``generate_c_kernel`` at ``(OpKind.FUSED, (), cpu)`` and declares
``c_fusion_target`` as its fusion target; the planner calls the generator (``compile_generated``)
with a fused group's LoopKernel and gets a BindingEntry at once, while
the C compiler runs on a compile worker; the kernel waits for its library at its first launch
and runs it through ctypes (which releases the GIL while it runs). So a plan's compiles run in
parallel, and a pipelined realize executes earlier steps meanwhile.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
from collections.abc import Sequence
from concurrent.futures import Future
from functools import partial

from fuel.compiler import toolchain
from fuel.compiler.foreign import ForeignCall
from fuel.compiler.fusion import FusionTarget
from fuel.compiler.kernel_ir import (
    Load,
    LoopKernel,
    collapse,
    row_schedule,
    stride_pattern,
)
from fuel.compiler.render_c import CProgram, render_c, renders
from fuel.compiler.render_c_reduce import PARALLEL_ROWS, render_c_reduce
from fuel.dispatch import op_profile
from fuel.dispatch.kernel import BindingEntry, KernelCaps, Launcher, Variant
from fuel.ir.layout import Layout, contiguous_strides

GENERATED = KernelCaps(strided_input=True)
KERNEL_SOURCE = "c"
# A launch with at least this many elements runs its outer loop on OpenMP threads (when the
# toolchain enabled OpenMP; see toolchain.detect). The judge's timings on the 2-core Sapphire
# Rapids Xeon: (x + b) * 0.5 over 37 K elements 6.0 us parallel against 7.5 serial (inside the
# margin), 74 K 8.9 against 12.7, 147 K 13.9 against 23.4; a GELU (erf) already from 18 K,
# 15.2 against 25.3. 2^18 was a guess.
PARALLEL_THRESHOLD = 1 << 16
# Row kernels smaller than this run serially without a contest (the judge times none).
SMALLEST_CONTEST = 1 << 14


class GeneratedKernel:
    """A LoopKernel compiled to C: ``kernel(inputs, outputs, layouts, params)`` like any other."""

    def __init__(self, kernel: LoopKernel, program: CProgram, pending: Future | None,
                 extra_flags: tuple[str, ...] = ()) -> None:
        self.loop = kernel
        self.extra_flags = extra_flags  # beyond the toolchain's (OpenMP for a row kernel)
        self.program = program
        self.pending = pending  # the build's future; None: build again at the next launch
        self.built: toolchain.BuiltKernel | None = None
        self.function = None
        self.sizes = (ctypes.c_int64 * len(program.sizes))(*program.sizes)
        self.strides = (ctypes.c_int64 * max(1, len(program.strides)))(*program.strides)
        self.empty = any(size == 0 for size in kernel.shape)
        self.__qualname__ = self.__name__ = kernel.name
        self.own_patterns: list[str] | None = None
        self.own_rows: tuple | None = None  # a row kernel's rendered schedule (_rows_for_shape)
        # A kernel rendered for OpenMP holds its threshold in a size argument (the judge's
        # serial and parallel variants set it).
        self.threshold = program.threshold
        self.competes = program.threshold is not None  # the judge times its variants

    def variants(self, layouts: Sequence[Layout], params: object, device
                 ) -> tuple[Variant, ...]:
        """The kernel serial or split over OpenMP threads (the judge's candidates, the rule
        first: a row kernel's rows parallel from PARALLEL_ROWS elements, an elementwise
        kernel's elements from PARALLEL_THRESHOLD); none for a small launch or a kernel built
        without OpenMP."""
        if self.threshold is None:
            return ()
        elements = 1
        for size in self.loop.shape:
            elements *= size
        if elements < SMALLEST_CONTEST:
            return ()
        kind, rule = ("rows", PARALLEL_ROWS) if self.loop.reduced else \
            ("elements", PARALLEL_THRESHOLD)
        serial = Variant(f"{kind}-serial", partial(self._prepare_with, 1 << 62))
        threads = Variant(f"{kind}-parallel", partial(self._prepare_with, 0))
        return (threads, serial) if elements >= rule else (serial, threads)

    def _prepare_with(self, threshold: int, inputs: Sequence, outputs: Sequence,
                      layouts: Sequence[Layout], params: object) -> Launcher:
        launcher = self.prepare(inputs, outputs, layouts, params)
        if isinstance(launcher, ForeignCall):
            sizes = (ctypes.c_int64 * len(self.sizes))(*self.sizes)
            sizes[self.threshold] = threshold
            launcher.sizes = sizes
        return launcher

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: object) -> Launcher:
        """Bind the data pointers once; the launcher is one foreign call."""
        if self.empty:
            return lambda: None
        if self.function is None:
            self._wait_for_library()
        pointers = [storage.host_address() + layout.offset * storage.buffer.itemsize
                    for storage, layout in zip(itertools.chain(inputs, outputs), layouts)]
        data = (ctypes.c_void_p * len(pointers))(*pointers)
        return ForeignCall(self.function, data, self.sizes, self.strides, rebindable=True)

    def for_shape(self, shape: tuple[int, ...], load_strides: list[tuple[int, ...]]
                  ) -> GeneratedKernel | None:
        """This kernel's compiled source serving another loop ``shape`` (loads walking
        ``load_strides``): sizes and strides are launch arguments, so a new shape with the
        same collapsed depth and innermost patterns needs no rendering and no build. None
        when the collapsed loop differs (a row kernel: its row schedule's depths or row
        patterns, or a store with strides of its own)."""
        loop = self.loop
        if len(load_strides) != len(loop.loads):
            return None
        if loop.reduced:
            return self._rows_for_shape(shape, load_strides)
        dense = contiguous_strides(shape)
        sizes, strides = collapse(shape, list(load_strides) + [dense] * len(loop.stores))
        own = self.program
        if len(sizes) != (len(own.sizes) if own.threshold is None else own.threshold):
            return None
        if own.threshold is not None:
            sizes = (*sizes, *own.sizes[own.threshold:])
        loads = strides[:len(loop.loads)]
        if [stride_pattern(s[-1:]) for s in loads] != self.patterns():
            return None
        flat = tuple(s for load in loads for s in load)
        return self._twin(shape, load_strides, sizes, flat)

    def _rows_for_shape(self, shape: tuple[int, ...], load_strides: list[tuple[int, ...]]
                        ) -> GeneratedKernel | None:
        """``for_shape`` of a row kernel: the source follows the row schedule's outer and
        row depths and its row patterns (render_c_reduce), so a shape with the same ones runs
        the same library with its sizes and strides."""
        loop = self.loop
        row = len(shape) - loop.reduced
        if any(store.strides is not None for store in loop.stores) or \
                1 in shape[row:] or 1 in loop.shape[len(loop.shape) - loop.reduced:]:
            return None  # a row of 1 stores as elements
        own = self.own_rows
        if own is None:  # what the source was rendered for: computed once per library
            schedule = row_schedule(loop.shape, loop.reduced,
                                    [load.strides for load in loop.loads])
            own = self.own_rows = (len(schedule.outer_sizes), len(schedule.row_sizes),
                                   schedule.patterns)
        new = row_schedule(shape, loop.reduced, [tuple(s) for s in load_strides])
        if (len(new.outer_sizes), len(new.row_sizes), new.patterns) != own:
            return None
        tail = self.program.sizes[self.threshold:] if self.threshold is not None else ()
        flat = tuple(s for outer, row in zip(new.outer_strides, new.row_strides)
                     for s in (*outer, *row))
        return self._twin(shape, load_strides, (*new.outer_sizes, *new.row_sizes, *tail), flat)

    def _twin(self, shape: tuple[int, ...], load_strides: list, sizes: tuple[int, ...],
              flat: tuple[int, ...]) -> GeneratedKernel:
        """This kernel's library and source launched with other sizes and strides."""
        loop, own = self.loop, self.program
        twin = object.__new__(GeneratedKernel)
        # Made directly (a dataclass ``replace`` per load costs more than the rest of a
        # twin; a new shape makes one twin per fused group).
        twin.loop = LoopKernel(loop.name, shape, tuple([
            Load(load.dtype, tuple(strides_), load.offset) for load, strides_ in
            zip(loop.loads, load_strides)]), loop.values, loop.stores, loop.nodes, loop.reduced)
        twin.program = CProgram(own.source, sizes, flat, own.threshold)
        twin.pending, twin.built, twin.function = self.pending, self.built, self.function
        twin.extra_flags, twin.threshold, twin.competes = (self.extra_flags, self.threshold,
                                                          self.competes)
        twin.sizes = (ctypes.c_int64 * len(sizes))(*sizes)
        twin.strides = (ctypes.c_int64 * max(1, len(flat)))(*flat)
        twin.empty = any(size == 0 for size in shape)
        twin.__qualname__ = twin.__name__ = loop.name
        twin.own_patterns, twin.own_rows = self.own_patterns, self.own_rows
        return twin

    def patterns(self) -> list[str]:
        """The innermost stride pattern of each load, as the source was rendered for."""
        if self.own_patterns is None:
            count = len(self.loop.loads)
            program = self.program
            depth = len(program.sizes) if program.threshold is None else program.threshold
            flat = self.program.strides
            self.own_patterns = [stride_pattern(flat[i * depth + depth - 1:i * depth + depth])
                                 for i in range(count)]
        return self.own_patterns

    def _wait_for_library(self) -> None:
        """Take the finished build (a KernelError naming the source and the compiler's message
        when it failed; the next launch then builds again)."""
        if self.pending is None:
            self.pending = toolchain.start_build(self.program.source, self.loop.name,
                                                 self.extra_flags)
        try:
            built = self.pending.result()
        except BaseException:
            self.pending = None
            raise
        report_build(built)
        self.built, self.function = built, built.function

    def __call__(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                 params: object) -> None:
        self.prepare(inputs, outputs, layouts, params)()


def report_build(built: toolchain.BuiltKernel) -> None:
    """Put a build's compiler run and load into the profile's phases (``compile.c``,
    ``compile.load``), once, when a profile is on."""
    spans = toolchain.take_spans(built)
    if op_profile.enabled():
        for name, start, seconds in spans:
            op_profile.record_phase(name, seconds, start)


def generate_c_kernel(kernel: LoopKernel) -> BindingEntry:
    """Render, compile (or fetch from the caches) and load ``kernel``; the entry's revision
    hash is the generated source's."""
    found = toolchain.detect()
    usable = not isinstance(found, str)
    vector_math = usable and found.vector_math
    # Rows and elements may run on OpenMP threads: the judge times serial and parallel per
    # shape bucket (the default rule: parallel from PARALLEL_ROWS / PARALLEL_THRESHOLD
    # elements). The OpenMP team is the one the float32 matmul and the quantized kernels use.
    extra = toolchain.openmp_flags() if usable else ()  # sets the bounded idle spin
    parallel = bool(extra) or (usable and found.openmp)
    if kernel.reduced:
        program = render_c_reduce(kernel, vector_math=vector_math, parallel=parallel)
    else:
        program = render_c(kernel, PARALLEL_THRESHOLD if parallel else None,
                           vector_math=vector_math)
    pending = toolchain.start_build(program.source, kernel.name, extra)
    revision = int.from_bytes(hashlib.blake2b(program.source.encode(), digest_size=8).digest(),
                              "little")
    return BindingEntry(GeneratedKernel(kernel, program, pending, extra), GENERATED,
                        KERNEL_SOURCE, revision)


def _vector_math() -> bool:
    found = toolchain.detect()
    return not isinstance(found, str) and found.vector_math


def c_fusion_target(prefers_decomposed: frozenset = frozenset()) -> FusionTarget:
    """The C renderer as a backend's fusion target: it fuses while a C compiler works
    (asked at each plan, never at import); math functions pay where libmvec links; row
    reductions over float32/float64. ``prefers_decomposed``: the backend's measured set."""
    return FusionTarget(lambda: toolchain.unavailable_reason(), renders, _vector_math,
                        prefers_decomposed=frozenset(prefers_decomposed))
