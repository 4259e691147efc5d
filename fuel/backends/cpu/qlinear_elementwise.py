"""QLINEAR_LOOKUP, QLINEAR_BINARY, QLINEAR_QUANTIZE and QLINEAR_DEQUANTIZE on the CPU:
``qlinear_elementwise.c`` (one pass each; the table lookup with AVX512-VBMI byte permutes
where the machine has them), and NumPy for strided operands, a broadcast the C loop does not
cover, or a machine without a C compiler. The NumPy
forms compute the same float32 operations (the add's multiply-adds in float64, rounded once to
float32, as a fused multiply-add rounds)."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fuel.backends.cpu import qlinear_conv
from fuel.backends.cpu.arrays import output, view
from fuel.backends.cpu.c_library import POOL_UNITS, address, entry_point
from fuel.backends.cpu.quantized import thread_count
from fuel.compiler.foreign import ForeignCall
from fuel.dispatch.kernel import KernelList, Launcher
from fuel.graph.decompositions.qlinear import add_ratios
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind
from fuel.ir.params import QLinearBinaryParams, QuantizeParams

KERNELS = KernelList(BackendId.CPU, "c")
SOURCE = Path(__file__).with_name("qlinear_elementwise.c")
PARALLEL_COUNT = 1 << 17  # elements from which a pass runs on FUEL_THREADS threads


def library():
    """The compiled qlinear_elementwise.c, or None where the machine has no C compiler."""
    function = entry_point("qlinear_elementwise", source)
    qlinear_conv.share_pool("qlinear_elementwise", function, 15)
    return function


def source() -> str:
    """The kernel's C source: qlinear_units.h (the shared work pool), then qlinear_elementwise.c."""
    return POOL_UNITS.read_text() + SOURCE.read_text()


def _threads(count: int) -> int:
    """Threads for a pass over ``count`` elements: the team from PARALLEL_COUNT, else one."""
    return thread_count() if count >= PARALLEL_COUNT else 1


def _bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def lookup_reference(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """table[x's byte] in NumPy."""
    return table[x.view(np.uint8)]


def binary_constants(params: QLinearBinaryParams) -> tuple[float, float, float]:
    """The kernel's float32 constants f0, f1, f2 (see qlinear_elementwise.c)."""
    if params.multiply:
        ratio = np.float32(np.float32(params.a_scale) * np.float32(params.b_scale)) / \
            np.float32(params.y_scale)
        return float(ratio), 0.0, 0.0
    return add_ratios(params)


def binary_reference(a: np.ndarray, b: np.ndarray, params: QLinearBinaryParams,
                     dtype: np.dtype) -> np.ndarray:
    """QLINEAR_BINARY in NumPy, with the C kernel's float32 operations."""
    f0, f1, f2 = (np.float32(v) for v in binary_constants(params))
    if params.multiply:
        product = (a.astype(np.int32) - params.a_zero) * (b.astype(np.int32) - params.b_zero)
        value = product.astype(np.float32) * f0 + np.float32(params.y_zero)
    else:
        inner = (b.astype(np.float64) * np.float64(f1) + np.float64(f2)).astype(np.float32)
        value = (a.astype(np.float64) * np.float64(f0) + inner.astype(np.float64)).astype(
            np.float32)
    info = np.iinfo(dtype)
    return np.clip(np.rint(value), info.min, info.max).astype(dtype)


def _split(shapes: Sequence[tuple[int, ...]], out: tuple[int, ...]):
    """(outer, inner, steps) with out as (outer, inner) and each operand's (outer step, inner
    step) (a full operand (inner, 1), one broadcast over the inner dims (1, 0), over the outer
    dims (0, 1), a scalar (0, 0)), or None when no split serves both operands."""
    rank = len(out)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    for k in range(rank + 1):
        outer, inner = int(np.prod(out[:k])), int(np.prod(out[k:]))
        steps = []
        for shape in padded:
            whole_outer = shape[:k] == out[:k]
            whole_inner = shape[k:] == out[k:]
            ones_outer = all(s == 1 for s in shape[:k])
            ones_inner = all(s == 1 for s in shape[k:])
            if whole_outer and whole_inner:
                steps.append((inner, 1))
            elif whole_outer and ones_inner:
                steps.append((1, 0))
            elif ones_outer and whole_inner:
                steps.append((0, 1))
            elif ones_outer and ones_inner:
                steps.append((0, 0))
            else:
                break
        else:
            return outer, inner, steps
    return None


class CQLinearLookup:
    """QLINEAR_LOOKUP: out = table[x's byte]."""

    __name__ = __qualname__ = "qlinear_lookup_c"

    @property
    def revision_source(self) -> str:
        return source()

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params) -> Launcher:
        function = library()
        if function is None or not all(layout.is_contiguous() for layout in layouts):
            def launch() -> None:
                x, table = (view(s, layout) for s, layout in zip(inputs, layouts))
                output(outputs[0], layouts[-1])[...] = lookup_reference(x, table)

            launch.kernel_source = "numpy"
            return launch
        count = layouts[-1].numel
        sizes = (ctypes.c_int64 * 3)(0, count, _threads(count))
        data = (ctypes.c_void_p * 3)(*(address(s, layout) for s, layout in
                                       zip(list(inputs) + list(outputs), layouts)))
        return ForeignCall(function, data, sizes)

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self.prepare(inputs, outputs, layouts, params)()


