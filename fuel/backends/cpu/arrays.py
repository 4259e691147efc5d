"""NumPy views of Storages through Layouts, and the kernel-list factory of the CPU modules."""

from __future__ import annotations

import functools

import numpy as np

from fuel.backends.cpu.low_precision import unpack
from fuel.dispatch.kernel import KernelCaps, KernelList
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import combos  # noqa: F401 - the CPU kernels' shorthand

STRIDED = KernelCaps(strided_input=True)
HALF_NUMPY = (dt.float16.numpy, dt.bfloat16.numpy)
FLOAT32 = np.dtype(np.float32)


def kernel_list() -> KernelList:
    """An empty list of CPU bindings, for one kernel module to fill next to its kernels."""
    return KernelList(BackendId.CPU, kernel_source="numpy")


def view(storage, layout: Layout) -> np.ndarray:
    """The NumPy array ``layout`` describes over ``storage`` (no copy, except for packed
    sub-byte storage: an unpacked copy to read)."""
    buffer = storage.buffer
    if storage.dtype.is_packed and buffer.dtype == np.uint8:
        buffer = unpack(buffer, storage.size, storage.dtype)
    shape = layout.shape
    if layout.offset == 0 and storage.size == layout.numel and layout.is_contiguous():
        return buffer.reshape(shape)
    itemsize = buffer.itemsize
    return np.ndarray(
        shape, buffer.dtype, buffer=buffer, offset=layout.offset * itemsize,
        strides=tuple(s * itemsize for s in layout.strides),
    )


def operand(storage, layout: Layout) -> np.ndarray:
    """Like ``view``, but a stride-0 constant may come back 0-d: for kernels that broadcast."""
    if layout.offset < storage.size and not any(layout.strides) and not storage.dtype.is_packed:
        return storage.buffer[layout.offset:layout.offset + 1].reshape(())
    return view(storage, layout)


def output(storage, layout: Layout) -> np.ndarray:
    """The (contiguous, freshly allocated) output array of a kernel (packed outputs go
    through ``low_precision.unpacked_output``)."""
    return storage.buffer.reshape(layout.shape) if storage.size == layout.numel else view(
        storage, layout)


def compute(array: np.ndarray) -> np.ndarray:
    """Half-precision inputs are computed in float32 and rounded once on store."""
    return array.astype(FLOAT32) if array.dtype in HALF_NUMPY else array


def array_kernel(function):
    """A kernel from ``function(*input_arrays, out, params)`` over NumPy views. Its ``prepare``
    builds the views once and returns the bound call, which fuel.jit replays."""

    def prepare(inputs, outputs, layouts, params):
        arrays = [view(s, layout) for s, layout in zip(inputs, layouts)]
        return functools.partial(function, *arrays, output(outputs[0], layouts[-1]), params)

    def kernel(inputs, outputs, layouts, params):
        prepare(inputs, outputs, layouts, params)()

    kernel.prepare = prepare
    kernel.__qualname__ = kernel.__name__ = function.__name__
    kernel.__module__ = function.__module__
    return kernel
