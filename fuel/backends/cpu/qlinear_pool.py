"""MAX_POOL over 8-bit activations on the CPU (``qlinear_pool.c``): a QOperator model's
MaxPool, 1-d and 2-d windows over contiguous operands, threaded over planes; other shapes and
layouts (and a machine without a C compiler) take pooling.py's NumPy kernel."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

from fuel.backends.cpu import pooling, qlinear_conv
from fuel.backends.cpu.c_library import POOL_UNITS, address, entry_point
from fuel.backends.cpu.quantized import thread_count
from fuel.compiler.foreign import ForeignCall
from fuel.dispatch.kernel import KernelList, Launcher
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

KERNELS = KernelList(BackendId.CPU, "c")
SOURCE = Path(__file__).with_name("qlinear_pool.c")
PARALLEL_WORK = 1 << 18  # window reads from which the planes are split over threads


def library():
    """The compiled qlinear_pool.c, or None where the machine has no C compiler."""
    function = entry_point("qlinear_pool", source)
    qlinear_conv.share_pool("qlinear_pool", function, 15)
    return function


def source() -> str:
    """The kernel's C source: qlinear_units.h (the shared work pool), then qlinear_pool.c."""
    return POOL_UNITS.read_text() + SOURCE.read_text()


def _planar(values: Sequence[int], fill: int) -> tuple[int, int]:
    """A 1-d window's values as a 2-d one's of height 1 (``fill`` for the height)."""
    values = tuple(values)
    return (fill,) + values if len(values) == 1 else values


class CMaxPool8:
    """MAX_POOL for uint8 / int8."""

    __name__ = __qualname__ = "max_pool_8bit_c"

    @property
    def revision_source(self) -> str:
        return source()

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params) -> Launcher:
        x_shape, out_shape = tuple(layouts[0].shape), tuple(layouts[-1].shape)
        rank = len(params.kernel)
        function = library()
        if function is None or rank not in (1, 2) or len(x_shape) != rank + 2 or not all(
                layout.is_contiguous() for layout in layouts):
            def launch() -> None:
                pooling.max_pool(inputs, outputs, layouts, params)

            launch.kernel_source = "numpy"
            return launch
        if layouts[-1].numel == 0:
            return lambda: None
        h, w = _planar(x_shape[2:], 1)
        oh, ow = _planar(out_shape[2:], 1)
        kh, kw = _planar(params.kernel, 1)
        sh, sw = _planar(params.strides, 1)
        dh, dw = _planar(params.dilations, 1)
        pt, pl = _planar(params.pads_begin, 0)
        work = layouts[-1].numel * kh * kw
        threads = thread_count() if work >= PARALLEL_WORK else 1
        row = (threads, x_shape[0] * x_shape[1], h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl,
               int(inputs[0].dtype is dt.int8))
        sizes = (ctypes.c_int64 * len(row))(*row)
        data = (ctypes.c_void_p * 2)(*(address(s, layout) for s, layout in
                                       zip(list(inputs) + list(outputs), layouts)))
        return ForeignCall(function, data, sizes)

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self.prepare(inputs, outputs, layouts, params)()


KERNELS.add(OpKind.MAX_POOL, [(dt.uint8, dt.uint8), (dt.int8, dt.int8)], CMaxPool8())
