"""QLINEAR_CONV on the CPU: ``qlinear_conv.c`` + ``qlinear_conv_vnni.c`` (AVX512-VNNI u8 x s8
dot products where the machine has them, AVX2 int16 pairs otherwise, both exact in int32;
depthwise on its own path), and NumPy (int64 sums) for 3-d shapes, strided operands or a
machine without a C compiler.

The C kernel splits its work over ``FUEL_THREADS`` threads from ``PARALLEL_WORK`` multiply-adds
(a smaller launch runs on one), on the float convolutions' work pool (conv_common.h's
``run_units`` in conv.c, handed over when the library loads): a helper that has not started
its units leaves them to the caller, so no launch waits for a preempted thread.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fuel.backends.cpu import convolution_c
from fuel.backends.cpu.arrays import output, view
from fuel.backends.cpu.c_library import (
    POOL_SHARE,
    POOL_UNITS,
    address,
    entry_point,
    offered_pool,
)
from fuel.backends.cpu.convolution import pad_spatial, windows
from fuel.backends.cpu.quantized import thread_count
from fuel.compiler.foreign import ForeignCall
from fuel.dispatch.kernel import KernelList, Launcher
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind
from fuel.ir.params import QLinearConvParams

KERNELS = KernelList(BackendId.CPU, "c")
SOURCES = tuple(Path(__file__).with_name(name)
                for name in ("qlinear_conv.c", "qlinear_gemm.c", "qlinear_depthwise.c",
                             "qlinear_conv_vnni.c"))
PARALLEL_WORK = 1 << 20
# A depthwise multiply-add costs about this many of the dense forms' (one vpdpbusd lane per 4
# taps of one position, against 4 input channels of 16 positions): its launches split from a
# sixteenth of the work. Measured, one thread: 960 channels 3x3 at 7x7 (423K multiply-adds)
# 46 us, a dense 1x1 of 7.5M 53 us; two threads on the work pool took the former to ~25 us.
DEPTHWISE_COST = 16


_shared: set[str] = set()
_shared_lock = threading.Lock()


def share_pool(name: str, function, size_count: int) -> None:
    """Hand the float convolutions' work pool (conv.c's) to the quantized library ``name``
    (``function``, whose sizes array has ``size_count`` entries) once: qlinear_units.h."""
    if function is None or name in _shared:
        return
    with _shared_lock:
        if name in _shared:
            return
        if convolution_c.library(convolution_c.GEMM) is not None:  # conv.c offers its pool
            function(offered_pool(), (ctypes.c_int64 * max(size_count, 19))(POOL_SHARE), None)
        _shared.add(name)


def library():
    """The compiled qlinear_conv.c, or None where the machine has no C compiler; handed the
    float convolutions' work pool on first use (``share_pool``)."""
    function = entry_point("qlinear_conv", source)
    share_pool("qlinear_conv", function, 22)
    return function


def source() -> str:
    """The kernel's C source: qlinear_units.h, qlinear_conv.c, qlinear_gemm.c,
    qlinear_depthwise.c, then qlinear_conv_vnni.c (one library)."""
    return "".join(path.read_text() for path in (POOL_UNITS,) + SOURCES)


def reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray, multiplier: np.ndarray,
              params: QLinearConvParams) -> np.ndarray:
    """QLINEAR_CONV in NumPy: int64 sums, then the float32 re-quantization."""
    conv = params.conv
    shifted = x.astype(np.int64) - params.x_zero
    padded = pad_spatial(shifted, conv.pads_begin, conv.pads_end, 0)
    rank = x.ndim - 2
    kernel = w.shape[2:]
    counts = [(padded.shape[2 + i] - ((kernel[i] - 1) * conv.dilations[i] + 1))
              // conv.strides[i] + 1 for i in range(rank)]
    patches = windows(padded, kernel, conv.strides, conv.dilations, counts)
    groups, (n, channels) = conv.groups, x.shape[:2]
    spatial = "".join(chr(ord("p") + i) for i in range(rank))
    window = "".join(chr(ord("p") + rank + i) for i in range(rank))
    grouped = patches.reshape((n, groups, channels // groups) + patches.shape[2:])
    weight = w.astype(np.int64).reshape((groups, w.shape[0] // groups) + w.shape[1:])
    sums = np.einsum(f"ngc{spatial}{window},gmc{window}->ngm{spatial}", grouped, weight)
    sums = sums.reshape((n, w.shape[0]) + tuple(counts))
    channel = (1, -1) + (1,) * rank
    total = (sums + bias.astype(np.int64).reshape(channel)).astype(np.float32)
    value = np.rint(total * multiplier.astype(np.float32).reshape(channel)) + params.y_zero
    low, high = (-128, 127) if params.y_signed else (0, 255)
    return np.clip(value, low, high).astype(np.int8 if params.y_signed else np.uint8)


def _packed(function, row: tuple, pointers: list) -> np.ndarray | None:
    """Constant weights packed once for the channels-last VNNI form (a 64-byte aligned view
    of a kept array), or None where the launch takes another form."""
    count = np.zeros(1, np.int64)
    call = (ctypes.c_void_p * 6)(*pointers, count.ctypes.data)
    function(call, (ctypes.c_int64 * (len(row) + 1))(*row, 2), None)
    if not count[0]:
        return None
    storage = np.zeros(int(count[0]) + 64, np.uint8)
    start = -storage.ctypes.data % 64
    packed = storage[start:start + int(count[0])]
    call[5] = packed.ctypes.data
    function(call, (ctypes.c_int64 * (len(row) + 1))(*row, 3), None)
    return packed


class CQLinearConv:
    """QLINEAR_CONV for (uint8 | int8) x int8 with int32 bias and float32 multipliers."""

    __name__ = __qualname__ = "qlinear_conv_c"

    @property
    def revision_source(self) -> str:
        return source()

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: QLinearConvParams) -> Launcher:
        x_shape, w_shape, out_shape = layouts[0].shape, layouts[1].shape, layouts[-1].shape
        rank = len(x_shape) - 2
        function = library()
        if function is None or rank not in (1, 2) or not all(
                layout.is_contiguous() for layout in layouts):
            return self._numpy(inputs, outputs, layouts, params)
        if layouts[-1].numel == 0:
            return lambda: None
        conv = params.conv
        if rank == 1:
            geometry = (x_shape[0], x_shape[1], 1, x_shape[2], out_shape[1], 1, w_shape[2], 1,
                        out_shape[2], 1, conv.strides[0], 1, conv.dilations[0], 0,
                        conv.pads_begin[0])
        else:
            geometry = (x_shape[0], x_shape[1], x_shape[2], x_shape[3], out_shape[1],
                        w_shape[2], w_shape[3], out_shape[2], out_shape[3], conv.strides[0],
                        conv.strides[1], conv.dilations[0], conv.dilations[1],
                        conv.pads_begin[0], conv.pads_begin[1])
        work = layouts[-1].numel * int(np.prod(w_shape[1:]))
        if conv.groups > 1 and conv.groups == x_shape[1] == out_shape[1]:
            work *= DEPTHWISE_COST  # one tap a byte lane: slower per multiply-add
        threads = thread_count() if work >= PARALLEL_WORK else 1
        row = (threads,) + geometry + (conv.groups, params.x_zero, params.y_zero,
                                       int(inputs[0].dtype is dt.int8), int(params.y_signed))
        pointers = [address(s, layout) for s, layout in zip(list(inputs) + list(outputs),
                                                           layouts)]
        packed = convolution_c.kept(inputs[1], ("qlinear", pointers[1], row),
                                    lambda: _packed(function, row, pointers)) \
            if params.constant_weights else None
        sizes = (ctypes.c_int64 * (len(row) + 1))(*row, 0 if packed is None else 1)
        data = (ctypes.c_void_p * 6)(*pointers, None if packed is None else
                                     packed.ctypes.data)
        data.packed = packed  # held as long as the launcher
        return ForeignCall(function, data, sizes)

    @staticmethod
    def _numpy(inputs, outputs, layouts, params) -> Launcher:
        def launch() -> None:
            arrays = [view(storage, layout) for storage, layout in zip(inputs, layouts)]
            output(outputs[0], layouts[-1])[...] = reference(*arrays, params)

        launch.kernel_source = "numpy"
        return launch

    def __call__(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                 params) -> None:
        self.prepare(inputs, outputs, layouts, params)()


KERNELS.add(OpKind.QLINEAR_CONV,
            [(x, dt.int8, dt.int32, dt.float32, y) for x in (dt.uint8, dt.int8)
             for y in (dt.uint8, dt.int8)], CQLinearConv())
