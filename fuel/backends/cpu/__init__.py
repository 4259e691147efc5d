"""The NumPy CPU backend: the embedded default and the reference for every other backend."""

from __future__ import annotations

import platform

import numpy as np

from fuel.backends.base import Backend, LaunchBatcher
from fuel.backends.cpu import (
    convolution,
    convolution_blocked,
    convolution_c,
    elementwise,
    indexing,
    matmul,
    ml,
    paged_attention,
    pooling,
    qlinear_conv,
    qlinear_elementwise,
    qlinear_pool,
    quantized,
    quantized_int8,
    sampling,
    scatter,
    sorting,
    strings,
    structured,
)
from fuel.backends.cpu.arrays import view
from fuel.backends.cpu.low_precision import pack, unpack
from fuel.backends.cpu.sequences import SequenceBatcher
from fuel.dispatch.kernel import BackendRecord, KernelBindingTable
from fuel.ir.device import CPU, BackendId, Device
from fuel.ir.dtype import DType, string
from fuel.ir.errors import DeviceError
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind
from fuel.memory import Storage
from fuel.memory.storage import check_writable

ALIGNMENT = 64  # bytes: a cache line, one AVX-512 vector


def _aligned_empty(size: int, dtype: np.dtype) -> np.ndarray:
    """An uninitialized 1-d array whose data starts on a cache line. NumPy's own buffers start
    16 bytes past one, so every 16-float vector a kernel loads or stores spans two lines, and
    threads splitting a plane at whole vectors write the same line (measured, one thread:
    16->96 1x1 at 112x112 473 -> 445 us)."""
    dtype = np.dtype(dtype)
    if dtype.hasobject or dtype.kind in "OSTU" or dtype.itemsize == 0:
        return np.empty(size, dtype=dtype)  # strings and objects: NumPy's own buffer
    nbytes = size * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    # through a memoryview, so the array owns its views: a view's ``base`` is this array
    # (the buffer pool counts references to it), not ``raw``
    return np.frombuffer(memoryview(raw)[offset:offset + nbytes], dtype=dtype)


class CpuBackend(Backend):
    """Buffers are flat NumPy arrays; every kernel finishes before it returns (Ready)."""

    backend_id = BackendId.CPU
    kernel_source = "numpy"
    holds_strings = True

    def devices(self) -> list[Device]:
        return [CPU]

    def describe_device(self, device: Device) -> str:
        return f"NumPy {np.__version__} on {platform.machine() or 'host'}"

    def allocate(self, device: Device, dtype: DType, size: int) -> Storage:
        try:
            buffer = (np.zeros(dtype.storage_bytes(size), np.uint8) if dtype.is_packed
                      else _aligned_empty(size, dtype.numpy))
        except (MemoryError, ValueError) as error:
            raise DeviceError(
                f"cannot allocate {size} x {dtype.name} ({size * dtype.itemsize} bytes) on cpu: "
                f"{error}"
            ) from None
        return Storage(buffer, dtype, size, CPU, self)

    def upload(self, device: Device, array: np.ndarray) -> Storage:
        from fuel.ir.dtype import from_numpy

        flat = np.ascontiguousarray(array).reshape(-1)
        dtype = from_numpy(flat.dtype)
        if dtype is string and flat.dtype != dtype.numpy:  # str_ / StringDType: as objects
            flat = flat.astype(object)
        if dtype.is_packed:  # sub-byte elements stay packed in memory
            return Storage(pack(flat, dtype), dtype, flat.size, CPU, self)
        return Storage(flat, dtype, flat.size, CPU, self)

    def write_from_host(self, storage: Storage, array: np.ndarray) -> None:
        check_writable(storage, f"writing {array.size} values from the host")
        if storage.dtype.is_packed:
            current = unpack(storage.buffer, storage.size, storage.dtype)
            current[: array.size] = array.reshape(-1)
            storage.buffer[...] = pack(current, storage.dtype)
            return
        storage.buffer[: array.size] = array.reshape(-1)

    def download(self, storage: Storage, layout: Layout) -> np.ndarray:
        return view(storage, layout)

    def record_completion(self, storage: Storage) -> None:
        return None

    def synchronize(self, device: Device) -> None:
        return None

    def register(self, table: KernelBindingTable) -> None:
        """Add each kernel module's bindings, the generator of fused kernels and the record
        the resolution pass reads: the C renderer as fusion target, with the composites
        that run better decomposed and fused (``PREFERS_DECOMPOSED``)."""
        for module in KERNEL_MODULES:
            module.KERNELS.register_into(table)
        from fuel.backends.cpu.generated import (
            GENERATED,
            KERNEL_SOURCE,
            c_fusion_target,
            generate_c_kernel,
        )

        # Fused nodes: a generator that compiles each node's LoopKernel (fuel.compiler).
        table.register(OpKind.FUSED, (), BackendId.CPU, generate_c_kernel, GENERATED,
                       KERNEL_SOURCE)
        table.declare_backend(BackendId.CPU,
                              BackendRecord(fusion=c_fusion_target(PREFERS_DECOMPOSED)))

    def launch_batcher(self) -> LaunchBatcher:
        """The C launch sequences: runs of consecutive C kernel calls as one call of a C loop."""
        return SequenceBatcher()


# The composites whose hand-written kernel loses to the fused rendering of their decomposition
# (bench/fusion.py): while the C renderer fuses with vector math (libmvec), such a node
# (float32/float64; a row op over the last dim only) is decomposed so it fuses with its
# neighbours. (4096, 4096) float32 with vector math: softmax 34 ms fused vs 70 hand-written
# (NumPy), layer_norm 21 vs 122, rms_norm 26 vs 74, gelu 25 vs 124.
PREFERS_DECOMPOSED = frozenset({
    OpKind.SOFTMAX, OpKind.LOG_SOFTMAX, OpKind.LAYER_NORM, OpKind.RMS_NORM, OpKind.GELU,
    OpKind.GELU_TANH, OpKind.SILU, OpKind.SIGMOID})


# Every module that owns a list of kernel bindings (``KERNELS``), in registration order.
KERNEL_MODULES = (elementwise, indexing, matmul, structured, convolution_c, convolution_blocked,
                  convolution,
                  qlinear_pool, pooling, scatter, sorting, sampling, strings, ml, quantized,
                  quantized_int8, paged_attention, qlinear_conv, qlinear_elementwise)


BACKEND = CpuBackend()