class CQLinearBinary:
    """QLINEAR_BINARY: onnxruntime's QLinearAdd / QLinearMul of two broadcast operands."""

    __name__ = __qualname__ = "qlinear_binary_c"

    @property
    def revision_source(self) -> str:
        return source()

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: QLinearBinaryParams) -> Launcher:
        function = library()
        split = _split([layout.shape for layout in layouts[:2]], tuple(layouts[-1].shape))
        if function is None or split is None or not all(
                layout.is_contiguous() for layout in layouts):
            dtype = inputs[0].dtype.numpy

            def launch() -> None:
                a, b = (view(s, layout) for s, layout in zip(inputs, layouts))
                output(outputs[0], layouts[-1])[...] = binary_reference(a, b, params, dtype)

            launch.kernel_source = "numpy"
            return launch
        if layouts[-1].numel == 0:
            return lambda: None
        outer, inner, ((a_outer, a_inner), (b_outer, b_inner)) = split
        f0, f1, f2 = binary_constants(params)
        pointers = [address(s, layout) for s, layout in zip(list(inputs) + list(outputs),
                                                            layouts)]
        zeros = (params.a_zero, params.b_zero)
        if a_inner == 0 and b_inner == 1:  # the C loop's fast rows read a whole, b broadcast
            pointers[:2], zeros = pointers[1::-1], zeros[::-1]
            (a_outer, a_inner), (b_outer, b_inner) = (b_outer, b_inner), (a_outer, a_inner)
            if not params.multiply:
                f0, f1 = f1, f0
        row = (1 + params.multiply, outer, inner, a_outer, a_inner, b_outer, b_inner,
               int(inputs[0].dtype is dt.int8), *zeros, params.y_zero,
               _bits(f0), _bits(f1), _bits(f2), _threads(outer * inner))
        sizes = (ctypes.c_int64 * len(row))(*row)
        data = (ctypes.c_void_p * 3)(*pointers)
        return ForeignCall(function, data, sizes)

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self.prepare(inputs, outputs, layouts, params)()


KERNELS.add(OpKind.QLINEAR_LOOKUP, [(x, t, t) for x in (dt.uint8, dt.int8)
                                    for t in (dt.uint8, dt.int8)], CQLinearLookup())
KERNELS.add(OpKind.QLINEAR_BINARY, [(d, d, d) for d in (dt.uint8, dt.int8)], CQLinearBinary())


def quantize_reference(x: np.ndarray, params: QuantizeParams, dtype) -> np.ndarray:
    """QLINEAR_QUANTIZE in NumPy: the same float32 steps."""
    info = np.iinfo(dtype)
    value = np.rint(x.astype(np.float32) / np.float32(params.scale)) + np.float32(params.zero)
    return np.clip(value, info.min, info.max).astype(dtype)


def dequantize_reference(x: np.ndarray, params: QuantizeParams) -> np.ndarray:
    """QLINEAR_DEQUANTIZE in NumPy: the same float32 steps."""
    return (x.astype(np.int32) - np.int32(params.zero)).astype(np.float32) * np.float32(
        params.scale)


class CQuantize:
    """QLINEAR_QUANTIZE (``dequantize`` False) or QLINEAR_DEQUANTIZE: one pass, threaded from
    PARALLEL_COUNT elements."""

    def __init__(self, dequantize: bool) -> None:
        self.dequantize = dequantize
        self.__name__ = self.__qualname__ = ("qlinear_dequantize_c" if dequantize
                                             else "qlinear_quantize_c")

    @property
    def revision_source(self) -> str:
        return source()

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: QuantizeParams) -> Launcher:
        function = library()
        if function is None or not all(layout.is_contiguous() for layout in layouts):
            target = outputs[0].dtype.numpy

            def launch() -> None:
                x = view(inputs[0], layouts[0])
                output(outputs[0], layouts[-1])[...] = (
                    dequantize_reference(x, params) if self.dequantize
                    else quantize_reference(x, params, target))

            launch.kernel_source = "numpy"
            return launch
        count = layouts[-1].numel
        if count == 0:
            return lambda: None
        eight_bit = inputs[0] if self.dequantize else outputs[0]
        row = (4 if self.dequantize else 3, count, _threads(count),
               int(eight_bit.dtype is dt.int8), params.zero, _bits(params.scale))
        sizes = (ctypes.c_int64 * len(row))(*row)
        data = (ctypes.c_void_p * 2)(*(address(s, layout) for s, layout in
                                       zip(list(inputs) + list(outputs), layouts)))
        return ForeignCall(function, data, sizes)

    def __call__(self, inputs, outputs, layouts, params) -> None:
        self.prepare(inputs, outputs, layouts, params)()


KERNELS.add(OpKind.QLINEAR_QUANTIZE, [(dt.float32, y) for y in (dt.uint8, dt.int8)],
            CQuantize(False))
KERNELS.add(OpKind.QLINEAR_DEQUANTIZE, [(x, dt.float32) for x in (dt.uint8, dt.int8)],
            CQuantize(True))
